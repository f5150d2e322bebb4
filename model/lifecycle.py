"""The submission lifecycle's two cross-store transitions, written once.

Admission and settlement each span the Submission Ledger and the
Conversation Log (persistence §3), so neither is one transaction; each
passes through recoverable states instead, with a named crash point in every
gap between two durable steps (``model.failpoints``, ARCHITECTURE §5):

- **admission**: admit the ledger row -> ``ADMITTED_BEFORE_READY`` ->
  materialize the conversation (epoch 0, the admission producer) ->
  ``MATERIALIZED_BEFORE_READY`` -> mark the submission ready ->
  ``READY_BEFORE_RECEIPT`` (a subagent's child: ``SUBAGENT_ADMITTED`` and
  ``SUBAGENT_CHILD_READY`` in place of the first and the last);
- **terminalization**: reserve the exact settlement record in the ledger ->
  ``RESERVED_BEFORE_APPEND`` -> append that record to the log ->
  ``APPENDED_BEFORE_FINALIZE`` -> finalize the ledger ->
  ``FINALIZED_BEFORE_REPLY``.

The canonical record wins: the record the log already holds, else the one
the ledger already reserved, else a fresh one — so a successor of an owner
that died half-way settles with exactly the record its predecessor chose.
A recovering process that finds a settlement in the log only finalizes it
(``adopt_logged``).

Both users go through here: ``model.submissions`` (the client admits, the
worker settles) and ``model.runs`` (a sentinel run is a submission). Where
their protocols differ, a parameter names the difference:

- ``admit(complete_replay=...)``: the at-least-once client goes on through
  ready on a replayed admission (that is how a retry completes an admission
  that stopped before ready); the runs layer stops there (its own recovery
  completes a half-admitted run);
- ``log_is_new``: a run's log is born with its admission, so the runs layer
  materializes outright; a client's conversation holds many submissions and
  may be owned at a higher epoch already, so it looks the log up first;
- ``admit(before_ready=...)``: the runs layer advances its schedule cursor
  between admit and ready;
- ``terminalize(append_if_logged=...)``: the worker's append is append-once
  (it looks the batch up itself), so it is called even when the record is
  logged; the runs layer knows from its own read of the log and skips it;
- ``terminalize(finalized_at_ms=...)``: a run settles at the kernel's finish
  time; a worker's submission at the clock when it finalizes (None).

Probe events stay with the callers (``run.settled``, ``submission.settled``,
``submission.receipt``): the lifecycle only moves the stores. It never makes
a store call the two copies it replaces did not make, in the same order.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

import attrs

from model.conversation.records import (BatchRecord, ConversationTail, FencedAppendRequest, NotMaterialized,
                                       RecordEnvelope)
from model.retry import error_name
from model.failpoints import (
    ADMITTED_BEFORE_READY,
    APPENDED_BEFORE_FINALIZE,
    FINALIZED_BEFORE_REPLY,
    MATERIALIZED_BEFORE_READY,
    NO_FAILPOINTS,
    READY_BEFORE_RECEIPT,
    RESERVED_BEFORE_APPEND,
    SUBAGENT_ADMITTED,
    SUBAGENT_CHILD_READY,
    Failpoints,
)
from model.ledger.records import (
    ABORTED,
    DEPLOYMENT_ID,
    SETTLED_FAMILY,
    AdmissionResult,
    Claim,
    ReservedSettlement,
    Settlement,
    settlement_envelope,
    settlement_of,
)

# The producer that materializes a conversation at admission (epoch 0): any
# claimed owner (epoch >= 1) takes the log over from it.
ADMISSION_PRODUCER = "admission"
# A failed settlement's diagnostic is bounded (durability §12).
DIAGNOSTIC_MESSAGE_MAX = 1_000
INPUT_FAMILY = "input"  # the canonical input record: the ledger can be rebuilt from it

# ``append(batch_id, entry)``: the caller's fenced append of one settlement
# batch (``entry`` is the exact settlement record envelope the ledger
# reserved, a dict, appended as it is by ``record_envelope``; the caller may
# add records before it, as the runs layer adds its last steps).
Append = Callable[[str, dict], Awaitable[Any]]


ABORT_REQUESTED_FAMILY = "abort-requested"
CREATED_FAMILY = "conversation-created"  # a conversation's first record, always
RUN_COMPLETED_FAMILY = "run-completed"
REPAIR_FAMILY = "repair-annotation"  # a recovery decision applied (``repair:{sid}:{DecisionTag}``)

# Deterministic ids, the peer implementation's formats (so a history written
# by one implementation reads the same in the other): the input batch
# ``submission-input:{sid}`` holds the record ``input:{sid}``; the settlement
# batch ``submission-settlement:{sid}`` holds ``settlement:{sid}`` (also the
# ledger's settlement id); an abort beside a settlement is ``abort:{sid}``;
# a conversation's first record (and its batch) is
# ``conversation-created:{conversationId}``; a submission's run is ``run:{sid}``.


def created_batch_id(conversation_id: str) -> str:
    return f"conversation-created:{conversation_id}"


def created_entry(conversation_id: str) -> tuple[str, dict]:
    """The conversation-created record: the first record of every conversation."""
    return (CREATED_FAMILY, {"conversationId": conversation_id})


def run_id_for(submission_id: str) -> str:
    return f"run:{submission_id}"


def input_batch_id(submission_id: str) -> str:
    return f"submission-input:{submission_id}"


def batch_record_id(batch_id: str, index: int) -> str:
    """The id of a batch's ``index``-th record (``{batch_id}#{index}``), for
    records without an id of their own (``entry_record_id``)."""
    return f"{batch_id}#{index}"


def input_record_id(submission_id: str) -> str:
    """The input record's id (``mark_input_applied`` and ``mark_joined`` name it)."""
    return f"input:{submission_id}"


def settlement_record_id(submission_id: str) -> str:
    return f"settlement:{submission_id}"


def abort_record_id(submission_id: str) -> str:
    return f"abort:{submission_id}"


def entry_record_id(batch_id: str, index: int, family: str, payload: Any) -> str:
    """The record id of a batch's ``index``-th entry: a submission's input,
    settlement and abort records are named by their submission (the peer's
    formats), any other record by its place in its batch."""
    if family == CREATED_FAMILY and type(payload) is dict and type(payload.get("conversationId")) is str:
        return created_batch_id(payload["conversationId"])
    if type(payload) is dict and type(payload.get("submissionId")) is str:
        sid = payload["submissionId"]
        if family == REPAIR_FAMILY and type(payload.get("decision")) is str:
            return repair_record_id(sid, payload["decision"])
        if family == INPUT_FAMILY:
            return input_record_id(sid)
        if family == SETTLED_FAMILY:
            return settlement_record_id(sid)
        if family == ABORT_REQUESTED_FAMILY:
            return abort_record_id(sid)
    return batch_record_id(batch_id, index)


def repair_record_id(submission_id: str, decision: str) -> str:
    """A recovery decision's repair annotation ``repair:{sid}:{DecisionTag}``:
    its batch id and its record id (the peer's format)."""
    return f"repair:{submission_id}:{decision}"


def repair_entry(submission_id: str, decision: str, disposition: str) -> tuple[str, dict]:
    """The repair annotation a claim holder appends when it applies a
    recovery decision (persistence §5: "repair annotations")."""
    return (REPAIR_FAMILY, {"submissionId": submission_id, "decision": decision, "disposition": disposition})


def abort_entry(submission_id: str, author: str, reason: str) -> tuple[str, dict]:
    """The ``abort-requested`` record (``abort:{sid}``): the durable intent,
    canonical before the outcome it decided (it precedes the settlement
    record in the settlement batch)."""
    return (ABORT_REQUESTED_FAMILY, {"submissionId": submission_id, "author": author, "reason": reason})


def queued_abort_token(submission_id: str, producer_id: str) -> Claim:
    """What a queued abort's reservation names as its token: the ledger's
    ``QueuedAbort`` authority checks none (epoch 0 is never a claim's)."""
    return Claim(submission_id, producer_id, 0, 0)


# How often an administrative append reads the tail again after losing a
# race to another append (the epoch's owner goes on meanwhile); then it
# leaves the work to whoever finishes it (a recovery pass, the next claim).
ADMIN_APPEND_ATTEMPTS = 8
# What an administrative append may lose to: the tail moved (another
# append), or the epoch moved (a claim took the log over) between its read
# of the tail and its append.
ADMIN_APPEND_RACES = ("AppendConflict", "FenceRejected")
# The lease of an aborter's claim of an untouched lane's aborted head (it
# appends two records; a successor takes over if it dies).
ABORTED_HEAD_LEASE_MS = 30_000
# A queued abort's reservation refused because a claim granted the
# submission meanwhile: its owner settles it aborted.
QUEUED_ABORT_OWNED = ("OwnershipLost",)


def settle_batch_id(submission_id: str) -> str:
    """Deterministic per submission, never per attempt: a successor finds its
    predecessor's settlement batch by this id."""
    return f"submission-settlement:{submission_id}"


def input_entry(submission_id: str, input: Any, principal_id: str, idempotency_key: str,
                queue_seq: int, *, parent: Any = None, admission_group: str | None = None,
                metadata: Any = None) -> tuple[str, dict]:
    """The input record: everything the ledger row is rebuilt from
    (``model.repair``): its admission's identity (the parent link
    ``parentLink {submissionId, toolCallId}``, the ``admissionGroup`` and
    the admission ``metadata``, each only when it has one) with the input."""
    payload = {"submissionId": submission_id, "input": input, "principalId": principal_id,
               "idempotencyKey": idempotency_key, "queueSeq": queue_seq}
    if parent is not None:
        payload["parentLink"] = {"submissionId": parent.submission_id, "toolCallId": parent.tool_call_id}
    if admission_group is not None:
        payload["admissionGroup"] = admission_group
    if metadata is not None:
        payload["metadata"] = metadata
    return (INPUT_FAMILY, payload)


def input_entry_of(record: Any) -> tuple[str, dict]:
    """The input record of a ledger ``SubmissionRecord``."""
    return input_entry(record.submission_id, record.input, record.principal_id, record.idempotency_key,
                       record.queue_seq, parent=record.parent, admission_group=record.admission_group,
                       metadata=record.metadata)


def record_envelope(batch_id: str, index: int, entry: Any, created_at_ms: int, producer_id: str,
                    epoch: int) -> RecordEnvelope:
    """The envelope a producer appends for a batch's ``index``-th entry: an
    exact record (a dict: the reserved settlement envelope) as it is, never
    re-stamped (its ``createdAt`` is the reservation's, whoever appends
    it), else ``(family, payload)`` stamped now."""
    if type(entry) is dict:
        return RecordEnvelope(record_id=entry["recordId"], family=entry["family"],
                              schema_version=entry["schemaVersion"], created_at_ms=entry["createdAt"],
                              deployment_id=entry["deploymentId"], payload=entry["payload"], producer_id=producer_id,
                              epoch=epoch)
    family, payload = entry
    return RecordEnvelope(record_id=entry_record_id(batch_id, index, family, payload), family=family,
                          schema_version=1, created_at_ms=created_at_ms, deployment_id=DEPLOYMENT_ID,
                          payload=payload, producer_id=producer_id, epoch=epoch)


def logged_record(envelope: RecordEnvelope) -> dict:
    """A logged record as the ledger reserves it: its envelope without the
    producer's identity and epoch (the append adds those)."""
    value = envelope.to_json()
    value.pop("producerId", None)
    value.pop("epoch", None)
    return value


def canonical_record(logged: Any, reserved: Any, fresh: Callable[[], Any]) -> Any:
    """The record to settle with: the log's, else the ledger's reserved one,
    else ``fresh()`` (called only then)."""
    if logged is not None:
        return logged
    if reserved is not None:
        return reserved
    return fresh()


@attrs.frozen
class Terminal:
    """A finished terminalization: the record settled with, what the ledger
    reserved for it and what it finalized."""

    record: Any  # the outcome record (``settlement_of(envelope)``)
    reserved: ReservedSettlement
    settlement: Settlement
    envelope: Any = None  # the settlement record envelope reserved and appended


class SubmissionLifecycle:
    """Admission and terminalization over one process's ledger and log ports.

    ``owner_id``: the process whose claims it settles with (None for a
    process that only admits, like the client)."""

    def __init__(self, ledger: Any, log: Any, *, now_ms: Callable[[], int], owner_id: str | None = None,
                 failpoints: Failpoints = NO_FAILPOINTS) -> None:
        assert owner_id is None or (type(owner_id) is str and owner_id), owner_id
        self.ledger = ledger
        self.log = log
        self.now_ms = now_ms
        self.owner_id = owner_id
        self.failpoints = failpoints

    # -- admission -------------------------------------------------------------

    async def admit(self, conversation_id: str, principal_id: str, idempotency_key: str, request: Any,
                    admitted_at_ms: int, *, complete_replay: bool, log_is_new: bool = False,
                    before_ready: Callable[[AdmissionResult], Awaitable[None]] | None = None,
                    parent: Any = None, admission_group: str | None = None,
                    metadata: Any = None) -> AdmissionResult:
        """Admit ``request`` under its idempotency key and make it ready.

        A replayed admission (same key, same input) returns at once unless
        ``complete_replay``. ``AdmissionConflict`` (same key, other input)
        and ``AdmissionPolicyError`` (its ``admission_group`` holds another
        unsettled submission: nothing written) come straight from the
        ledger. ``parent``: a subagent's ``ParentLink`` (None: a top-level
        submission); ``metadata``: opaque, part of the admission's identity
        and of its input record."""
        policy = {} if admission_group is None and metadata is None else {
            "admission_group": admission_group, "metadata": metadata}
        admission = await self.ledger.admit(conversation_id, principal_id, idempotency_key, request, admitted_at_ms,
                                            parent, **policy)
        assert admission.submission_id and admission.receipt and admission.queue_seq >= 1, admission
        if admission.replayed and not complete_replay:
            return admission
        self.failpoints.hit(ADMITTED_BEFORE_READY if parent is None else SUBAGENT_ADMITTED)
        if before_ready is not None:
            await before_ready(admission)
        await self.make_ready(conversation_id, admission.submission_id, log_is_new=log_is_new)
        self.failpoints.hit(READY_BEFORE_RECEIPT if parent is None else SUBAGENT_CHILD_READY)
        return admission

    async def make_ready(self, conversation_id: str, submission_id: str, *, log_is_new: bool = False) -> None:
        """Materialize the conversation (if it is not) and mark the submission
        ready: admission's second half, idempotent, also what a recovery
        does for an admission that stopped before ready."""
        if log_is_new:
            await self._materialize_for_admission(conversation_id)
        else:
            try:
                await self.log.inspect_tail(conversation_id)
            except NotMaterialized:
                await self._materialize_for_admission(conversation_id)
            # The peer's submit path (a client's, a subagent's child): not a
            # sentinel run's, whose log is born with its admission and whose
            # crash points are the runs layer's (``SENTINEL_CRASH_POINTS``).
            self.failpoints.hit(MATERIALIZED_BEFORE_READY)
        await self.ledger.mark_ready(submission_id, self.now_ms())

    async def _materialize_for_admission(self, conversation_id: str) -> None:
        """Epoch 0, by the admission producer: any claimed owner (epoch >= 1)
        takes over from it, and a second materialize at 0 is a no-op. A
        refusal as stale means a claimed owner materialized it meanwhile (a
        recovery completed this admission's first half, then claimed): the
        conversation exists, which is all this step asks."""
        try:
            await self.log.materialize(conversation_id, ADMISSION_PRODUCER, 0)
        except Exception as error:
            if error_name(error) != "FenceRejected":
                raise

    # -- ownership ---------------------------------------------------------------

    async def take_over(self, conversation_id: str, claim: Claim) -> None:
        """Carry the claim's epoch to the log: the owner's first act on it,
        before any read or append (the ledger's claim alone does not fence the
        log). After it a stale owner's appends are ``FenceRejected``, and
        whatever it wrote before is visible to every read this owner makes."""
        assert isinstance(claim, Claim) and claim.owner_id == self.owner_id, (claim, self.owner_id)
        await self.log.materialize(conversation_id, claim.owner_id, claim.epoch)

    # -- a queued submission's abort ----------------------------------------------

    async def settle_queued_abort(self, submission_id: str, producer_id: str,
                                  record: Any = None) -> Settlement | None:
        """Settle a queued submission's abort through the log: the abort
        intent is durable, and no claim ever granted the submission.

        "Admission and settlement intentionally span the two stores through
        recoverable states: ... reserve settlement -> append exact canonical
        record -> finalize ledger" — an abort of queued work too, so its
        settlement is canonical like any other ("canonical input and
        settlement records win over cached ledger markers during repair").
        The ledger reserves ``aborted`` under the ``QueuedAbort`` authority
        (no ownership; the record it reserved already wins), the records
        ``abort:{sid}`` and ``settlement:{sid}`` go to the log in the
        settlement batch ``submission-settlement:{sid}`` (the one batch every
        settler of the submission looks up: a claim holder that races this
        appends the same batch id, never a second abort record) at the
        conversation's current epoch, as ``producer_id``, an administrative
        producer (it takes nothing over: the lane's running owner goes on from
        the tail it reads next), and the ledger finalizes. It never waits
        for the lane's head. Idempotent: whoever finds the intent — the
        aborter, or after its crash a recovery pass (``SettleAborted``) —
        does it again and writes the same. None: nothing to do here (settled,
        claimed: its owner settles it, joined, or not aborting), or the log
        kept moving under it (the next recovery pass or claim finishes).
        ``record``: the row read by id just before (a recovery pass reads
        it first), or None to read it here."""
        if record is None:
            record = await self.ledger.get(submission_id)
        if (record is None or record.settled or record.epoch is not None or record.abort_author is None
                or record.join_host is not None or not record.ready):
            return None
        conversation_id = record.conversation_id
        if (await self.log.inspect_tail(conversation_id)).epoch < 1:
            return await self._settle_aborted_head(record, producer_id)
        envelope = record.reserved_record
        if envelope is None:
            envelope = settlement_envelope(submission_id, {"outcome": ABORTED}, self.now_ms(), receipt=record.receipt)
        try:
            await self.ledger.reserve_settlement(queued_abort_token(submission_id, producer_id), envelope)
        except Exception as error:
            if error_name(error) in QUEUED_ABORT_OWNED:
                return None  # claimed meanwhile: its owner settles it aborted
            if error_name(error) == "SettlementConflict" and getattr(error, "existing_outcome", None) == ABORTED:
                # Another settler (another worker's scan, a recovery pass)
                # reserved its own ``aborted`` envelope since this one read
                # the row (another instant, another clock: another
                # ``createdAt``): the abort is that settler's to finish, or
                # the next scan's, from the reservation it finds.
                return None
            raise
        entries = [abort_entry(submission_id, record.abort_author, record.abort_reason), envelope]
        if await self.append_administrative(conversation_id, producer_id, settle_batch_id(submission_id),
                                            entries) is None:
            return None
        return await self.ledger.finalize_settlement(submission_id, self.now_ms())

    async def _settle_aborted_head(self, record: Any, producer_id: str) -> Settlement | None:
        """The log is still the admission producer's (epoch 0, where nothing
        appends): no claim ever took the lane over. If the submission is its
        lane's head, the aborter claims it (a ready head with an abort
        intent is claimable, for its aborted settlement), takes the log over
        at the claim's epoch and settles it ``aborted`` as its owner: reserve
        -> append -> finalize. Behind another head, None: the lane's first
        claim comes first, and a worker's next scan finishes it then."""
        submission_id, conversation_id = record.submission_id, record.conversation_id
        snapshot = await self.ledger.load_recovery_snapshot(conversation_id)
        if not snapshot.submissions or snapshot.submissions[0].submission_id != submission_id:
            return None
        claim = await self.ledger.claim(conversation_id, producer_id, ABORTED_HEAD_LEASE_MS, self.now_ms())
        if claim is None:
            return None
        # A claim's first act on the log is the takeover at its epoch.
        await self.log.materialize(conversation_id, producer_id, claim.epoch)
        if claim.submission_id != submission_id:  # another head came first: not ours to run
            await self.ledger.release_ownership(claim)
            return None
        envelope = record.reserved_record or settlement_envelope(submission_id, {"outcome": ABORTED}, self.now_ms(),
                                                                  receipt=record.receipt)
        await self.ledger.reserve_settlement(claim, envelope)
        entries = [abort_entry(submission_id, record.abort_author, record.abort_reason), envelope]
        if await self.append_administrative(conversation_id, producer_id, settle_batch_id(submission_id),
                                            entries) is None:
            return None
        return await self.ledger.finalize_settlement(submission_id, self.now_ms())

    async def append_administrative(self, conversation_id: str, producer_id: str, batch_id: str,
                                    entries: list) -> Any:
        """Append ``entries`` as batch ``batch_id`` unless the log holds it,
        at the conversation's current epoch, as ``producer_id`` (an
        administrative producer: it never takes the log over). A lost race
        (the tail or the epoch moved) reads the tail again, at most
        ``ADMIN_APPEND_ATTEMPTS`` times; None if every attempt lost."""
        for _ in range(ADMIN_APPEND_ATTEMPTS):
            found = await self.log.lookup_batch(conversation_id, batch_id)
            if found is not None:
                return found
            tail = await self.log.inspect_tail(conversation_id)
            if tail.epoch < 1:
                return None  # epoch 0 (the admission producer's) never appends
            try:
                if tail.tail_seq == 0:  # the conversation-created record is every conversation's first
                    created = await self._append_at(conversation_id, producer_id, created_batch_id(conversation_id),
                                                    [created_entry(conversation_id)], tail)
                    tail = ConversationTail(created.last_seq, created.tail_digest, tail.epoch)
                return await self._append_at(conversation_id, producer_id, batch_id, entries, tail)
            except Exception as error:
                if error_name(error) not in ADMIN_APPEND_RACES:
                    raise
        return None

    async def _append_at(self, conversation_id: str, producer_id: str, batch_id: str, entries: list,
                         tail: ConversationTail) -> Any:
        envelopes = tuple(record_envelope(batch_id, i, entry, self.now_ms(), producer_id, tail.epoch)
                          for i, entry in enumerate(entries))
        return await self.log.append(FencedAppendRequest(
            conversation_id=conversation_id, batch_id=batch_id, producer_id=producer_id, epoch=tail.epoch,
            expected_tail_seq=tail.tail_seq, expected_tail_digest=tail.tail_digest, records=envelopes))

    # -- terminalization -------------------------------------------------------

    async def logged_settlement(self, conversation_id: str, submission_id: str) -> BatchRecord | None:
        """The submission's settlement batch, if its log holds one."""
        return await self.log.lookup_batch(conversation_id, settle_batch_id(submission_id))

    async def terminalize(self, claim: Claim, *, logged: Any, reserved: Any, fresh: Callable[[], Any],
                          append: Append, append_if_logged: bool = False, finalized_at_ms: int | None = None,
                          on_reserved: Callable[[Any], None] | None = None, run_id: str | None = None,
                          receipt: str) -> Terminal:
        """Settle the claimed submission: reserve -> append -> finalize.

        ``logged``: the settlement record envelope the log is known to hold
        (``logged_record``; None: not known to); ``reserved``: the one the
        ledger had reserved when the caller read it; ``fresh()``: a new
        outcome record, used only when neither exists, in a new envelope
        created now (naming ``run_id``, the run that settles it, if any, and
        ``receipt``, the submission's admission receipt).
        The ledger reserves the envelope (its digest is the envelope's) and
        the log gets exactly it: a successor appends its predecessor's
        reservation byte for byte. ``on_reserved(envelope)`` runs right
        after the reservation (the caller remembers it, so a retry in the
        same process reuses it)."""
        # Pre: the caller holds this process's claim token.
        assert isinstance(claim, Claim) and claim.submission_id, claim
        assert self.owner_id is not None and claim.owner_id == self.owner_id, (claim, self.owner_id)
        assert finalized_at_ms is None or type(finalized_at_ms) is int, finalized_at_ms
        submission_id = claim.submission_id
        envelope = canonical_record(logged, reserved, lambda: settlement_envelope(
            submission_id, fresh(), self.now_ms(), receipt=receipt, run_id=run_id))
        try:
            reservation = await self.ledger.reserve_settlement(claim, envelope)
        except Exception as error:
            if logged is not None or reserved is not None or error_name(error) != "SettlementConflict":
                raise
            # A fresh envelope conflicting: this attempt's own reservation
            # may have committed with its reply lost (a retry builds its
            # envelope again, created later). The ledger's, if it is the same
            # record, is this attempt's: adopt it (the reservation replays).
            row = await self.ledger.get(submission_id)
            held = None if row is None else row.reserved_record
            if held is None or held["payload"] != envelope["payload"]:
                raise
            envelope = held
            reservation = await self.ledger.reserve_settlement(claim, envelope)
        record = settlement_of(envelope)
        # Post (reserve): the ledger holds exactly this record for this submission.
        assert reservation.submission_id == submission_id and reservation.record_digest, (reservation, claim)
        if on_reserved is not None:
            on_reserved(envelope)
        self.failpoints.hit(RESERVED_BEFORE_APPEND)
        if logged is None or append_if_logged:
            await append(settle_batch_id(submission_id), envelope)
        self.failpoints.hit(APPENDED_BEFORE_FINALIZE)
        settlement = await self.ledger.finalize_settlement(
            submission_id, self.now_ms() if finalized_at_ms is None else finalized_at_ms)
        self.failpoints.hit(FINALIZED_BEFORE_REPLY)
        # Post (finalize): settled with the reserved record, nothing else.
        assert settlement.submission_id == submission_id, (settlement, claim)
        assert settlement.record_digest == reservation.record_digest, (settlement, reservation)
        assert settlement.outcome == record["outcome"], (settlement, record)
        return Terminal(record, reservation, settlement, envelope)

    async def adopt_logged(self, conversation_id: str, record: Any) -> Settlement | None:
        """Finalize a settlement the log holds already (its owner died between
        append and finalize); None if it holds none. ``record``: the
        submission's ledger record, as just read."""
        if record.reserved_record is None:
            return None  # nothing reserved: nothing can be in the log yet
        try:
            batch = await self.logged_settlement(conversation_id, record.submission_id)
        except NotMaterialized:
            return None
        if batch is None:
            return None
        settlement = await self.ledger.finalize_settlement(record.submission_id, self.now_ms())
        self.failpoints.hit(FINALIZED_BEFORE_REPLY)
        # Post: settled with what the ledger had reserved (and the log holds).
        assert settlement.submission_id == record.submission_id, (settlement, record)
        assert settlement.record_digest == record.reserved_digest, (settlement, record)
        return settlement
