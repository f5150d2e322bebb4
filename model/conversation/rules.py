"""The conversation log's rules, written once (h11 style, ARCHITECTURE §9).

Each rule is a pure function over the rows a call needs. Both adapters fetch
those rows (SQLite: inside its ``BEGIN IMMEDIATE`` transaction), call the
rule, and write what it returns; no rule is restated in SQL.

Digests (all via ``model.canonical``, RFC 8785 canonical JSON + sha256)
------------------------------------------------------------------------
Envelope JSON (``RecordEnvelope.to_json``)::

    {"recordId", "family", "schemaVersion", "createdAt", "deploymentId",
     "payload", "producerId", "epoch"}

Batch digest (the idempotency key's content check, ``AppendResult.batch_digest``)::

    digest({"conversationId": c, "batchId": b, "producerId": p, "epoch": e,
            "records": [envelope JSON, ...]})

It deliberately leaves out the expected tail, so a retry is recognised by
its content alone.

Digest chain (``tail_digest``), per batch, from ``ZERO_DIGEST``::

    tail_digest = digest({"batchDigest": batch_digest, "firstSeq": f,
                          "previousTailDigest": previous_tail_digest})

A batch's records are hashed once, into its batch digest; the chain links
batch digests. Both recompute from a forward read alone: records regroup
into batches by consecutive equal ``batch_id`` (a batch id is used once per
conversation, so equal neighbours are always one batch), and every record of
a batch carries its producer and epoch in its envelope.
"""
from __future__ import annotations

import base64

import attrs

from model.canonical import (
    ZERO_DIGEST,
    CanonicalDecodeError,
    CanonicalEncodingError,
    CanonicalJsonBounds,
    check_bounds,
    compose_object,
    decode,
    decode_own,
    digest_text,
    scalar,
)

from .records import (
    BATCH_BYTES_MAX,
    BATCH_RECORDS_MAX,
    PAGE_SIZE_MAX,
    SUPPORTED_SCHEMA_VERSIONS,
    AppendConflict,
    AppendResult,
    BatchRecord,
    BatchTooLarge,
    CanonicalRecord,
    FenceRejected,
    FencedAppendRequest,
    HistoryCorrupted,
    MalformedOffset,
    NotMaterialized,
    ReadLimitOutOfRange,
    RecordEnvelope,
    UnsupportedSchemaVersion,
)

#: Decode caps for one stored envelope (persistence §10: cap before decode).
ENVELOPE_DECODE_CAPS = dict(max_bytes=BATCH_BYTES_MAX, max_depth=64, max_string_length=BATCH_BYTES_MAX, max_items=1_000_000)
#: The canonical-JSON bounds an appended envelope must keep: exactly the
#: decode caps above (depth 64; 1,000,000 elements and members, so
#: 1,000,001 values with the envelope itself), so every stored row reads
#: back. Collection length and text units are left unbounded: the nodes
#: bound and BATCH_BYTES_MAX already hold them. Over a bound the append is
#: ``CanonicalJsonBoundsError`` (kind ``traversal``), before anything is
#: read or written.
ENVELOPE_BOUNDS = CanonicalJsonBounds(depth=ENVELOPE_DECODE_CAPS["max_depth"],
                                      nodes=ENVELOPE_DECODE_CAPS["max_items"] + 1)
# prepare_append relies on this: a text within BATCH_BYTES_MAX cannot break
# the string cap, so only depth and (for long texts) items need checking.
assert ENVELOPE_DECODE_CAPS["max_string_length"] >= BATCH_BYTES_MAX

_HEX = frozenset("0123456789abcdef")


# --- argument validation (the public boundary) ---------------------------------


def require_str(name: str, value: object) -> None:
    if type(value) is not str:
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")


INT_ARG_MAX = 2 ** 53 - 1


def require_int(name: str, value: object) -> None:
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not -INT_ARG_MAX <= value <= INT_ARG_MAX:
        # Every integer a port stores is a JSON number (and an SQLite
        # INTEGER): outside +/-(2**53 - 1) both adapters refuse it alike.
        raise ValueError(f"{name} must be within +/-(2**53 - 1), got {value}")


def require_digest(name: str, value: object) -> None:
    require_str(name, value)
    if len(value) != 64 or not set(value) <= _HEX:
        raise ValueError(f"{name} must be 64 lowercase hex digits, got {value!r:.80}")


def validate_materialize_args(conversation_id: object, producer_id: object, epoch: object) -> None:
    require_str("conversation_id", conversation_id)
    require_str("producer_id", producer_id)
    require_int("epoch", epoch)
    # Epoch 0 is admission's materialization (persistence §3: admit ->
    # materialize -> mark ready), before any producer has claimed: the first
    # claimed owner (ledger epochs start at 1) takes over from it.
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, got {epoch}")


def validate_read_args(conversation_id: object, after_seq: object, limit: object) -> None:
    require_str("conversation_id", conversation_id)
    require_int("after_seq", after_seq)
    require_int("limit", limit)
    if after_seq < 0:
        raise ValueError(f"after_seq must be >= 0, got {after_seq}")
    if not 1 <= limit <= PAGE_SIZE_MAX:
        raise ReadLimitOutOfRange("read", limit, PAGE_SIZE_MAX)


def check_schema_version(family: str, schema_version: object) -> None:
    supported = SUPPORTED_SCHEMA_VERSIONS.get(family)
    if supported is None or type(schema_version) is not int or schema_version not in supported:
        raise UnsupportedSchemaVersion(family, schema_version)


def envelope_from_json(value: object) -> RecordEnvelope:
    """Validate a decoded envelope object; ValueError if malformed,
    UnsupportedSchemaVersion if its family/version is not supported."""
    if type(value) is not dict:
        raise ValueError("envelope is not a JSON object")
    required = ("recordId", "family", "schemaVersion", "createdAt", "deploymentId", "payload")
    allowed = set(required) | {"producerId", "epoch"}
    if not set(required) <= value.keys() or not value.keys() <= allowed:
        raise ValueError(f"envelope has members {sorted(value)}")
    for key in ("recordId", "family", "deploymentId"):
        if type(value[key]) is not str:
            raise ValueError(f"envelope {key} is not a string")
    if type(value["createdAt"]) is not int:
        raise ValueError("envelope createdAt is not an integer")
    check_schema_version(value["family"], value["schemaVersion"])
    producer_id = value.get("producerId")
    epoch = value.get("epoch")
    if producer_id is not None and type(producer_id) is not str:
        raise ValueError("envelope producerId is not a string")
    if epoch is not None and type(epoch) is not int:
        raise ValueError("envelope epoch is not an integer")
    return RecordEnvelope(
        value["recordId"], value["family"], value["schemaVersion"], value["createdAt"],
        value["deploymentId"], value["payload"], producer_id, epoch,
    )


class PreparedBatch:
    """A validated request: its envelopes, their canonical texts, its digest."""

    __slots__ = ("envelopes", "envelope_texts", "record_ids", "batch_digest")

    def __init__(self, envelopes: tuple, envelope_texts: tuple[str, ...], record_ids: tuple[str, ...],
                 batch_digest: str) -> None:
        self.envelopes = envelopes
        self.envelope_texts = envelope_texts
        self.record_ids = record_ids
        self.batch_digest = batch_digest


def prepare_append(request: object) -> PreparedBatch:
    """Validate a ``FencedAppendRequest`` and encode it. Raises TypeError /
    ValueError / UnsupportedSchemaVersion before anything is read or written.

    Each record must carry the request's producer id and epoch (records of a
    fenced append are producer-written, §4), 1..BATCH_RECORDS_MAX records,
    canonical JSON within BATCH_BYTES_MAX, and decodable within
    ``ENVELOPE_DECODE_CAPS`` (so every stored row can be read back).
    """
    if not isinstance(request, FencedAppendRequest):
        raise TypeError(f"append expects a FencedAppendRequest, got {type(request).__name__}")
    require_str("conversation_id", request.conversation_id)
    require_str("batch_id", request.batch_id)
    require_str("producer_id", request.producer_id)
    require_int("epoch", request.epoch)
    require_int("expected_tail_seq", request.expected_tail_seq)
    require_digest("expected_tail_digest", request.expected_tail_digest)
    if request.epoch < 1:
        raise ValueError(f"epoch must be >= 1, got {request.epoch}")
    if request.expected_tail_seq < 0:
        raise ValueError(f"expected_tail_seq must be >= 0, got {request.expected_tail_seq}")
    records = request.records
    if type(records) is not tuple:
        raise TypeError(f"records must be a tuple of RecordEnvelope, got {type(records).__name__}")
    if not records:
        raise ValueError(f"a batch holds 1..{BATCH_RECORDS_MAX} records, got 0")
    if len(records) > BATCH_RECORDS_MAX:
        raise BatchTooLarge("append", BATCH_RECORDS_MAX, len(records))
    texts = []
    total_bytes = 0
    for index, record in enumerate(records):
        if not isinstance(record, RecordEnvelope):
            raise TypeError(f"records[{index}] must be a RecordEnvelope, got {type(record).__name__}")
        require_str(f"records[{index}].record_id", record.record_id)
        require_str(f"records[{index}].family", record.family)
        require_int(f"records[{index}].created_at_ms", record.created_at_ms)
        require_str(f"records[{index}].deployment_id", record.deployment_id)
        check_schema_version(record.family, record.schema_version)
        if record.producer_id != request.producer_id or record.epoch != request.epoch:
            raise ValueError(
                f"records[{index}] carries producer {record.producer_id!r} epoch {record.epoch!r}, "
                f"not the request's {request.producer_id!r} epoch {request.epoch!r}"
            )
        try:
            text = record.canonical_text()  # encoded once per envelope, however often it is sent
        except CanonicalEncodingError as exc:
            raise ValueError(f"records[{index}] payload is not canonical JSON: {exc}") from None
        total_bytes += len(text) if text.isascii() else len(text.encode("utf-8"))
        if total_bytes > BATCH_BYTES_MAX:
            raise ValueError(f"batch exceeds {BATCH_BYTES_MAX} bytes of canonical JSON")
        # Store only what reads can decode. The text is our own canonical
        # encoding within BATCH_BYTES_MAX, so only the nesting depth and the
        # item count can break a cap: fewer brackets than the depth cap, and
        # fewer characters than the item cap, prove both without decoding.
        if (text.count("[") + text.count("{") > ENVELOPE_DECODE_CAPS["max_depth"]
                or len(text) > ENVELOPE_DECODE_CAPS["max_items"]):
            check_bounds(record.to_json(), ENVELOPE_BOUNDS)  # CanonicalJsonBoundsError (a ValueError)
        texts.append(text)
    batch_digest = batch_digest_texts(request.conversation_id, request.batch_id, request.producer_id,
                                      request.epoch, texts)
    return PreparedBatch(records, tuple(texts), tuple(r.record_id for r in records), batch_digest)


# --- the digest chain ------------------------------------------------------------


def batch_digest_texts(conversation_id: str, batch_id: str, producer_id: str, epoch: int, envelope_texts) -> str:
    """digest({"batchId", "conversationId", "epoch", "producerId", "records"}),
    composed around the envelopes' canonical texts instead of encoding them again."""
    return digest_text(compose_object([
        ("batchId", scalar(batch_id)),
        ("conversationId", scalar(conversation_id)),
        ("epoch", scalar(epoch)),
        ("producerId", scalar(producer_id)),
        ("records", "[" + ",".join(envelope_texts) + "]"),
    ]))


def chain_digest(previous_tail_digest: str, batch_digest: str, first_seq: int) -> str:
    """The tail digest after a batch (module docstring): its records enter
    the chain through their batch's digest, hashed once."""
    return digest_text(compose_object([
        ("batchDigest", scalar(batch_digest)),
        ("firstSeq", scalar(first_seq)),
        ("previousTailDigest", scalar(previous_tail_digest)),
    ]))


def recompute_chain(conversation_id: str, records, first_seq: int = 1, previous_tail_digest: str = ZERO_DIGEST) -> str:
    """Recompute the chain over ``records`` (CanonicalRecord, contiguous from
    ``first_seq``, starting and ending on batch boundaries) and return the
    resulting tail digest. Raises HistoryCorrupted on a gap, or on a batch
    whose first record names no producer and epoch (every appended record
    carries them)."""
    tail = previous_tail_digest
    expected = first_seq
    batch: list = []
    for record in records:
        if record.seq != expected:
            raise HistoryCorrupted(conversation_id, expected, record.seq, "sequence gap")
        if batch and record.batch_id != batch[0].batch_id:
            tail = _chain_batch(conversation_id, tail, batch)
            batch = []
        batch.append(record)
        expected += 1
    if batch:
        tail = _chain_batch(conversation_id, tail, batch)
    return tail


def _chain_batch(conversation_id: str, previous_tail_digest: str, batch: list) -> str:
    head = batch[0]
    producer_id, epoch = head.envelope.producer_id, head.envelope.epoch
    if type(producer_id) is not str or type(epoch) is not int:
        raise HistoryCorrupted(conversation_id, head.seq, head.seq, "a batch's record names no producer and epoch")
    try:
        texts = [record.envelope.canonical_text() for record in batch]
    except CanonicalEncodingError as exc:
        raise HistoryCorrupted(conversation_id, head.seq, head.seq, f"record does not encode: {exc}") from None
    digest_of_batch = batch_digest_texts(conversation_id, head.batch_id, producer_id, epoch, texts)
    return chain_digest(previous_tail_digest, digest_of_batch, head.seq)


# --- the rules ---------------------------------------------------------------------

MATERIALIZE_CREATE = "create"
MATERIALIZE_TAKEOVER = "takeover"
MATERIALIZE_NOOP = "noop"


def decide_materialize(
    conversation_id: str, current: tuple[str, int] | None, producer_id: str, epoch: int
) -> str:
    """``current`` is (producer_id, epoch) of an existing conversation."""
    if current is None:
        return MATERIALIZE_CREATE
    current_producer, current_epoch = current
    if epoch > current_epoch:
        return MATERIALIZE_TAKEOVER
    if epoch < current_epoch:
        raise FenceRejected(conversation_id, epoch, current_epoch)
    if producer_id != current_producer:
        raise FenceRejected(conversation_id, epoch, current_epoch, f"epoch held by producer {current_producer!r}")
    return MATERIALIZE_NOOP


@attrs.frozen
class ConversationRow:
    producer_id: str
    epoch: int
    tail_seq: int
    tail_digest: str


@attrs.frozen
class AppendPlan:
    """Write these records at first_seq.., the batch row, and the new
    conversation row (producer/epoch possibly taken over)."""

    first_seq: int
    last_seq: int
    previous_tail_digest: str
    tail_digest: str
    batch_digest: str

    def result(self) -> AppendResult:
        return AppendResult(self.first_seq, self.last_seq, self.tail_digest, self.batch_digest, False)


def replay_result(batch: BatchRecord) -> AppendResult:
    return AppendResult(batch.first_seq, batch.last_seq, batch.tail_digest, batch.batch_digest, True)


def decide_append(
    request: FencedAppendRequest,
    prepared: PreparedBatch,
    conversation: ConversationRow | None,
    existing_batch: BatchRecord | None,
    reused_record_ids,
) -> AppendResult | AppendPlan:
    """The append rule (§6), in this order of precedence (the peer
    implementation's reference adapter checks them in this order too):

    1. unmaterialized conversation -> NotMaterialized;
    2. the request's epoch not exactly the conversation's -> FenceRejected
       (a higher epoch is fenced as well: only ``materialize`` takes a
       conversation over). The fence is the epoch ("a stale producer epoch
       is fenced"), not the producer's identity: another producer may
       append at the current epoch (an administrative append, such as a
       queued submission's abort and settlement records), and the epoch's
       owner goes on from the tail it reads next (the peer's rule);
    3. batch id already committed: the chain digest computed from the
       request's own expected tail equal to the committed batch's tail
       digest -> the original result (``replayed=True``), else
       ``batch-digest`` conflict;
    4. expected tail (seq and digest) not the committed tail -> ``tail``,
       carrying the actual tail;
    5. a record id twice in the batch, or already in the log ->
       ``record-identity`` (``reused_record_ids``: the request's ids already
       stored, in request order).

    Returns an AppendResult for a replay or the AppendPlan to write.
    """
    cid = request.conversation_id
    if conversation is None:
        raise NotMaterialized(cid)
    if request.epoch != conversation.epoch:
        raise FenceRejected(cid, request.epoch, conversation.epoch)
    if existing_batch is not None:
        from_request = chain_digest(request.expected_tail_digest, prepared.batch_digest, request.expected_tail_seq + 1)
        if existing_batch.tail_digest == from_request:
            return replay_result(existing_batch)
        raise AppendConflict(cid, "batch-digest", request.batch_id)
    if request.expected_tail_seq != conversation.tail_seq or request.expected_tail_digest != conversation.tail_digest:
        raise AppendConflict(
            cid, "tail", request.batch_id,
            actual_tail_seq=conversation.tail_seq, actual_tail_digest=conversation.tail_digest,
        )
    seen: set[str] = set()
    for record_id in prepared.record_ids:
        if record_id in seen:
            raise AppendConflict(cid, "record-identity", request.batch_id, record_id=record_id)
        seen.add(record_id)
    for record_id in reused_record_ids:
        raise AppendConflict(cid, "record-identity", request.batch_id, record_id=record_id)
    first_seq = conversation.tail_seq + 1
    last_seq = conversation.tail_seq + len(prepared.envelope_texts)
    tail_digest = chain_digest(conversation.tail_digest, prepared.batch_digest, first_seq)
    return AppendPlan(first_seq, last_seq, conversation.tail_digest, tail_digest, prepared.batch_digest)


def decode_record(
    conversation_id: str, seq: int, batch_id: str, envelope_text: str, payload_text: str | None = None,
    *, own: bool = False, offset: str | None = None,
) -> CanonicalRecord:
    """A stored row as a CanonicalRecord (fresh objects); a row that does not
    decode is HistoryCorrupted, an unsupported version UnsupportedSchemaVersion.
    ``payload_text`` (a spilled payload, already digest-verified) replaces the
    envelope's placeholder payload.

    ``own``: the text is one this store wrote from ``prepare_append`` and
    kept in memory (it never left the process): it is decoded without the
    caps and duplicate checks of a foreign row, and handed back with the
    record as its canonical text. Text read from a file is never ``own``."""
    if own:
        assert payload_text is None
        try:
            envelope = envelope_from_json(decode_own(envelope_text))
        except (ValueError, TypeError) as exc:
            raise HistoryCorrupted(conversation_id, seq, seq, f"record row does not decode: {exc}") from None
        return CanonicalRecord(conversation_id, seq, batch_id, envelope.with_text(envelope_text), offset=offset)
    try:
        value = decode(envelope_text, **ENVELOPE_DECODE_CAPS)
        if payload_text is not None:
            if type(value) is not dict or value.get("payload", 0) is not None:
                raise ValueError("a spilled record's stored envelope must hold a null payload")
            value["payload"] = decode(payload_text, **ENVELOPE_DECODE_CAPS)
        envelope = envelope_from_json(value)
    except (CanonicalDecodeError, ValueError, TypeError) as exc:
        raise HistoryCorrupted(conversation_id, seq, seq, f"record row does not decode: {exc}") from None
    return CanonicalRecord(conversation_id, seq, batch_id, envelope, offset=offset)


# --- observation offsets -------------------------------------------------------
#
# An offset is opaque to its reader: ``{adapter}:v1:{base64(conversation
# id)}:{seq}`` (the memory adapter's form is the peer implementation's
# ``memory:v1:...``; SQLite spells its own ``sqlite:v1:...``). A store
# accepts back only its own form, for the conversation it is asked about.


def record_offset(adapter: str, conversation_id: str, seq: int) -> str:
    encoded = base64.b64encode(conversation_id.encode("utf-8", "surrogatepass")).decode("ascii")
    return f"{adapter}:v1:{encoded}:{seq}"


def parse_offset(adapter: str, conversation_id: str, offset: object) -> int:
    """The seq an offset of ``adapter`` names on ``conversation_id`` (records
    after it follow); ``None`` -> 0; anything else is ``MalformedOffset``."""
    if offset is None:
        return 0
    if type(offset) is not str:
        raise MalformedOffset(conversation_id, offset)
    parts = offset.split(":")
    if len(parts) != 4 or parts[0] != adapter or parts[1] != "v1":
        raise MalformedOffset(conversation_id, offset)
    seq_text = parts[3]
    if not seq_text.isascii() or not seq_text.isdigit() or (len(seq_text) > 1 and seq_text[0] == "0"):
        raise MalformedOffset(conversation_id, offset)
    if record_offset(adapter, conversation_id, int(seq_text)) != offset:
        raise MalformedOffset(conversation_id, offset)
    seq = int(seq_text)
    if seq < 1 or seq > INT_ARG_MAX:
        raise MalformedOffset(conversation_id, offset)
    return seq


async def observe_pages(read, adapter: str, conversation_id: str, after_offset: object):
    """An adapter's ``observe``: the records after ``after_offset`` (an
    offset ``adapter`` handed out; None: from the start), in order, read
    page by page (``read(conversation_id, after_seq, limit)``) up to the
    tail. ``MalformedOffset`` for an offset the store did not hand out for
    this conversation."""
    require_str("conversation_id", conversation_id)
    after_seq = parse_offset(adapter, conversation_id, after_offset)
    while True:
        page = await read(conversation_id, after_seq, PAGE_SIZE_MAX)
        for record in page:
            yield record
        if len(page) < PAGE_SIZE_MAX:
            return
        after_seq = page[-1].seq


def check_page(conversation_id: str, after_seq: int, records) -> None:
    """A page must be after_seq+1, after_seq+2, ... without gaps."""
    expected = after_seq + 1
    for record in records:
        if record.seq != expected:
            raise HistoryCorrupted(conversation_id, expected, record.seq, "sequence gap in stored log")
        expected += 1
