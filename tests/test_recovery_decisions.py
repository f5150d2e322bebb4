"""Recovery classification (issue 29; the crash rows of the public TypeScript implementation):
every open submission a recovery pass meets gets one named decision and a
disposition, traced as ``recovery.decision``; the pass applies the repairs
that need no claim (``CompleteMaterialization``, ``FinalizeLedgerFromHistory``),
a claim holder the others — ``AppendReservedSettlement`` with its repair
annotation ``repair:{sid}:AppendReservedSettlement``. Both adapters."""
from __future__ import annotations

import attrs
import pytest

from model.canonical import canonical_json
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.recovery import read_recovery_prefix
from model.conversation.sqlite_store import SqliteConversationStore
from model.failpoints import (
    ADMITTED_BEFORE_READY,
    APPENDED_BEFORE_FINALIZE,
    CLAIMED_BEFORE_INPUT,
    INPUT_APPENDED_BEFORE_MARKER,
    RESERVED_BEFORE_APPEND,
)
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.records import ParentLink, SubmissionRecord
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.lifecycle import REPAIR_FAMILY
from model.recovery_decisions import (
    DECISIONS,
    DISPOSITIONS,
    TABLE,
    Context,
    Decision,
    LogFacts,
    classify,
)
from model.sqlite_db import open_database
from model.submissions import SubmissionClient, SubmissionWorker, recovery_pass
from scenarios.storage import run_sync as drive  # a store call that must not suspend
from tests.fakes import Crash, CrashAt

LEASE_MS = 30_000
C = "c1"


class Probe:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def emit(self, kind: str, **fields) -> None:
        self.events.append((kind, fields))

    def decisions(self) -> dict[str, tuple[str, str]]:
        return {f["submission"]: (f["decision"], f["disposition"]) for k, f in self.events
                if k == "recovery.decision"}


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture(params=["memory", "sqlite"])
def world(request, tmp_path):
    if request.param == "memory":
        return InMemorySubmissionLedger(), InMemoryConversationStore(), Clock()
    conn = open_database(str(tmp_path / "recovery.db"))
    return SqliteSubmissionLedger(conn), SqliteConversationStore(conn), Clock()


def work(value, index):
    return {"step": index, "of": value}


def worker(ledger, log, clock, name, failpoints=None, probe=None):
    extra = {} if failpoints is None else {"failpoints": failpoints}
    return SubmissionWorker(ledger, log, name, lease_ms=LEASE_MS, now_ms=clock, work=work, steps=2,
                            probe=probe or Probe(), **extra)


def crashed_at(world, point, submissions=1):
    """Admit ``submissions`` to C; the first worker dies at ``point``."""
    ledger, log, clock = world
    client = SubmissionClient(ledger, log, now_ms=clock,
                              failpoints=CrashAt(point) if point == ADMITTED_BEFORE_READY else CrashAt("-"))
    sids = []
    for n in range(submissions):
        try:
            sids.append(drive(client.submit(C, "p", f"k{n}", {"n": n})).submission_id)
        except Crash:
            sids.append(drive(ledger.scan_nonterminal())[-1].submission_id)
    if point != ADMITTED_BEFORE_READY:
        with pytest.raises(Crash):
            drive(worker(ledger, log, clock, "w1", CrashAt(point)).process_next(C))
    clock.ms += LEASE_MS + 1
    return sids


def recover(world):
    ledger, log, clock = world
    probe = Probe()
    drive(recovery_pass(log, ledger, probe, now_ms=clock))
    return probe


def records(log):
    return [r.envelope for r in drive(read_recovery_prefix(log, C)).records]


# -- the table --------------------------------------------------------------------------------

def _row(**fields) -> SubmissionRecord:
    base = SubmissionRecord(submission_id="s", conversation_id=C, principal_id="p", idempotency_key="k",
                            queue_seq=1, input=None, input_digest="d", receipt="r", admitted_at_ms=0, ready=True,
                            owner_id=None, epoch=None, lease_expires_ms=None, input_applied=False,
                            abort_author=None, abort_reason=None, abort_requested_at_ms=None,
                            reserved_record=None, reserved_digest=None, outcome=None, settled_at_ms=None)
    return attrs.evolve(base, **fields)


CLAIMED = {"owner_id": "w", "epoch": 1, "lease_expires_ms": 5}


CASES = [
    (_row(ready=False), LogFacts(), Context(), ("CompleteMaterialization", "repaired")),
    (_row(ready=False, parent=ParentLink("p", "call")), LogFacts(), Context(), ("AwaitChildAdmission", "deferred")),
    (_row(), LogFacts(), Context(head=True), ("ApplyInput", "repaired")),
    (_row(), LogFacts(), Context(head=False), ("AwaitQueueTurn", "deferred")),
    (_row(**CLAIMED), LogFacts(), Context(), ("ApplyInput", "repaired")),
    (_row(**CLAIMED), LogFacts(input=True), Context(), ("RepairInputMarker", "repaired")),
    (_row(**CLAIMED, abort_author="user"), LogFacts(), Context(), ("SettleAborted", "repaired")),
    (_row(**CLAIMED, input_applied=True), LogFacts(input=True), Context(), ("ResumeFromTurnBoundary", "deferred")),
    (_row(**CLAIMED, input_applied=True, abort_author="user"), LogFacts(input=True), Context(),
     ("SettleAborted", "repaired")),
    (_row(**CLAIMED, input_applied=True, unknown_calls={"t": None}), LogFacts(input=True), Context(),
     ("AwaitUnknownResolution", "unknown")),
    (_row(**CLAIMED, input_applied=True, approvals={"t": None}), LogFacts(input=True), Context(),
     ("AwaitApprovalDecision", "deferred")),
    (_row(**CLAIMED, input_applied=True, reserved_record={"outcome": "completed"}, reserved_digest="x"),
     LogFacts(input=True), Context(), ("AppendReservedSettlement", "repaired")),
    (_row(**CLAIMED, input_applied=True, reserved_record={"outcome": "completed"}, reserved_digest="x"),
     LogFacts(input=True, settlement=True), Context(), ("FinalizeLedgerFromHistory", "repaired")),
    (_row(join_host="h"), LogFacts(), Context(), ("RevertJoining", "repaired")),
    (_row(join_host="h"), LogFacts(input=True), Context(), ("RepairJoinMarker", "repaired")),
    (_row(join_host="h", joined_seq=3, joined_record_id="input:s"), LogFacts(input=True),
     Context(open_ids=frozenset({"h"})), ("AwaitHostSettlement", "deferred")),
    (_row(join_host="h", joined_seq=3, joined_record_id="input:s"), LogFacts(input=True), Context(),
     ("SettleJoinedWithHost", "repaired")),
    (_row(**CLAIMED, input_applied=True, abort_author="user",
          children={"t": {"awaited": True, "releasedAtMs": None, "child": None}}), LogFacts(input=True), Context(),
     ("PropagateChildAbort", "repaired")),
    (_row(**CLAIMED, input_applied=True, children={"t": {"awaited": True, "releasedAtMs": None, "child": "k"}}),
     LogFacts(input=True), Context(open_ids=frozenset({"k"})), ("AwaitChildSettlement", "deferred")),
    (_row(**CLAIMED, input_applied=True, children={"t": {"awaited": True, "releasedAtMs": None, "child": "k"}}),
     LogFacts(input=True), Context(), ("ResumeWaitingParent", "repaired")),
]


@pytest.mark.parametrize("row, log, ctx, expected", CASES)
def test_each_row_and_prefix_has_its_decision(row, log, ctx, expected):
    assert classify(row, log, ctx) == Decision(*expected)


def test_the_table_names_known_decisions_and_dispositions():
    assert all(rule[3] in DISPOSITIONS for rule in TABLE)
    assert "ReleaseOrphanChildReservation" not in DECISIONS  # applied inside an aborted run's settlement
    assert {"ApplyInput", "CompleteMaterialization", "FinalizeLedgerFromHistory",
            "AppendReservedSettlement", "RepairInputMarker", "SettleAborted"} <= set(DECISIONS)


# -- the pass, after a crash at each point -------------------------------------------------------

def test_admitted_before_ready_is_complete_materialization(world):
    ledger, log, clock = world
    (sid,) = crashed_at(world, ADMITTED_BEFORE_READY)
    assert not drive(ledger.get(sid)).ready
    probe = recover(world)
    assert probe.decisions() == {sid: ("CompleteMaterialization", "repaired")}
    assert drive(ledger.get(sid)).ready  # the pass applied it: no client retry needed
    settled = drive(worker(ledger, log, clock, "w2").process_next(C))
    assert settled.settlement.outcome == "completed"
    assert records(log)[0].family == "conversation-created"


def test_claimed_before_input_is_apply_input_and_the_queued_one_waits(world):
    ledger, log, clock = world
    head, queued = crashed_at(world, CLAIMED_BEFORE_INPUT, submissions=2)
    assert recover(world).decisions() == {head: ("ApplyInput", "repaired"), queued: ("AwaitQueueTurn", "deferred")}


def test_input_appended_before_marker_is_repair_input_marker(world):
    ledger, log, clock = world
    (sid,) = crashed_at(world, INPUT_APPENDED_BEFORE_MARKER)
    assert recover(world).decisions() == {sid: ("RepairInputMarker", "repaired")}
    drive(worker(ledger, log, clock, "w2").process_next(C))
    assert [e.family for e in records(log)].count("input") == 1


def test_reserved_before_append_is_append_reserved_settlement_with_its_annotation(world):
    ledger, log, clock = world
    (sid,) = crashed_at(world, RESERVED_BEFORE_APPEND)
    reserved = drive(ledger.get(sid)).reserved_record
    assert recover(world).decisions() == {sid: ("AppendReservedSettlement", "repaired")}
    assert drive(ledger.get(sid)).settled_at_ms is None  # a claim holder applies it
    drive(worker(ledger, log, clock, "w2").process_next(C))
    envelopes = records(log)
    annotation = [e for e in envelopes if e.family == REPAIR_FAMILY]
    assert [e.record_id for e in annotation] == [f"repair:{sid}:AppendReservedSettlement"]
    assert annotation[0].payload == {"submissionId": sid, "decision": "AppendReservedSettlement",
                                     "disposition": "repaired"}
    batch = drive(log.lookup_batch(C, f"repair:{sid}:AppendReservedSettlement"))
    assert batch is not None and batch.first_seq == batch.last_seq
    settled = [e for e in envelopes if e.family == "submission-settled"]
    assert len(settled) == 1 and settled[0].payload == reserved["payload"]
    # Byte-equal to the reservation (as the peer implementation requires), its creation time included.
    logged = {k: v for k, v in settled[0].to_json().items() if k not in ("producerId", "epoch")}
    assert canonical_json(logged) == canonical_json(reserved)
    assert envelopes.index(annotation[0]) < envelopes.index(settled[0])
    assert drive(ledger.get(sid)).settled_at_ms is not None


def test_an_ordinary_settlement_has_no_annotation(world):
    ledger, log, clock = world
    crashed_at(world, CLAIMED_BEFORE_INPUT)
    drive(worker(ledger, log, clock, "w2").process_next(C))
    assert REPAIR_FAMILY not in [e.family for e in records(log)]


def test_appended_before_finalize_is_finalize_ledger_from_history_by_the_pass(world):
    ledger, log, clock = world
    (sid,) = crashed_at(world, APPENDED_BEFORE_FINALIZE)
    before = records(log)
    probe = recover(world)
    assert probe.decisions() == {sid: ("FinalizeLedgerFromHistory", "repaired")}
    row = drive(ledger.get(sid))
    assert row.settled_at_ms is not None and row.outcome == "completed"  # finalized, no claim taken
    assert records(log) == before  # the record unchanged and single
    assert drive(ledger.scan_nonterminal()) == ()


def test_a_pass_without_a_clock_only_classifies(world):
    ledger, log, clock = world
    (sid,) = crashed_at(world, APPENDED_BEFORE_FINALIZE)
    probe = Probe()
    drive(recovery_pass(log, ledger, probe))
    assert probe.decisions() == {sid: ("FinalizeLedgerFromHistory", "repaired")}
    assert drive(ledger.get(sid)).settled_at_ms is None


# -- the oracle (scenarios/invariants/recovery_decisions.py) -------------------------------------

@pytest.mark.parametrize("row, log, ctx, expected", CASES)
def test_the_oracle_table_agrees_with_the_classifier(row, log, ctx, expected):
    from model.recovery_decisions import row_facts
    from scenarios.invariants.recovery_decisions import expected_decision

    assert expected_decision(row_facts(row, ctx), log.input, log.settlement) == expected


class _View:
    def __init__(self, ledger, log, edit=lambda row: row) -> None:
        self.ledger, self.log, self.edit = ledger, log, edit

    def log_records(self, conversation):
        return drive(read_recovery_prefix(self.log, conversation)).records

    def submissions(self, conversation):
        found = (drive(self.ledger.get(f"sub-{conversation}-{n}")) for n in range(1, 5))
        return tuple(self.edit(r) for r in found if r is not None)

    def conversation_ids(self):
        return (C,)


def _checked(world, events, edit=lambda row: row):
    from scenarios.invariants.recovery_decisions import RecoveryDecisions
    from sim.trace import Trace

    ledger, log, clock = world
    checker = RecoveryDecisions()
    violations = []
    checker.attach(Trace(clock), clock, violations.append, _View(ledger, log, edit))
    for fields in events:
        checker.on_event((0, 0, "worker-1", "recovery.decision", fields))
    checker.audit(checker.view)
    return checker, violations


def test_the_oracle_holds_a_pass_to_its_table_and_its_repair(world):
    ledger, log, clock = world
    crashed_at(world, APPENDED_BEFORE_FINALIZE)
    probe = recover(world)
    events = [fields for kind, fields in probe.events if kind == "recovery.decision"]
    checker, violations = _checked(world, events)
    assert violations == [] and checker.checks == 3  # decision, row facts, repair at the audit
    wrong = [{**events[0], "decision": "AppendReservedSettlement"}]
    _, violations = _checked(world, wrong)
    assert [v.invariant for v in violations] == ["recovery-decisions"]
    assert "imply FinalizeLedgerFromHistory [repaired]" in violations[0].message


def test_the_oracle_finds_a_repair_that_did_not_happen(world):
    crashed_at(world, APPENDED_BEFORE_FINALIZE)
    events = [fields for kind, fields in recover(world).events if kind == "recovery.decision"]
    # The ledger settled with another record than the one its log holds.
    _, violations = _checked(world, events, edit=lambda row: attrs.evolve(row, reserved_digest="0" * 64))
    assert len(violations) == 1
    assert "settled with another digest than the logged record's" in violations[0].message


def test_run_results_count_decisions_by_name_and_disposition():
    from sim.face.cli import main

    import contextlib
    import io
    import json

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["run", "ledger-storm", "--seed", "0", "--duration", "6h", "--no-progress", "--json"])
    result = json.loads(out.getvalue())
    decisions, dispositions = result["stats"]["recovery_decisions"], result["stats"]["recovery_dispositions"]
    assert decisions and sum(decisions.values()) == sum(dispositions.values())
    assert result["invariants"]["recovery-decisions"] > 0 and result["status"] == "pass"


def test_repair_input_marker_is_applied_even_when_an_abort_came_after_the_decision(world):
    # agent-conversations seed 5 (sqlite, 12h): a child's input reached the log, its owner died before the
    # marker, recovery decided RepairInputMarker, then its parent's abort landed: it settled aborted with
    # its input record in the log and no marker at it.
    ledger, log, clock = world
    (sid,) = crashed_at(world, INPUT_APPENDED_BEFORE_MARKER)
    assert recover(world).decisions() == {sid: ("RepairInputMarker", "repaired")}
    drive(ledger.request_abort(sid, "user", "stop", clock()))
    drive(worker(ledger, log, clock, "w2").process_next(C))
    row = drive(ledger.get(sid))
    (input_record,) = [r for r in drive(read_recovery_prefix(log, C)).records if r.envelope.family == "input"]
    assert row.outcome == "aborted"
    assert (row.input_record_id, row.input_seq) == (f"input:{sid}", input_record.seq)


def _settlement_events(annotated: bool) -> list[tuple]:
    reserve = {"submission": "s1", "owner": "w1", "epoch": 1, "record": {"outcome": "completed"},
               "digest": "d", "replayed": False}
    annotation = {"family": REPAIR_FAMILY, "payload": {"submissionId": "s1", "decision": "AppendReservedSettlement",
                                                        "disposition": "repaired"}}
    settled = {"family": "submission-settled", "payload": {"submissionId": "s1", "record": {"outcome": "completed"}}}

    def append(batch, envelopes):
        return ("log.append", {"conversation": C, "batch": batch, "producer": "w2", "epoch": 2,
                               "expected_tail_seq": 3, "record_ids": (), "envelopes": envelopes, "sizes": (),
                               "first_seq": 4, "last_seq": 4, "tail_digest": "t", "batch_digest": "b",
                               "replayed": False})

    claim = {"conversation": C, "owner": "w1", "submission": "s1", "epoch": 1}
    events = [("ledger.claim", claim), ("ledger.reserve_settlement", reserve)]
    if annotated:
        events.append(append("repair:s1:AppendReservedSettlement", (annotation,)))
    events.append(append("submission-settlement:s1", (settled,)))
    return events


@pytest.mark.parametrize("annotated", [True, False])
def test_a_successor_appending_a_reserved_record_annotates_it_first(annotated):
    from scenarios.invariants.recovery_decisions import RecoveryDecisions
    from sim.trace import Trace

    clock = Clock()
    checker = RecoveryDecisions()
    violations = []
    checker.attach(Trace(clock), clock, violations.append, None)
    for kind, fields in _settlement_events(annotated):
        checker.on_event((0, 0, "w2", kind, fields))
    assert checker.checks == 1
    assert [v.message for v in violations] == ([] if annotated else [
        "s1: its settlement, reserved at epoch 1, was appended at epoch 2 with no repair annotation "
        "repair:s1:AppendReservedSettlement before it"])


def test_an_unreadable_row_is_held_for_an_operator_not_a_crash_of_the_pass():
    """A row the ledger cannot decode (``UnreadableSubmission``: every field
    raises its typed error, ``hasattr`` included) is ``HoldUnreadableRow``."""
    from model.ledger.records import CorruptSubmission, UnreadableSubmission
    from model.recovery_decisions import row_facts

    row = UnreadableSubmission("sub-a-1", "a", "p", 1, CorruptSubmission("sub-a-1", "input_json does not decode"))
    decision = classify(row, LogFacts())
    assert (decision.name, decision.disposition) == ("HoldUnreadableRow", "unknown")
    assert row_facts(row, Context()) == {"state": "unreadable"}
