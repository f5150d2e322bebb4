"""The history checker judges a concurrent history from the outside.

Ground truth: a brute-force search over every order of the operations that
real time allows (an operation whose answer nobody saw may be left out)
gives the verdict on small random histories, and the memoised
Wing–Gong–Lowe search must agree on every one. Hand-made histories of each
anomaly class are recognised by name, with their operations.
"""
from __future__ import annotations

import math

import attrs

import networkx as nx

from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios.reference.history import (
    UNKNOWN,
    anomalies_in,
    Failed,
    LeaseModel,
    LogModel,
    Op,
    RegisterModel,
    check_history,
    check_object,
    dependency_graph,
    find_anomalies,
)

REGISTER = RegisterModel()
LOG = LogModel()
LEASE = LeaseModel()
CONFLICT = Failed("RevisionConflictError")
APPEND_CONFLICT = Failed("AppendConflict")
LOST = Failed("OwnershipLost")


def model_of(key: str):
    return LOG if key.startswith("log") else LEASE if key.startswith("sub") else REGISTER


def op(op_id, process, key, name, args, invoke_ms, complete_ms, answer):
    return Op(op_id, process, key, name, tuple(args), invoke_ms, complete_ms, answer)


# --- the brute force --------------------------------------------------------


def _precedes(a: Op, b: Op) -> bool:
    return a.complete_ms is not None and a.complete_ms < b.invoke_ms


def brute_force_linearizable(history: list[Op]) -> bool:
    """Every order of the operations real time allows, each unknown one in it
    or left out, run against one state per key: True when one fits."""
    known = [o for o in history if o.answer is not UNKNOWN]
    needed = len(known)

    def extend(done: frozenset, left_out: frozenset, states: dict) -> bool:
        if sum(1 for o in known if o.op_id in done) == needed:
            return True
        for candidate in history:
            if candidate.op_id in done or candidate.op_id in left_out:
                continue
            # every operation that precedes it in real time is placed (or left out)
            if any(_precedes(other, candidate) and other.op_id not in done and other.op_id not in left_out
                   for other in history):
                continue
            model = model_of(candidate.key)
            state = states.get(candidate.key, model.init())
            after = model.step(state, candidate)
            if after is not None:
                if extend(done | {candidate.op_id}, left_out, {**states, candidate.key: after}):
                    return True
            if candidate.answer is UNKNOWN and extend(done, left_out | {candidate.op_id}, states):
                return True
        return False

    return extend(frozenset(), frozenset(), {})


# --- random small concurrent histories ----------------------------------------

VALUES = ("a", "b", "c")


def _random_answer(draw, key: str, name: str, args: tuple):
    if key == "sub":
        if name == "claim":
            return draw(st.sampled_from((None, 1, 2, 3)))
        return None if draw(st.booleans()) else LOST
    if key == "x":
        if name == "read":
            revision = draw(st.integers(0, 3))
            return None if revision == 0 else (revision, draw(st.sampled_from(VALUES)))
        return args[0] + 1 if draw(st.booleans()) else CONFLICT
    if name == "read":
        return tuple(draw(st.lists(st.sampled_from(VALUES), max_size=3)))
    return args[0] + 1 if draw(st.booleans()) else APPEND_CONFLICT


def _run(state, key: str, name: str, args: tuple):
    """(answer, state after): the third spelling of the contracts, for the generator."""
    if key == "sub":
        epoch, owner, expires_ms, released, settled = state
        if name == "claim":
            if settled or not (owner is None or released or args[2] >= expires_ms or owner == args[0]):
                return None, state
            return epoch + 1, (epoch + 1, args[0], args[2] + args[1], False, False)
        if (args[0], args[1]) != (owner, epoch) or released:
            return LOST, state
        if name == "renew":
            return None, (epoch, owner, args[3] + args[2], False, settled)
        return None, (epoch, owner, expires_ms, name == "release", settled or name == "settle")
    if key == "x":
        revision, value = state
        if name == "read":
            return (None if revision == 0 else (revision, value)), state
        return (args[0] + 1, (args[0] + 1, args[1])) if args[0] == revision else (CONFLICT, state)
    if name == "read":
        return state[args[0]:args[0] + args[1]], state
    return (args[0] + 1, state + args[1]) if args[0] == len(state) else (APPEND_CONFLICT, state)


@st.composite
def histories(draw) -> list[Op]:
    """Intervals on 2-4 processes (a process whose call never answered
    issues nothing more); answers from one real execution, each call
    taking effect at an instant inside its interval (an unanswered one
    perhaps never), then left as they are, one changed, or all random."""
    processes = draw(st.integers(2, 4))
    count = draw(st.integers(1, 8))
    next_ms: list[int | None] = [0] * processes
    shapes = []
    for op_id in range(count):
        live = [p for p in range(processes) if next_ms[p] is not None]
        if not live:
            break
        process = draw(st.sampled_from(live))
        invoke_ms = next_ms[process] + draw(st.integers(0, 3))
        duration_ms = draw(st.integers(0, 4))
        key = draw(st.sampled_from(("x", "log", "sub")))
        if key == "sub":
            name = draw(st.sampled_from(("claim", "renew", "release", "settle")))
        else:
            name = draw(st.sampled_from(("read", "cas" if key == "x" else "append")))
        owner = f"p{process}"
        if key == "sub":
            lease_ms = draw(st.sampled_from((2, 5)))
            if name == "claim":
                args = (owner, lease_ms, invoke_ms)
            elif name == "renew":
                args = (owner, draw(st.integers(1, 3)), lease_ms, invoke_ms)
            else:
                args = (owner, draw(st.integers(1, 3)))
        elif key == "x":
            args = () if name == "read" else (draw(st.integers(0, 3)), draw(st.sampled_from(VALUES)))
        else:
            args = (draw(st.sampled_from((0, 0, 1, 2))), 8) if name == "read" else (draw(st.integers(0, 3)), (draw(st.sampled_from(VALUES)),))
        unknown = draw(st.integers(0, 5)) == 0
        effect_ms = invoke_ms + draw(st.integers(0, duration_ms))
        happened = not unknown or draw(st.booleans())
        shapes.append((op_id, process, key, name, args, invoke_ms, duration_ms, unknown, effect_ms, happened))
        next_ms[process] = None if unknown else invoke_ms + duration_ms + 1
    answers = {}
    states = {"x": (0, None), "log": (), "sub": LEASE.init()}
    for shape in sorted((s for s in shapes if s[9]), key=lambda s: (s[8], draw(st.integers(0, 3)), s[0])):
        answers[shape[0]], states[shape[2]] = _run(states[shape[2]], shape[2], shape[3], shape[4])
    mode = draw(st.sampled_from(("true", "one-changed", "random")))
    changed = draw(st.integers(0, len(shapes) - 1))
    ops = []
    for op_id, process, key, name, args, invoke_ms, duration_ms, unknown, _, _ in shapes:
        if unknown:
            ops.append(op(op_id, f"p{process}", key, name, args, invoke_ms, None, UNKNOWN))
            continue
        answer = answers[op_id]
        if mode == "random" or (mode == "one-changed" and op_id == changed):
            answer = _random_answer(draw, key, name, args)
        ops.append(op(op_id, f"p{process}", key, name, args, invoke_ms, invoke_ms + duration_ms, answer))
    return ops


@settings(max_examples=200, deadline=None)
@given(histories())
def test_the_search_agrees_with_the_brute_force_on_small_histories(history):
    verdict = check_history(history, model_of, anomalies=True)
    assert verdict.outcome in ("ok", "violation"), verdict.describe()
    linearizable = brute_force_linearizable(history)
    assert (verdict.outcome == "ok") == linearizable, verdict.describe()
    # every edge of the graph follows any linearization: a linearizable history has no anomaly
    assert not (linearizable and verdict.anomalies), verdict.describe()


# --- hand-made anomalies ---------------------------------------------------------


def test_a_stale_read_after_a_completed_write_is_a_violation_naming_its_window():
    history = [
        op(0, "p1", "x", "cas", (0, "a"), 0, 1, 1),
        op(1, "p1", "x", "cas", (1, "b"), 2, 3, 2),
        op(2, "p2", "x", "read", (), 5, 6, (1, "a")),  # revision 2 was acknowledged before this began
        op(3, "p2", "x", "read", (), 7, 8, (2, "b")),
    ]
    verdict = check_history(history, model_of)
    assert verdict.outcome == "violation"
    [bad] = [v for v in verdict.objects if v.outcome == "violation"]
    assert bad.key == "x"
    # the shortest prefix that is already wrong ends at the stale read
    assert [o.op_id for o in bad.window] == [0, 1, 2]
    message = bad.describe()
    assert "#2" in message and "read" in message and "#3" not in message


def test_concurrent_reads_may_see_either_side_of_a_write():
    history = [
        op(0, "p1", "x", "cas", (0, "a"), 0, 10, 1),
        op(1, "p2", "x", "read", (), 1, 2, (1, "a")),
        op(2, "p3", "x", "read", (), 3, 4, None),  # sees the old value after p2 saw the new: not linearizable
    ]
    assert check_history(history, model_of).outcome == "violation"
    assert check_history(history[:2] + [op(2, "p3", "x", "read", (), 3, 4, (1, "a"))], model_of).outcome == "ok"


def test_a_lost_update_two_cas_from_one_revision_both_succeed():
    history = [
        op(0, "p1", "x", "cas", (0, "a"), 0, 1, 1),
        op(1, "p1", "x", "cas", (1, "b"), 2, 5, 2),
        op(2, "p2", "x", "cas", (1, "c"), 2, 5, 2),
    ]
    verdict = check_history(history, model_of)
    assert verdict.outcome == "violation"
    assert {o.op_id for o in verdict.objects[0].window} == {0, 1, 2}
    [anomaly] = [a for a in find_anomalies(history, model_of) if a.name == "lost-update"]
    assert {o.op_id for o in anomaly.ops} == {1, 2}
    assert "#1" in anomaly.describe() and "#2" in anomaly.describe()


def test_a_read_of_a_value_never_written_is_a_violation():
    history = [
        op(0, "p1", "x", "cas", (0, "a"), 0, 1, 1),
        op(1, "p2", "x", "read", (), 2, 3, (1, "zzz")),
    ]
    assert check_history(history, model_of).outcome == "violation"
    unwritten = [a for a in find_anomalies([op(1, "p2", "x", "read", (), 2, 3, (3, "zzz"))], model_of)]
    assert [a.name for a in unwritten] == ["unwritten-read"]


def test_an_unknown_write_may_have_happened_or_not():
    write = op(0, "p1", "x", "cas", (0, "a"), 0, None, UNKNOWN)
    happened = [write, op(1, "p2", "x", "read", (), 5, 6, (1, "a"))]
    did_not = [write, op(1, "p2", "x", "read", (), 5, 6, None)]
    assert check_history(happened, model_of).outcome == "ok"
    assert check_history(did_not, model_of).outcome == "ok"
    # but once seen, it cannot un-happen
    flip = [write, op(1, "p2", "x", "read", (), 5, 6, (1, "a")), op(2, "p2", "x", "read", (), 7, 8, None)]
    assert check_history(flip, model_of).outcome == "violation"
    # and it cannot take effect before it was invoked
    early = [op(1, "p2", "x", "read", (), 0, 1, (1, "a")), op(0, "p1", "x", "cas", (0, "a"), 2, None, UNKNOWN)]
    assert check_history(early, model_of).outcome == "violation"


def test_a_refused_call_changed_nothing_and_saw_nothing():
    refused = Failed("StorageCorrupted")
    history = [
        op(0, "p1", "x", "cas", (0, "a"), 0, 1, 1),
        op(1, "p2", "x", "read", (), 2, 3, refused),
        op(2, "p2", "x", "cas", (1, "b"), 4, 5, refused),
        op(3, "p2", "x", "clear", (), 6, 7, refused),
        op(4, "p1", "log", "read", (0, 8), 0, 1, refused),
        op(5, "p1", "log", "tail", (), 2, 3, refused),
        op(7, "p3", "sub", "claim", ("p3", 5, 0), 0, 1, refused),
        op(6, "p2", "x", "read", (), 8, 9, (1, "a")),
    ]
    assert check_history(history, model_of).outcome == "ok"


def test_the_log_appends_by_expected_tail():
    history = [
        op(0, "p1", "log", "append", (0, ("a",)), 0, 1, 1),
        op(1, "p2", "log", "append", (0, ("b",)), 2, 3, APPEND_CONFLICT),
        op(2, "p2", "log", "append", (1, ("b", "c")), 4, 5, 2),
        op(3, "p1", "log", "read", (0, 8), 6, 7, ("a", "b", "c")),
        op(4, "p1", "log", "read", (1, 1), 8, 9, ("b",)),
    ]
    assert check_history(history, model_of).outcome == "ok"
    gap = history[:3] + [op(3, "p1", "log", "read", (0, 8), 6, 7, ("a", "c"))]
    assert check_history(gap, model_of).outcome == "violation"


def test_the_same_operations_linearized_can_leave_different_states():
    # The unknown append is tried first, where it conflicts; only after the
    # known one does it apply. A memo on the set of operations alone would
    # take the second way for the first and call this a violation.
    history = [
        op(0, "p1", "log", "append", (1, ("a",)), 0, None, UNKNOWN),
        op(1, "p2", "log", "append", (0, ("a",)), 1, 1, 1),
        op(2, "p2", "log", "read", (0, 8), 2, 2, ("a", "a")),
    ]
    assert check_history(history, model_of).outcome == "ok"
    assert brute_force_linearizable(history)


def test_a_submission_lease_is_fenced_by_its_token():
    claimed = op(0, "a", "sub", "claim", ("a", 5, 0), 0, 1, 1)
    taken_over = op(1, "b", "sub", "claim", ("b", 5, 10), 10, 11, 2)  # a's lease lapsed at 5
    history = [claimed, taken_over, op(2, "a", "sub", "renew", ("a", 1, 5, 12), 12, 13, LOST)]
    assert check_history(history, model_of).outcome == "ok"
    # a renewal of the old token accepted after the takeover was acknowledged
    stale = history[:2] + [op(2, "a", "sub", "renew", ("a", 1, 5, 12), 12, 13, None)]
    assert check_history(stale, model_of).outcome == "violation"
    assert [a.name for a in find_anomalies(stale, model_of)] == ["G-single-realtime"]
    # a claim granted while another owner's lease is live
    early = [claimed, op(1, "b", "sub", "claim", ("b", 5, 3), 3, 4, 2)]
    assert check_history(early, model_of).outcome == "violation"
    # two owners both granted epoch 2
    twice = [claimed, taken_over, op(2, "c", "sub", "claim", ("c", 5, 10), 10, 11, 2)]
    assert check_history(twice, model_of).outcome == "violation"
    assert "lost-update" in [a.name for a in find_anomalies(twice, model_of)]
    # an unanswered claim may explain a refusal naming its epoch; nothing else can
    unanswered = [claimed, op(1, "b", "sub", "claim", ("b", 5, 10), 10, None, UNKNOWN),
                  op(2, "a", "sub", "renew", ("a", 1, 5, 12), 12, 13, Failed("OwnershipLost", 2))]
    assert check_history(unanswered, model_of).outcome == "ok"
    assert check_history(unanswered[::2], model_of).outcome == "violation"
    # a settled submission is claimable by no one; settling again replays
    settled = [claimed, op(1, "a", "sub", "settle", ("a", 1), 2, 3, None),
               op(2, "a", "sub", "settle", ("a", 1), 4, 5, None), op(3, "b", "sub", "claim", ("b", 5, 10), 10, 11, None)]
    assert check_history(settled, model_of).outcome == "ok"


def test_a_history_beyond_the_step_budget_is_unknown_never_ok():
    # many concurrent unknown appends: the search cannot finish within ten steps
    history = [op(i, f"p{i}", "log", "append", (0, (f"v{i}",)), 0, None, UNKNOWN) for i in range(10)]
    history.append(op(10, "q", "log", "read", (0, 8), 1, 2, ("nope",)))
    verdict = check_object(history, LOG, "log", budget_steps=10)
    assert verdict.outcome == "unknown"
    assert "too costly" in verdict.describe()
    assert check_history(history, model_of, budget_steps=10).outcome == "unknown"


# --- cycles across two objects ---------------------------------------------------


def _names(history):
    return sorted(a.name for a in find_anomalies(history, model_of))


def test_a_write_cycle_across_two_keys_is_g0():
    # a then b (p1); c then d (p2); y: b installs r1, c r2; x: d installs r1, a r2
    history = [
        op(0, "p1", "x", "cas", (1, "a"), 0, 1, 2),
        op(1, "p1", "y", "cas", (0, "b"), 2, 3, 1),
        op(2, "p2", "y", "cas", (1, "c"), 0, 1, 2),
        op(3, "p2", "x", "cas", (0, "d"), 2, 3, 1),
    ]
    graph, _ = dependency_graph(history, model_of)
    # the cycle across both keys: a -rt-> b -ww-> c -rt-> d -ww-> a
    assert graph[0][1]["kinds"] == {"rt"} and graph[1][2]["kinds"] == {"ww"}
    assert graph[2][3]["kinds"] == {"rt"} and "ww" in graph[3][0]["kinds"]
    # Single-key operations: linearizability is local, so a cycle across keys
    # always comes with a shorter one on one key (here y: c finished before b
    # began, yet b's revision came first); each short cycle is named.
    anomalies = find_anomalies(history, model_of)
    assert [a.name for a in anomalies] == ["G0-realtime", "G0-realtime"]
    assert sorted(sorted(o.op_id for o in a.ops) for a in anomalies) == [[0, 3], [1, 2]]
    assert any(a.describe().startswith("G0-realtime: #1 -ww-> #2 -rt-> #1\n") for a in anomalies)
    assert check_history(history, model_of).outcome == "violation"


def test_a_read_cycle_across_two_keys_is_g1c():
    # p1 reads y's r1 then writes x's r1; p2 reads x's r1 then writes y's r1
    history = [
        op(0, "p1", "y", "read", (), 0, 1, (1, "w")),
        op(1, "p1", "x", "cas", (0, "v"), 2, 3, 1),
        op(2, "p2", "x", "read", (), 0, 1, (1, "v")),
        op(3, "p2", "y", "cas", (0, "w"), 2, 3, 1),
    ]
    names = _names(history)
    assert "G1c-realtime" in names
    assert not any(name.startswith("G0") for name in names)


def test_write_skew_across_two_keys_is_an_anti_dependency_cycle():
    # each process reads the other's key empty, then writes its own; then both see both
    history = [
        op(0, "p1", "y", "read", (), 0, 1, None),
        op(1, "p1", "x", "cas", (0, "a"), 4, 5, 1),
        op(2, "p2", "x", "read", (), 0, 1, None),
        op(3, "p2", "y", "cas", (0, "b"), 4, 5, 1),
    ]
    # plain write skew is linearizable for single-key operations: no cycle
    assert check_history(history, model_of).outcome == "ok"
    assert _names(history) == []
    # with the writes acknowledged before the reads began it is one
    skewed = [
        op(0, "p1", "y", "read", (), 2, 3, None),
        op(1, "p1", "x", "cas", (0, "a"), 0, 1, 1),
        op(2, "p2", "x", "read", (), 2, 3, None),
        op(3, "p2", "y", "cas", (0, "b"), 0, 1, 1),
    ]
    names = _names(skewed)
    assert names == ["G-single-realtime", "G-single-realtime"]  # one per key: each read missed a write
    anomaly = find_anomalies(skewed, model_of)[0]
    assert any(kind == "rw" for _, _, kind in anomaly.edges)
    assert check_history(skewed, model_of).outcome == "violation"


def test_cycles_are_classed_by_their_weakest_edges():
    # edges as a multi-key transaction history would give them: the classes are
    # Adya's, and a cycle is named by the fewest anti-dependencies it needs
    ops = {i: op(i, f"p{i}", "xy"[i % 2], "read", (), i, i, None) for i in range(4)}

    def classes(edges):
        graph = nx.DiGraph()
        for a, b, kind in edges:
            graph.add_edge(a, b, kinds=frozenset({kind}))
        return sorted(a.name for a in anomalies_in(graph, ops))

    assert classes([(0, 1, "ww"), (1, 0, "ww")]) == ["G0"]
    assert classes([(0, 1, "ww"), (1, 0, "wr")]) == ["G1c"]
    assert classes([(0, 1, "rw"), (1, 0, "wr")]) == ["G-single"]
    assert classes([(0, 1, "rw"), (1, 2, "wr"), (2, 3, "rw"), (3, 0, "wr")]) == ["G2"]
    assert classes([(0, 1, "rw"), (1, 2, "rt"), (2, 3, "rw"), (3, 0, "rt")]) == ["G2-realtime"]
    # a pair with two kinds counts as its weakest
    graph = nx.DiGraph()
    graph.add_edge(0, 1, kinds=frozenset({"rw", "ww"}))
    graph.add_edge(1, 0, kinds=frozenset({"ww"}))
    [anomaly] = anomalies_in(graph, ops)
    assert anomaly.name == "G0"
    assert "#0" in anomaly.describe() and "#1" in anomaly.describe()


def test_the_log_graph_orders_appends_by_sequence_number():
    history = [
        op(0, "p1", "log", "append", (0, ("a",)), 0, 1, 1),
        op(1, "p2", "log", "read", (0, 8), 2, 3, ()),  # misses an acknowledged append
    ]
    names = _names(history)
    assert names == ["G-single-realtime"]
    assert check_history(history, model_of).outcome == "violation"


# --- in simulation: the durable-state keys as their callers saw them -------------

from faults.plan import PortFaults  # noqa: E402
from faults.ports import PortCall  # noqa: E402
from faults.script import parse_script  # noqa: E402
from model.durable_state.store import DurableStateRecord, DurableStateWrite  # noqa: E402
from scenarios import registry  # noqa: E402
from scenarios.invariants.history_linearizable import HistoryLinearizable  # noqa: E402
from scenarios.system import System  # noqa: E402
from sim.clock import parse_duration_ms  # noqa: E402
from sim.runner import DETECTED, PASS, run  # noqa: E402
from sim.scenario import Scenario, ScenarioOptions  # noqa: E402
from sim.trace import Event  # noqa: E402
from sim.workload import Stack, Workload  # noqa: E402

HOUR_MS = parse_duration_ms("1h")


class _Saver(Workload):
    """One process saving a counter every hour, reading it back first."""

    def setup(self, world) -> None:
        def start(node) -> None:
            ds = world.system.ports_for(node).ds

            async def loop() -> None:
                while True:  # ends when the process dies
                    await world.runtime.sleep_ms(HOUR_MS)
                    current = await ds.load("counter")
                    revision = 0 if current is None else current.revision
                    await ds.save("counter", DurableStateWrite(1, {"n": revision + 1}), revision)

            world.runtime.spawn_on(node, "saver", loop())

        world.add_node("saver-1", start)


def _saver() -> Scenario:
    def build(run) -> Stack:
        return Stack(system=System(restart_ms=(1_000, 1_000)), workloads=[_Saver()], faults=PortFaults({}),
                     checks=[HistoryLinearizable()])

    return Scenario("saver", "test", build, parse_duration_ms("6h"))


def test_in_simulation_a_lost_acknowledged_save_is_a_stale_read_to_its_caller():
    lose = parse_script([{"time_ms": 3 * HOUR_MS, "node": "saver-1", "site": "ds.save", "kind": "lost-write"}])
    result = run(_saver(), ScenarioOptions(seed=1, duration_ms=parse_duration_ms("6h"), fault_script=lose))
    assert result.status == DETECTED
    [violation] = result.violations
    assert violation.invariant == "history-linearizable"
    assert "'counter' is not linearizable" in violation.message and "counter.read" in violation.message


def test_in_simulation_a_calm_counter_is_linearizable_and_counted():
    result = run(_saver(), ScenarioOptions(seed=1, duration_ms=parse_duration_ms("6h")))
    assert result.status == PASS
    assert result.invariants["history-linearizable"] == 1
    assert result.stats["history_keys_too_costly"] == 0 and result.stats["history_search_steps"] > 0


def _save(time_ms: int, expected: int, answer) -> PortCall:
    write = DurableStateWrite(1, {"n": expected + 1})
    result = DurableStateRecord(1, expected + 1, {"n": expected + 1}) if answer is None else None
    return PortCall(time_ms, "w#1", "ds", "save", ("k", write, expected), {}, result, answer)


def _load(time_ms: int, record) -> PortCall:
    return PortCall(time_ms, "r#1", "ds", "load", ("k",), {}, record, None)


def _judge(calls) -> list[str]:
    checker = HistoryLinearizable()
    failures = []
    checker._sink = failures.append  # the audit's verdicts, without a run
    for call in calls:
        if isinstance(call, Event):
            checker.on_event(call)
        else:
            checker.on_port_call(call)
    checker.audit(None)
    return [f.message for f in failures]


def test_the_recorder_keeps_what_the_caller_saw_not_what_the_store_committed():
    committed_then_unread = [_save(10, 0, None), _load(20, None)]
    assert len(_judge(committed_then_unread)) == 1  # the caller saw r1, the next read saw nothing
    lost = Event(0, 10, "w#1", "fault", {"site": "ds.save", "kind": "reply-lost", "hit": 1})
    # the caller never saw the answer: the save may not have happened
    assert _judge([_save(10, 0, None), lost, _load(20, None)]) == []
    # a fault on another site names no durable-state call
    other = Event(0, 10, "w#1", "fault", {"site": "log.append", "kind": "ack-lost", "hit": 1})
    assert len(_judge([_save(10, 0, None), other, _load(20, None)])) == 1


def test_in_sentinel_year_a_save_whose_reply_was_lost_is_unknown_and_the_key_still_linearizable():
    base = registry.get("sentinel-year")

    def build(run_):
        stack = base.build(run_)
        return attrs.evolve(stack, checks=[*stack.checks, HistoryLinearizable()])

    lose = parse_script([{"time_ms": 2 * HOUR_MS, "node": "sentinels/worker-1", "site": "ds.save",
                          "kind": "reply-lost"}])
    result = run(attrs.evolve(base, build=build),
                 ScenarioOptions(seed=0, duration_ms=parse_duration_ms("3h"), fault_script=lose))
    assert result.faults == {"reply-lost": 1}
    assert result.stats["history_ops_unknown"] == 1
    assert result.status == PASS and result.invariants["history-linearizable"] == 1
