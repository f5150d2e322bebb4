"""Stores on their own clock (``faults.clocks`` store-clock mode).

An embedded store decides on its caller's clock (the caller hands it
``now_ms``); a store on its own server decides on that server's clock. With
the mode on, every port method's ``now_ms`` is read from the store machine's
clock at the instant the call reaches the store, and what the store, the
trace and the reference model see is that reading."""
from __future__ import annotations

import attrs
import pytest

from faults.clocks import STORE_CLOCK_KNOB, STORE_MACHINE, NodeClocks
from faults.kinds import CLOCK_JUMP, CLOCK_SKEW
from faults.ports import BoundPort, PortStats
from scenarios import registry
from sim.clock import parse_duration_ms
from sim.face.cli import main as cli_main
from sim.node import Node
from sim.runner import run
from sim.scenario import ScenarioOptions
from sim.world import FaultEvent, World


class _StampStore:
    """Records the ``now_ms`` each call carried to it."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    async def stamp(self, key: str, now_ms: int, tag: str = "") -> int:
        self.seen.append(("stamp", key, now_ms, tag))
        return now_ms

    async def close_before(self, before_ms: int, *, now_ms: int) -> int:
        self.seen.append(("close_before", before_ms, now_ms))
        return now_ms

    async def plain(self, key: str) -> str:
        self.seen.append(("plain", key))
        return key


_DESCRIBERS = {"stamp": lambda args, kwargs, result: {"args": args, "kwargs": kwargs, "result": result},
               "close_before": lambda args, kwargs, result: {"args": args, "kwargs": kwargs, "result": result},
               "plain": lambda args, kwargs, result: {"args": args, "result": result}}


def _world(store_clock: bool) -> World:
    world = World(5)
    world.clocks = NodeClocks(world, skew=True, store_clock=store_clock)
    return world


def _calls(world: World, store: _StampStore, calls) -> tuple[list, dict]:
    seen_calls: list = []
    world.traced = []
    world.trace.subscribe(["fake.stamp"], world.traced.append)
    world.port_observers.append(seen_calls.append)
    readings: dict = {}

    def start(node: Node) -> None:
        port = BoundPort(world, node, "fake", store, None, _DESCRIBERS, PortStats(), lambda: 0)
        runtime = world.runtime_for(node)

        async def worker() -> None:
            await world.runtime.sleep_ms(1_234)
            readings["caller"] = runtime.now_ms()
            readings["store"] = world.clocks.now_ms(STORE_MACHINE)
            await calls(port, runtime)

        world.runtime.spawn_on(node, "w", worker())

    world.add_node("worker-1", start)
    world.run_until(10_000)
    return seen_calls, readings


async def _three_calls(port, runtime) -> None:
    await port.stamp("a", runtime.now_ms(), tag="x")
    await port.stamp("b", now_ms=runtime.now_ms())
    await port.close_before(7, now_ms=runtime.now_ms())
    await port.plain("c")


def _skewed_apart(world: World) -> None:
    # Make the two machines' clocks differ whatever the seed drew.
    world.clocks.clock("worker-1").offset_ms = -400
    world.clocks.clock(STORE_MACHINE).offset_ms = 300
    for name in ("worker-1", STORE_MACHINE):
        world.clocks.clock(name).drift_ppm = 0


def test_with_the_store_clock_a_call_carries_the_store_machines_reading():
    world = _world(True)
    store = _StampStore()
    _skewed_apart(world)
    seen, readings = _calls(world, store, _three_calls)
    assert readings["store"] - readings["caller"] == 700
    store_ms = readings["store"]
    # Positional, keyword and keyword-only ``now_ms`` alike; other arguments untouched.
    assert store.seen == [("stamp", "a", store_ms, "x"), ("stamp", "b", store_ms, ""),
                          ("close_before", 7, store_ms), ("plain", "c")]
    # The reference model's observers see what the store used.
    assert [(c.method, c.args, c.kwargs) for c in seen] == [
        ("stamp", ("a", store_ms), {"tag": "x"}), ("stamp", ("b",), {"now_ms": store_ms}),
        ("close_before", (7,), {"now_ms": store_ms}), ("plain", ("c",), {})]
    # And so does the trace.
    stamps = world.traced
    assert [e.fields["result"] for e in stamps] == [store_ms, store_ms]


def test_without_the_store_clock_a_call_carries_the_callers_reading():
    world = _world(False)
    store = _StampStore()
    _skewed_apart(world)
    _, readings = _calls(world, store, _three_calls)
    caller_ms = readings["caller"]
    assert store.seen == [("stamp", "a", caller_ms, "x"), ("stamp", "b", caller_ms, ""),
                          ("close_before", 7, caller_ms), ("plain", "c")]


def test_the_store_clock_is_read_when_the_call_reaches_the_store():
    """A call held on its way (here: a partition-free latency by hand) is
    stamped when it arrives, not when it left."""
    world = _world(True)
    store = _StampStore()
    _skewed_apart(world)

    async def late(port, runtime) -> None:
        sent_ms = runtime.now_ms()
        await world.runtime.sleep_ms(500)
        await port.stamp("a", sent_ms)

    _, readings = _calls(world, store, late)
    assert store.seen == [("stamp", "a", readings["store"] + 500, "")]


# -- the choice ---------------------------------------------------------------------


def _opts(seed: int, duration: str, **changes) -> ScenarioOptions:
    return ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), swarm=True, **changes)


@pytest.mark.parametrize("name", ["ledger-storm", "agent-conversations", "secret-agents"])
def test_the_knob_is_offered_off_by_default(name):
    # Drawn from its own stream (knob/store_clock): where it sits in the list moves no draw.
    (knob,) = [k for k in registry.get(name).swarm_space.knobs if k.name == STORE_CLOCK_KNOB]
    assert (knob.minimum, knob.maximum, knob.default) == (0, 1, 0)


def test_one_seed_in_two_draws_the_store_clock():
    space = registry.get("ledger-storm").swarm_space
    from sim.rng import Streams
    from faults.swarm import choose

    drawn = [choose(space, Streams(seed)["swarm"], swarm=True, seed=seed).knob(STORE_CLOCK_KNOB)
             for seed in range(64)]
    assert 16 <= sum(drawn) <= 48


def test_a_run_says_which_clock_its_stores_use_and_the_store_machine_is_skewed_in_its_script():
    opts = _opts(3, "30m", faults_enable=(CLOCK_SKEW,), knobs={STORE_CLOCK_KNOB: 1})
    first = run(registry.get("ledger-storm"), opts)
    assert first.passed, first.violations
    assert first.config["store_clock"] == STORE_MACHINE
    skews = [e for e in first.fault_script if isinstance(e, FaultEvent) and e.kind == CLOCK_SKEW]
    assert STORE_MACHINE in [e.node for e in skews]
    # The script replays the store machine's skew (and so the run).
    again = run(registry.get("ledger-storm"), attrs.evolve(opts, fault_script=tuple(first.fault_script)))
    assert again.trace_digest == first.trace_digest
    # Without the store's entry the store reads true time: another run.
    dropped = tuple(e for e in first.fault_script if not (isinstance(e, FaultEvent) and e.node == STORE_MACHINE))
    other = run(registry.get("ledger-storm"), attrs.evolve(opts, fault_script=dropped))
    assert other.trace_digest != first.trace_digest
    # The same seed on the callers' clocks is another run too.
    caller = run(registry.get("ledger-storm"), attrs.evolve(opts, knobs={STORE_CLOCK_KNOB: 0}))
    assert caller.config["store_clock"] == "caller"
    assert caller.trace_digest != first.trace_digest


def test_the_store_clock_needs_clock_skew():
    """Without clock-skew a seed's stores decide on the callers' clocks,
    whatever the knob says: the mode is one of the skew's."""
    opts = _opts(3, "10m", faults_disable=(CLOCK_SKEW, CLOCK_JUMP), knobs={STORE_CLOCK_KNOB: 1})
    result = run(registry.get("ledger-storm"), opts)
    assert result.config["store_clock"] == "caller"


# Computed before the store clock existed (same seed, duration, memory,
# swarm on, clock-skew enabled): on the callers' clocks a run is the run it was.
BEFORE = {
    ("ledger-storm", 3, "30m"): "b3d533313a9262c8276f0d3e61d7bb9cfa5f9ef2c8d37b044a9da150b2eef129",
    ("ledger-storm", 6, "30m"): "dfb676bd16de666cf96ec1bc09c472fc62d3097d57e9d27cec6dd05648ac1c61",
    ("sentinel-year", 2, "1d"): "287468628f46299706cc89e4a6404b6e864f4a0c789ac08f0a72d97bfcc30eaf",
    ("sentinel-year", 4, "1d"): "d0149009fe7b5a47f54462c5038db53260d3a6584666f8fc9bf5e38bdb568734",
}


@pytest.mark.parametrize("key", sorted(BEFORE), ids=lambda key: "-".join(map(str, key)))
def test_on_the_callers_clocks_a_skewed_run_keeps_its_digest(key):
    name, seed, duration = key
    knobs = {STORE_CLOCK_KNOB: 0}
    result = run(registry.get(name), _opts(seed, duration, faults_enable=(CLOCK_SKEW,), knobs=knobs))
    assert result.passed, result.violations
    assert result.trace_digest == BEFORE[key]


def test_the_trace_keeps_the_callers_own_reading_beside_the_stores():
    """Just before a call's own event (which carries the store's reading),
    ``store.now`` says what the caller handed the store: its own clock's
    reading, the instant it decided."""
    world = _world(True)
    store = _StampStore()
    _skewed_apart(world)
    got: list = []
    world.trace.subscribe(["store.now", "fake.stamp", "fake.close_before", "fake.plain"], got.append)
    _, readings = _calls(world, store, _three_calls)
    caller_ms, store_ms = readings["caller"], readings["store"]
    now = {"site": None, "caller_ms": caller_ms, "store_ms": store_ms}
    assert [(e.kind, e.fields if e.kind == "store.now" else None) for e in got] == [
        ("store.now", {**now, "site": "fake.stamp"}), ("fake.stamp", None),
        ("store.now", {**now, "site": "fake.stamp"}), ("fake.stamp", None),
        ("store.now", {**now, "site": "fake.close_before"}), ("fake.close_before", None),
        ("fake.plain", None)]


def test_on_the_callers_clock_the_trace_has_no_store_reading():
    world = _world(False)
    got: list = []
    world.trace.subscribe(["store.now"], got.append)
    _calls(world, _StampStore(), _three_calls)
    assert got == []


def _admit(trace, occurrence_ms: int, admitted_ms: int) -> None:
    trace.emit("w", "ledger.admit", {"conversation": f"s@{occurrence_ms}", "principal": "s",
                                     "key": f"s@{occurrence_ms}", "admitted_ms": admitted_ms, "parent": None,
                                     "group": None, "fence": None, "metadata": None,
                                     "submission": f"sub-{occurrence_ms}", "queue_seq": 1, "replayed": False})
    trace.emit("w", "ledger.finalize_settlement", {"submission": f"sub-{occurrence_ms}"})


def test_the_wake_oracle_judges_a_start_at_the_drivers_reading_not_the_stores():
    """On its own clock the ledger stamps an admission with its own reading,
    which may already be past the next occurrence when the driver's was
    not: the driver chose the latest occurrence due by its own clock, and
    that is the instant ``exactly-once-wake`` judges (``store.now``)."""
    from model.schedules import Schedule
    from scenarios.invariants.exactly_once_wake import ExactlyOnceWake
    from sim.trace import Trace

    trace = Trace(clock=lambda: 0)
    found = []
    checker = ExactlyOnceWake({"s": Schedule("s", 10, end_ms=100)}, end_ms=100)
    checker.attach(trace, lambda: 0, found.append)
    _admit(trace, 0, 0)
    # The driver decided at 12 (occurrence 10 the latest due); the store read 21.
    trace.emit("w", "store.now", {"site": "ledger.admit", "caller_ms": 12, "store_ms": 21})
    _admit(trace, 10, 21)
    assert found == []
    # Another site's reading is not the admission's: judged at the admission's own time.
    trace.emit("w", "store.now", {"site": "ledger.mark_ready", "caller_ms": 22, "store_ms": 22})
    trace.emit("w", "wake.skipped", {"schedule": "s", "first_ms": 20, "last_ms": 20})
    _admit(trace, 30, 41)
    # The rule is kept: a driver whose own clock had a later occurrence due fails it.
    trace.emit("w", "store.now", {"site": "ledger.admit", "caller_ms": 52, "store_ms": 52})
    trace.emit("w", "wake.skipped", {"schedule": "s", "first_ms": 40, "last_ms": 40})
    _admit(trace, 50, 52)
    trace.emit("w", "store.now", {"site": "ledger.admit", "caller_ms": 71, "store_ms": 69})
    _admit(trace, 60, 69)
    assert [v.message for v in found] == [
        "s@30: catch-up policy 'latest' starts the latest due occurrence (40), not 30",
        "s@60: catch-up policy 'latest' starts the latest due occurrence (70), not 60"]


def test_sentinel_year_offers_the_store_clock():
    assert STORE_CLOCK_KNOB in [k.name for k in registry.get("sentinel-year").swarm_space.knobs]


def test_describe_says_which_clock_the_stores_decide_on(capsys):
    assert cli_main(["describe", "ledger-storm"]) == 0
    out = capsys.readouterr().out
    assert "store_clock" in out and "own clock" in out


# -- the worker's lease on a store with its own clock -----------------------------------


def _drive(coro):
    """Run a coroutine whose awaits are fakes that answer at once."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the coroutine suspended")


def _step_on_two_clocks(store_ahead_ms: int, step_ms: int, lease_ms: int = 5_000):
    """A worker renews at 100 000 ms by its clock; the ledger, on a clock
    ``store_ahead_ms`` ahead of it, grants ``lease_ms`` from its own reading;
    the step then takes ``step_ms``. What the work saw, or what was raised."""
    from types import SimpleNamespace

    from model.submissions import SubmissionWorker

    clock = {"worker": 100_000}

    class Ledger:
        async def renew_ownership(self, claim, lease, at_ms):
            store_ms = clock["worker"] + store_ahead_ms  # the store reads its own clock, not ``at_ms``
            return SimpleNamespace(submission_id=claim.submission_id, owner_id="w", epoch=claim.epoch,
                                   lease_expires_ms=store_ms + lease)

    async def step_delay(submission_id, index):
        clock["worker"] += step_ms

    effects = []
    worker = SubmissionWorker(Ledger(), None, "w", lease_ms=lease_ms, now_ms=lambda: clock["worker"],
                              work=lambda request, index: effects.append(index) or {"step": index},
                              step_delay=step_delay)
    claim = SimpleNamespace(submission_id="sub-c-1", epoch=3)
    record = SimpleNamespace(submission_id="sub-c-1", input={"n": 1})
    try:
        return _drive(worker.run_step("c", claim, record, 0)), effects
    except Exception as error:  # noqa: BLE001 - the test looks at it
        return error, effects


def test_a_worker_behind_the_stores_clock_stops_when_its_own_lease_is_over():
    """The store's lease ran from the store's reading; the worker's clock
    is 1.5 s behind it, so the expiry the ledger granted reads 1.5 s later
    on the worker's clock than the lease really lasts. The worker measures
    the lease from when it asked for it, on its own clock: a step that
    outlasts it by half a second does nothing."""
    error, effects = _step_on_two_clocks(store_ahead_ms=1_500, step_ms=5_500)
    assert effects == [] and error.name == "LeaseExpired"
    assert (error.lease_expires_ms, error.now_ms) == (105_000, 105_500)


def test_a_worker_ahead_of_the_stores_clock_keeps_to_the_granted_expiry():
    """A worker whose clock runs ahead of the store's stops at the expiry the
    ledger granted, read on its own clock: earlier than the lease really
    ends, never later."""
    error, effects = _step_on_two_clocks(store_ahead_ms=-1_500, step_ms=3_600)
    assert effects == [] and error.name == "LeaseExpired"
    assert (error.lease_expires_ms, error.now_ms) == (103_500, 103_600)
    answer, effects = _step_on_two_clocks(store_ahead_ms=-1_500, step_ms=3_400)
    assert answer == {"step": 0} and effects == [0]


def test_on_the_callers_clock_the_worker_acts_until_the_granted_expiry():
    answer, effects = _step_on_two_clocks(store_ahead_ms=0, step_ms=4_999)
    assert answer == {"step": 0} and effects == [0]
    error, effects = _step_on_two_clocks(store_ahead_ms=0, step_ms=5_000)
    assert effects == [] and error.name == "LeaseExpired"


def _workers_metrics(result) -> dict:
    (workers,) = [m for name, m in result.stats["workloads"].items() if name.endswith("workers")]
    return workers


def test_with_the_store_ahead_some_steps_outlast_the_lease_into_the_stores_window():
    """A stall aimed at the gap between a lease's end as its worker measures
    it and as the store's clock (ahead of the worker's) reads it: a step
    lasts the lease plus less than the lead. The worker must stop there; a
    worker that trusted the granted expiry would act past the lease."""
    opts = _opts(5, "30m", faults_enable=(CLOCK_SKEW,), knobs={STORE_CLOCK_KNOB: 1})
    result = run(registry.get("ledger-storm"), opts)
    assert result.passed, result.violations
    assert _workers_metrics(result)["lease_edge_stalls"] > 0


def test_on_the_callers_clock_no_step_is_aimed_at_the_lease_edge():
    result = run(registry.get("ledger-storm"), _opts(5, "30m", faults_enable=(CLOCK_SKEW,),
                                                      knobs={STORE_CLOCK_KNOB: 0}))
    assert "lease_edge_stalls" not in _workers_metrics(result)
