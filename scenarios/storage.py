"""Where a scenario's durable stores live, and how the audit reads them.

Memory stores need nothing. SQLite stores of one run share one database
file: a temporary one, or ``--db PATH``. A run always starts from empty
stores, so ``--db`` must name a new or empty file: reusing a finished run's
file would continue from its state (and report false violations), and
someone else's SQLite file must never be switched to WAL and given tables.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from typing import Any

from model.sqlite_db import open_database
from sim.scenario import SetupError


def run_sync(coro: Any) -> Any:
    """Drive a store call that never suspends (the audit reads stores directly)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("store call suspended during audit")


SIDECARS = ("-wal", "-shm")  # what SQLite puts beside a WAL-mode file it opens


def _refuse_used_database(path: str) -> None:
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    # Reading a WAL-mode file (a finished run's) creates its -wal and -shm:
    # those this look made are removed again, whatever it finds.
    made = [path + suffix for suffix in SIDECARS if not os.path.lexists(path + suffix)]
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    finally:
        conn.close()
        for sidecar in made:
            with contextlib.suppress(FileNotFoundError):
                os.remove(sidecar)
    if tables:
        raise SetupError(f"database {path!r} already holds tables ({', '.join(tables[:4])}"
                         f"{', ...' if len(tables) > 4 else ''}); a run starts from empty stores "
                         "(delete the file or choose a new --db path)")


class RunDatabase:
    """The one SQLite file of a run. ``close`` deletes it if it was temporary."""

    def __init__(self, db_path: str | None, *, file_name: str, busy_timeout_ms: int | None = None) -> None:
        self._tempdir = None
        if db_path is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix="loomsim-")
            db_path = os.path.join(self._tempdir.name, file_name)
        else:
            _refuse_used_database(db_path)
        self.path = db_path
        self.conn: sqlite3.Connection | None = (
            open_database(db_path) if busy_timeout_ms is None else open_database(db_path, busy_timeout_ms=busy_timeout_ms))

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None
