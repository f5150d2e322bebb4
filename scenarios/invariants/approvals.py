"""``approval-precedes-effect``: an approval's decision is in the log before
anything acts on it, and it is the ledger's decision.

Online, from what the stores committed: an ``approval-decided`` record is
appended only for a call the ledger has a decision on, and holds that very
decision; a step's output that acts on an approval comes after that record
in its conversation's log and acts on the same decision (a step that acts
while the approval is pending, or on another decision, fails here).

A rejected approval ends its run: once a rejection is in a submission's
log, no step output (nothing acts on it) and no tool call record of that
submission follows (the call it guarded never starts, nor does any later
step), and a submission with a rejected decision never settles
``completed``.

Memory: the decisions and logged decisions of open submissions.
"""
from __future__ import annotations

from faults.events import ERROR, LedgerDecideApproval, LedgerFinalizeSettlement, LedgerRequestAbort, LedgerSuspend, LogAppend
from model.agent import APPROVAL_DECIDED, TOOL_CALL_FAMILY
from model.ledger.records import REJECTED
from sim.invariants import Checker

STEP_FAMILY = "model-output"


class ApprovalPrecedesEffect(Checker):
    name = "approval-precedes-effect"
    kinds = (LedgerSuspend.kind, LedgerDecideApproval.kind, LedgerRequestAbort.kind, LedgerFinalizeSettlement.kind,
             LogAppend.kind)

    def __init__(self) -> None:
        super().__init__()
        self._decided: dict[str, dict[str, str]] = {}  # submission -> {call: the ledger's decision}
        self._logged: dict[str, dict[str, str]] = {}  # submission -> {call: the decision its log holds}
        self._suspended: set[str] = set()  # submissions waiting for an approval now
        self.approval_resumed = 0
        self.aborted_suspended = 0
        self.approval_rejected_failed = 0  # runs that settled failed on a rejected approval

    def metrics(self) -> dict:
        return {"approval_resumed": self.approval_resumed, "aborted_suspended": self.aborted_suspended,
                "approval_rejected_failed": self.approval_rejected_failed}

    def _rejected(self, decisions: dict[str, dict[str, str]], submission: str) -> str | None:
        """A call of ``submission`` with a rejected decision in ``decisions``, if any."""
        for call, decision in sorted(decisions.get(submission, {}).items()):
            if decision == REJECTED:
                return call
        return None

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        if ERROR in fields:
            return
        if kind == LedgerSuspend.kind:
            if fields[LedgerSuspend.pending]:
                self._suspended.add(fields[LedgerSuspend.submission])
        elif kind == LedgerDecideApproval.kind:
            if fields[LedgerDecideApproval.replayed]:
                return
            submission = fields[LedgerDecideApproval.submission]
            self._decided.setdefault(submission, {})[fields[LedgerDecideApproval.call]] = \
                fields[LedgerDecideApproval.decision]
            if fields[LedgerDecideApproval.pending] == 0:
                self._suspended.discard(submission)
        elif kind == LedgerRequestAbort.kind:
            if not fields[LedgerRequestAbort.replayed] and fields[LedgerRequestAbort.submission] in self._suspended:
                self.aborted_suspended += 1
        elif kind == LedgerFinalizeSettlement.kind:
            submission = fields[LedgerFinalizeSettlement.submission]
            rejected = self._rejected(self._decided, submission)
            if rejected is not None:
                self.checks += 1
                outcome = fields[LedgerFinalizeSettlement.outcome]
                if outcome == "completed":
                    self.fail(f"{submission}: settled completed although its approval {rejected} was rejected "
                              f"(a rejected approval fails the run)", (submission,))
                elif outcome == "failed":
                    self.approval_rejected_failed += 1
            self._decided.pop(submission, None)
            self._logged.pop(submission, None)
            self._suspended.discard(submission)
        elif not fields.get(LogAppend.replayed):
            for envelope in fields[LogAppend.envelopes]:
                family = envelope["family"]
                payload = envelope["payload"]
                if family in (TOOL_CALL_FAMILY, STEP_FAMILY) and isinstance(payload, dict):
                    rejected = self._rejected(self._logged, payload.get("submissionId"))
                    if rejected is not None:
                        self.checks += 1
                        what = payload["phase"] if family == TOOL_CALL_FAMILY else "a step output"
                        self.fail(f"{payload['submissionId']}: {family} ({what}) appended after its approval "
                                  f"{rejected} was rejected (the guarded call and every later step never run)",
                                  (payload["submissionId"],))
                        continue
                if family == TOOL_CALL_FAMILY and payload["phase"] == APPROVAL_DECIDED:
                    self.checks += 1
                    submission, call = payload["submissionId"], payload["call"]
                    decided = self._decided.get(submission, {}).get(call)
                    if decided != payload["decision"]:
                        self.fail(f"{call}: the log records the decision {payload['decision']!r}, the ledger's is "
                                  f"{decided!r}", (call,))
                    self._logged.setdefault(submission, {})[call] = payload["decision"]
                elif family == STEP_FAMILY and isinstance(payload["output"], dict) and "approval" in payload["output"]:
                    self.checks += 1
                    submission, output = payload["submissionId"], payload["output"]
                    logged = self._logged.get(submission, {}).get(output["call"])
                    if logged is None:
                        self.fail(f"{output['call']}: acted on ({output['approval']!r}) before its decision was in "
                                  f"the log", (output["call"],))
                    elif logged != output["approval"]:
                        self.fail(f"{output['call']}: acted as {output['approval']!r}, the decision was {logged!r}",
                                  (output["call"],))
                    else:
                        self.approval_resumed += 1
