"""A schedule's durable cursor and run archive.

Per schedule, one row:

- ``high_water_ms``: the latest occurrence ever admitted. A restarted
  driver continues after it; an alarm for an occurrence at or below it is a
  duplicate delivery.
- ``archived_through_ms``: every occurrence at or below it is *retired*:
  its run was archived and deleted by retention, or is held by a pin. A
  start of a retired occurrence is refused — the ledger row that made starts
  idempotent is gone, so this watermark is what keeps a late duplicate alarm
  from starting the run a second time.
- ``archived_runs`` and ``archive_digest``: the archive itself, a digest
  chain over the summaries of the archived runs in occurrence order
  (``sha256(canonical({"previous": <hex>, "run": <summary>}))`` from 64
  zeros). Constant size per schedule, so a year of runs costs one row; an
  auditor who kept the summaries recomputes the chain.

Admission writes the ledger row first and advances the cursor second: a
crash in between leaves a nonterminal ledger row, which recovery finds, so
the high-water mark is ``max(cursor, live runs)`` and no occurrence is lost.
"""
from __future__ import annotations

import json
import sqlite3

import attrs

from model.bounds import INT64_MAX, is_valid_unicode
from model.canonical import ZERO_DIGEST, digest
from model.sqlite_db import create_schema, require_autocommit, write_transaction


@attrs.frozen
class ScheduleCursor:
    schedule_id: str
    high_water_ms: int | None
    archived_through_ms: int | None
    archived_runs: int
    archive_digest: str
    # Runs behind the watermark that a pin holds (not archived yet), and the
    # run whose deletion an archival has promised (redone after a crash).
    held: tuple[str, ...] = ()
    pending_delete: str | None = None


def empty_cursor(schedule_id: str) -> ScheduleCursor:
    return ScheduleCursor(schedule_id, None, None, 0, ZERO_DIGEST, (), None)


def archive_link(previous_digest: str, summary: object) -> str:
    return digest({"previous": previous_digest, "run": summary})




def _require(schedule_id: object, occurrence_ms: object) -> None:
    if type(schedule_id) is not str or not schedule_id or not is_valid_unicode(schedule_id):
        raise TypeError(f"schedule_id must be a non-empty str of valid Unicode, got {schedule_id!r:.40}")
    if type(occurrence_ms) is not int or not 0 <= occurrence_ms <= INT64_MAX:
        raise TypeError(f"occurrence_ms must be an int in 0..2**63-1, got {occurrence_ms!r:.40}")


def _require_run(run_id: object) -> None:
    if type(run_id) is not str or not is_valid_unicode(run_id):
        raise TypeError(f"run_id must be a str of valid Unicode, got {run_id!r:.40}")


def _require_retire(run_id: object, summary: object, hold: object) -> None:
    """``retire``'s arguments, checked before anything is read or written:
    a held occurrence names its run and carries no summary (it is archived
    on release); an archived one names its run."""
    if type(hold) is not bool:
        raise TypeError(f"hold must be a bool, got {hold!r:.40}")
    if run_id is not None:
        _require_run(run_id)
    if hold and (run_id is None or summary is not None):
        raise ValueError("retire with hold=True needs a run_id and no summary (the run is archived on release)")
    if summary is not None and run_id is None:
        raise ValueError("retire with a summary needs the run_id of the run it archives")


def decide_retire(cursor: ScheduleCursor, occurrence_ms: int, run_id: str | None, summary: object | None,
                  *, hold: bool) -> ScheduleCursor | None:
    """The cursor after retiring ``occurrence_ms`` (None: already retired).

    ``summary`` given: the run is archived (chained) and its deletion becomes
    the pending one. ``hold``: a pin keeps the run; it is remembered in
    ``held`` and archived by ``decide_release`` once unpinned. Neither: the
    occurrence never ran (skipped)."""
    through = cursor.archived_through_ms
    if through is not None and occurrence_ms <= through:
        return None
    if hold:
        assert run_id is not None and summary is None
        return attrs.evolve(cursor, archived_through_ms=occurrence_ms, held=(*cursor.held, run_id))
    if summary is None:
        return attrs.evolve(cursor, archived_through_ms=occurrence_ms)
    assert run_id is not None
    return attrs.evolve(cursor, archived_through_ms=occurrence_ms, archived_runs=cursor.archived_runs + 1,
                        archive_digest=archive_link(cursor.archive_digest, summary), pending_delete=run_id)


def decide_release(cursor: ScheduleCursor, run_id: str, summary: object) -> ScheduleCursor | None:
    """Archive a held run whose pins are gone (None: not held, done before)."""
    if run_id not in cursor.held:
        return None
    return attrs.evolve(cursor, held=tuple(r for r in cursor.held if r != run_id),
                        archived_runs=cursor.archived_runs + 1,
                        archive_digest=archive_link(cursor.archive_digest, summary), pending_delete=run_id)


class InMemoryScheduleStore:
    def __init__(self) -> None:
        self._cursors: dict[str, ScheduleCursor] = {}

    async def cursor(self, schedule_id: str) -> ScheduleCursor:
        _require(schedule_id, 0)
        return self._cursors.get(schedule_id) or empty_cursor(schedule_id)

    async def advance(self, schedule_id: str, occurrence_ms: int) -> None:
        _require(schedule_id, occurrence_ms)
        cursor = self._cursors.get(schedule_id) or empty_cursor(schedule_id)
        if cursor.high_water_ms is None or occurrence_ms > cursor.high_water_ms:
            self._cursors[schedule_id] = attrs.evolve(cursor, high_water_ms=occurrence_ms)

    async def retire(self, schedule_id: str, occurrence_ms: int, run_id: str | None, summary: object | None, *,
                     hold: bool = False) -> bool:
        """Move the archive watermark to ``occurrence_ms`` (see ``decide_retire``).
        Idempotent: False when the occurrence was already retired."""
        _require(schedule_id, occurrence_ms)
        _require_retire(run_id, summary, hold)
        return self._apply(schedule_id, lambda c: decide_retire(c, occurrence_ms, run_id, summary, hold=hold))

    async def release(self, schedule_id: str, run_id: str, summary: object) -> bool:
        _require(schedule_id, 0)
        _require_run(run_id)
        return self._apply(schedule_id, lambda c: decide_release(c, run_id, summary))

    def _apply(self, schedule_id: str, decide) -> bool:
        after = decide(self._cursors.get(schedule_id) or empty_cursor(schedule_id))
        if after is None:
            return False
        self._cursors[schedule_id] = after
        return True


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS schedule_cursors (
        schedule_id TEXT PRIMARY KEY NOT NULL,
        high_water_ms INTEGER,
        archived_through_ms INTEGER,
        archived_runs INTEGER NOT NULL,
        archive_digest TEXT NOT NULL,
        held_json TEXT NOT NULL,
        pending_delete TEXT
    ) WITHOUT ROWID""",
)
_SELECT = ("SELECT schedule_id, high_water_ms, archived_through_ms, archived_runs, archive_digest, held_json, "
           "pending_delete "
           "FROM schedule_cursors WHERE schedule_id = ?")
_UPSERT = ("INSERT INTO schedule_cursors (schedule_id, high_water_ms, archived_through_ms, archived_runs, "
           "archive_digest, held_json, pending_delete) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (schedule_id) DO UPDATE "
           "SET high_water_ms = excluded.high_water_ms, archived_through_ms = excluded.archived_through_ms, "
           "archived_runs = excluded.archived_runs, archive_digest = excluded.archive_digest, "
           "held_json = excluded.held_json, pending_delete = excluded.pending_delete")


class SqliteScheduleStore:
    def __init__(self, conn: sqlite3.Connection) -> None:
        require_autocommit(conn, "SqliteScheduleStore")
        self._conn = conn
        create_schema(conn, _SCHEMA)

    def _read(self, schedule_id: str) -> ScheduleCursor:
        row = self._conn.execute(_SELECT, (schedule_id,)).fetchone()
        if row is None:
            return empty_cursor(schedule_id)
        return ScheduleCursor(*row[:5], tuple(json.loads(row[5])), row[6])

    def _write(self, c: ScheduleCursor) -> None:
        self._conn.execute(_UPSERT, (c.schedule_id, c.high_water_ms, c.archived_through_ms, c.archived_runs,
                                     c.archive_digest, json.dumps(list(c.held)), c.pending_delete))

    async def cursor(self, schedule_id: str) -> ScheduleCursor:
        _require(schedule_id, 0)
        return self._read(schedule_id)

    async def advance(self, schedule_id: str, occurrence_ms: int) -> None:
        _require(schedule_id, occurrence_ms)
        with write_transaction(self._conn):
            cursor = self._read(schedule_id)
            if cursor.high_water_ms is None or occurrence_ms > cursor.high_water_ms:
                self._write(attrs.evolve(cursor, high_water_ms=occurrence_ms))

    async def retire(self, schedule_id: str, occurrence_ms: int, run_id: str | None, summary: object | None, *,
                     hold: bool = False) -> bool:
        _require(schedule_id, occurrence_ms)
        _require_retire(run_id, summary, hold)
        return self._apply(schedule_id, lambda c: decide_retire(c, occurrence_ms, run_id, summary, hold=hold))

    async def release(self, schedule_id: str, run_id: str, summary: object) -> bool:
        _require(schedule_id, 0)
        _require_run(run_id)
        return self._apply(schedule_id, lambda c: decide_release(c, run_id, summary))

    def _apply(self, schedule_id: str, decide) -> bool:
        with write_transaction(self._conn):
            after = decide(self._read(schedule_id))
            if after is None:
                return False
            self._write(after)
        return True
