"""Schedules as data: FIFO unchanged, random and PCT find a planted race, deviations replay and shrink."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sim.runtime as runtime_module
from sim.shrink import ddmin
from sim.interleave import (Deviation, FifoPolicy, PctPolicy, RandomPolicy, ScriptedPolicy, await_site,
                            parse_schedule)
from sim.node import Node
from sim.rng import Stream, derive_seed64
from sim.runtime import SimRuntime

REPO_ROOT = Path(__file__).resolve().parents[1]
SEEDS = range(100)


def _stream(seed: int) -> Stream:
    return Stream(derive_seed64(seed, "scheduling"), "scheduling")


# -- (a) FIFO stays FIFO ----------------------------------------------------------


def _mixed_program(rt: SimRuntime) -> list[tuple]:
    """Ties, checkpoints, a spawn at the current instant, a pause, a crash, a stop and resume."""
    a, b, harness = Node("a"), Node("b"), Node("harness", role="harness")
    log: list[tuple] = []

    async def child(tag: str) -> None:
        log.append(("child", tag, rt.now_ms()))
        await rt.checkpoint()
        log.append(("child-again", tag, rt.now_ms()))

    async def worker(name: str, delay_ms: int) -> None:
        for i in range(4):
            log.append((name, i, rt.now_ms()))
            if i == 1:
                rt.spawn(f"{name}-child", child(name))
            await (rt.checkpoint() if i % 2 == 0 else rt.sleep_ms(delay_ms))

    async def pauser() -> None:
        await rt.sleep_ms(10)
        rt.pause_node(b, 25)
        log.append(("paused-b", rt.now_ms()))
        await rt.sleep_ms(20)
        rt.crash_node(a)
        log.append(("crashed-a", rt.now_ms()))

    for name, node, delay_ms in (("a1", a, 10), ("a2", a, 10), ("b1", b, 10), ("b2", b, 5)):
        rt.spawn_on(node, name, worker(name, delay_ms))
    rt.spawn_on(harness, "pauser", pauser())

    async def stopper() -> None:
        rt.stop_requested = True  # mid-instant: two a-tasks are still ready at t=0

    rt.spawn_on(harness, "stopper", stopper())
    rt.run(100)
    log.append(("stopped", rt.now_ms()))
    rt.stop_requested = False
    rt.run(100)
    log.append(("end", rt.now_ms(), rt.idle()))
    return log


def test_fifo_order_is_unchanged_for_a_simple_program():
    def order(rt: SimRuntime) -> list[tuple[str, int]]:
        node = Node("a")
        log = []

        async def task(name: str) -> None:
            for i in range(3):
                log.append((name, i))
                await rt.checkpoint()

        for name in ("A", "B", "C"):
            rt.spawn_on(node, name, task(name))
        rt.run(10)
        return log

    expected = [(name, i) for i in range(3) for name in ("A", "B", "C")]
    assert order(SimRuntime()) == expected
    explicit = SimRuntime(_stream(1), schedule=parse_schedule("fifo"))
    assert explicit.chooser is None  # the plain fast loop, not the policy loop
    assert order(explicit) == expected
    assert explicit.deviations == [] and explicit._scheduling.draws == 0


def test_policy_loop_with_no_deviations_is_exactly_fifo():
    fifo = _mixed_program(SimRuntime())
    assert ("stopped", 0) in fifo and ("paused-b", 10) in fifo and ("crashed-a", 30) in fifo
    scripted = SimRuntime(_stream(1), schedule=ScriptedPolicy(()))
    assert _mixed_program(scripted) == fifo
    assert scripted.deviations == [] and scripted.contested_decisions > 0


def test_random_schedule_explores_the_same_program_differently():
    fifo = _mixed_program(SimRuntime())
    logs = [_mixed_program(SimRuntime(_stream(seed), schedule=RandomPolicy())) for seed in range(10)]
    assert any(log != fifo for log in logs)
    again = _mixed_program(SimRuntime(_stream(3), schedule=RandomPolicy()))
    assert again == logs[3]  # same seed, same interleaving


# -- (b) a planted interleaving bug ------------------------------------------------------


class _Store:
    """A dict-backed store: reads and writes are atomic, as every simulated store call is."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {"balance": 0}

    def read(self, key: str) -> int:
        return self.rows[key]

    def write(self, key: str, value: int) -> None:
        self.rows[key] = value


def _race(schedule, seed: int) -> tuple[int, SimRuntime]:
    """Two workers credit 1 each with read ... write: a lost update unless serialized.

    worker-1 reads at once and writes after two checkpoints; worker-2 first
    does three checkpoints of setup, so under FIFO worker-1 has written before
    worker-2 reads. Only a schedule that lets worker-2 overtake worker-1's
    suspended read-modify-write loses a credit.
    """
    rt = SimRuntime(_stream(seed), schedule=schedule)
    node = Node("ledger-node")
    store = _Store()

    async def settle() -> None:
        await rt.checkpoint()
        await rt.checkpoint()

    async def setup(steps: int) -> None:
        for _ in range(steps):
            await rt.checkpoint()

    async def credit(setup_steps: int) -> None:
        await setup(setup_steps)
        balance = store.read("balance")
        await settle()
        store.write("balance", balance + 1)

    rt.spawn_on(node, "worker-1", credit(0))
    rt.spawn_on(node, "worker-2", credit(3))
    rt.run(1_000)
    assert rt.idle()
    return store.rows["balance"], rt


def _failing_seeds(schedule) -> list[int]:
    return [seed for seed in SEEDS if _race(schedule, seed)[0] != 2]


def test_fifo_never_finds_the_planted_race():
    assert _failing_seeds(parse_schedule("fifo")) == []
    assert _failing_seeds(None) == []


@pytest.mark.parametrize("spec", ["random", "pct:3", "pct:2:8"])
def test_random_and_pct_find_the_planted_race_within_100_seeds(spec):
    failing = _failing_seeds(parse_schedule(spec))
    assert failing, f"{spec} never lost an update in {len(SEEDS)} seeds"


# -- (c) deviations are named data: replay and shrink ------------------------------------------


@pytest.mark.parametrize("spec", ["random", "pct:3"])
def test_deviations_of_a_failing_seed_replay_the_failure(spec):
    seed = _failing_seeds(parse_schedule(spec))[0]
    balance, recorded = _race(parse_schedule(spec), seed)
    assert balance == 1
    script = list(recorded.deviations)
    assert script and recorded.deviation_count == len(script)

    # The replay draws nothing: any seed's stream (or none) gives the same run.
    for replay_seed in (seed, seed + 1):
        replay_balance, replay = _race(ScriptedPolicy(script), replay_seed)
        assert replay_balance == 1
        assert replay.deviations == script
        assert replay.chooser.applied == len(script) and replay.chooser.pending() == 0
        assert replay._scheduling.draws == 0

    # Every deviation names where the passed-over task was suspended: the
    # innermost coroutine of its await chain, not a draw number.
    sites = {d.await_site.rsplit(".", 1)[-1] for d in script}
    assert sites <= {"setup", "settle", "credit (not started)"}, sites
    assert "settle" in sites  # the race: a worker preempted between its read and its write
    preempted_mid_credit = [d for d in script if d.await_site.endswith("settle")]
    assert "worker-" in preempted_mid_credit[0].describe()
    assert "preempted at" in preempted_mid_credit[0].describe()


def test_removing_deviations_still_runs_and_shrinks_to_a_minimal_script():
    seed = _failing_seeds(RandomPolicy())[0]
    script = list(_race(RandomPolicy(), seed)[1].deviations)

    # Every sub-script runs to completion (dropped decisions fall back to FIFO).
    for drop in range(len(script)):
        _race(ScriptedPolicy(script[:drop] + script[drop + 1:]), 0)
    assert _race(ScriptedPolicy(()), 0)[0] == 2  # no deviations: FIFO, no bug

    # The shrinker's ddmin (``loomsim shrink`` runs it over faults and
    # deviations alike) keeps a failing, smaller script.
    shrunk = ddmin(script, lambda candidate: _race(ScriptedPolicy(candidate), 0)[0] != 2)
    assert 1 <= len(shrunk) <= len(script)
    assert _race(ScriptedPolicy(shrunk), 0)[0] == 1
    assert any(d.await_site.endswith("settle") for d in shrunk)


def test_hand_written_deviation_without_step_applies_at_first_chance():
    # "At t=0, let worker-2 run before worker-1 whenever it can": keyed by
    # names only, like a fault with hit None. Repeated, it overtakes the
    # read-modify-write and loses the update.
    overtake = Deviation.from_json({"time_ms": 0, "kind": "schedule", "node": "ledger-node", "task": "worker-2"})
    balance, rt = _race(ScriptedPolicy([overtake] * 4), 0)
    assert balance == 1
    assert rt.chooser.applied == 4
    assert [d.chosen_task for d in rt.deviations] == ["worker-2"] * 4


def test_scripted_deviation_whose_task_is_not_ready_is_missed_not_fatal():
    ghost = Deviation(0, 0, "nobody", "ledger-node", "worker-1", "ledger-node", "x")
    balance, rt = _race(ScriptedPolicy([ghost]), 0)
    assert balance == 2 and rt.chooser.missed == 1 and rt.deviations == []


def test_deviation_json_round_trip_and_validation():
    deviation = Deviation(3, 86_400_000, "worker-2", "w#2", "worker-1", "w", "Ledger.claim")
    data = json.loads(json.dumps(deviation.to_json()))
    assert data == {"time_ms": 86_400_000, "kind": "schedule", "step": 3, "node": "w#2", "task": "worker-2",
                    "preempted_node": "w", "preempted_task": "worker-1", "await_site": "Ledger.claim"}
    assert Deviation.from_json(data) == deviation
    hand_written = Deviation.from_json({"time_ms": 0, "kind": "schedule", "node": "w", "task": "claim"})
    assert hand_written == Deviation(None, 0, "claim", "w", "", "", "")
    assert "step" not in hand_written.to_json()
    for bad in ({**data, "kind": "crash-before-call"}, {**data, "step": -1}, {**data, "time_ms": "0"},
                {**data, "task": ""}, {**data, "hit": 3}, [data]):
        with pytest.raises(ValueError) as info:
            Deviation.from_json(bad, "fault script entry 7")
        assert str(info.value).startswith("fault script entry 7: ") and "\n" not in str(info.value)


def test_deviations_are_bounded_but_all_reach_the_observer(monkeypatch):
    monkeypatch.setattr(runtime_module, "DEVIATIONS_MAX", 2)
    seen: list[Deviation] = []
    rt = SimRuntime(_stream(0), schedule=RandomPolicy())
    rt.on_deviation = seen.append
    node = Node("n")

    async def spinner() -> None:
        for _ in range(20):
            await rt.checkpoint()

    for i in range(4):
        rt.spawn_on(node, f"t{i}", spinner())
    rt.run(10)
    assert rt.deviation_count > 2
    assert len(rt.deviations) == 2
    assert seen[:2] == rt.deviations and len(seen) == rt.deviation_count


def test_deviations_are_identical_across_processes_and_hash_seeds():
    program = (
        "import json, sys\n"
        "sys.path.insert(0, 'tests')\n"
        "from test_interleavings import _race\n"
        "from sim.interleave import parse_schedule\n"
        "out = [[d.to_json() for d in _race(parse_schedule(s), seed)[1].deviations]\n"
        "       for s in ('random', 'pct:3') for seed in range(5)]\n"
        "print(json.dumps(out, sort_keys=True))\n"
    )
    outputs = []
    for hash_seed in ("0", "31337"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=str(REPO_ROOT))
        proc = subprocess.run([sys.executable, "-c", program], cwd=REPO_ROOT, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1]
    assert any(json.loads(outputs[0]))


# -- PCT mechanics ------------------------------------------------------------------------------


def test_pct_runs_the_highest_priority_task_until_a_change_point():
    rt = SimRuntime(_stream(5), schedule=PctPolicy(1))  # depth 1: no change points
    node = Node("n")
    log: list[str] = []

    async def task(name: str) -> None:
        for _ in range(3):
            log.append(name)
            await rt.checkpoint()

    for name in ("A", "B", "C"):
        rt.spawn_on(node, name, task(name))
    rt.run(10)
    # Strict priorities and no change point: each task runs to completion in turn.
    assert sorted(log) == sorted(["A", "B", "C"] * 3)
    assert [log[i] for i in (0, 3, 6)] == [log[i + 1] for i in (0, 3, 6)] == [log[i + 2] for i in (0, 3, 6)]


def test_pct_change_points_are_drawn_up_front_within_the_budget():
    chooser = PctPolicy(4, 10).bind(_stream(9))
    points = chooser.change_points()
    assert len(points) == 3 and len(set(points)) == 3 and all(0 <= p < 10 for p in points)
    assert chooser.steps == 10
    # Without K, each seed draws its own budget (a power of two), deterministically.
    budgets = {PctPolicy(3).bind(_stream(seed)).steps for seed in range(30)}
    assert len(budgets) > 3 and all(b & (b - 1) == 0 and 4 <= b <= 1 << 20 for b in budgets)
    assert PctPolicy(3).bind(_stream(7)).change_points() == PctPolicy(3).bind(_stream(7)).change_points()


# -- (d) the public boundary ---------------------------------------------------------------------


@pytest.mark.parametrize("spec, policy", [
    ("fifo", FifoPolicy()), ("random", RandomPolicy()), ("pct:1", PctPolicy(1)), ("pct:3", PctPolicy(3)),
    (" pct:3:200 ", PctPolicy(3, 200)),
])
def test_parse_schedule_accepts_the_documented_specs(spec, policy):
    parsed = parse_schedule(spec)
    assert parsed == policy
    assert parse_schedule(parsed.spec) == parsed  # the canonical spec round-trips


@pytest.mark.parametrize("spec", ["", "FIFO", "rand", "pct", "pct:", "pct:0", "pct:-1", "pct:x", "pct:3.5",
                                  "pct:03", "pct:65", "pct:3:0", "pct:4:2", "pct:1:2:3", "random:2", "fifo:1",
                                  None, 3])
def test_parse_schedule_rejects_bad_specs_with_a_one_line_message(spec):
    with pytest.raises(ValueError) as info:
        parse_schedule(spec)
    message = str(info.value)
    assert "\n" not in message and message
    assert ("fifo" in message and "random" in message and "pct:D" in message) or "pct" in message
    if isinstance(spec, str) and spec:
        assert repr(spec) in message  # names what was wrong


def test_policies_that_draw_need_a_stream_and_exclude_shuffle_ties():
    with pytest.raises(ValueError, match="scheduling stream"):
        SimRuntime(None, schedule=RandomPolicy())
    with pytest.raises(ValueError, match="exclusive"):
        SimRuntime(_stream(1), shuffle_ties=True, schedule=PctPolicy(2))
    SimRuntime(_stream(1), shuffle_ties=True, schedule=FifoPolicy())  # FIFO + shuffle: as before
    SimRuntime(None, schedule=ScriptedPolicy(()))  # replay draws nothing


def test_await_site_of_an_unstarted_and_a_suspended_coroutine():
    rt = SimRuntime()

    async def inner() -> None:
        await rt.checkpoint()

    async def outer() -> None:
        await inner()

    coro = outer()
    try:
        assert await_site(coro).endswith("outer (not started)")
        coro.send(None)
        assert await_site(coro).endswith("test_await_site_of_an_unstarted_and_a_suspended_coroutine"
                                         ".<locals>.inner")
    finally:
        coro.close()


def test_hand_written_node_may_be_a_name_or_a_label():
    def first_runner(node_ref: str) -> str:
        rt = SimRuntime(None, schedule=ScriptedPolicy([Deviation(None, 0, "b", node_ref, "", "", "")]))
        node = Node("w", incarnation=2)  # label w#2
        order: list[str] = []

        async def task(name: str) -> None:
            order.append(name)

        rt.spawn_on(node, "a", task("a"))
        rt.spawn_on(node, "b", task("b"))
        rt.run(10)
        return order[0]

    assert first_runner("w#2") == "b" and first_runner("w") == "b"
    assert first_runner("w#1") == "a"  # another incarnation: not ready, stays FIFO


def test_scripted_policy_rejects_two_deviations_at_one_decision():
    first = Deviation(2, 0, "worker-2", "n", "worker-1", "n", "x")
    with pytest.raises(ValueError, match="entry 1: a second deviation at t=0ms step 2"):
        ScriptedPolicy([first, Deviation(2, 0, "worker-3", "n", "worker-1", "n", "x")])
    with pytest.raises(ValueError, match="expected a Deviation"):
        ScriptedPolicy([first.to_json()])


def test_a_deviation_in_a_real_scenario_names_the_port_call_it_preempted():
    """A report reads "worker-2/worker preempted after ledger.claim", not "draw #7"."""
    from scenarios import registry
    from sim.runner import run
    from sim.scenario import ScenarioOptions

    result = run(registry.get("ledger-storm"), ScenarioOptions(seed=1, duration_ms=3_600_000, schedule="random"))
    deviations = [e for e in result.fault_script if isinstance(e, Deviation)]
    named = [d for d in deviations if d.last_call]
    assert named, "no deviation preempted a task that had made a port call"
    assert all(d.last_call.split(" ", 1)[0] in ("in", "after") for d in named)
    assert any(d.last_call.startswith("after ledger.") for d in named)
    sample = next(d for d in named if d.last_call.startswith("after ledger."))
    assert f"preempted {sample.last_call} (at " in sample.summary()
    assert Deviation.from_json(sample.to_json()) == sample
