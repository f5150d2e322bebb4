"""A verdict a CI job can trust (issue 28, items 1, 5 and 8).

- Every report of a sweep (Markdown, HTML, JUnit, JSON) carries the verdict
  and exit code the process exits with, read from the one function that
  decides them (``reports.verdict.decide``); a saved failure of the failure
  database that still fails is a failure in each of them.
- A seed beyond the contract in which no broken promise fired tested
  nothing: it is reported as not exercised (a coverage gap), never as a
  failure of the system, never as a silent pass, never saved.
- SIGTERM, like SIGINT, leaves no temporary database behind and still
  prints the summary (and writes the report) of the seeds that finished.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from reports import verdict as verdicts
from reports.html import render_html
from reports.junit import render_junit
from reports.markdown import render_markdown
from sim.face import cli, failures
from sim.face import sweep
from sim.face.sweep import outcome, summarize_scenario, summarize_sweep

REPO_ROOT = Path(__file__).resolve().parents[1]
BUGGY_SWEEP = ["sweep", "ledger-storm", "--seeds", "1:2", "--jobs", "1", "--store", "tests.fixtures.buggy:make"]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _junit_failures(text: str) -> tuple[int, list[ET.Element]]:
    root = ET.fromstring(text.split("\n", 1)[1])
    cases = [case for case in root.iter("testcase") if case.find("failure") is not None]
    return int(root.get("failures")), cases


# -- item 1: one verdict, every report ---------------------------------------------------------


def test_a_saved_failure_that_still_fails_fails_every_report_as_it_fails_the_process(tmp_path, capsys):
    db, repro = tmp_path / "fdb", tmp_path / "rr"
    repro.mkdir()
    common = [*BUGGY_SWEEP, "--failure-db", str(db), "--repro-dir", str(repro)]
    assert cli.main([*common, "--duration", "1h"]) == 1  # the planted bug fails seed 1: saved
    (saved,) = failures.FailureDb(str(db)).paths()
    capsys.readouterr()
    # A sweep too short to meet the bug again: its seed passes, the saved failure still fails.
    code = cli.main([*common, "--duration", "30s", "--report", str(tmp_path / "R"), "--json"])
    body = json.loads(capsys.readouterr().out)
    assert code == 1 and body["failed"] == 0
    assert (body["status"], body["exit_code"]) == ("fail", code)
    assert json.loads(_read(tmp_path / "R" / "loomsim-report.json"))["exit_code"] == code
    md = _read(tmp_path / "R" / "loomsim-report.md")
    assert md.startswith("# ❌ loomsim FAIL (exit 1): ") and "1 saved failure still fails" in md.splitlines()[0]
    assert os.path.basename(saved) in md and "loomsim repro " + saved in md
    html = _read(tmp_path / "R" / "loomsim-report.html")
    assert '<h1 class="fail">FAIL (exit 1): ' in html and saved in html
    count, cases = _junit_failures(_read(tmp_path / "R" / "loomsim-junit.xml"))
    assert count == 1 and [c.get("name") for c in cases] == [f"saved failure {os.path.basename(saved)}"]
    assert "reproduce: loomsim repro " + saved in cases[0].find("failure").text


def _sweep_body(**extra):
    part = summarize_scenario(types.SimpleNamespace(name="s", sometimes=()), [])
    return {**summarize_sweep([part], wall_s=1.0, jobs=1), "saved_failures": [], "runs": [], **extra}


STILL = {"file": "s-1-abc.json", "path": "/db/failures/s-1-abc.json", "outcome": failures.STILL_FAILS,
         "detail": "x (the same invariant)", "scenario": "s", "seed": 1, "saved_invariant": "x", "invariant": "x",
         "repro_command": "loomsim repro /db/failures/s-1-abc.json"}


@pytest.mark.parametrize("extra, status, code", [
    ({}, "pass", 0),
    ({"saved_failures": [STILL]}, "fail", 1),
    ({"saved_failures": [{**STILL, "outcome": failures.FIXED}]}, "pass", 0),
    ({"errors": 1}, "error", 3),
    ({"errors": 1, "saved_failures": [STILL]}, "fail", 1),
    ({"coverage_gaps": [{"scenario": "s", "what": "w", "name": "n", "detail": "d"}], "require_coverage": True},
     "fail", 1),
    ({"coverage_gaps": [{"scenario": "s", "what": "w", "name": "n", "detail": "d"}]}, "pass", 0),
    ({"shards": {"count": 2, "merged": [1], "missing": [2], "files": ["a"]}}, "error", 3),
    ({"interrupted": "SIGTERM", "saved_failures": [STILL]}, "interrupted", 143),
])
def test_every_report_says_the_verdict_and_exit_code_the_one_decision_gives(extra, status, code):
    body = _sweep_body(**extra)
    decided = verdicts.decide(body)
    assert (decided.status, decided.exit_code) == (status, code)
    head = f"{status.upper()} (exit {code}): "
    assert render_markdown(body).splitlines()[0].split(" ", 2)[2].startswith(f"loomsim {head}")
    assert f">{head}" in render_html(body)
    count, cases = _junit_failures(render_junit(body))
    assert count == len(cases) == (1 if status == "fail" or extra.get("saved_failures") == [STILL] else 0)


# -- item 5: a beyond-the-contract seed in which nothing broke -----------------------------------


def _beyond(seed, status, broken=(), violation=None):
    return {"seed": seed, "status": status, "beyond": True, "scenario": "s", "wall_s": 0.1, "store": "memory",
            "repro_command": f"loomsim run s --seed {seed} --beyond-contract", "repro_file": None,
            "beyond_contract": list(broken), "violations": [violation] if violation else [],
            "config": {"duration": "1h", "beyond_contract": True}, "coverage": {}, "invariants": {"x": 1}}


def test_a_beyond_seed_where_nothing_broke_is_not_exercised_and_an_undetected_one_fails():
    broken = [{"kind": "lost-write", "site": "ds.save"}]
    undetected = {"name": "beyond-contract-undetected", "message": "nothing noticed", "simulated_time": "t"}
    seeds = [_beyond(7, "pass"), _beyond(15, "detected", broken, {**undetected, "name": "cas-linear"}),
             _beyond(23, "fail", broken, undetected)]
    assert [outcome(s) for s in seeds] == [sweep.NOT_EXERCISED, "detected", "fail"]
    part = summarize_scenario(types.SimpleNamespace(name="s", sometimes=()), seeds)
    assert (part["not_exercised"], part["detected"], part["failed"], part["passed"]) == (1, 1, 1, 0)
    assert [f["invariant"] for f in part["failing"]] == ["beyond-contract-undetected"]
    (gap,) = [g for g in part["coverage_gaps"] if g["reason"] == sweep.NOT_EXERCISED]
    assert "no broken promise fired within the duration" in gap["detail"]


def test_a_short_sweep_beyond_the_contract_on_the_real_system_exits_0_and_saves_nothing(tmp_path, capsys):
    db = tmp_path / "fdb"
    argv = ["sweep", "sentinel-year", "--seeds", "7:8", "--beyond-contract", "--duration", "1h", "--jobs", "1",
            "--failure-db", str(db), "--repro-dir", str(tmp_path), "--report", str(tmp_path / "R")]
    code = cli.main(argv)
    out = capsys.readouterr().out
    assert "seed 7 (beyond the contract): NOT EXERCISED: no broken promise fired within 1h" in out, out
    assert code == 0 and failures.FailureDb(str(db)).paths() == []
    body = json.loads(_read(tmp_path / "R" / "loomsim-report.json"))
    assert (body["not_exercised"], body["failed"], body["status"], body["exit_code"]) == (1, 0, "pass", 0)
    assert "1 of 1 beyond the contract not exercised" in _read(tmp_path / "R" / "loomsim-report.md").splitlines()[0]
    junit = ET.fromstring(_read(tmp_path / "R" / "loomsim-junit.xml").split("\n", 1)[1])
    assert (junit.get("failures"), junit.get("skipped")) == ("0", "1")  # neither failed nor silently passed
    # Asked to require coverage, a sweep that exercised nothing beyond the contract fails.
    assert cli.main([*argv, "--require-coverage"]) == 1


def test_a_single_run_beyond_the_contract_where_nothing_broke_says_so(capsys):
    code = cli.main(["run", "sentinel-year", "--seed", "7", "--duration", "1h", "--beyond-contract"])
    out = capsys.readouterr().out
    assert code == 0
    assert ("PASS: every invariant held; beyond the contract NOT EXERCISED: no broken promise fired within 1h"
            in out), out


# -- item 8: a signalled sweep cleans up and says what finished --------------------------------


def _env(tmpdir: Path) -> dict[str, str]:
    env = dict(os.environ, TMPDIR=str(tmpdir))
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_sweep_removes_its_databases_and_reports_the_finished_seeds(signum, tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    report = tmp_path / "R"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim", "sweep", "sentinel-year", "--seeds", "0:2", "--jobs", "1", "--duration", "3h",
         "--store", "sqlite", "--failure-db", "none", "--repro-dir", str(tmp_path), "--report", str(report)],
        cwd=tmp_path, env=_env(scratch), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        first = proc.stdout.readline()
        assert first.startswith("[1/2] seed 0 [sqlite]: PASS"), first + proc.stderr.read()
        while not os.listdir(scratch) and proc.poll() is None:  # seed 1's database is made: it runs
            time.sleep(0.01)
        assert proc.poll() is None, "seed 1 finished before the signal"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signum, err
    assert os.listdir(scratch) == []
    assert "sentinel-year: 1 of 2 seeds, 1 passed" in out, out
    assert err.strip().splitlines()[-1].startswith(f"loomsim: interrupted by {signal.Signals(signum).name}")
    body = json.loads(_read(report / "loomsim-report.json"))
    assert (body["ran"], body["passed"], body["interrupted"], body["exit_code"]) == (
        1, 1, signal.Signals(signum).name, 128 + signum)
    assert _read(report / "loomsim-report.md").startswith(f"# ❌ loomsim INTERRUPTED (exit {128 + signum}): ")
