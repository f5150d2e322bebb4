"""The agent worker's settlements, one submission at a time (both adapters).

Covered: the settlement batch of an aborted running submission holds the
abort before the settlement; a rejected approval settles the run ``failed``
and no later step (the guarded tool) runs, also for a successor that finds
the decision already logged; an aborted parent releases a reservation whose
child was never admitted, aborts an admitted child as
``subagent-parent-abort`` and logs the child's joined outcome before its own
settlement.
"""
from __future__ import annotations

import pytest

from model.agent import (
    ABORT_REQUESTED_FAMILY,
    APPROVAL,
    MODEL,
    SUBAGENT,
    SUBAGENT_FAMILY,
    SUBAGENT_JOINED,
    TOOL,
    AgentWorker,
    child_conversation_id,
    step_call_id,
)
from model.failpoints import APPROVAL_DECIDED_BEFORE_EFFECT, RESERVED_BEFORE_APPEND
from model.lifecycle import SETTLED_FAMILY, SubmissionLifecycle, settle_batch_id
from model.ledger.records import settlement_of

SUBAGENT_PARENT_ABORT = "subagent-parent-abort"
from scenarios.storage import run_sync as drive
from tests.fakes import Stores

C = "conv-1"
LEASE_MS = 30_000


class Tools:
    def __init__(self, world) -> None:
        self.world = world
        self.calls: list[str] = []
        self.on_call = None

    async def invoke(self, call_id, tool, args, key, deadline_ms):
        self.calls.append(call_id)
        if self.on_call is not None:
            await self.on_call()
        return {"tool": tool, "call": call_id}


class Model:
    async def stream(self, call_id, request):
        return [{"kind": "text", "text": f"answer to {call_id}"},
                {"kind": "completed", "usage": {"inputTokens": 1, "outputTokens": 1, "costMicros": 1}}]


class World(Stores):
    def __init__(self, kind: str, tmp_path) -> None:
        super().__init__(kind, tmp_path, "agent.db")
        self.tools = Tools(self)

    def now(self) -> int:
        self.ms += 1
        return self.ms

    def worker(self, owner: str = "w1", child_plan=lambda record, index: [MODEL], model_profile=None,
               **settings) -> AgentWorker:
        return AgentWorker(self.ledger, self.log, owner, lease_ms=LEASE_MS, now_ms=self.now, tools=self.tools,
                           model=Model(), model_profile=model_profile or {"provider": "p", "model": "m", "tier": "t"},
                           child_plan=child_plan, work=None, **settings)

    def submit(self, plan: list, conversation: str = C, key: str = "k1", **extra) -> str:
        life = SubmissionLifecycle(self.ledger, self.log, now_ms=self.now)
        admission = drive(life.admit(conversation, "p", key, {"n": 1, "plan": plan, "maxDurationMs": 10 ** 9,
                                                              **extra},
                                     self.ms, complete_replay=True))
        return admission.submission_id

    def records(self, conversation: str = C) -> list:
        return drive(self.log.read(conversation, 0, 1_000))

    def families(self, conversation: str = C) -> list[str]:
        return [r.envelope.family for r in self.records(conversation)]

    def settle_batch(self, sid: str, conversation: str = C) -> list:
        batch = drive(self.log.lookup_batch(conversation, settle_batch_id(sid)))
        assert batch is not None, sid
        return [r for r in self.records(conversation) if batch.first_seq <= r.seq <= batch.last_seq]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


@pytest.fixture(params=["memory", "sqlite"])
def world(request, tmp_path):
    w = World(request.param, tmp_path)
    yield w
    w.close()


# --- an aborted running submission's settlement batch --------------------------------


def test_the_abort_is_in_the_settlement_batch_before_the_settlement(world):
    sid = world.submit([TOOL, MODEL])

    async def abort_from_another_process():
        await world.ledger.request_abort(sid, "operator", "stop it", world.now())

    world.tools.on_call = abort_from_another_process
    outcome = drive(world.worker().process_next(C))
    assert outcome.settlement.outcome == "aborted"
    batch = world.settle_batch(sid)
    assert [r.envelope.family for r in batch] == [ABORT_REQUESTED_FAMILY, SETTLED_FAMILY]
    assert batch[0].envelope.payload["author"] == "operator"
    assert settlement_of(batch[1].envelope.to_json()) == {"outcome": "aborted"}
    assert "model-completed" not in world.families()  # the model step never ran
    # A successor that finds the batch logged reads its settlement from it.
    drive(world.ledger.get(sid)).settled


# --- a rejected approval --------------------------------------------------------------


def _suspend_on_approval(world):
    sid = world.submit([APPROVAL, TOOL])
    assert drive(world.worker().process_next(C)) is None  # parked on the approval
    call = step_call_id(sid, 0)
    return sid, call


def test_a_rejected_approval_fails_the_run_and_the_guarded_tool_never_runs(world):
    sid, call = _suspend_on_approval(world)
    drive(world.ledger.decide_approval(sid, call, "rejected", "alice", "not now", world.now()))
    outcome = drive(world.worker("w2").process_next(C))
    assert outcome.settlement.outcome == "failed"
    record = drive(world.ledger.get(sid))
    assert settlement_of(record.reserved_record)["diagnostic"]["errorTag"] == "ApprovalRejected"
    assert world.tools.calls == []  # the tool step never started
    families = world.families()
    assert "model-output" not in families  # nothing acted on the rejected approval
    assert not any(r.envelope.family == "tool-call" and r.envelope.payload["phase"] in ("requested", "prepared")
                   for r in world.records())
    decided = [r.envelope.payload for r in world.records()
               if r.envelope.family == "tool-call" and r.envelope.payload["phase"] == "approval-decided"]
    assert [d["decision"] for d in decided] == ["rejected"]


class Crash(Exception):
    pass


class CrashAt:
    def __init__(self, point: str) -> None:
        self.point = point

    def hit(self, name: str) -> None:
        if name == self.point:
            raise Crash(name)


def test_a_successor_that_finds_the_rejection_logged_fails_the_run_too(world):
    sid, call = _suspend_on_approval(world)
    drive(world.ledger.decide_approval(sid, call, "rejected", "alice", "not now", world.now()))
    dying = world.worker("w2", failpoints=CrashAt(APPROVAL_DECIDED_BEFORE_EFFECT))
    with pytest.raises(Crash):
        drive(dying.process_next(C))  # the decision is in the log, not acted on
    world.ms += LEASE_MS + 1
    outcome = drive(world.worker("w3").process_next(C))
    assert outcome.settlement.outcome == "failed"
    assert world.tools.calls == [] and "model-output" not in world.families()


def test_a_successor_of_a_reserved_failure_runs_no_step_again(world):
    """The owner reserved the failed record and died before appending it: the
    successor settles with it and runs nothing again (a host does not join
    follow-ups behind a reserved record: the ledger refuses it)."""
    sid = world.submit([APPROVAL, TOOL], joins=True)
    assert drive(world.worker().process_next(C)) is None
    call = step_call_id(sid, 0)
    world.submit([MODEL], key="k2")  # a follow-up queued behind it
    drive(world.ledger.decide_approval(sid, call, "rejected", "alice", "not now", world.now()))
    dying = world.worker("w2", failpoints=CrashAt(RESERVED_BEFORE_APPEND))
    with pytest.raises(Crash):
        drive(dying.process_next(C))
    world.ms += LEASE_MS + 1
    outcome = drive(world.worker("w3").process_next(C))
    assert outcome.settlement.outcome == "failed"
    assert world.tools.calls == []


def test_an_approved_approval_goes_on_to_the_tool(world):
    sid, call = _suspend_on_approval(world)
    drive(world.ledger.decide_approval(sid, call, "approved", "alice", "fine", world.now()))
    outcome = drive(world.worker("w2").process_next(C))
    assert outcome.settlement.outcome == "completed"
    assert len(world.tools.calls) == 1


# --- an aborted parent's subagents ----------------------------------------------------


def _parent_waiting_on_child(world):
    sid = world.submit([SUBAGENT])
    assert drive(world.worker().process_next(C)) is None  # parked, waiting for its child
    call = step_call_id(sid, 0)
    parent = drive(world.ledger.get(sid))
    child_id = parent.children[call]["child"]
    assert child_id is not None
    return sid, call, child_id


def test_an_aborted_parent_aborts_its_child_and_logs_its_joined_outcome_first(world):
    sid, call, child_id = _parent_waiting_on_child(world)
    drive(world.ledger.request_abort(sid, "operator", "stop it", world.now()))
    outcome = drive(world.worker("w2").process_next(C))
    assert outcome.settlement.outcome == "aborted"
    child = drive(world.ledger.get(child_id))
    assert child.outcome == "aborted"
    assert child.abort_author == SUBAGENT_PARENT_ABORT
    batch = world.settle_batch(sid)
    assert [r.envelope.family for r in batch] == [ABORT_REQUESTED_FAMILY, SUBAGENT_FAMILY, SETTLED_FAMILY]
    joined = batch[1].envelope.payload
    assert (joined["phase"], joined["call"], joined["child"], joined["outcome"]) == (
        SUBAGENT_JOINED, call, child_id, "aborted")
    # The child never ran and its reservation is released with its accounting.
    entry = drive(world.ledger.get(sid)).children[call]
    assert entry["releasedAtMs"] is not None and entry["accounting"]["outcome"] == "aborted"


def test_an_aborted_parent_releases_an_orphan_reservation(world):
    """The parent reserved a child budget and died before admitting the child."""
    sid = world.submit([SUBAGENT])
    worker = world.worker()
    claim = drive(world.ledger.claim(C, "w1", LEASE_MS, world.now()))
    drive(worker.lifecycle.take_over(C, claim))
    record = drive(world.ledger.get(sid))
    drive(world.ledger.mark_input_applied(claim, f"input:{sid}#0", 1))
    call = step_call_id(sid, 0)
    allocation = {"steps": 1, "principal": "agent", "conversation": child_conversation_id(C, record.queue_seq, 0)}
    drive(world.ledger.reserve_child(claim, call, allocation))
    world.ms += LEASE_MS + 1  # the owner died
    drive(world.ledger.request_abort(sid, "operator", "stop it", world.now()))
    outcome = drive(world.worker("w2").process_next(C))
    assert outcome.settlement.outcome == "aborted"
    entry = drive(world.ledger.get(sid)).children[call]
    assert entry["child"] is None
    assert entry["releasedAtMs"] is not None, entry  # released, not left reserved
    assert entry["accounting"]["child"] is None
    # No child was ever admitted, and none is admitted afterwards.
    assert drive(world.ledger.get_by_idempotency_key(allocation["conversation"], "agent", call)) is None
    assert [r.envelope.family for r in world.settle_batch(sid)] == [ABORT_REQUESTED_FAMILY, SETTLED_FAMILY]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_checkpoint_of_another_model_or_tool_configuration_is_rebuilt_from_the_log(kind, tmp_path):
    """A worker's recovery checkpoints carry the canonical digests of its
    model configuration and of its tool set; a recovery under another model
    configuration, or another tool set, reads the log whole and says why
    (``model-digest``, ``tool-digest``): the old checkpoint is never used."""
    from model.canonical import digest
    from model.conversation.checkpoints import InMemoryCheckpointStore, SqliteCheckpointStore
    from model.submissions import recovery_pass

    world = World(kind, tmp_path)
    checkpoints = InMemoryCheckpointStore(world.log) if kind == "memory" else SqliteCheckpointStore(world.log)
    world.submit([MODEL])
    drive(world.worker().process_next(C))  # settled: the log has its records
    world.submit([MODEL], key="k2")  # open work: the recovery reads the conversation
    reads = []

    class Probe:
        def emit(self, kind, **fields):
            if kind == "recovery.read":
                reads.append(fields)

    def recover(worker):
        drive(recovery_pass(worker.log, worker.ledger, Probe(), checkpoints=checkpoints, now_ms=world.now,
                            definition_digest=worker.definition_digest, model_digest=worker.model_digest,
                            tool_digest=worker.tool_digest))
        return reads[-1]

    profile, tools = {"provider": "p", "model": "m", "tier": "t"}, {"search": {"version": 1}}
    first = world.worker(tool_set=tools)
    assert (first.model_digest, first.tool_digest) == (digest(profile), digest(tools))
    assert recover(first).get("from_checkpoint") == 0
    saved = drive(checkpoints.load_latest(C, 99))
    assert (saved.model_digest, saved.tool_digest) == (digest(profile), digest(tools))
    assert recover(first)["from_checkpoint"] == saved.covered_seq > 0  # same configuration: used
    other_profile = {**profile, "model": "m2"}
    read = recover(world.worker(model_profile=other_profile, tool_set=tools))
    assert (read["from_checkpoint"], read.get("rejected")) == (0, "model-digest")
    read = recover(world.worker(model_profile=other_profile, tool_set={"search": {"version": 2}}))
    assert (read["from_checkpoint"], read.get("rejected")) == (0, "tool-digest")
    world.close()
