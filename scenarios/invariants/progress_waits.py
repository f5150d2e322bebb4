"""``progress-waits`` (STORE-014): progress waits close the subscribe/check
and check/park races, never poll, and never lose work to a dropped
notification.

The witnesses are the trace's own: committed appends (``log.append``), the
watchers' reads as their ports traced them (``log.read``), and what the
notifier did, as the harness traces it at the instant it happens
(``faults.notifications``: install, park, resume, close, notify or drop);
what the watchers delivered (``scenarios.workloads.watchers``); and the log at the
audit. Never the waiter's own account. A wait is keyed by its process
(node label) and conversation: a watcher follows a conversation with one
wait at a time.

Online:

(a) a watcher delivers a conversation's records in order, without a gap or
    a duplicate (from where it started: 0 after a restart); what it
    delivered is what the log holds at those positions (fingerprints, with
    the log read at the follow's close, restart or the audit);
(b) a wait parks only after exactly one read under its registration, and
    never while a record after the position it read from had been committed
    before its registration was installed (the subscribe/check race);
(c) a notification of the conversation after the install (or after the last
    wake) is never lost: one that came before the park makes the park
    return at once (the latch: the check/park race), and a parked wait it
    reached is woken, never left to its reconnect deadline;
(d) no polling: one authoritative read per start, wake or reconnect; a wake
    follows a notification (a timer is not a wake); a timed resume comes no
    sooner than the reconnect period after its install (or at the follow's
    end).

Audit: (e) every watcher still following a conversation has delivered its
whole log, unless the log's last commit is too recent for a reconnect to
have found it (``catch_up_ms``). Memory: the open waits and follows, and
each conversation's tail.
"""
from __future__ import annotations

import hashlib
from typing import Any

from faults.events import (ERROR, LogAppend, LogRead, NodeCrash, ProgressClose, ProgressNotify, ProgressPark,
                           ProgressRegister, ProgressResume, WatchClosed, WatchDelivered, WatchStarted)
from sim.invariants import Checker


class _Wait:
    __slots__ = ("registration", "conversation", "installed_ms", "committed", "reads", "notified",
                 "dropped", "parked_ms", "latched")

    def __init__(self, registration: int, conversation: str, installed_ms: int, committed: int) -> None:
        self.registration = registration
        self.conversation = conversation
        self.installed_ms = installed_ms
        self.committed = committed  # the conversation's committed tail when the registration was installed
        self.reads = 0  # authoritative reads in this cycle (since the install or the last wake)
        self.notified = False  # a notification delivered since the install or the last wake
        self.dropped = False  # a notification of its conversation dropped while it was installed
        self.parked_ms = -1
        self.latched = False  # notified before its park: the park must return at once


class _Follow:
    __slots__ = ("label", "from_seq", "next_seq", "digest", "until_ms", "broken")

    def __init__(self, label: str, from_seq: int, until_ms: int) -> None:
        self.label = label
        self.from_seq = from_seq
        self.next_seq = from_seq + 1
        self.digest = hashlib.sha256()
        self.until_ms = until_ms
        self.broken = False  # a gap or duplicate was reported: its content is not compared again


class ProgressWaits(Checker):
    name = "progress-waits"
    kinds = (LogAppend.kind, LogRead.kind, ProgressRegister.kind, ProgressPark.kind, ProgressResume.kind,
             ProgressClose.kind, ProgressNotify.kind, NodeCrash.kind, WatchStarted.kind, WatchDelivered.kind,
             WatchClosed.kind)

    def __init__(self, *, reconnect_ms: int, catch_up_ms: int | None = None) -> None:
        """``reconnect_ms``: the waiters' reconnect period (a timed resume
        sooner than this is a polling period); ``catch_up_ms``: how recent a
        commit may be and still be missing from a watcher at the end
        (default: a reconnect and a minute)."""
        super().__init__()
        assert reconnect_ms > 0, reconnect_ms
        self.reconnect_ms = reconnect_ms
        self.catch_up_ms = reconnect_ms + 60_000 if catch_up_ms is None else catch_up_ms
        self._tails: dict[str, tuple[int, int]] = {}  # conversation -> (committed tail seq, when)
        self._waits: dict[tuple[str, str], _Wait] = {}  # (node label, conversation) -> its open wait
        self._waiters: set[str] = set()  # node labels that installed a registration (membership only)
        self._positions: dict[tuple[str, str], int] = {}  # (node label, conversation) -> its last read's position
        self._after_drop: set[tuple[str, str]] = set()  # waits that reconnected after a dropped notification
        self._follows: dict[tuple[str, str], _Follow] = {}  # (watcher, conversation) -> what it delivered
        self.reconnected_after_drop = 0
        self.latched_wakes = 0
        self.delivered = 0

    def metrics(self) -> dict[str, Any]:
        return {"progress_wait_reconnected_after_drop": self.reconnected_after_drop,
                "progress_wait_latched": self.latched_wakes}

    def _tail(self, conversation: str) -> int:
        return self._tails.get(conversation, (0, 0))[0]

    def on_event(self, event: tuple) -> None:
        time_ms, label, kind, fields = event.time_ms, event.node, event.kind, event.fields
        if kind == LogAppend.kind:
            if ERROR not in fields and LogAppend.last_seq in fields:
                conversation = fields[LogAppend.conversation]
                tail, when_ms = self._tails.get(conversation, (0, 0))
                if fields[LogAppend.last_seq] > tail:
                    self._tails[conversation] = (fields[LogAppend.last_seq], time_ms)
        elif kind == LogRead.kind:
            if label in self._waiters:
                self._on_read(time_ms, label, fields)
        elif kind == ProgressRegister.kind:
            conversation = fields[ProgressRegister.conversation]
            self._waiters.add(label)
            self._waits[(label, conversation)] = _Wait(fields[ProgressRegister.registration], conversation, time_ms,
                                                       self._tail(conversation))
        elif kind == ProgressNotify.kind:
            conversation = fields[ProgressNotify.conversation]
            dropped = fields[ProgressNotify.dropped]
            for wait in self._waits.values():
                if wait.conversation == conversation:
                    if dropped:
                        wait.dropped = True
                    else:
                        wait.notified = True
        elif kind == ProgressPark.kind:
            self._on_park(time_ms, label, fields)
        elif kind == ProgressResume.kind:
            self._on_resume(time_ms, label, fields)
        elif kind == ProgressClose.kind:
            key = (label, fields[ProgressClose.conversation])
            wait = self._waits.get(key)
            if wait is not None and wait.registration == fields[ProgressClose.registration]:
                del self._waits[key]
                self._positions.pop(key, None)
        elif kind == NodeCrash.kind:
            self._waiters.discard(label)
            for key in [key for key in self._waits if key[0] == label]:
                del self._waits[key]
            for key in [key for key in self._positions if key[0] == label]:
                del self._positions[key]
            self._after_drop = {key for key in self._after_drop if key[0] != label}
            self._end_follows_of(label, time_ms, fields.get(NodeCrash.restart_after_ms))
        elif kind == WatchStarted.kind:
            key = (fields[WatchStarted.watcher], fields[WatchStarted.conversation])
            old = self._follows.get(key)
            if old is not None:
                self._compare(key, old)
            self._follows[key] = _Follow(label, fields[WatchStarted.from_seq], fields[WatchStarted.until_ms])
        elif kind == WatchDelivered.kind:
            self._on_delivered(fields)
        elif kind == WatchClosed.kind:
            key = (fields[WatchClosed.watcher], fields[WatchClosed.conversation])
            follow = self._follows.pop(key, None)
            if follow is not None:
                self._compare(key, follow)

    def _end_follows_of(self, label: str, time_ms: int, restart_after_ms: int | None) -> None:
        """The follows of a crashed watcher whose window is over when it comes
        back (or that never comes back) end with it: a restart reopens only
        the conversations still in their follow window (``scenarios.workloads.watchers``),
        so none is owed the rest of its log. What each delivered is still
        compared with the log."""
        restart_ms = None if restart_after_ms is None else time_ms + restart_after_ms
        for key in [key for key, follow in self._follows.items()
                    if follow.label == label and (restart_ms is None or follow.until_ms <= restart_ms)]:
            self._compare(key, self._follows.pop(key))

    # -- the waits ---------------------------------------------------------------

    def _on_read(self, time_ms: int, label: str, fields: dict) -> None:
        key = (label, fields[LogRead.conversation])
        wait = self._waits.get(key)
        self._positions[key] = fields[LogRead.after_seq]
        if wait is None:
            self.checks += 1
            self.fail(f"{label}: read {key[1]} after seq {fields[LogRead.after_seq]} with no registration installed "
                      f"(a record committed before the install is never announced to it)", key)
            return
        self.checks += 1
        wait.reads += 1
        if wait.reads > 1:
            self.fail(f"{label}: {wait.reads} authoritative reads of {key[1]} in one cycle of registration "
                      f"{wait.registration} (no wake or reconnect in between): polling", key)
        if key in self._after_drop and fields.get(LogRead.seqs):
            self._after_drop.discard(key)
            self.reconnected_after_drop += 1

    def _on_park(self, time_ms: int, label: str, fields: dict) -> None:
        key = (label, fields[ProgressPark.conversation])
        wait = self._waits.get(key)
        self.checks += 1
        if wait is None or wait.registration != fields[ProgressPark.registration]:
            self.fail(f"{label}: parked on registration {fields[ProgressPark.registration]} of {key[1]}, which is "
                      f"not installed", key)
            return
        wait.parked_ms = time_ms
        wait.latched = wait.notified
        after_seq = self._positions.get(key, 0)
        if wait.committed > after_seq:
            self.fail(f"{label}: parked waiting for a record after seq {after_seq} of {key[1]}, but seq "
                      f"{wait.committed} was committed before its registration {wait.registration} was installed "
                      f"(subscribe/check race)", key)
        elif wait.reads != 1:
            self.fail(f"{label}: parked on {key[1]} after {wait.reads} reads under registration "
                      f"{wait.registration} (one authoritative read precedes a park)", key)

    def _on_resume(self, time_ms: int, label: str, fields: dict) -> None:
        key = (label, fields[ProgressResume.conversation])
        wait = self._waits.get(key)
        if wait is None or wait.registration != fields[ProgressResume.registration]:
            return  # its park was judged already
        self.checks += 1
        if wait.latched and time_ms > wait.parked_ms:
            self.fail(f"{label}: registration {wait.registration} of {key[1]} was notified after its install and "
                      f"before its park, yet the park lasted {time_ms - wait.parked_ms} ms (the notification was "
                      f"not latched: check/park race)", key)
        if fields[ProgressResume.woken]:
            if not wait.notified:
                self.fail(f"{label}: woken on {key[1]} (registration {wait.registration}) with no notification "
                          f"since its install or last wake: a timer, not a wake (polling)", key)
            if time_ms == wait.parked_ms:
                self.latched_wakes += 1
            wait.notified = False
            wait.reads = 0
            return
        if wait.notified:
            self.fail(f"{label}: registration {wait.registration} of {key[1]} was notified after its install, yet "
                      f"its park ran to the reconnect deadline (the notification was lost: check/park race)", key)
        follow = self._follows.get((self._watcher_of(label), key[1]))
        closing = follow is not None and time_ms >= follow.until_ms
        if not closing and time_ms - wait.installed_ms < self.reconnect_ms:
            self.fail(f"{label}: registration {wait.registration} of {key[1]} timed out {time_ms - wait.installed_ms} "
                      f"ms after its install, sooner than the reconnect period {self.reconnect_ms} ms (polling)", key)
        if wait.dropped:
            self._after_drop.add(key)

    @staticmethod
    def _watcher_of(label: str) -> str:
        return label.partition("#")[0]

    # -- what the watchers delivered -------------------------------------------------

    def _on_delivered(self, fields: dict) -> None:
        key = (fields[WatchDelivered.watcher], fields[WatchDelivered.conversation])
        follow = self._follows.get(key)
        self.checks += 1
        if follow is None:
            self.fail(f"{key[0]}: delivered seq {fields[WatchDelivered.seq]} of {key[1]} without following it", key)
            return
        seq = fields[WatchDelivered.seq]
        if seq != follow.next_seq and not follow.broken:
            follow.broken = True
            what = "a duplicate" if seq < follow.next_seq else f"a gap (seqs {follow.next_seq}..{seq - 1} missing)"
            self.fail(f"{key[0]}: delivered seq {seq} of {key[1]} after seq {follow.next_seq - 1}: {what}", key)
        follow.next_seq = seq + 1
        follow.digest.update(fields[WatchDelivered.fingerprint].encode())
        self.delivered += 1

    def _compare(self, key: tuple[str, str], follow: _Follow) -> None:
        """What ``follow`` delivered against the log at those positions."""
        if follow.broken or follow.next_seq - 1 <= follow.from_seq or self.view is None:
            return
        from scenarios.workloads.watchers import fingerprint  # the harness's fingerprint, not the model's digest

        self.checks += 1
        records = self.view.log_records(key[1])
        wanted = records[follow.from_seq:follow.next_seq - 1]
        expected = hashlib.sha256()
        for record in wanted:
            expected.update(fingerprint(record).encode())
        if len(wanted) != follow.next_seq - 1 - follow.from_seq or expected.digest() != follow.digest.digest():
            follow.broken = True
            self.fail(f"{key[0]}: the records it delivered of {key[1]} (seqs {follow.from_seq + 1}.."
                      f"{follow.next_seq - 1}) are not what the log holds there", key)

    def audit(self, view: Any) -> None:
        end_ms = self._clock()
        for key, follow in self._follows.items():
            self._compare(key, follow)
            self.checks += 1
            records = len(view.log_records(key[1]))
            delivered = follow.next_seq - 1
            last_commit_ms = self._tails.get(key[1], (0, 0))[1]
            if delivered < records and end_ms - last_commit_ms > self.catch_up_ms:
                self.fail(f"{key[0]}: following {key[1]} at the end, it delivered up to seq {delivered} of "
                          f"{records}; the last record was committed {end_ms - last_commit_ms} ms before the end "
                          f"(more than {self.catch_up_ms} ms: missed for good)", key)
