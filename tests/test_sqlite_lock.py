"""``write-contention`` on SQLite is a real lock (faults/sqlite_lock.py), and
``cold-reopen`` reads the run's file as a restarted process does."""
from __future__ import annotations

import io

import pytest

from faults import sqlite_lock
from faults.ports import injected_contention
from model.conversation.content_store import SqliteContentStore
from model.conversation.records import ConversationStoreError
from model.conversation.sqlite_store import SqliteConversationStore
from model.durable_state.memory_store import InMemoryDurableStateStore
from model.durable_state.sqlite_store import SqliteDurableStateStore
from model.durable_state.store import DurableStateWrite
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.retry import is_retryable
from model.sqlite_db import SqliteWriteContention
from scenarios import registry
from scenarios.invariants.cold_reopen import ColdReopen
from scenarios.storage import run_sync
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions


def test_a_held_lock_refuses_the_adapters_write_typed_and_leaves_nothing(tmp_path):
    store = SqliteDurableStateStore.open(str(tmp_path / "db.sqlite"))
    try:
        lock = sqlite_lock.hold(store)
        assert lock is not None
        with pytest.raises(SqliteWriteContention) as caught:
            run_sync(store.save("k", DurableStateWrite(1, {"a": 1}), 0))
        assert is_retryable(caught.value)
        lock.release()
        assert store.snapshot() == {}  # the refused save wrote nothing
        assert store.connection.execute("PRAGMA busy_timeout").fetchone()[0] > 0  # restored
        record = run_sync(store.save("k", DurableStateWrite(1, {"a": 1}), 0))
        assert record.revision == 1
    finally:
        store.close()


def test_the_log_wraps_a_real_contention_retryable(tmp_path):
    store = SqliteConversationStore.open(str(tmp_path / "db.sqlite"))
    try:
        lock = sqlite_lock.hold(store)
        with pytest.raises(ConversationStoreError) as caught:
            run_sync(store.materialize("c", "p", 1))
        lock.release()
        assert isinstance(caught.value.cause, SqliteWriteContention) and is_retryable(caught.value)
    finally:
        store.close()


def _refused(store, port: str, method: str, call):
    """The real refusal of ``call`` under a held lock, and the injected one."""
    lock = sqlite_lock.hold(store)
    assert lock is not None
    try:
        with pytest.raises(Exception) as caught:
            run_sync(call())
    finally:
        lock.release()
    injected = injected_contention(port, method, f"{port}.{method}")
    return (type(caught.value).__name__, str(caught.value)), (type(injected).__name__, str(injected))


def test_an_injected_contention_is_the_real_refusal_word_for_word(tmp_path):
    """In memory the fault layer raises what the SQLite adapter raises under
    the held lock, type and text: the trace of a memory run stays the
    SQLite run's through every write-contention (the detail is hashed)."""
    path = str(tmp_path / "db.sqlite")
    stores = [SqliteDurableStateStore.open(path), SqliteConversationStore.open(path),
              SqliteSubmissionLedger.open(path), SqliteContentStore.open(path)]
    ds, log, ledger, content = stores
    try:
        cases = [(ds, "ds", "save", lambda: ds.save("k", DurableStateWrite(1, {"a": 1}), 0)),
                 (log, "log", "materialize", lambda: log.materialize("c", "p", 1)),
                 (log, "log", "delete_conversation", lambda: log.delete_conversation("c")),
                 (ledger, "ledger", "admit", lambda: ledger.admit("c", "p", "k", {"n": 1}, 0)),
                 (content, "content", "put", lambda: content.put(b"blob"))]
        run_sync(log.materialize("c", "p", 1))  # so that the delete has something to refuse
        for store, port, method, call in cases:
            real, injected = _refused(store, port, method, call)
            assert real == injected, (port, method)
    finally:
        for store in stores:
            sqlite_lock.store_connection(store).close()


def test_no_lock_without_a_sqlite_file():
    assert sqlite_lock.hold(InMemoryDurableStateStore()) is None


def _run(name: str, seed: int, duration: str, trace_stream=None, **options):
    opts = ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), store="sqlite", **options)
    return run(registry.get(name), opts, trace_stream=trace_stream)


def test_write_contention_fires_for_real_on_sqlite_and_the_run_passes():
    trace = io.StringIO()
    result = _run("ledger-storm", 1, "20m", trace, rates={"write-contention": 0.05})
    assert result.faults.get("write-contention", 0) > 0
    assert result.status == "pass", result.violations
    refused = [line for line in trace.getvalue().splitlines() if "SqliteWriteContention" in line]
    assert refused and not any("injected" in line for line in refused)  # SQLite's own refusal


def test_cold_reopen_checks_the_file_and_sees_a_store_that_forgot(monkeypatch):
    result = _run("ledger-storm", 1, "10m")
    assert result.status == "pass" and result.invariants["cold-reopen"] > 0
    # A file that lost what the live store still answers (a write the
    # adapter kept only in its connection): reopened, the ledger disagrees.
    from model.ledger.sqlite_store import SqliteSubmissionLedger

    real_get = SqliteSubmissionLedger.get

    async def forgetful_get(self, submission_id):
        if self._owns_connection:  # only the cold, reopened ledger forgets
            return None
        return await real_get(self, submission_id)

    monkeypatch.setattr(SqliteSubmissionLedger, "get", forgetful_get)
    failed = _run("ledger-storm", 1, "10m")
    assert [v.invariant for v in failed.violations] == [ColdReopen.name]
