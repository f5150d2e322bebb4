"""The world of one run: clock, streams, trace, nodes, invariants, counters.

Workloads build on a ``World``: they add nodes with a start function (what a
fresh process of that node runs), schedule harness actions in simulated time,
attach checkers, and let the runner drive it. The world knows nothing of the
model; stores and ports are wired by scenarios and faults.
"""
from __future__ import annotations

from typing import Any, Callable, Coroutine, TextIO

import attrs

from sim.interleave import Deviation, SchedulePolicy
from sim.invariants import Checker, InvariantSet, Violation
from sim.node import Node
from sim.rng import Streams
from sim.runtime import SimRuntime
from sim.seams import BoundariesSeam, ClocksSeam, CutSeam, PlanSeam, PortCallSeam, SystemSeam
from sim.trace import NodeProbe, Trace

HARNESS_NODE = "harness"
# Fault events kept verbatim for the run's fault script; beyond this only
# the per-kind counts grow (memory must not grow with simulated time).
FAULT_EVENTS_MAX = 100_000


@attrs.frozen
class FaultEvent:
    """One fired fault: when, where, what, and the per-site hit index.

    A run's fired faults, in order, are its *fault script*: replayed alone
    (``faults.plan.ScriptedPlan``) they reproduce the run. What the fault
    decided besides firing travels with it: how long the crashed process
    stayed down (``restart_after_ms``), how long a pause lasted
    (``duration_ms``). ``hit`` None (hand-written scripts only): the first
    hit of ``site`` at or after ``time_ms``.
    """

    time_ms: int
    node: str
    site: str
    kind: str
    hit: int | None
    restart_after_ms: int | None = None
    duration_ms: int | None = None


class World:
    def __init__(self, seed: int, *, shuffle_ties: bool = False, trace_stream: TextIO | None = None,
                 stop_on_violation: bool = True, schedule: SchedulePolicy | None = None) -> None:
        self.seed = seed
        self.streams = Streams(seed)
        # ``schedule``: a ``sim.interleave`` policy (None: FIFO). Every
        # deviation from FIFO is traced (so the digest covers it) and kept
        # for the run's script.
        self.runtime = SimRuntime(self.streams["scheduling"], shuffle_ties=shuffle_ties, schedule=schedule)
        self.runtime.on_deviation = self._on_deviation
        self.trace = Trace(self.runtime.now_ms, stream_to=trace_stream)
        self.stop_on_violation = stop_on_violation
        self.invariants = InvariantSet(self.trace, self.runtime.now_ms, on_violation=self._on_violation)
        self.counters: dict[str, int] = {}
        self.fault_counts: dict[str, int] = {}
        self.fault_events: list[FaultEvent] = []
        self.nodes: dict[str, Node] = {}
        self._starters: dict[str, Callable[[Node], None]] = {}
        self.harness = Node(HARNESS_NODE, role="harness")
        # Set by the runner before any workload's setup: the one instant
        # every fault source stops at (heal), and the run's one fault plan.
        self.heal_at_ms = 0
        self.plan: PlanSeam | None = None
        # The system under test (``scenarios.system.System``), known here by
        # what is called on it (``sim.seams``).
        self.system: SystemSeam | None = None
        # What the scenario chose for this run beyond the options (swarm
        # choices): printed first and carried in the result's config.
        self.config_extra: dict[str, object] = {}
        # Hits per fault site (set by the fault plan): coverage reports them.
        self.site_hits: Callable[[], dict[str, int]] | None = None
        # Faults beyond the contract that fired (the store broke a promise):
        # the run must then end in a loud detection, never a pass.
        self.beyond_contract: list[FaultEvent] = []
        # Beyond the contract, by fault kind: which violations count as its
        # detection (a kind not here: any violation after it). ``faults.disk``.
        self.beyond_judges: dict[str, Callable[[Violation], bool]] = {}
        # Every port call that reached a store, as it committed (a
        # ``faults.ports.PortCall``): the reference-model oracle listens.
        self.port_observers: list[Callable[[PortCallSeam], None]] = []
        # Faults recorded so far, every kind (a port call compares it before
        # and after to tell a damaged answer from the store's own).
        self.faults_fired = 0
        # The instants a boundary-delay fault lands calls on
        # (``faults.timing.Boundaries``, set by the fault plan); None: none.
        self.boundaries: BoundariesSeam | None = None
        # The nodes' own clocks (``faults.clocks``, set by the fault plan in
        # a run with clock skew or jumps); None: every node reads true time.
        self.clocks: ClocksSeam | None = None
        # Node name -> the partition that cuts it from some of its stores now
        # (``faults.partitions``); empty (the usual case) costs a port call one
        # truthiness check.
        self.cuts: dict[str, CutSeam] = {}

    # -- observation -------------------------------------------------------

    def _on_deviation(self, deviation: Deviation) -> None:
        self.count("schedule.deviations")
        self.trace.emit(deviation.chosen_node, "schedule.deviation", {
            "step": deviation.step, "task": deviation.chosen_task, "preempted_node": deviation.preempted_node,
            "preempted_task": deviation.preempted_task, "await_site": deviation.await_site,
            "last_call": deviation.last_call})

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def emit(self, kind: str, **fields: Any) -> None:
        self.trace.emit(HARNESS_NODE, kind, fields)

    def runtime_for(self, node: Node) -> Any:
        """The runtime model code on ``node`` is handed: ``now_ms`` and
        deadlines in its machine's clock. Without clocks, the runtime itself
        (nothing between model code and the scheduler)."""
        clocks = self.clocks
        return self.runtime if clocks is None else clocks.runtime_for(node.name)

    def probe_for(self, node: Node) -> NodeProbe:
        return NodeProbe(self.trace, node.label)

    def check(self, *checkers: Checker) -> None:
        self.invariants.add(*checkers)

    def _on_violation(self, violation: Violation) -> None:
        self.trace.emit(HARNESS_NODE, "violation", {"invariant": violation.invariant, "message": violation.message})
        if self.stop_on_violation:
            self.runtime.stop_requested = True

    # -- nodes and faults --------------------------------------------------

    def add_node(self, name: str, start: Callable[[Node], None], *, role: str = "worker") -> Node:
        assert name not in self.nodes, f"node {name} exists"
        node = Node(name, role=role)
        self.nodes[name] = node
        self._starters[name] = start
        self.trace.emit(node.label, "node.start", {"incarnation": node.incarnation})
        start(node)
        return node

    def record_fault(self, node: Node, site: str, kind: str, hit: int, *, restart_after_ms: int | None = None,
                     duration_ms: int | None = None, beyond_contract: bool = False) -> FaultEvent:
        event = FaultEvent(self.runtime.now_ms(), node.label, site, kind, hit, restart_after_ms, duration_ms)
        if beyond_contract:
            self.beyond_contract.append(event)
        self.fault_counts[kind] = self.fault_counts.get(kind, 0) + 1
        self.faults_fired += 1
        if len(self.fault_events) < FAULT_EVENTS_MAX:
            self.fault_events.append(event)
        fields: dict[str, Any] = {"site": site, "kind": kind, "hit": hit}
        if restart_after_ms is not None:
            fields["restart_after_ms"] = restart_after_ms
        if duration_ms is not None:
            fields["duration_ms"] = duration_ms
        self.trace.emit(node.label, "fault", fields)
        return event

    def crash(self, node: Node, *, restart_after_ms: int | None) -> None:
        """Crash ``node`` now; restart it after ``restart_after_ms`` (None: never).

        If called from one of the node's own tasks this raises ``NodeCrashed``.
        """
        if not node.alive:
            return
        self.count("node.crashes")
        if restart_after_ms is not None:
            self.after(restart_after_ms, lambda: self.restart(node.name), label=f"restart {node.name}")
        self.trace.emit(node.label, "node.crash", {"restart_after_ms": restart_after_ms})
        self.runtime.crash_node(node)

    def restart(self, name: str) -> Node:
        old = self.nodes[name]
        assert not old.alive, f"restart of live node {name}"
        node = Node(name, role=old.role, incarnation=old.incarnation + 1)
        self.nodes[name] = node
        self.count("node.restarts")
        self.trace.emit(node.label, "node.start", {"incarnation": node.incarnation})
        self._starters[name](node)
        return node

    # -- harness timers ------------------------------------------------------

    def after(self, delay_ms: int, action: Callable[[], Any], *, label: str = "") -> None:
        self.at(self.runtime.now_ms() + delay_ms, action, label=label)

    def at(self, t_ms: int, action: Callable[[], Any], *, label: str = "") -> None:
        """Run ``action()`` (sync) on the harness node at simulated time ``t_ms``."""
        async def timer() -> None:
            action()

        self.runtime.spawn_on(self.harness, label or "timer", timer(), at_ms=t_ms)

    def spawn_harness(self, name: str, coro: Coroutine[Any, Any, Any]) -> None:
        self.runtime.spawn_on(self.harness, name, coro)

    def run_until(self, t_ms: int) -> None:
        self.runtime.run(t_ms)

    def shutdown(self) -> None:
        """Stop every process (no port accepts a call any more) and close tasks."""
        for node in self.nodes.values():
            node.alive = False
        self.harness.alive = False
        self.runtime.shutdown()
