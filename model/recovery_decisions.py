"""Recovery classification (persistence §2.2, §7): one named decision per
open submission a recovery pass meets.

The Submission Ledger "tracks admission, scheduling, leases, attempts,
commands, recovery classification, and settlement", and a recovery pass
"shares that verified prefix across the Conversation's nonterminal recovery
classifications". ``classify`` is that classification: a pure function of
the ledger row (as ``scan_nonterminal`` returned it), the facts the verified
log prefix holds about the submission, and where the row stands among its
conversation's open rows. It answers a ``Decision``: a name (the public peer
implementation's where its crash rows give one) and a disposition:

- ``repaired``: a repair is due, and the decision names it. The recovery
  pass applies the ones that need no claim itself (``CompleteMaterialization``:
  admission's second half; ``FinalizeLedgerFromHistory``: the log holds the
  settlement, the ledger only finalizes it); the others are applied by the
  conversation's next claim holder through the lifecycle (``ApplyInput``,
  ``RepairInputMarker``, ``AppendReservedSettlement``, ``SettleAborted``,
  the join and subagent repairs), but for a queued submission's
  ``SettleAborted`` (ready, never claimed, its abort intent durable: its
  aborter died before it finalized), which the pass applies itself, as the
  aborter would (``SubmissionLifecycle.settle_queued_abort``: the ledger's
  ``QueuedAbort`` authority needs no claim). It writes no repair annotation
  (of the peer's two implementations, one writes
  ``repair:{sid}:SettleAborted`` there and one does not, there being no
  claim to append under): the log it leaves is the one the aborter would
  have left, whoever finishes first, so a crash does not show in the
  history;
- ``deferred``: nothing to repair; the submission waits for something
  (its turn in the queue, a re-drive from its last recorded step, its host,
  an approval decision, a child);
- ``unknown``: an operator or a reconciler must say what happened (an
  unresolved unknown tool outcome; a row the ledger cannot read);
- ``none``: the row is settled (nothing to decide).

The table is data (``TABLE``: rules in order, the first that matches wins),
like the ledger's state table (``model.ledger.states``). Every open state has
a rule that always matches last, so every row gets exactly one decision.

Where the model's steps stand (an agent's: ``model.agent``), an
input-applied row is classified by what its log prefix says of the step
its successor takes next (the steps are recorded in order: the next is the
first unrecorded one):

- a tool call prepared by a ``tool-once`` step, with no settled record and
  not marked unknown in the row: ``MarkUnknown`` [unknown] — the successor
  marks it unknown (the row becomes ``unknown``, the log gets its
  ``tool-call`` unknown record) and nothing calls it again on a guess, as
  with the peer's default reconciler. The model has no proof that a call
  never started (the peer's NeverStarted, whose ``MarkUnknown`` is
  [deferred]): a prepared call of an idempotent tool is called again
  under its key instead, which is the pending tool batch below;
- the step to take is a tool call the plan asks for and nothing settled it
  (or a model turn whose response is logged and a tool step follows it):
  ``ResumePendingToolBatch`` [deferred]. The model's model turn does not
  choose its tools: the plan does, so "the calls the response asked for"
  are the plan's tool step after the turn;
- an approval requested in the log the row does not hold (the lane was not
  suspended for it): ``AwaitApprovalDecision`` [repaired], the successor
  suspends (a suspended row waiting for the decision is [deferred]);
- a subagent step, in the model's order (request record, reservation,
  child admitted and made ready, attached, started record, suspension):
  the request logged with no reservation — nothing of the child exists, the
  step runs from its start — ``ResumePendingToolBatch`` [deferred] (the
  model logs the request before it reserves: the peer's reservation-only
  row); a reservation with no child admitted: ``CompleteChildAdmission``
  [repaired]; a child admitted (an open row with this parent link) or
  attached, with no started record: ``RepairSubagentStartLink`` [repaired];
  the started record and the row not waiting on the child:
  ``EnsureWaitingForChild`` [repaired]; the reservation released (the
  child's accounting frozen) with no ``joined`` record:
  ``ApplyJoinAccounting`` [repaired]. Model admission and readiness of a
  child are one call of the parent (``admit`` completes the admission), so
  the peer's after-admit and after-child-ready rows are one decision here.

What the model cannot meet has no decision: the scan returns only open
rows (no ``AlreadySettled``), and a joined follower's host is open in the
same scan, because the host's finalize settles its joined followers in the
same ledger write (no ``SettleJoinedWithHost``). Such a row makes
``classify`` raise ``UnclassifiableRow``: an impossible state is loud.

"Canonical input and settlement records win over cached ledger markers
during repair" (persistence §3): a settlement record in the prefix decides
``FinalizeLedgerFromHistory`` whatever the row says (the row read by the scan
may be older than the prefix); an input record decides against a marker
that says it is not applied (``RepairInputMarker``).
"""
from __future__ import annotations

from typing import Any, Callable

import attrs

from model.ledger.records import UnreadableSubmission
from model.ledger.states import (
    ADMITTED,
    INPUT_APPLIED,
    JOINED,
    JOINING,
    READY,
    RUNNING,
    SETTLED,
    SUSPENDED,
    TERMINALIZING,
    UNKNOWN,
    state_of,
)

REPAIRED = "repaired"
DEFERRED = "deferred"
UNKNOWN_DISPOSITION = "unknown"
NONE = "none"
DISPOSITIONS = (REPAIRED, DEFERRED, UNKNOWN_DISPOSITION, NONE)

# The decisions (the peer's names where its crash rows give one).
COMPLETE_MATERIALIZATION = "CompleteMaterialization"
AWAIT_CHILD_ADMISSION = "AwaitChildAdmission"
APPLY_INPUT = "ApplyInput"
AWAIT_QUEUE_TURN = "AwaitQueueTurn"
REPAIR_INPUT_MARKER = "RepairInputMarker"
RESUME_FROM_TURN_BOUNDARY = "ResumeFromTurnBoundary"
SETTLE_ABORTED = "SettleAborted"
PROPAGATE_CHILD_ABORT = "PropagateChildAbort"
AWAIT_APPROVAL_DECISION = "AwaitApprovalDecision"
RESUME_WAITING_PARENT = "ResumeWaitingParent"
AWAIT_CHILD_SETTLEMENT = "AwaitChildSettlement"
AWAIT_UNKNOWN_RESOLUTION = "AwaitUnknownResolution"
APPEND_RESERVED_SETTLEMENT = "AppendReservedSettlement"
FINALIZE_LEDGER_FROM_HISTORY = "FinalizeLedgerFromHistory"
REVERT_JOINING = "RevertJoining"
REPAIR_JOIN_MARKER = "RepairJoinMarker"
AWAIT_HOST_SETTLEMENT = "AwaitHostSettlement"
HOLD_UNREADABLE = "HoldUnreadableRow"
RESUME_PENDING_TOOL_BATCH = "ResumePendingToolBatch"
MARK_UNKNOWN = "MarkUnknown"
COMPLETE_CHILD_ADMISSION = "CompleteChildAdmission"
REPAIR_SUBAGENT_START_LINK = "RepairSubagentStartLink"
ENSURE_WAITING_FOR_CHILD = "EnsureWaitingForChild"
APPLY_JOIN_ACCOUNTING = "ApplyJoinAccounting"
# A rule whose decision is IMPOSSIBLE matches a row no pass can meet.
IMPOSSIBLE = None


class UnclassifiableRow(AssertionError):
    """A row in a state the recovery pass cannot meet (see the module's
    docstring): the model is broken, not the row."""

    name = "UnclassifiableRow"

    def __init__(self, submission_id: str, state: str) -> None:
        self.submission_id = submission_id
        self.state = state
        super().__init__(f"no recovery decision can be made for {submission_id!r}: a pass never meets a {state} row")

# The decisions a claim holder applies and leaves a repair annotation for
# (``repair:{sid}:{DecisionTag}``, batch and record id alike): a repair the
# log would otherwise not tell from an ordinary first attempt.
ANNOTATED = frozenset({APPEND_RESERVED_SETTLEMENT})


@attrs.frozen
class LogFacts:
    """What the verified prefix (through ``tail_seq``) holds of one submission."""

    input: bool = False  # its input record ``input:{sid}`` (in its own or its host's log)
    plan: tuple = ()  # the plan its input record carries (an agent's steps; a plain submission has none)
    settlement: bool = False  # its settlement record ``settlement:{sid}``
    abort: bool = False  # its ``abort:{sid}`` record
    steps: int = 0  # its recorded steps (``model-output``; recorded in order: the next one's index)
    turns: frozenset = frozenset()  # step indices whose model response (``model-completed``) is logged
    tools_settled: frozenset = frozenset()  # step indices with a settled tool call
    in_doubt: frozenset = frozenset()  # non-idempotent calls prepared, with no settled record
    approvals_requested: frozenset = frozenset()  # approval calls requested, with no decision record
    subagents_requested: frozenset = frozenset()  # subagent calls by phase of their records
    subagents_started: frozenset = frozenset()
    subagents_joined: frozenset = frozenset()


@attrs.frozen
class Context:
    """Where the row stands among its conversation's open rows (the same scan)."""

    head: bool = True  # the first open row of its conversation in queue order
    open_ids: frozenset = frozenset()  # every open submission id the scan returned
    # (parent submission, call) of every open child row the scan returned
    admitted_children: frozenset = frozenset()


@attrs.frozen
class Decision:
    name: str
    disposition: str


def _pending_children(row: Any) -> list[dict]:
    return [entry for entry in (row.children or {}).values() if entry["releasedAtMs"] is None]


def _child_settled(row: Any, ctx: Context) -> bool:
    """A child it waits for is attached and no longer open: its release is due."""
    return any(entry["child"] is not None and entry["child"] not in ctx.open_ids for entry in _pending_children(row))


# The plan's step kinds (``model.agent``'s; a plain submission has no plan).
_MODEL_STEP, _TOOL_STEPS = "model", ("tool", "tool-once")


def _plan_of(request: Any) -> tuple:
    """The plan of a submission's input (read from its canonical input
    record: a scan row carries control fields only)."""
    plan = request.get("plan", ()) if isinstance(request, dict) else ()
    return tuple(plan) if isinstance(plan, (list, tuple)) else ()


def _call_in_doubt(row: Any, log: LogFacts) -> bool:
    """A prepared ``tool-once`` call nothing settled and the row never marked unknown."""
    return bool(log.in_doubt - set(row.unknown_calls or {}))


def _approval_not_held(row: Any, log: LogFacts) -> bool:
    """An approval requested in the log that the row does not wait for (nor decided)."""
    return bool(log.approvals_requested - set(row.approvals or {}))


def _open_children(row: Any) -> list[tuple[str, dict]]:
    return [(call, entry) for call, entry in sorted((row.children or {}).items()) if entry["releasedAtMs"] is None]


def _join_unlogged(row: Any, log: LogFacts) -> bool:
    """A child's accounting frozen (released, a child) with no ``joined`` record."""
    return any(entry["releasedAtMs"] is not None and entry["child"] is not None and call not in log.subagents_joined
               for call, entry in (row.children or {}).items())


def _not_waiting(row: Any, log: LogFacts) -> bool:
    """A child started (logged) that the row does not wait on."""
    return any(call in log.subagents_started and not entry["awaited"] for call, entry in _open_children(row))


def _child_admitted_unlinked(row: Any, log: LogFacts, ctx: Context) -> bool:
    """A reserved child admitted or attached, its start not logged."""
    return any(call not in log.subagents_started
               and (entry["child"] is not None or (row.submission_id, call) in ctx.admitted_children)
               for call, entry in _open_children(row))


def _child_not_admitted(row: Any, log: LogFacts, ctx: Context) -> bool:
    return any(call not in log.subagents_started and entry["child"] is None
               and (row.submission_id, call) not in ctx.admitted_children for call, entry in _open_children(row))


def _tool_batch_pending(row: Any, log: LogFacts) -> bool:
    """The next step is a tool call nothing settled, or a model turn whose
    response is logged and a tool step follows; or a subagent requested
    with no reservation (its step runs from the start)."""
    if log.subagents_requested - set(row.children or {}):
        return True
    plan, at = log.plan, log.steps
    if at >= len(plan):
        return False
    if plan[at] in _TOOL_STEPS:
        return at not in log.tools_settled
    return plan[at] == _MODEL_STEP and at in log.turns and at + 1 < len(plan) and plan[at + 1] in _TOOL_STEPS


Rule = tuple[str, Callable[[Any, LogFacts, Context], bool], Any, str]

# (state, condition(row, facts, ctx), decision, disposition): the first
# rule whose state and condition match. A state's last rule matches always.
TABLE: tuple[Rule, ...] = (
    # Any state: the canonical settlement record wins over the row.
    ("*", lambda row, log, ctx: log.settlement and row.join_host is None, FINALIZE_LEDGER_FROM_HISTORY, REPAIRED),
    (ADMITTED, lambda row, log, ctx: row.parent is not None, AWAIT_CHILD_ADMISSION, DEFERRED),
    (ADMITTED, lambda row, log, ctx: True, COMPLETE_MATERIALIZATION, REPAIRED),
    # A queued abort whose aborter died between its intent and its finalize:
    # the recovery pass settles it through the log itself (the QueuedAbort
    # authority needs no claim), with no repair annotation (below).
    (READY, lambda row, log, ctx: row.abort_author is not None, SETTLE_ABORTED, REPAIRED),
    (READY, lambda row, log, ctx: ctx.head, APPLY_INPUT, REPAIRED),
    (READY, lambda row, log, ctx: True, AWAIT_QUEUE_TURN, DEFERRED),
    (RUNNING, lambda row, log, ctx: row.abort_author is not None, SETTLE_ABORTED, REPAIRED),
    (RUNNING, lambda row, log, ctx: log.input, REPAIR_INPUT_MARKER, REPAIRED),
    (RUNNING, lambda row, log, ctx: True, APPLY_INPUT, REPAIRED),
    (INPUT_APPLIED, lambda row, log, ctx: row.abort_author is not None and bool(_pending_children(row)),
     PROPAGATE_CHILD_ABORT, REPAIRED),
    (INPUT_APPLIED, lambda row, log, ctx: row.abort_author is not None, SETTLE_ABORTED, REPAIRED),
    (INPUT_APPLIED, lambda row, log, ctx: _call_in_doubt(row, log), MARK_UNKNOWN, UNKNOWN_DISPOSITION),
    (INPUT_APPLIED, lambda row, log, ctx: _approval_not_held(row, log), AWAIT_APPROVAL_DECISION, REPAIRED),
    (INPUT_APPLIED, lambda row, log, ctx: _join_unlogged(row, log), APPLY_JOIN_ACCOUNTING, REPAIRED),
    (INPUT_APPLIED, lambda row, log, ctx: _not_waiting(row, log), ENSURE_WAITING_FOR_CHILD, REPAIRED),
    (INPUT_APPLIED, lambda row, log, ctx: _child_admitted_unlinked(row, log, ctx), REPAIR_SUBAGENT_START_LINK,
     REPAIRED),
    (INPUT_APPLIED, lambda row, log, ctx: _child_not_admitted(row, log, ctx), COMPLETE_CHILD_ADMISSION, REPAIRED),
    (INPUT_APPLIED, lambda row, log, ctx: _tool_batch_pending(row, log), RESUME_PENDING_TOOL_BATCH, DEFERRED),
    (INPUT_APPLIED, lambda row, log, ctx: True, RESUME_FROM_TURN_BOUNDARY, DEFERRED),
    (SUSPENDED, lambda row, log, ctx: row.abort_author is not None and bool(_pending_children(row)),
     PROPAGATE_CHILD_ABORT, REPAIRED),
    (SUSPENDED, lambda row, log, ctx: row.abort_author is not None, SETTLE_ABORTED, REPAIRED),
    (SUSPENDED, lambda row, log, ctx: row.approvals_pending > 0, AWAIT_APPROVAL_DECISION, DEFERRED),
    (SUSPENDED, lambda row, log, ctx: _child_settled(row, ctx), RESUME_WAITING_PARENT, REPAIRED),
    (SUSPENDED, lambda row, log, ctx: True, AWAIT_CHILD_SETTLEMENT, DEFERRED),
    (UNKNOWN, lambda row, log, ctx: row.abort_author is not None and bool(_pending_children(row)),
     PROPAGATE_CHILD_ABORT, REPAIRED),
    (UNKNOWN, lambda row, log, ctx: row.abort_author is not None, SETTLE_ABORTED, REPAIRED),
    (UNKNOWN, lambda row, log, ctx: True, AWAIT_UNKNOWN_RESOLUTION, UNKNOWN_DISPOSITION),
    (TERMINALIZING, lambda row, log, ctx: True, APPEND_RESERVED_SETTLEMENT, REPAIRED),
    (JOINING, lambda row, log, ctx: log.input, REPAIR_JOIN_MARKER, REPAIRED),
    (JOINING, lambda row, log, ctx: True, REVERT_JOINING, REPAIRED),
    (JOINED, lambda row, log, ctx: row.join_host in ctx.open_ids, AWAIT_HOST_SETTLEMENT, DEFERRED),
    # Its host settles it in the host's finalize: its host is open in the same scan.
    (JOINED, lambda row, log, ctx: True, IMPOSSIBLE, NONE),
    # The scan returns open rows only.
    (SETTLED, lambda row, log, ctx: True, IMPOSSIBLE, NONE),
)

DECISIONS: tuple[str, ...] = tuple(dict.fromkeys(rule[2] for rule in TABLE if rule[2] is not IMPOSSIBLE)) + (
    HOLD_UNREADABLE,)


def classify(row: Any, log: LogFacts, ctx: Context = Context()) -> Decision:
    """The decision for one open row (``row``: a ledger ``SubmissionRecord``,
    or an ``UnreadableSubmission``: ``HoldUnreadableRow``, an operator's)."""
    if isinstance(row, UnreadableSubmission):  # any field of it raises its error (hasattr included)
        return Decision(HOLD_UNREADABLE, UNKNOWN_DISPOSITION)
    state = state_of(row)
    for rule_state, condition, name, disposition in TABLE:
        if rule_state in ("*", state) and condition(row, log, ctx):
            if name is IMPOSSIBLE:
                raise UnclassifiableRow(row.submission_id, state)
            return Decision(name, disposition)
    raise AssertionError(f"no recovery decision for state {state!r}")  # every state's last rule matches


def row_facts(row: Any, ctx: Context, log: LogFacts = LogFacts()) -> dict:
    """What the table read of the row and its place, as the trace carries it
    (``recovery.decision``'s ``row``): an oracle re-derives the decision
    from it and the log, and compares it with the store's row."""
    if isinstance(row, UnreadableSubmission):
        return {"state": "unreadable"}
    sid = row.submission_id
    return {"state": state_of(row), "aborting": row.abort_author is not None, "head": ctx.head,
            "child": row.parent is not None, "approvals": row.approvals_pending > 0,
            "children": bool(_pending_children(row)), "childSettled": _child_settled(row, ctx),
            "hostOpen": row.join_host is not None and row.join_host in ctx.open_ids,
            "plan": list(log.plan), "unknownCalls": sorted(row.unknown_calls or {}),
            "approvalCalls": sorted(row.approvals or {}),
            "childCalls": {call: {"child": entry["child"] is not None, "awaited": bool(entry["awaited"]),
                                  "released": entry["releasedAtMs"] is not None,
                                  "admitted": (sid, call) in ctx.admitted_children}
                           for call, entry in sorted((row.children or {}).items())}}


def _call_owner(call: Any) -> tuple[str, str] | None:
    """``{sid}/s{index}[.{attempt}]`` -> (sid, index as text)."""
    if type(call) is not str or "/s" not in call:
        return None
    sid, _, rest = call.rpartition("/s")
    return sid, rest.partition(".")[0]


def facts_from_records(records: Any) -> dict[str, LogFacts]:
    """Per submission, what a verified prefix's records say (one pass)."""
    seen: dict[str, dict[str, Any]] = {}
    prepared: dict[str, set] = {}  # sid -> non-idempotent calls prepared
    settled: dict[str, set] = {}  # sid -> calls settled
    requested: dict[str, set] = {}  # sid -> approvals requested
    decided: dict[str, set] = {}  # sid -> approvals decided

    def add(sid: str, key: str, value: Any) -> None:
        facts = seen.setdefault(sid, {})
        facts[key] = facts.get(key, frozenset()) | {value}

    for record in records:
        envelope = record.envelope
        payload = envelope.payload
        family = envelope.family
        if type(payload) is not dict:
            continue
        if family == "model-completed":
            owner = _call_owner(payload.get("call"))
            if owner is not None and owner[1].isdigit():
                add(owner[0], "turns", int(owner[1]))
            continue
        sid = payload.get("submissionId")
        if type(sid) is not str:
            continue
        key = {"input": "input", "submission-settled": "settlement", "abort-requested": "abort"}.get(family)
        if key is not None:
            seen.setdefault(sid, {})[key] = True
            if family == "input" and _plan_of(payload.get("input")):
                seen[sid]["plan"] = _plan_of(payload.get("input"))
        elif family == "model-output" and type(payload.get("step")) is int:
            facts = seen.setdefault(sid, {})
            facts["steps"] = max(facts.get("steps", 0), payload["step"] + 1)
        elif family == "tool-call":
            phase, call = payload.get("phase"), payload.get("call")
            if phase == "prepared" and payload.get("idempotent") is False:
                prepared.setdefault(sid, set()).add(call)
            elif phase == "settled":
                settled.setdefault(sid, set()).add(call)
                owner = _call_owner(call)
                if owner is not None and owner[1].isdigit():
                    add(sid, "tools_settled", int(owner[1]))
            elif phase == "approval-requested":
                requested.setdefault(sid, set()).add(call)
            elif phase == "approval-decided":
                decided.setdefault(sid, set()).add(call)
        elif family == "subagent" and payload.get("phase") in ("requested", "started", "joined"):
            add(sid, f"subagents_{payload['phase']}", payload.get("call"))
    for sid, calls in prepared.items():
        if calls - settled.get(sid, set()):
            seen.setdefault(sid, {})["in_doubt"] = frozenset(calls - settled.get(sid, set()))
    for sid, calls in requested.items():
        if calls - decided.get(sid, set()):
            seen.setdefault(sid, {})["approvals_requested"] = frozenset(calls - decided.get(sid, set()))
    return {sid: LogFacts(**facts) for sid, facts in seen.items()}
