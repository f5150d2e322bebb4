"""A queued submission's abort settles through the log, on both adapters.

Queued: ready, never claimed (its lane's head runs, or waits). The abort
stores the durable intent; the aborter then reserves ``aborted`` under the
ledger's ``QueuedAbort`` authority (no claim), appends ``abort:{sid}`` and
``settlement:{sid}`` (batch ``submission-settlement:{sid}``) at the
conversation's current epoch as an administrative producer, and finalizes —
while the head is unsettled (the peer's crash row "abort at
abort:after-intent on a queued non-head"). The head's running owner is not
fenced by that append: it goes on from the tail it reads next (the peer's
settlement publication case with a same-epoch administrative append). A
crashed aborter is finished by a recovery pass (``SettleAborted``, no repair
annotation) or a worker's next scan.
"""
from __future__ import annotations

import pytest

from model.failpoints import ABORT_INTENT_STORED
from model.ledger.records import SettlementConflict
from model.submissions import SubmissionClient, SubmissionWorker, recovery_pass
from scenarios.storage import run_sync as drive  # a call that must not suspend
from tests.fakes import Crash, CrashAt

C = "conv-q"


def _echo(request, index):
    return {"echo": request, "step": index}


def test_a_queued_abort_settles_through_the_log_while_the_head_runs(stores):
    client = SubmissionClient(stores.ledger, stores.log, now_ms=stores.now)
    head = drive(client.submit(C, "p", "k1", {"n": 1}))
    queued = drive(client.submit(C, "p", "k2", {"n": 2}))
    seen = {}

    async def abort_between_steps(submission_id, index):
        # The head's owner is between its steps: the abort of the queued one
        # lands now, at the owner's epoch, by another producer.
        if index == 1 and not seen:
            seen["intent"] = await client.abort(queued.submission_id, "client", "no longer needed")
            seen["queued"] = await stores.ledger.get(queued.submission_id)
            seen["head"] = await stores.ledger.get(head.submission_id)

    worker = SubmissionWorker(stores.ledger, stores.log, "worker-1", lease_ms=60_000, now_ms=stores.now,
                              work=_echo, steps=3, step_delay=abort_between_steps)
    outcome = drive(worker.process_next(C))
    assert outcome.submission_id == head.submission_id and outcome.settlement.outcome == "completed"
    sid = queued.submission_id
    assert seen["intent"].settled_at_ms is None  # an intent: it settled through the log after it
    assert (seen["queued"].outcome, seen["queued"].epoch) == ("aborted", None)
    assert seen["head"].outcome is None  # settled while the head was unsettled
    records = stores.records(C)
    ids = [r.envelope.record_id for r in records]
    assert f"input:{sid}" not in ids
    assert ids.index(f"abort:{sid}") + 1 == ids.index(f"settlement:{sid}")
    assert ids.index(f"settlement:{sid}") < ids.index(f"settlement:{head.submission_id}")
    admin = [r for r in records if r.envelope.record_id in (f"abort:{sid}", f"settlement:{sid}")]
    assert {r.batch_id for r in admin} == {f"submission-settlement:{sid}"}
    assert {(r.envelope.producer_id, r.envelope.epoch) for r in admin} == {("client", outcome.epoch)}
    # The owner was not fenced: its next step landed after the administrative batch.
    assert ids.index(f"settlement:{sid}") < ids.index(f"step:{head.submission_id}:1#0")
    with pytest.raises(SettlementConflict) as info:
        drive(client.abort(sid, "client", "again"))
    assert info.value.existing_outcome == "aborted"


def test_an_aborter_that_died_after_its_intent_is_finished_by_recovery(stores):
    client = SubmissionClient(stores.ledger, stores.log, now_ms=stores.now)
    head = drive(client.submit(C, "p", "k1", {"n": 1}))
    queued = drive(client.submit(C, "p", "k2", {"n": 2}))
    claim = drive(stores.ledger.claim(C, "worker-1", 60_000, stores.now()))
    drive(stores.log.materialize(C, "worker-1", claim.epoch))
    # The aborter dies at abort:after-intent: nothing reserved, nothing logged.
    dies = CrashAt(ABORT_INTENT_STORED)
    aborter = SubmissionClient(stores.ledger, stores.log, now_ms=stores.now, failpoints=dies)
    with pytest.raises(Crash):
        drive(aborter.abort(queued.submission_id, "client", "no longer needed"))
    assert dies.fired and ABORT_INTENT_STORED == "abort:after-intent"
    row = drive(stores.ledger.get(queued.submission_id))
    assert (row.abort_author, row.outcome) == ("client", None)
    assert f"abort:{queued.submission_id}" not in stores.ids(C)
    events = []

    class Recording:
        def emit(self, kind, **fields):
            events.append((kind, fields))

    probe = Recording()
    drive(recovery_pass(stores.log, stores.ledger, probe, now_ms=stores.now))
    decisions = {f["submission"]: (f["decision"], f["disposition"]) for n, f in events if n == "recovery.decision"}
    assert decisions[queued.submission_id] == ("SettleAborted", "repaired")
    assert decisions[head.submission_id] == ("ApplyInput", "repaired")
    assert drive(stores.ledger.get(queued.submission_id)).outcome == "aborted"
    ids = stores.ids(C)
    assert ids.index(f"abort:{queued.submission_id}") < ids.index(f"settlement:{queued.submission_id}")
    with pytest.raises(SettlementConflict):  # a second abort: it is settled
        drive(client.abort(queued.submission_id, "client", "again"))
    # The recovery pass holds no claim: no repair annotation (nothing to append it under).
    assert not [i for i in ids if i.startswith("repair:")]
    assert drive(stores.ledger.get(head.submission_id)).outcome is None


def test_a_lane_no_claim_took_over_waits_for_a_worker_scan(stores):
    """Before any claim the log is at the admission producer's epoch 0, where
    nothing appends: the abort stays an intent until a worker's scan finds
    the lane taken over, and then settles it without waiting for its turn."""
    client = SubmissionClient(stores.ledger, stores.log, now_ms=stores.now)
    head = drive(client.submit(C, "p", "k1", {"n": 1}))
    queued = drive(client.submit(C, "p", "k2", {"n": 2}))
    drive(client.abort(queued.submission_id, "client", "no longer needed"))
    assert drive(stores.ledger.get(queued.submission_id)).outcome is None
    worker = SubmissionWorker(stores.ledger, stores.log, "worker-1", lease_ms=60_000, now_ms=stores.now,
                              work=_echo, steps=0)
    claim = drive(stores.ledger.claim(C, "worker-1", 60_000, stores.now()))
    assert claim.submission_id == head.submission_id
    drive(worker.lifecycle.take_over(C, claim))
    drive(worker.settle_queued_aborts(drive(stores.ledger.scan_nonterminal())))
    assert drive(stores.ledger.get(queued.submission_id)).outcome == "aborted"
    assert drive(stores.ledger.get(head.submission_id)).outcome is None
    assert drive(worker.process(C, claim)).settlement.outcome == "completed"
