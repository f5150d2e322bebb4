"""The claim-check blob/pin index, both adapters with one
behaviour: upserted blob rows, pins by many holders, expired-and-unpinned
listing, forget, blob reclamation that never touches a pinned blob, bounded
memory, and SQLite durability across reopen."""
from __future__ import annotations

import pickle

import pytest

from model.conversation.content_store import InMemoryContentStore, SqliteContentStore, content_ref
from model.pins import (
    BlobRecord,
    BlobSizeMismatch,
    InMemoryPinIndex,
    SqlitePinIndex,
    reclaim_expired_blobs,
)
from model.sqlite_db import open_database
from scenarios.storage import run_sync


def ref_of(i: int) -> str:
    return content_ref(f"blob-{i}".encode())


R1, R2, R3, R4 = (ref_of(i) for i in range(1, 5))


@pytest.fixture(params=["memory", "sqlite"])
def adapter(request, tmp_path):
    """(index, content store) sharing one SQLite file for the sqlite variant."""
    if request.param == "memory":
        yield InMemoryPinIndex(), InMemoryContentStore()
        return
    conn = open_database(str(tmp_path / "pins.db"))
    yield SqlitePinIndex(conn), SqliteContentStore(conn)
    conn.close()


@pytest.fixture
def index(adapter):
    return adapter[0]


# --- blob rows --------------------------------------------------------------------


def test_record_blob_upserts_and_keeps_the_later_stored_at(index):
    run_sync(index.record_blob(R1, 100, stored_at_ms=50))
    assert run_sync(index.blob(R1)) == BlobRecord(R1, 100, 50)
    run_sync(index.record_blob(R1, 100, stored_at_ms=80))
    assert run_sync(index.blob(R1)) == BlobRecord(R1, 100, 80)
    run_sync(index.record_blob(R1, 100, stored_at_ms=60))
    assert run_sync(index.blob(R1)) == BlobRecord(R1, 100, 80)
    assert index.counts() == {"blobs": 1, "pins": 0}
    assert run_sync(index.blob(R2)) is None


def test_record_blob_with_another_size_is_refused(index):
    run_sync(index.record_blob(R1, 100, stored_at_ms=50))
    with pytest.raises(BlobSizeMismatch) as info:
        run_sync(index.record_blob(R1, 101, stored_at_ms=90))
    err = info.value
    assert (err.name, err.ref, err.recorded_size_bytes, err.attempted_size_bytes) == (
        "BlobSizeMismatch", R1, 100, 101)
    assert pickle.loads(pickle.dumps(err)).attempted_size_bytes == 101
    assert run_sync(index.blob(R1)) == BlobRecord(R1, 100, 50)


@pytest.mark.parametrize("call", [
    lambda ix: ix.record_blob("nope", 1, stored_at_ms=0),
    lambda ix: ix.record_blob(R1, -1, stored_at_ms=0),
    lambda ix: ix.record_blob(R1, 1, stored_at_ms=-5),
    lambda ix: ix.record_blob(R1, True, stored_at_ms=0),
    lambda ix: ix.pin(R1, ""),
    lambda ix: ix.pin(R1, 7),
    lambda ix: ix.pin(R1, "h" * 1025),
    lambda ix: ix.pin(R1.upper(), "h"),
    lambda ix: ix.unpin("sha256:xyz", "h"),
    lambda ix: ix.expired_unpinned(10, -1),
    lambda ix: ix.expired_unpinned(-1, 10),
    lambda ix: ix.forget(None),
])
def test_bad_arguments_are_refused(index, call):
    with pytest.raises(ValueError):
        run_sync(call(index))
    assert index.counts() == {"blobs": 0, "pins": 0}


def test_forget_drops_the_row_but_not_its_pins(index):
    run_sync(index.record_blob(R1, 10, stored_at_ms=1))
    run_sync(index.pin(R1, "finding-1"))
    assert run_sync(index.forget(R1)) is True
    assert run_sync(index.forget(R1)) is False
    assert run_sync(index.blob(R1)) is None
    assert run_sync(index.is_pinned(R1))
    assert index.counts() == {"blobs": 0, "pins": 1}


# --- pins -------------------------------------------------------------------------


def test_pins_by_multiple_holders(index):
    assert run_sync(index.pin(R1, "finding-b")) is True
    assert run_sync(index.pin(R1, "finding-a")) is True
    assert run_sync(index.pin(R1, "finding-a")) is False  # idempotent
    assert run_sync(index.pin(R2, "finding-a")) is True
    assert run_sync(index.holders(R1)) == ("finding-a", "finding-b")
    assert run_sync(index.holders(R3)) == ()
    assert run_sync(index.pinned_refs()) == tuple(sorted((R1, R2)))
    assert index.counts() == {"blobs": 0, "pins": 3}

    assert run_sync(index.unpin(R1, "finding-a")) is True
    assert run_sync(index.unpin(R1, "finding-a")) is False  # idempotent
    assert run_sync(index.unpin(R3, "finding-a")) is False
    assert run_sync(index.is_pinned(R1))  # finding-b still holds it
    assert run_sync(index.holders(R1)) == ("finding-b",)
    assert run_sync(index.unpin(R1, "finding-b")) is True
    assert not run_sync(index.is_pinned(R1))
    assert run_sync(index.pinned_refs()) == (R2,)
    assert index.counts() == {"blobs": 0, "pins": 1}


def test_pin_before_the_blob_row_is_seen(index):
    run_sync(index.pin(R1, "finding-1"))
    run_sync(index.record_blob(R1, 10, stored_at_ms=1))
    assert run_sync(index.expired_unpinned(100, 10)) == ()


# --- expired_unpinned ------------------------------------------------------------


def test_expired_unpinned_order_bound_and_exclusions(index):
    refs = [ref_of(i) for i in range(10)]
    stored = [30, 10, 20, 10, 40, 50, 10, 20, 60, 5]
    for ref, at in zip(refs, stored):
        run_sync(index.record_blob(ref, 1, stored_at_ms=at))
    run_sync(index.pin(refs[9], "f"))   # oldest, but pinned
    run_sync(index.pin(refs[2], "f"))
    expected = sorted(
        (at, ref) for i, (ref, at) in enumerate(zip(refs, stored)) if at < 50 and i not in (2, 9)
    )
    want = tuple(ref for _, ref in expected)
    assert run_sync(index.expired_unpinned(50, 100)) == want
    assert run_sync(index.expired_unpinned(50, 3)) == want[:3]
    assert run_sync(index.expired_unpinned(50, 0)) == ()
    # stored_at_ms == stored_before_ms is not expired.
    assert refs[0] not in run_sync(index.expired_unpinned(30, 100))
    assert refs[0] in run_sync(index.expired_unpinned(31, 100))
    # Ties on stored_at_ms break by ref.
    tens = [ref for ref, at in zip(refs, stored) if at == 10]
    assert run_sync(index.expired_unpinned(11, 100)) == tuple(sorted(tens))
    # Unpinning makes a ref eligible again.
    run_sync(index.unpin(refs[9], "f"))
    assert run_sync(index.expired_unpinned(50, 1)) == (refs[9],)


# --- reclaim ---------------------------------------------------------------------


def put_blob(index, content, payload: bytes, at_ms: int) -> str:
    ref = run_sync(content.put(payload))
    run_sync(index.record_blob(ref, len(payload), stored_at_ms=at_ms))
    return ref


def test_reclaim_deletes_expired_blobs_and_never_pinned_ones(adapter):
    index, content = adapter
    old = put_blob(index, content, b"old telemetry", 10)
    older = put_blob(index, content, b"older telemetry", 5)
    evidence = put_blob(index, content, b"EXPLAIN plan", 1)
    fresh = put_blob(index, content, b"fresh telemetry", 500)
    run_sync(index.pin(evidence, "finding-42"))

    reclaimed = run_sync(reclaim_expired_blobs(index, content, stored_before_ms=100))
    assert reclaimed == (older, old)
    for ref in (old, older):
        assert not run_sync(content.has(ref))
        assert run_sync(index.blob(ref)) is None
    for ref in (evidence, fresh):
        assert run_sync(content.has(ref))
        assert run_sync(index.blob(ref)) is not None
    assert index.counts() == {"blobs": 2, "pins": 1}

    # Re-running is a no-op; evidence stays however far the cutoff moves.
    assert run_sync(reclaim_expired_blobs(index, content, stored_before_ms=100)) == ()
    assert run_sync(reclaim_expired_blobs(index, content, stored_before_ms=10_000)) == (fresh,)
    assert run_sync(content.has(evidence))

    # Once the finding lets go, the evidence is reclaimable like any blob.
    run_sync(index.unpin(evidence, "finding-42"))
    assert run_sync(reclaim_expired_blobs(index, content, stored_before_ms=10_000)) == (evidence,)
    assert index.counts() == {"blobs": 0, "pins": 0}


def test_reclaim_respects_limit(adapter):
    index, content = adapter
    refs = [put_blob(index, content, f"p{i}".encode(), i) for i in range(5)]
    assert run_sync(reclaim_expired_blobs(index, content, stored_before_ms=100, limit=2)) == tuple(refs[:2])
    assert run_sync(reclaim_expired_blobs(index, content, stored_before_ms=100, limit=2)) == tuple(refs[2:4])
    assert run_sync(reclaim_expired_blobs(index, content, stored_before_ms=100)) == (refs[4],)


def test_reclaim_after_a_crash_between_delete_and_forget(adapter):
    index, content = adapter
    ref = put_blob(index, content, b"half reclaimed", 1)
    run_sync(content.delete(ref))  # the crash: blob gone, index row left
    assert run_sync(reclaim_expired_blobs(index, content, stored_before_ms=100)) == (ref,)
    assert index.counts() == {"blobs": 0, "pins": 0}


class PinningIndex:
    """Wraps an index so a finding pins the first candidate right after the listing."""

    def __init__(self, inner, holder: str) -> None:
        self._inner = inner
        self._holder = holder

    async def expired_unpinned(self, stored_before_ms, limit):
        refs = await self._inner.expired_unpinned(stored_before_ms, limit)
        if refs:
            await self._inner.pin(refs[0], self._holder)
        return refs

    def __getattr__(self, name):
        return getattr(self._inner, name)


class RefreshingIndex(PinningIndex):
    """A fresh claim-check of the same payload lands right after the listing."""

    async def expired_unpinned(self, stored_before_ms, limit):
        refs = await self._inner.expired_unpinned(stored_before_ms, limit)
        if refs:
            record = await self._inner.blob(refs[0])
            await self._inner.record_blob(refs[0], record.size_bytes, stored_at_ms=stored_before_ms + 1)
        return refs


def test_reclaim_rechecks_pins_and_age_before_deleting(adapter):
    index, content = adapter
    a = put_blob(index, content, b"a", 1)
    b = put_blob(index, content, b"b", 2)
    assert run_sync(reclaim_expired_blobs(PinningIndex(index, "late-finding"), content,
                                          stored_before_ms=100)) == (b,)
    assert run_sync(content.has(a)) and run_sync(index.blob(a)) is not None
    run_sync(index.unpin(a, "late-finding"))
    assert run_sync(reclaim_expired_blobs(RefreshingIndex(index, ""), content,
                                          stored_before_ms=100)) == ()
    assert run_sync(content.has(a)) and run_sync(index.blob(a)).stored_at_ms == 101


# --- bounded memory / durability ----------------------------------------------------


def test_memory_index_does_not_grow_after_forget_and_unpin():
    index = InMemoryPinIndex()
    content = InMemoryContentStore()
    for round_ in range(50):
        refs = [put_blob(index, content, f"r{round_}-{i}".encode(), round_ * 10 + i) for i in range(20)]
        for ref in refs[:5]:
            run_sync(index.pin(ref, f"finding-{round_}"))
            run_sync(index.pin(ref, "audit"))
        for ref in refs[:5]:
            run_sync(index.unpin(ref, f"finding-{round_}"))
            run_sync(index.unpin(ref, "audit"))
        run_sync(reclaim_expired_blobs(index, content, stored_before_ms=10**9))
        assert index.counts() == {"blobs": 0, "pins": 0}
        assert index._blobs == {} and index._holders == {}
        assert content._blobs == {}


def test_sqlite_index_survives_reopen_and_creates_tables_idempotently(tmp_path):
    path = str(tmp_path / "pins.db")
    first = SqlitePinIndex.open(path)
    run_sync(first.record_blob(R1, 10, stored_at_ms=7))
    run_sync(first.pin(R1, "finding-1"))
    run_sync(first.pin(R2, "finding-1"))
    first.close()
    again = SqlitePinIndex.open(path)
    try:
        SqlitePinIndex(again._conn)  # a second construction on the same file is harmless
        assert run_sync(again.blob(R1)) == BlobRecord(R1, 10, 7)
        assert run_sync(again.pinned_refs()) == tuple(sorted((R1, R2)))
        assert again.counts() == {"blobs": 1, "pins": 2}
        tables = {row[0] for row in again._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"cc_blobs", "cc_pins"} <= tables
        assert all(name.startswith("cc_") for name in tables)
    finally:
        again.close()


def test_sqlite_index_refuses_a_non_autocommit_connection(tmp_path):
    import sqlite3

    conn = sqlite3.connect(str(tmp_path / "x.db"))
    try:
        with pytest.raises(ValueError):
            SqlitePinIndex(conn)
    finally:
        conn.close()


def test_sqlite_writes_are_rolled_back_on_error(tmp_path):
    conn = open_database(str(tmp_path / "pins.db"))
    try:
        index = SqlitePinIndex(conn)
        run_sync(index.record_blob(R1, 10, stored_at_ms=7))
        with pytest.raises(BlobSizeMismatch):
            run_sync(index.record_blob(R1, 11, stored_at_ms=9))
        assert not conn.in_transaction
        assert run_sync(index.blob(R1)) == BlobRecord(R1, 10, 7)
    finally:
        conn.close()
