"""``exactly-once-settlement``: each admitted submission ends with exactly one
canonical settlement record; the ledger's outcome equals it; outcomes never change.

Online, from what the stores committed: a reservation's digest never changes;
the log holds at most one settlement record per submission and it is the
reserved record; finalize comes only after that record is in the log, and a
repeated finalize reports the same outcome, digest and settlement time.
Audit, from the stores: every finalized submission has exactly one
settlement record in its conversation's log, equal to the ledger's digest
(the digest of the record envelope, as reserved: the log's record is
byte-equal to the ledger's);
a ledger rebuilt from the log alone agrees on every submission that
reached the log (the log is canonical); and a submission's input,
settlement and abort records carry the peer implementation's deterministic
ids (record ``input:{sid}`` in batch ``submission-input:{sid}``, record
``settlement:{sid}`` in a ``submission-settlement:`` batch, its own or its
host's, record ``abort:{sid}``), and every non-empty log begins with its
``conversation-created:{id}`` record, so a history reads the same in either;
a logged settlement's payload names it as the peer's does: its
``settlementId`` is ``settlement:{sid}`` and its ``receiptId`` the ledger's
receipt of that admission.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from faults.events import (ERROR, LedgerFinalizeSettlement, LedgerPurgeConversation, LedgerRequestAbort,
                           LedgerReserveSettlement, LogAppend)
from model.canonical import digest
from model.ledger.rules import submission_id_for


def record_digest_of(envelope: dict) -> str:
    """A settlement record's digest: its whole record envelope's (peer case
    78), without the producer's identity and epoch, which its append adds."""
    return digest({key: value for key, value in envelope.items() if key not in ("producerId", "epoch")})


def settled_by_abort(record) -> bool:
    """A submission its abort settled before it was ever claimed: at once
    (never ready: nothing of it in the log) or, queued, through the log (its
    one record). The row does not tell which (a retried admission marks a
    settled row ready); abort-honoured tells them apart online."""
    return record.outcome == "aborted" and record.epoch is None and record.abort_author is not None
from sim.invariants import Checker

if TYPE_CHECKING:
    from scenarios.system import AuditView


class ExactlyOnceSettlement(Checker):
    name = "exactly-once-settlement"
    kinds = (LedgerReserveSettlement.kind, LogAppend.kind, LedgerFinalizeSettlement.kind, LedgerPurgeConversation.kind,
             LedgerRequestAbort.kind)

    def __init__(self) -> None:
        super().__init__()
        self._reserved: dict[str, str] = {}   # submission -> reserved digest
        self._in_log: dict[str, str] = {}     # submission -> digest of its settlement record in the log
        self._final: dict[str, tuple] = {}    # submission -> (outcome, digest, settled_at_ms)
        self.settled = 0
        self._outcomes: dict[str, int] = {}

    def metrics(self) -> dict:
        return {"settled": self.settled, "outcomes": self.outcomes()}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        if ERROR in fields:
            return
        if kind == LedgerRequestAbort.kind:
            # An intent that settled a never-ready submission: settled
            # without the log (nothing of it is there, nor may be).
            if fields[LedgerRequestAbort.settled_at_ms] is not None and not fields[LedgerRequestAbort.replayed]:
                self.checks += 1
                submission = fields[LedgerRequestAbort.submission]
                if submission in self._final or submission in self._reserved:
                    self.fail(f"{submission}: its abort intent settled it although it was being settled already",
                              (submission,))
                self.settled += 1
                self._outcomes["aborted"] = self._outcomes.get("aborted", 0) + 1
        elif kind == LedgerReserveSettlement.kind:
            self.checks += 1
            submission = fields[LedgerReserveSettlement.submission]
            reserved = fields[LedgerReserveSettlement.digest]
            first = self._reserved.setdefault(submission, reserved)
            if first != reserved:
                self.fail(f"{submission}: reservation changed from {first[:12]} to {reserved[:12]}",
                          (submission,))
        elif kind == LedgerPurgeConversation.kind:
            # Retention archived and deleted the conversation: its submissions
            # can never settle again, so the oracle forgets them (memory stays
            # flat over a year of runs).
            conversation = fields[LedgerPurgeConversation.conversation]
            for seq in range(1, fields[LedgerPurgeConversation.purged] + 1):
                submission = submission_id_for(conversation, seq)
                self._reserved.pop(submission, None)
                self._in_log.pop(submission, None)
                self._final.pop(submission, None)
        elif kind == LogAppend.kind:
            if fields.get(LogAppend.replayed):
                return
            for envelope in fields[LogAppend.envelopes]:
                if envelope["family"] != "submission-settled":
                    continue
                self.checks += 1
                submission = envelope["payload"]["submissionId"]
                record_digest = record_digest_of(envelope)
                if submission in self._in_log:
                    self.fail(f"{submission}: a second settlement record was appended", (submission,))
                    continue
                self._in_log[submission] = record_digest
                reserved = self._reserved.get(submission)
                if reserved is not None and reserved != record_digest:
                    self.fail(f"{submission}: the log's settlement record is not the reserved one", (submission,))
        else:
            self.checks += 1
            submission = fields[LedgerFinalizeSettlement.submission]
            final = (fields[LedgerFinalizeSettlement.outcome], fields[LedgerFinalizeSettlement.digest],
                     fields[LedgerFinalizeSettlement.settled_at_ms])
            if submission not in self._in_log:
                self.fail(f"{submission}: finalized before its settlement record was in the log", (submission,))
            elif self._in_log[submission] != final[1]:
                self.fail(f"{submission}: ledger outcome digest differs from the canonical record", (submission,))
            previous = self._final.setdefault(submission, final)
            if previous == final and previous is final:
                self.settled += 1
                self._outcomes[final[0]] = self._outcomes.get(final[0], 0) + 1
            elif previous != final:
                self.fail(f"{submission}: settlement changed from {previous} to {final}", (submission,))

    def outcomes(self) -> dict[str, int]:
        return dict(sorted(self._outcomes.items()))

    def _check_ids(self, record) -> None:
        """The peer's id formats for a submission's own records (module docstring)."""
        envelope = record.envelope
        payload = envelope.payload
        if envelope.family not in ("input", "submission-settled", "abort-requested") or not isinstance(payload, dict):
            return
        sid = payload.get("submissionId")
        self.checks += 1
        if envelope.family == "input":
            want, batch_ok = f"input:{sid}", record.batch_id == f"submission-input:{sid}"
        elif envelope.family == "submission-settled":
            want, batch_ok = f"settlement:{sid}", record.batch_id.startswith("submission-settlement:")
        else:
            want, batch_ok = f"abort:{sid}", True
        if envelope.record_id != want or not batch_ok:
            self.fail(f"{sid}: its {envelope.family} record is {envelope.record_id!r} in batch {record.batch_id!r}, "
                      f"not the peer's {want!r}", (str(sid),))

    def audit(self, view: AuditView) -> None:
        for conversation_id in view.conversation_ids():
            per_submission: dict[str, list[str]] = {}
            receipts: dict[str, list[object]] = {}  # submission -> the (settlementId, receiptId) of its records
            for record in view.log_records(conversation_id):
                if record.seq == 1:
                    self.checks += 1
                    if (record.envelope.family, record.envelope.record_id, record.batch_id) != (
                            "conversation-created", f"conversation-created:{conversation_id}",
                            f"conversation-created:{conversation_id}"):
                        self.fail(f"{conversation_id}: its first record is {record.envelope.family} "
                                  f"{record.envelope.record_id!r}, not its conversation-created record",
                                  (conversation_id,))
                self._check_ids(record)
                if record.envelope.family == "submission-settled":
                    payload = record.envelope.payload
                    per_submission.setdefault(payload["submissionId"], []).append(
                        record_digest_of(record.envelope.to_json()))
                    receipts.setdefault(payload["submissionId"], []).append(
                        (payload.get("settlementId"), payload.get("receiptId")))
            for submission in view.submissions(conversation_id):
                self.checks += 1
                records = per_submission.get(submission.submission_id, [])
                if submission.outcome is None:
                    continue  # liveness reports unsettled work
                if settled_by_abort(submission) and not records:
                    continue  # settled by its intent before it was ever ready: nothing of it is in the log
                if len(records) != 1:
                    self.fail(f"{submission.submission_id}: {len(records)} settlement records in the log",
                              (submission.submission_id,))
                elif records[0] != submission.reserved_digest:
                    self.fail(f"{submission.submission_id}: the ledger's digest is not the log's record",
                              (submission.submission_id,))
                else:
                    sid = submission.submission_id
                    named = receipts[sid][0]
                    if named != (f"settlement:{sid}", submission.receipt):
                        self.fail(f"{sid}: its settlement record names settlement {named[0]!r} and receipt "
                                  f"{named[1]!r}, not settlement:{sid} and its admission's receipt "
                                  f"{submission.receipt!r}", (sid,))
        self.checks += 1
        try:
            mismatches = view.rebuild_mismatches()
        except Exception as error:  # the log could not rebuild a ledger at all
            self.fail(f"rebuilding the ledger from the log failed: {type(error).__name__}: {error}")
            return
        if mismatches:
            self.fail(f"a ledger rebuilt from the log disagrees on {len(mismatches)} submission(s): "
                      f"{', '.join(mismatches[:5])}", tuple(mismatches[:5]))

    # Conversation by conversation: what retention deletes is audited first.
    audit_retiring = audit

