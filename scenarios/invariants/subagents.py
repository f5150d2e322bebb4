"""``child-before-parent``: a parent acts on its subagent only after the
child settled, and on the child's own outcome.

Online, from what the stores committed: a child reservation is released
(the parent woken) only once the attached child is settled; a parent's step
output that reports a child names the child attached at that call and its
settled outcome. Audit, from the stores: every settled parent's released
reservations name settled children whose outcome the accounting holds.

An aborted parent's subagents: a reservation released with no child
attached is an orphan's (its child never admitted), released only for a
parent whose abort intent is durable; in this workload only a parent aborts
a child (the clients abort what they submitted), so every abort intent on a
child is authored ``subagent-parent-abort``. Audit: no settled aborted
parent keeps a reservation whose child was never admitted; each child an
aborted parent started has a ``subagent joined`` record in the parent's log
before its settlement; every ``subagent joined`` record names the outcome
its child settled with (an open child: aborted, with its intent durable).

Memory: settled outcomes of the submissions seen (children are looked up
there), the attachments of open parents, the open children, the open
submissions with an abort intent.
"""
from __future__ import annotations

from faults.events import (ERROR, LedgerAttachChild, LedgerFinalizeSettlement, LedgerReleaseChild,
                           LedgerRequestAbort, LogAppend)
from model.agent import SUBAGENT_FAMILY, SUBAGENT_JOINED, SUBAGENT_PARENT_ABORT
from sim.invariants import Checker

STEP_FAMILY = "model-output"
SETTLED_FAMILY = "submission-settled"
ABORTED = "aborted"


class ChildBeforeParent(Checker):
    name = "child-before-parent"
    kinds = (LedgerAttachChild.kind, LedgerReleaseChild.kind, LedgerFinalizeSettlement.kind, LedgerRequestAbort.kind,
             LogAppend.kind)

    def __init__(self) -> None:
        super().__init__()
        self._children: dict[str, str] = {}  # parent call -> the child attached there
        self._settled: dict[str, str] = {}  # submission -> its outcome
        self._open_children: set[str] = set()  # children attached, not settled
        self._aborting: set[str] = set()  # open submissions with an abort intent
        self.child_woke_parent = 0
        self.children_released = 0
        self.orphans_released = 0

    def metrics(self) -> dict:
        return {"child_woke_parent": self.child_woke_parent, "children_released": self.children_released,
                "orphans_released": self.orphans_released}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        if ERROR in fields:
            return
        if kind == LedgerAttachChild.kind:
            self._children[fields[LedgerAttachChild.call]] = fields[LedgerAttachChild.child]
            if fields[LedgerAttachChild.child] not in self._settled:
                self._open_children.add(fields[LedgerAttachChild.child])
        elif kind == LedgerFinalizeSettlement.kind:
            submission = fields[LedgerFinalizeSettlement.submission]
            self._settled[submission] = fields[LedgerFinalizeSettlement.outcome]
            self._open_children.discard(submission)
            self._aborting.discard(submission)
        elif kind == LedgerRequestAbort.kind:
            submission = fields[LedgerRequestAbort.submission]
            if not fields[LedgerRequestAbort.replayed] and submission in self._open_children:
                self.checks += 1
                if fields[LedgerRequestAbort.author] != SUBAGENT_PARENT_ABORT:
                    self.fail(f"{submission}: a subagent aborted by {fields[LedgerRequestAbort.author]!r}, not "
                              f"{SUBAGENT_PARENT_ABORT!r} (only its parent aborts a child here)", (submission,))
            if fields[LedgerRequestAbort.settled_at_ms] is not None:
                self._settled[submission] = "aborted"
                self._open_children.discard(submission)
            else:
                self._aborting.add(submission)
        elif kind == LedgerReleaseChild.kind:
            if fields[LedgerReleaseChild.replayed]:
                return
            self.checks += 1
            call = fields[LedgerReleaseChild.call]
            child = self._children.get(call)
            parent = fields[LedgerReleaseChild.submission]
            if child is None and (parent in self._aborting or self._settled.get(parent) == ABORTED):
                self.orphans_released += 1  # no child attached: an aborted parent's orphan (or unattached) one
            elif child is None or child not in self._settled:
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
        children_at: dict[str, str] = {}  # parent call -> the child admitted there (attached or not)
        for record in records.values():
            if record.parent is not None:
                children_at[record.parent.tool_call_id] = record.submission_id
                if record.abort_author is not None:
                    self.checks += 1
                    if record.abort_author != SUBAGENT_PARENT_ABORT:
                        self.fail(f"{record.submission_id}: a subagent whose abort intent is authored "
                                  f"{record.abort_author!r}, not {SUBAGENT_PARENT_ABORT!r}",
                                  (record.submission_id,))
        for parent in records.values():
            for call, entry in sorted((parent.children or {}).items()):
                self.checks += 1
                if entry["releasedAtMs"] is None:
                    if parent.outcome == ABORTED and entry["child"] is None and call not in children_at:
                        self.fail(f"{call}: its parent settled aborted and the reservation of a child never "
                                  f"admitted is still reserved (an orphan is released)", (call,))
                    continue
                named = entry["accounting"]["child"]
                if named is None:
                    if entry["child"] is not None or parent.abort_author is None:
                        self.fail(f"{call}: released as an orphan (no child), but its child is {entry['child']} "
                                  f"and its parent's abort intent {parent.abort_author}", (call,))
                    continue
                child = records.get(named)
                if child is None or child.outcome is None:
                    self.fail(f"{call}: released, but its child {named} is not settled", (call,))
                elif entry["accounting"]["outcome"] != child.outcome:
                    self.fail(f"{call}: the accounting says {entry['accounting']['outcome']!r}, the child "
                              f"settled {child.outcome!r}", (call,))
        for conversation_id in view.conversation_ids():
            self._audit_joined(view, conversation_id, records, children_at)

    def _audit_joined(self, view, conversation_id: str, records: dict, children_at: dict) -> None:
        """Each ``subagent joined`` record names its child's outcome; an
        aborted parent's children each have one before its settlement."""
        joined: dict[str, int] = {}  # call -> the seq of its joined record
        settled_at: dict[str, int] = {}  # submission -> the seq of its settlement record
        for record in view.log_records(conversation_id):
            envelope = record.envelope
            payload = envelope.payload
            if envelope.family == SETTLED_FAMILY:
                settled_at.setdefault(payload["submissionId"], record.seq)
            if envelope.family != SUBAGENT_FAMILY or payload.get("phase") != SUBAGENT_JOINED:
                continue
            self.checks += 1
            call, named, outcome = payload["call"], payload["child"], payload["outcome"]
            joined.setdefault(call, record.seq)
            child = records.get(named)
            if child is None:
                continue  # purged with its conversation
            if child.outcome is not None and child.outcome != outcome:
                self.fail(f"{call}: joined child {named} as {outcome!r}, it settled {child.outcome!r}", (call,))
            elif child.outcome is None and (outcome != ABORTED or child.abort_author is None):
                self.fail(f"{call}: joined open child {named} as {outcome!r} (only a durable abort intent "
                          f"decides an open child's outcome)", (call,))
        for parent in view.submissions(conversation_id):
            if parent.outcome != ABORTED or parent.submission_id not in settled_at:
                continue
            for call, entry in sorted((parent.children or {}).items()):
                if entry["releasedAtMs"] is not None:
                    child = entry["accounting"]["child"]
                else:
                    child = entry["child"] or children_at.get(call)
                if child is None:
                    continue  # never admitted when it settled: an orphan, released
                self.checks += 1
                if joined.get(call, settled_at[parent.submission_id]) >= settled_at[parent.submission_id]:
                    self.fail(f"{call}: its parent settled aborted with no subagent joined record of its child "
                              f"{child} before the settlement", (call,))
