"""What the engine needs from a scenario: a name, a build function, options.

A scenario's ``build(world, options)`` wires stores, nodes, faults and
checkers into the world and returns a ``Setup``: how long to run, and a view
of the stores for the end-of-run audit. Scenarios live in ``scenarios/``;
the engine sees only this interface.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol

import attrs

STORES = ("memory", "sqlite")


class SetupError(Exception):
    """A scenario cannot start with these options (e.g. a non-empty --db).

    The face reports it as a usage error: one line, exit 2.
    """


@attrs.frozen
class Param:
    """A scenario-specific option (``--sentinels 10``)."""

    name: str
    default: int
    help: str
    minimum: int = 1
    maximum: int = 10_000


@attrs.frozen
class ScenarioOptions:
    seed: int
    duration_ms: int
    store: str = "memory"
    db_path: str | None = None
    params: Mapping[str, int] = attrs.field(factory=dict)
    # A fault script (``sim.world.FaultEvent``s): when given, the run's faults
    # come from it alone (``--faults FILE``).
    fault_script: tuple[Any, ...] | None = None
    # Swarm testing (``faults.swarm``): let the seed choose the fault mix,
    # failpoints, workload switches and knobs; pins override single choices.
    swarm: bool = False
    faults_enable: tuple[str, ...] = ()
    faults_disable: tuple[str, ...] = ()
    knobs: Mapping[str, int] = attrs.field(factory=dict)
    # Which ready task runs next (``sim.interleave``): fifo | random | pct:D[:K].
    schedule: str = "fifo"
    # Beyond the contract (``faults.beyond``): stores may lose acknowledged
    # writes and tear batches; the run must detect it, loudly.
    beyond_contract: bool = False

    def __attrs_post_init__(self) -> None:
        assert self.store in STORES, self.store
        assert self.duration_ms > 0


class Setup(Protocol):
    end_ms: int

    def audit_view(self) -> Any: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@attrs.frozen
class Scenario:
    name: str
    description: str
    build: Callable[[Any, ScenarioOptions], Setup]
    default_duration_ms: int
    params: tuple[Param, ...] = ()
    # What a seed may choose (``faults.swarm.SwarmSpace``), and the
    # ``sometimes`` properties the scenario expects a sweep to reach.
    swarm_space: Any = None
    sometimes: tuple[str, ...] = ()

    def param_defaults(self) -> dict[str, int]:
        return {p.name: p.default for p in self.params}
