"""Timing faults: a call delayed so that it lands on a boundary.

The contracts change their answer at a few instants: a lease is live up to
its expiry and claimable after it; a schedule's period ends where the next
occurrence is due. Random latency almost never lands a call on such an
instant, so the rule at the instant itself (``<`` against ``<=``) goes
untested. A ``boundary-delay`` fault holds a call until exactly such an
instant, or one millisecond either side of it.

``Boundaries`` learns the instants as the run goes: the lease expiries the
ledger granted (every claim and renewal, seen as they commit, through the
world's port observers) and the period boundaries of the stack's cadences
(multiples of ``periods_ms``). ``delay_ms(now_ms)`` is how long to hold a
call to land on the nearest one ahead (None: none within reach).
"""
from __future__ import annotations

import heapq
from typing import Any

# A boundary further ahead than this is out of reach: the call is not held
# (a delay must stay a delay, not a stall of hours).
BOUNDARY_REACH_MS = 10 * 60 * 1_000
# Lease expiries remembered at most (the oldest are dropped first; a run's
# live leases are far fewer).
EXPIRIES_MAX = 4_096
# Where the call lands relative to the boundary: just before, on, just after.
OFFSETS_MS = (-1, 0, 1)


class Boundaries:
    """The instants a ``boundary-delay`` lands calls on."""

    __slots__ = ("periods_ms", "_expiries", "_stream")

    def __init__(self, world: Any, periods_ms: tuple[int, ...] = ()) -> None:
        assert all(type(p) is int and p > 0 for p in periods_ms), periods_ms
        self.periods_ms = periods_ms
        self._expiries: list[int] = []
        self._stream = world.streams["latency"]
        world.port_observers.append(self.observe)

    def observe(self, call: Any) -> None:
        """A committed port call: remember the lease expiry it granted."""
        if call.port != "ledger" or call.error is not None or call.method not in ("claim", "renew_ownership"):
            return
        expires_ms = getattr(call.result, "lease_expires_ms", None)
        if type(expires_ms) is int:
            if len(self._expiries) >= EXPIRIES_MAX:
                heapq.heappop(self._expiries)
            heapq.heappush(self._expiries, expires_ms)

    def delay_ms(self, now_ms: int) -> int | None:
        """Milliseconds to hold a call made at ``now_ms`` so that it lands
        on (or 1 ms beside) the nearest boundary ahead; None if none is
        within ``BOUNDARY_REACH_MS``."""
        expiries = self._expiries
        while expiries and expiries[0] < now_ms + 1:
            heapq.heappop(expiries)
        candidates = [expiries[0]] if expiries else []
        candidates += [(now_ms // p + 1) * p for p in self.periods_ms]
        ahead = [t for t in candidates if t - now_ms <= BOUNDARY_REACH_MS]
        if not ahead:
            return None
        target_ms = min(ahead) + OFFSETS_MS[self._stream.below(len(OFFSETS_MS))]
        return max(0, target_ms - now_ms)
