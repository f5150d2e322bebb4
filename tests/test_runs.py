"""LedgerRuns (model/runs.py): the execution-store protocol over the
submission ledger, the conversation log and the schedule cursor, on both
adapters (memory; SQLite with every store on one connection, as the
sentinel-year scenario opens them).

Covered: start -> steps -> finish settles exactly once; duplicate starts
replay (same code, or another flow version: AdmissionConflict is a
duplicate); retired occurrences are refused; a restarted process with
another owner id waits out the first owner's lease, resumes from the log at
a higher epoch, and fences the stale owner (FenceRejected in the log,
OwnershipLost in the ledger); a repeated finish returns the first record;
the canonical record (reserved, or already in the log) wins over a
recomputed one; every crash point of the lifecycle recovers to exactly one
settlement; an admitted-but-not-ready run is reported live and its admission
completed by ``_ensure_owned``.

Time is a fake clock: ``sleep_ms`` advances it and never suspends, so every
LedgerRuns call runs to completion in one ``drive``.
"""
from __future__ import annotations

import pytest

from scenarios.storage import run_sync as drive  # a call that must not suspend (the fake sleep never does)

from model.canonical import digest
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.records import AppendConflict, FenceRejected, NotMaterialized
from model.conversation.sqlite_store import SqliteConversationStore
from model.failpoints import (
    ADMITTED_BEFORE_READY,
    APPENDED_BEFORE_FINALIZE,
    FINALIZED_BEFORE_REPLY,
    RESERVED_BEFORE_APPEND,
    STEP_DONE_BEFORE_RECORD,
    MATERIALIZED_BEFORE_READY,
    STEP_RECORDED,
    SUBMISSION_CRASH_POINTS,
)
from model.kernel.records import (
    COMPLETED,
    EFFECT_INDOUBT,
    EXECUTION_MIGRATED,
    FAILED,
    PARKED,
    RUNNING,
    STEP_COMPLETED,
    STEP_STARTED,
    ExecutionNotRunning,
    ExecutionRecord,
    ExecutionStoreError,
    StartOutcome,
    StepRecord,
    StepSequenceConflict,
    UnknownExecution,
)
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.records import AdmissionConflict, OwnershipLost
from model.ledger.rules import submission_id_for
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.lifecycle import CREATED_FAMILY
from model.runs import (
    CLAIM_RETRY_MS,
    RUN_INPUT_FAMILY,
    SETTLED_FAMILY,
    STEP_FAMILY,
    LedgerRuns,
    settlement_record,
)
from model.schedule_store import InMemoryScheduleStore, SqliteScheduleStore
from model.schedules import run_id_for
from model.sqlite_db import open_database
from model.ledger.records import settlement_of
from tests.fakes import Crash, CrashAt

S = "sentinel"
EVERY = 5 * 60_000
LEASE_MS = 30_000
T0 = 10 * EVERY  # the fake clock's start (after the first few occurrences)
STEPS = (("stats", STEP_COMPLETED, {"rows": 3}), ("explain", STEP_COMPLETED, {"plan": "seq scan"}),
         ("publish", STEP_COMPLETED, {"published": True}))


# --- harness -----------------------------------------------------------------------


class Recording:
    def __init__(self) -> None:
        self.reached: list[str] = []

    def hit(self, name: str) -> None:
        self.reached.append(name)


class RunawaySleep(Exception):
    """The claim loop slept far longer than any lease: it is spinning."""


class Clock:
    """The fake time of every process: ``sleep`` advances it, never suspends."""

    SLEEPS_MAX = 1_000

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms
        self.slept: list[int] = []
        self.on_sleep = None  # an async hook run on every sleep (another process acting meanwhile)

    def now(self) -> int:
        return self.ms

    async def sleep(self, ms: int) -> None:
        assert ms > 0
        self.slept.append(ms)
        if len(self.slept) > self.SLEEPS_MAX:
            raise RunawaySleep(f"slept {len(self.slept)} times")
        self.ms += ms
        if self.on_sleep is not None:
            await self.on_sleep()


class World:
    """One set of durable stores (memory, or one SQLite file) and a clock."""

    def __init__(self, kind: str, tmp_path) -> None:
        self.kind = kind
        self.clock = Clock()
        self.conn = None
        if kind == "memory":
            self.ledger = InMemorySubmissionLedger()
            self.log = InMemoryConversationStore()
            self.schedules = InMemoryScheduleStore()
        else:
            self.conn = open_database(str(tmp_path / "runs.db"))
            self.ledger = SqliteSubmissionLedger(self.conn)
            self.log = SqliteConversationStore(self.conn)
            self.schedules = SqliteScheduleStore(self.conn)

    def runs(self, owner: str = "worker-a", failpoints=None) -> LedgerRuns:
        """A process (a fresh LedgerRuns: nothing in memory but what it reads)."""
        kwargs = {} if failpoints is None else {"failpoints": failpoints}
        return LedgerRuns(self.ledger, self.log, self.schedules, owner, lease_ms=LEASE_MS,
                          now_ms=self.clock.now, sleep_ms=self.clock.sleep, **kwargs)

    # -- reading the stores directly --------------------------------------------

    def record(self, run_id: str):
        return drive(self.ledger.get_by_idempotency_key(run_id, S, run_id))

    def log_records(self, run_id: str):
        return drive(self.log.read(run_id, 0, 1_024))

    def families(self, run_id: str) -> list[str]:
        return [r.envelope.family for r in self.log_records(run_id)]

    def settlements(self, run_id: str) -> list[dict]:
        return [r.envelope.payload for r in self.log_records(run_id) if r.envelope.family == SETTLED_FAMILY]

    def settlement_envelopes(self, run_id: str) -> list[dict]:
        """The log's settlement records, each its envelope without the
        producer's identity and epoch (as the ledger reserves it)."""
        out = []
        for r in self.log_records(run_id):
            if r.envelope.family == SETTLED_FAMILY:
                value = r.envelope.to_json()
                value.pop("producerId"), value.pop("epoch")
                out.append(value)
        return out

    def cursor(self):
        return drive(self.schedules.cursor(S))

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


@pytest.fixture(params=["memory", "sqlite"])
def world(request, tmp_path):
    w = World(request.param, tmp_path)
    yield w
    w.close()


def run_id(n: int) -> str:
    return run_id_for(S, n * EVERY)


def start(runs: LedgerRuns, n: int, *, flow_version: int = 1, input=None, at_ms: int | None = None) -> StartOutcome:
    return drive(runs.start_execution(
        run_id(n), schedule_id=S, occurrence_ms=n * EVERY, flow_version=flow_version,
        input={"occurrence": n} if input is None else input,
        started_at_ms=n * EVERY + 7 if at_ms is None else at_ms))


def steps_of(run: str, first_seq: int, steps) -> tuple[StepRecord, ...]:
    return tuple(StepRecord(run, first_seq + i, step_id, kind, output)
                 for i, (step_id, kind, output) in enumerate(steps))


def check_settled_once(world: World, run: str, record: dict, *, steps: int) -> None:
    """Exactly one settlement: the ledger's, the log's, equal and canonical."""
    ledger_row = world.record(run)
    assert ledger_row.outcome == record["outcome"]
    assert ledger_row.settled_at_ms is not None
    sid = ledger_row.submission_id
    assert ledger_row.reserved_record["payload"] == {"submissionId": sid, "settlementId": f"settlement:{sid}",
                                                     "receiptId": ledger_row.receipt, **record}
    assert ledger_row.reserved_digest == digest(ledger_row.reserved_record)
    settled = world.settlement_envelopes(run)
    assert len(settled) == 1, settled
    assert settled[0] == ledger_row.reserved_record  # byte-equal: the reserved record envelope
    families = world.families(run)
    assert families == [CREATED_FAMILY, RUN_INPUT_FAMILY] + [STEP_FAMILY] * steps + [SETTLED_FAMILY], families
    assert drive(world.ledger.scan_nonterminal()) == ()
    # One submission per run: the run id is the idempotency key.
    assert drive(world.ledger.get(submission_id_for(run, 2))) is None


# --- the happy path ------------------------------------------------------------------


@pytest.mark.parametrize("status", [COMPLETED, FAILED])
def test_start_steps_finish_settles_exactly_once(world, status):
    runs = world.runs()
    run = run_id(3)
    started = start(runs, 3)
    assert started == StartOutcome(
        ExecutionRecord(run, S, 3 * EVERY, 1, {"occurrence": 3}, RUNNING, 3 * EVERY + 7, None, None), False)
    # Admitted, ready, claimed, input applied; the cursor knows the occurrence.
    row = world.record(run)
    assert (row.principal_id, row.idempotency_key, row.conversation_id) == (S, run, run)
    assert row.input == {"scheduleId": S, "occurrenceMs": 3 * EVERY, "flowVersion": 1, "input": {"occurrence": 3}}
    assert (row.ready, row.input_applied, row.owner_id, row.epoch) == (True, True, "worker-a", 1)
    assert row.lease_expires_ms == T0 + LEASE_MS
    assert world.cursor().high_water_ms == 3 * EVERY
    assert world.families(run) == [CREATED_FAMILY, RUN_INPUT_FAMILY]
    # Steps: fenced batch appends, one log record per step.
    assert drive(runs.append_steps(run, 1, STEPS[:2])) == steps_of(run, 1, STEPS[:2])
    assert drive(runs.load_steps(run)) == steps_of(run, 1, STEPS[:2])
    for record in world.log_records(run):
        assert (record.envelope.producer_id, record.envelope.epoch) == ("worker-a", 1)
    with pytest.raises(StepSequenceConflict):
        drive(runs.append_step(run, 2, "again", STEP_COMPLETED, None))
    assert drive(runs.live_executions(S)) == (
        ExecutionRecord(run, S, 3 * EVERY, 1, {"occurrence": 3}, RUNNING, 3 * EVERY + 7, None, None),)
    # Finish with the last step: one batch, then finalize.
    output = {"findings": []} if status == COMPLETED else {"errorTag": "Boom", "message": "the model refused"}
    final = drive(runs.finish_execution(run, status=status, output=output, finished_at_ms=T0 + 99,
                                        steps=STEPS[2:], first_seq=3))
    record = settlement_record(status, output)
    assert final == ExecutionRecord(run, S, 3 * EVERY, 1, {"occurrence": 3}, status, 3 * EVERY + 7, T0 + 99,
                                    output)
    check_settled_once(world, run, record, steps=3)
    settle = world.log_records(run)[-2:]
    assert {r.batch_id for r in settle} == {f"submission-settlement:{row.submission_id}"}  # the last step and the settlement: one batch
    assert world.record(run).settled_at_ms == T0 + 99
    assert drive(runs.load_execution(run)) == final
    assert drive(runs.load_steps(run)) == steps_of(run, 1, STEPS)
    assert drive(runs.live_executions(S)) == ()


def test_failed_diagnostic_is_bounded_and_shaped(world):
    runs = world.runs()
    start(runs, 0)
    final = drive(runs.finish_execution(run_id(0), status=FAILED, output="not a dict", finished_at_ms=T0))
    assert final.status == FAILED
    assert final.output == {"errorTag": "Error", "message": ""}
    check_settled_once(world, run_id(0), {"outcome": "failed", "diagnostic": {"errorTag": "Error", "message": ""}},
                       steps=0)


def test_runs_of_one_schedule_are_separate_conversations(world):
    runs = world.runs()
    for n in range(3):
        start(runs, n)
        drive(runs.append_steps(run_id(n), 1, STEPS[:1]))
        drive(runs.finish_execution(run_id(n), status=COMPLETED, output={"n": n}, finished_at_ms=T0 + n))
    for n in range(3):
        check_settled_once(world, run_id(n), {"outcome": "completed", "result": {"n": n}}, steps=1)
    assert world.cursor().high_water_ms == 2 * EVERY
    assert drive(runs.schedule_high_water_ms(S)) == 2 * EVERY


# --- duplicate starts ----------------------------------------------------------------


def test_duplicate_start_replays_without_a_second_submission(world):
    runs = world.runs()
    first = start(runs, 1)
    row = world.record(run_id(1))
    # The same alarm again: in this process, and in a restarted one.
    for process in (runs, world.runs("worker-b")):
        again = start(process, 1, at_ms=T0 + 5)
        assert again == StartOutcome(first.record, True)
    assert world.record(run_id(1)) == row  # no second claim, nothing moved
    assert drive(world.ledger.get(submission_id_for(run_id(1), 2))) is None
    assert len(drive(world.ledger.scan_nonterminal())) == 1
    assert world.families(run_id(1)) == [CREATED_FAMILY, RUN_INPUT_FAMILY]
    # After the run settled, a duplicate replays its final record.
    final = drive(runs.finish_execution(run_id(1), status=COMPLETED, output={"ok": 1}, finished_at_ms=T0 + 1))
    assert start(world.runs("worker-c"), 1) == StartOutcome(final, True)
    check_settled_once(world, run_id(1), {"outcome": "completed", "result": {"ok": 1}}, steps=0)


def test_admission_conflict_across_flow_versions_is_a_duplicate(world):
    runs = world.runs()
    first = start(runs, 2, flow_version=1)
    # The same occurrence delivered again after a deploy: another flow
    # version makes another admission input (an AdmissionConflict in the
    # ledger), but it is the same run.
    for process in (runs, world.runs("worker-b")):
        again = start(process, 2, flow_version=2)
        assert again == StartOutcome(first.record, True)
        assert again.record.flow_version == 1
    assert drive(world.ledger.get(submission_id_for(run_id(2), 2))) is None
    assert world.record(run_id(2)).input["flowVersion"] == 1


def test_admission_conflict_with_another_input_is_not_a_duplicate(world):
    runs = world.runs()
    start(runs, 2, flow_version=1, input={"a": 1})
    with pytest.raises(AdmissionConflict):
        start(runs, 2, flow_version=2, input={"a": 2})
    with pytest.raises(AdmissionConflict):
        start(runs, 2, flow_version=1, input={"a": 2})
    assert drive(world.ledger.get(submission_id_for(run_id(2), 2))) is None


# --- retired occurrences ----------------------------------------------------------------


def test_retired_occurrence_is_refused(world):
    # Retention archived (or skipped) everything through occurrence 4.
    assert drive(world.schedules.retire(S, 4 * EVERY, None, None)) is True
    runs = world.runs()
    for n in (0, 3, 4):
        assert start(runs, n) == StartOutcome(None, True)
        assert world.record(run_id(n)) is None
        with pytest.raises(NotMaterialized):
            drive(world.log.inspect_tail(run_id(n)))
    assert world.cursor().high_water_ms is None  # a refused start advances nothing
    # The next occurrence starts normally.
    started = start(runs, 5)
    assert started.replayed is False and started.record.status == RUNNING


def test_every_start_reads_the_watermark_afresh(world):
    runs = world.runs()
    start(runs, 0)  # reads the (empty) archive watermark
    drive(runs.finish_execution(run_id(0), status=COMPLETED, output=None, finished_at_ms=T0))
    drive(world.schedules.retire(S, EVERY, None, None))  # retention moves it meanwhile
    assert start(runs, 1) == StartOutcome(None, True)
    assert start(runs, 2).replayed is False


def test_a_held_occurrence_is_refused_but_kept(world):
    runs = world.runs()
    start(runs, 0)
    final = drive(runs.finish_execution(run_id(0), status=COMPLETED, output={"x": 1}, finished_at_ms=T0))
    drive(world.schedules.retire(S, 0, run_id(0), None, hold=True))
    assert start(world.runs("worker-b"), 0) == StartOutcome(None, True)
    assert drive(world.runs("worker-b").load_execution(run_id(0))) == final  # still readable


# --- ownership: a restarted process ---------------------------------------------------


def test_restarted_process_waits_for_the_lease_then_resumes_at_a_higher_epoch(world):
    a = world.runs("worker-a")
    run = run_id(4)
    start(a, 4)
    drive(a.append_steps(run, 1, STEPS[:2]))
    first = world.record(run)
    assert (first.owner_id, first.epoch) == ("worker-a", 1)
    # worker-a "dies"; worker-b (a new process, another owner id) resumes.
    b = world.runs("worker-b")
    assert world.clock.slept == []
    resumed = drive(b.load_steps(run))
    assert resumed == steps_of(run, 1, STEPS[:2])  # what the first owner wrote
    # It had to wait out worker-a's lease, retrying every CLAIM_RETRY_MS.
    assert world.clock.slept and set(world.clock.slept) == {CLAIM_RETRY_MS}
    assert world.clock.ms >= first.lease_expires_ms
    assert world.clock.ms - CLAIM_RETRY_MS < first.lease_expires_ms  # ... and no longer than it had to
    taken = world.record(run)
    assert (taken.owner_id, taken.epoch) == ("worker-b", 2)
    assert taken.lease_expires_ms == world.clock.ms + LEASE_MS
    assert drive(world.log.inspect_tail(run)).epoch == 2
    # The input is applied once: worker-b continues after worker-a's steps.
    drive(b.append_step(run, 3, *STEPS[2]))
    final = drive(b.finish_execution(run, status=COMPLETED, output={"by": "b"}, finished_at_ms=world.clock.ms))
    assert final.status == COMPLETED and final.output == {"by": "b"}
    check_settled_once(world, run, {"outcome": "completed", "result": {"by": "b"}}, steps=3)
    log = world.log_records(run)
    assert [(r.envelope.producer_id, r.envelope.epoch) for r in log] == (
        [("worker-a", 1)] * 4 + [("worker-b", 2)] * 2)


def test_a_claim_that_never_comes_stops_at_its_bound(world, monkeypatch):
    """Another owner whose lease never lapses (renewed on every sleep here):
    the claim loop stops at CLAIM_ATTEMPTS_MAX, loudly, instead of spinning."""
    import model.runs as runs_module

    monkeypatch.setattr(runs_module, "CLAIM_ATTEMPTS_MAX", 5)
    a = world.runs("worker-a")
    run = run_id(4)
    start(a, 4)
    claim = a._claims[run]

    async def renew() -> None:
        await world.ledger.renew_ownership(claim, LEASE_MS, world.clock.ms)

    world.clock.on_sleep = renew
    with pytest.raises(AssertionError, match="no claim after 5 attempts"):
        drive(world.runs("worker-b").load_steps(run))
    assert world.clock.slept == [CLAIM_RETRY_MS] * 4
    assert (world.record(run).owner_id, world.record(run).epoch) == ("worker-a", 1)


def test_the_same_owner_id_reclaims_without_waiting(world):
    """A restarted process under the same owner id (the scenario's node label)
    takes its own run back at once, still at a higher epoch."""
    start(world.runs("worker-a"), 0)
    again = world.runs("worker-a")
    assert drive(again.load_steps(run_id(0))) == ()
    assert world.clock.slept == []
    assert world.record(run_id(0)).epoch == 2
    assert world.families(run_id(0)) == [CREATED_FAMILY, RUN_INPUT_FAMILY]


def test_stale_owner_is_fenced_after_takeover(world):
    a = world.runs("worker-a")
    run = run_id(5)
    start(a, 5)
    drive(a.append_steps(run, 1, STEPS[:1]))
    b = world.runs("worker-b")
    drive(b.load_steps(run))  # takes over at epoch 2 (after a's lease)
    before = world.log_records(run)
    # worker-a still believes it owns the run: its append is fenced by the log ...
    with pytest.raises(FenceRejected) as fenced:
        drive(a.append_step(run, 2, *STEPS[1]))
    assert (fenced.value.attempted_epoch, fenced.value.actual_epoch) == (1, 2)
    with pytest.raises(FenceRejected):
        drive(a.append_steps(run, 2, STEPS[1:]))
    # ... and its settlement by the ledger.
    with pytest.raises(OwnershipLost):
        drive(a.finish_execution(run, status=COMPLETED, output={"by": "a"}, finished_at_ms=world.clock.ms))
    assert world.log_records(run) == before
    assert world.record(run).reserved_record is None and world.record(run).outcome is None
    # The new owner carries on as if nothing happened.
    drive(b.append_steps(run, 2, STEPS[1:]))
    final = drive(b.finish_execution(run, status=COMPLETED, output={"by": "b"}, finished_at_ms=world.clock.ms))
    assert final.output == {"by": "b"}
    check_settled_once(world, run, {"outcome": "completed", "result": {"by": "b"}}, steps=3)
    # worker-a stays fenced: it still holds its old claim in memory, so even
    # after the settlement every write it tries is refused and changes nothing.
    with pytest.raises(OwnershipLost):
        drive(a.finish_execution(run, status=FAILED, output=None, finished_at_ms=0))
    # (Its view of the log is stale too: its next seq is 2, whose batch id the
    # new owner already used, so the log answers with the batch-id conflict,
    # which the append rule checks before the fence.)
    with pytest.raises((FenceRejected, AppendConflict)):
        drive(a.append_step(run, 2, "late", STEP_COMPLETED, None))
    check_settled_once(world, run, {"outcome": "completed", "result": {"by": "b"}}, steps=3)


def test_stale_owner_settlement_after_takeover_is_refused_even_with_the_same_record(world):
    a = world.runs("worker-a")
    run = run_id(6)
    start(a, 6)
    b = world.runs("worker-b")
    drive(b.load_steps(run))
    with pytest.raises(OwnershipLost):
        drive(a.finish_execution(run, status=COMPLETED, output={"same": True}, finished_at_ms=world.clock.ms))
    drive(b.finish_execution(run, status=COMPLETED, output={"same": True}, finished_at_ms=world.clock.ms))
    check_settled_once(world, run, {"outcome": "completed", "result": {"same": True}}, steps=0)


# --- finish ------------------------------------------------------------------------


def test_finishing_twice_returns_the_same_record(world):
    runs = world.runs()
    run = run_id(7)
    start(runs, 7)
    final = drive(runs.finish_execution(run, status=COMPLETED, output={"v": 1}, finished_at_ms=T0 + 1,
                                        steps=STEPS[:1], first_seq=1))
    # The same finish again, another outcome, in this process or a restarted one:
    # the first settlement stands, nothing more is written.
    assert drive(runs.finish_execution(run, status=COMPLETED, output={"v": 1}, finished_at_ms=T0 + 2,
                                       steps=STEPS[:1], first_seq=1)) == final
    assert drive(runs.finish_execution(run, status=FAILED, output={"v": 2}, finished_at_ms=T0 + 3)) == final
    assert drive(world.runs("worker-b").finish_execution(run, status=COMPLETED, output={"v": 3},
                                                         finished_at_ms=T0 + 4)) == final
    assert world.clock.slept == []
    check_settled_once(world, run, {"outcome": "completed", "result": {"v": 1}}, steps=1)
    assert world.record(run).settled_at_ms == T0 + 1


def test_crash_after_reserve_second_owner_settles_with_the_reserved_record(world):
    """The canonical record wins: worker-a reserved {"v": "a"} and died before
    appending it; worker-b recomputes another output (another status even),
    but settles with what was reserved."""
    a = world.runs("worker-a", CrashAt(RESERVED_BEFORE_APPEND))
    run = run_id(8)
    start(a, 8)
    drive(a.append_steps(run, 1, STEPS[:2]))
    with pytest.raises(Crash):
        drive(a.finish_execution(run, status=COMPLETED, output={"v": "a"}, finished_at_ms=T0,
                                 steps=STEPS[2:], first_seq=3))
    reserved = {"outcome": "completed", "result": {"v": "a"}}
    assert settlement_of(world.record(run).reserved_record) == reserved
    assert world.settlements(run) == []
    b = world.runs("worker-b")
    resumed = drive(b.load_steps(run))
    assert resumed == steps_of(run, 1, STEPS[:2])  # the crashed batch never landed
    final = drive(b.finish_execution(run, status=FAILED, output={"errorTag": "Other", "message": "b differs"},
                                     finished_at_ms=world.clock.ms, steps=STEPS[2:], first_seq=3))
    assert (final.status, final.output) == (COMPLETED, {"v": "a"})
    check_settled_once(world, run, reserved, steps=3)


def test_crash_after_reserve_second_owner_settles_with_it_without_reading_steps(world):
    """The reserved record wins even when the new owner finishes straight away."""
    a = world.runs("worker-a", CrashAt(RESERVED_BEFORE_APPEND))
    start(a, 8)
    with pytest.raises(Crash):
        drive(a.finish_execution(run_id(8), status=COMPLETED, output={"v": "a"}, finished_at_ms=T0))
    final = drive(world.runs("worker-b").finish_execution(run_id(8), status=COMPLETED, output={"v": "b"},
                                                          finished_at_ms=world.clock.ms))
    assert final.output == {"v": "a"}
    check_settled_once(world, run_id(8), {"outcome": "completed", "result": {"v": "a"}}, steps=0)


def test_crash_after_append_second_owner_finalizes_the_logged_record(world):
    a = world.runs("worker-a", CrashAt(APPENDED_BEFORE_FINALIZE))
    run = run_id(9)
    start(a, 9)
    with pytest.raises(Crash):
        drive(a.finish_execution(run, status=COMPLETED, output={"v": "a"}, finished_at_ms=T0,
                                 steps=STEPS, first_seq=1))
    assert len(world.settlements(run)) == 1 and world.record(run).outcome is None
    b = world.runs("worker-b")
    assert drive(b.load_steps(run)) == steps_of(run, 1, STEPS)  # the settle batch carried the steps
    final = drive(b.finish_execution(run, status=COMPLETED, output={"v": "b"}, finished_at_ms=world.clock.ms,
                                     steps=(), first_seq=4))
    assert final.output == {"v": "a"}
    check_settled_once(world, run, {"outcome": "completed", "result": {"v": "a"}}, steps=3)


# --- every crash point of the lifecycle ---------------------------------------------------


# A submission worker's step points (a run's steps go through the kernel's
# own) and the client's submit:after-materialize (a run's log is born with it).
WORKER_STEP_POINTS = (MATERIALIZED_BEFORE_READY, STEP_DONE_BEFORE_RECORD, STEP_RECORDED)


def test_the_lifecycle_reaches_every_run_crash_point(world):
    seen = Recording()
    runs = world.runs(failpoints=seen)
    start(runs, 0)
    drive(runs.append_steps(run_id(0), 1, STEPS[:2]))
    drive(runs.finish_execution(run_id(0), status=COMPLETED, output={}, finished_at_ms=T0, steps=STEPS[2:],
                                first_seq=3))
    expected = [p for p in SUBMISSION_CRASH_POINTS if p not in WORKER_STEP_POINTS]
    assert seen.reached == expected


def recover(world: World, owner: str, output: dict) -> ExecutionRecord | None:
    """What a restarted driver does: resume every live run of the schedule
    from its log, append what is missing, finish."""
    runs = world.runs(owner)
    final = None
    for live in drive(runs.live_executions(S)):
        have = len(drive(runs.load_steps(live.run_id)))
        if have < 2:
            drive(runs.append_steps(live.run_id, have + 1, STEPS[have:2]))
            have = 2
        final = drive(runs.finish_execution(live.run_id, status=COMPLETED, output=output,
                                            finished_at_ms=world.clock.ms, steps=STEPS[have:], first_seq=have + 1))
    return final


@pytest.mark.parametrize("point", [p for p in SUBMISSION_CRASH_POINTS if p not in WORKER_STEP_POINTS])
def test_a_crash_at_any_point_settles_exactly_once(world, point):
    run = run_id(2)
    a = world.runs("worker-a", CrashAt(point))
    with pytest.raises(Crash):
        start(a, 2)
        drive(a.append_steps(run, 1, STEPS[:2]))
        drive(a.finish_execution(run, status=COMPLETED, output={"by": "a"}, finished_at_ms=T0, steps=STEPS[2:],
                                 first_seq=3))
    # A duplicate alarm in the restarted process replays, never re-admits.
    again = start(world.runs("worker-b"), 2)
    assert again.replayed and again.record is not None and again.record.run_id == run
    final = recover(world, "worker-b", {"by": "b"})
    reserved_by_a = point in (RESERVED_BEFORE_APPEND, APPENDED_BEFORE_FINALIZE, FINALIZED_BEFORE_REPLY)
    expected = {"outcome": "completed", "result": {"by": "a" if reserved_by_a else "b"}}
    if point in (APPENDED_BEFORE_FINALIZE, FINALIZED_BEFORE_REPLY):
        # Settled before the crash, or its settlement already in the log: the
        # recovery scan finalizes it, so nothing is live to resume.
        assert final is None
        final = drive(world.runs("worker-b").finish_execution(run, status=COMPLETED, output={"by": "b"},
                                                              finished_at_ms=world.clock.ms))
    assert (final.status, final.output) == (COMPLETED, expected["result"])
    check_settled_once(world, run, expected, steps=3)
    row = world.record(run)
    assert row.ready and row.input_applied
    assert world.cursor().high_water_ms == 2 * EVERY
    inputs = [r.envelope.payload for r in world.log_records(run) if r.envelope.family == RUN_INPUT_FAMILY]
    assert inputs == [{"submissionId": row.submission_id, "input": row.input, "principalId": S,
                       "idempotencyKey": run, "queueSeq": 1}]


# --- admitted, not ready ----------------------------------------------------------------


def test_admitted_but_not_ready_is_live_and_ensure_owned_completes_admission(world):
    a = world.runs("worker-a", CrashAt(ADMITTED_BEFORE_READY))
    drive(world.schedules.advance(S, EVERY))  # an earlier occurrence ran
    run = run_id(3)
    with pytest.raises(Crash):
        start(a, 3)
    row = world.record(run)
    assert row is not None and not row.ready and row.owner_id is None
    assert world.cursor().high_water_ms == EVERY  # the cursor never heard of it
    with pytest.raises(NotMaterialized):
        drive(world.log.inspect_tail(run))
    # The restarted process sees it: live, and the schedule's high-water mark.
    b = world.runs("worker-b")
    live = drive(b.live_executions(S))
    assert live == (ExecutionRecord(run, S, 3 * EVERY, 1, {"occurrence": 3}, RUNNING, 3 * EVERY + 7, None, None),)
    assert drive(b.schedule_high_water_ms(S)) == 3 * EVERY
    assert drive(b.load_execution(run)) == live[0]
    # Resuming it finishes its admission (log, ready, cursor), then claims it
    # (nobody held it: no wait) and applies the input once.
    assert drive(b.load_steps(run)) == ()
    assert world.clock.slept == []
    row = world.record(run)
    assert (row.ready, row.input_applied, row.owner_id, row.epoch) == (True, True, "worker-b", 1)
    assert world.cursor().high_water_ms == 3 * EVERY
    assert world.families(run) == [CREATED_FAMILY, RUN_INPUT_FAMILY]
    assert drive(world.log.inspect_tail(run)).epoch == 1
    drive(b.append_steps(run, 1, STEPS))
    drive(b.finish_execution(run, status=COMPLETED, output={"ok": True}, finished_at_ms=world.clock.ms))
    check_settled_once(world, run, {"outcome": "completed", "result": {"ok": True}}, steps=3)
    assert drive(b.live_executions(S)) == ()
    assert drive(b.schedule_high_water_ms(S)) == 3 * EVERY


def test_admitted_but_not_ready_completes_through_finish_too(world):
    """``_ensure_owned`` is behind every entry point, finish included."""
    with pytest.raises(Crash):
        start(world.runs("worker-a", CrashAt(ADMITTED_BEFORE_READY)), 1)
    b = world.runs("worker-b")
    final = drive(b.finish_execution(run_id(1), status=COMPLETED, output={"ok": 1}, finished_at_ms=world.clock.ms,
                                     steps=STEPS[:1], first_seq=1))
    assert final.status == COMPLETED
    check_settled_once(world, run_id(1), {"outcome": "completed", "result": {"ok": 1}}, steps=1)
    assert world.cursor().high_water_ms == EVERY


def test_live_executions_and_high_water_are_per_schedule(world):
    runs = world.runs()
    start(runs, 2)
    drive(runs.start_execution(run_id_for("other", 9 * EVERY), schedule_id="other", occurrence_ms=9 * EVERY,
                               flow_version=1, input=None, started_at_ms=T0))
    assert [r.run_id for r in drive(runs.live_executions(S))] == [run_id(2)]
    assert drive(runs.schedule_high_water_ms(S)) == 2 * EVERY
    assert drive(runs.schedule_high_water_ms("other")) == 9 * EVERY
    assert drive(runs.schedule_high_water_ms("none")) is None


def test_parked_run_is_reported_parked_by_live_executions(world):
    runs = world.runs()
    run = run_id(1)
    start(runs, 1)
    drive(runs.append_steps(run, 1, (("charge", STEP_STARTED, None), ("charge", EFFECT_INDOUBT, None))))
    drive(runs.park_execution(run))
    (live,) = drive(world.runs("auditor").live_executions(S))
    assert live.status == PARKED
    # An operator's resolution: steps appended, then the run finishes.
    b = world.runs("operator")
    assert len(drive(b.load_steps(run))) == 2
    drive(b.append_step(run, 3, "charge", STEP_COMPLETED, {"charged": True}))
    drive(b.finish_execution(run, status=COMPLETED, output={}, finished_at_ms=world.clock.ms))
    check_settled_once(world, run, {"outcome": "completed", "result": {}}, steps=3)


def test_sqlite_reopen_resumes_from_the_stores(tmp_path):
    """A restart on SQLite: a new connection, a new process, the same run."""
    w = World("sqlite", tmp_path)
    a = w.runs("worker-a")
    start(a, 4)
    drive(a.append_steps(run_id(4), 1, STEPS[:2]))
    w.conn.close()
    w.conn = open_database(str(tmp_path / "runs.db"))
    w.ledger, w.log, w.schedules = (SqliteSubmissionLedger(w.conn), SqliteConversationStore(w.conn),
                                    SqliteScheduleStore(w.conn))
    try:
        b = w.runs("worker-b")
        assert drive(b.schedule_high_water_ms(S)) == 4 * EVERY
        assert drive(b.load_steps(run_id(4))) == steps_of(run_id(4), 1, STEPS[:2])
        drive(b.finish_execution(run_id(4), status=COMPLETED, output={"r": 1}, finished_at_ms=w.clock.ms,
                                 steps=STEPS[2:], first_seq=3))
        check_settled_once(w, run_id(4), {"outcome": "completed", "result": {"r": 1}}, steps=3)
    finally:
        w.close()


# --- once model bugs (found by these tests, fixed in model/runs.py) ---------------------------


def test_waiting_for_a_lease_ends_when_the_owner_settles_the_run(world):
    a = world.runs("worker-a")
    run = run_id(1)
    start(a, 1)
    drive(a.append_steps(run, 1, STEPS[:1]))
    b = world.runs("worker-b")

    async def owner_finishes_meanwhile():
        if len(world.clock.slept) == 1:  # worker-a is alive after all, and settles while b waits
            await a.finish_execution(run, status=COMPLETED, output={"by": "a"}, finished_at_ms=world.clock.ms)

    world.clock.on_sleep = owner_finishes_meanwhile
    assert drive(b.load_steps(run)) == steps_of(run, 1, STEPS[:1])
    check_settled_once(world, run, {"outcome": "completed", "result": {"by": "a"}}, steps=1)


def test_an_occurrence_retired_by_another_process_is_refused(world):
    from model.retention import run_summary

    a = world.runs("worker-a")
    start(a, 0)  # worker-a has now read the (empty) watermark
    drive(a.finish_execution(run_id(0), status=COMPLETED, output={}, finished_at_ms=world.clock.ms))
    # Retention in another process archives and deletes the run, as Retention does.
    summary = drive(run_summary(world.ledger, world.log, run_id(0), world.record(run_id(0))))
    assert drive(world.schedules.retire(S, 0, run_id(0), summary)) is True
    drive(world.log.delete_conversation(run_id(0)))
    drive(world.ledger.purge_conversation(run_id(0)))
    assert start(world.runs("worker-b"), 0) == StartOutcome(None, True)  # a fresh process refuses it
    assert start(a, 0) == StartOutcome(None, True)  # worker-a starts occurrence 0 a second time


def test_a_parked_run_reads_as_parked(world):
    runs = world.runs()
    start(runs, 1)
    drive(runs.append_steps(run_id(1), 1, (("charge", STEP_STARTED, None), ("charge", EFFECT_INDOUBT, None))))
    assert drive(runs.park_execution(run_id(1))).status == PARKED
    assert drive(world.runs("b").load_execution(run_id(1))).status == PARKED
    assert start(world.runs("c"), 1).record.status == PARKED


def test_append_to_a_settled_run_is_execution_not_running(world):
    runs = world.runs()
    start(runs, 1)
    drive(runs.finish_execution(run_id(1), status=COMPLETED, output={}, finished_at_ms=T0))
    with pytest.raises(ExecutionNotRunning):
        drive(runs.append_step(run_id(1), 1, "late", STEP_COMPLETED, None))


def test_load_steps_of_an_unknown_run_is_empty(world):
    assert drive(world.runs().load_steps(run_id(42))) == ()


def test_finish_after_an_appended_settlement_without_reading_the_log(world):
    a = world.runs("worker-a", CrashAt(APPENDED_BEFORE_FINALIZE))
    start(a, 1)
    with pytest.raises(Crash):
        drive(a.finish_execution(run_id(1), status=COMPLETED, output={"v": "a"}, finished_at_ms=T0))
    final = drive(world.runs("worker-b").finish_execution(run_id(1), status=COMPLETED, output={"v": "b"},
                                                          finished_at_ms=world.clock.ms))
    assert final.output == {"v": "a"}
    check_settled_once(world, run_id(1), {"outcome": "completed", "result": {"v": "a"}}, steps=0)


def test_no_step_is_recorded_after_the_settlement(world):
    a = world.runs("worker-a", CrashAt(APPENDED_BEFORE_FINALIZE))
    run = run_id(1)
    start(a, 1)
    with pytest.raises(Crash):
        drive(a.finish_execution(run, status=COMPLETED, output={"v": "a"}, finished_at_ms=T0, steps=STEPS[:1],
                                 first_seq=1))
    b = world.runs("worker-b")
    have = len(drive(b.load_steps(run)))
    try:  # what Kernel._migrate does when the resumed run is on another flow version
        drive(b.append_step(run, have + 1, "migrate:1->2", EXECUTION_MIGRATED, {"from": 1, "to": 2}))
    except ExecutionStoreError:
        pass  # refusing it is fine
    drive(b.finish_execution(run, status=COMPLETED, output={"v": "b"}, finished_at_ms=world.clock.ms))
    assert world.families(run)[-1] == SETTLED_FAMILY
    check_settled_once(world, run, {"outcome": "completed", "result": {"v": "a"}}, steps=1)
