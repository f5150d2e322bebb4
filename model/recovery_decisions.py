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
SETTLE_JOINED_WITH_HOST = "SettleJoinedWithHost"
HOLD_UNREADABLE = "HoldUnreadableRow"
ALREADY_SETTLED = "AlreadySettled"

# The decisions a claim holder applies and leaves a repair annotation for
# (``repair:{sid}:{DecisionTag}``, batch and record id alike): a repair the
# log would otherwise not tell from an ordinary first attempt.
ANNOTATED = frozenset({APPEND_RESERVED_SETTLEMENT})


@attrs.frozen
class LogFacts:
    """What the verified prefix (through ``tail_seq``) holds of one submission."""

    input: bool = False  # its input record ``input:{sid}`` (in its own or its host's log)
    settlement: bool = False  # its settlement record ``settlement:{sid}``
    abort: bool = False  # its ``abort:{sid}`` record


@attrs.frozen
class Context:
    """Where the row stands among its conversation's open rows (the same scan)."""

    head: bool = True  # the first open row of its conversation in queue order
    open_ids: frozenset = frozenset()  # every open submission id the scan returned


@attrs.frozen
class Decision:
    name: str
    disposition: str


def _pending_children(row: Any) -> list[dict]:
    return [entry for entry in (row.children or {}).values() if entry["releasedAtMs"] is None]


def _child_settled(row: Any, ctx: Context) -> bool:
    """A child it waits for is attached and no longer open: its release is due."""
    return any(entry["child"] is not None and entry["child"] not in ctx.open_ids for entry in _pending_children(row))


Rule = tuple[str, Callable[[Any, LogFacts, Context], bool], str, str]

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
    (JOINED, lambda row, log, ctx: True, SETTLE_JOINED_WITH_HOST, REPAIRED),
    # A row settled already (read after the scan): nothing to decide.
    (SETTLED, lambda row, log, ctx: True, ALREADY_SETTLED, NONE),
)

DECISIONS: tuple[str, ...] = tuple(dict.fromkeys(rule[2] for rule in TABLE)) + (HOLD_UNREADABLE,)


def classify(row: Any, log: LogFacts, ctx: Context = Context()) -> Decision:
    """The decision for one open row (``row``: a ledger ``SubmissionRecord``,
    or an ``UnreadableSubmission``: ``HoldUnreadableRow``, an operator's)."""
    if isinstance(row, UnreadableSubmission):  # any field of it raises its error (hasattr included)
        return Decision(HOLD_UNREADABLE, UNKNOWN_DISPOSITION)
    state = state_of(row)
    for rule_state, condition, name, disposition in TABLE:
        if rule_state in ("*", state) and condition(row, log, ctx):
            return Decision(name, disposition)
    raise AssertionError(f"no recovery decision for state {state!r}")  # every state's last rule matches


def row_facts(row: Any, ctx: Context) -> dict:
    """What the table read of the row and its place, as the trace carries it
    (``recovery.decision``'s ``row``): an oracle re-derives the decision
    from it and the log, and compares it with the store's row."""
    if isinstance(row, UnreadableSubmission):
        return {"state": "unreadable"}
    return {"state": state_of(row), "aborting": row.abort_author is not None, "head": ctx.head,
            "child": row.parent is not None, "approvals": row.approvals_pending > 0,
            "children": bool(_pending_children(row)), "childSettled": _child_settled(row, ctx),
            "hostOpen": row.join_host is not None and row.join_host in ctx.open_ids}


def facts_from_records(records: Any) -> dict[str, LogFacts]:
    """Per submission, what a verified prefix's records say (one pass)."""
    seen: dict[str, dict[str, bool]] = {}
    for record in records:
        envelope = record.envelope
        payload = envelope.payload
        if type(payload) is not dict or type(payload.get("submissionId")) is not str:
            continue
        family = envelope.family
        key = {"input": "input", "submission-settled": "settlement", "abort-requested": "abort"}.get(family)
        if key is not None:
            seen.setdefault(payload["submissionId"], {})[key] = True
    return {sid: LogFacts(**facts) for sid, facts in seen.items()}
