"""The engine's seams: what is called on the layers above it, typed.

The engine imports nothing above ``sim``, yet its world carries the run's
system under test (``scenarios.system.System``), its one fault plan
(``faults.plan.FaultPlan``) and the instants a boundary delay lands calls on
(``faults.timing.Boundaries``). The world's slots are typed by the protocols
here, and each protocol declares exactly what the runner, the workloads
(chaos and application), the checks and the fault layer call through that
slot: a call through a slot that its protocol does not declare is a failure
of ``tests/test_seams.py``, which finds the calls by reading the code.

What the engine cannot know the type of (a store, a node's ports: the
model's and the scenarios' types) is ``Any`` in a member's type, never a
slot's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from sim.node import Node
    from sim.scenario import ScenarioOptions
    from sim.world import FaultEvent, World


class AuditViewSeam(Protocol):
    """The system's read-only view of what its stores hold
    (``scenarios.system.AuditView`` declares its reads). The engine calls
    nothing on it: it hands it to every checker and to every workload's
    ``check``."""


class SystemSeam(Protocol):
    """The system under test, as the runner, the workloads and the checks call it."""

    # The runner's phases.
    def open(self, world: World, opts: ScenarioOptions, choices: Any) -> None: ...

    def audit_view(self) -> AuditViewSeam: ...

    def metrics(self) -> dict[str, Any]: ...

    def close(self) -> None: ...

    # A workload's requirements of the durable stores (``Workload.requires``),
    # checked once the stores are open, before anything runs: one the stores
    # do not declare is a ``SetupError`` naming the workload, the store and
    # what it lacks.
    def require(self, workload: str, requirements: tuple[str, ...]) -> None: ...

    # A process's ports: through the fault layer (``faults=True``), or the
    # stores' own (a chaos workload's operator edit, an adversary's forger).
    def ports_for(self, node: Node, *, faults: bool = True) -> Any: ...

    def notifier_port(self, node: Node, *, transit_ms: Any = None) -> Any: ...

    def unwrapped_store(self, node: Node, port: str) -> Any: ...

    # How long a process crashed at a port stays down (drawn per crash).
    def restart_delay_ms(self) -> int: ...

    # A schedule's runs retention holds for a pin (a workload's metrics).
    def held_runs(self, schedule_id: str) -> tuple[str, ...]: ...

    # The run's SQLite file (None in memory) and its connections' caches:
    # what a disk fault damages and makes every reader read again (``faults.disk``).
    def run_database(self) -> Any: ...

    def flush_page_caches(self) -> None: ...

    # What every port call counts (``faults.ports.PortStats``).
    port_stats: Any

    # Whether the system keeps a keyring (the data keys of sealed fields): a
    # workload that seals refuses a system without one.
    with_keyring: bool

    # The stores, by port name: read directly (a workload's end counts, a
    # call the fault layer does not wrap).
    ds: Any
    ledger: Any
    log: Any
    schedules: Any
    content: Any
    checkpoints: Any
    pins: Any
    findings: Any
    kernel: Any


class TimedSource(Protocol):
    """A chaos workload's side of ``PlanSeam.drive``."""

    kind: str
    name: str  # the instance's name: its harness task and its stream
    every_ms: tuple[int, int]

    def stream(self, world: World) -> Any:
        """The instance's own stream (its gaps and its choices)."""

    def propose(self, world: World, hit: int) -> FaultEvent | None:
        """The fault to fire now (None: nothing to hit at this moment)."""

    def apply(self, world: World, event: FaultEvent) -> bool:
        """Fire ``event`` (generated or scripted); False if it found nothing to hit."""


class PlanSeam(Protocol):
    """The run's one fault plan, probabilistic or scripted, as the fault
    layer, the chaos workloads and the runner call it."""

    # The kinds this plan can fire (enabled and given a rate, or driven).
    armed: list[str]

    def draw(self, site: str, kinds: tuple[str, ...]) -> tuple[int, str | None]:
        """Count one hit of ``site``; return ``(hit index, kind that fires or None)``."""

    def declined(self, site: str, hit: int) -> None: ...

    def duration_ms(self, site: str, hit: int, fallback: Callable[[], int]) -> int: ...

    def restart_delay_ms(self, site: str, hit: int, fallback: Callable[[], int]) -> int: ...

    def arm_once(self, site: str, kind: str, *, restart_after_ms: int) -> None: ...

    def disarm(self, site: str) -> None: ...

    def drive(self, world: World, source: TimedSource) -> None: ...

    def unfired(self) -> list[tuple[int, FaultEvent]]: ...

    def take_scripted(self, kind: str, node: str) -> FaultEvent | None: ...


class BoundariesSeam(Protocol):
    """The instants a boundary-delay fault lands a call on."""

    def delay_ms(self, now_ms: int) -> int | None: ...


class ClocksSeam(Protocol):
    """The nodes' own clocks (``faults.clocks.NodeClocks``), by node name."""

    # Whether the nodes' clocks are skewed (offsets and drifts drawn), or only stepped.
    skew: bool
    # Whether the stores decide on their own machine's clock, not their callers'.
    store_clock: bool

    def runtime_for(self, name: str) -> Any: ...

    def now_ms(self, name: str) -> int: ...

    def error_ms(self, name: str) -> int: ...

    def jump(self, name: str, amount_ms: int) -> None: ...

    def clock(self, name: str) -> Any: ...

    def store_now_ms(self) -> int: ...


class CutSeam(Protocol):
    """A partition cutting one process from some of its stores until it
    heals (``faults.partitions.Cut``)."""

    @property
    def stores(self) -> frozenset[str]: ...

    @property
    def heal_ms(self) -> int: ...


class PortCallSeam(Protocol):
    """One call that reached a store, as it committed (``faults.ports.PortCall``)."""

    @property
    def time_ms(self) -> int: ...

    @property
    def node(self) -> str: ...

    @property
    def port(self) -> str: ...

    @property
    def method(self) -> str: ...

    @property
    def args(self) -> tuple: ...

    @property
    def kwargs(self) -> dict: ...

    @property
    def result(self) -> Any: ...

    @property
    def error(self) -> BaseException | None: ...

    @property
    def damaged(self) -> bool: ...


class FaultsSeam(Protocol):
    """What the runner needs of the port faults (``faults.plan.PortFaults``):
    the run's one fault plan, probabilistic or scripted."""

    def plan_for(self, world: World, opts: ScenarioOptions, choices: Any) -> PlanSeam: ...
