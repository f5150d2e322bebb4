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
    assert ids[1] == (f"submission-input:{sid}", f"input:{sid}", "input")  # after the created record
    assert ids[-1] == (f"submission-settlement:{sid}", f"settlement:{sid}", "submission-settled")
    row = drive(ledger.get(sid))
    assert (row.input_record_id, row.input_seq) == (f"input:{sid}", 2)
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


# --- the records the peer requires (issue 29, defect 8) -----------------------------


class FakeModel:
    async def stream(self, call, request):
        return [{"kind": "text", "text": "hi"},
                {"kind": "completed", "usage": {"inputTokens": 1, "outputTokens": 1, "costMicros": 1}}]


class FakeTools:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls = 0

    async def invoke(self, call, tool, args, key, deadline_ms):
        self.calls += 1
        if self.fail:
            raise ConnectionError("the reply is lost")
        return {"ok": call}


def _agent(ledger, log, now, tools=None):
    from model.agent import AgentWorker
    return AgentWorker(ledger, log, "w1", lease_ms=LEASE_MS, now_ms=now, work=lambda value, i: i,
                       tools=tools or FakeTools(), model=FakeModel(), model_profile={"provider": "p"},
                       child_plan=lambda record, index: [])


def _records(log, cid="c1"):
    return [(r.batch_id, r.envelope.record_id, r.envelope.family, r.envelope.payload)
            for r in drive(log.read(cid, 0, 1000))]


def test_the_conversation_created_record_is_the_first():
    ledger, log, now = _world()
    client = SubmissionClient(ledger, log, now_ms=now)
    sid = drive(client.submit("c1", "p", "k1", {"x": 1})).submission_id
    worker = SubmissionWorker(ledger, log, "w1", lease_ms=LEASE_MS, now_ms=now, work=lambda value, i: i, steps=1)
    drive(worker.process_next("c1"))
    sid2 = drive(client.submit("c1", "p", "k2", {"x": 2})).submission_id
    drive(worker.process_next("c1"))
    records = _records(log)
    assert records[0][:3] == ("conversation-created:c1", "conversation-created:c1", "conversation-created")
    assert records[0][3]["conversationId"] == "c1"
    assert [r[1] for r in records].count("conversation-created:c1") == 1  # once per conversation
    assert records[1][1] == f"input:{sid}"
    assert drive(ledger.get(sid)).input_seq == 2
    assert drive(ledger.get(sid2)).input_seq == [r[1] for r in records].index(f"input:{sid2}") + 1


def test_a_completed_run_writes_run_completed_before_its_settlement():
    ledger, log, now = _world()
    client = SubmissionClient(ledger, log, now_ms=now)
    sid = drive(client.submit("c1", "p", "k1", {"plan": ["model"]})).submission_id
    outcome = drive(_agent(ledger, log, now).process_next("c1"))
    assert outcome.settlement.outcome == "completed"
    families = [r[2] for r in _records(log)]
    completed = [r for r in _records(log) if r[2] == "run-completed"]
    assert len(completed) == 1
    assert completed[0][3]["runId"] == f"run:{sid}"
    assert families.index("run-completed") < families.index("submission-settled")
    settled = [r for r in _records(log) if r[2] == "submission-settled"]
    assert settled[0][3]["runId"] == f"run:{sid}"


def test_a_resolved_unknown_call_writes_tool_call_resolved():
    ledger, log, now = _world()
    client = SubmissionClient(ledger, log, now_ms=now)
    sid = drive(client.submit("c1", "p", "k1", {"plan": ["tool-once"]})).submission_id
    assert drive(_agent(ledger, log, now, FakeTools(fail=True)).process_next("c1")) is None  # unknown: parked
    call = next(r[3]["call"] for r in _records(log) if r[2] == "tool-call" and r[3]["phase"] == "unknown")
    drive(ledger.resolve_unknown(sid, call, "CompletedWithResult", "reconciler", {"confirmation": "c"}, now()))
    outcome = drive(_agent(ledger, log, now).process_next("c1"))
    assert outcome.settlement.outcome == "completed"
    resolved = [r for r in _records(log) if r[2] == "tool-call" and r[3]["phase"] == "resolved"]
    assert len(resolved) == 1
    assert (resolved[0][3]["resolution"], resolved[0][3]["author"], resolved[0][3]["call"]) == (
        "completed-with-result", "reconciler", call)
    settled = [r for r in _records(log) if r[2] == "tool-call" and r[3]["phase"] == "settled"]
    assert settled[0][3]["output"]["isFailure"] is False
    phases = [r[3]["phase"] for r in _records(log) if r[2] == "tool-call"]
    assert phases.index("resolved") < phases.index("settled")


def test_a_joined_followers_settlement_carries_the_hosts_run_id():
    ledger, log, now = _world()
    client = SubmissionClient(ledger, log, now_ms=now)
    host = drive(client.submit("c1", "p", "k1", {"plan": ["model"], "joins": True})).submission_id
    follower = drive(client.submit("c1", "p", "k2", {"plan": ["model"]})).submission_id
    drive(_agent(ledger, log, now).process_next("c1"))
    assert drive(ledger.get(follower)).outcome == "completed"
    settled = {r[3]["submissionId"]: r for r in _records(log) if r[2] == "submission-settled"}
    assert settled[follower][3]["runId"] == f"run:{host}"
    assert settled[follower][0] == f"submission-settlement:{host}"
    assert settled[host][3]["runId"] == f"run:{host}"


# --- the record envelope and the checkpoint on the wire (issue 29) -----------------


def test_a_record_envelope_is_the_peers_createdAt_envelope_with_its_key_order():
    """The envelope's timestamp is ``createdAt`` (epoch milliseconds, an
    integer), and its canonical text sorts ``createdAt, deploymentId,
    family, payload, recordId, schemaVersion`` as the peer's does."""
    import hashlib

    from model.conversation.records import RecordEnvelope

    envelope = RecordEnvelope("r1", "input", 1, 1, "loomsim", {"kind": "user"})
    text = '{"createdAt":1,"deploymentId":"loomsim","family":"input","payload":{"kind":"user"},"recordId":"r1","schemaVersion":1}'
    assert envelope.canonical_text() == text
    # The test vector: sha256 of that text's UTF-8 bytes, by hand.
    assert hashlib.sha256(text.encode()).hexdigest() == \
        "36d22e1f3da4e599d45767deecb66758e7b0d0a8199bfb6f457f63afb10670f2"
    from model.canonical import digest
    assert digest(envelope.to_json()) == hashlib.sha256(text.encode()).hexdigest()


def test_every_envelope_the_model_writes_has_createdAt_and_no_createdAtMs():
    ledger, log, now = _world()
    client = SubmissionClient(ledger, log, now_ms=now)
    drive(client.submit("c1", "p", "k1", {"plan": ["model"]}))
    drive(_agent(ledger, log, now).process_next("c1"))
    records = drive(log.read("c1", 0, 1000))
    assert records
    for record in records:
        text = record.envelope.canonical_text()
        assert text.startswith('{"createdAt":') and "createdAtMs" not in text, text
        assert type(record.envelope.to_json()["createdAt"]) is int
    reserved = drive(ledger.get(records[-1].envelope.payload["submissionId"])).reserved_record
    assert reserved is None or ("createdAt" in reserved and "createdAtMs" not in reserved)


def test_a_checkpoint_is_the_peers_checkpoint_shape():
    """The peer's checkpoint keys where the two name the same thing
    (``throughSequence``, ``agentDefinitionDigest``, ``modelDigest``,
    ``toolDigest``, ``state``, ``createdAt``), plus the submission identity
    the model keeps."""
    from model.conversation.checkpoints import Checkpoint, decode_checkpoint_row
    from model.canonical import canonical_json, digest

    checkpoint = Checkpoint("c1", "s1", 3, "0" * 64, "e1", "d1", "m1", "t1", 1, {"at": 3}, 1)
    value = checkpoint.to_json()
    assert sorted(value) == ["agentDefinitionDigest", "conversationId", "createdAt", "engineVersion",
                             "modelDigest", "schemaVersion", "state", "submissionId", "tailDigest",
                             "throughSequence", "toolDigest"]
    assert (value["throughSequence"], value["state"], value["createdAt"]) == (3, {"at": 3}, 1)
    assert (value["modelDigest"], value["toolDigest"]) == ("m1", "t1")
    text = canonical_json(value)
    assert decode_checkpoint_row("c1", text, digest(value)) == checkpoint


# --- the settled payload the peer writes (issue 29) --------------------------------


def _settled(log, sid, cid="c1"):
    return next(r.envelope.payload for r in drive(log.read(cid, 0, 1000))
                if r.envelope.family == "submission-settled" and r.envelope.payload["submissionId"] == sid)


def test_a_completed_settlement_is_the_peers_flat_payload():
    """``{submissionId, settlementId, receiptId, outcome, result, runId}``:
    the outcome record's members at the top level, no nested ``record``."""
    from model.ledger.records import settlement_of

    ledger, log, now = _world()
    client = SubmissionClient(ledger, log, now_ms=now)
    sid = drive(client.submit("c1", "p", "k1", {"plan": ["model"]})).submission_id
    drive(_agent(ledger, log, now).process_next("c1"))
    row = drive(ledger.get(sid))
    payload = _settled(log, sid)
    assert "record" not in payload
    assert (payload["submissionId"], payload["settlementId"], payload["receiptId"], payload["outcome"],
            payload["runId"]) == (sid, f"settlement:{sid}", row.receipt, "completed", f"run:{sid}")
    assert "result" in payload
    assert settlement_of(row.reserved_record) == {k: v for k, v in payload.items()
                                                  if k not in ("submissionId", "settlementId", "receiptId", "runId")}


def test_a_failed_settlement_carries_the_diagnostic_at_the_top_level():
    ledger, log, now = _world()
    client = SubmissionClient(ledger, log, now_ms=now)
    sid = drive(client.submit("c1", "p", "k1", {"x": 1})).submission_id

    def work(value, index):
        from model.submissions import WorkFailure
        raise WorkFailure(ValueError("it broke"))

    worker = SubmissionWorker(ledger, log, "w1", lease_ms=LEASE_MS, now_ms=now, work=work, steps=1)
    assert drive(worker.process_next("c1")).settlement.outcome == "failed"
    payload = _settled(log, sid)
    assert payload["outcome"] == "failed" and set(payload["diagnostic"]) == {"errorTag", "message"}
    assert "result" not in payload and "record" not in payload and "runId" not in payload
    assert (payload["settlementId"], payload["receiptId"]) == (f"settlement:{sid}", drive(ledger.get(sid)).receipt)


def test_a_queued_abort_settles_with_no_run_and_no_result():
    ledger, log, now = _world()
    client = SubmissionClient(ledger, log, now_ms=now)
    sid = drive(client.submit("c1", "p", "k1", {"x": 1})).submission_id
    drive(client.abort(sid, "ops", "not needed"))
    row = drive(ledger.get(sid))
    assert row.outcome == "aborted"
    assert _settled(log, sid) == {"submissionId": sid, "settlementId": f"settlement:{sid}",
                                  "receiptId": row.receipt, "outcome": "aborted"}


def test_a_joined_followers_settlement_is_its_own_receipt_and_its_hosts_run():
    ledger, log, now = _world()
    client = SubmissionClient(ledger, log, now_ms=now)
    host = drive(client.submit("c1", "p", "k1", {"plan": ["model"], "joins": True})).submission_id
    follower = drive(client.submit("c1", "p", "k2", {"plan": ["model"]})).submission_id
    drive(_agent(ledger, log, now).process_next("c1"))
    payload = _settled(log, follower)
    assert payload == {"submissionId": follower, "settlementId": f"settlement:{follower}",
                       "receiptId": drive(ledger.get(follower)).receipt, "outcome": "completed",
                       "runId": f"run:{host}"}


def test_the_ledger_refuses_a_settlement_without_the_peers_identity_members():
    from model.ledger.records import InvalidSettlement
    from model.ledger.rules import check_settlement_shape
    import pytest

    good = {"recordId": "settlement:s", "family": "submission-settled", "schemaVersion": 1, "createdAt": 1,
            "deploymentId": "loomsim", "payload": {"submissionId": "s", "settlementId": "settlement:s",
                                                    "receiptId": "rcpt-1", "outcome": "completed"}}
    check_settlement_shape("s", good)
    for bad in ({"settlementId": None}, {"receiptId": None}, {"settlementId": "settlement:t"}, {"receiptId": 7},
                {"receiptId": ""}, {"runId": 7}):
        payload = {k: v for k, v in {**good["payload"], **bad}.items() if v is not None}
        with pytest.raises(InvalidSettlement):
            check_settlement_shape("s", {**good, "payload": payload})
    with pytest.raises(InvalidSettlement):  # the old nested shape
        check_settlement_shape("s", {**good, "payload": {"submissionId": "s", "record": {"outcome": "completed"}}})
