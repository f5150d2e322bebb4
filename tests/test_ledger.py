"""The Submission Ledger: conformance of both adapters, planted bugs the
conformance must name, memory-vs-SQLite equivalence on random operation
sequences, SQLite write contention as a typed error, concurrent admission
across two connections, and durability across reopen."""
from __future__ import annotations

import itertools
import pickle
import sqlite3
import threading

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.kernel.sqlite_store import SqliteExecutionStore
from model.ledger.conformance import (CONFORMANCE_CHECKS, PAYLOAD_DAMAGE_CHECKS, ConformanceFailure,
                                     run_ledger_conformance)
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.records import (
    AbortConflict,
    AbortIntent,
    AdmissionConflict,
    AdmissionFence,
    Claim,
    InvalidSettlement,
    LedgerError,
    LedgerStoreError,
    OwnershipLost,
    SettlementConflict,
    UnknownSubmission,
)
from model.ledger.rules import decide_claim, decide_finalize
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.sqlite_db import SqliteWriteContention, open_database
from model.ledger.records import settlement_envelope


def _env(claim, record):
    """``record`` in ``claim``'s settlement record envelope (what the ledger reserves)."""
    return settlement_envelope(claim.submission_id, record, 0, receipt="rcpt-test")



def run(async_fn, *args):
    return trio.run(async_fn, *args)


@pytest.fixture
def sqlite_factory(tmp_path):
    """A fresh SQLite file per call; closes every ledger at teardown."""
    counter = itertools.count()
    opened: list[SqliteSubmissionLedger] = []

    def make_store() -> SqliteSubmissionLedger:
        ledger = SqliteSubmissionLedger.open(str(tmp_path / f"ledger-{next(counter)}.db"))
        opened.append(ledger)
        return ledger

    yield make_store
    for ledger in opened:
        ledger.close()


# --- conformance -------------------------------------------------------------------


def _damage_memory_payload(ledger, submission_id):
    # Through the store's surgery entry: a row put there by something else.
    ledger.surgery_put(attrs.evolve(ledger._row(submission_id), input_json="{not json"))


def _damage_sqlite_payload(ledger, submission_id):
    ledger.connection.execute("UPDATE ledger_submissions SET input_json = '{not json' WHERE submission_id = ?",
                              (submission_id,))


def _conforms(make_store, damage_payload):
    async def conformance():
        return await run_ledger_conformance(make_store, damage_payload=damage_payload)

    return run(conformance)


def test_memory_ledger_conforms():
    assert _conforms(InMemorySubmissionLedger, _damage_memory_payload) == list(CONFORMANCE_CHECKS)


def test_sqlite_ledger_conforms(sqlite_factory):
    assert _conforms(sqlite_factory, _damage_sqlite_payload) == list(CONFORMANCE_CHECKS)


def test_a_check_that_damages_a_stored_payload_runs_only_with_the_adapters_own_surgery():
    """Only the adapter's author can damage a stored row: without the hook
    the check is left out (not passed), and the others all run."""
    ran = run(run_ledger_conformance, InMemorySubmissionLedger)
    assert ran == [name for name in CONFORMANCE_CHECKS if name not in PAYLOAD_DAMAGE_CHECKS]
    assert PAYLOAD_DAMAGE_CHECKS and set(PAYLOAD_DAMAGE_CHECKS) <= set(CONFORMANCE_CHECKS)

    class ScanReadsPayloads(InMemorySubmissionLedger):
        async def scan_nonterminal(self, principal_id=None):  # the scan answering unreadable rows as before
            rows = await super().scan_nonterminal(principal_id)
            for row in rows:
                await self.get(row.submission_id)
            return rows

    with pytest.raises(ConformanceFailure) as info:
        _conforms(ScanReadsPayloads, _damage_memory_payload)
    assert info.value.failed_checks == PAYLOAD_DAMAGE_CHECKS


def test_conformance_accepts_async_factory_and_subsets():
    async def make_store():
        return InMemorySubmissionLedger()

    assert run(run_ledger_conformance, make_store) == [n for n in CONFORMANCE_CHECKS if n not in PAYLOAD_DAMAGE_CHECKS]

    async def subset():
        return await run_ledger_conformance(InMemorySubmissionLedger, checks=["capabilities", "admit-creates"])

    assert run(subset) == ["admit-creates", "capabilities"]

    async def unknown():
        await run_ledger_conformance(InMemorySubmissionLedger, checks=["no-such-check"])

    with pytest.raises(ValueError, match="no-such-check"):
        run(unknown)


def test_conformance_names_cover_every_rule():
    assert len(set(CONFORMANCE_CHECKS)) == len(CONFORMANCE_CHECKS)
    for prefix in ("admit-", "mark-ready", "claim-", "renew-", "release-", "mark-input-applied", "abort-",
                   "reserve-", "finalize-", "stale-token", "recovery-snapshot", "scan-nonterminal", "capabilities"):
        assert any(name.startswith(prefix) for name in CONFORMANCE_CHECKS), prefix


# --- planted bugs: the conformance must name the broken rule -----------------------


class ClaimNotFifo(InMemorySubmissionLedger):
    """Claims the newest ready submission instead of the head."""

    async def claim(self, conversation_id, owner_id, lease_ms, now_ms):
        ready = [row for row in self._nonterminal(conversation_id) if row.ready]
        decision = decide_claim(
            self._conversations.get(conversation_id), ready[-1] if ready else None, owner_id, lease_ms, now_ms
        )
        if decision.claim is not None:
            self._conversations[conversation_id] = decision.conversation
            self._put(decision.submission)
        return decision.claim


class EpochNotIncreasing(InMemorySubmissionLedger):
    """Forgets the conversation epoch, so every claim is epoch 1."""

    async def claim(self, conversation_id, owner_id, lease_ms, now_ms):
        claim = await super().claim(conversation_id, owner_id, lease_ms, now_ms)
        if claim is not None:
            self._conversations[conversation_id] = attrs.evolve(self._conversations[conversation_id], epoch=0)
        return claim


class StaleReserveAccepted(InMemorySubmissionLedger):
    """Reserves without checking the token (no fencing)."""

    async def reserve_settlement(self, token, record):
        row = self._row(token.submission_id)
        current = Claim(row.submission_id, row.owner_id or token.owner_id, row.epoch, row.lease_expires_ms or 0)
        return await super().reserve_settlement(current, record)


class FinalizeNotIdempotent(InMemorySubmissionLedger):
    """Finalizes again on every call, moving settled_at_ms."""

    async def finalize_settlement(self, submission_id, now_ms):
        row = self._row(submission_id)
        if row is not None:
            row = attrs.evolve(row, settled_at_ms=None, outcome=None)
        settlement, new_row = decide_finalize(submission_id, row, now_ms)
        if new_row is not None:
            self._put(new_row)
        return settlement


class RenewShortens(InMemorySubmissionLedger):
    """Sets the lease to now + lease_ms even when that is shorter."""

    async def renew_ownership(self, token, lease_ms, now_ms):
        renewal = await super().renew_ownership(token, lease_ms, now_ms)
        row = attrs.evolve(self._row(token.submission_id), lease_expires_ms=now_ms + lease_ms)
        self._put(row)
        return attrs.evolve(renewal, lease_expires_ms=now_ms + lease_ms)


class AbortKeepsLastAuthor(InMemorySubmissionLedger):
    async def request_abort(self, submission_id, author, reason, now_ms):
        row = self._row(submission_id)
        if row is not None and row.settled_at_ms is None:
            self._put(attrs.evolve(row, abort_author=None, abort_reason=None))
        return await super().request_abort(submission_id, author, reason, now_ms)


class AbortQueuedSettlesAlone(InMemorySubmissionLedger):
    """Settles a queued (ready, never claimed) submission's abort in the
    ledger alone, at once: no settlement record ever reaches the log."""

    async def request_abort(self, submission_id, author, reason, now_ms):
        intent = await super().request_abort(submission_id, author, reason, now_ms)
        row = self._row(submission_id)
        if not intent.replayed and row.epoch is None and row.settled_at_ms is None:
            envelope = settlement_envelope(submission_id, {"outcome": "aborted"}, now_ms, receipt=row.receipt)
            await super().reserve_settlement(Claim(submission_id, "x", 0, 0), envelope)
            await super().finalize_settlement(submission_id, now_ms)
            return attrs.evolve(intent, settled_at_ms=now_ms)
        return intent


class QueuedAbortNeedsOwnership(InMemorySubmissionLedger):
    """Refuses the QueuedAbort authority: every reservation needs the live token."""

    async def reserve_settlement(self, token, record):
        row = self._row(token.submission_id)
        if row is not None and row.epoch is None:
            raise OwnershipLost(token.submission_id, None, "no claim")
        return await super().reserve_settlement(token, record)


class ReserveIgnoresAbort(InMemorySubmissionLedger):
    """Reserves any record, whatever the abort intent says."""

    async def reserve_settlement(self, token, record):
        row = self._row(token.submission_id)
        if row is None or row.abort_author is None:
            return await super().reserve_settlement(token, record)
        self._put(attrs.evolve(row, abort_author=None))
        try:
            return await super().reserve_settlement(token, record)
        finally:
            self._put(attrs.evolve(self._row(token.submission_id), abort_author=row.abort_author))


class EncryptionUndeclared(InMemorySubmissionLedger):
    """Declares its capabilities without saying whether it encrypts at rest."""

    def capabilities(self):
        return {k: v for k, v in super().capabilities().items() if k != "encryption_at_rest"}


@pytest.mark.parametrize(
    "broken_store, failing_check",
    [
        (EncryptionUndeclared, "capabilities"),
        (ClaimNotFifo, "claim-fifo-head-only"),
        (EpochNotIncreasing, "claim-epoch-increasing"),
        (StaleReserveAccepted, "stale-token-fenced"),
        (FinalizeNotIdempotent, "finalize-idempotent"),
        (RenewShortens, "renew-never-shortens"),
        (AbortKeepsLastAuthor, "abort-idempotent-first-author"),
        (AbortQueuedSettlesAlone, "abort-queued-stores-the-intent"),
        (QueuedAbortNeedsOwnership, "queued-abort-settlement-authority"),
        (ReserveIgnoresAbort, "reserve-refused-after-abort-intent"),
    ],
)
def test_conformance_catches_planted_bug(broken_store, failing_check):
    with pytest.raises(ConformanceFailure) as info:
        run(run_ledger_conformance, broken_store)
    failure = info.value
    assert isinstance(failure, AssertionError)
    assert failing_check in failure.failed_checks
    assert failing_check in str(failure)
    assert len(failure.failed_checks) < len(CONFORMANCE_CHECKS) // 2, failure.failed_checks


# --- errors and boundary validation ---------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        AdmissionConflict("c", "p", "k", "a" * 64, "b" * 64),
        OwnershipLost("sub-c-1", 3, "token epoch 2"),
        SettlementConflict("sub-c-1", "a" * 64, "b" * 64),
        SettlementConflict("sub-c-1", None, None),
        AbortConflict("sub-c-1", "completed"),
        InvalidSettlement("sub-c-1", "bad"),
        UnknownSubmission("sub-c-1"),
        SqliteWriteContention(50, "database is locked"),
    ],
)
def test_errors_carry_fields_names_and_survive_pickling(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert vars(copy) == vars(error)
    assert str(copy) == str(error)
    assert type(error).name == type(error).__name__
    if not isinstance(error, SqliteWriteContention):
        assert isinstance(error, LedgerError)


def test_arguments_validated_before_anything_changes():
    async def main():
        ledger = InMemorySubmissionLedger()
        with pytest.raises(TypeError, match="now_ms"):
            await ledger.admit("c", "p", "k", 1, True)
        with pytest.raises(ValueError):
            await ledger.admit("c", "p", "k", float("nan"), 0)
        with pytest.raises(ValueError, match="lease_ms"):
            await ledger.claim("c", "o", 0, 0)
        with pytest.raises(TypeError, match="token"):
            await ledger.mark_input_applied(("sub-c-1", "o", 1, 5), "input:sub-c-1", 1)
        assert await ledger.scan_nonterminal() == ()

    run(main)


# --- SQLite specifics --------------------------------------------------------------------


def test_sqlite_write_contention_is_typed_and_retryable(tmp_path):
    path = str(tmp_path / "contended.db")
    ledger = SqliteSubmissionLedger.open(path, busy_timeout_ms=50)
    holder = open_database(path)
    holder.execute("BEGIN IMMEDIATE")
    try:
        # Typed on the ledger port (§9.2): LedgerStoreError carrying the contention.
        with pytest.raises(LedgerStoreError) as info:
            run(ledger.admit, "c1", "p1", "k1", {"x": 1}, 0)
        assert info.value.retryable is True and info.value.operation == "admit"
        error = info.value.cause
        assert error.retryable is True
        assert error.name == "SqliteWriteContention"
        assert error.busy_timeout_ms == 50
        assert isinstance(error.__cause__, sqlite3.OperationalError)
        assert not isinstance(error.__cause__, SqliteWriteContention)
        assert not ledger.connection.in_transaction
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    ledger.close()


def test_sqlite_contention_leaves_nothing_written(tmp_path):
    path = str(tmp_path / "contended.db")
    ledger = SqliteSubmissionLedger.open(path, busy_timeout_ms=50)

    async def setup():
        result = await ledger.admit("c1", "p1", "k1", {"x": 1}, 0)
        await ledger.mark_ready(result.submission_id, 0)
        return result

    admitted = run(setup)
    holder = open_database(path)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(LedgerStoreError):
            run(ledger.admit, "c1", "p1", "k2", {"x": 2}, 1)
        with pytest.raises(LedgerStoreError):
            run(ledger.claim, "c1", "o1", 1_000, 10)
        with pytest.raises(LedgerStoreError):
            run(ledger.request_abort, admitted.submission_id, "ops", "stop", 5)
        # Readers are not blocked under WAL, and see nothing of the refused writes.
        assert run(ledger.get_by_idempotency_key, "c1", "p1", "k2") is None
        snapshot = run(ledger.load_recovery_snapshot, "c1")
        assert snapshot.epoch == 0
        assert [(s.owner_id, s.abort_requested) for s in snapshot.submissions] == [(None, False)]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # Retrying after the lock is gone works, and the epoch was never burnt.
    claim = run(ledger.claim, "c1", "o1", 1_000, 10)
    assert claim.epoch == 1
    assert run(ledger.admit, "c1", "p1", "k2", {"x": 2}, 1).queue_seq == 2
    ledger.close()


def test_sqlite_snapshot_reads_committed_state_beside_an_uncommitted_write(tmp_path):
    """Peer adapter check (yielded-dev sqlite ledger): a recovery snapshot
    taken while another connection holds an uncommitted write shows the
    committed state (admitted, not ready), and the read leaves no
    transaction open, so a later write commits."""
    path = str(tmp_path / "snapshot.db")
    ledger = SqliteSubmissionLedger.open(path, busy_timeout_ms=50)
    admitted = run(ledger.admit, "c1", "p1", "k1", {"x": 1}, 0)
    holder = open_database(path)
    holder.execute("BEGIN IMMEDIATE")
    try:
        holder.execute("UPDATE ledger_submissions SET ready = 1, ready_at_ms = 5 WHERE submission_id = ?",
                       (admitted.submission_id,))
        (row,) = run(ledger.load_recovery_snapshot, "c1").submissions
        assert (row.submission_id, row.ready, row.ready_at_ms) == (admitted.submission_id, False, None)
        assert not ledger.connection.in_transaction
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert run(ledger.mark_ready, admitted.submission_id, 9).ready_at_ms == 9
    ledger.close()


def test_sqlite_concurrent_duplicate_admissions_one_winner(tmp_path):
    path = str(tmp_path / "race.db")
    SqliteSubmissionLedger.open(path).close()  # schema first, outside the race
    rounds = 20
    results: list[list] = [[None] * rounds, [None] * rounds]
    errors: list[BaseException] = []
    barrier = threading.Barrier(2, timeout=10)

    def worker(index: int) -> None:
        # A connection per thread (sqlite3 objects stay in their thread).
        ledger = SqliteSubmissionLedger.open(path)
        try:
            for i in range(rounds):
                barrier.wait()
                results[index][i] = trio.run(ledger.admit, "c1", "p1", f"k{i}", {"i": i}, i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            barrier.abort()
        finally:
            ledger.close()

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for i in range(rounds):
        a, b = results[0][i], results[1][i]
        assert sorted([a.replayed, b.replayed]) == [False, True]
        assert (a.submission_id, a.receipt, a.queue_seq) == (b.submission_id, b.receipt, b.queue_seq)
    ledger = SqliteSubmissionLedger.open(path)
    assert [r.queue_seq for r in run(ledger.scan_nonterminal)] == list(range(1, rounds + 1))
    ledger.close()


def test_sqlite_state_survives_reopen_and_shares_a_file(tmp_path):
    path = str(tmp_path / "shared.db")
    conn = open_database(path)
    kernel = SqliteExecutionStore(conn)
    ledger = SqliteSubmissionLedger(conn)

    async def before():
        result = await ledger.admit("c1", "p1", "k1", {"x": 1}, 0)
        await ledger.mark_ready(result.submission_id, 0)
        claim = await ledger.claim("c1", "o1", 1_000, 10)
        await ledger.reserve_settlement(claim, _env(claim, {"outcome": "completed", "result": 1}))
        await kernel.start_execution("r", schedule_id=None, occurrence_ms=None, flow_version=1, input=None,
                                     started_at_ms=0)
        return claim, await ledger.finalize_settlement(result.submission_id, 50)

    claim, settlement = run(before)
    conn.close()
    reopened = SqliteSubmissionLedger.open(path)

    async def after():
        assert await reopened.finalize_settlement(claim.submission_id, 999) == attrs.evolve(settlement, replayed=True)
        with pytest.raises(OwnershipLost):  # the epoch survives the reopen: another one is fenced
            await reopened.renew_ownership(attrs.evolve(claim, epoch=claim.epoch + 1), 10, 2_000)
        assert (await reopened.admit("c1", "p1", "k1", {"x": 1}, 5)).replayed

    run(after)
    reopened.close()


# --- memory and SQLite agree on random histories -----------------------------------------

CONVERSATIONS = ("c1", "c2")
SUBMISSION_IDS = ("sub-c1-1", "sub-c1-2", "sub-c1-3", "sub-c2-1", "sub-c2-2", "sub-x-1")
RECORDS = (
    {"outcome": "completed", "result": 1},
    {"outcome": "completed"},
    {"outcome": "failed", "diagnostic": {"errorTag": "E", "message": "m"}},
    {"outcome": "aborted"},
    {"outcome": "aborted", "result": 1},  # invalid
)
NOW = st.integers(0, 60)
_ADMIT = st.tuples(st.just("admit"), st.sampled_from(CONVERSATIONS), st.sampled_from(("p1", "p2")),
                   st.sampled_from(("k1", "k2", "k3")), st.sampled_from((1, 2, {"a": [1]})), NOW)
_MARK_READY = st.tuples(st.just("mark_ready"), st.sampled_from(SUBMISSION_IDS), NOW)
_CLAIM = st.tuples(st.just("claim"), st.sampled_from(CONVERSATIONS), st.sampled_from(("o1", "o2")),
                   st.integers(1, 30), NOW)
# Every history starts from the same few admissions, so the random part
# mostly exercises claims, fencing and settlement rather than unknown ids.
PROLOGUE = (
    ("admit", "c1", "p1", "k1", 1, 0), ("admit", "c1", "p1", "k2", 2, 0), ("admit", "c2", "p2", "k1", 1, 0),
    ("mark_ready", "sub-c1-1", 0), ("mark_ready", "sub-c2-1", 0),
)
OPERATIONS = st.one_of(
    _ADMIT, _MARK_READY, _CLAIM, _CLAIM,
    st.tuples(st.just("renew"), st.integers(0, 5), st.integers(1, 30), NOW),
    st.tuples(st.just("release"), st.integers(0, 5)),
    st.tuples(st.just("input_applied"), st.integers(0, 5), st.integers(1, 2)),
    st.tuples(st.just("abort"), st.sampled_from(SUBMISSION_IDS), st.sampled_from(("a1", "a2")),
              st.sampled_from(("r1", "r2")), NOW),
    st.tuples(st.just("reserve"), st.integers(0, 5), st.sampled_from(RECORDS)),
    st.tuples(st.just("reserve"), st.integers(0, 5), st.sampled_from(RECORDS)),
    st.tuples(st.just("finalize"), st.sampled_from(SUBMISSION_IDS), NOW),
    # Finalize what a token claimed: most reach a reserved submission.
    st.tuples(st.just("finalize_claimed"), st.integers(0, 5), NOW),
    st.tuples(st.just("finalize_claimed"), st.integers(0, 5), NOW),
    # Admission policies: a group across both conversations, a fence, metadata.
    st.tuples(st.just("admit_policy"), st.sampled_from(CONVERSATIONS), st.sampled_from(("p1", "p2")),
              st.sampled_from(("k1", "k4", "k5")), st.sampled_from((1, 2)), NOW, st.sampled_from((None, "g1", "g2")),
              st.sampled_from((None, 1, 2)), st.sampled_from((None, {"kind": "update"}))),
    st.tuples(st.just("set_fence"), st.sampled_from((1, 2, 3))),
)


async def _apply(ledger, op, tokens):
    name, *args = op
    try:
        if name == "admit":
            return await ledger.admit(*args)
        if name == "admit_policy":
            *plain, group, revision, metadata = args
            fence = None if revision is None else AdmissionFence("policy", "fence", revision)
            return await ledger.admit(*plain, admission_group=group, admission_fence=fence, metadata=metadata)
        if name == "set_fence":
            return await ledger.set_admission_fence("policy", "fence", args[0])
        if name == "mark_ready":
            return await ledger.mark_ready(*args)
        if name == "claim":
            return await ledger.claim(*args)
        if name == "abort":
            return await ledger.request_abort(*args)
        if name == "finalize":
            return await ledger.finalize_settlement(*args)
        if not tokens:
            return "no-token"
        token = tokens[args[0] % len(tokens)]
        if name == "renew":
            return await ledger.renew_ownership(token, args[1], args[2])
        if name == "release":
            return await ledger.release_ownership(token)
        if name == "finalize_claimed":
            return await ledger.finalize_settlement(token.submission_id, args[1])
        if name == "input_applied":
            return await ledger.mark_input_applied(token, "input:" + token.submission_id, args[1])
        return await ledger.reserve_settlement(token, _env(token, args[1]))
    except LedgerError as exc:
        return (type(exc).__name__, vars(exc))


async def _state(ledger):
    return (
        [await ledger.get(sid) for sid in SUBMISSION_IDS],
        await ledger.scan_nonterminal(),
        [await ledger.load_recovery_snapshot(c) for c in CONVERSATIONS],
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPERATIONS, max_size=30))
def test_memory_and_sqlite_agree_on_random_histories(operations):
    async def main():
        memory = InMemorySubmissionLedger()
        sqlite_ledger = SqliteSubmissionLedger.open(":memory:")
        tokens: list[Claim] = []
        try:
            for op in PROLOGUE + tuple(operations):
                expected = await _apply(memory, op, tokens)
                actual = await _apply(sqlite_ledger, op, tokens)
                assert actual == expected, op
                if isinstance(expected, Claim):
                    tokens.append(expected)
                state = await _state(memory)
                assert await _state(sqlite_ledger) == state, op
                # Cross-checks: per conversation, epochs only grow and the
                # snapshot lists nonterminal rows by increasing queue_seq.
                for snapshot in state[2]:
                    seqs = [s.queue_seq for s in snapshot.submissions]
                    assert seqs == sorted(set(seqs))
                    assert all((s.epoch or 0) <= snapshot.epoch for s in snapshot.submissions)
        finally:
            sqlite_ledger.close()

    run(main)


class UnknownHeadClaimable(InMemorySubmissionLedger):
    """Claims a head whose tool call's outcome is unknown, as if resolved."""

    async def claim(self, conversation_id, owner_id, lease_ms, now_ms):
        open_rows = self._nonterminal(conversation_id)
        head = open_rows[0] if open_rows else None
        if head is not None and head.unknown_open and head.abort_author is None:
            self._put(attrs.evolve(head, unknown_open=0))
            try:
                return await super().claim(conversation_id, owner_id, lease_ms, now_ms)
            finally:
                self._put(attrs.evolve(self._row(head.submission_id), unknown_open=head.unknown_open))
        return await super().claim(conversation_id, owner_id, lease_ms, now_ms)


def test_conformance_catches_an_unknown_head_claimed():
    with pytest.raises(ConformanceFailure) as info:
        run(run_ledger_conformance, UnknownHeadClaimable)
    assert "unknown-outcome-blocks-the-lane" in info.value.failed_checks


class SuspendedHeadClaimable(InMemorySubmissionLedger):
    """Claims a suspended head as if its approvals were decided."""

    async def claim(self, conversation_id, owner_id, lease_ms, now_ms):
        open_rows = self._nonterminal(conversation_id)
        head = open_rows[0] if open_rows else None
        if head is not None and head.approvals_pending and head.abort_author is None:
            self._put(attrs.evolve(head, approvals_pending=0))
            try:
                return await super().claim(conversation_id, owner_id, lease_ms, now_ms)
            finally:
                self._put(attrs.evolve(self._row(head.submission_id), approvals_pending=head.approvals_pending))
        return await super().claim(conversation_id, owner_id, lease_ms, now_ms)


def test_conformance_catches_a_suspended_head_claimed():
    with pytest.raises(ConformanceFailure) as info:
        run(run_ledger_conformance, SuspendedHeadClaimable)
    assert "suspension-waits-for-every-approval" in info.value.failed_checks


class JoinSkipsGaps(InMemorySubmissionLedger):
    """Takes every ready submission behind the host, jumping over a gap."""

    def _behind(self, host):
        rows = super()._behind(host)
        return [row for row in rows if row.ready] + [row for row in rows if not row.ready]


def test_conformance_catches_a_join_that_skips_a_gap():
    with pytest.raises(ConformanceFailure) as info:
        run(run_ledger_conformance, JoinSkipsGaps)
    assert "join-takes-the-ready-prefix-and-stops-at-a-gap" in info.value.failed_checks


def test_evolve_row_is_attrs_evolve_for_every_field():
    from model.ledger.rules import SUBMISSION_FIELDS, SubmissionRow, evolve_row

    row = SubmissionRow("sub-c1-1", "c1", "p1", "k1", 1, '{"a":1}', "d" * 64, "rcpt", 0)
    for index, name in enumerate(SUBMISSION_FIELDS):
        value = getattr(row, name)
        changed = f"x{index}" if isinstance(value, str) or value is None else 7
        assert evolve_row(row, **{name: changed}) == attrs.evolve(row, **{name: changed})
    assert evolve_row(row) == row and evolve_row(row) is not row
    with pytest.raises(TypeError, match="no field"):
        evolve_row(row, no_such_field=1)
