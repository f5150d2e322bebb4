"""``model.runtime.Runtime`` on trio and real time: what live mode
(``loomsim live``, ``sim.face.live``) runs the model's code on.

Time is trio's clock (``trio.current_time``: monotonic, never the wall
calendar), read from the moment the ``LiveClock`` was made, in integer
milliseconds, scaled: with ``time_scale`` X one real second is X of the
model's seconds, so leases, polls and step delays shrink by X. Sleeps and
deadlines are converted back to real seconds. Nothing here is
deterministic: that is the point of live mode, and why it is never part of
a determinism check.
"""
from __future__ import annotations

import math
from typing import Any, Coroutine

import trio

# ``sleep_until_ms`` re-sleeps when float rounding woke it a hair early:
# at most this many times (each adds at least one model millisecond).
_WAKE_RETRIES_MAX = 4


class LiveClock:
    """Model milliseconds on trio's clock, from when this was made (in a
    running trio task), ``time_scale`` model seconds per real second."""

    def __init__(self, time_scale: float) -> None:
        assert time_scale > 0 and math.isfinite(time_scale), time_scale
        self.time_scale = time_scale
        self._origin_s = trio.current_time()

    def now_ms(self) -> int:
        return int((trio.current_time() - self._origin_s) * 1_000 * self.time_scale)

    def real_s(self, model_ms: float) -> float:
        """A model duration in real seconds."""
        return model_ms / 1_000 / self.time_scale

    def deadline_s(self, model_ms: int) -> float:
        """The trio clock reading at which ``now_ms()`` reaches ``model_ms``."""
        return self._origin_s + self.real_s(model_ms)


class LiveEvent:
    """``model.runtime.Event`` on a ``trio.Event``: a one-waiter latch."""

    __slots__ = ("_clock", "_event", "_waiting")

    def __init__(self, clock: LiveClock) -> None:
        self._clock = clock
        self._event = trio.Event()
        self._waiting = False

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait_until_ms(self, deadline_ms: int) -> bool:
        if self._event.is_set():
            return True  # latched: a set() before the wait is not lost
        if deadline_ms <= self._clock.now_ms():
            return False
        assert not self._waiting, "an event has one waiter"
        self._waiting = True
        try:
            with trio.move_on_at(self._clock.deadline_s(deadline_ms)):
                await self._event.wait()
        finally:
            self._waiting = False
        return self._event.is_set()


class LiveRuntime:
    """One live process's runtime: the shared ``LiveClock`` and the nursery
    its ``spawn`` starts tasks in (the process's task group)."""

    def __init__(self, clock: LiveClock, nursery: trio.Nursery) -> None:
        self.clock = clock
        self.nursery = nursery

    def now_ms(self) -> int:
        return self.clock.now_ms()

    async def sleep_ms(self, duration_ms: int) -> None:
        assert duration_ms >= 0, duration_ms
        await trio.sleep(self.clock.real_s(duration_ms))

    async def sleep_until_ms(self, deadline_ms: int) -> None:
        clock = self.clock
        for extra_ms in range(_WAKE_RETRIES_MAX):
            if clock.now_ms() >= deadline_ms:
                return
            await trio.sleep_until(clock.deadline_s(deadline_ms + extra_ms))
        # Float rounding cannot keep it short past a few milliseconds.
        assert clock.now_ms() >= deadline_ms, (clock.now_ms(), deadline_ms)

    async def checkpoint(self) -> None:
        await trio.lowlevel.checkpoint()

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> None:
        async def task() -> None:
            await coro

        self.nursery.start_soon(task, name=name)

    def event(self) -> LiveEvent:
        return LiveEvent(self.clock)
