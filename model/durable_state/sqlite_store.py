"""The SQLite durable-state backend: one table in the shared database file.

Several stores share one database file and usually one connection, opened by
``model.sqlite_db.open_database`` (WAL, autocommit, bounded busy timeout).
This store owns only its table, ``durable_state``, which it creates
idempotently when constructed.

Compare-and-set is ONE guarded statement inside a ``BEGIN IMMEDIATE``
transaction, never read-then-write in Python:

- ``expected_revision == 0``: ``INSERT ... ON CONFLICT(key) DO NOTHING``;
- ``expected_revision > 0``: ``UPDATE ... WHERE key = ? AND revision = ?``.

Zero changed rows means a conflict; only then is the actual revision read, in
the same transaction, to build ``RevisionConflictError`` (the transaction is
rolled back by ``write_transaction`` as the error propagates — it had written
nothing anyway). The same guarded statements are what make the Postgres
variant of the SQLite compare-and-set safe across nodes without locks.

Like the in-memory store, no method awaits: each call is one atomic step for
the simulator. The SQL strings are module constants so the sqlite3 statement
cache reuses their prepared statements (a save runs ~200k times in a bench).
"""
from __future__ import annotations

import os
import sqlite3

from model.durable_state.store import (
    DurableStateRecord,
    DurableStateWrite,
    check_key,
    check_save_arguments,
    decode_payload,
    encode_payload,
    next_revision,
)
from model.sqlite_db import open_database, write_transaction

__all__ = ["SqliteDurableStateStore", "TABLE_NAME"]

TABLE_NAME = "durable_state"

_CREATE_TABLE_SQL = (
    "CREATE TABLE IF NOT EXISTS durable_state ("
    "key TEXT PRIMARY KEY, "
    "contract_version INTEGER NOT NULL, "
    "revision INTEGER NOT NULL, "
    "payload TEXT NOT NULL)"
)
_COLUMNS = ("key", "contract_version", "revision", "payload")

_LOAD_SQL = "SELECT contract_version, revision, payload FROM durable_state WHERE key = ?"
_REVISION_SQL = "SELECT revision FROM durable_state WHERE key = ?"
_CREATE_SQL = (
    "INSERT INTO durable_state (key, contract_version, revision, payload) "
    "VALUES (?, ?, 1, ?) ON CONFLICT(key) DO NOTHING"
)
_UPDATE_SQL = (
    "UPDATE durable_state SET contract_version = ?, revision = revision + 1, payload = ? "
    "WHERE key = ? AND revision = ?"
)
_CLEAR_SQL = "DELETE FROM durable_state WHERE key = ?"
_SNAPSHOT_SQL = "SELECT key, contract_version, revision, payload FROM durable_state ORDER BY key"


class SqliteDurableStateStore:
    """``DurableStateStore`` over an ``sqlite3.Connection`` from ``open_database``.

    The connection is shared, not owned: ``close()`` closes it only when the
    store was made by :meth:`open`.
    """

    __slots__ = ("_conn", "_owns_connection")

    def __init__(self, conn: sqlite3.Connection) -> None:
        if not isinstance(conn, sqlite3.Connection):
            raise TypeError(f"conn must be an sqlite3.Connection, got {type(conn).__name__}")
        if conn.isolation_level is not None:
            # write_transaction issues BEGIN IMMEDIATE itself; the sqlite3
            # module's implicit transactions would nest under it and fail.
            raise ValueError("conn must be in autocommit mode (isolation_level=None); use model.sqlite_db.open_database")
        if conn.in_transaction:
            raise ValueError("conn has an open transaction; construct stores between transactions")
        self._conn = conn
        self._owns_connection = False
        with write_transaction(conn):
            conn.execute(_CREATE_TABLE_SQL)
            columns = tuple(row[1] for row in conn.execute("PRAGMA table_info(durable_state)"))
            if columns != _COLUMNS:
                raise sqlite3.DatabaseError(
                    f"table durable_state has columns {columns}, expected {_COLUMNS}: "
                    "not a durable-state table this version understands"
                )

    @classmethod
    def open(cls, path: str | os.PathLike[str], **open_kwargs: object) -> SqliteDurableStateStore:
        """Open (or create) the database at ``path`` with a connection of its own.

        ``open_kwargs`` go to ``model.sqlite_db.open_database`` (e.g. ``busy_timeout_ms``).
        """
        conn = open_database(os.fspath(path), **open_kwargs)  # type: ignore[arg-type]
        try:
            store = cls(conn)
        except BaseException:
            conn.close()
            raise
        store._owns_connection = True
        return store

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def close(self) -> None:
        """Close the connection if this store opened it; otherwise do nothing."""
        if self._owns_connection:
            self._owns_connection = False
            self._conn.close()

    async def load(self, key: str) -> DurableStateRecord | None:
        check_key(key)
        # A single SELECT in autocommit mode reads one consistent snapshot.
        row = self._conn.execute(_LOAD_SQL, (key,)).fetchone()
        if row is None:
            return None
        return DurableStateRecord(row[0], row[1], decode_payload(row[2]))

    async def save(self, key: str, write: DurableStateWrite, expected_revision: int) -> DurableStateRecord:
        check_save_arguments(key, write, expected_revision)
        text, payload = encode_payload(write.payload)
        contract_version = write.contract_version
        conn = self._conn
        with write_transaction(conn):
            if expected_revision == 0:
                changed = conn.execute(_CREATE_SQL, (key, contract_version, text)).rowcount
            else:
                changed = conn.execute(_UPDATE_SQL, (contract_version, text, key, expected_revision)).rowcount
            if changed != 1:
                assert changed == 0, changed  # key is the primary key
                row = conn.execute(_REVISION_SQL, (key,)).fetchone()
                actual = 0 if row is None else row[0]
                # The guarded statement changed nothing, so the stored
                # revision must differ from the expected one: next_revision
                # raises the conflict (and rolls the transaction back).
                next_revision(key, expected_revision, actual)
                raise AssertionError(f"guarded write on {key!r} changed no row, yet revision {actual} matches")
        return DurableStateRecord(contract_version, expected_revision + 1, payload)

    async def clear(self, key: str) -> None:
        check_key(key)
        conn = self._conn
        with write_transaction(conn):
            conn.execute(_CLEAR_SQL, (key,))

    # --- inspection (not part of the SPI) -------------------------------------

    def snapshot(self) -> dict[str, DurableStateRecord]:
        """Every record, keyed and ordered by key (UTF-8 byte order = code-point order)."""
        return {
            key: DurableStateRecord(contract_version, revision, decode_payload(text))
            for key, contract_version, revision, text in self._conn.execute(_SNAPSHOT_SQL)
        }

    def __len__(self) -> int:
        return self._conn.execute("SELECT count(*) FROM durable_state").fetchone()[0]
