"""Stacks as data (``scenarios/stackfile.py``): a TOML file composes existing
workloads, every command takes the file where it takes a scenario name, and
a repro file or a saved failure of a file stack replays on its own."""
from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

import faults.mutant_catalogue  # noqa: F401
import hypothesis  # noqa: F401  (as in test_pytest_plugin: loaded before pytester snapshots sys.modules)
import sim.face.mutants  # noqa: F401
from faults.swarm import SwarmChoices
from scenarios import registry
from scenarios.stackfile import StackFileError
from sim.face.cli import main
from sim.runner import run
from sim.scenario import Run, ScenarioOptions

pytest_plugins = ["pytester"]
registry.all_scenarios()  # the built-ins, before pytester snapshots sys.modules
REPO = Path(__file__).resolve().parents[1]
EXAMPLE = (REPO / "examples" / "two_cadences.toml").read_text()
# The example with a check no run of it can pass: a run's log holds more
# than two records. A failing stack with no planted bug and no Python.
FAILING = EXAMPLE.replace('checks = [', 'checks = [{ name = "bounded-run", records_max = 2 }, ')
MS_PER_HOUR = 3_600_000


@pytest.fixture(autouse=True)
def _fresh_files(monkeypatch) -> None:
    """Each test resolves its stack files afresh (a repro's embedded copy is
    adopted for the rest of its process: here, the test)."""
    monkeypatch.setattr(registry, "_FILES", {})


def _digest(scenario, seed: int, duration_ms: int) -> str:
    result = run(scenario, ScenarioOptions(seed=seed, duration_ms=duration_ms))
    assert result.passed, result.violations
    return result.trace_digest


@pytest.fixture
def python_two_cadences(monkeypatch):
    """examples/two_cadences.py registered for this test only (a later
    test's sweep of every registered scenario has children that do not load it)."""
    module = "examples.two_cadences"
    monkeypatch.setattr(registry, "_SCENARIOS", dict(registry._SCENARIOS))
    before = sys.modules.pop(module, None)
    importlib.import_module(module)
    yield registry.get("two-cadences")
    sys.modules.pop(module, None)
    if before is not None:
        sys.modules[module] = before


@pytest.mark.parametrize("seed", [0, 1])
def test_the_toml_example_is_the_python_example(seed, python_two_cadences):
    toml = registry.get(str(REPO / "examples" / "two_cadences.toml"))
    assert toml.title == "two-cadences" and toml.default_duration_ms == python_two_cadences.default_duration_ms
    assert _digest(toml, seed, MS_PER_HOUR) == _digest(python_two_cadences, seed, MS_PER_HOUR)


@pytest.mark.parametrize("seed,duration_ms,store", [
    (0, MS_PER_HOUR // 12, "memory"), (1, MS_PER_HOUR // 12, "memory"), (2, MS_PER_HOUR // 15, "sqlite"),
    pytest.param(0, MS_PER_HOUR, "memory", marks=pytest.mark.slow),
    pytest.param(1, MS_PER_HOUR, "memory", marks=pytest.mark.slow)])
def test_agent_conversations_as_a_file_is_the_built_in_stack(seed, duration_ms, store):
    """The format says the largest built-in stack whole (swarm, switches,
    knobs, pauses past the lease, SQLite-only rates): the same trace."""
    toml = registry.get(str(REPO / "tests" / "fixtures" / "agent_conversations.toml"))
    digests = []
    # Node clocks (their knobs, jumps and oracle), partitions and disk faults too.
    # A file's stores stay on their callers' clocks: so does the built-in's here.
    for scenario, knobs in ((toml, {}), (registry.get("agent-conversations"), {"store_clock": 0})):
        result = run(scenario, ScenarioOptions(seed=seed, duration_ms=duration_ms, store=store, swarm=True,
                                               knobs=knobs))
        assert result.passed, result.violations
        digests.append(result.trace_digest)
    assert digests[0] == digests[1]


def _file(tmp_path: Path, text: str, name: str = "stack.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- every key checked: one line, exit 2 ---------------------------------------------

ERRORS = [
    ('every = ["1h", "8h"]', 'evry = ["1h", "8h"]',
     "[workload 2] unknown key 'evry' (known: name, when, nodes, targets, every, restart, outage_one_in, outage)"),
    ('kind = "node-kills"', 'kind = "node-killz"', "[workload 2] unknown kind 'node-killz' (known: sentinels, workers,"),
    ('"cas-linear"', '"cas-linearr"', "[scenario] checks: unknown check 'cas-linearr' (known: abort-honoured,"),
    ('every = ["1h", "8h"]', 'every = ["1h", "8x"]', "[workload 2] every: bad duration '8x'"),
    ('every = ["1h", "8h"]', 'every = ["8h", "1h"]', "[workload 2] every: range ['8h', '1h'] runs backwards"),
    ('restart = ["1s", "20s"]', 'restart = 20', '[system] restart: expected a range like ["1s", "20s"], got 20'),
    ('duration = "1d"', 'duration = 1', '[scenario] duration: expected a duration like "5m", got 1'),
    ('duration = "1d"', 'duration = "0s"', "[scenario] duration and sweep: fixed durations, more than zero"),
    ('[system]', '[sytem]', "unknown table 'sytem' (known: scenario, system, workload, faults, swarm)"),
    ('targets = "sentinels"', 'targets = "fleet"',
     "[workload 2] targets: no workload 'fleet' it can act on (sentinels, workers, agent-workers, "
     "watchers; known: sentinels)"),
    ('{ id = "slow", every = "7m" }', '{ id = "slow", evry = "7m" }',
     "[workload 1] schedules: schedule 2: unknown key 'evry' (known: id, every, first)"),
    ('ack-lost = 1e-4', 'ack-lots = 1e-4', "[faults] rates: unknown fault kind 'ack-lots'"),
    ('ack-lost = 1e-4', 'ack-lost = 2', "[faults] rates: ack-lost: expected a number in [0, 1], got 2"),
    ('schedules = [', 'lease = { knob = "lease_ms" }\nschedules = [',
     "[workload 1] lease: no knob 'lease_ms' in [swarm] (known: none)"),
    ('kind = "sentinels"', 'kind = "sentinels"\npaging = "yes"', "[workload 1] paging: expected true or false, got 'yes'"),
    ('name = "two-cadences"\n', '', "[scenario] missing key 'name'"),
    ('"cas-linear", ', '"cas-linear", "cas-linear", ', "[scenario] checks: a check is named twice"),
    ('"cas-linear", ', '"exactly-once-wake", "cas-linear", ',
     "[scenario] checks: exactly-once-wake comes with its workload (sentinels): remove it from checks"),
    ('[faults]', '[[workload]]\nkind = "clocks"\n\n[faults]',
     "[workload 3] clocks: a node's skew and steps are drawn per seed by the swarm: the file needs a [swarm] table"),
    ('[faults]', '[[workload]]\nkind = "partitions"\nstores = ["ledger", "tools"]\nevery = ["1h", "2h"]\n'
                 'cut = [["1s", "lease"]]\n\n[faults]', "[workload 3] stores: sentinels does not call 'tools'"),
    ('[faults]', '[[workload]]\nkind = "partitions"\nstores = ["ledger"]\nevery = ["1h", "2h"]\n'
                 'cut = [["1s", "lease * 2"]]\n\n[faults]', "[workload 3] cut: bad duration 'lease * 2'"),
    ('[faults]', '[[workload]]\nkind = "disk-faults"\nrestart = ["1s"]\n\n[faults]',
     '[workload 3] restart: expected a range like ["1s", "20s"], got [\'1s\']'),
]


@pytest.mark.parametrize("old,new,message", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_a_wrong_stack_file_is_one_line_exit_2(tmp_path, capsys, old, new, message):
    assert old in EXAMPLE
    path = _file(tmp_path, EXAMPLE.replace(old, new, 1))
    assert main(["run", path, "--seed", "0", "--duration", "1h"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"loomsim: error: {path}: {message}"), err
    assert err.count("\n") == 1, err


def test_stack_file_errors_beyond_a_key(tmp_path, capsys):
    cases = [
        (EXAMPLE.replace("[[workload]]\nkind = \"node-kills\"",
                         "[[workload]]\nkind = \"node-kills\"\nnodes = [\"worker-1\"]", 1).replace(
            'targets = "sentinels"\n', 'targets = "sentinels"\n', 1), "[workload 2] nodes and targets: give one"),
        (EXAMPLE + '\n[[workload]]\nkind = "node-kills"\ntargets = "sentinels"\nevery = ["1h", "2h"]\n'
         'restart = ["1s", "2s"]\n', "[workload 3] name 'node-kills' is taken by the node-kills workload before it"),
        (EXAMPLE.replace('checks = ["cas-linear"', 'checks = [{ name = "pins-survive", workload = "nope" }, "cas-linear"'),
         "[scenario] checks pins-survive: judges a sentinels workload; the stack has none named 'nope'"),
        ("[scenario\n", "not TOML:"),
        (EXAMPLE.replace("[faults]", '[[workload]]\nkind = "node-pauses"\nevery = ["1h", "2h"]\n'
                                     'pause = [["lease + 1x", "2m"]]\n\n[faults]'),
         "[workload 3] pause: bad duration '1x'"),
    ]
    for text, message in cases:
        path = _file(tmp_path, text)
        with pytest.raises(StackFileError) as error:
            registry.get(path)
        assert str(error.value).startswith(f"{path}: {message}"), str(error.value)
        assert "\n" not in str(error.value)
    missing = str(tmp_path / "nowhere.toml")
    assert main(["describe", missing]) == 2
    assert capsys.readouterr().err == f"loomsim: error: {missing}: cannot read stack file: No such file or directory\n"


# -- composing: two kills, knobs, switches -----------------------------------------------

TWO_KILLS = EXAMPLE.replace('[faults]', '''[[workload]]
kind = "node-kills"
name = "rare-kills"
targets = "sentinels"
every = ["3h", "6h"]
restart = ["1m", "2m"]

[faults]''')


def test_a_stack_takes_the_same_kind_twice_under_two_names(tmp_path):
    scenario = registry.get(_file(tmp_path, TWO_KILLS))
    stack = scenario.build(Run(ScenarioOptions(seed=0, duration_ms=MS_PER_HOUR), None, scenario))
    assert [w.name for w in stack.workloads] == ["sentinels", "node-kills", "rare-kills"]
    assert [w.every_ms for w in stack.workloads[1:]] == [(MS_PER_HOUR, 8 * MS_PER_HOUR), (3 * MS_PER_HOUR, 6 * MS_PER_HOUR)]
    assert run(scenario, ScenarioOptions(seed=1, duration_ms=7 * MS_PER_HOUR)).passed


SWARMED = EXAMPLE.replace('kind = "sentinels"\n', 'kind = "sentinels"\nlease = { knob = "lease_ms" }\n').replace(
    '[faults]', '''[[workload]]
kind = "operator-edits"
when = "operator-edits"

[faults]''') + '''
[swarm]
fault_kinds = ["crash-before-call", "ack-lost", "node-kill"]
workload = ["operator-edits"]

[[swarm.knob]]
name = "lease_ms"
default = "30s"
min = "10s"
max = "2m"
help = "run claim lease"
'''


def test_knobs_and_switches_reach_the_workloads(tmp_path):
    scenario = registry.get(_file(tmp_path, SWARMED))
    space = scenario.swarm_space
    assert space.fault_kinds == ("crash-before-call", "ack-lost", "node-kill") and space.workload == ("operator-edits",)
    assert space.knob("lease_ms").maximum == 120_000
    opts = ScenarioOptions(seed=0, duration_ms=MS_PER_HOUR)
    for switched_on in (False, True):
        choices = SwarmChoices(True, ("ack-lost",), None, ("operator-edits",) if switched_on else (),
                               (("lease_ms", 12_345),))
        stack = scenario.build(Run(opts, choices, scenario))
        assert stack.workloads[0].lease_ms == 12_345
        assert [w.name for w in stack.workloads] == ["sentinels", "node-kills"] + ["operator-edits"] * switched_on
    assert run(scenario, ScenarioOptions(seed=3, duration_ms=3 * MS_PER_HOUR, swarm=True)).passed


# -- every command takes the file ------------------------------------------------------------


def test_run_describe_list_and_sweep_take_the_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(REPO / "examples" / "two_cadences.toml", "two.toml")
    assert main(["run", "two.toml", "--seed", "1", "--duration", "30m", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"] == "two.toml"
    assert main(["describe", "two.toml"]) == 0
    assert capsys.readouterr().out.startswith("two.toml: a 1-minute and a 7-minute sentinel")
    assert main(["list", "two.toml"]) == 0
    assert "fault kinds: crash-before-call, ack-lost, node-kill" in capsys.readouterr().out
    assert main(["sweep", "two.toml", "--seeds", "0:2", "--duration", "10m", "--failure-db", "none", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["scenario"] == "two.toml" and summary["scenarios"]["two.toml"]["passed"] == 2, summary


def _failing_repro(tmp_path: Path, capsys) -> tuple[str, dict]:
    _file(tmp_path, FAILING, "tight.toml")
    assert main(["run", "tight.toml", "--seed", "0", "--duration", "30m"]) == 1
    capsys.readouterr()
    path = "loomsim-repro-two-cadences-0.json"  # named by the stack's title
    return path, json.loads(Path(path).read_text())


def test_a_repro_file_embeds_the_stack_and_replays_after_it_moved_or_changed(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    repro, body = _failing_repro(tmp_path, capsys)
    assert body["config"]["scenario"] == "tight.toml" and body["stack_file"]["text"] == FAILING
    assert body["violations"][0]["name"] == "bounded-run"
    assert main(["repro", repro]) == 1
    out, err = capsys.readouterr()
    assert "FAIL: invariant bounded-run" in out and err == ""
    Path("tight.toml").write_text(EXAMPLE)  # the check that fails is gone from the file
    registry._FILES.clear()  # each command its own process, as from a shell
    assert main(["repro", repro]) == 1
    out, err = capsys.readouterr()
    assert "FAIL: invariant bounded-run" in out and "NOT REPRODUCED" not in out and "diverged" not in out
    assert err == f"loomsim: note: tight.toml changed since {repro} was written: running the copy embedded in {repro}\n"
    os.remove("tight.toml")
    registry._FILES.clear()
    assert main(["shrink", repro, "--max-runs", "3"]) == 1
    assert capsys.readouterr().err == f"loomsim: note: tight.toml is gone: running the copy embedded in {repro}\n"


def test_a_repro_file_whose_embedded_stack_was_edited_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    repro, body = _failing_repro(tmp_path, capsys)
    body["stack_file"]["text"] += "\n# edited\n"
    Path(repro).write_text(json.dumps(body))
    assert main(["repro", repro]) == 2
    assert capsys.readouterr().err == (f"loomsim: error: {repro}: stack_file's text does not match its sha256 "
                                       "(edited by hand?)\n")


def test_the_failure_database_replays_a_file_stack_as_it_failed(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _file(tmp_path, FAILING, "tight.toml")
    sweep = ["sweep", "tight.toml", "--duration", "10m", "--failure-db", "db", "--json"]
    assert main(sweep + ["--seeds", "0:1"]) == 1
    capsys.readouterr()
    (saved,) = os.listdir("db/failures")
    assert saved.startswith("tight.toml-0-")
    Path("tight.toml").write_text(EXAMPLE)
    assert main(sweep + ["--seeds", "5:6"]) == 1  # seed 5 passes; the saved failure still fails
    out, err = capsys.readouterr()
    (replayed,) = json.loads(out)["saved_failures"]
    assert replayed["outcome"] == "still-fails" and replayed["invariant"] == "bounded-run", replayed
    assert "running the copy embedded in db/failures/" + saved in err
    # What the process held under the name is back: the file as it is now.
    assert registry.get("tight.toml").text == EXAMPLE


def test_the_pytest_plugin_takes_the_file_and_replays_its_saved_failures_embedded(pytester, monkeypatch):
    monkeypatch.delenv("LOOMSIM_FAILURE_DB", raising=False)
    (pytester.path / "tight.toml").write_text(FAILING)
    base = ("-p", "no:cacheprovider", "--loomsim-scenario", "tight.toml", "--loomsim-duration", "10m")
    pytester.runpytest(*base, "--loomsim-seeds", "0").assert_outcomes(failed=1)
    (saved,) = os.listdir(pytester.path / ".loomsim" / "failures")
    (pytester.path / "tight.toml").write_text(EXAMPLE)
    again = pytester.runpytest(*base, "--loomsim-seeds", "3")
    again.assert_outcomes(failed=1, passed=1)  # the saved failure (embedded stack) fails; seed 3 of the file passes
    assert f"saved::{saved[:-len('.json')]}" in again.stdout.str()


def test_the_documented_stack_file_reads_and_runs(tmp_path):
    """scenarios/README.md's whole-file example is a stack that runs (the doc cannot drift from the format)."""
    readme = (REPO / "scenarios" / "README.md").read_text()
    text = readme.split("A whole file, every table")[1].split("```toml\n", 1)[1].split("```", 1)[0]
    scenario = registry.get(_file(tmp_path, text))
    assert scenario.title == "fleet-and-kills" and scenario.swarm_space.knob("lease_ms").default == 30_000
    result = run(scenario, ScenarioOptions(seed=2, duration_ms=3 * MS_PER_HOUR, swarm=True))
    assert result.passed, result.violations


def test_a_sweep_of_a_stack_file_by_its_path_counts_the_model_lines_its_seeds_ran(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkdir("stacks")
    path = "stacks/two.toml"  # a relative name with a slash
    shutil.copy(REPO / "examples" / "two_cadences.toml", path)
    assert main(["sweep", path, "--seeds", "0:1", "--duration", "10m", "--model-coverage", "--failure-db", "none",
                 "--json"]) == 0
    coverage = json.loads(capsys.readouterr().out)["model_coverage"]
    assert coverage["tracing_lost_seeds"] == 0 and coverage["files"]["model/lifecycle.py"]["executed"] > 0, coverage
