"""The keyring: the run's durable store of wrapped data keys.

One row per data key, ``DataKey(dek_id, key_id, wrapped)``: the data key
wrapped under the key-encryption key ``key_id``. A sealed field names its
data key (``dataKeyId``); the row says which KEK opens it. Records are
immutable and chained by digest, so a key rotation re-wraps these rows and
never rewrites a record. The store also keeps the progress of each
rotation pass (``rotationId``, ``fromKeyId``, ``toKeyId``, ``cursor``,
``done``), so a pass killed half way resumes where it saved.

Two adapters give the same answers: in memory, and SQLite (its own tables in
the run's database file, ``BEGIN IMMEDIATE`` writes, rows with schema
version 1).
"""
from __future__ import annotations

import json
import sqlite3
from typing import Protocol

import attrs

from model.secrets.errors import EnvelopeDamaged, RewrapConflict
from model.sqlite_db import create_schema, require_autocommit, write_transaction

KEYRING_SCHEMA_VERSION = 1
ROTATION_FIELDS = ("rotationId", "fromKeyId", "toKeyId", "cursor", "done")


@attrs.frozen
class DataKey:
    dek_id: str
    key_id: str
    wrapped: str


class KeyringStore(Protocol):
    async def put_if_absent(self, row: DataKey) -> DataKey: ...

    async def get(self, dek_id: str) -> DataKey | None: ...

    async def rewrap(self, dek_id: str, from_key_id: str, to_key_id: str, wrapped: str) -> DataKey: ...

    async def scan(self, after_dek_id: str, limit: int) -> tuple[DataKey, ...]: ...

    async def get_rotation(self, rotation_id: str) -> dict | None: ...

    async def save_rotation(self, rotation: dict) -> None: ...


def _text(name: str, value: object, *, empty: bool = False) -> None:
    if type(value) is not str or (not value and not empty):
        raise TypeError(f"{name} must be a{'' if empty else ' non-empty'} str, got {value!r:.40}")


def _check_row(row: object) -> None:
    if not isinstance(row, DataKey):
        raise TypeError(f"a keyring row is a DataKey, got {type(row).__name__}")
    _text("dek_id", row.dek_id)
    _text("key_id", row.key_id)
    _text("wrapped", row.wrapped)


def _check_scan(after_dek_id: object, limit: object) -> None:
    _text("after_dek_id", after_dek_id, empty=True)
    if type(limit) is not int or limit < 1:
        raise TypeError(f"limit must be a positive int, got {limit!r:.40}")


def _check_rotation(rotation: object) -> dict:
    if type(rotation) is not dict or tuple(sorted(rotation)) != tuple(sorted(ROTATION_FIELDS)):
        raise TypeError(f"a rotation record has exactly the fields {ROTATION_FIELDS}")
    for name in ("rotationId", "fromKeyId", "toKeyId"):
        _text(name, rotation[name])
    _text("cursor", rotation["cursor"], empty=True)
    if type(rotation["done"]) is not bool:
        raise TypeError("done must be a bool")
    return {name: rotation[name] for name in ROTATION_FIELDS}


def decide_rewrap(row: DataKey | None, dek_id: str, from_key_id: str, to_key_id: str,
                  wrapped: str) -> tuple[DataKey, bool]:
    """(the row after a re-wrap, whether it is to be written). Already under
    ``to_key_id``: as it is (a repeat). Under another key than ``from_key_id``:
    ``RewrapConflict``. Absent: ``RewrapConflict`` naming no key."""
    if row is None:
        raise RewrapConflict(dek_id, from_key_id, "")
    if row.key_id == to_key_id:
        return row, False
    if row.key_id != from_key_id:
        raise RewrapConflict(dek_id, from_key_id, row.key_id)
    return DataKey(dek_id, to_key_id, wrapped), True


class InMemoryKeyringStore:
    def __init__(self) -> None:
        self._rows: dict[str, DataKey] = {}
        self._rotations: dict[str, dict] = {}

    async def put_if_absent(self, row: DataKey) -> DataKey:
        _check_row(row)
        return self._rows.setdefault(row.dek_id, row)

    async def get(self, dek_id: str) -> DataKey | None:
        _text("dek_id", dek_id)
        return self._rows.get(dek_id)

    async def rewrap(self, dek_id: str, from_key_id: str, to_key_id: str, wrapped: str) -> DataKey:
        _check_row(DataKey(dek_id, to_key_id, wrapped))
        _text("from_key_id", from_key_id)
        after, write = decide_rewrap(self._rows.get(dek_id), dek_id, from_key_id, to_key_id, wrapped)
        if write:
            self._rows[dek_id] = after
        return after

    async def scan(self, after_dek_id: str, limit: int) -> tuple[DataKey, ...]:
        _check_scan(after_dek_id, limit)
        ids = sorted(d for d in self._rows if d > after_dek_id)[:limit]
        return tuple(self._rows[d] for d in ids)

    async def get_rotation(self, rotation_id: str) -> dict | None:
        _text("rotation_id", rotation_id)
        stored = self._rotations.get(rotation_id)
        return dict(stored) if stored is not None else None

    async def save_rotation(self, rotation: dict) -> None:
        record = _check_rotation(rotation)
        self._rotations[record["rotationId"]] = record

    def rows(self) -> tuple[DataKey, ...]:
        """Every row, by data key id (the audit's read)."""
        return tuple(self._rows[d] for d in sorted(self._rows))


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS keyring_data_keys (
        dek_id TEXT PRIMARY KEY NOT NULL,
        key_id TEXT NOT NULL,
        wrapped TEXT NOT NULL,
        schema_version INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS keyring_rotations (
        rotation_id TEXT PRIMARY KEY NOT NULL,
        record_json TEXT NOT NULL,
        schema_version INTEGER NOT NULL
    ) WITHOUT ROWID""",
)
_SELECT_ROW = "SELECT dek_id, key_id, wrapped, schema_version FROM keyring_data_keys WHERE dek_id = ?"
_SCAN = ("SELECT dek_id, key_id, wrapped, schema_version FROM keyring_data_keys WHERE dek_id > ? "
         "ORDER BY dek_id LIMIT ?")
_ALL = "SELECT dek_id, key_id, wrapped, schema_version FROM keyring_data_keys ORDER BY dek_id"
_INSERT = ("INSERT INTO keyring_data_keys (dek_id, key_id, wrapped, schema_version) VALUES (?, ?, ?, ?) "
           "ON CONFLICT (dek_id) DO NOTHING")
_UPDATE = "UPDATE keyring_data_keys SET key_id = ?, wrapped = ? WHERE dek_id = ?"
_SELECT_ROTATION = "SELECT record_json, schema_version FROM keyring_rotations WHERE rotation_id = ?"
_UPSERT_ROTATION = ("INSERT INTO keyring_rotations (rotation_id, record_json, schema_version) VALUES (?, ?, ?) "
                    "ON CONFLICT (rotation_id) DO UPDATE SET record_json = excluded.record_json, "
                    "schema_version = excluded.schema_version")


def _version(where: str, version: object) -> None:
    if version != KEYRING_SCHEMA_VERSION:
        raise EnvelopeDamaged(where, f"unsupported keyring schema version {version!r}")


def _row(found: tuple | None) -> DataKey | None:
    if found is None:
        return None
    _version(f"keyring row {found[0]}", found[3])
    return DataKey(found[0], found[1], found[2])


class SqliteKeyringStore:
    def __init__(self, conn: sqlite3.Connection) -> None:
        require_autocommit(conn, "SqliteKeyringStore")
        self._conn = conn
        create_schema(conn, _SCHEMA)

    def _read(self, dek_id: str) -> DataKey | None:
        return _row(self._conn.execute(_SELECT_ROW, (dek_id,)).fetchone())

    async def put_if_absent(self, row: DataKey) -> DataKey:
        _check_row(row)
        with write_transaction(self._conn):
            self._conn.execute(_INSERT, (row.dek_id, row.key_id, row.wrapped, KEYRING_SCHEMA_VERSION))
            stored = self._read(row.dek_id)
        assert stored is not None
        return stored

    async def get(self, dek_id: str) -> DataKey | None:
        _text("dek_id", dek_id)
        return self._read(dek_id)

    async def rewrap(self, dek_id: str, from_key_id: str, to_key_id: str, wrapped: str) -> DataKey:
        _check_row(DataKey(dek_id, to_key_id, wrapped))
        _text("from_key_id", from_key_id)
        with write_transaction(self._conn):
            after, write = decide_rewrap(self._read(dek_id), dek_id, from_key_id, to_key_id, wrapped)
            if write:
                self._conn.execute(_UPDATE, (after.key_id, after.wrapped, dek_id))
        return after

    async def scan(self, after_dek_id: str, limit: int) -> tuple[DataKey, ...]:
        _check_scan(after_dek_id, limit)
        return tuple(_row(found) for found in self._conn.execute(_SCAN, (after_dek_id, limit)).fetchall())

    async def get_rotation(self, rotation_id: str) -> dict | None:
        _text("rotation_id", rotation_id)
        found = self._conn.execute(_SELECT_ROTATION, (rotation_id,)).fetchone()
        if found is None:
            return None
        _version(f"rotation {rotation_id}", found[1])
        return json.loads(found[0])

    async def save_rotation(self, rotation: dict) -> None:
        record = _check_rotation(rotation)
        text = json.dumps(record, sort_keys=True, separators=(",", ":"))
        with write_transaction(self._conn):
            self._conn.execute(_UPSERT_ROTATION, (record["rotationId"], text, KEYRING_SCHEMA_VERSION))

    def rows(self) -> tuple[DataKey, ...]:
        """Every row, by data key id (the audit's read)."""
        return tuple(_row(found) for found in self._conn.execute(_ALL).fetchall())
