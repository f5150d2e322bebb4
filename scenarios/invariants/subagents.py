"""``child-before-parent``: a parent acts on its subagent only after the
child settled, and on the child's own outcome.

Online, from what the stores committed: a child reservation is released
(the parent woken) only once the attached child is settled; a parent's step
output that reports a child names the child attached at that call and its
settled outcome. Audit, from the stores: every settled parent's released
reservations name settled children whose outcome the accounting holds.

Memory: settled outcomes of the submissions seen (children are looked up
there), the attachments of open parents.
"""
from __future__ import annotations

from faults.events import (ERROR, LedgerAttachChild, LedgerFinalizeSettlement, LedgerReleaseChild,
                           LedgerRequestAbort, LogAppend)
from sim.invariants import Checker

STEP_FAMILY = "model-output"


class ChildBeforeParent(Checker):
    name = "child-before-parent"
    kinds = (LedgerAttachChild.kind, LedgerReleaseChild.kind, LedgerFinalizeSettlement.kind, LedgerRequestAbort.kind,
             LogAppend.kind)

    def __init__(self) -> None:
        super().__init__()
        self._children: dict[str, str] = {}  # parent call -> the child attached there
        self._settled: dict[str, str] = {}  # submission -> its outcome
        self.child_woke_parent = 0
        self.children_released = 0

    def metrics(self) -> dict:
        return {"child_woke_parent": self.child_woke_parent, "children_released": self.children_released}

    def on_event(self, event: tuple) -> None:
        kind = event[3]
        fields = event[4]
        if ERROR in fields:
            return
        if kind == LedgerAttachChild.kind:
            self._children[fields[LedgerAttachChild.call]] = fields[LedgerAttachChild.child]
        elif kind == LedgerFinalizeSettlement.kind:
            self._settled[fields[LedgerFinalizeSettlement.submission]] = fields[LedgerFinalizeSettlement.outcome]
        elif kind == LedgerRequestAbort.kind:
            if fields[LedgerRequestAbort.settled_at_ms] is not None:
                self._settled[fields[LedgerRequestAbort.submission]] = "aborted"
        elif kind == LedgerReleaseChild.kind:
            if fields[LedgerReleaseChild.replayed]:
                return
            self.checks += 1
            call = fields[LedgerReleaseChild.call]
            child = self._children.get(call)
            if child is None or child not in self._settled:
                self.fail(f"{call}: the parent was woken before its child {child} settled", (call,))
            else:
                self.children_released += 1
        elif not fields.get(LogAppend.replayed):
            for envelope in fields[LogAppend.envelopes]:
                payload = envelope["payload"]
                if envelope["family"] != STEP_FAMILY or not isinstance(payload["output"], dict) or \
                        "child" not in payload["output"]:
                    continue
                self.checks += 1
                output = payload["output"]
                call, child = output["call"], output["child"]
                if self._children.get(call) != child:
                    self.fail(f"{call}: the parent reports child {child}, the ledger attached "
                              f"{self._children.get(call)}", (call,))
                elif self._settled.get(child) != output["childOutcome"]:
                    self.fail(f"{call}: the parent acted on child {child} as {output['childOutcome']!r}, its "
                              f"settlement is {self._settled.get(child)!r}", (call,))
                else:
                    self.child_woke_parent += 1
                    del self._children[call]

    def audit(self, view) -> None:
        records = {record.submission_id: record for conversation_id in view.conversation_ids()
                   for record in view.submissions(conversation_id)}
        for parent in records.values():
            for call, entry in sorted((parent.children or {}).items()):
                self.checks += 1
                if entry["releasedAtMs"] is None:
                    continue
                child = records.get(entry["child"]) if entry["child"] else None
                if child is None or child.outcome is None:
                    self.fail(f"{call}: released, but its child {entry['child']} is not settled", (call,))
                elif entry["accounting"]["outcome"] != child.outcome:
                    self.fail(f"{call}: the accounting says {entry['accounting']['outcome']!r}, the child "
                              f"settled {child.outcome!r}", (call,))
