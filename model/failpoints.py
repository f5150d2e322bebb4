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
# The submission lifecycle's crash points (ARCHITECTURE §5), in lifecycle order.
ADMITTED_BEFORE_READY = "submission.admitted.before_ready"
READY_BEFORE_RECEIPT = "submission.ready.before_receipt"
CLAIMED_BEFORE_INPUT = "submission.claimed.before_input"
INPUT_APPENDED_BEFORE_MARKER = "submission.input_appended.before_marker"
STEP_DONE_BEFORE_RECORD = "submission.step_done.before_record"
RESERVED_BEFORE_APPEND = "settlement.reserved.before_append"
APPENDED_BEFORE_FINALIZE = "settlement.appended.before_finalize"
FINALIZED_BEFORE_REPLY = "settlement.finalized.before_reply"

SUBMISSION_CRASH_POINTS: tuple[str, ...] = (
    ADMITTED_BEFORE_READY,
    READY_BEFORE_RECEIPT,
    CLAIMED_BEFORE_INPUT,
    INPUT_APPENDED_BEFORE_MARKER,
    STEP_DONE_BEFORE_RECORD,
    RESERVED_BEFORE_APPEND,
    APPENDED_BEFORE_FINALIZE,
    FINALIZED_BEFORE_REPLY,
)

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

ALL_FAILPOINTS: tuple[str, ...] = (
    DURABLE_STATE_SAVE_AFTER_STORE_WRITE,
    KERNEL_EFFECT_DONE_BEFORE_RECORD,
    *SUBMISSION_CRASH_POINTS,
)
