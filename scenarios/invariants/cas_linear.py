"""``cas-linear``: per key, committed revisions form the chain 1, 2, 3, ...

Online: every committed ``ds.save`` must land at exactly ``expected + 1`` and
``expected`` must be the last committed revision of that key — a commit whose
expected revision was not the latest is a lost update. A ``ds.clear`` starts
a new chain. Memory is one integer per key.

Audit: the store's final revision of every key equals the end of the chain
the trace saw, and the number of commits since the last clear equals that
revision — together with the online check this makes the revisions exactly
the simple path 1 -> 2 -> ... -> last, without keeping the path in memory.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from faults.events import DsClear, DsSave
from sim.invariants import Checker

if TYPE_CHECKING:
    from scenarios.system import AuditView


class CasLinear(Checker):
    name = "cas-linear"
    kinds = (DsSave.kind, DsClear.kind)

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, int] = {}        # key -> last committed revision
        self._commits: dict[str, int] = {}     # key -> commits since last clear

    def on_event(self, event: tuple) -> None:
        fields = event.fields
        if event.kind == DsClear.kind:
            if DsClear.error not in fields:
                key = fields[DsClear.key]
                self._last[key] = 0
                self._commits[key] = 0
            return
        revision = fields.get(DsSave.revision)
        if revision is None:
            return  # rejected: nothing committed
        self.checks += 1
        key = fields[DsSave.key]
        last = self._last.get(key, 0)
        expected = fields[DsSave.expected]
        if revision != expected + 1:
            self.fail(f"{key}: save expected r{expected} but committed r{revision} (not expected+1)", (key,))
        elif expected != last:
            self.fail(f"{key}: lost update — save at expected r{expected} committed r{revision} "
                      f"while r{last} was the latest commit", (key,))
        self._last[key] = revision
        self._commits[key] = self._commits.get(key, 0) + 1

    def audit(self, view: AuditView) -> None:
        for key in sorted(self._last):
            last = self._last[key]
            self.checks += 1
            stored = view.durable_state_snapshot(key)
            stored_revision = 0 if stored is None else stored.revision
            if stored_revision != last:
                self.fail(f"{key}: store holds r{stored_revision}, trace's chain ends at r{last}", (key,))
                continue
            commits = self._commits.get(key, 0)
            if commits != last:
                self.fail(f"{key}: {commits} commits do not form the chain 1..{last}", (key,))
