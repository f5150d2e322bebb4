"""Conversation log (persistence §2.1, §6-§11): conformance of both adapters,
planted bugs the conformance must name, the recovery read, checkpoints,
payload spill-over, SQLite open checks, and memory-vs-SQLite equivalence."""
from __future__ import annotations

import itertools
import math
import pickle

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.canonical import ZERO_DIGEST, canonical_json, digest
from model.conversation.checkpoints import (
    Checkpoint,
    CheckpointRejected,
    CheckpointUnusable,
    InMemoryCheckpointStore,
    SqliteCheckpointStore,
    usable_checkpoint,
)
from model.conversation.conformance import (
    CONFORMANCE_CHECKS,
    ConformanceFailure,
    envelope,
    request,
    run_conversation_store_conformance,
)
from model.conversation.content_store import ContentCorrupted, InMemoryContentStore, SqliteContentStore
from model.conversation.memory_store import InMemoryConversationStore, pack_row
from model.conversation.records import (
    AppendConflict,
    FenceRejected,
    FencedAppendRequest,
    HistoryCorrupted,
    NotMaterialized,
    StorageVersionMismatch,
)
from model.conversation.recovery import read_recovery_prefix
from model.conversation.rules import chain_digest
from model.conversation.sqlite_store import SqliteConversationStore
from model.sqlite_db import open_database


def run(async_fn, *args):
    return trio.run(async_fn, *args)


def sqlite_memory_store(**options) -> SqliteConversationStore:
    return SqliteConversationStore(open_database(":memory:"), **options)


# --- conformance ---------------------------------------------------------------


def test_memory_store_conforms():
    assert run(run_conversation_store_conformance, InMemoryConversationStore) == list(CONFORMANCE_CHECKS)


def test_sqlite_store_conforms(tmp_path):
    counter = itertools.count()
    opened = []

    def make_store():
        store = SqliteConversationStore.open(str(tmp_path / f"conv-{next(counter)}.db"))
        opened.append(store)
        return store

    try:
        assert run(run_conversation_store_conformance, make_store) == list(CONFORMANCE_CHECKS)
    finally:
        for store in opened:
            store.close()


def test_conformance_accepts_async_factory_and_subsets():
    async def make_store():
        return InMemoryConversationStore()

    assert run(run_conversation_store_conformance, make_store) == list(CONFORMANCE_CHECKS)

    async def subset():
        return await run_conversation_store_conformance(InMemoryConversationStore, checks=["not-materialized"])

    assert run(subset) == ["not-materialized"]


# --- planted bugs ------------------------------------------------------------------


class AcceptsStaleEpoch(InMemoryConversationStore):
    async def append(self, req):
        conv = self._conversations.get(req.conversation_id)
        if conv is not None and req.epoch < conv.epoch:
            conv.epoch = req.epoch
            conv.producer_id = req.producer_id
        return await super().append(req)


class AcceptsPartialBatch(InMemoryConversationStore):
    """On a record-identity conflict, keeps the records before the reused one."""

    async def append(self, req):
        try:
            return await super().append(req)
        except AppendConflict as exc:
            if exc.kind == "record-identity":
                conv = self._conversations[req.conversation_id]
                for record in req.records:
                    if record.record_id == exc.record_id:
                        break
                    conv.rows.append(pack_row(req.batch_id, canonical_json(record.to_json())))
                    conv.tail_seq += 1
            raise


class WrongDigestChain(InMemoryConversationStore):
    """Chains every batch from ZERO_DIGEST (forgets the previous tail)."""

    async def append(self, req):
        result = await super().append(req)
        if result.replayed:
            return result
        conv = self._conversations[req.conversation_id]
        wrong = chain_digest(ZERO_DIGEST, result.batch_digest, result.first_seq)
        batch = await self.lookup_batch(req.conversation_id, req.batch_id)
        self.surgery_forget_batch(req.conversation_id, req.batch_id)
        self._put_batch(conv, attrs.evolve(batch, tail_digest=wrong))
        conv.tail_seq = result.last_seq
        conv.tail_digest = wrong
        return type(result)(result.first_seq, result.last_seq, wrong, result.batch_digest, False)


class AcceptsRecordIdReuse(InMemoryConversationStore):
    async def append(self, req):
        conv = self._conversations.get(req.conversation_id)
        if conv is not None:
            conv.record_ids.clear()
        return await super().append(req)


@pytest.mark.parametrize(
    "broken, failing_check",
    [
        (AcceptsStaleEpoch, "append-stale-epoch-fenced"),
        (AcceptsPartialBatch, "append-record-identity"),
        (WrongDigestChain, "append-gap-free-seqs-and-digest-chain"),
        (AcceptsRecordIdReuse, "append-record-identity"),
    ],
)
def test_conformance_catches_planted_bug(broken, failing_check):
    with pytest.raises(ConformanceFailure) as info:
        run(run_conversation_store_conformance, broken)
    assert failing_check in info.value.failed_checks


def test_errors_survive_pickling():
    for error in (
        AppendConflict("c", "tail", "b", actual_tail_seq=3, actual_tail_digest=ZERO_DIGEST),
        FenceRejected("c", 1, 2),
        NotMaterialized("c"),
        HistoryCorrupted("c", 5, None, "short page"),
    ):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)


# --- recovery read ---------------------------------------------------------------------


class CountingStore:
    def __init__(self, inner, drop_seq=None, skip_seq=None):
        self.inner = inner
        self.calls = 0
        self.drop_seq = drop_seq
        self.skip_seq = skip_seq

    async def inspect_tail(self, cid):
        self.calls += 1
        return await self.inner.inspect_tail(cid)

    async def read(self, cid, after_seq, limit):
        self.calls += 1
        page = await self.inner.read(cid, after_seq, limit)
        if self.drop_seq is not None and page and page[-1].seq == self.drop_seq:
            page = page[:-1]  # a short page
        if self.skip_seq is not None:
            page = tuple(r for r in page if r.seq != self.skip_seq)  # a gap
        return page


async def _filled(total: int, store=None):
    store = store or InMemoryConversationStore()
    await store.materialize("c1", "p1", 1)
    seq = 0
    batch = 0
    while seq < total:
        n = min(250, total - seq)
        tail = await store.inspect_tail("c1")
        await store.append(request("c1", f"b{batch}", tail.tail_seq, tail.tail_digest, [f"r{i}" for i in range(seq, seq + n)]))
        seq += n
        batch += 1
    return store


@pytest.mark.parametrize("total", [0, 1, 1024, 1025, 3000])
def test_recovery_reads_one_tail_and_ceil_pages(total):
    async def main():
        store = CountingStore(await _filled(total))
        prefix = await read_recovery_prefix(store, "c1")
        assert [r.seq for r in prefix.records] == list(range(1, total + 1))
        assert prefix.request_count == store.calls == 1 + math.ceil(total / 1024)
        assert prefix.tail.tail_seq == total

    run(main)


@pytest.mark.parametrize("fault", [{"drop_seq": 1024}, {"drop_seq": 2000}, {"skip_seq": 7}, {"skip_seq": 1990}])
def test_recovery_short_page_or_gap_is_corruption(fault):
    async def main():
        store = CountingStore(await _filled(2000), **fault)
        with pytest.raises(HistoryCorrupted):
            await read_recovery_prefix(store, "c1")

    run(main)


def test_recovery_detects_a_wrong_chain():
    async def main():
        store = await _filled(1500, WrongDigestChain())
        with pytest.raises(HistoryCorrupted, match="digest chain"):
            await read_recovery_prefix(store, "c1")

    run(main)


# --- checkpoints ----------------------------------------------------------------------


def _checkpoint(seq, dig, **kw):
    values = dict(conversation_id="c1", submission_id="s1", covered_seq=seq, tail_digest=dig,
                  engine_version="e1", definition_digest="d1", model_digest="m1", tool_digest="t1", schema_version=1,
                  snapshot={"state": [1, 2]}, created_at_ms=5)
    values.update(kw)
    return Checkpoint(**values)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_checkpoints(kind):
    async def main():
        log = InMemoryConversationStore() if kind == "memory" else sqlite_memory_store()
        checkpoints = InMemoryCheckpointStore(log) if kind == "memory" else SqliteCheckpointStore(log)
        await log.materialize("c1", "p1", 1)
        first = await log.append(request("c1", "b1", 0, ZERO_DIGEST, ["a", "b"]))
        second = await log.append(request("c1", "b2", 2, first.tail_digest, ["c"]))
        with pytest.raises(CheckpointRejected) as info:
            await checkpoints.save(_checkpoint(4, second.tail_digest))
        assert info.value.kind == "ahead-of-tail"
        with pytest.raises(CheckpointRejected) as info:
            await checkpoints.save(_checkpoint(2, second.tail_digest))
        assert info.value.kind == "digest-mismatch"
        with pytest.raises(CheckpointRejected) as info:
            await checkpoints.save(_checkpoint(1, first.tail_digest))  # inside batch b1
        assert info.value.kind == "digest-mismatch"
        with pytest.raises(CheckpointRejected) as info:
            await checkpoints.save(_checkpoint(2, first.tail_digest, schema_version=9))
        assert info.value.kind == "unsupported-version"
        assert await checkpoints.load_latest("c1", 3) is None
        await checkpoints.save(_checkpoint(2, first.tail_digest))
        await checkpoints.save(_checkpoint(3, second.tail_digest))
        assert (await checkpoints.load_latest("c1", 2)).covered_seq == 2
        assert (await checkpoints.load_latest("c1", 9)).covered_seq == 3
        ok = await usable_checkpoint(checkpoints, log, "c1", 9, engine_version="e1", definition_digest="d1",
                                 model_digest="m1", tool_digest="t1")
        assert ok.checkpoint is not None and ok.checkpoint.snapshot == {"state": [1, 2]}
        engine = await usable_checkpoint(checkpoints, log, "c1", 9, engine_version="e2", definition_digest="d1",
                                     model_digest="m1", tool_digest="t1")
        assert (engine.checkpoint, engine.reason) == (None, "engine-version")
        definition = await usable_checkpoint(checkpoints, log, "c1", 9, engine_version="e1", definition_digest="dX",
                                         model_digest="m1", tool_digest="t1")
        assert (definition.checkpoint, definition.reason) == (None, "definition-digest")
        # Another model or tool configuration: rebuilt from the log, never used.
        model = await usable_checkpoint(checkpoints, log, "c1", 9, engine_version="e1", definition_digest="d1",
                                        model_digest="mX", tool_digest="t1")
        assert (model.checkpoint, model.reason) == (None, "model-digest")
        tools = await usable_checkpoint(checkpoints, log, "c1", 9, engine_version="e1", definition_digest="d1",
                                        model_digest="m1", tool_digest="tX")
        assert (tools.checkpoint, tools.reason) == (None, "tool-digest")
        # Unusable rows: unsupported stored version, corrupt row.
        if kind == "memory":
            rows = checkpoints._rows["c1"]
            text, _ = rows[3]
            bumped = text.replace('"schemaVersion":1', '"schemaVersion":7')
            from model.canonical import decode

            rows[3] = (bumped, digest(decode(bumped)))
            with pytest.raises(CheckpointUnusable) as info:
                await checkpoints.load_latest("c1", 9)
            assert info.value.kind == "unsupported-version"
            rows[3] = (text.replace("[1,2]", "[1,3]"), rows[3][1])
        else:
            conn = log.connection
            conn.execute("UPDATE conv_checkpoints SET checkpoint_json = replace(checkpoint_json, '\"schemaVersion\":1', '\"schemaVersion\":7'), integrity_digest = ? WHERE covered_seq = 3", ("0" * 64,))
            with pytest.raises(CheckpointUnusable) as info:
                await checkpoints.load_latest("c1", 9)
            assert info.value.kind == "corrupt"  # integrity digest checked first
            conn.execute("UPDATE conv_checkpoints SET checkpoint_json = 'not json' WHERE covered_seq = 3")
        with pytest.raises(CheckpointUnusable) as info:
            await usable_checkpoint(checkpoints, log, "c1", 9, engine_version="e1", definition_digest="d1",
                                 model_digest="m1", tool_digest="t1")
        assert info.value.kind == "corrupt"

    run(main)


# --- content store and spill-over ----------------------------------------------------------


@pytest.mark.parametrize("make", [InMemoryContentStore, lambda: SqliteContentStore(open_database(":memory:"))])
def test_content_store_round_trip(make):
    async def main():
        store = make()
        ref = await store.put(b"hello")
        assert ref == "sha256:" + __import__("hashlib").sha256(b"hello").hexdigest()
        assert await store.put(b"hello") == ref
        assert await store.has(ref) and await store.get(ref) == b"hello"
        assert await store.delete(ref) and not await store.has(ref)
        assert not await store.delete(ref)

    run(main)


def test_spill_over_round_trip_and_tampered_blob():
    async def main():
        store = sqlite_memory_store(spill_threshold_bytes=64)
        await store.materialize("c1", "p1", 1)
        big = {"text": "x" * 200, "nested": ["\U0001F600", 1.5]}
        envs = (envelope("r1", payload=big), envelope("r2", payload={"small": 1}))
        result = await store.append(FencedAppendRequest("c1", "b1", "p1", 1, 0, ZERO_DIGEST, envs))
        conn = store.connection
        spills = conn.execute("SELECT seq, spill FROM conv_records ORDER BY seq").fetchall()
        assert spills[0][1] is not None and spills[1][1] is None
        assert conn.execute("SELECT count(*) FROM conv_spills").fetchone()[0] == 1
        records = await store.read("c1", 0, 10)
        assert [r.envelope for r in records] == list(envs)
        prefix = await read_recovery_prefix(store, "c1")
        assert prefix.tail.tail_digest == result.tail_digest
        conn.execute("UPDATE conv_spills SET data = CAST(? AS BLOB)", (canonical_json({"text": "y"}),))
        with pytest.raises(HistoryCorrupted):
            await store.read("c1", 0, 10)

    run(main)


# --- SQLite open checks -----------------------------------------------------------------


def test_verify_on_open_detects_tampered_row(tmp_path):
    path = str(tmp_path / "c.db")

    async def fill():
        store = SqliteConversationStore.open(path)
        await _filled(5, store)
        store.close()

    run(fill)
    SqliteConversationStore.open(path, verify_on_open=True).close()
    conn = open_database(path)
    conn.execute("UPDATE conv_records SET envelope_json = replace(envelope_json, '\"r2\"}', '\"rX\"}') WHERE seq = 3")
    conn.close()
    SqliteConversationStore.open(path).close()  # default: no scan on open
    with pytest.raises(HistoryCorrupted):
        SqliteConversationStore.open(path, verify_on_open=True)


def test_storage_version_mismatch_and_missing_tables(tmp_path):
    path = str(tmp_path / "v.db")
    SqliteConversationStore.open(path).close()
    SqliteConversationStore.open(path).close()  # idempotent reopen
    conn = open_database(path)
    conn.execute("UPDATE conv_storage_version SET version = 99")
    conn.close()
    with pytest.raises(StorageVersionMismatch) as info:
        SqliteConversationStore.open(path)
    assert info.value.found == 99
    conn = open_database(path)
    conn.execute("UPDATE conv_storage_version SET version = 1")  # the chain of an earlier build
    conn.close()
    with pytest.raises(StorageVersionMismatch) as info:
        SqliteConversationStore.open(path)
    assert info.value.found == 1
    conn = open_database(path)
    conn.execute("UPDATE conv_storage_version SET version = 2")
    conn.execute("DROP TABLE conv_batches")
    conn.close()
    with pytest.raises(StorageVersionMismatch, match="missing tables"):
        SqliteConversationStore.open(path)


def test_write_contention_surfaces_as_store_error(monkeypatch):
    import model.conversation.sqlite_store as sqlite_store
    from model.conversation.records import ConversationStoreError

    class SqliteWriteContention(Exception):
        pass

    store = sqlite_memory_store()

    def contended(conn):
        raise SqliteWriteContention("locked")

    monkeypatch.setattr(sqlite_store, "write_transaction", contended)

    async def main():
        with pytest.raises(ConversationStoreError) as info:
            await store.materialize("c1", "p1", 1)
        assert type(info.value.cause).__name__ == "SqliteWriteContention" and info.value.retryable

    run(main)


# --- canonical encoding ---------------------------------------------------------------------


def test_digests_use_utf16_key_order():
    payload = {"\uFB01": 1, "\U0001F600": 2}
    assert canonical_json(payload) == '{"\U0001F600":2,"\uFB01":1}'
    env = envelope("r1", payload=payload)
    want_batch = digest({"batchId": "b1", "conversationId": "c1", "epoch": 1, "producerId": "p1",
                         "records": [env.to_json()]})
    want = digest({"batchDigest": want_batch, "firstSeq": 1, "previousTailDigest": ZERO_DIGEST})
    import hashlib

    text = (
        '{"batchId":"b1","conversationId":"c1","epoch":1,"producerId":"p1","records":[{"createdAt":1000,'
        '"deploymentId":"dep-1","epoch":1,"family":"input","payload":{"\U0001F600":2,"\uFB01":1},"producerId":"p1",'
        '"recordId":"r1","schemaVersion":1}]}'
    )
    assert want_batch == hashlib.sha256(text.encode("utf-8")).hexdigest()
    link = f'{{"batchDigest":"{want_batch}","firstSeq":1,"previousTailDigest":"{ZERO_DIGEST}"}}'
    assert want == hashlib.sha256(link.encode("utf-8")).hexdigest()

    async def main():
        for store in (InMemoryConversationStore(), sqlite_memory_store()):
            await store.materialize("c1", "p1", 1)
            result = await store.append(FencedAppendRequest("c1", "b1", "p1", 1, 0, ZERO_DIGEST, (env,)))
            assert (result.tail_digest, result.batch_digest) == (want, want_batch)

    run(main)


# --- memory vs SQLite ------------------------------------------------------------------------

_op = st.one_of(
    st.tuples(st.just("materialize"), st.sampled_from(["c1", "c2"]), st.sampled_from(["p1", "p2"]), st.integers(1, 3)),
    st.tuples(
        st.just("append"), st.sampled_from(["c1", "c2"]), st.sampled_from(["p1", "p2"]), st.integers(1, 3),
        st.sampled_from(["b1", "b2", "b3", "b4"]), st.lists(st.sampled_from(["r1", "r2", "r3", "r4", "r5"]), min_size=1, max_size=3),
        st.booleans(),
    ),
)


async def _apply(store, op):
    try:
        if op[0] == "materialize":
            return ("ok", await store.materialize(*op[1:]))
        _, cid, producer, epoch, batch_id, ids, fresh_tail = op
        tail_seq, tail_digest = 0, ZERO_DIGEST
        if fresh_tail:
            try:
                tail = await store.inspect_tail(cid)
                tail_seq, tail_digest = tail.tail_seq, tail.tail_digest
            except NotMaterialized:
                pass
        return ("ok", await store.append(request(cid, batch_id, tail_seq, tail_digest, ids, producer, epoch)))
    except Exception as exc:  # noqa: BLE001 - compared between adapters
        return ("error", type(exc).__name__, str(exc))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_op, max_size=12))
def test_memory_and_sqlite_agree(ops):
    async def main():
        memory, sqlite = InMemoryConversationStore(), sqlite_memory_store()
        for op in ops:
            assert await _apply(memory, op) == await _apply(sqlite, op), op
        for cid in ("c1", "c2"):
            outcomes = []
            for store in (memory, sqlite):
                try:
                    outcomes.append((await store.inspect_tail(cid), await store.read(cid, 0, 100)))
                except NotMaterialized:
                    outcomes.append(None)
            assert outcomes[0] == outcomes[1]
            if outcomes[0] is not None:
                assert (await read_recovery_prefix(sqlite, cid)).records == outcomes[0][1]

    run(main)
