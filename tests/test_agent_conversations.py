"""agent-conversations: agents whose steps wait for the world (tools whose
outcome is unknown, approvals, subagents, follow-ups that join a run, aborts
in every state). Clean runs pass on both stores and reach every kind of
wait; every crash point of an agent's step fires and recovers; the tool
service and the checkers that read it say what they must."""
from __future__ import annotations

import pytest

from model.failpoints import AGENT_CRASH_POINTS
from scenarios import agent_conversations, registry
from scenarios.agents import ToolService
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions
from sim.rng import Streams

AGENT_SOMETIMES = ("tool_unknown_resolved", "approval_resumed", "child_woke_parent", "join_settled",
                   "aborted_suspended")


def agents(seed: int, duration: str = "2h", store: str = "memory", rates=None):
    return run(registry.get("agent-conversations"),
               ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), store=store, rates=rates))


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_clean_run_passes_and_waits_for_the_world(store):
    """The full mix (no swarm: every step kind, every fault kind): each kind
    of wait happens, and every checker checked something."""
    result = agents(1, "2h", store)
    assert result.passed, result.violations
    assert result.stats["settled"] > 200
    for name in AGENT_SOMETIMES:
        assert result.stats[name] > 0, (name, result.stats)
    assert all(count > 0 for count in result.invariants.values()), result.invariants


def test_every_agent_crash_point_fires_and_recovers():
    """ARCHITECTURE §5: a crash at each point of an agent's steps (a tool
    prepared, not settled; a decision logged, not acted on; a child settled,
    its parent not woken; a follow-up applied, not marked joined) happens,
    and the run still passes: recovery finishes what the crash cut."""
    rates = {**agent_conversations.RATES, "failpoint-crash": 0.03}
    result = agents(1, "2h", rates=rates)
    assert result.passed, result.violations
    fired = result.coverage["failpoints"]
    for point in AGENT_CRASH_POINTS:
        assert fired[point]["fired"] > 0, (point, fired[point])


def test_memory_and_sqlite_are_the_same_history():
    """Under pinned rates (no overtaking commits, which only SQLite meets; no
    write contention either: its error's detail is the store's own, injected
    in memory, the real lock's on SQLite)."""
    rates = {kind: rate for kind, rate in agent_conversations.RATES.items() if kind != "write-contention"}
    memory = agents(3, "1h", "memory", rates)
    assert memory.passed, memory.violations
    assert memory.trace_digest == agents(3, "1h", "sqlite", rates).trace_digest


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
        from scenarios.agents import ToolDeadlineExceeded

        tools = ToolService()
        with pytest.raises(ToolDeadlineExceeded):
            tools._invoke("w1", "c.0", "send", {}, None, 1_000, 1_001)
        assert tools.effect("c.0") is None and tools.arrivals("c.0") == 0 and tools.refused_late == 1
        assert tools._invoke("w1", "c.1", "send", {}, None, 1_000, 1_000) == tools.effect("c.1")


def test_the_plans_are_drawn_from_their_own_streams():
    """A request's plan comes from a stream forked by its number: the same
    seed gives the same plans whatever else the workload drew."""
    from scenarios.agents import AgentSubmitters

    def plans(seed):
        submitters = AgentSubmitters(kinds=("model", "tool", "approval"), follow_ups=True, conversations=2,
                                     every_ms=(1, 2), conversation_lifetime_ms=1, retry_ms=1)

        class World:
            streams = Streams(seed)

        submitters.world = World()
        return [submitters.request(n) for n in range(1, 30)]

    assert plans(5) == plans(5) != plans(6)
    assert any(request.get("joins") for request in plans(5))
