"""The schedule cursor and run archive (model/schedule_store.py), both adapters.

The high-water mark only moves up; retiring is idempotent and ordered (an
occurrence at or below the archive watermark is refused); the archive digest
is a chain an auditor recomputes from the summaries with ``archive_link``; a
held run is archived exactly once when released, which promises its deletion
(``pending_delete``); SQLite keeps all of it across a reopen.
"""
from __future__ import annotations

import attrs
import pytest

from model.canonical import ZERO_DIGEST, digest
from model.schedule_store import (
    InMemoryScheduleStore,
    ScheduleCursor,
    SqliteScheduleStore,
    archive_link,
    empty_cursor,
)
from model.sqlite_db import open_database

S = "sentinel"
MIN = 60_000
EVERY = 5 * MIN


def drive(coro):
    """Run a store call that must not suspend (one atomic step)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("a store call suspended")


def summary(occurrence_ms: int, outcome: str = "completed") -> dict:
    return {"runId": f"{S}@{occurrence_ms}", "outcome": outcome, "settlementDigest": digest([occurrence_ms]),
            "tailSeq": 3, "tailDigest": digest({"tail": occurrence_ms})}


class Stores:
    """Opens schedule stores of one adapter; SQLite ones on one file in tmp_path."""

    def __init__(self, kind: str, tmp_path) -> None:
        self.kind = kind
        self.path = str(tmp_path / "schedules.db")
        self.conns = []
        self.memory = InMemoryScheduleStore() if kind == "memory" else None

    def open(self):
        if self.kind == "memory":
            return self.memory
        conn = open_database(self.path)
        self.conns.append(conn)
        return SqliteScheduleStore(conn)

    def reopen(self):
        """A restarted process: the old connection closed, a new one opened."""
        if self.kind == "sqlite":
            self.conns.pop().close()
        return self.open()

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


@pytest.fixture(params=["memory", "sqlite"])
def stores(request, tmp_path):
    s = Stores(request.param, tmp_path)
    yield s
    s.close()


def cursor(store, schedule_id: str = S) -> ScheduleCursor:
    return drive(store.cursor(schedule_id))


# --- the high-water mark ---------------------------------------------------------


def test_empty_cursor(stores):
    store = stores.open()
    assert cursor(store) == empty_cursor(S) == ScheduleCursor(S, None, None, 0, ZERO_DIGEST, (), None)


def test_advance_is_monotonic(stores):
    store = stores.open()
    drive(store.advance(S, 2 * EVERY))
    assert cursor(store).high_water_ms == 2 * EVERY
    drive(store.advance(S, EVERY))  # a late, earlier occurrence: never lowers the mark
    assert cursor(store).high_water_ms == 2 * EVERY
    drive(store.advance(S, 2 * EVERY))  # a duplicate: no-op
    assert cursor(store).high_water_ms == 2 * EVERY
    drive(store.advance(S, 0))
    assert cursor(store).high_water_ms == 2 * EVERY
    drive(store.advance(S, 7 * EVERY))  # a gap (skipped occurrences) is fine
    assert cursor(store) == attrs.evolve(empty_cursor(S), high_water_ms=7 * EVERY)


def test_advance_leaves_the_archive_alone(stores):
    store = stores.open()
    drive(store.retire(S, 0, f"{S}@0", summary(0)))
    before = cursor(store)
    drive(store.advance(S, 3 * EVERY))
    after = cursor(store)
    assert after.high_water_ms == 3 * EVERY
    assert (after.archived_through_ms, after.archived_runs, after.archive_digest, after.held,
            after.pending_delete) == (before.archived_through_ms, before.archived_runs, before.archive_digest,
                                      before.held, before.pending_delete)


def test_schedules_are_independent(stores):
    store = stores.open()
    drive(store.advance("a", 10 * EVERY))
    drive(store.retire("b", EVERY, "b@300000", summary(EVERY)))
    assert cursor(store, "a").archived_through_ms is None and cursor(store, "a").archived_runs == 0
    assert cursor(store, "b").high_water_ms is None
    assert cursor(store, "c") == empty_cursor("c")


@pytest.mark.parametrize("bad", [("", 0), (None, 0), (S, -1), (S, 1.5), (S, True)])
def test_bad_arguments_are_type_errors_and_write_nothing(stores, bad):
    store = stores.open()
    schedule_id, occurrence_ms = bad
    with pytest.raises(TypeError):
        drive(store.advance(schedule_id, occurrence_ms))
    with pytest.raises(TypeError):
        drive(store.retire(schedule_id, occurrence_ms, None, None))
    assert cursor(store) == empty_cursor(S)


# --- retire -------------------------------------------------------------------


def test_retire_is_idempotent_and_ordered(stores):
    store = stores.open()
    # Skipped occurrence (never ran): only the watermark moves.
    assert drive(store.retire(S, 0, None, None)) is True
    assert cursor(store) == attrs.evolve(empty_cursor(S), archived_through_ms=0)
    # An archived run: chained, counted, its deletion promised.
    run = f"{S}@{EVERY}"
    assert drive(store.retire(S, EVERY, run, summary(EVERY))) is True
    after = cursor(store)
    assert after.archived_through_ms == EVERY
    assert after.archived_runs == 1
    assert after.archive_digest == archive_link(ZERO_DIGEST, summary(EVERY))
    assert after.pending_delete == run
    # Again (a retried pass), or anything at or below the watermark: refused,
    # nothing changes -- not the count, not the chain.
    assert drive(store.retire(S, EVERY, run, summary(EVERY))) is False
    assert drive(store.retire(S, EVERY, run, summary(EVERY, "failed"))) is False
    assert drive(store.retire(S, 0, f"{S}@0", summary(0))) is False
    assert drive(store.retire(S, 0, None, None)) is False
    assert drive(store.retire(S, EVERY, run, None, hold=True)) is False
    assert cursor(store) == after


def test_retire_out_of_order_is_refused(stores):
    """The archive is in occurrence order: once a later occurrence is retired,
    an earlier one can never be chained behind it."""
    store = stores.open()
    assert drive(store.retire(S, 3 * EVERY, f"{S}@{3 * EVERY}", summary(3 * EVERY))) is True
    before = cursor(store)
    for occurrence_ms in (0, EVERY, 2 * EVERY, 3 * EVERY):
        assert drive(store.retire(S, occurrence_ms, f"{S}@{occurrence_ms}", summary(occurrence_ms))) is False
    assert cursor(store) == before
    assert drive(store.retire(S, 3 * EVERY + 1, None, None)) is True  # strictly above: accepted


def test_archive_digest_chain_recomputes_from_summaries(stores):
    store = stores.open()
    kept = []  # what an auditor keeps: the summaries, in occurrence order
    for n in range(6):
        occurrence_ms = n * EVERY
        if n == 2:
            drive(store.retire(S, occurrence_ms, None, None))  # skipped: not in the chain
            continue
        drive(store.retire(S, occurrence_ms, f"{S}@{occurrence_ms}", summary(occurrence_ms)))
        kept.append(summary(occurrence_ms))
    chain = ZERO_DIGEST
    for s in kept:
        chain = archive_link(chain, s)
    final = cursor(store)
    assert final.archive_digest == chain
    assert final.archived_runs == len(kept) == 5
    assert final.archived_through_ms == 5 * EVERY
    # The link is the documented one: sha256(canonical({previous, run})).
    assert archive_link(ZERO_DIGEST, kept[0]) == digest({"previous": ZERO_DIGEST, "run": kept[0]})
    # The chain commits to order and content: a reordering or an edit shows.
    swapped = ZERO_DIGEST
    for s in [kept[1], kept[0], *kept[2:]]:
        swapped = archive_link(swapped, s)
    assert swapped != chain
    edited = ZERO_DIGEST
    for s in [*kept[:-1], dict(kept[-1], outcome="failed")]:
        edited = archive_link(edited, s)
    assert edited != chain


# --- hold and release ---------------------------------------------------------


def test_hold_then_release_archives_once(stores):
    store = stores.open()
    run0, run1, run2 = (f"{S}@{n * EVERY}" for n in range(3))
    drive(store.retire(S, 0, run0, summary(0)))
    # A pinned run is held: the watermark passes it, the archive does not (yet).
    assert drive(store.retire(S, EVERY, run1, None, hold=True)) is True
    held = cursor(store)
    assert held.held == (run1,)
    assert held.archived_through_ms == EVERY
    assert held.archived_runs == 1
    assert held.archive_digest == archive_link(ZERO_DIGEST, summary(0))
    assert held.pending_delete == run0  # a hold promises no deletion
    # Holding is idempotent like any retire.
    assert drive(store.retire(S, EVERY, run1, None, hold=True)) is False
    assert cursor(store).held == (run1,)
    # Later runs archive behind the held one.
    drive(store.retire(S, 2 * EVERY, run2, summary(2 * EVERY)))
    # Releasing a run that is not held: nothing.
    assert drive(store.release(S, run2, summary(2 * EVERY))) is False
    assert drive(store.release(S, f"{S}@999", summary(999))) is False
    before_release = cursor(store)
    # Released once its pins are gone: archived (chained after what came
    # before it in the archive), and its deletion becomes the pending one.
    assert drive(store.release(S, run1, summary(EVERY))) is True
    released = cursor(store)
    assert released.held == ()
    assert released.archived_runs == before_release.archived_runs + 1 == 3
    assert released.archive_digest == archive_link(before_release.archive_digest, summary(EVERY))
    assert released.pending_delete == run1
    assert released.archived_through_ms == 2 * EVERY
    # Released again (a retried pass): refused, archived exactly once.
    assert drive(store.release(S, run1, summary(EVERY))) is False
    assert cursor(store) == released


def test_several_held_runs_release_independently(stores):
    store = stores.open()
    runs = [f"{S}@{n * EVERY}" for n in range(3)]
    for n, run in enumerate(runs):
        drive(store.retire(S, n * EVERY, run, None, hold=True))
    assert cursor(store).held == tuple(runs)
    assert drive(store.release(S, runs[1], summary(EVERY))) is True
    assert cursor(store).held == (runs[0], runs[2])
    assert cursor(store).pending_delete == runs[1]
    assert drive(store.release(S, runs[2], summary(2 * EVERY))) is True
    assert drive(store.release(S, runs[0], summary(0))) is True
    final = cursor(store)
    assert final.held == ()
    assert final.archived_runs == 3
    chain = ZERO_DIGEST
    for s in (summary(EVERY), summary(2 * EVERY), summary(0)):  # release order
        chain = archive_link(chain, s)
    assert final.archive_digest == chain
    assert final.pending_delete == runs[0]


# --- durability -----------------------------------------------------------------


def test_sqlite_reopen_preserves_everything(tmp_path):
    stores = Stores("sqlite", tmp_path)
    try:
        store = stores.open()
        drive(store.advance(S, 9 * EVERY))
        drive(store.advance("other", EVERY))
        drive(store.retire(S, 0, f"{S}@0", summary(0)))
        drive(store.retire(S, EVERY, None, None))
        drive(store.retire(S, 2 * EVERY, f"{S}@{2 * EVERY}", None, hold=True))
        drive(store.retire(S, 3 * EVERY, f"{S}@{3 * EVERY}", None, hold=True))
        drive(store.retire(S, 4 * EVERY, f"{S}@{4 * EVERY}", summary(4 * EVERY)))
        before = cursor(store)
        other = cursor(store, "other")
        assert before.held == (f"{S}@{2 * EVERY}", f"{S}@{3 * EVERY}")
        assert before.pending_delete == f"{S}@{4 * EVERY}"
        store = stores.reopen()
        assert cursor(store) == before
        assert cursor(store, "other") == other
        # ... and keeps working from there: the watermark still refuses.
        assert drive(store.retire(S, 4 * EVERY, f"{S}@{4 * EVERY}", summary(4 * EVERY))) is False
        assert drive(store.release(S, f"{S}@{2 * EVERY}", summary(2 * EVERY))) is True
        released = cursor(store)
        store = stores.reopen()
        assert cursor(store) == released
        assert released.held == (f"{S}@{3 * EVERY}",)
        assert released.pending_delete == f"{S}@{2 * EVERY}"
        assert released.archive_digest == archive_link(
            archive_link(archive_link(ZERO_DIGEST, summary(0)), summary(4 * EVERY)), summary(2 * EVERY))
    finally:
        stores.close()


def test_memory_and_sqlite_agree(tmp_path):
    memory = InMemoryScheduleStore()
    conn = open_database(str(tmp_path / "agree.db"))
    try:
        sqlite = SqliteScheduleStore(conn)
        ops = [
            ("advance", S, 2 * EVERY), ("retire", S, 0, f"{S}@0", summary(0), False),
            ("retire", S, 0, None, None, False), ("retire", S, EVERY, f"{S}@{EVERY}", None, True),
            ("advance", S, EVERY), ("retire", S, 2 * EVERY, f"{S}@{2 * EVERY}", summary(2 * EVERY), False),
            ("release", S, f"{S}@{2 * EVERY}", summary(2 * EVERY)), ("release", S, f"{S}@{EVERY}", summary(EVERY)),
            ("release", S, f"{S}@{EVERY}", summary(EVERY)), ("retire", S, 3 * EVERY, None, None, False),
        ]
        for op in ops:
            results = []
            for store in (memory, sqlite):
                if op[0] == "advance":
                    results.append(drive(store.advance(op[1], op[2])))
                elif op[0] == "retire":
                    results.append(drive(store.retire(op[1], op[2], op[3], op[4], hold=op[5])))
                else:
                    results.append(drive(store.release(op[1], op[2], op[3])))
                results.append(cursor(store))
            assert results[:2] == results[2:], op
    finally:
        conn.close()
