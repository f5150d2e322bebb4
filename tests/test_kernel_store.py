"""The kernel's execution store: conformance of both adapters, planted bugs
the conformance must catch, memory-vs-SQLite equivalence on random operation
sequences, and SQLite durability across reopen."""
from __future__ import annotations

import itertools
import pickle
import sqlite3

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.kernel.memory_store import InMemoryExecutionStore
from model.kernel.records import (
    COMPLETED,
    EFFECT_INDOUBT,
    EVENT_EMITTED,
    FAILED,
    PARKED,
    RUNNING,
    STEP_COMPLETED,
    STEP_STARTED,
    ExecutionNotRunning,
    FinishConflict,
    StartOutcome,
    StepRecord,
    StepSequenceConflict,
    UnknownExecution,
)
from model.kernel.sqlite_store import SqliteExecutionStore
from model.kernel.store_conformance import (
    CONFORMANCE_CHECKS,
    ConformanceFailure,
    run_execution_store_conformance,
)
from model.sqlite_db import open_database


def run(async_fn, *args):
    return trio.run(async_fn, *args)


@pytest.fixture
def sqlite_factory(tmp_path):
    """A fresh SQLite file per call; closes every store at teardown."""
    counter = itertools.count()
    opened: list[SqliteExecutionStore] = []

    def make_store() -> SqliteExecutionStore:
        store = SqliteExecutionStore.open(str(tmp_path / f"kernel-{next(counter)}.db"))
        opened.append(store)
        return store

    yield make_store
    for store in opened:
        store.close()


# --- conformance -----------------------------------------------------------------


def test_memory_store_conforms():
    assert run(run_execution_store_conformance, InMemoryExecutionStore) == list(CONFORMANCE_CHECKS)


def test_sqlite_store_conforms(sqlite_factory):
    assert run(run_execution_store_conformance, sqlite_factory) == list(CONFORMANCE_CHECKS)


def test_conformance_accepts_async_factory():
    async def make_store():
        return InMemoryExecutionStore()

    assert run(run_execution_store_conformance, make_store) == list(CONFORMANCE_CHECKS)


def test_conformance_subset_and_unknown_names():
    subset = ("finish-conflict", "counts")

    async def main():
        return await run_execution_store_conformance(InMemoryExecutionStore, checks=subset)

    assert run(main) == ["finish-conflict", "counts"]

    async def bad():
        await run_execution_store_conformance(InMemoryExecutionStore, checks=["no-such-check"])

    with pytest.raises(ValueError, match="no-such-check"):
        run(bad)


def test_conformance_check_names_are_unique_and_cover_every_rule():
    assert len(set(CONFORMANCE_CHECKS)) == len(CONFORMANCE_CHECKS)
    for prefix in ("start-", "append-", "load-", "park-", "finish-", "live-", "purge-", "counts", "json-"):
        assert any(name.startswith(prefix) for name in CONFORMANCE_CHECKS), prefix


# --- planted bugs: the conformance must name the broken rule ---------------------------------


class NonIdempotentStart(InMemoryExecutionStore):
    """Re-creates an existing execution instead of replaying it."""

    async def start_execution(self, run_id, **kwargs):
        self._executions.pop(run_id, None)
        self._high_water_ms.pop(kwargs["schedule_id"], None)
        return await super().start_execution(run_id, **kwargs)


class GapAcceptingAppend(InMemoryExecutionStore):
    """Accepts any seq beyond the end of the log (a gap)."""

    async def append_step(self, run_id, seq, step_id, kind, output):
        row = self._executions.get(run_id)
        if row is not None and seq > len(row.steps) + 1:
            while len(row.steps) < seq - 1:
                row.steps.append(("filler", kind, "null"))
                self._step_count += 1
        return await super().append_step(run_id, seq, step_id, kind, output)


class PurgeForgetsHighWater(InMemoryExecutionStore):
    """Drops the schedule's high-water mark with its purged runs."""

    async def purge_finished(self, finished_before_ms):
        purged = await super().purge_finished(finished_before_ms)
        if purged:
            self._high_water_ms.clear()
        return purged


class FinishOverwrites(InMemoryExecutionStore):
    """Last finish wins: no idempotency, no conflict."""

    async def finish_execution(self, run_id, *, status, output, finished_at_ms, **steps):
        row = self._executions.get(run_id)
        if row is not None and row.finished_at_ms is not None:
            row.status = PARKED if row.schedule_id is None else RUNNING
            row.finished_at_ms = None
            if row.schedule_id is not None:
                self._live.setdefault(row.schedule_id, {})[run_id] = row
        return await super().finish_execution(
            run_id, status=status, output=output, finished_at_ms=finished_at_ms, **steps
        )


class SharesInputReference(InMemoryExecutionStore):
    """Hands out the caller's own input object instead of a copy."""

    async def start_execution(self, run_id, **kwargs):
        outcome = await super().start_execution(run_id, **kwargs)
        if outcome.record is not None and not outcome.replayed:
            self._aliases = getattr(self, "_aliases", {})
            self._aliases[run_id] = kwargs["input"]
        return outcome

    async def load_execution(self, run_id):
        record = await super().load_execution(run_id)
        aliases = getattr(self, "_aliases", {})
        if record is not None and run_id in aliases:
            record = attrs.evolve(record, input=aliases[run_id])
        return record


class LoopingAppendSteps(InMemoryExecutionStore):
    """A batch as a loop of single appends: a bad step midway leaves the
    steps before it behind."""

    async def append_steps(self, run_id, first_seq, steps):
        return tuple([await self.append_step(run_id, seq, *step) for seq, step in enumerate(steps, first_seq)])


class FinishAppendsThenFinishes(InMemoryExecutionStore):
    """Finish with steps as two calls: append, then finish. A repeat of a
    committed finish fails on the append instead of being idempotent."""

    async def finish_execution(self, run_id, *, status, output, finished_at_ms, steps=(), first_seq=None):
        if steps:
            await self.append_steps(run_id, first_seq, steps)
        return await super().finish_execution(run_id, status=status, output=output, finished_at_ms=finished_at_ms)


@pytest.mark.parametrize(
    "broken_store, failing_check",
    [
        (LoopingAppendSteps, "append-steps-all-or-nothing"),
        (FinishAppendsThenFinishes, "finish-with-steps-idempotent"),
        (NonIdempotentStart, "start-idempotent-by-run-id"),
        (GapAcceptingAppend, "append-step-sequence"),
        (PurgeForgetsHighWater, "start-retired-after-purge"),
        (FinishOverwrites, "finish-idempotent"),
        (FinishOverwrites, "finish-conflict"),
        (FinishOverwrites, "finish-with-steps-idempotent"),
        (SharesInputReference, "json-values-copied"),
    ],
)
def test_conformance_catches_planted_bug(broken_store, failing_check):
    with pytest.raises(ConformanceFailure) as info:
        run(run_execution_store_conformance, broken_store)
    failure = info.value
    assert isinstance(failure, AssertionError)
    assert failing_check in failure.failed_checks
    assert failing_check in str(failure)
    # A planted bug fails the rules it breaks, not the whole suite.
    assert len(failure.failed_checks) < len(CONFORMANCE_CHECKS) // 2, failure.failed_checks


# --- boundary validation and errors ------------------------------------------------------


def test_arguments_validated_before_anything_changes():
    async def main():
        store = InMemoryExecutionStore()
        with pytest.raises(TypeError, match="occurrence_ms"):
            await store.start_execution(
                "s@1", schedule_id="s", occurrence_ms=None, flow_version=1, input=None, started_at_ms=0
            )
        with pytest.raises(TypeError, match="run_id"):
            await store.start_execution(
                7, schedule_id=None, occurrence_ms=None, flow_version=1, input=None, started_at_ms=0
            )
        await store.start_execution("r", schedule_id=None, occurrence_ms=None, flow_version=1, input=None, started_at_ms=0)
        with pytest.raises(TypeError, match="seq"):
            await store.append_step("r", True, "s", STEP_COMPLETED, None)
        with pytest.raises(ValueError, match="unknown step kind"):
            await store.append_step("r", 1, "s", "STEP_DONE", None)
        with pytest.raises(ValueError, match="lone|surrogate|encode"):
            await store.append_step("r", 1, "s", STEP_COMPLETED, "\ud800")
        assert store.counts() == {"executions": 1, "steps": 0}

    run(main)


@pytest.mark.parametrize(
    "error",
    [
        StepSequenceConflict("r", 5, 3),
        UnknownExecution("r"),
        ExecutionNotRunning("r", COMPLETED),
        FinishConflict("r", COMPLETED, FAILED),
        FinishConflict("r", COMPLETED, COMPLETED),
    ],
)
def test_errors_carry_fields_and_survive_pickling(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert vars(copy) == vars(error)
    assert str(copy) == str(error)
    assert "'r'" in str(error)


def test_finish_conflict_message_says_output_differs():
    assert "different output" in str(FinishConflict("r", COMPLETED, COMPLETED))
    assert "cannot finish as 'failed'" in str(FinishConflict("r", COMPLETED, FAILED))


# --- memory store stays flat over a long history -------------------------------------


def test_memory_store_flat_over_many_occurrences():
    """A sentinel's life in miniature: start, a few steps, finish, purge a day
    behind. Held state and every index stay bounded."""
    every_ms = 300_000
    retention_ms = 86_400_000

    async def main():
        store = InMemoryExecutionStore()
        peak = 0
        for i in range(5_000):
            t = i * every_ms
            outcome = await store.start_execution(
                f"s@{t}", schedule_id="s", occurrence_ms=t, flow_version=1, input={"i": i}, started_at_ms=t
            )
            assert not outcome.replayed
            assert [r.run_id for r in await store.live_executions("s")] == [f"s@{t}"]
            for seq in (1, 2, 3):
                await store.append_step(f"s@{t}", seq, f"step{seq}", STEP_COMPLETED, seq)
            await store.finish_execution(f"s@{t}", status=COMPLETED, output=None, finished_at_ms=t + 1_000)
            await store.purge_finished(t - retention_ms)
            peak = max(peak, store.counts()["executions"])
        assert peak <= retention_ms // every_ms + 2
        assert store.counts()["steps"] == 3 * store.counts()["executions"]
        assert len(store._finished_heap) == store.counts()["executions"]
        assert store._live == {}
        assert await store.schedule_high_water_ms("s") == 4_999 * every_ms

    run(main)


def test_memory_purge_exact_when_finish_times_are_out_of_order():
    async def main():
        store = InMemoryExecutionStore()
        finish_times = [50, 10, 40, 20, 30, 10]
        for i, finished_at_ms in enumerate(finish_times):
            await store.start_execution(
                f"r{i}", schedule_id=None, occurrence_ms=None, flow_version=1, input=None, started_at_ms=0
            )
            await store.finish_execution(f"r{i}", status=COMPLETED, output=None, finished_at_ms=finished_at_ms)
        assert await store.purge_finished(25) == 3
        assert sorted([f"r{i}" for i in range(6) if await store.load_execution(f"r{i}") is not None]) == ["r0", "r2", "r4"]
        assert await store.purge_finished(41) == 2
        assert await store.load_execution("r0") is not None

    run(main)


# --- SQLite specifics ------------------------------------------------------------------


async def _populate(store):
    await store.start_execution("s@1000", schedule_id="s", occurrence_ms=1_000, flow_version=1, input={"a": 1}, started_at_ms=1_000)
    await store.start_execution("s@2000", schedule_id="s", occurrence_ms=2_000, flow_version=2, input=[1, "ü"], started_at_ms=2_001)
    await store.start_execution("adhoc", schedule_id=None, occurrence_ms=None, flow_version=1, input=None, started_at_ms=5)
    await store.append_step("s@1000", 1, "fetch", STEP_COMPLETED, {"rows": [1, 2]})
    await store.append_step("s@1000", 2, "email", STEP_STARTED, None)
    await store.finish_execution("s@1000", status=COMPLETED, output={"sent": 1}, finished_at_ms=1_500)
    await store.append_step("s@2000", 1, "charge", STEP_STARTED, None)
    await store.append_step("s@2000", 2, "charge", EFFECT_INDOUBT, None)
    await store.park_execution("s@2000")
    await store.append_step("adhoc", 1, "finding", EVENT_EMITTED, {"evidence": "ref:abc"})
    await store.finish_execution("adhoc", status=FAILED, output="boom", finished_at_ms=9)
    assert await store.purge_finished(10) == 1  # adhoc


async def _snapshot(store):
    run_ids = ("s@1000", "s@2000", "adhoc")
    return (
        [await store.load_execution(r) for r in run_ids],
        [await store.load_steps(r) for r in run_ids],
        await store.live_executions("s"),
        await store.schedule_high_water_ms("s"),
        store.counts(),
    )


def test_sqlite_state_survives_reopen(tmp_path):
    path = str(tmp_path / "kernel.db")

    async def before():
        store = SqliteExecutionStore.open(path)
        await _populate(store)
        snapshot = await _snapshot(store)
        store.close()
        return snapshot

    async def after():
        store = SqliteExecutionStore.open(path)  # schema creation is idempotent
        snapshot = await _snapshot(store)
        # The log continues where it stopped; starts stay idempotent and retired.
        with pytest.raises(StepSequenceConflict):
            await store.append_step("s@2000", 2, "again", STEP_COMPLETED, None)
        await store.append_step("s@2000", 3, "charge", STEP_COMPLETED, {"operator": "refunded"})
        replay = await store.start_execution(
            "s@2000", schedule_id="s", occurrence_ms=2_000, flow_version=9, input=None, started_at_ms=0
        )
        assert replay.replayed and replay.record.status == PARKED and replay.record.flow_version == 2
        assert await store.start_execution(
            "s@1500", schedule_id="s", occurrence_ms=1_500, flow_version=1, input=None, started_at_ms=0
        ) == StartOutcome(None, True)
        store.close()
        return snapshot

    snapshot = run(before)
    assert run(after) == snapshot
    executions, steps, live, high_water_ms, counts = snapshot
    assert executions[2] is None and steps[2] == ()
    assert [r.run_id for r in live] == ["s@2000"]
    assert high_water_ms == 2_000
    assert counts == {"executions": 2, "steps": 4}


def test_sqlite_matches_memory_on_the_same_history(tmp_path):
    async def main():
        memory = InMemoryExecutionStore()
        sqlite_store = SqliteExecutionStore.open(str(tmp_path / "k.db"))
        await _populate(memory)
        await _populate(sqlite_store)
        assert await _snapshot(memory) == await _snapshot(sqlite_store)
        sqlite_store.close()

    run(main)


def test_sqlite_shares_a_connection_with_other_stores(tmp_path):
    conn = open_database(str(tmp_path / "shared.db"))
    conn.execute("CREATE TABLE other_store (k TEXT PRIMARY KEY, v TEXT)")
    conn.execute("INSERT INTO other_store VALUES ('a', 'b')")
    first = SqliteExecutionStore(conn)
    second = SqliteExecutionStore(conn)  # idempotent schema on a shared connection

    async def main():
        await first.start_execution("r", schedule_id=None, occurrence_ms=None, flow_version=1, input=None, started_at_ms=0)
        assert (await second.load_execution("r")).status == RUNNING

    run(main)
    second.close()  # not its connection: a no-op
    first.close()
    assert conn.execute("SELECT v FROM other_store").fetchall() == [("b",)]
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"kernel_executions", "kernel_steps", "kernel_schedules", "other_store"} <= tables
    conn.close()


# The kernel tables as the first version of this adapter made them: a rowid
# kernel_executions (this version makes it WITHOUT ROWID) and an IN-list CHECK.
_FIRST_SCHEMA = (
    """CREATE TABLE kernel_executions (
        run_id TEXT PRIMARY KEY NOT NULL, schedule_id TEXT, occurrence_ms INTEGER,
        flow_version INTEGER NOT NULL, input_json TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('running', 'parked', 'completed', 'failed')),
        started_at_ms INTEGER NOT NULL, finished_at_ms INTEGER, output_json TEXT NOT NULL,
        CHECK ((finished_at_ms IS NULL) = (status IN ('running', 'parked'))))""",
    """CREATE TABLE kernel_steps (
        run_id TEXT NOT NULL, seq INTEGER NOT NULL CHECK (seq >= 1), step_id TEXT NOT NULL,
        kind TEXT NOT NULL, output_json TEXT NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID""",
    """CREATE TABLE kernel_schedules (
        schedule_id TEXT PRIMARY KEY NOT NULL, high_water_ms INTEGER NOT NULL) WITHOUT ROWID""",
    """CREATE INDEX kernel_executions_live ON kernel_executions (schedule_id, occurrence_ms, run_id)
        WHERE status IN ('running', 'parked')""",
    """CREATE INDEX kernel_executions_finished ON kernel_executions (finished_at_ms)
        WHERE finished_at_ms IS NOT NULL""",
)


def test_sqlite_works_on_a_database_made_by_the_first_schema(tmp_path):
    """Schema creation is CREATE ... IF NOT EXISTS: a file made before the
    schema changed keeps its tables, and every statement works on them."""
    path = str(tmp_path / "first.db")
    conn = open_database(path)
    for statement in _FIRST_SCHEMA:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO kernel_executions VALUES ('s@500', 's', 500, 1, 'null', 'running', 500, NULL, 'null')"
    )
    conn.execute("INSERT INTO kernel_steps VALUES ('s@500', 1, 'old', 'STEP_COMPLETED', '1')")
    conn.execute("INSERT INTO kernel_schedules VALUES ('s', 500)")
    conn.close()

    async def main():
        memory = InMemoryExecutionStore()
        await memory.start_execution("s@500", schedule_id="s", occurrence_ms=500, flow_version=1, input=None, started_at_ms=500)
        await memory.append_step("s@500", 1, "old", STEP_COMPLETED, 1)
        store = SqliteExecutionStore.open(path)
        for each in (memory, store):
            await _populate(each)
            await each.finish_execution(
                "s@500", status=COMPLETED, output=None, finished_at_ms=1_600,
                steps=(("new", STEP_COMPLETED, 2),), first_seq=2,
            )
        assert await _snapshot(store) == await _snapshot(memory)
        assert len(await store.load_steps("s@500")) == 2
        store.close()

    run(main)


def test_sqlite_refused_batches_roll_back_and_leave_no_transaction_open(tmp_path):
    store = SqliteExecutionStore.open(str(tmp_path / "k.db"))

    async def main():
        await store.start_execution("r", schedule_id=None, occurrence_ms=None, flow_version=1, input=None, started_at_ms=0)
        two = (("a", STEP_COMPLETED, 1), ("b", STEP_COMPLETED, 2))
        for _ in range(3):
            with pytest.raises(StepSequenceConflict):
                await store.append_steps("r", 2, two)
            with pytest.raises(StepSequenceConflict):
                await store.finish_execution("r", status=COMPLETED, output=None, finished_at_ms=1, steps=two, first_seq=5)
            with pytest.raises(UnknownExecution):
                await store.finish_execution("nope", status=COMPLETED, output=None, finished_at_ms=1, steps=two, first_seq=1)
            assert not store.connection.in_transaction
        assert await store.load_steps("r") == ()
        assert (await store.load_execution("r")).status == RUNNING
        await store.finish_execution("r", status=COMPLETED, output=None, finished_at_ms=1, steps=two, first_seq=1)
        assert len(await store.load_steps("r")) == 2

    run(main)
    assert not store.connection.in_transaction
    store.close()


def test_sqlite_two_connections_race_to_finish_with_steps(tmp_path):
    """Two workers finishing the same run with the same steps: one commits,
    the other sees the idempotent repeat; a worker behind on the log gets
    the typed conflict, not a gap or a duplicate."""
    path = str(tmp_path / "race.db")
    a = SqliteExecutionStore.open(path)
    b = SqliteExecutionStore.open(path)

    async def main():
        await a.start_execution("r", schedule_id="s", occurrence_ms=1, flow_version=1, input=None, started_at_ms=0)
        await a.start_execution("q", schedule_id="s", occurrence_ms=2, flow_version=1, input=None, started_at_ms=0)
        steps = (("x", STEP_COMPLETED, "done"),)
        first = await a.finish_execution("r", status=COMPLETED, output=1, finished_at_ms=5, steps=steps, first_seq=1)
        assert await b.finish_execution("r", status=COMPLETED, output=1, finished_at_ms=6, steps=steps, first_seq=1) == first
        await a.append_steps("q", 1, steps)
        with pytest.raises(StepSequenceConflict) as info:
            await b.finish_execution("q", status=COMPLETED, output=1, finished_at_ms=6, steps=steps, first_seq=1)
        assert (info.value.expected_seq, info.value.actual_next_seq) == (1, 2)
        assert await b.load_steps("r") == (StepRecord("r", 1, "x", STEP_COMPLETED, "done"),)
        assert (await b.load_execution("q")).status == RUNNING

    run(main)
    a.close()
    b.close()


def test_sqlite_refuses_a_connection_with_implicit_transactions(tmp_path):
    conn = sqlite3.connect(str(tmp_path / "x.db"))
    with pytest.raises(ValueError, match="isolation_level"):
        SqliteExecutionStore(conn)
    conn.close()


def test_sqlite_two_connections_serialize_appends(tmp_path):
    """Two workers on one file racing to record the same step: one wins, the
    other gets the typed conflict (BEGIN IMMEDIATE serializes them)."""
    path = str(tmp_path / "race.db")
    a = SqliteExecutionStore.open(path)
    b = SqliteExecutionStore.open(path)

    async def main():
        await a.start_execution("r", schedule_id="s", occurrence_ms=1, flow_version=1, input=None, started_at_ms=0)
        assert (await b.start_execution("r", schedule_id="s", occurrence_ms=1, flow_version=1, input=None, started_at_ms=0)).replayed
        await a.append_step("r", 1, "x", STEP_COMPLETED, "from a")
        with pytest.raises(StepSequenceConflict) as info:
            await b.append_step("r", 1, "x", STEP_COMPLETED, "from b")
        assert (info.value.expected_seq, info.value.actual_next_seq) == (1, 2)
        assert await b.load_steps("r") == (StepRecord("r", 1, "x", STEP_COMPLETED, "from a"),)

    run(main)
    a.close()
    b.close()


def test_sqlite_failed_write_rolls_back_and_leaves_no_transaction_open(tmp_path):
    store = SqliteExecutionStore.open(str(tmp_path / "k.db"))

    async def main():
        await store.start_execution("r", schedule_id=None, occurrence_ms=None, flow_version=1, input=None, started_at_ms=0)
        for _ in range(3):
            with pytest.raises(StepSequenceConflict):
                await store.append_step("r", 7, "x", STEP_COMPLETED, None)
            with pytest.raises(UnknownExecution):
                await store.finish_execution("nope", status=COMPLETED, output=None, finished_at_ms=1)
        assert not store.connection.in_transaction
        await store.append_step("r", 1, "x", STEP_COMPLETED, None)

    run(main)
    assert not store.connection.in_transaction
    store.close()


@pytest.mark.parametrize(
    "statement, params, index",
    [
        ("_SELECT_LIVE", 1, "kernel_executions_live"),
        ("_PURGE_EXECUTIONS", 1, "kernel_executions_finished"),
        ("_PURGE_STEPS", 1, "kernel_executions_finished"),
        ("_PROBE_APPEND", 1, "PRIMARY KEY"),
        ("_SELECT_EXECUTION_AND_LAST_SEQ", 1, "PRIMARY KEY"),
        ("_FINISH", 4, "PRIMARY KEY"),
        ("_START_SCHEDULED", 6, "PRIMARY KEY"),
        ("_SELECT_STEPS", 1, "PRIMARY KEY"),
    ],
)
def test_sqlite_statements_use_their_indexes(tmp_path, statement, params, index):
    from model.kernel import sqlite_store

    store = SqliteExecutionStore.open(str(tmp_path / "plan.db"))
    sql = getattr(sqlite_store, statement)
    plan = " | ".join(row[-1] for row in store.connection.execute(f"EXPLAIN QUERY PLAN {sql}", (1,) * params))
    assert index in plan, plan
    assert "SCAN" not in plan.replace("SCAN CONSTANT ROW", "") and "TEMP B-TREE" not in plan, plan
    store.close()


# --- memory vs SQLite on random operation sequences ------------------------------------

RUN_IDS = ("a", "b", "c")
SCHEDULES = (None, "s1", "s2")
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=6,
)

_START = st.tuples(
    st.just("start"), st.sampled_from(RUN_IDS), st.sampled_from(SCHEDULES), st.integers(0, 6),
    st.integers(1, 3), JSON_VALUES, st.integers(0, 100),
)
# The seq is "next + offset" so most appends are in sequence and the rest are
# the interesting near misses (duplicate, gap, far off).
_APPEND = st.tuples(
    st.just("append"), st.sampled_from(RUN_IDS), st.sampled_from((0, 0, 0, 0, -1, 1, -3)),
    st.sampled_from(("x", "y")), st.sampled_from((STEP_STARTED, STEP_COMPLETED, EFFECT_INDOUBT, EVENT_EMITTED)),
    JSON_VALUES,
)
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(("x", "y")), st.sampled_from((STEP_STARTED, STEP_COMPLETED, EFFECT_INDOUBT, EVENT_EMITTED)),
        JSON_VALUES,
    ),
    max_size=3,
).map(tuple)
_APPEND_STEPS = st.tuples(
    st.just("append_steps"), st.sampled_from(RUN_IDS), st.sampled_from((0, 0, 0, -1, 1, -2)), _STEPS,
)
# Finish with steps half the time; the seq offsets include the ones a repeat
# of a committed finish would carry (behind the end of the log).
_FINISH = st.tuples(
    st.just("finish"), st.sampled_from(RUN_IDS), st.sampled_from((COMPLETED, FAILED)),
    st.sampled_from((None, 1, {"k": [1]}, {"k": [1.0]})), st.integers(0, 30),
    st.sampled_from((0, 0, -1, -2, 1)), st.one_of(st.just(()), _STEPS),
)
OPERATIONS = st.one_of(
    _START, _START, _APPEND, _APPEND, _APPEND_STEPS, _FINISH, _FINISH,
    st.tuples(st.just("park"), st.sampled_from(RUN_IDS)),
    st.tuples(st.just("purge"), st.integers(0, 35)),
)


async def _apply(store, op, next_seq):
    name, *args = op
    try:
        if name == "start":
            run_id, schedule_id, occurrence, flow_version, value, started_at_ms = args
            return await store.start_execution(
                run_id,
                schedule_id=schedule_id,
                occurrence_ms=None if schedule_id is None and occurrence == 0 else occurrence,
                flow_version=flow_version,
                input=value,
                started_at_ms=started_at_ms,
            )
        if name == "append":
            run_id, seq_offset, step_id, kind, value = args
            return await store.append_step(run_id, next_seq + seq_offset, step_id, kind, value)
        if name == "append_steps":
            run_id, seq_offset, steps = args
            return await store.append_steps(run_id, next_seq + seq_offset, steps)
        if name == "park":
            return await store.park_execution(*args)
        if name == "finish":
            run_id, status, output, finished_at_ms, seq_offset, steps = args
            return await store.finish_execution(
                run_id, status=status, output=output, finished_at_ms=finished_at_ms,
                steps=steps, first_seq=next_seq + seq_offset if steps else None,
            )
        return await store.purge_finished(*args)
    except (StepSequenceConflict, UnknownExecution, ExecutionNotRunning, FinishConflict) as exc:
        return (type(exc).__name__, vars(exc))


async def _state(store):
    return (
        [await store.load_execution(r) for r in RUN_IDS],
        [await store.load_steps(r) for r in RUN_IDS],
        [await store.live_executions(s) for s in SCHEDULES if s is not None],
        [await store.schedule_high_water_ms(s) for s in SCHEDULES if s is not None],
        store.counts(),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPERATIONS, max_size=40))
def test_memory_and_sqlite_agree_on_random_histories(operations):
    async def main():
        memory = InMemoryExecutionStore()
        sqlite_store = SqliteExecutionStore.open(":memory:")
        try:
            for op in operations:
                with_seq = op[0] in ("append", "append_steps", "finish")
                next_seq = len(await memory.load_steps(op[1])) + 1 if with_seq else 0
                expected = await _apply(memory, op, next_seq)
                actual = await _apply(sqlite_store, op, next_seq)
                assert actual == expected, op
                state = await _state(memory)
                assert await _state(sqlite_store) == state, op
                executions, steps, live, _, counts = state
                # Cross-checks of the store against itself.
                assert counts["steps"] == sum(len(s) for s in steps)
                for record, log in zip(executions, steps):
                    assert [step.seq for step in log] == list(range(1, len(log) + 1))
                    if record is not None and record.schedule_id is not None:
                        hw = await memory.schedule_high_water_ms(record.schedule_id)
                        assert record.occurrence_ms <= hw
                        in_live = any(r.run_id == record.run_id for group in live for r in group)
                        assert in_live == (record.status in (RUNNING, PARKED))
        finally:
            sqlite_store.close()

    run(main)
