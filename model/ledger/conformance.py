"""Conformance suite for Submission Ledger adapters (STORE-010, STORE-013).

Every adapter — the in-memory and SQLite ledgers here, and yours — must pass
the same named checks, one per rule of the port (``rules.py``). Each check
gets a fresh ledger, so the checks are independent and a failure names the
rule that broke.

Running it against your own adapter::

    import trio
    from model.ledger.conformance import run_ledger_conformance

    def make_store():
        # A *fresh, empty* ledger per call: a new database/schema/namespace.
        return MyDurableObjectLedger(fresh_test_namespace())

    def test_my_ledger_conforms():
        passed = trio.run(run_ledger_conformance, make_store)
        assert passed  # names of the checks that ran

``make_store`` is a zero-argument callable returning the ledger or an
awaitable of it (``async def make_store(): ...`` works too). The suite only
awaits the ledger's own methods, so ``trio.run``, ``asyncio.run`` or the
simulator can drive it. It never closes ledgers; close yours in the
fixture's teardown.

All checks run even when some fail; at the end a ``ConformanceFailure`` (an
``AssertionError``, so pytest shows a plain failure) lists every failing
check with its reason and carries them as ``.failures``.
``checks=("claim-fifo-head-only", ...)`` runs a subset while you work on one
rule. ``CONFORMANCE_CHECKS`` is the ordered tuple of all names.
"""
from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Iterable

import attrs

from model import conformance_kit as _kit
from model.canonical import canonical_json as _canonical
from model.canonical import digest as _digest

from .records import (
    AbortConflict,
    AbortIntent,
    AbortRequested,
    ApprovalConflict,
    ApprovalDecision,
    ChildReservationConflict,
    UnknownChildReservation,
    JoinBatch,
    JoiningFollower,
    JoinedToHost,
    JoinMarked,
    Suspension,
    UnknownApproval,
    ResolutionConflict,
    TransitionRefused,
    InputApplied,
    InputMarkerConflict,
    ParentLink,
    Readiness,
    UnknownMarked,
    UnknownResolution,
    UnknownToolCall,
    AdmissionConflict,
    AdmissionFence,
    AdmissionPolicyError,
    AdmissionResult,
    Claim,
    ClaimHandoff,
    InvalidSettlement,
    LedgerError,
    OwnershipLost,
    ReservedSettlement,
    Settlement,
    SettlementConflict,
    UnknownSubmission,
)


class ConformanceFailure(_kit.ConformanceFailure):
    subject = "submission ledger"


_SUITE = _kit.CheckSuite(ConformanceFailure)
_check = _SUITE.check
_raises = _kit.expect_raises
_eq = _kit.expect_eq


def _true(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


COMPLETED_RECORD = {"outcome": "completed", "result": {"text": "done"}}
FAILED_RECORD = {"outcome": "failed", "diagnostic": {"errorTag": "ToolError", "message": "boom"}}
ABORTED_RECORD = {"outcome": "aborted", "diagnostic": {"reason": "user"}}


#: The receipt the checks' own settlements name. The ledger checks a
#: settlement's own ids (``settlementId``, ``recordId``, ``submissionId``),
#: not that its ``receiptId`` is the admission's (as the peer
#: implementation's publication: a reader of the canonical record checks
#: it); the envelopes the ledger writes itself carry the real receipt.
RECEIPT = "rcpt-conformance"


def _env(claim: Claim, record: object, created_at_ms: int = 100, run_id: str | None = None) -> dict:
    """``record`` in the settlement record envelope of ``claim``'s submission
    (what a settlement reserves: the record the log appends)."""
    return _env_for(claim.submission_id, record, created_at_ms, run_id)


def _env_for(submission_id: str, record: object, created_at_ms: int, run_id: str | None = None, *,
             receipt: str = RECEIPT) -> dict:
    """The peer's ``SubmissionSettled`` payload: the settlement's ids, then
    the outcome record's members at the top level (a record that is not a
    JSON object stays whole, under ``record``: never a valid settlement)."""
    payload = {"submissionId": submission_id, "settlementId": f"settlement:{submission_id}", "receiptId": receipt}
    payload.update(record if isinstance(record, dict) else {"record": record})
    if run_id is not None:
        payload["runId"] = run_id
    return {"recordId": f"settlement:{submission_id}", "family": "submission-settled", "schemaVersion": 1,
            "createdAt": created_at_ms, "deploymentId": "loomsim", "payload": payload}


async def _admitted(ledger, conversation_id="c1", key="k1", input=None, *, ready=True, principal_id="p1", now_ms=0):
    result = await ledger.admit(conversation_id, principal_id, key, {"text": key} if input is None else input, now_ms)
    if not isinstance(result, AdmissionResult) or result.replayed:
        raise AssertionError(f"fresh admit of {key!r} did not create a submission: {result!r}")
    if ready:
        await ledger.mark_ready(result.submission_id, 1)
    return result


def _input_at(claim: Claim) -> tuple[str, int]:
    """Where the conformance checks put a submission's input in its log."""
    return f"input:{claim.submission_id}#0", 1


async def _claimed(ledger, conversation_id="c1", owner_id="o1", lease_ms=1_000, now_ms=100) -> Claim:
    claim = await ledger.claim(conversation_id, owner_id, lease_ms, now_ms)
    if not isinstance(claim, Claim):
        raise AssertionError(f"claim of {conversation_id!r} by {owner_id!r} at {now_ms} returned {claim!r}")
    return claim


# --- admission -----------------------------------------------------------------------


@_check("admit-creates")
async def _(ledger) -> None:
    """Peer cases ``admissionIdempotency`` (the first admission) and ``lookupByIdAndKey`` (a by-id
    lookup: identity, input digest, receipt, not ready, not settled; an unknown id is none)."""
    result = await ledger.admit("c1", "p1", "k1", {"text": "hi"}, 5)
    _eq(result.replayed, False, "first admit replayed")
    _eq(result.queue_seq, 1, "first queue_seq")
    record = await ledger.get(result.submission_id)
    _true(record is not None, "admitted submission not found by get")
    _eq((record.input, record.input_digest, record.receipt, record.ready, record.settled_at_ms),
        ({"text": "hi"}, result.input_digest, result.receipt, False, None), "admitted record")
    _eq(result.input_digest, _digest({"text": "hi"}), "input_digest: the canonical digest of the input")
    _eq((record.ready_at_ms, record.outcome, record.parent, record.principal_id, record.idempotency_key,
         record.queue_seq), (None, None, None, "p1", "k1", 1), "not ready, not settled, no parent; its identity")
    _eq(await ledger.get("sub-nope"), None, "get of an unknown id")


@_check("admit-replays-exact-retry")
async def _(ledger) -> None:
    """Peer cases ``admissionIdempotency`` and ``concurrentAdmissionFifo`` (an identical retry
    replays with the same submission, receipt and queue position), sequentially."""
    first = await ledger.admit("c1", "p1", "k1", {"a": 1, "b": [1, 2]}, 5)
    again = await ledger.admit("c1", "p1", "k1", {"b": [1, 2], "a": 1}, 9)  # same canonical input
    _eq(again.replayed, True, "exact retry replayed")
    _eq((again.submission_id, again.receipt, again.queue_seq, again.input_digest),
        (first.submission_id, first.receipt, first.queue_seq, first.input_digest), "replayed identity")
    _eq(len(await ledger.scan_nonterminal()), 1, "a replay must not create a second submission")


@_check("admit-conflict-different-input")
async def _(ledger) -> None:
    """Peer case ``admissionIdempotency``: another input under the same key is ``AdmissionConflict``
    with both input digests (``existing_digest``, ``attempted_digest``: each the canonical digest of
    its input)."""
    first = await ledger.admit("c1", "p1", "k1", {"text": "one"}, 5)
    exc = await _raises(AdmissionConflict, ledger.admit("c1", "p1", "k1", {"text": "two"}, 6), "same key, new input")
    _eq(exc.existing_digest, first.input_digest, "conflict existing_digest")
    _true(exc.attempted_digest != first.input_digest, "conflict attempted_digest must be the new input's")
    _eq(exc.attempted_digest, _digest({"text": "two"}), "attempted_digest: the new input's canonical digest")
    await ledger.mark_ready(first.submission_id, 7)
    again = await ledger.admit("c1", "p1", "k1", {"text": "one"}, 8)
    _eq((again.replayed, again.submission_id, again.receipt, again.queue_seq),
        (True, first.submission_id, first.receipt, first.queue_seq), "the original replays after mark_ready")
    _eq(exc.name, "AdmissionConflict", "error name")
    _eq(len(await ledger.scan_nonterminal()), 1, "a conflict must create nothing")


@_check("admit-parent-link")
async def _(ledger) -> None:
    """Peer case ``admissionParentLinkage``."""
    link = ParentLink("sub-elsewhere-3", "call-7")
    first = await ledger.admit("c1", "p1", "k1", {"task": "child"}, 5, link)
    _eq((first.replayed, first.parent), (False, link), "admitted with its parent")
    again = await ledger.admit("c1", "p1", "k1", {"task": "child"}, 9, ParentLink("sub-elsewhere-3", "call-7"))
    _eq((again.replayed, again.submission_id, again.parent), (True, first.submission_id, link),
        "an exact retry with the same parent replays")
    _eq((await ledger.get(first.submission_id)).parent, link, "the record carries the link")
    for other in (ParentLink("sub-elsewhere-3", "call-8"), ParentLink("sub-other-1", "call-7"), None):
        exc = await _raises(AdmissionConflict, ledger.admit("c1", "p1", "k1", {"task": "child"}, 9, other),
                            f"the same key and input under parent {other!r}")
        _eq((exc.what, exc.existing_digest, exc.attempted_digest), ("parent", first.input_digest, first.input_digest),
            "the conflict names the parent")
    plain = await ledger.admit("c1", "p1", "k2", {"task": "plain"}, 5)
    _eq(plain.parent, None, "no parent")
    exc = await _raises(AdmissionConflict, ledger.admit("c1", "p1", "k2", {"task": "plain"}, 6, link),
                        "a parent where the admission had none")
    _eq(exc.what, "parent", "names the parent")
    exc = await _raises(AdmissionConflict, ledger.admit("c1", "p1", "k1", {"task": "other"}, 9, link),
                        "another input under the same parent")
    _eq(exc.what, "input", "another input is named first")
    await _raises(TypeError, ledger.admit("c1", "p1", "k3", {}, 5, ("sub-x-1", "call-1")), "a tuple as parent")
    await _raises(TypeError, ledger.admit("c1", "p1", "k3", {}, 5, ParentLink("sub-x-1", 7)), "a non-str call id")
    _eq(len(await ledger.scan_nonterminal()), 2, "conflicts and refusals create nothing")


@_check("admit-key-scoped-to-conversation-and-principal")
async def _(ledger) -> None:
    """Peer cases ``crossPrincipalAdmissionScoping`` and ``lookupByIdAndKey`` (lookup by key is
    scoped to the principal)."""
    a = await ledger.admit("c1", "p1", "k", {"x": 1}, 0)
    b = await ledger.admit("c1", "p2", "k", {"x": 2}, 0)
    c = await ledger.admit("c2", "p1", "k", {"x": 3}, 0)
    _eq([r.replayed for r in (a, b, c)], [False, False, False], "same key under other scopes is a new admission")
    _eq(len({a.submission_id, b.submission_id, c.submission_id}), 3, "distinct submission ids")
    found = await ledger.get_by_idempotency_key("c1", "p2", "k")
    _eq(found.submission_id if found else None, b.submission_id, "lookup by idempotency key")
    mine = await ledger.get_by_idempotency_key("c1", "p1", "k")
    _eq(mine.submission_id if mine else None, a.submission_id, "the other principal's lookup: its own")
    _true(len({a.receipt, b.receipt}) == 2 and a.queue_seq != b.queue_seq, "distinct receipts and queue positions")
    replay = await ledger.admit("c1", "p1", "k", {"x": 1}, 9)
    _eq((replay.replayed, replay.submission_id), (True, a.submission_id), "the first principal's replay: its own")
    _eq(await ledger.get_by_idempotency_key("c2", "p2", "k"), None, "lookup of an unused key")


@_check("admit-queue-seq-increasing")
async def _(ledger) -> None:
    """Peer cases ``admissionIdempotency`` and ``fifoHeadClaim`` (a later admission, a higher queue
    position)."""
    seqs = [(await ledger.admit("c1", "p1", f"k{i}", i, i)).queue_seq for i in range(5)]
    _true(all(a < b for a, b in zip(seqs, seqs[1:])), f"queue_seq not strictly increasing: {seqs}")
    other = await ledger.admit("c2", "p1", "k0", 0, 0)
    _eq(other.queue_seq, 1, "queue_seq is per conversation")


# --- readiness and claim --------------------------------------------------------------


@_check("mark-ready-idempotent")
async def _(ledger) -> None:
    """Peer cases ``admissionIdempotency`` and ``lookupByIdAndKey`` (mark_ready twice: ready, its
    first time kept)."""
    result = await _admitted(ledger, ready=False)
    _eq((await ledger.get(result.submission_id)).ready_at_ms, None, "not ready: no ready_at_ms")
    first = await ledger.mark_ready(result.submission_id, 40)
    _eq(first, Readiness(result.submission_id, 40, False), "the first mark")
    again = await ledger.mark_ready(result.submission_id, 90)
    _eq(again, Readiness(result.submission_id, 40, True), "a repeat replays the first ready_at_ms")
    record = await ledger.get(result.submission_id)
    _eq((record.ready, record.ready_at_ms), (True, 40), "ready after mark_ready, at its first time")
    await _raises(UnknownSubmission, ledger.mark_ready("sub-none-1", 1), "mark_ready of an unknown id")


@_check("claim-fifo-head-only")
async def _(ledger) -> None:
    """Peer cases ``fifoHeadClaim``, ``concurrentAdmissionFifo`` (claims in queue order, none on a
    drained lane) and ``claimNeverGrantsBlockedHead`` (an unready head blocks what is behind it)."""
    first = await _admitted(ledger, key="k1", ready=False)
    second = await _admitted(ledger, key="k2", ready=True)
    _eq(await ledger.claim("c1", "o1", 1_000, 100), None, "a ready submission behind an unready head")
    await ledger.mark_ready(first.submission_id, 1)
    claim = await _claimed(ledger)
    _eq(claim.submission_id, first.submission_id, "claim takes the lowest unsettled queue_seq")
    await ledger.reserve_settlement(claim, _env(claim, COMPLETED_RECORD))
    await ledger.finalize_settlement(first.submission_id, 200)
    nxt = await _claimed(ledger, owner_id="o2", now_ms=300)
    _eq(nxt.submission_id, second.submission_id, "after settlement the next one is the head")
    settled = await ledger.get_by_idempotency_key("c1", "p1", "k1")
    _eq((settled.submission_id, settled.receipt, settled.outcome), (first.submission_id, first.receipt, "completed"),
        "a settled admission is still found by its key, with its outcome")
    _eq(await ledger.claim("c-empty", "o1", 1_000, 100), None, "claim on an empty conversation")


@_check("claim-requires-ready")
async def _(ledger) -> None:
    """Peer case ``fifoHeadClaim``."""
    result = await _admitted(ledger, ready=False)
    _eq(await ledger.claim("c1", "o1", 1_000, 100), None, "an unready head without abort intent")
    await ledger.mark_ready(result.submission_id, 1)
    _eq((await _claimed(ledger)).submission_id, result.submission_id, "claimable once ready")


@_check("claim-unready-head-with-abort-intent")
async def _(ledger) -> None:
    """Peer cases ``abortIdempotency`` (an admitted, unready submission's
    abort and its repeat), ``queuedAbortSettlementAuthority`` and
    ``abortedSettledRowIsNotAJoiningGap`` (an aborted queued submission
    needs no owner)."""
    # An unknown head (admitted, its receipt never sent) is claimable only for
    # cleanup once its durable abort intent exists; never claimed, the intent
    # settles it at once (there is nothing of it in the log to clean up).
    result = await _admitted(ledger, ready=False)
    _eq((await ledger.get(result.submission_id)).abort_author, None, "no intent yet")
    intent = await ledger.request_abort(result.submission_id, "user:1", "cancelled", 400)
    _eq(intent.settled_at_ms, 400, "an unknown head never claimed settles by its intent")
    again = await ledger.request_abort(result.submission_id, "user:2", "another reason", 1_400)
    _eq(again, attrs.evolve(intent, replayed=True), "a repeat returns the original author, reason and time")
    _eq(await ledger.claim("c1", "o1", 1_000, 450), None, "nothing left to claim")
    record = await ledger.get(result.submission_id)
    _eq((record.outcome, record.settled_at_ms, record.reserved_record),
        ("aborted", 400, _env_for(result.submission_id, {"outcome": "aborted"}, 400, receipt=result.receipt)),
        "settled aborted with the aborted record, in its envelope created when the intent settled it")
    _eq(record.reserved_digest, _digest(record.reserved_record), "its digest is its envelope's")


@_check("claim-respects-live-lease")
async def _(ledger) -> None:
    """Peer cases ``fifoHeadClaim`` (another owner during a live lease gets none) and
    ``leaseExpiryReclaim`` (after expiry it takes over)."""
    await _admitted(ledger)
    first = await _claimed(ledger, owner_id="o1", lease_ms=1_000, now_ms=100)
    _eq(first.lease_expires_ms, 1_100, "lease expiry = now + lease")
    _eq(await ledger.claim("c1", "o2", 1_000, 1_099), None, "another owner during a live lease")
    second = await _claimed(ledger, owner_id="o2", lease_ms=1_000, now_ms=1_100)
    _eq(second.owner_id, "o2", "claim after expiry")
    snapshot = await ledger.load_recovery_snapshot("c1")
    _eq(snapshot.submissions[0].owner_id, "o2", "owner after takeover")


@_check("claim-epoch-increasing")
async def _(ledger) -> None:
    """Peer cases ``fifoHeadClaim`` and ``leaseExpiryReclaim`` (each claim a higher epoch and a new
    attempt id)."""
    await _admitted(ledger)
    epochs = []
    attempts = []
    for i in range(4):
        claim = await _claimed(ledger, owner_id=f"o{i}", lease_ms=10, now_ms=100 + 10 * i)
        epochs.append(claim.epoch)
        attempts.append(claim.attempt_id)
        _eq(claim.attempt_id, f"{claim.submission_id}#a{claim.epoch}", "the attempt id names the claim")
        _eq((await ledger.get(claim.submission_id)).attempt_id, claim.attempt_id, "the row holds the latest attempt")
    _true(all(a < b for a, b in zip(epochs, epochs[1:])), f"epochs not strictly increasing: {epochs}")
    _eq(len(set(attempts)), len(attempts), f"attempt ids differ per claim: {attempts}")
    _eq((await ledger.load_recovery_snapshot("c1")).epoch, epochs[-1], "snapshot carries the current epoch")


HANDOFF_SCENARIOS = ("live", "stale", "abort", "approval", "gap", "ready-prefix", "unapplied", "foreign", "ready")


@_check("claim-handoff-grants-only-the-next-ready")
async def _(ledger) -> None:
    """Peer case ``cooperativeHandoff`` (nine scenarios): a producer that
    applied the head's input and released it hands the lane to the next
    ready submission — ``claim(B, handoff=ClaimHandoff(epoch, (first,),
    next))`` grants exactly ``next`` at a higher epoch only in "ready"; none
    in "live" (not released), "stale" (another claim since), "abort",
    "approval" (suspended), "gap" (an admitted-only row between),
    "ready-prefix" (another ready row between), "unapplied" and "foreign"
    (another conversation's submission). Once ``next`` settles, an ordinary
    claim grants ``first`` again; receipts are unchanged."""
    foreign = await _admitted(ledger, conversation_id="elsewhere", key="foreign")
    for scenario in HANDOFF_SCENARIOS:
        cid = f"handoff-{scenario}"
        first = await _admitted(ledger, conversation_id=cid, key="first")
        claim = await _claimed(ledger, conversation_id=cid, owner_id="A", now_ms=100)
        if scenario != "unapplied":
            await ledger.mark_input_applied(claim, *_input_at(claim))
        if scenario in ("gap", "ready-prefix"):
            await _admitted(ledger, conversation_id=cid, key="between", ready=scenario == "ready-prefix")
        nxt = await _admitted(ledger, conversation_id=cid, key="next")
        if scenario == "approval":
            await ledger.suspend(claim, ("call-1",))
        elif scenario != "live":
            await ledger.release_ownership(claim)
        if scenario == "abort":
            await ledger.request_abort(first.submission_id, "user", "stop", 150)
        if scenario == "stale":
            await ledger.release_ownership(await _claimed(ledger, conversation_id=cid, owner_id="B", now_ms=150))
        handoff = ClaimHandoff(claim.epoch, (first.submission_id,),
                               foreign.submission_id if scenario == "foreign" else nxt.submission_id)
        granted = await ledger.claim(cid, "B", 1_000, 200, handoff=handoff)
        if scenario != "ready":
            _eq(granted, None, f"{scenario}: a handoff claim grants nothing")
            continue
        _true(isinstance(granted, Claim), f"ready: the handoff claim returned {granted!r}")
        _eq((granted.submission_id, granted.owner_id, granted.attempt_id),
            (nxt.submission_id, "B", f"{nxt.submission_id}#a{granted.epoch}"), "ready: the next one, to B")
        _true(granted.epoch > claim.epoch, f"ready: epoch {granted.epoch} not above the producer's {claim.epoch}")
        await ledger.mark_input_applied(granted, *_input_at(granted))
        await ledger.reserve_settlement(granted, _env(granted, COMPLETED_RECORD))
        await ledger.finalize_settlement(nxt.submission_id, 300)
        again = await _claimed(ledger, conversation_id=cid, owner_id="A", now_ms=400)
        _eq(again.submission_id, first.submission_id, "after the handed-to one settled: the deferred head again")
        _true(again.epoch > granted.epoch, "the deferred head's new claim fences the handoff's epoch")
        _eq(((await ledger.get(first.submission_id)).receipt, (await ledger.get(nxt.submission_id)).receipt),
            (first.receipt, nxt.receipt), "receipts unchanged")
    await _raises(TypeError, ledger.claim("handoff-ready", "B", 1_000, 500, handoff=("not", "a", "handoff")),
                  "a handoff that is not a ClaimHandoff")


# --- ownership ---------------------------------------------------------------------


@_check("renew-never-shortens")
async def _(ledger) -> None:
    """Peer case ``leaseExpiryReclaim`` (renewals)."""
    await _admitted(ledger)
    claim = await _claimed(ledger, lease_ms=1_000, now_ms=100)
    renewal = await ledger.renew_ownership(claim, 10, 200)
    _eq(renewal.lease_expires_ms, 1_100, "a short renewal keeps the longer lease")
    renewal = await ledger.renew_ownership(claim, 2_000, 500)
    _eq(renewal.lease_expires_ms, 2_500, "a long renewal extends")
    _eq((renewal.epoch, renewal.owner_id), (claim.epoch, claim.owner_id), "renewal keeps epoch and owner")
    _eq((await ledger.get(claim.submission_id)).lease_expires_ms, 2_500, "stored lease")
    lapsed = await ledger.renew_ownership(claim, 100, 2_600)
    _eq((lapsed.epoch, lapsed.lease_expires_ms), (claim.epoch, 2_700),
        "a lapsed lease nobody claimed since renews, strictly later")
    taken = await _claimed(ledger, owner_id="o2", now_ms=2_800)
    exc = await _raises(OwnershipLost, ledger.renew_ownership(claim, 100, 2_900), "renew once another owner claimed")
    _eq(exc.actual_epoch, taken.epoch, "names the reclaim epoch")
    _eq((await ledger.renew_ownership(taken, 100, 2_900)).epoch, taken.epoch, "the new token renews")


@_check("release-ownership")
async def _(ledger) -> None:
    """Peer case ``releaseMakesHeadClaimable``."""
    await _admitted(ledger)
    claim = await _claimed(ledger, lease_ms=10_000, now_ms=100)
    await ledger.release_ownership(claim)
    await ledger.release_ownership(claim)  # idempotent for the releasing token
    record = await ledger.get(claim.submission_id)
    _eq((record.owner_id, record.lease_expires_ms), (None, None), "released ownership")
    await _raises(OwnershipLost, ledger.mark_input_applied(claim, *_input_at(claim)), "token used after release")
    await _raises(OwnershipLost, ledger.renew_ownership(claim, 1_000, 150), "renew with a released token")
    other = await _claimed(ledger, owner_id="o2", now_ms=200)
    _true(other.epoch > claim.epoch, "claim after release gets a higher epoch")
    exc = await _raises(OwnershipLost, ledger.release_ownership(claim), "release by the old token once reclaimed")
    _eq(exc.actual_epoch, other.epoch, "names the new epoch")
    await ledger.reserve_settlement(other, _env(other, COMPLETED_RECORD))
    _eq((await ledger.finalize_settlement(other.submission_id, 300)).outcome, "completed", "the new owner settles")


@_check("mark-input-applied-idempotent")
async def _(ledger) -> None:
    """Peer case ``inputAppliedIdempotency``."""
    await _admitted(ledger)
    claim = await _claimed(ledger)
    _eq((await ledger.get(claim.submission_id)).input_applied, False, "not applied before the marker")
    first = await ledger.mark_input_applied(claim, "input:a#0", 3)
    _eq(first, InputApplied(claim.submission_id, "input:a#0", 3, False), "the first marker")
    again = await ledger.mark_input_applied(claim, "input:a#0", 3)
    _eq(again, InputApplied(claim.submission_id, "input:a#0", 3, True), "a repeat at the same position replays")
    record = await ledger.get(claim.submission_id)
    _eq((record.input_applied, record.input_record_id, record.input_seq), (True, "input:a#0", 3),
        "applied after the marker, at its position")


@_check("mark-input-applied-position-conflict")
async def _(ledger) -> None:
    """Peer case ``inputAppliedIdempotency`` (a conflicting marker fails, the original kept)."""
    await _admitted(ledger)
    claim = await _claimed(ledger, lease_ms=100, now_ms=100)
    await ledger.mark_input_applied(claim, "input:a#0", 3)
    before = await ledger.get(claim.submission_id)
    for record_id, seq in (("input:a#0", 4), ("input:b#0", 3)):
        exc = await _raises(InputMarkerConflict, ledger.mark_input_applied(claim, record_id, seq),
                            f"a marker at another position {record_id}/{seq}")
        _eq((exc.submission_id, exc.existing_record_id, exc.existing_seq, exc.attempted_record_id,
             exc.attempted_seq), (claim.submission_id, "input:a#0", 3, record_id, seq), "conflict fields")
    _eq(await ledger.get(claim.submission_id), before, "a refused marker writes nothing")
    successor = await _claimed(ledger, owner_id="o2", now_ms=300)
    replay = await ledger.mark_input_applied(successor, "input:a#0", 3)
    _eq(replay.replayed, True, "a successor marking the same position replays")
    await _raises(ValueError, ledger.mark_input_applied(successor, "input:a#0", 0), "a seq below 1")
    await _raises(TypeError, ledger.mark_input_applied(successor, 7, 3), "a record id that is not a str")


@_check("abort-idempotent-first-author")
async def _(ledger) -> None:
    """Peer case ``abortIdempotency`` (the first intent wins; an unknown id fails typed)."""
    result = await _admitted(ledger)
    await _claimed(ledger, now_ms=100)  # running: the intent waits for its owner
    first = await ledger.request_abort(result.submission_id, "alice", "first", 200)
    again = await ledger.request_abort(result.submission_id, "bob", "second", 300)
    _eq(first, AbortIntent(result.submission_id, "alice", "first", 200), "first intent")
    _eq(again, AbortIntent(result.submission_id, "alice", "first", 200, True), "a repeat returns the first intent")
    record = await ledger.get(result.submission_id)
    _eq((record.abort_author, record.abort_reason, record.abort_requested_at_ms, record.outcome),
        ("alice", "first", 200, None), "stored intent, not settled")
    await _raises(UnknownSubmission, ledger.request_abort("sub-none-1", "a", "r", 0), "abort of an unknown id")


@_check("abort-queued-stores-the-intent")
async def _(ledger) -> None:
    """Peer cases ``queuedAbortSettlementAuthority`` (the abort of a queued
    submission is an intent: it settles through the log, below) and
    ``abortIdempotency``; an abort of a terminalizing submission is
    ``AbortConflict``."""
    head = await _admitted(ledger, key="k1")
    queued = await _admitted(ledger, key="k2")
    claim = await _claimed(ledger, now_ms=100)
    _eq(claim.submission_id, head.submission_id, "the head runs")
    intent = await ledger.request_abort(queued.submission_id, "alice", "not needed", 150)
    _eq(intent, AbortIntent(queued.submission_id, "alice", "not needed", 150), "a queued abort stores the intent")
    record = await ledger.get(queued.submission_id)
    _eq((record.outcome, record.settled_at_ms, record.reserved_record, record.epoch, record.input_applied),
        (None, None, None, None, False), "open, never owned, nothing reserved: its aborter settles it")
    again = await ledger.request_abort(queued.submission_id, "bob", "again", 170)
    _eq(again, attrs.evolve(intent, replayed=True), "a repeat replays the first intent")
    _eq([r.submission_id for r in await ledger.scan_nonterminal()], [head.submission_id, queued.submission_id],
        "still open work")
    exc = await _raises(AbortConflict, _abort_after_reserve(ledger, claim), "abort of a terminalizing submission")
    _eq((exc.outcome, exc.settling), ("completed", True), "conflict names the reserved outcome")
    _eq((await ledger.get(head.submission_id)).abort_author, None, "a refused abort writes nothing")


# A token no claim ever granted: the ``QueuedAbort`` authority needs none.
def _bogus(submission_id: str) -> Claim:
    return Claim(submission_id, "BOGUS", 999, 0)


async def _queued_abort(ledger, submission_id: str, now_ms: int) -> Settlement:
    """A queued submission's abort, the ledger's part: the intent, the
    ``aborted`` reservation under the ``QueuedAbort`` authority (no
    ownership), then (the records in the log) its finalize."""
    await ledger.request_abort(submission_id, "ops", "not needed", now_ms)
    await ledger.reserve_settlement(_bogus(submission_id), _env_for(submission_id, {"outcome": "aborted"}, now_ms))
    return await ledger.finalize_settlement(submission_id, now_ms)


@_check("queued-abort-settlement-authority")
async def _(ledger) -> None:
    """Peer case ``queuedAbortSettlementAuthority``: with an abort intent and
    never claimed, a submission reserves ``aborted`` with no ownership (any
    token); without an intent, or any other outcome, the token is checked."""
    head = await _admitted(ledger, key="k1")
    s2 = await _admitted(ledger, key="k2")
    s3 = await _admitted(ledger, key="k3")
    await ledger.request_abort(s2.submission_id, "ops", "not needed", 50)
    aborted = _env_for(s2.submission_id, {"outcome": "aborted"}, 60)
    await _raises(OwnershipLost, ledger.reserve_settlement(
        _bogus(s3.submission_id), _env_for(s3.submission_id, {"outcome": "aborted"}, 60)),
        "reserve aborted without an abort intent, with a bogus token")
    await _raises(OwnershipLost, ledger.reserve_settlement(
        _bogus(s2.submission_id), _env_for(s2.submission_id, COMPLETED_RECORD, 60)),
        "reserve completed with the intent, with a bogus token")
    first = await ledger.reserve_settlement(_bogus(s2.submission_id), aborted)
    _eq((first.replayed, first.outcome, first.settlement_id), (False, "aborted", f"settlement:{s2.submission_id}"),
        "the QueuedAbort authority reserves aborted")
    again = await ledger.reserve_settlement(Claim(s2.submission_id, "other", 7, 0), aborted)
    _eq(again, attrs.evolve(first, replayed=True), "a replay (any token) replays")
    settled = await ledger.finalize_settlement(s2.submission_id, 70)
    _eq((settled.outcome, settled.replayed), ("aborted", False), "finalized aborted")
    _eq(((await ledger.get(s2.submission_id)).outcome, (await ledger.get(head.submission_id)).outcome,
         (await ledger.get(head.submission_id)).ready), ("aborted", None, True),
        "settled aborted while the head is still ready")
    exc = await _raises(SettlementConflict, ledger.request_abort(s2.submission_id, "bob", "again", 80),
                        "a second abort once it settled")
    _eq(exc.existing_outcome, "aborted", "names the settled outcome")
    _eq([r.submission_id for r in await ledger.scan_nonterminal()], [head.submission_id, s3.submission_id],
        "not open work")


@_check("aborted-settled-row-is-not-a-joining-gap")
async def _(ledger) -> None:
    """Peer case ``abortedSettledRowIsNotAJoiningGap``; a queued row whose
    abort is not settled yet is a gap (the model's choice: a host never takes
    a submission whose abort intent is durable, so it never settles with the
    host's outcome)."""
    head = await _admitted(ledger, key="k1")
    s2 = await _admitted(ledger, key="k2")
    s3 = await _admitted(ledger, key="k3")
    s4 = await _admitted(ledger, key="k4")
    s5 = await _admitted(ledger, key="k5")
    await _queued_abort(ledger, s2.submission_id, 50)
    await ledger.request_abort(s4.submission_id, "ops", "not needed", 55)  # intent only: a gap
    before = await ledger.get(s2.submission_id)
    claim = await _claimed(ledger, now_ms=100)
    _eq(claim.submission_id, head.submission_id, "the head is claimed")
    batch = await ledger.begin_join(claim, 8)
    _eq(batch.follower_ids, (s3.submission_id,), "the aborted-settled row is no gap; an aborting one is")
    _eq(await ledger.get(s2.submission_id), before, "the settled row is unchanged")
    _eq(((await ledger.get(s4.submission_id)).join_host, (await ledger.get(s5.submission_id)).join_host),
        (None, None), "nothing taken at or behind the gap")


async def _abort_after_reserve(ledger, claim) -> None:
    await ledger.reserve_settlement(claim, _env(claim, COMPLETED_RECORD))
    await ledger.request_abort(claim.submission_id, "alice", "late", 180)


@_check("reserve-refused-after-abort-intent")
async def _(ledger) -> None:
    """Peer case ``queuedAbortSettlementAuthority`` (with an intent only the aborted record
    settles)."""
    result = await _admitted(ledger)
    claim = await _claimed(ledger, now_ms=100)
    await ledger.request_abort(result.submission_id, "alice", "stop", 200)
    before = await ledger.get(result.submission_id)
    for record in (COMPLETED_RECORD, FAILED_RECORD):
        exc = await _raises(AbortRequested, ledger.reserve_settlement(claim, _env(claim, record)),
                            f"reserve {record['outcome']} after the abort intent")
        _eq((exc.submission_id, exc.author, exc.attempted_outcome), (result.submission_id, "alice", record["outcome"]),
            "AbortRequested fields")
    _eq(await ledger.get(result.submission_id), before, "a refused reservation writes nothing")
    await ledger.reserve_settlement(claim, _env(claim, ABORTED_RECORD))
    settled = await ledger.finalize_settlement(result.submission_id, 300)
    _eq(settled.outcome, "aborted", "the owner settles aborted")


@_check("abort-settled-conflict")
async def _(ledger) -> None:
    """Peer cases ``abortIdempotency`` (an abort of a settled submission) and
    ``unknownAbortClaim`` (a repeat of the intent that settled it): a settled
    submission answers ``SettlementConflict`` naming its outcome, whether or
    not an intent exists; while it is still terminalizing, the intent replays."""
    result = await _admitted(ledger)
    claim = await _claimed(ledger)
    await ledger.reserve_settlement(claim, _env(claim, COMPLETED_RECORD))
    await ledger.finalize_settlement(result.submission_id, 300)
    before = await ledger.get(result.submission_id)
    exc = await _raises(SettlementConflict, ledger.request_abort(result.submission_id, "alice", "late", 400),
                        "abort after settlement")
    _eq((exc.submission_id, exc.existing_outcome), (result.submission_id, "completed"),
        "conflict names the settled outcome")
    _eq(await ledger.get(result.submission_id), before, "a refused abort writes nothing")
    aborted = await _admitted(ledger, key="k2")
    owner = await _claimed(ledger, owner_id="o2", now_ms=500)
    _eq(owner.submission_id, aborted.submission_id, "the next one runs")
    first = await ledger.request_abort(aborted.submission_id, "alice", "stop", 600)
    await ledger.reserve_settlement(owner, _env(owner, ABORTED_RECORD))
    again = await ledger.request_abort(aborted.submission_id, "bob", "again", 650)
    _eq(again, attrs.evolve(first, replayed=True), "terminalizing: the first intent replays")
    await ledger.finalize_settlement(aborted.submission_id, 700)
    exc = await _raises(SettlementConflict, ledger.request_abort(aborted.submission_id, "alice", "stop", 800),
                        "the same abort once it settled")
    _eq(exc.existing_outcome, "aborted", "names the settled outcome")


# --- unknown tool outcomes -------------------------------------------------------------


@_check("unknown-outcome-blocks-the-lane")
async def _(ledger) -> None:
    """Peer case ``claimNeverGrantsBlockedHead`` (an unknown head)."""
    result = await _admitted(ledger)
    await _admitted(ledger, key="k2")
    claim = await _claimed(ledger, now_ms=100)
    await _raises(TransitionRefused, ledger.mark_unknown(claim, "call-1"), "mark_unknown before the input is applied")
    await ledger.mark_input_applied(claim, *_input_at(claim))
    marked = await ledger.mark_unknown(claim, "call-1")
    _eq(marked, UnknownMarked(result.submission_id, "call-1", False), "marked")
    _eq(await ledger.mark_unknown(claim, "call-1"), UnknownMarked(result.submission_id, "call-1", True),
        "a repeat by the marking token replays")
    record = await ledger.get(result.submission_id)
    _eq((record.owner_id, record.lease_expires_ms, record.unknown_calls), (None, None, {"call-1": None}),
        "ownership ended, the call open")
    await _raises(OwnershipLost, ledger.renew_ownership(claim, 1_000, 200), "the marking token no longer owns it")
    for owner, now_ms in (("o1", 300), ("o2", 5_000)):  # nothing claims it: not the head, not what is behind it
        _eq(await ledger.claim("c1", owner, 1_000, now_ms), None, f"claim by {owner} of an unknown head")
    snapshot = await ledger.load_recovery_snapshot("c1")
    _eq(snapshot.submissions[0].unknown_open, 1, "the snapshot shows the open call")


@_check("unknown-resolution-idempotent-first-wins")
async def _(ledger) -> None:
    """Peer cases ``unknownResolutionLifecycle`` and the adapter check that a key-reordered
    ``CompletedWithResult`` result is an identical replay."""
    result = await _admitted(ledger)
    claim = await _claimed(ledger, now_ms=100)
    await ledger.mark_input_applied(claim, *_input_at(claim))
    await ledger.mark_unknown(claim, "call-1")
    await _raises(UnknownToolCall, ledger.resolve_unknown(result.submission_id, "call-9", "SafeToRetry", "r", None, 1),
                  "resolution of a call never marked")
    first = await ledger.resolve_unknown(result.submission_id, "call-1", "CompletedWithResult", "reconciler",
                                         {"rows": 2, "ok": True}, 400)
    _eq(first, UnknownResolution(result.submission_id, "call-1", "CompletedWithResult", "reconciler", 400,
                                 {"rows": 2, "ok": True}, False, 0), "the first resolution")
    again = await ledger.resolve_unknown(result.submission_id, "call-1", "CompletedWithResult", "other",
                                         {"ok": True, "rows": 2}, 900)
    _eq(again, UnknownResolution(result.submission_id, "call-1", "CompletedWithResult", "reconciler", 400,
                                 {"rows": 2, "ok": True}, True, 0), "a repeat (key order irrelevant) replays it")
    for resolution, value in (("NeverHappened", None), ("CompletedWithResult", {"rows": 3})):
        exc = await _raises(ResolutionConflict, ledger.resolve_unknown(result.submission_id, "call-1", resolution,
                                                                       "r", value, 950), f"a contrary {resolution}")
        _eq((exc.existing, exc.attempted), ("CompletedWithResult", resolution), "conflict fields")
    await _raises(ValueError, ledger.resolve_unknown(result.submission_id, "call-1", "SafeToRetry", "r", {"x": 1}, 1),
                  "a result on a resolution that carries none")
    await _raises(ValueError, ledger.resolve_unknown(result.submission_id, "call-1", "Maybe", "r", None, 1),
                  "an unknown resolution kind")
    claim2 = await _claimed(ledger, owner_id="o2", now_ms=5_000)
    _eq(claim2.submission_id, result.submission_id, "resolved: claimable again")
    _true(claim2.epoch > claim.epoch, "at a higher epoch")
    record = await ledger.get(result.submission_id)
    _eq(record.unknown_calls, {"call-1": {"resolution": "CompletedWithResult", "resolver": "reconciler",
                                          "resolvedAtMs": 400, "result": {"rows": 2, "ok": True}}}, "stored")
    exc = await _raises(ResolutionConflict, ledger.mark_unknown(claim2, "call-1"), "marking a resolved call again")
    _eq((exc.existing, exc.attempted), ("CompletedWithResult", "unknown"), "conflict fields")


@_check("unknown-claimable-only-to-abort")
async def _(ledger) -> None:
    """Peer cases ``unknownAbortClaim`` and ``unknownResolutionLifecycle`` (a resolution once
    settled)."""
    result = await _admitted(ledger)
    claim = await _claimed(ledger, now_ms=100)
    await ledger.mark_input_applied(claim, *_input_at(claim))
    await ledger.mark_unknown(claim, "call-1")
    intent = await ledger.request_abort(result.submission_id, "ops", "give up", 200)
    _eq(intent.settled_at_ms, None, "an unknown head was claimed once: the intent waits for a cleanup owner")
    cleanup = await _claimed(ledger, owner_id="o2", now_ms=300)
    _eq(cleanup.submission_id, result.submission_id, "with its abort intent the unknown head is claimable")
    await _raises(AbortRequested, ledger.reserve_settlement(cleanup, _env(cleanup, COMPLETED_RECORD)),
                  "the cleanup owner cannot settle it any other way than aborted")
    await ledger.reserve_settlement(cleanup, _env(cleanup, {"outcome": "aborted"}))
    settled = await ledger.finalize_settlement(result.submission_id, 400)
    _eq(settled.outcome, "aborted", "settled aborted")
    before = await ledger.get(result.submission_id)
    exc = await _raises(SettlementConflict, ledger.resolve_unknown(result.submission_id, "call-1", "NeverHappened",
                                                                   "reconciler", None, 500),
                        "a resolution after settlement")
    _eq(exc.existing_outcome, "aborted", "names the settled outcome")
    _eq(await ledger.get(result.submission_id), before, "and writes nothing")


# --- suspension and approvals ------------------------------------------------------------


@_check("suspension-waits-for-every-approval")
async def _(ledger) -> None:
    """Peer cases ``approvalDecisionIdempotency`` and
    ``suspendResumesImmediatelyWhenDecided``."""
    result = await _admitted(ledger)
    claim = await _claimed(ledger, now_ms=100)
    await _raises(TransitionRefused, ledger.suspend(claim, ("call-1",)), "suspend before the input is applied")
    await ledger.mark_input_applied(claim, *_input_at(claim))
    await _raises(UnknownApproval, ledger.decide_approval(result.submission_id, "call-1", "approved", "r", "ok", 1),
                  "a decision nobody waits for")
    suspension = await ledger.suspend(claim, ("call-1", "call-2", "call-1"))
    _eq(suspension, Suspension(result.submission_id, ("call-1", "call-2"), False), "suspended on both")
    _eq(await ledger.suspend(claim, ("call-2", "call-1")),
        Suspension(result.submission_id, ("call-2", "call-1"), False, True), "a repeat by the suspending token")
    await _raises(OwnershipLost, ledger.renew_ownership(claim, 1_000, 200), "suspension ended ownership")
    _eq(await ledger.claim("c1", "o2", 1_000, 5_000), None, "a suspended head is not claimable")
    first = await ledger.decide_approval(result.submission_id, "call-1", "approved", "alice", "fine", 300)
    _eq(first, ApprovalDecision(result.submission_id, "call-1", "approved", "alice", "fine", 300, False, 1),
        "one decided, one pending")
    _eq(await ledger.claim("c1", "o2", 1_000, 5_100), None, "still waiting for the other")
    again = await ledger.decide_approval(result.submission_id, "call-1", "approved", "bob", "again", 400)
    _eq(again, ApprovalDecision(result.submission_id, "call-1", "approved", "alice", "fine", 300, True, 1),
        "a repeat returns the original decision, resolver, reason and time")
    exc = await _raises(ApprovalConflict, ledger.decide_approval(result.submission_id, "call-1", "rejected", "bob",
                                                                 "no", 450), "a contrary decision")
    _eq((exc.existing, exc.attempted), ("approved", "rejected"), "conflict fields")
    last = await ledger.decide_approval(result.submission_id, "call-2", "rejected", "carol", "too risky", 500)
    _eq((last.pending, last.replayed), (0, False), "the last decision")
    resumed = await _claimed(ledger, owner_id="o2", now_ms=5_200)
    _eq(resumed.submission_id, result.submission_id, "resumed: claimable again")
    again = await ledger.suspend(resumed, ("call-1", "call-2"))
    _eq(again, Suspension(result.submission_id, (), True), "everything decided already: resumed at once")
    _eq((await _claimed(ledger, owner_id="o3", now_ms=5_300)).submission_id, result.submission_id,
        "and claimable at once")
    record = await ledger.get(result.submission_id)
    _eq(record.approvals, {"call-1": {"decision": "approved", "resolver": "alice", "reason": "fine",
                                      "decidedAtMs": 300},
                           "call-2": {"decision": "rejected", "resolver": "carol", "reason": "too risky",
                                      "decidedAtMs": 500}}, "stored decisions")
    owner = await _claimed(ledger, owner_id="o4", now_ms=9_000)
    await ledger.reserve_settlement(owner, _env(owner, FAILED_RECORD))
    await ledger.finalize_settlement(result.submission_id, 9_100)
    for call, decision in (("call-1", "approved"), ("call-3", "approved")):  # a replay, a new call
        exc = await _raises(SettlementConflict, ledger.decide_approval(result.submission_id, call, decision, "bob",
                                                                       "late", 9_200), f"deciding {call} once settled")
        _eq(exc.existing_outcome, "failed", "names the settled outcome")


@_check("suspended-claimable-only-to-abort")
async def _(ledger) -> None:
    """Peer cases ``claimNeverGrantsBlockedHead`` (a suspended head) and ``unknownAbortClaim`` (its
    abort intent makes it claimable for aborted settlement)."""
    result = await _admitted(ledger)
    claim = await _claimed(ledger, now_ms=100)
    await ledger.mark_input_applied(claim, *_input_at(claim))
    await ledger.suspend(claim, ("call-1",))
    snapshot = await ledger.load_recovery_snapshot("c1")
    _eq(snapshot.submissions[0].approvals_pending, 1, "the snapshot shows the pending approval")
    await ledger.request_abort(result.submission_id, "ops", "nobody answers", 200)
    cleanup = await _claimed(ledger, owner_id="o2", now_ms=300)
    _eq(cleanup.submission_id, result.submission_id, "with its abort intent a suspended head is claimable")
    await _raises(AbortRequested, ledger.reserve_settlement(cleanup, _env(cleanup, COMPLETED_RECORD)), "only aborted")
    await ledger.reserve_settlement(cleanup, _env(cleanup, {"outcome": "aborted"}))
    _eq((await ledger.finalize_settlement(result.submission_id, 400)).outcome, "aborted", "settled aborted")


# --- joins ----------------------------------------------------------------------------


@_check("join-takes-the-ready-prefix-and-stops-at-a-gap")
async def _(ledger) -> None:
    """Peer cases ``joiningPrefixClaim``, ``revertJoiningReturnsToReady``,
    ``markJoinedIdempotency``, ``abortedSettledRowIsNotAJoiningGap`` and
    ``claimNeverGrantsBlockedHead`` (a joining or joined one is never aborted alone:
    ``JoinedToHost``)."""
    host = await _admitted(ledger, key="k1")
    ready2 = await _admitted(ledger, key="k2")
    aborted3 = await _admitted(ledger, key="k3")
    ready4 = await _admitted(ledger, key="k4")
    unready5 = await _admitted(ledger, key="k5", ready=False)
    ready6 = await _admitted(ledger, key="k6")
    await _queued_abort(ledger, aborted3.submission_id, 50)  # settled: no gap
    claim = await _claimed(ledger, now_ms=100)
    _eq(claim.submission_id, host.submission_id, "the host is the head")
    batch = await ledger.begin_join(claim, 8)
    _eq(batch, JoinBatch(host.submission_id, (JoiningFollower(ready2.submission_id, 2, {"text": "k2"}),
                                              JoiningFollower(ready4.submission_id, 4, {"text": "k4"}))),
        "the contiguous ready prefix: an aborted one is no gap, an unready one is")
    _eq(await ledger.begin_join(claim, 8), JoinBatch(host.submission_id, (), True),
        "a repeat takes nothing: already joining rows are not answered again")
    _eq((await ledger.get(unready5.submission_id)).join_host, None, "the gap was not skipped")
    _eq((await ledger.get(ready6.submission_id)).join_host, None, "nor anything behind it")
    exc = await _raises(JoinedToHost, ledger.request_abort(ready2.submission_id, "ops", "stop", 120),
                        "abort of a joining follower")
    _eq(exc.host_submission_id, host.submission_id, "JoinedToHost names the host")
    await _raises(JoinedToHost, ledger.finalize_settlement(ready2.submission_id, 130), "a follower finalized alone")
    marked = await ledger.mark_joined(claim, ready2.submission_id, "input:2", 3)
    _eq(marked, JoinMarked(ready2.submission_id, host.submission_id, "input:2", 3), "joined at its log position")
    _eq(await ledger.mark_joined(claim, ready2.submission_id, "input:2", 3),
        JoinMarked(ready2.submission_id, host.submission_id, "input:2", 3, True), "a repeat replays")
    await _raises(TransitionRefused, ledger.mark_joined(claim, ready2.submission_id, "input:9", 9),
                  "joined elsewhere in the log")
    await ledger.revert_join(claim, ready2.submission_id)  # joined: a no-op
    joined = await ledger.get(ready2.submission_id)
    _eq((joined.join_host, joined.joined_seq), (host.submission_id, 3), "a joined follower stays joined")
    await ledger.revert_join(claim, ready4.submission_id)
    await ledger.revert_join(claim, ready4.submission_id)  # idempotent
    _eq((await ledger.get(ready4.submission_id)).join_host, None, "reverted to ready")
    again = await ledger.begin_join(claim, 8)
    _eq(again.follower_ids, (ready4.submission_id,), "a reverted one is taken again, and only it")


@_check("join-revert-returns-to-ready")
async def _(ledger) -> None:
    """Peer case ``revertJoiningReturnsToReady``: a reverted joining row is
    ready with no host link and leaves the host's joins; reverting it again,
    or reverting a joined one, changes nothing (no error); the next join
    takes exactly the reverted one."""
    host = await _admitted(ledger, key="k1")
    s2 = await _admitted(ledger, key="k2")
    s3 = await _admitted(ledger, key="k3")
    claim = await _claimed(ledger, now_ms=100)
    _eq(len((await ledger.begin_join(claim, 8)).followers), 2, "two rows taken")
    await ledger.mark_joined(claim, s3.submission_id, "input:3", 7)
    await ledger.revert_join(claim, s2.submission_id)
    back = await ledger.get(s2.submission_id)
    _eq((back.join_host, back.ready), (None, True), "reverted: ready, the host link cleared")
    snapshot = await ledger.load_recovery_snapshot("c1")
    _eq([(row.submission_id, row.state) for row in snapshot.submissions if row.join_host == host.submission_id],
        [(s3.submission_id, "joined")], "the host's joins: the joined one")
    await ledger.revert_join(claim, s2.submission_id)
    _eq((await ledger.get(s2.submission_id)).join_host, None, "reverting it again: still ready")
    await ledger.revert_join(claim, s3.submission_id)
    still = await ledger.get(s3.submission_id)
    _eq((still.join_host, still.joined_seq), (host.submission_id, 7), "reverting a joined one: a no-op, joined")
    _eq((await ledger.get(host.submission_id)).joined_count, 1, "the host still holds it")
    _eq((await ledger.begin_join(claim, 8)).follower_ids, (s2.submission_id,), "the next join takes exactly it")


@_check("join-prefix-by-limit")
async def _(ledger) -> None:
    """Peer cases ``joiningPrefixClaim`` and ``markJoinedIdempotency``: a
    token never issued takes nothing; the limit bounds the prefix; each
    call answers only the rows it took, each with its queue position and
    input (already joining rows are skipped in the answer); an unready one
    is a gap until it is made ready; the snapshot links each follower to
    its host."""
    host = await _admitted(ledger, key="k1")
    s2 = await _admitted(ledger, key="k2", input={"queued": 2})
    s3 = await _admitted(ledger, key="k3", input={"queued": 3})
    s4 = await _admitted(ledger, key="k4", input={"queued": 4}, ready=False)
    s5 = await _admitted(ledger, key="k5", input={"queued": 5})
    claim = await _claimed(ledger, now_ms=100)
    bogus = attrs.evolve(claim, epoch=claim.epoch + 100)
    await _raises(OwnershipLost, ledger.begin_join(bogus, 1), "a token never issued")
    _eq((await ledger.get(s2.submission_id)).join_host, None, "a fenced join takes nothing")
    first = await ledger.begin_join(claim, 1)
    _eq(first.followers, (JoiningFollower(s2.submission_id, s2.queue_seq, {"queued": 2}),),
        "limit 1: the first ready one, with its queue position and input")
    second = await ledger.begin_join(claim, 8)
    _eq((second.followers, second.replayed), ((JoiningFollower(s3.submission_id, s3.queue_seq, {"queued": 3}),),
                                              False), "up to the gap, the already joining one skipped")
    _eq(await ledger.begin_join(claim, 8), JoinBatch(host.submission_id, (), True), "again: nothing")
    snapshot = await ledger.load_recovery_snapshot("c1")
    states = {row.submission_id: row.state for row in snapshot.submissions}
    _eq([states[r.submission_id] for r in (s2, s4, s5)], ["joining", "admitted", "ready"],
        "the unready one is not taken, nor what is behind it")
    _eq([(row.submission_id, row.join_host, row.state) for row in snapshot.submissions if row.join_host],
        [(s2.submission_id, host.submission_id, "joining"), (s3.submission_id, host.submission_id, "joining")],
        "the host's joins, each linked to it")
    await ledger.mark_ready(s4.submission_id, 150)
    third = await ledger.begin_join(claim, 8)
    _eq(third.follower_ids, (s4.submission_id, s5.submission_id), "made ready: the prefix goes on")
    snapshot = await ledger.load_recovery_snapshot("c1")
    _eq([(row.submission_id, row.join_host) for row in snapshot.submissions],
        [(host.submission_id, None)] + [(r.submission_id, host.submission_id) for r in (s2, s3, s4, s5)],
        "each follower linked to its host")
    await _raises(OwnershipLost, ledger.mark_joined(bogus, s2.submission_id, "input:2", 3), "mark_joined, bogus")
    await ledger.release_ownership(claim)
    successor = await _claimed(ledger, owner_id="o2", now_ms=200)
    _eq(successor.submission_id, host.submission_id, "the host again, a higher epoch")
    await _raises(OwnershipLost, ledger.mark_joined(claim, s3.submission_id, "input:3", 4), "the old host token")
    marked = await ledger.mark_joined(successor, s3.submission_id, "input:3", 4)
    _eq((marked.host_submission_id, marked.seq), (host.submission_id, 4), "the new host token marks it")


@_check("joined-settle-through-their-host")
async def _(ledger) -> None:
    """Peer case ``joinedSettlementLinkageAuthority``: a joined follower settles through its host's
    link, whatever token."""
    host = await _admitted(ledger, key="k1")
    joined = await _admitted(ledger, key="k2")
    joining = await _admitted(ledger, key="k3")
    claim = await _claimed(ledger, now_ms=100)
    await ledger.mark_input_applied(claim, *_input_at(claim))
    await ledger.begin_join(claim, 2)
    await ledger.mark_joined(claim, joined.submission_id, "input:2", 2)
    await ledger.reserve_settlement(claim, _env(claim, FAILED_RECORD))
    settled = await ledger.finalize_settlement(host.submission_id, 500)
    _eq(settled.outcome, "failed", "the host settles")
    follower = await ledger.get(joined.submission_id)
    _eq((follower.outcome, follower.settled_at_ms, follower.reserved_record),
        ("failed", 500, _env_for(joined.submission_id, {"outcome": "failed", "diagnostic": FAILED_RECORD["diagnostic"]},
                                 100, receipt=joined.receipt)),
        "its joined follower settles with it: the host's outcome, no independent result, in an envelope "
        "created with its host's")
    _eq(follower.reserved_digest, _digest(follower.reserved_record), "the follower's digest is its envelope's")
    replay = await ledger.finalize_settlement(joined.submission_id, 900)
    _eq((replay.outcome, replay.settled_at_ms, replay.diagnostic), ("failed", 500, FAILED_RECORD["diagnostic"]),
        "a finalize of the settled follower replays its settlement")
    back = await ledger.get(joining.submission_id)
    _eq((back.join_host, back.outcome), (None, None), "a joining one goes back to ready")
    _eq((await _claimed(ledger, owner_id="o2", now_ms=600)).submission_id, joining.submission_id,
        "and is the next head")
    exc = await _raises(SettlementConflict, ledger.request_abort(joined.submission_id, "ops", "late", 700),
                        "abort of a settled follower")
    _eq(exc.existing_outcome, "failed", "names its outcome")


# --- child reservations -------------------------------------------------------------------


@_check("child-reservation-once-per-call")
async def _(ledger) -> None:
    """Peer cases ``childReservationIdempotency``, ``attachChildIdempotency``,
    ``beginReleaseFreezesAccountingOnce`` and ``releaseAppliedExactlyOnce``."""
    parent = await _admitted(ledger)
    claim = await _claimed(ledger, now_ms=100)
    await ledger.mark_input_applied(claim, *_input_at(claim))
    allocation = {"tokens": 1_000, "tools": ["search"], "ms": 60_000}
    first = await ledger.reserve_child(claim, "call-1", allocation)
    _eq((first.submission_id, first.tool_call_id, first.allocation, first.child_submission_id, first.replayed),
        (parent.submission_id, "call-1", allocation, None, False), "reserved")
    again = await ledger.reserve_child(claim, "call-1", dict(reversed(list(allocation.items()))))
    _eq((again.allocation_digest, again.replayed), (first.allocation_digest, True), "key order is irrelevant")
    exc = await _raises(ChildReservationConflict, ledger.reserve_child(claim, "call-1", {"tokens": 5}),
                        "another allocation at the same call")
    _eq(exc.what, "allocation", "conflict names what differs")
    await _raises(UnknownChildReservation, ledger.attach_child(claim, "call-9", "sub-child-1"), "attach unreserved")
    attached = await ledger.attach_child(claim, "call-1", "sub-child-1")
    _eq((attached.child_submission_id, attached.replayed), ("sub-child-1", False), "attached")
    _eq((await ledger.attach_child(claim, "call-1", "sub-child-1")).replayed, True, "attach again replays")
    await _raises(ChildReservationConflict, ledger.attach_child(claim, "call-1", "sub-child-2"), "another child")
    await ledger.reserve_settlement(claim, _env(claim, COMPLETED_RECORD))  # the parent terminalizes; the child may settle later
    released = await ledger.release_child(parent.submission_id, "call-1", {"tokens": 640, "cost": 0.25}, 700)
    _eq((released.accounting, released.released_at_ms, released.replayed), ({"tokens": 640, "cost": 0.25}, 700, False),
        "the accounting frozen at the first release")
    replay = await ledger.release_child(parent.submission_id, "call-1", {"cost": 0.25, "tokens": 640}, 900)
    _eq((replay.released_at_ms, replay.replayed), (700, True), "a repeat replays it")
    exc = await _raises(ChildReservationConflict, ledger.release_child(parent.submission_id, "call-1", {"tokens": 1},
                                                                        950), "another accounting")
    _eq(exc.what, "accounting", "conflict names what differs")
    record = await ledger.get(parent.submission_id)
    _eq(record.children["call-1"]["accounting"], {"tokens": 640, "cost": 0.25}, "stored")


@_check("child-reservation-by-a-running-owner")
async def _(ledger) -> None:
    """Peer case ``childReservationIdempotency`` (the running owner reserves; key order irrelevant)."""
    # The running owner reserves: its input need not be applied yet.
    parent = await _admitted(ledger)
    claim = await _claimed(ledger, now_ms=100)
    allocation = {"turns": 4, "toolCalls": 8}
    first = await ledger.reserve_child(claim, "call-1", allocation)
    _eq((first.submission_id, first.allocation, first.child_submission_id, first.replayed),
        (parent.submission_id, allocation, None, False), "reserved before the input is applied")
    again = await ledger.reserve_child(claim, "call-1", {"toolCalls": 8, "turns": 4})
    _eq((again.allocation_digest, again.replayed), (first.allocation_digest, True), "an identical retry replays")
    exc = await _raises(ChildReservationConflict, ledger.reserve_child(claim, "call-1", {"turns": 64, "toolCalls": 8}),
                        "another allocation at the same call")
    _eq(exc.what, "allocation", "conflict names what differs")
    attached = await ledger.attach_child(claim, "call-1", "sub-child-1")
    _eq((attached.child_submission_id, attached.replayed), ("sub-child-1", False), "attached while running")
    record = await ledger.get(parent.submission_id)
    _eq((record.input_applied, sorted(record.children)), (False, ["call-1"]), "one reservation, input not applied")


@_check("child-reservation-replay-before-fence")
async def _(ledger) -> None:
    """Peer case ``childReservationFencing``."""
    # An identical replay creates nothing: it is answered as a replay before
    # the token is checked, so a fenced (older) owner that retries learns
    # its reservation stands. Anything new stays fenced.
    parent = await _admitted(ledger)
    claim = await _claimed(ledger, now_ms=100)
    bogus = attrs.evolve(claim, epoch=claim.epoch + 100)
    await _raises(OwnershipLost, ledger.reserve_child(bogus, "call-1", {"turns": 4}), "a token never issued")
    _eq((await ledger.get(parent.submission_id)).children, None, "a fenced reservation writes nothing")
    first = await ledger.reserve_child(claim, "call-1", {"turns": 4})
    await ledger.release_ownership(claim)
    successor = await _claimed(ledger, owner_id="o2", now_ms=200)
    _true(successor.epoch > claim.epoch, "the successor claims at a higher epoch")
    await _raises(OwnershipLost, ledger.attach_child(claim, "call-1", "sub-child-1"), "a stale attach")
    await _raises(OwnershipLost, ledger.reserve_child(claim, "call-2", {"turns": 4}), "a stale new reservation")
    replay = await ledger.reserve_child(claim, "call-1", {"turns": 4})
    _eq(replay, attrs.evolve(first, replayed=True), "the stale owner's identical replay")
    attached = await ledger.attach_child(successor, "call-1", "sub-child-1")
    _eq((attached.child_submission_id, attached.replayed), ("sub-child-1", False), "the successor attaches")
    again = await ledger.attach_child(claim, "call-1", "sub-child-1")
    _eq((again.child_submission_id, again.replayed), ("sub-child-1", True), "the stale owner's identical attach")
    await _raises(ChildReservationConflict, ledger.attach_child(claim, "call-1", "sub-child-2"), "another child")
    record = await ledger.get(parent.submission_id)
    _eq((sorted(record.children), record.children["call-1"]["child"]), (["call-1"], "sub-child-1"),
        "nothing written by the fenced calls")


async def _parent_with_child(ledger, calls=("call-1",)) -> Claim:
    """A running parent (input applied) with a child reservation, attached,
    at each of ``calls``."""
    await _admitted(ledger)
    claim = await _claimed(ledger, now_ms=100)
    await ledger.mark_input_applied(claim, *_input_at(claim))
    for n, call in enumerate(calls, 1):
        await ledger.reserve_child(claim, call, {"tokens": 100 * n})
        await ledger.attach_child(claim, call, f"sub-child-{n}")
    return claim


@_check("suspend-on-child-woken-by-release")
async def _(ledger) -> None:
    """Peer cases ``recordChildSettledWake`` and ``suspendResumesImmediatelyForSettledChildren``
    (the release of the last awaited child wakes the parent; one released already resumes at once)."""
    claim = await _parent_with_child(ledger, ("call-2", "call-1"))
    sid = claim.submission_id
    suspension = await ledger.suspend(claim, (), ("call-1", "call-1"))
    _eq(suspension, Suspension(sid, (), False, False, ("call-1",)), "suspended on the child")
    _eq(await ledger.suspend(claim, [], ["call-1"]), Suspension(sid, (), False, True, ("call-1",)),
        "a repeat by the suspending token replays")
    await _raises(OwnershipLost, ledger.renew_ownership(claim, 1_000, 200), "suspension ended ownership")
    _eq(await ledger.claim("c1", "o2", 1_000, 5_000), None, "a parent awaiting its child is not claimable")
    record = await ledger.get(sid)
    _eq((record.children["call-1"]["awaited"], record.children["call-2"]["awaited"], record.children_awaited),
        (True, False, 1), "the awaited flag and count")
    snapshot = (await ledger.load_recovery_snapshot("c1")).submissions[0]
    _eq((snapshot.children_awaited, snapshot.children),
        (1, (("call-1", "sub-child-2", False), ("call-2", "sub-child-1", False))), "the snapshot shows the children")
    other = await ledger.release_child(sid, "call-2", {"tokens": 5}, 300)
    _eq((other.awaited, other.pending, other.replayed), (False, 1, False), "a release nobody awaits")
    _eq(await ledger.claim("c1", "o2", 1_000, 5_100), None, "still awaiting call-1")
    released = await ledger.release_child(sid, "call-1", {"tokens": 60}, 400)
    _eq((released.awaited, released.pending, released.released_at_ms, released.replayed), (True, 0, 400, False),
        "the awaited release: nothing pending")
    replay = await ledger.release_child(sid, "call-1", {"tokens": 60}, 450)
    _eq((replay.pending, replay.replayed, replay.released_at_ms), (0, True, 400), "a repeat replays")
    snapshot = (await ledger.load_recovery_snapshot("c1")).submissions[0]
    _eq((snapshot.children_awaited, snapshot.children),
        (0, (("call-1", "sub-child-2", True), ("call-2", "sub-child-1", True))), "both released")
    resumed = await _claimed(ledger, owner_id="o2", now_ms=5_200)
    _eq(resumed.submission_id, sid, "the release woke the parent: claimable again")
    again = await ledger.suspend(resumed, (), ("call-1",))
    _eq(again, Suspension(sid, (), True, False, ()), "the child released already: resumed at once")
    _eq((await _claimed(ledger, owner_id="o3", now_ms=5_300)).submission_id, sid, "and claimable at once")


@_check("suspend-on-approval-and-child")
async def _(ledger) -> None:
    """Peer cases ``recordChildSettledWake`` and ``suspendResumesImmediatelyWhenDecided`` (the last
    of both resumes)."""
    for order in ("decision-first", "release-first"):
        ledger_claim = await _parent_with_child(ledger) if order == "decision-first" else None
        if ledger_claim is None:
            # A second parent in its own conversation.
            await _admitted(ledger, conversation_id="c2")
            ledger_claim = await _claimed(ledger, conversation_id="c2", now_ms=100)
            await ledger.mark_input_applied(ledger_claim, *_input_at(ledger_claim))
            await ledger.reserve_child(ledger_claim, "call-1", {"tokens": 1})
        claim = ledger_claim
        sid = claim.submission_id
        conversation = "c1" if order == "decision-first" else "c2"
        suspension = await ledger.suspend(claim, ("ask-1",), ("call-1",))
        _eq(suspension, Suspension(sid, ("ask-1",), False, False, ("call-1",)), f"{order}: suspended on both")
        if order == "decision-first":
            decided = await ledger.decide_approval(sid, "ask-1", "approved", "alice", "ok", 200)
            _eq(decided.pending, 1, f"{order}: the child is still awaited")
            _eq(await ledger.claim(conversation, "o2", 1_000, 5_000), None, f"{order}: a decision alone does not resume")
            released = await ledger.release_child(sid, "call-1", {"tokens": 1}, 300)
            _eq(released.pending, 0, f"{order}: the release was the last")
        else:
            released = await ledger.release_child(sid, "call-1", {"tokens": 1}, 200)
            _eq(released.pending, 1, f"{order}: the approval is still pending")
            _eq(await ledger.claim(conversation, "o2", 1_000, 5_000), None, f"{order}: a release alone does not resume")
            decided = await ledger.decide_approval(sid, "ask-1", "approved", "alice", "ok", 300)
            _eq(decided.pending, 0, f"{order}: the decision was the last")
            replay = await ledger.decide_approval(sid, "ask-1", "approved", "bob", "again", 400)
            _eq((replay.pending, replay.replayed), (0, True), f"{order}: a repeat decision replays")
        resumed = await _claimed(ledger, conversation_id=conversation, owner_id="o2", now_ms=5_100)
        _eq(resumed.submission_id, sid, f"{order}: resumed by the last of both")


@_check("suspend-unknown-child")
async def _(ledger) -> None:
    """Peer case ``recordChildSettledWake`` (a child the parent never reserved)."""
    claim = await _parent_with_child(ledger)
    before = await ledger.get(claim.submission_id)
    exc = await _raises(UnknownChildReservation, ledger.suspend(claim, ("ask-1",), ("call-1", "call-9")),
                        "suspend on a call with no child reservation")
    _eq((exc.submission_id, exc.tool_call_id), (claim.submission_id, "call-9"), "names the call")
    _eq(await ledger.get(claim.submission_id), before, "a refused suspension writes nothing")
    await _raises(ValueError, ledger.suspend(claim, (), ()), "a suspension awaiting nothing")
    await _raises(TypeError, ledger.suspend(claim, (), (7,)), "a child call id that is not a str")
    await _raises(UnknownChildReservation, ledger.release_child(claim.submission_id, "call-9", {}, 1),
                  "a release of a reservation never made")
    _eq((await ledger.suspend(claim, (), ("call-1",))).children_pending, ("call-1",), "the token still owns it")


# --- settlement ---------------------------------------------------------------------


@_check("reserve-idempotent")
async def _(ledger) -> None:
    """Peer case ``settlementLifecycle`` (an identical reservation replays with the same record
    digest)."""
    await _admitted(ledger)
    claim = await _claimed(ledger)
    first = await ledger.reserve_settlement(claim, _env(claim, FAILED_RECORD))
    again = await ledger.reserve_settlement(claim, dict(reversed(list(_env(claim, dict(reversed(list(
        FAILED_RECORD.items())))).items()))))
    _true(isinstance(first, ReservedSettlement), f"reserve returned {first!r}")
    _eq(first.replayed, False, "the first reservation")
    _eq((first.settlement_id, first.outcome, first.record_digest),
        (f"settlement:{claim.submission_id}", "failed", _digest(_env(claim, FAILED_RECORD))),
        "the reservation names its settlement id, outcome and record digest")
    _eq(again, attrs.evolve(first, replayed=True), "same record reserved again: replayed")
    record = await ledger.get(claim.submission_id)
    _eq((record.reserved_record, record.reserved_digest), (_env(claim, FAILED_RECORD), first.record_digest),
        "stored reservation")


@_check("reserve-conflict")
async def _(ledger) -> None:
    """Peer case ``settlementConflicts``."""
    await _admitted(ledger)
    claim = await _claimed(ledger)
    first = await ledger.reserve_settlement(claim, _env(claim, COMPLETED_RECORD))
    exc = await _raises(SettlementConflict, ledger.reserve_settlement(claim, _env(claim, FAILED_RECORD)), "a different record")
    _eq(exc.existing_digest, first.record_digest, "conflict existing_digest")
    _true(exc.attempted_digest not in (None, first.record_digest), "conflict attempted_digest")
    _eq((await ledger.get(claim.submission_id)).reserved_digest, first.record_digest, "reservation unchanged")


@_check("settled-row-answers-settlement-conflict")
async def _(ledger) -> None:
    """Peer cases ``suspendResumesImmediatelyWhenDecided`` (suspend),
    ``approvalDecisionIdempotency`` (a decision),
    ``unknownResolutionLifecycle`` (a resolution) and ``abortIdempotency``
    (an abort) on a settled submission: ``SettlementConflict`` naming its
    ``existing_outcome``, before any replay, token or unknown-call check;
    nothing is written."""
    result = await _admitted(ledger)
    claim = await _claimed(ledger)
    await ledger.mark_input_applied(claim, *_input_at(claim))
    await ledger.reserve_settlement(claim, _env(claim, COMPLETED_RECORD))
    exc = await _raises(SettlementConflict, ledger.reserve_settlement(claim, _env(claim, FAILED_RECORD)), "another record")
    _eq(exc.existing_outcome, "completed", "a reserve conflict names the reserved outcome")
    await ledger.finalize_settlement(result.submission_id, 300)
    before = await ledger.get(result.submission_id)
    for what, attempt in (("suspend", lambda token: ledger.suspend(token, ("call-a", "call-b"))),
                          ("mark_unknown", lambda token: ledger.mark_unknown(token, "call-u"))):
        for token in (claim, attrs.evolve(claim, epoch=claim.epoch + 100)):
            exc = await _raises(SettlementConflict, attempt(token), f"{what} of a settled submission")
            _eq((exc.submission_id, exc.existing_outcome), (result.submission_id, "completed"),
                f"{what}: names the settled outcome")
    sid = result.submission_id
    for what, attempt in (
            ("decide_approval", lambda: ledger.decide_approval(sid, "call-new", "approved", "r", "ok", 400)),
            ("resolve_unknown", lambda: ledger.resolve_unknown(sid, "call-new", "NeverHappened", "r", None, 400)),
            ("request_abort", lambda: ledger.request_abort(sid, "alice", "late", 400))):
        exc = await _raises(SettlementConflict, attempt(), f"{what} of a settled submission")
        _eq((exc.submission_id, exc.existing_outcome), (sid, "completed"), f"{what}: names the settled outcome")
    _eq(await ledger.get(result.submission_id), before, "nothing written")


@_check("reserve-shape-rules")
async def _(ledger) -> None:
    """Peer case ``settlementLifecycle`` (the failed record's diagnostic)."""
    await _admitted(ledger)
    claim = await _claimed(ledger)
    bad_records = (
        {"outcome": "failed"},
        {"outcome": "failed", "diagnostic": {"errorTag": "E"}},
        {"outcome": "failed", "diagnostic": {"errorTag": "E", "message": "m", "stack": "..."}},
        {"outcome": "failed", "diagnostic": {"errorTag": "E", "message": "m"}, "cause": "x"},
        {"outcome": "aborted", "result": None},
        {"outcome": "aborted", "result": {"text": "partial"}},
        {"outcome": "maybe"},
        ["outcome", "completed"],
    )
    for bad in bad_records:
        await _raises(InvalidSettlement, ledger.reserve_settlement(claim, _env(claim, bad)), f"reserve {bad!r}")
    _eq((await ledger.get(claim.submission_id)).reserved_digest, None, "refused records reserve nothing")
    # A joined completion may carry no independent result.
    await ledger.reserve_settlement(claim, _env(claim, {"outcome": "completed"}))


@_check("settlement-record-digest-is-the-envelope-digest")
async def _(ledger) -> None:
    """Peer cases 78 (``recordDigest = digestJson(encode(RecordEnvelope))``)
    and 111 (the appended record is byte-equal to ``reservation.record``):
    the reservation digests the whole record envelope it holds and hands
    back; its key order is irrelevant; an envelope that is not this
    submission's settlement (another id, family, submission, member) is
    ``InvalidSettlement``; another ``createdAt`` is another record."""
    result = await _admitted(ledger)
    claim = await _claimed(ledger)
    envelope = _env(claim, COMPLETED_RECORD, 250, run_id="run:x")
    for bad in ({**envelope, "recordId": "settlement:other"}, {**envelope, "family": "input"},
                {**envelope, "schemaVersion": 2}, {**envelope, "producerId": "o1"},
                {k: v for k, v in envelope.items() if k != "createdAt"},
                {**envelope, "payload": {**envelope["payload"], "submissionId": "other"}},
                COMPLETED_RECORD):
        await _raises(InvalidSettlement, ledger.reserve_settlement(claim, bad), f"reserve {bad!r:.120}")
    reserved = await ledger.reserve_settlement(claim, envelope)
    _eq(reserved.record_digest, _digest(envelope), "recordDigest = digestJson(the record envelope)")
    _eq((await ledger.reserve_settlement(claim, dict(reversed(list(envelope.items()))))).replayed, True,
        "the same envelope, its keys reordered: a replay")
    exc = await _raises(SettlementConflict, ledger.reserve_settlement(claim, {**envelope, "createdAt": 251}),
                        "the same outcome record in an envelope created at another time")
    _eq(exc.existing_digest, reserved.record_digest, "conflict existing_digest")
    record = await ledger.get(result.submission_id)
    _eq((_canonical(record.reserved_record), record.reserved_digest), (_canonical(envelope), reserved.record_digest),
        "the stored record is the envelope, byte for byte")
    settlement = await ledger.finalize_settlement(result.submission_id, 400)
    _eq((settlement.outcome, settlement.record_digest), ("completed", reserved.record_digest),
        "finalized with the envelope's digest")


@_check("joined-follower-envelope-is-its-hosts")
async def _(ledger) -> None:
    """Peer cases 78 and 127: a joined follower settles with its host's
    settlement envelope re-addressed to it (``settlement:{followerId}``, its
    own submission id and its own receipt), with the host's ``createdAt``, ``deploymentId``
    and run (``runId``), the host's outcome and no independent result; its
    record digest is that envelope's."""
    host = await _admitted(ledger, key="k1")
    joined = await _admitted(ledger, key="k2")
    claim = await _claimed(ledger, now_ms=100)
    await ledger.mark_input_applied(claim, *_input_at(claim))
    await ledger.begin_join(claim, 1)
    await ledger.mark_joined(claim, joined.submission_id, "input:2", 2)
    await ledger.reserve_settlement(claim, _env(claim, COMPLETED_RECORD, 321, run_id="run:host"))
    await ledger.finalize_settlement(host.submission_id, 500)
    follower = await ledger.get(joined.submission_id)
    want = _env_for(joined.submission_id, {"outcome": "completed"}, 321, run_id="run:host", receipt=joined.receipt)
    _eq((follower.outcome, follower.reserved_record, follower.reserved_digest), ("completed", want, _digest(want)),
        "the follower's record is its host's envelope re-addressed to it, digested whole")


@_check("settlement-payload-is-the-peers")
async def _(ledger) -> None:
    """The peer implementation's ``SubmissionSettled`` payload (its
    settlement publication and canonical read-back checks): it carries ``submissionId``, ``settlementId`` = ``settlement:{sid}``,
    ``receiptId`` and the outcome record's members at the top level (the
    failed diagnostic, the completed result), ``runId`` when a run settled
    it; a payload without those ids, or in another shape, is
    ``InvalidSettlement``. The ledger's own envelopes name the admission's
    receipt: an unready abort's has no run and no result."""
    result = await _admitted(ledger)
    claim = await _claimed(ledger)
    envelope = _env(claim, FAILED_RECORD, run_id="run:x")
    payload = envelope["payload"]
    for bad in ({k: v for k, v in payload.items() if k != "settlementId"},
                {**payload, "settlementId": "settlement:other"},
                {k: v for k, v in payload.items() if k != "receiptId"}, {**payload, "receiptId": ""},
                {"submissionId": claim.submission_id, "record": FAILED_RECORD}):
        await _raises(InvalidSettlement, ledger.reserve_settlement(claim, {**envelope, "payload": bad}),
                      f"reserve a payload {bad!r:.120}")
    await ledger.reserve_settlement(claim, envelope)
    settled = await ledger.finalize_settlement(result.submission_id, 400)
    _eq((settled.outcome, settled.diagnostic), ("failed", FAILED_RECORD["diagnostic"]),
        "the failed diagnostic is projected from the payload's top level")
    unready = await _admitted(ledger, key="k2", ready=False)
    await ledger.request_abort(unready.submission_id, "ops", "never ready", 500)
    record = await ledger.get(unready.submission_id)
    _eq(record.reserved_record["payload"], {"submissionId": unready.submission_id,
                                            "settlementId": f"settlement:{unready.submission_id}",
                                            "receiptId": unready.receipt, "outcome": "aborted"},
        "an unready abort's settlement (the ledger's own) names the admission's receipt, no run and no result")


@_check("finalize-idempotent")
async def _(ledger) -> None:
    """Peer case ``settlementLifecycle`` (a later finalize keeps the first ``settled_at_ms``)."""
    result = await _admitted(ledger)
    claim = await _claimed(ledger)
    reserved = await ledger.reserve_settlement(claim, _env(claim, FAILED_RECORD))
    first = await ledger.finalize_settlement(result.submission_id, 400)
    again = await ledger.finalize_settlement(result.submission_id, 900)
    _true(isinstance(first, Settlement), f"finalize returned {first!r}")
    _eq((first.outcome, first.record_digest, first.settled_at_ms), ("failed", reserved.record_digest, 400), "settlement")
    _eq(first.diagnostic, FAILED_RECORD["diagnostic"], "failed diagnostic projected from the reserved record")
    _eq(first.replayed, False, "the first finalize")
    _eq(first.settlement_id, f"settlement:{result.submission_id}", "settlement_id (settlement:{submissionId})")
    _eq(first.receipt, result.receipt, "the settlement carries the admission's receipt")
    _eq(again, attrs.evolve(first, replayed=True),
        "a second finalize returns the same settlement (same settled_at_ms and settlement_id), replayed")
    record = await ledger.get(result.submission_id)
    _eq((record.outcome, record.settled_at_ms, record.settlement_id), ("failed", 400, first.settlement_id),
        "stored settlement")


@_check("settlement-ids")
async def _(ledger) -> None:
    """Peer case ``settlementLifecycle`` (``settlement:{submissionId}``)."""
    # Deterministic, the peer's format: "settlement:{submissionId}"; the same
    # outcome record settled under two submissions gets two ids; a joined follower
    # and a submission settled by its abort intent get theirs too.
    host = await _admitted(ledger, key="k1")
    joined = await _admitted(ledger, key="k2")
    other = await _admitted(ledger, conversation_id="c2", key="k1")
    aborted = await _admitted(ledger, conversation_id="c2", key="k2")
    _eq((await _queued_abort(ledger, aborted.submission_id, 50)).settlement_id, f"settlement:{aborted.submission_id}",
        "settled by its abort")
    claim = await _claimed(ledger, now_ms=100)
    await ledger.mark_input_applied(claim, "input:h#0", 1)
    await ledger.begin_join(claim, 1)
    await ledger.mark_joined(claim, joined.submission_id, "input:j#0", 2)
    await ledger.reserve_settlement(claim, _env(claim, COMPLETED_RECORD))
    first = await ledger.finalize_settlement(host.submission_id, 500)
    claim2 = await _claimed(ledger, conversation_id="c2", now_ms=100)
    await ledger.reserve_settlement(claim2, _env(claim2, COMPLETED_RECORD))
    second = await ledger.finalize_settlement(other.submission_id, 600)
    _true(first.record_digest != second.record_digest,
          "the same outcome record under two submissions: two envelopes, two digests")
    _true(first.settlement_id != second.settlement_id, "two submissions, two settlement ids")
    _eq((first.settlement_id, second.settlement_id),
        (f"settlement:{host.submission_id}", f"settlement:{other.submission_id}"), "settlement:{submissionId}")
    ids = {}
    for sid in (joined.submission_id, aborted.submission_id):
        settled = await ledger.finalize_settlement(sid, 900)
        record = await ledger.get(sid)
        _eq((settled.replayed, settled.settlement_id), (True, record.settlement_id),
            f"{sid}: a finalize replays its settlement with its id")
        _eq(record.settlement_id, f"settlement:{sid}", f"{sid}: settlement_id")
        ids[sid] = record.settlement_id
    _eq(len(set(ids.values()) | {first.settlement_id, second.settlement_id}), 4, "every settlement its own id")
    follower = await ledger.get(joined.submission_id)
    _eq((follower.input_applied, follower.input_record_id, follower.input_seq), (True, "input:j#0", 2),
        "a joined follower's input is where it joined the host's log")
    again = await ledger.finalize_settlement(host.submission_id, 950)
    _eq(again.settlement_id, first.settlement_id, "stable across finalize replays")
    _eq(await ledger.scan_nonterminal(), (), "a settled submission is terminal")


@_check("finalize-unreserved-conflict")
async def _(ledger) -> None:
    """Peer case ``settlementConflicts`` (finalize without a reservation)."""
    result = await _admitted(ledger)
    await _raises(SettlementConflict, ledger.finalize_settlement(result.submission_id, 100), "finalize unreserved")
    _eq((await ledger.get(result.submission_id)).settled_at_ms, None, "nothing settled")
    await _raises(UnknownSubmission, ledger.finalize_settlement("sub-none-1", 100), "finalize unknown id")


@_check("stale-token-fenced")
async def _(ledger) -> None:
    """Peer cases ``leaseExpiryReclaim`` (each fenced call names the reclaim epoch; a fenced
    reservation leaves none) and ``releaseMakesHeadClaimable``."""
    await _admitted(ledger)
    stale = await _claimed(ledger, owner_id="o1", lease_ms=100, now_ms=100)
    fresh = await _claimed(ledger, owner_id="o2", lease_ms=10_000, now_ms=300)
    before = await ledger.get(stale.submission_id)
    calls = (
        ("renew", lambda: ledger.renew_ownership(stale, 100, 300)),
        ("release", lambda: ledger.release_ownership(stale)),
        ("mark_input_applied", lambda: ledger.mark_input_applied(stale, *_input_at(stale))),
        ("reserve", lambda: ledger.reserve_settlement(stale, _env(stale, COMPLETED_RECORD))),
    )
    for what, call in calls:
        exc = await _raises(OwnershipLost, call(), f"{what} with a stale token")
        _eq((exc.submission_id, exc.actual_epoch), (stale.submission_id, fresh.epoch), f"{what}: OwnershipLost fields")
    _eq(await ledger.get(stale.submission_id), before, "stale-token calls must write nothing")
    await ledger.mark_input_applied(fresh, *_input_at(fresh))  # the fresh token still works


# --- reads --------------------------------------------------------------------------


@_check("recovery-snapshot")
async def _(ledger) -> None:
    """Peer case ``recoverySnapshotConsistency``."""
    a = await _admitted(ledger, key="k1")
    b = await _admitted(ledger, key="k2", ready=False)
    claim = await _claimed(ledger, lease_ms=500, now_ms=100)
    await ledger.mark_input_applied(claim, *_input_at(claim))
    reserved = await ledger.reserve_settlement(claim, _env(claim, COMPLETED_RECORD))
    snapshot = await ledger.load_recovery_snapshot("c1")
    _eq((snapshot.conversation_id, snapshot.epoch), ("c1", claim.epoch), "snapshot header")
    _eq([s.submission_id for s in snapshot.submissions], [a.submission_id, b.submission_id], "nonterminal by queue_seq")
    head, tail = snapshot.submissions
    _eq((head.owner_id, head.epoch, head.lease_expires_ms, head.input_applied, head.reserved_digest, head.settled),
        ("o1", claim.epoch, 600, True, reserved.record_digest, False), "head ownership facts")
    _eq((head.input_record_id, head.input_seq, head.reserved_outcome, head.attempt_id, head.children),
        (*_input_at(claim), "completed", claim.attempt_id, ()), "head's input position, reservation, attempt")
    _eq((tail.input_record_id, tail.input_seq, tail.reserved_outcome, tail.attempt_id), (None, None, None, None),
        "tail: nothing yet")
    _eq((tail.ready, tail.abort_requested, tail.abort_author, tail.owner_id), (False, False, None, None), "tail facts")
    _true(
        not any(isinstance(getattr(s, f, None), Claim) for s in snapshot.submissions for f in dir(s) if not f.startswith("_")),
        "snapshot must not carry a live token",
    )
    await ledger.finalize_settlement(a.submission_id, 700)
    after = await ledger.load_recovery_snapshot("c1")
    _eq([s.submission_id for s in after.submissions], [b.submission_id], "settled ones leave the snapshot")
    empty = await ledger.load_recovery_snapshot("c-none")
    _eq((empty.epoch, empty.submissions), (0, ()), "snapshot of an unknown conversation")


@_check("recovery-snapshot-carries-decisions")
async def _(ledger) -> None:
    """Peer case ``recoverySnapshotConsistency`` and the snapshot halves of
    ``approvalDecisionIdempotency``, ``unknownResolutionLifecycle``,
    ``suspendResumesImmediatelyWhenDecided`` and ``admissionParentLinkage``:
    a recovering producer reads, without a token, every approval decision
    and unknown-call resolution, what a suspension still waits for, the
    parent link and the readiness time."""
    link = ParentLink("sub-elsewhere-1", "call-parent")
    a = await ledger.admit("c1", "p1", "k1", {"text": "child"}, 5, link)
    await ledger.mark_ready(a.submission_id, 7)
    claim = await _claimed(ledger, now_ms=100)
    await ledger.mark_input_applied(claim, *_input_at(claim))
    await ledger.reserve_child(claim, "call-kid", {"turns": 2})
    await ledger.suspend(claim, ("call-a", "call-b"), ("call-kid",))
    await ledger.decide_approval(a.submission_id, "call-a", "approved", "alice", "fine", 200)
    (head,) = (await ledger.load_recovery_snapshot("c1")).submissions
    _eq((head.parent, head.ready_at_ms), (link, 7), "parent link and readiness")
    _eq(head.approvals, {"call-a": {"decision": "approved", "resolver": "alice", "reason": "fine",
                                    "decidedAtMs": 200}, "call-b": None}, "approval decisions, the open one None")
    _eq(head.children_pending, ("call-kid",), "the awaited child not yet released")
    await ledger.decide_approval(a.submission_id, "call-b", "approved", "bob", "ok", 210)
    await ledger.release_child(a.submission_id, "call-kid", {"turns": 1}, 220)
    owner = await _claimed(ledger, owner_id="o2", now_ms=300)
    await ledger.mark_unknown(owner, "call-u1")
    (head,) = (await ledger.load_recovery_snapshot("c1")).submissions
    _eq((head.unknown_calls, head.unknown_open, head.children_pending), ({"call-u1": None}, 1, ()),
        "the open call None; the child released")
    await ledger.resolve_unknown(a.submission_id, "call-u1", "NeverHappened", "rec", None, 400)
    (head,) = (await ledger.load_recovery_snapshot("c1")).submissions
    _eq(head.unknown_calls, {"call-u1": {"resolution": "NeverHappened", "resolver": "rec", "resolvedAtMs": 400}},
        "its resolution")
    head.approvals["call-a"]["decision"] = "changed"
    (again,) = (await ledger.load_recovery_snapshot("c1")).submissions
    _eq(again.approvals["call-a"]["decision"], "approved", "a snapshot's values are copies")
    plain = await _admitted(ledger, conversation_id="c2")
    (row,) = (await ledger.load_recovery_snapshot("c2")).submissions
    _eq((row.submission_id, row.parent, row.approvals, row.unknown_calls, row.children_pending, row.ready_at_ms),
        (plain.submission_id, None, None, None, (), 1), "nothing decided, no parent")


@_check("recovery-snapshot-states-and-children")
async def _(ledger) -> None:
    """Peer cases ``attachChildIdempotency`` (the parent's snapshot lists
    each attachment with the child's state and, once settled, its outcome)
    and ``recoverySnapshotConsistency`` / ``joiningPrefixClaim`` (each
    submission's state, in the peer's names)."""
    parent = await _admitted(ledger, key="k1")
    behind = await _admitted(ledger, key="k2", ready=False)
    claim = await _claimed(ledger, now_ms=100)
    await ledger.reserve_child(claim, "call-b", {"turns": 1})
    await ledger.reserve_child(claim, "call-a", {"turns": 2})
    await ledger.reserve_child(claim, "call-c", {"turns": 3})
    child_a = await ledger.admit("c2", "p1", "child-a", {"task": "a"}, 110, ParentLink(parent.submission_id, "call-a"))
    await ledger.mark_ready(child_a.submission_id, 111)
    child_b = await ledger.admit("c3", "p1", "child-b", {"task": "b"}, 110, ParentLink(parent.submission_id, "call-b"))
    await ledger.attach_child(claim, "call-a", child_a.submission_id)
    await ledger.attach_child(claim, "call-b", child_b.submission_id)
    head, tail = (await ledger.load_recovery_snapshot("c1")).submissions
    _eq((head.state, tail.state), ("running", "admitted"), "states, in the peer's names")
    _eq(head.child_states, (("call-a", child_a.submission_id, "ready", None),
                            ("call-b", child_b.submission_id, "admitted", None)),
        "each attached child with its state, by call; an unattached reservation is not listed")
    await ledger.request_abort(child_b.submission_id, "ops", "not needed", 120)
    await ledger.mark_input_applied(claim, *_input_at(claim))
    (head, _) = (await ledger.load_recovery_snapshot("c1")).submissions
    _eq(head.state, "input-applied", "the input applied")
    _eq(head.child_states[1], ("call-b", child_b.submission_id, "settled", "aborted"),
        "a settled child names its outcome")
    _eq(behind.submission_id, tail.submission_id, "the tail")


@_check("scan-nonterminal-ordered")
async def _(ledger) -> None:
    """Peer case ``scanNonterminalWorklist``."""
    made = []
    for conversation_id in ("c2", "c1", "c3"):
        for key in ("k1", "k2"):
            made.append(await _admitted(ledger, conversation_id=conversation_id, key=key))
    scanned = await ledger.scan_nonterminal()
    _eq([(r.conversation_id, r.queue_seq) for r in scanned],
        [(c, s) for c in ("c1", "c2", "c3") for s in (1, 2)], "order by (conversation_id, queue_seq)")
    claim = await _claimed(ledger, conversation_id="c2")
    await ledger.reserve_settlement(claim, _env(claim, COMPLETED_RECORD))
    await ledger.finalize_settlement(claim.submission_id, 900)
    _true(claim.submission_id not in [r.submission_id for r in await ledger.scan_nonterminal()], "settled excluded")


@_check("scan-rows-are-control-fields")
async def _(ledger) -> None:
    """Peer case ``scanNonterminalWorklist``: a scan row carries the control
    fields (the receipt and the principal among them) and no input or
    admission metadata; a by-id lookup carries both."""
    metadata = {"kind": "WorkerUpdate", "update": {"sequence": 1, "value": 0.5}}
    admitted = await ledger.admit("c1", "p1", "k1", {"text": "app input"}, 0, metadata=metadata)
    (row,) = await ledger.scan_nonterminal()
    _eq((row.submission_id, row.receipt, row.principal_id, row.input_digest),
        (admitted.submission_id, admitted.receipt, "p1", admitted.input_digest), "the scan row's control fields")
    for omitted in ("input", "metadata"):
        _true(not hasattr(row, omitted), f"a scan row carries no {omitted!r}")
    record = await ledger.get(admitted.submission_id)
    _eq((record.input, record.metadata), ({"text": "app input"}, metadata), "a by-id lookup carries them")


@_check("scan-nonterminal-of-one-principal")
async def _(ledger) -> None:
    """Peer case ``scanNonterminalWorklist`` (scan rows carry the principal)."""
    for conversation_id, principal_id in (("c2", "p2"), ("c1", "p1"), ("c3", "p2"), ("c4", "p1")):
        await _admitted(ledger, conversation_id=conversation_id, principal_id=principal_id)
    _eq([r.conversation_id for r in await ledger.scan_nonterminal(principal_id="p2")], ["c2", "c3"],
        "only p2's open work, in order")
    _eq([r.conversation_id for r in await ledger.scan_nonterminal("p1")], ["c1", "c4"], "positionally too")
    _eq(await ledger.scan_nonterminal(principal_id="nobody"), (), "a principal with no open work")
    _eq(len(await ledger.scan_nonterminal(None)), 4, "None: every principal's")
    await _raises(TypeError, ledger.scan_nonterminal(principal_id=7), "a principal that is not a str")


@_check("capabilities")
async def _(ledger) -> None:
    """The declared capabilities, with the peer's ``durability`` (peer
    adapter check: a durable ledger declares ``durable-node``)."""
    caps = ledger.capabilities()
    _true(isinstance(caps, dict), f"capabilities must be a dict, got {caps!r}")
    for key in ("durable", "atomic_admission", "fencing"):
        _true(key in caps, f"capabilities lacks {key!r}")
    _true(isinstance(caps["durable"], bool), "capabilities['durable'] must be a bool")
    _true(isinstance(caps.get("encryption_at_rest"), bool),
          f"capabilities['encryption_at_rest'] must be a bool, got {caps.get('encryption_at_rest')!r}")
    _eq((caps["atomic_admission"], caps["fencing"]), (True, "epoch"), "declared contract")
    _eq(caps.get("durability"), "durable-node" if caps["durable"] else "non-durable",
        "durability, in the peer's words, agrees with durable")


@_check("json-values-copied")
async def _(ledger) -> None:
    """Peer adapter check: persisted JSON is copied (key order and caller mutation irrelevant)."""
    value = {"list": [1, 2]}
    result = await ledger.admit("c1", "p1", "k1", value, 0)
    value["list"].append(3)
    (await ledger.get(result.submission_id)).input["list"].append(4)
    _eq((await ledger.get(result.submission_id)).input, {"list": [1, 2]}, "input after caller mutations")
    await ledger.mark_ready(result.submission_id, 1)
    claim = await _claimed(ledger)
    record = {"outcome": "completed", "result": {"rows": [1]}}
    await ledger.reserve_settlement(claim, _env(claim, record))
    record["result"]["rows"].append(2)
    _eq((await ledger.get(result.submission_id)).reserved_record,
        _env(claim, {"outcome": "completed", "result": {"rows": [1]}}),
        "reserved record after caller mutations")


# --- admission policies: groups, fences, metadata (the peer's yielded-dev cases) --------


@_check("admission-group-race")
async def _(ledger) -> None:
    """Peer case ``admissionGroupRace``: two keys in one admission group, the
    second while the first is unsettled (in another conversation too: a
    group is ledger-wide) -> exactly one admitted, the other
    ``AdmissionPolicyError(reason="occupied")``, nothing written; the
    winner's lookup and snapshot name the group; re-admitting the winner
    with another group, or none, is ``AdmissionConflict``."""
    winner = await ledger.admit("c1", "p1", "k1", {"text": "one"}, 0, admission_group="entity")
    _eq((winner.replayed, winner.admission_group), (False, "entity"), "the first admission into the group")
    for cid, key in (("c1", "k2"), ("c2", "k3")):
        exc = await _raises(AdmissionPolicyError, ledger.admit(cid, "p2", key, {"text": "two"}, 1,
                                                               admission_group="entity"), "a second key in the group")
        _eq((exc.name, exc.reason, exc.code), ("AdmissionPolicyError", "occupied", "group-occupied"), "occupied")
        _eq(await ledger.get_by_idempotency_key(cid, "p2", key), None, "a refused admission writes nothing")
    _eq(len(await ledger.scan_nonterminal()), 1, "only the winner is admitted")
    _eq((await ledger.get(winner.submission_id)).admission_group, "entity", "the winner's lookup names its group")
    snapshot = await ledger.load_recovery_snapshot("c1")
    _eq([(s.submission_id, s.admission_group) for s in snapshot.submissions], [(winner.submission_id, "entity")],
        "the winner's recovery snapshot names its group")
    for group in ("other", None):
        exc = await _raises(AdmissionConflict, ledger.admit("c1", "p1", "k1", {"text": "one"}, 2,
                                                            admission_group=group), f"the winner under group {group!r}")
        _eq(exc.what, "admission_group", "the conflict names the group")
    other = await ledger.admit("c2", "p2", "k4", {"text": "three"}, 3, admission_group="other")
    _eq(other.replayed, False, "another group is free")


@_check("admission-group-held-until-finalize")
async def _(ledger) -> None:
    """Peer case ``admissionGroupSettlement``: a successor in the group fails
    while the original is open; an exact retry of the original replays (a
    replay is resolved before the occupancy check); the successor still
    fails while the original is terminalizing; after the finalize it is
    admitted (``replayed=False``)."""
    original = await ledger.admit("c1", "p1", "orig", {"text": "o"}, 0, admission_group="entity-work")
    await _raises(AdmissionPolicyError, ledger.admit("c2", "p1", "next", {"text": "n"}, 1,
                                                     admission_group="entity-work"), "a successor while open")
    again = await ledger.admit("c1", "p1", "orig", {"text": "o"}, 2, admission_group="entity-work")
    _eq((again.replayed, again.submission_id, again.receipt), (True, original.submission_id, original.receipt),
        "an exact retry of the original replays, the group occupied by it")
    await ledger.mark_ready(original.submission_id, 3)
    claim = await _claimed(ledger, "c1")
    await ledger.mark_input_applied(claim, *_input_at(claim))
    await ledger.reserve_settlement(claim, _env(claim, COMPLETED_RECORD))
    exc = await _raises(AdmissionPolicyError, ledger.admit("c2", "p1", "next", {"text": "n"}, 4,
                                                           admission_group="entity-work"),
                        "a successor while the original is terminalizing")
    _eq(exc.reason, "occupied", "still occupied while terminalizing")
    await ledger.finalize_settlement(original.submission_id, 5)
    successor = await ledger.admit("c2", "p1", "next", {"text": "n"}, 6, admission_group="entity-work")
    _eq((successor.replayed, successor.admission_group), (False, "entity-work"), "the finalize frees the group")
    again = await ledger.admit("c1", "p1", "orig", {"text": "o"}, 7, admission_group="entity-work")
    _eq((again.replayed, again.submission_id), (True, original.submission_id),
        "the settled original still replays while the successor holds the group")


@_check("admission-tuple-boundaries")
async def _(ledger) -> None:
    """Peer case ``admissionTupleBoundaries``: (principal "p\\x1fq", key "r")
    and ("p", "q\\x1fr") are distinct submissions; each lookup and replay
    resolves to its own."""
    first = await ledger.admit("c1", "p\x1fq", "r", {"text": "x"}, 0)
    second = await ledger.admit("c1", "p", "q\x1fr", {"text": "x"}, 1)
    _eq((second.replayed, second.queue_seq), (False, first.queue_seq + 1), "the second tuple is a new submission")
    _true(second.submission_id != first.submission_id, "distinct submissions")
    for principal, key, result in (("p\x1fq", "r", first), ("p", "q\x1fr", second)):
        record = await ledger.get_by_idempotency_key("c1", principal, key)
        _eq((record.submission_id, record.principal_id, record.idempotency_key),
            (result.submission_id, principal, key), f"lookup of ({principal!r}, {key!r})")
        again = await ledger.admit("c1", principal, key, {"text": "x"}, 2)
        _eq((again.replayed, again.submission_id), (True, result.submission_id), f"replay of ({principal!r}, {key!r})")


@_check("admission-fence-revision")
async def _(ledger) -> None:
    """Peer adapter case: an admission fence (``admissionFence{policyId, key,
    revision}``), checked inside the admission: at the fence's revision a
    fresh key is admitted; after the revision moves, the exact replay still
    replays, a fresh key at the old revision is
    ``AdmissionPolicyError(reason="refused", code="stale-revision")`` and
    nothing is written; a fence the ledger does not hold is
    ``reason="unavailable"`` while a replay still replays."""
    state = await ledger.set_admission_fence("policy", "entity", 1)
    _eq((state.revision, state.replayed), (1, False), "the fence set")
    _eq((await ledger.set_admission_fence("policy", "entity", 1)).replayed, True, "the same revision replays")
    at_1 = AdmissionFence("policy", "entity", 1)
    first = await ledger.admit("c1", "p1", "k1", {"text": "one"}, 0, admission_fence=at_1)
    _eq(first.replayed, False, "admitted at the fence's revision")
    await ledger.set_admission_fence("policy", "entity", 2)
    again = await ledger.admit("c1", "p1", "k1", {"text": "one"}, 1, admission_fence=at_1)
    _eq((again.replayed, again.submission_id), (True, first.submission_id), "the exact replay after the move")
    exc = await _raises(AdmissionPolicyError, ledger.admit("c1", "p1", "k2", {"text": "two"}, 2, admission_fence=at_1),
                        "a fresh key at a stale revision")
    _eq((exc.reason, exc.code), ("refused", "stale-revision"), "stale revision refused")
    _eq(await ledger.get_by_idempotency_key("c1", "p1", "k2"), None, "a refused admission writes nothing")
    _eq(len(await ledger.scan_nonterminal()), 1, "nothing admitted")
    exc = await _raises(AdmissionPolicyError, ledger.admit("c1", "p1", "k2", {"text": "two"}, 2,
                                                           admission_fence=AdmissionFence("policy", "entity", 3)),
                        "a revision the fence never stood at")
    _eq((exc.reason, exc.code), ("refused", "unknown-revision"), "a newer revision refused")
    exc = await _raises(AdmissionPolicyError, ledger.admit("c1", "p1", "k2", {"text": "two"}, 2,
                                                           admission_fence=AdmissionFence("nope", "entity", 1)),
                        "a fence the ledger does not hold")
    _eq((exc.reason, exc.code), ("unavailable", "no-fence"), "an unknown fence")
    again = await ledger.admit("c1", "p1", "k1", {"text": "one"}, 3, admission_fence=AdmissionFence("nope", "x", 1))
    _eq(again.replayed, True, "the replay still replays when the fence is unavailable")
    fresh = await ledger.admit("c1", "p1", "k2", {"text": "two"}, 4, admission_fence=AdmissionFence("policy", "entity", 2))
    _eq(fresh.replayed, False, "admitted at the current revision")
    exc = await _raises(AdmissionPolicyError, ledger.set_admission_fence("policy", "entity", 1), "a fence moved back")
    _eq((exc.reason, exc.code), ("refused", "revision-regressed"), "a fence never moves back")


@_check("admission-metadata-identity")
async def _(ledger) -> None:
    """Peer cases ``workerAdmissionIdentity``, ``messageAdmissionIdentity``,
    ``workerUpdateIdentity``, ``workerCompletionIdentity`` (their identity
    part): opaque admission metadata is kept apart from the input, returned
    by lookup and recovery, and part of the replay identity: omitted or
    changed metadata is ``AdmissionConflict(what="metadata")``."""
    metadata = {"kind": "WorkerUpdate", "update": {"sequence": 1, "value": {"progress": 0.5}}}
    first = await ledger.admit("c1", "p1", "k1", {"text": "app input"}, 0, metadata=metadata)
    _eq(first.metadata, metadata, "the admission answers its metadata")
    record = await ledger.get(first.submission_id)
    _eq((record.input, record.metadata, record.parent), ({"text": "app input"}, metadata, None),
        "the input stays the application input; the metadata apart")
    _eq([s.metadata for s in (await ledger.load_recovery_snapshot("c1")).submissions], [metadata],
        "recovery returns the metadata")
    again = await ledger.admit("c1", "p1", "k1", {"text": "app input"}, 1,
                               metadata={"update": {"value": {"progress": 0.5}, "sequence": 1}, "kind": "WorkerUpdate"})
    _eq((again.replayed, again.receipt), (True, first.receipt), "an exact replay (key order irrelevant)")
    for changed in (None, {"kind": "WorkerUpdate", "update": {"sequence": 2, "value": {"progress": 0.5}}},
                    {"kind": "WorkerUpdate", "update": {"sequence": 1, "value": {"progress": 0.6}}}):
        exc = await _raises(AdmissionConflict, ledger.admit("c1", "p1", "k1", {"text": "app input"}, 2,
                                                            metadata=changed), f"metadata {changed!r}")
        _eq(exc.what, "metadata", "the conflict names the metadata")
    plain = await ledger.admit("c1", "p1", "k2", {"text": "app input"}, 3)
    await _raises(AdmissionConflict, ledger.admit("c1", "p1", "k2", {"text": "app input"}, 4,
                                                  metadata={"kind": "WorkerCompletion"}), "metadata where there was none")
    _eq((await ledger.get(plain.submission_id)).metadata, None, "no metadata")


@_check("admission-worker-lane")
async def _(ledger) -> None:
    """Peer case ``workerAdmissionIdentity``: a worker admission (metadata
    ``kind`` ``"WorkerAdmission"``) survives lookup and recovery, parent
    absent; a replay replays; changed metadata conflicts; a new key of the
    same origin with other parameters is admitted behind it; a new key that
    omits or replaces the origin, or ordinary work, on that lane, and a
    worker admission on a lane holding ordinary work, are
    ``AdmissionPolicyError(reason="refused")``; of an ordinary and a worker
    admission on a fresh lane exactly one is admitted. A worker admission
    whose ``messageId`` is not its key, or (on a fresh lane too) without an
    origin carrying ``expiresAtMillis``, is refused."""
    origin = {"workerId": "w1", "expiresAtMillis": 60_000}

    def worker(key: str, parameters: dict, **changes: object) -> dict:
        return {"kind": "WorkerAdmission", "messageId": key, "parameters": parameters, "sourceSubmissionId": "sub-src-1",
                "origin": origin, **changes}

    first = await ledger.admit("w", "p1", "m1", {"text": "task"}, 0, metadata=worker("m1", {"n": 1}))
    record = await ledger.get(first.submission_id)
    _eq((record.metadata, record.parent), (worker("m1", {"n": 1}), None), "lookup returns the worker admission")
    _eq([s.metadata for s in (await ledger.load_recovery_snapshot("w")).submissions], [worker("m1", {"n": 1})],
        "recovery returns the worker admission")
    again = await ledger.admit("w", "p1", "m1", {"text": "task"}, 1, metadata=worker("m1", {"n": 1}))
    _eq((again.replayed, again.receipt), (True, first.receipt), "an identical replay")
    for changed in (None, worker("m1", {"n": 2}), worker("m1", {"n": 1}, sourceSubmissionId="sub-src-2"),
                    worker("m1", {"n": 1}, origin={"workerId": "w1", "expiresAtMillis": 60_001})):
        await _raises(AdmissionConflict, ledger.admit("w", "p1", "m1", {"text": "task"}, 2, metadata=changed),
                      f"the same key with metadata {changed!r}")
    second = await ledger.admit("w", "p1", "m2", {"text": "task"}, 3, metadata=worker("m2", {"n": 2}))
    _eq((second.replayed, second.queue_seq > first.queue_seq), (False, True), "a new key of the same origin")
    for metadata, code in ((None, "worker-lane"), ({k: v for k, v in worker("m3", {}).items() if k != "origin"},
                                                   "worker-origin"),
                           (worker("m3", {}, origin={"workerId": "w2"}), "worker-origin")):
        exc = await _raises(AdmissionPolicyError, ledger.admit("w", "p1", "m3", {"text": "task"}, 4, metadata=metadata),
                            f"a new key with metadata {metadata!r} on a worker lane")
        _eq((exc.reason, exc.code), ("refused", code), "refused")
    await ledger.admit("o", "p1", "k1", {"text": "ordinary"}, 5)
    exc = await _raises(AdmissionPolicyError, ledger.admit("o", "p1", "m1", {"text": "task"}, 6,
                                                           metadata=worker("m1", {"n": 1})),
                        "a worker admission on a lane holding ordinary work")
    _eq((exc.reason, exc.code), ("refused", "ordinary-lane"), "refused")
    _eq(await ledger.get_by_idempotency_key("o", "p1", "m1"), None, "a refused admission writes nothing")
    await ledger.admit("fresh", "p1", "m1", {"text": "task"}, 7, metadata=worker("m1", {"n": 1}))
    await _raises(AdmissionPolicyError, ledger.admit("fresh", "p1", "k1", {"text": "ordinary"}, 8),
                  "the second of an ordinary and a worker admission on a fresh lane")
    exc = await _raises(AdmissionPolicyError, ledger.admit("w", "p1", "m4", {"text": "task"}, 9,
                                                           metadata=worker("m5", {"n": 4})),
                        "a worker admission whose messageId is not its key")
    _eq((exc.reason, exc.code), ("refused", "worker-message-id"), "refused")
    for fields in ({k: v for k, v in worker("m1", {}).items() if k != "origin"},
                   worker("m1", {}, origin={"workerId": "w1"})):
        exc = await _raises(AdmissionPolicyError, ledger.admit("fresh2", "p1", "m1", {"text": "task"}, 10,
                                                               metadata=fields),
                            f"a worker admission on a fresh lane with origin {fields.get('origin')!r}")
        _eq((exc.reason, exc.code), ("refused", "worker-origin"), "an origin with its expiry is required")
    _eq(await ledger.get_by_idempotency_key("fresh2", "p1", "m1"), None, "a refused admission writes nothing")


# --- a damaged stored row (the adapter's author damages it) ------------------------------------


@_check("scan-answers-control-fields-of-a-damaged-payload", needs="damage_payload")
async def _(ledger, damage_payload) -> None:
    """Peer case 51: a row whose stored input no longer reads (``damage_payload(ledger,
    submission_id)``, the adapter's own surgery): the scan still answers its control fields
    (it never reads the input), a by-id read fails with a typed ``LedgerError``, the other
    rows read back, and nothing stored changes."""
    kept = await _admitted(ledger, "c1", "k1")
    damaged = await _admitted(ledger, "c2", "k1")
    before = tuple(await ledger.scan_nonterminal())
    done = damage_payload(ledger, damaged.submission_id)
    if inspect.isawaitable(done):
        await done
    _eq(tuple(await ledger.scan_nonterminal()), before, "the scan with one row's input damaged")
    await _raises(LedgerError, ledger.get(damaged.submission_id), "a by-id read of the row whose input is damaged")
    _eq((await ledger.get(kept.submission_id)).input, {"text": "k1"}, "the other row's input")
    _eq(tuple(await ledger.scan_nonterminal()), before, "the scan after the failed read (nothing changed)")


CONFORMANCE_CHECKS: tuple[str, ...] = _SUITE.names()
#: The checks that run only when the adapter's author gives the hook they need.
PAYLOAD_DAMAGE_CHECKS: tuple[str, ...] = _SUITE.needing()


async def run_ledger_conformance(make_store: Callable[[], Any], *, checks: Iterable[str] | None = None,
                                 damage_payload: Callable[[Any, str], Any] | None = None) -> list[str]:
    """Run the conformance checks, each on a fresh store from ``make_store``.

    ``damage_payload(ledger, submission_id)`` (may be async): your adapter's
    own way to make a stored row's input unreadable (bad JSON in place);
    without it the checks of ``PAYLOAD_DAMAGE_CHECKS`` are left out.

    Returns the names of the checks that ran (all passed); raises
    ``ConformanceFailure`` naming every failing check otherwise.
    """
    hooks = {} if damage_payload is None else {"damage_payload": damage_payload}
    return await _SUITE.run(make_store, checks, hooks)
