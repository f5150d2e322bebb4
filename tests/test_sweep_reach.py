"""What a sweep reaches: every scenario, within a time budget, coverage gaps
told apart by what each seed's swarm enabled, and the lines of model/ it ran.

The sweeps here are short (an hour at most simulated, one to three seeds):
they show the face's behaviour, not the model's coverage.
"""
from __future__ import annotations

import ast
import contextlib
import io
import json
import sys
import types
from pathlib import Path

import pytest

from scenarios import registry
from sim.face import cli, coverage_child, model_coverage
from sim.face.sweep import (BEYOND_PASSED, SweepOptions, enabled_in, exit_code, gap_names, plan_jobs, render,
                            summarize_scenario, summarize_sweep)

REPO_ROOT = Path(__file__).resolve().parents[1]


def _sweep_json(argv: list[str], capsys) -> tuple[int, dict]:
    code = cli.main(["sweep", *argv, "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out[-20:]
    return code, json.loads(out[0])


# -- every scenario, interleaved, a share beyond the contract ---------------------------


def test_a_sweep_without_a_scenario_runs_every_registered_one(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, summary = _sweep_json(["--seeds", "0:1", "--duration", "1m", "--store", "memory", "--repro-dir",
                              str(tmp_path)], capsys)
    names = [s.name for s in registry.all_scenarios()]
    assert len(names) >= 2 and list(summary["scenarios"]) == names
    for name in names:
        part = summary["scenarios"][name]
        assert (part["seeds"], part["ran"], part["errors"]) == (1, 1, 0), part
    assert (summary["seeds"], summary["ran"], summary["errors"]) == (len(names), len(names), 0)
    assert not summary["budget_stopped"]


def test_jobs_are_interleaved_and_every_eighth_seed_is_beyond_the_contract():
    opts = SweepOptions(seeds=range(0, 9))
    jobs = list(plan_jobs(["a", "b"], {"a": ["--store", "memory"], "b": ["--beyond-contract"]}, opts))
    assert [(j.scenario, j.seed) for j in jobs[:4]] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert sorted({j.seed for j in jobs if j.beyond}) == [7]
    seven = [j for j in jobs if j.seed == 7]
    assert all(j.argv.count("--beyond-contract") == 1 for j in seven)  # added once, never twice
    assert jobs[0].argv == ("run", "a", "--seed", "0", "--store", "memory", "--json")
    assert not any(j.beyond for j in plan_jobs(["a"], {"a": []}, SweepOptions(seeds=range(16), beyond_every=0)))



def test_a_sweep_told_no_store_runs_every_fourth_seed_on_sqlite():
    opts = SweepOptions(seeds=range(0, 10), sqlite_every=4)
    jobs = list(plan_jobs(["a", "b"], {"a": [], "b": ["--store", "memory"]}, opts))
    on_sqlite = sorted(j.seed for j in jobs if "sqlite" in j.argv)
    assert on_sqlite == [1, 5, 9]  # only a: b was told its store
    assert all(j.argv.count("--store") == 1 for j in jobs)
    assert [j.argv[j.argv.index("--store") + 1] for j in jobs if j.scenario == "a"][:3] == ["memory", "sqlite",
                                                                                            "memory"]
    assert not any("--store" in j.argv for j in plan_jobs(["a"], {"a": []}, SweepOptions(seeds=range(8))))


def test_every_second_beyond_seed_runs_on_sqlite_and_no_other_seed_moves():
    """Seeds 15, 31, 47, ... (beyond the contract) run on SQLite, where the
    disk faults live; 7, 23, ... stay in memory; every other seed keeps the
    store it had (every 4th on SQLite)."""
    opts = SweepOptions(seeds=range(0, 64), sqlite_every=4)
    jobs = list(plan_jobs(["a"], {"a": []}, opts))
    store = {j.seed: j.argv[j.argv.index("--store") + 1] for j in jobs}
    beyond = {j.seed for j in jobs if j.beyond}
    assert sorted(s for s in beyond if store[s] == "sqlite") == [15, 31, 47, 63]
    assert sorted(s for s in beyond if store[s] == "memory") == [7, 23, 39, 55]
    assert all(store[s] == ("sqlite" if s % 4 == 1 else "memory") for s in range(64) if s % 16 != 15)
    # Told a store, or every seed beyond the contract: the shares are as before.
    assert not any("--store" in j.argv for j in plan_jobs(["a"], {"a": []}, SweepOptions(seeds=range(32))))
    every = SweepOptions(seeds=range(0, 32), sqlite_every=4, all_beyond=True)
    assert [s for s in range(32) if every.store(s) == "sqlite"] == [1, 5, 9, 13, 17, 21, 25, 29]


def test_the_cli_mixes_stores_only_when_no_store_is_given(monkeypatch):
    from sim.face import cli, sweep as sweep_module

    seen = {}
    monkeypatch.setattr(sweep_module, "sweep", lambda scenarios, opts, child_args, global_args=(), **_: seen.update(
        opts=opts, child=child_args) or 0)
    assert cli.main(["sweep", "ledger-storm", "--seeds", "0:4"]) == 0
    assert seen["opts"].sqlite_every == 4 and "--store" not in seen["child"]["ledger-storm"]
    assert cli.main(["sweep", "ledger-storm", "--seeds", "0:4", "--store", "memory"]) == 0
    assert seen["opts"].sqlite_every == 0 and seen["child"]["ledger-storm"][:2] == ["--store", "memory"]
    assert cli.main(["sweep", "ledger-storm", "--seeds", "0:4", "--sqlite-every", "0"]) == 0
    assert seen["opts"].sqlite_every == 0


# -- the time budget -----------------------------------------------------------------------


def test_a_spent_time_budget_runs_the_first_seed_of_each_scenario_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, summary = _sweep_json(["--seeds", "0:3", "--duration", "1m", "--time-budget", "0.001",
                                 "--repro-dir", str(tmp_path)], capsys)
    scenarios = len(registry.all_scenarios())
    assert (summary["seeds"], summary["ran"]) == (3 * scenarios, scenarios)
    assert all(part["ran"] == 1 for part in summary["scenarios"].values())  # the budget still covers each
    assert summary["budget_stopped"] and summary["time_budget_s"] == 0.001
    assert code == (0 if summary["failed"] == summary["errors"] == 0 else 1)
    text = render(summary)
    assert f"ran {scenarios} of {3 * scenarios} seeds" in text and "time budget 0.001s spent" in text


@pytest.mark.parametrize("budget", ["0", "-1", "x", "nan"])
def test_a_bad_time_budget_is_a_one_line_usage_error(budget, capsys):
    code = cli.main(["sweep", "--seeds", "0:2", "--time-budget", budget])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("loomsim: error: argument --time-budget: invalid time budget"), err


def test_a_parameter_no_scenario_has_in_range_and_a_bad_pin_are_refused_before_any_run(capsys):
    assert cli.main(["sweep", "--seeds", "0:2", "--sentinels", "0"]) == 2
    assert "--sentinels must be between" in capsys.readouterr().err
    assert cli.main(["sweep", "--seeds", "0:2", "--knob", "nope=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown knob 'nope'" in err[0], err


# -- coverage gaps: enabled and never fired, or never enabled -----------------------------


def _seed(seed, *, kinds_on, fired, failpoints_on, fp, beyond=False, status="pass", checks=None, held=False):
    return {
        "seed": seed, "status": status, "beyond": beyond, "scenario": "s", "wall_s": 0.1,
        "repro_command": f"loomsim run s --seed {seed}", "repro_file": None, "beyond_contract": [],
        "violations": [{"name": "log-chain", "message": "caught", "simulated_time": "t"}] if status != "pass" else [],
        "config": {"swarm": {"swarm": True, "fault_kinds": kinds_on, "failpoints": failpoints_on}},
        "coverage": {"fault_kinds": fired, "ports": {}, "sometimes": {"rare": held},
                     "failpoints": {name: {"hits": hits, "fired": n} for name, (hits, n) in fp.items()}},
        "invariants": checks or {"log-chain": 3, "idle": 0},
    }


SYNTHETIC = [
    # seed 0: a on, failpoint-crash on with fp1 and fp3 activated; fp2 activated but failpoint-crash off in seed 1
    _seed(0, kinds_on=["a", "failpoint-crash", "c"], fired={"a": 0, "b": 0, "c": 2, "failpoint-crash": 1},
          failpoints_on={"fp1": 0.01, "fp3": 0.01, "fp4": 0.01},
          fp={"fp1": (10, 0), "fp2": (10, 0), "fp3": (0, 0), "fp4": (5, 1)}),
    _seed(1, kinds_on=["c"], fired={"a": 0, "b": 0, "c": 1, "failpoint-crash": 0},
          failpoints_on={"fp2": 0.01}, fp={"fp1": (10, 0), "fp2": (10, 0), "fp3": (0, 0), "fp4": (5, 0)}),
]


def test_enabled_in_reads_the_swarm_choices_and_pinned_rates():
    assert enabled_in(SYNTHETIC[0]) == ({"a", "c", "failpoint-crash"}, {"fp1", "fp3", "fp4"})
    assert enabled_in(SYNTHETIC[1]) == ({"c"}, set())  # fp2 activated, but failpoint-crash is off
    pinned = json.loads(json.dumps(SYNTHETIC[1]))
    pinned["config"]["rates"] = {"b": 0.01, "c": 0.0}  # --rate: the rated point kinds, whatever the swarm said
    assert enabled_in(pinned)[0] == {"b"}
    no_space = {"config": {}, "coverage": {"fault_kinds": {"node-kill": 0}, "failpoints": {}}}
    assert enabled_in(no_space) == ({"node-kill"}, set())  # the kinds its plan armed


def test_no_checks_is_no_gap_when_no_seed_ran_to_its_audit():
    # Every seed failed: each stopped at its violation, before its audit's checks.
    failed = [{**seed, "status": "fail", "violations": [{"name": "x", "message": "m", "simulated_time": "t"}],
               "repro_command": "loomsim run ..."} for seed in SYNTHETIC if seed.get("status") == "pass"]
    part = summarize_scenario(types.SimpleNamespace(name="s", sometimes=()), failed)
    assert part["failed"] == len(failed) > 0 and gap_names(part["coverage_gaps"], "no-checks") == []
    assert part["invariant_checks"]["idle"] == 0  # still counted, only not called a gap


def test_a_gap_is_enabled_and_never_fired_or_never_enabled():
    part = summarize_scenario(types.SimpleNamespace(name="s", sometimes=("rare",)), SYNTHETIC, planned=3)
    gaps = part["coverage_gaps"]
    assert gap_names(gaps, "enabled-never-fired") == ["a", "fp1"]
    assert gap_names(gaps, "never-enabled") == ["b", "fp2"]
    assert gap_names(gaps, "enabled-never-reached") == ["fp3"]
    assert gap_names(gaps, "never-reached") == ["rare"]
    assert gap_names(gaps, "no-checks") == ["idle"]
    assert "c" not in {g["name"] for g in gaps} and "fp4" not in {g["name"] for g in gaps}
    assert part["fault_kinds_enabled"] == {"a": 1, "b": 0, "c": 2, "failpoint-crash": 1}
    assert (part["seeds"], part["ran"], part["passed"]) == (3, 2, 2)
    detail = {g["name"]: g["detail"] for g in gaps}
    assert detail["a"] == "enabled in 1 of 2 seeds, never fired"
    assert detail["b"] == "the swarm turned it off in all 2 seeds"
    summary = summarize_sweep([part], wall_s=1.0, jobs=2)
    text = render(summary)
    assert "COVERAGE GAP s: fault kind a: enabled in 1 of 2 seeds, never fired" in text
    assert "COVERAGE GAP s: failpoint fp2: the swarm turned it off in all 2 seeds" in text
    assert exit_code(summary, require_coverage=False) == 0
    assert exit_code(summary, require_coverage=True) == 1
    reached = [_seed(0, kinds_on=["c"], fired={"c": 1}, failpoints_on={}, fp={}, held=True,
                     checks={"log-chain": 1})]
    clean = summarize_sweep([summarize_scenario(types.SimpleNamespace(name="s", sometimes=("rare",)), reached)],
                            wall_s=1.0, jobs=1)
    assert clean["coverage_gaps"] == [] and exit_code(clean, require_coverage=True) == 0


def test_beyond_the_contract_a_detection_is_good_and_a_green_pass_a_failure():
    scenario = types.SimpleNamespace(name="s", sometimes=())
    broke = {"kind": "lost-write", "site": "ds.save"}
    seeds = [_seed(7, kinds_on=["c"], fired={"c": 1}, failpoints_on={}, fp={}, beyond=True, status="detected"),
             {**_seed(15, kinds_on=["c"], fired={"c": 1}, failpoints_on={}, fp={}, beyond=True, status="pass"),
              "beyond_contract": [broke]},
             # No promise broke: it tested nothing (not a failure; a gap).
             _seed(23, kinds_on=["c"], fired={"c": 1}, failpoints_on={}, fp={}, beyond=True, status="pass")]
    part = summarize_scenario(scenario, seeds)
    assert (part["detected"], part["failed"], part["passed"], part["not_exercised"], part["beyond_seeds"]) == (
        1, 1, 0, 1, 3)
    assert [(f["seed"], f["invariant"]) for f in part["failing"]] == [(15, BEYOND_PASSED)]
    assert exit_code(summarize_sweep([part], wall_s=1.0, jobs=1), require_coverage=False) == 1


# -- model coverage ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def covered_sweep(tmp_path_factory):
    """One traced seed, with --require-coverage (ten minutes always leave a gap)."""
    tmp = tmp_path_factory.mktemp("sweep-reach")
    out = tmp / "model-coverage.json"
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):  # module-scoped: capsys is per test
        code = cli.main(["sweep", "ledger-storm", "--seeds", "0:1", "--duration", "10m", "--model-coverage-out",
                         str(out), "--require-coverage", "--json", "--repro-dir", str(tmp)])
    return code, json.loads(stream.getvalue()), json.loads(out.read_text(encoding="utf-8"))


def _first_body_line(path: Path, function: str) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body  # past the docstring
    return body[0].lineno


def test_model_coverage_reports_a_share_per_file_and_unreached_ranges(covered_sweep):
    _, summary, written = covered_sweep
    cov = summary["model_coverage"]
    assert 0 < cov["percent"] < 100 and cov["executed"] <= cov["lines"]
    assert "model/canonical.py" in cov["files"] and not any(name in cov["files"] for name in cov["kits"])
    assert any(entry["unreached"] for entry in cov["files"].values())
    assert all(r.replace("-", "").isdigit() for e in cov["files"].values() for r in e["unreached"])
    # canonical_json runs on every store call: its body is executed.
    line = _first_body_line(REPO_ROOT / "model" / "canonical.py", "canonical_json")
    assert line in written["executed_lines"]["model/canonical.py"]
    assert written["percent"] == cov["percent"]
    text = model_coverage.render(cov)
    assert text.startswith(f"model coverage: {cov['percent']:.1f}% of model/ lines executed")
    assert "unreached: " in text


def test_require_coverage_exits_1_on_a_gap(covered_sweep):
    code, summary, _ = covered_sweep
    assert summary["coverage_gaps"] and summary["errors"] == 0, summary
    assert code == 1
    # Without the flag the same gaps are printed and only failures fail.
    assert exit_code(summary, require_coverage=False) == (0 if summary["failed"] == 0 else 1)


def test_tracing_does_not_change_the_run(tmp_path, capsys):
    argv = ["run", "ledger-storm", "--seed", "2", "--duration", "5m", "--json", "--repro-dir", str(tmp_path)]
    assert coverage_child.main([str(tmp_path / "lines.json"), "--", *argv]) in (0, 1)
    traced = json.loads(capsys.readouterr().out)
    cli.main(argv)
    plain = json.loads(capsys.readouterr().out)
    assert traced["trace_digest"] == plain["trace_digest"]
    recorded = model_coverage.read_lines(str(tmp_path / "lines.json"))
    assert recorded and all(name.startswith("model/") for name in recorded)


def test_executable_lines_skip_docstrings_stubs_and_type_checking(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('"""Module doc."""\n'            # 1
                      "from typing import TYPE_CHECKING, Protocol\n"  # 2
                      "if TYPE_CHECKING:\n"            # 3
                      "    import os\n"                # 4
                      "class P(Protocol):\n"           # 5
                      '    """Doc."""\n'               # 6
                      "    def m(self) -> int: ...\n"  # 7
                      "def f(x):\n"                    # 8
                      '    """Doc\n'                   # 9
                      '    on two lines."""\n'         # 10
                      "    # a comment\n"              # 11
                      "    y = x + 1\n"                # 12
                      "    return y\n", encoding="utf-8")  # 13
    lines = model_coverage.executable_lines(str(source))
    assert lines == {2, 3, 5, 7, 8, 12, 13}
    assert model_coverage.ranges([12, 13], lines) == ["12-13"]
    assert model_coverage.ranges([8, 12], lines) == ["8-12"]  # joined across the docstring and comment
    assert model_coverage.ranges([3, 8, 13], lines) == ["3", "8", "13"]


def test_a_child_that_lost_its_tracer_says_so_and_the_report_calls_the_figure_a_floor(tmp_path, monkeypatch,
                                                                                    covered_sweep):
    """CPython switches a tracer off for good when calling it raises (a
    RecursionError deep in a run): the lines after it go unrecorded, so the
    child records it and the report says the share is a floor."""
    from sim.face import cli as cli_module

    def loses_its_tracer(argv):
        sys.settrace(None)  # what CPython does to a tracer that raised
        return 0

    monkeypatch.setattr(cli_module, "main", loses_its_tracer)
    lines = tmp_path / "lines.json"
    assert coverage_child.main([str(lines), "--", "run", "ledger-storm"]) == 0
    assert model_coverage.tracing_lost(str(lines))
    _, summary, _ = covered_sweep
    assert summary["model_coverage"]["tracing_lost_seeds"] == 0  # a real traced seed keeps its tracer
    text = model_coverage.render({**summary["model_coverage"], "tracing_lost_seeds": 1})
    assert "tracing stopped early in 1 seed(s)" in text and "the figure is a floor" in text
