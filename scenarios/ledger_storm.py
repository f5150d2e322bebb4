"""ledger-storm: many conversations, several workers under leases, crashes and pauses.

The world: a Submission Ledger and a Conversation Log (memory, or one SQLite
file) that outlive every crash; a client admitting work at least once (it
retries with the same idempotency key until it sees a receipt); workers that
recover (a fail-closed read of every conversation with nonterminal work) and
then claim, process and settle submissions under leases.

Faults: crashes before store calls and after commits (lost acks), crashes at
every named crash point of the submission lifecycle, kill -9 of workers,
pauses longer than a lease (the paused owner wakes and writes with its old
epoch: the stores must fence it), and damaged read answers (short pages,
sequence gaps) that the recovery read must turn into a typed failure.

Phases: setup -> storm (faults on) -> heal (faults and new work stop) ->
settle -> audit.
"""
from __future__ import annotations

from typing import Any

from faults.chaos import kill_nodes, node_name, replay_kills
from faults.describe import CHECKPOINT_DESCRIBERS, LEDGER_DESCRIBERS, LOG_DESCRIBERS
from faults.kinds import (
    ACK_LOST,
    CORRUPT_ROW,
    CRASH_BEFORE_CALL,
    FAILPOINT_CRASH,
    LATENCY,
    NODE_KILL,
    PORT_FAULT_KINDS,
    NODE_PAUSE,
    TRANSIENT_ERROR,
    WRITE_CONTENTION,
    SEQUENCE_GAP,
    SHORT_PAGE,
)
from faults.beyond import LogSurgery, beyond_enabled, beyond_rates
from faults.plan import make_plan
from faults.swarm import Knob, SwarmSpace, choose_for
from model.failpoints import SUBMISSION_CRASH_POINTS
from model.kernel.kernel import is_retryable
from model.sqlite_db import BUSY_TIMEOUT_MS_DEFAULT
from faults.ports import BoundPort, PortStats, SimFailpoints
from faults.reads import DamagedReads
from model.conversation.checkpoints import InMemoryCheckpointStore, SqliteCheckpointStore
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.records import PAGE_SIZE_MAX, NotMaterialized
from model.conversation.sqlite_store import SqliteConversationStore
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.repair import rebuild_ledger
from model.submissions import SubmissionClient, SubmissionWorker, worker_loop
from scenarios.invariants.checkpoints import CheckpointConsistency
from scenarios.invariants import (
    ExactlyOnceSettlement,
    FailClosedPagination,
    Fencing,
    Liveness,
    LogChain,
    QueueOrder,
)
from scenarios.registry import scenario
from scenarios.storage import RunDatabase, run_sync
from sim.clock import MS_PER_HOUR, MS_PER_MINUTE, MS_PER_SECOND
from sim.node import Node
from sim.scenario import Param, ScenarioOptions
from sim.world import World

LEASE_MS = 20 * MS_PER_SECOND
POLL_MS = 2 * MS_PER_SECOND
RETRY_MS = 2 * MS_PER_SECOND
STEP_DELAY_MS = (50, 3 * MS_PER_SECOND)
SUBMIT_EVERY_MS = (1 * MS_PER_SECOND, 40 * MS_PER_SECOND)
RESTART_DELAY_MS = (1 * MS_PER_SECOND, 30 * MS_PER_SECOND)
NODE_KILL_EVERY_MS = (10 * MS_PER_MINUTE, 3 * MS_PER_HOUR)
NODE_PAUSE_EVERY_MS = (10 * MS_PER_MINUTE, 2 * MS_PER_HOUR)
# Half the pauses end just after the lease (the owner wakes while its
# successor is mid-way: its old-epoch writes must be fenced), half much later.
def pause_ranges_ms(lease_ms: int) -> tuple[tuple[int, int], tuple[int, int]]:
    return ((lease_ms + MS_PER_SECOND, lease_ms + 8 * MS_PER_SECOND), (lease_ms + MS_PER_SECOND, 4 * lease_ms))
HEAL_MS_MAX = MS_PER_HOUR
# A conversation lives this long before the client moves on to a new one, so
# a log's length (and what a recovery read has to read) does not grow with
# the length of the run.
CONVERSATION_LIFETIME_MS = MS_PER_HOUR
SETTLE_MS = MS_PER_HOUR

RATES = {
    CRASH_BEFORE_CALL: 2e-4,
    ACK_LOST: 2e-4,
    FAILPOINT_CRASH: 2e-3,
    SHORT_PAGE: 0.05,
    SEQUENCE_GAP: 0.05,
    CORRUPT_ROW: 0.05,
    TRANSIENT_ERROR: 2e-4,
    WRITE_CONTENTION: 1e-4,
    LATENCY: 1e-4,
}


class WorkFailed(Exception):
    name = "WorkFailed"


# Every 20th request fails in its second step (settled as failed, with exactly
# {errorTag, message}); every 25th is aborted by the client right after admission.
FAIL_EVERY = 20
ABORT_EVERY = 25


def _work(request: Any, index: int) -> Any:
    if request["n"] % FAIL_EVERY == 7 and index == 1:
        raise WorkFailed(f"request {request['n']} cannot be served")
    return {"step": index, "echo": request}


def _work_that_never_fails(request: Any, index: int) -> Any:
    return {"step": index, "echo": request}


ABORTS = "client-aborts"
FAILING_WORK = "failing-work"
# Recovery reads only what the latest usable checkpoint does not cover.
CHECKPOINTS = "recovery-checkpoints"
RARE_SITES = ("checkpoints.save", "checkpoints.load_latest", "log.digest_at")
RARE_SITE_BOOST = 50
SWARM = SwarmSpace(
    fault_kinds=(CRASH_BEFORE_CALL, ACK_LOST, FAILPOINT_CRASH, NODE_KILL, NODE_PAUSE, SHORT_PAGE, SEQUENCE_GAP,
                 CORRUPT_ROW, TRANSIENT_ERROR, WRITE_CONTENTION, LATENCY),
    failpoints=SUBMISSION_CRASH_POINTS,
    failpoint_rate=RATES[FAILPOINT_CRASH],
    workload=(ABORTS, FAILING_WORK, CHECKPOINTS),
    knobs=(Knob("lease_ms", LEASE_MS, 5 * MS_PER_SECOND, 60 * MS_PER_SECOND, "claim lease"),
           Knob("busy_timeout_ms", BUSY_TIMEOUT_MS_DEFAULT, 100, 10_000, "SQLite busy timeout"),
           Knob("workers", 3, 1, 8, "worker processes"),
           # A conversation's log is short (it lives an hour): small pages make
           # its recovery read paginate, page boundaries and all.
           Knob("recovery_page_size", PAGE_SIZE_MAX, 8, PAGE_SIZE_MAX, "recovery read page (records)",
                values=(8, 16, 32, 64, 128, 256, 512, PAGE_SIZE_MAX))),
)
SOMETIMES = ("stale_writes_fenced", "damaged_reads_caught", "worker_crashes", "settled",
             "recoveries_from_checkpoint")


class LedgerStorm:
    def __init__(self, world: World, opts: ScenarioOptions) -> None:
        self.world = world
        runtime = world.runtime
        self.duration_ms = opts.duration_ms
        self.heal_at_ms = opts.duration_ms - min(HEAL_MS_MAX, opts.duration_ms // 10)
        self.end_ms = opts.duration_ms + SETTLE_MS
        self.slots = opts.params.get("conversations", 8)
        self.conversations: list[str] = []  # every conversation the client ever used, in order
        self.swarm = choices = choose_for(world, opts, SWARM)
        self.worker_names = tuple(f"worker-{i + 1}" for i in range(choices.knob("workers")))
        self._open_stores(opts)
        self.lease_ms = choices.knob("lease_ms")
        self.surgery = LogSurgery(self.log) if beyond_enabled(opts) else None
        rates = {**{k: r for k, r in RATES.items() if choices.enabled(k)}, **beyond_rates(opts)}
        site_rates = choices.site_rates(SUBMISSION_CRASH_POINTS, FAILPOINT_CRASH) if (
            choices.enabled(FAILPOINT_CRASH)) else {}
        # Checkpoint calls happen only in recoveries: their port faults fire
        # RARE_SITE_BOOST times as often, or a sweep would hardly see them.
        for site in RARE_SITES:
            site_rates[site] = {k: min(1.0, r * RARE_SITE_BOOST) for k, r in rates.items() if k in PORT_FAULT_KINDS}
        self.plan = make_plan(world, opts, rates=rates, heal_at_ms=self.heal_at_ms, site_rates=site_rates)
        self.stats_ports = PortStats()
        self.chaos = world.streams["chaos"]
        self.workload = world.streams["workload"]
        self.settlement = ExactlyOnceSettlement()
        self.fencing = Fencing()
        self.pagination = FailClosedPagination()
        world.check(self.settlement, self.fencing, LogChain(), self.pagination, QueueOrder(), Liveness())
        self.use_checkpoints = choices.does(CHECKPOINTS)
        if self.use_checkpoints:
            world.check(CheckpointConsistency(self._latest_checkpoint))
        self.recoveries_from_checkpoint = 0
        world.trace.subscribe(("recovery.read",), self._on_recovery)
        self.pending: list[tuple[str, str, Any]] = []  # the outside world's unreceipted requests
        self._known: set[str] = set()
        self._owners: dict[str, str] = {}  # owner (node label) -> submission it claimed, until settled
        world.trace.subscribe(("ledger.claim", "ledger.finalize_settlement"), self._track_owners)
        self.submitted = 0

        for name in self.worker_names:
            world.add_node(name, self._start_worker)
        world.add_node("client", self._start_client, role="client")
        if self.plan.scripted:  # replay the script's timed faults at their times
            replay_kills(world, self.plan.timed(NODE_KILL))
            for event in self.plan.timed(NODE_PAUSE):
                world.at(event.time_ms, lambda e=event: self._pause(node_name(e.node), e.hit or 0, e.duration_ms),
                         label="scripted pause")
        else:
            if choices.enabled(NODE_KILL):
                world.spawn_harness("chaos:node-kill", kill_nodes(
                    world, self.chaos, every_ms=NODE_KILL_EVERY_MS,
                    pick=lambda: self.chaos.choice(self.worker_names),
                    restart_after_ms=self._restart_delay_ms, until_ms=self.heal_at_ms))
            if choices.enabled(NODE_PAUSE):
                world.spawn_harness("chaos:node-pause", self._node_pauses())

    # -- stores ----------------------------------------------------------

    def _open_stores(self, opts: ScenarioOptions) -> None:
        self._database: RunDatabase | None = None
        if opts.store == "memory":
            self.ledger: Any = InMemorySubmissionLedger()
            self.log: Any = InMemoryConversationStore()
            self.checkpoints: Any = InMemoryCheckpointStore(self.log)
            return
        self._database = RunDatabase(opts.db_path, file_name="ledger-storm.db",
                                     busy_timeout_ms=self.swarm.knob("busy_timeout_ms"))
        self.ledger = SqliteSubmissionLedger(self._database.conn)
        self.log = SqliteConversationStore(self._database.conn)
        self.checkpoints = SqliteCheckpointStore(self.log)

    def close(self) -> None:
        if self._database is not None:
            self._database.close()

    # -- processes -------------------------------------------------------

    def _restart_delay_ms(self) -> int:
        return self.chaos.between(*RESTART_DELAY_MS)

    def _ports(self, node: Node) -> tuple[Any, Any, Any]:
        world = self.world
        ledger = BoundPort(world, node, "ledger", self.ledger, self.plan, LEDGER_DESCRIBERS, self.stats_ports,
                           self._restart_delay_ms)
        log = BoundPort(world, node, "log", DamagedReads(self.log, world, node, self.plan), self.plan,
                        LOG_DESCRIBERS, self.stats_ports, self._restart_delay_ms, surgery=self.surgery)
        failpoints = SimFailpoints(world, node, self.plan, self._restart_delay_ms)
        return ledger, log, failpoints

    def _checkpoint_port(self, node: Node) -> Any:
        if not self.use_checkpoints:
            return None
        return BoundPort(self.world, node, "checkpoints", self.checkpoints, self.plan, CHECKPOINT_DESCRIBERS,
                         self.stats_ports, self._restart_delay_ms)

    def _latest_checkpoint(self, conversation_id: str) -> Any:
        return run_sync(self.checkpoints.load_latest(conversation_id, 2 ** 62))

    def _on_recovery(self, event: tuple) -> None:
        if event[4].get("from_checkpoint"):
            self.recoveries_from_checkpoint += 1

    def _start_worker(self, node: Node) -> None:
        world = self.world
        runtime = world.runtime
        ledger, log, failpoints = self._ports(node)
        workload = world.streams

        async def step_delay(submission_id: str, index: int) -> None:
            rng = workload.fork(f"workload/{submission_id}/{index}")
            await runtime.sleep_ms(rng.between(*STEP_DELAY_MS))

        worker = SubmissionWorker(ledger, log, node.label, lease_ms=self.lease_ms, now_ms=runtime.now_ms,
                                  work=_work if self.swarm.does(FAILING_WORK) else _work_that_never_fails,
                                  steps=2, failpoints=failpoints, probe=world.probe_for(node),
                                  step_delay=step_delay, checkpoints=self._checkpoint_port(node),
                                  recovery_page_size=self.swarm.knob("recovery_page_size"))
        runtime.spawn_on(node, "worker", worker_loop(worker, runtime, poll_ms=POLL_MS, retry_ms=RETRY_MS))

    def _start_client(self, node: Node) -> None:
        runtime = self.world.runtime
        ledger, log, failpoints = self._ports(node)
        client = SubmissionClient(ledger, log, now_ms=runtime.now_ms, failpoints=failpoints,
                                  probe=self.world.probe_for(node))
        runtime.spawn_on(node, "client", self._client_loop(client))

    async def _client_loop(self, client: SubmissionClient) -> None:
        runtime = self.world.runtime
        while True:
            # Requests the client sent but never saw a receipt for: again,
            # with the same idempotency key (at-least-once callers).
            try:
                while self.pending:
                    conversation_id, key, request = self.pending[0]
                    admission = await client.submit(conversation_id, "client", key, request)
                    if request["n"] % ABORT_EVERY == 3 and self.swarm.does(ABORTS):
                        await self._abort(client, admission.submission_id)
                    self.pending.pop(0)
            except Exception as error:
                if not is_retryable(error):
                    raise
                # A transient failure: the request stays pending and is sent
                # again, same idempotency key (at-least-once callers).
                await runtime.sleep_ms(RETRY_MS)
                continue
            await runtime.sleep_ms(self.workload.between(*SUBMIT_EVERY_MS))
            if runtime.now_ms() >= self.heal_at_ms:
                return
            self.submitted += 1
            generation = runtime.now_ms() // CONVERSATION_LIFETIME_MS
            conversation_id = f"conv-{self.workload.below(self.slots)}-g{generation}"
            if conversation_id not in self._known:
                self._known.add(conversation_id)
                self.conversations.append(conversation_id)
            self.pending.append((conversation_id, f"req-{self.submitted}", {"n": self.submitted}))

    async def _abort(self, client: SubmissionClient, submission_id: str) -> None:
        try:
            await client.ledger.request_abort(submission_id, "client", "no longer needed")
        except Exception as error:
            if getattr(type(error), "name", None) != "AbortConflict":
                raise  # already settled: too late to abort, which is fine

    # -- chaos -----------------------------------------------------------

    async def _node_pauses(self) -> None:
        runtime = self.world.runtime
        pauses = 0
        while True:
            await runtime.sleep_ms(self.chaos.between(*NODE_PAUSE_EVERY_MS))
            if runtime.now_ms() >= self.heal_at_ms:
                return
            # A stall under load: prefer a worker that holds a claim right now.
            busy = [name for name in self.worker_names
                    if self.world.nodes[name].alive and self.world.nodes[name].label in self._owners]
            node = self.world.nodes[self.chaos.choice(busy or list(self.worker_names))]
            if node.alive:
                pauses += 1
                self._pause(node.name, pauses, self.chaos.between(*self.chaos.choice(pause_ranges_ms(self.lease_ms))))

    def _pause(self, name: str, hit: int, pause_ms: int | None) -> None:
        node = self.world.nodes[name]
        if node.alive and pause_ms is not None:
            self.world.record_fault(node, "process", NODE_PAUSE, hit, duration_ms=pause_ms)
            self.world.runtime.pause_node(node, self.world.runtime.now_ms() + pause_ms)

    def _track_owners(self, event: tuple) -> None:
        fields = event[4]
        if "error" in fields:
            return
        if event[3] == "ledger.claim":
            if "submission" in fields:
                self._owners[fields["owner"]] = fields["submission"]
        else:
            for owner in [o for o, sid in self._owners.items() if sid == fields["submission"]]:
                del self._owners[owner]

    # -- audit view and results --------------------------------------------

    def audit_view(self) -> "LedgerStorm":
        return self

    def conversation_ids(self) -> tuple[str, ...]:
        return tuple(self.conversations)

    def log_records(self, conversation_id: str) -> tuple:
        records: list = []
        after = 0
        while True:
            try:
                page = run_sync(self.log.read(conversation_id, after, 1024))
            except NotMaterialized:
                return ()
            records.extend(page)
            if len(page) < 1024:
                return tuple(records)
            after += len(page)

    def log_tail(self, conversation_id: str) -> Any:
        try:
            return run_sync(self.log.inspect_tail(conversation_id))
        except NotMaterialized:
            return None

    def submissions(self, conversation_id: str) -> list:
        found = []
        seq = 1
        while True:
            record = run_sync(self.ledger.get(f"sub-{conversation_id}-{seq}"))
            if record is None:
                return found
            found.append(record)
            seq += 1

    def rebuild_mismatches(self) -> list[str]:
        """Rebuild a fresh ledger from the log; the submissions it disagrees on."""
        rebuilt = InMemorySubmissionLedger()
        run_sync(rebuild_ledger(self.log, rebuilt,
                                [c for c in self.conversations if self.log_tail(c) is not None], self.end_ms))
        mismatches = []
        for conversation_id in self.conversations:
            for original in self.submissions(conversation_id):
                copy = run_sync(rebuilt.get(original.submission_id))
                if copy is None:
                    if original.input_applied:
                        mismatches.append(original.submission_id)
                    continue
                # Unsettled work may hold a reservation the log has not seen
                # yet; only what the log settled is canonical.
                settled = original.outcome is not None
                if (copy.queue_seq, copy.outcome, copy.reserved_digest if settled else None) != (
                        original.queue_seq, original.outcome, original.reserved_digest if settled else None):
                    mismatches.append(original.submission_id)
        return mismatches

    def nonterminal_submissions(self) -> list[str]:
        return [r.submission_id for r in run_sync(self.ledger.scan_nonterminal())]

    def stats(self) -> dict[str, Any]:
        counters = self.world.counters
        return {
            "submitted": self.submitted,
            "settled": self.settlement.settled,
            "outcomes": self.settlement.outcomes(),
            "stale_writes_fenced": self.fencing.fenced,
            "damaged_reads_caught": self.pagination.caught,
            "recoveries_from_checkpoint": self.recoveries_from_checkpoint,
            "worker_crashes": counters.get("node.crashes", 0),
            "store_calls": self.stats_ports.calls,
        }


@scenario("ledger-storm", "conversations under leases: claims, fencing, crashes, pauses, damaged reads",
          swarm=SWARM, sometimes=SOMETIMES,
          duration="1d", params=(Param("conversations", 8, "number of conversations", 1, 1_000),))
def build(world: World, opts: ScenarioOptions) -> LedgerStorm:
    return LedgerStorm(world, opts)
