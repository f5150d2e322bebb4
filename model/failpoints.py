"""Named crash points. A no-op outside simulation.

Model code calls ``failpoints.hit("name")`` exactly where a process could die
with the interesting partial state (ARCHITECTURE §5's crash-point matrix). In
simulation the fault layer may crash the calling node there (the call then
raises and never returns); outside simulation nothing happens.
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

# The failpoint names the model declares. Faults and coverage reports read
# this tuple, so a point that never fires in a sweep shows up as a gap.
DURABLE_STATE_SAVE_AFTER_STORE_WRITE = "durable_state.save.after_store_write"
KERNEL_EFFECT_DONE_BEFORE_RECORD = "kernel.effect_done.before_record"
# The submission lifecycle's crash points (ARCHITECTURE §5), in lifecycle
# order: derived from where the lifecycle's state table crosses stores
# (``model.ledger.states.CROSSINGS``).
from model.ledger.states import (  # noqa: E402
    ADMITTED_BEFORE_READY,
    APPENDED_BEFORE_FINALIZE,
    CLAIMED_BEFORE_INPUT,
    FINALIZED_BEFORE_REPLY,
    INPUT_APPENDED_BEFORE_MARKER,
    LIFECYCLE_CRASH_POINTS,
    READY_BEFORE_RECEIPT,
    RESERVED_BEFORE_APPEND,
    STEP_DONE_BEFORE_RECORD,
)

SUBMISSION_CRASH_POINTS: tuple[str, ...] = LIFECYCLE_CRASH_POINTS

# The points a sentinel wake passes (a submission worker's step point is not one).
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
# did to the world and the record of it.
TOOL_PREPARED_BEFORE_SETTLED = "agent.tool_prepared.before_settled"  # the call may or may not happen
APPROVAL_DECIDED_BEFORE_EFFECT = "agent.approval_decided.before_effect"  # the decision is in the log, not acted on
CHILD_SETTLED_BEFORE_WAKE = "agent.child_settled.before_wake"  # the child settled, its parent not released
FOLLOWER_APPENDED_BEFORE_JOINED = "agent.follower_appended.before_joined"  # its input in the host's log, not marked
MODEL_REQUESTED_BEFORE_FIRST_DELTA = "agent.model_requested.before_first_delta"  # asked, nothing streamed yet
CHILD_RESERVED_BEFORE_ADMIT = "agent.child_reserved.before_admit"  # a child budget reserved, no child admitted
AGENT_CRASH_POINTS: tuple[str, ...] = (TOOL_PREPARED_BEFORE_SETTLED, APPROVAL_DECIDED_BEFORE_EFFECT,
                                       CHILD_SETTLED_BEFORE_WAKE, FOLLOWER_APPENDED_BEFORE_JOINED,
                                       MODEL_REQUESTED_BEFORE_FIRST_DELTA, CHILD_RESERVED_BEFORE_ADMIT)

ALL_FAILPOINTS: tuple[str, ...] = (
    DURABLE_STATE_SAVE_AFTER_STORE_WRITE,
    KERNEL_EFFECT_DONE_BEFORE_RECORD,
    *SUBMISSION_CRASH_POINTS,
    *AGENT_CRASH_POINTS,
)
