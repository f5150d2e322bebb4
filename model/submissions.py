"""The submission lifecycle across the two stores (persistence §3).

Admission and settlement each span the Submission Ledger and the
Conversation Log, so neither is one transaction; each passes through
recoverable states instead:

- admission: admit ledger row -> materialize the conversation -> mark ready
  (``model.lifecycle``);
- processing: claim (lease + producer epoch) -> take over the log at that
  epoch -> append the input record -> mark input applied -> append step
  records;
- settlement: reserve the exact record -> append that record -> finalize
  (``model.lifecycle``).

Every step is idempotent and every gap between two durable steps is a named
crash point (``model.failpoints.SUBMISSION_CRASH_POINTS``). A worker's
recovery pass classifies every open submission (``model.recovery_decisions``:
a named decision and its disposition) and applies the repairs that need no
claim; the rest is doing it again: an at-least-once client re-admits with the same
idempotency key; a worker re-claims after the lease lapses, at a higher
epoch, and finds what the previous owner already made durable — batches are
looked up by their deterministic ids before being appended, and a settlement
record already in the log wins over anything computed again ("the canonical
record wins during repair").
"""
from __future__ import annotations

from typing import Any, Callable

import attrs

from model.canonical import digest
from model.clocks import check_observed
from model.conversation.records import (
    AcknowledgedWriteLost,
    AppendResult,
    BatchRecord,
    ConversationTail,
    FencedAppendRequest,
    PAGE_SIZE_MAX,
    NotMaterialized,
)
from model.failpoints import (
    ABORT_INTENT_STORED,
    CLAIMED_BEFORE_INPUT,
    INPUT_APPENDED_BEFORE_MARKER,
    NO_FAILPOINTS,
    STEP_DONE_BEFORE_RECORD,
    STEP_RECORDED,
    Failpoints,
)
from model.ledger.records import (AdmissionResult, Claim, ClaimHandoff, CorruptSubmission, Settlement,
                                  UnreadableSubmission, UnsupportedLedgerVersion)
# ADMISSION_PRODUCER and settle_batch_id are re-exported (their old home).
from model.lifecycle import (  # noqa: F401
    ADMISSION_PRODUCER,
    DEPLOYMENT_ID,
    DIAGNOSTIC_MESSAGE_MAX,
    SETTLED_FAMILY,
    SubmissionLifecycle,
    created_batch_id,
    created_entry,
    entry_record_id,
    input_batch_id,
    input_entry_of,
    input_record_id,
    logged_record,
    record_envelope,
    repair_entry,
    repair_record_id,
    settle_batch_id,
)
from model.probe import NULL_PROBE, Probe
from model.recovery_decisions import (
    ANNOTATED,
    APPEND_RESERVED_SETTLEMENT,
    COMPLETE_MATERIALIZATION,
    FINALIZE_LEDGER_FROM_HISTORY,
    REPAIRED,
    SETTLE_ABORTED,
    Context,
    LogFacts,
    classify,
    facts_from_records,
    row_facts,
)
from model.retry import error_name, is_retryable

# What a submission's work is: ``steps`` deterministic outputs, computed from
# its input. A real runtime would call a model and tools here.
Work = Callable[[Any, int], Any]


def step_batch_id(submission_id: str, index: int) -> str:
    return f"step:{submission_id}:{index}"


class SubmissionClient:
    """Admits work: what a caller of the runtime does, at least once."""

    def __init__(self, ledger: Any, log: Any, *, now_ms: Callable[[], int],
                 failpoints: Failpoints = NO_FAILPOINTS, probe: Probe = NULL_PROBE) -> None:
        self.ledger = ledger
        self.log = log
        self.now_ms = now_ms
        self.failpoints = failpoints
        self.probe = probe
        self.lifecycle = SubmissionLifecycle(ledger, log, now_ms=now_ms, failpoints=failpoints)

    async def submit(self, conversation_id: str, principal_id: str, idempotency_key: str,
                     request: Any, *, admission_group: str | None = None, metadata: Any = None) -> AdmissionResult:
        # At least once: a replayed admission goes through ready again, which
        # completes one that stopped before it. A fresh one its group refuses
        # is ``AdmissionPolicyError`` (nothing written): the caller's answer.
        admission = await self.lifecycle.admit(conversation_id, principal_id, idempotency_key, request,
                                               self.now_ms(), complete_replay=True, admission_group=admission_group,
                                               metadata=metadata)
        self.probe.emit("submission.receipt", submission=admission.submission_id, replayed=admission.replayed)
        return admission

    async def abort(self, submission_id: str, author: str, reason: str) -> Any:
        """Abort a submission: store the durable intent (a running one's
        owner honours it at its next step), then settle a queued one through
        the log (``SubmissionLifecycle.settle_queued_abort``, as producer
        ``author``). The intent, as the ledger answered it."""
        intent = await self.ledger.request_abort(submission_id, author, reason, self.now_ms())
        self.failpoints.hit(ABORT_INTENT_STORED)
        await self.lifecycle.settle_queued_abort(submission_id, author)
        return intent


@attrs.frozen
class ProcessOutcome:
    submission_id: str
    settlement: Settlement
    epoch: int


class WorkFailure(Exception):
    """A step's work failed (its error, as ``cause``): the submission settles
    ``failed`` with the cause's ``{errorTag, message}``, no retry."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(str(cause))


class LeaseExpired(Exception):
    """This owner's lease on the submission is over by its own clock (the
    renew was answered late, through a partition or a slow store, or the
    process stalled after it): another owner may hold the lane by now. The
    store fences a stale owner's writes, but not what a step does outside
    the stores, so the owner does nothing more under this claim and looks
    again, as after ``OwnershipLost``."""

    name = "LeaseExpired"

    def __init__(self, submission_id: str, epoch: int, lease_expires_ms: int, now_ms: int) -> None:
        super().__init__(f"{submission_id}: the lease of epoch {epoch} expired at {lease_expires_ms} ms, "
                         f"it is {now_ms} ms")
        self.submission_id = submission_id
        self.epoch = epoch
        self.lease_expires_ms = lease_expires_ms
        self.now_ms = now_ms

    def __reduce__(self):
        return (type(self), (self.submission_id, self.epoch, self.lease_expires_ms, self.now_ms))


# A step that waits for the world: nothing to record; the owner lets go.
PARKED = object()


class SubmissionWorker:
    """Claims the head of a conversation's queue and carries it to settlement."""

    def __init__(self, ledger: Any, log: Any, owner_id: str, *, lease_ms: int, now_ms: Callable[[], int],
                 work: Work, steps: int = 2, failpoints: Failpoints = NO_FAILPOINTS,
                 probe: Probe = NULL_PROBE, step_delay: Callable[[str, int], Any] | None = None,
                 checkpoints: Any = None, recovery_page_size: int = PAGE_SIZE_MAX,
                 definition_digest: str = "", serves: Callable[[str], bool] | None = None) -> None:
        """``serves(conversation_id)``: the conversations this worker's
        application owns, the only ones it recovers and claims in a ledger
        other applications share (None: every one).
        ``checkpoints``: a checkpoint store (§8) the recovery pass may use;
        None reads every history whole. ``recovery_page_size``: the recovery
        read's page (at most the spec's PAGE_SIZE_MAX). ``definition_digest``:
        the configuration this process runs (its checkpoints are bound to it;
        empty: the recovery's own). Its checkpoints are bound to
        ``model_digest`` and ``tool_digest`` too: a worker with no model and
        no tools has the digests of an empty configuration (an agent worker
        sets its own)."""
        assert lease_ms > 0 and steps >= 0 and 1 <= recovery_page_size <= PAGE_SIZE_MAX
        self.checkpoints = checkpoints
        self.serves = serves
        self.definition_digest = definition_digest or RECOVERY_DEFINITION
        self.model_digest = NO_CONFIGURATION
        self.tool_digest = NO_CONFIGURATION
        self.recovery_page_size = recovery_page_size
        # conversation -> the last tail the log acknowledged to this process
        # (the most recent ACKNOWLEDGED_TAILS_MAX conversations).
        self._acknowledged: dict[str, int] = {}
        self.ledger = ledger
        self.log = log
        self.owner_id = owner_id
        self.lease_ms = lease_ms
        self.now_ms = now_ms
        self.work = work
        self.steps = steps
        self.failpoints = failpoints
        self.probe = probe
        # ``step_delay(submission_id, index)`` -> an awaitable: the time an
        # effect takes (a model call). The lease is renewed before it.
        self.step_delay = step_delay
        self.lifecycle = SubmissionLifecycle(ledger, log, now_ms=now_ms, owner_id=owner_id, failpoints=failpoints)
        # ``_seal(conversation_id, batch_id, records)`` -> the records as they
        # are appended (an agent with secrets seals their sensitive fields);
        # None: appended as they are.
        self._seal: Callable[[str, str, list], Any] | None = None

    async def process_next(self, conversation_id: str) -> ProcessOutcome | None:
        """Claim and settle the conversation's head, if one is claimable now."""
        claim = await self.ledger.claim(conversation_id, self.owner_id, self.lease_ms, self.now_ms())
        if claim is None:
            return None
        self.probe.emit("submission.claimed", submission=claim.submission_id, owner=self.owner_id,
                        epoch=claim.epoch)
        return await self.process(conversation_id, claim)

    async def process(self, conversation_id: str, claim: Claim) -> ProcessOutcome | None:
        submission_id = claim.submission_id
        # Take the log over at the claim's epoch before anything else touches
        # it: from here on a stale owner's appends are fenced by the log
        # itself, and every read below sees what that owner made durable.
        await self.lifecycle.take_over(conversation_id, claim)
        record = await self.ledger.get(submission_id)
        assert record is not None, submission_id
        # Admitted on its client's clock: further ahead of this one than the
        # claimed offset, a clock is off past it (``model.clocks``).
        check_observed(f"{submission_id}'s admission", record.admitted_at_ms, self.now_ms())
        self.failpoints.hit(CLAIMED_BEFORE_INPUT)
        # A durable abort intent is the authority: no input enters the log for
        # a submission aborted before it ran, and no step runs after it.
        aborted = record.abort_author is not None
        if not record.input_applied and not aborted:
            batch_id = input_batch_id(submission_id)
            at = await self._append_once(conversation_id, claim, batch_id,
                                         [input_entry_of(record)])
            self.failpoints.hit(INPUT_APPENDED_BEFORE_MARKER)
            # The input record is the batch's first (``input:{sid}``), here or
            # where an earlier owner's append put it.
            await self.ledger.mark_input_applied(claim, input_record_id(submission_id), at.first_seq)
            if self.defers(record):
                # Asked to wait (its run parks on something slow, or this
                # worker is drained): only the claim that applied the input
                # defers, so the head's next claim resumes it from the log.
                return await self._defer(conversation_id, claim)
        elif not record.input_applied:
            # Aborted after an earlier owner applied its input and died before
            # the marker: no input enters now, but the one in the log is
            # marked (``RepairInputMarker``: the canonical record wins).
            found = await self.log.lookup_batch(conversation_id, input_batch_id(submission_id))
            if found is not None:
                await self.ledger.mark_input_applied(claim, input_record_id(submission_id), found.first_seq)
        outputs: list = []
        failure: dict | None = None
        for index in range(self.step_count(record)):
            if aborted or await self._abort_requested(submission_id):
                aborted = True  # observed at this step: settle aborted, run nothing more
                break
            batch_id = step_batch_id(submission_id, index)
            recorded = await self._recorded_payload(conversation_id, batch_id)
            if recorded is not None:
                # An earlier owner recorded this step: fold its output, never
                # re-run the effect (its second answer could differ).
                outputs.append(recorded["output"])
                continue
            try:
                output = await self.run_step(conversation_id, claim, record, index)
            except WorkFailure as failed:  # the work failed: settle as failed, no retry
                cause = failed.cause
                failure = {"errorTag": error_name(cause), "message": str(cause)[:DIAGNOSTIC_MESSAGE_MAX]}
                break
            if output is PARKED:
                # The step waits for the world (an approval, a subagent, a
                # reconciler): ownership ended with the ledger write that said
                # so; whoever claims the head next takes it from the log.
                return None
            self.failpoints.hit(STEP_DONE_BEFORE_RECORD)
            await self._append_once(conversation_id, claim, batch_id,
                                    [("model-output", {"submissionId": submission_id, "step": index,
                                                       "output": output})])
            self.failpoints.hit(STEP_RECORDED)
            outputs.append(output)
        # The canonical record wins: the log's, else the reserved one, else new.
        batch = await self.lifecycle.logged_settlement(conversation_id, submission_id)
        logged = None if batch is None else await self._settled_record(conversation_id, batch, submission_id)
        # Reserved by an earlier owner, not in the log: this claim applies
        # the recovery decision ``AppendReservedSettlement`` and says so in
        # the log, before the record (``repair:{sid}:AppendReservedSettlement``).
        repair = APPEND_RESERVED_SETTLEMENT if record.reserved_record is not None and logged is None else None

        async def append(batch_id: str, entry: tuple[str, Any]) -> Any:
            if repair in ANNOTATED:
                annotation = repair_record_id(submission_id, repair)
                await self._append_once(conversation_id, claim, annotation,
                                        [repair_entry(submission_id, repair, REPAIRED)])
            # Append-once: it looks the batch up itself, so it runs even when
            # the record is logged (and then appends nothing).
            entries = await self.settlement_entries(conversation_id, claim, record, entry)
            return await self._append_once(conversation_id, claim, batch_id, entries)

        try:
            terminal = await self.lifecycle.terminalize(
                claim, logged=logged, reserved=record.reserved_record,
                fresh=lambda: self._fresh_record(aborted, outputs, failure), append=append, append_if_logged=True,
                run_id=self.settlement_run_id(submission_id), receipt=record.receipt)
        except Exception as error:
            if error_name(error) != ABORT_REQUESTED:
                raise
            # The intent landed after this owner's last look (nothing was
            # reserved): it wins, settle aborted.
            terminal = await self.lifecycle.terminalize(
                claim, logged=None, reserved=None, fresh=lambda: self._fresh_record(True, [], None), append=append,
                append_if_logged=True, run_id=self.settlement_run_id(submission_id), receipt=record.receipt)
        settlement = terminal.settlement
        self.probe.emit("submission.settled", submission=submission_id, outcome=settlement.outcome,
                        digest=settlement.record_digest, epoch=claim.epoch)
        return ProcessOutcome(submission_id, settlement, claim.epoch)

    def step_count(self, record: Any) -> int:
        """How many steps ``record``'s work has."""
        return self.steps

    def defers(self, record: Any) -> bool:
        """Does ``record``'s request ask its worker to defer it once its
        input is applied (``"defer": true``)? The caller decides; the worker
        draws nothing."""
        return isinstance(record.input, dict) and record.input.get("defer") is True

    async def _defer(self, conversation_id: str, claim: Claim) -> ProcessOutcome | None:
        """Release the head ``claim`` holds, its input applied and unsettled,
        and hand the lane to the next ready submission (a cooperative
        handoff naming every unsettled row ahead of it, each deferred and
        released, the last by this claim), then carry that one. None when
        the ledger grants nothing (no ready one behind, or the lane moved
        on): the deferred head waits for an ordinary claim either way."""
        await self.ledger.release_ownership(claim)
        self.probe.emit("submission.deferred", submission=claim.submission_id, owner=self.owner_id,
                        epoch=claim.epoch)
        snapshot = await self.ledger.load_recovery_snapshot(conversation_id)
        deferred: list[str] = []
        for row in snapshot.submissions:
            if row.input_applied and row.owner_id is None:
                deferred.append(row.submission_id)
                continue
            if not (row.ready and row.epoch is None and not row.abort_requested) or not deferred \
                    or deferred[-1] != claim.submission_id:
                return None
            handoff = ClaimHandoff(claim.epoch, tuple(deferred), row.submission_id)
            granted = await self.ledger.claim(conversation_id, self.owner_id, self.lease_ms, self.now_ms(),
                                              handoff=handoff)
            if granted is None:
                return None
            self.probe.emit("submission.claimed", submission=granted.submission_id, owner=self.owner_id,
                            epoch=granted.epoch, handoff=len(deferred))
            return await self.process(conversation_id, granted)
        return None

    async def run_step(self, conversation_id: str, claim: Claim, record: Any, index: int) -> Any:
        """Do step ``index``'s effect and return its output (recorded by the
        caller), or ``PARKED``. A ``WorkFailure`` settles the submission
        ``failed``."""
        if self.step_delay is not None:
            # Renew, then spend the effect's time. A pause longer than the
            # lease lands here: the owner wakes and writes with its old
            # epoch, and the log and ledger must fence it.
            asked_ms = self.now_ms()
            renewal = await self.ledger.renew_ownership(claim, self.lease_ms, asked_ms)
            await self.step_delay(record.submission_id, index)
            # The effect is done on the strength of the lease, so the lease
            # must still hold now, by this process's clock: a renew answered
            # after its own lease ran out, or a stall after it, means another
            # owner may run this step too.
            self.require_lease(claim, renewal.lease_expires_ms, asked_ms)
        try:
            return self.work(record.input, index)
        except Exception as error:
            raise WorkFailure(error) from error

    def require_lease(self, claim: Claim, lease_expires_ms: int, asked_ms: int | None = None) -> None:
        """Raise ``LeaseExpired`` unless the lease (as the ledger last
        granted it to ``claim``, asked for at ``asked_ms`` by this process's
        clock) is still live by this process's clock.

        A ledger on its own server grants the lease from its own clock's
        reading, which this process's clock may trail by up to the claimed
        offset (``model.clocks``): the granted expiry would then read later
        here than the lease really ends. So the lease is also measured here,
        from the instant it was asked for (the ledger granted it no earlier):
        this process acts until the earlier of the two. On a ledger that
        decides on its caller's clock both are the same instant."""
        if asked_ms is not None:
            lease_expires_ms = min(lease_expires_ms, asked_ms + self.lease_ms)
        now_ms = self.now_ms()
        if now_ms >= lease_expires_ms:
            raise LeaseExpired(claim.submission_id, claim.epoch, lease_expires_ms, now_ms)

    def settlement_run_id(self, submission_id: str) -> str | None:
        """The run a fresh settlement record names (``runId``): none here."""
        return None

    async def settlement_entries(self, conversation_id: str, claim: Claim, record: Any,
                                 entry: dict) -> list:
        """The records of the settlement batch whose own record is ``entry``
        (a host's batch also settles its joined followers)."""
        return [entry]

    async def tend(self, scan: tuple) -> None:
        """Upkeep a process does on each scan of open work (none here)."""
        return None

    async def settle_queued_aborts(self, scan: tuple) -> None:
        """Finish each queued abort of the scan its aborter did not (it died
        after the intent, or its lane had no epoch to append under yet: no
        claim ever took the log over): settled through the log as the
        aborter would (``SettleAborted``: the ledger's QueuedAbort authority
        needs no claim), so it never waits for its turn in the lane."""
        for record in scan:
            if isinstance(record, UnreadableSubmission):
                continue
            if record.abort_author is not None and record.epoch is None and record.ready:
                try:
                    await self.lifecycle.settle_queued_abort(record.submission_id, self.owner_id)
                except (CorruptSubmission, UnsupportedLedgerVersion) as error:
                    # Its control fields scanned, its input does not read:
                    # its lane waits for an operator; the others go on.
                    self.probe.emit("submission.unreadable", owner=self.owner_id,
                                    conversation=record.conversation_id, error=error_name(error))

    async def _abort_requested(self, submission_id: str) -> bool:
        """Is a durable abort intent there now? Read before every step: a
        running submission honours an abort at its next step."""
        current = await self.ledger.get(submission_id)
        assert current is not None, submission_id
        return current.abort_author is not None

    @staticmethod
    def _fresh_record(aborted: bool, outputs: list, failure: dict | None) -> dict:
        """The settlement record of work settled for the first time."""
        if aborted:
            return {"outcome": "aborted"}  # no result (persistence §10)
        if failure is not None:
            return {"outcome": "failed", "diagnostic": failure}  # exactly {errorTag, message}
        return {"outcome": "completed", "result": {"outputs": outputs}}

    async def _recorded_payload(self, conversation_id: str, batch_id: str) -> Any:
        """The payload of a one-record batch already in the log, or None."""
        batch = await self.log.lookup_batch(conversation_id, batch_id)
        if batch is None:
            return None
        return await self._batch_payload(conversation_id, batch)

    async def _settled_record(self, conversation_id: str, batch: BatchRecord, submission_id: str) -> Any:
        """The settlement record envelope of ``submission_id`` (``logged_record``) in its settlement batch
        (a run's batch may say the run completed before it). One record per
        read, as every single-record read here (it is near the batch's start)."""
        for seq in range(batch.first_seq, batch.last_seq + 1):
            (record,) = await self.log.read(conversation_id, seq - 1, 1)
            payload = record.envelope.payload
            if record.envelope.family == SETTLED_FAMILY and payload.get("submissionId") == submission_id:
                return logged_record(record.envelope)
        raise AssertionError(f"{submission_id}: its settlement batch holds no settlement record of it")

    async def _batch_payload(self, conversation_id: str, batch: BatchRecord) -> Any:
        """The payload of a one-record batch's record."""
        (record,) = await self.log.read(conversation_id, batch.first_seq - 1, 1)
        return record.envelope.payload

    async def _append_once(self, conversation_id: str, claim: Claim, batch_id: str,
                           records: list[tuple[str, Any]]) -> AppendResult | BatchRecord:
        """Append a batch unless the log already holds it (an earlier
        owner's): where it is, either way (``first_seq``/``last_seq``).

        The log only grows: a tail behind one it acknowledged to this process
        means acknowledged records are gone (``AcknowledgedWriteLost``)."""
        found = await self.log.lookup_batch(conversation_id, batch_id)
        if found is not None:
            return found
        tail = await self.log.inspect_tail(conversation_id)
        acknowledged = self._acknowledged.get(conversation_id, 0)
        if tail.tail_seq < acknowledged:
            raise AcknowledgedWriteLost(conversation_id, acknowledged, tail.tail_seq)
        if tail.tail_seq == 0 and batch_id != created_batch_id(conversation_id):
            # The conversation-created record is every conversation's first.
            created = await self._append_at(conversation_id, claim, created_batch_id(conversation_id),
                                            [created_entry(conversation_id)], tail)
            tail = ConversationTail(created.last_seq, created.tail_digest, claim.epoch)
        if self._seal is not None:
            records = await self._seal(conversation_id, batch_id, records)
        return await self._append_at(conversation_id, claim, batch_id, records, tail)

    async def _append_at(self, conversation_id: str, claim: Claim, batch_id: str,
                         records: list[tuple[str, Any]], tail: Any) -> AppendResult:
        envelopes = tuple(record_envelope(batch_id, i, entry, self.now_ms(), self.owner_id, claim.epoch)
                          for i, entry in enumerate(records))
        result = await self.log.append(FencedAppendRequest(
            conversation_id=conversation_id, batch_id=batch_id, producer_id=self.owner_id, epoch=claim.epoch,
            expected_tail_seq=tail.tail_seq, expected_tail_digest=tail.tail_digest, records=envelopes))
        self._acknowledged.pop(conversation_id, None)  # most recent last
        self._acknowledged[conversation_id] = result.last_seq
        if len(self._acknowledged) > ACKNOWLEDGED_TAILS_MAX:
            del self._acknowledged[next(iter(self._acknowledged))]
        return result


# -- a worker process --------------------------------------------------------

# Errors that mean "this owner lost the submission" (another owner holds it
# now): drop the work and look again. Matched by name, like every typed error
# crossing a port.
# An AppendConflict of a stale owner (its batch id already holds another
# owner's batch) is the same news: someone else did this step.
LOST_OWNERSHIP_ERRORS = ("OwnershipLost", "FenceRejected", "AppendConflict", "LeaseExpired")
# A reservation refused because an abort intent exists (the owner settles aborted).
ABORT_REQUESTED = "AbortRequested"
# A stored row the ledger cannot read (§10, §11): that conversation's lane is
# blocked until an operator repairs it, and stays visible (it is open work);
# every other conversation goes on.
UNREADABLE_ERRORS = ("CorruptSubmission", "UnsupportedLedgerVersion")
# Errors a retry can clear are ``model.retry.is_retryable(error, reread=True)``:
# this process reads every history again from the stores, so besides a busy
# SQLite writer or a transient store error, a damaged read answer that the
# fail-closed recovery read refused is worth another attempt.


ACKNOWLEDGED_TAILS_MAX = 256
# The administrative producer a recovery pass appends a queued abort's
# records as (it holds no claim, so it takes no epoch).
RECOVERY_PRODUCER = "recovery"
# What a recovery checkpoint is derived by (checkpoints are bound to both).
RECOVERY_ENGINE = "submission-recovery/1"
RECOVERY_DEFINITION = "records-and-settlements/1"
NO_CONFIGURATION = digest({})  # the model configuration and the tool set of a worker with neither
_SEQ_MAX = 2 ** 53 - 1  # the largest seq a port accepts (INT_ARG_MAX)


def recovery_snapshot(records, previous: Any = None) -> dict:
    """The fold a recovery checkpoint holds: how many records and settlements
    the log has up to its position (``previous``: the fold before ``records``)."""
    count = 0 if previous is None else previous["records"]
    settled = 0 if previous is None else previous["settled"]
    for record in records:
        count += 1
        if record.envelope.family == SETTLED_FAMILY:
            settled += 1
    return {"records": count, "settled": settled}


async def recovery_pass(log: Any, ledger: Any, probe: Probe = NULL_PROBE, *, checkpoints: Any = None,
                        now_ms: Callable[[], int] | None = None, page_size: int = PAGE_SIZE_MAX,
                        verified: set[str] | None = None, definition_digest: str = RECOVERY_DEFINITION,
                        model_digest: str = NO_CONFIGURATION, tool_digest: str = NO_CONFIGURATION,
                        serves: Callable[[str], bool] | None = None) -> int:
    """Verify the prefix of every conversation with nonterminal work (that
    ``serves``, when given: the worker's application's own), and
    classify each of its open submissions against it (``_classify``).

    ``verified``: the conversations an earlier attempt of this process
    verified, skipped (membership only); each one verified now is added. A
    retry after a transient error goes on from where it failed: an
    all-or-nothing pass needs a fault-free run of calls as long as the whole
    backlog, which under a steady fault rate a growing backlog never gets
    (ledger-storm seed 6 at 1d: one worker retried its pass for 19 hours
    while 1,166 submissions waited).

    One conversation's prefix in memory at a time (persistence §7, STORE-015).
    Returns how many conversations were verified; raises ``HistoryCorrupted``
    on a short page, a gap or a broken chain — never returns a partial history.

    With ``checkpoints`` (§8): a usable checkpoint (its position and digest
    still the log's) lets the pass read and verify only the records after
    it; every verified tail is checkpointed for the next pass. A checkpoint
    is disposable: an unusable one (another engine, another configuration
    ``definition_digest``, another model configuration ``model_digest`` or
    tool set ``tool_digest``, a digest the log no longer has) means a full
    read, never a trusted one; the probe says why (``rejected``).
    """
    from model.conversation.checkpoints import Checkpoint, CheckpointRejected, usable_checkpoint
    from model.conversation.recovery import read_recovery_prefix, read_recovery_suffix

    conversations = []
    scan = _served(await ledger.scan_nonterminal(), serves)
    for record in scan:
        if record.conversation_id not in conversations:
            conversations.append(record.conversation_id)
    open_ids = frozenset(sid for sid in (getattr(record, "submission_id", None) for record in scan) if sid)
    # The open child rows (parent, call): a child admitted, its parent's link not yet made.
    parents = [getattr(record, "parent", None) for record in scan if not isinstance(record, UnreadableSubmission)]
    admitted_children = frozenset((link.submission_id, link.tool_call_id) for link in parents if link is not None)
    unreadable: dict[str, Exception] = {}  # rows the pass read by id and could not: held (``_classify``)
    for conversation_id in conversations:
        if verified is not None and conversation_id in verified:
            continue
        checkpoint = None
        rejected = None
        try:
            if checkpoints is not None and not await _has_steps(ledger, scan, conversation_id, unreadable):
                decision = await usable_checkpoint(checkpoints, log, conversation_id, _SEQ_MAX,
                                                   engine_version=RECOVERY_ENGINE,
                                                   definition_digest=definition_digest,
                                                   model_digest=model_digest, tool_digest=tool_digest)
                checkpoint = decision.checkpoint
                rejected = decision.reason if decision.reason != "none" else None
            pages = {} if page_size == PAGE_SIZE_MAX else {"page_size": page_size}
            if checkpoint is None:
                prefix = await read_recovery_prefix(log, conversation_id, **pages)
            else:
                prefix = await read_recovery_suffix(log, conversation_id, after_seq=checkpoint.covered_seq,
                                                    after_digest=checkpoint.tail_digest, **pages)
        except NotMaterialized:
            # Admitted, not materialized yet: nothing to verify; its rows are
            # classified with an empty history.
            await _classify(log, ledger, probe, now_ms, conversation_id, scan, open_ids, {}, 0, admitted_children,
                            unreadable)
            continue
        extra: dict[str, int] = {}
        if checkpoints is not None:
            extra["from_checkpoint"] = 0 if checkpoint is None else checkpoint.covered_seq
            if rejected is not None:
                extra["rejected"] = rejected
            if definition_digest != RECOVERY_DEFINITION:
                extra["definition"] = definition_digest
            if model_digest != NO_CONFIGURATION:
                extra["model"] = model_digest
            if tool_digest != NO_CONFIGURATION:
                extra["tools"] = tool_digest
        if page_size != PAGE_SIZE_MAX:
            extra["page_size"] = page_size
        probe.emit("recovery.read", conversation=conversation_id, tail_seq=prefix.tail.tail_seq,
                   records=len(prefix.records), requests=prefix.request_count, **extra)
        if checkpoints is not None and prefix.records:
            tail = prefix.tail
            snapshot = recovery_snapshot(prefix.records, None if checkpoint is None else checkpoint.snapshot)
            try:
                await checkpoints.save(Checkpoint(
                    conversation_id, prefix.records[-1].envelope.payload.get("submissionId", "-"), tail.tail_seq,
                    tail.tail_digest, RECOVERY_ENGINE, definition_digest, model_digest, tool_digest, 1, snapshot,
                    now_ms() if now_ms is not None else 0))
            except CheckpointRejected:
                pass  # disposable: the next pass reads more, that is all
            except NotMaterialized:
                # Deleted since the read (retention retires a conversation
                # once its work has settled, its ledger rows with it): there
                # is nothing left to checkpoint or classify.
                continue
        if checkpoint is None:
            facts = facts_from_records(prefix.records)
        else:
            facts = await _facts_after_checkpoint(log, conversation_id, scan, prefix)
        tail_seq = prefix.tail.tail_seq
        del prefix
        await _classify(log, ledger, probe, now_ms, conversation_id, scan, open_ids, facts, tail_seq,
                        admitted_children, unreadable)
        if verified is not None:
            verified.add(conversation_id)
    return len(conversations)


async def _has_steps(ledger: Any, scan: Any, conversation_id: str, unreadable: dict[str, Exception]) -> bool:
    """Has the conversation an open row whose steps the table reads (an
    agent's plan, its input applied)? Its steps' records (turns, tool calls,
    approvals, subagents) may lie before any checkpoint: the pass reads that
    history whole (a checkpoint's fold holds counts, not step facts). A scan
    row carries control fields only: the plan is read by id; a row whose
    by-id read fails goes into ``unreadable`` (the pass holds it)."""
    for record in scan:
        if (isinstance(record, UnreadableSubmission) or record.conversation_id != conversation_id
                or not getattr(record, "input_applied", False)):
            continue
        try:
            row = await ledger.get(record.submission_id)
        except (CorruptSubmission, UnsupportedLedgerVersion) as error:
            unreadable[record.submission_id] = error
            return True  # its input does not read: no checkpoint is trusted for it, the history is read whole
        if row is not None and isinstance(row.input, dict) and row.input.get("plan"):
            return True
    return False


async def _facts_after_checkpoint(log: Any, conversation_id: str, scan: Any, prefix: Any) -> dict:
    """The facts of the conversation's open rows when the pass read only the
    records after a checkpoint: the suffix's, and for what lies before it
    the deterministic batches looked up (within the verified tail). (A
    conversation with a row whose steps the table reads is read whole.)"""
    facts = facts_from_records(prefix.records)
    tail_seq = prefix.tail.tail_seq
    for record in scan:
        sid = getattr(record, "submission_id", None)
        if record.conversation_id != conversation_id or sid is None:
            continue
        known = facts.get(sid, LogFacts())
        found = {}
        for key, batch_id in (("input", input_batch_id(sid)), ("settlement", settle_batch_id(sid))):
            if not getattr(known, key):
                batch = await log.lookup_batch(conversation_id, batch_id)
                if batch is not None and batch.first_seq <= tail_seq:
                    found[key] = True
        if found:
            facts[sid] = attrs.evolve(known, **found)
    return facts


async def _classify(log: Any, ledger: Any, probe: Probe, now_ms: Callable[[], int] | None, conversation_id: str,
                    scan: Any, open_ids: frozenset, facts: dict, tail_seq: int,
                    admitted_children: frozenset = frozenset(), unreadable: dict | None = None) -> None:
    """Classify each open row of the conversation (``model.recovery_decisions``)
    against the verified prefix's ``facts``, trace the decision
    (``recovery.decision``) and apply the repairs that need no claim:
    ``CompleteMaterialization`` (admission's second half) and
    ``FinalizeLedgerFromHistory`` (the log holds the settlement: the ledger
    finalizes it) and a queued submission's ``SettleAborted`` (its aborter
    died after the intent: settled through the log as the aborter would,
    producer ``RECOVERY_PRODUCER``). Without ``now_ms`` the pass classifies
    only. Each is applied to the row read again just before: the scan's may
    be older. ``recovery.classified`` says the conversation's rows are
    classified and the pass's own repairs applied (``repairs``: whether it
    applies any)."""
    rows = [record for record in scan
            if record.conversation_id == conversation_id and getattr(record, "submission_id", None)]
    lifecycle = None if now_ms is None else SubmissionLifecycle(ledger, log, now_ms=now_ms)
    for index, row in enumerate(rows):
        sid = row.submission_id
        context = Context(head=index == 0, open_ids=open_ids, admitted_children=admitted_children)
        row_log = facts.get(sid, LogFacts())
        if unreadable and sid in unreadable:  # the pass read it by id already, and could not
            row = UnreadableSubmission(sid, row.conversation_id, row.principal_id, row.queue_seq, unreadable[sid])
        decision = classify(row, row_log, context)
        current = None
        if lifecycle is not None and _pass_applies(decision.name, row):
            # The pass acts on this row itself: it reads it whole first. A
            # row whose control fields scanned but whose input (or metadata)
            # does not read back is held for an operator, left as it is.
            try:
                current = await ledger.get(sid)
            except (CorruptSubmission, UnsupportedLedgerVersion) as error:
                row = UnreadableSubmission(sid, row.conversation_id, row.principal_id, row.queue_seq, error)
                decision = classify(row, row_log, context)
        probe.emit("recovery.decision", submission=sid, conversation=conversation_id, decision=decision.name,
                   disposition=decision.disposition, tail_seq=tail_seq, row=row_facts(row, context, row_log))
        if lifecycle is None:
            continue
        if decision.name == COMPLETE_MATERIALIZATION:
            if current is not None and not current.ready and current.settled_at_ms is None:
                await lifecycle.make_ready(conversation_id, sid)
        elif decision.name == FINALIZE_LEDGER_FROM_HISTORY:
            if current is not None and current.settled_at_ms is None:
                settlement = await lifecycle.adopt_logged(conversation_id, current)
                if settlement is not None:
                    probe.emit("submission.settled", submission=sid, outcome=settlement.outcome,
                               digest=settlement.record_digest, epoch=current.epoch)
        elif decision.name == SETTLE_ABORTED and row.epoch is None:
            # Never claimed: no claim holder will come before its turn.
            settlement = (None if current is None
                          else await lifecycle.settle_queued_abort(sid, RECOVERY_PRODUCER, record=current))
            if settlement is not None:
                probe.emit("submission.settled", submission=sid, outcome=settlement.outcome,
                           digest=settlement.record_digest, epoch=None)
    probe.emit("recovery.classified", conversation=conversation_id, rows=len(rows), repairs=lifecycle is not None)


def _pass_applies(name: str, row: Any) -> bool:
    """Does the pass apply this decision itself (no claim needed)? It
    reads the row by id first (``_classify``)."""
    return (name in (COMPLETE_MATERIALIZATION, FINALIZE_LEDGER_FROM_HISTORY)
            or (name == SETTLE_ABORTED and row.epoch is None))


def handed_over(scan: tuple, conversation_id: str, now_ms: int) -> bool:
    """Is the conversation's lane handed over (``scan``: a ledger scan)?
    Its head released unsettled, and a row behind it owned under a live
    lease: a cooperative handoff's successor runs. An ordinary claim would
    take the head again and fence the successor's log writes, so a polling
    worker leaves the lane to it until it settles (or its lease lapses)."""
    rows = [row for row in scan if row.conversation_id == conversation_id
            and not isinstance(row, UnreadableSubmission)]
    if not rows or rows[0].owner_id is not None or not rows[0].input_applied:
        return False
    return any(row.owner_id is not None and row.lease_expires_ms is not None and row.lease_expires_ms > now_ms
               for row in rows[1:])


def _served(scan: tuple, serves: Callable[[str], bool] | None) -> tuple:
    """The rows of ``scan`` in conversations ``serves`` owns (None: all)."""
    return scan if serves is None else tuple(row for row in scan if serves(row.conversation_id))


async def worker_loop(worker: SubmissionWorker, runtime: Any, *, poll_ms: int, retry_ms: int) -> None:
    """What a worker process runs: recover, then claim and settle forever."""
    assert poll_ms > 0 and retry_ms > 0
    probe = worker.probe
    # Not bounded by a count: it ends when one pass reads every history
    # whole. Each attempt waits ``retry_ms``; a run of damaged read answers
    # (a fault rate, until the faults heal) may take as many as it likes.
    verified: set[str] = set()  # conversations this process verified: a retry goes on after them
    while True:
        try:
            await recovery_pass(worker.log, worker.ledger, probe, checkpoints=worker.checkpoints,
                                now_ms=worker.now_ms, page_size=worker.recovery_page_size, verified=verified,
                                definition_digest=worker.definition_digest, model_digest=worker.model_digest,
                                tool_digest=worker.tool_digest, serves=worker.serves)
            break
        except Exception as error:
            if not is_retryable(error, reread=True):
                raise
            # A refusal of the recovery read names its reason, the record it
            # expected and, for a page's own check, the page.
            refusal = {} if getattr(error, "reason", None) is None else {
                "conversation": error.conversation_id, "reason": error.reason, "expected_seq": error.expected_seq,
                "page": error.page_after_seq}
            probe.emit("recovery.failed", owner=worker.owner_id, error=error_name(error), **refusal)
            await runtime.sleep_ms(retry_ms)
    # The worker process's forever loop: it never ends by itself; the process
    # ends when its node is killed (every poll waits ``poll_ms``).
    while True:
        # One strongly consistent scan tells where work is; claim only there.
        waiting: list[str] = []
        try:
            scan = _served(await worker.ledger.scan_nonterminal(), worker.serves)
        except Exception as error:
            if not is_retryable(error, reread=True):
                raise
            probe.emit("scan.retry", owner=worker.owner_id, error=error_name(error))
            scan = ()
        for record in scan:
            if record.conversation_id not in waiting:
                waiting.append(record.conversation_id)
        try:
            await worker.settle_queued_aborts(scan)
            await worker.tend(scan)
        except Exception as error:
            if not is_retryable(error, reread=True):
                raise
            probe.emit("tend.retry", owner=worker.owner_id, error=error_name(error))
        for conversation_id in waiting:
            if handed_over(scan, conversation_id, worker.now_ms()):
                continue
            try:
                await worker.process_next(conversation_id)
            except Exception as error:
                name = error_name(error)
                if name in LOST_OWNERSHIP_ERRORS:
                    probe.emit("submission.abandoned", owner=worker.owner_id, conversation=conversation_id,
                               error=name)
                elif name in UNREADABLE_ERRORS:
                    probe.emit("submission.unreadable", owner=worker.owner_id, conversation=conversation_id,
                               error=name)
                elif is_retryable(error, reread=True):
                    probe.emit("submission.retry", owner=worker.owner_id, conversation=conversation_id,
                               error=name)
                else:
                    raise
        await runtime.sleep_ms(poll_ms)
