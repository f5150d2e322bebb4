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

import inspect
import math
from typing import Any, Coroutine

import attrs

from model.conversation.sqlite_store import SqliteConversationStore
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.sqlite_db import CheckedConnection, SqliteWriteContention, open_database
from scenarios.storage import run_sync
from sim.lazy import lazy_import

trio = lazy_import("trio")  # imported at first use: only `loomsim live` needs it

# ``sleep_until_ms`` re-sleeps when float rounding woke it a hair early:
# at most this many times (each adds at least one model millisecond).
_WAKE_RETRIES_MAX = 4


class LiveClock:
    """Model milliseconds on trio's clock, from when this was made (in a
    running trio task), ``time_scale`` model seconds per real second.
    ``start_ms``: the model time it reads when made (a worker process
    started by ``loomsim live --processes`` takes its parent's reading)."""

    def __init__(self, time_scale: float, *, start_ms: int = 0) -> None:
        assert time_scale > 0 and math.isfinite(time_scale), time_scale
        assert start_ms >= 0, start_ms
        self.time_scale = time_scale
        self._origin_s = trio.current_time() - start_ms / 1_000 / time_scale

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


# -- store calls on a process's own connection, in a thread ------------------


class ThreadedConnection(CheckedConnection):
    """``CheckedConnection`` usable from trio's worker threads: a live
    process's connection is used by one thread at a time (its port's
    ``CapacityLimiter``), not always the same thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["check_same_thread"] = False
        super().__init__(*args, **kwargs)


@attrs.define
class StoreCounts:
    """What a live run's ports met, across every process."""

    store_calls: int = 0
    # SQLITE_BUSY / "database is locked" answers past the busy timeout
    # (``SqliteWriteContention``), handed to the model, which retries them.
    busy_answers: int = 0


class LivePort:
    """A store as one live process sees it: each of its ``async`` methods
    runs in a thread (``trio.to_thread.run_sync``), one at a time per
    connection (``limiter``), on the process's own SQLite connection; the
    store's call is synchronous underneath (it never suspends). Any other
    attribute is the store's own."""

    def __init__(self, store: Any, limiter: trio.CapacityLimiter, counts: StoreCounts) -> None:
        self._store = store
        self._limiter = limiter
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute
        limiter, counts = self._limiter, self._counts

        async def call(*args: Any, **kwargs: Any) -> Any:
            counts.store_calls += 1
            try:
                # Not abandoned on cancel: a store call, once begun, ends
                # (committed or rolled back) before its process goes.
                return await trio.to_thread.run_sync(lambda: run_sync(attribute(*args, **kwargs)), limiter=limiter)
            except Exception as error:
                if is_busy_answer(error):
                    counts.busy_answers += 1
                raise

        return call


# How deep ``is_busy_answer`` follows an error's causes.
_CAUSES_MAX = 8


def is_busy_answer(error: BaseException | None) -> bool:
    """Whether ``error`` is SQLite's busy answer: ``SqliteWriteContention``
    itself, or a store's error caused by it (the ledger's
    ``LedgerStoreError``, the log's ``ConversationStoreError``)."""
    for _ in range(_CAUSES_MAX):
        if error is None:
            return False
        if isinstance(error, SqliteWriteContention):
            return True
        error = getattr(error, "cause", None) or error.__cause__
    return False


@attrs.frozen
class ProcessStores:
    """One live process's connection and its ports (ledger, log)."""

    conn: Any
    ledger: LivePort
    log: LivePort

    def close(self) -> None:
        self.conn.close()


def open_process_stores(path: str, *, busy_timeout_ms: int, counts: StoreCounts) -> ProcessStores:
    """A new connection to ``path`` (WAL, ``BEGIN IMMEDIATE``, the busy
    timeout real) and the ledger and log adapters on it, as ports. Blocking:
    call it in a thread."""
    conn = open_database(path, busy_timeout_ms=busy_timeout_ms, factory=ThreadedConnection)
    try:
        ledger, log = SqliteSubmissionLedger(conn), SqliteConversationStore(conn)
    except BaseException:
        conn.close()
        raise
    limiter = trio.CapacityLimiter(1)
    return ProcessStores(conn, LivePort(ledger, limiter, counts), LivePort(log, limiter, counts))


# Opening a process's stores writes (each adapter creates its tables if
# missing, in a write transaction), so it may meet the busy answer too: it
# is tried again after OPEN_RETRY_S, at most OPEN_ATTEMPTS_MAX times.
OPEN_ATTEMPTS_MAX = 200
OPEN_RETRY_S = 0.01


async def open_stores(path: str, *, busy_timeout_ms: int, counts: StoreCounts) -> ProcessStores:
    """``open_process_stores`` in a thread, again after a busy answer (counted)."""
    for _ in range(OPEN_ATTEMPTS_MAX - 1):
        try:
            return await trio.to_thread.run_sync(
                lambda: open_process_stores(path, busy_timeout_ms=busy_timeout_ms, counts=counts))
        except Exception as error:
            if not is_busy_answer(error):
                raise
            counts.busy_answers += 1
            await trio.sleep(OPEN_RETRY_S)
    return await trio.to_thread.run_sync(
        lambda: open_process_stores(path, busy_timeout_ms=busy_timeout_ms, counts=counts))
