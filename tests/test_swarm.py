"""Swarm testing: each seed chooses its fault kinds, failpoints, workload
switches and knobs; flags pin single choices; runs and sweeps report
coverage (what fired, what never did, which rare cases were reached)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from faults.kinds import ACK_LOST, NODE_KILL
from faults.swarm import Knob, SwarmError, SwarmSpace, choose
from scenarios import registry
from sim.clock import parse_duration_ms
from sim.rng import Streams
from sim.runner import run
from sim.scenario import ScenarioOptions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPACE = SwarmSpace(fault_kinds=("a", "b", "c", "d"), failpoints=("fp1", "fp2", "fp3"), workload=("w1", "w2"),
                   knobs=(Knob("lease_ms", 20, 10, 100, "lease"), Knob("cap", 5, 1, 9, "cap")), failpoint_rate=1e-3)


def pick(seed: int, **kw):
    return choose(SPACE, Streams(seed)["swarm"], **{"swarm": True, **kw})


def test_choices_are_a_function_of_the_seed_and_vary_across_seeds():
    assert pick(1) == pick(1)
    assert len({(c.fault_kinds, c.failpoints, c.workload, c.knobs) for c in map(pick, range(20))}) > 10
    for seed in range(20):
        c = pick(seed)
        assert c.fault_kinds and set(c.fault_kinds) <= {"a", "b", "c", "d"}  # never an empty mix
        assert all(10 <= v <= 100 for n, v in c.knobs if n == "lease_ms")
        assert all(rate in (2e-4, 1e-3, 5e-3) for _, rate in c.failpoints)


def test_a_pin_changes_that_choice_only():
    base = pick(3)
    off = base.fault_kinds[0]
    pinned = pick(3, disable=(off,), knobs={"cap": 9})
    assert off not in pinned.fault_kinds
    assert set(pinned.fault_kinds) == set(base.fault_kinds) - {off}
    assert dict(pinned.knobs)["cap"] == 9 and dict(pinned.knobs)["lease_ms"] == dict(base.knobs)["lease_ms"]
    assert pinned.failpoints == base.failpoints and pinned.workload == base.workload
    forced = pick(3, enable=("w1", "w2"))
    assert forced.workload == ("w1", "w2")


def test_the_full_mix_is_everything_at_defaults():
    full = choose(SPACE, Streams(1)["swarm"], swarm=False)
    assert full.fault_kinds == SPACE.fault_kinds and full.workload == SPACE.workload
    assert full.failpoints is None and full.site_rates(SPACE.failpoints, "failpoint-crash") == {}
    assert dict(full.knobs) == {"lease_ms": 20, "cap": 5}


@pytest.mark.parametrize("kw, message", [
    ({"enable": ("zz",)}, "'zz' is not a fault kind"),
    ({"enable": ("a",), "disable": ("a",)}, "both enabled and disabled"),
    ({"knobs": {"nope": 1}}, "unknown knob 'nope'"),
    ({"knobs": {"cap": 10}}, "outside its legal range 1..9"),
])
def test_bad_pins_are_refused(kw, message):
    with pytest.raises(SwarmError, match=message):
        pick(1, **kw)


def test_a_disabled_kind_never_fires_and_a_pinned_knob_is_used():
    opts = ScenarioOptions(seed=4, duration_ms=parse_duration_ms("3h"), swarm=True,
                           faults_enable=(ACK_LOST,), faults_disable=(NODE_KILL,), knobs={"lease_ms": 7_000})
    result = run(registry.get("ledger-storm"), opts)
    assert result.passed, result.violations
    swarm = result.config["swarm"]
    assert NODE_KILL not in swarm["fault_kinds"] and ACK_LOST in swarm["fault_kinds"]
    assert swarm["knobs"]["lease_ms"] == 7_000
    assert result.faults.get(NODE_KILL, 0) == 0 and result.coverage["fault_kinds"][NODE_KILL] == 0
    assert NODE_KILL in result.coverage["never_fired"]


def _cli(*args: str, cwd: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          check=False)


def test_run_json_shows_swarm_choices_and_per_kind_and_per_failpoint_counts(tmp_path):
    proc = _cli("run", "ledger-storm", "--seed", "7", "--duration", "1h", "--json", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    body = json.loads(proc.stdout)
    swarm = body["config"]["swarm"]
    assert swarm["swarm"] is True and set(swarm) == {"swarm", "fault_kinds", "failpoints", "workload", "knobs"}
    coverage = body["coverage"]
    assert set(coverage["fault_kinds"]) == set(registry.get("ledger-storm").swarm_space.fault_kinds)
    assert all(set(v) == {"hits", "fired"} for v in coverage["failpoints"].values())
    assert all(v["hits"] > 0 for v in coverage["failpoints"].values())
    # Per port: which kinds fired where (read faults count at the log).
    assert set(coverage["ports"]) <= {"ledger", "log", "checkpoints"} and coverage["ports"]
    assert sum(n for counts in coverage["ports"].values() for n in counts.values()) <= sum(body["faults"].values())
    human = _cli("run", "ledger-storm", "--seed", "7", "--duration", "1h", cwd=str(tmp_path))
    lines = human.stdout.splitlines()
    assert lines[1].startswith("swarm: faults=")  # printed before the run
    # Kinds on and never reached are told apart from kinds this seed's swarm switched off.
    assert any(line.startswith("coverage: never fired (enabled):") and "switched off by this seed's swarm:" in line
               for line in lines)


def test_cli_refuses_bad_pins_in_one_line(tmp_path):
    proc = _cli("run", "sentinel-year", "--seed", "1", "--duration", "1d", "--knob", "lease_ms=1", cwd=str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "loomsim: error: knob lease_ms=1 is outside its legal range 10000..120000"


@pytest.mark.slow  # the suite's budget: test_face_exits, test_shards and test_reports read sweep summaries in CI
def test_sweep_summarizes_seeds_and_coverage(tmp_path):
    proc = _cli("sweep", "ledger-storm", "--seeds", "0:4", "--duration", "1h", "--json", "--repro-dir", str(tmp_path),
                cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["seeds"], summary["passed"], summary["failed"]) == (4, 4, 0)
    assert set(summary["sometimes_reached"]) == set(registry.get("ledger-storm").sometimes)
    assert set(summary["never_fired"]) <= set(summary["fault_kinds_fired"]) | set(summary["failpoints_fired"])
    assert summary["sometimes_never"] == [n for n, k in summary["sometimes_reached"].items() if k == 0]
    assert set(summary["faults_by_port"]) <= {"ledger", "log", "checkpoints", "sqlite"}  # sqlite: seed 1's store
    bad = _cli("sweep", "ledger-storm", "--seeds", "5:2", cwd=str(tmp_path))
    assert bad.returncode == 2 and "invalid seeds" in bad.stderr


def test_a_knob_with_values_draws_only_those_and_pins_stay_inside_its_range():
    space = SwarmSpace(fault_kinds=("a",), knobs=(Knob("page", 1024, 8, 1024, "page", values=(8, 64, 1024)),))
    drawn = {choose(space, Streams(seed)["swarm"], swarm=True).knob("page") for seed in range(40)}
    assert drawn == {8, 64, 1024}
    assert choose(space, Streams(1)["swarm"], swarm=False).knob("page") == 1024  # the full mix: the default
    assert choose(space, Streams(1)["swarm"], swarm=True, knobs={"page": 100}).knob("page") == 100
    with pytest.raises(SwarmError, match="outside its legal range 8..1024"):
        choose(space, Streams(1)["swarm"], swarm=True, knobs={"page": 4})


@pytest.mark.parametrize("name", ["sentinel-year", "ledger-storm"])
@pytest.mark.parametrize("first_seed", [0, 5, 1_000_003])
def test_any_eight_consecutive_seeds_enable_every_kind_and_failpoint(name, first_seed):
    """Swarm cannot starve (a covering design over seeds): no kind or
    failpoint stays off in every seed of a short CI sweep."""
    from faults.swarm import ROTATION_SEEDS
    from sim.rng import Streams

    space = registry.get(name).swarm_space
    kinds, failpoints = set(), set()
    for seed in range(first_seed, first_seed + ROTATION_SEEDS):
        choices = choose(space, Streams(seed)["swarm"], swarm=True, seed=seed)
        kinds.update(choices.fault_kinds)
        failpoints.update(n for n, _ in choices.failpoints)
    assert kinds == set(space.fault_kinds) and failpoints == set(space.failpoints)


def test_the_rotation_moves_no_other_choice_and_a_disable_still_wins():
    from sim.rng import Streams

    space = registry.get("ledger-storm").swarm_space
    for seed in range(16):
        plain = choose(space, Streams(seed)["swarm"], swarm=True)
        rotated = choose(space, Streams(seed)["swarm"], swarm=True, seed=seed)
        assert set(plain.fault_kinds) <= set(rotated.fault_kinds)
        assert (plain.knobs, plain.workload) == (rotated.knobs, rotated.workload)
        disabled = choose(space, Streams(seed)["swarm"], swarm=True, seed=seed, disable=space.fault_kinds[:2])
        assert not set(space.fault_kinds[:2]) & set(disabled.fault_kinds)


# -- choices by name: a seed keeps its meaning when the code grows ---------------------------


def test_a_kind_failpoint_switch_or_knob_added_moves_no_other_choice():
    """Each choice is drawn from a stream named for what it chooses, and its
    place in the rotation comes from its name: a scenario that gains a fault
    kind, a failpoint, a workload switch and a knob (each put first, where a
    positional draw would move everything after it) keeps every other
    choice of every seed."""
    grown = SwarmSpace(fault_kinds=("new-kind",) + SPACE.fault_kinds, failpoints=("new-fp",) + SPACE.failpoints,
                       workload=("new-switch",) + SPACE.workload,
                       knobs=(Knob("new-knob", 1, 0, 3, "new"),) + SPACE.knobs, failpoint_rate=SPACE.failpoint_rate)
    for seed in range(64):
        before = choose(SPACE, Streams(seed)["swarm"], swarm=True, seed=seed)
        after = choose(grown, Streams(seed)["swarm"], swarm=True, seed=seed)
        if len(before.fault_kinds) > 1:  # (one kind may be the fallback for a seed whose coins were all off)
            assert [k for k in after.fault_kinds if k != "new-kind"] == list(before.fault_kinds)
        assert [f for f in after.failpoints if f[0] != "new-fp"] == list(before.failpoints)
        assert [w for w in after.workload if w != "new-switch"] == list(before.workload)
        assert [k for k in after.knobs if k[0] != "new-knob"] == list(before.knobs)


def test_a_port_site_added_moves_no_other_sites_faults():
    """Each (site, kind)'s gaps come from their own stream: hits of a site
    the code did not have before (interleaved anywhere) leave the hits at
    which another site's faults fire unchanged."""
    from faults.kinds import ACK_LOST as KIND
    from faults.plan import FaultPlan
    from sim.world import World

    def firings(extra_site: bool) -> list[int]:
        world = World(7)
        plan = FaultPlan(world, rates={KIND: 0.05}, heal_at_ms=10 ** 12)
        fired = []
        for _ in range(2_000):
            if extra_site:
                plan.draw("a.new_site", (KIND,))
            hit, kind = plan.draw("ledger.claim", (KIND,))
            if kind is not None:
                fired.append(hit)
        return fired

    plain = firings(False)
    assert len(plain) > 50 and plain == firings(True)
