"""``load_latest`` never hands back a checkpoint the log does not vouch for
(persistence §8, issue 13), on both checkpoint stores:

- a conversation the log does not have (never created, or deleted) is
  ``NotMaterialized``, not None; one that exists with no checkpoint at or
  before the seq is None;
- a checkpoint whose ``tail_digest`` is no longer the log's
  ``digest_at(covered_seq)`` (the conversation deleted and written again
  differently) is ``CheckpointUnusable("digest-mismatch")``, and
  ``usable_checkpoint`` turns that into a rebuild from the log;
- a log written again identically vouches for the old checkpoint again;
- the other ``CheckpointUnusable`` kinds still propagate from
  ``usable_checkpoint``, and a damaged row is refused as damaged (its kind)
  before its digest is compared.
"""
from __future__ import annotations

import pickle

import pytest
import trio

from model.canonical import ZERO_DIGEST
from model.conversation.checkpoints import (
    Checkpoint,
    CheckpointDecision,
    CheckpointUnusable,
    InMemoryCheckpointStore,
    SqliteCheckpointStore,
    usable_checkpoint,
)
from model.conversation.conformance import request
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.records import NotMaterialized
from model.conversation.sqlite_store import SqliteConversationStore
from model.sqlite_db import open_database

KINDS = ["memory", "sqlite"]


def run(async_fn, *args):
    return trio.run(async_fn, *args)


def _stores(kind, tmp_path):
    if kind == "memory":
        log = InMemoryConversationStore()
        return log, InMemoryCheckpointStore(log)
    log = SqliteConversationStore(open_database(str(tmp_path / "log.db")))
    return log, SqliteCheckpointStore(log)


def _checkpoint(seq, dig, cid="c1"):
    return Checkpoint(cid, "s1", seq, dig, "e1", "d1", "m1", "t1", 1, {"state": seq}, 5)


async def _write(log, cid, records):
    await log.materialize(cid, "p1", 1)
    out = await log.append(request(cid, "b1", 0, ZERO_DIGEST, records))
    return out.tail_digest


async def _usable(checkpoints, log, cid="c1"):
    return await usable_checkpoint(checkpoints, log, cid, 99, engine_version="e1", definition_digest="d1",
                                   model_digest="m1", tool_digest="t1")


@pytest.mark.parametrize("kind", KINDS)
def test_a_conversation_the_log_does_not_have_is_not_materialized(kind, tmp_path):
    async def main():
        log, checkpoints = _stores(kind, tmp_path)
        with pytest.raises(NotMaterialized) as info:
            await checkpoints.load_latest("never", 5)
        assert info.value.conversation_id == "never"
        await log.materialize("c1", "p1", 1)
        assert await checkpoints.load_latest("c1", 5) is None  # exists, no checkpoint: None
        tail = await _write(log, "c2", ["a", "b"])
        await checkpoints.save(_checkpoint(2, tail, "c2"))
        assert (await checkpoints.load_latest("c2", 5)).covered_seq == 2
        assert await checkpoints.load_latest("c2", 1) is None  # none at or before 1
        assert await log.delete_conversation("c2")
        with pytest.raises(NotMaterialized):  # deleted: its checkpoint stays, unused
            await checkpoints.load_latest("c2", 5)

    run(main)


@pytest.mark.parametrize("kind", KINDS)
def test_a_log_written_again_differently_never_gets_the_old_checkpoint(kind, tmp_path):
    async def main():
        log, checkpoints = _stores(kind, tmp_path)
        old_tail = await _write(log, "c1", ["a", "b"])
        await checkpoints.save(_checkpoint(2, old_tail))
        assert (await _usable(checkpoints, log)).checkpoint.tail_digest == old_tail
        assert await log.delete_conversation("c1")
        new_tail = await _write(log, "c1", ["x", "y"])  # same position, another digest
        assert new_tail != old_tail and await log.digest_at("c1", 2) == new_tail
        with pytest.raises(CheckpointUnusable) as info:
            await checkpoints.load_latest("c1", 99)
        assert (info.value.kind, info.value.conversation_id) == ("digest-mismatch", "c1")
        copy = pickle.loads(pickle.dumps(info.value))
        assert (type(copy), copy.kind, str(copy)) == (CheckpointUnusable, "digest-mismatch", str(info.value))
        assert await _usable(checkpoints, log) == CheckpointDecision(None, "digest-mismatch")
        # A checkpoint of the new log, at the same position, is used again.
        await checkpoints.save(_checkpoint(2, new_tail))
        assert (await _usable(checkpoints, log)).checkpoint.tail_digest == new_tail

    run(main)


@pytest.mark.parametrize("kind", KINDS)
def test_a_checkpoint_past_a_shorter_log_is_a_digest_mismatch(kind, tmp_path):
    async def main():
        log, checkpoints = _stores(kind, tmp_path)
        tail = await _write(log, "c1", ["a", "b", "c"])
        await checkpoints.save(_checkpoint(3, tail))
        await log.delete_conversation("c1")
        await _write(log, "c1", ["a"])  # the log now ends at 1: seq 3 has no digest
        with pytest.raises(CheckpointUnusable) as info:
            await checkpoints.load_latest("c1", 99)
        assert info.value.kind == "digest-mismatch"

    run(main)


@pytest.mark.parametrize("kind", KINDS)
def test_a_log_written_again_identically_vouches_for_it(kind, tmp_path):
    async def main():
        log, checkpoints = _stores(kind, tmp_path)
        tail = await _write(log, "c1", ["a", "b"])
        await checkpoints.save(_checkpoint(2, tail))
        await log.delete_conversation("c1")
        assert await _write(log, "c1", ["a", "b"]) == tail
        assert (await checkpoints.load_latest("c1", 99)).tail_digest == tail

    run(main)


@pytest.mark.parametrize("kind", KINDS)
def test_damage_is_told_before_the_digest_and_other_kinds_propagate(kind, tmp_path):
    async def main():
        log, checkpoints = _stores(kind, tmp_path)
        tail = await _write(log, "c1", ["a", "b"])
        await checkpoints.save(_checkpoint(2, tail))
        await log.delete_conversation("c1")
        await _write(log, "c1", ["x", "y"])  # mismatched, and now also damaged:
        if kind == "memory":
            text, integrity = checkpoints._rows["c1"][2]
            checkpoints._rows["c1"][2] = (text[: len(text) // 2], integrity)
        else:
            log.connection.execute("UPDATE conv_checkpoints SET checkpoint_json = 'not json'")
        with pytest.raises(CheckpointUnusable) as info:
            await checkpoints.load_latest("c1", 99)
        assert info.value.kind == "corrupt"
        with pytest.raises(CheckpointUnusable) as info:
            await _usable(checkpoints, log)
        assert info.value.kind == "corrupt"

    run(main)


def test_digest_mismatch_is_a_kind_of_checkpoint_unusable():
    assert "digest-mismatch" in CheckpointUnusable.KINDS


# --- the peer's checkpoint cases (checkpointBoundaries and its adapter rules) -----------


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_boundaries(kind, tmp_path):
    """checkpointBoundaries: save/load before materializing is
    NotMaterialized; ahead of the tail is ``ahead-of-tail``; a wrong digest,
    or a seq inside a batch (no chain digest there), is ``digest-mismatch``
    and never loadable; an unsupported version is ``unsupported-version``;
    saving the same seq again replaces it; load takes the highest seq at or
    before the bound and re-verifies it; a bound of 0 finds none."""
    from model.conversation.checkpoints import CheckpointRejected
    import attrs

    log, checkpoints = _stores(kind, tmp_path)

    async def main():
        with pytest.raises(NotMaterialized):
            await checkpoints.save(_checkpoint(0, ZERO_DIGEST))
        with pytest.raises(NotMaterialized):
            await checkpoints.load_latest("c1", 0)
        first = await _write(log, "c1", ["r1", "r2"])
        for seq, dig, why in ((3, first, "ahead-of-tail"), (2, ZERO_DIGEST, "digest-mismatch"),
                              (1, first, "digest-mismatch")):  # 1 is inside the batch
            with pytest.raises(CheckpointRejected) as refused:
                await checkpoints.save(_checkpoint(seq, dig))
            assert refused.value.kind == why
        with pytest.raises(CheckpointRejected) as refused:
            await checkpoints.save(attrs.evolve(_checkpoint(2, first), schema_version=2))
        assert refused.value.kind == "unsupported-version"
        assert await checkpoints.load_latest("c1", 2) is None  # rejected ones never load
        await checkpoints.save(_checkpoint(2, first))
        await checkpoints.save(_checkpoint(2, first))  # idempotent
        assert (await checkpoints.load_latest("c1", 2)).tail_digest == first
        await checkpoints.save(attrs.evolve(_checkpoint(2, first), snapshot={"state": "again"}))
        assert (await checkpoints.load_latest("c1", 5)).snapshot == {"state": "again"}  # replaced
        assert await checkpoints.load_latest("c1", 0) is None
        tail = await log.inspect_tail("c1")
        second = await log.append(request("c1", "b2", tail.tail_seq, tail.tail_digest, ["r3"]))
        assert (await checkpoints.load_latest("c1", second.last_seq)).covered_seq == 2  # the older one
        await checkpoints.save(_checkpoint(3, second.tail_digest))
        assert (await checkpoints.load_latest("c1", 3)).covered_seq == 3
        assert (await checkpoints.load_latest("c1", 2)).covered_seq == 2

    try:
        run(main)
    finally:
        if kind == "sqlite":
            log.close()
