"""``loomsim describe SCENARIO``: what a run reports is what describe lists
(every checker a run counts is a described invariant), its sometimes
properties are the scenario's, and ``list --faults`` shares its lines."""
from __future__ import annotations

import json
import sys

import pytest

from scenarios import registry
from sim.clock import parse_duration_ms
from sim.face import cli, describe
from sim.runner import run
from sim.scenario import ScenarioOptions

# Simulated time per scenario: enough to build and run every checker (port-storm is the costly one).
RUN_MS = {"port-storm": parse_duration_ms("2m")}


@pytest.mark.parametrize("name", [s.name for s in registry.all_scenarios()])
def test_describe_lists_what_a_run_reports(capsys, name):
    scenario = registry.get(name)
    assert cli.main(["describe", name, "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["scenario"] == name and body["sometimes"] == list(scenario.sometimes)
    described = {inv["name"] for inv in body["invariants"]}
    assert all(inv["doc"] for inv in body["invariants"]), body["invariants"]
    result = run(scenario, ScenarioOptions(seed=0, duration_ms=RUN_MS.get(name, parse_duration_ms("15m")), swarm=True))
    assert set(result.invariants) <= described
    assert set(result.coverage["sometimes"]) == set(body["sometimes"])
    sites = {s["site"] for s in body["fault_sites"]}
    assert set(body["failpoints"]) <= sites and "ledger.claim" in sites
    assert body["knobs"] and body["fault_kinds"] == list(scenario.swarm_space.fault_kinds)
    assert cli.main(["describe", name]) == 0
    text = capsys.readouterr().out
    assert all(inv in text for inv in described) and "invariants (" in text and "fault sites (" in text


def test_sqlite_only_checkers_are_marked():
    body = describe.describe(registry.get("ledger-storm"))
    when = {inv["name"]: inv["when"] for inv in body["invariants"]}
    assert when["cold-reopen"] == "only on sqlite" and when["checkpoint-consistency"] == "with a workload switch"
    assert when["fencing"] == "always"


def test_unknown_scenario_is_one_usage_line(capsys):
    assert cli.main(["describe", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loomsim: error: unknown scenario 'nope'") and len(err.strip().splitlines()) == 1


# -- a user's scenario: the fault kinds its stack uses --------------------------------------


@pytest.fixture
def two_cadences(monkeypatch):
    """``--scenarios examples.two_cadences`` for this test only: later tests
    sweep every registered scenario in children that do not load it."""
    module = "examples.two_cadences"
    monkeypatch.setattr(registry, "_SCENARIOS", dict(registry._SCENARIOS))
    before = sys.modules.pop(module, None)  # imported afresh: it registers into this test's registry
    yield ["--scenarios", module]
    sys.modules.pop(module, None)
    if before is not None:
        sys.modules[module] = before


def test_a_user_scenario_lists_the_fault_kinds_its_stack_uses(capsys, two_cadences):
    from faults.kinds import ACK_LOST, CRASH_BEFORE_CALL, NODE_KILL

    # examples/two_cadences.py: PortFaults at crash-before-call and ack-lost, a NodeKills workload, no swarm.
    modules = two_cadences
    assert cli.main([*modules, "describe", "two-cadences", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert not body["swarm"] and set(body["fault_kinds"]) == {CRASH_BEFORE_CALL, ACK_LOST, NODE_KILL}
    fired = run(registry.get("two-cadences"), ScenarioOptions(seed=1, duration_ms=parse_duration_ms("6h"))).faults
    assert set(fired) <= set(body["fault_kinds"]), fired  # what a run fires is what describe lists
    assert cli.main([*modules, "describe", "two-cadences"]) == 0
    text = capsys.readouterr().out
    assert f"fault kinds: {', '.join(body['fault_kinds'])}" in text
    assert cli.main([*modules, "list", "--faults", "two-cadences"]) == 0
    assert ", ".join(body["fault_kinds"]) in capsys.readouterr().out


# -- knobs drawn from a weighted list: each value once --------------------------------------


def test_a_weighted_knob_lists_each_value_once_with_its_weight(capsys):
    scenario = registry.get("sentinel-year")
    weighted = [k for k in scenario.swarm_space.knobs if len(set(k.values)) < len(k.values)]
    assert weighted  # fault_intensity (1, 1, 10, 100) among them
    body = describe.describe(scenario)
    assert cli.main(["describe", scenario.name]) == 0
    text = capsys.readouterr().out
    for knob in weighted:
        entry = next(k for k in body["knobs"] if k["name"] == knob.name)
        assert entry["values"] == list(dict.fromkeys(knob.values))  # each once, in the scenario's order
        assert entry["weights"] == [knob.values.count(value) for value in entry["values"]]
        (line,) = [line for line in text.splitlines() if line.strip().startswith(f"{knob.name} (")]
        shown = line.split(", values ")[1].split(" drawn ")[0].split(", ")
        assert shown == [str(value) for value in entry["values"]], line
        assert f"drawn {':'.join(map(str, entry['weights']))}" in line
