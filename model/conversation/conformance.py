"""Conformance suite for ``ConversationStore`` adapters (persistence §6, §7,
STORE-010/013).

Every adapter — the in-memory and SQLite stores here, and yours — must pass
the same named checks, one per rule. Each check gets a fresh store, so a
failure names the rule that broke.

Running it against your own adapter::

    import trio
    from model.conversation.conformance import run_conversation_store_conformance

    def make_store():
        return MyConversationStore(fresh_test_database())  # fresh and empty

    def test_my_store_conforms():
        assert trio.run(run_conversation_store_conformance, make_store)

``make_store`` is a zero-argument callable returning the store or an
awaitable of it. The store must provide ``materialize``, ``append``,
``inspect_tail``, ``read``, ``observe``, ``lookup_batch`` and ``digest_at`` as in
``memory_store.InMemoryConversationStore``, raising the typed errors of
``records``. All checks run even when some fail; then one
``ConformanceFailure`` (an ``AssertionError``) lists every failing check and
carries them as ``.failures``. ``checks=(...)`` runs a subset;
``CONFORMANCE_CHECKS`` is the ordered tuple of all names.

The digest chain is pinned here independently of ``rules.py``:
``digest({"batchDigest", "firstSeq", "previousTailDigest": previous})`` from
``ZERO_DIGEST``, where the batch digest is ``digest({"batchId",
"conversationId", "epoch", "producerId", "records": [envelope JSON]})``.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Iterable

from model import conformance_kit as _kit

from model.canonical import ZERO_DIGEST, digest

from .records import (
    PAGE_SIZE_MAX,
    AppendConflict,
    AppendResult,
    BatchTooLarge,
    CanonicalRecord,
    ConversationTail,
    FenceRejected,
    FencedAppendRequest,
    MalformedOffset,
    NotMaterialized,
    ReadLimitOutOfRange,
    RecordEnvelope,
    UnsupportedSchemaVersion,
)


class ConformanceFailure(_kit.ConformanceFailure):
    subject = "conversation store"


_SUITE = _kit.CheckSuite(ConformanceFailure)
_check = _SUITE.check
_raises = _kit.expect_raises
_eq = _kit.expect_eq


def envelope(record_id: str, producer_id: str = "p1", epoch: int = 1, payload: object = None, **kw) -> RecordEnvelope:
    return RecordEnvelope(
        record_id, kw.get("family", "input"), kw.get("schema_version", 1), kw.get("created_at_ms", 1_000),
        "dep-1", {"text": record_id} if payload is None else payload, producer_id, epoch,
    )


def request(cid, batch_id, tail_seq, tail_digest, record_ids, producer_id="p1", epoch=1) -> FencedAppendRequest:
    return FencedAppendRequest(
        cid, batch_id, producer_id, epoch, tail_seq, tail_digest,
        tuple(envelope(r, producer_id, epoch) for r in record_ids),
    )


def expected_batch_digest(cid: str, batch_id: str, envelopes, producer_id: str = "p1", epoch: int = 1) -> str:
    return digest({"batchId": batch_id, "conversationId": cid, "epoch": epoch, "producerId": producer_id,
                   "records": [e.to_json() for e in envelopes]})


def expected_chain(previous: str, batch_id: str, first_seq: int, envelopes, cid: str = "c1") -> str:
    return digest({"batchDigest": expected_batch_digest(cid, batch_id, envelopes), "firstSeq": first_seq,
                   "previousTailDigest": previous})


async def _tail(store, cid="c1") -> ConversationTail:
    return await store.inspect_tail(cid)


async def _append(store, batch_id, record_ids, cid="c1", producer_id="p1", epoch=1) -> AppendResult:
    tail = await store.inspect_tail(cid)
    return await store.append(request(cid, batch_id, tail.tail_seq, tail.tail_digest, record_ids, producer_id, epoch))


async def _unchanged(store, before: ConversationTail, records_before: int, what: str, cid="c1") -> None:
    _eq((await store.inspect_tail(cid)).tail_seq, before.tail_seq, f"{what}: tail seq")
    _eq((await store.inspect_tail(cid)).tail_digest, before.tail_digest, f"{what}: tail digest")
    _eq(len(await store.read(cid, 0, PAGE_SIZE_MAX)), records_before, f"{what}: records held")


@_check("materialize-creates-empty-log")
async def _(store) -> None:
    await store.materialize("c1", "p1", 1)
    _eq(await store.inspect_tail("c1"), ConversationTail(0, ZERO_DIGEST, 1), "tail of a new conversation")
    _eq(await store.read("c1", 0, 10), (), "records of a new conversation")


@_check("materialize-idempotent-and-fenced")
async def _(store) -> None:
    await store.materialize("c1", "p1", 2)
    await store.materialize("c1", "p1", 2)
    await _append(store, "b1", ["r1"], producer_id="p1", epoch=2)
    await store.materialize("c1", "p1", 2)
    _eq((await store.inspect_tail("c1")).tail_seq, 1, "same-epoch materialize keeps the log")
    exc = await _raises(FenceRejected, store.materialize("c1", "p0", 1), "materialize with a lower epoch")
    _eq(exc.actual_epoch, 2, "FenceRejected.actual_epoch")
    await _raises(FenceRejected, store.materialize("c1", "p9", 2), "same epoch, other producer")
    await store.materialize("c1", "p3", 3)
    _eq(await store.inspect_tail("c1"), ConversationTail(1, (await store.inspect_tail("c1")).tail_digest, 3), "takeover")


@_check("not-materialized")
async def _(store) -> None:
    await _raises(NotMaterialized, store.inspect_tail("nope"), "inspect_tail")
    await _raises(NotMaterialized, store.read("nope", 0, 1), "read")
    await _raises(NotMaterialized, store.append(request("nope", "b", 0, ZERO_DIGEST, ["r"])), "append")
    await store.materialize("c1", "p1", 1)
    await _raises(NotMaterialized, store.inspect_tail("nope"), "other conversation after materialize")


@_check("append-gap-free-seqs-and-digest-chain")
async def _(store) -> None:
    await store.materialize("c1", "p1", 1)
    previous = ZERO_DIGEST
    next_seq = 1
    for index, ids in enumerate((["a"], ["b", "c", "d"], ["e"])):
        result = await _append(store, f"b{index}", ids)
        want = expected_chain(previous, f"b{index}", next_seq, [envelope(r) for r in ids])
        _eq((result.first_seq, result.last_seq, result.tail_digest, result.replayed),
            (next_seq, next_seq + len(ids) - 1, want, False), f"result of batch {index}")
        _eq(result.batch_digest, expected_batch_digest("c1", f"b{index}", [envelope(r) for r in ids]),
            f"batch digest of batch {index}")
        _eq(await store.digest_at("c1", result.last_seq), want, f"digest_at({result.last_seq})")
        previous = want
        next_seq += len(ids)
    _eq(await store.inspect_tail("c1"), ConversationTail(5, previous, 1), "tail")
    records = await store.read("c1", 0, 10)
    _eq([(r.seq, r.batch_id, r.envelope) for r in records],
        [(1, "b0", envelope("a")), (2, "b1", envelope("b")), (3, "b1", envelope("c")),
         (4, "b1", envelope("d")), (5, "b2", envelope("e"))], "records")
    _eq(await store.digest_at("c1", 0), ZERO_DIGEST, "digest_at(0)")
    _eq(await store.digest_at("c1", 3), None, "digest_at inside a batch")
    _eq(await store.digest_at("c1", 6), None, "digest_at beyond the tail")


@_check("append-replay-returns-original")
async def _(store) -> None:
    await store.materialize("c1", "p1", 1)
    first = await store.append(request("c1", "b1", 0, ZERO_DIGEST, ["r1", "r2"]))
    again = await store.append(request("c1", "b1", 0, ZERO_DIGEST, ["r1", "r2"]))
    _eq(again, AppendResult(first.first_seq, first.last_seq, first.tail_digest, first.batch_digest, True), "replay")
    _eq((await store.inspect_tail("c1")).tail_seq, 2, "replay appends nothing")
    batch = await store.lookup_batch("c1", "b1")
    _eq((batch.first_seq, batch.last_seq, batch.tail_digest, batch.batch_digest, batch.previous_tail_digest),
        (1, 2, first.tail_digest, first.batch_digest, ZERO_DIGEST), "lookup_batch")
    _eq(await store.lookup_batch("c1", "missing"), None, "lookup of an unknown batch")


@_check("append-batch-digest-conflict")
async def _(store) -> None:
    await store.materialize("c1", "p1", 1)
    await store.append(request("c1", "b1", 0, ZERO_DIGEST, ["r1"]))
    before = await store.inspect_tail("c1")
    exc = await _raises(AppendConflict, store.append(request("c1", "b1", 0, ZERO_DIGEST, ["r9"])), "same batch id, other content")
    _eq(exc.kind, "batch-digest", "conflict kind")
    await _unchanged(store, before, 1, "after batch-digest conflict")


@_check("append-record-identity")
async def _(store) -> None:
    await store.materialize("c1", "p1", 1)
    exc = await _raises(AppendConflict, store.append(request("c1", "b1", 0, ZERO_DIGEST, ["x", "y", "x"])), "id twice in one batch")
    _eq((exc.kind, exc.record_id), ("record-identity", "x"), "in-batch conflict")
    await _unchanged(store, ConversationTail(0, ZERO_DIGEST, 1), 0, "after in-batch reuse")
    await _append(store, "b2", ["x"])
    before = await store.inspect_tail("c1")
    exc = await _raises(AppendConflict, _append(store, "b3", ["z", "x"]), "id reused across batches")
    _eq((exc.kind, exc.record_id), ("record-identity", "x"), "cross-batch conflict")
    await _unchanged(store, before, 1, "after cross-batch reuse")
    await store.materialize("c2", "p1", 1)
    await _append(store, "b2", ["x"], cid="c2")  # ids and batch ids are per conversation


@_check("append-tail-conflict-carries-actual-tail")
async def _(store) -> None:
    await store.materialize("c1", "p1", 1)
    result = await store.append(request("c1", "b1", 0, ZERO_DIGEST, ["r1"]))
    for seq, dig in ((0, ZERO_DIGEST), (1, ZERO_DIGEST), (2, result.tail_digest)):
        exc = await _raises(AppendConflict, store.append(request("c1", f"x{seq}", seq, dig, [f"n{seq}"])), f"stale tail {seq}")
        _eq((exc.kind, exc.actual_tail_seq, exc.actual_tail_digest), ("tail", 1, result.tail_digest), "tail conflict")
    await _unchanged(store, ConversationTail(1, result.tail_digest, 1), 1, "after tail conflicts")


@_check("append-stale-epoch-fenced")
async def _(store) -> None:
    """producerFencing: after a takeover the old epoch is fenced, and an
    append's epoch must be exactly the conversation's (a higher one too is
    FenceRejected: only materialize takes over)."""
    await store.materialize("c1", "p1", 1)
    await _append(store, "b1", ["r1"])
    await store.materialize("c1", "p2", 2)
    before = await store.inspect_tail("c1")
    exc = await _raises(FenceRejected, _append(store, "b2", ["r2"]), "append at a stale epoch")
    _eq((exc.attempted_epoch, exc.actual_epoch), (1, 2), "FenceRejected epochs")
    await _unchanged(store, before, 1, "after fenced appends")
    await _raises(FenceRejected, store.materialize("c1", "p1", 1), "re-materialize at the old epoch")
    result = await _append(store, "b4", ["r4"], producer_id="p2", epoch=2)
    _eq((result.first_seq, result.replayed), (2, False), "append at the new epoch commits at last+1")
    exc = await _raises(FenceRejected, _append(store, "b5", ["r5"], producer_id="p3", epoch=5), "append at a higher epoch")
    _eq((exc.attempted_epoch, exc.actual_epoch), (5, 2), "FenceRejected epochs of a higher-epoch append")
    _eq((await store.inspect_tail("c1")).epoch, 2, "a higher-epoch append takes nothing over")
    await store.materialize("c1", "p3", 5)
    await _append(store, "b5", ["r5"], producer_id="p3", epoch=5)
    await _raises(FenceRejected, _append(store, "b6", ["r6"], producer_id="p2", epoch=2), "old owner after takeover")


@_check("append-administrative-same-epoch")
async def _(store) -> None:
    """A same-epoch administrative append (peer settlement publication case:
    an abort record from another producer lands between the owner's
    steps): the fence is the epoch, so it commits; the owner's append
    composed from the tail it read before is a ``tail`` conflict carrying
    the actual tail, and the one composed from the tail it reads next
    commits (the owner is not fenced)."""
    await store.materialize("c1", "p1", 1)
    await _append(store, "b1", ["r1"])
    stale = await store.inspect_tail("c1")
    admin = await _append(store, "abort", ["abort:1"], producer_id="admin", epoch=1)
    _eq((admin.first_seq, admin.replayed), (2, False), "another producer appends at the current epoch")
    _eq((await store.inspect_tail("c1")).epoch, 1, "and takes nothing over")
    exc = await _raises(AppendConflict, store.append(request("c1", "b2", stale.tail_seq, stale.tail_digest, ["r2"],
                                                             "p1", 1)), "the owner's append from its old tail")
    _eq((exc.kind, exc.actual_tail_seq), ("tail", 2), "a tail conflict with the actual tail")
    result = await _append(store, "b2", ["r2"])
    _eq((result.first_seq, result.replayed), (3, False), "the owner goes on from the tail it reads next")
    await _raises(FenceRejected, store.materialize("c1", "admin", 1), "materialize: the epoch's holder only")


@_check("append-all-or-nothing-and-bounds")
async def _(store) -> None:
    await store.materialize("c1", "p1", 1)
    await _raises(ValueError, store.append(FencedAppendRequest("c1", "b", "p1", 1, 0, ZERO_DIGEST, ())), "empty batch")
    big = tuple(envelope(f"r{i}") for i in range(PAGE_SIZE_MAX + 1))
    await _raises(ValueError, store.append(FencedAppendRequest("c1", "b", "p1", 1, 0, ZERO_DIGEST, big)), "oversized batch")
    bad_version = (envelope("ok"), envelope("v", schema_version=99))
    await _raises(UnsupportedSchemaVersion, store.append(FencedAppendRequest("c1", "b", "p1", 1, 0, ZERO_DIGEST, bad_version)), "unsupported version")
    nan = (envelope("ok"), envelope("n", payload={"x": float("nan")}))
    await _raises(ValueError, store.append(FencedAppendRequest("c1", "b", "p1", 1, 0, ZERO_DIGEST, nan)), "NaN payload")
    foreign = (envelope("ok"), envelope("f", producer_id="p2"))
    await _raises(ValueError, store.append(FencedAppendRequest("c1", "b", "p1", 1, 0, ZERO_DIGEST, foreign)), "other producer's record")
    await _unchanged(store, ConversationTail(0, ZERO_DIGEST, 1), 0, "after refused batches")
    _eq(await store.lookup_batch("c1", "b"), None, "refused batch id stays free")
    result = await store.append(FencedAppendRequest("c1", "b", "p1", 1, 0, ZERO_DIGEST, big[:BATCH_RECORDS_CAP]))
    _eq((result.first_seq, result.last_seq), (1, BATCH_RECORDS_CAP), "a full batch")


#: The most records one batch may carry, pinned here independently of
#: ``records.BATCH_RECORDS_MAX`` (the peer implementation's canonical batch
#: holds at most 256 records).
BATCH_RECORDS_CAP = 256


@_check("batch-record-cap-256")
async def _(store) -> None:
    """Reads and pagination: a canonical batch holds at most 256 records;
    more is the typed ``BatchTooLarge`` and writes nothing."""
    await store.materialize("c1", "p1", 1)
    over = tuple(envelope(f"r{i}") for i in range(BATCH_RECORDS_CAP + 1))
    exc = await _raises(BatchTooLarge, store.append(FencedAppendRequest("c1", "b", "p1", 1, 0, ZERO_DIGEST, over)),
                        f"a batch of {BATCH_RECORDS_CAP + 1} records")
    _eq((exc.operation, exc.limit, isinstance(exc, ValueError)), ("append", BATCH_RECORDS_CAP, True),
        "BatchTooLarge names the operation and the limit")
    await _unchanged(store, ConversationTail(0, ZERO_DIGEST, 1), 0, "after a batch over the record cap")
    _eq(await store.lookup_batch("c1", "b"), None, "refused batch id stays free")
    result = await store.append(FencedAppendRequest("c1", "b", "p1", 1, 0, ZERO_DIGEST, over[:BATCH_RECORDS_CAP]))
    _eq((result.first_seq, result.last_seq), (1, BATCH_RECORDS_CAP), f"a batch of exactly {BATCH_RECORDS_CAP}")


@_check("read-bounded-forward-pages")
async def _(store) -> None:
    """Reads and pagination: ``limit`` is an integer in 1..1024 (else the
    typed ``ReadLimitOutOfRange``), ``after_seq`` is exclusive."""
    await store.materialize("c1", "p1", 1)
    await _append(store, "b1", [f"r{i}" for i in range(1, 8)])
    _eq([r.seq for r in await store.read("c1", 0, 3)], [1, 2, 3], "first page")
    _eq([r.seq for r in await store.read("c1", 3, 3)], [4, 5, 6], "second page")
    _eq([r.seq for r in await store.read("c1", 6, 3)], [7], "short last page at the tail")
    _eq(await store.read("c1", 7, 3), (), "read after the tail")
    for bad in ((0, 0), (0, PAGE_SIZE_MAX + 1)):
        exc = await _raises(ReadLimitOutOfRange, store.read("c1", *bad), f"read{bad}")
        _eq((exc.operation, exc.limit_max), ("read", PAGE_SIZE_MAX), f"read{bad}: the typed limit error")
    await _raises(ValueError, store.read("c1", -1, 1), "read(-1, 1)")
    _eq([r.seq for r in await store.read("c1", 2, PAGE_SIZE_MAX)], [3, 4, 5, 6, 7], "after_seq is exclusive")
    _eq(all(isinstance(r, CanonicalRecord) for r in await store.read("c1", 0, 7)), True, "record type")


@_check("read-returns-copies")
async def _(store) -> None:
    await store.materialize("c1", "p1", 1)
    payload = {"list": [1, 2]}
    env = envelope("r1", payload=payload)
    await store.append(FencedAppendRequest("c1", "b1", "p1", 1, 0, ZERO_DIGEST, (env,)))
    payload["list"].append(3)
    (await store.read("c1", 0, 1))[0].envelope.payload["list"].append(4)
    _eq((await store.read("c1", 0, 1))[0].envelope.payload, {"list": [1, 2]}, "payload after caller mutations")


@_check("conversations-isolated")
async def _(store) -> None:
    await store.materialize("c1", "p1", 1)
    await store.materialize("c2", "p2", 7)
    await _append(store, "b1", ["r1", "r2"])
    _eq(await store.inspect_tail("c2"), ConversationTail(0, ZERO_DIGEST, 7), "other conversation's tail")
    _eq(await store.read("c2", 0, 5), (), "other conversation's records")


async def _take(store, cid: str, count: int, after_offset: str | None = None) -> list[CanonicalRecord]:
    taken: list[CanonicalRecord] = []
    if after_offset is None:
        stream = store.observe(cid)
    else:
        stream = store.observe(cid, after_offset=after_offset)
    async for record in stream:
        taken.append(record)
        if len(taken) == count:
            break
    return taken


@_check("atomic-batch-visibility")
async def _(store) -> None:
    """atomicBatchVisibility: a batch is visible whole, in declaration order,
    by read and by observe; a failed batch leaves no partial prefix."""
    await store.materialize("c1", "p1", 1)
    result = await store.append(request("c1", "b1", 0, ZERO_DIGEST, ["r1", "r2", "r3"]))
    _eq((result.first_seq, result.last_seq), (1, 3), "3-record batch")
    _eq([(r.seq, r.envelope.record_id) for r in await store.read("c1", 0, PAGE_SIZE_MAX)],
        [(1, "r1"), (2, "r2"), (3, "r3")], "read")
    _eq([r.envelope.record_id for r in await _take(store, "c1", 3)], ["r1", "r2", "r3"], "observe, take 3")
    exc = await _raises(AppendConflict, store.append(request("c1", "b2", 3, result.tail_digest, ["n", "n"])),
                        "same record id twice in a batch")
    _eq(exc.kind, "record-identity", "in-batch reuse")
    exc = await _raises(AppendConflict, store.append(request("c1", "b3", 3, result.tail_digest, ["n2", "r2"])),
                        "a committed record id")
    _eq(exc.kind, "record-identity", "cross-batch reuse")
    await _unchanged(store, ConversationTail(3, result.tail_digest, 1), 3, "after failed batches")


@_check("idempotent-replay-with-stale-tail")
async def _(store) -> None:
    """idempotentReplay: the identical batch sent again with its original,
    now stale, expected tail is the original result, ``replayed=True``;
    the same batch id with other content is ``batch-digest``."""
    await store.materialize("c1", "p1", 1)
    first = await store.append(request("c1", "b1", 0, ZERO_DIGEST, ["r1", "r2"]))
    _eq(first.replayed, False, "first append")
    await _append(store, "b2", ["r3"])
    again = await store.append(request("c1", "b1", 0, ZERO_DIGEST, ["r1", "r2"]))
    _eq(again, AppendResult(first.first_seq, first.last_seq, first.tail_digest, first.batch_digest, True),
        "replay with the stale expected tail")
    exc = await _raises(AppendConflict, store.append(request("c1", "b1", 0, ZERO_DIGEST, ["r1", "x"])),
                        "same batch id, other content")
    _eq(exc.kind, "batch-digest", "conflict kind")
    _eq(len(await store.read("c1", 0, PAGE_SIZE_MAX)), 3, "records held")


@_check("append-order-of-rules")
async def _(store) -> None:
    """The append rules' order: not materialized; the epoch exactly the
    conversation's (and its producer) else FenceRejected — before a known
    batch id is answered; a known batch id is a replay only when the chain
    digest computed from the request's own expected tail is the stored one,
    else ``batch-digest``; then the tail; then record identity."""
    await store.materialize("c1", "p1", 1)
    first = await store.append(request("c1", "b1", 0, ZERO_DIGEST, ["r1"]))
    await store.materialize("c1", "p2", 2)
    before = await store.inspect_tail("c1")
    exc = await _raises(FenceRejected, store.append(request("c1", "b1", 0, ZERO_DIGEST, ["r1"])),
                        "a fenced producer's exact retry of a committed batch")
    _eq((exc.attempted_epoch, exc.actual_epoch), (1, 2), "fence before replay")
    await _raises(FenceRejected, store.append(request("c1", "b9", 1, first.tail_digest, ["r9"], "p2", 3)),
                  "a higher epoch than the conversation's")
    second = await store.append(request("c1", "b2", 1, first.tail_digest, ["r2"], "p2", 2))
    # Same batch id and content, another expected tail: not the committed batch.
    exc = await _raises(AppendConflict, store.append(request("c1", "b2", 0, ZERO_DIGEST, ["r2"], "p2", 2)),
                        "a known batch id sent against another expected tail")
    _eq(exc.kind, "batch-digest", "a known batch id from another expected tail")
    exc = await _raises(AppendConflict, store.append(request("c1", "b3", 1, first.tail_digest, ["r1"], "p2", 2)),
                        "a stale tail and a reused record id")
    _eq((exc.kind, exc.actual_tail_seq, exc.actual_tail_digest), ("tail", 2, second.tail_digest),
        "the tail is checked before record identity")
    await _unchanged(store, ConversationTail(2, second.tail_digest, 2), 2, "after refused appends")
    _eq(before.tail_seq, 1, "tail before")


@_check("tail-conflict-frees-the-batch-id")
async def _(store) -> None:
    """tailConflict: a stale tail (seq or digest) is ``tail`` with the actual
    tail; a failed attempt does not reserve its batch id, which then commits
    at last+1 from the true tail."""
    await store.materialize("c1", "p1", 1)
    result = await store.append(request("c1", "b1", 0, ZERO_DIGEST, ["r1"]))
    for seq, dig in ((0, ZERO_DIGEST), (1, ZERO_DIGEST)):
        exc = await _raises(AppendConflict, store.append(request("c1", "b2", seq, dig, ["r2"])), f"tail {seq}")
        _eq((exc.kind, exc.actual_tail_seq, exc.actual_tail_digest), ("tail", 1, result.tail_digest), "tail hint")
    _eq(await store.lookup_batch("c1", "b2"), None, "a failed attempt reserves no batch id")
    again = await store.append(request("c1", "b2", 1, result.tail_digest, ["r2"]))
    _eq((again.first_seq, again.replayed), (2, False), "the same batch from the true tail")


@_check("offset-resumability")
async def _(store) -> None:
    """offsetResumability: each read record carries an opaque ``offset``;
    ``observe(after_offset=...)`` resumes exactly after it; ``observe()``
    streams the whole log in order; a malformed offset is the typed
    ``MalformedOffset``."""
    await store.materialize("c1", "p1", 1)
    await _append(store, "b1", ["r1"])
    await _append(store, "b2", ["r2", "r3"])
    await _append(store, "b3", ["r4"])
    records = await store.read("c1", 0, PAGE_SIZE_MAX)
    offsets = [r.offset for r in records]
    _eq(all(type(o) is str and o for o in offsets) and len(set(offsets)) == 4, True, "every record has an offset")
    _eq([r.seq for r in await _take(store, "c1", 2, offsets[1])], [3, 4], "observe after record #2, take 2")
    whole = await _take(store, "c1", 4)
    _eq([(r.seq, r.envelope.record_id, r.offset) for r in whole],
        [(r.seq, r.envelope.record_id, r.offset) for r in records], "observe() from the start")
    _eq(await _take(store, "c1", 4, offsets[3]), [], "observe after the last record")
    await store.materialize("c2", "p1", 1)
    for bad in ("", "nonsense", offsets[0] + "x", offsets[0].rsplit(":", 1)[0] + ":-1"):
        exc = await _raises(MalformedOffset, _take(store, "c1", 1, bad), f"observe after {bad!r}")
        _eq("Malformed observation offset" in str(exc), True, "the message")
    await _raises(MalformedOffset, _take(store, "c2", 1, offsets[0]), "another conversation's offset")


@_check("tail-inspection")
async def _(store) -> None:
    """tailInspection: NotMaterialized carries the id; a new log is (0,
    EMPTY, epoch); after an append the tail is the AppendResult's, and an
    append composed from it commits at tail+1; a takeover changes the epoch
    only."""
    exc = await _raises(NotMaterialized, store.inspect_tail("c1"), "inspect before materializing")
    _eq(exc.conversation_id, "c1", "NotMaterialized.conversation_id")
    await store.materialize("c1", "p1", 1)
    _eq(await store.inspect_tail("c1"), ConversationTail(0, ZERO_DIGEST, 1), "empty tail")
    result = await _append(store, "b1", ["r1"])
    _eq(await store.inspect_tail("c1"), ConversationTail(result.last_seq, result.tail_digest, 1), "tail after append")
    nxt = await _append(store, "b2", ["r2"])
    _eq(nxt.first_seq, result.last_seq + 1, "composed from the inspection")
    await store.materialize("c1", "p1", 2)
    _eq(await store.inspect_tail("c1"), ConversationTail(nxt.last_seq, nxt.tail_digest, 2), "after takeover")


@_check("not-materialized-operations")
async def _(store) -> None:
    """notMaterializedOperations: every operation on an unknown id is
    NotMaterialized carrying that id."""
    calls = {
        "append": lambda: store.append(request("nope", "b", 0, ZERO_DIGEST, ["r"])),
        "read": lambda: store.read("nope", 0, PAGE_SIZE_MAX),
        "observe": lambda: _take(store, "nope", 1),
        "inspect_tail": lambda: store.inspect_tail("nope"),
        "digest_at": lambda: store.digest_at("nope", 0),
    }
    for name, call in calls.items():
        exc = await _raises(NotMaterialized, call(), name)
        _eq(exc.conversation_id, "nope", f"{name}: NotMaterialized.conversation_id")


@_check("canonical-json-bounds")
async def _(store) -> None:
    """Canonical JSON bounds: an envelope nested past the store's depth bound
    (64 containers, the envelope itself the first) is
    ``CanonicalJsonBoundsError`` naming "traversal", and writes nothing; at
    the bound it is stored."""
    from model.canonical import CanonicalJsonBoundsError

    def nested(levels: int) -> object:
        value: object = 0
        for _ in range(levels):
            value = [value]
        return value

    await store.materialize("c1", "p1", 1)
    over = (envelope("deep", payload=nested(64)),)
    exc = await _raises(CanonicalJsonBoundsError, store.append(FencedAppendRequest("c1", "b", "p1", 1, 0, ZERO_DIGEST, over)),
                        "an envelope 65 containers deep")
    _eq(("traversal" in str(exc), isinstance(exc, ValueError)), (True, True), "the bounds error")
    await _unchanged(store, ConversationTail(0, ZERO_DIGEST, 1), 0, "after an envelope over the bounds")
    at = (envelope("deep", payload=nested(63)),)
    result = await store.append(FencedAppendRequest("c1", "b", "p1", 1, 0, ZERO_DIGEST, at))
    _eq((await store.read("c1", 0, 1))[0].envelope.payload, nested(63), "an envelope at the bound reads back")
    _eq(result.last_seq, 1, "stored")


CONFORMANCE_CHECKS: tuple[str, ...] = _SUITE.names()


async def run_conversation_store_conformance(make_store: Callable[[], Any], *, checks: Iterable[str] | None = None) -> list[str]:
    """Run the conformance checks, each on a fresh store from ``make_store``.

    Returns the names of the checks that ran (all passed); raises
    ``ConformanceFailure`` naming every failing check otherwise.
    """
    return await _SUITE.run(make_store, checks)
