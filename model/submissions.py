"""The submission lifecycle across the two stores (persistence §3).

Admission and settlement each span the Submission Ledger and the
Conversation Log, so neither is one transaction; each passes through
recoverable states instead:

- admission: admit ledger row -> materialize the conversation -> mark ready;
- processing: claim (lease + producer epoch) -> take over the log at that
  epoch -> append the input record -> mark input applied -> append step
  records;
- settlement: reserve the exact record -> append that record -> finalize.

Every step is idempotent and every gap between two durable steps is a named
crash point (``model.failpoints.SUBMISSION_CRASH_POINTS``). Recovery is
simply doing it again: an at-least-once client re-admits with the same
idempotency key; a worker re-claims after the lease lapses, at a higher
epoch, and finds what the previous owner already made durable — batches are
looked up by their deterministic ids before being appended, and a settlement
record already in the log wins over anything computed again ("the canonical
record wins during repair").
"""
from __future__ import annotations

from typing import Any, Callable

import attrs

from model.conversation.records import (
    AppendResult,
    FencedAppendRequest,
    NotMaterialized,
    RecordEnvelope,
)
from model.failpoints import (
    ADMITTED_BEFORE_READY,
    APPENDED_BEFORE_FINALIZE,
    CLAIMED_BEFORE_INPUT,
    FINALIZED_BEFORE_REPLY,
    INPUT_APPENDED_BEFORE_MARKER,
    NO_FAILPOINTS,
    READY_BEFORE_RECEIPT,
    RESERVED_BEFORE_APPEND,
    STEP_DONE_BEFORE_RECORD,
    Failpoints,
)
from model.ledger.records import AdmissionResult, Claim, Settlement
from model.probe import NULL_PROBE, Probe

ADMISSION_PRODUCER = "admission"
DEPLOYMENT_ID = "loomsim"

# What a submission's work is: ``steps`` deterministic outputs, computed from
# its input. A real runtime would call a model and tools here.
Work = Callable[[Any, int], Any]


def input_batch_id(submission_id: str) -> str:
    return f"input:{submission_id}"


def step_batch_id(submission_id: str, index: int) -> str:
    return f"step:{submission_id}:{index}"


def settle_batch_id(submission_id: str) -> str:
    return f"settle:{submission_id}"


class SubmissionClient:
    """Admits work: what a caller of the runtime does, at least once."""

    def __init__(self, ledger: Any, log: Any, *, now_ms: Callable[[], int],
                 failpoints: Failpoints = NO_FAILPOINTS, probe: Probe = NULL_PROBE) -> None:
        self.ledger = ledger
        self.log = log
        self.now_ms = now_ms
        self.failpoints = failpoints
        self.probe = probe

    async def submit(self, conversation_id: str, principal_id: str, idempotency_key: str,
                     request: Any) -> AdmissionResult:
        admission = await self.ledger.admit(conversation_id, principal_id, idempotency_key, request, self.now_ms())
        self.failpoints.hit(ADMITTED_BEFORE_READY)
        try:
            await self.log.inspect_tail(conversation_id)
        except NotMaterialized:
            # Epoch 0 by the admission producer: any claimed owner (epoch >= 1)
            # takes over from it; a second admission's materialize is a no-op.
            await self.log.materialize(conversation_id, ADMISSION_PRODUCER, 0)
        await self.ledger.mark_ready(admission.submission_id)
        self.failpoints.hit(READY_BEFORE_RECEIPT)
        self.probe.emit("submission.receipt", submission=admission.submission_id, replayed=admission.replayed)
        return admission


@attrs.frozen
class ProcessOutcome:
    submission_id: str
    settlement: Settlement
    epoch: int


class SubmissionWorker:
    """Claims the head of a conversation's queue and carries it to settlement."""

    def __init__(self, ledger: Any, log: Any, owner_id: str, *, lease_ms: int, now_ms: Callable[[], int],
                 work: Work, steps: int = 2, failpoints: Failpoints = NO_FAILPOINTS,
                 probe: Probe = NULL_PROBE) -> None:
        assert lease_ms > 0 and steps >= 0
        self.ledger = ledger
        self.log = log
        self.owner_id = owner_id
        self.lease_ms = lease_ms
        self.now_ms = now_ms
        self.work = work
        self.steps = steps
        self.failpoints = failpoints
        self.probe = probe

    async def process_next(self, conversation_id: str) -> ProcessOutcome | None:
        """Claim and settle the conversation's head, if one is claimable now."""
        claim = await self.ledger.claim(conversation_id, self.owner_id, self.lease_ms, self.now_ms())
        if claim is None:
            return None
        self.probe.emit("submission.claimed", submission=claim.submission_id, owner=self.owner_id,
                        epoch=claim.epoch)
        return await self.process(conversation_id, claim)

    async def process(self, conversation_id: str, claim: Claim) -> ProcessOutcome:
        submission_id = claim.submission_id
        record = await self.ledger.get(submission_id)
        assert record is not None, submission_id
        # Take the log over at the claim's epoch: from here on a stale owner's
        # appends are fenced by the log itself, not only by the ledger.
        await self.log.materialize(conversation_id, self.owner_id, claim.epoch)
        self.failpoints.hit(CLAIMED_BEFORE_INPUT)
        if not record.input_applied:
            await self._append_once(conversation_id, claim, input_batch_id(submission_id),
                                    [("input", {"submissionId": submission_id, "input": record.input})])
            self.failpoints.hit(INPUT_APPENDED_BEFORE_MARKER)
            await self.ledger.mark_input_applied(claim)
        outputs = []
        for index in range(self.steps):
            batch_id = step_batch_id(submission_id, index)
            recorded = await self._recorded_payload(conversation_id, batch_id)
            if recorded is not None:
                # An earlier owner recorded this step: fold its output, never
                # re-run the effect (its second answer could differ).
                outputs.append(recorded["output"])
                continue
            output = self.work(record.input, index)
            self.failpoints.hit(STEP_DONE_BEFORE_RECORD)
            await self._append_once(conversation_id, claim, batch_id,
                                    [("model-output", {"submissionId": submission_id, "step": index,
                                                       "output": output})])
            outputs.append(output)
        settlement_record = await self._settlement_record(conversation_id, submission_id, record, outputs)
        reserved = await self.ledger.reserve_settlement(claim, settlement_record)
        self.failpoints.hit(RESERVED_BEFORE_APPEND)
        await self._append_once(conversation_id, claim, settle_batch_id(submission_id),
                                [("submission-settled", {"submissionId": submission_id,
                                                         "recordDigest": reserved.record_digest,
                                                         "record": settlement_record})])
        self.failpoints.hit(APPENDED_BEFORE_FINALIZE)
        settlement = await self.ledger.finalize_settlement(submission_id, self.now_ms())
        self.failpoints.hit(FINALIZED_BEFORE_REPLY)
        self.probe.emit("submission.settled", submission=submission_id, outcome=settlement.outcome,
                        digest=settlement.record_digest, epoch=claim.epoch)
        return ProcessOutcome(submission_id, settlement, claim.epoch)

    async def _settlement_record(self, conversation_id: str, submission_id: str, record: Any,
                                 outputs: list) -> Any:
        """The canonical record wins: the log's, else the reserved one, else new."""
        settled = await self._recorded_payload(conversation_id, settle_batch_id(submission_id))
        if settled is not None:
            return settled["record"]
        if record.reserved_record is not None:
            return record.reserved_record
        if record.abort_author is not None:
            return {"outcome": "aborted"}
        return {"outcome": "completed", "result": {"outputs": outputs}}

    async def _recorded_payload(self, conversation_id: str, batch_id: str) -> Any:
        """The payload of a one-record batch already in the log, or None."""
        batch = await self.log.lookup_batch(conversation_id, batch_id)
        if batch is None:
            return None
        (record,) = await self.log.read(conversation_id, batch.first_seq - 1, 1)
        return record.envelope.payload

    async def _append_once(self, conversation_id: str, claim: Claim, batch_id: str,
                           records: list[tuple[str, Any]]) -> AppendResult | None:
        """Append a batch unless the log already holds it (an earlier owner's)."""
        if await self.log.lookup_batch(conversation_id, batch_id) is not None:
            return None
        tail = await self.log.inspect_tail(conversation_id)
        envelopes = tuple(
            RecordEnvelope(record_id=f"{batch_id}#{i}", family=family, schema_version=1,
                           created_at_ms=self.now_ms(), deployment_id=DEPLOYMENT_ID, payload=payload,
                           producer_id=self.owner_id, epoch=claim.epoch)
            for i, (family, payload) in enumerate(records))
        return await self.log.append(FencedAppendRequest(
            conversation_id=conversation_id, batch_id=batch_id, producer_id=self.owner_id, epoch=claim.epoch,
            expected_tail_seq=tail.tail_seq, expected_tail_digest=tail.tail_digest, records=envelopes))
