"""Crash consistency of the submission lifecycle (ARCHITECTURE §5's crash points).

Sweep style: run the lifecycle clean and record which failpoints it reached;
then, on fresh stores, arm each reached point once so the process dies
exactly there, recover the way a real deployment does (the client retries
with the same idempotency key; a new worker claims after the lease lapses,
at a higher epoch), and check every invariant against the stores themselves.
Both adapters, memory and SQLite, go through the same sweep.
"""
from __future__ import annotations

import pytest

from model.canonical import canonical_json, digest
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.recovery import read_recovery_prefix
from model.conversation.sqlite_store import SqliteConversationStore
from model.failpoints import (APPENDED_BEFORE_FINALIZE, CLAIMED_BEFORE_INPUT, FINALIZED_BEFORE_REPLY,
                              RESERVED_BEFORE_APPEND, SUBMISSION_CRASH_POINTS)
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.sqlite_db import open_database
from model.repair import rebuild_ledger
from model.lifecycle import settle_batch_id
from model.submissions import SubmissionClient, SubmissionWorker
from model.ledger.records import settlement_of
from scenarios.storage import run_sync as drive  # a store call that must not suspend
from tests.fakes import Crash

LEASE_MS = 30_000
CONVERSATIONS = ("c1", "c2")
SUBMISSIONS_PER_CONVERSATION = 3


class Recording:
    def __init__(self) -> None:
        self.reached: list[str] = []

    def hit(self, name: str) -> None:
        if name not in self.reached:
            self.reached.append(name)


class Armed:
    """Crash at the ``nth`` hit of ``name``, then never again (one fault per run)."""

    def __init__(self, name: str, nth: int = 1) -> None:
        self.name = name
        self.nth = nth
        self.hits = 0
        self.fired = False

    def hit(self, name: str) -> None:
        if name == self.name and not self.fired:
            self.hits += 1
            if self.hits == self.nth:
                self.fired = True
                raise Crash(name)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000

    def __call__(self) -> int:
        return self.ms


def stores(kind, tmp_path):
    if kind == "memory":
        return InMemorySubmissionLedger(), InMemoryConversationStore()
    conn = open_database(str(tmp_path / "lifecycle.db"))
    return SqliteSubmissionLedger(conn), SqliteConversationStore(conn)


class Work:
    """An effect whose answer changes on every call (a model, a clock, a tool):
    only what the log recorded may reach the settlement."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request, index):
        self.calls += 1
        if request == FAILING_REQUEST and index == 1:
            raise ValueError("the model refused")
        return {"echo": request, "step": index, "call": self.calls}


FAILING_REQUEST = {"n": 1, "c": "c2"}   # its second step fails: settled as failed
ABORTED_SUBMISSION = "sub-c1-2"         # an operator aborts it before it runs: settled at once


def run_lifecycle(ledger, log, failpoints) -> int:
    """Admit and settle everything; recover from at most one crash. Returns crashes."""
    clock = Clock()
    crashes = 0
    client = SubmissionClient(ledger, log, now_ms=clock, failpoints=failpoints)
    for conversation_id in CONVERSATIONS:
        for n in range(SUBMISSIONS_PER_CONVERSATION):
            while True:  # an at-least-once client: retry until the receipt is seen
                try:
                    drive(client.submit(conversation_id, "alice", f"key-{n}", {"n": n, "c": conversation_id}))
                    break
                except Crash:
                    crashes += 1
    drive(ledger.request_abort(ABORTED_SUBMISSION, "operator", "no longer needed", clock()))
    incarnation = 1
    work = Work()
    for _ in range(100):  # bounded: every round settles or recovers
        worker = SubmissionWorker(ledger, log, f"worker#{incarnation}", lease_ms=LEASE_MS, now_ms=clock,
                                  work=work, failpoints=failpoints)
        try:
            progressed = False
            for conversation_id in CONVERSATIONS:
                while drive(worker.process_next(conversation_id)) is not None:
                    progressed = True
            if not progressed and not drive(ledger.scan_nonterminal()):
                return crashes
        except Crash:
            crashes += 1
            incarnation += 1
            clock.ms += LEASE_MS + 1  # the dead owner's lease lapses
    raise AssertionError("the lifecycle did not settle in 100 rounds")


def expected_outcome(submission_id, request) -> str:
    if submission_id == ABORTED_SUBMISSION:
        return "aborted"
    return "failed" if request == FAILING_REQUEST else "completed"


def check_invariants(ledger, log) -> None:
    assert drive(ledger.scan_nonterminal()) == ()
    for conversation_id in CONVERSATIONS:
        prefix = drive(read_recovery_prefix(log, conversation_id))
        records = prefix.records
        assert [r.seq for r in records] == list(range(1, prefix.tail.tail_seq + 1))
        # Exactly one settlement record per submission, equal to the ledger's.
        settled = [r for r in records if r.envelope.family == "submission-settled"]
        ids = [r.envelope.payload["submissionId"] for r in settled]
        admitted = [f"sub-{conversation_id}-{n}" for n in range(1, SUBMISSIONS_PER_CONVERSATION + 1)]
        # Aborted before it ran (queued: its settlement is in the log, its input never).
        assert ids == admitted, "FIFO: settled in queue order, each exactly once"
        if ABORTED_SUBMISSION in admitted:
            aborted = drive(ledger.get(ABORTED_SUBMISSION))
            assert (aborted.outcome, aborted.input_applied, settlement_of(aborted.reserved_record)) == (
                "aborted", False, {"outcome": "aborted"})
            assert f"input:{ABORTED_SUBMISSION}" not in [r.envelope.record_id for r in records]
        for record in settled:
            submission = drive(ledger.get(record.envelope.payload["submissionId"]))
            assert submission.outcome == expected_outcome(submission.submission_id, submission.input)
            # Byte-equal: the logged envelope (less its producer stamp) is the
            # reserved record, and the reservation's digest is its digest.
            logged = {k: v for k, v in record.envelope.to_json().items() if k not in ("producerId", "epoch")}
            assert canonical_json(logged) == canonical_json(submission.reserved_record)
            assert digest(logged) == submission.reserved_digest
            batch = drive(log.lookup_batch(conversation_id, settle_batch_id(submission.submission_id)))
            assert (batch.first_seq, batch.last_seq) == (record.seq, record.seq)
        # One input per submission, and one active submission at a time: a
        # submission's input follows the previous one's settlement.
        # The settled result is exactly what the log recorded for the steps.
        steps = {}
        for r in records:
            if r.envelope.family == "model-output":
                steps.setdefault(r.envelope.payload["submissionId"], []).append(r.envelope.payload["output"])
        for record in settled:
            settlement = settlement_of(record.envelope.to_json())
            if settlement["outcome"] == "completed":
                assert settlement["result"]["outputs"] == steps[record.envelope.payload["submissionId"]]
            elif settlement["outcome"] == "failed":
                assert settlement == {"outcome": "failed",
                                      "diagnostic": {"errorTag": "ValueError", "message": "the model refused"}}
            else:
                assert settlement == {"outcome": "aborted"}  # no result, no steps ran
                assert record.envelope.payload["submissionId"] not in steps
        inputs = [r for r in records if r.envelope.family == "input"]
        ran = [r for r in settled if r.envelope.payload["submissionId"] != ABORTED_SUBMISSION]
        assert [r.envelope.payload["submissionId"] for r in inputs] == [
            r.envelope.payload["submissionId"] for r in ran]
        for previous, following in zip(ran, inputs[1:]):
            assert previous.seq < following.seq
        # Fencing: producer epochs never go backwards in the log.
        epochs = [r.envelope.epoch for r in records]
        assert epochs == sorted(epochs)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_clean_run_reaches_every_crash_point(kind, tmp_path):
    ledger, log = stores(kind, tmp_path)
    recording = Recording()
    assert run_lifecycle(ledger, log, recording) == 0
    check_invariants(ledger, log)
    assert set(recording.reached) == set(SUBMISSION_CRASH_POINTS)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("nth", [1, 2, 4])
@pytest.mark.parametrize("point", SUBMISSION_CRASH_POINTS)
def test_a_crash_at_each_point_recovers_to_every_invariant(kind, point, nth, tmp_path):
    """The first, second and fourth hit: a later hit crashes with more of
    the lifecycle already durable (e.g. one step recorded, the next not)."""
    ledger, log = stores(kind, tmp_path)
    armed = Armed(point, nth)
    assert run_lifecycle(ledger, log, armed) == 1
    assert armed.fired
    check_invariants(ledger, log)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("point", [SUBMISSION_CRASH_POINTS[0], SUBMISSION_CRASH_POINTS[-2]])
def test_the_ledger_rebuilt_from_the_log_matches_the_original(kind, point, tmp_path):
    """The log is canonical: an empty ledger fed from it gets every submission
    back with the same id, queue position, outcome and settlement digest."""
    ledger, log = stores(kind, tmp_path)
    run_lifecycle(ledger, log, Armed(point, 2))
    check_invariants(ledger, log)
    rebuilt = InMemorySubmissionLedger() if kind == "memory" else SqliteSubmissionLedger(
        open_database(str(tmp_path / "rebuilt.db")))
    report = drive(rebuild_ledger(log, rebuilt, CONVERSATIONS, now_ms=10**9))
    total = len(CONVERSATIONS) * SUBMISSIONS_PER_CONVERSATION - 1  # the aborted one's input never reached the log
    assert (report.conversations, report.submissions, report.settled) == (len(CONVERSATIONS), total, total + 1)
    # Its place is held and settled with its logged record, so that every later submission keeps its id.
    hole = drive(rebuilt.get(ABORTED_SUBMISSION))
    assert (hole.outcome, hole.reserved_digest) == ("aborted", drive(ledger.get(ABORTED_SUBMISSION)).reserved_digest)
    for conversation_id in CONVERSATIONS:
        for n in range(1, SUBMISSIONS_PER_CONVERSATION + 1):
            if f"sub-{conversation_id}-{n}" == ABORTED_SUBMISSION:
                continue
            original = drive(ledger.get(f"sub-{conversation_id}-{n}"))
            copy = drive(rebuilt.get(f"sub-{conversation_id}-{n}"))
            assert (copy.queue_seq, copy.idempotency_key, copy.input, copy.outcome, copy.reserved_digest) == (
                original.queue_seq, original.idempotency_key, original.input, original.outcome,
                original.reserved_digest)
    assert drive(rebuilt.scan_nonterminal()) == ()
    # An at-least-once retry against the rebuilt ledger is a replay, not new work.
    again = drive(rebuilt.admit("c1", "alice", "key-0", {"n": 0, "c": "c1"}, 10**9))
    assert again.replayed and again.submission_id == "sub-c1-1"


# -- an abort landing at every point of a running submission -----------------------------

# from the claim on: the owner is running it
WORKER_POINTS = SUBMISSION_CRASH_POINTS[SUBMISSION_CRASH_POINTS.index(CLAIMED_BEFORE_INPUT):]
SETTLING_POINTS = (RESERVED_BEFORE_APPEND, APPENDED_BEFORE_FINALIZE, FINALIZED_BEFORE_REPLY)


class AbortAt:
    """At the first hit of ``name``, an operator aborts the submission its
    owner is running (the claimed, unsettled row): the abort lands while the
    owner is exactly there."""

    def __init__(self, name: str, ledger) -> None:
        self.name = name
        self.ledger = ledger
        self.answer = None
        self.target = None

        self.running = None  # the submission an owner ran at the last point hit

    def hit(self, name: str) -> None:
        if self.target is not None:
            return
        running = [r for r in drive(self.ledger.scan_nonterminal()) if r.owner_id is not None]
        if running:
            self.running = running[0].submission_id
        if name != self.name:
            return
        self.target = self.running  # finalized before the reply: the one just settled
        try:
            self.answer = drive(self.ledger.request_abort(self.target, "operator", "stop", 5_000))
        except Exception as error:
            self.answer = error


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("point", WORKER_POINTS)
def test_an_abort_at_each_point_of_a_running_submission_is_honoured_or_refused_typed(kind, point, tmp_path):
    """Before the reservation the intent wins: settled aborted, no step after
    the one in flight. From the reservation on the reserved record wins: the
    abort is refused typed, nothing stored (AbortConflict naming the outcome
    while settling; once finalized, SettlementConflict naming it, as every
    write on a settled row)."""
    ledger, log = stores(kind, tmp_path)
    abort = AbortAt(point, ledger)
    assert run_lifecycle(ledger, log, abort) == 0
    assert abort.target is not None and drive(ledger.scan_nonterminal()) == ()
    row = drive(ledger.get(abort.target))
    if point == FINALIZED_BEFORE_REPLY:
        assert getattr(type(abort.answer), "name", None) == "SettlementConflict", abort.answer
        assert abort.answer.existing_outcome == row.outcome != "aborted" and row.abort_author is None
        return
    if point in SETTLING_POINTS:
        assert getattr(type(abort.answer), "name", None) == "AbortConflict", abort.answer
        assert abort.answer.outcome == row.outcome != "aborted" and row.abort_author is None
        return
    assert (abort.answer.author, abort.answer.settled_at_ms) == ("operator", None)
    assert (row.outcome, row.abort_author, settlement_of(row.reserved_record)) == (
        "aborted", "operator", {"outcome": "aborted"})
    conversation_id = row.conversation_id
    records = drive(read_recovery_prefix(log, conversation_id)).records
    steps = [r for r in records if r.envelope.family == "model-output"
             and r.envelope.payload["submissionId"] == abort.target]
    assert len(steps) <= 1  # at most the step in flight when the intent landed
    settled = [settlement_of(r.envelope.to_json()) for r in records if r.envelope.family == "submission-settled"
               and r.envelope.payload["submissionId"] == abort.target]
    assert settled == [{"outcome": "aborted"}]
