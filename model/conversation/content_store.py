"""Digest-addressed content store (persistence §2.6, STORE-009).

A blob's ref is ``"sha256:<hex>"`` of its bytes, so ``put`` is idempotent
and ``get`` verifies what it returns: a stored blob whose bytes no longer
hash to its ref is ``ContentCorrupted``, never returned.

The SQLite adapter keeps blobs in ``conv_content``. The conversation log
keeps its spilled payloads in a table of its own (``conv_spills``) in the
same database, so a spilled payload and the record that references it
commit in one transaction (``put_in_transaction``), and retention of a
conversation never deletes a blob someone put through this port.
"""
from __future__ import annotations

import hashlib
import sqlite3

from model.sqlite_db import open_database

from .records import ConversationStoreError

REF_PREFIX = "sha256:"


class ContentStoreError(ConversationStoreError):
    pass


class ContentMissing(ContentStoreError):
    def __init__(self, ref: str) -> None:
        self.ref = ref
        super().__init__(f"no content for {ref!r}")
        self._args = (ref,)


class ContentCorrupted(ContentStoreError):
    def __init__(self, ref: str, actual_ref: str) -> None:
        self.ref = ref
        self.actual_ref = actual_ref
        super().__init__(f"content {ref!r} is corrupted: its bytes hash to {actual_ref!r}")
        self._args = (ref, actual_ref)


def content_ref(data: bytes) -> str:
    return REF_PREFIX + hashlib.sha256(data).hexdigest()


def _require_bytes(data: object) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"content must be bytes, got {type(data).__name__}")
    return bytes(data)


def _require_ref(ref: object) -> str:
    if type(ref) is not str or not ref.startswith(REF_PREFIX) or len(ref) != len(REF_PREFIX) + 64:
        raise ValueError(f"not a content ref: {ref!r:.80}")
    return ref


def _verified(ref: str, data: bytes) -> bytes:
    actual = content_ref(data)
    if actual != ref:
        raise ContentCorrupted(ref, actual)
    return data


class InMemoryContentStore:
    def __init__(self) -> None:
        self._blobs: dict[str, bytes] = {}

    async def put(self, data: bytes) -> str:
        data = _require_bytes(data)
        ref = content_ref(data)
        self._blobs.setdefault(ref, data)
        return ref

    async def get(self, ref: str) -> bytes:
        _require_ref(ref)
        data = self._blobs.get(ref)
        if data is None:
            raise ContentMissing(ref)
        return _verified(ref, data)

    async def has(self, ref: str) -> bool:
        return _require_ref(ref) in self._blobs

    async def delete(self, ref: str) -> bool:
        """True if a blob was deleted (idempotent)."""
        return self._blobs.pop(_require_ref(ref), None) is not None


def _statements(table: str) -> dict[str, str]:
    assert table.isidentifier(), table
    return {
        "schema": f"""CREATE TABLE IF NOT EXISTS {table} (
        ref TEXT PRIMARY KEY NOT NULL,
        size INTEGER NOT NULL,
        data BLOB NOT NULL
    ) WITHOUT ROWID""",
        "insert": f"INSERT INTO {table} (ref, size, data) VALUES (?, ?, ?) ON CONFLICT (ref) DO NOTHING",
        "select": f"SELECT data FROM {table} WHERE ref = ?",
        "has": f"SELECT 1 FROM {table} WHERE ref = ?",
        "delete": f"DELETE FROM {table} WHERE ref = ?",
    }


class SqliteContentStore:
    """Blobs in ``conv_content`` (created idempotently). ``table``: another
    table of blobs (the conversation log keeps its spilled payloads apart,
    in ``conv_spills``: deleting a conversation's spills must never delete
    a blob a user of the content port put, even one with the same bytes)."""

    def __init__(self, conn: sqlite3.Connection, *, table: str = "conv_content") -> None:
        if conn.isolation_level is not None:
            raise ValueError("SqliteContentStore needs a connection from open_database (isolation_level=None)")
        self._conn = conn
        self._sql = _statements(table)
        from .sqlite_store import writing  # the contention-mapping write transaction

        self._writing = writing
        with writing(conn, "create content tables"):
            conn.execute(self._sql["schema"])

    @classmethod
    def open(cls, path: str) -> "SqliteContentStore":
        return cls(open_database(path))

    def put_in_transaction(self, data: bytes) -> str:
        """Insert inside the caller's open write transaction."""
        assert self._conn.in_transaction
        ref = content_ref(data)
        self._conn.execute(self._sql["insert"], (ref, len(data), data))
        return ref

    def get_now(self, ref: str) -> bytes:
        _require_ref(ref)
        row = self._conn.execute(self._sql["select"], (ref,)).fetchone()
        if row is None:
            raise ContentMissing(ref)
        return _verified(ref, bytes(row[0]))

    async def put(self, data: bytes) -> str:
        data = _require_bytes(data)
        with self._writing(self._conn, "content put"):
            return self.put_in_transaction(data)

    async def get(self, ref: str) -> bytes:
        return self.get_now(ref)

    async def has(self, ref: str) -> bool:
        return self._conn.execute(self._sql["has"], (_require_ref(ref),)).fetchone() is not None

    async def delete(self, ref: str) -> bool:
        _require_ref(ref)
        with self._writing(self._conn, "content delete"):
            return self._conn.execute(self._sql["delete"], (ref,)).rowcount > 0
