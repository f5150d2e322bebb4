"""The Submission Ledger's storage failures are typed on the port
(persistence §9.2, §10, §11; issue 13):

- a busy write lock on SQLite is ``LedgerStoreError`` carrying the
  ``SqliteWriteContention`` as ``cause``, retryable (``model.retry``), with
  nothing written — at every write method, never the bare contention; the
  fault layer's injected contention at a ledger site is the same error;
- a stored row that does not decode (bad canonical JSON, a column of the
  wrong type) is ``CorruptSubmission`` naming the submission; a row of
  another schema version is ``UnsupportedLedgerVersion``, before anything
  is written;
- one such row does not break ``scan_nonterminal``: every readable row is a
  ``NonterminalSubmission`` (control fields only), the unreadable one an ``UnreadableSubmission`` (its
  conversation still shows work; its other fields raise the typed error),
  the same on both adapters; a claim there fails typed, other
  conversations proceed.
"""
from __future__ import annotations

import pickle

import pytest
import trio

from faults.ports import injected_contention
from model.conversation.records import ConversationStoreError
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.records import (
    Claim,
    CorruptSubmission,
    LedgerError,
    LedgerStoreError,
    NonterminalSubmission,
    SubmissionRecord,
    UnreadableSubmission,
    UnsupportedLedgerVersion,
)
from model.ledger.records import settlement_envelope
from model.ledger.rules import SubmissionRow
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.retry import is_retryable
from model.sqlite_db import SqliteWriteContention, open_database

FAILED = {"outcome": "failed", "diagnostic": {"errorTag": "E", "message": "m"}}


def run(async_fn, *args):
    return trio.run(async_fn, *args)


async def _admit_ready(ledger, cid, key="k1", value=None):
    result = await ledger.admit(cid, "p1", key, {"x": 1} if value is None else value, 0)
    await ledger.mark_ready(result.submission_id, 0)
    return result


@pytest.fixture
def sqlite_ledger(tmp_path):
    ledger = SqliteSubmissionLedger.open(str(tmp_path / "ledger.db"), busy_timeout_ms=20)
    yield ledger
    ledger.close()


def _raw(ledger, sql, *params):
    ledger.connection.execute(sql, params)


# --- errors ------------------------------------------------------------------------


@pytest.mark.parametrize("error", [
    LedgerStoreError("claim", SqliteWriteContention(20, "database is locked")),
    LedgerStoreError("get", None, "disk I/O error"),
    CorruptSubmission("sub-c-1", "input_json does not decode"),
    UnsupportedLedgerVersion("sub-c-1", 2),
])
def test_new_errors_are_ledger_errors_with_names_fields_and_pickling(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and isinstance(error, LedgerError)
    assert str(copy) == str(error)
    assert type(error).name == type(error).__name__
    for field in ("operation", "detail", "submission_id", "schema_version"):
        if hasattr(error, field):
            assert getattr(copy, field) == getattr(error, field)
    if isinstance(error, LedgerStoreError):
        assert type(copy.cause) is type(error.cause)


def test_store_error_is_retryable_exactly_when_its_cause_is():
    contention = LedgerStoreError("admit", SqliteWriteContention(20, "locked"))
    assert contention.retryable is True and is_retryable(contention)
    assert is_retryable(pickle.loads(pickle.dumps(contention)))
    for other in (LedgerStoreError("admit", None, "x"), LedgerStoreError("admit", OSError("disk"))):
        assert other.retryable is False and not is_retryable(other)
    assert not is_retryable(CorruptSubmission("s", "d")) and not is_retryable(UnsupportedLedgerVersion("s", 2))


def test_the_fault_layer_injects_what_the_sqlite_ledger_raises():
    error = injected_contention("ledger", "claim", "ledger.claim")
    assert isinstance(error, LedgerStoreError) and error.name == "LedgerStoreError"
    assert isinstance(error.cause, SqliteWriteContention) and is_retryable(error)
    logged = injected_contention("log", "append", "log.append")  # the log wraps it, as its SQLite adapter does
    assert type(logged) is ConversationStoreError and isinstance(logged.cause, SqliteWriteContention)
    assert is_retryable(logged)
    other = injected_contention("ds", "save", "ds.save")  # the other ports raise it bare
    assert type(other) is SqliteWriteContention


# --- write contention -----------------------------------------------------------------


def test_every_write_under_a_held_lock_is_a_typed_retryable_store_error(sqlite_ledger, tmp_path):
    ledger = sqlite_ledger

    async def setup():
        first = await _admit_ready(ledger, "c1")
        await ledger.admit("c1", "p1", "k2", {"x": 2}, 0)  # not ready
        token = await ledger.claim("c1", "o1", 1_000, 10)
        return first, token

    first, token = run(setup)
    holder = open_database(str(tmp_path / "ledger.db"))
    holder.execute("BEGIN IMMEDIATE")
    try:
        calls = {
            "admit": (ledger.admit, "c1", "p1", "k3", {"x": 3}, 1),
            "mark_ready": (ledger.mark_ready, "sub-c1-2", 5),
            "claim": (ledger.claim, "c2", "o1", 1_000, 10),
            "renew_ownership": (ledger.renew_ownership, token, 1_000, 20),
            "mark_input_applied": (ledger.mark_input_applied, token, "input:" + token.submission_id, 1),
            "reserve_settlement": (ledger.reserve_settlement, token,
                                   settlement_envelope(token.submission_id, FAILED, 0, receipt="rcpt-test")),
            "release_ownership": (ledger.release_ownership, token),
            "finalize_settlement": (ledger.finalize_settlement, first.submission_id, 30),
            "purge_conversation": (ledger.purge_conversation, "c9"),
        }
        for operation, (method, *args) in calls.items():
            with pytest.raises(LedgerError) as info:
                run(method, *args)
            error = info.value
            assert type(error) is LedgerStoreError, (operation, error)
            assert error.operation == operation and error.retryable and is_retryable(error)
            assert isinstance(error.cause, SqliteWriteContention) and error.__cause__ is error.cause
            assert not ledger.connection.in_transaction
        # Nothing was written; readers are not blocked under WAL.
        record = run(ledger.get, first.submission_id)
        assert (record.owner_id, record.epoch, record.input_applied, record.reserved_digest) == ("o1", 1, False, None)
        assert run(ledger.get, "sub-c1-2").ready is False
        assert run(ledger.get_by_idempotency_key, "c1", "p1", "k3") is None
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert run(ledger.claim, "c2", "o1", 1_000, 10) is None  # the lock gone, the ledger works


# --- corrupt and unsupported rows --------------------------------------------------------


@pytest.mark.parametrize("column, value, wanted", [
    ("input_json", "{not json", "input_json"),
    ("reserved_json", "[1,", "reserved_json"),
    ("ready", "yes", "ready"),
    ("queue_seq", "one", "queue_seq"),
    ("owner_id", b"\x01", "owner_id"),  # TEXT affinity keeps a blob a blob
])
def test_a_row_that_does_not_decode_is_corrupt_submission_and_nothing_is_written(sqlite_ledger, column, value,
                                                                                   wanted):
    ledger = sqlite_ledger
    admitted = run(_admit_ready, ledger, "c1")
    sid = admitted.submission_id
    _raw(ledger, f"UPDATE ledger_submissions SET {column} = ? WHERE submission_id = ?", value, sid)
    with pytest.raises(CorruptSubmission) as info:
        run(ledger.get, sid)
    assert info.value.submission_id == sid and wanted in info.value.detail
    with pytest.raises(CorruptSubmission):
        run(ledger.get_by_idempotency_key, "c1", "p1", "k1")
    with pytest.raises(CorruptSubmission):
        run(ledger.load_recovery_snapshot, "c1")
    with pytest.raises(CorruptSubmission):
        run(ledger.claim, "c1", "o1", 1_000, 10)
    with pytest.raises(CorruptSubmission):  # the exact retry reads the stored row too
        run(ledger.admit, "c1", "p1", "k1", {"x": 1}, 0)
    with pytest.raises(CorruptSubmission):
        run(ledger.finalize_settlement, sid, 5)
    stored = ledger.connection.execute(
        "SELECT owner_id, epoch, settled_at_ms FROM ledger_submissions WHERE submission_id = ?", (sid,)).fetchone()
    expected_owner = b"\x01" if column == "owner_id" else None
    assert stored == (expected_owner, None, None)
    assert ledger.connection.execute("SELECT epoch FROM ledger_conversations").fetchone() == (0,)


def test_an_unsupported_schema_version_fails_typed_before_any_write(sqlite_ledger):
    ledger = sqlite_ledger
    admitted = run(ledger.admit, "c1", "p1", "k1", {"x": 1}, 0)
    sid = admitted.submission_id
    _raw(ledger, "UPDATE ledger_submissions SET schema_version = 2 WHERE submission_id = ?", sid)
    for method, *args in ((ledger.get, sid), (ledger.mark_ready, sid, 5), (ledger.claim, "c1", "o1", 1_000, 10)):
        with pytest.raises(UnsupportedLedgerVersion) as info:
            run(method, *args)
        assert (info.value.submission_id, info.value.schema_version) == (sid, 2)
    assert ledger.connection.execute(
        "SELECT ready FROM ledger_submissions WHERE submission_id = ?", (sid,)).fetchone() == (0,)


# --- one corrupt row never hides the other conversations' work ------------------------------


def _scan_shape(records):
    return [(type(r).__name__, r.submission_id, r.conversation_id, r.principal_id, r.queue_seq) for r in records]


def _corrupt_memory_row(ledger, sid, **changes):
    import attrs

    # Through the store's surgery entry: a row put in place by something other
    # than its rules is read back as foreign data (every column checked).
    ledger.surgery_put(attrs.evolve(ledger._row(sid), **changes))


@pytest.mark.parametrize("damage", ["corrupt", "unsupported"])
def test_scan_keeps_every_readable_row_on_both_adapters(sqlite_ledger, damage):
    memory = InMemorySubmissionLedger()
    scans = {}
    for name, ledger in (("memory", memory), ("sqlite", sqlite_ledger)):
        async def setup():
            for cid in ("a", "b", "c"):
                await _admit_ready(ledger, cid)

        run(setup)
        if name == "memory":
            changes = {"reserved_json": "{bad"} if damage == "corrupt" else {"schema_version": 3}
            _corrupt_memory_row(memory, "sub-b-1", **changes)
        elif damage == "corrupt":  # a control column (the scan row carries the reservation)
            _raw(ledger, "UPDATE ledger_submissions SET reserved_json = '{bad' WHERE submission_id = 'sub-b-1'")
        else:
            _raw(ledger, "UPDATE ledger_submissions SET schema_version = 3 WHERE submission_id = 'sub-b-1'")
        scan = run(ledger.scan_nonterminal)
        scans[name] = _scan_shape(scan)
        assert [type(r) for r in scan] == [NonterminalSubmission, UnreadableSubmission, NonterminalSubmission]
        unreadable = scan[1]
        wanted = CorruptSubmission if damage == "corrupt" else UnsupportedLedgerVersion
        assert isinstance(unreadable.error, wanted) and unreadable.error.submission_id == "sub-b-1"
        with pytest.raises(wanted):
            unreadable.input  # noqa: B018 - reading the undecodable field is the point
        with pytest.raises(wanted):
            unreadable.settled  # noqa: B018
        with pytest.raises(AttributeError):
            unreadable.no_such_field  # noqa: B018
        assert scan[0].receipt and scan[2].receipt and not hasattr(scan[0], "input")
    assert scans["memory"] == scans["sqlite"] == [
        ("NonterminalSubmission", "sub-a-1", "a", "p1", 1),
        ("UnreadableSubmission", "sub-b-1", "b", "p1", 1),
        ("NonterminalSubmission", "sub-c-1", "c", "p1", 1),
    ]


@pytest.mark.parametrize("column, damaged", [
    ("input_json", "{bad"),
    ("input_json", b"\xff\xfe{}"),  # not text at all (SQLite keeps a blob a blob)
    ("metadata_json", "[1,"),
])
def test_a_damaged_payload_still_scans_with_its_control_fields_and_only_a_by_id_read_fails(sqlite_ledger, column,
                                                                                        damaged):
    """A row whose input (or admission metadata) is unreadable: the scan
    answers its control fields like any other row's (it never reads the
    payload), a by-id read fails typed naming the submission, and nothing
    stored changes — the same on both adapters."""
    memory = InMemorySubmissionLedger()
    for name, ledger in (("memory", memory), ("sqlite", sqlite_ledger)):
        async def setup():
            for cid in ("a", "b", "c"):
                result = await ledger.admit(cid, "p1", "k1", {"x": 1}, 0, metadata={"kind": "m"})
                await ledger.mark_ready(result.submission_id, 0)

        run(setup)
        before = run(ledger.scan_nonterminal)
        if name == "memory":
            _corrupt_memory_row(memory, "sub-b-1", **{column: damaged})
        else:
            _raw(ledger, f"UPDATE ledger_submissions SET {column} = ? WHERE submission_id = 'sub-b-1'", damaged)
        scan = run(ledger.scan_nonterminal)
        assert [type(r) for r in scan] == [NonterminalSubmission] * 3, (name, scan)
        assert scan == before, name
        assert not hasattr(scan[1], "input") and not hasattr(scan[1], "metadata")
        with pytest.raises(LedgerError) as info:
            run(ledger.get, "sub-b-1")
        assert type(info.value) is CorruptSubmission and info.value.submission_id == "sub-b-1", name
        assert column in info.value.detail, (name, info.value)
        assert run(ledger.get, "sub-a-1").input == {"x": 1}
        if name == "sqlite":
            stored = ledger.connection.execute(
                f"SELECT {column}, ready, owner_id, epoch FROM ledger_submissions WHERE submission_id = 'sub-b-1'"
            ).fetchone()
            assert stored == (damaged, 1, None, None)
        else:
            row = memory._row("sub-b-1")
            assert (getattr(row, column), row.ready, row.owner_id, row.epoch) == (damaged, True, None, None)


def test_a_claim_of_the_corrupt_conversation_fails_typed_the_others_proceed(sqlite_ledger):
    ledger = sqlite_ledger

    async def setup():
        for cid in ("a", "b", "c"):
            await _admit_ready(ledger, cid)

    run(setup)
    _raw(ledger, "UPDATE ledger_submissions SET reserved_json = 'nope' WHERE submission_id = 'sub-b-1'")
    claimed = {}
    for record in run(ledger.scan_nonterminal):
        try:
            claimed[record.conversation_id] = run(ledger.claim, record.conversation_id, "o1", 1_000, 10)
        except CorruptSubmission as error:
            claimed[record.conversation_id] = error
    assert isinstance(claimed["a"], Claim) and isinstance(claimed["c"], Claim)
    assert isinstance(claimed["b"], CorruptSubmission) and claimed["b"].submission_id == "sub-b-1"


def test_memory_scan_of_well_formed_rows_is_unchanged():
    ledger = InMemorySubmissionLedger()
    run(_admit_ready, ledger, "a")
    (row,) = run(ledger.scan_nonterminal)
    assert type(row) is NonterminalSubmission and row.input_digest == run(ledger.get, "sub-a-1").input_digest
    record = run(ledger.get, "sub-a-1")
    assert type(record) is SubmissionRecord and record.input == {"x": 1}
    assert isinstance(ledger._submissions["sub-a-1"], SubmissionRow)


class _PollOnce:
    """A worker process's runtime that ends the forever loop at its first poll."""

    class Stop(Exception):
        pass

    def __init__(self) -> None:
        self.now = 1_000

    def now_ms(self) -> int:
        return self.now

    async def sleep_ms(self, ms: int) -> None:
        raise self.Stop()


def _one_worker_pass_over_a_rotten_row(tmp_path, *, aborted: bool = False):
    """Two conversations on a real SQLite ledger, ``a``'s input rotted (its
    abort intent stored first if ``aborted``), and one pass of a worker's
    loop: (conn, ledger, the rotten admission, the fine one, probe events)."""
    from model.conversation.memory_store import InMemoryConversationStore
    from model.submissions import SubmissionClient, SubmissionWorker, worker_loop

    conn = open_database(str(tmp_path / "ledger.db"))
    ledger, log, runtime = SqliteSubmissionLedger(conn), InMemoryConversationStore(), _PollOnce()
    events = []

    class Probe:
        def emit(self, kind, **fields):
            events.append((kind, fields))

    client = SubmissionClient(ledger, log, now_ms=runtime.now_ms)
    broken = trio.run(client.submit, "a", "p", "k1", {"n": 1})
    fine = trio.run(client.submit, "b", "p", "k1", {"n": 2})
    if aborted:
        trio.run(ledger.request_abort, broken.submission_id, "user", "stop", 1_000)
    conn.execute("UPDATE ledger_submissions SET input_json = '{\"n\": ' WHERE submission_id = ?",
                 (broken.submission_id,))
    worker = SubmissionWorker(ledger, log, "w1", lease_ms=1_000, now_ms=runtime.now_ms,
                              work=lambda request, index: index, probe=Probe())
    with pytest.raises(_PollOnce.Stop):
        trio.run(lambda: worker_loop(worker, runtime, poll_ms=10, retry_ms=10))
    return conn, ledger, broken, fine, events


def test_a_worker_skips_an_unreadable_conversation_and_settles_the_others(tmp_path):
    """The corrupt row blocks its own lane (and stays visible as open work);
    the worker neither dies on it nor stops serving other conversations."""
    conn, ledger, broken, fine, events = _one_worker_pass_over_a_rotten_row(tmp_path)
    assert trio.run(ledger.get, fine.submission_id).outcome == "completed"
    assert ("submission.unreadable", {"owner": "w1", "conversation": "a", "error": "CorruptSubmission"}) in events
    (open_work,) = trio.run(ledger.scan_nonterminal)  # its control fields read back: only its input does not
    assert isinstance(open_work, NonterminalSubmission) and open_work.conversation_id == "a"


def test_an_empty_stored_receipt_fails_the_scan_typed_naming_the_operation(sqlite_ledger):
    """Issue 29 (7): the receipt is a control field the scan answers; a row
    whose stored receipt is empty is not readable: the scan fails with a
    typed ``LedgerError`` naming the operation (``operation``, ``message``),
    a by-id read fails typed, and nothing stored changes."""
    memory = InMemorySubmissionLedger()
    for name, ledger in (("memory", memory), ("sqlite", sqlite_ledger)):
        async def setup():
            for cid in ("a", "b"):
                await _admit_ready(ledger, cid)

        run(setup)
        if name == "memory":
            _corrupt_memory_row(memory, "sub-b-1", receipt="")
        else:
            _raw(ledger, "UPDATE ledger_submissions SET receipt = '' WHERE submission_id = 'sub-b-1'")
        with pytest.raises(LedgerError) as info:
            run(ledger.scan_nonterminal)
        error = info.value
        assert isinstance(error, CorruptSubmission) and error.submission_id == "sub-b-1", (name, error)
        assert error.operation == "scan_nonterminal" and "receipt" in error.message, (name, error)
        copy = pickle.loads(pickle.dumps(error))
        assert (copy.operation, copy.message) == (error.operation, error.message)
        with pytest.raises(CorruptSubmission):
            run(ledger.get, "sub-b-1")
        assert run(ledger.get, "sub-a-1").receipt.startswith("rcpt-")
        if name == "sqlite":
            assert ledger.connection.execute(
                "SELECT receipt, ready FROM ledger_submissions WHERE submission_id = 'sub-b-1'").fetchone() == ("", 1)
        else:
            assert memory._row("sub-b-1").receipt == ""


def test_a_queued_abort_whose_input_does_not_read_is_held_and_the_worker_goes_on(tmp_path):
    """A queued submission with an abort intent whose input rotted: the
    recovery pass holds it (``HoldUnreadableRow``), the worker's scan upkeep
    does not die on its by-id read, and another conversation settles."""
    conn, ledger, broken, fine, events = _one_worker_pass_over_a_rotten_row(tmp_path, aborted=True)
    decisions = {f["submission"]: f["decision"] for kind, f in events if kind == "recovery.decision"}
    assert decisions[broken.submission_id] == "HoldUnreadableRow"
    assert trio.run(ledger.get, fine.submission_id).outcome == "completed"
    assert ("submission.unreadable", {"owner": "w1", "conversation": "a", "error": "CorruptSubmission"}) in events
    assert conn.execute("SELECT ready, epoch, settled_at_ms, abort_author FROM ledger_submissions "
                        "WHERE submission_id = ?", (broken.submission_id,)).fetchone() == (1, None, None, "user")
