"""The peer implementation's deterministic ids, record order and digests,
where the specification leaves them open: a history written here reads the
same in the peer's implementation (issue 29).

Ids: the input batch ``submission-input:{sid}`` holds the record
``input:{sid}``; the settlement batch ``submission-settlement:{sid}`` holds
the record ``settlement:{sid}``, and the settlement id is the same string;
an abort that decided a settlement is the record ``abort:{sid}``.
"""
from __future__ import annotations

from model.conversation.memory_store import InMemoryConversationStore
from model.ledger.memory_store import InMemorySubmissionLedger
from model.submissions import SubmissionClient, SubmissionWorker
from scenarios.storage import run_sync as drive

LEASE_MS = 30_000


def _world():
    ledger, log = InMemorySubmissionLedger(), InMemoryConversationStore()
    clock = [1_000]
    now = lambda: clock[0]  # noqa: E731
    return ledger, log, now


def test_input_and_settlement_ids_are_the_peers():
    ledger, log, now = _world()
    client = SubmissionClient(ledger, log, now_ms=now)
    sid = drive(client.submit("c1", "p", "k1", {"x": 1})).submission_id
    worker = SubmissionWorker(ledger, log, "w1", lease_ms=LEASE_MS, now_ms=now, work=lambda value, i: i, steps=1)
    outcome = drive(worker.process_next("c1"))
    records = drive(log.read("c1", 0, 100))
    ids = [(r.batch_id, r.envelope.record_id, r.envelope.family) for r in records]
    assert ids[0] == (f"submission-input:{sid}", f"input:{sid}", "input")
    assert ids[-1] == (f"submission-settlement:{sid}", f"settlement:{sid}", "submission-settled")
    row = drive(ledger.get(sid))
    assert (row.input_record_id, row.input_seq) == (f"input:{sid}", 1)
    assert outcome.settlement.settlement_id == f"settlement:{sid}" == row.settlement_id


def test_an_aborted_settlement_carries_the_abort_record():
    ledger, log, now = _world()
    client = SubmissionClient(ledger, log, now_ms=now)
    sid = drive(client.submit("c1", "p", "k1", {"x": 1})).submission_id
    from model.agent import AgentWorker  # the agent writes the abort beside the settlement

    class Never:
        async def invoke(self, *args):
            raise AssertionError("no tool runs")

    worker = AgentWorker(ledger, log, "w1", lease_ms=LEASE_MS, now_ms=now, work=lambda value, i: i,
                         tools=Never(), model=Never(), model_profile={}, child_plan=lambda record, index: [])
    claim = drive(ledger.claim("c1", "w1", LEASE_MS, now()))
    drive(ledger.request_abort(sid, "ops", "not needed", now()))
    drive(worker.process("c1", claim))
    records = drive(log.read("c1", 0, 100))
    settlement = [(r.envelope.record_id, r.envelope.family) for r in records
                  if r.batch_id == f"submission-settlement:{sid}"]
    assert (f"abort:{sid}", "abort-requested") in settlement
    assert (f"settlement:{sid}", "submission-settled") in settlement
