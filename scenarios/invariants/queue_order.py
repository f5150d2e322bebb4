"""``fifo-one-active``: per conversation, submissions are claimed in queue
order (only the lowest unsettled one) and at most one is active: the next
submission's input never enters the log before the previous settlement.
"""
from __future__ import annotations

from sim.invariants import Checker


class QueueOrder(Checker):
    name = "fifo-one-active"
    kinds = ("ledger.admit", "ledger.claim", "ledger.finalize_settlement", "log.append")

    def __init__(self) -> None:
        super().__init__()
        self._unsettled: dict[str, list[tuple[int, str]]] = {}  # conversation -> [(queue_seq, sid)] ascending
        self._conversation_of: dict[str, str] = {}
        self._active: dict[str, str] = {}  # conversation -> submission whose input is in the log, unsettled

    def on_event(self, event: tuple) -> None:
        kind = event[3]
        fields = event[4]
        if "error" in fields:
            return
        if kind == "ledger.admit":
            if not fields["replayed"]:
                queue = self._unsettled.setdefault(fields["conversation"], [])
                queue.append((fields["queue_seq"], fields["submission"]))
                queue.sort()
                self._conversation_of[fields["submission"]] = fields["conversation"]
        elif kind == "ledger.claim":
            if "submission" not in fields:
                return
            self.checks += 1
            queue = self._unsettled.get(fields["conversation"], [])
            head = queue[0][1] if queue else None
            if fields["submission"] != head:
                self.fail(f"{fields['conversation']}: claimed {fields['submission']} while {head} is the "
                          "unsettled head", (fields["conversation"], fields["submission"]))
        elif kind == "ledger.finalize_settlement":
            submission = fields["submission"]
            conversation = self._conversation_of.get(submission)
            if conversation is not None:
                queue = self._unsettled.get(conversation, [])
                self._unsettled[conversation] = [entry for entry in queue if entry[1] != submission]
                self._conversation_of.pop(submission, None)
        else:
            if fields.get("replayed"):
                return
            conversation = fields["conversation"]
            for envelope in fields["envelopes"]:
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
