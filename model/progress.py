"""Progress waits (STORE-014): follow a conversation's log without polling.

Notifications are disposable liveness hints, emitted only after the durable
append they announce committed (``NotifyingLog``). Nothing depends on one
arriving: a dropped notification costs a caller at most one reconnect, after
which the authoritative read finds what it missed. A progress wait
(``wait_for_progress``) therefore:

1. installs a registration for the conversation (``ProgressNotifier.register``)
   *before* it reads: a record committed after the install notifies it; one
   committed before is seen by the read (closes the subscribe/check race);
2. does ONE strongly consistent one-record read after the caller's sequence,
   and returns at once if there is a record;
3. otherwise parks on the registration's latched event: a notification that
   arrived between the install and the park is kept in the latch, so the
   park returns at once (closes the check/park race);
4. on a wake, re-arms the latch (before rereading, so a notification from
   then on is latched again) and rereads: a wake is only a hint, and may be
   a false positive (another caller's record, a replayed append);
5. at the reconnect deadline (the client's session is evicted: minutes, a
   caller's parameter, never a polling period) the registration is
   discarded, rebuilt, and the authoritative read repeated.

The only timed wake is the reconnect. The notifier is in memory: a restart
loses every registration (each waiter reconnects) and a crash between an
append and its notification loses the notification (allowed: see above).
"""
from __future__ import annotations

from typing import Any

import attrs

from model.conversation.records import NotMaterialized

# Registrations one notifier holds at once: a waiter holds one; more is a
# leak (a registration never closed), not a workload.
REGISTRATIONS_MAX = 100_000
# Wakes one registration may take before its reconnect: each is a notify of
# its conversation, so this bounds a conversation's appends within one
# reconnect window; past it the wait reconnects early (still correct).
WAKES_PER_SESSION_MAX = 100_000
# Reconnects of one wait (a wait that sees nothing for this many reconnect
# windows ends empty; the caller waits again).
SESSIONS_MAX = 1_000_000


class Registration:
    """One scoped registration: a conversation, a latched event, and the
    last sequence a notification named (a hint, never a position)."""

    __slots__ = ("registration_id", "conversation_id", "notified_seq", "_event", "_hub", "_runtime")

    def __init__(self, hub: "ProgressNotifier", runtime: Any, registration_id: int, conversation_id: str) -> None:
        self._hub = hub
        self._runtime = runtime
        self.registration_id = registration_id
        self.conversation_id = conversation_id
        self.notified_seq = 0
        self._event = runtime.event()

    def wake(self, seq: int) -> None:
        self.notified_seq = max(self.notified_seq, seq)
        self._event.set()

    async def park_until_ms(self, deadline_ms: int) -> bool:
        """Park until a notification (True; also one latched since the last
        re-arm) or ``deadline_ms`` (False)."""
        return await self._event.wait_until_ms(deadline_ms)

    def rearm(self) -> None:
        """A fresh latch: what it holds from now on is a notification after this instant."""
        self._event = self._runtime.event()

    def close(self) -> None:
        self._hub._discard(self)


class ProgressNotifier:
    """The notification hub of one deployment: registrations per
    conversation, in install order (a notify wakes them in that order)."""

    def __init__(self, runtime: Any, *, registrations_max: int = REGISTRATIONS_MAX) -> None:
        assert registrations_max > 0, registrations_max
        self._runtime = runtime
        self._registrations_max = registrations_max
        self._by_conversation: dict[str, dict[int, Registration]] = {}
        self._count = 0
        self._minted = 0
        self.notifications = 0

    @property
    def registrations(self) -> int:
        return self._count

    async def register(self, conversation_id: str) -> Registration:
        """Install a registration; a notify from the moment this returns wakes it."""
        assert self._count < self._registrations_max, f"more than {self._registrations_max} registrations: a leak"
        self._minted += 1
        registration = Registration(self, self._runtime, self._minted, conversation_id)
        self._by_conversation.setdefault(conversation_id, {})[registration.registration_id] = registration
        self._count += 1
        return registration

    def notify(self, conversation_id: str, seq: int) -> int:
        """Wake every registration of ``conversation_id``; how many it woke."""
        self.notifications += 1
        registrations = self._by_conversation.get(conversation_id)
        if not registrations:
            return 0
        for registration in list(registrations.values()):
            registration.wake(seq)
        return len(registrations)

    def _discard(self, registration: Registration) -> None:
        registrations = self._by_conversation.get(registration.conversation_id)
        if registrations is None or registrations.pop(registration.registration_id, None) is None:
            return  # closed already (a crash's finally after an eviction): idempotent
        self._count -= 1
        if not registrations:
            del self._by_conversation[registration.conversation_id]


class NotifyingLog:
    """A conversation store that announces each committed append to a
    notifier: after the append returned (committed, and its reply reached
    this process), never before. Everything else passes through."""

    def __init__(self, log: Any, notifier: Any) -> None:
        self._log = log
        self._notifier = notifier

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    async def append(self, request: Any) -> Any:
        result = await self._log.append(request)
        self._notifier.notify(request.conversation_id, result.last_seq)
        return result


@attrs.frozen
class Progress:
    """What one wait returned: the record after the caller's sequence (none:
    the wait ended at ``until_ms``), and how it got there."""

    records: tuple
    immediate: bool  # found by the first read, without parking
    wakes: int
    false_wakes: int  # wakes whose reread found nothing new
    reconnects: int


async def _read_after(log: Any, conversation_id: str, after_seq: int) -> tuple:
    """The one-record canonical read: the record after ``after_seq``, if any.
    A log not materialized yet holds nothing after any sequence."""
    try:
        return tuple(await log.read(conversation_id, after_seq, 1))
    except NotMaterialized:
        return ()


async def wait_for_progress(log: Any, notifier: Any, runtime: Any, conversation_id: str, after_seq: int, *,
                            reconnect_ms: int, until_ms: int | None = None) -> Progress:
    """The record after ``after_seq`` in ``conversation_id``'s log, as soon as
    it exists (see the module doc for the order of operations). ``until_ms``:
    give up then (the caller stops following), returning no record.
    Store errors propagate (typed); the registration is closed on every exit."""
    assert reconnect_ms > 0 and after_seq >= 0, (reconnect_ms, after_seq)
    wakes = false_wakes = reconnects = 0
    for _ in range(SESSIONS_MAX):
        registration = await notifier.register(conversation_id)
        try:
            found = await _read_after(log, conversation_id, after_seq)
            deadline_ms = runtime.now_ms() + reconnect_ms
            if until_ms is not None:
                deadline_ms = min(deadline_ms, until_ms)
            for _ in range(WAKES_PER_SESSION_MAX):
                if found:
                    return Progress(found, not (wakes or reconnects), wakes, false_wakes, reconnects)
                woken = await registration.park_until_ms(deadline_ms)
                if not woken:
                    break
                wakes += 1
                registration.rearm()  # before the reread: a notification from here on is latched again
                position = after_seq  # a wake only says "reread": the position is always the caller's
                found = await _read_after(log, conversation_id, position)
                false_wakes += not found
        finally:
            registration.close()
        if until_ms is not None and runtime.now_ms() >= until_ms:
            return Progress((), False, wakes, false_wakes, reconnects)
        reconnects += 1
    raise AssertionError(f"{conversation_id}: no progress after {SESSIONS_MAX} reconnects")
