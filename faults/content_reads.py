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
from faults.plan import FaultPlan
from model.sqlite_db import write_transaction
from sim.node import Node
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

    def __init__(self, store: Any, world: World, node: Node, plan: FaultPlan | None) -> None:
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
