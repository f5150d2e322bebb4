"""In-memory ConversationStore: deterministic, no durability claim (§9.1).

Implements the same rules as the SQLite adapter by calling the same pure
functions (``rules.py``). Envelopes are held as canonical JSON text and
decoded on every read, so callers never share state with the store.

Compact (``model.compact``): a record row is one ``bytes`` (its batch id and
envelope text), a batch one packed ``bytes`` (numbers and raw
digests) in seq order, and a tail digest at a batch boundary is read off
the batch that ends there rather than kept twice. ``lookup_batch`` and
``read`` build fresh records from them on every call.

Methods are ``async`` but contain no await: in the simulator each call is
one atomic step.
"""
from __future__ import annotations

import struct
from bisect import bisect_left
from array import array

from model.canonical import ZERO_DIGEST
from model.compact import digest_bytes, digest_hex, pack, unpack

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
    observe_pages,
    prepare_append,
    record_offset,
    require_int,
    require_str,
    validate_materialize_args,
    validate_read_args,
)


# A batch: producer index, epoch, first seq, last seq (the digests follow,
# each 32 raw bytes or, if not a hex digest, as given, length-prefixed).
_BATCH = struct.Struct(">IqQQ")
_ROW_HEAD = struct.Struct(">I")


def _pack_digests(*digests: str) -> bytes:
    parts = []
    for digest in digests:
        held = digest_bytes(digest)
        raw = held if type(held) is bytes else held.encode("utf-8", "surrogatepass")
        parts.append(bytes((type(held) is bytes,)) + _ROW_HEAD.pack(len(raw)) + raw)
    return b"".join(parts)


def _unpack_digests(data: bytes, offset: int) -> list[str]:
    digests = []
    while offset < len(data):
        is_raw = data[offset]
        (size,) = _ROW_HEAD.unpack_from(data, offset + 1)
        raw = data[offset + 5:offset + 5 + size]
        digests.append(digest_hex(raw) if is_raw else raw.decode("utf-8", "surrogatepass"))
        offset += 5 + size
    return digests


# A row's first byte: the text is the store's own write (from prepare_append,
# canonical: read back without a foreign row's checks) or was put there by
# something else (a surgery beyond the contract: decoded as foreign data).
_OWN, _FOREIGN = b"o", b"f"

#: The adapter part of this store's observation offsets: ``memory:v1:{base64(id)}:{seq}``.
OFFSET_ADAPTER = "memory"


def pack_row(batch_id: str, text: "str | bytes", *, own: bool = False) -> bytes:
    """One record row: its batch id and envelope text (or the bytes a
    damaged-row surgery left there), as one compact bytes object."""
    head = batch_id.encode("utf-8", "surrogatepass")
    return (_OWN if own else _FOREIGN) + _ROW_HEAD.pack(len(head)) + head + pack(text)


def unpack_row(row: bytes) -> "tuple[str, str | bytes]":
    """(batch id, text) of a row."""
    (size,) = _ROW_HEAD.unpack_from(row, 1)
    return row[5:5 + size].decode("utf-8", "surrogatepass"), unpack(row[5 + size:])


def row_is_own(row: bytes) -> bool:
    return row[:1] == _OWN


class _Conversation:
    __slots__ = ("producer_id", "epoch", "tail_seq", "tail_digest", "rows", "record_ids", "batches", "batch_ids",
                 "last_seqs")

    def __init__(self, producer_id: str, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.tail_seq = 0
        self.tail_digest = ZERO_DIGEST
        # rows[seq - 1] = pack_row(batch_id, envelope_text)
        self.rows: list[bytes] = []
        self.record_ids: set[str] = set()
        # batch_id -> packed batch (``_BATCH`` + digests); batch_ids and
        # last_seqs list the batches in seq order (``digest_at``).
        self.batches: dict[str, bytes] = {}
        self.batch_ids: list[str] = []
        self.last_seqs = array("q")


class InMemoryConversationStore:
    """``ConversationStore`` held in dicts."""

    def __init__(self) -> None:
        self._conversations: dict[str, _Conversation] = {}
        # Producer ids repeat (a handful of processes write every batch):
        # a batch holds the index of its producer's id here.
        self._producers: list[str] = []
        self._producer_index: dict[str, int] = {}

    def _batch(self, conversation_id: str, batch_id: str, packed: bytes) -> BatchRecord:
        producer, epoch, first_seq, last_seq = _BATCH.unpack_from(packed)
        batch_digest, previous, tail = _unpack_digests(packed, _BATCH.size)
        return BatchRecord(conversation_id, batch_id, self._producers[producer], epoch, first_seq, last_seq,
                           batch_digest, previous, tail)

    def _put_batch(self, conv: _Conversation, batch: BatchRecord) -> None:
        index = self._producer_index.get(batch.producer_id)
        if index is None:
            index = self._producer_index[batch.producer_id] = len(self._producers)
            self._producers.append(batch.producer_id)
        conv.batches[batch.batch_id] = _BATCH.pack(index, batch.epoch, batch.first_seq, batch.last_seq) + \
            _pack_digests(batch.batch_digest, batch.previous_tail_digest, batch.tail_digest)
        conv.batch_ids.append(batch.batch_id)
        conv.last_seqs.append(batch.last_seq)

    # -- surgeries (``faults.beyond``: a store breaking its promise) ----------

    def surgery_row(self, conversation_id: str, seq: int) -> "tuple[str, str | bytes]":
        return unpack_row(self._conversations[conversation_id].rows[seq - 1])

    def surgery_set_row(self, conversation_id: str, seq: int, batch_id: str, text: "str | bytes") -> None:
        self._conversations[conversation_id].rows[seq - 1] = pack_row(batch_id, text)

    def surgery_row_count(self, conversation_id: str) -> int:
        return len(self._conversations[conversation_id].rows)

    def surgery_drop_rows(self, conversation_id: str, from_seq: int, record_ids) -> None:
        conv = self._conversations[conversation_id]
        del conv.rows[from_seq - 1:]
        conv.record_ids.difference_update(record_ids)

    def surgery_forget_batch(self, conversation_id: str, batch_id: str) -> None:
        """Forget the batch (the last one): its row, its boundary, the tail it made."""
        conv = self._conversations[conversation_id]
        batch = self._batch(conversation_id, batch_id, conv.batches.pop(batch_id))
        index = len(conv.batch_ids) - 1 - conv.batch_ids[::-1].index(batch_id)
        del conv.batch_ids[index]
        del conv.last_seqs[index]
        conv.tail_seq = batch.first_seq - 1
        conv.tail_digest = batch.previous_tail_digest

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
            packed = conv.batches.get(request.batch_id)
            existing_batch = None if packed is None else self._batch(request.conversation_id, request.batch_id,
                                                                     packed)
            reused = [rid for rid in prepared.record_ids if rid in conv.record_ids]
        decision = decide_append(request, prepared, row, existing_batch, reused)
        if not isinstance(decision, AppendPlan):
            return decision
        self._write(conv, request, prepared, decision)
        return decision.result()

    def _write(self, conv: _Conversation, request: FencedAppendRequest, prepared, plan: AppendPlan) -> None:
        for text in prepared.envelope_texts:
            conv.rows.append(pack_row(request.batch_id, text, own=True))
        conv.record_ids.update(prepared.record_ids)
        self._put_batch(conv, BatchRecord(
            request.conversation_id, request.batch_id, request.producer_id, request.epoch,
            plan.first_seq, plan.last_seq, plan.batch_digest, plan.previous_tail_digest, plan.tail_digest,
        ))
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
            decode_record(conversation_id, seq, *unpack_row(row), own=row_is_own(row),
                          offset=record_offset(OFFSET_ADAPTER, conversation_id, seq))
            for seq, row in enumerate(conv.rows[after_seq:after_seq + limit], after_seq + 1)
        )

    async def observe(self, conversation_id: str, after_offset: str | None = None):
        """The records after ``after_offset`` (an offset a read or an
        observation handed out; None: from the start), in order, page by
        page up to the tail. ``MalformedOffset`` for an offset this store
        did not hand out for this conversation."""
        async for record in observe_pages(self.read, OFFSET_ADAPTER, conversation_id, after_offset):
            yield record

    async def lookup_batch(self, conversation_id: str, batch_id: str) -> BatchRecord | None:
        require_str("conversation_id", conversation_id)
        require_str("batch_id", batch_id)
        conv = self._conversations.get(conversation_id)
        packed = None if conv is None else conv.batches.get(batch_id)
        return None if packed is None else self._batch(conversation_id, batch_id, packed)

    async def digest_at(self, conversation_id: str, seq: int) -> str | None:
        """The tail digest the log had when its tail was ``seq``; None when
        ``seq`` is beyond the tail or inside a batch (never a tail)."""
        require_str("conversation_id", conversation_id)
        require_int("seq", seq)
        conv = self._conversations.get(conversation_id)
        if conv is None:
            raise NotMaterialized(conversation_id)
        if seq == 0:
            return ZERO_DIGEST
        # The batch that ends at ``seq``, if one does (batches end in seq order).
        index = bisect_left(conv.last_seqs, seq)
        if index == len(conv.last_seqs) or conv.last_seqs[index] != seq:
            return None
        return self._batch(conversation_id, conv.batch_ids[index], conv.batches[conv.batch_ids[index]]).tail_digest

    def counts(self) -> dict[str, int]:
        return {
            "conversations": len(self._conversations),
            "records": sum(len(c.rows) for c in self._conversations.values()),
            "batches": sum(len(c.batches) for c in self._conversations.values()),
        }
