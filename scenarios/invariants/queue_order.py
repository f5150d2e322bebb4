"""``fifo-one-active``: per conversation, submissions are claimed in queue
order (only the lowest unsettled one) and at most one is active: the next
submission's input never enters the log before the previous settlement.

A cooperative handoff is the other (``claim`` with a ``handoff``): the
producer deferred the head (its input applied, released unsettled) and the
lane went to the named next submission — allowed when the deferred ids are
exactly the unsettled ones ahead of it; the deferred input is then parked,
so the next one's input may enter the log.

A producer hands over only what it deferred: each deferred id's input was
marked applied, the last was released by the producer at the epoch the
handoff names, and, when no claim came since (nothing else could change
what lies ahead of the named one), the deferred ids are exactly the
unsettled ones ahead of it — asked, whatever the ledger answers.

Settlement records enter the log in queue order, except a never-run
abort's (no input record) and the rows a handoff parked: a deferred head
settles after the successors it handed the lane to.

Joins are the one exception, and only as the ledger recorded them: a
follow-up the active run took (``begin_join``) may have its input applied to
that run's log, naming the run as its host; the host's settlement settles
its joined followers and puts its joining ones back in the queue.
"""
from __future__ import annotations

from faults.events import (ERROR, LedgerAdmit, LedgerBeginJoin, LedgerClaim, LedgerFinalizeSettlement,
                           LedgerMarkInputApplied, LedgerMarkJoined, LedgerReleaseOwnership, LedgerRequestAbort,
                           LedgerRevertJoin, LogAppend)
from sim.invariants import Checker


class QueueOrder(Checker):
    name = "fifo-one-active"
    kinds = (LedgerAdmit.kind, LedgerClaim.kind, LedgerFinalizeSettlement.kind, LedgerRequestAbort.kind, LogAppend.kind,
             LedgerBeginJoin.kind, LedgerMarkJoined.kind, LedgerRevertJoin.kind, LedgerMarkInputApplied.kind,
             LedgerReleaseOwnership.kind)

    def __init__(self) -> None:
        super().__init__()
        self._unsettled: dict[str, list[tuple[int, str]]] = {}  # conversation -> [(queue_seq, sid)] ascending
        self._conversation_of: dict[str, str] = {}
        self._active: dict[str, str] = {}  # conversation -> submission whose input is in the log, unsettled
        self._followers: dict[str, dict[str, bool]] = {}  # host -> {follower: joined (its input marked applied)}
        # Of unsettled submissions: those marked input-applied, each one's
        # last release (owner, epoch), those whose input or settlement record
        # is in the log, those a granted handoff parked; and each lane's last
        # claim epoch.
        self._marked: set[str] = set()
        self._released: dict[str, tuple[str, int]] = {}
        self._input_logged: set[str] = set()
        self._settlement_logged: set[str] = set()
        self._parked: set[str] = set()
        self._lane_epoch: dict[str, int] = {}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        if ERROR in fields:
            return
        if kind == LedgerAdmit.kind:
            if not fields[LedgerAdmit.replayed]:
                conversation, submission = fields[LedgerAdmit.conversation], fields[LedgerAdmit.submission]
                queue = self._unsettled.setdefault(conversation, [])
                queue.append((fields[LedgerAdmit.queue_seq], submission))
                queue.sort()
                self._conversation_of[submission] = conversation
        elif kind == LedgerMarkInputApplied.kind:
            self._marked.add(fields[LedgerMarkInputApplied.submission])
        elif kind == LedgerReleaseOwnership.kind:
            self._released[fields[LedgerReleaseOwnership.submission]] = (fields[LedgerReleaseOwnership.owner],
                                                                         fields[LedgerReleaseOwnership.epoch])
        elif kind == LedgerClaim.kind:
            handoff = fields[LedgerClaim.handoff]
            if handoff is not None:
                self._judge_handoff(fields[LedgerClaim.conversation], fields[LedgerClaim.owner], handoff)
            if LedgerClaim.submission not in fields:
                return
            self.checks += 1
            conversation, submission = fields[LedgerClaim.conversation], fields[LedgerClaim.submission]
            self._lane_epoch[conversation] = fields[LedgerClaim.epoch]
            queue = self._unsettled.get(conversation, [])
            head = queue[0][1] if queue else None
            if handoff is not None and submission != head:
                ahead = tuple(sid for _, sid in queue[:[sid for _, sid in queue].index(submission)]) \
                    if any(sid == submission for _, sid in queue) else None
                if submission == handoff[2] and ahead is not None and ahead == tuple(handoff[1]):
                    self._parked.update(ahead)
                    if self._active.get(conversation) in ahead:
                        del self._active[conversation]  # parked: the lane is handed to the next one
                    return
                self.fail(f"{conversation}: a handoff claimed {submission} while {ahead} (not the deferred "
                          f"{tuple(handoff[1])}) are unsettled ahead of it", (conversation, submission))
                return
            if submission != head:
                self.fail(f"{conversation}: claimed {submission} while {head} is the unsettled head",
                          (conversation, submission))
        elif kind == LedgerBeginJoin.kind:
            followers = self._followers.setdefault(fields[LedgerBeginJoin.submission], {})
            for follower in fields[LedgerBeginJoin.followers]:
                followers.setdefault(follower, False)
        elif kind == LedgerMarkJoined.kind:
            self._followers.setdefault(fields[LedgerMarkJoined.host], {})[fields[LedgerMarkJoined.submission]] = True
        elif kind == LedgerRevertJoin.kind:
            followers = self._followers.get(fields[LedgerRevertJoin.host], {})
            if not followers.get(fields[LedgerRevertJoin.submission]):
                followers.pop(fields[LedgerRevertJoin.submission], None)  # a joined one stays joined
        elif kind == LedgerFinalizeSettlement.kind or kind == LedgerRequestAbort.kind:
            if kind == LedgerRequestAbort.kind:
                if fields[LedgerRequestAbort.settled_at_ms] is None:
                    return  # an intent only: its owner settles it
                submission = fields[LedgerRequestAbort.submission]  # settled by the intent, never claimed
            else:
                submission = fields[LedgerFinalizeSettlement.submission]
            # A host's settlement settles its joined followers with it; its
            # joining ones go back to the queue (they stay unsettled).
            followers = self._followers.pop(submission, {})
            settled = {submission} | {follower for follower, joined in followers.items() if joined}
            conversation = self._conversation_of.get(submission)
            if conversation is not None:
                queue = [entry for entry in self._unsettled.get(conversation, ()) if entry[1] not in settled]
                if queue:
                    self._unsettled[conversation] = queue
                else:
                    self._unsettled.pop(conversation, None)  # nothing unsettled: memory follows open work
                    self._lane_epoch.pop(conversation, None)
                for gone in settled:
                    self._conversation_of.pop(gone, None)
            for gone in settled:
                self._forget(gone)
        else:
            if fields.get(LogAppend.replayed):
                return
            conversation = fields[LogAppend.conversation]
            for envelope in fields[LogAppend.envelopes]:
                family = envelope["family"]
                submission = envelope["payload"].get("submissionId") if isinstance(envelope["payload"], dict) else None
                if family == "input":
                    self.checks += 1
                    active = self._active.get(conversation)
                    host = envelope["payload"].get("hostSubmissionId")
                    if host is not None:
                        # A follow-up's input applied to its host's run.
                        if host != active or submission not in self._followers.get(host, {}):
                            self.fail(f"{conversation}: input of {submission} applied to {host}'s run, which "
                                      f"{'is not active' if host != active else 'never took it'}",
                                      (conversation, submission))
                        continue
                    if active is not None and active != submission:
                        self.fail(f"{conversation}: input of {submission} appended while {active} is unsettled",
                                  (conversation, submission))
                    self._active[conversation] = submission
                    self._input_logged.add(submission)
                elif family == "submission-settled":
                    self._settled_in_order(conversation, submission)
                    if self._active.get(conversation) == submission:
                        del self._active[conversation]

    def _judge_handoff(self, conversation: str, owner: str, handoff: tuple) -> None:
        """A handoff asked for (granted or not): the producer deferred what it names."""
        self.checks += 1
        producer_epoch, deferred, target = handoff[0], tuple(handoff[1]), handoff[2]
        queue = [sid for _, sid in self._unsettled.get(conversation, ())]
        if deferred and not set(deferred) <= set(queue):
            # A row it names settled since it asked (a slow request): the
            # ledger grants nothing over a settled row, and what its producer
            # did with that row was judged while it was open.
            return
        unapplied = [sid for sid in deferred if sid not in self._marked]
        if not deferred or unapplied:
            self.fail(f"{conversation}: {owner} handed the lane to {target} over {deferred}, "
                      f"input not marked applied: {unapplied}", (conversation, target))
            return
        if self._released.get(deferred[-1]) != (owner, producer_epoch):
            self.fail(f"{conversation}: {owner} handed the lane to {target} at epoch {producer_epoch} without "
                      f"releasing {deferred[-1]} at it (last release: {self._released.get(deferred[-1])})",
                      (conversation, target))
            return
        if self._lane_epoch.get(conversation) == producer_epoch and target in queue \
                and tuple(queue[:queue.index(target)]) != deferred:
            self.fail(f"{conversation}: {owner} handed the lane to {target} naming {deferred} deferred, while "
                      f"{tuple(queue[:queue.index(target)])} are unsettled ahead of it", (conversation, target))

    def _settled_in_order(self, conversation: str, submission: str) -> None:
        """A settlement record entered the log: in queue order, but for a
        never-run abort's and the heads a handoff parked."""
        self._settlement_logged.add(submission)
        if submission not in self._input_logged:
            return  # never ran (or joined: settled with its host, whose record came first)
        self.checks += 1
        for _, ahead in self._unsettled.get(conversation, ()):
            if ahead == submission:
                return
            if ahead not in self._settlement_logged and ahead not in self._parked:
                self.fail(f"{conversation}: settlement of {submission} logged while {ahead}, ahead of it and "
                          f"not deferred, is unsettled", (conversation, submission))
                return

    def _forget(self, submission: str) -> None:
        """A settled one: nothing of it is judged again."""
        for kept in (self._marked, self._input_logged, self._settlement_logged, self._parked):
            kept.discard(submission)
        self._released.pop(submission, None)
