"""The submission lifecycle written once (model/lifecycle.py), and the retry
rule (model/retry.py), on both adapters.

Covered: admission's store calls and crash points in order, a replay that
stops (runs) or completes the admission (the client), ``log_is_new``;
terminalization picks the canonical record (the log's, else the reserved
one, else a fresh one, computed only then), appends unless the record is
logged (or ``append_if_logged``), finalizes at the given time or the clock,
and asserts its pre- and post-conditions; ``adopt_logged`` finalizes only a
settlement the log holds. Each call's exact sequence of store calls is
pinned: the simulator's trace digest is made of them.
"""
from __future__ import annotations

import pytest

from model.canonical import digest
from model.conversation.records import (
    AcknowledgedWriteLost,
    ConversationStoreError,
    FencedAppendRequest,
    HistoryCorrupted,
    NotMaterialized,
    RecordEnvelope,
)
from model.failpoints import (
    ADMITTED_BEFORE_READY,
    APPENDED_BEFORE_FINALIZE,
    FINALIZED_BEFORE_REPLY,
    MATERIALIZED_BEFORE_READY,
    READY_BEFORE_RECEIPT,
    RESERVED_BEFORE_APPEND,
)
from model.ledger.records import OwnershipLost, SettlementConflict
from model.lifecycle import (
    ADMISSION_PRODUCER,
    SETTLED_FAMILY,
    SubmissionLifecycle,
    canonical_record,
    record_envelope,
    settle_batch_id,
)
from model.ledger.records import settlement_envelope, settlement_of
from model.retry import error_name, is_retryable
from model.sqlite_db import SqliteWriteContention
from scenarios.storage import run_sync as drive  # a call that must not suspend
from tests.fakes import Stores

C = "conv-1"
OWNER = "worker-1"
LEASE_MS = 30_000
DONE = {"outcome": "completed", "result": {"n": 1}}


def env(claim, record=DONE, at_ms=1_000):
    """``record``'s settlement envelope for ``claim``'s submission."""
    return settlement_envelope(claim.submission_id, record, at_ms, receipt="rcpt-test")


class Recorder:
    """A port that records each call's method name, in order."""

    def __init__(self, target, calls: list, prefix: str) -> None:
        self._target = target
        self._calls = calls
        self._prefix = prefix

    def __getattr__(self, method):
        fn = getattr(self._target, method)

        async def call(*args, **kwargs):
            self._calls.append(f"{self._prefix}.{method}")
            return await fn(*args, **kwargs)

        return call


class Points:
    def __init__(self, calls: list) -> None:
        self._calls = calls

    def hit(self, name: str) -> None:
        self._calls.append(name)


class World(Stores):
    def __init__(self, kind: str, tmp_path) -> None:
        super().__init__(kind, tmp_path, "lifecycle.db")
        self.calls: list[str] = []

    def now(self) -> int:
        return self.ms

    def lifecycle(self, owner_id: str | None = OWNER) -> SubmissionLifecycle:
        return SubmissionLifecycle(Recorder(self.ledger, self.calls, "ledger"), Recorder(self.log, self.calls, "log"),
                                   now_ms=self.now, owner_id=owner_id, failpoints=Points(self.calls))

    def admitted_and_claimed(self, owner_id: str = OWNER):
        life = self.lifecycle(owner_id)
        admission = drive(life.admit(C, "p", "k1", {"x": 1}, self.ms, complete_replay=True))
        claim = drive(self.ledger.claim(C, owner_id, LEASE_MS, self.ms))
        assert claim is not None and claim.submission_id == admission.submission_id
        drive(self.log.materialize(C, owner_id, claim.epoch))
        self.calls.clear()
        return life, claim

    def append(self, claim):
        """An append port as the callers give it: a fenced append at the tail."""
        async def append(batch_id, entry):
            tail = await self.log.inspect_tail(C)
            await self.log.append(FencedAppendRequest(
                conversation_id=C, batch_id=batch_id, producer_id=claim.owner_id, epoch=claim.epoch,
                expected_tail_seq=tail.tail_seq, expected_tail_digest=tail.tail_digest,
                records=(record_envelope(batch_id, 0, entry, self.ms, claim.owner_id, claim.epoch),)))
            self.calls.append("append")
        return append

    def settlements(self) -> list:
        records = drive(self.log.read(C, 0, 100))
        return [r.envelope.payload for r in records if r.envelope.family == SETTLED_FAMILY]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


@pytest.fixture(params=["memory", "sqlite"])
def world(request, tmp_path):
    w = World(request.param, tmp_path)
    yield w
    w.close()


# --- admission ---------------------------------------------------------------------


def test_admission_passes_its_crash_points_in_order(world):
    life = world.lifecycle(None)
    admission = drive(life.admit(C, "p", "k1", {"x": 1}, 1_000, complete_replay=True))
    assert admission.replayed is False
    assert world.calls == ["ledger.admit", ADMITTED_BEFORE_READY, "log.inspect_tail", "log.materialize",
                           MATERIALIZED_BEFORE_READY, "ledger.mark_ready", READY_BEFORE_RECEIPT]
    record = drive(world.ledger.get(admission.submission_id))
    assert record.ready and record.admitted_at_ms == 1_000
    assert drive(world.log.inspect_tail(C)).epoch == 0


def test_a_replay_completes_the_admission_only_when_asked(world):
    life = world.lifecycle(None)
    first = drive(life.admit(C, "p", "k1", {"x": 1}, 1_000, complete_replay=True))
    world.calls.clear()
    again = drive(life.admit(C, "p", "k1", {"x": 1}, 2_000, complete_replay=False))
    assert again.replayed and again.submission_id == first.submission_id
    assert world.calls == ["ledger.admit"]  # the runs layer: the replay stops at the receipt
    world.calls.clear()
    drive(life.admit(C, "p", "k1", {"x": 1}, 2_000, complete_replay=True))
    # The client: through ready again (the log exists: not materialized twice).
    assert world.calls == ["ledger.admit", ADMITTED_BEFORE_READY, "log.inspect_tail", MATERIALIZED_BEFORE_READY,
                           "ledger.mark_ready", READY_BEFORE_RECEIPT]


def test_a_new_log_is_materialized_outright_after_the_hook(world):
    life = world.lifecycle(None)
    seen = []

    async def before_ready(admission):
        seen.append(admission.submission_id)
        world.calls.append("hook")

    admission = drive(life.admit(C, "p", "k1", {"x": 1}, 1_000, complete_replay=False, log_is_new=True,
                                 before_ready=before_ready))
    assert seen == [admission.submission_id]
    assert world.calls == ["ledger.admit", ADMITTED_BEFORE_READY, "hook", "log.materialize", "ledger.mark_ready",
                           READY_BEFORE_RECEIPT]  # a run's admission: no submit:after-materialize


def test_make_ready_finishes_an_admission_that_stopped_before_ready(world):
    admission = drive(world.ledger.admit(C, "p", "k1", {"x": 1}, 1_000))
    drive(world.lifecycle(None).make_ready(C, admission.submission_id))
    assert world.calls == ["log.inspect_tail", "log.materialize", MATERIALIZED_BEFORE_READY, "ledger.mark_ready"]
    assert drive(world.ledger.get(admission.submission_id)).ready
    assert drive(world.log.inspect_tail(C)).epoch == 0  # the admission producer's
    drive(world.log.materialize(C, ADMISSION_PRODUCER, 0))  # ... whose materialize is a no-op


class _TakenOverMeanwhile:
    """The log, where another process materializes the conversation and
    takes it over (epoch 1) right after this caller found it missing."""

    def __init__(self, log) -> None:
        self._log = log

    def __getattr__(self, method):
        return getattr(self._log, method)

    async def inspect_tail(self, conversation_id):
        try:
            return await self._log.inspect_tail(conversation_id)
        finally:
            await self._log.materialize(conversation_id, "worker-9", 1)


def test_make_ready_after_a_claimed_owner_materialized_the_conversation_meanwhile(world):
    """A client that found no log (its admission's first half) is slow; a
    worker's recovery materializes the conversation and claims it (epoch 1)
    before the client's own materialize at epoch 0, which the log refuses as
    stale (``FenceRejected``). The conversation exists, which is all the
    admission's second half needs: the client marks the submission ready
    instead of failing (found by ledger-storm seed 1, 3 days, retention on)."""
    admission = drive(world.ledger.admit(C, "p", "k1", {"x": 1}, 1_000))
    life = world.lifecycle(None)
    life.log = _TakenOverMeanwhile(life.log)
    drive(life.make_ready(C, admission.submission_id))
    assert drive(world.ledger.get(admission.submission_id)).ready
    assert drive(world.log.inspect_tail(C)).epoch == 1  # the owner's, untouched


# --- terminalization ---------------------------------------------------------------


def test_canonical_record_prefers_the_log_then_the_reservation():
    def never():
        raise AssertionError("fresh() is computed only when nothing is canonical yet")

    assert canonical_record({"a": 1}, {"b": 2}, never) == {"a": 1}
    assert canonical_record(None, {"b": 2}, never) == {"b": 2}
    assert canonical_record(None, None, lambda: {"c": 3}) == {"c": 3}


def test_terminalize_reserves_appends_finalizes_in_order(world):
    life, claim = world.admitted_and_claimed()
    terminal = drive(life.terminalize(claim, receipt="rcpt-test", logged=None, reserved=None, fresh=lambda: DONE,
                                      append=world.append(claim), finalized_at_ms=5_000))
    assert world.calls == ["ledger.reserve_settlement", RESERVED_BEFORE_APPEND, "append", APPENDED_BEFORE_FINALIZE,
                           "ledger.finalize_settlement", FINALIZED_BEFORE_REPLY]
    assert terminal.record == DONE and terminal.reserved.record_digest == digest(env(claim))
    assert (terminal.settlement.outcome, terminal.settlement.settled_at_ms) == ("completed", 5_000)
    assert world.settlements() == [env(claim)["payload"]]
    assert drive(world.log.lookup_batch(C, settle_batch_id(claim.submission_id))) is not None


def test_terminalize_finalizes_at_the_clock_without_a_time(world):
    life, claim = world.admitted_and_claimed()
    world.ms = 7_777
    terminal = drive(life.terminalize(claim, receipt="rcpt-test", logged=None, reserved=None, fresh=lambda: DONE,
                                      append=world.append(claim)))
    assert terminal.settlement.settled_at_ms == 7_777


def test_a_reserved_record_wins_and_on_reserved_sees_it(world):
    life, claim = world.admitted_and_claimed()
    drive(world.ledger.reserve_settlement(claim, env(claim)))  # a predecessor reserved, then died
    remembered = []
    terminal = drive(life.terminalize(claim, receipt="rcpt-test", logged=None, reserved=env(claim), fresh=lambda: {"outcome": "aborted"},
                                      append=world.append(claim), on_reserved=remembered.append))
    assert terminal.record == DONE and remembered == [env(claim)]
    assert settlement_of({"payload": world.settlements()[0]}) == DONE


def test_a_logged_record_is_not_appended_again_unless_the_append_is_append_once(world):
    life, claim = world.admitted_and_claimed()
    drive(world.ledger.reserve_settlement(claim, env(claim)))
    drive(world.append(claim)(settle_batch_id(claim.submission_id), env(claim)))
    world.calls.clear()
    drive(life.terminalize(claim, receipt="rcpt-test", logged=env(claim), reserved=env(claim), fresh=lambda: None,
                           append=world.append(claim),
                           finalized_at_ms=5_000))
    assert "append" not in world.calls  # the runs layer knows from its read
    assert len(world.settlements()) == 1
    # The worker's append-once is called either way (and looks the batch up itself).
    called = []

    async def append_once(batch_id, entry):
        called.append(batch_id)

    drive(life.terminalize(claim, receipt="rcpt-test", logged=env(claim), reserved=env(claim), fresh=lambda: None, append=append_once,
                           append_if_logged=True, finalized_at_ms=5_000))
    assert called == [settle_batch_id(claim.submission_id)]


def test_a_conflicting_record_is_the_ledgers_typed_error(world):
    life, claim = world.admitted_and_claimed()
    drive(world.ledger.reserve_settlement(claim, env(claim)))
    with pytest.raises(SettlementConflict):
        drive(life.terminalize(claim, receipt="rcpt-test", logged=env(claim, {"outcome": "aborted"}), reserved=env(claim),
                               fresh=lambda: None,
                               append=world.append(claim)))
    assert world.settlements() == []


def test_a_stale_token_is_the_ledgers_typed_error(world):
    life, stale = world.admitted_and_claimed()
    world.ms += LEASE_MS + 1
    newer = drive(world.ledger.claim(C, "worker-2", LEASE_MS, world.ms))
    assert newer.epoch > stale.epoch
    with pytest.raises(OwnershipLost):
        drive(life.terminalize(stale, receipt="rcpt-test", logged=None, reserved=None, fresh=lambda: DONE, append=world.append(stale)))


def test_terminalize_asserts_the_caller_holds_its_own_claim(world):
    _, claim = world.admitted_and_claimed()
    with pytest.raises(AssertionError):  # another process's token
        drive(world.lifecycle("worker-2").terminalize(claim, receipt="rcpt-test", logged=None, reserved=None, fresh=lambda: DONE,
                                                      append=world.append(claim)))
    with pytest.raises(AssertionError):  # a process that only admits
        drive(world.lifecycle(None).terminalize(claim, receipt="rcpt-test", logged=None, reserved=None, fresh=lambda: DONE,
                                                append=world.append(claim)))
    assert world.calls == []  # refused before any store call


def test_terminalize_asserts_the_ledger_settled_what_it_reserved(world):
    life, claim = world.admitted_and_claimed()

    class LyingLedger:
        def __init__(self, ledger):
            self._ledger = ledger

        def __getattr__(self, name):
            return getattr(self._ledger, name)

        async def finalize_settlement(self, submission_id, now_ms):
            settlement = await self._ledger.finalize_settlement(submission_id, now_ms)
            return type(settlement)(submission_id, settlement.outcome, "0" * 64, settlement.settled_at_ms)

    life.ledger = LyingLedger(world.ledger)
    with pytest.raises(AssertionError):
        drive(life.terminalize(claim, receipt="rcpt-test", logged=None, reserved=None, fresh=lambda: DONE, append=world.append(claim)))


# --- adopting a logged settlement --------------------------------------------------


def test_adopt_logged_finalizes_only_a_settlement_the_log_holds(world):
    life, claim = world.admitted_and_claimed()
    record = drive(world.ledger.get(claim.submission_id))
    assert drive(life.adopt_logged(C, record)) is None  # nothing reserved
    assert world.calls == []
    drive(world.ledger.reserve_settlement(claim, env(claim)))
    record = drive(world.ledger.get(claim.submission_id))
    assert drive(life.adopt_logged(C, record)) is None  # reserved, not in the log
    assert world.calls == ["log.lookup_batch"]
    drive(world.append(claim)(settle_batch_id(claim.submission_id), env(claim)))
    world.calls.clear()
    world.ms = 9_000
    settlement = drive(life.adopt_logged(C, record))
    assert (settlement.outcome, settlement.record_digest, settlement.settled_at_ms) == ("completed", digest(env(claim)),
                                                                                          9_000)
    assert world.calls == ["log.lookup_batch", "ledger.finalize_settlement", FINALIZED_BEFORE_REPLY]


def test_adopt_logged_of_a_log_not_materialized_is_none(world):
    admission = drive(world.ledger.admit("other", "p", "k", {}, 1_000))
    drive(world.ledger.mark_ready(admission.submission_id, 0))
    claim = drive(world.ledger.claim("other", OWNER, LEASE_MS, 1_000))
    drive(world.ledger.reserve_settlement(claim, env(claim)))
    record = drive(world.ledger.get(admission.submission_id))
    assert drive(world.lifecycle().adopt_logged("other", record)) is None
    assert drive(world.lifecycle().logged_settlement("other", admission.submission_id)) is None
    with pytest.raises(NotMaterialized):
        drive(world.log.inspect_tail("other"))


# --- the retry rule ------------------------------------------------------------------


class Flaky(Exception):
    retryable = True


def test_the_retry_rule():
    contention = SqliteWriteContention(100, "busy")
    assert is_retryable(contention) and is_retryable(Flaky())
    assert is_retryable(ConversationStoreError("wrapped", cause=contention))
    assert not is_retryable(ConversationStoreError("plain"))
    assert not is_retryable(ValueError("no")) and not is_retryable(OwnershipLost("s", 2))
    # A damaged read answer: retryable only for a process that reads again.
    damaged = HistoryCorrupted("c", 3, None, "short page")
    assert not is_retryable(damaged) and is_retryable(damaged, reread=True)
    # A log whose tail went back stays that way: never.
    lost = AcknowledgedWriteLost("c", 5, 3)
    assert not is_retryable(lost) and not is_retryable(lost, reread=True)
    assert error_name(lost) == "AcknowledgedWriteLost" and error_name(damaged) == "HistoryCorrupted"
    assert error_name(AttributeError("x")) == "AttributeError"  # a ``name`` descriptor is not a name
