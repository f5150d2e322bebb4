"""agent-conversations: agents whose steps wait for the world (tools whose
outcome is unknown, approvals, subagents, follow-ups that join a run, aborts
in every state). Clean runs pass on both stores and reach every kind of
wait; every crash point of an agent's step fires and recovers; the tool
service and the checkers that read it say what they must."""
from __future__ import annotations

import pytest

from model.failpoints import AGENT_CRASH_POINTS
from scenarios import registry
from scenarios.stacks import agent_conversations
from scenarios.workloads.agents import ToolService
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions
from sim.rng import Streams
from sim.trace import Event

AGENT_SOMETIMES = ("tool_unknown_resolved", "approval_resumed", "child_woke_parent", "join_settled",
                   "aborted_suspended")


# Persistence §5's families (by phase, channel or kind of input where one family has several).
EVENT_FAMILIES = ("conversation-created", "conversation-closed", "input/user", "input/steering", "input/follow-up",
                  "run-started", "model-request", "model-delta/text", "model-delta/reasoning", "model-completed",
                  "tool-call/requested", "tool-call/prepared", "tool-call/approval-requested",
                  "tool-call/approval-decided", "tool-call/settled", "tool-call/unknown", "compaction/created",
                  "compaction/selected", "subagent/requested", "subagent/started", "subagent/joined", "run-warning",
                  "run-failure", "abort-requested", "submission-settled", "repair-annotation")


def agents(seed: int, duration: str = "2h", store: str = "memory", rates=None):
    return run(registry.get("agent-conversations"),
               ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), store=store, rates=rates))


# SQLite's agent history is held by test_memory_and_sqlite_are_the_same_history
# (the same trace digest on both); its own clean run is the slow twin.
@pytest.mark.parametrize("store", ["memory", pytest.param("sqlite", marks=pytest.mark.slow)])
def test_clean_run_passes_and_waits_for_the_world(store):
    """The full mix (no swarm: every step kind, every fault kind): each kind
    of wait happens, and every checker checked something."""
    result = agents(1, "90m", store)  # the shortest run of this seed that reaches every family
    assert result.passed, result.violations
    assert result.stats["settled"] > 200
    for name in AGENT_SOMETIMES:
        assert result.stats[name] > 0, (name, result.stats)
    assert all(count > 0 for count in result.invariants.values()), result.invariants
    # Every canonical event family of an agent's runs reached the log, and is counted.
    counted = result.stats["canonical_events"]
    for family in EVENT_FAMILIES:
        assert counted.get(family, 0) > 0, (family, counted)


def test_every_agent_crash_point_fires_and_recovers():
    """ARCHITECTURE §5: a crash at each point of an agent's steps (a tool
    prepared, not settled; a decision logged, not acted on; a child settled,
    its parent not woken; a follow-up applied, not marked joined; a model
    asked, nothing streamed; and the rest of the peer's coordinator
    locations: ``model.failpoints``) happens, and every run still passes:
    recovery finishes what the crash cut. Two short seeds at a high crash
    rate, not one long one: some points (a subagent's admit, an aborted
    parent's child's abort intent) are passed only a few times a seed, so
    no one seed fires every point; together seeds 0 and 1 do (measured:
    every point but two in seed 0's half hour, subagent:after-admit and
    subagent:after-child-ready, and those two in seed 1's first 20 minutes)."""
    rates = {**agent_conversations.RATES, "failpoint-crash": 0.1}
    fired = {point: 0 for point in AGENT_CRASH_POINTS}
    for seed, duration in ((0, "30m"), (1, "20m")):
        result = agents(seed, duration, rates=rates)
        assert result.passed, (seed, result.violations)
        for point in AGENT_CRASH_POINTS:
            fired[point] += result.coverage["failpoints"][point]["fired"]
    assert all(fired.values()), {point: count for point, count in fired.items() if not count}


def test_memory_and_sqlite_are_the_same_history():
    """Under pinned rates (no overtaking commits, which only SQLite meets; no
    write contention either: its error's detail is the store's own, injected
    in memory, the real lock's on SQLite)."""
    rates = {kind: rate for kind, rate in agent_conversations.RATES.items() if kind != "write-contention"}
    memory = agents(3, "15m", "memory", rates)
    assert memory.passed, memory.violations
    assert memory.trace_digest == agents(3, "15m", "sqlite", rates).trace_digest


class TestToolService:
    def test_an_idempotent_call_acts_once_per_key(self):
        tools = ToolService()
        first = tools._invoke("w1", "c.0", "search", {"q": 1}, "c.0", None, 0)
        again = tools._invoke("w2", "c.0", "search", {"q": 1}, "c.0", None, 0)
        assert first == again and tools.effects == 1 and tools.arrivals("c.0") == 2

    def test_a_non_idempotent_call_acts_every_time_and_remembers_the_first(self):
        tools = ToolService()
        first = tools._invoke("w1", "c.0", "send", {}, None, None, 0)
        second = tools._invoke("w1", "c.0", "send", {}, None, None, 0)
        assert first != second and tools.effects == 2
        assert tools.effect("c.0") == first and tools.effect("c.1") is None


    def test_a_call_that_arrives_after_its_deadline_is_refused_without_effect(self):
        from scenarios.workloads.agents import ToolDeadlineExceeded

        tools = ToolService()
        with pytest.raises(ToolDeadlineExceeded):
            tools._invoke("w1", "c.0", "send", {}, None, 1_000, 1_001)
        assert tools.effect("c.0") is None and tools.arrivals("c.0") == 0 and tools.refused_late == 1
        assert tools._invoke("w1", "c.1", "send", {}, None, 1_000, 1_000) == tools.effect("c.1")


def test_the_plans_are_drawn_from_their_own_streams():
    """A request's plan comes from a stream forked by its number: the same
    seed gives the same plans whatever else the workload drew."""
    from scenarios.workloads.agents import AgentSubmitters

    def plans(seed):
        submitters = AgentSubmitters(kinds=("model", "tool", "approval"), conversations=2,
                                     every_ms=(1, 2), conversation_lifetime_ms=1, retry_ms=1)

        class World:
            streams = Streams(seed)

        submitters.world = World()
        return [submitters.request(n, f"conv-{n % 2}-g{n // 10}") for n in range(1, 30)], submitters.pending

    assert plans(5) == plans(5) != plans(6)
    requests, closes = plans(5)
    assert any(request.get("joins") for request in requests)
    # Each conversation's first request opens it; a slot's next generation closes the previous one.
    assert [r["n"] for r in requests if r["plan"][0] == "open"] == [1, 2, 10, 11, 20, 21]
    assert [(conversation, request["plan"]) for conversation, _, request in closes] == [
        ("conv-0-g0", ["close"]), ("conv-1-g0", ["close"]), ("conv-0-g1", ["close"]), ("conv-1-g1", ["close"])]


def test_a_deploy_changes_the_definition_the_model_or_the_tools_from_its_own_stream():
    """What a deploy changes is drawn from the deploy's own stream: each
    deploy changes exactly one of the agent's definition, model
    configuration and tool set, and only that one's digest moves."""
    from scenarios.workloads.agents import AgentWorkers

    def deploys(seed):
        workers = AgentWorkers(1, tools=ToolService(), model=None, lease_ms=1, poll_ms=1, retry_ms=1,
                               step_delay_ms=(0, 0), work=None, recovery_page_size=1)

        class World:
            streams = Streams(seed)

        workers.world = World()
        seen, before = [], (workers.definition_digest(), workers.model_profile(), workers.tool_set())
        for generation in range(1, 13):
            change = workers.deploy(generation)["change"]
            after = (workers.definition_digest(), workers.model_profile(), workers.tool_set())
            assert [b != a for b, a in zip(before, after)] == [c == change for c in ("definition", "model", "tools")]
            seen.append(change)
            before = after
        return seen

    assert deploys(5) == deploys(5) != deploys(6)
    assert set(deploys(5)) == {"definition", "model", "tools"}


# 75 minutes of run; in CI test_agent_worker's test_a_checkpoint_of_another_model_or_tool_configuration_... covers it.
@pytest.mark.slow
def test_a_checkpoint_written_under_another_model_or_tool_set_is_rebuilt_from_the_log():
    """After a deploy that changed the model or the tools, a recovery finds
    checkpoints written under the old ones: it reads the log instead
    (``checkpoint-consistency`` fails a recovery that used one)."""
    result = agents(3, "75m")
    assert result.passed, result.violations
    assert result.stats["checkpoints_rejected_model_or_tools"] > 0
    assert result.invariants["checkpoint-consistency"] > 0


def _checker(checker):
    from sim.trace import Trace

    violations = []
    checker.attach(Trace(lambda: 0), lambda: 0, violations.append)
    return checker, violations


def _append(seq, time_ms, conversation, envelopes, *, expected_tail_seq=0, first_seq=1, tail_digest="d1", batch="b"):
    return Event(seq, time_ms, "w1", "log.append", {
        "conversation": conversation, "batch": batch, "producer": "w1", "epoch": 1,
        "expected_tail_seq": expected_tail_seq, "record_ids": tuple(f"r{i}" for i in range(len(envelopes))),
        "envelopes": tuple(envelopes), "first_seq": first_seq, "last_seq": first_seq + len(envelopes) - 1,
        "tail_digest": tail_digest, "replayed": False})


def _started(run, created_at_ms, allowance_ms):
    return {"family": "run-started", "createdAt": created_at_ms,
            "payload": {"runId": run, "submissionId": run, "maxDurationMillis": allowance_ms}}


def test_run_clock_fails_a_second_start_a_step_past_the_deadline_and_history_without_start():
    from scenarios.invariants.runs import RunClock

    clock, violations = _checker(RunClock())
    clock.on_event(_append(1, 1_000, "c", [_started("s1", 1_000, 60_000)]))
    clock.on_event(Event(2, 61_000, "w1", "agent.step", {"submission": "s1", "index": 1}))
    assert violations == []
    clock.on_event(Event(3, 61_001, "w2", "agent.step", {"submission": "s1", "index": 2}))
    assert "after the deadline 61000 ms" in violations[-1].message
    clock.on_event(_append(4, 62_000, "c", [_started("s1", 62_000, 60_000)]))
    assert "a second run-started" in violations[-1].message
    clock.on_event(_append(5, 62_000, "c", [{"family": "model-request", "createdAt": 62_000,
                                             "payload": {"runId": "s2", "call": "s2/s0"}}]))
    assert "no run-started before it" in violations[-1].message and len(violations) == 3


def test_canonical_events_fails_what_is_never_canonical_and_usage_that_does_not_add_up():
    from scenarios.invariants.runs import CanonicalEvents

    events, violations = _checker(CanonicalEvents())
    turn = [{"family": "model-delta", "createdAt": 1, "payload": {"call": "s1/s0", "channel": "text", "text": "a"}},
            {"family": "model-completed", "createdAt": 1,
             "payload": {"runId": "run:s1", "call": "s1/s0", "text": "a",
                         "usage": {"inputTokens": 5, "outputTokens": 2, "costMicros": 45}}}]
    events.on_event(_append(1, 1, "c", turn, batch="turn:run:s1:1"))
    settled = {"family": "submission-settled", "createdAt": 2, "payload": {
        "submissionId": "s1", "settlementId": "settlement:s1", "receiptId": "rcpt-s1", "runId": "run:s1",
        "outcome": "completed", "result": {}, "usage": {
            "modelCalls": 1, "inputTokens": 5, "outputTokens": 2, "costMicros": 45}}}
    completed = {"family": "run-completed", "createdAt": 2, "payload": {"runId": "run:s1", "submissionId": "s1"}}
    events.on_event(_append(2, 2, "c", [completed, settled], expected_tail_seq=2, first_seq=3))
    assert violations == [] and events.counts == {"model-delta/text": 1, "model-completed": 1,
                                                  "run-completed": 1, "submission-settled": 1}
    settled["payload"]["usage"]["inputTokens"] = 4
    events.on_event(_append(3, 3, "c", [completed, settled], expected_tail_seq=4, first_seq=5))
    assert "its logged model turns add up to" in violations[-1].message
    events.on_event(_append(4, 4, "c", [{"family": "heartbeat", "createdAt": 4, "payload": {}}]))
    assert "'heartbeat' record reached the log" in violations[-1].message
    events.on_event(_append(5, 5, "c", [{"family": "model-delta", "createdAt": 5,
                                         "payload": {"call": "s1/s1", "channel": "tool-argument-delta"}}]))
    assert "only text and reasoning deltas are canonical" in violations[-1].message
    # A run's turn is the batch turn:{runId}:{n} (the peer's id), n counting its turns.
    before = len(violations)
    events.on_event(_append(6, 6, "c", turn, batch="turn:run:s1:2", expected_tail_seq=6, first_seq=7))
    assert len(violations) == before
    events.on_event(_append(7, 7, "c", turn, batch="model-turn:s1/s0", expected_tail_seq=8, first_seq=9))
    assert "its model turn 3 is the batch 'model-turn:s1/s0', not 'turn:run:s1:3'" in violations[-1].message


def _tool(phase, call, **fields):
    return {"family": "tool-call", "createdAt": 1, "payload": {"phase": phase, "call": call, **fields}}


def _claim(seq, time_ms, submission, epoch):
    return Event(seq, time_ms, "w2", "ledger.claim", {"conversation": "c", "owner": "w2", "handoff": None,
                                                 "submission": submission, "epoch": epoch,
                                                 "lease_expires_ms": time_ms + 20_000, "attempt": f"{submission}#a{epoch}"})


def _finalized(seq, time_ms, submission, outcome):
    return Event(seq, time_ms, "w2", "ledger.finalize_settlement", {
        "submission": submission, "outcome": outcome, "digest": "d", "settled_at_ms": time_ms,
        "settlement_id": f"settlement:{submission}", "replayed": False})


def test_unknown_never_replayed_fails_a_run_settled_over_a_call_in_doubt():
    """A run settles (other than aborted) only once each non-idempotent call
    it prepared is settled or marked unknown in the log: a successor that
    takes a run past its deadline to settlement without marking the call
    it found prepared settles over a call in doubt, whether or not the call
    ever lands. A successor that marks it first is counted
    (``doubt_marked_past_deadline``)."""
    from scenarios.invariants.unknown_outcomes import UnknownNeverReplayed

    for marks, outcome in ((False, "failed"), (True, "failed"), (False, "aborted")):
        checker, violations = _checker(UnknownNeverReplayed(ToolService()))
        checker.on_event(_append(1, 1_000, "c", [_started("s1", 1_000, 10_000)], batch="run-start:s1"))
        checker.on_event(_append(2, 5_000, "c", [_tool("prepared", "s1/s1.0", idempotent=False, deadlineMs=35_000)],
                                 expected_tail_seq=1, first_seq=2, batch="tool-prepared:s1/s1.0"))
        checker.on_event(_claim(3, 30_000, "s1", 2))  # the owner died; a successor, past the run's deadline
        if marks:
            event = _append(4, 30_001, "c", [_tool("unknown", "s1/s1.0")], expected_tail_seq=2, first_seq=3,
                            batch="tool-unknown:s1/s1.0")
            event.fields["epoch"] = 2
            checker.on_event(event)
        checker.on_event(_finalized(5, 30_002, "s1", outcome))
        if marks or outcome == "aborted":
            assert violations == [], violations
        else:
            assert "it settled over a call in doubt" in violations[-1].message, violations
        assert checker.doubt_marked_past_deadline == (1 if marks else 0)


def test_a_successor_marks_a_call_in_doubt_past_the_run_deadline():
    """The default workload reaches it: requests that must be answered within
    seconds send an email on the way (``TIGHT_ALLOWANCE_SHARE``), so a kill or
    a lost reply at the call leaves it in doubt right before the deadline,
    and a successor past the deadline marks it unknown before it fails the
    run."""
    result = agents(9, "1h")
    assert result.passed, result.violations
    assert result.stats["doubt_marked_past_deadline"] > 0, result.stats
