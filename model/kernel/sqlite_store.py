"""SQLite execution store.

Shares one database file (and usually one connection from
``model.sqlite_db.open_database``) with the other stores; it owns only the
``kernel_*`` tables and creates them idempotently.

Every write is one ``write_transaction`` (``BEGIN IMMEDIATE``): the rows a rule
needs are read, the shared rule (``store.py``) decides, and the write happens
in that same transaction, so a concurrent writer on another connection can
never slip between check and write. Reads are single statements (SQLite gives
each statement a consistent snapshot) and take no write lock.

This sits on the hot path of a benchmark (~600k write transactions), so each
call is one transaction with as few statements as its rule allows, and the
SQL strings are module constants (the sqlite3 statement cache keys on the
string). ``append_step`` is the hottest: one probe that reads status and the
last seq together, one INSERT.
"""
from __future__ import annotations

import sqlite3

from model.sqlite_db import open_database, write_transaction

from .records import (
    PARKED,
    RUNNING,
    ExecutionRecord,
    StartOutcome,
    StepRecord,
    StepSequenceConflict,
)
from .store import (
    NULL_JSON,
    RETIRED_OUTCOME,
    START_CREATE,
    START_REPLAY,
    check_append,
    check_step_log,
    decide_finish,
    decide_park,
    decide_start,
    decode_json,
    encode_json,
    require_int,
    require_str,
    validate_append_args,
    validate_finish_args,
    validate_start_args,
)

# --- schema -------------------------------------------------------------------
#
# kernel_steps is WITHOUT ROWID: rows live in the (run_id, seq) primary-key
# b-tree itself, so an append writes one b-tree instead of table + index, and
# "last seq of a run" is one seek at the end of the run's key range.
#
# Two partial indexes keep the live set and the purge candidates small no
# matter how many executions a year leaves behind: live executions by
# schedule (the "one live occurrence" check runs at every wake), and finished
# executions by finish time (retention).
_SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS kernel_executions (
        run_id TEXT PRIMARY KEY NOT NULL,
        schedule_id TEXT,
        occurrence_ms INTEGER,
        flow_version INTEGER NOT NULL,
        input_json TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('running', 'parked', 'completed', 'failed')),
        started_at_ms INTEGER NOT NULL,
        finished_at_ms INTEGER,
        output_json TEXT NOT NULL,
        CHECK ((finished_at_ms IS NULL) = (status IN ('running', 'parked')))
    )""",
    """CREATE TABLE IF NOT EXISTS kernel_steps (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL CHECK (seq >= 1),
        step_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        output_json TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS kernel_schedules (
        schedule_id TEXT PRIMARY KEY NOT NULL,
        high_water_ms INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE INDEX IF NOT EXISTS kernel_executions_live
        ON kernel_executions (schedule_id, occurrence_ms, run_id)
        WHERE status IN ('running', 'parked')""",
    """CREATE INDEX IF NOT EXISTS kernel_executions_finished
        ON kernel_executions (finished_at_ms)
        WHERE finished_at_ms IS NOT NULL""",
)

_EXECUTION_COLUMNS = (
    "run_id, schedule_id, occurrence_ms, flow_version, input_json, "
    "status, started_at_ms, finished_at_ms, output_json"
)

_SELECT_EXECUTION = f"SELECT {_EXECUTION_COLUMNS} FROM kernel_executions WHERE run_id = ?"
_SELECT_HIGH_WATER = "SELECT high_water_ms FROM kernel_schedules WHERE schedule_id = ?"
_INSERT_EXECUTION = (
    f"INSERT INTO kernel_executions ({_EXECUTION_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, 'running', ?, NULL, 'null')"
)
# decide_start already established occurrence_ms > high_water_ms (or no mark).
_UPSERT_HIGH_WATER = (
    "INSERT INTO kernel_schedules (schedule_id, high_water_ms) VALUES (?1, ?2) "
    "ON CONFLICT (schedule_id) DO UPDATE SET high_water_ms = ?2"
)
# Status and step count in one probe; an unknown run returns no row. The
# count is the last seq: the log is 1..n (PRIMARY KEY + the sequence rule).
# "ORDER BY seq DESC LIMIT 1" is one seek to the end of the run's key range.
_PROBE_APPEND = (
    "SELECT status, coalesce("
    "(SELECT seq FROM kernel_steps WHERE run_id = ?1 ORDER BY seq DESC LIMIT 1), 0) "
    "FROM kernel_executions WHERE run_id = ?1"
)
_LAST_SEQ = "SELECT coalesce((SELECT seq FROM kernel_steps WHERE run_id = ? ORDER BY seq DESC LIMIT 1), 0)"
_INSERT_STEP = "INSERT INTO kernel_steps (run_id, seq, step_id, kind, output_json) VALUES (?, ?, ?, ?, ?)"
_SELECT_STEPS = "SELECT seq, step_id, kind, output_json FROM kernel_steps WHERE run_id = ? ORDER BY seq"
_PARK = "UPDATE kernel_executions SET status = 'parked' WHERE run_id = ?"
_FINISH = "UPDATE kernel_executions SET status = ?, output_json = ?, finished_at_ms = ? WHERE run_id = ?"
# The WHERE clause repeats the partial index's predicate verbatim so the
# planner can use kernel_executions_live (tests/test_kernel_store.py checks).
_SELECT_LIVE = (
    f"SELECT {_EXECUTION_COLUMNS} FROM kernel_executions "
    "WHERE schedule_id = ? AND status IN ('running', 'parked') "
    "ORDER BY occurrence_ms, run_id"
)
_PURGE_STEPS = (
    "DELETE FROM kernel_steps WHERE run_id IN "
    "(SELECT run_id FROM kernel_executions WHERE finished_at_ms < ?)"
)
_PURGE_EXECUTIONS = "DELETE FROM kernel_executions WHERE finished_at_ms < ?"
_COUNT_EXECUTIONS = "SELECT count(*) FROM kernel_executions"
_COUNT_STEPS = "SELECT count(*) FROM kernel_steps"


def _record(row: tuple) -> ExecutionRecord:
    return ExecutionRecord(
        row[0],
        row[1],
        row[2],
        row[3],
        decode_json(row[4]),
        row[5],
        row[6],
        row[7],
        decode_json(row[8]),
    )


def create_schema(conn: sqlite3.Connection) -> None:
    """Create the kernel tables and indexes if missing (idempotent)."""
    with write_transaction(conn):
        for statement in _SCHEMA:
            conn.execute(statement)


class SqliteExecutionStore:
    """``ExecutionStore`` over a SQLite connection from ``open_database``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        if conn.isolation_level is not None:
            # The sqlite3 module would open transactions behind our back and
            # BEGIN IMMEDIATE would fail inside them (model/sqlite_db.py).
            raise ValueError("SqliteExecutionStore needs a connection from open_database (isolation_level=None)")
        self._conn = conn
        self._owns_connection = False
        create_schema(conn)

    @classmethod
    def open(cls, path: str) -> "SqliteExecutionStore":
        """Open (creating if needed) the database at ``path`` with its own connection."""
        store = cls(open_database(path))
        store._owns_connection = True
        return store

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def close(self) -> None:
        """Close the connection if ``open`` made it; a shared one is its owner's."""
        if self._owns_connection:
            self._conn.close()

    # --- writes -------------------------------------------------------------

    async def start_execution(
        self,
        run_id: str,
        *,
        schedule_id: str | None,
        occurrence_ms: int | None,
        flow_version: int,
        input: object,
        started_at_ms: int,
    ) -> StartOutcome:
        validate_start_args(run_id, schedule_id, occurrence_ms, flow_version, started_at_ms)
        input_json = encode_json(input)
        conn = self._conn
        with write_transaction(conn):
            existing = conn.execute(_SELECT_EXECUTION, (run_id,)).fetchone()
            if existing is not None:
                high_water_ms = None  # not needed: an existing run is replayed
            elif schedule_id is not None:
                hw_row = conn.execute(_SELECT_HIGH_WATER, (schedule_id,)).fetchone()
                high_water_ms = None if hw_row is None else hw_row[0]
            else:
                high_water_ms = None
            decision = decide_start(existing is not None, schedule_id, occurrence_ms, high_water_ms)
            if decision == START_REPLAY:
                return StartOutcome(_record(existing), True)
            if decision != START_CREATE:
                return RETIRED_OUTCOME
            conn.execute(
                _INSERT_EXECUTION,
                (run_id, schedule_id, occurrence_ms, flow_version, input_json, started_at_ms),
            )
            if schedule_id is not None:
                conn.execute(_UPSERT_HIGH_WATER, (schedule_id, occurrence_ms))
        return StartOutcome(
            ExecutionRecord(
                run_id, schedule_id, occurrence_ms, flow_version, decode_json(input_json),
                RUNNING, started_at_ms, None, None,
            ),
            False,
        )

    async def append_step(self, run_id: str, seq: int, step_id: str, kind: str, output: object) -> StepRecord:
        validate_append_args(run_id, seq, step_id, kind)
        output_json = encode_json(output)
        conn = self._conn
        with write_transaction(conn):
            probe = conn.execute(_PROBE_APPEND, (run_id,)).fetchone()
            if probe is None:
                check_append(run_id, None, 0, seq)
            check_append(run_id, probe[0], probe[1], seq)
            try:
                conn.execute(_INSERT_STEP, (run_id, seq, step_id, kind, output_json))
            except sqlite3.IntegrityError:
                # Unreachable while every writer takes BEGIN IMMEDIATE; if a
                # writer ever raced in anyway, the primary key still refuses
                # the duplicate and the caller sees the typed conflict.
                last_seq = conn.execute(_LAST_SEQ, (run_id,)).fetchone()[0]
                raise StepSequenceConflict(run_id, seq, last_seq + 1) from None
        return StepRecord(run_id, seq, step_id, kind, decode_json(output_json))

    async def park_execution(self, run_id: str) -> ExecutionRecord:
        require_str("run_id", run_id)
        conn = self._conn
        with write_transaction(conn):
            row = conn.execute(_SELECT_EXECUTION, (run_id,)).fetchone()
            if decide_park(run_id, None if row is None else row[5]):
                conn.execute(_PARK, (run_id,))
                row = row[:5] + (PARKED,) + row[6:]
        return _record(row)

    async def finish_execution(
        self, run_id: str, *, status: str, output: object, finished_at_ms: int
    ) -> ExecutionRecord:
        validate_finish_args(run_id, status, finished_at_ms)
        output_json = encode_json(output)
        conn = self._conn
        with write_transaction(conn):
            row = conn.execute(_SELECT_EXECUTION, (run_id,)).fetchone()
            if row is None:
                decide_finish(run_id, None, NULL_JSON, status, output_json)
            if decide_finish(run_id, row[5], row[8], status, output_json):
                conn.execute(_FINISH, (status, output_json, finished_at_ms, run_id))
                row = row[:5] + (status, row[6], finished_at_ms, output_json)
        return _record(row)

    async def purge_finished(self, finished_before_ms: int) -> int:
        require_int("finished_before_ms", finished_before_ms)
        conn = self._conn
        with write_transaction(conn):
            conn.execute(_PURGE_STEPS, (finished_before_ms,))
            purged = conn.execute(_PURGE_EXECUTIONS, (finished_before_ms,)).rowcount
        return purged

    # --- reads --------------------------------------------------------------

    async def load_execution(self, run_id: str) -> ExecutionRecord | None:
        require_str("run_id", run_id)
        row = self._conn.execute(_SELECT_EXECUTION, (run_id,)).fetchone()
        return None if row is None else _record(row)

    async def load_steps(self, run_id: str) -> tuple[StepRecord, ...]:
        require_str("run_id", run_id)
        rows = self._conn.execute(_SELECT_STEPS, (run_id,)).fetchall()
        if not rows:
            return ()
        check_step_log(run_id, rows[-1][0], len(rows))
        return tuple(
            StepRecord(run_id, seq, step_id, kind, decode_json(output_json))
            for seq, step_id, kind, output_json in rows
        )

    async def live_executions(self, schedule_id: str) -> tuple[ExecutionRecord, ...]:
        require_str("schedule_id", schedule_id)
        return tuple(_record(row) for row in self._conn.execute(_SELECT_LIVE, (schedule_id,)))

    async def schedule_high_water_ms(self, schedule_id: str) -> int | None:
        require_str("schedule_id", schedule_id)
        row = self._conn.execute(_SELECT_HIGH_WATER, (schedule_id,)).fetchone()
        return None if row is None else row[0]

    def counts(self) -> dict[str, int]:
        conn = self._conn
        return {
            "executions": conn.execute(_COUNT_EXECUTIONS).fetchone()[0],
            "steps": conn.execute(_COUNT_STEPS).fetchone()[0],
        }
