"""The peer's ``cooperativeHandoff`` (claim with a ``ClaimHandoff``): the
conformance check on both adapters, and ``fifo-one-active`` telling a
handoff's claim of the next submission from a claim out of queue order, a
handoff its producer had no right to ask for (a head not applied, not
released by it, or not every unsettled row ahead), and a settlement record
out of queue order from a deferred head's that follows its successor's."""
from __future__ import annotations

import pytest
import trio

from faults.events import (LedgerAdmit, LedgerClaim, LedgerFinalizeSettlement, LedgerMarkInputApplied,
                           LedgerReleaseOwnership, LogAppend)
from model.ledger.conformance import run_ledger_conformance
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.sqlite_store import SqliteSubmissionLedger
from scenarios.invariants.queue_order import QueueOrder
from sim.trace import Event

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
    checker.on_event(Event(0, 0, "n1", kind, fields))


def _lane(checker: QueueOrder, *sids: str) -> None:
    for seq, sid in enumerate(sids, 1):
        _feed(checker, LedgerAdmit.kind, LedgerAdmit.build(conversation="c1", principal="p", key=sid, admitted_ms=0,
                                                           parent=None, group=None, fence=None, metadata=None, submission=sid, queue_seq=seq,
                                                           replayed=False))



def _claim(checker: QueueOrder, sid: str | None, handoff, epoch: int = 2) -> None:
    result = {} if sid is None else {"submission": sid, "epoch": epoch, "lease_expires_ms": 10,
                                     "attempt": f"{sid}#a{epoch}"}
    _feed(checker, LedgerClaim.kind, LedgerClaim.build(conversation="c1", owner="B", handoff=handoff, **result))


def _deferred(checker: QueueOrder, sid: str, epoch: int = 1, *, claimed: bool = False, marked: bool = True,
              released: bool = True) -> None:
    """``sid`` claimed by B at ``epoch`` (by an ordinary claim unless
    ``claimed`` already), its input logged (and marked), released."""
    if not claimed:
        _claim(checker, sid, None, epoch)
    _log(checker, "input", sid)
    if marked:
        _feed(checker, LedgerMarkInputApplied.kind, LedgerMarkInputApplied.build(
            submission=sid, owner="B", epoch=epoch, record_id=f"input:{sid}", seq=1, replayed=False))
    if released:
        _feed(checker, LedgerReleaseOwnership.kind, LedgerReleaseOwnership.build(submission=sid, owner="B",
                                                                                 epoch=epoch))


def _log(checker: QueueOrder, family: str, sid: str) -> None:
    envelope = {"family": family, "payload": {"submissionId": sid}}
    _feed(checker, LogAppend.kind, LogAppend.build(
        conversation="c1", batch=f"{family}:{sid}", producer="B", epoch=1, expected_tail_seq=0,
        record_ids=(f"{family}:{sid}",), envelopes=(envelope,), sizes=(1,), first_seq=1, last_seq=1,
        tail_digest="0", batch_digest="0", replayed=False))


def _settled(checker: QueueOrder, sid: str) -> None:
    _log(checker, "submission-settled", sid)
    _feed(checker, LedgerFinalizeSettlement.kind, LedgerFinalizeSettlement.build(
        submission=sid, outcome="completed", digest="d", settled_at_ms=1, settlement_id=f"settlement:{sid}",
        replayed=False))


def test_fifo_one_active_accepts_a_handoff_behind_exactly_the_deferred_head():
    checker, found = _checker()
    _lane(checker, "s1", "s2")
    _deferred(checker, "s1")
    _claim(checker, "s2", (1, ("s1",), "s2"))
    _log(checker, "input", "s2")
    _settled(checker, "s2")  # the successor settles first: the deferred head was parked
    _claim(checker, "s1", None, 3)
    _settled(checker, "s1")
    assert found == []


def test_fifo_one_active_accepts_a_slow_handoff_request_over_rows_settled_since():
    """A handoff asked for before, committed after, its rows settled (a
    delayed claim: ledger-storm seed 8, 4h, once failed on it): the ledger
    grants nothing, and the producer's deferral was judged while open."""
    checker, found = _checker()
    _lane(checker, "s1", "s2")
    _deferred(checker, "s1")
    _claim(checker, "s1", None, 2)
    _settled(checker, "s1")
    _claim(checker, "s2", None, 3)
    _settled(checker, "s2")
    _claim(checker, None, (1, ("s1",), "s2"))  # the first producer's request, landing now
    assert found == []


@pytest.mark.parametrize("problem", ["unmarked", "unreleased", "not-every-row-ahead"])
def test_fifo_one_active_fails_a_handoff_its_producer_had_no_right_to_ask(problem):
    """Judged as asked, whatever the ledger answers (here: nothing granted)."""
    checker, found = _checker()
    _lane(checker, "s1", "s2", "s3")
    _deferred(checker, "s1", 1, marked=problem != "unmarked", released=problem != "unreleased")
    if problem == "not-every-row-ahead":
        _claim(checker, "s2", (1, ("s1",), "s2"), 2)
        _deferred(checker, "s2", 2, claimed=True)
        assert found == []
        _claim(checker, None, (2, ("s2",), "s3"))  # forgets s1, deferred before it
    else:
        _claim(checker, None, (1, ("s1",), "s2"))
    assert [v.invariant for v in found] == ["fifo-one-active"], found


def test_fifo_one_active_fails_a_settlement_logged_ahead_of_an_undeferred_head():
    checker, found = _checker()
    _lane(checker, "s1", "s2")
    _log(checker, "input", "s1")
    _log(checker, "input", "s2")  # (itself a violation: two inputs active)
    found.clear()
    _settled(checker, "s2")
    assert [v.invariant for v in found] == ["fifo-one-active"], found


def test_fifo_one_active_fails_a_handoff_over_another_unsettled_row():
    checker, found = _checker()
    _lane(checker, "s1", "gap", "s2")
    _deferred(checker, "s1")
    _claim(checker, "s2", (1, ("s1",), "s2"))  # asked for wrongly, and granted
    assert [v.invariant for v in found] == ["fifo-one-active"] * 2, found
    checker, found = _checker()
    _lane(checker, "s1", "s2")
    _claim(checker, "s2", None)  # an ordinary claim never takes the second
    assert [v.invariant for v in found] == ["fifo-one-active"]
