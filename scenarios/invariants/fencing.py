"""``fencing``: no committed write carries a superseded epoch; epochs increase.

Per conversation, the highest producer epoch any committed log write
(materialize or append) carried; a later commit below it is a stale owner
that got through. Per submission, the epoch of its latest claim; a ledger
write (input marker, reservation) committed with an older token is too.
Claims of one conversation get strictly increasing epochs.
"""
from __future__ import annotations

from sim.invariants import Checker


class Fencing(Checker):
    name = "fencing"
    kinds = ("log.materialize", "log.append", "ledger.claim", "ledger.mark_input_applied",
             "ledger.reserve_settlement")

    def __init__(self) -> None:
        super().__init__()
        self._log_epoch: dict[str, int] = {}      # conversation -> highest committed epoch
        self._claim_epoch: dict[str, int] = {}    # conversation -> highest claimed epoch
        self._token_epoch: dict[str, int] = {}    # submission -> epoch of its latest claim
        self.fenced = 0

    def on_event(self, event: tuple) -> None:
        kind = event[3]
        fields = event[4]
        if "error" in fields:
            if fields["error"] in ("FenceRejected", "OwnershipLost"):
                self.fenced += 1
            return
        if kind in ("log.materialize", "log.append"):
            if kind == "log.append" and fields.get("replayed"):
                return
            self.checks += 1
            conversation = fields["conversation"]
            highest = self._log_epoch.get(conversation, 0)
            if fields["epoch"] < highest:
                self.fail(f"{conversation}: {kind} committed at epoch {fields['epoch']} after epoch {highest}",
                          (conversation,))
            self._log_epoch[conversation] = max(highest, fields["epoch"])
        elif kind == "ledger.claim":
            if "epoch" not in fields:
                return  # nothing claimable
            self.checks += 1
            conversation = fields["conversation"]
            previous = self._claim_epoch.get(conversation, 0)
            if fields["epoch"] <= previous:
                self.fail(f"{conversation}: claim epoch {fields['epoch']} not above {previous}", (conversation,))
            self._claim_epoch[conversation] = max(previous, fields["epoch"])
            self._token_epoch[fields["submission"]] = fields["epoch"]
        else:
            self.checks += 1
            submission = fields["submission"]
            current = self._token_epoch.get(submission)
            if current is not None and fields["epoch"] < current:
                self.fail(f"{submission}: {kind} committed with epoch {fields['epoch']}, "
                          f"superseded by epoch {current}", (submission,))
