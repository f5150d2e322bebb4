"""``overtaking-commit``: another writer commits between a transaction's read and its write.

Why: the simulation is single threaded and a store call never suspends, so
no other connection can ever commit inside one of the model's SQLite
transactions, and a transaction that forgot to take the write lock up front
(a deferred ``BEGIN`` instead of ``BEGIN IMMEDIATE``) behaves exactly like a
correct one. In production another process's commit lands there: with
``BEGIN IMMEDIATE`` that writer waits on the lock we hold (the busy timeout)
and nothing fails; with a deferred ``BEGIN`` our read snapshot is stale by
the time we write, and the write fails at once with ``SQLITE_BUSY_SNAPSHOT``
(extended code 517), which no busy timeout retries: a spurious failure of a
call that had nothing to conflict with.

This fault makes that writer real. A simulated process's SQLite connection
(``open_node_database``, used by ``scenarios.system`` for every node's own
connection when the run's plan arms the kind) is an
:class:`OvertakingConnection`. After each read statement it executes inside
an open transaction — one hit of the site ``sqlite.overtake`` — the plan may
fire the fault: a second connection of the same process, to the same file,
with a busy timeout of 0, tries to commit one small write to a harness-owned
table (``loomsim_overtakes``, one row). The fault is recorded as fired at
every attempt (the other writer did come); whether it got through is the
database's answer:

- the transaction holds the write lock (``BEGIN IMMEDIATE``): the other
  writer is refused at once (``SQLITE_BUSY``) and nothing changes — in
  production it would have waited for our commit;
- it does not: the other writer commits, and our transaction's next write
  fails with ``SQLITE_BUSY_SNAPSHOT``.

The ``sqlite-write-lock`` oracle (:class:`SqliteWriteLock`, registered with
the first such connection) counts every attempt as a check and fails the run
when a transaction a commit overtook then fails with ``SQLITE_BUSY_SNAPSHOT``:
the store refused a write that only conflicted with a commit it should have
locked out. It reads the database's own answer (the extended error code),
not the model's rule. A read-only transaction (a consistent snapshot of two
reads) may be overtaken harmlessly: WAL readers never block writers.

Deterministic: the hits are the model's own statements in program order,
the firing is the plan's (probabilistic or scripted, at the recorded hit),
and the outcome is SQLite's, a function of the locks held at that instant.
"""
from __future__ import annotations

import sqlite3
from typing import Any

from faults.kinds import OVERTAKING_COMMIT
from model.sqlite_db import CheckedConnection, open_database
from sim.invariants import Checker

SITE = "sqlite.overtake"
TABLE = "loomsim_overtakes"
SQLITE_BUSY_SNAPSHOT = 517  # SQLITE_BUSY | (2 << 8)
_CREATE = f"CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)"
_WRITE = f"INSERT INTO {TABLE} (id, n) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET n = excluded.n"


class SqliteWriteLock(Checker):
    """``sqlite-write-lock``: a write transaction holds the write lock from
    its first statement, so no commit lands between its reads and its write
    (a write refused with ``SQLITE_BUSY_SNAPSHOT`` after one did is a
    violation)."""

    name = "sqlite-write-lock"
    kinds = ()

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0
        self.committed = 0

    def metrics(self) -> dict:
        return {"overtakes_refused": self.refused, "overtakes_committed": self.committed}

    def attempted(self, committed: bool) -> None:
        self.checks += 1
        if committed:
            self.committed += 1
        else:
            self.refused += 1

    def snapshot_lost(self, node: str, hit: int, sql: str) -> None:
        statement = " ".join(sql.split())[:80]
        self.fail(f"{node}: a write transaction failed with SQLITE_BUSY_SNAPSHOT at {statement!r} after another "
                  f"connection's commit (overtaking-commit at hit {hit}) landed between its read and its write: "
                  f"it did not take the write lock up front", (node,))


class OvertakingConnection(CheckedConnection):
    """A node's connection whose reads inside a transaction may let another writer try to commit."""

    # Until ``bind``: the connection's own setup statements are not hits.
    _world: Any = None
    _other: sqlite3.Connection | None = None
    _overtaken: int | None = None

    def bind(self, path: str, world: Any, node: Any, checker: SqliteWriteLock) -> None:
        self._path = path
        self._world = world
        self._node = node
        self._checker = checker
        self._other: sqlite3.Connection | None = None
        self._overtaken: int | None = None  # the hit whose commit landed inside the open transaction
        self._writes = 0

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            cursor = super().execute(sql, parameters)
        except sqlite3.OperationalError as error:
            if self._overtaken is not None and getattr(error, "sqlite_errorcode", None) == SQLITE_BUSY_SNAPSHOT:
                self._checker.snapshot_lost(self._node.label, self._overtaken, sql)
            if not self.in_transaction:
                self._overtaken = None
            raise
        if not self.in_transaction:
            self._overtaken = None
        elif self._world is not None and sql.lstrip()[:6].upper() == "SELECT":
            self._maybe_overtake()
        return cursor

    def _maybe_overtake(self) -> None:
        world = self._world
        hit, fault = world.plan.draw(SITE, (OVERTAKING_COMMIT,))
        if fault is None:
            return
        world.record_fault(self._node, SITE, OVERTAKING_COMMIT, hit)
        committed = self._other_writer_commits()
        self._checker.attempted(committed)
        if committed and self._overtaken is None:
            self._overtaken = hit

    def _other_writer_commits(self) -> bool:
        other = self._other
        if other is None:
            other = self._other = open_database(self._path, busy_timeout_ms=0)
        try:
            other.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return False  # our transaction holds the write lock: the other writer would wait for it
        try:
            self._writes += 1
            other.execute(_WRITE, (self._writes,))
            other.execute("COMMIT")
        except BaseException:
            if other.in_transaction:
                other.execute("ROLLBACK")
            raise
        return True

    def close(self) -> None:
        if self._other is not None:
            self._other.close()
            self._other = None
        super().close()


def armed(world: Any) -> bool:
    """Does the run's plan arm ``overtaking-commit``?"""
    plan = getattr(world, "plan", None)
    return plan is not None and OVERTAKING_COMMIT in plan.armed


def open_node_database(path: str, *, busy_timeout_ms: int, world: Any, node: Any) -> sqlite3.Connection:
    """A simulated process's own connection to the run's file: an
    :class:`OvertakingConnection` when the plan arms the fault, else the
    model's ``open_database`` as it is."""
    if not armed(world):
        conn = open_database(path, busy_timeout_ms=busy_timeout_ms)
        # The other writer's table is made all the same: the file's layout
        # (which page holds what) must not depend on whether the plan arms
        # the fault, or a script's replay (which arms only what it holds)
        # would lay out another file than its recording (``faults.disk``
        # damages pages by number).
        conn.execute(_CREATE)
        return conn
    # The same settings as ``model.sqlite_db.open_database``, on the subclass.
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_ms / 1000.0,
                           factory=OvertakingConnection)
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"could not enable WAL on {path!r} (got {mode!r})")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        conn.execute(_CREATE)  # the other writer's table, made before any transaction
    except BaseException:
        conn.close()
        raise
    conn.bind(path, world, node, _checker(world))
    return conn


def _checker(world: Any) -> SqliteWriteLock:
    for checker in world.invariants.checkers:
        if checker.name == SqliteWriteLock.name:
            return checker
    checker = SqliteWriteLock()
    world.check(checker)
    return checker
