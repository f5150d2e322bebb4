"""``fail-closed-pagination``: a recovery read is one tail inspection plus
exactly ceil((T - C)/P) pages (C: the checkpoint it started from, or 0; P:
its page size, the spec's 1024 unless a smaller one is configured), and an injected short page, sequence gap or
corrupt row always ends in a typed corruption failure, never in a "complete"
history.
"""
from __future__ import annotations

from sim.invariants import Checker

PAGE_SIZE = 1024


class FailClosedPagination(Checker):
    name = "fail-closed-pagination"
    kinds = ("fault", "recovery.read", "recovery.failed")

    def __init__(self) -> None:
        super().__init__()
        self._damaged: dict[str, int] = {}  # node -> damaged reads not yet answered by a failure
        self.caught = 0

    def on_event(self, event: tuple) -> None:
        kind = event[3]
        node = event[2]
        fields = event[4]
        if kind == "fault":
            if fields["kind"] in ("short-page", "sequence-gap", "corrupt-row"):
                self._damaged[node] = self._damaged.get(node, 0) + 1
            return
        self.checks += 1
        if kind == "recovery.failed":
            if self._damaged.pop(node, 0):
                self.caught += 1
            return
        if self._damaged.get(node):
            self.fail(f"{fields['conversation']}: recovery accepted a history read through a damaged page",
                      (fields["conversation"],))
            return
        tail_seq = fields["tail_seq"]
        due = tail_seq - fields.get("from_checkpoint", 0)
        expected_requests = 1 + -(-due // fields.get("page_size", PAGE_SIZE))
        if fields["requests"] != expected_requests or fields["records"] != due:
            self.fail(f"{fields['conversation']}: recovery read of {due} records made "
                      f"{fields['requests']} requests for {fields['records']} records "
                      f"(expected {expected_requests} for {due})", (fields["conversation"],))
