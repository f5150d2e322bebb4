"""sentinel-year: sentinels waking every 5 minutes for a simulated year.

The world: durable stores (memory, or one SQLite file) that outlive every
crash; one worker process running a schedule driver per sentinel; an
operator who now and then edits a sentinel's state by hand (a genuinely
concurrent writer: DS-4's tripwire must fire, never adopt); a deploy that
bumps the state contract v1 -> v2 with a migration part-way through.

Each wake is a bounded run: load carry state, observe (deterministic
telemetry drawn from the workload stream, taking simulated time), save with
CAS. Faults: crashes before store calls, lost acks after commits, crashes at
model failpoints, kill -9 at arbitrary moments, duplicate alarm deliveries.
They stop for the last day (heal) so the run shows it settles.

Phases, FoundationDB style: setup -> run with faults -> heal -> settle -> audit.
"""
from __future__ import annotations

from typing import Any

from faults.chaos import kill_nodes
from faults.describe import DURABLE_STATE_DESCRIBERS, KERNEL_DESCRIBERS
from faults.kinds import ACK_LOST, CRASH_BEFORE_CALL, DUPLICATE_WAKE, FAILPOINT_CRASH
from faults.plan import FaultPlan
from faults.ports import BoundPort, PortStats, SimFailpoints
from model.durable_state.contracts import StateContract
from model.durable_state.handle import SentinelState, sentinel_state
from model.durable_state.memory_store import InMemoryDurableStateStore
from model.durable_state.sqlite_store import SqliteDurableStateStore
from model.durable_state.store import DurableStateWrite, RevisionConflictError
from model.kernel.kernel import Kernel
from model.kernel.memory_store import InMemoryExecutionStore
from model.kernel.records import ExecutionRecord
from model.kernel.sqlite_store import SqliteExecutionStore
from model.schedules import Schedule, ScheduleDriver, run_id_for
from scenarios.invariants import AdoptOwnWrite, CasLinear, ContractSafety, ExactlyOnceWake, ReplayDeterminism
from scenarios.registry import scenario
from scenarios.storage import RunDatabase, run_sync
from sim.clock import MS_PER_DAY, MS_PER_HOUR, MS_PER_MINUTE, MS_PER_SECOND
from sim.node import Node
from sim.scenario import Param, ScenarioOptions
from sim.world import World

WAKE_EVERY_MS = 5 * MS_PER_MINUTE
OBSERVE_LATENCY_MS = (20, 2_000)
READING_MAX = 1_000
WINDOW_MAX = 8
HEAL_MS_MAX = MS_PER_DAY
SETTLE_MS = MS_PER_HOUR
RESTART_DELAY_MS = (1 * MS_PER_SECOND, 60 * MS_PER_SECOND)  # < one cadence: no wake is missed
NODE_KILL_EVERY_MS = (6 * MS_PER_HOUR, 6 * MS_PER_DAY)
DUPLICATE_WAKE_EVERY_MS = (2 * MS_PER_HOUR, 3 * MS_PER_DAY)
OPERATOR_EDITS_PER_YEAR = 12
RETENTION_KEEP_MS = MS_PER_DAY

# Per-hit probabilities of the default fault mix. ~7 port calls per wake
# make ~75 crashes of each kind in a year: a busy year, not a quiet one.
DEFAULT_RATES = {CRASH_BEFORE_CALL: 1e-4, ACK_LOST: 1e-4, FAILPOINT_CRASH: 2e-4}


# -- the application: contracts and the sentinel flow --------------------------

def _counters_ok(payload: dict) -> bool:
    wakes, total, last = payload["wakes"], payload["total"], payload["last"]
    return (type(wakes) is int and type(total) is int and type(last) is int
            and wakes >= 0 and total >= 0 and last >= 0)


def _validate_v1(payload: Any) -> str | None:
    if type(payload) is not dict or len(payload) != 3 or not ("wakes" in payload and "total" in payload
                                                              and "last" in payload):
        return "v1 state is {wakes, total, last}"
    if not _counters_ok(payload):
        return "v1 fields are non-negative integers"
    return None


def _validate_v2(payload: Any) -> str | None:
    if type(payload) is not dict or len(payload) != 4 or not ("wakes" in payload and "total" in payload
                                                              and "last" in payload and "window" in payload):
        return "v2 state is {wakes, total, last, window}"
    if not _counters_ok(payload):
        return "v2 counters are non-negative integers"
    window = payload["window"]
    if type(window) is not list or len(window) > WINDOW_MAX:
        return f"v2 window is a list of at most {WINDOW_MAX} readings"
    for reading in window:
        if type(reading) is not int:
            return f"v2 window is a list of at most {WINDOW_MAX} readings"
    return None


def _migrate_1_to_2(payload: dict) -> dict:
    return {**payload, "window": [payload["last"]] if payload["wakes"] else []}


def sentinel_contracts(schedule_id: str) -> dict[int, StateContract]:
    contract_id, _ = sentinel_state(schedule_id)
    return {
        1: StateContract(contract_id, 1, _validate_v1),
        2: StateContract(contract_id, 2, _validate_v2, {1: _migrate_1_to_2}),
    }


def _initial(version: int) -> dict:
    state = {"wakes": 0, "total": 0, "last": 0}
    return state if version == 1 else {**state, "window": []}


def _advance(version: int, payload: dict, observation: dict) -> dict:
    reading = observation["reading"]
    state = {"wakes": payload["wakes"] + 1, "total": payload["total"] + reading, "last": reading}
    if version >= 2:
        state["window"] = (payload["window"] + [reading])[-WINDOW_MAX:]
    return state


def make_flow(state: SentinelState, version: int, observe_for: Any):
    async def sentinel_flow(ctx: Any, flow_input: Any) -> dict:
        loaded = await state.load(ctx)
        revision, payload = (0, _initial(version)) if loaded is None else (loaded["revision"], loaded["payload"])
        observation = await ctx.execute("observe", observe_for(ctx.run_id), idempotent=True, writes=False)
        saved = await state.save(ctx, _advance(version, payload, observation), revision)
        return {"revision": saved["revision"], "wakes": payload["wakes"] + 1}

    return sentinel_flow


class ReplayTouchedStore(Exception):
    name = "ReplayTouchedStore"


class _ReplayGuardStore:
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


# -- the world -----------------------------------------------------------------

class SentinelYear:
    def __init__(self, world: World, opts: ScenarioOptions) -> None:
        self.world = world
        self.opts = opts
        runtime = world.runtime
        self.duration_ms = opts.duration_ms
        self.heal_at_ms = opts.duration_ms - min(HEAL_MS_MAX, opts.duration_ms // 10)
        self.end_ms = opts.duration_ms + SETTLE_MS
        self._open_stores(opts)
        self.plan = FaultPlan(world.streams["faults"], runtime.now_ms, rates=DEFAULT_RATES,
                              heal_at_ms=self.heal_at_ms)
        self.port_stats = PortStats()
        self.chaos = world.streams["chaos"]
        self.workload = world.streams["workload"]
        count = opts.params.get("sentinels", 1)
        self.schedules = {
            f"sentinel-{i}": Schedule(f"sentinel-{i}", WAKE_EVERY_MS, end_ms=opts.duration_ms) for i in range(count)
        }
        self.contracts = {sid: sentinel_contracts(sid) for sid in self.schedules}
        self._contracts_by_key = {sentinel_state(sid)[1]: c for sid, c in self.contracts.items()}
        self.deployed_version = 1
        self.drivers: dict[str, ScheduleDriver] = {}
        self.replay_guard = _ReplayGuardStore()
        self._replay_flows: dict[tuple[str, int], Any] = {}
        self.wake_checker = ExactlyOnceWake(self.schedules, end_ms=opts.duration_ms)
        self.adopt_checker = AdoptOwnWrite()
        self.contract_checker = ContractSafety(self._contracts_by_key.__getitem__)
        self.replay_checker = ReplayDeterminism(self._replay_flow_for, lambda: self.replay_guard.calls)
        world.check(CasLinear(), self.adopt_checker, self.wake_checker, self.replay_checker, self.contract_checker)
        self.runs_failed = 0
        world.trace.subscribe(("kernel.finish_execution",), self._on_finish)

        # Phase: setup. Durable stores first, then processes.
        world.add_node("worker-1", self._start_worker)
        self.operator = world.add_node("operator", lambda node: None, role="operator")
        self._operator_ds = BoundPort(world, self.operator, "ds", self.ds_store, None,
                                      DURABLE_STATE_DESCRIBERS, PortStats(), lambda: 0)
        # Phase: run with faults (each stops at heal_at_ms).
        world.spawn_harness("chaos:node-kill", kill_nodes(
            world, self.chaos, every_ms=NODE_KILL_EVERY_MS, pick=lambda: "worker-1",
            restart_after_ms=self._restart_delay_ms, until_ms=self.heal_at_ms))
        world.spawn_harness("chaos:duplicate-wake", self._duplicate_wakes())
        self._plan_operator_edits()
        deploy_at_ms = self.chaos.between(opts.duration_ms // 4, opts.duration_ms * 13 // 20)
        world.at(deploy_at_ms, self._deploy_v2, label="deploy v2")

    # -- stores ------------------------------------------------------------

    def _open_stores(self, opts: ScenarioOptions) -> None:
        self._database: RunDatabase | None = None
        if opts.store == "memory":
            self.ds_store: Any = InMemoryDurableStateStore()
            self.kernel_store: Any = InMemoryExecutionStore()
            return
        self._database = RunDatabase(opts.db_path, file_name="sentinel-year.db")
        self.ds_store = SqliteDurableStateStore(self._database.conn)
        self.kernel_store = SqliteExecutionStore(self._database.conn)

    def close(self) -> None:
        if self._database is not None:
            self._database.close()

    # -- processes -----------------------------------------------------------

    def _restart_delay_ms(self) -> int:
        return self.chaos.between(*RESTART_DELAY_MS)

    def _start_worker(self, node: Node) -> None:
        world = self.world
        runtime = world.runtime
        probe = world.probe_for(node)
        failpoints = SimFailpoints(world, node, self.plan, self._restart_delay_ms)
        ds = BoundPort(world, node, "ds", self.ds_store, self.plan, DURABLE_STATE_DESCRIBERS,
                       self.port_stats, self._restart_delay_ms)
        ks = BoundPort(world, node, "kernel", self.kernel_store, self.plan, KERNEL_DESCRIBERS,
                       self.port_stats, self._restart_delay_ms)
        kernel = Kernel(runtime, ks, probe=probe, failpoints=failpoints)
        for schedule_id, schedule in self.schedules.items():
            flows = {
                version: make_flow(SentinelState(schedule_id, contract, ds, probe=probe, failpoints=failpoints),
                                   version, self._observe_for)
                for version, contract in self.contracts[schedule_id].items()
            }
            driver = ScheduleDriver(schedule, kernel, runtime, flow_for=flows.__getitem__,
                                    deployed_version=lambda: self.deployed_version, probe=probe)
            self.drivers[schedule_id] = driver
            runtime.spawn_on(node, f"schedule:{schedule_id}", driver.run_forever())
        runtime.spawn_on(node, "retention", self._retention(ks))

    def _observe_for(self, run_id: str):
        runtime = self.world.runtime
        streams = self.world.streams

        async def observe() -> dict:
            # Drawn from the run's own workload stream: a re-run after a
            # crash observes the same telemetry, so the effect is idempotent.
            rng = streams.fork(f"workload/{run_id}")
            latency_ms = rng.between(*OBSERVE_LATENCY_MS)
            await runtime.sleep_ms(latency_ms)
            return {"reading": rng.between(0, READING_MAX), "latency_ms": latency_ms}

        return observe

    async def _retention(self, kernel_store: Any) -> None:
        runtime = self.world.runtime
        while True:
            next_midnight_ms = (runtime.now_ms() // MS_PER_DAY + 1) * MS_PER_DAY
            await runtime.sleep_until_ms(next_midnight_ms)
            await kernel_store.purge_finished(runtime.now_ms() - RETENTION_KEEP_MS)

    def _replay_flow_for(self, record: ExecutionRecord) -> Any:
        key = (record.schedule_id, record.flow_version)
        flow = self._replay_flows.get(key)
        if flow is None:
            contract = self.contracts[record.schedule_id][record.flow_version]
            state = SentinelState(record.schedule_id, contract, self.replay_guard)
            flow = self._replay_flows[key] = make_flow(state, record.flow_version, self._observe_in_replay)
        return flow

    def _observe_in_replay(self, run_id: str):
        guard = self.replay_guard

        async def observe() -> dict:
            guard.calls += 1
            raise ReplayTouchedStore(f"replay re-ran the observe effect of {run_id}")

        return observe

    # -- faults and the outside world ---------------------------------------

    async def _duplicate_wakes(self) -> None:
        runtime = self.world.runtime
        deliveries = 0
        while True:
            await runtime.sleep_ms(self.chaos.between(*DUPLICATE_WAKE_EVERY_MS))
            if runtime.now_ms() >= self.heal_at_ms:
                return
            node = self.world.nodes["worker-1"]
            schedule_id = self.chaos.choice(sorted(self.schedules))
            occurrence_ms = self.schedules[schedule_id].latest_due_at(runtime.now_ms())
            driver = self.drivers.get(schedule_id)
            if node.alive and driver is not None and occurrence_ms is not None:
                deliveries += 1
                self.world.record_fault(node, f"alarm.{schedule_id}", DUPLICATE_WAKE, deliveries)
                runtime.spawn_on(node, f"alarm:{schedule_id}@{occurrence_ms}", driver.wake(occurrence_ms))

    def _plan_operator_edits(self) -> None:
        edits = max(1, self.duration_ms * OPERATOR_EDITS_PER_YEAR // (365 * MS_PER_DAY))
        schedule_ids = sorted(self.schedules)
        for _ in range(edits):
            schedule_id = self.chaos.choice(schedule_ids)
            wake = self.chaos.below(max(1, self.heal_at_ms // WAKE_EVERY_MS))
            # Inside the observe window of that wake: between its load and save.
            at_ms = wake * WAKE_EVERY_MS + self.chaos.between(1, OBSERVE_LATENCY_MS[1] * 3 // 4)
            self.world.at(at_ms, lambda sid=schedule_id: self._operator_edit(sid), label="operator edit")

    def _operator_edit(self, schedule_id: str) -> None:
        self.world.runtime.spawn_on(self.operator, f"edit:{schedule_id}", self._edit(sentinel_state(schedule_id)[1]))

    async def _edit(self, key: str) -> None:
        record = await self._operator_ds.load(key)
        if record is None:
            return
        edited = {**record.payload, "total": 0}
        try:
            await self._operator_ds.save(key, DurableStateWrite(record.contract_version, edited), record.revision)
        except RevisionConflictError:
            return
        self.world.count("operator.edits")

    def _deploy_v2(self) -> None:
        """A deploy: new code (contract v2) and a rolling restart of the worker."""
        self.deployed_version = 2
        self.world.count("deploys")
        self.world.emit("deploy", version=2)
        node = self.world.nodes["worker-1"]
        if node.alive:
            self.world.crash(node, restart_after_ms=self._restart_delay_ms())

    # -- results -----------------------------------------------------------

    def _on_finish(self, event: tuple) -> None:
        if event[4].get("final_status") == "failed":
            self.runs_failed += 1

    def audit_view(self) -> "SentinelYear":
        return self

    def durable_state_snapshot(self, key: str) -> Any:
        return run_sync(self.ds_store.load(key))

    def live_runs(self, schedule_id: str) -> tuple[str, ...]:
        return tuple(r.run_id for r in run_sync(self.kernel_store.live_executions(schedule_id)))

    def schedule_high_water_ms(self, schedule_id: str) -> int | None:
        return run_sync(self.kernel_store.schedule_high_water_ms(schedule_id))

    def retained_runs(self):
        """(record, log) of every run retention has not purged yet, read from the store."""
        retained_ms = RETENTION_KEEP_MS + MS_PER_DAY + SETTLE_MS
        for schedule_id, schedule in sorted(self.schedules.items()):
            last_ms = self.schedule_high_water_ms(schedule_id)
            if last_ms is None:
                continue
            start_ms = schedule.latest_due_at(max(schedule.first_ms, last_ms - retained_ms))
            assert start_ms is not None
            for occurrence_ms in range(start_ms, last_ms + 1, schedule.every_ms):
                record = run_sync(self.kernel_store.load_execution(run_id_for(schedule_id, occurrence_ms)))
                if record is not None:
                    yield record, run_sync(self.kernel_store.load_steps(record.run_id))

    def stats(self) -> dict[str, Any]:
        counters = self.world.counters
        return {
            "wakes": self.wake_checker.started,
            "wakes_skipped": self.wake_checker.skipped,
            "worker_crashes": counters.get("node.crashes", 0),
            "adopted_saves": self.adopt_checker.adoptions,
            "save_conflicts": self.adopt_checker.conflicts,
            "migrations_applied": self.contract_checker.migrations,
            "contract_rejections": self.contract_checker.rejections,
            "runs_failed": self.runs_failed,
            "replays_verified": self.replay_checker.replays,
            "operator_edits": counters.get("operator.edits", 0),
            "deploys": counters.get("deploys", 0),
            "store_calls": self.port_stats.calls,
            "kernel_store_rows": self.kernel_store.counts(),
        }


@scenario("sentinel-year", "sentinels waking every 5 minutes for a year: carry state, crashes, a contract migration",
          duration="365d", params=(Param("sentinels", 1, "number of sentinel schedules", 1, 1_000),))
def build(world: World, opts: ScenarioOptions) -> SentinelYear:
    return SentinelYear(world, opts)
