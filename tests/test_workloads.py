"""Scenarios as stacks of workloads: the runner owns the phases, one fault
plan serves generation and replay, the System takes a user's adapter, and a
user's scenario module runs, sweeps and replays like a built-in one."""
from __future__ import annotations

import json
import sys

import pytest

from faults.chaos import NodeKills
from faults.kinds import NODE_KILL
from faults.plan import PortFaults
from scenarios import registry
from scenarios.api import HOUR, MINUTE, SECOND, Schedule, Sentinels, WORKER_NODE, ExactlyOnceWake
from scenarios.system import System
from sim.clock import parse_duration_ms
from sim.face import cli
from sim.runner import run
from sim.scenario import Run, Scenario, ScenarioOptions
from sim.workload import Stack, Workload


class _Recorder(Workload):
    """Records the phases the runner drives, and what it saw at each."""

    def __init__(self, log: list) -> None:
        self.log = log

    def setup(self, world) -> None:
        self.log.append(("setup", world.heal_at_ms, world.plan is not None, world.runtime.now_ms()))

    def start(self, world) -> None:
        self.world = world
        self.log.append(("start", world.runtime.now_ms()))

    def check(self, view) -> None:
        self.log.append(("check", self.world.runtime.now_ms(), isinstance(view, System)))

    def metrics(self) -> dict:
        self.log.append(("metrics",))
        return {"recorded": len(self.log)}


def _stack(log: list, kills: bool = False):
    def build(run: Run) -> Stack:
        end_ms = run.opts.duration_ms
        fleet = Sentinels([Schedule("s", 10 * MINUTE, end_ms=end_ms)])
        chaos = [NodeKills([fleet], every_ms=(20 * MINUTE, 2 * HOUR), restart_ms=(SECOND, 5 * MINUTE))]
        return Stack(system=System(restart_ms=(SECOND, 10 * SECOND)), workloads=[fleet, _Recorder(log), *chaos * kills],
                     faults=PortFaults({}), checks=[],
                     heal_ms_max=3 * HOUR, settle_ms=HOUR)

    return Scenario("recorded", "test", build, parse_duration_ms("1d"))


def test_the_runner_owns_the_phases_and_computes_the_heal_instant_once():
    log: list = []
    result = run(_stack(log), ScenarioOptions(seed=1, duration_ms=parse_duration_ms("20h")))
    assert result.passed, result.violations
    # heal = duration - min(heal_ms_max, duration // 10) = 20h - 2h, known at setup
    assert log[0] == ("setup", 18 * HOUR, True, 0)
    assert log[1] == ("start", 0)
    assert log[2] == ("check", 21 * HOUR, True)  # after the settle phase
    assert log[3] == ("metrics",)
    assert result.stats["recorded"] == 4 and result.stats["wakes"] == 20 * 6


def test_timed_chaos_replays_from_its_script_through_the_same_plan():
    """Generated kills, then the same run driven by its realized script
    alone (probabilistic faults off): same kills, same digest."""
    scenario = _stack([], kills=True)
    generated = run(scenario, ScenarioOptions(seed=4, duration_ms=parse_duration_ms("1d")))
    kills = [e for e in generated.fault_script if getattr(e, "kind", None) == NODE_KILL]
    assert generated.passed and len(kills) >= 3, generated.faults
    day_ms = parse_duration_ms("1d")
    assert all(e.time_ms < day_ms - min(3 * HOUR, day_ms // 10) for e in kills)  # none after the heal instant
    # No swarm space: coverage lists what the plan armed, fired or not.
    assert generated.coverage["fault_kinds"] == {NODE_KILL: len(kills)}
    replayed = run(scenario, ScenarioOptions(seed=4, duration_ms=parse_duration_ms("1d"),
                                             fault_script=generated.fault_script))
    assert replayed.trace_digest == generated.trace_digest
    assert replayed.faults == generated.faults


def test_the_cadence_is_a_parameter_not_a_module_constant():
    result = run(registry.get("sentinel-year"), ScenarioOptions(
        seed=1, duration_ms=parse_duration_ms("1d"), params={"every_ms": 15 * MINUTE}, faults_disable=(NODE_KILL,)))
    assert result.passed, result.violations
    assert result.stats["wakes"] + result.stats["wakes_skipped"] == 24 * 4


def _main(argv: list[str], capsys) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().out


def test_the_documented_example_runs_and_sweeps(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # artifacts land here; the example is importable from the checkout
    # Registered for this test only: a later test that sweeps every registered
    # scenario runs children that do not load the example.
    monkeypatch.setattr(registry, "_SCENARIOS", dict(registry._SCENARIOS))
    monkeypatch.delitem(sys.modules, "examples.two_cadences", raising=False)
    code, out = _main(["--scenarios", "examples.two_cadences", "run", "two-cadences", "--seed", "1",
                       "--duration", "2h", "--json"], capsys)
    result = json.loads(out)
    assert (code, result["status"]) == (0, "pass"), result["violations"]
    assert set(result["invariants"]) == {"exactly-once-wake", "cas-linear", "exactly-once-settlement"}
    assert result["stats"]["wakes"] > 2 * 60  # the fast sentinel alone wakes 120 times
    code, out = _main(["--scenarios", "examples.two_cadences", "sweep", "two-cadences", "--seeds", "0:2",
                       "--duration", "1h", "--jobs", "2"], capsys)
    assert code == 0, out


def test_a_users_adapter_under_simulation_with_a_planted_bug_is_caught_by_a_sweep(tmp_path, capsys, monkeypatch):
    """tests/fixtures/buggy.py: the in-memory ledger with its claim order
    reversed, given as ``--store MODULE:FACTORY``; the other stores stay in
    memory and the full fault mix runs."""
    monkeypatch.chdir(tmp_path)
    code, out = _main(["sweep", "ledger-storm", "--seeds", "0:1", "--duration", "10m", "--jobs", "1",
                       "--store", "tests.fixtures.buggy:make"], capsys)
    assert code == 1, out
    # The reference model sees the wrong claim first, as the ledger answers
    # it; the FIFO oracle would see it when the run moves on.
    assert "reference-model" in out or "fifo-one-active" in out
    code, out = _main(["sweep", "ledger-storm", "--seeds", "0:1", "--duration", "10m", "--jobs", "1", "--store",
                       "memory"], capsys)  # the same seed on the adapter it wraps: green
    assert code == 0, out


@pytest.mark.parametrize("spec, message", [
    ("tests.fixtures.nowhere:make", "cannot load store module"),
    ("tests.fixtures.buggy:absent", "has no callable 'absent'"),
    ("tests.fixtures.buggy:NewestFirstLedger", "must return a mapping"),
])
def test_a_bad_store_factory_is_one_clear_line(spec, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = cli.main(["run", "ledger-storm", "--seed", "1", "--duration", "1h", "--store", spec])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err


def test_rates_are_passed_in_pinned_and_recorded(tmp_path, capsys, monkeypatch):
    """``--rate`` replaces the default mix, the seed's swarm turns none of
    it off, and the result and the repro command carry it."""
    monkeypatch.chdir(tmp_path)
    code, out = _main(["run", "ledger-storm", "--seed", "2", "--duration", "10m", "--rate", "ack-lost=0.01",
                       "--faults-disable", "node-kill,node-pause", "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and set(result["faults"]) == {"ack-lost"}, result["faults"]
    assert result["config"]["rates"] == {"ack-lost": 0.01}
    assert "--rate ack-lost=0.01" in result["repro_command"]
