"""Rebuild a Submission Ledger from the Conversation Log (persistence §3).

The log is canonical; the ledger is operational and can be lost. Every
submission that reached the log left an ``input`` record (with its principal,
idempotency key and queue position) and, once settled, one
``submission-settled`` record holding the exact settlement record. Replaying
those into an empty ledger through its ordinary operations restores every
submission the log knows, with the same ids, the same queue order and the
same settlement digests. A submission admitted but never processed left
nothing in the log; its at-least-once client re-submits it.

A settlement with no input record is a submission aborted before its input
entered the log: queued (its aborter settled it through the log, ahead of
the inputs of the work before it that had not run yet), or after a claim.
The rebuild holds its queue position with a placeholder and settles it with
the logged record under the ledger's ``QueuedAbort`` authority (it need not
be the head). A settlement whose rows ahead are unsettled, their inputs
logged, is a cooperative handoff's successor: the rebuild defers them as
their producers did (marker, release) and hands the lane over to it. Every other input marker names where the input record sits in
the log, as the original one did.

A queue position missing from the log altogether is a submission its abort
intent settled before it was ever ready (nothing of it reaches the log).
The rebuild holds its place with a ``rebuild-gap:{seq}`` admission aborted
at once, so every later submission keeps its id and queue position.

Each input record carries its admission's identity (``lifecycle.input_entry``:
the parent link, the admission group, the metadata), and the rebuild admits
with it, so a rebuilt row is the same admission (an at-least-once retry
replays against it) and its conversation the same lane: a placeholder on a
worker lane is a worker admission of the lane's origin. The ledger checks
a fresh admission's policies; the rebuild meets them as the original did
by rebuilding last the conversations whose last input never settled (an
admission group holds one unsettled submission ledger-wide: every other
member of it was settled before that one was admitted), and within a
conversation by replaying the settlements logged so far before it admits a
member of a group (the earlier member's settlement came first there too).
"""
from __future__ import annotations

from typing import Any, Iterable

import attrs

from model.conversation.recovery import read_recovery_prefix
from model.ledger.records import ClaimHandoff, ParentLink
from model.ledger.rules import WORKER_ADMISSION, queue_seq_of
from model.lifecycle import ABORT_REQUESTED_FAMILY, logged_record, queued_abort_token

REBUILD_OWNER = "ledger-rebuild"
GAP_PRINCIPAL = "ledger-rebuild"
REBUILD_LEASE_MS = 1


@attrs.frozen
class RebuildReport:
    conversations: int
    submissions: int
    settled: int


async def rebuild_ledger(log: Any, ledger: Any, conversation_ids: Iterable[str], now_ms: int) -> RebuildReport:
    """Replay the log's inputs and settlements into ``ledger`` (an empty one).

    Reads each conversation with the fail-closed recovery read, so a damaged
    history fails the rebuild instead of silently dropping submissions.
    """
    conversations = submissions = settled = 0
    deferred = []  # conversations whose last input is unsettled: rebuilt last
    for conversation_id in conversation_ids:
        records = (await read_recovery_prefix(log, conversation_id)).records
        if _ends_open(records):
            deferred.append(conversation_id)
            continue
        submissions, settled = await _rebuild_one(ledger, conversation_id, records, now_ms, submissions, settled)
        conversations += 1
        del records  # one conversation's prefix in memory at a time
    for conversation_id in deferred:
        records = (await read_recovery_prefix(log, conversation_id)).records
        submissions, settled = await _rebuild_one(ledger, conversation_id, records, now_ms, submissions, settled)
        conversations += 1
        del records
    return RebuildReport(conversations, submissions, settled)


def _ends_open(records) -> bool:
    """Does the conversation's last input lack a settlement after it?"""
    open_input = False
    for canonical in records:
        family = canonical.envelope.family
        if family == "input":
            open_input = True
        elif family == "submission-settled":
            open_input = False
    return open_input


def _lane_metadata(records) -> object:
    """A placeholder's metadata: the lane's worker admission (its kind and
    origin) when the conversation's first input is a worker admission, so a
    placeholder keeps the lane's kind; else none."""
    for canonical in records:
        if canonical.envelope.family == "input":
            metadata = canonical.envelope.payload.get("metadata")
            if isinstance(metadata, dict) and metadata.get("kind") == WORKER_ADMISSION:
                return {"kind": WORKER_ADMISSION, "origin": metadata.get("origin")}
            return None
    return None


def _placeholder(lane: object, key: str) -> object:
    """A placeholder's admission metadata: on a worker lane, the lane's
    worker admission under the placeholder's own key as its ``messageId``."""
    return None if lane is None else {**lane, "messageId": key}


async def _rebuild_one(ledger: Any, conversation_id: str, records, now_ms: int, submissions: int,
                       settled: int) -> tuple[int, int]:
    """Replay one conversation's verified prefix ``records``; the running
    ``(submissions, settled)`` counts after it.

    Admission goes in queue order: a queued submission's abort settles in
    the log before the inputs of those ahead of it that had not run yet."""
    lane = _lane_metadata(records)
    inputs_at: dict[int, Any] = {}  # queue position -> its input record
    held: dict[int, str] = {}  # queue position -> a settlement with no input
    aborts: dict[str, tuple[str, str]] = {}  # submission -> its abort record's (author, reason)
    for canonical in records:
        envelope = canonical.envelope
        if envelope.family == "input":
            inputs_at[envelope.payload["queueSeq"]] = canonical
        elif envelope.family == ABORT_REQUESTED_FAMILY:
            aborts[envelope.payload["submissionId"]] = (envelope.payload["author"], envelope.payload["reason"])
    for canonical in records:
        envelope = canonical.envelope
        if envelope.family == "submission-settled":
            queue_seq = queue_seq_of(envelope.payload["submissionId"])
            if queue_seq not in inputs_at:
                held.setdefault(queue_seq, envelope.payload["submissionId"])
    inputs: dict[str, tuple[str, int]] = {}  # submission -> where its input record sits
    # The settlement records in log order, each replayed as soon as its row
    # is admitted (below): a later member of an admission group is admitted
    # only after the earlier one's settlement, as it originally was.
    unsettled = [canonical for canonical in records if canonical.envelope.family == "submission-settled"]
    next_seq = 1  # the queue position the next admission gets
    for queue_seq in sorted(set(inputs_at) | set(held)):
        canonical = inputs_at.get(queue_seq)
        at_ms = now_ms if canonical is None else canonical.envelope.created_at_ms
        if canonical is not None and canonical.envelope.payload.get("admissionGroup") is not None:
            settled = await _settle(ledger, conversation_id, unsettled, next_seq - 1, held, aborts, inputs, now_ms,
                                    settled)
        next_seq = await _hold_gaps(ledger, conversation_id, next_seq, queue_seq, at_ms, lane) + 1
        if canonical is None:
            # Aborted before its input entered the log (queued, or after a
            # claim): hold its place; its settlement settles it below.
            placeholder = await ledger.admit(conversation_id, GAP_PRINCIPAL, f"rebuild-held:{queue_seq}", None,
                                             at_ms, metadata=_placeholder(lane, f"rebuild-held:{queue_seq}"))
            await ledger.mark_ready(placeholder.submission_id, at_ms)
            continue
        payload = canonical.envelope.payload
        link = payload.get("parentLink")
        admission = await ledger.admit(conversation_id, payload["principalId"], payload["idempotencyKey"],
                                       payload["input"], at_ms,
                                       None if link is None else ParentLink(link["submissionId"], link["toolCallId"]),
                                       payload.get("admissionGroup"), None, payload.get("metadata"))
        if admission.submission_id != payload["submissionId"]:
            raise AssertionError(f"rebuild admitted {admission.submission_id} for "
                                 f"{payload['submissionId']}: queue order differs")
        await ledger.mark_ready(admission.submission_id, at_ms)
        inputs[admission.submission_id] = (canonical.envelope.record_id, canonical.seq)
        submissions += 1
    settled = await _settle(ledger, conversation_id, unsettled, next_seq - 1, held, aborts, inputs, now_ms, settled)
    return submissions, settled


async def _settle(ledger: Any, conversation_id: str, unsettled: list, admitted_seq: int, held: dict, aborts: dict,
                  inputs: dict, now_ms: int, settled: int) -> int:
    """Replay, in log order, the settlement records of ``unsettled`` whose
    submission is admitted (queue position up to ``admitted_seq``), taking
    each off the list; the running count of settlements after it."""
    waiting = []
    for canonical in unsettled:
        envelope = canonical.envelope
        sid = envelope.payload["submissionId"]
        if queue_seq_of(sid) > admitted_seq:
            waiting.append(canonical)
            continue
        if queue_seq_of(sid) in held:
            # No input: an abort settled it, queued (no claim) or owned.
            # The QueuedAbort authority settles the placeholder (no claim:
            # it need not be the head) with the logged record.
            author, reason = aborts.get(sid, (REBUILD_OWNER, "aborted before it ran"))
            await ledger.request_abort(sid, author, reason, envelope.created_at_ms)
            await ledger.reserve_settlement(queued_abort_token(sid, REBUILD_OWNER), logged_record(envelope))
            await ledger.finalize_settlement(sid, envelope.created_at_ms)
            settled += 1
            continue
        claim = await ledger.claim(conversation_id, REBUILD_OWNER, REBUILD_LEASE_MS, now_ms)
        if claim is not None and claim.submission_id != sid:
            claim = await _hand_over(ledger, conversation_id, claim, sid, inputs, now_ms)
        if claim is None or claim.submission_id != sid:
            raise AssertionError(f"{conversation_id}: settlement of {sid} is not at the head of the rebuilt queue")
        position = inputs.pop(claim.submission_id, None)
        if position is not None:
            await ledger.mark_input_applied(claim, *position)
        # The canonical record wins: the ledger reserves exactly the
        # logged record envelope (the same digest as the original).
        await ledger.reserve_settlement(claim, logged_record(envelope))
        await ledger.finalize_settlement(claim.submission_id, envelope.created_at_ms)
        settled += 1
    unsettled[:] = waiting
    return settled


async def _hand_over(ledger: Any, conversation_id: str, claim: Any, sid: str, inputs: dict,
                     now_ms: int) -> Any:
    """The log settles ``sid`` while the rows ahead of it (from ``claim``'s,
    the head) are unsettled: their producers deferred them (input applied,
    released unsettled) and handed the lane over. Replay that: each one
    ahead gets its input marker and is released, and the next is claimed
    with a handoff naming them all; the claim of ``sid`` so made, or the
    first claim that is not a handoff's (a row ahead with no input logged)."""
    deferred: list[str] = []
    while claim is not None and claim.submission_id != sid:
        position = inputs.pop(claim.submission_id, None)
        if position is None:
            return claim  # nothing applied: not a deferred head
        await ledger.mark_input_applied(claim, *position)
        await ledger.release_ownership(claim)
        deferred.append(claim.submission_id)
        rows = (await ledger.load_recovery_snapshot(conversation_id)).submissions
        if len(rows) <= len(deferred):
            return None
        claim = await ledger.claim(conversation_id, REBUILD_OWNER, REBUILD_LEASE_MS, now_ms,
                                   handoff=ClaimHandoff(claim.epoch, tuple(deferred), rows[len(deferred)].submission_id))
    return claim


async def _hold_gaps(ledger: Any, conversation_id: str, next_seq: int, queue_seq: int, now_ms: int,
                     lane: object = None) -> int:
    """Admit and abort a placeholder (``lane``: its metadata) for every
    position in ``next_seq..queue_seq-1`` (submissions aborted before they
    ran); returns ``queue_seq``."""
    while next_seq < queue_seq:
        gap = await ledger.admit(conversation_id, GAP_PRINCIPAL, f"rebuild-gap:{next_seq}", None, now_ms,
                                 metadata=_placeholder(lane, f"rebuild-gap:{next_seq}"))
        await ledger.request_abort(gap.submission_id, REBUILD_OWNER, "aborted before it ran", now_ms)
        next_seq += 1
    return queue_seq
