"""Named crash points. A no-op outside simulation.

Model code calls ``failpoints.hit("name")`` exactly where a process could die
with the interesting partial state (ARCHITECTURE §5's crash-point matrix). In
simulation the fault layer may crash the calling node there (the call then
raises and never returns); outside simulation nothing happens.

Where the peer implementation names a coordinator location for the same
place (``submit:after-admit``, ``turn:after-response-append``, ...), the
point has the peer's name; ``PEER_NOT_APPLICABLE`` lists the peer's
locations the model has no place for, with the reason. A failpoint only ever
kills its process here: its recorded cause is ``FailpointFired`` naming the
location (``loomsim``'s fault event for it carries the same name as its site).
"""
from __future__ import annotations

from typing import Protocol


class Failpoints(Protocol):
    def hit(self, name: str) -> None: ...


class NoFailpoints:
    __slots__ = ()

    def hit(self, name: str) -> None:
        return None


NO_FAILPOINTS = NoFailpoints()


class FailpointFired(Exception):
    """An armed failpoint fired: the typed cause of the failure (or of the
    process's death) it injected, naming the location."""

    name = "FailpointFired"

    def __init__(self, location: str) -> None:
        super().__init__(f"failpoint {location!r} fired")
        self.location = location

# The failpoint names the model declares. Faults and coverage reports read
# this tuple, so a point that never fires in a sweep shows up as a gap.
DURABLE_STATE_SAVE_AFTER_STORE_WRITE = "durable_state.save.after_store_write"
KERNEL_EFFECT_DONE_BEFORE_RECORD = "kernel.effect_done.before_record"
# The submission lifecycle's crash points (ARCHITECTURE §5), in lifecycle
# order: derived from where the lifecycle's state table crosses stores
# (``model.ledger.states.CROSSINGS``).
from model.ledger.states import (  # noqa: E402
    ABORT_INTENT_STORED,
    ADMITTED_BEFORE_READY,
    APPENDED_BEFORE_FINALIZE,
    CLAIMED_BEFORE_INPUT,
    FINALIZED_BEFORE_REPLY,
    INPUT_APPENDED_BEFORE_MARKER,
    LIFECYCLE_CRASH_POINTS,
    MATERIALIZED_BEFORE_READY,
    READY_BEFORE_RECEIPT,
    RESERVED_BEFORE_APPEND,
    STEP_DONE_BEFORE_RECORD,
    STEP_RECORDED,
)

SUBMISSION_CRASH_POINTS: tuple[str, ...] = LIFECYCLE_CRASH_POINTS
# A client's: its abort intent stored, the queued submission not yet settled
# through the log (the scenarios whose clients abort declare it too).
ABORT_CRASH_POINTS: tuple[str, ...] = (ABORT_INTENT_STORED,)

# The points a sentinel wake passes (a submission worker's step points are not
# among them, nor the client's submit:after-materialize: a run's log is born
# with its admission).
SENTINEL_CRASH_POINTS: tuple[str, ...] = (
    DURABLE_STATE_SAVE_AFTER_STORE_WRITE,
    KERNEL_EFFECT_DONE_BEFORE_RECORD,
    ADMITTED_BEFORE_READY,
    READY_BEFORE_RECEIPT,
    CLAIMED_BEFORE_INPUT,
    INPUT_APPENDED_BEFORE_MARKER,
    RESERVED_BEFORE_APPEND,
    APPENDED_BEFORE_FINALIZE,
    FINALIZED_BEFORE_REPLY,
)

# An agent's steps (``model.agent``): where a process may die between what it
# did to the world and the record of it (the peer's location names where it
# has the place).
TOOL_PREPARED_BEFORE_SETTLED = "tools:after-prepared-append"  # the call may or may not happen
APPROVAL_DECIDED_BEFORE_EFFECT = "agent.approval_decided.before_effect"  # the decision is in the log, not acted on
CHILD_SETTLED_BEFORE_WAKE = "agent.child_settled.before_wake"  # the child settled, its parent not released
FOLLOWER_APPENDED_BEFORE_JOINED = "join:after-canonical-append"  # its input in the host's log, not marked
MODEL_REQUESTED_BEFORE_FIRST_DELTA = "turn:after-canonical-append"  # asked, nothing streamed yet
CHILD_RESERVED_BEFORE_ADMIT = "subagent:after-reserve"  # a child budget reserved, no child admitted
TURN_RESPONSE_APPENDED = "turn:after-response-append"  # the model's answer logged, its step not recorded
TOOL_RESULTS_APPENDED = "turn:after-results-append"  # a tool's result logged, its step not recorded
COMPACTION_APPENDED = "compaction:after-canonical-append"  # a compaction logged, its turn not asked
APPROVAL_REQUEST_APPENDED = "approval:after-request-append"  # the request logged, the lane not suspended
APPROVAL_SUSPENDED = "approval:after-suspend"  # suspended, its owner not gone
JOIN_CLAIMED = "join:after-claim"  # followers taken (joining), their inputs not in the log
SUBAGENT_REQUEST_APPENDED = "subagent:after-request-append"  # the child's request logged, no budget reserved
SUBAGENT_ADMITTED = "subagent:after-admit"  # the child admitted, not ready (its log not materialized)
SUBAGENT_CHILD_READY = "subagent:after-child-ready"  # the child ready, not attached to its parent
SUBAGENT_START_APPENDED = "subagent:after-start-append"  # the child started (logged), the parent not suspended
SUBAGENT_SUSPENDED = "subagent:after-suspend"  # the parent waits for its child, its owner not gone
SUBAGENT_CHILD_ABORT_INTENT = "subagent:after-child-abort-intent"  # an aborted parent's child: its intent stored
SUBAGENT_JOIN_APPENDED = "subagent:after-join-append"  # the child's outcome logged, the step not recorded
SUBAGENT_RELEASED = "subagent:after-release"  # the reservation released (the parent woken), nothing after it
AGENT_CRASH_POINTS: tuple[str, ...] = (TOOL_PREPARED_BEFORE_SETTLED, APPROVAL_DECIDED_BEFORE_EFFECT,
                                       CHILD_SETTLED_BEFORE_WAKE, FOLLOWER_APPENDED_BEFORE_JOINED,
                                       MODEL_REQUESTED_BEFORE_FIRST_DELTA, CHILD_RESERVED_BEFORE_ADMIT,
                                       TURN_RESPONSE_APPENDED, TOOL_RESULTS_APPENDED, COMPACTION_APPENDED,
                                       APPROVAL_REQUEST_APPENDED, APPROVAL_SUSPENDED, JOIN_CLAIMED,
                                       SUBAGENT_REQUEST_APPENDED, SUBAGENT_ADMITTED, SUBAGENT_CHILD_READY,
                                       SUBAGENT_START_APPENDED, SUBAGENT_SUSPENDED, SUBAGENT_CHILD_ABORT_INTENT,
                                       SUBAGENT_JOIN_APPENDED, SUBAGENT_RELEASED)

# A key rotation's re-wrap pass (``model.secrets.rotation``): the new key
# current with nothing re-wrapped; a page re-wrapped and its cursor saved;
# the pass done with the old key not retired yet. Declared by the scenarios
# that rotate keys, apart from the points above (no other scenario's swarm
# choices move).
ROTATION_AFTER_ROTATE = "rotation:after-rotate"
ROTATION_AFTER_PAGE = "rotation:after-page"
ROTATION_BEFORE_RETIRE = "rotation:before-retire"
ROTATION_CRASH_POINTS: tuple[str, ...] = (ROTATION_AFTER_ROTATE, ROTATION_AFTER_PAGE, ROTATION_BEFORE_RETIRE)

# The peer's coordinator locations the model has no place for, and why.
PEER_NOT_APPLICABLE: dict[str, str] = {
    "resolve:after-intent": "the model never resolves an unknown call itself: a reconciler (a client of the "
                            "ledger) stores the resolution, and a worker acts on it only at its next claim",
    "subagent:after-sibling-settle": "a subagent step starts one child; no step waits for siblings",
    "subagent:after-release-pending": "a child reservation is released in one ledger write (its accounting "
                                      "frozen with it): there is no release-pending state in between",
}

ALL_FAILPOINTS: tuple[str, ...] = (
    DURABLE_STATE_SAVE_AFTER_STORE_WRITE,
    KERNEL_EFFECT_DONE_BEFORE_RECORD,
    *SUBMISSION_CRASH_POINTS,
    *ABORT_CRASH_POINTS,
    *AGENT_CRASH_POINTS,
)
