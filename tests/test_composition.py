"""Workloads compose by construction: every instance has a name that
namespaces what it creates, checks belong to the workload whose namespace
they judge, a checker that raises is the harness's error (exit 3) and not a
violation blamed on a task, and a fault kind added to a swarm space moves no
other choice of any built-in scenario's seed."""
from __future__ import annotations

import json

import attrs
import pytest

from faults.chaos import NodeKills
from faults.kinds import NODE_KILL
from faults.mutant_catalogue import MUTANTS
from faults.plan import PortFaults
from faults.swarm import choose
from scenarios import registry
from scenarios.api import (HOUR, MINUTE, SECOND, CasLinear, ExactlyOnceSettlement, Schedule, Sentinels, Stack,
                           Submitters, System, Workers)
from sim.clock import parse_duration_ms
from sim.face import cli
from sim.invariants import Checker
from sim.rng import Streams
from sim.runner import ERROR, run
from sim.scenario import Run, Scenario, ScenarioOptions
from sim.workload import StackError, Workload, owned_checks, settle_names


class _Plain(Workload):
    name = "plain"


def _fleet(schedule_id: str, every_ms: int, end_ms: int, **kw) -> Sentinels:
    return Sentinels([Schedule(schedule_id, every_ms, end_ms=end_ms)], **kw)


# -- names -------------------------------------------------------------------------------


def test_an_instance_is_named_for_its_kind_and_a_repeated_kind_is_numbered():
    a, b, c = _Plain(), _Plain(), _Plain().named("special")
    settle_names([a, b, c])
    assert (a.name, b.name, c.name) == ("plain", "plain-2", "special")
    assert type(a).name == "plain"  # the class keeps its kind's name
    assert a.node_name("worker-1") == "plain/worker-1"


def test_a_name_given_twice_is_one_line_naming_both():
    with pytest.raises(StackError) as caught:
        settle_names([_Plain().named("x"), _fleet("s", MINUTE, HOUR).named("x")])
    message = str(caught.value)
    assert "\n" not in message and "'x'" in message and "plain" in message and "sentinels" in message


def test_an_explicit_name_wins_over_a_kinds_default():
    explicit, default = _Plain().named("plain"), _Plain()
    settle_names([default, explicit])
    assert (explicit.name, default.name) == ("plain", "plain-2")


@pytest.mark.parametrize("bad", ["", "Upper", "has space", "a/b", "x" * 64])
def test_a_bad_instance_name_is_refused(bad):
    with pytest.raises(StackError):
        _Plain().named(bad)


def test_two_fleets_claiming_one_schedule_are_refused_at_stack_build():
    with pytest.raises(StackError) as caught:
        Stack(system=System(restart_ms=(SECOND, 2 * SECOND)), faults=PortFaults({}),
              workloads=[_fleet("s", MINUTE, HOUR, name="one"), _fleet("s", 5 * MINUTE, HOUR, name="two")])
    assert str(caught.value) == "workloads 'one' and 'two' both use schedule 's'"


# -- checks belong to what they judge ------------------------------------------------------


def test_an_owned_check_carries_its_instance_name_when_it_could_be_confused():
    alone = _fleet("s", MINUTE, HOUR)
    settle_names([alone])
    assert [c.name for c in owned_checks([alone])] == ["exactly-once-wake"]
    fast, slow = _fleet("f", MINUTE, HOUR, name="fast"), _fleet("s", 7 * MINUTE, HOUR)
    settle_names([fast, slow])
    assert [c.name for c in owned_checks([fast, slow])] == ["exactly-once-wake[fast]", "exactly-once-wake[sentinels]"]


def _stacked(extra: tuple = (), checks: tuple = ()) -> Scenario:
    """Two fleets at two cadences, submission workers and two kill schedules
    with different targets and rates, on one system."""
    def build(run: Run) -> Stack:
        end_ms = run.opts.duration_ms
        fast, slow = _fleet("fast", MINUTE, end_ms, name="fast"), _fleet("slow", 7 * MINUTE, end_ms, name="slow")
        requests = Submitters(name="requests", every_ms=(SECOND, 20 * SECOND))
        workers = Workers(2, serving=requests)
        return Stack(system=System(restart_ms=(SECOND, 10 * SECOND)), faults=PortFaults({}),
                     workloads=[fast, slow, requests, workers,
                                NodeKills([fast, slow], every_ms=(20 * MINUTE, HOUR), restart_ms=(SECOND, MINUTE)),
                                NodeKills([workers], every_ms=(5 * MINUTE, 15 * MINUTE),
                                          restart_ms=(SECOND, 10 * SECOND)).named("worker-kills"),
                                *extra],
                     checks=[CasLinear(), ExactlyOnceSettlement(), *checks], heal_ms_max=HOUR, settle_ms=HOUR)

    return Scenario("stacked", "test", build, parse_duration_ms("6h"))


def test_sentinels_and_submission_workers_stack_each_judged_by_its_own_checks():
    result = run(_stacked(), ScenarioOptions(seed=3, duration_ms=parse_duration_ms("4h")))
    assert result.passed, result.violations
    assert result.invariants["exactly-once-wake[fast]"] > 200 and result.invariants["exactly-once-wake[slow]"] > 30
    assert result.invariants["fifo-one-active"] > 0
    # Each fleet counted its own wakes; the flat figure is their sum.
    by = result.stats["workloads"]
    assert set(by) >= {"fast", "slow", "requests", "workers", "node-kills", "worker-kills"}
    assert by["requests"]["submitted"] == result.stats["submitted"] > 100
    # Each kill schedule killed only its own targets.
    kills = [e for e in result.fault_script if getattr(e, "kind", None) == NODE_KILL]
    sentinel_kills = [e for e in kills if e.node.startswith(("fast/", "slow/"))]
    worker_kills = [e for e in kills if e.node.startswith("workers/")]
    assert sentinel_kills and len(worker_kills) > len(sentinel_kills) and len(kills) == len(sentinel_kills) + len(
        worker_kills)


def test_a_stack_with_two_kill_schedules_replays_from_its_script():
    scenario = _stacked()
    opts = ScenarioOptions(seed=5, duration_ms=parse_duration_ms("1h"))  # kills from both schedules by then
    generated = run(scenario, opts)
    replayed = run(scenario, attrs.evolve(opts, fault_script=generated.fault_script))
    assert generated.passed and replayed.trace_digest == generated.trace_digest


# -- a checker that raises is the harness's error, not a violation --------------------------


class _Broken(Checker):
    """Reads a field ledger admissions do not have, on the 20th it sees."""

    name = "broken-checker"
    kinds = ("ledger.admit",)

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def on_event(self, event) -> None:
        self.seen += 1
        if self.seen == 20:
            event[4]["no-such-field"]


def test_a_checker_that_raises_is_a_checker_error_naming_it_and_the_event():
    result = run(_stacked(checks=(_Broken(),)), ScenarioOptions(seed=1, duration_ms=parse_duration_ms("2h")))
    assert result.status == ERROR and not result.passed
    (violation,) = result.violations
    assert violation.invariant == "broken-checker"
    assert "KeyError" in violation.message and "ledger.admit" in violation.message
    assert f"#{violation.event_seq} " in violation.message
    assert "no-uncaught-errors" not in {v.invariant for v in result.violations}


def test_the_cli_exits_3_and_every_report_says_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scenario = _stacked(checks=(_Broken(),))
    monkeypatch.setattr(registry, "get", lambda name: scenario)
    code = cli.main(["run", "stacked", "--seed", "1", "--duration", "2h", "--json"])
    body = json.loads(capsys.readouterr().out)
    assert (code, body["status"]) == (3, "error")
    from reports.html import render_html
    from reports.junit import render_junit
    from reports.markdown import render_markdown
    from reports.verdict import decide, verdict
    assert decide(body) == ("error", 3)
    assert verdict(body).startswith("ERROR (exit 3)") and "checker broken-checker raised" in verdict(body)
    assert render_markdown(body).splitlines()[0].endswith(verdict(body))
    assert "## Harness errors" in render_markdown(body)
    xml = render_junit(body)
    assert "<error" in xml and "<failure" not in xml and 'value="3"' in xml
    assert verdict(body) in render_html(body)


# -- a fault kind added moves no choice of any built-in scenario's seed --------------------


def _grown(space):
    return attrs.evolve(space, fault_kinds=("new-port-kind",) + tuple(space.fault_kinds))


@pytest.mark.parametrize("name", ["sentinel-year", "ledger-storm", "agent-conversations", "port-storm"])
def test_a_new_fault_kind_moves_no_other_choice_of_seeds_0_to_99(name):
    space = registry.get(name).swarm_space
    grown = _grown(space)
    moved = []
    for seed in range(100):
        before = choose(space, Streams(seed)["swarm"], swarm=True, seed=seed)
        after = choose(grown, Streams(seed)["swarm"], swarm=True, seed=seed)
        others = tuple(k for k in after.fault_kinds if k != "new-port-kind")
        if (others, after.failpoints, after.workload, after.knobs) != (
                before.fault_kinds, before.failpoints, before.workload, before.knobs):
            moved.append(seed)
    assert moved == []


def test_every_catalogue_mutants_ci_run_keeps_its_choices_when_a_kind_is_added_off():
    """The mutants' measured CI runs: with the new kind in the space and off
    (as an upgrade that adds it leaves a saved seed), every choice is the
    one the mutant was measured under, so the same run detects it."""
    checked = 0
    for mutant in MUTANTS:
        if mutant.ci_run is None:
            continue
        scenario_name, seed, _ = mutant.ci_run
        space = registry.get(scenario_name).swarm_space
        before = choose(space, Streams(seed)["swarm"], swarm=True, seed=seed)
        after = choose(_grown(space), Streams(seed)["swarm"], swarm=True, seed=seed, disable=("new-port-kind",))
        assert after == before, mutant.name
        checked += 1
    assert checked > 150


DUPLICATE_NAMES = """
from scenarios.api import HOUR, MINUTE, SECOND, PortFaults, Schedule, Sentinels, Stack, System, scenario


@scenario("named-twice", "two fleets under one name", duration="1h")
def named_twice(run):
    return Stack(system=System(restart_ms=(SECOND, 2 * SECOND)), faults=PortFaults({}),
                 workloads=[Sentinels([Schedule("a", MINUTE, end_ms=HOUR)], name="x"),
                            Sentinels([Schedule("b", MINUTE, end_ms=HOUR)], name="x")])
"""


@pytest.mark.parametrize("command", [["run", "named-twice", "--seed", "1"], ["sweep", "named-twice", "--seeds", "0:2"]])
def test_a_stack_that_cannot_be_built_is_one_usage_line_before_any_seed(tmp_path, capsys, monkeypatch, command):
    (tmp_path / "named_twice_stack.py").write_text(DUPLICATE_NAMES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # Registered for this test only: a later sweep of every scenario must not meet it.
    registry._load_all()
    monkeypatch.setattr(registry, "_SCENARIOS", dict(registry._SCENARIOS))
    monkeypatch.delitem(__import__("sys").modules, "named_twice_stack", raising=False)
    assert cli.main(["--scenarios", "named_twice_stack", *command]) == 2
    captured = capsys.readouterr()
    assert captured.err == "loomsim: error: two workloads named 'x' (both sentinels); give one of them another name\n"
    assert "passed" not in captured.out and "error" not in captured.out  # refused before any seed ran


# -- the composed example: each workload's planted bug is named by that workload's check ----------


@pytest.fixture(scope="module")
def composed():
    """``examples/composed.py`` (registered for this module only)."""
    import importlib
    import sys

    registry._load_all()
    before = dict(registry._SCENARIOS)
    registry._SCENARIOS.pop("composed", None)
    if "examples.composed" in sys.modules:
        importlib.reload(sys.modules["examples.composed"])
    else:
        importlib.import_module("examples.composed")
    yield registry._SCENARIOS["composed"]
    registry._SCENARIOS.clear()
    registry._SCENARIOS.update(before)


@pytest.mark.parametrize("mutant,seed,duration,check", [
    ("sched-busy-ignored", 1, "2h", "exactly-once-wake[fast]"),  # the fast fleet's schedule driver
    ("agent-run-clock-reset", 0, "1h", "run-clock"),  # the agent workers' own check
    ("worker-hands-over-naming-only-its-head", 0, "1h", "fifo-one-active[workers]"),  # the requests' workers defer
])
def test_a_bug_planted_in_one_workload_of_the_composed_stack_is_named_by_its_check(composed, mutant, seed, duration,
                                                                                   check):
    from faults import mutants as mx

    with mx.applied(mx.catalogue()[mutant]):
        result = run(composed, ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), swarm=True))
    assert not result.passed and result.violations[0].invariant == check, result.violations[:1]


def test_the_composed_example_and_its_file_are_the_same_stack(composed):
    import pathlib

    file_stack = registry.get(str(pathlib.Path(__file__).parents[1] / "examples" / "composed.toml"))
    for seed in (0, 1):
        opts = ScenarioOptions(seed=seed, duration_ms=parse_duration_ms("15m"), swarm=True)
        python_run, file_run = run(composed, opts), run(file_stack, opts)
        assert python_run.passed and python_run.trace_digest == file_run.trace_digest
