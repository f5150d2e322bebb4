"""A worker defers its head and hands the lane over, on both adapters.

A request that asks to be deferred (``"defer": true``: the run parks on
something slow, or its worker is drained) is claimed, its input applied and
marked, then released unsettled; the worker claims the next ready
submission with a cooperative handoff and carries it to settlement. The
deferred head waits: an ordinary claim takes it again (the FIFO head once
more) and its run resumes from the log — its input record is there once,
never applied again — and settles after its successor.
"""
from __future__ import annotations

import pytest

from model.submissions import SubmissionClient, SubmissionWorker, handed_over, recovery_pass
from scenarios.storage import run_sync as drive  # a call that must not suspend

C = "conv-h"


def _echo(request, index):
    return {"echo": request, "step": index}


def _worker(stores, owner):
    return SubmissionWorker(stores.ledger, stores.log, owner, lease_ms=60_000, now_ms=stores.now, work=_echo, steps=2)


def test_a_deferred_head_hands_the_lane_over_and_resumes_from_the_log(stores):
    client = SubmissionClient(stores.ledger, stores.log, now_ms=stores.now)
    head = drive(client.submit(C, "p", "k1", {"n": 1, "defer": True})).submission_id
    nxt = drive(client.submit(C, "p", "k2", {"n": 2})).submission_id

    outcome = drive(_worker(stores, "worker-1").process_next(C))
    # The lane went to the next one, which settled while the head waits.
    assert outcome is not None and outcome.submission_id == nxt and outcome.settlement.outcome == "completed"
    deferred = drive(stores.ledger.get(head))
    assert deferred.outcome is None and deferred.owner_id is None and deferred.input_applied
    assert drive(stores.ledger.get(nxt)).epoch > deferred.epoch  # the handoff's claim: a new epoch
    scan = drive(stores.ledger.scan_nonterminal())
    assert [row.submission_id for row in scan] == [head]

    # An ordinary claim takes the deferred head again; it resumes, defers no more.
    again = drive(_worker(stores, "worker-2").process_next(C))
    assert again is not None and again.submission_id == head and again.settlement.outcome == "completed"
    ids = stores.ids(C)
    assert ids.count(f"input:{head}") == 1 and ids.count(f"input:{nxt}") == 1
    assert ids.index(f"input:{head}") < ids.index(f"input:{nxt}") < ids.index(f"settlement:{nxt}") \
        < ids.index(f"settlement:{head}")
    (settled,) = [r.envelope.payload for r in drive(stores.log.read(C, 0, 1_000))
                  if r.envelope.record_id == f"settlement:{head}"]
    assert settled["result"] == {"outputs": [_echo({"n": 1, "defer": True}, i) for i in (0, 1)]}


def test_a_deferred_head_with_nothing_behind_it_waits_for_an_ordinary_claim(stores):
    client = SubmissionClient(stores.ledger, stores.log, now_ms=stores.now)
    head = drive(client.submit(C, "p", "k1", {"n": 1, "defer": True})).submission_id
    assert drive(_worker(stores, "worker-1").process_next(C)) is None  # released: no one to hand over to
    row = drive(stores.ledger.get(head))
    assert row.outcome is None and row.owner_id is None and row.input_applied
    again = drive(_worker(stores, "worker-1").process_next(C))
    assert again.submission_id == head and again.settlement.outcome == "completed"
    assert stores.ids(C).count(f"input:{head}") == 1


def test_a_handed_over_lane_is_left_to_its_successor_until_it_settles(stores):
    """While the successor runs under a live lease, a polling worker leaves
    the lane alone (an ordinary claim would take the deferred head and fence
    the successor's log writes): ``handed_over`` says so from the scan."""
    client = SubmissionClient(stores.ledger, stores.log, now_ms=stores.now)
    head = drive(client.submit(C, "p", "k1", {"n": 1, "defer": True})).submission_id
    nxt = drive(client.submit(C, "p", "k2", {"n": 2})).submission_id
    seen = []

    async def look(submission_id, index):
        if submission_id == nxt and index == 0:
            seen.append(handed_over(await stores.ledger.scan_nonterminal(), C, stores.ms))

    worker = SubmissionWorker(stores.ledger, stores.log, "worker-1", lease_ms=60_000, now_ms=stores.now,
                              work=_echo, steps=2, step_delay=look)
    drive(worker.process_next(C))
    assert seen == [True]
    assert handed_over(drive(stores.ledger.scan_nonterminal()), C, stores.ms) is False
    assert drive(stores.ledger.get(head)).outcome is None


class _Probe:
    def __init__(self) -> None:
        self.decisions: dict[str, tuple[str, str]] = {}

    def emit(self, kind, **fields) -> None:
        if kind == "recovery.decision":
            self.decisions[fields["submission"]] = (fields["decision"], fields["disposition"])


def test_recovery_classifies_a_deferred_head_and_the_lane_it_handed_over(stores):
    """A crash after the deferral: the deferred head (input applied, released)
    resumes from the log at its turn (``ResumeFromTurnBoundary``, deferred);
    the successor the handoff claimed is applied by its next claim."""
    client = SubmissionClient(stores.ledger, stores.log, now_ms=stores.now)
    head = drive(client.submit(C, "p", "k1", {"n": 1, "defer": True})).submission_id
    nxt = drive(client.submit(C, "p", "k2", {"n": 2})).submission_id
    later = drive(client.submit(C, "p", "k3", {"n": 3})).submission_id
    probe = _Probe()

    async def crash_in_successor(submission_id, index):
        if submission_id == nxt:
            await recovery_pass(stores.log, stores.ledger, probe)  # what a restarted process would see
            raise _Crash

    worker = SubmissionWorker(stores.ledger, stores.log, "worker-1", lease_ms=60_000, now_ms=stores.now,
                              work=_echo, steps=2, step_delay=crash_in_successor)
    with pytest.raises(_Crash):
        drive(worker.process_next(C))
    assert probe.decisions == {head: ("ResumeFromTurnBoundary", "deferred"),
                               nxt: ("ResumeFromTurnBoundary", "deferred"),
                               later: ("AwaitQueueTurn", "deferred")}


class _Crash(BaseException):
    pass
