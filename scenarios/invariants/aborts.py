"""``abort-honoured``: a durable abort intent is the authority over its
submission's outcome, at once if it never ran, at the next step if it runs.

Online, from what the stores committed:

- an intent stored for a submission never ready settles it in the same
  call (``settled_at_ms`` in the answer): nothing of it is in the log; one
  for a queued submission (ready, never claimed) never does: it settles
  through the log (reserve, append, finalize), so its settlement is
  canonical like any other;
- no non-aborted settlement record is reserved, and no other outcome is
  finalized, for a submission once its intent is durable;
- no input record enters the log for a submission under a claim granted
  after its intent was durable (aborted before it ran: nothing to apply);
- once the intent is durable, each claim of the submission appends at most
  one more step record (``model-output``): the one in flight when the
  intent landed. The next step observes it;
- a batch that holds a submission's ``abort-requested`` record and its
  ``submission-settled`` record holds the abort first.

Audit, from the stores: no row holds an intent next to a non-aborted
outcome or reservation, and no never-claimed row with an intent is open.

State per open submission only: a settled one is forgotten.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from faults.events import (
    ERROR,
    LedgerClaim,
    LedgerMarkReady,
    LedgerFinalizeSettlement,
    LedgerPurgeConversation,
    LedgerRequestAbort,
    LedgerReserveSettlement,
    LogAppend,
)
from model.ledger.rules import submission_id_for
from sim.invariants import Checker

if TYPE_CHECKING:
    from scenarios.system import AuditView

ABORTED = "aborted"
INPUT_FAMILY = "input"
STEP_FAMILY = "model-output"
SETTLED_FAMILY = "submission-settled"
ABORT_FAMILY = "abort-requested"
STEPS_AFTER_INTENT_MAX = 1  # the step in flight when the intent landed



def _outcome_of(envelope: object) -> object:
    """The outcome a settlement record envelope carries (its payload's
    ``outcome``), or None."""
    payload = envelope.get("payload") if isinstance(envelope, dict) else None
    return payload.get("outcome") if isinstance(payload, dict) else None

class AbortHonoured(Checker):
    name = "abort-honoured"
    kinds = (LedgerClaim.kind, LedgerMarkReady.kind, LedgerRequestAbort.kind, LedgerReserveSettlement.kind, LedgerFinalizeSettlement.kind,
             LogAppend.kind, LedgerPurgeConversation.kind)

    def __init__(self) -> None:
        super().__init__()
        self._claimed_ms: dict[str, dict[int, int]] = {}  # open submission -> {epoch: when claimed}
        self._intent_ms: dict[str, int] = {}  # open submission -> when its intent became durable
        self._ready: set[str] = set()  # open submissions marked ready
        self._steps_after: dict[tuple[str, int], int] = {}  # (submission, epoch) -> steps appended after it
        self.aborted_queued = 0  # never-claimed submissions settled aborted (at once, or through the log)
        self.aborted_running = 0  # intents stored for a claimed submission, settled aborted by its owner

    def metrics(self) -> dict:
        return {"aborted_queued": self.aborted_queued, "aborted_running": self.aborted_running}

    def _forget(self, submission: str) -> None:
        self._claimed_ms.pop(submission, None)
        self._ready.discard(submission)
        if self._intent_ms.pop(submission, None) is not None:
            for key in [key for key in self._steps_after if key[0] == submission]:
                del self._steps_after[key]

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        if ERROR in fields:
            return
        now_ms = event.time_ms
        if kind == LedgerMarkReady.kind:
            if not fields[LedgerMarkReady.replayed]:
                self._ready.add(fields[LedgerMarkReady.submission])
        elif kind == LedgerClaim.kind:
            if LedgerClaim.submission in fields:
                self._claimed_ms.setdefault(fields[LedgerClaim.submission], {})[fields[LedgerClaim.epoch]] = now_ms
        elif kind == LedgerRequestAbort.kind:
            if fields[LedgerRequestAbort.replayed]:
                return
            submission = fields[LedgerRequestAbort.submission]
            settled = fields[LedgerRequestAbort.settled_at_ms] is not None
            self.checks += 1
            if submission not in self._claimed_ms:
                if submission in self._ready:
                    if settled:
                        self.fail(f"{submission}: queued, its abort settled it in the ledger alone (no settlement "
                                  f"record reaches the log: it settles through the log)", (submission,))
                        self._forget(submission)
                    else:
                        self._intent_ms.setdefault(submission, now_ms)  # its aborter settles it through the log
                    return
                if not settled:
                    self.fail(f"{submission}: never ready, its abort intent left it open (nothing of it is in "
                              f"the log: it settles aborted at once)", (submission,))
                    self._intent_ms.setdefault(submission, now_ms)
                    return
                self.aborted_queued += 1
                self._forget(submission)
            elif settled:
                self.fail(f"{submission}: its abort settled it at once although it was claimed (its owner may be "
                          f"running it)", (submission,))
            else:
                self._intent_ms.setdefault(submission, now_ms)
        elif kind == LedgerReserveSettlement.kind:
            submission = fields[LedgerReserveSettlement.submission]
            if submission in self._intent_ms:
                self.checks += 1
                outcome = _outcome_of(fields[LedgerReserveSettlement.record])
                if outcome != ABORTED:
                    self.fail(f"{submission}: a {outcome} record was reserved after its abort intent was durable "
                              f"at {self._intent_ms[submission]} ms", (submission,))
        elif kind == LedgerFinalizeSettlement.kind:
            submission = fields[LedgerFinalizeSettlement.submission]
            if submission in self._intent_ms:
                self.checks += 1
                outcome = fields[LedgerFinalizeSettlement.outcome]
                if outcome != ABORTED:
                    self.fail(f"{submission}: settled {outcome} after its abort intent was durable at "
                              f"{self._intent_ms[submission]} ms", (submission,))
                elif submission in self._claimed_ms:
                    self.aborted_running += 1
                else:
                    self.aborted_queued += 1
            self._forget(submission)
        elif kind == LedgerPurgeConversation.kind:
            conversation = fields[LedgerPurgeConversation.conversation]
            for seq in range(1, fields[LedgerPurgeConversation.purged] + 1):
                self._forget(submission_id_for(conversation, seq))
        else:
            if fields.get(LogAppend.replayed):
                return
            self._check_abort_before_settlement(fields[LogAppend.envelopes])
            if not self._intent_ms:
                return
            epoch = fields[LogAppend.epoch]
            for envelope in fields[LogAppend.envelopes]:
                payload = envelope["payload"]
                submission = payload.get("submissionId") if isinstance(payload, dict) else None
                intent_ms = self._intent_ms.get(submission)
                if intent_ms is None:
                    continue
                family = envelope["family"]
                if family == INPUT_FAMILY:
                    self.checks += 1
                    claimed_ms = self._claimed_ms.get(submission, {}).get(epoch)
                    if claimed_ms is not None and claimed_ms > intent_ms:
                        self.fail(f"{submission}: its input entered the log under the claim at epoch {epoch} "
                                  f"({claimed_ms} ms), granted after its abort intent ({intent_ms} ms)",
                                  (submission,))
                elif family == STEP_FAMILY:
                    self.checks += 1
                    key = (submission, epoch)
                    count = self._steps_after.get(key, 0) + 1
                    self._steps_after[key] = count
                    if count > STEPS_AFTER_INTENT_MAX:
                        self.fail(f"{submission}: {count} step records appended at epoch {epoch} after its abort "
                                  f"intent ({intent_ms} ms): a running submission honours it at its next step",
                                  (submission,))

    def _check_abort_before_settlement(self, envelopes: list) -> None:
        """In one batch, a submission's abort record comes before its
        settlement: the intent is canonical before the outcome it decided."""
        settled: set[str] = set()
        for envelope in envelopes:
            payload = envelope["payload"]
            if not isinstance(payload, dict):
                continue
            if envelope["family"] == SETTLED_FAMILY:
                settled.add(payload.get("submissionId"))
            elif envelope["family"] == ABORT_FAMILY:
                self.checks += 1
                submission = payload.get("submissionId")
                if submission in settled:
                    self.fail(f"{submission}: its abort-requested record comes after its settlement in the "
                              f"settlement batch (the intent is canonical before the outcome)", (submission,))

    def audit(self, view: AuditView) -> None:
        for conversation_id in view.conversation_ids():
            for row in view.submissions(conversation_id):
                if row.abort_author is None:
                    continue
                self.checks += 1
                reserved = _outcome_of(row.reserved_record)
                if row.outcome not in (None, ABORTED) or reserved not in (None, ABORTED):
                    self.fail(f"{row.submission_id}: the ledger holds an abort intent next to outcome "
                              f"{row.outcome} (reserved {reserved})", (row.submission_id,))
                elif row.epoch is None and row.outcome is None:
                    self.fail(f"{row.submission_id}: never claimed, open with an abort intent", (row.submission_id,))
