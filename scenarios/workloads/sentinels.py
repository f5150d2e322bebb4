"""The sentinel fleet: one worker process running a schedule driver per
sentinel, the findings projector and daily retention, on the whole system.

Each wake (``scenarios.workloads.sentinel_app``) is admitted to the ledger with its run
id as idempotency key, claimed under a lease, run as a bounded flow whose
steps are fenced appends to its own conversation log, and settled by
reserve -> append -> finalize (``model.runs``). Large telemetry goes through
the claim-check middleware; findings cite evidence refs; retention archives
old runs and reclaims blobs except what live findings pin. Deploys switch
the fleet's build (``on_deploy``): the contract evolves v1 -> v2 -> v3, one
build deliberately broken and then fixed. With ``paging``, high readings
page the on-call through the external pager (``scenarios.workloads.pager``), the
flow's one non-idempotent effect; the fleet answers the on-call operator
(``faults.chaos.InDoubtResolver``) what the pager received for a parked run,
and re-sends a page on the operator's behalf.

The fleet also answers what the sentinel checks and chaos need to know of
the application: the contracts each build deploys, the flows a replay folds,
when a deploy lands inside a wake, when an operator's edit races one.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from faults.events import SchedulesRetire
from faults.kinds import DUPLICATE_WAKE
from model.claimcheck import INLINE_CAP_BYTES_DEFAULT, ClaimCheck
from model.durable_state.handle import SentinelState, sentinel_state
from model.kernel.kernel import Kernel
from model.kernel.records import STEP_COMPLETED, ExecutionRecord
from model.failpoints import NO_FAILPOINTS
from model.findings import project_forever
from model.retention import Retention, RetentionPolicy, retention_forever
from model.probe import NULL_PROBE, Probe
from model.retry import is_retryable
from model.runs import LedgerRuns
from model.schedules import Schedule, ScheduleDriver, parse_run_id, run_id_for
from scenarios.workloads import sentinel_app as app
from scenarios.invariants.exactly_once_wake import ExactlyOnceWake
from scenarios.workloads.pager import PagerService, bind_pager
from sim.clock import MS_PER_DAY, MS_PER_HOUR, MS_PER_SECOND
from sim.invariants import conversation_of
from sim.node import Node
from sim.rng import Stream
from sim.workload import Workload
from sim.world import World

# The worker of a fleet, as the fleet names it (``Sentinels.worker_node``:
# ``{instance}/worker-1``); ``WORKER_NODE`` is the default instance's.
WORKER_LOCAL = "worker-1"
WORKER_NODE = f"sentinels/{WORKER_LOCAL}"
RETENTION_DEFAULT = RetentionPolicy(run_ttl_ms=MS_PER_DAY, blob_ttl_ms=2 * MS_PER_DAY, finding_ttl_ms=7 * MS_PER_DAY)
BUILDS = (app.BUILD_V1, app.BUILD_V2, app.BUILD_V3, app.BUILD_V3_NO_MIGRATION)
# The trace events the fleet counts for its metrics (successful ones only).
SYSTEM_EVENTS = ("run.migration_missing", "kernel.input_rejected", "kernel.migrated", "driver.retry",
                 "log.delete_conversation", "content.delete")


class ReplayTouchedStore(Exception):
    name = "ReplayTouchedStore"


class ReplayGuardStore:
    """The only store replay flows can see: counts each call, then refuses it."""

    def __init__(self) -> None:
        self.calls = 0

    async def load(self, key: str) -> Any:
        self.calls += 1
        raise ReplayTouchedStore(f"replay called load({key!r})")

    async def save(self, key: str, write: Any, expected_revision: int) -> Any:
        self.calls += 1
        raise ReplayTouchedStore(f"replay called save({key!r})")

    async def clear(self, key: str) -> None:
        self.calls += 1
        raise ReplayTouchedStore(f"replay called clear({key!r})")


class Sentinels(Workload):
    name = "sentinels"

    def __init__(self, schedules: Sequence[Schedule], *, lease_ms: int = 30 * MS_PER_SECOND,
                 inline_cap_bytes: int = INLINE_CAP_BYTES_DEFAULT, retention: RetentionPolicy = RETENTION_DEFAULT,
                 project_every_ms: int = MS_PER_HOUR, validate_inputs: bool = True, paging: bool = False,
                 end_ms: int | None = None, name: str | None = None) -> None:
        """``schedules``: one sentinel each, at its own cadence. The worker
        claims runs under ``lease_ms``; effect results over
        ``inline_cap_bytes`` go to the content store; the projector runs
        every ``project_every_ms``; retention runs daily under ``retention``;
        ``validate_inputs``: D7 input-schema validation at every start;
        ``paging``: high readings page the on-call (a non-idempotent effect).
        The fleet brings ``exactly-once-wake`` for its schedules, judged up
        to ``end_ms`` (default: the latest of their ends)."""
        assert schedules and lease_ms > 0 and project_every_ms > 0
        if name is not None:
            self.named(name)
        ends = [s.end_ms for s in schedules]
        assert end_ms is not None or None not in ends, "a fleet's schedules need an end (or give end_ms)"
        self.end_ms = end_ms if end_ms is not None else max(e for e in ends if e is not None)
        self.schedules = {s.schedule_id: s for s in schedules}
        assert len(self.schedules) == len(schedules), "schedule ids must be unique"
        self.lease_ms = lease_ms
        self.inline_cap_bytes = inline_cap_bytes
        self.retention_policy = retention
        self.project_every_ms = project_every_ms
        self.validate_inputs = validate_inputs
        self.paging = paging
        self.pager = PagerService()  # external: survives every process
        self._pager_port: Any = None  # the worker's binding (its current incarnation's)
        self.build = app.BUILD_V1
        self.builds_deployed: list[str] = [self.build.name]
        self.drivers: dict[str, ScheduleDriver] = {}
        self.replay_guard = ReplayGuardStore()
        self._replay_flows: dict[tuple[str, int], Any] = {}
        self._chains = build_chains(self.schedules)
        self.state_keys = {sid: sentinel_state(sid)[1] for sid in sorted(self.schedules)}
        self._schedule_of_key = {key: sid for sid, key in self.state_keys.items()}
        self.runs_failed = 0
        self.system_counts: dict[str, int] = {}
        self._last_retired: dict[str, int] = {}  # schedule -> last retired occurrence that ran

    # -- phases ----------------------------------------------------------------

    def setup(self, world: World) -> None:
        self.world = world
        world.trace.subscribe(("ledger.finalize_settlement",), self._on_settled)
        world.trace.subscribe((SchedulesRetire.kind,), self._on_retired)
        world.trace.subscribe(SYSTEM_EVENTS, self._on_system_event)
        world.add_node(self.worker_node, self._start_worker)

    @property
    def worker_node(self) -> str:
        """The fleet's worker process (its name: ``{instance}/worker-1``)."""
        return self.node_name(WORKER_LOCAL)

    def nodes(self) -> list[str]:
        """The fleet's processes (what a ``NodeKills`` of the fleet kills)."""
        return [self.worker_node]

    def checks(self) -> list[ExactlyOnceWake]:
        return [ExactlyOnceWake(self.schedules, end_ms=self.end_ms)]

    def claims(self) -> dict[str, tuple[str, ...]]:
        """The ids it takes in the shared stores: two fleets never share a schedule."""
        return {"schedule": tuple(sorted(self.schedules))}

    def metrics(self) -> dict[str, Any]:
        system = self.world.system
        return {
            "builds": self.builds_deployed,
            "runs_migrated_on_resume": self.system_counts.get("kernel.migrated", 0),
            "runs_failed_migration_missing": self.system_counts.get("run.migration_missing", 0),
            "runs_rejected_input": self.system_counts.get("kernel.input_rejected", 0),
            "transient_retries": self.system_counts.get("driver.retry", 0),
            "runs_failed": self.runs_failed,
            "blobs_reclaimed": self.system_counts.get("content.delete", 0),
            "runs_archived": self.system_counts.get("log.delete_conversation", 0),
            "runs_held_by_pins": sum(len(system.held_runs(sid)) for sid in sorted(self.schedules)),
        }

    # -- the worker process ------------------------------------------------------

    def _start_worker(self, node: Node) -> None:
        world = self.world
        runtime = world.runtime_for(node)  # the node's own clock: what its drivers, kernel and leases read
        probe = world.probe_for(node)
        ports = world.system.ports_for(node)
        self._pager_port = bind_pager(world, node, self.pager)
        runs = LedgerRuns(ports.ledger, ports.log, ports.schedules, node.label, lease_ms=self.lease_ms,
                          now_ms=runtime.now_ms, sleep_ms=runtime.sleep_ms, failpoints=ports.failpoints, probe=probe)
        drivers, processes = worker_processes(
            runtime, runs, ports, self.schedules, self.build, chains=self._chains, effects=self._effects,
            inline_cap_bytes=self.inline_cap_bytes, validate_inputs=self.validate_inputs, paging=self.paging,
            project_every_ms=self.project_every_ms, retention_policy=self.retention_policy,
            failpoints=ports.failpoints, probe=probe)
        self.drivers.update(drivers)
        for name, coro in processes:
            runtime.spawn_on(node, name, coro)

    def _effects(self, run_id: str):
        world = self.world
        return wake_effects(run_id, runtime=world.runtime, streams=world.streams, prefix=self.name,
                            period_ms=self._period_ms,
                            alarm_on_time=self._alarm_on_time, pager=lambda: self._pager_port)

    def _alarm_on_time(self, run_id: str, busy_until_ms: int) -> None:
        """The alarm service fires every occurrence on time, whatever the
        driver is doing: a run that outlasts its period is still publishing
        when the next occurrence's alarm is delivered to the same driver
        (one live occurrence per schedule is then tested by a real overlap)."""
        schedule_id, occurrence_ms = parse_run_id(run_id)
        next_ms = occurrence_ms + self.schedules[schedule_id].every_ms
        if next_ms < busy_until_ms:
            self.world.at(next_ms, lambda: self._deliver(schedule_id, next_ms), label="alarm on time")

    def _deliver(self, schedule_id: str, occurrence_ms: int) -> bool:
        node = self.world.nodes[self.worker_node]
        driver = self.drivers.get(schedule_id)
        if not node.alive or driver is None:
            return False
        self.world.runtime.spawn_on(node, f"alarm:{schedule_id}@{occurrence_ms}", _alarm(driver, occurrence_ms))
        return True

    def _period_ms(self, run_id: str) -> int:
        schedule_id, _ = parse_run_id(run_id)
        return self.schedules[schedule_id].every_ms

    # -- what chaos asks of the application -----------------------------------------

    def on_deploy(self, build: app.Build) -> dict:
        """A deploy switches the code; the restarted worker runs it."""
        self.build = build
        self.builds_deployed.append(build.name)
        return {"build": build.name, "version": build.version, "broken": build.broken}

    def deploy_timeline(self, chaos: Stream, duration_ms: int) -> list[tuple[int, app.Build]]:
        """v2 in the first third, a broken build mid-run and its fix, v3 late;
        or (one seed in four) a jump from v1 straight to v3.

        Each deploy lands inside a wake (just after its state was saved,
        while it publishes), so a run is in flight on the old code: the
        restarted worker resumes it on the new code through a flow-version
        transform, or fails it explicitly when the build has none."""
        d = duration_ms
        if chaos.below(4) == 0:
            # A jump: v1 straight to v3, so v3 code meets v1 state (two
            # migrations in one load, mid-run through a flow-version transform).
            return [(self._inside_a_wake(chaos.between(d // 10, d * 3 // 10)), app.BUILD_V3)]
        v2_ms = self._inside_a_wake(chaos.between(d // 10, d * 3 // 10))
        broken = chaos.choice((app.BUILD_V3_NO_MIGRATION, app.BUILD_V1_ROLLBACK))
        broken_ms = self._inside_a_wake(chaos.between(d * 4 // 10, d * 6 // 10))
        fixed_ms = broken_ms + chaos.between(*app.BROKEN_WINDOW_MS)
        fix = app.BUILD_V3 if broken is app.BUILD_V3_NO_MIGRATION else app.BUILD_V2
        plan = [(v2_ms, app.BUILD_V2), (broken_ms, broken), (fixed_ms, fix)]
        if fix is not app.BUILD_V3:
            v3_ms = self._inside_a_wake(chaos.between(d * 7 // 10, d * 8 // 10))
            if v3_ms <= broken_ms:
                # A short run: both fell in the same wake, and v3 would replace
                # the broken build before any load could catch it. A wake later.
                v3_ms = self._inside_a_wake(broken_ms + self._first().every_ms)
            plan.append((v3_ms, app.BUILD_V3))
        return plan

    def _first(self) -> Schedule:
        return self.schedules[sorted(self.schedules)[0]]

    def _inside_a_wake(self, t_ms: int) -> int:
        """A moment in the publish step of the first sentinel's wake at or before ``t_ms``."""
        schedule = self._first()
        occurrence_ms = t_ms // schedule.every_ms * schedule.every_ms
        rng = self.stream_for(self.world, run_id_for(schedule.schedule_id, occurrence_ms))
        return occurrence_ms + rng.between(*app.STATS_LATENCY_MS) + 1

    def edit_moment(self, chaos: Stream, heal_at_ms: int, schedule_id: str) -> int:
        """Inside the stats window of some wake before the heal: between its load and save."""
        every_ms = self.schedules[schedule_id].every_ms
        wake = chaos.below(max(1, heal_at_ms // every_ms))
        return wake * every_ms + chaos.between(1, app.STATS_LATENCY_MS[1] * 3 // 4)

    def schedule_ids(self) -> list[str]:
        return sorted(self.schedules)

    def deliver_again(self, schedule_id: str, delivery: int | None) -> bool:
        """The alarm of the latest due occurrence, delivered once more; and,
        once retention has retired a run of the schedule, a late duplicate
        of the alarm of the last one it retired (at-least-once timers may
        redeliver an old alarm: the archive watermark's boundary)."""
        world = self.world
        node = world.nodes[self.worker_node]
        occurrence_ms = self.schedules[schedule_id].latest_due_at(world.runtime.now_ms())
        driver = self.drivers.get(schedule_id)
        if not node.alive or driver is None or occurrence_ms is None:
            return False
        world.record_fault(node, f"alarm.{schedule_id}", DUPLICATE_WAKE, delivery or 0)
        world.runtime.spawn_on(node, f"alarm:{schedule_id}@{occurrence_ms}", _alarm(driver, occurrence_ms))
        retired_ms = self._last_retired.get(schedule_id)
        if retired_ms is not None and retired_ms < occurrence_ms:
            world.runtime.spawn_on(node, f"alarm:{schedule_id}@{retired_ms}", _alarm(driver, retired_ms))
        return True

    # -- what the checks read of the application (never through a node) ------------

    def deployed_contracts(self, key: str):
        return self._chains[(self._schedule_of_key[key], _chain_build(self.build).name)]

    def every_contract(self, key: str):
        """Every contract version the key has ever had (v3's chain holds v1..v3)."""
        return self._chains[(self._schedule_of_key[key], app.BUILD_V3.name)]

    def transforms_for(self, schedule_id: str):
        chain = self._chains[(schedule_id, app.BUILD_V3.name)]
        return {(a, b): t for a in (1, 2, 3) for b in (1, 2, 3)
                if a < b and (t := app.load_transform(chain, a, b)) is not None}

    def replay_flow_for(self, record: ExecutionRecord, version: int) -> Any:
        key = (record.schedule_id, version)
        flow = self._replay_flows.get(key)
        if flow is None:
            contract = self._chains[(record.schedule_id, app.BUILD_V3.name)][version]
            state = SentinelState(record.schedule_id, contract, self.replay_guard)
            flow = self._replay_flows[key] = app.make_flow(state, version, self._effects_in_replay,
                                                           paging=self.paging)
        return flow

    def replay_store_calls(self) -> int:
        return self.replay_guard.calls

    def _effects_in_replay(self, run_id: str):
        guard = self.replay_guard

        async def refuse() -> dict:
            guard.calls += 1
            raise ReplayTouchedStore(f"replay re-ran an effect of {run_id}")

        return refuse, refuse, refuse, lambda reading: refuse

    # -- what the on-call operator asks of the application ------------------------------

    def page_delivered(self, run_id: str, step_id: str) -> Any:
        """The recorded output of an in-doubt page, if the pager received it
        (its history for the run: the first page's incident); None if not."""
        received = self.pager.received(run_id, step_id)
        return {"incident": received[0][1]} if received else None

    def page_again(self, node: Node):
        """How the operator on ``node`` re-sends a page the pager never
        received: ``redrive(run_id, step_id, steps)`` pages through the
        operator's own binding (never faulted) and returns the output to
        record. The reading is the run's own, from its recorded stats step."""
        pager = bind_pager(self.world, node, self.pager, faults=False)

        async def redrive(run_id: str, step_id: str, steps: Sequence[Any]) -> dict:
            (stats,) = [s.output for s in steps if s.step_id == "stats" and s.kind == STEP_COMPLETED]
            return {"incident": await pager.page(run_id, step_id, app.reading_of(stats))}

        return redrive

    # -- observation ------------------------------------------------------------------

    def _on_system_event(self, event: tuple) -> None:
        kind, fields = event.kind, event.fields
        if "error" in fields or fields.get("deleted") is False or not self.emitted_by_me(event):
            return
        self.system_counts[kind] = self.system_counts.get(kind, 0) + 1

    def _on_retired(self, event: tuple) -> None:
        """The last occurrence retention archived that had run (its ledger
        row deleted with it), per schedule."""
        fields = event.fields
        if SchedulesRetire.error in fields or not fields[SchedulesRetire.retired]:
            return
        if fields[SchedulesRetire.run] is None or fields[SchedulesRetire.hold]:
            return  # never ran (no alarm to redeliver), or held by a pin (its row stays)
        schedule_id, occurrence_ms = fields[SchedulesRetire.schedule], fields[SchedulesRetire.occurrence_ms]
        if schedule_id not in self.schedules:
            return  # another fleet's
        if occurrence_ms > self._last_retired.get(schedule_id, -1):
            self._last_retired[schedule_id] = occurrence_ms

    def _on_settled(self, event: tuple) -> None:
        if event.fields.get("outcome") == "failed" and self._is_my_run(conversation_of(event.fields)):
            self.runs_failed += 1

    def _is_my_run(self, conversation_id: str | None) -> bool:
        try:
            return conversation_id is not None and parse_run_id(conversation_id)[0] in self.schedules
        except ValueError:
            return False  # not a schedule's run


def build_chains(schedule_ids: Iterable[str]) -> dict[tuple[str, str], dict[int, Any]]:
    """Every build's contract chain per schedule, keyed ``(schedule id, build name)``."""
    return {(sid, b.name): app.contract_chain(sid, b.version, drop_migration=b.drop_migration)
            for sid in schedule_ids for b in BUILDS}


def worker_processes(runtime: Any, runs: Any, ports: Any, schedules: Mapping[str, Schedule], build: app.Build, *,
                     chains: Mapping[tuple[str, str], dict[int, Any]], effects: Callable[[str], Any],
                     inline_cap_bytes: int, validate_inputs: bool, paging: bool, project_every_ms: int,
                     retention_policy: RetentionPolicy, failpoints: Any = NO_FAILPOINTS,
                     probe: Probe = NULL_PROBE) -> tuple[dict[str, ScheduleDriver], list[tuple[str, Any]]]:
    """The worker process of ``build``: a schedule driver per sentinel, the
    findings projector and daily retention, over ``runs`` (the execution
    store) and ``ports`` (``ds``, ``ledger``, ``log``, ``schedules``,
    ``content``, ``pins``, ``findings``). Returns the drivers by schedule and
    the process's tasks as ``(name, coroutine)``, in the order to spawn them.
    The one wiring of a wake: the fleet calls it with the run's ports, the
    direct driver (``scenarios.workloads.direct``) with the bare stores."""
    claim_check = ClaimCheck(ports.content, ports.pins, now_ms=runtime.now_ms, cap_bytes=inline_cap_bytes,
                             digests={app.STATS_TOOL: app.stats_digest})
    input_schemas = {build.version: app.validate_input} if validate_inputs else None
    drivers: dict[str, ScheduleDriver] = {}
    processes: list[tuple[str, Any]] = []
    for schedule_id, schedule in schedules.items():
        chain = chains[(schedule_id, _chain_build(build).name)]
        state = SentinelState(schedule_id, chain[build.version], ports.ds, probe=probe, failpoints=failpoints)
        flow = app.make_flow(state, build.version, effects, paging=paging)
        transforms = {(v, build.version): t for v in (1, 2, 3)
                      if v != build.version and (t := app.load_transform(chain, v, build.version)) is not None}
        # The kernel's execution store is the runs layer itself: its
        # faults and trace live in the ledger, log and cursor calls under it.
        kernel = Kernel(runtime, runs, probe=probe, failpoints=failpoints, middleware=(claim_check,),
                        transforms=transforms, input_schemas=input_schemas)
        driver = ScheduleDriver(schedule, kernel, runtime, flow_for=lambda version, f=flow: f,
                                deployed_version=lambda v=build.version: v, input_for=app.run_input,
                                probe=probe)
        drivers[schedule_id] = driver
        processes.append((f"schedule:{schedule_id}", driver.run_forever()))
    retention = Retention(ledger=ports.ledger, log=ports.log, schedules=ports.schedules,
                          findings=ports.findings, pins=ports.pins, content=ports.content,
                          policy=retention_policy, probe=probe)
    in_order = [s for _, s in sorted(schedules.items())]
    processes.append(("projector", project_forever(ports.ledger, ports.findings, ports.pins, in_order, runtime,
                                                   every_ms=project_every_ms)))
    processes.append(("retention", retention_forever(retention, in_order, runtime)))
    return drivers, processes


def wake_effects(run_id: str, *, runtime: Any, streams: Any, prefix: str, period_ms: Callable[[str], int],
                 alarm_on_time: Callable[[str, int], None], pager: Callable[[], Any]):
    """The effects of one wake, ``app.make_flow``'s ``effects(run_id)``:
    ``(stats, explain, publish, page)``. Shared by the fleet and the direct
    driver (``scenarios.workloads.direct``), so both run the same wakes.
    ``prefix``: the fleet's instance name (its streams' namespace);
    ``period_ms(run_id)``: its schedule's period (a slow publish lasts 1.0x
    to 1.5x of it); ``alarm_on_time(run_id, busy_until_ms)``: told of a slow
    publish before it sleeps; ``pager()``: the pager as the worker's current
    process reaches it, read when a page is sent."""

    # Drawn from the run's own workload stream: a re-run after a crash
    # observes the same telemetry, so the effects are idempotent.
    async def stats() -> dict:
        rng = streams.fork(f"{prefix}/{run_id}")
        await runtime.sleep_ms(rng.between(*app.STATS_LATENCY_MS))
        return app.stats_payload(rng, run_id)

    async def explain() -> dict:
        rng = streams.fork(f"{prefix}/{run_id}/explain")
        await runtime.sleep_ms(rng.between(*app.EXPLAIN_LATENCY_MS))
        return app.explain_payload(rng, run_id)

    async def publish() -> dict:
        rng = streams.fork(f"{prefix}/{run_id}/publish")
        latency_ms = rng.between(*app.PUBLISH_LATENCY_MS)
        if rng.below(app.SLOW_PUBLISH_ONE_IN) == 0:
            latency_ms = period_ms(run_id) * rng.between(*app.SLOW_PUBLISH_PERIODS) // 100
            alarm_on_time(run_id, runtime.now_ms() + latency_ms)
        await runtime.sleep_ms(latency_ms)
        return {"published": True}

    def page(reading: int):
        async def send() -> dict:
            rng = streams.fork(f"{prefix}/{run_id}/page")
            await runtime.sleep_ms(rng.between(*app.PAGE_LATENCY_MS))
            return {"incident": await pager().page(run_id, app.PAGE_STEP, reading)}

        return send

    return stats, explain, publish, page


def _chain_build(build: app.Build) -> app.Build:
    return app.BUILD_V1 if build is app.BUILD_V1_ROLLBACK else build


async def _alarm(driver: ScheduleDriver, occurrence_ms: int) -> None:
    try:
        await driver.wake(occurrence_ms)
    except Exception as error:
        if not is_retryable(error):
            raise  # a transient failure: this delivery is lost, the driver's own wake is not
