"""The submission lifecycle as data: one table, read by every rule.

h11's ``_state.py`` is the model. A submission is in exactly one state,
derived from its row's facts (``state_of``); each ledger write is an
operation; ``TRANSITIONS[state][operation]`` is the state the operation
leaves it in, and an operation missing from a state's entry is refused
there (each rule raises its operation's typed refusal, or answers "nothing
to do" where the port says so: a claim of an unclaimable head is None).
Both adapters share it through ``rules.py``, so a state the table does not
allow cannot be written by either.

The crash points are derived from the table too: the lifecycle crosses two
stores (persistence §3), and every gap between a ledger transition and the
log write next to it is a named point where a process may die
(``CROSSINGS``). ``LIFECYCLE_CRASH_POINTS`` lists them in lifecycle order;
``model.failpoints`` re-exports them and the crash-consistency sweep must
fire and recover each (ARCHITECTURE §5).

::

    admitted --mark_ready--> ready --claim--> running --mark_input_applied--> input-applied
        |                      |                 |                              |   ^
        +--abort (settles)     |                 +------reserve-------+   mark_unknown | resolve (the last)
        |                      +--reserve (QueuedAbort: aborted)------+         v   |
        v                                                             |             |
     settled                   settled <--finalize-- terminalizing <--+------ unknown, suspended
                                                                   (reserve: aborted only)

    ready --join (by a claimed host)--> joining --mark_joined--> joined
      ^                                    |                        |
      +----revert_join / host finalize-----+      host finalize: settled

    input-applied --suspend (approvals and/or children)--> suspended
          ^                                                 |
          +---- the last decide_approval / release_child ---+

``suspended`` mirrors ``unknown``: ``suspend`` from input-applied (waiting
for approvals, for the release of child reservations, or both), and the
last of them — a ``decide_approval`` or a ``release_child`` of an awaited
child — back to it. Self-loops keep a state: a claim by a successor (lease lapsed), renewals,
releases, idempotent repeats, an abort intent stored for a claimed
submission (its owner settles ``aborted`` at its next step).
"""
from __future__ import annotations

from typing import Any

import attrs

# --- states --------------------------------------------------------------------

ADMITTED = "admitted"  # admitted; its receipt not yet out (an unknown head)
READY = "ready"  # claimable; never claimed
RUNNING = "running"  # claimed at least once; its input not yet marked applied
INPUT_APPLIED = "input-applied"  # its canonical input is in the log
UNKNOWN = "unknown"  # a tool call's outcome is unknown: blocked until resolved (or aborted)
SUSPENDED = "suspended"  # waiting for approvals / children: blocked until the last is decided or released (or aborted)
JOINING = "joining"  # a ready submission a claimed host took behind it; its input not yet in the host's log
JOINED = "joined"  # its input is in its host's log: it settles through the host's settlement
TERMINALIZING = "terminalizing"  # its exact settlement record is reserved
SETTLED = "settled"  # finalized (or settled by its abort intent before it was ever ready)

STATES: tuple[str, ...] = (ADMITTED, READY, JOINING, JOINED, RUNNING, INPUT_APPLIED, UNKNOWN, SUSPENDED,
                           TERMINALIZING, SETTLED)
OPEN_STATES = frozenset(STATES) - {SETTLED}

# --- operations (the ledger's writes) -----------------------------------------------

MARK_READY = "mark_ready"
CLAIM = "claim"
RENEW = "renew_ownership"
RELEASE = "release_ownership"
MARK_INPUT_APPLIED = "mark_input_applied"
ABORT = "request_abort"
RESERVE = "reserve_settlement"
FINALIZE = "finalize_settlement"
MARK_UNKNOWN = "mark_unknown"
RESOLVE = "resolve_unknown"
SUSPEND = "suspend"
DECIDE = "decide_approval"
# Joins: the host's operation, and what it does to each follower.
BEGIN_JOIN = "begin_join"  # on the host (a self-loop); each follower taken: JOIN
JOIN = "join"  # a follower taken by its host
MARK_JOINED = "mark_joined"  # by the host's token: the follower's input is in the host's log
REVERT_JOIN = "revert_join"  # by the host's token, or at the host's settlement: back to ready
SETTLE_JOINED = "settle_joined"  # at the host's finalize: the follower settles with it
# Child reservations (subagents): the owner reserves and attaches; the release
# (frozen accounting) comes from the child's settlement, at any time.
RESERVE_CHILD = "reserve_child"
ATTACH_CHILD = "attach_child"
RELEASE_CHILD = "release_child"

OPERATIONS: tuple[str, ...] = (MARK_READY, CLAIM, RENEW, RELEASE, MARK_INPUT_APPLIED, ABORT, RESERVE, FINALIZE,
                               MARK_UNKNOWN, RESOLVE, SUSPEND, DECIDE, BEGIN_JOIN, JOIN, MARK_JOINED, REVERT_JOIN,
                               SETTLE_JOINED, RESERVE_CHILD, ATTACH_CHILD, RELEASE_CHILD)

# Who may perform an operation: anyone who names the submission, or only the
# holder of its live ownership token (fenced by owner and epoch).
ANYONE, OWNER = "anyone", "owner"
AUTHORITY: dict[str, str] = {
    MARK_READY: ANYONE, CLAIM: ANYONE, ABORT: ANYONE, FINALIZE: ANYONE, RESOLVE: ANYONE, DECIDE: ANYONE,
    RENEW: OWNER, RELEASE: OWNER, MARK_INPUT_APPLIED: OWNER, RESERVE: OWNER, MARK_UNKNOWN: OWNER, SUSPEND: OWNER,
    # The host's owner does all of a join; a follower has no owner of its own.
    BEGIN_JOIN: OWNER, JOIN: OWNER, MARK_JOINED: OWNER, REVERT_JOIN: OWNER, SETTLE_JOINED: OWNER,
    RESERVE_CHILD: OWNER, ATTACH_CHILD: OWNER, RELEASE_CHILD: ANYONE,
}

# TRANSITIONS[state][operation] -> the state after it. An abort of an
# admitted (never ready) submission settles it; anywhere else it stores the
# intent.
TRANSITIONS: dict[str, dict[str, str]] = {
    ADMITTED: {MARK_READY: READY, ABORT: SETTLED},
    # A queued abort stores the intent; its aborter reserves ``aborted``
    # under the QueuedAbort authority (no claim), appends, finalizes.
    READY: {MARK_READY: READY, CLAIM: RUNNING, ABORT: READY, JOIN: JOINING, RESERVE: TERMINALIZING},
    # A follower is never claimed nor aborted alone (JoinedToHost): its host
    # marks it joined or reverts it; the host's finalize settles a joined one
    # and reverts a joining one.
    JOINING: {MARK_READY: JOINING, JOIN: JOINING, MARK_JOINED: JOINED, REVERT_JOIN: READY},
    JOINED: {MARK_READY: JOINED, MARK_JOINED: JOINED, SETTLE_JOINED: SETTLED},
    RUNNING: {MARK_READY: RUNNING, CLAIM: RUNNING, RENEW: RUNNING, RELEASE: RUNNING,
              MARK_INPUT_APPLIED: INPUT_APPLIED, ABORT: RUNNING, RESERVE: TERMINALIZING, BEGIN_JOIN: RUNNING,
              # The running owner reserves a child budget (and attaches the child)
              # whether or not its input is applied yet.
              RESERVE_CHILD: RUNNING, ATTACH_CHILD: RUNNING, RELEASE_CHILD: RUNNING},
    INPUT_APPLIED: {MARK_READY: INPUT_APPLIED, CLAIM: INPUT_APPLIED, RENEW: INPUT_APPLIED,
                    RELEASE: INPUT_APPLIED, MARK_INPUT_APPLIED: INPUT_APPLIED, ABORT: INPUT_APPLIED,
                    RESERVE: TERMINALIZING, MARK_UNKNOWN: UNKNOWN, RESOLVE: INPUT_APPLIED,
                    SUSPEND: SUSPENDED, DECIDE: INPUT_APPLIED, BEGIN_JOIN: INPUT_APPLIED,
                    RESERVE_CHILD: INPUT_APPLIED, ATTACH_CHILD: INPUT_APPLIED, RELEASE_CHILD: INPUT_APPLIED},
    # Marking a call unknown ends ownership; only resolutions (the last one
    # back to input-applied) make the head claimable again, or an abort
    # intent, for aborted settlement only (never to replay the tool).
    UNKNOWN: {MARK_READY: UNKNOWN, CLAIM: UNKNOWN, RENEW: UNKNOWN, RELEASE: UNKNOWN,
              MARK_INPUT_APPLIED: UNKNOWN, ABORT: UNKNOWN, MARK_UNKNOWN: UNKNOWN, RESOLVE: INPUT_APPLIED,
              RESERVE: TERMINALIZING, DECIDE: UNKNOWN, RELEASE_CHILD: UNKNOWN},
    # Suspension ends ownership; the last thing awaited — a pending decision
    # or an awaited child's release — resumes it (back to input-applied,
    # claimable; an earlier one leaves it suspended), or an abort intent lets
    # a cleanup owner settle it aborted.
    SUSPENDED: {MARK_READY: SUSPENDED, CLAIM: SUSPENDED, RENEW: SUSPENDED, RELEASE: SUSPENDED,
                MARK_INPUT_APPLIED: SUSPENDED, ABORT: SUSPENDED, SUSPEND: SUSPENDED, DECIDE: INPUT_APPLIED,
                RESOLVE: SUSPENDED, RESERVE: TERMINALIZING, RELEASE_CHILD: INPUT_APPLIED},
    # A successor claims a terminalizing head to finish its predecessor's
    # settlement with the reserved record (the canonical record wins).
    TERMINALIZING: {MARK_READY: TERMINALIZING, CLAIM: TERMINALIZING, RENEW: TERMINALIZING,
                    RELEASE: TERMINALIZING, MARK_INPUT_APPLIED: TERMINALIZING, RESERVE: TERMINALIZING,
                    FINALIZE: SETTLED, RESOLVE: TERMINALIZING, DECIDE: TERMINALIZING,
                    RELEASE_CHILD: TERMINALIZING},
    # Settled is terminal: only idempotent repeats and the last owner's token
    # upkeep (finalize leaves the ownership columns as they were).
    SETTLED: {MARK_READY: SETTLED, RENEW: SETTLED, RELEASE: SETTLED, MARK_INPUT_APPLIED: SETTLED,
              RESERVE: SETTLED, FINALIZE: SETTLED, RESOLVE: SETTLED, DECIDE: SETTLED, RELEASE_CHILD: SETTLED},
}

# A claim grants the FIFO head only in these states (an unready head is an
# unknown one: never claimable; it settles by its abort intent instead).
CLAIMABLE = frozenset(state for state, ops in TRANSITIONS.items() if CLAIM in ops)
# ... and these only when the head's durable abort intent exists (§3: for
# cleanup and aborted settlement, never uncertain tool replay).
CLAIMABLE_ONLY_TO_ABORT = frozenset({UNKNOWN, SUSPENDED})


def claimable(state: str, abort_requested: bool) -> bool:
    return state in CLAIMABLE and (abort_requested or state not in CLAIMABLE_ONLY_TO_ABORT)


def allows(state: str, operation: str) -> bool:
    return operation in TRANSITIONS[state]


def target(state: str, operation: str) -> str | None:
    """The state ``operation`` leaves a submission in ``state`` in; None: refused."""
    return TRANSITIONS[state].get(operation)


def state_of(row: Any) -> str:
    """The state a ledger row (``rules.SubmissionRow``) is in, from its facts."""
    if row.settled_at_ms is not None:
        return SETTLED
    if row.join_host is not None:
        return JOINING if row.joined_seq is None else JOINED
    if row.reserved_digest is not None:
        return TERMINALIZING
    if row.unknown_open:
        return UNKNOWN
    if row.approvals_pending or row.children_awaited:
        return SUSPENDED
    if row.input_applied:
        return INPUT_APPLIED
    if row.epoch is not None:
        return RUNNING
    if row.ready:
        return READY
    return ADMITTED


# --- where the lifecycle crosses stores: the crash points ------------------------------

# The submission lifecycle's crash points (ARCHITECTURE §5), in lifecycle order.
# Where the peer implementation names the same place, the point has its
# name (``area:after-step``); the others are the model's own.
ADMITTED_BEFORE_READY = "submit:after-admit"
MATERIALIZED_BEFORE_READY = "submit:after-materialize"
READY_BEFORE_RECEIPT = "submission.ready.before_receipt"
CLAIMED_BEFORE_INPUT = "claim:after-claim"
INPUT_APPENDED_BEFORE_MARKER = "input:after-canonical-append"
STEP_DONE_BEFORE_RECORD = "submission.step_done.before_record"
STEP_RECORDED = "step:after-step-append"
RESERVED_BEFORE_APPEND = "terminalize:after-reserve"
APPENDED_BEFORE_FINALIZE = "terminalize:after-canonical-append"
FINALIZED_BEFORE_REPLY = "settlement.finalized.before_reply"
ABORT_INTENT_STORED = "abort:after-intent"

ADMIT = "admit"  # the transition into the first state (no row before it)


@attrs.frozen
class Crossing:
    """A gap next to a ledger transition where the other store (or the
    caller) is written: ``point`` is where a process may die in it.
    ``side``: the gap lies ``before`` or ``after`` the transition."""

    source: str | None  # None: admission (no row before it)
    operation: str
    side: str
    point: str
    between: str  # what happens in the gap


CROSSINGS: tuple[Crossing, ...] = (
    Crossing(None, ADMIT, "after", ADMITTED_BEFORE_READY, "the log is materialized"),
    Crossing(ADMITTED, MARK_READY, "before", MATERIALIZED_BEFORE_READY, "the log is materialized"),
    Crossing(ADMITTED, MARK_READY, "after", READY_BEFORE_RECEIPT, "the receipt goes back to the caller"),
    Crossing(READY, CLAIM, "after", CLAIMED_BEFORE_INPUT, "the owner takes the log over and appends the input"),
    Crossing(RUNNING, MARK_INPUT_APPLIED, "before", INPUT_APPENDED_BEFORE_MARKER, "the input is in the log"),
    Crossing(INPUT_APPLIED, RESERVE, "before", STEP_DONE_BEFORE_RECORD,
             "each step's effect is done, then its record appended"),
    Crossing(INPUT_APPLIED, RESERVE, "before", STEP_RECORDED, "a step's record is in the log; the next step runs"),
    Crossing(INPUT_APPLIED, RESERVE, "after", RESERVED_BEFORE_APPEND, "the reserved record is appended"),
    Crossing(TERMINALIZING, FINALIZE, "before", APPENDED_BEFORE_FINALIZE, "the record is in the log"),
    Crossing(TERMINALIZING, FINALIZE, "after", FINALIZED_BEFORE_REPLY, "the settlement goes back to the caller"),
)
# A client's abort of queued work crosses the stores too; its point is an
# aborter's, not a run's (the run's points are ``LIFECYCLE_CRASH_POINTS``).
ABORT_CROSSING = Crossing(READY, ABORT, "after", ABORT_INTENT_STORED,
                          "a queued submission's abort is settled through the log by its aborter")

LIFECYCLE_CRASH_POINTS: tuple[str, ...] = tuple(crossing.point for crossing in CROSSINGS)


def _check_table() -> None:
    """The table's own consistency, at import (a malformed table is a build error)."""
    assert set(TRANSITIONS) == set(STATES), sorted(TRANSITIONS)
    for state, operations in TRANSITIONS.items():
        for operation, after in operations.items():
            assert operation in OPERATIONS and after in STATES, (state, operation, after)
    assert set(AUTHORITY) == set(OPERATIONS)
    for crossing in CROSSINGS + (ABORT_CROSSING,):
        assert crossing.side in ("before", "after"), crossing
        assert crossing.operation == ADMIT or allows(crossing.source, crossing.operation), crossing
    assert len(set(LIFECYCLE_CRASH_POINTS)) == len(LIFECYCLE_CRASH_POINTS)
    # Every open state can still reach settled (nothing is stuck by construction).
    reach = {SETTLED}
    changed = True
    while changed:
        changed = False
        for state, operations in TRANSITIONS.items():
            if state not in reach and any(after in reach for after in operations.values()):
                reach.add(state)
                changed = True
    assert reach == set(STATES), sorted(set(STATES) - reach)


_check_table()
