"""The durable-state store SPI: conformance, planted bugs, SQLite specifics.

Reads top to bottom: both built-in backends pass the conformance suite; the
suite catches deliberately broken backends and names the rule each breaks;
the SPI's own types and validation; what only the SQLite backend promises
(WAL, BEGIN IMMEDIATE, one guarded statement, persistence); and a
differential property test holding SQLite to the in-memory reference.
"""
from __future__ import annotations

import ast
import functools
import itertools
import pickle
import re
import sqlite3
import tempfile
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from model.durable_state import conformance as conformance_module
from model.durable_state import sqlite_store as sqlite_store_module
from model.durable_state.conformance import (
    CONFORMANCE_CHECKS,
    ConformanceFailure,
    run_durable_state_store_conformance,
)
from model.durable_state.memory_store import InMemoryDurableStateStore
from model.durable_state.sqlite_store import SqliteDurableStateStore
from model.durable_state.store import (
    INT64_MAX,
    DurableStateRecord,
    DurableStateStore,
    DurableStateWrite,
    RevisionConflictError,
    check_key,
    check_save_arguments,
    encode_payload,
    is_revision_conflict,
    next_revision,
)
from model.sqlite_db import open_database

MODEL_FILES = ("store.py", "memory_store.py", "sqlite_store.py", "conformance.py")
DURABLE_STATE_DIR = Path(__file__).resolve().parent.parent / "model" / "durable_state"


def now(coro):
    """Run a store call that must not suspend; return its result.

    The simulator treats a store call as one atomic step, so the built-in
    backends never yield. Driving the coroutine by hand proves it: it must
    finish on the first send.
    """
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("store call suspended; it must complete without yielding")


def write(payload, contract_version=1):
    return DurableStateWrite(contract_version=contract_version, payload=payload)


def conform(make_store, **kwargs):
    return trio.run(functools.partial(run_durable_state_store_conformance, make_store, **kwargs))


@pytest.fixture
def sqlite_factory(tmp_path):
    """Each call: a fresh, empty SQLite store in its own database file."""
    counter = itertools.count()
    return lambda: SqliteDurableStateStore.open(tmp_path / f"durable-{next(counter)}.sqlite")


# --- 1. both backends conform ----------------------------------------------------


def test_in_memory_store_passes_conformance():
    assert conform(InMemoryDurableStateStore) == list(CONFORMANCE_CHECKS)


def test_sqlite_store_passes_conformance(sqlite_factory):
    assert conform(sqlite_factory) == list(CONFORMANCE_CHECKS)


def test_sqlite_store_on_a_shared_connection_passes_conformance(tmp_path):
    # The deployed shape: stores built from one open_database() connection.
    connections = []

    def make_store():
        conn = open_database(str(tmp_path / f"shared-{len(connections)}.sqlite"))
        connections.append(conn)
        return SqliteDurableStateStore(conn)

    try:
        assert conform(make_store) == list(CONFORMANCE_CHECKS)
        # close() of a store that does not own its connection leaves it open
        assert connections[0].execute("SELECT 1").fetchone() == (1,)
    finally:
        for conn in connections:
            conn.close()


def test_conformance_accepts_an_async_factory():
    async def make_store():
        await trio.sleep(0)
        return InMemoryDurableStateStore()

    assert conform(make_store) == list(CONFORMANCE_CHECKS)


def test_conformance_runs_a_chosen_subset_in_suite_order():
    chosen = ["clear_is_idempotent", "load_absent_returns_none"]
    assert conform(InMemoryDurableStateStore, checks=chosen) == ["load_absent_returns_none", "clear_is_idempotent"]
    with pytest.raises(ValueError, match="unknown conformance checks"):
        conform(InMemoryDurableStateStore, checks=["no_such_check"])


def test_conformance_check_names_are_unique_and_documented():
    assert len(set(CONFORMANCE_CHECKS)) == len(CONFORMANCE_CHECKS) >= 25
    doc = conformance_module.__doc__
    assert "trio.run(run_durable_state_store_conformance" in doc
    assert "pytest" in doc


def test_model_modules_import_only_stdlib_and_attrs():
    allowed_roots = {"__future__", "attrs", "json", "typing", "inspect", "os", "sqlite3", "model"}
    for name in MODEL_FILES:
        tree = ast.parse((DURABLE_STATE_DIR / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert roots <= allowed_roots, (name, roots)


# --- 2. the suite catches broken backends ---------------------------------------


class LostUpdateStore(InMemoryDurableStateStore):
    """Blind overwrite: ignores expected_revision (the classic lost update)."""

    async def save(self, key, write, expected_revision):
        current = await super().load(key)
        return await super().save(key, write, 0 if current is None else current.revision)


class RevisionSkippingStore(InMemoryDurableStateStore):
    """Each save bumps the revision by two."""

    async def save(self, key, write, expected_revision):
        first = await super().save(key, write, expected_revision)
        return await super().save(key, write, first.revision)


class StrictClearStore(InMemoryDurableStateStore):
    """clear() of an absent key raises: not idempotent."""

    async def clear(self, key):
        if await self.load(key) is None:
            raise KeyError(key)
        await super().clear(key)


class AliasingStore:
    """Keeps the caller's payload object: no deep copies either way."""

    def __init__(self):
        self.rows = {}

    async def load(self, key):
        check_key(key)
        return self.rows.get(key)

    async def save(self, key, write, expected_revision):
        check_save_arguments(key, write, expected_revision)
        encode_payload(write.payload)  # validation only; the bug is keeping write.payload itself
        current = self.rows.get(key)
        revision = next_revision(key, expected_revision, 0 if current is None else current.revision)
        self.rows[key] = DurableStateRecord(write.contract_version, revision, write.payload)
        return self.rows[key]

    async def clear(self, key):
        check_key(key)
        self.rows.pop(key, None)


class ConflictAsValueErrorStore(InMemoryDurableStateStore):
    """Rejects stale writes, but with an anonymous error."""

    async def save(self, key, write, expected_revision):
        try:
            return await super().save(key, write, expected_revision)
        except RevisionConflictError as conflict:
            raise ValueError(str(conflict)) from None


class WrongActualStore(InMemoryDurableStateStore):
    """Conflicts, but reports a made-up actual revision."""

    async def save(self, key, write, expected_revision):
        try:
            return await super().save(key, write, expected_revision)
        except RevisionConflictError as conflict:
            raise RevisionConflictError(key, expected_revision, conflict.actual + 10) from None


class ThirdPartyConflict(Exception):
    """A backend's own conflict class: shares nothing with loomsim but its name."""

    name = "RevisionConflictError"

    def __init__(self, key, expected, actual):
        super().__init__(f"{key}: {expected} != {actual}")
        self.key, self.expected, self.actual = key, expected, actual


RevisionConflictErrorLookalike = type("RevisionConflictError", (Exception,), {})


class ThirdPartyStore(InMemoryDurableStateStore):
    async def save(self, key, write, expected_revision):
        try:
            return await super().save(key, write, expected_revision)
        except RevisionConflictError as conflict:
            raise ThirdPartyConflict(conflict.key, conflict.expected, conflict.actual) from None


def failed_checks(make_store):
    with pytest.raises(ConformanceFailure) as caught:
        conform(make_store)
    failure = caught.value
    assert isinstance(failure, AssertionError)
    assert failure.failed_checks == tuple(f.check for f in failure.failures)
    # one error, naming every broken rule in its message
    for check in failure.failed_checks:
        assert check in str(failure)
    return set(failure.failed_checks)


def test_suite_catches_a_lost_update_backend():
    failed = failed_checks(LostUpdateStore)
    assert {
        "conflict_on_stale_expected_revision",
        "conflict_on_expected_revision_ahead",
        "conflict_on_create_when_present",
        "conflict_on_absent_key_reports_actual_zero",
        "conflict_on_absent_key_creates_nothing",
        "conflict_leaves_record_unchanged",
        "conflict_error_is_structured",
        "save_after_clear_with_old_revision_conflicts",
        "keys_are_independent",
    } <= failed
    # rules it does keep are not blamed
    assert "load_absent_returns_none" not in failed
    assert "revision_increments_by_exactly_one" not in failed
    assert "clear_is_idempotent" not in failed


def test_suite_catches_revisions_that_skip():
    failed = failed_checks(RevisionSkippingStore)
    assert {"create_at_zero_starts_at_revision_1", "revision_increments_by_exactly_one"} <= failed
    assert "load_absent_returns_none" in set(CONFORMANCE_CHECKS) - failed


def test_suite_catches_a_clear_that_is_not_idempotent():
    assert failed_checks(StrictClearStore) == {"clear_is_idempotent"}


def test_suite_catches_missing_deep_copies():
    failed = failed_checks(AliasingStore)
    assert {"saved_payload_is_copied_in", "save_result_is_copied_out", "loaded_payload_is_copied_out"} <= failed


def test_suite_demands_a_structured_conflict_error():
    assert "conflict_on_stale_expected_revision" in failed_checks(ConflictAsValueErrorStore)
    wrong_actual = failed_checks(WrongActualStore)
    assert {"conflict_on_stale_expected_revision", "conflict_on_absent_key_reports_actual_zero"} <= wrong_actual


@pytest.mark.parametrize(
    "constant, mutant, broken_check",
    [
        # the UPDATE loses its revision guard: a stale writer overwrites
        (
            "_UPDATE_SQL",
            "UPDATE durable_state SET contract_version = ?, revision = revision + 1, payload = ? "
            "WHERE key = ? AND ? > 0",
            "conflict_on_stale_expected_revision",
        ),
        # create becomes an upsert: expected_revision=0 clobbers an existing key
        (
            "_CREATE_SQL",
            "INSERT OR REPLACE INTO durable_state (key, contract_version, revision, payload) VALUES (?, ?, 1, ?)",
            "conflict_on_create_when_present",
        ),
    ],
)
def test_suite_catches_planted_bugs_in_the_sqlite_adapter(monkeypatch, sqlite_factory, constant, mutant, broken_check):
    monkeypatch.setattr(sqlite_store_module, constant, mutant)
    assert broken_check in failed_checks(sqlite_factory)


def test_suite_matches_conflicts_by_name_not_class():
    assert conform(ThirdPartyStore) == list(CONFORMANCE_CHECKS)
    assert is_revision_conflict(ThirdPartyConflict("k", 1, 2))
    assert is_revision_conflict(RevisionConflictErrorLookalike())
    assert not is_revision_conflict(ValueError("RevisionConflictError"))


def test_failure_explains_each_rule_and_keeps_the_cause():
    with pytest.raises(ConformanceFailure) as caught:
        conform(StrictClearStore)
    (failure,) = caught.value.failures
    assert failure.check == "clear_is_idempotent"
    assert "idempotent" in failure.message and "KeyError" in failure.message
    assert isinstance(failure.__cause__, KeyError)
    assert f"1 of {len(CONFORMANCE_CHECKS)} " in str(caught.value)


def test_a_factory_that_fails_is_reported_per_check():
    def make_store():
        raise OSError("disk on fire")

    with pytest.raises(ConformanceFailure) as caught:
        conform(make_store, checks=["load_absent_returns_none"])
    assert caught.value.failed_checks == ("load_absent_returns_none",)
    assert "disk on fire" in str(caught.value)


def test_conformance_closes_each_store_it_made(tmp_path):
    stores = []

    def make_store():
        stores.append(SqliteDurableStateStore.open(tmp_path / f"c{len(stores)}.sqlite"))
        return stores[-1]

    conform(make_store)
    assert len(stores) == len(CONFORMANCE_CHECKS)
    for store in stores:
        with pytest.raises(sqlite3.ProgrammingError):
            store.connection.execute("SELECT 1")


# --- 3. the SPI's types and validation ---------------------------------------------


def test_revision_conflict_error_is_structured_and_picklable():
    error = RevisionConflictError("sentinel:nightly", 3, 5)
    assert (error.key, error.expected, error.actual) == ("sentinel:nightly", 3, 5)
    assert RevisionConflictError.name == "RevisionConflictError"
    assert "sentinel:nightly" in str(error) and "expected revision 3" in str(error) and "5" in str(error)
    assert "absent" in str(RevisionConflictError("k", 2, 0))
    assert "create" in str(RevisionConflictError("k", 0, 4))
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.key, clone.expected, clone.actual, str(clone)) == (error.key, 3, 5, str(error))
    assert is_revision_conflict(error)


def test_failures_are_picklable():
    inner = ConformanceFailure("a", "broken")
    outer = pickle.loads(pickle.dumps(ConformanceFailure("all", "1 failed", (inner,))))
    assert outer.failed_checks == ("a",)


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    if request.param == "memory":
        yield InMemoryDurableStateStore()
    else:
        made = SqliteDurableStateStore.open(tmp_path / "unit.sqlite")
        yield made
        made.close()


def test_backends_satisfy_the_protocol(store):
    assert isinstance(store, DurableStateStore)


@pytest.mark.parametrize(
    "key, error",
    [("", ValueError), (None, TypeError), (b"k", TypeError), (1, TypeError), ("lone\ud800", ValueError)],
)
def test_keys_are_validated_by_every_method(store, key, error):
    with pytest.raises(error):
        now(store.load(key))
    with pytest.raises(error):
        now(store.save(key, write({}), 0))
    with pytest.raises(error):
        now(store.clear(key))


@pytest.mark.parametrize(
    "args, error",
    [
        ((write({}), True), TypeError),  # bool is not a revision
        ((write({}), 1.0), TypeError),
        ((write({}), -1), ValueError),
        ((write({}), INT64_MAX), ValueError),  # the next revision would not fit
        ((write({}, contract_version=True), 0), TypeError),
        ((write({}, contract_version=0), 0), ValueError),
        ((write({}, contract_version=INT64_MAX + 1), 0), ValueError),
        (({"contract_version": 1, "payload": {}}, 0), TypeError),  # not a DurableStateWrite
    ],
)
def test_save_arguments_are_validated_before_the_store_is_touched(store, args, error):
    with pytest.raises(error):
        now(store.save("k", *args))
    assert now(store.load("k")) is None
    assert now(store.save("k", write({}, contract_version=INT64_MAX), 0)).revision == 1


@pytest.mark.parametrize(
    "payload, error, path",
    [
        ({"a": [1, {"b": {1, 2}}]}, TypeError, "$['a'][1]['b']"),
        ({"a": float("nan")}, ValueError, "$['a']"),
        ([1, (2, 3)], TypeError, "$[1]"),
        ({"a": {7: "x"}}, TypeError, "$['a']"),
        ({"a": object()}, TypeError, "$['a']"),
    ],
)
def test_non_json_payloads_are_rejected_with_their_path(payload, error, path):
    with pytest.raises(error, match=r"not a JSON value: " + re.escape(path)):
        encode_payload(payload)


def test_circular_payload_is_rejected():
    loop = {"a": []}
    loop["a"].append(loop)
    with pytest.raises(ValueError, match="circular"):
        encode_payload(loop)


def test_both_backends_store_the_same_canonical_text(tmp_path):
    payload = {"b": [1, 2.5, None], "a": "é🧵", "c": {"y": True, "x": "lone\udc00"}}
    memory = InMemoryDurableStateStore()
    now(memory.save("k", write(payload), 0))
    sqlite_store = SqliteDurableStateStore.open(tmp_path / "text.sqlite")
    now(sqlite_store.save("k", write(payload), 0))
    (stored,) = sqlite_store.connection.execute("SELECT payload FROM durable_state").fetchone()
    assert stored == memory._rows["k"][2]
    # compact, key-sorted; raw UTF-8 except that a lone surrogate forces escapes
    assert stored.startswith('{"a":"\\u00e9') and '"b":[1,2.5,null]' in stored and "\\udc00" in stored
    now(sqlite_store.save("plain", write({"z": "é", "a": 1}), 0))
    (plain,) = sqlite_store.connection.execute("SELECT payload FROM durable_state WHERE key='plain'").fetchone()
    assert plain == '{"a":1,"z":"é"}'
    assert sqlite_store.snapshot() == {"k": DurableStateRecord(1, 1, payload), "plain": DurableStateRecord(1, 1, {"z": "é", "a": 1})}
    sqlite_store.close()


def test_calls_never_suspend_even_when_they_fail(store):
    # now() fails if a call yields; conflicts and validation errors included.
    assert now(store.save("k", write({"n": 1}), 0)).revision == 1
    with pytest.raises(RevisionConflictError):
        now(store.save("k", write({"n": 2}), 0))
    with pytest.raises(ValueError):
        now(store.save("k", write(float("inf")), 1))
    assert now(store.load("k")).payload == {"n": 1}
    assert now(store.clear("k")) is None


# --- 4. SQLite specifics ----------------------------------------------------------------


def test_sqlite_runs_in_wal_mode(tmp_path):
    store = SqliteDurableStateStore.open(tmp_path / "wal.sqlite")
    assert store.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_sqlite_table_creation_is_idempotent_and_shared(tmp_path):
    path = tmp_path / "shared.sqlite"
    conn = open_database(str(path))
    first = SqliteDurableStateStore(conn)
    now(first.save("k", write({"n": 1}), 0))
    second = SqliteDurableStateStore(conn)  # same connection: creates nothing, sees the row
    assert now(second.load("k")) == DurableStateRecord(1, 1, {"n": 1})
    other = SqliteDurableStateStore.open(path)  # second connection on the same file
    assert now(other.load("k")) == DurableStateRecord(1, 1, {"n": 1})
    tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'durable_state'").fetchone()
    assert tables == (1,)
    other.close()
    conn.close()


def test_sqlite_data_survives_reopening(tmp_path):
    path = tmp_path / "reopen.sqlite"
    store = SqliteDurableStateStore.open(path)
    now(store.save("a", write({"v": [1, 2]}, contract_version=4), 0))
    now(store.save("a", write({"v": [3]}, contract_version=5), 1))
    now(store.save("b", write("gone"), 0))
    now(store.clear("b"))
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        store.connection.execute("SELECT 1")

    reopened = SqliteDurableStateStore.open(path)
    assert reopened.snapshot() == {"a": DurableStateRecord(5, 2, {"v": [3]})}
    assert now(reopened.save("a", write({"v": []}, contract_version=5), 2)).revision == 3
    reopened.close()


class Trace:
    def __init__(self, conn):
        self.conn = conn
        self.statements = []

    def __enter__(self):
        self.conn.set_trace_callback(self.statements.append)
        return self.statements

    def __exit__(self, *exc):
        self.conn.set_trace_callback(None)


def verb(statement):
    return " ".join(statement.split()[:2]).upper()


def test_sqlite_every_write_is_one_guarded_statement_under_begin_immediate(tmp_path):
    store = SqliteDurableStateStore.open(tmp_path / "trace.sqlite")
    conn = store.connection
    with Trace(conn) as create:
        now(store.save("k", write({"n": 1}), 0))
    assert [verb(s) for s in create] == ["BEGIN IMMEDIATE", "INSERT INTO", "COMMIT"]
    assert "ON CONFLICT(key) DO NOTHING" in create[1]

    with Trace(conn) as update:
        now(store.save("k", write({"n": 2}), 1))
    assert [verb(s) for s in update] == ["BEGIN IMMEDIATE", "UPDATE DURABLE_STATE", "COMMIT"]
    assert "WHERE key = 'k' AND revision = 1" in update[1]

    with Trace(conn) as clear:
        now(store.clear("gone"))
    assert [verb(s) for s in clear] == ["BEGIN IMMEDIATE", "DELETE FROM", "COMMIT"]

    with Trace(conn) as load:
        now(store.load("k"))
    assert [verb(s) for s in load] == ["SELECT CONTRACT_VERSION,"]
    store.close()


def test_sqlite_conflict_leaves_no_partial_write(tmp_path):
    path = tmp_path / "conflict.sqlite"
    store = SqliteDurableStateStore.open(path)
    conn = store.connection
    now(store.save("k", write({"n": 1}, contract_version=1), 0))
    now(store.save("k", write({"n": 2}, contract_version=1), 1))
    changes_before = conn.total_changes

    for expected in (0, 1, 5):
        with Trace(conn) as statements:
            with pytest.raises(RevisionConflictError) as caught:
                now(store.save("k", write({"lost": expected}, contract_version=9), expected))
        assert (caught.value.expected, caught.value.actual) == (expected, 2)
        # the actual revision is read inside the same transaction, then rolled back
        assert [verb(s) for s in statements][0] == "BEGIN IMMEDIATE"
        assert [verb(s) for s in statements][-2:] == ["SELECT REVISION", "ROLLBACK"]
        assert not conn.in_transaction

    with Trace(conn) as statements, pytest.raises(RevisionConflictError):
        now(store.save("absent", write({}), 3))
    assert verb(statements[-1]) == "ROLLBACK"

    assert conn.total_changes == changes_before
    observer = SqliteDurableStateStore.open(path)
    assert observer.snapshot() == {"k": DurableStateRecord(1, 2, {"n": 2})}
    observer.close()
    store.close()


def test_sqlite_cas_holds_across_connections(tmp_path):
    # Two "nodes" on one file: the second writer with a stale revision loses loudly.
    path = tmp_path / "two-nodes.sqlite"
    node_a = SqliteDurableStateStore.open(path)
    node_b = SqliteDurableStateStore.open(path)
    now(node_a.save("sentinel:s", write({"owner": "a"}), 0))
    seen_by_b = now(node_b.load("sentinel:s"))
    now(node_a.save("sentinel:s", write({"owner": "a", "n": 2}), seen_by_b.revision))
    with pytest.raises(RevisionConflictError) as caught:
        now(node_b.save("sentinel:s", write({"owner": "b"}), seen_by_b.revision))
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    assert now(node_b.load("sentinel:s")).payload == {"owner": "a", "n": 2}
    node_a.close()
    node_b.close()


def test_sqlite_held_write_lock_surfaces_as_an_error_not_a_hang(tmp_path):
    path = tmp_path / "locked.sqlite"
    store = SqliteDurableStateStore.open(path, busy_timeout_ms=0)
    holder = open_database(str(path))
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            now(store.save("k", write({}), 0))
        assert not store.connection.in_transaction
        assert now(store.load("k")) is None  # readers are not blocked under WAL
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert now(store.save("k", write({}), 0)).revision == 1
    store.close()


def test_sqlite_constructor_refuses_unsuitable_connections(tmp_path):
    implicit = sqlite3.connect(tmp_path / "implicit.sqlite")  # isolation_level "" (implicit transactions)
    with pytest.raises(ValueError, match="autocommit"):
        SqliteDurableStateStore(implicit)
    implicit.close()
    with pytest.raises(TypeError):
        SqliteDurableStateStore(str(tmp_path / "x.sqlite"))

    foreign = open_database(str(tmp_path / "foreign.sqlite"))
    foreign.execute("CREATE TABLE durable_state (key TEXT PRIMARY KEY, value TEXT)")
    with pytest.raises(sqlite3.DatabaseError, match="columns"):
        SqliteDurableStateStore(foreign)
    assert not foreign.in_transaction
    foreign.close()


# --- 5. differential: SQLite behaves exactly like the in-memory reference -------------

KEYS = ("sentinel:a", "sentinel:b", "ключ", "nul\x00key")

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["\ud800", "x\udfffy", "🧵", "\x00", "é"])
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)
non_json_values = st.sampled_from([float("nan"), {"s": {1}}, (1, 2), {1: 2}, b"x", [float("-inf")]])


def same_json(a, b):
    """Equal with exact types (1, 1.0 and True differ; so do 0.0 and -0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same_json, a, b))
    if isinstance(a, float):
        return repr(a) == repr(b)
    return a == b


def outcome(call):
    """('ok', result) or ('error', type name, structured fields, message)."""
    try:
        return ("ok", now(call))
    except (RevisionConflictError, ValueError, TypeError) as exc:
        fields = (exc.key, exc.expected, exc.actual) if is_revision_conflict(exc) else None
        return ("error", type(exc).__name__, fields, str(exc))


def same_outcome(a, b):
    if a[0] != b[0]:
        return False
    if a[0] == "error":
        return a == b
    ra, rb = a[1], b[1]
    if ra is None or rb is None:
        return ra is rb
    return (ra.contract_version, ra.revision) == (rb.contract_version, rb.revision) and same_json(ra.payload, rb.payload)


class SqliteMatchesMemory(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory(prefix="loomsim-ds-")
        self.sqlite = SqliteDurableStateStore.open(Path(self.tmp.name) / "diff.sqlite")
        self.memory = InMemoryDurableStateStore()
        self.revisions = {}  # key -> revision, the model both must agree with

    def teardown(self):
        self.sqlite.close()
        self.tmp.cleanup()

    def both(self, method, *args):
        expected = outcome(getattr(self.memory, method)(*args))
        actual = outcome(getattr(self.sqlite, method)(*args))
        assert same_outcome(expected, actual), (method, args, expected, actual)
        return expected

    @rule(key=st.sampled_from(KEYS))
    def load(self, key):
        result = self.both("load", key)
        stored = result[1]
        assert (stored.revision if stored else 0) == self.revisions.get(key, 0)

    @rule(
        key=st.sampled_from(KEYS),
        payload=json_values,
        contract_version=st.integers(min_value=1, max_value=5),
        aim=st.sampled_from(["current", "zero", "ahead", "behind"]) | st.integers(min_value=0, max_value=6),
    )
    def save(self, key, payload, contract_version, aim):
        current = self.revisions.get(key, 0)
        expected = {"current": current, "zero": 0, "ahead": current + 1, "behind": max(current - 1, 0)}.get(aim, aim)
        result = self.both("save", key, write(payload, contract_version), expected)
        if expected == current:
            assert result[0] == "ok" and result[1].revision == current + 1
            self.revisions[key] = current + 1
        else:
            assert result[1:3] == ("RevisionConflictError", (key, expected, current))

    @rule(key=st.sampled_from(KEYS), payload=non_json_values)
    def save_non_json(self, key, payload):
        result = self.both("save", key, write(payload), self.revisions.get(key, 0))
        assert result[0] == "error" and result[1] in ("TypeError", "ValueError")

    @rule(key=st.sampled_from(KEYS + ("",)))
    def clear(self, key):
        self.both("clear", key)
        self.revisions.pop(key, None)

    @invariant()
    def same_contents(self):
        memory, sqlite_ = self.memory.snapshot(), self.sqlite.snapshot()
        assert list(memory) == list(sqlite_)
        for key in memory:
            assert same_outcome(("ok", memory[key]), ("ok", sqlite_[key])), key
        assert {k: r.revision for k, r in memory.items()} == self.revisions


SqliteMatchesMemory.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_sqlite_matches_memory_reference = SqliteMatchesMemory.TestCase
