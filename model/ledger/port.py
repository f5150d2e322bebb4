"""The Submission Ledger port: what the system awaits, adapter-neutral.

Structural (``typing.Protocol``): an adapter need not inherit from it. Both
adapters here (``memory_store.InMemorySubmissionLedger``,
``sqlite_store.SqliteSubmissionLedger``) implement every method with exactly
these parameters (names, kinds, defaults) — ``tests/test_ports.py`` checks it
with ``inspect.signature`` — and the simulator's trace describers
(``faults.describe``) bind to these signatures, so a change here fails at
import there, not silently inside a traced call.

The rules behind each method are in ``rules.py``; ``conformance.py`` checks
them against any adapter. Lifecycle (``open``, ``close``, ``connection``) is
an adapter's own business and not part of the port.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from .records import (
    AbortIntent,
    AdmissionFence,
    AdmissionFenceState,
    AdmissionResult,
    Claim,
    ClaimHandoff,
    OwnershipRenewal,
    RecoverySnapshot,
    ReservedSettlement,
    Settlement,
    SubmissionRecord,
    NonterminalSubmission,
    ApprovalDecision,
    ChildReservation,
    JoinBatch,
    JoinMarked,
    Suspension,
    UnknownMarked,
    UnknownResolution,
    InputApplied,
    ParentLink,
    Readiness,
)


@runtime_checkable
class SubmissionLedgerPort(Protocol):
    # --- writes ---------------------------------------------------------------

    async def admit(
        self, conversation_id: str, principal_id: str, idempotency_key: str, input: object, now_ms: int,
        parent: ParentLink | None = None, admission_group: str | None = None,
        admission_fence: AdmissionFence | None = None, metadata: object = None,
    ) -> AdmissionResult:
        """Admit a submission under an idempotency key, optionally linked to
        the parent tool call that spawned it, in an admission group, under
        an admission fence, with opaque metadata (an exact retry, same
        input, parent, group and metadata, replays; another is
        ``AdmissionConflict``; a fresh one refused by the fence or an
        occupied group is ``AdmissionPolicyError``)."""
        ...

    async def set_admission_fence(self, policy_id: str, key: str, revision: int) -> AdmissionFenceState:
        """Move the admission fence ``(policy_id, key)`` forward to
        ``revision`` (its current revision replays; an older one is
        ``AdmissionPolicyError``)."""
        ...

    async def mark_ready(self, submission_id: str, now_ms: int) -> Readiness:
        """The submission's receipt went out: it may be claimed (a repeat
        replays the first ``ready_at_ms``)."""
        ...

    async def claim(self, conversation_id: str, owner_id: str, lease_ms: int, now_ms: int,
                    handoff: ClaimHandoff | None = None) -> Claim | None:
        """Claim the conversation's FIFO head under a lease and a new epoch; None: nothing claimable.
        With ``handoff``: exactly its ``submission_id`` (the deferred head's
        successor), or None unless every handoff condition holds (``rules``)."""
        ...

    async def renew_ownership(self, token: Claim, lease_ms: int, now_ms: int) -> OwnershipRenewal:
        ...

    async def release_ownership(self, token: Claim) -> None:
        ...

    async def mark_input_applied(self, token: Claim, record_id: str, seq: int) -> InputApplied:
        """The submission's canonical input is in the log at ``record_id``/``seq``
        (a repeat there replays; another position is ``InputMarkerConflict``)."""
        ...

    async def request_abort(self, submission_id: str, author: str, reason: str, now_ms: int) -> AbortIntent:
        """Store the durable abort intent (the first one wins; a repeat replays
        it). A submission never ready settles ``aborted`` at once; a queued
        one (ready, never claimed) keeps the intent, and its aborter settles
        it through the log (``reserve_settlement`` under the ``QueuedAbort``
        authority, append, finalize); a running one's owner observes the
        intent at its next step and settles ``aborted``. ``AbortConflict``
        while terminalizing, ``SettlementConflict`` once settled."""
        ...

    async def mark_unknown(self, token: Claim, tool_call_id: str) -> UnknownMarked:
        """The owner cannot tell whether a tool call happened: the head is
        unknown and not claimable (except, with an abort intent, for aborted
        settlement); ownership ends. Needs the input applied."""
        ...

    async def resolve_unknown(self, submission_id: str, tool_call_id: str, resolution: str, resolver: str,
                              result: object, now_ms: int) -> UnknownResolution:
        """Resolve an unknown call (``NeverHappened``, ``SafeToRetry``,
        ``CompletedWithResult`` with its ``result``): the first resolution
        wins; the last open one makes the head claimable again."""
        ...

    async def suspend(self, token: Claim, tool_call_ids: tuple[str, ...],
                      child_call_ids: tuple[str, ...] = ()) -> Suspension:
        """The owner waits for approvals of ``tool_call_ids`` and for the
        release of the child reservations at ``child_call_ids`` (not both
        empty): ownership ends; resumed at once (claimable) if every one is
        decided / released already, else by the last decision or release."""
        ...

    async def decide_approval(self, submission_id: str, tool_call_id: str, decision: str, resolver: str,
                              reason: str, now_ms: int) -> ApprovalDecision:
        """Decide a tool call's approval (``approved``/``rejected``): the first
        decision wins; the last pending one resumes the submission."""
        ...

    async def begin_join(self, token: Claim, limit: int) -> JoinBatch:
        """The claimed host takes the contiguous prefix of ready submissions
        behind it (at most ``limit`` followers), stopping at a gap."""
        ...

    async def mark_joined(self, token: Claim, submission_id: str, record_id: str, seq: int) -> JoinMarked:
        """The follower's input is in the host's log at ``record_id``/``seq``:
        it settles through the host's settlement."""
        ...

    async def revert_join(self, token: Claim, submission_id: str) -> None:
        """A joining follower back to ready. Idempotent."""
        ...

    async def reserve_child(self, token: Claim, tool_call_id: str, allocation: object) -> ChildReservation:
        """Reserve a subagent's budget at this tool call (identity: the
        allocation's canonical digest; another at the same call conflicts)."""
        ...

    async def attach_child(self, token: Claim, tool_call_id: str, child_submission_id: str) -> ChildReservation:
        """Attach the child submission to its reservation (idempotent)."""
        ...

    async def release_child(self, submission_id: str, tool_call_id: str, accounting: object,
                            now_ms: int) -> ChildReservation:
        """Freeze the child's accounting once, at its first release; the
        release of the last thing a suspended parent awaits resumes it."""
        ...

    async def reserve_settlement(self, token: Claim, record: object) -> ReservedSettlement:
        """Reserve the exact canonical settlement record (before it is
        appended), fenced by ``token``; an ``aborted`` record of a submission
        with an abort intent that no claim ever granted needs no ownership
        (the ``QueuedAbort`` authority: any token)."""
        ...

    async def finalize_settlement(self, submission_id: str, now_ms: int) -> Settlement:
        """Finalize after the reserved record is in the log. Idempotent."""
        ...

    async def purge_conversation(self, conversation_id: str) -> int:
        """Delete a fully settled conversation's rows; how many submissions went. Idempotent."""
        ...

    # --- reads ----------------------------------------------------------------

    async def get(self, submission_id: str) -> SubmissionRecord | None:
        ...

    async def get_by_idempotency_key(
        self, conversation_id: str, principal_id: str, idempotency_key: str
    ) -> SubmissionRecord | None:
        ...

    async def load_recovery_snapshot(self, conversation_id: str) -> RecoverySnapshot:
        ...

    async def scan_nonterminal(self, principal_id: str | None = None) -> tuple[NonterminalSubmission, ...]:
        """Every unsettled submission's control fields (no input, no
        admission metadata: ``get`` has them), by (conversation_id,
        queue_seq); only
        ``principal_id``'s when given (a worker asking after its own work
        reads its rows, not every principal's: the scan's cost follows what
        it answers)."""
        ...

    def capabilities(self) -> dict:
        """What the adapter declares: at least ``durable`` (a bool: does a
        commit survive the process) and the peer's ``durability``
        (``"durable-node"`` for a durable one, ``"non-durable"`` otherwise);
        and ``encryption_at_rest`` (a bool: is what it stores encrypted where
        it is stored)."""
        ...
