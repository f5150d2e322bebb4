"""The runtime seam: the only primitives model code awaits besides its ports.

Model code is ``async def`` and receives a ``Runtime``. Two implementations
exist outside ``model/``: ``sim.runtime.SimRuntime`` (deterministic virtual
time) and the live trio runtime. Model code never imports either; it sees only
this protocol, so the same code runs simulated and live.

Time is integer milliseconds everywhere (names carry the unit): float seconds
lose resolution past 2**24 s, which a 12-month history reaches.
"""
from __future__ import annotations

from typing import Any, Coroutine, Protocol


class Event(Protocol):
    """A one-task park/wake latch (``Runtime.event``). ``set()`` wakes the
    task parked in ``wait_until_ms``; a ``set()`` before the wait is kept
    (latched), so the wait then returns at once: what closes the race
    between checking a condition and parking on it. Once set it stays set;
    a caller that parks again takes a fresh event."""

    def set(self) -> None:
        """Wake the parked task (if any) now; latch otherwise. Idempotent."""

    def is_set(self) -> bool:
        """Whether ``set()`` was called."""

    async def wait_until_ms(self, deadline_ms: int) -> bool:
        """Park the calling task until ``set()`` or ``now_ms() >= deadline_ms``:
        True if woken (or already set), False at the deadline. At most one
        task waits on an event at a time."""


class Runtime(Protocol):
    def now_ms(self) -> int:
        """Current (virtual or real) time in integer milliseconds."""

    async def sleep_ms(self, duration_ms: int) -> None:
        """Suspend the calling task for ``duration_ms`` (>= 0)."""

    async def sleep_until_ms(self, deadline_ms: int) -> None:
        """Suspend the calling task until ``now_ms() >= deadline_ms``."""

    async def checkpoint(self) -> None:
        """Yield to the scheduler without advancing time (an interleaving point)."""

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> None:
        """Start ``coro`` as a new task on the caller's node."""

    def event(self) -> Event:
        """A new, unset park/wake latch (``Event``)."""
