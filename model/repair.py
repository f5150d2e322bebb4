"""Rebuild a Submission Ledger from the Conversation Log (persistence §3).

The log is canonical; the ledger is operational and can be lost. Every
submission that reached the log left an ``input`` record (with its principal,
idempotency key and queue position) and, once settled, one
``submission-settled`` record holding the exact settlement record. Replaying
those into an empty ledger through its ordinary operations restores every
submission the log knows, with the same ids, the same queue order and the
same settlement digests. A submission admitted but never processed left
nothing in the log; its at-least-once client re-submits it.

A settlement with no input before it is a submission aborted after a claim
but before its input entered the log: the rebuild admits a placeholder there
and settles it with the logged record (its input never marked applied: there
is no input record to point at). Every other input marker names where the
input record sits in the log, as the original one did.

A queue position missing between two inputs is a submission its abort
intent settled before it ever ran (nothing of it reaches the log; FIFO
means nothing behind an open one could have run). The rebuild holds its
place with a ``rebuild-gap:{seq}`` admission aborted at once, so every later
submission keeps its id and queue position.

Each input record carries its admission's identity (``lifecycle.input_entry``:
the parent link, the admission group, the metadata), and the rebuild admits
with it, so a rebuilt row is the same admission (an at-least-once retry
replays against it) and its conversation the same lane: a placeholder on a
worker lane is a worker admission of the lane's origin. The ledger checks
a fresh admission's policies; the rebuild meets them as the original did
by rebuilding last the conversations whose last input never settled (an
admission group holds one unsettled submission ledger-wide: every other
member of it was settled before that one was admitted).
"""
from __future__ import annotations

from typing import Any, Iterable

import attrs

from model.conversation.recovery import read_recovery_prefix
from model.ledger.records import ParentLink
from model.ledger.rules import WORKER_ADMISSION, queue_seq_of
from model.lifecycle import logged_record

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


async def _rebuild_one(ledger: Any, conversation_id: str, records, now_ms: int, submissions: int,
                       settled: int) -> tuple[int, int]:
    """Replay one conversation's verified prefix ``records``; the running
    ``(submissions, settled)`` counts after it."""
    lane = _lane_metadata(records)
    next_seq = 1  # the queue position the next admission gets
    inputs: dict[str, tuple[str, int]] = {}  # submission -> where its input record sits
    for canonical in records:
        envelope = canonical.envelope
        payload = envelope.payload
        if envelope.family == "input":
            next_seq = await _hold_gaps(ledger, conversation_id, next_seq, payload["queueSeq"],
                                        envelope.created_at_ms, lane) + 1
            link = payload.get("parentLink")
            admission = await ledger.admit(conversation_id, payload["principalId"], payload["idempotencyKey"],
                                           payload["input"], envelope.created_at_ms,
                                           None if link is None else ParentLink(link["submissionId"],
                                                                                link["toolCallId"]),
                                           payload.get("admissionGroup"), None, payload.get("metadata"))
            if admission.submission_id != payload["submissionId"]:
                raise AssertionError(f"rebuild admitted {admission.submission_id} for "
                                     f"{payload['submissionId']}: queue order differs")
            await ledger.mark_ready(admission.submission_id, envelope.created_at_ms)
            inputs[admission.submission_id] = (envelope.record_id, canonical.seq)
            submissions += 1
        elif envelope.family == "submission-settled":
            queue_seq = queue_seq_of(payload["submissionId"])
            if queue_seq >= next_seq:
                # Aborted after a claim but before its input entered the
                # log: a settlement with no input. Hold its place, then settle it.
                next_seq = await _hold_gaps(ledger, conversation_id, next_seq, queue_seq,
                                            envelope.created_at_ms, lane) + 1
                held = await ledger.admit(conversation_id, GAP_PRINCIPAL, f"rebuild-held:{queue_seq}", None,
                                          envelope.created_at_ms, metadata=lane)
                await ledger.mark_ready(held.submission_id, envelope.created_at_ms)
            claim = await ledger.claim(conversation_id, REBUILD_OWNER, REBUILD_LEASE_MS, now_ms)
            if claim is None or claim.submission_id != payload["submissionId"]:
                raise AssertionError(f"{conversation_id}: settlement of {payload['submissionId']} "
                                     "is not at the head of the rebuilt queue")
            position = inputs.pop(claim.submission_id, None)
            if position is not None:  # a held one never had its input in the log
                await ledger.mark_input_applied(claim, *position)
            # The canonical record wins: the ledger reserves exactly the
            # logged record envelope (the same digest as the original).
            await ledger.reserve_settlement(claim, logged_record(envelope))
            await ledger.finalize_settlement(claim.submission_id, envelope.created_at_ms)
            settled += 1
    return submissions, settled


async def _hold_gaps(ledger: Any, conversation_id: str, next_seq: int, queue_seq: int, now_ms: int,
                     lane: object = None) -> int:
    """Admit and abort a placeholder (``lane``: its metadata) for every
    position in ``next_seq..queue_seq-1`` (submissions aborted before they
    ran); returns ``queue_seq``."""
    while next_seq < queue_seq:
        gap = await ledger.admit(conversation_id, GAP_PRINCIPAL, f"rebuild-gap:{next_seq}", None, now_ms,
                                 metadata=lane)
        await ledger.request_abort(gap.submission_id, REBUILD_OWNER, "aborted before it ran", now_ms)
        next_seq += 1
    return queue_seq
