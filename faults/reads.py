"""Faults on reads: a page comes back short, or with a sequence gap.

The store is fine; the answer is damaged on the way (a buggy replica, a
truncated response, a flipped bit). The system must fail closed: the
recovery read turns each into a typed ``HistoryCorrupted``, never into a
shorter or altered "complete" history. Each injected fault is a trace event (kind ``short-page`` or
``sequence-gap``) so the ``fail-closed-pagination`` oracle can check that
the read it damaged did not succeed.
"""
from __future__ import annotations

from typing import Any

import attrs

from faults.kinds import CORRUPT_ROW, SEQUENCE_GAP, SHORT_PAGE
from sim.node import Node
from sim.seams import PlanSeam
from sim.world import World

READ_FAULT_KINDS = (SHORT_PAGE, SEQUENCE_GAP, CORRUPT_ROW)


class DamagedReads:
    """Wraps a conversation store; ``read`` answers may be damaged. Everything else passes through."""

    def __init__(self, store: Any, world: World, node: Node, plan: PlanSeam) -> None:
        self._store = store
        self._world = world
        self._node = node
        self._plan = plan

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def read(self, conversation_id: str, after_seq: int, limit: int) -> Any:
        records = await self._store.read(conversation_id, after_seq, limit)
        if len(records) < 2:
            return records
        hit, fault = self._plan.draw("log.read.answer", READ_FAULT_KINDS)
        if fault is None:
            return records
        self._world.record_fault(self._node, "log.read.answer", fault, hit)
        if fault == SHORT_PAGE:
            return records[:-1]
        if fault == CORRUPT_ROW:
            # Same seq, same batch, a different payload: only the digest
            # chain can tell, and the recovery read must.
            middle = len(records) // 2
            record = records[middle]
            damaged = attrs.evolve(record, envelope=attrs.evolve(record.envelope, payload={"corrupted": True}))
            return records[:middle] + (damaged,) + records[middle + 1:]
        middle = len(records) // 2
        return records[:middle] + records[middle + 1:]
