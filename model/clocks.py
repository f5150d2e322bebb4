"""The clock offset the system claims to tolerate, and its refusal past it.

Every process reads its own machine's clock, and the timestamps it makes
durable (an admission's ``admitted_at_ms``, a schedule's high-water
occurrence, a record's ``createdAt``) are read later by other processes on
other machines. The deployment claims that any two machines' clocks are
within ``MAX_CLOCK_OFFSET_MS`` of each other (each within half of it of true
time). Safety never rests on that claim: every ownership write is fenced by
the epoch the ledger granted. What rests on it is every decision *made by
time* — a lease's expiry, a wake's occurrence, a retention cut-off: a
process whose clock is further off than claimed decides them wrongly.

So a process that reads a durable timestamp written by another and finds it
further in its own future than the claim allows refuses to act on its
belief about time, with a typed, non-retryable ``ClockOffsetExceeded``
(CockroachDB's max-offset rule: a node that detects an offset past the
maximum stops rather than serve reads its clock cannot support). A
timestamp in the past says nothing: it may simply be old.
"""
from __future__ import annotations

# Any two machines' clocks within this (each within half of it of true time).
MAX_CLOCK_OFFSET_MS = 2_000


class ClockOffsetExceeded(Exception):
    """A durable timestamp is further in this process's future than the
    claimed offset allows: its clock (or the writer's) is off past the
    tolerance. Not retryable: waiting does not bring clocks back."""

    name = "ClockOffsetExceeded"
    retryable = False

    def __init__(self, what: str, observed_ms: int, now_ms: int, max_offset_ms: int) -> None:
        super().__init__(f"{what} is at {observed_ms} ms, {observed_ms - now_ms} ms ahead of this process's clock "
                         f"({now_ms} ms): past the claimed clock offset ({max_offset_ms} ms)")
        self.what = what
        self.observed_ms = observed_ms
        self.now_ms = now_ms
        self.max_offset_ms = max_offset_ms


def check_observed(what: str, observed_ms: int | None, now_ms: int, max_offset_ms: int = MAX_CLOCK_OFFSET_MS) -> None:
    """Refuse (``ClockOffsetExceeded``) a durable timestamp another process
    wrote that is further ahead of ``now_ms`` than ``max_offset_ms``."""
    if observed_ms is not None and observed_ms - now_ms > max_offset_ms:
        raise ClockOffsetExceeded(what, observed_ms, now_ms, max_offset_ms)
