"""Damaged blob reads: the bytes a content store reads back are not the bytes it stored.

The log's damaged reads (``faults.reads``) alter an answer on its way to the
caller, above the store, where the recovery read's digest chain must catch
them. A content store promises more: ``get`` verifies what it returns (a
blob's ref is the sha256 of its bytes), so a blob whose bytes are damaged
*below* it — a flipped bit on the disk, in a page of the database file, in
the store's own memory — is ``ContentCorrupted``, never returned. This
fault damages exactly there: at a hit of ``content.get.answer`` it flips
one byte of the stored blob, lets the store's own ``get`` read it, and puts
the bytes back (the damage is transient, as a bad read of a good disk
block is). The ``corrupt-row`` kind is the one it fires as: a read answer
with its content altered.

The call is traced and shown to the port observers as damaged (the fault
fired inside it): the reference model then demands the typed
``ContentCorrupted`` and nothing else, and a caller that got bytes anyway
holds bytes that do not hash to their ref.

Like ``faults.beyond``, the damage works on the store's own representation
(the in-memory dict, or SQL on the SQLite file), never through its API.
"""
from __future__ import annotations

from typing import Any

from faults.kinds import CORRUPT_ROW
from model.canonical import canonical_json, decode, digest
from model.sqlite_db import write_transaction
from sim.node import Node
from sim.seams import PlanSeam
from sim.world import World

SITE = "content.get.answer"
BLOB_FAULT_KINDS = (CORRUPT_ROW,)
# The SQLite adapter's table of blobs (``model.conversation.content_store``).
SQLITE_TABLE = "conv_content"


def damaged(data: bytes) -> bytes:
    """``data`` with its middle byte flipped (same size: only the hash can tell)."""
    assert data, "an empty blob has no byte to damage"
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1:]


class DamagedBlobs:
    """Wraps a content store; ``get`` may read a damaged blob. Everything else passes through."""

    def __init__(self, store: Any, world: World, node: Node, plan: PlanSeam | None) -> None:
        self._store = store
        self._world = world
        self._node = node
        self._plan = plan
        self._sqlite = hasattr(store, "_conn")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get(self, ref: str) -> bytes:
        stored = self._stored(ref) if self._plan is not None else None
        if not stored:  # absent, empty (nothing to flip) or not a ref: the store answers as it is
            return await self._store.get(ref)
        hit, fault = self._plan.draw(SITE, BLOB_FAULT_KINDS)
        if fault is None:
            return await self._store.get(ref)
        self._world.record_fault(self._node, SITE, fault, hit)
        self._put_back(ref, damaged(stored))
        try:
            # The store's get never suspends: nothing else runs while the
            # damaged bytes are in place.
            return await self._store.get(ref)
        finally:
            self._put_back(ref, stored)

    # -- the store's own representation --------------------------------------------

    def _stored(self, ref: object) -> bytes | None:
        if type(ref) is not str:
            return None
        if self._sqlite:
            row = self._store._conn.execute(f"SELECT data FROM {SQLITE_TABLE} WHERE ref = ?", (ref,)).fetchone()
            return None if row is None else bytes(row[0])
        return self._store._blobs.get(ref)

    def _put_back(self, ref: str, data: bytes) -> None:
        if self._sqlite:
            conn = self._store._conn
            with write_transaction(conn):
                conn.execute(f"UPDATE {SQLITE_TABLE} SET data = ? WHERE ref = ?", (data, ref))
            return
        self._store._blobs[ref] = data


# --- damaged checkpoint reads ------------------------------------------------------
#
# A checkpoint store promises the same of its rows (persistence §8): a row
# that does not decode, whose integrity digest no longer matches, or that a
# newer build wrote under a schema this one does not support is
# ``CheckpointUnusable`` (corrupt / unsupported-version), never a
# checkpoint. At a hit of ``checkpoints.load_latest.answer`` this fault
# damages the row the store's own ``load_latest`` is about to read, in one
# of ``CHECKPOINT_DAMAGES`` ways (picked by the hit index: a replay picks
# the same), lets the store read it and puts the row back.

CHECKPOINT_SITE = "checkpoints.load_latest.answer"
# The SQLite adapter's table of checkpoints (``model.conversation.checkpoints``).
CHECKPOINT_TABLE = "conv_checkpoints"
# How a stored row is damaged, and the kind of ``CheckpointUnusable`` it must be.
CHECKPOINT_DAMAGES = (("integrity", "corrupt"), ("torn", "corrupt"), ("newer-schema", "unsupported-version"),
                      ("field", "corrupt"))


def damaged_checkpoint_row(text: str, integrity: str, how: str) -> tuple[str, str]:
    """The stored ``(checkpoint_json, integrity_digest)`` damaged ``how``:
    ``integrity``: the digest no longer matches the body; ``torn``: half the
    body (it does not decode); ``newer-schema``: a body a newer build wrote
    (schema version 2), its digest its own; ``field``: a body whose
    ``throughSequence`` is a string, its digest its own."""
    if how == "integrity":
        return text, integrity[:-1] + ("0" if integrity[-1:] != "0" else "1")
    if how == "torn":
        return text[:len(text) // 2], integrity
    value = decode(text, max_bytes=64 * 1024 * 1024, max_string_length=64 * 1024 * 1024, max_items=10_000_000)
    if how == "newer-schema":
        value["schemaVersion"] = 2
    else:
        assert how == "field", how
        value["throughSequence"] = str(value["throughSequence"])
    return canonical_json(value), digest(value)


class DamagedCheckpoints:
    """Wraps a checkpoint store; ``load_latest`` may read a damaged row.
    ``damaged`` counts the damaged reads, ``last_damage`` is the kind of
    refusal the last one must be. Everything else passes through."""

    def __init__(self, store: Any, world: World, node: Node, plan: PlanSeam | None) -> None:
        self._store = store
        self._world = world
        self._node = node
        self._plan = plan
        self._sqlite = hasattr(store, "_conn")
        self.damaged = 0
        self.last_damage: tuple[str, str] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def load_latest(self, conversation_id: str, at_or_before_seq: int) -> Any:
        row = self._latest(conversation_id, at_or_before_seq) if self._plan is not None else None
        if row is None:  # nothing stored there (or arguments the store refuses): it answers as it is
            return await self._store.load_latest(conversation_id, at_or_before_seq)
        hit, fault = self._plan.draw(CHECKPOINT_SITE, BLOB_FAULT_KINDS)
        if fault is None:
            return await self._store.load_latest(conversation_id, at_or_before_seq)
        self._world.record_fault(self._node, CHECKPOINT_SITE, fault, hit)
        seq, text, integrity = row
        how = CHECKPOINT_DAMAGES[hit % len(CHECKPOINT_DAMAGES)]
        self.damaged += 1
        self.last_damage = how
        self._put_row(conversation_id, seq, *damaged_checkpoint_row(text, integrity, how[0]))
        try:
            # The store's load_latest never suspends: nothing else runs while
            # the damaged row is in place.
            return await self._store.load_latest(conversation_id, at_or_before_seq)
        finally:
            self._put_row(conversation_id, seq, text, integrity)

    # -- the store's own representation --------------------------------------------

    def _latest(self, conversation_id: object, at_or_before_seq: object) -> tuple[int, str, str] | None:
        if type(conversation_id) is not str or type(at_or_before_seq) is not int:
            return None
        if self._sqlite:
            found = self._store._conn.execute(
                f"SELECT covered_seq, checkpoint_json, integrity_digest FROM {CHECKPOINT_TABLE} "
                "WHERE conversation_id = ? AND covered_seq <= ? ORDER BY covered_seq DESC LIMIT 1",
                (conversation_id, at_or_before_seq)).fetchone()
            return None if found is None else (found[0], found[1], found[2])
        rows = self._store._rows.get(conversation_id, {})
        eligible = [seq for seq in rows if seq <= at_or_before_seq]
        if not eligible:
            return None
        seq = max(eligible)
        return (seq, *rows[seq])

    def _put_row(self, conversation_id: str, seq: int, text: str, integrity: str) -> None:
        if self._sqlite:
            conn = self._store._conn
            with write_transaction(conn):
                conn.execute(f"UPDATE {CHECKPOINT_TABLE} SET checkpoint_json = ?, integrity_digest = ? "
                             "WHERE conversation_id = ? AND covered_seq = ?", (text, integrity, conversation_id, seq))
            return
        self._store._rows[conversation_id][seq] = (text, integrity)


# --- durable state respelled by a foreign writer -------------------------------------
#
# Not a fault: JSON text that means the same value, spelled as another
# library writes it (surrounding whitespace). The stores write compact
# text, but a row another writer stored (a migration tool, another
# language's client on the same table) may read back from the table as
# that: ``decode_payload`` must read it as the same value.

DS_TABLE = "durable_state"  # ``model.durable_state.sqlite_store.TABLE_NAME``


def respell_state(store: Any, key: str) -> bool:
    """Respell the stored JSON text of ``key`` (an unwrapped durable-state
    store: in memory or SQLite) with whitespace around it; the value, the
    revision and the contract version stay. False when the key is absent."""
    if hasattr(store, "_conn"):
        conn = store._conn
        with write_transaction(conn):
            found = conn.execute(f"SELECT payload FROM {DS_TABLE} WHERE key = ?", (key,)).fetchone()
            if found is None:
                return False
            conn.execute(f"UPDATE {DS_TABLE} SET payload = ? WHERE key = ?", (f" \n{found[0]}\t ", key))
        return True
    row = store._rows.get(key)
    if row is None:
        return False
    store._rows[key] = (row[0], row[1], f" \n{row[2]}\t ")
    return True
