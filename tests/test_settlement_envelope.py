"""The settlement's record digest is over its record envelope (as the peer implementation has it:
``recordDigest = digestJson(encode(RecordEnvelope))``), and the log's
settlement record is byte-equal to the reserved one (as the peer implementation requires), also
when a successor appends its predecessor's reservation after a crash
between reserve and append (persistence §3: "reserve settlement -> append
exact canonical record -> finalize ledger"). Both adapters.

The expected envelope is written out here, not built by the model's helper.
"""
from __future__ import annotations

import pytest

from model.canonical import canonical_json, digest
from model.conversation.records import FencedAppendRequest, RecordEnvelope
from model.failpoints import RESERVED_BEFORE_APPEND
from model.lifecycle import SubmissionLifecycle, settle_batch_id
from scenarios.storage import run_sync as drive
from tests.test_lifecycle import C, DONE, LEASE_MS, World
from tests.fakes import Crash, CrashAt

RECEIPT = "rcpt-test"  # the ledger checks the settlement's own ids, not its receipt


@pytest.fixture(params=["memory", "sqlite"])
def world(request, tmp_path):
    w = World(request.param, tmp_path)
    yield w
    w.close()


def producer_append(world, claim):
    """A producer's append port (an exact record is appended as it is)."""
    async def append(batch_id, entry):
        if type(entry) is dict:  # an exact record: appended as it is
            fields = (entry["recordId"], entry["family"], entry["schemaVersion"], entry["createdAt"],
                      entry["deploymentId"], entry["payload"])
        else:
            family, payload = entry
            fields = (f"{batch_id}#0", family, 1, world.ms, "loomsim", payload)
        tail = await world.log.inspect_tail(C)
        await world.log.append(FencedAppendRequest(
            conversation_id=C, batch_id=batch_id, producer_id=claim.owner_id, epoch=claim.epoch,
            expected_tail_seq=tail.tail_seq, expected_tail_digest=tail.tail_digest,
            records=(RecordEnvelope(*fields, claim.owner_id, claim.epoch),)))
    return append


def logged_settlements(world) -> list[dict]:
    """Each settlement record in the log, its envelope without the
    producer's identity and epoch (which the append adds)."""
    out = []
    for record in drive(world.log.read(C, 0, 100)):
        if record.envelope.family == "submission-settled":
            value = record.envelope.to_json()
            value.pop("producerId"), value.pop("epoch")
            out.append(value)
    return out


def test_the_record_digest_is_the_digest_of_the_record_envelope(world):
    life, claim = world.admitted_and_claimed()
    world.ms = 4_000
    terminal = drive(life.terminalize(claim, receipt=RECEIPT, logged=None, reserved=None, fresh=lambda: DONE,
                                      append=producer_append(world, claim), finalized_at_ms=5_000))
    sid = claim.submission_id
    expected = {"createdAt": 4_000, "deploymentId": "loomsim", "family": "submission-settled",
                "payload": {"submissionId": sid, "settlementId": f"settlement:{sid}", "receiptId": RECEIPT, **DONE},
                "recordId": f"settlement:{sid}",
                "schemaVersion": 1}
    assert terminal.reserved.record_digest == digest(expected)
    assert terminal.settlement.record_digest == digest(expected)
    (logged,) = logged_settlements(world)
    assert "recordDigest" not in logged["payload"]  # a digest cannot sit inside what it covers
    stored = drive(world.ledger.get(sid))
    # Byte-equal: the log's record is the reserved record.
    assert canonical_json(logged) == canonical_json(stored.reserved_record) == canonical_json(expected)
    assert stored.reserved_digest == digest(logged)


def test_a_successor_appends_the_reserved_envelope_byte_for_byte(world):
    life, claim = world.admitted_and_claimed()
    life.failpoints = CrashAt(RESERVED_BEFORE_APPEND)
    world.ms = 2_000
    with pytest.raises(Crash):
        drive(life.terminalize(claim, receipt=RECEIPT, logged=None, reserved=None, fresh=lambda: DONE,
                               append=producer_append(world, claim)))
    assert logged_settlements(world) == []
    reserved = drive(world.ledger.get(claim.submission_id))
    # The successor claims later, at another epoch, with another clock.
    world.ms = 2_000 + LEASE_MS + 1
    successor = drive(world.ledger.claim(C, "worker-2", LEASE_MS, world.ms))
    assert successor is not None and successor.epoch > claim.epoch
    drive(world.log.materialize(C, "worker-2", successor.epoch))
    life2 = SubmissionLifecycle(world.ledger, world.log, now_ms=world.now, owner_id="worker-2")
    terminal = drive(life2.terminalize(successor, receipt=RECEIPT, logged=None, reserved=reserved.reserved_record,
                                       fresh=lambda: {"outcome": "aborted"},
                                       append=producer_append(world, successor)))
    (logged,) = logged_settlements(world)
    assert logged["createdAt"] == 2_000  # the reservation's, never re-stamped
    assert canonical_json(logged) == canonical_json(reserved.reserved_record)
    assert terminal.settlement.record_digest == reserved.reserved_digest == digest(logged)
    assert drive(world.log.lookup_batch(C, settle_batch_id(claim.submission_id))) is not None
