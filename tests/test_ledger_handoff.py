"""The peer's ``cooperativeHandoff`` (claim with a ``ClaimHandoff``): the
conformance check on both adapters, and ``fifo-one-active`` telling a
handoff's claim of the next submission from a claim out of queue order."""
from __future__ import annotations

import pytest
import trio

from faults.events import LedgerAdmit, LedgerClaim
from model.ledger.conformance import run_ledger_conformance
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.sqlite_store import SqliteSubmissionLedger
from scenarios.invariants.queue_order import QueueOrder

CHECK = "claim-handoff-grants-only-the-next-ready"


@pytest.mark.parametrize("adapter", ["memory", "sqlite"])
def test_both_adapters_pass_the_nine_handoff_scenarios(adapter, tmp_path):
    opened = []

    def make():
        if adapter == "memory":
            return InMemorySubmissionLedger()
        store = SqliteSubmissionLedger.open(str(tmp_path / f"handoff-{len(opened)}.db"))
        opened.append(store)
        return store

    try:
        assert trio.run(lambda: run_ledger_conformance(make, checks=[CHECK])) == [CHECK]
    finally:
        for store in opened:
            store.close()


class _Trace:
    events = 0

    def subscribe(self, kinds, fn) -> None:
        pass


def _checker() -> tuple[QueueOrder, list]:
    found: list = []
    checker = QueueOrder()
    checker.attach(_Trace(), lambda: 0, found.append)
    return checker, found


def _feed(checker: QueueOrder, kind: str, fields: dict) -> None:
    checker.on_event((0, 0, "n1", kind, fields))


def _lane(checker: QueueOrder, *sids: str) -> None:
    for seq, sid in enumerate(sids, 1):
        _feed(checker, LedgerAdmit.kind, LedgerAdmit.build(conversation="c1", principal="p", key=sid, admitted_ms=0,
                                                           parent=None, group=None, fence=None, metadata=None, submission=sid, queue_seq=seq,
                                                           replayed=False))



def _claim(checker: QueueOrder, sid: str, handoff) -> None:
    _feed(checker, LedgerClaim.kind, LedgerClaim.build(conversation="c1", owner="B", handoff=handoff, submission=sid,
                                                       epoch=2, lease_expires_ms=10, attempt=f"{sid}#a2"))


def test_fifo_one_active_accepts_a_handoff_behind_exactly_the_deferred_head():
    checker, found = _checker()
    _lane(checker, "s1", "s2")
    _claim(checker, "s2", (1, ("s1",), "s2"))
    assert found == []


def test_fifo_one_active_fails_a_handoff_over_another_unsettled_row():
    checker, found = _checker()
    _lane(checker, "s1", "gap", "s2")
    _claim(checker, "s2", (1, ("s1",), "s2"))
    assert [v.invariant for v in found] == ["fifo-one-active"]
    checker, found = _checker()
    _lane(checker, "s1", "s2")
    _claim(checker, "s2", None)  # an ordinary claim never takes the second
    assert [v.invariant for v in found] == ["fifo-one-active"]
