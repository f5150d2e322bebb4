"""In-memory Submission Ledger: deterministic, no durability claim (§9.1).

Holds the same immutable rows the SQLite adapter stores and applies the same
rules (``rules.py``); every method fetches its rows, calls the rule, and
stores what it returned. Methods are ``async`` but never await, so a call is
one atomic step in the simulator.

Compact (``model.compact``): a settled row, which the work rarely reads
again and never changes but through a rule, is held as one packed
``bytes`` of its columns (what a database file holds), and rebuilt as a
fresh ``SubmissionRow`` when read; open rows, which every wake reads and
rewrites, stay rows. Most of a long run's rows are settled: a month of
``ledger-storm`` settles ~125,000 submissions.
"""
from __future__ import annotations

import marshal

from model.compact import pack, unpack

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
from .rules import (
    SUBMISSION_FIELDS,
    ConversationRow,
    SubmissionRow,
    capabilities,
    decide_abort,
    decide_admit,
    decide_set_admission_fence,
    decide_claim,
    decide_claim_handoff,
    decide_finalize,
    decide_input_applied,
    decide_approval,
    decide_attach_child,
    decide_release_child,
    decide_reserve_child,
    encode_json_arg,
    decide_begin_join,
    decide_mark_joined,
    decide_revert_join,
    decide_mark_ready,
    decide_mark_unknown,
    decide_purge,
    decide_release,
    decide_renew,
    decide_reserve,
    decide_resolve,
    decide_suspend,
    encode_input,
    encode_settlement,
    recovery_snapshot,
    attached_children,
    require_str,
    require_token,
    row_to_record,
    scan_records,
    submission_id_for,
    validate_abort,
    validate_admit,
    validate_set_admission_fence,
    validate_claim,
    validate_claim_handoff,
    validate_attach_child,
    validate_begin_join,
    validate_release_child,
    validate_reserve_child,
    validate_decide,
    validate_mark_joined,
    validate_revert_join,
    validate_finalize,
    validate_mark_unknown,
    validate_renew,
    validate_resolve,
    validate_suspend,
    validate_input_applied,
    validate_mark_ready,
)


def _pack_row(row: SubmissionRow) -> bytes:
    # marshal keeps str, int, bool and None exactly; the columns in
    # SUBMISSION_FIELDS order (attrs.astuple would recurse, and is slower).
    return pack(marshal.dumps(tuple(getattr(row, name) for name in SUBMISSION_FIELDS)))


def _unpack_row(packed: bytes) -> SubmissionRow:
    return SubmissionRow(*marshal.loads(unpack(packed)))


class InMemorySubmissionLedger:
    def __init__(self) -> None:
        self._conversations: dict[str, ConversationRow] = {}
        # An open row as is, a settled one packed (``_pack_row``).
        self._submissions: dict[str, SubmissionRow | bytes] = {}
        self._by_key: dict[tuple[str, str, str], str] = {}
        # conversation_id -> ids of submissions not known to be settled, in
        # queue_seq order. Settled ones are pruned lazily, so a scan costs the
        # open work, not the whole (indefinitely retained) history.
        self._queues: dict[str, list[str]] = {}
        # admission group -> its submissions not known to be settled (pruned at each admission into it).
        self._groups: dict[str, list[str]] = {}
        # (policy_id, key) -> the admission fence's revision.
        self._fences: dict[tuple[str, str], int] = {}
        # Submissions whose row a surgery beyond the contract replaced.
        self._foreign: set[str] = set()

    def _own(self, row: SubmissionRow) -> bool:
        """The row is as the rules wrote it (``rules.read_row``'s ``own``):
        not one a surgery beyond the contract put in its place."""
        return row.submission_id not in self._foreign

    def surgery_put(self, row: SubmissionRow) -> None:
        """A beyond-the-contract surgery's row (``faults.beyond``): read back
        from now on as foreign data, every column checked."""
        self._foreign.add(row.submission_id)  # membership only, never iterated
        self._put(row)

    def _put(self, row: SubmissionRow) -> None:
        self._submissions[row.submission_id] = row if row.settled_at_ms is None else _pack_row(row)

    def _row(self, submission_id: str) -> SubmissionRow | None:
        held = self._submissions.get(submission_id)
        return held if held is None or type(held) is not bytes else _unpack_row(held)

    def _nonterminal(self, conversation_id: str) -> list[SubmissionRow]:
        queue = self._queues.get(conversation_id)
        if not queue:
            return []
        rows = [self._row(sid) for sid in queue]
        open_rows = [row for row in rows if row.settled_at_ms is None]
        if not open_rows:
            del self._queues[conversation_id]  # a scan costs the conversations with open work
        elif len(open_rows) != len(rows):
            self._queues[conversation_id] = [row.submission_id for row in open_rows]
        return open_rows

    # --- writes ---------------------------------------------------------------

    async def admit(
        self, conversation_id: str, principal_id: str, idempotency_key: str, input: object, now_ms: int,
        parent: ParentLink | None = None, admission_group: str | None = None,
        admission_fence: AdmissionFence | None = None, metadata: object = None,
    ) -> AdmissionResult:
        metadata_json = validate_admit(conversation_id, principal_id, idempotency_key, now_ms, parent,
                                       admission_group, admission_fence, metadata)
        input_json, input_digest = encode_input(input)
        key = (conversation_id, principal_id, idempotency_key)
        existing_id = self._by_key.get(key)
        group_rows = ()
        if admission_group is not None:
            # The group's submissions not known to be settled (settled ones pruned here).
            held = [row for row in map(self._row, self._groups.get(admission_group, ()))
                    if row is not None and row.settled_at_ms is None]
            self._groups[admission_group] = [row.submission_id for row in held]
            group_rows = tuple(held)
        decision = decide_admit(
            conversation_id, principal_id, idempotency_key, input_json, input_digest, now_ms,
            self._conversations.get(conversation_id),
            None if existing_id is None else self._row(existing_id), parent, admission_group, metadata_json,
            admission_fence,
            None if admission_fence is None else self._fences.get((admission_fence.policy_id, admission_fence.key)),
            group_rows,
        )
        if decision.submission is not None:
            row = decision.submission
            self._conversations[conversation_id] = decision.conversation
            self._put(row)
            self._by_key[key] = row.submission_id
            self._queues.setdefault(conversation_id, []).append(row.submission_id)
            if admission_group is not None:
                self._groups[admission_group].append(row.submission_id)
        return decision.result

    async def set_admission_fence(self, policy_id: str, key: str, revision: int) -> AdmissionFenceState:
        validate_set_admission_fence(policy_id, key, revision)
        state, write = decide_set_admission_fence(policy_id, key, revision, self._fences.get((policy_id, key)))
        if write:
            self._fences[(policy_id, key)] = revision
        return state

    async def mark_ready(self, submission_id: str, now_ms: int) -> Readiness:
        validate_mark_ready(submission_id, now_ms)
        readiness, row = decide_mark_ready(submission_id, self._row(submission_id), now_ms)
        if row is not None:
            self._put(row)
        return readiness

    async def claim(self, conversation_id: str, owner_id: str, lease_ms: int, now_ms: int,
                    handoff: ClaimHandoff | None = None) -> Claim | None:
        validate_claim(conversation_id, owner_id, lease_ms, now_ms)
        validate_claim_handoff(handoff)
        nonterminal = self._nonterminal(conversation_id)
        if handoff is not None:
            decision = decide_claim_handoff(self._conversations.get(conversation_id), nonterminal, handoff,
                                            owner_id, lease_ms, now_ms)
        else:
            decision = decide_claim(
                self._conversations.get(conversation_id),
                nonterminal[0] if nonterminal else None,
                owner_id, lease_ms, now_ms,
            )
        if decision.claim is not None:
            self._conversations[conversation_id] = decision.conversation
            self._put(decision.submission)
        return decision.claim

    async def renew_ownership(self, token: Claim, lease_ms: int, now_ms: int) -> OwnershipRenewal:
        validate_renew(token, lease_ms, now_ms)
        renewal, row = decide_renew(self._row(token.submission_id), token, lease_ms, now_ms)
        if row is not None:
            self._put(row)
        return renewal

    async def release_ownership(self, token: Claim) -> None:
        require_token(token)
        row = decide_release(self._row(token.submission_id), token)
        if row is not None:
            self._put(row)

    async def mark_input_applied(self, token: Claim, record_id: str, seq: int) -> InputApplied:
        validate_input_applied(token, record_id, seq)
        applied, row = decide_input_applied(self._row(token.submission_id), token, record_id, seq)
        if row is not None:
            self._put(row)
        return applied

    async def request_abort(self, submission_id: str, author: str, reason: str, now_ms: int) -> AbortIntent:
        validate_abort(submission_id, author, reason, now_ms)
        intent, row = decide_abort(submission_id, self._row(submission_id), author, reason, now_ms)
        if row is not None:
            self._put(row)
        return intent

    async def mark_unknown(self, token: Claim, tool_call_id: str) -> UnknownMarked:
        validate_mark_unknown(token, tool_call_id)
        marked, row = decide_mark_unknown(self._row(token.submission_id), token, tool_call_id)
        if row is not None:
            self._put(row)
        return marked

    async def resolve_unknown(self, submission_id: str, tool_call_id: str, resolution: str, resolver: str,
                              result: object, now_ms: int) -> UnknownResolution:
        result = validate_resolve(submission_id, tool_call_id, resolution, resolver, result, now_ms)
        resolved, row = decide_resolve(submission_id, self._row(submission_id), tool_call_id,
                                       resolution, resolver, result, now_ms)
        if row is not None:
            self._put(row)
        return resolved

    async def suspend(self, token: Claim, tool_call_ids: tuple[str, ...],
                      child_call_ids: tuple[str, ...] = ()) -> Suspension:
        validate_suspend(token, tool_call_ids, child_call_ids)
        suspension, row = decide_suspend(self._row(token.submission_id), token, tuple(tool_call_ids),
                                         tuple(child_call_ids))
        if row is not None:
            self._put(row)
        return suspension

    async def decide_approval(self, submission_id: str, tool_call_id: str, decision: str, resolver: str,
                              reason: str, now_ms: int) -> ApprovalDecision:
        validate_decide(submission_id, tool_call_id, decision, resolver, reason, now_ms)
        decided, row = decide_approval(submission_id, self._row(submission_id), tool_call_id, decision,
                                       resolver, reason, now_ms)
        if row is not None:
            self._put(row)
        return decided

    def _behind(self, host) -> list:
        if host is None:
            return []
        return [row for row in self._nonterminal(host.conversation_id) if row.queue_seq > host.queue_seq]

    async def begin_join(self, token: Claim, limit: int) -> JoinBatch:
        validate_begin_join(token, limit)
        host = self._row(token.submission_id)
        batch, host, followers = decide_begin_join(host, token, self._behind(host), limit)
        if host is not None:
            self._put(host)
        for follower in followers:
            self._put(follower)
        return batch

    async def mark_joined(self, token: Claim, submission_id: str, record_id: str, seq: int) -> JoinMarked:
        validate_mark_joined(token, submission_id, record_id, seq)
        marked, row = decide_mark_joined(self._row(token.submission_id), token, submission_id,
                                         self._row(submission_id), record_id, seq)
        if row is not None:
            self._put(row)
        return marked

    async def revert_join(self, token: Claim, submission_id: str) -> None:
        validate_revert_join(token, submission_id)
        host, follower = decide_revert_join(self._row(token.submission_id), token, submission_id,
                                            self._row(submission_id))
        if host is not None:
            self._put(host)
            self._put(follower)

    async def reserve_child(self, token: Claim, tool_call_id: str, allocation: object) -> ChildReservation:
        validate_reserve_child(token, tool_call_id)
        allocation, allocation_digest = encode_json_arg("allocation", allocation)
        reserved, row = decide_reserve_child(self._row(token.submission_id), token, tool_call_id,
                                             allocation, allocation_digest)
        if row is not None:
            self._put(row)
        return reserved

    async def attach_child(self, token: Claim, tool_call_id: str, child_submission_id: str) -> ChildReservation:
        validate_attach_child(token, tool_call_id, child_submission_id)
        attached, row = decide_attach_child(self._row(token.submission_id), token, tool_call_id,
                                            child_submission_id)
        if row is not None:
            self._put(row)
        return attached

    async def release_child(self, submission_id: str, tool_call_id: str, accounting: object,
                            now_ms: int) -> ChildReservation:
        validate_release_child(submission_id, tool_call_id, now_ms)
        accounting, accounting_digest = encode_json_arg("accounting", accounting)
        released, row = decide_release_child(submission_id, self._row(submission_id), tool_call_id,
                                             accounting, accounting_digest, now_ms)
        if row is not None:
            self._put(row)
        return released

    async def reserve_settlement(self, token: Claim, record: object) -> ReservedSettlement:
        require_token(token)
        record_json, record_digest, outcome = encode_settlement(token.submission_id, record)
        reserved, row = decide_reserve(self._row(token.submission_id), token, record_json, record_digest, outcome)
        if row is not None:
            self._put(row)
        return reserved

    async def finalize_settlement(self, submission_id: str, now_ms: int) -> Settlement:
        validate_finalize(submission_id, now_ms)
        row = self._row(submission_id)
        behind = self._nonterminal(row.conversation_id) if row is not None and row.joined_count else []
        settlement, row, followers = decide_finalize(submission_id, row, now_ms, behind)
        if row is not None:
            self._put(row)
        for follower in followers:
            self._put(follower)
        return settlement

    async def purge_conversation(self, conversation_id: str) -> int:
        """Delete a fully settled conversation's rows (retention, after
        archival); returns how many submissions went. Idempotent."""
        require_str("conversation_id", conversation_id)
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            return 0
        ids = [submission_id_for(conversation_id, seq) for seq in range(1, conversation.last_queue_seq + 1)]
        rows = [self._row(sid) for sid in ids if sid in self._submissions]
        decide_purge(conversation_id, rows)
        for row in rows:
            del self._submissions[row.submission_id]
            del self._by_key[(row.conversation_id, row.principal_id, row.idempotency_key)]
        del self._conversations[conversation_id]
        self._queues.pop(conversation_id, None)
        return len(rows)

    # --- reads ----------------------------------------------------------------

    async def get(self, submission_id: str) -> SubmissionRecord | None:
        require_str("submission_id", submission_id)
        row = self._row(submission_id)
        return None if row is None else row_to_record(row, own=self._own(row))

    async def get_by_idempotency_key(
        self, conversation_id: str, principal_id: str, idempotency_key: str
    ) -> SubmissionRecord | None:
        require_str("conversation_id", conversation_id)
        require_str("principal_id", principal_id)
        require_str("idempotency_key", idempotency_key)
        submission_id = self._by_key.get((conversation_id, principal_id, idempotency_key))
        if submission_id is None:
            return None
        row = self._row(submission_id)
        return row_to_record(row, own=self._own(row))

    async def load_recovery_snapshot(self, conversation_id: str) -> RecoverySnapshot:
        require_str("conversation_id", conversation_id)
        rows = self._nonterminal(conversation_id)
        return recovery_snapshot(
            conversation_id, self._conversations.get(conversation_id), rows, self._own,
            {child: self._row(child) for row in rows for child in attached_children(row)},
        )

    async def scan_nonterminal(self, principal_id: str | None = None) -> tuple[NonterminalSubmission, ...]:
        # Same order as SQLite's ORDER BY conversation_id, queue_seq (BINARY
        # collation compares UTF-8 bytes, which orders like code points).
        # An undecodable row is an ``UnreadableSubmission`` in its place, as
        # on SQLite (``rules.scan_records``). Rows of other principals are
        # left out before they are decoded.
        if principal_id is not None:
            require_str("principal_id", principal_id)
        return scan_records((
            row
            for conversation_id in sorted(self._queues)
            for row in self._nonterminal(conversation_id)
            if principal_id is None or row.principal_id == principal_id
        ), self._own)

    def capabilities(self) -> dict:
        # Not persistent: nothing is at rest to encrypt.
        return capabilities(durable=False, adapter="memory", encryption_at_rest=False)
