"""``fail-closed-pagination``: a recovery read is one tail inspection plus
exactly ceil((T - C)/P) pages (C: the checkpoint it started from, or 0; P:
its page size, the spec's 1024 unless a smaller one is configured), and an injected short page, sequence gap or
corrupt row always ends in a typed corruption failure, never in a "complete"
history.
"""
from __future__ import annotations

from faults.events import Fault, RecoveryFailed, RecoveryRead
from faults.kinds import CORRUPT_ROW, SEQUENCE_GAP, SHORT_PAGE
from sim.invariants import Checker

PAGE_SIZE = 1024
_DAMAGED_READS = (SHORT_PAGE, SEQUENCE_GAP, CORRUPT_ROW)


class FailClosedPagination(Checker):
    name = "fail-closed-pagination"
    kinds = (Fault.kind, RecoveryRead.kind, RecoveryFailed.kind)

    def __init__(self) -> None:
        super().__init__()
        self._damaged: dict[str, int] = {}  # node -> damaged reads not yet answered by a failure
        self.caught = 0

    def metrics(self) -> dict:
        return {"damaged_reads_caught": self.caught}

    def on_event(self, event: tuple) -> None:
        kind = event[3]
        node = event[2]
        fields = event[4]
        if kind == Fault.kind:
            if fields[Fault.kind_] in _DAMAGED_READS:
                self._damaged[node] = self._damaged.get(node, 0) + 1
            return
        self.checks += 1
        if kind == RecoveryFailed.kind:
            if self._damaged.pop(node, 0):
                self.caught += 1
            return
        conversation = fields[RecoveryRead.conversation]
        if self._damaged.get(node):
            self.fail(f"{conversation}: recovery accepted a history read through a damaged page", (conversation,))
            return
        tail_seq = fields[RecoveryRead.tail_seq]
        due = tail_seq - fields.get(RecoveryRead.from_checkpoint, 0)
        expected_requests = 1 + -(-due // fields.get(RecoveryRead.page_size, PAGE_SIZE))
        requests, records = fields[RecoveryRead.requests], fields[RecoveryRead.records]
        if requests != expected_requests or records != due:
            self.fail(f"{conversation}: recovery read of {due} records made {requests} requests for {records} "
                      f"records (expected {expected_requests} for {due})", (conversation,))
