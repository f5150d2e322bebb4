"""The face's edges: signals reach a sweep's children, exit codes tell a
failure from a broken harness, results carry their format and per-seed
records, a long run shows progress, coverage tells "enabled and never
fired" from "switched off", ``--version`` and ``--help`` say what there is.

Every simulation here is minutes of simulated time, one at a time.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from faults.kinds import ALL_FAULT_KINDS
from sim.face import cli
from sim.face.sweep import EXIT_ERROR, _progress, exit_code, render, summarize_scenario, summarize_sweep

REPO_ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim", *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=120)


# -- signals: no child outlives an interrupted sweep -----------------------------------------


def _group(pgid: int) -> list[int]:
    """The live (non-zombie) processes of process group ``pgid``, from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                    found.append(int(entry))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("command, signum, code", [
    ("sweep", signal.SIGTERM, 128 + signal.SIGTERM), ("sweep", signal.SIGINT, 130),
    ("mutants", signal.SIGTERM, 128 + signal.SIGTERM)])
def test_a_signalled_sweep_stops_its_children_says_so_and_exits_non_zero(command, signum, code, tmp_path):
    argv = {"sweep": ["sweep", "ledger-storm", "--seeds", "0:50", "--duration", "1d"],
            "mutants": ["mutants", "--only", "ledger-claim-newest-first", "--seeds", "0:50",
                        "--duration", "ledger-storm=1d"]}[command]
    # Its own process group (a new session): every child it starts is in it.
    # SIGINT at its default in the child even when this test runs as a
    # background job (which starts with SIGINT ignored, inherited by exec).
    proc = subprocess.Popen([sys.executable, "-m", "sim", *argv, "--jobs", "1", "--repro-dir", str(tmp_path)],
                            cwd=tmp_path, env=_env(), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _children(proc.pid) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert _children(proc.pid), "the sweep started no child"
        time.sleep(0.3)  # the child is running its simulation (a day: tens of seconds)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == code, (proc.returncode, err[-2000:])
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("loomsim: interrupted"), err[-2000:]
        assert "stopped 1 running child run" in lines[0], lines
        assert "Traceback" not in err + out
        deadline = time.monotonic() + 5
        while _group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _group(proc.pid) == [], "a child of the sweep outlived it"
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


# -- exit codes: 1 a failure, 3 a broken harness ---------------------------------------------


def _summary(**totals):
    base = {"failed": 0, "errors": 0, "coverage_gaps": []}
    return {**base, **totals}


def test_exit_codes_tell_a_failure_from_an_infrastructure_error():
    assert exit_code(_summary(), require_coverage=True) == 0
    assert exit_code(_summary(errors=1), require_coverage=False) == EXIT_ERROR == 3
    assert exit_code(_summary(failed=1, errors=1), require_coverage=False) == 1  # a failure outranks an error
    assert exit_code(_summary(coverage_gaps=[{"name": "x"}]), require_coverage=False) == 0
    assert exit_code(_summary(coverage_gaps=[{"name": "x"}]), require_coverage=True) == 1


def test_a_sweep_whose_child_cannot_run_exits_3_and_lists_the_seed(tmp_path):
    # The parent cannot tell a store factory's module is missing; the child can.
    proc = _cli(["sweep", "ledger-storm", "--seeds", "0:1", "--store", "no_such_module_here:make", "--duration",
                 "5m", "--repro-dir", str(tmp_path), "--json"], tmp_path)
    assert proc.returncode == 3, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["format"] == "loomsim-sweep/1" and summary["errors"] == 1
    (record,) = summary["runs"]
    assert (record["scenario"], record["seed"], record["status"]) == ("ledger-storm", 0, "error")
    assert "no_such_module_here" in record["error"]


def test_help_names_the_exit_codes_the_fault_kinds_and_where_the_rest_is(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "exit codes: 0 pass, 1" in text and "3 infrastructure" in text
    for kind in ALL_FAULT_KINDS:
        assert kind in text, kind
    assert "loomsim list --faults" in text


# -- --version, list --faults -----------------------------------------------------------------


def test_version_prints_the_package_version(tmp_path):
    proc = _cli(["--version"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"loomsim {cli.version()}" and cli.version()[0].isdigit()
    assert proc.stderr == ""


def test_list_faults_names_each_scenarios_kinds_failpoints_and_knobs(capsys):
    from scenarios import registry

    assert cli.main(["list", "--faults", "ledger-storm"]) == 0
    text = capsys.readouterr().out
    space = registry.get("ledger-storm").swarm_space
    for name in (*space.fault_kinds, *space.failpoints, *space.workload):
        assert name in text, name
    for knob in space.knobs:
        assert f"knob {knob.name}={knob.default}" in text
    assert cli.main(["list", "--faults", "no-such-scenario"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("loomsim: error:"), err


# -- result JSON: a format, per-seed records, coverage told apart -----------------------------


def test_run_json_carries_its_format_and_never_fired_told_apart(tmp_path, capsys):
    code = cli.main(["run", "ledger-storm", "--seed", "1", "--duration", "10m", "--repro-dir", str(tmp_path),
                     "--json"])
    body = json.loads(capsys.readouterr().out)
    assert code == 0 and body["format"] == "loomsim-result/1"
    cov = body["coverage"]
    enabled, off = cov["never_fired_enabled"], cov["switched_off"]
    assert sorted(enabled + off) == sorted(cov["never_fired"]) and not set(enabled) & set(off)
    chosen = set(body["config"]["swarm"]["fault_kinds"])
    kinds = set(cov["fault_kinds"])
    assert {k for k in off if k in kinds} == {k for k in cov["never_fired"] if k in kinds and k not in chosen}
    assert off, "seed 1 of ledger-storm switches some kinds off"


def test_run_output_says_which_never_fired_kinds_were_switched_off(tmp_path, capsys):
    assert cli.main(["run", "ledger-storm", "--seed", "1", "--duration", "10m", "--repro-dir", str(tmp_path)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("coverage:"))
    assert "never fired (enabled): " in line and "switched off by this seed's swarm: " in line
    off = line.split("switched off by this seed's swarm: ")[1].split(";")[0]
    assert "crash-before-call" in off and "ack-lost" not in off  # seed 1's swarm (see the run's swarm line)


def test_sweep_json_lists_every_seed_with_its_digest(tmp_path, capsys):
    code = cli.main(["sweep", "ledger-storm", "--seeds", "0:2", "--jobs", "1", "--duration", "2m", "--store",
                     "memory", "--repro-dir", str(tmp_path), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and summary["format"] == "loomsim-sweep/1"
    assert [(r["scenario"], r["seed"]) for r in summary["runs"]] == [("ledger-storm", 0), ("ledger-storm", 1)]
    for record in summary["runs"]:
        assert len(record["trace_digest"]) == 64 and record["status"] in ("pass", "fail", "detected")
        assert set(record) >= {"first_violation", "repro_file", "repro_command", "store", "beyond"}
    assert cli.main(["run", "ledger-storm", "--seed", "1", "--duration", "2m", "--repro-dir", str(tmp_path),
                     "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["trace_digest"] == summary["runs"][1]["trace_digest"]


def test_a_sweep_summary_tells_never_fired_from_switched_off():
    seeds = [{"seed": 0, "status": "pass", "beyond": False, "scenario": "s", "wall_s": 0.1,
              "config": {"swarm": {"fault_kinds": ["a"], "failpoints": {}}},
              "coverage": {"fault_kinds": {"a": 0, "b": 0}, "ports": {}, "sometimes": {}, "failpoints": {}},
              "invariants": {"x": 1}}]
    part = summarize_scenario(types.SimpleNamespace(name="s", sometimes=()), seeds)
    assert (part["never_fired_enabled"], part["switched_off"]) == (["a"], ["b"])
    text = render(summarize_sweep([part], wall_s=1.0, jobs=1))
    assert "never fired (enabled in some seed): a; switched off by the swarm in every seed: b" in text


# -- progress ---------------------------------------------------------------------------------


def test_a_finished_seed_line_carries_an_eta(capsys):
    result = {"seed": 3, "status": "pass", "wall_s": 1.5, "scenario": "s", "store": "memory"}
    _progress(2, 10, result, False, eta_s=125.0)
    assert capsys.readouterr().out.strip() == "[2/10] seed 3: PASS 1.5s  (ETA 2m 05s)"


def test_run_progress_goes_to_stderr_and_changes_nothing(tmp_path):
    argv = ["run", "ledger-storm", "--seed", "1", "--duration", "5m", "--repro-dir", str(tmp_path), "--json"]
    shown = _cli([*argv, "--progress-every", "0.05"], tmp_path)
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = shown.stderr.strip().splitlines()
    assert lines and all(line.startswith("loomsim: progress: simulated ") for line in lines), lines
    assert "%" in lines[0] and " wall, ETA " in lines[0]
    quiet = _cli(argv, tmp_path)  # stderr is a pipe, not a terminal: no progress unless asked
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert json.loads(shown.stdout)["trace_digest"] == json.loads(quiet.stdout)["trace_digest"]


def test_progress_line_reads_simulated_share_wall_and_eta():
    from sim.face.run import progress_line

    line = progress_line(6 * 3_600_000, 24 * 3_600_000, 30.0)
    assert line == "loomsim: progress: simulated 6h of 1d (25.0%), 30s wall, ETA 1m 30s"


def test_a_signal_is_never_raised_inside_the_handler_only_at_a_safe_point():
    # Raised from the handler, it could land inside Popen.poll between its
    # lock and the try that frees it: the reaping's wait() then hung (a
    # SIGINT-ed sweep under load never exited).
    from sim.face import children

    # Not ignored (a background job starts with SIGINT ignored, and the
    # sweep leaves an ignored signal ignored, as nohup asks).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _signals_at_safe_points(children)
    finally:
        signal.signal(signal.SIGINT, previous)


def _signals_at_safe_points(children) -> None:
    with children.forwarding_signals():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler has run: nothing was raised here
        with pytest.raises(children.Interrupted) as caught:
            children.check_interrupted()
        assert caught.value.signum == signal.SIGINT
        children.check_interrupted()  # raised once
    with pytest.raises(children.Interrupted):  # one that came after the last check: raised on the way out
        with children.forwarding_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)


def test_a_sweep_child_that_writes_more_than_a_pipe_holds_is_read_not_blocked():
    """A child's output goes to files, not pipes the parent reads only after
    it exits: a child that wrote more than 64 KiB (here, a 100,000-character
    scenario name echoed in its one error line) exits and is read whole."""
    from sim.face.children import Job, child_result, start_child

    name = "x" * 100_000
    proc = start_child(Job(name, 1, False, ("run", name, "--seed", "1", "--json")), None)
    try:
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    result = child_result(Job(name, 1, False, ()), proc)
    assert proc.returncode == 2
    assert result["status"] == "error" and name in result["error"], result["error"][:200]
