"""Reference model of the conversation log (persistence §2.1, §4, §6, §7).

A conversation is ``producer, epoch, tail seq, tail digest`` plus its
records (seq 1, 2, ... without gaps, each with its batch id) and its
batches by id. The contract, as plain rules:

- ``materialize(c, producer, epoch)``: creates an empty log (tail 0, 64
  zeros) owned by (producer, epoch); a higher epoch takes over (the log
  stays), the same epoch and producer is a no-op, a lower epoch — or the
  same epoch from another producer — is ``FenceRejected``;
- ``append(request)``: more than 256 records is ``BatchTooLarge`` (with the
  other argument rules, before anything else); then, in this order: an
  unknown conversation is ``NotMaterialized``; an epoch other than the
  conversation's (higher too) is ``FenceRejected`` (another producer may
  append at the current epoch: an administrative append); a batch id already used answers the original result
  with ``replayed=True`` when the tail its batch made is the chain step
  from the request's own expected tail, else
  ``AppendConflict(batch-digest)``; an expected tail that is not the tail
  is ``AppendConflict(tail)`` carrying the actual tail; a record id used
  twice in the batch or already in the log is
  ``AppendConflict(record-identity)``; otherwise the records take seqs
  tail+1..;
- digests, with this package's own RFC 8785 encoder (``jcs``): envelope
  JSON ``{recordId, family, schemaVersion, createdAt, deploymentId,
  payload[, producerId, epoch]}``; the batch digest
  ``sha256(jcs({batchId, conversationId, epoch, producerId, records}))``;
  the chain ``tail = sha256(jcs({batchDigest, firstSeq,
  previousTailDigest}))`` from 64 zeros;
- ``read(c, after_seq, limit)``: records after_seq+1 .. after_seq+limit
  (fewer at the tail), each envelope as a reader of its canonical text
  gets it back; a limit outside 1..1024 is ``ReadLimitOutOfRange``; ``inspect_tail``; ``lookup_batch`` (None for an unknown
  batch or conversation); ``digest_at(c, seq)``: the tail digest when the
  tail was ``seq`` (64 zeros at 0), None inside a batch or beyond the tail;
  ``delete_conversation``: True when there was one, and it is gone whole;
- offsets: every record a read answers carries an offset (a str, opaque:
  each adapter spells its own), one per (conversation, seq) — the same
  record read again carries the same one; ``observe(c, after_offset)``
  answers the records after the record whose offset it is (None: from
  the start), in order, up to the tail, each with its own offset; an
  offset the store never handed out for ``c`` (another conversation's
  included) is ``MalformedOffset``, checked before ``NotMaterialized``.
  The model learns which offsets the store handed out from the reads it
  judges, and never reads their spelling.

A record is held as its canonical text (what the store holds); a read's
answer is compared with what reading that text back gives, exact types.
"""
from __future__ import annotations

import json
import re
from typing import Any

from model.conversation.records import FencedAppendRequest, RecordEnvelope
from scenarios.reference import EXACT, History, PortReference, Refused, bind, bound_args, divergence, judge, show
from scenarios.reference.jcs import ZERO_DIGEST, JcsError, bounds_kind, canonical, digest_text, read_back

# The log's bounds (persistence §7 page, batch size and bytes, decode caps).
PAGE_SIZE_MAX = 1024
BATCH_RECORDS_MAX = 256  # the peer implementation's limit on one canonical batch
BATCH_BYTES_MAX = 8 * 1024 * 1024
ENVELOPE_DEPTH_MAX = 64
ENVELOPE_ITEMS_MAX = 1_000_000
# Record families at schema version 1 (persistence §5, §11).
FAMILIES = frozenset({
    "conversation-created", "conversation-closed", "input", "run-started", "run-completed", "model-request",
    "model-delta",
    "model-completed", "model-output",
    "tool-call", "compaction", "subagent", "run-warning", "run-failure", "abort-requested", "terminal-outcome",
    "submission-settled", "repair-annotation"})
SCHEMA_VERSION = 1
_DIGEST_TEXT = re.compile("[0-9a-f]{64}")  # a digest: 64 lowercase hex digits, nothing else
_dumps = json.JSONEncoder(**EXACT).encode


def envelope_json(envelope: Any) -> dict:
    """Persistence §4's envelope as a JSON object (producer and epoch only when set)."""
    value = {"recordId": envelope.record_id, "family": envelope.family, "schemaVersion": envelope.schema_version,
             "createdAt": envelope.created_at_ms, "deploymentId": envelope.deployment_id,
             "payload": envelope.payload}
    if envelope.producer_id is not None:
        value["producerId"] = envelope.producer_id
    if envelope.epoch is not None:
        value["epoch"] = envelope.epoch
    return value


def chain_step(previous_tail_digest: str, digest_of_batch: str, first_seq: int) -> str:
    """``sha256(jcs({"batchDigest", "firstSeq", "previousTailDigest"}))``,
    spelled out member by member (names in UTF-16 order, each value by
    ``canonical``); a test checks it against ``digest`` of the structure."""
    return digest_text('{"batchDigest":' + canonical(digest_of_batch) + ',"firstSeq":' + canonical(first_seq)
                       + ',"previousTailDigest":' + canonical(previous_tail_digest) + "}")


def batch_digest(request: Any, envelope_texts: list[str]) -> str:
    """``sha256(jcs({batchId, conversationId, epoch, producerId, records}))``, spelled out as ``chain_step``."""
    return digest_text('{"batchId":' + canonical(request.batch_id) + ',"conversationId":'
                       + canonical(request.conversation_id) + ',"epoch":' + canonical(request.epoch)
                       + ',"producerId":' + canonical(request.producer_id) + ',"records":['
                       + ",".join(envelope_texts) + "]}")


def _is_digest(value: object) -> bool:
    return type(value) is str and _DIGEST_TEXT.fullmatch(value) is not None


# The contract's integers are JSON numbers: within +/-(2**53 - 1); both
# adapters refuse others with a ValueError.
PORT_INT_MAX = 2 ** 53 - 1


def _out_of_range(*values: int) -> bool:
    for value in values:
        if not -PORT_INT_MAX <= value <= PORT_INT_MAX:
            return True
    return False


def check_request(request: object) -> tuple[Refused | None, list[str]]:
    """The append's argument rules; the envelopes' canonical texts."""
    if not isinstance(request, FencedAppendRequest):
        return Refused("TypeError"), []
    for value in (request.conversation_id, request.batch_id, request.producer_id):
        if type(value) is not str:
            return Refused("TypeError"), []
    for value in (request.epoch, request.expected_tail_seq):
        if type(value) is not int:
            return Refused("TypeError"), []
    if type(request.expected_tail_digest) is not str:
        return Refused("TypeError"), []
    if (not _is_digest(request.expected_tail_digest) or request.epoch < 1 or request.expected_tail_seq < 0
            or _out_of_range(request.epoch, request.expected_tail_seq)):
        return Refused("ValueError"), []
    records = request.records
    if type(records) is not tuple:
        return Refused("TypeError"), []
    if not records:
        return Refused("ValueError"), []
    if len(records) > BATCH_RECORDS_MAX:
        return Refused("BatchTooLarge", operation="append", limit=BATCH_RECORDS_MAX, actual=len(records)), []
    texts = []
    total_bytes = 0
    for record in records:
        if not isinstance(record, RecordEnvelope):
            return Refused("TypeError"), []
        if (type(record.record_id) is not str or type(record.family) is not str
                or type(record.created_at_ms) is not int or type(record.deployment_id) is not str):
            return Refused("TypeError"), []
        if (record.family not in FAMILIES or type(record.schema_version) is not int
                or record.schema_version != SCHEMA_VERSION):
            return Refused("UnsupportedSchemaVersion", family=record.family,
                           schema_version=record.schema_version), []
        if record.producer_id != request.producer_id or record.epoch != request.epoch:
            return Refused("ValueError"), []
        value = envelope_json(record)
        try:
            text = canonical(value)
        except JcsError:
            return Refused("ValueError"), []
        total_bytes += len(text) if text.isascii() else len(text.encode("utf-8"))
        if total_bytes > BATCH_BYTES_MAX:
            return Refused("ValueError"), []
        # Every stored row must decode within the caps (persistence §10):
        # the envelope's canonical-JSON bounds are those caps.
        if (text.count("[") + text.count("{") > ENVELOPE_DEPTH_MAX or len(text) > ENVELOPE_ITEMS_MAX) and bounds_kind(
                value, depth=ENVELOPE_DEPTH_MAX, nodes=ENVELOPE_ITEMS_MAX + 1) is not None:
            return Refused("CanonicalJsonBoundsError", kind="traversal"), []
        texts.append(text)
    return None, texts


class Conversation:
    """One conversation as the contract sees it."""

    __slots__ = ("producer_id", "epoch", "tail_seq", "tail_digest", "records", "record_ids", "batches",
                 "boundaries")

    def __init__(self, producer_id: str, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.tail_seq = 0
        self.tail_digest = ZERO_DIGEST
        self.records: list[tuple[str, str]] = []  # records[seq - 1] = (batch id, canonical envelope text)
        self.record_ids: set[str] = set()  # membership only, never iterated
        # batch id -> (producer, epoch, first seq, last seq, batch digest, previous tail, tail)
        self.batches: dict[str, tuple] = {}
        self.boundaries: dict[int, str] = {0: ZERO_DIGEST}  # a tail seq -> its digest


def _append_view(result: Any) -> tuple:
    return (result.first_seq, result.last_seq, result.tail_digest, result.batch_digest, result.replayed)


def _tail_view(tail: Any) -> tuple:
    return (tail.tail_seq, tail.tail_digest, tail.epoch)


def _batch_view(batch: Any) -> tuple | None:
    if batch is None:
        return None
    return (batch.conversation_id, batch.batch_id, batch.producer_id, batch.epoch, batch.first_seq,
            batch.last_seq, batch.batch_digest, batch.previous_tail_digest, batch.tail_digest)


def _record_view(record: Any) -> tuple:
    return (record.conversation_id, record.seq, record.batch_id, _dumps(envelope_json(record.envelope)))


def _same(value: object) -> object:
    return value


class ReferenceLog(PortReference):
    """``ConversationLogPort``'s contract over plain dicts and lists."""

    port = "log"
    KEY_FROM = {"append": ("request", "conversation_id")}
    scope = "conversation"

    def __init__(self) -> None:
        self.conversations: dict[str, Conversation] = {}
        # Every offset the store handed out on a record it answered -> (conversation, seq);
        # kept across a deletion (a recreated conversation's records are named alike).
        self.offsets: dict[str, tuple[str, int]] = {}
        self._history = History()
        self._handlers = {"materialize": self._materialize, "append": self._append, "read": self._read,
                          "observe": self._observe,
                          "inspect_tail": self._inspect_tail, "lookup_batch": self._lookup_batch,
                          "digest_at": self._digest_at, "delete_conversation": self._delete}

    def _table(self) -> dict:
        return self.conversations

    def audit(self, view: Any) -> list[tuple[str, str]]:
        """Every conversation the model holds, against the store's tail."""
        found = []
        for cid, conversation in self.conversations.items():
            tail = view.log_tail(cid)
            stored = None if tail is None else _tail_view(tail)
            model = (conversation.tail_seq, conversation.tail_digest, conversation.epoch)
            message = None
            if stored != model:
                message = (f"at the end of the run conversation {cid!r} has the tail {stored}, the contract's "
                           f"reference model {model}; last calls on {cid!r}: {self._history.text(cid)}")
            found.append((cid, message))
        return found

    # --- the methods --------------------------------------------------------

    def _bound(self, call: Any, names: tuple[str, ...]) -> tuple | None:
        try:
            return bind(call, names)
        except (TypeError, KeyError):
            return None

    def _materialize(self, call: Any) -> str | None:
        key = self.key_of(call)
        bound = self._bound(call, ("conversation_id", "producer_id", "epoch"))
        if bound is None:
            return judge(call, key, Refused("TypeError"), _same, self._history)
        cid, producer_id, epoch = bound
        if type(cid) is not str or type(producer_id) is not str or type(epoch) is not int:
            return judge(call, key, Refused("TypeError"), _same, self._history)
        if epoch < 0 or _out_of_range(epoch):
            return judge(call, key, Refused("ValueError"), _same, self._history)
        conversation = self.conversations.get(cid)
        expected: Refused | None = None
        if conversation is not None and (epoch < conversation.epoch or (
                epoch == conversation.epoch and producer_id != conversation.producer_id)):
            expected = Refused("FenceRejected", conversation_id=cid, attempted_epoch=epoch,
                               actual_epoch=conversation.epoch)
        message = judge(call, cid, expected, _same, self._history)
        if message is None:
            if conversation is None:
                self.conversations[cid] = Conversation(producer_id, epoch)
            elif expected is None and epoch > conversation.epoch:
                conversation.producer_id, conversation.epoch = producer_id, epoch
            self._history.note(cid, call, (producer_id, epoch), "FenceRejected" if expected else None)
        return message

    def _append(self, call: Any) -> str | None:
        key = self.key_of(call)
        bound = self._bound(call, ("request",))
        if bound is None:
            return judge(call, key, Refused("TypeError"), _append_view, self._history)
        request = bound[0]
        problem, texts = check_request(request)
        if problem is not None:
            return judge(call, key, problem, _append_view, self._history)
        cid = request.conversation_id
        brief = (request.batch_id, request.producer_id, request.epoch, request.expected_tail_seq, len(texts))
        args_text = (f"batch {request.batch_id!r} of {len(texts)} records by {request.producer_id!r} "
                     f"epoch {request.epoch}, expected tail {request.expected_tail_seq} "
                     f"{request.expected_tail_digest[:12]}..")
        conversation = self.conversations.get(cid)
        if conversation is None:
            return judge(call, key, Refused("NotMaterialized", conversation_id=cid), _append_view,
                         self._history, args_text)
        digest_of_batch = batch_digest(request, texts)
        existing = conversation.batches.get(request.batch_id)
        expected: Any
        commit = False
        if request.epoch != conversation.epoch:
            expected = Refused("FenceRejected", conversation_id=cid, attempted_epoch=request.epoch,
                               actual_epoch=conversation.epoch)
        elif existing is not None:
            # A replay is the same batch sent from the same tail: the tail
            # it made is the chain step from the request's expected tail.
            if existing[6] == chain_step(request.expected_tail_digest, digest_of_batch,
                                         request.expected_tail_seq + 1):
                expected = (existing[2], existing[3], existing[6], existing[4], True)
            else:
                expected = Refused("AppendConflict", conversation_id=cid, kind="batch-digest",
                                   batch_id=request.batch_id)
        elif (request.expected_tail_seq != conversation.tail_seq
              or request.expected_tail_digest != conversation.tail_digest):
            expected = Refused("AppendConflict", conversation_id=cid, kind="tail", batch_id=request.batch_id,
                               actual_tail_seq=conversation.tail_seq, actual_tail_digest=conversation.tail_digest)
        else:
            expected = self._identity_conflict(conversation, request)
            if expected is None:
                first_seq = conversation.tail_seq + 1
                tail = chain_step(conversation.tail_digest, digest_of_batch, first_seq)
                expected = (first_seq, conversation.tail_seq + len(texts), tail, digest_of_batch, False)
                commit = True
        message = judge(call, cid, expected, _append_view, self._history, args_text)
        if message is not None:
            return message
        if commit:
            first_seq, last_seq, tail, _, _ = expected
            conversation.batches[request.batch_id] = (request.producer_id, request.epoch, first_seq, last_seq,
                                                      digest_of_batch, conversation.tail_digest, tail)
            batch_id = request.batch_id
            conversation.records.extend((batch_id, text) for text in texts)
            conversation.record_ids.update(record.record_id for record in request.records)
            conversation.boundaries[last_seq] = tail
            conversation.tail_seq, conversation.tail_digest = last_seq, tail
        outcome = expected.name if isinstance(expected, Refused) else expected[:2] + (
            "replayed" if expected[4] else "committed",)
        self._history.note(cid, call, brief, outcome)
        return None

    @staticmethod
    def _identity_conflict(conversation: Conversation, request: Any) -> Refused | None:
        seen: set[str] = set()  # membership only
        for record in request.records:
            if record.record_id in seen:
                return Refused("AppendConflict", conversation_id=request.conversation_id,
                               kind="record-identity", batch_id=request.batch_id, record_id=record.record_id)
            seen.add(record.record_id)
        for record in request.records:
            if record.record_id in conversation.record_ids:
                return Refused("AppendConflict", conversation_id=request.conversation_id,
                               kind="record-identity", batch_id=request.batch_id, record_id=record.record_id)
        return None

    def _read(self, call: Any) -> str | None:
        key = self.key_of(call)
        bound = self._bound(call, ("conversation_id", "after_seq", "limit"))
        if bound is None:
            return judge(call, key, Refused("TypeError"), _same, self._history)
        cid, after_seq, limit = bound
        if type(cid) is not str or type(after_seq) is not int or type(limit) is not int:
            return judge(call, key, Refused("TypeError"), _same, self._history)
        if after_seq < 0 or _out_of_range(after_seq, limit):
            return judge(call, key, Refused("ValueError"), _same, self._history)
        if not 1 <= limit <= PAGE_SIZE_MAX:
            return judge(call, key, Refused("ReadLimitOutOfRange", operation="read", limit=limit,
                                            limit_max=PAGE_SIZE_MAX), _same, self._history)
        conversation = self.conversations.get(cid)
        if conversation is None:
            return judge(call, key, Refused("NotMaterialized", conversation_id=cid), _same, self._history)
        if call.damaged:
            return None  # a read fault altered the answer on its way; the store was fine
        rows = conversation.records[after_seq:after_seq + limit]
        if call.error is None:
            message = self._compare_page(call, cid, after_seq, rows) or self._note_offsets(call, cid, call.result)
        else:
            page = f"{len(rows)} records {after_seq + 1}..{after_seq + len(rows)}" if rows else "no records"
            message = judge(call, cid, f"{page} (not shown)", _same, self._history)
        if message is None:
            self._history.note(cid, call, (after_seq, limit), len(rows))
        return message

    def _note_offsets(self, call: Any, cid: str, records: Any) -> str | None:
        """The offsets on records that matched the model: each a str, one per
        (conversation, seq), never another record's."""
        offsets = self.offsets
        for record in records:
            offset = getattr(record, "offset", None)
            seq = record.seq
            if type(offset) is not str:
                return divergence(call, cid, f"answers record {seq} with the offset {show(offset)}",
                                  f"answers record {seq} with an offset (a str)", self._history)
            named = offsets.setdefault(offset, (cid, seq))
            if named != (cid, seq):
                return divergence(call, cid, f"answers record {seq} with the offset {offset!r:.80}",
                                  f"never hands out one offset for two records: it named record {named[1]} "
                                  f"of {named[0]!r}", self._history)
        return None

    def _observe(self, call: Any) -> str | None:
        key = self.key_of(call)
        bound = bound_args(call, ("conversation_id", "after_offset"), {"after_offset": None})
        if bound is None or "conversation_id" not in bound or type(bound["conversation_id"]) is not str:
            return judge(call, key, Refused("TypeError"), _same, self._history)
        cid, offset = bound["conversation_id"], bound["after_offset"]
        after_seq = 0
        if offset is not None:
            named = self.offsets.get(offset) if type(offset) is str else None
            if named is None or named[0] != cid:
                return judge(call, cid, Refused("MalformedOffset", conversation_id=cid, offset=offset), _same,
                             self._history)
            after_seq = named[1]
        conversation = self.conversations.get(cid)
        if conversation is None:
            return judge(call, cid, Refused("NotMaterialized", conversation_id=cid), _same, self._history)
        if call.damaged:
            return None
        rows = conversation.records[after_seq:]
        if call.error is None:
            message = self._compare_page(call, cid, after_seq, rows) or self._note_offsets(call, cid, call.result)
        else:
            page = f"{len(rows)} records {after_seq + 1}..{after_seq + len(rows)}" if rows else "no records"
            message = judge(call, cid, f"{page} (not shown)", _same, self._history)
        if message is None:
            self._history.note(cid, call, ("after", after_seq), len(rows))
        return message

    def _compare_page(self, call: Any, cid: str, after_seq: int, rows: list[tuple[str, str]]) -> str | None:
        """Record by record: the first that differs is what the message shows."""
        try:
            answers = list(call.result)
        except TypeError:
            return divergence(call, cid, f"returns {show(call.result)}, not a page of records",
                              f"returns {len(rows)} records", self._history)
        for index in range(max(len(answers), len(rows))):
            want = None
            if index < len(rows):
                batch_id, text = rows[index]
                want = (cid, after_seq + index + 1, batch_id, _dumps(read_back(text)))
            got = None
            if index < len(answers):
                try:
                    got = _record_view(answers[index])
                except Exception as error:  # noqa: BLE001 - an answer of the wrong shape is a divergence
                    got = f"{show(answers[index])} ({type(error).__name__}: {error})"
            if got != want:
                return divergence(call, cid, f"returns {len(answers)} records, #{index + 1} being {show(got)}",
                                  f"returns {len(rows)} records, #{index + 1} being {show(want)}", self._history)
        return None

    def _inspect_tail(self, call: Any) -> str | None:
        key = self.key_of(call)
        bound = self._bound(call, ("conversation_id",))
        if bound is None or type(bound[0]) is not str:
            return judge(call, key, Refused("TypeError"), _tail_view, self._history)
        cid = bound[0]
        conversation = self.conversations.get(cid)
        if conversation is None:
            return judge(call, key, Refused("NotMaterialized", conversation_id=cid), _tail_view, self._history)
        expected = (conversation.tail_seq, conversation.tail_digest, conversation.epoch)
        message = judge(call, cid, expected, _tail_view, self._history)
        if message is None:
            self._history.note(cid, call, (), expected[0])
        return message

    def _lookup_batch(self, call: Any) -> str | None:
        key = self.key_of(call)
        bound = self._bound(call, ("conversation_id", "batch_id"))
        if bound is None or type(bound[0]) is not str or type(bound[1]) is not str:
            return judge(call, key, Refused("TypeError"), _batch_view, self._history)
        cid, batch_id = bound
        conversation = self.conversations.get(cid)
        batch = None if conversation is None else conversation.batches.get(batch_id)
        expected = None if batch is None else (cid, batch_id, *batch)
        message = judge(call, key, expected, _batch_view, self._history)
        if message is None and conversation is not None:
            self._history.note(cid, call, (batch_id,), None if batch is None else batch[2:4])
        return message

    def _digest_at(self, call: Any) -> str | None:
        key = self.key_of(call)
        bound = self._bound(call, ("conversation_id", "seq"))
        if bound is None or type(bound[0]) is not str or type(bound[1]) is not int:
            return judge(call, key, Refused("TypeError"), _same, self._history)
        cid, seq = bound
        if _out_of_range(seq):
            return judge(call, key, Refused("ValueError"), _same, self._history)
        conversation = self.conversations.get(cid)
        if conversation is None:
            return judge(call, key, Refused("NotMaterialized", conversation_id=cid), _same, self._history)
        expected = conversation.boundaries.get(seq)
        message = judge(call, cid, expected, _same, self._history)
        if message is None:
            self._history.note(cid, call, (seq,), None if expected is None else expected[:12])
        return message

    def _delete(self, call: Any) -> str | None:
        key = self.key_of(call)
        bound = self._bound(call, ("conversation_id",))
        if bound is None or type(bound[0]) is not str:
            return judge(call, key, Refused("TypeError"), _same, self._history)
        cid = bound[0]
        message = judge(call, cid, cid in self.conversations, _same, self._history)
        if message is None:
            self.conversations.pop(cid, None)
            self._history.drop(cid)
        return message
