"""The peer implementation's deterministic ids for a run's turns (issue 29):
the n-th model turn of run ``run:{sid}`` is the batch
``turn:run:{sid}:{n}`` (``turn:{runId}:{n}``, n from 1), whatever other
steps sit between the turns; a successor finds the turn by that id and
never asks the model again for it.

The abort record ``abort:{sid}`` only ever travels inside its submission's
settlement batch (``submission-settlement:{sid}``): the model never appends
an abort on its own, so the peer's ``submission-abort:{sid}`` batch has no
counterpart here (``tests/test_peer_formats.py`` checks the record's id).
"""
from __future__ import annotations

from model.agent import MODEL, TOOL, AgentWorker, turn_batch_id
from model.conversation.memory_store import InMemoryConversationStore
from model.ledger.memory_store import InMemorySubmissionLedger
from model.lifecycle import ABORT_REQUESTED_FAMILY, run_id_for
from model.submissions import SubmissionClient
from scenarios.storage import run_sync as drive

LEASE_MS = 30_000


class Model:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def stream(self, call, request):
        self.calls.append(call)
        return [{"kind": "text", "text": f"answer to {call}"},
                {"kind": "completed", "usage": {"inputTokens": 1, "outputTokens": 1, "costMicros": 1}}]


class Tools:
    async def invoke(self, call_id, tool, args, key, deadline_ms):
        return {"tool": tool, "call": call_id}


def _run(plan):
    ledger, log = InMemorySubmissionLedger(), InMemoryConversationStore()
    clock = [1_000]

    def now():
        clock[0] += 1
        return clock[0]

    client = SubmissionClient(ledger, log, now_ms=now)
    sid = drive(client.submit("c1", "p", "k1", {"n": 1, "plan": plan, "maxDurationMs": 10 ** 9})).submission_id
    model = Model()
    worker = AgentWorker(ledger, log, "w1", lease_ms=LEASE_MS, now_ms=now, work=None, tools=Tools(), model=model,
                         model_profile={"provider": "p", "model": "m", "tier": "t"},
                         child_plan=lambda record, index: [])
    outcome = drive(worker.process_next("c1"))
    assert outcome is not None and outcome.settlement.outcome == "completed", outcome
    return sid, drive(log.read("c1", 0, 1_000)), model


def test_turn_id_format():
    assert turn_batch_id("run:s1", 1) == "turn:run:s1:1"


def test_a_runs_turns_are_numbered_from_one_in_the_peers_format():
    sid, records, model = _run([MODEL, TOOL, MODEL])
    run_id = run_id_for(sid)
    turns = sorted({r.batch_id for r in records if r.batch_id.startswith("turn:")})
    assert turns == [f"turn:{run_id}:1", f"turn:{run_id}:2"]
    assert not [r for r in records if r.batch_id.startswith("model-turn:")]
    # Each turn batch holds that turn's completion (the model asked once per turn).
    completed = [r for r in records if r.envelope.family == "model-completed"]
    assert [r.batch_id for r in completed] == [f"turn:{run_id}:1", f"turn:{run_id}:2"]
    assert len(model.calls) == 2


def test_no_abort_record_outside_a_settlement_batch():
    sid, records, _ = _run([MODEL])
    assert not [r for r in records if r.envelope.family == ABORT_REQUESTED_FAMILY]
    assert not [r for r in records if r.batch_id.startswith("submission-abort:")]
