"""SQLite ConversationStore (persistence §9.2).

Shares one database file (usually one connection from
``model.sqlite_db.open_database``) with the other stores; owns the
``conv_*`` tables and creates them idempotently.

- Every write is one ``write_transaction`` (``BEGIN IMMEDIATE``): the rows a
  rule needs (conversation row, batch row, reused record ids) are read and
  the rule's decision written inside it, so epochs are checked and recorded
  transactionally and a concurrent writer can never slip between check and
  write. A write-lock timeout (``model.sqlite_db.SqliteWriteContention``)
  surfaces as ``ConversationStoreError`` with the contention as ``cause``
  (``.retryable`` is True).
- Opening checks ``conv_storage_version`` and the required tables
  (``StorageVersionMismatch``). ``verify_on_open=True`` additionally
  recomputes every conversation's digest chain (``HistoryCorrupted`` on a
  mismatch); off by default because every read already decodes and
  validates its rows.
- Payloads whose canonical JSON exceeds ``spill_threshold_bytes`` (default
  16 KiB) are stored in a content table of the log's own (``conv_spills``) in the same
  transaction; the record row then holds the envelope with a null payload
  and ``spill = {"digest", "ref", "size"}``. Reads resolve and verify it.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import contextmanager
from typing import Iterator

import model.sqlite_db as sqlite_db
from model.canonical import ZERO_DIGEST, CanonicalDecodeError, canonical_json, decode
from model.sqlite_db import open_database, write_transaction

from .content_store import ContentStoreError, SqliteContentStore
from .records import (
    AppendResult,
    BatchRecord,
    CanonicalRecord,
    ConversationStoreError,
    ConversationTail,
    FencedAppendRequest,
    HistoryCorrupted,
    NotMaterialized,
    StorageVersionMismatch,
)
from .rules import (
    MATERIALIZE_CREATE,
    MATERIALIZE_NOOP,
    AppendPlan,
    ConversationRow,
    check_page,
    decide_append,
    decide_materialize,
    decode_record,
    observe_pages,
    prepare_append,
    record_offset,
    recompute_chain,
    require_int,
    require_str,
    validate_materialize_args,
    validate_read_args,
)

# 2: the digest chain links batch digests (version 1 hashed each batch's
# records into the chain again): a version-1 file is refused as such, not
# read as a corrupt chain.
STORAGE_VERSION = 2

#: The adapter part of this store's observation offsets: ``sqlite:v1:{base64(id)}:{seq}``.
OFFSET_ADAPTER = "sqlite"
SPILL_THRESHOLD_BYTES_DEFAULT = 16 * 1024


def _is_write_contention(exc: BaseException) -> bool:
    cls = getattr(sqlite_db, "SqliteWriteContention", None)
    if cls is not None and isinstance(exc, cls):
        return True
    return type(exc).__name__ == "SqliteWriteContention"


@contextmanager
def writing(conn: sqlite3.Connection, what: str) -> Iterator[sqlite3.Connection]:
    """``write_transaction`` with write contention mapped onto the port's
    ``ConversationStoreError`` (the contention kept as ``cause``)."""
    try:
        with write_transaction(conn):
            yield conn
    except Exception as exc:
        if _is_write_contention(exc):
            raise ConversationStoreError(f"write contention during {what}", cause=exc) from exc
        raise


_REQUIRED_TABLES = ("conv_storage_version", "conv_conversations", "conv_batches", "conv_records")
_SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS conv_storage_version (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        version INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS conv_conversations (
        conversation_id TEXT PRIMARY KEY NOT NULL,
        producer_id TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        tail_seq INTEGER NOT NULL,
        tail_digest TEXT NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS conv_batches (
        conversation_id TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        producer_id TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        first_seq INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        batch_digest TEXT NOT NULL,
        previous_tail_digest TEXT NOT NULL,
        tail_digest TEXT NOT NULL,
        PRIMARY KEY (conversation_id, batch_id)
    ) WITHOUT ROWID""",
    "CREATE UNIQUE INDEX IF NOT EXISTS conv_batches_last ON conv_batches (conversation_id, last_seq)",
    """CREATE TABLE IF NOT EXISTS conv_records (
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL CHECK (seq >= 1),
        record_id TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        envelope_json TEXT NOT NULL,
        spill TEXT,
        PRIMARY KEY (conversation_id, seq)
    ) WITHOUT ROWID""",
    "CREATE UNIQUE INDEX IF NOT EXISTS conv_records_identity ON conv_records (conversation_id, record_id)",
)

_SELECT_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'conv\\_%' ESCAPE '\\'"
_SELECT_VERSION = "SELECT version FROM conv_storage_version WHERE id = 1"
_INSERT_VERSION = "INSERT INTO conv_storage_version (id, version) VALUES (1, ?)"
_SELECT_CONVERSATION = (
    "SELECT producer_id, epoch, tail_seq, tail_digest FROM conv_conversations WHERE conversation_id = ?"
)
_INSERT_CONVERSATION = (
    "INSERT INTO conv_conversations (conversation_id, producer_id, epoch, tail_seq, tail_digest) "
    "VALUES (?, ?, ?, 0, ?)"
)
_TAKEOVER = "UPDATE conv_conversations SET producer_id = ?, epoch = ? WHERE conversation_id = ?"
_ADVANCE = (
    "UPDATE conv_conversations SET producer_id = ?, epoch = ?, tail_seq = ?, tail_digest = ? "
    "WHERE conversation_id = ?"
)
_BATCH_COLUMNS = (
    "conversation_id, batch_id, producer_id, epoch, first_seq, last_seq, "
    "batch_digest, previous_tail_digest, tail_digest"
)
_SELECT_BATCH = f"SELECT {_BATCH_COLUMNS} FROM conv_batches WHERE conversation_id = ? AND batch_id = ?"
_INSERT_BATCH = f"INSERT INTO conv_batches ({_BATCH_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
_SELECT_DIGEST_AT = "SELECT tail_digest FROM conv_batches WHERE conversation_id = ? AND last_seq = ?"
_SELECT_REUSED = (
    "SELECT record_id FROM conv_records WHERE conversation_id = ? "
    "AND record_id IN (SELECT value FROM json_each(?))"
)
# Up to this many record ids are matched with one placeholder each (a
# statement per count, cached), the same answer as json_each gives for ids
# SQLite can bind and that hold no NUL; any other batch goes through json_each.
_REUSED_INLINE_MAX = 8
_SELECT_REUSED_INLINE = tuple(
    "SELECT record_id FROM conv_records WHERE conversation_id = ? "
    f"AND record_id IN ({', '.join('?' for _ in range(n))})" if n else ""
    for n in range(_REUSED_INLINE_MAX + 1)
)
_INSERT_RECORD = (
    "INSERT INTO conv_records (conversation_id, seq, record_id, batch_id, envelope_json, spill) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_VERIFY_PAGE_ROWS = 1024  # verify_all's page
_SELECT_PAGE = (
    "SELECT seq, record_id, batch_id, envelope_json, spill FROM conv_records "
    "WHERE conversation_id = ? AND seq > ? ORDER BY seq LIMIT ?"
)
_SELECT_ALL_CONVERSATIONS = "SELECT conversation_id, tail_seq, tail_digest FROM conv_conversations ORDER BY conversation_id"


def open_schema(conn: sqlite3.Connection) -> None:
    """Create the conv_ log tables in an empty database, or check that an
    existing one has them all at STORAGE_VERSION."""
    with writing(conn, "open conversation schema"):
        present = {row[0] for row in conn.execute(_SELECT_TABLES)}
        if not present.intersection(_REQUIRED_TABLES):
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute(_INSERT_VERSION, (STORAGE_VERSION,))
            return
        missing = [name for name in _REQUIRED_TABLES if name not in present]
        found = None
        if "conv_storage_version" in present:
            row = conn.execute(_SELECT_VERSION).fetchone()
            found = None if row is None else row[0]
        if missing:
            raise StorageVersionMismatch(STORAGE_VERSION, found, f"missing tables {missing}")
        if found != STORAGE_VERSION:
            raise StorageVersionMismatch(STORAGE_VERSION, found)


class SqliteConversationStore:
    """``ConversationStore`` over a SQLite connection from ``open_database``."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        spill_threshold_bytes: int = SPILL_THRESHOLD_BYTES_DEFAULT,
        verify_on_open: bool = False,
    ) -> None:
        if conn.isolation_level is not None:
            raise ValueError("SqliteConversationStore needs a connection from open_database (isolation_level=None)")
        require_int("spill_threshold_bytes", spill_threshold_bytes)
        if spill_threshold_bytes < 0:
            raise ValueError("spill_threshold_bytes must be >= 0")
        self._conn = conn
        self._owns_connection = False
        self.spill_threshold_bytes = spill_threshold_bytes
        open_schema(conn)
        self.content = SqliteContentStore(conn, table="conv_spills")
        if verify_on_open:
            self.verify_all()

    @classmethod
    def open(cls, path: str, **options) -> "SqliteConversationStore":
        conn = open_database(path)
        try:
            store = cls(conn, **options)
        except BaseException:
            conn.close()
            raise
        store._owns_connection = True
        return store

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def close(self) -> None:
        if self._owns_connection:
            self._conn.close()

    # --- writes ---------------------------------------------------------------

    async def materialize(self, conversation_id: str, producer_id: str, epoch: int) -> None:
        validate_materialize_args(conversation_id, producer_id, epoch)
        conn = self._conn
        with writing(conn, "materialize"):
            row = conn.execute(_SELECT_CONVERSATION, (conversation_id,)).fetchone()
            decision = decide_materialize(
                conversation_id, None if row is None else (row[0], row[1]), producer_id, epoch
            )
            if decision == MATERIALIZE_CREATE:
                conn.execute(_INSERT_CONVERSATION, (conversation_id, producer_id, epoch, ZERO_DIGEST))
            elif decision != MATERIALIZE_NOOP:
                conn.execute(_TAKEOVER, (producer_id, epoch, conversation_id))

    async def delete_conversation(self, conversation_id: str) -> bool:
        """Retention: delete an archived conversation, whole, with its spilled
        payloads (idempotent: False when there was none)."""
        require_str("conversation_id", conversation_id)
        conn = self._conn
        with writing(conn, "delete conversation"):
            spills = [row[0] for row in conn.execute(
                "SELECT spill FROM conv_records WHERE conversation_id = ? AND spill IS NOT NULL", (conversation_id,))]
            conn.execute("DELETE FROM conv_records WHERE conversation_id = ?", (conversation_id,))
            conn.execute("DELETE FROM conv_batches WHERE conversation_id = ?", (conversation_id,))
            deleted = conn.execute("DELETE FROM conv_conversations WHERE conversation_id = ?",
                                   (conversation_id,)).rowcount > 0
            for spill in spills:
                ref = json.loads(spill)["ref"]
                # Content is shared by digest: keep a blob another record still uses.
                if conn.execute("SELECT 1 FROM conv_records WHERE spill LIKE ? LIMIT 1",
                                (f'%"{ref}"%',)).fetchone() is None:
                    conn.execute("DELETE FROM conv_spills WHERE ref = ?", (ref,))
        return deleted

    async def append(self, request: FencedAppendRequest) -> AppendResult:
        prepared = prepare_append(request)
        cid = request.conversation_id
        conn = self._conn
        with writing(conn, "append"):
            row = conn.execute(_SELECT_CONVERSATION, (cid,)).fetchone()
            conversation = None
            existing_batch = None
            reused: list[str] = []
            if row is not None:
                conversation = ConversationRow(*row)
                batch_row = conn.execute(_SELECT_BATCH, (cid, request.batch_id)).fetchone()
                existing_batch = None if batch_row is None else BatchRecord(*batch_row)
                record_ids = prepared.record_ids
                cursor = None
                # json_each reads an id holding NUL only up to it: such a
                # batch keeps going through json_each, as it always has.
                if 0 < len(record_ids) <= _REUSED_INLINE_MAX and "\x00" not in "".join(record_ids):
                    try:
                        cursor = conn.execute(_SELECT_REUSED_INLINE[len(record_ids)], (cid, *record_ids))
                    except UnicodeEncodeError:  # an id SQLite cannot bind (a lone surrogate): as before
                        cursor = None
                if cursor is None:
                    cursor = conn.execute(_SELECT_REUSED, (cid, json.dumps(list(record_ids))))
                stored = {r[0] for r in cursor}
                reused = [rid for rid in prepared.record_ids if rid in stored]
            decision = decide_append(request, prepared, conversation, existing_batch, reused)
            if not isinstance(decision, AppendPlan):
                return decision
            self._write(request, prepared, decision)
        return decision.result()

    def _write(self, request: FencedAppendRequest, prepared, plan: AppendPlan) -> None:
        conn = self._conn
        cid = request.conversation_id
        rows = []
        for seq, (record_id, envelope, text) in enumerate(
            zip(prepared.record_ids, prepared.envelopes, prepared.envelope_texts), plan.first_seq
        ):
            spill = None
            if len(text.encode("utf-8")) > self.spill_threshold_bytes:
                value = envelope.to_json()
                payload_bytes = canonical_json(value["payload"]).encode("utf-8")
                if len(payload_bytes) > self.spill_threshold_bytes:
                    ref = self.content.put_in_transaction(payload_bytes)
                    spill = canonical_json(
                        {"ref": ref, "size": len(payload_bytes), "digest": hashlib.sha256(payload_bytes).hexdigest()}
                    )
                    text = canonical_json(dict(value, payload=None))
            rows.append((cid, seq, record_id, request.batch_id, text, spill))
        conn.executemany(_INSERT_RECORD, rows)
        conn.execute(
            _INSERT_BATCH,
            (cid, request.batch_id, request.producer_id, request.epoch, plan.first_seq, plan.last_seq,
             plan.batch_digest, plan.previous_tail_digest, plan.tail_digest),
        )
        conn.execute(_ADVANCE, (request.producer_id, request.epoch, plan.last_seq, plan.tail_digest, cid))

    # --- reads ----------------------------------------------------------------

    async def inspect_tail(self, conversation_id: str) -> ConversationTail:
        require_str("conversation_id", conversation_id)
        row = self._conn.execute(_SELECT_CONVERSATION, (conversation_id,)).fetchone()
        if row is None:
            raise NotMaterialized(conversation_id)
        return ConversationTail(row[2], row[3], row[1])

    async def read(self, conversation_id: str, after_seq: int, limit: int) -> tuple[CanonicalRecord, ...]:
        validate_read_args(conversation_id, after_seq, limit)
        if self._conn.execute(_SELECT_CONVERSATION, (conversation_id,)).fetchone() is None:
            raise NotMaterialized(conversation_id)
        rows = self._conn.execute(_SELECT_PAGE, (conversation_id, after_seq, limit)).fetchall()
        records = tuple(self._decode_row(conversation_id, row) for row in rows)
        check_page(conversation_id, after_seq, records)
        return records

    async def observe(self, conversation_id: str, after_offset: str | None = None):
        """The records after ``after_offset`` (an offset a read or an
        observation handed out; None: from the start), in order, page by
        page up to the tail. ``MalformedOffset`` for an offset this store
        did not hand out for this conversation."""
        async for record in observe_pages(self.read, OFFSET_ADAPTER, conversation_id, after_offset):
            yield record

    def _decode_row(self, conversation_id: str, row: tuple) -> CanonicalRecord:
        seq, record_id, batch_id, envelope_text, spill = row
        payload_text = None
        if spill is not None:
            payload_text = self._resolve_spill(conversation_id, seq, spill)
        record = decode_record(conversation_id, seq, batch_id, envelope_text, payload_text,
                               offset=record_offset(OFFSET_ADAPTER, conversation_id, seq))
        if record.envelope.record_id != record_id:
            raise HistoryCorrupted(conversation_id, seq, seq, "record id column disagrees with the envelope")
        return record

    def _resolve_spill(self, conversation_id: str, seq: int, spill_text: str) -> str:
        try:
            spill = decode(spill_text, max_bytes=4096)
            ref, size, expected = spill["ref"], spill["size"], spill["digest"]
            data = self.content.get_now(ref)
        except (CanonicalDecodeError, KeyError, TypeError, ValueError, ContentStoreError) as exc:
            raise HistoryCorrupted(conversation_id, seq, seq, f"spilled payload unusable: {exc}") from None
        if len(data) != size or hashlib.sha256(data).hexdigest() != expected:
            raise HistoryCorrupted(conversation_id, seq, seq, "spilled payload digest mismatch")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise HistoryCorrupted(conversation_id, seq, seq, "spilled payload is not UTF-8") from None

    async def lookup_batch(self, conversation_id: str, batch_id: str) -> BatchRecord | None:
        require_str("conversation_id", conversation_id)
        require_str("batch_id", batch_id)
        row = self._conn.execute(_SELECT_BATCH, (conversation_id, batch_id)).fetchone()
        return None if row is None else BatchRecord(*row)

    async def digest_at(self, conversation_id: str, seq: int) -> str | None:
        require_str("conversation_id", conversation_id)
        require_int("seq", seq)
        return self.digest_at_now(conversation_id, seq)

    def digest_at_now(self, conversation_id: str, seq: int) -> str | None:
        """``digest_at`` without the coroutine (usable inside a transaction)."""
        if self._conn.execute(_SELECT_CONVERSATION, (conversation_id,)).fetchone() is None:
            raise NotMaterialized(conversation_id)
        if seq == 0:
            return ZERO_DIGEST
        row = self._conn.execute(_SELECT_DIGEST_AT, (conversation_id, seq)).fetchone()
        return None if row is None else row[0]

    def tail_now(self, conversation_id: str) -> ConversationTail | None:
        row = self._conn.execute(_SELECT_CONVERSATION, (conversation_id,)).fetchone()
        return None if row is None else ConversationTail(row[2], row[3], row[1])

    def verify_all(self) -> int:
        """Recompute every conversation's digest chain from its rows; raise
        HistoryCorrupted on any mismatch. Returns the conversations checked."""
        conn = self._conn
        checked = 0
        for cid, tail_seq, tail_digest in conn.execute(_SELECT_ALL_CONVERSATIONS).fetchall():
            records = []
            after = 0
            # Bounded by the tail: tail_seq records fill tail_seq // PAGE
            # pages and part of one more, then a page comes back empty. Rows
            # beyond that bound are more than the tail says: the count below
            # disagrees either way.
            for _ in range(tail_seq // _VERIFY_PAGE_ROWS + 2):
                rows = conn.execute(_SELECT_PAGE, (cid, after, _VERIFY_PAGE_ROWS)).fetchall()
                if not rows:
                    break
                records.extend(self._decode_row(cid, row) for row in rows)
                after = rows[-1][0]
            if len(records) != tail_seq:
                raise HistoryCorrupted(cid, tail_seq, len(records), "record count disagrees with the tail")
            recomputed = recompute_chain(cid, records)
            if recomputed != tail_digest:
                raise HistoryCorrupted(cid, tail_seq, tail_seq, "digest chain does not recompute to the tail digest")
            checked += 1
        return checked

    def counts(self) -> dict[str, int]:
        conn = self._conn
        return {
            "conversations": conn.execute("SELECT count(*) FROM conv_conversations").fetchone()[0],
            "records": conn.execute("SELECT count(*) FROM conv_records").fetchone()[0],
            "batches": conn.execute("SELECT count(*) FROM conv_batches").fetchone()[0],
        }
