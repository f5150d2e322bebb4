"""``write-contention`` on SQLite: another process really holds the write lock.

Why: an injected ``SqliteWriteContention`` raised by the fault layer tests
the callers' retry rule, but never the adapter's own handling of a busy
database: that ``BEGIN IMMEDIATE`` refused with ``SQLITE_BUSY`` is told
apart from other operational errors (``model.sqlite_db._is_contention``),
raised typed and retryable (or wrapped with its cause, as the conversation
log does), and that the refused call left nothing behind. On a SQLite store
the fault is therefore made real: a second connection to the run's file
takes the write lock (``BEGIN IMMEDIATE``), the node's own connection's busy
timeout is set to 0 for the one call (so the refusal is immediate: no wall
clock time is spent and the outcome does not depend on it), the call runs
against the real lock, and then the lock is released and the busy timeout
restored.

Deterministic: the firing is the plan's, and whether the call needed the
lock is the adapter's own code path (a call that writes nothing, such as an
exact retry answered from what is stored, goes through untouched, as in
production). A store call never suspends inside a transaction, so the lock
is never held across another task's call.

Not SQLite (in memory, or a user's adapter without a ``sqlite3`` connection
at ``_conn``/``connection``): ``hold`` answers ``None`` and the fault layer
raises the injected error instead.
"""
from __future__ import annotations

import sqlite3
from typing import Any


def store_connection(store: Any) -> Any:
    """The SQLite connection ``store`` writes through, or None (a wrapper
    such as the damaged-read layer keeps its store at ``_store``)."""
    store = getattr(store, "_store", store)
    conn = getattr(store, "_conn", None)
    if conn is None:
        conn = getattr(store, "connection", None)
    return conn if hasattr(conn, "execute") and hasattr(conn, "in_transaction") else None


class HeldWriteLock:
    """The write lock of ``conn``'s database file, held by another connection."""

    __slots__ = ("_conn", "_other", "_busy_timeout_ms")

    def __init__(self, conn: Any, path: str) -> None:
        self._conn = conn
        self._busy_timeout_ms = conn.execute("PRAGMA busy_timeout").fetchone()[0]
        self._other = sqlite3.connect(path, isolation_level=None, timeout=0)
        try:
            self._other.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._other.close()
            raise
        conn.execute("PRAGMA busy_timeout = 0")

    def release(self) -> None:
        try:
            self._other.execute("ROLLBACK")
        finally:
            self._other.close()
            self._conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")


def hold(store: Any) -> HeldWriteLock | None:
    """Take the write lock of ``store``'s database from another connection,
    or None when ``store`` is not on a SQLite file (or the connection is in a
    transaction: never the case between calls, so never faulted)."""
    conn = store_connection(store)
    if conn is None or conn.in_transaction:
        return None
    rows = conn.execute("PRAGMA database_list").fetchall()
    path = next((row[2] for row in rows if row[1] == "main"), "")
    if not path:  # an in-memory database: no other connection can share it
        return None
    return HeldWriteLock(conn, path)
