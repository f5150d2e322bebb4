"""``fencing``: no committed write carries a superseded epoch; epochs increase.

Per conversation, the highest producer epoch any committed log write
(materialize or append) carried; a later commit below it is a stale owner
that got through. Per submission, the epoch of its latest claim; a ledger
write (input marker, reservation) committed with an older token is too.
Claims of one conversation get strictly increasing epochs.
"""
from __future__ import annotations

from faults.events import (
    ERROR,
    LedgerClaim,
    LedgerMarkInputApplied,
    LedgerPurgeConversation,
    LedgerReserveSettlement,
    LogAppend,
    LogDeleteConversation,
    LogMaterialize,
)
from model.ledger.rules import submission_id_for
from sim.invariants import Checker


class Fencing(Checker):
    name = "fencing"
    kinds = (LogMaterialize.kind, LogAppend.kind, LedgerClaim.kind, LedgerMarkInputApplied.kind,
             LedgerReserveSettlement.kind, LogDeleteConversation.kind, LedgerPurgeConversation.kind)

    def __init__(self) -> None:
        super().__init__()
        self._log_epoch: dict[str, int] = {}      # conversation -> highest committed epoch
        self._claim_epoch: dict[str, int] = {}    # conversation -> highest claimed epoch
        self._token_epoch: dict[str, int] = {}    # submission -> epoch of its latest claim
        self.fenced = 0

    def metrics(self) -> dict:
        return {"stale_writes_fenced": self.fenced}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        error = fields.get(ERROR)
        if error is not None:
            if error in ("FenceRejected", "OwnershipLost"):
                self.fenced += 1
            return
        if kind == LogDeleteConversation.kind:
            if fields.get(LogDeleteConversation.deleted):
                # Deleted whole: a conversation created again under its id has no epoch history.
                self._log_epoch.pop(fields[LogDeleteConversation.conversation], None)
            return
        if kind == LedgerPurgeConversation.kind:
            # Purged whole (retention): its epochs and queue start over, so
            # what was known of its claims is forgotten, and memory stays flat.
            conversation = fields[LedgerPurgeConversation.conversation]
            self._claim_epoch.pop(conversation, None)
            for seq in range(1, fields[LedgerPurgeConversation.purged] + 1):
                self._token_epoch.pop(submission_id_for(conversation, seq), None)
            return
        if kind == LogAppend.kind or kind == LogMaterialize.kind:
            if kind == LogAppend.kind:
                if fields.get(LogAppend.replayed):
                    return
                conversation, epoch = fields[LogAppend.conversation], fields[LogAppend.epoch]
            else:
                conversation, epoch = fields[LogMaterialize.conversation], fields[LogMaterialize.epoch]
            self.checks += 1
            highest = self._log_epoch.get(conversation, 0)
            if epoch < highest:
                self.fail(f"{conversation}: {kind} committed at epoch {epoch} after epoch {highest}",
                          (conversation,))
            self._log_epoch[conversation] = max(highest, epoch)
        elif kind == LedgerClaim.kind:
            if LedgerClaim.epoch not in fields:
                return  # nothing claimable
            self.checks += 1
            conversation = fields[LedgerClaim.conversation]
            epoch = fields[LedgerClaim.epoch]
            previous = self._claim_epoch.get(conversation, 0)
            if epoch <= previous:
                self.fail(f"{conversation}: claim epoch {epoch} not above {previous}", (conversation,))
            self._claim_epoch[conversation] = max(previous, epoch)
            self._token_epoch[fields[LedgerClaim.submission]] = epoch
        else:
            # mark_input_applied and reserve_settlement: both carry the token's submission and epoch.
            event_type = LedgerMarkInputApplied if kind == LedgerMarkInputApplied.kind else LedgerReserveSettlement
            self.checks += 1
            submission = fields[event_type.submission]
            epoch = fields[event_type.epoch]
            current = self._token_epoch.get(submission)
            if current is not None and epoch < current:
                self.fail(f"{submission}: {kind} committed with epoch {epoch}, "
                          f"superseded by epoch {current}", (submission,))
