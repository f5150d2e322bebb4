"""In-memory ConversationStore: deterministic, no durability claim (§9.1).

Implements the same rules as the SQLite adapter by calling the same pure
functions (``rules.py``). Envelopes are held as canonical JSON text and
decoded on every read, so callers never share state with the store.

Methods are ``async`` but contain no await: in the simulator each call is
one atomic step.
"""
from __future__ import annotations

from model.canonical import ZERO_DIGEST

from .records import (
    AppendResult,
    BatchRecord,
    CanonicalRecord,
    ConversationTail,
    FencedAppendRequest,
    NotMaterialized,
)
from .rules import (
    MATERIALIZE_CREATE,
    MATERIALIZE_NOOP,
    AppendPlan,
    ConversationRow,
    decide_append,
    decide_materialize,
    decode_record,
    prepare_append,
    require_int,
    require_str,
    validate_materialize_args,
    validate_read_args,
)


class _Conversation:
    __slots__ = ("producer_id", "epoch", "tail_seq", "tail_digest", "rows", "record_ids", "batches", "boundaries")

    def __init__(self, producer_id: str, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.tail_seq = 0
        self.tail_digest = ZERO_DIGEST
        # rows[seq - 1] = (batch_id, envelope_text)
        self.rows: list[tuple[str, str]] = []
        self.record_ids: set[str] = set()
        self.batches: dict[str, BatchRecord] = {}
        # last_seq of each batch -> tail digest after it (0 -> ZERO_DIGEST)
        self.boundaries: dict[int, str] = {0: ZERO_DIGEST}


class InMemoryConversationStore:
    """``ConversationStore`` held in dicts."""

    def __init__(self) -> None:
        self._conversations: dict[str, _Conversation] = {}

    async def materialize(self, conversation_id: str, producer_id: str, epoch: int) -> None:
        """Create the conversation (empty, tail 0 / ZERO_DIGEST) owned by
        (producer_id, epoch); a higher epoch takes over; the same epoch and
        producer is a no-op; a lower epoch is FenceRejected."""
        validate_materialize_args(conversation_id, producer_id, epoch)
        conv = self._conversations.get(conversation_id)
        decision = decide_materialize(
            conversation_id, None if conv is None else (conv.producer_id, conv.epoch), producer_id, epoch
        )
        if decision == MATERIALIZE_CREATE:
            self._conversations[conversation_id] = _Conversation(producer_id, epoch)
        elif decision != MATERIALIZE_NOOP:
            conv.producer_id = producer_id
            conv.epoch = epoch

    async def append(self, request: FencedAppendRequest) -> AppendResult:
        prepared = prepare_append(request)
        conv = self._conversations.get(request.conversation_id)
        row = None
        existing_batch = None
        reused: list[str] = []
        if conv is not None:
            row = ConversationRow(conv.producer_id, conv.epoch, conv.tail_seq, conv.tail_digest)
            existing_batch = conv.batches.get(request.batch_id)
            reused = [rid for rid in prepared.record_ids if rid in conv.record_ids]
        decision = decide_append(request, prepared, row, existing_batch, reused)
        if not isinstance(decision, AppendPlan):
            return decision
        self._write(conv, request, prepared, decision)
        return decision.result()

    def _write(self, conv: _Conversation, request: FencedAppendRequest, prepared, plan: AppendPlan) -> None:
        for text in prepared.envelope_texts:
            conv.rows.append((request.batch_id, text))
        conv.record_ids.update(prepared.record_ids)
        conv.batches[request.batch_id] = BatchRecord(
            request.conversation_id, request.batch_id, request.producer_id, request.epoch,
            plan.first_seq, plan.last_seq, plan.batch_digest, plan.previous_tail_digest, plan.tail_digest,
        )
        conv.boundaries[plan.last_seq] = plan.tail_digest
        conv.tail_seq = plan.last_seq
        conv.tail_digest = plan.tail_digest
        conv.producer_id = request.producer_id
        conv.epoch = request.epoch

    async def delete_conversation(self, conversation_id: str) -> bool:
        """Retention: delete an archived conversation, whole (idempotent:
        False when there was none). Its id may never be reused by the caller."""
        require_str("conversation_id", conversation_id)
        return self._conversations.pop(conversation_id, None) is not None

    async def inspect_tail(self, conversation_id: str) -> ConversationTail:
        require_str("conversation_id", conversation_id)
        conv = self._conversations.get(conversation_id)
        if conv is None:
            raise NotMaterialized(conversation_id)
        return ConversationTail(conv.tail_seq, conv.tail_digest, conv.epoch)

    async def read(self, conversation_id: str, after_seq: int, limit: int) -> tuple[CanonicalRecord, ...]:
        """Records after_seq+1 .. after_seq+limit (fewer at the tail)."""
        validate_read_args(conversation_id, after_seq, limit)
        conv = self._conversations.get(conversation_id)
        if conv is None:
            raise NotMaterialized(conversation_id)
        return tuple(
            decode_record(conversation_id, seq, batch_id, text, own=True)
            for seq, (batch_id, text) in enumerate(conv.rows[after_seq:after_seq + limit], after_seq + 1)
        )

    async def lookup_batch(self, conversation_id: str, batch_id: str) -> BatchRecord | None:
        require_str("conversation_id", conversation_id)
        require_str("batch_id", batch_id)
        conv = self._conversations.get(conversation_id)
        return None if conv is None else conv.batches.get(batch_id)

    async def digest_at(self, conversation_id: str, seq: int) -> str | None:
        """The tail digest the log had when its tail was ``seq``; None when
        ``seq`` is beyond the tail or inside a batch (never a tail)."""
        require_str("conversation_id", conversation_id)
        require_int("seq", seq)
        conv = self._conversations.get(conversation_id)
        if conv is None:
            raise NotMaterialized(conversation_id)
        return conv.boundaries.get(seq)

    def counts(self) -> dict[str, int]:
        return {
            "conversations": len(self._conversations),
            "records": sum(len(c.rows) for c in self._conversations.values()),
            "batches": sum(len(c.batches) for c in self._conversations.values()),
        }
