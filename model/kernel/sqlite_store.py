"""SQLite execution store.

Shares one database file (and usually one connection from
``model.sqlite_db.open_database``) with the other stores; it owns only the
``kernel_*`` tables and creates them idempotently.

Every write is one ``write_transaction`` (``BEGIN IMMEDIATE``), so a
concurrent writer on another connection can never slip between a check and
its write. Reads are single statements (SQLite gives each statement a
consistent snapshot) and take no write lock. The SQL strings are module
constants (the sqlite3 statement cache keys on the string).

Where the time goes, and what this adapter does about it
---------------------------------------------------------
A simulated year runs ~105k executions through here, a few write
transactions each. Measured (``/tmp/kbench2.py`` and friends, in the change
that added ``append_steps``), a write transaction costs a fixed BEGIN/COMMIT,
plus ~10 µs per *page* it dirtied (each is written whole to the WAL at
commit), plus each statement. So:

- Fewer transactions: ``append_steps`` and ``finish_execution(steps=...)``
  write a batch, or a batch and the finish, in one transaction (one probe,
  one ``executemany``).
- start is a guarded write, not read-then-write: ``INSERT ... SELECT ... WHERE
  NOT EXISTS (a high-water mark at or above the occurrence) ON CONFLICT
  (run_id) DO NOTHING``; ``rowcount`` 1 means created (then the mark is
  raised). Only when it did not apply are the rows read, and
  ``decide_start`` says replay or retired. That saves two SELECTs per start,
  at the price of restating ``decide_start``'s *create* condition in SQL —
  the one rule condition written twice. Every decision off the happy path is
  still the rule's, a guard/rule disagreement is an ``AssertionError`` rather
  than a silent divergence, and the conformance suite plus the
  memory-vs-SQLite property test (``tests/test_kernel_store.py``) pin the two
  adapters to identical results and errors.
- append and finish stay h11-style (one read, the rule, the write) because
  every guarded variant measured slower: an ``INSERT INTO kernel_steps ...
  SELECT`` guarded on the log's last seq reads its own target table, which
  SQLite stages through an ephemeral table; a ``step_count`` column claimed by
  an UPDATE dirties the execution's page on every append (a WAL frame costs
  more than the probe it saves); ``UPDATE ... RETURNING`` buffers its row in
  an ephemeral table and costs more than SELECT + UPDATE.
- Fewer pages and no per-write temp tables in the schema (below).

What is left is mostly SQLite and the file system: BEGIN/COMMIT, WAL frames,
and checkpoints (``synchronous``/``wal_autocheckpoint`` are the connection's,
set in ``model/sqlite_db.py``).
"""
from __future__ import annotations

import sqlite3

from model.sqlite_db import create_schema as _create_schema, open_database, require_autocommit, write_transaction

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
    START_REPLAY,
    START_RETIRED,
    check_append,
    check_step_log,
    decide_finish,
    decide_park,
    decide_start,
    decode_json,
    encode_json,
    encode_steps,
    require_int,
    require_str,
    validate_append_args,
    validate_finish_args,
    validate_first_seq,
    validate_start_args,
)

# --- schema -------------------------------------------------------------------
#
# kernel_executions and kernel_steps are WITHOUT ROWID: rows live in the
# primary-key b-tree itself, so a write touches one b-tree instead of table +
# index (one page less at every start), and a step seq is one seek in the
# run's key range.
#
# The status CHECK is spelled with = and OR: an IN list of more than two
# constants is compiled into an ephemeral table, built again on every INSERT
# and UPDATE of the row (~5 µs each).
#
# Tables are created IF NOT EXISTS, so a file made by an earlier version keeps
# its tables (a rowid kernel_executions, an IN-list CHECK); every statement
# below works on both.
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
        status TEXT NOT NULL CHECK (
            status = 'running' OR status = 'parked' OR status = 'completed' OR status = 'failed'
        ),
        started_at_ms INTEGER NOT NULL,
        finished_at_ms INTEGER,
        output_json TEXT NOT NULL,
        CHECK ((finished_at_ms IS NULL) = (status IN ('running', 'parked')))
    ) WITHOUT ROWID""",
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

# The run's step count is its last seq: the log is 1..n (PRIMARY KEY + the
# sequence rule). "ORDER BY seq DESC LIMIT 1" is one seek to the end of the
# run's key range.
_LAST_SEQ = "coalesce((SELECT seq FROM kernel_steps WHERE run_id = ?1 ORDER BY seq DESC LIMIT 1), 0)"

_SELECT_EXECUTION = f"SELECT {_EXECUTION_COLUMNS} FROM kernel_executions WHERE run_id = ?"
# A finish carrying steps also needs the step count: one statement, not two.
_SELECT_EXECUTION_AND_LAST_SEQ = (
    f"SELECT {_EXECUTION_COLUMNS}, {_LAST_SEQ} FROM kernel_executions WHERE run_id = ?1"
)
# Status and step count in one probe; an unknown run returns no row.
_PROBE_APPEND = f"SELECT status, {_LAST_SEQ} FROM kernel_executions WHERE run_id = ?1"
_SELECT_HIGH_WATER = "SELECT high_water_ms FROM kernel_schedules WHERE schedule_id = ?"
_SELECT_STEPS = "SELECT seq, step_id, kind, output_json FROM kernel_steps WHERE run_id = ? ORDER BY seq"
# The WHERE clause repeats the partial index's predicate verbatim so the
# planner can use kernel_executions_live (tests/test_kernel_store.py checks).
_SELECT_LIVE = (
    f"SELECT {_EXECUTION_COLUMNS} FROM kernel_executions "
    "WHERE schedule_id = ? AND status IN ('running', 'parked') "
    "ORDER BY occurrence_ms, run_id"
)
_COUNT_EXECUTIONS = "SELECT count(*) FROM kernel_executions"
_COUNT_STEPS = "SELECT count(*) FROM kernel_steps"

# Start: create unless the run id exists (ON CONFLICT DO NOTHING) or, for a
# scheduled run, the occurrence is at or below the schedule's high-water mark
# (decide_start's START_CREATE condition). rowcount 1 = created.
_START_SCHEDULED = (
    f"INSERT INTO kernel_executions ({_EXECUTION_COLUMNS}) "
    "SELECT ?1, ?2, ?3, ?4, ?5, 'running', ?6, NULL, 'null' "
    "WHERE NOT EXISTS "
    "(SELECT 1 FROM kernel_schedules WHERE schedule_id = ?2 AND high_water_ms >= ?3) "
    "ON CONFLICT (run_id) DO NOTHING"
)
_START_UNSCHEDULED = (
    f"INSERT INTO kernel_executions ({_EXECUTION_COLUMNS}) "
    "VALUES (?1, NULL, ?2, ?3, ?4, 'running', ?5, NULL, 'null') "
    "ON CONFLICT (run_id) DO NOTHING"
)
# Only after a create, which established occurrence_ms > high_water_ms.
_RAISE_HIGH_WATER = (
    "INSERT INTO kernel_schedules (schedule_id, high_water_ms) VALUES (?1, ?2) "
    "ON CONFLICT (schedule_id) DO UPDATE SET high_water_ms = excluded.high_water_ms"
)
_INSERT_STEP = "INSERT INTO kernel_steps (run_id, seq, step_id, kind, output_json) VALUES (?, ?, ?, ?, ?)"
_PARK = "UPDATE kernel_executions SET status = 'parked' WHERE run_id = ?"
_FINISH = "UPDATE kernel_executions SET status = ?, output_json = ?, finished_at_ms = ? WHERE run_id = ?"
_PURGE_STEPS = (
    "DELETE FROM kernel_steps WHERE run_id IN "
    "(SELECT run_id FROM kernel_executions WHERE finished_at_ms < ?)"
)
_PURGE_EXECUTIONS = "DELETE FROM kernel_executions WHERE finished_at_ms < ?"


def _record(row: tuple) -> ExecutionRecord:
    """The ExecutionRecord of a row's first 9 columns (_EXECUTION_COLUMNS)."""
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
    """Create the tables and indexes if missing (idempotent)."""
    _create_schema(conn, _SCHEMA)


class SqliteExecutionStore:
    """``ExecutionStore`` over a SQLite connection from ``open_database``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        require_autocommit(conn, "SqliteExecutionStore")
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
            if schedule_id is None:
                created = conn.execute(
                    _START_UNSCHEDULED, (run_id, occurrence_ms, flow_version, input_json, started_at_ms)
                ).rowcount
            else:
                created = conn.execute(
                    _START_SCHEDULED,
                    (run_id, schedule_id, occurrence_ms, flow_version, input_json, started_at_ms),
                ).rowcount
                if created:
                    conn.execute(_RAISE_HIGH_WATER, (schedule_id, occurrence_ms))
            if not created:
                return self._diagnose_start(run_id, schedule_id, occurrence_ms)
        return StartOutcome(
            ExecutionRecord(
                run_id, schedule_id, occurrence_ms, flow_version, decode_json(input_json),
                RUNNING, started_at_ms, None, None,
            ),
            False,
        )

    def _diagnose_start(self, run_id: str, schedule_id: str | None, occurrence_ms: int | None) -> StartOutcome:
        conn = self._conn
        existing = conn.execute(_SELECT_EXECUTION, (run_id,)).fetchone()
        high_water_ms = None
        if existing is None and schedule_id is not None:
            hw_row = conn.execute(_SELECT_HIGH_WATER, (schedule_id,)).fetchone()
            high_water_ms = None if hw_row is None else hw_row[0]
        decision = decide_start(existing is not None, schedule_id, occurrence_ms, high_water_ms)
        if decision == START_REPLAY:
            return StartOutcome(_record(existing), True)
        if decision == START_RETIRED:
            return RETIRED_OUTCOME
        raise AssertionError(
            f"start of {run_id!r} created nothing, but the rule says create: the guard in "
            "_START_SCHEDULED and decide_start disagree"
        )

    async def append_step(self, run_id: str, seq: int, step_id: str, kind: str, output: object) -> StepRecord:
        validate_append_args(run_id, seq, step_id, kind)
        output_json = encode_json(output)
        with write_transaction(self._conn):
            self._append(run_id, seq, ((step_id, kind, output_json),))
        return StepRecord(run_id, seq, step_id, kind, decode_json(output_json))

    async def append_steps(
        self, run_id: str, first_seq: int, steps: tuple[tuple[str, str, object], ...]
    ) -> tuple[StepRecord, ...]:
        require_str("run_id", run_id)
        require_int("first_seq", first_seq)
        encoded = encode_steps(steps)
        if not encoded:
            # Nothing to write: the probe alone is one consistent read.
            self._append(run_id, first_seq, ())
            return ()
        with write_transaction(self._conn):
            self._append(run_id, first_seq, encoded)
        return tuple(
            StepRecord(run_id, seq, step_id, kind, decode_json(output_json))
            for seq, (step_id, kind, output_json) in enumerate(encoded, first_seq)
        )

    def _append(self, run_id: str, first_seq: int, encoded: tuple[tuple[str, str, str], ...]) -> None:
        conn = self._conn
        probe = conn.execute(_PROBE_APPEND, (run_id,)).fetchone()
        if probe is None:
            check_append(run_id, None, 0, first_seq)
        check_append(run_id, probe[0], probe[1], first_seq)
        if encoded:
            self._insert_steps(run_id, first_seq, encoded)

    def _insert_steps(self, run_id: str, first_seq: int, encoded: tuple[tuple[str, str, str], ...]) -> None:
        """Insert steps the rule accepted at ``first_seq`` (same transaction)."""
        conn = self._conn
        try:
            if len(encoded) == 1:
                step_id, kind, output_json = encoded[0]
                conn.execute(_INSERT_STEP, (run_id, first_seq, step_id, kind, output_json))
            else:
                conn.executemany(
                    _INSERT_STEP,
                    [(run_id, seq, step_id, kind, output_json)
                     for seq, (step_id, kind, output_json) in enumerate(encoded, first_seq)],
                )
        except sqlite3.IntegrityError:
            # Unreachable while every writer takes BEGIN IMMEDIATE; if a
            # writer ever raced in anyway, the primary key still refuses
            # the duplicate and the caller sees the typed conflict.
            last_seq = conn.execute(_PROBE_APPEND, (run_id,)).fetchone()[1]
            raise StepSequenceConflict(run_id, first_seq, last_seq + 1) from None

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
        self,
        run_id: str,
        *,
        status: str,
        output: object,
        finished_at_ms: int,
        steps: tuple[tuple[str, str, object], ...] = (),
        first_seq: int | None = None,
    ) -> ExecutionRecord:
        validate_finish_args(run_id, status, finished_at_ms)
        output_json = encode_json(output)
        encoded = encode_steps(steps)
        validate_first_seq(first_seq, encoded)
        conn = self._conn
        with write_transaction(conn):
            if encoded:
                row = conn.execute(_SELECT_EXECUTION_AND_LAST_SEQ, (run_id,)).fetchone()
                if row is None:
                    decide_finish(run_id, None, NULL_JSON, status, output_json)
                write = decide_finish(
                    run_id, row[5], row[8], status, output_json, row[9], first_seq, len(encoded)
                )
                if write:
                    self._insert_steps(run_id, first_seq, encoded)
            else:
                row = conn.execute(_SELECT_EXECUTION, (run_id,)).fetchone()
                if row is None:
                    decide_finish(run_id, None, NULL_JSON, status, output_json)
                write = decide_finish(run_id, row[5], row[8], status, output_json)
            if write:
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
