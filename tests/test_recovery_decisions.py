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
from sim.trace import Event
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
APPLIED = {**CLAIMED, "input_applied": True}


def _entry(**fields) -> dict:
    return {"allocation": {}, "awaited": False, "child": None, "accounting": None, "releasedAtMs": None, **fields}


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
    (_row(**CLAIMED, input_applied=True, abort_author="user",
          children={"t": {"awaited": True, "releasedAtMs": None, "child": None}}), LogFacts(input=True), Context(),
     ("PropagateChildAbort", "repaired")),
    (_row(**CLAIMED, input_applied=True, children={"t": {"awaited": True, "releasedAtMs": None, "child": "k"}}),
     LogFacts(input=True), Context(open_ids=frozenset({"k"})), ("AwaitChildSettlement", "deferred")),
    (_row(**CLAIMED, input_applied=True, children={"t": {"awaited": True, "releasedAtMs": None, "child": "k"}}),
     LogFacts(input=True), Context(), ("ResumeWaitingParent", "repaired")),
] + [
    # The peer's crash rows where the model has the state (its turns, tool calls, approvals, subagents).
    (_row(**APPLIED), LogFacts(plan=("model", "tool"), input=True, turns=frozenset({0})), Context(),
     ("ResumePendingToolBatch", "deferred")),
    (_row(**APPLIED), LogFacts(plan=("model", "tool-once"), input=True, steps=1, turns=frozenset({0})),
     Context(), ("ResumePendingToolBatch", "deferred")),
    (_row(**APPLIED),
     LogFacts(plan=("model", "tool"), input=True, steps=2, turns=frozenset({0}), tools_settled=frozenset({1})), Context(),
     ("ResumeFromTurnBoundary", "deferred")),
    (_row(**APPLIED), LogFacts(plan=("model", "model"), input=True, turns=frozenset({0})), Context(),
     ("ResumeFromTurnBoundary", "deferred")),
    (_row(**APPLIED), LogFacts(plan=("tool-once",), input=True, in_doubt=frozenset({"s/s0.0"})),
     Context(), ("MarkUnknown", "unknown")),
    (_row(**APPLIED, unknown_calls={"s/s0.0": {"resolution": "NeverHappened"}}),
     LogFacts(plan=("tool-once",), input=True, in_doubt=frozenset({"s/s0.0"})), Context(), ("ResumePendingToolBatch", "deferred")),
    (_row(**APPLIED), LogFacts(plan=("approval",), input=True, approvals_requested=frozenset({"s/s0"})),
     Context(), ("AwaitApprovalDecision", "repaired")),
    (_row(**APPLIED, approvals={"s/s0": {"decision": "approved"}}),
     LogFacts(plan=("approval",), input=True, approvals_requested=frozenset({"s/s0"})), Context(), ("ResumeFromTurnBoundary", "deferred")),
    (_row(**APPLIED), LogFacts(plan=("subagent",), input=True, subagents_requested=frozenset({"s/s0"})),
     Context(), ("ResumePendingToolBatch", "deferred")),
    (_row(**APPLIED, children={"s/s0": _entry()}),
     LogFacts(plan=("subagent",), input=True, subagents_requested=frozenset({"s/s0"})), Context(), ("CompleteChildAdmission", "repaired")),
    (_row(**APPLIED, children={"s/s0": _entry()}),
     LogFacts(plan=("subagent",), input=True, subagents_requested=frozenset({"s/s0"})),
     Context(admitted_children=frozenset({("s", "s/s0")})), ("RepairSubagentStartLink", "repaired")),
    (_row(**APPLIED, children={"s/s0": _entry(child="k")}),
     LogFacts(plan=("subagent",), input=True, subagents_requested=frozenset({"s/s0"})), Context(), ("RepairSubagentStartLink", "repaired")),
    (_row(**APPLIED, children={"s/s0": _entry(child="k")}),
     LogFacts(plan=("subagent",), input=True, subagents_requested=frozenset({"s/s0"}), subagents_started=frozenset({"s/s0"})),
     Context(), ("EnsureWaitingForChild", "repaired")),
    (_row(**APPLIED, children={"s/s0": _entry(child="k", awaited=True, releasedAtMs=9)}),
     LogFacts(plan=("subagent",), input=True, subagents_requested=frozenset({"s/s0"}), subagents_started=frozenset({"s/s0"})),
     Context(), ("ApplyJoinAccounting", "repaired")),
    (_row(**APPLIED,
          children={"s/s0": _entry(child="k", awaited=True, releasedAtMs=9)}),
     LogFacts(plan=("subagent", "model"), input=True, steps=1, subagents_requested=frozenset({"s/s0"}), subagents_started=frozenset({"s/s0"}),
              subagents_joined=frozenset({"s/s0"})), Context(), ("ResumeFromTurnBoundary", "deferred")),
]


@pytest.mark.parametrize("row, log, ctx, expected", CASES)
def test_each_row_and_prefix_has_its_decision(row, log, ctx, expected):
    assert classify(row, log, ctx) == Decision(*expected)


def test_the_table_names_known_decisions_and_dispositions():
    assert all(rule[3] in DISPOSITIONS for rule in TABLE)
    assert "ReleaseOrphanChildReservation" not in DECISIONS  # applied inside an aborted run's settlement
    assert {"ApplyInput", "CompleteMaterialization", "FinalizeLedgerFromHistory",
            "AppendReservedSettlement", "RepairInputMarker", "SettleAborted"} <= set(DECISIONS)


def test_a_row_the_pass_cannot_meet_fails_loudly():
    """No invented name for what cannot happen: the scan returns no settled
    row, and a joined follower's host is open in the same scan (the host's
    finalize settles its joined followers in the same ledger write)."""
    from model.recovery_decisions import UnclassifiableRow

    with pytest.raises(UnclassifiableRow):
        classify(_row(outcome="completed", settled_at_ms=5), LogFacts())
    with pytest.raises(UnclassifiableRow):
        classify(_row(join_host="h", joined_seq=3, joined_record_id="input:s"), LogFacts(input=True), Context())
    assert not {"SettleJoinedWithHost", "AlreadySettled"} & set(DECISIONS)
    assert {"ResumePendingToolBatch", "MarkUnknown", "CompleteChildAdmission", "RepairSubagentStartLink",
            "EnsureWaitingForChild", "ApplyJoinAccounting", "HoldUnreadableRow"} <= set(DECISIONS)


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

    assert expected_decision(row_facts(row, ctx, log), {k: v for k, v in attrs.asdict(log).items()}) == expected


class _View:
    def __init__(self, ledger, log, edit=lambda row: row) -> None:
        self.ledger, self.log, self.edit = ledger, log, edit

    def log_records(self, conversation):
        from model.conversation.records import NotMaterialized

        try:
            return drive(read_recovery_prefix(self.log, conversation)).records
        except NotMaterialized:
            return ()

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
        checker.on_event(Event(0, 0, "worker-1", "recovery.decision", fields))
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
        main(["run", "ledger-storm", "--seed", "0", "--duration", "1h", "--no-progress", "--json"])
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
    settled = {"family": "submission-settled", "payload": {"submissionId": "s1", "settlementId": "settlement:s1",
                                                           "receiptId": "rcpt-s1", "outcome": "completed"}}

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
        checker.on_event(Event(0, 0, "w2", kind, fields))
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


def test_the_sweep_summary_adds_up_the_recovery_decisions_of_its_seeds(tmp_path):
    """Text, JSON and Markdown: the decisions of every seed, summed."""
    import contextlib
    import io
    import json

    from sim.face.cli import main

    def run_json(*args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main([*args, "--no-progress", "--json"] if args[0] == "run" else [*args, "--json"])
        return json.loads(out.getvalue())

    # 5m: seed 1 already makes four kinds of decision (11 in all).
    seeds = [run_json("run", "ledger-storm", "--seed", str(seed), "--duration", "5m") for seed in (0, 1)]
    want: dict = {}
    for result in seeds:
        for name, count in result["stats"]["recovery_decisions"].items():
            want[name] = want.get(name, 0) + count
    common = ["sweep", "ledger-storm", "--seeds", "0:2", "--duration", "5m", "--jobs", "1", "--sqlite-every", "0",
              "--beyond-every", "0", "--failure-db", "none"]
    # Seeds 0 and 1: the two above; the sums are over every seed. One sweep
    # prints the text and writes the reports: its JSON report is the body
    # ``--json`` prints.
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        main([*common, "--report", str(tmp_path / "r")])
    summary = json.loads(next(tmp_path.glob("r*/loomsim-report.json")).read_text())
    assert sum(summary["recovery_decisions"].values()) == sum(summary["recovery_dispositions"].values()) > 0
    assert all(summary["recovery_decisions"].get(name, 0) >= count for name, count in want.items())
    assert summary["scenarios"]["ledger-storm"]["recovery_decisions"] == summary["recovery_decisions"]
    line = next(line for line in text.getvalue().splitlines() if "recovery decisions:" in line)
    assert all(f"{name}={count}" in line for name, count in summary["recovery_decisions"].items())
    markdown = next(tmp_path.glob("r*/*.md")).read_text()
    assert "Recovery decisions over every seed" in markdown
    assert all(f"| {name} | {count} |" in markdown for name, count in summary["recovery_decisions"].items())


@pytest.mark.slow
@pytest.mark.parametrize("seed, duration, reached", [
    (0, "2h", {"MarkUnknown", "ResumePendingToolBatch", "ApplyJoinAccounting", "AwaitApprovalDecision"}),
    (1, "2h", {"EnsureWaitingForChild", "MarkUnknown", "ResumePendingToolBatch", "ApplyJoinAccounting"}),
    (2, "2h", {"RepairSubagentStartLink"}),
    (2, "30m", {"CompleteChildAdmission"}),
])
def test_the_new_decisions_are_reached_in_agent_conversations(seed, duration, reached):
    """Measured: agent-conversations (seed 2: where the mis-classifying
    mutants of the two subagent-establishment decisions are detected)."""
    import contextlib
    import io
    import json

    from sim.face.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["run", "agent-conversations", "--seed", str(seed), "--duration", duration, "--no-progress", "--json"])
    result = json.loads(out.getvalue())
    assert result["status"] == "pass"
    assert reached <= set(result["stats"]["recovery_decisions"])


@pytest.mark.parametrize("point, decision, problem", [
    (ADMITTED_BEFORE_READY, "CompleteMaterialization", "still not ready"),
    (APPENDED_BEFORE_FINALIZE, "FinalizeLedgerFromHistory", "still not settled"),
])
def test_the_oracle_finds_a_pass_that_skipped_its_own_repair(world, point, decision, problem):
    """The next claim holder reaches the same end, so only the pass's own
    word (``recovery.classified``) tells a skipped repair: the row must be
    ready / settled when the pass is done with the conversation."""
    from scenarios.invariants.recovery_decisions import RecoveryDecisions
    from sim.trace import Trace

    ledger, log, clock = world
    crashed_at(world, point)
    skipped = Probe()
    drive(recovery_pass(log, ledger, skipped))  # classifies only: as if it skipped the repair
    for step in ("skipped", "repaired"):
        probe, repairs = (skipped, True) if step == "skipped" else (recover(world), True)
        checker = RecoveryDecisions()
        violations = []
        checker.attach(Trace(clock), clock, violations.append, _View(ledger, log))
        for kind, fields in probe.events:
            if kind in ("recovery.decision", "recovery.classified"):
                checker.on_event(Event(0, 0, "worker-1", kind, {**fields, **({"repairs": repairs} if kind ==
                                                                          "recovery.classified" else {})}))
        if probe is skipped:
            assert [v.message for v in violations] == [
                f"{next(iter(probe.decisions()))}: the recovery pass decided {decision} and finished the "
                f"conversation with the row {problem}"]
        else:
            assert violations == []


def test_the_log_facts_of_an_agent_run_and_the_oracles_reading_agree():
    """What the prefix says of a submission's steps: its recorded steps, its
    logged turns, settled tool steps, calls in doubt, approvals requested and
    undecided, subagent calls by phase; the oracle reads the same apart."""
    from types import SimpleNamespace

    from model.recovery_decisions import facts_from_records
    from scenarios.invariants.recovery_decisions import log_facts

    def rec(seq, family, **payload):
        return SimpleNamespace(seq=seq, envelope=SimpleNamespace(family=family, payload=payload))

    records = [rec(1, "input", submissionId="s", input={"plan": ["model", "tool", "tool-once"]}),
               rec(2, "model-completed", runId="run:s", call="s/s0", text="t", usage={}),
               rec(3, "model-output", submissionId="s", step=0, output={}),
               rec(4, "tool-call", phase="prepared", submissionId="s", call="s/s1.0", idempotent=True),
               rec(5, "tool-call", phase="settled", submissionId="s", call="s/s1.0", output={}),
               rec(6, "model-output", submissionId="s", step=1, output={}),
               rec(7, "tool-call", phase="prepared", submissionId="s", call="s/s2.0", idempotent=False),
               rec(8, "tool-call", phase="approval-requested", submissionId="s", call="s/s3"),
               rec(9, "tool-call", phase="approval-requested", submissionId="s", call="s/s4"),
               rec(10, "tool-call", phase="approval-decided", submissionId="s", call="s/s4"),
               rec(11, "subagent", phase="requested", submissionId="s", call="s/s5"),
               rec(12, "subagent", phase="started", submissionId="s", call="s/s5"),
               rec(13, "subagent", phase="joined", submissionId="s", call="s/s5")]
    facts = facts_from_records(records)["s"]
    assert facts == LogFacts(input=True, plan=("model", "tool", "tool-once"), steps=2, turns=frozenset({0}), tools_settled=frozenset({1}),
                             in_doubt=frozenset({"s/s2.0"}), approvals_requested=frozenset({"s/s3"}),
                             subagents_requested=frozenset({"s/s5"}), subagents_started=frozenset({"s/s5"}),
                             subagents_joined=frozenset({"s/s5"}))
    oracle = log_facts(records, 13)["s"]
    assert {key: (set(value) if isinstance(value, frozenset) else list(value) if isinstance(value, tuple) else value)
            for key, value in attrs.asdict(facts).items() if key != "abort"} == oracle
    assert log_facts(records, 6)["s"]["in_doubt"] == set()  # through the prefix's tail only


def test_a_child_released_before_its_start_was_logged_gets_its_started_record():
    """agent-conversations seed 2 (found at 30m): an attempt attached its child and
    died before logging its start; the child settled and was released; the
    next attempt joined it with no ``subagent started`` record (the peer
    ends every establishment row with one Started record). The audit of
    ``RepairSubagentStartLink`` found it. All four of the seed's
    ``RepairSubagentStartLink`` decisions at 30m are made within 10m."""
    import contextlib
    import io
    import json

    from sim.face.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["run", "agent-conversations", "--seed", "2", "--duration", "10m", "--no-progress", "--json"])
    result = json.loads(out.getvalue())
    assert result["status"] == "pass", result["violations"][:1]
    assert result["stats"]["recovery_decisions"].get("RepairSubagentStartLink", 0) >= 4


def _damage_input(ledger, sid):
    """A beyond-the-contract rot of the row's input alone: its control
    columns still read back (the scan answers it), a by-id read does not."""
    if isinstance(ledger, InMemorySubmissionLedger):
        ledger.surgery_put(attrs.evolve(ledger._row(sid), input_json='{"n":'))
    else:
        ledger.connection.execute("UPDATE ledger_submissions SET input_json = '{\"n\":' WHERE submission_id = ?",
                                  (sid,))


def test_a_pass_meeting_a_row_whose_input_does_not_read_holds_it_and_goes_on(world):
    """Control fields fine, input unreadable: the pass's by-id read fails
    typed; the row is ``HoldUnreadableRow`` [unknown] and left as it was
    (still admitted, not ready), the pass does not fail, and the next row
    of the scan is still repaired."""
    ledger, log, clock = world
    (first,) = crashed_at(world, ADMITTED_BEFORE_READY)
    client = SubmissionClient(ledger, log, now_ms=clock, failpoints=CrashAt(ADMITTED_BEFORE_READY))
    with pytest.raises(Crash):
        drive(client.submit("c2", "p", "k0", {"n": 0}))
    (second,) = [r.submission_id for r in drive(ledger.scan_nonterminal()) if r.conversation_id == "c2"]
    _damage_input(ledger, first)
    probe = recover(world)
    assert probe.decisions() == {first: ("HoldUnreadableRow", "unknown"),
                                 second: ("CompleteMaterialization", "repaired")}
    (held,) = [f for k, f in probe.events if k == "recovery.decision" and f["submission"] == first]
    assert held["row"] == {"state": "unreadable"}
    scan = {r.submission_id: r for r in drive(ledger.scan_nonterminal())}
    assert scan[first].ready is False and scan[first].epoch is None
    assert scan[second].ready is True


def test_a_pass_with_checkpoints_holds_a_row_whose_input_does_not_read_when_it_reads_it(world):
    """With checkpoints the pass reads each row with its input applied by id
    (does it have steps?): one whose input does not read back is held there
    too (``HoldUnreadableRow``), not classified from its scan row alone."""
    from model.conversation.checkpoints import InMemoryCheckpointStore, SqliteCheckpointStore

    ledger, log, clock = world
    (sid,) = crashed_at(world, RESERVED_BEFORE_APPEND)
    _damage_input(ledger, sid)
    probe = Probe()
    checkpoints = (InMemoryCheckpointStore if isinstance(log, InMemoryConversationStore) else SqliteCheckpointStore)(log)
    drive(recovery_pass(log, ledger, probe, checkpoints=checkpoints, now_ms=clock))
    assert probe.decisions() == {sid: ("HoldUnreadableRow", "unknown")}
    (row,) = drive(ledger.scan_nonterminal())
    assert row.reserved_digest is not None and row.settled_at_ms is None


def test_the_oracle_checks_a_held_row_really_does_not_read_back(world):
    """``HoldUnreadableRow`` on the pass's word alone would let a pass hold
    any row: the oracle reads the conversation's rows itself, and a held row
    whose conversation reads back whole is a violation; a real one (the
    ledger's read fails typed) is not, and does not break the oracle."""
    ledger, log, clock = world
    (sid,) = crashed_at(world, ADMITTED_BEFORE_READY)
    held = {"submission": sid, "conversation": C, "decision": "HoldUnreadableRow", "disposition": "unknown",
            "tail_seq": 0, "row": {"state": "unreadable"}}
    _, violations = _checked(world, [held])
    assert [v.invariant for v in violations] == ["recovery-decisions"]
    assert "held it as unreadable, but every row" in violations[0].message
    _damage_input(ledger, sid)
    checker, violations = _checked(world, [held])
    assert violations == [] and checker.checks >= 2
