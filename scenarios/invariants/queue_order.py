"""``fifo-one-active``: per conversation, submissions are claimed in queue
order (only the lowest unsettled one) and at most one is active: the next
submission's input never enters the log before the previous settlement.
"""
from __future__ import annotations

from faults.events import ERROR, LedgerAdmit, LedgerClaim, LedgerFinalizeSettlement, LedgerRequestAbort, LogAppend
from sim.invariants import Checker


class QueueOrder(Checker):
    name = "fifo-one-active"
    kinds = (LedgerAdmit.kind, LedgerClaim.kind, LedgerFinalizeSettlement.kind, LedgerRequestAbort.kind, LogAppend.kind)

    def __init__(self) -> None:
        super().__init__()
        self._unsettled: dict[str, list[tuple[int, str]]] = {}  # conversation -> [(queue_seq, sid)] ascending
        self._conversation_of: dict[str, str] = {}
        self._active: dict[str, str] = {}  # conversation -> submission whose input is in the log, unsettled

    def on_event(self, event: tuple) -> None:
        kind = event[3]
        fields = event[4]
        if ERROR in fields:
            return
        if kind == LedgerAdmit.kind:
            if not fields[LedgerAdmit.replayed]:
                conversation, submission = fields[LedgerAdmit.conversation], fields[LedgerAdmit.submission]
                queue = self._unsettled.setdefault(conversation, [])
                queue.append((fields[LedgerAdmit.queue_seq], submission))
                queue.sort()
                self._conversation_of[submission] = conversation
        elif kind == LedgerClaim.kind:
            if LedgerClaim.submission not in fields:
                return
            self.checks += 1
            conversation, submission = fields[LedgerClaim.conversation], fields[LedgerClaim.submission]
            queue = self._unsettled.get(conversation, [])
            head = queue[0][1] if queue else None
            if submission != head:
                self.fail(f"{conversation}: claimed {submission} while {head} is the unsettled head",
                          (conversation, submission))
        elif kind == LedgerFinalizeSettlement.kind or kind == LedgerRequestAbort.kind:
            if kind == LedgerRequestAbort.kind:
                if fields[LedgerRequestAbort.settled_at_ms] is None:
                    return  # an intent only: its owner settles it
                submission = fields[LedgerRequestAbort.submission]  # settled by the intent, never claimed
            else:
                submission = fields[LedgerFinalizeSettlement.submission]
            conversation = self._conversation_of.get(submission)
            if conversation is not None:
                queue = self._unsettled.get(conversation, [])
                self._unsettled[conversation] = [entry for entry in queue if entry[1] != submission]
                self._conversation_of.pop(submission, None)
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
                    if active is not None and active != submission:
                        self.fail(f"{conversation}: input of {submission} appended while {active} is unsettled",
                                  (conversation, submission))
                    self._active[conversation] = submission
                elif family == "submission-settled" and self._active.get(conversation) == submission:
                    del self._active[conversation]
