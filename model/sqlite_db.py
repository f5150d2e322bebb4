"""One SQLite database file that can hold every store.

Rules every SQLite adapter in ``model/`` follows:

- ``isolation_level=None``: the sqlite3 module never opens transactions
  behind our back; every write transaction is an explicit ``BEGIN IMMEDIATE``
  so the write lock is taken up front (no deadlock-prone lock upgrade).
- WAL journal. ``synchronous=NORMAL``: a commit is atomic and survives a
  process crash (what the simulator and the SIGKILL test exercise); only an
  OS crash or power loss can drop the last commits, which is outside what a
  store adapter promises here.
- A bounded busy timeout, so a held write lock surfaces as a typed error
  rather than an unbounded wait.
"""
from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from typing import Iterator

BUSY_TIMEOUT_MS_DEFAULT = 5_000


def open_database(path: str, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS_DEFAULT) -> sqlite3.Connection:
    assert busy_timeout_ms >= 0
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_ms / 1000.0)
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal" and path != ":memory:":
        conn.close()
        raise sqlite3.OperationalError(f"could not enable WAL on {path!r} (got {mode!r})")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    return conn


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; ``ROLLBACK`` on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
