"""Clocks per node (``faults.clocks``): the arithmetic, what model code reads,
replay, digests, the claimed tolerance, and the stores' fencing under skew."""
from __future__ import annotations

import attrs
import pytest
import trio

from faults.clocks import (BEYOND_JUMP_MS, CLOCK_SITE_BACK, CLOCK_SITE_FORWARD, CLOCK_SYNC_MS, CLOCK_TOLERANCE_MS,
                           NodeClock, NodeClocks, NodeRuntime)
from faults.kinds import (ALL_FAULT_KINDS, BEYOND_CONTRACT_KINDS, CLOCK_JUMP, CLOCK_JUMP_BEYOND, CLOCK_SKEW,
                          TIMED_FAULT_KINDS)
from model.clocks import MAX_CLOCK_OFFSET_MS, ClockOffsetExceeded, check_observed
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.records import OwnershipLost
from model.ledger.sqlite_store import SqliteSubmissionLedger
from scenarios import registry
from scenarios.invariants.clock_tolerance import ClockTolerance
from sim.clock import MS_PER_HOUR, MS_PER_MINUTE, parse_duration_ms
from sim.face.cli import main as cli_main
from sim.node import Node
from sim.runner import DETECTED, PASS, run
from sim.runtime import SimRuntime
from sim.scenario import ScenarioOptions
from sim.world import FaultEvent, World

CLOCK_KINDS = (CLOCK_SKEW, CLOCK_JUMP)


def _opts(seed: int, duration: str, **changes) -> ScenarioOptions:
    return ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), swarm=True, **changes)


# -- the arithmetic -------------------------------------------------------------


def test_a_node_clock_is_true_time_plus_offset_drift_since_the_last_sync_and_jumps():
    now = [0]
    clock = NodeClock("worker-1", lambda: now[0], offset_ms=-300, drift_ppm=100)
    assert clock.now_ms() == 0  # never before the epoch: it reads 0 until true time catches up
    now[0] = 200
    assert clock.now_ms() == 0
    now[0] = 1_000
    assert clock.now_ms() == 700
    now[0] = 30 * MS_PER_MINUTE
    assert clock.now_ms() == 30 * MS_PER_MINUTE - 300 + 180  # 100 ppm of 30 minutes
    now[0] = CLOCK_SYNC_MS + 10 * 1_000  # the daemon synced at the hour: the drift's error starts again
    assert clock.now_ms() == now[0] - 300 + 1
    clock.jump(-120)
    clock.jump(40)
    assert clock.now_ms() == now[0] - 300 + 1 - 80 and clock.error_ms() == -379
    slow = NodeClock("worker-2", lambda: now[0], drift_ppm=-100)
    now[0] = CLOCK_SYNC_MS - 1
    assert slow.error_ms() == -360  # floor: never a fraction of a millisecond


def test_the_tolerance_bounds_every_clock_a_seed_can_draw():
    world = World(7)
    clocks = NodeClocks(world, skew=True)
    for name in (f"w-{i}" for i in range(64)):
        clock = clocks.clock(name)
        worst = abs(clock.offset_ms) + abs(clock.drift_ppm) * CLOCK_SYNC_MS // 1_000_000
        assert worst + 140 <= CLOCK_TOLERANCE_MS
    # Drawn from ``clock/<name>``: the same node has the same clock whatever else was made first.
    other = NodeClocks(World(7), skew=True)
    assert (other.clock("w-5").offset_ms, other.clock("w-5").drift_ppm) == (clocks.clock("w-5").offset_ms,
                                                                            clocks.clock("w-5").drift_ppm)


def test_model_code_on_a_node_reads_its_clock_and_sleeps_in_true_time():
    runtime = SimRuntime()
    clock = NodeClock("n", runtime.now_ms, offset_ms=500)
    view = NodeRuntime(runtime, clock)
    node = Node("n")
    seen = []

    async def task() -> None:
        seen.append((runtime.now_ms(), view.now_ms()))
        await view.sleep_ms(1_000)  # a monotonic timer: a true duration
        seen.append((runtime.now_ms(), view.now_ms()))
        await view.sleep_until_ms(5_000)  # a deadline in the node's clock
        seen.append((runtime.now_ms(), view.now_ms()))
        event = view.event()
        woken = await event.wait_until_ms(view.now_ms() + 2_000)
        seen.append((runtime.now_ms(), woken))

    runtime.spawn_on(node, "t", task())
    runtime.run(60_000)
    assert seen == [(0, 500), (1_000, 1_500), (4_500, 5_000), (6_500, False)]


def test_without_clock_faults_model_code_gets_the_runtime_itself():
    world = World(1)
    node = world.add_node("n", lambda n: None)
    assert world.runtime_for(node) is world.runtime
    world.clocks = NodeClocks(world, skew=False)
    assert world.runtime_for(node).now_ms() == world.runtime.now_ms()


def test_the_kinds_are_registered_where_they_belong():
    assert {CLOCK_SKEW, CLOCK_JUMP, CLOCK_JUMP_BEYOND} <= set(ALL_FAULT_KINDS)
    assert CLOCK_JUMP in TIMED_FAULT_KINDS and CLOCK_JUMP_BEYOND in TIMED_FAULT_KINDS
    assert CLOCK_JUMP_BEYOND in BEYOND_CONTRACT_KINDS and CLOCK_JUMP not in BEYOND_CONTRACT_KINDS
    for name in ("ledger-storm", "agent-conversations", "sentinel-year", "secret-agents"):
        space = registry.get(name).swarm_space
        assert CLOCK_SKEW in space.fault_kinds and CLOCK_JUMP in space.fault_kinds, name
        # Each knob is drawn from its own stream (knob/<name>): where it sits in the list moves no draw.
        assert {"clock_offset_ms_max", "clock_drift_ppm_max", "store_clock"} <= {k.name for k in space.knobs}, name


# -- digests and replay -----------------------------------------------------------

def test_the_same_seed_with_clocks_gives_the_same_trace():
    opts = _opts(11, "5m", faults_enable=CLOCK_KINDS)
    first = run(registry.get("ledger-storm"), opts)
    second = run(registry.get("ledger-storm"), opts)
    assert first.passed and first.faults.get(CLOCK_SKEW, 0) > 0
    assert first.trace_digest == second.trace_digest
    # Skew moves the run: the same seed without it is another trace.
    other = run(registry.get("ledger-storm"), _opts(11, "5m", faults_disable=CLOCK_KINDS))
    assert other.trace_digest != first.trace_digest


def test_clock_jumps_are_recorded_and_replay_from_the_script():
    opts = _opts(3, "10m", faults_enable=CLOCK_KINDS)
    first = run(registry.get("ledger-storm"), opts)
    jumps = [e for e in first.fault_script if isinstance(e, FaultEvent) and e.kind == CLOCK_JUMP]
    assert first.passed and jumps, first.faults
    assert all(e.site in (CLOCK_SITE_FORWARD, CLOCK_SITE_BACK) and e.duration_ms > 0 for e in jumps)
    again = run(registry.get("ledger-storm"), attrs.evolve(opts, fault_script=tuple(first.fault_script)))
    assert again.trace_digest == first.trace_digest
    assert again.faults.get(CLOCK_JUMP) == len(jumps)


# -- describe ----------------------------------------------------------------------


def test_describe_prints_the_claimed_tolerance(capsys):
    assert cli_main(["describe", "ledger-storm"]) == 0
    out = capsys.readouterr().out
    assert f"clock tolerance: every node's clock within {CLOCK_TOLERANCE_MS} ms of true time" in out
    assert "clock.forward" in out and "clock_offset_ms_max" in out and "clock-tolerance" in out
    assert cli_main(["describe", "examples/two_cadences.toml"]) == 0  # a stack without clock faults
    assert "clock tolerance" not in capsys.readouterr().out


# -- beyond the tolerance ------------------------------------------------------------


@pytest.mark.parametrize("site", [CLOCK_SITE_FORWARD, CLOCK_SITE_BACK])
def test_a_jump_past_the_tolerance_is_detected(site):
    script = (FaultEvent(20 * MS_PER_MINUTE, "*", site, CLOCK_JUMP_BEYOND, None, duration_ms=MS_PER_HOUR),)
    # A hand-written entry names a node: the first worker.
    script = (attrs.evolve(script[0], node="workers/worker-1"),)
    result = run(registry.get("ledger-storm"), _opts(5, "2h", fault_script=script, knobs={"workers": 3}))
    assert result.status == DETECTED, (result.status, result.violations[:1])
    assert result.violations[0].invariant == "clock-tolerance"
    assert result.faults.get(CLOCK_JUMP_BEYOND) == 1


@pytest.mark.parametrize("site", [CLOCK_SITE_FORWARD, CLOCK_SITE_BACK])
def test_a_sentinel_whose_clock_leaves_the_tolerance_is_detected(site):
    script = (FaultEvent(3 * MS_PER_HOUR, "sentinels/worker-1", site, CLOCK_JUMP_BEYOND, None,
                         duration_ms=BEYOND_JUMP_MS[0]),)
    result = run(registry.get("sentinel-year"), _opts(1, "1d", fault_script=script))
    assert result.status == DETECTED, (result.status, result.violations[:1])
    assert result.violations[0].invariant == "clock-tolerance"


def test_a_beyond_the_contract_run_ends_detected():
    result = run(registry.get("sentinel-year"), _opts(7, "2d", beyond_contract=True))
    assert result.faults.get(CLOCK_JUMP_BEYOND, 0) >= 1, result.faults
    assert result.status == DETECTED


def test_a_process_refuses_a_durable_timestamp_from_its_future():
    check_observed("an admission", 10_000 + MAX_CLOCK_OFFSET_MS, 10_000)  # within the claim
    check_observed("an old admission", 0, 10_000 * 1_000)  # the past says nothing
    check_observed("nothing", None, 0)
    with pytest.raises(ClockOffsetExceeded) as caught:
        check_observed("sub-c1-1's admission", 10_001 + MAX_CLOCK_OFFSET_MS, 10_000)
    error = caught.value
    assert (error.name, error.retryable, error.observed_ms - error.now_ms) == ("ClockOffsetExceeded", False,
                                                                               MAX_CLOCK_OFFSET_MS + 1)
    assert "sub-c1-1's admission" in str(error)


# -- the oracle -----------------------------------------------------------------------


@attrs.frozen
class _Call:
    time_ms: int
    node: str
    port: str
    method: str
    args: tuple
    kwargs: dict
    result: object
    error: object = None
    damaged: bool = False


@attrs.frozen
class _Claim:
    submission_id: str
    owner_id: str
    lease_expires_ms: int = 0


def _oracle() -> tuple[ClockTolerance, list]:
    failures: list = []
    oracle = ClockTolerance()
    oracle._sink = failures.append
    return oracle, failures


def test_the_oracle_allows_a_takeover_a_tolerated_skew_explains():
    oracle, failures = _oracle()
    sid = "sub-c1-1"
    oracle.on_port_call(_Call(10_000, "a", "ledger", "claim", ("c1", "a", 20_000, 10_400), {},
                              _Claim(sid, "a", 30_400)))
    # b's clock 900 ms ahead: b takes over 900 ms before a's lease ends in true time.
    oracle.on_port_call(_Call(29_500, "b", "ledger", "claim", ("c1", "b", 20_000, 30_400), {},
                              _Claim(sid, "b", 50_400)))
    assert failures == []
    # Then a clock an hour ahead: a timestamp, and a takeover long before the lease ends.
    oracle.on_port_call(_Call(30_000, "c", "ledger", "claim", ("c1", "c", 20_000, 30_000 + MS_PER_HOUR), {},
                              _Claim(sid, "c", 50_000 + MS_PER_HOUR)))
    assert [f.invariant for f in failures] == ["clock-tolerance", "clock-tolerance"]
    assert "ahead" in failures[0].message and "before that owner's lease runs out" in failures[1].message


def test_the_oracle_takes_a_slow_call_for_what_it_is():
    oracle, failures = _oracle()
    # Its timestamp read a minute before it committed (latency, a pause): behind, never a clock fault.
    oracle.on_port_call(_Call(70_000, "a", "ledger", "claim", ("c1", "a", 20_000, 10_000), {}, None))
    assert failures == []


def test_the_oracle_flags_an_occurrence_started_before_it_is_due():
    oracle, failures = _oracle()
    due = 5 * MS_PER_HOUR
    ok = _Call(due - 800, "w", "kernel", "start_execution", ("s@1",), {"occurrence_ms": due, "started_at_ms": due},
               None)
    oracle.on_port_call(ok)
    assert failures == []
    # A clock 20 minutes ahead: its start stamp is ahead, and so is its occurrence.
    early = attrs.evolve(ok, time_ms=due - BEYOND_JUMP_MS[0])
    oracle.on_port_call(early)
    assert [("ahead" in f.message, "before its occurrence is due" in f.message) for f in failures] == [
        (True, False), (False, True)]


# -- the stores decide on the caller's clock, and still fence ---------------------------


def _ledgers(tmp_path):
    yield "memory", InMemorySubmissionLedger()
    ledger = SqliteSubmissionLedger.open(str(tmp_path / "ledger.db"))
    try:
        yield "sqlite", ledger
    finally:
        ledger.close()


def test_a_stale_owner_is_fenced_whatever_its_clock_says(tmp_path):
    true = [0]
    slow = NodeClock("a", lambda: true[0], offset_ms=-900)   # the first owner's clock, behind
    fast = NodeClock("b", lambda: true[0], offset_ms=+900)   # its successor's, ahead
    lease_ms = 5_000

    async def scenario(ledger) -> None:
        admitted = await ledger.admit("c1", "p1", "k1", {"text": "k1"}, slow.now_ms())
        await ledger.mark_ready(admitted.submission_id, slow.now_ms())
        true[0] = 10_000
        stale = await ledger.claim("c1", "a", lease_ms, slow.now_ms())
        assert stale is not None and stale.lease_expires_ms == 10_000 - 900 + lease_ms
        true[0] = 13_300  # b's clock (14_200) says a's lease ran out; a's (12_400) says it has 1.7 s left
        fresh = await ledger.claim("c1", "b", lease_ms, fast.now_ms())
        assert fresh is not None and fresh.epoch > stale.epoch
        true[0] = 13_400
        assert slow.now_ms() < stale.lease_expires_ms  # a believes it still owns the lane
        for what, call in (("renew", ledger.renew_ownership(stale, lease_ms, slow.now_ms())),
                           ("input marker", ledger.mark_input_applied(stale, "input-1", 1)),
                           ("release", ledger.release_ownership(stale))):
            with pytest.raises(OwnershipLost):
                await call
        await ledger.renew_ownership(fresh, lease_ms, fast.now_ms())  # the owner by epoch goes on

    for name, ledger in _ledgers(tmp_path):
        true[0] = 0
        trio.run(scenario, ledger)


# -- a reconciler reading a deadline another machine set ---------------------------------


class _Log:
    def __init__(self, deadline_ms: int) -> None:
        self.deadline_ms = deadline_ms

    async def lookup_batch(self, conversation_id, batch_id):
        return type("Batch", (), {"last_seq": 2})()

    async def read(self, conversation_id, after_seq, limit):
        envelope = type("Envelope", (), {"payload": {"deadlineMs": self.deadline_ms}})()
        return (type("Entry", (), {"envelope": envelope})(),)


class _Ledger:
    def __init__(self) -> None:
        self.resolved: list = []

    async def resolve_unknown(self, *args):
        self.resolved.append(args)


def test_a_reconciler_waits_out_the_claimed_offset_past_a_deadline_another_clock_set():
    """The agent's deadline is on the agent's clock and the tool service
    refuses by its own: a reconciler whose clock runs ahead must not call a
    call that may still land "never happened" (the max-offset rule)."""
    from scenarios.workloads.agents import Reconciler, ToolService

    deadline_ms = 10 * MS_PER_MINUTE
    world = World(1)
    reconciler = Reconciler(tools=ToolService())
    reconciler.world = world
    reconciler.ports = type("Ports", (), {"log": _Log(deadline_ms)})()
    record = type("Record", (), {"conversation_id": "c1"})()
    ledger = _Ledger()
    now = [deadline_ms + MAX_CLOCK_OFFSET_MS]
    reconciler.clock = type("Clock", (), {"now_ms": lambda self: now[0]})()
    assert trio.run(reconciler.act, ledger, record, "sub-c1-1", "call-1") is False and ledger.resolved == []
    now[0] += 1
    assert trio.run(reconciler.act, ledger, record, "sub-c1-1", "call-1") is True and len(ledger.resolved) == 1


# -- two settlers of one queued abort, on two clocks ---------------------------------------


def test_two_settlers_of_a_queued_abort_on_two_clocks_settle_it_once(stores):
    """Two workers' scans find one queued abort; the one whose clock is
    behind reserves, appends and finalizes first; the other, which read the
    row before that reservation, builds its own envelope (its clock's
    ``createdAt``): the ledger refuses it (another record), and that is the
    other settler's work done, not a failure of this one."""
    from model.lifecycle import SubmissionLifecycle
    from model.submissions import SubmissionClient

    conversation = "conv-two-settlers"
    client = SubmissionClient(stores.ledger, stores.log, now_ms=stores.now)
    trio.run(client.submit, conversation, "p", "k1", {"n": 1})
    queued = trio.run(client.submit, conversation, "p", "k2", {"n": 2})
    claim = trio.run(stores.ledger.claim, conversation, "worker-0", 60_000, stores.now())
    trio.run(stores.log.materialize, conversation, "worker-0", claim.epoch)
    trio.run(stores.ledger.request_abort, queued.submission_id, "client", "no longer needed", stores.now())
    stale = trio.run(stores.ledger.get, queued.submission_id)  # read by the second settler, before the first

    behind = SubmissionLifecycle(stores.ledger, stores.log, now_ms=lambda: stores.now() - 300, owner_id="worker-7")
    ahead = SubmissionLifecycle(stores.ledger, stores.log, now_ms=lambda: stores.now() + 200, owner_id="worker-3")
    first = trio.run(behind.settle_queued_abort, queued.submission_id, "worker-7")
    assert first is not None and first.outcome == "aborted"
    assert trio.run(ahead.settle_queued_abort, queued.submission_id, "worker-3", stale) is None
    row = trio.run(stores.ledger.get, queued.submission_id)
    assert row.outcome == "aborted" and row.settled
    assert [i for i in stores.ids(conversation) if i.startswith("settlement:" + queued.submission_id)] == [
        f"settlement:{queued.submission_id}"]
