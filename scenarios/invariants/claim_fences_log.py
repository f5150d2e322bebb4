"""``claim-fences-log``: an owner carries its claim's epoch to the log before
it touches the log at all.

The ledger's claim alone does not fence the log (they are distinct stores,
persistence STORE-001): until the new owner takes the log over at its epoch
(``materialize``), a stale owner's appends still land, and a new owner that
reads the log first decides on a history its predecessor may still extend.
So, per process and conversation: after a committed claim at epoch N, the
process's first log call on that conversation is the takeover at N. A
process that crashes starts afresh (its next claim asks again).
"""
from __future__ import annotations

from faults.events import (
    ERROR,
    Fault,
    LedgerClaim,
    LogAppend,
    LogDigestAt,
    LogInspectTail,
    LogLookupBatch,
    LogMaterialize,
    LogRead,
    NodeCrash,
    NodeStart,
)
from faults.partitions import PartitionReplyLost
from sim.invariants import Checker

NODE_CRASH, NODE_START = NodeCrash.kind, NodeStart.kind
REPLY_LOST = "reply-lost"
LOG_USES = (LogAppend.kind, LogInspectTail.kind, LogRead.kind, LogLookupBatch.kind, LogDigestAt.kind)


class ClaimFencesLog(Checker):
    name = "claim-fences-log"
    kinds = (LedgerClaim.kind, LogMaterialize.kind, *LOG_USES, NODE_CRASH, NODE_START, Fault.kind,
             PartitionReplyLost.kind)

    def __init__(self) -> None:
        super().__init__()
        # (process, conversation) -> the epoch it claimed and has not carried to the log yet
        self._untaken: dict[tuple[str, str], int] = {}
        self._last_claim: dict[str, tuple[str, str]] = {}  # process -> the key of its latest claim
        self.takeovers = 0

    def metrics(self) -> dict:
        return {"log_takeovers": self.takeovers}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        node = event.node
        if kind == NODE_CRASH or kind == NODE_START:
            self._last_claim.pop(node, None)
            if self._untaken:
                for key in [key for key in self._untaken if key[0] == node]:
                    del self._untaken[key]
            return
        fields = event.fields
        if kind == Fault.kind or kind == PartitionReplyLost.kind:
            # A claim that committed but whose caller never heard of it (a
            # lost reply; a reply a partition held past the caller's timeout):
            # the process does not own what it does not know it claimed.
            lost = (fields[Fault.kind_] == REPLY_LOST and fields[Fault.site] == LedgerClaim.kind
                    if kind == Fault.kind else fields[PartitionReplyLost.site] == LedgerClaim.kind)
            if lost:
                key = self._last_claim.pop(node, None)
                if key is not None:
                    self._untaken.pop(key, None)
            return
        if kind == LedgerClaim.kind:
            if ERROR not in fields and LedgerClaim.epoch in fields:
                key = (node, fields[LedgerClaim.conversation])
                self._untaken[key] = fields[LedgerClaim.epoch]
                self._last_claim[node] = key
            return
        if not self._untaken:
            return
        key = (node, fields["conversation"])
        epoch = self._untaken.get(key)
        if epoch is None:
            return
        self.checks += 1
        if kind == LogMaterialize.kind:
            if fields[LogMaterialize.epoch] == epoch:
                # Taken over; or refused (a newer owner holds the log: this
                # claim is dead) or failed (the process claims again first).
                self.takeovers += ERROR not in fields
                del self._untaken[key]
                return
            self.fail(f"{node} took {key[1]}'s log at epoch {fields[LogMaterialize.epoch]} after claiming it at "
                      f"epoch {epoch}", key)
            del self._untaken[key]
            return
        self.fail(f"{node} used {key[1]}'s log ({kind}) after its claim at epoch {epoch}, before taking the log "
                  f"over at that epoch: a stale owner's appends still land", key)
        del self._untaken[key]
