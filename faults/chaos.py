"""Chaos as workloads: kills, pauses, duplicate alarms, operator edits, deploys,
and the on-call operator who resolves runs parked in doubt.

Store-level faults fire at port calls (``faults.ports``); these fire on the
clock, so a process can also die while it sleeps, waits or is half-way
through an effect. Each is a ``sim.workload.Workload`` usable in any
scenario, as many times as it likes (two ``NodeKills`` with different
targets and rates stack: each instance has its own name). The timed ones
(kills, pauses, duplicate alarms) go through the run's one fault plan
(``FaultPlan.drive``): generated from the instance's own stream (named by
the instance) until the heal instant, or replayed from a script at their
recorded times — the workload never asks which. Operator edits and deploys
are drawn from their instance's stream at start, so the seed replays them too.

Every choice is drawn from the instance's stream in a fixed order; a draw
with a single candidate is skipped (one node to kill needs no coin). The
processes a chaos workload acts on are given as node names or as the
workloads that own them (``Workers``, ``Sentinels``: their ``nodes()``),
resolved at setup, once every instance has its name.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from faults.kinds import DUPLICATE_WAKE, NODE_KILL, NODE_PAUSE
from model.durable_state.store import DurableStateWrite, RevisionConflictError
from model.kernel.kernel import EffectInDoubt, error_output
from model.kernel.records import EFFECT_INDOUBT, FAILED, PARKED, STEP_COMPLETED
from model.runs import LedgerRuns
from sim.clock import MS_PER_DAY
from sim.rng import Stream
from sim.workload import Workload
from sim.world import FaultEvent, World

PROCESS_SITE = "process"
MS_PER_YEAR = 365 * MS_PER_DAY


def node_name(label: str) -> str:
    """``worker-1#3`` (a node's label: name and incarnation) -> ``worker-1``."""
    return label.split("#", 1)[0]


Targets = Sequence[Any]  # node names (str) and workloads with ``nodes()``


def resolve_nodes(targets: Targets) -> tuple[str, ...]:
    """The node names ``targets`` stand for, in order: a name is itself, a
    workload its ``nodes()``."""
    names: list[str] = []
    for target in targets:
        names.extend([target] if isinstance(target, str) else target.nodes())
    assert names and len(names) == len(set(names)), names
    return tuple(names)


def busy_first(world: World, chaos: Stream, nodes: Sequence[str], owners: Any) -> Any:
    """One of ``nodes``, drawn from ``chaos``: among those alive that hold a
    claim right now (their label in ``owners``) when any does, else among
    all (a pause or a partition hurts most where a lease is held)."""
    busy = [name for name in nodes if world.nodes[name].alive and world.nodes[name].label in owners]
    return world.nodes[chaos.choice(busy or list(nodes))]


def _pick(stream: Stream, names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else stream.choice(names)


class NodeKills(Workload):
    """kill -9 of one of ``nodes`` every ``every_ms`` (uniform); it restarts
    after ``restart_ms``, or, one kill in ``outage_one_in``, after a long
    ``outage_ms`` (long enough to miss schedule occurrences)."""

    name = "node-kills"
    kind = NODE_KILL

    def __init__(self, nodes: Targets, *, every_ms: tuple[int, int], restart_ms: tuple[int, int],
                 outage_one_in: int = 0, outage_ms: tuple[int, int] = (0, 0)) -> None:
        assert nodes and every_ms[0] > 0 and restart_ms[0] >= 0, (nodes, every_ms, restart_ms)
        assert outage_one_in == 0 or outage_ms[0] > 0
        self._targets = tuple(nodes)
        self.nodes: tuple[str, ...] = ()  # resolved at setup
        self.every_ms = every_ms
        self.restart_ms = restart_ms
        self.outage_one_in = outage_one_in
        self.outage_ms = outage_ms

    def setup(self, world: World) -> None:
        self.nodes = resolve_nodes(self._targets)

    def start(self, world: World) -> None:
        world.plan.drive(world, self)

    def propose(self, world: World, hit: int) -> FaultEvent | None:
        chaos = self.stream(world)
        node = world.nodes[_pick(chaos, self.nodes)]
        if not node.alive:
            return None
        if self.outage_one_in and chaos.below(self.outage_one_in) == 0:
            downtime_ms = chaos.between(*self.outage_ms)
        else:
            downtime_ms = chaos.between(*self.restart_ms)
        return FaultEvent(world.runtime.now_ms(), node.label, PROCESS_SITE, NODE_KILL, hit,
                          restart_after_ms=downtime_ms)

    def apply(self, world: World, event: FaultEvent) -> bool:
        node = world.nodes.get(node_name(event.node))
        if node is None or not node.alive or node.name not in self.nodes:
            return False  # another instance's target (or gone)
        world.record_fault(node, event.site, NODE_KILL, event.hit or 0, restart_after_ms=event.restart_after_ms)
        world.crash(node, restart_after_ms=event.restart_after_ms)
        return True


class NodePauses(Workload):
    """A GC pause or VM stall of one of ``nodes`` every ``every_ms``: it
    freezes while time and leases move on. Pauses prefer a node that holds
    a claim right now (``busy``: node label -> anything); their length is
    drawn from one of ``pause_ms`` (ranges)."""

    name = "node-pauses"
    kind = NODE_PAUSE

    def __init__(self, nodes: Targets, *, every_ms: tuple[int, int],
                 pause_ms: Sequence[tuple[int, int]], busy: Callable[[], Any] = dict) -> None:
        assert nodes and pause_ms and every_ms[0] > 0, (nodes, pause_ms, every_ms)
        self._targets = tuple(nodes)
        self.nodes: tuple[str, ...] = ()  # resolved at setup
        self.every_ms = every_ms
        self.pause_ms = tuple(pause_ms)
        self._busy = busy

    def setup(self, world: World) -> None:
        self.nodes = resolve_nodes(self._targets)

    def start(self, world: World) -> None:
        world.plan.drive(world, self)

    def propose(self, world: World, hit: int) -> FaultEvent | None:
        chaos = self.stream(world)
        node = busy_first(world, chaos, self.nodes, self._busy())
        if not node.alive:
            return None
        pause_ms = chaos.between(*chaos.choice(self.pause_ms))
        return FaultEvent(world.runtime.now_ms(), node.label, PROCESS_SITE, NODE_PAUSE, hit, duration_ms=pause_ms)

    def apply(self, world: World, event: FaultEvent) -> bool:
        node = world.nodes.get(node_name(event.node))
        if node is None or not node.alive or event.duration_ms is None or node.name not in self.nodes:
            return False
        world.record_fault(node, PROCESS_SITE, NODE_PAUSE, event.hit or 0, duration_ms=event.duration_ms)
        world.runtime.pause_node(node, world.runtime.now_ms() + event.duration_ms)
        return True


class DuplicateAlarms(Workload):
    """At-least-once timers: every ``every_ms`` an alarm of one of
    ``targets()`` is delivered once more. ``deliver(target, delivery)``
    delivers it (and records the fault) or returns False when there is
    nothing to deliver right now."""

    name = "duplicate-alarms"
    kind = DUPLICATE_WAKE

    def __init__(self, targets: Callable[[], Sequence[str]], deliver: Callable[[str, int | None], bool], *,
                 every_ms: tuple[int, int]) -> None:
        assert every_ms[0] > 0
        self._targets = targets
        self._deliver = deliver
        self.every_ms = every_ms

    def start(self, world: World) -> None:
        world.plan.drive(world, self)

    def propose(self, world: World, hit: int) -> FaultEvent | None:
        target = self.stream(world).choice(sorted(self._targets()))
        return FaultEvent(world.runtime.now_ms(), "", f"alarm.{target}", DUPLICATE_WAKE, hit)

    def apply(self, world: World, event: FaultEvent) -> bool:
        return self._deliver(event.site.removeprefix("alarm."), event.hit)


class OperatorEdits(Workload):
    """An operator who edits durable state by hand, out of band, now and
    then (``per_year``, at least once a run): a genuinely concurrent writer.
    ``keys`` maps a name (a schedule) to the durable-state key it may edit, ``moment(chaos, heal_at_ms, name)`` when
    (drawn at start, before the heal instant), ``edit(payload)`` what it
    writes. Its node (``OPERATOR_NODE``) exists in every run, so checkers can
    tell its writes apart; ``enabled`` False plans no edit."""

    name = "operator-edits"
    NODE = "operator"  # its process, in the instance's namespace (``{instance}/operator``)

    def __init__(self, keys: Mapping[str, str], *, duration_ms: int, per_year: int,
                 moment: Callable[[Stream, int, str], int], edit: Callable[[dict], dict], enabled: bool = True) -> None:
        assert keys and per_year > 0 and duration_ms > 0
        self.keys = dict(keys)
        self.duration_ms = duration_ms
        self.per_year = per_year
        self._moment = moment
        self._edit = edit
        self.enabled = enabled
        self.edits = 0

    def is_operator(self, node_label: str) -> bool:
        """Whether ``node_label`` is this operator's process (its writes are out of band)."""
        return node_name(node_label) == self.node_name(self.NODE)

    def setup(self, world: World) -> None:
        self.node = world.add_node(self.node_name(self.NODE), lambda node: None, role="operator")
        self.ds = world.system.ports_for(self.node, faults=False).ds

    def start(self, world: World) -> None:
        if not self.enabled:
            return
        chaos = self.stream(world)
        names = tuple(self.keys)
        for _ in range(max(1, self.duration_ms * self.per_year // MS_PER_YEAR)):
            name = chaos.choice(names)
            at_ms = self._moment(chaos, world.heal_at_ms, name)
            world.at(at_ms, lambda n=name: world.runtime.spawn_on(self.node, f"edit:{n}", self._write(self.keys[n])),
                     label="operator edit")

    async def _write(self, key: str) -> None:
        record = await self.ds.load(key)
        if record is None:
            return
        try:
            await self.ds.save(key, DurableStateWrite(record.contract_version, self._edit(record.payload)),
                               record.revision)
        except RevisionConflictError:
            return
        self.edits += 1

    def metrics(self) -> dict[str, Any]:
        return {"operator_edits": self.edits}


class Deploys(Workload):
    """New code, rolled out with a restart of ``nodes``: ``timeline(chaos,
    duration_ms)`` says when and which build (drawn at start; deploys at or
    after the heal instant are dropped), ``on_deploy(build)`` switches the
    code and returns the trace fields of the deploy.

    A deploy often lands while a worker is already down: ``across`` lists
    the faults, as (site, fault kind), that may crash a worker just before
    one (a crash between a save's store write and its step record, a lost
    ack, a call that never reached its store), armed ``lead_ms`` before the
    deploy at the site's next hit with a restart after it, so the worker
    comes back on the new code holding work the old code began. One deploy
    in ``across_one_in`` of each kind is drawn so, from the deploy's own
    stream (``{instance}/deploy-<n>``: the other draws keep their meaning); the
    crash is a recorded fault, so a repro's script replays it."""

    name = "deploys"

    def __init__(self, timeline: Callable[[Stream, int], Sequence[tuple[int, Any]]],
                 on_deploy: Callable[[Any], dict], *, nodes: Targets, duration_ms: int,
                 restart_ms: tuple[int, int], across: Sequence[tuple[str, str]] = (),
                 across_one_in: int = 2, lead_ms: int = 0) -> None:
        assert nodes and duration_ms > 0
        assert not across or (across_one_in >= 1 and lead_ms > 0), (across_one_in, lead_ms)
        self._timeline = timeline
        self._on_deploy = on_deploy
        self._targets = tuple(nodes)
        self.nodes: tuple[str, ...] = ()  # resolved at setup
        self.duration_ms = duration_ms
        self.restart_ms = restart_ms
        self.across = tuple(across)
        self.across_one_in = across_one_in
        self.lead_ms = lead_ms
        self.deploys = 0
        self.deploys_while_down = 0

    def setup(self, world: World) -> None:
        self.nodes = resolve_nodes(self._targets)

    def start(self, world: World) -> None:
        chaos = self.stream(world)
        for index, (at_ms, build) in enumerate(self._timeline(chaos, self.duration_ms)):
            if at_ms < world.heal_at_ms:
                # The rolling restart's downtime is drawn now, at start: a
                # scripted replay draws nothing from chaos during the run.
                downtime_ms = chaos.between(*self.restart_ms)
                world.at(at_ms, lambda b=build, d=downtime_ms: self._deploy(world, b, d),
                         label=f"deploy {getattr(build, 'name', build)}")
                self._plan_downtime(world, index, at_ms)

    def _plan_downtime(self, world: World, index: int, at_ms: int) -> None:
        if not self.across or world.plan is None:
            return
        rng = self.stream_for(world, f"deploy-{index}")
        pick = rng.below(len(self.across) * self.across_one_in)
        if pick >= len(self.across):
            return
        site, kind = self.across[pick]
        restart_after_ms = self.lead_ms + rng.between(*self.restart_ms)
        arm_ms = max(0, at_ms - self.lead_ms)
        world.at(arm_ms, lambda: world.plan.arm_once(site, kind, restart_after_ms=restart_after_ms),
                 label=f"arm {kind} at {site} before deploy {index}")
        world.at(at_ms, lambda: world.plan.disarm(site), label=f"disarm {site}")

    def _deploy(self, world: World, build: Any, downtime_ms: int) -> None:
        fields = self._on_deploy(build)
        self.deploys += 1
        world.emit("deploy", **fields)
        for name in self.nodes:
            node = world.nodes[name]
            if node.alive:
                world.crash(node, restart_after_ms=downtime_ms)
            else:
                self.deploys_while_down += 1

    def metrics(self) -> dict[str, Any]:
        return {"deploys": self.deploys, "deploys_while_down": self.deploys_while_down}


class InDoubtResolver(Workload):
    """The on-call operator who resolves runs parked in doubt (K9).

    A run whose non-idempotent effect may or may not have happened is parked
    at ``EFFECT_INDOUBT`` (``model.kernel``) and holds its schedule's live
    slot until someone says which. Every ``every_ms`` the operator looks at
    the unsettled runs of the schedules (``schedule_ids()``) and, for a parked one,
    claims it like any process (``model.runs.LedgerRuns``: under a lease, at
    a new epoch, waiting out the worker's lease), reads its log and asks the
    service's own history (``delivered(run_id, step_id)``: the output to
    record, or None). Then, the only resolutions the kernel offers:

    - delivered: the completion is recorded with what the service says it
      answered; the driver resumes the run, which folds it and goes on;
    - not delivered: the operator either re-sends it itself
      (``redrive(node)(run_id, step_id, steps)``, recording what it returns;
      the run then resumes the same way) or abandons the run: finishes it
      FAILED with ``EffectInDoubt``. The choice is drawn from the run's own
      fork of the streams (``{instance}/<run id>``), never from a chaos
      workload's stream: the operator acts during the run, and a scripted
      replay draws nothing from those then.

    The operator's process is never faulted (``ports_for(faults=False)``);
    it keeps patrolling through the settle window, so no run is left parked.
    ``enabled`` False: no operator (a parked run then stays parked).
    """

    name = "indoubt-resolver"
    NODE = "on-call"
    RESOLUTIONS = ("delivered", "redriven", "abandoned")

    def __init__(self, schedule_ids: Callable[[], Sequence[str]], *, every_ms: int, lease_ms: int,
                 delivered: Callable[[str, str], Any], redrive: Callable[[Any], Callable[..., Any]],
                 enabled: bool = True) -> None:
        assert every_ms > 0 and lease_ms > 0
        self._schedule_ids = schedule_ids
        self.every_ms = every_ms
        self.lease_ms = lease_ms
        self._delivered = delivered
        self._redrive_for = redrive
        self.enabled = enabled
        self.resolved = {name: 0 for name in self.RESOLUTIONS}

    def setup(self, world: World) -> None:
        self.world = world
        self.node = world.add_node(self.operator_node, lambda node: None, role="operator")
        self.ports = world.system.ports_for(self.node, faults=False)
        self.probe = world.probe_for(self.node)
        self._redrive = self._redrive_for(self.node)

    @property
    def operator_node(self) -> str:
        """The on-call operator's process (``{instance}/on-call``)."""
        return self.node_name(self.NODE)

    def start(self, world: World) -> None:
        if self.enabled:
            world.runtime.spawn_on(self.node, "on-call", self._patrol())

    async def _patrol(self) -> None:
        runtime = self.world.runtime
        # The operator's forever loop: its node is never killed; the run ends
        # it (every turn sleeps ``every_ms``).
        while True:
            await runtime.sleep_ms(self.every_ms)
            schedules = frozenset(self._schedule_ids())  # membership only
            reader = self._runs()
            # Reads only (``live_executions`` would also finish settlements
            # its log holds: not the operator's business).
            for row in await self.ports.ledger.scan_nonterminal():
                if row.principal_id not in schedules:
                    continue
                record = await reader.load_execution(row.conversation_id)
                if record is not None and record.status == PARKED:
                    await self._resolve(record.run_id)

    def _runs(self) -> LedgerRuns:
        # A fresh process view per resolution: the operator keeps no claims.
        world = self.world
        clock = world.runtime_for(self.node)  # the operator's machine's clock
        return LedgerRuns(self.ports.ledger, self.ports.log, self.ports.schedules, self.node.label,
                          lease_ms=self.lease_ms, now_ms=clock.now_ms, sleep_ms=world.runtime.sleep_ms,
                          probe=self.probe)

    async def _resolve(self, run_id: str) -> None:
        runs = self._runs()
        steps = await runs.load_steps(run_id)  # claims it (after the worker's lease)
        if not steps or steps[-1].kind != EFFECT_INDOUBT:
            return  # resolved meanwhile
        step_id = steps[-1].step_id
        output = self._delivered(run_id, step_id)
        if output is not None:
            resolution = "delivered"
        elif self.stream_for(self.world, run_id).below(2) == 0:
            resolution = "redriven"
            output = await self._redrive(run_id, step_id, steps)
        else:
            resolution = "abandoned"
        if output is not None:
            await runs.append_step(run_id, len(steps) + 1, step_id, STEP_COMPLETED, output)
        else:
            await runs.finish_execution(run_id, status=FAILED, output=error_output(EffectInDoubt(run_id, step_id)),
                                        finished_at_ms=runs.now_ms())
        self.resolved[resolution] += 1
        self.probe.emit("operator.resolved", run=run_id, step=step_id, resolution=resolution)

    def metrics(self) -> dict[str, Any]:
        return {f"indoubt_{name}": count for name, count in self.resolved.items()}
