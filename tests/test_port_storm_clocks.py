"""port-storm under clocks and partitions: its adversarial clients run on
their node's clock, a partition cuts an adversary node from some of the
stores it calls, and the adversaries' exact expectations hold under both
(a reply held past the timeout is a committed call whose answer was lost; a
timestamp an adversary chooses on purpose is no clock reading). The new
kinds join the swarm by name: a run without them is the run it was before
(its digest, computed on the commit before them, is pinned below)."""
from __future__ import annotations

import json

import pytest

from faults.clocks import BEYOND_JUMP_MS, CLOCK_SITE_BACK, CLOCK_SITE_FORWARD
from faults.kinds import CLOCK_JUMP, CLOCK_JUMP_BEYOND, CLOCK_SKEW, PARTITION
from faults.partitions import REFUSE, StoreUnreachable
from scenarios import registry
from scenarios.adversaries.client import committed_unheard, retry_wait_ms, UNREACHABLE_WAIT_MS, RETRY_WAIT_MS
from scenarios.invariants.clock_tolerance import ClockTolerance
from scenarios.stacks.port_storm import SWARM
from sim.clock import MS_PER_MINUTE, parse_duration_ms
from sim.face.cli import main
from sim.rng import Stream
from sim.runner import DETECTED, run
from sim.scenario import ScenarioOptions
from sim.world import FaultEvent

NEW_IN_CONTRACT = (CLOCK_SKEW, CLOCK_JUMP, PARTITION)

# Computed on the commit before port-storm had clocks and partitions (swarm on).
BEFORE = {
    (2, "10m", "memory"): "90c3c6eec3dbe7be52f6bd9a58824bb087654114e72549cd2b021dd7d8193f4c",
    (3, "10m", "sqlite"): "7a3be3529d1d236b71871c8e737c6ff5e0bba2369b9a03b26b757401a3e91d04",
}


def _opts(seed: int, duration: str, **extra) -> ScenarioOptions:
    return ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), swarm=True, **extra)


@pytest.mark.parametrize("key", sorted(BEFORE), ids=lambda key: "-".join(map(str, key)))
def test_a_port_storm_run_without_clocks_and_partitions_keeps_its_digest(key):
    seed, duration, store = key
    result = run(registry.get("port-storm"), _opts(seed, duration, store=store, faults_disable=NEW_IN_CONTRACT))
    assert result.passed, result.violations
    assert result.trace_digest == BEFORE[key]


def test_the_kinds_and_the_clock_knobs_are_drawn_by_name():
    assert {CLOCK_SKEW, CLOCK_JUMP, PARTITION} <= set(SWARM.fault_kinds)
    # Each knob from its own stream (knob/<name>): where it sits moves no draw.
    names = {knob.name for knob in SWARM.knobs}
    assert {"clock_offset_ms_max", "clock_drift_ppm_max"} <= names
    assert "store_clock" not in names  # the adversaries expect their own clock's times back


@pytest.mark.parametrize("kind,seed,store,duration", [(CLOCK_SKEW, 1, "memory", "3m"), (CLOCK_JUMP, 3, "memory", "3m"),
                                                      (PARTITION, 0, "memory", "8m"), (PARTITION, 0, "sqlite", "8m")])
def test_a_short_run_with_the_kind_forced_on_fires_it_and_passes(kind, seed, store, duration, capsys):
    others = tuple(k for k in NEW_IN_CONTRACT if k != kind)
    code = main(["run", "port-storm", "--seed", str(seed), "--duration", duration, "--store", store, "--json",
                 "--faults-enable", kind, "--faults-disable", ",".join(others)])
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result.get("violations")
    assert result["faults"][kind] >= 1, result["faults"]
    assert all(result["faults"].get(k, 0) == 0 for k in others), result["faults"]


def test_describe_and_list_show_the_kinds_for_port_storm(capsys):
    assert main(["describe", "port-storm"]) == 0
    described = capsys.readouterr().out
    assert all(kind in described for kind in (CLOCK_SKEW, CLOCK_JUMP, PARTITION, CLOCK_JUMP_BEYOND))
    assert "clock tolerance" in described and "clock_offset_ms_max" in described
    assert main(["list", "--faults", "port-storm"]) == 0
    listed = capsys.readouterr().out
    assert all(kind in listed for kind in (CLOCK_SKEW, CLOCK_JUMP, PARTITION))
    assert main(["describe", "port-storm", "--json"]) == 0
    assert {CLOCK_SKEW, CLOCK_JUMP, PARTITION} <= set(json.loads(capsys.readouterr().out)["fault_kinds"])


# -- what an adversary makes of a partition ------------------------------------------------


def test_only_a_reply_held_past_the_timeout_is_a_committed_call_unheard():
    held = StoreUnreachable("ledger.claim", "reply held past the 30000 ms timeout", committed=True)
    refused = StoreUnreachable("ledger.claim", REFUSE)
    hung = StoreUnreachable("ledger.claim", "no answer within 30000 ms")
    assert committed_unheard(held)
    assert not committed_unheard(refused) and not committed_unheard(hung)
    # It survives a pickle (a failure record), committed and all.
    import pickle
    assert pickle.loads(pickle.dumps(held)).committed is True


def test_an_unreachable_store_is_waited_for_longer_than_a_blip():
    rng = Stream(7, "test")
    waits = [retry_wait_ms(StoreUnreachable("ds.save", REFUSE), rng) for _ in range(50)]
    assert all(UNREACHABLE_WAIT_MS[0] <= w <= UNREACHABLE_WAIT_MS[1] for w in waits)
    assert RETRY_WAIT_MS[1] < UNREACHABLE_WAIT_MS[0]


# -- the clock-tolerance oracle and timestamps chosen on purpose ------------------------------


class _Call:
    def __init__(self, time_ms, node, port, method, args, kwargs=None, result=None, error=None):
        self.time_ms, self.node, self.port, self.method = time_ms, node, port, method
        self.args, self.kwargs, self.result, self.error = args, kwargs or {}, result, error


def _oracle(**options):
    failures: list = []
    oracle = ClockTolerance(**options)
    oracle._sink = failures.append
    return oracle, failures


def test_a_timestamp_chosen_on_purpose_is_not_judged_a_clock_and_every_other_one_is():
    chosen = {("adversary-1", "ledger", "finalize_settlement", 12_000)}
    oracle, failures = _oracle(chosen=lambda call, ms: (call.node, call.port, call.method, ms) in chosen)
    oracle.on_port_call(_Call(10_000, "adversary-1", "ledger", "finalize_settlement", ("sub-c-1", 12_000)))
    assert failures == []
    # The same instant from another node, or another value from this one, is a clock reading.
    oracle.on_port_call(_Call(10_000, "adversary-2", "ledger", "finalize_settlement", ("sub-c-1", 12_000)))
    oracle.on_port_call(_Call(10_000, "adversary-1", "ledger", "finalize_settlement", ("sub-c-1", 12_001)))
    assert [f.invariant for f in failures] == ["clock-tolerance", "clock-tolerance"]


def test_made_up_occurrences_are_not_judged_where_no_schedule_is_due():
    start = _Call(1_000, "ports-1", "kernel", "start_execution", ("k-1",),
                  {"occurrence_ms": 1_000_000, "started_at_ms": 1_000})
    oracle, failures = _oracle(occurrences=False)
    oracle.on_port_call(start)
    assert failures == []
    oracle, failures = _oracle()
    oracle.on_port_call(start)
    assert len(failures) == 1 and "before its occurrence is due" in failures[0].message


# The jump's minute: early enough that detection ends the run soon after (a jump back is found later).
@pytest.mark.parametrize("site, duration, minute", [(CLOCK_SITE_FORWARD, "1h", 2), (CLOCK_SITE_BACK, "30m", 10)])
def test_an_adversary_whose_clock_leaves_the_tolerance_is_detected(site, duration, minute):
    script = (FaultEvent(minute * MS_PER_MINUTE, "adversary-1", site, CLOCK_JUMP_BEYOND, None,
                         duration_ms=BEYOND_JUMP_MS[0]),)
    result = run(registry.get("port-storm"), _opts(1, duration, fault_script=script))
    assert result.status == DETECTED, (result.status, result.violations[:1])
    assert result.violations[0].invariant == "clock-tolerance"
    assert result.faults.get(CLOCK_JUMP_BEYOND) == 1


def test_every_adversarial_client_runs_on_its_node_clock():
    # A node's clock is made (and its skew recorded) when code on it first reads it.
    result = run(registry.get("port-storm"), _opts(1, "3m", faults_enable=(CLOCK_SKEW,),
                                                   knobs={"clock_offset_ms_max": 500}))
    assert result.passed, result.violations
    skewed = {e.node.split("#", 1)[0].rsplit("-", 1)[0] for e in result.fault_script
              if isinstance(e, FaultEvent) and e.kind == CLOCK_SKEW}
    assert {"adversary", "state", "ports", "values", "kernel"} <= skewed, skewed
