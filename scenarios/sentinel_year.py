"""sentinel-year: sentinels waking every 5 minutes for a simulated year, on the whole system.

The world: durable stores (memory, or one SQLite file) that outlive every
crash — durable state, the submission ledger, the conversation logs, the
schedule cursors and run archive, the content store with its pin index, and
the findings projection; one worker process running a schedule driver per
sentinel, a findings projector and daily retention; an operator who now and
then edits a sentinel's state by hand (a genuinely concurrent writer: DS-4's
tripwire must fire, never adopt); deploys that evolve the state contract
v1 -> v2 -> v3, one of them deliberately broken and then fixed.

Each wake (``scenarios.sentinel_app``) is admitted to the ledger with its
run id as idempotency key, claimed under a lease, run as a bounded flow
whose steps are fenced appends to its own conversation log, and settled by
reserve -> append -> finalize (``model.runs``). Large telemetry goes through
the claim-check middleware; findings cite evidence refs; retention archives
old runs and reclaims blobs except what live findings pin.

Faults: crashes before store calls, lost acks after commits, crashes at
every model failpoint, kill -9 at arbitrary moments, duplicate alarm
deliveries. They stop for the last day (heal) so the run shows it settles.

Phases, FoundationDB style: setup -> run with faults -> heal -> settle -> audit.
"""
from __future__ import annotations

from typing import Any

import attrs

from faults.chaos import kill_nodes, replay_kills
from faults.describe import DURABLE_STATE_DESCRIBERS, LEDGER_DESCRIBERS, LOG_DESCRIBERS, SCHEDULE_DESCRIBERS
from faults.kinds import (
    ACK_LOST,
    CRASH_BEFORE_CALL,
    DUPLICATE_WAKE,
    FAILPOINT_CRASH,
    LATENCY,
    NODE_KILL,
    TRANSIENT_ERROR,
    WRITE_CONTENTION,
)
from faults.beyond import DurableStateSurgery, LogSurgery, beyond_enabled, beyond_rates
from faults.plan import make_plan
from faults.swarm import Knob, SwarmSpace, choose_for
from faults.ports import BoundPort, PortStats, SimFailpoints
from model.claimcheck import INLINE_CAP_BYTES_DEFAULT, ClaimCheck
from model.failpoints import (
    ADMITTED_BEFORE_READY,
    APPENDED_BEFORE_FINALIZE,
    CLAIMED_BEFORE_INPUT,
    DURABLE_STATE_SAVE_AFTER_STORE_WRITE,
    FINALIZED_BEFORE_REPLY,
    INPUT_APPENDED_BEFORE_MARKER,
    KERNEL_EFFECT_DONE_BEFORE_RECORD,
    READY_BEFORE_RECEIPT,
    RESERVED_BEFORE_APPEND,
)
from model.sqlite_db import BUSY_TIMEOUT_MS_DEFAULT
from model.conversation.content_store import InMemoryContentStore, SqliteContentStore
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.sqlite_store import SqliteConversationStore
from model.durable_state.handle import SentinelState, sentinel_state
from model.durable_state.memory_store import InMemoryDurableStateStore
from model.durable_state.sqlite_store import SqliteDurableStateStore
from model.durable_state.store import DurableStateWrite, RevisionConflictError
from model.findings import InMemoryFindingsProjection, SqliteFindingsProjection
from model.kernel.kernel import Kernel, is_retryable
from model.kernel.records import ExecutionRecord
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.pins import InMemoryPinIndex, SqlitePinIndex
from model.repair import rebuild_ledger
from model.retention import Retention, RetentionPolicy
from model.runs import SETTLED_FAMILY, STEP_FAMILY, LedgerRuns
from model.schedule_store import InMemoryScheduleStore, SqliteScheduleStore
from model.schedules import Schedule, ScheduleDriver, parse_run_id, run_id_for
from scenarios import sentinel_app as app
from scenarios.invariants import (
    AdoptOwnWrite,
    BoundedRun,
    BrokenDeploys,
    CasLinear,
    ClaimCheckInvariant,
    ContractSafety,
    ExactlyOnceSettlement,
    ExactlyOnceWake,
    FindingsProjection,
    Liveness,
    PinsSurvive,
    ReplayDeterminism,
)
from scenarios.registry import scenario
from scenarios.storage import RunDatabase, run_sync
from sim.clock import MS_PER_DAY, MS_PER_HOUR, MS_PER_MINUTE, MS_PER_SECOND
from sim.node import Node
from sim.scenario import Param, ScenarioOptions
from sim.world import World

WAKE_EVERY_MS = 5 * MS_PER_MINUTE
HEAL_MS_MAX = MS_PER_DAY
SETTLE_MS = MS_PER_HOUR
RESTART_DELAY_MS = (1 * MS_PER_SECOND, 60 * MS_PER_SECOND)
# One kill in OUTAGE_ONE_IN is an outage: the worker stays down long enough
# to miss wakes, so catch-up ("run the latest, record the skipped") happens.
OUTAGE_ONE_IN = 6
OUTAGE_MS = (10 * MS_PER_MINUTE, 45 * MS_PER_MINUTE)
NODE_KILL_EVERY_MS = (6 * MS_PER_HOUR, 6 * MS_PER_DAY)
DUPLICATE_WAKE_EVERY_MS = (2 * MS_PER_HOUR, 3 * MS_PER_DAY)
OPERATOR_EDITS_PER_YEAR = 12
LEASE_MS = 30 * MS_PER_SECOND
PROJECT_EVERY_MS = MS_PER_HOUR  # projection lag is bounded by this; retention waits for it
RETENTION = RetentionPolicy(run_ttl_ms=MS_PER_DAY, blob_ttl_ms=2 * MS_PER_DAY, finding_ttl_ms=7 * MS_PER_DAY)
BROKEN_WINDOW_MS = (MS_PER_HOUR, 6 * MS_PER_HOUR)

# Per-hit probabilities of the default fault mix: ~20 port calls per wake
# make a few hundred crashes of each kind in a year.
DEFAULT_RATES = {CRASH_BEFORE_CALL: 2e-5, ACK_LOST: 2e-5, FAILPOINT_CRASH: 1e-4, TRANSIENT_ERROR: 2e-5,
                 WRITE_CONTENTION: 1e-5, LATENCY: 1e-5}
# The failpoints a sentinel wake passes (the submission worker's step point
# belongs to ledger-storm's worker, not to runs).
FAILPOINTS = (DURABLE_STATE_SAVE_AFTER_STORE_WRITE, KERNEL_EFFECT_DONE_BEFORE_RECORD, ADMITTED_BEFORE_READY,
              READY_BEFORE_RECEIPT, CLAIMED_BEFORE_INPUT, INPUT_APPENDED_BEFORE_MARKER, RESERVED_BEFORE_APPEND,
              APPENDED_BEFORE_FINALIZE, FINALIZED_BEFORE_REPLY)
OPERATOR_EDITS = "operator-edits"
# The operator edits state out of band (not a run of any build).
OPERATOR_NODE = "operator"


def _operator(node_label: str) -> bool:
    return node_label.partition("#")[0] == OPERATOR_NODE
SWARM = SwarmSpace(
    fault_kinds=(CRASH_BEFORE_CALL, ACK_LOST, FAILPOINT_CRASH, NODE_KILL, DUPLICATE_WAKE, TRANSIENT_ERROR,
                 WRITE_CONTENTION, LATENCY),
    failpoints=FAILPOINTS,
    failpoint_rate=DEFAULT_RATES[FAILPOINT_CRASH],
    workload=(OPERATOR_EDITS,),
    knobs=(Knob("lease_ms", LEASE_MS, 10 * MS_PER_SECOND, 120 * MS_PER_SECOND, "run claim lease"),
           Knob("inline_cap_bytes", INLINE_CAP_BYTES_DEFAULT, 4_096, 65_536, "claim-check inline cap"),
           Knob("busy_timeout_ms", BUSY_TIMEOUT_MS_DEFAULT, 100, 10_000, "SQLite busy timeout")),
)
# What a sweep should see happen somewhere (``sometimes`` properties):
# stats that must be non-zero in at least one seed.
SOMETIMES = ("adopted_saves", "save_conflicts", "wakes_skipped", "claim_checked_payloads", "findings",
             "blobs_reclaimed", "runs_held_by_pins", "broken_deploys_caught", "runs_migrated_on_resume",
             "runs_failed_migration_missing", "worker_crashes", "transient_retries")


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


CONTENT_DESCRIBERS = {
    "put": lambda args, kwargs, ref: {"size": len(args[0]), "ref": ref},
    "get": lambda args, kwargs, data: {"ref": args[0]},
    "has": lambda args, kwargs, found: {"ref": args[0], "found": found},
    "delete": lambda args, kwargs, deleted: {"ref": args[0], "deleted": deleted},
}
PIN_DESCRIBERS = {
    "record_blob": lambda args, kwargs, _: {"ref": args[0], "size": args[1], "stored_at_ms": kwargs["stored_at_ms"]},
    "pin": lambda args, kwargs, new: {"ref": args[0], "holder": args[1], "new": new},
    "unpin": lambda args, kwargs, gone: {"ref": args[0], "holder": args[1], "removed": gone},
    "is_pinned": lambda args, kwargs, pinned: {"ref": args[0], "pinned": pinned},
    "pinned_refs": lambda args, kwargs, refs: {"refs": None if refs is None else len(refs)},
    "holders": lambda args, kwargs, holders: {"ref": args[0], "holders": holders},
    "expired_unpinned": lambda args, kwargs, refs: {"before_ms": args[0], "refs": refs},
    "blob": lambda args, kwargs, blob: {"ref": args[0], "found": blob is not None},
    "forget": lambda args, kwargs, gone: {"ref": args[0], "forgotten": gone},
}
FINDINGS_DESCRIBERS = {
    "apply_run": lambda args, kwargs, n: {"schedule": args[0], "occurrence_ms": args[1], "run": args[2],
                                          "findings": len(args[3]), "opened": n},
    "checkpoint": lambda args, kwargs, cp: {"schedule": args[0], "checkpoint_ms": cp},
    "advance_checkpoint": lambda args, kwargs, _: {"schedule": args[0], "occurrence_ms": args[1]},
    "close_expired": lambda args, kwargs, closed: {"before_ms": args[0],
                                                   "closed": None if closed is None else len(closed)},
    "live_findings": lambda args, kwargs, live: {"live": None if live is None else len(live)},
    "live_for_run": lambda args, kwargs, live: {"run": args[0], "live": None if live is None else len(live)},
}


class SentinelYear:
    def __init__(self, world: World, opts: ScenarioOptions) -> None:
        self.world = world
        self.opts = opts
        runtime = world.runtime
        self.duration_ms = opts.duration_ms
        self.heal_at_ms = opts.duration_ms - min(HEAL_MS_MAX, opts.duration_ms // 10)
        self.end_ms = opts.duration_ms + SETTLE_MS
        self.swarm = choices = choose_for(world, opts, SWARM)
        self._open_stores(opts)
        self.lease_ms = choices.knob("lease_ms")
        self.inline_cap_bytes = choices.knob("inline_cap_bytes")
        rates = {kind: rate for kind, rate in DEFAULT_RATES.items() if choices.enabled(kind)}
        rates.update(beyond_rates(opts))
        # Where the stores may break their promises, retention scrubs each
        # run's log before archiving it (``RetentionPolicy.verify_before_archive``).
        self.retention_policy = attrs.evolve(RETENTION, verify_before_archive=beyond_enabled(opts))
        # Beyond the contract: the log and durable state may break their promises.
        self.surgeries = {"log": LogSurgery(self.log), "ds": DurableStateSurgery(self.ds_store)} if (
            beyond_enabled(opts)) else {}
        self.plan = make_plan(world, opts, rates=rates, heal_at_ms=self.heal_at_ms,
                              site_rates=choices.site_rates(FAILPOINTS, FAILPOINT_CRASH)
                              if choices.enabled(FAILPOINT_CRASH) else None)
        self.port_stats = PortStats()
        self.chaos = world.streams["chaos"]
        self.workload = world.streams["workload"]
        self.validate_inputs = bool(opts.params.get("validate_inputs", 1))
        count = opts.params.get("sentinels", 1)
        self.schedules = {
            f"sentinel-{i}": Schedule(f"sentinel-{i}", WAKE_EVERY_MS, end_ms=opts.duration_ms) for i in range(count)
        }
        self.build = app.BUILD_V1
        self.builds_deployed: list[str] = [self.build.name]
        self.drivers: dict[str, ScheduleDriver] = {}
        self.claim_checks: list[ClaimCheck] = []
        self.replay_guard = _ReplayGuardStore()
        self._replay_flows: dict[tuple[str, int], Any] = {}
        self._chains = {(sid, b.name): app.contract_chain(sid, b.version, drop_migration=b.drop_migration)
                        for sid in self.schedules
                        for b in (app.BUILD_V1, app.BUILD_V2, app.BUILD_V3, app.BUILD_V3_NO_MIGRATION)}
        self._schedule_of_key = {sentinel_state(sid)[1]: sid for sid in self.schedules}
        self.wake_checker = ExactlyOnceWake(self.schedules, end_ms=opts.duration_ms)
        self.adopt_checker = AdoptOwnWrite()
        self.contract_checker = ContractSafety(self._deployed_contracts, out_of_band=_operator,
                                               every_contract_for_key=self._every_contract)
        self.replay_checker = ReplayDeterminism(self._replay_flow_for, lambda: self.replay_guard.calls,
                                                transforms_for=self._transforms_for)
        self.deploy_checker = BrokenDeploys(out_of_band=_operator)
        self.claim_checker = ClaimCheckInvariant(self._content_now, {"stats": app.stats_digest},
                                                 cap_bytes=self.inline_cap_bytes)
        self.pins_checker = PinsSurvive(self._live_evidence, self._content_has, self._expired_unpinned_blobs,
                                        blob_ttl_ms=RETENTION.blob_ttl_ms)
        self.bounded_checker = BoundedRun(records_max=16)
        self.settlement_checker = ExactlyOnceSettlement()
        # The deploy gate first: a broken build's load or save is its finding,
        # before contract-safety's more general one about the same event.
        world.check(self.deploy_checker, CasLinear(), self.adopt_checker, self.wake_checker, self.replay_checker,
                    self.contract_checker, self.claim_checker, self.pins_checker, self.bounded_checker,
                    self.settlement_checker,
                    FindingsProjection(lambda: run_sync(self.findings.live_findings()),
                                       lambda sid: run_sync(self.findings.checkpoint(sid)),
                                       finding_ttl_ms=RETENTION.finding_ttl_ms),
                    Liveness())
        self.runs_failed = 0
        self.system_counts: dict[str, int] = {}
        world.trace.subscribe(("ledger.finalize_settlement",), self._on_settled)
        world.trace.subscribe(("run.migration_missing", "kernel.input_rejected", "kernel.migrated", "driver.retry",
                               "log.delete_conversation", "content.delete"), self._on_system_event)

        # Phase: setup. Durable stores first, then processes.
        world.add_node("worker-1", self._start_worker)
        self.operator = world.add_node(OPERATOR_NODE, lambda node: None, role="operator")
        self._operator_ds = BoundPort(world, self.operator, "ds", self.ds_store, None,
                                      DURABLE_STATE_DESCRIBERS, PortStats(), lambda: 0)
        # Phase: run with faults (each stops at heal_at_ms), or replay a script.
        if self.plan.scripted:
            replay_kills(world, self.plan.timed(NODE_KILL))
            for event in self.plan.timed(DUPLICATE_WAKE):
                world.at(event.time_ms, lambda e=event: self._deliver_again(e.site.removeprefix("alarm."), e.hit),
                         label="scripted duplicate wake")
        else:
            if choices.enabled(NODE_KILL):
                world.spawn_harness("chaos:node-kill", kill_nodes(
                    world, self.chaos, every_ms=NODE_KILL_EVERY_MS, pick=lambda: "worker-1",
                    restart_after_ms=self._restart_after_kill_ms, until_ms=self.heal_at_ms))
            if choices.enabled(DUPLICATE_WAKE):
                world.spawn_harness("chaos:duplicate-wake", self._duplicate_wakes())
        if choices.does(OPERATOR_EDITS):
            self._plan_operator_edits()
        self._plan_deploys()

    # -- stores ------------------------------------------------------------

    def _open_stores(self, opts: ScenarioOptions) -> None:
        self._database: RunDatabase | None = None
        if opts.store == "memory":
            self.ds_store: Any = InMemoryDurableStateStore()
            self.ledger: Any = InMemorySubmissionLedger()
            self.log: Any = InMemoryConversationStore()
            self.schedule_store: Any = InMemoryScheduleStore()
            self.content: Any = InMemoryContentStore()
            self.pins: Any = InMemoryPinIndex()
            self.findings: Any = InMemoryFindingsProjection()
            return
        self._database = RunDatabase(opts.db_path, file_name="sentinel-year.db",
                                     busy_timeout_ms=self.swarm.knob("busy_timeout_ms"))
        conn = self._database.conn
        self.ds_store = SqliteDurableStateStore(conn)
        self.ledger = SqliteSubmissionLedger(conn)
        self.log = SqliteConversationStore(conn)
        self.schedule_store = SqliteScheduleStore(conn)
        self.content = SqliteContentStore(conn)
        self.pins = SqlitePinIndex(conn)
        self.findings = SqliteFindingsProjection(conn)

    def close(self) -> None:
        if self._database is not None:
            self._database.close()

    # -- processes -----------------------------------------------------------

    def _restart_delay_ms(self) -> int:
        return self.chaos.between(*RESTART_DELAY_MS)

    def _restart_after_kill_ms(self) -> int:
        if self.chaos.below(OUTAGE_ONE_IN) == 0:
            return self.chaos.between(*OUTAGE_MS)
        return self._restart_delay_ms()

    def _port(self, node: Node, name: str, target: Any, describers: dict, *, faults: bool = True) -> BoundPort:
        return BoundPort(self.world, node, name, target, self.plan if faults else None, describers,
                         self.port_stats, self._restart_delay_ms, surgery=self.surgeries.get(name) if faults else None)

    def _start_worker(self, node: Node) -> None:
        world = self.world
        runtime = world.runtime
        probe = world.probe_for(node)
        build = self.build
        failpoints = SimFailpoints(world, node, self.plan, self._restart_delay_ms)
        ds = self._port(node, "ds", self.ds_store, DURABLE_STATE_DESCRIBERS)
        ledger = self._port(node, "ledger", self.ledger, LEDGER_DESCRIBERS)
        log = self._port(node, "log", self.log, LOG_DESCRIBERS)
        schedules = self._port(node, "schedules", self.schedule_store, SCHEDULE_DESCRIBERS)
        content = self._port(node, "content", self.content, CONTENT_DESCRIBERS)
        pins = self._port(node, "pins", self.pins, PIN_DESCRIBERS)
        findings = self._port(node, "findings", self.findings, FINDINGS_DESCRIBERS)
        runs = LedgerRuns(ledger, log, schedules, node.label, lease_ms=self.lease_ms, now_ms=runtime.now_ms,
                          sleep_ms=runtime.sleep_ms, failpoints=failpoints, probe=probe)
        claim_check = ClaimCheck(content, pins, now_ms=runtime.now_ms, cap_bytes=self.inline_cap_bytes,
                                 digests={app.STATS_TOOL: app.stats_digest})
        self.claim_checks.append(claim_check)
        input_schemas = {build.version: app.validate_input} if self.validate_inputs else None
        for schedule_id, schedule in self.schedules.items():
            chain = self._chains[(schedule_id, self._chain_build(build).name)]
            state = SentinelState(schedule_id, chain[build.version], ds, probe=probe, failpoints=failpoints)
            flow = app.make_flow(state, build.version, self._effects)
            transforms = {(v, build.version): t for v in (1, 2, 3)
                          if v != build.version and (t := app.load_transform(chain, v, build.version)) is not None}
            # The kernel's execution store is the runs layer itself: its
            # faults and trace live in the ledger, log and cursor calls under it.
            kernel = Kernel(runtime, runs, probe=probe, failpoints=failpoints, middleware=(claim_check,),
                            transforms=transforms, input_schemas=input_schemas)
            driver = ScheduleDriver(schedule, kernel, runtime, flow_for=lambda version, f=flow: f,
                                    deployed_version=lambda v=build.version: v, input_for=app.run_input,
                                    probe=probe)
            self.drivers[schedule_id] = driver
            runtime.spawn_on(node, f"schedule:{schedule_id}", driver.run_forever())
        retention = Retention(ledger=ledger, log=log, schedules=schedules, findings=findings, pins=pins,
                              content=content, policy=self.retention_policy, probe=probe)
        runtime.spawn_on(node, "projector", self._project_forever(ledger, findings, pins))
        runtime.spawn_on(node, "retention", self._retention(retention))

    @staticmethod
    def _chain_build(build: app.Build) -> app.Build:
        return app.BUILD_V1 if build is app.BUILD_V1_ROLLBACK else build

    def _effects(self, run_id: str):
        runtime = self.world.runtime
        streams = self.world.streams

        # Drawn from the run's own workload stream: a re-run after a crash
        # observes the same telemetry, so the effects are idempotent.
        async def stats() -> dict:
            rng = streams.fork(f"workload/{run_id}")
            await runtime.sleep_ms(rng.between(*app.STATS_LATENCY_MS))
            return app.stats_payload(rng, run_id)

        async def explain() -> dict:
            rng = streams.fork(f"workload/{run_id}/explain")
            await runtime.sleep_ms(rng.between(*app.EXPLAIN_LATENCY_MS))
            return app.explain_payload(rng, run_id)

        async def publish() -> dict:
            rng = streams.fork(f"workload/{run_id}/publish")
            await runtime.sleep_ms(rng.between(*app.PUBLISH_LATENCY_MS))
            return {"published": True}

        return stats, explain, publish

    async def _project_forever(self, ledger: Any, findings: Any, pins: Any) -> None:
        """The findings projector: a consumer of settled runs, with its own
        checkpoint; pins each finding's evidence before projecting it."""
        runtime = self.world.runtime
        while True:
            try:
                await self._project_once(ledger, findings, pins)
            except Exception as error:
                if not is_retryable(error):
                    raise  # a transient failure: the next tick starts over from the checkpoint
            await runtime.sleep_ms(PROJECT_EVERY_MS)

    async def _project_once(self, ledger: Any, findings: Any, pins: Any) -> None:
        runtime = self.world.runtime
        for schedule_id, schedule in sorted(self.schedules.items()):
            checkpoint_ms = await findings.checkpoint(schedule_id)
            occurrence_ms = schedule.first_ms if checkpoint_ms is None else checkpoint_ms + schedule.every_ms
            high_ms = schedule.latest_due_at(runtime.now_ms())
            while high_ms is not None and occurrence_ms <= high_ms:
                run_id = run_id_for(schedule_id, occurrence_ms)
                record = await ledger.get_by_idempotency_key(run_id, schedule_id, run_id)
                if record is None:
                    if occurrence_ms + schedule.every_ms > high_ms:
                        break  # the latest occurrence may not be admitted yet
                    await findings.advance_checkpoint(schedule_id, occurrence_ms)  # skipped
                elif record.outcome is None:
                    break  # not settled: projected in order, so wait
                else:
                    result = record.reserved_record.get("result") if record.outcome == "completed" else None
                    found = (result or {}).get("findings", [])
                    for finding in found:
                        for ref in finding["evidence"]:
                            await pins.pin(ref, finding["id"])
                    await findings.apply_run(schedule_id, occurrence_ms, run_id, found,
                                             settled_at_ms=record.settled_at_ms)
                occurrence_ms += schedule.every_ms

    async def _retention(self, retention: Retention) -> None:
        runtime = self.world.runtime
        while True:
            next_midnight_ms = (runtime.now_ms() // MS_PER_DAY + 1) * MS_PER_DAY
            await runtime.sleep_until_ms(next_midnight_ms)
            while True:
                try:
                    await retention.run_pass([s for _, s in sorted(self.schedules.items())], runtime.now_ms())
                    break
                except Exception as error:
                    if not is_retryable(error):
                        raise
                    await runtime.sleep_ms(MS_PER_MINUTE)  # a transient failure: the pass starts over

    # -- what the oracles may read directly (never through a node) ----------

    def _deployed_contracts(self, key: str):
        return self._chains[(self._schedule_of_key[key], self._chain_build(self.build).name)]

    def _every_contract(self, key: str):
        """Every contract version the key has ever had (v3's chain holds v1..v3)."""
        return self._chains[(self._schedule_of_key[key], app.BUILD_V3.name)]

    def _transforms_for(self, schedule_id: str):
        chain = self._chains[(schedule_id, app.BUILD_V3.name)]
        return {(a, b): t for a in (1, 2, 3) for b in (1, 2, 3)
                if a < b and (t := app.load_transform(chain, a, b)) is not None}

    def _replay_flow_for(self, record: ExecutionRecord, version: int) -> Any:
        key = (record.schedule_id, version)
        flow = self._replay_flows.get(key)
        if flow is None:
            contract = self._chains[(record.schedule_id, app.BUILD_V3.name)][version]
            state = SentinelState(record.schedule_id, contract, self.replay_guard)
            flow = self._replay_flows[key] = app.make_flow(state, version, self._effects_in_replay)
        return flow

    def _effects_in_replay(self, run_id: str):
        guard = self.replay_guard

        async def refuse() -> dict:
            guard.calls += 1
            raise ReplayTouchedStore(f"replay re-ran an effect of {run_id}")

        return refuse, refuse, refuse

    def _content_now(self, ref: str) -> bytes | None:
        try:
            return run_sync(self.content.get(ref))
        except Exception:  # noqa: BLE001 - missing or corrupt: the oracle reports it
            return None

    def _content_has(self, ref: str) -> bool:
        return run_sync(self.content.has(ref))

    def _live_evidence(self) -> list[tuple[str, str]]:
        return [(f.finding_id, ref) for f in run_sync(self.findings.live_findings()) for ref in f.evidence]

    def _expired_unpinned_blobs(self, stored_before_ms: int) -> tuple[str, ...]:
        return run_sync(self.pins.expired_unpinned(stored_before_ms, 1_000))

    # -- faults and the outside world ---------------------------------------

    async def _duplicate_wakes(self) -> None:
        runtime = self.world.runtime
        deliveries = 0
        while True:
            await runtime.sleep_ms(self.chaos.between(*DUPLICATE_WAKE_EVERY_MS))
            if runtime.now_ms() >= self.heal_at_ms:
                return
            schedule_id = self.chaos.choice(sorted(self.schedules))
            if self._deliver_again(schedule_id, deliveries + 1):
                deliveries += 1

    def _deliver_again(self, schedule_id: str, delivery: int | None) -> bool:
        """The alarm of the latest due occurrence, delivered once more."""
        runtime = self.world.runtime
        node = self.world.nodes["worker-1"]
        occurrence_ms = self.schedules[schedule_id].latest_due_at(runtime.now_ms())
        driver = self.drivers.get(schedule_id)
        if not node.alive or driver is None or occurrence_ms is None:
            return False
        self.world.record_fault(node, f"alarm.{schedule_id}", DUPLICATE_WAKE, delivery or 0)
        runtime.spawn_on(node, f"alarm:{schedule_id}@{occurrence_ms}", self._alarm(driver, occurrence_ms))
        return True

    @staticmethod
    async def _alarm(driver: ScheduleDriver, occurrence_ms: int) -> None:
        try:
            await driver.wake(occurrence_ms)
        except Exception as error:
            if not is_retryable(error):
                raise  # a transient failure: this delivery is lost, the driver's own wake is not

    def _plan_operator_edits(self) -> None:
        edits = max(1, self.duration_ms * OPERATOR_EDITS_PER_YEAR // (365 * MS_PER_DAY))
        schedule_ids = sorted(self.schedules)
        for _ in range(edits):
            schedule_id = self.chaos.choice(schedule_ids)
            wake = self.chaos.below(max(1, self.heal_at_ms // WAKE_EVERY_MS))
            # Inside the stats window of that wake: between its load and save.
            at_ms = wake * WAKE_EVERY_MS + self.chaos.between(1, app.STATS_LATENCY_MS[1] * 3 // 4)
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

    def _plan_deploys(self) -> None:
        """v2 in the first third, a broken build mid-year and its fix, v3 late.

        Each deploy lands inside a wake (just after its state was saved, while
        it publishes), so a run is in flight on the old code: the restarted
        worker resumes it on the new code through a K11.5 transform, or fails
        it explicitly when the build has none."""
        d = self.duration_ms
        chaos = self.chaos
        v2_ms = self._inside_a_wake(chaos.between(d // 10, d * 3 // 10))
        broken = chaos.choice((app.BUILD_V3_NO_MIGRATION, app.BUILD_V1_ROLLBACK))
        broken_ms = self._inside_a_wake(chaos.between(d * 4 // 10, d * 6 // 10))
        fixed_ms = broken_ms + chaos.between(*BROKEN_WINDOW_MS)
        fix = app.BUILD_V3 if broken is app.BUILD_V3_NO_MIGRATION else app.BUILD_V2
        plan = [(v2_ms, app.BUILD_V2), (broken_ms, broken), (fixed_ms, fix)]
        if fix is not app.BUILD_V3:
            plan.append((self._inside_a_wake(chaos.between(d * 7 // 10, d * 8 // 10)), app.BUILD_V3))
        for at_ms, build in plan:
            if at_ms < self.heal_at_ms:
                # The rolling restart's downtime is drawn now, at setup: a
                # scripted replay draws nothing from chaos during the run.
                downtime_ms = self._restart_delay_ms()
                self.world.at(at_ms, lambda b=build, d=downtime_ms: self._deploy(b, d), label=f"deploy {build.name}")

    def _inside_a_wake(self, t_ms: int) -> int:
        """A moment in the publish step of the wake at or before ``t_ms``."""
        occurrence_ms = t_ms // WAKE_EVERY_MS * WAKE_EVERY_MS
        rng = self.world.streams.fork(f"workload/{run_id_for('sentinel-0', occurrence_ms)}")
        return occurrence_ms + rng.between(*app.STATS_LATENCY_MS) + 1

    def _deploy(self, build: app.Build, downtime_ms: int) -> None:
        """A deploy: new code, and a rolling restart of the worker."""
        self.build = build
        self.builds_deployed.append(build.name)
        self.world.count("deploys")
        self.world.emit("deploy", build=build.name, version=build.version, broken=build.broken)
        node = self.world.nodes["worker-1"]
        if node.alive:
            self.world.crash(node, restart_after_ms=downtime_ms)

    # -- results -----------------------------------------------------------

    def _on_system_event(self, event: tuple) -> None:
        kind, fields = event[3], event[4]
        if "error" in fields or fields.get("deleted") is False:
            return
        self.system_counts[kind] = self.system_counts.get(kind, 0) + 1

    def _on_settled(self, event: tuple) -> None:
        if event[4].get("outcome") == "failed":
            self.runs_failed += 1

    def audit_view(self) -> "SentinelYear":
        return self

    def durable_state_snapshot(self, key: str) -> Any:
        return run_sync(self.ds_store.load(key))

    def _held_now(self) -> list[str]:
        return [r for sid in sorted(self.schedules) for r in run_sync(self.schedule_store.cursor(sid)).held]

    def _reader(self) -> LedgerRuns:
        world = self.world
        return LedgerRuns(self.ledger, self.log, self.schedule_store, "auditor", lease_ms=self.lease_ms,
                          now_ms=world.runtime.now_ms, sleep_ms=world.runtime.sleep_ms)

    def live_runs(self, schedule_id: str) -> tuple[str, ...]:
        return tuple(r.run_id for r in run_sync(self._reader().live_executions(schedule_id)))

    def schedule_high_water_ms(self, schedule_id: str) -> int | None:
        return run_sync(self._reader().schedule_high_water_ms(schedule_id))

    def conversation_ids(self) -> list[str]:
        """Every run log retention has not deleted yet (the auditors' view)."""
        ids = []
        for schedule_id, schedule in sorted(self.schedules.items()):
            cursor = run_sync(self.schedule_store.cursor(schedule_id))
            ids.extend(cursor.held)
            if cursor.high_water_ms is None:
                continue
            first_ms = schedule.first_ms if cursor.archived_through_ms is None else (
                cursor.archived_through_ms + schedule.every_ms)
            for occurrence_ms in range(first_ms, cursor.high_water_ms + 1, schedule.every_ms):
                run_id = run_id_for(schedule_id, occurrence_ms)
                if run_sync(self.ledger.get_by_idempotency_key(run_id, schedule_id, run_id)) is not None:
                    ids.append(run_id)
        return ids

    def log_records(self, conversation_id: str) -> tuple:
        return run_sync(self.log.read(conversation_id, 0, 1_024))

    def log_tail(self, conversation_id: str) -> Any:
        return run_sync(self.log.inspect_tail(conversation_id))

    def submissions(self, conversation_id: str) -> tuple:
        schedule_id, _ = parse_run_id(conversation_id)
        record = run_sync(self.ledger.get_by_idempotency_key(conversation_id, schedule_id, conversation_id))
        return () if record is None else (record,)

    def rebuild_mismatches(self) -> list[str]:
        """Rebuild a fresh ledger from the retained run logs; the runs it disagrees on."""
        rebuilt = InMemorySubmissionLedger()
        run_ids = self.conversation_ids()
        run_sync(rebuild_ledger(self.log, rebuilt, run_ids, self.end_ms))
        mismatches = []
        for run_id in run_ids:
            for original in self.submissions(run_id):
                copy = run_sync(rebuilt.get(original.submission_id))
                if copy is None:
                    if original.input_applied:
                        mismatches.append(original.submission_id)
                    continue
                settled = original.outcome is not None
                if (copy.outcome, copy.reserved_digest if settled else None) != (
                        original.outcome, original.reserved_digest if settled else None):
                    mismatches.append(original.submission_id)
        return mismatches

    def nonterminal_submissions(self) -> list[str]:
        return [r.submission_id for r in run_sync(self.ledger.scan_nonterminal())]

    def retained_runs(self):
        """(record, log) of every settled run retention has not deleted yet, read from the stores."""
        reader = self._reader()
        for run_id in self.conversation_ids():
            record = run_sync(reader.load_execution(run_id))
            if record is None or record.status not in ("completed", "failed"):
                continue
            records = self.log_records(run_id)
            yield record, reader._step_records(run_id, records)

    def stats(self) -> dict[str, Any]:
        counters = self.world.counters
        fp = self.findings.counts()
        return {
            "wakes": self.wake_checker.started,
            "wakes_skipped": self.wake_checker.skipped,
            "worker_crashes": counters.get("node.crashes", 0),
            "adopted_saves": self.adopt_checker.adoptions,
            "save_conflicts": self.adopt_checker.conflicts,
            "migrations_applied": self.contract_checker.migrations,
            "contract_rejections": self.contract_checker.rejections,
            "deploys": counters.get("deploys", 0),
            "builds": self.builds_deployed,
            "broken_deploys": self.deploy_checker.broken,
            "broken_deploys_caught": self.deploy_checker.caught,
            "runs_migrated_on_resume": self.system_counts.get("kernel.migrated", 0),
            "runs_failed_migration_missing": self.system_counts.get("run.migration_missing", 0),
            "runs_rejected_input": self.system_counts.get("kernel.input_rejected", 0),
            "transient_retries": self.system_counts.get("driver.retry", 0),
            "runs_failed": self.runs_failed,
            "replays_verified": self.replay_checker.replays,
            "claim_checked_payloads": self.claim_checker.claim_checked,
            "findings": fp["opened"],
            "findings_live": fp["live"],
            "findings_closed": fp["closed"],
            "pinned_blobs": self.pins_checker.max_pinned,
            "blobs_reclaimed": self.system_counts.get("content.delete", 0),
            "runs_archived": self.system_counts.get("log.delete_conversation", 0),
            "runs_held_by_pins": len(self._held_now()),
            "longest_run_log": self.bounded_checker.longest,
            "operator_edits": counters.get("operator.edits", 0),
            "store_calls": self.port_stats.calls,
        }


@scenario("sentinel-year", "sentinels waking every 5 minutes for a year on the whole system: ledger, log, "
          "claim-check, findings, pins, retention, contract evolution",
          duration="365d", swarm=SWARM, sometimes=SOMETIMES, params=(Param("sentinels", 1, "number of sentinel schedules", 1, 1_000),
                                   Param("validate_inputs", 1, "D7 input-schema validation at start (0/1)", 0, 1)))
def build(world: World, opts: ScenarioOptions) -> SentinelYear:
    return SentinelYear(world, opts)
