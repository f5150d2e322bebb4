"""``overtaking-commit`` (faults/sqlite_overtake.py): another writer tries to
commit between a transaction's read and its write. Refused while the
transaction holds the write lock (``BEGIN IMMEDIATE``); with a deferred
``BEGIN`` it commits and the write fails with SQLITE_BUSY_SNAPSHOT, which
``sqlite-write-lock`` reports."""
from __future__ import annotations

import sqlite3

import pytest

from faults.kinds import OVERTAKING_COMMIT
from faults.sqlite_overtake import SITE, SQLITE_BUSY_SNAPSHOT, SqliteWriteLock, open_node_database
from model.sqlite_db import SqliteWriteContention, write_transaction
from scenarios import registry
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions


class _Plan:
    armed = [OVERTAKING_COMMIT]

    def __init__(self) -> None:
        self.hits = 0

    def draw(self, site: str, kinds: tuple) -> tuple:
        assert site == SITE and kinds == (OVERTAKING_COMMIT,)
        self.hits += 1
        return self.hits, OVERTAKING_COMMIT  # every read: the other writer always comes


class _Invariants:
    def __init__(self) -> None:
        self.checkers: list = []


class _World:
    def __init__(self) -> None:
        self.plan = _Plan()
        self.invariants = _Invariants()
        self.fired: list = []
        self.violations: list = []

    def record_fault(self, node, site, kind, hit, **_):
        self.fired.append((node.label, site, kind, hit))

    def check(self, checker) -> None:
        checker.fail = lambda message, related=(): self.violations.append(message)
        self.invariants.checkers.append(checker)


class _Node:
    label = "worker-1#1"


@pytest.fixture
def conn(tmp_path):
    world = _World()
    conn = open_node_database(str(tmp_path / "x.db"), busy_timeout_ms=50, world=world, node=_Node())
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v INTEGER)")
    conn.execute("INSERT INTO t VALUES (1, 1)")
    yield conn, world
    conn.close()


def test_refused_while_the_transaction_holds_the_write_lock(conn):
    conn, world = conn
    with write_transaction(conn):
        (value,) = conn.execute("SELECT v FROM t WHERE k = 1").fetchone()
        conn.execute("UPDATE t SET v = ? WHERE k = 1", (value + 1,))
    checker = world.invariants.checkers[0]
    assert isinstance(checker, SqliteWriteLock)
    assert world.fired == [("worker-1#1", SITE, OVERTAKING_COMMIT, 1)]
    assert (checker.checks, checker.refused, checker.committed) == (1, 1, 0)
    assert world.violations == [] and conn.execute("SELECT v FROM t").fetchone() == (2,)


def test_a_deferred_begin_is_overtaken_and_its_write_loses_its_snapshot(conn):
    conn, world = conn
    conn.execute("BEGIN")  # what the sqlite-deferred-begin mutant does
    conn.execute("SELECT v FROM t WHERE k = 1").fetchone()
    with pytest.raises(sqlite3.OperationalError) as raised:
        conn.execute("UPDATE t SET v = 5 WHERE k = 1")
    assert raised.value.sqlite_errorcode == SQLITE_BUSY_SNAPSHOT
    conn.execute("ROLLBACK")
    checker = world.invariants.checkers[0]
    assert (checker.refused, checker.committed) == (0, 1)
    assert len(world.violations) == 1 and "SQLITE_BUSY_SNAPSHOT" in world.violations[0]


def test_the_model_surfaces_the_lost_snapshot_as_write_contention(conn, monkeypatch):
    conn, world = conn
    real_execute = conn.execute

    def deferred(sql, *args):
        return real_execute("BEGIN" if sql == "BEGIN IMMEDIATE" else sql, *args)

    monkeypatch.setattr(conn, "execute", deferred, raising=False)
    with pytest.raises(SqliteWriteContention):
        with write_transaction(conn):
            conn.execute("SELECT v FROM t WHERE k = 1").fetchone()
            conn.execute("UPDATE t SET v = 7 WHERE k = 1")
    assert not conn.in_transaction and len(world.violations) == 1


def test_a_clean_ledger_storm_on_sqlite_meets_the_other_writer_and_passes():
    result = run(registry.get("ledger-storm"),
                 ScenarioOptions(seed=0, duration_ms=parse_duration_ms("15m"), store="sqlite"))
    assert result.passed, result.violations
    assert result.faults.get(OVERTAKING_COMMIT, 0) >= 1, result.faults
    assert result.stats["overtakes_refused"] >= 1 and result.stats["overtakes_committed"] == 0, result.stats
