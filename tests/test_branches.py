"""Branching from a deep state: a run's prefix once, then K futures.

``ScenarioOptions.branch`` (``--fork-at T --branch K``) runs to T, re-keys
the run's random streams by K (``sim.rng.Streams.branch``) and goes on;
``loomsim sweep --fork-at T --branches K`` forks the process at T instead
of re-running the prefix (``sim.face.branches``), and each forked branch
must be the run ``--branch k`` makes alone, digest for digest."""
from __future__ import annotations

import gc
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from scenarios import registry
from sim.clock import parse_duration_ms
from sim.face.cli import main
from sim.rng import BranchError, Stream, Streams, branched_seed64, derive_seed64, rekeyed_at_branch
from sim.runner import BRANCH_EVENT, run
from sim.scenario import Branch, ScenarioOptions

REPO_ROOT = Path(__file__).resolve().parents[1]
SCENARIO = "ledger-storm"
SEED = 3
DURATION = "6m"
FORK_AT = "4m"
# A planted bug that fails ledger-storm seed 2 within 5 minutes, after a fork at 1m, in every branch tried.
MUTANT = "ledger-admit-key-ignores-principal"


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-m", "sim", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _opts(branch: Branch | None = None, *, seed: int = SEED, duration: str = DURATION) -> ScenarioOptions:
    return ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), swarm=True, branch=branch)


def _branch(key: int, fork_at: str = FORK_AT) -> Branch:
    return Branch(parse_duration_ms(fork_at), key)


def _traced(opts: ScenarioOptions) -> tuple[str, list[dict]]:
    stream = io.StringIO()
    result = run(registry.get(SCENARIO), opts, trace_stream=stream)
    assert result.passed, result.violations
    return result.trace_digest, [json.loads(line) for line in stream.getvalue().splitlines()]


# -- the streams ----------------------------------------------------------------------


def test_a_stream_made_after_the_fork_is_the_one_made_before_it_and_rekeyed():
    before, after = Streams(5), Streams(5)
    before.track()
    after.track()
    early = before["workload"]
    before.branch(3)
    after.branch(3)
    assert early.seed64 == branched_seed64(derive_seed64(5, "workload"), 0, 3)
    assert [early.next_u64() for _ in range(4)] == [after["workload"].next_u64() for _ in range(4)]
    assert before.fork("sentinels/run-9").next_u64() == after.fork("sentinels/run-9").next_u64()


def test_rekeying_depends_on_the_draws_so_far_and_the_key_and_spares_the_configuration():
    def drawn(key: int, draws: int) -> tuple[int, int, int]:
        streams = Streams(11)
        streams.track()
        faults, swarm, clock = streams["faults"], streams["swarm"], streams["clock/w-1"]
        site = faults.child("ledger.claim/ack-lost")
        for _ in range(draws):
            faults.next_u64()
        swarm_next = Stream(swarm.seed64).next_u64()
        streams.branch(key)
        assert swarm.next_u64() == swarm_next and clock.seed64 == derive_seed64(11, "clock/w-1")
        return faults.next_u64(), site.next_u64(), faults.child("late").next_u64()

    assert drawn(1, 2) == drawn(1, 2)
    assert drawn(1, 2) != drawn(2, 2)
    assert drawn(1, 2)[0] != drawn(1, 3)[0]
    assert rekeyed_at_branch("workload/run-1") and rekeyed_at_branch("scheduling")
    assert not rekeyed_at_branch("swarm/kind/x") and not rekeyed_at_branch("clock/n1")


def test_dead_streams_are_not_kept_alive_for_the_branch():
    streams = Streams(1)
    streams.track()
    for index in range(1000):
        streams.fork(f"workload/run-{index}").next_u64()
    gc.collect()
    assert len(streams._live) <= 1  # only what is still referenced


def test_a_run_branches_once():
    streams = Streams(1)
    streams.track()
    streams.branch(0)
    with pytest.raises(BranchError):
        streams.branch(1)


# -- the runs -------------------------------------------------------------------------


def test_a_branch_shares_its_prefix_and_lives_its_own_future():
    plain_digest, plain = _traced(_opts())
    fork_ms = parse_duration_ms(FORK_AT)
    one_digest, one = _traced(_opts(_branch(1)))
    again_digest, _ = _traced(_opts(_branch(1)))
    two_digest, two = _traced(_opts(_branch(2)))
    assert one_digest == again_digest
    assert len({plain_digest, one_digest, two_digest}) == 3
    for events in (one, two):
        at = next(i for i, e in enumerate(events) if e["kind"] == BRANCH_EVENT)
        assert events[at]["t_ms"] == fork_ms and events[at]["fields"]["key"] in (1, 2)
        assert events[:at] == [e for e in plain if e["t_ms"] <= fork_ms]  # the prefix, event for event
    after_one = [(e["kind"], e["fields"]) for e in one if e["t_ms"] > fork_ms]
    after_two = [(e["kind"], e["fields"]) for e in two if e["t_ms"] > fork_ms]
    assert after_one != after_two


def test_a_branch_with_progress_lines_is_the_same_run():
    seen = []
    quiet = run(registry.get(SCENARIO), _opts(_branch(2)))
    observed = run(registry.get(SCENARIO), _opts(_branch(2)), on_progress=lambda now, end: seen.append((now, end)))
    assert observed.trace_digest == quiet.trace_digest
    assert seen and seen[-1][0] == seen[-1][1] and all(end == seen[0][1] for _, end in seen)


def test_the_branch_is_in_the_config():
    result = run(registry.get(SCENARIO), _opts(_branch(4), duration="10m"))
    assert result.config["branch"] == {"fork_at": FORK_AT, "fork_at_ms": parse_duration_ms(FORK_AT), "key": 4}


# -- the command line -----------------------------------------------------------------


@pytest.mark.parametrize("args, says", [
    (["--fork-at", "8m"], "--fork-at T needs --branch K"),
    (["--branch", "1"], "--branch K needs --fork-at T"),
    (["--fork-at", "20m", "--branch", "1"], "is not before the run's end"),
    (["--fork-at", "8m", "--branch", "-1"], "invalid branch"),
    (["--fork-at", "8m", "--branch", "x"], "invalid branch"),
    (["--fork-at", "soon", "--branch", "1"], "--fork-at"),
])
def test_bad_branch_options_are_one_usage_line(args, says, capsys):
    code = main(["run", SCENARIO, "--seed", "1", "--duration", "20m", "--no-progress", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("loomsim: error: ") and says in err, err


def _in_process(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_failing_branch_writes_a_repro_file_that_replays_and_shrinks(tmp_path, capsys, monkeypatch):
    from faults import mutants as mx

    monkeypatch.chdir(tmp_path)  # in this process: the CLI's own code, without a new interpreter per command
    try:
        code, out, err = _in_process(["run", SCENARIO, "--seed", "2", "--duration", "5m", "--fork-at", "1m",
                                      "--branch", "1", "--mutant", MUTANT, "--repro-dir", str(tmp_path), "--json"],
                                     capsys)
        assert code == 1, err
        body = json.loads(out)
        assert body["violations"][0]["simulated_ms"] > parse_duration_ms("1m")  # it failed in the branch's future
        assert "--fork-at 1m --branch 1" in body["repro_command"]
        path = body["repro_file"]
        assert os.path.basename(path) == "loomsim-repro-ledger-storm-2-branch1.json"
        with open(path, encoding="utf-8") as handle:
            assert json.load(handle)["config"]["branch"] == {"fork_at": "1m", "fork_at_ms": 60_000, "key": 1}
        code, out, err = _in_process(["repro", path, "--json"], capsys)
        assert code == 1, err
        replayed = json.loads(out)
        assert replayed["trace_digest"] == body["trace_digest"] and not replayed["replay"]["diverged"]
        code, out, err = _in_process(["shrink", path, "--max-runs", "6"], capsys)
        assert code == 1, err
        shrunk_path = tmp_path / "loomsim-shrunk-ledger-storm-2-branch1.json"
        with open(shrunk_path, encoding="utf-8") as handle:
            small = json.load(handle)
        assert small["config"]["branch"]["key"] == 1
        assert len(small["fault_script"]) <= len(json.load(open(path, encoding="utf-8"))["fault_script"])
        assert parse_duration_ms(small["config"]["duration"]) > 60_000
        code, out, _ = _in_process(["repro", str(shrunk_path), "--json"], capsys)
        assert code == 1 and json.loads(out)["replay"]["reproduced"]
    finally:
        mx.revert()  # the CLI applied the mutant in this process


# -- the forking sweep (sim.face.branches) ---------------------------------------------


def _sweep_json(args: list[str], cwd: Path) -> tuple[int, dict]:
    out = _cli(["sweep", SCENARIO, *args, "--json"], cwd)
    lines = out.stdout.strip().splitlines()
    assert lines, out.stderr
    return out.returncode, json.loads(lines[-1])


def test_a_forked_branch_is_the_branch_run_alone(tmp_path):
    code, summary = _sweep_json(["--seeds", "3:4", "--duration", "2m", "--fork-at", "1m", "--branches", "3",
                                 "--jobs", "2", "--failure-db", "none"], tmp_path)
    assert code == 0, summary
    runs = summary["runs"]
    assert [(r["seed"], r["branch"]) for r in runs] == [(3, 0), (3, 1), (3, 2)]
    assert summary["branches"] == {"fork_at": "1m", "fork_at_ms": 60_000, "per_seed": 3}
    alone = [run(registry.get(SCENARIO), _opts(_branch(k, "1m"), duration="2m")).trace_digest for k in range(3)]
    assert [r["trace_digest"] for r in runs] == alone
    assert len(set(alone)) == 3


def test_a_failing_forked_branch_leaves_a_repro_file_and_a_saved_failure_that_replay(tmp_path):
    # A scenario module that plants the bug in every process that loads it (the sweep's seed processes too).
    (tmp_path / "planted.py").write_text("from sim.face.mutants import apply_named\n"
                                         f"apply_named({MUTANT!r}, None, 'memory')\n", encoding="utf-8")
    out = _cli(["--scenarios", "planted", "sweep", SCENARIO, "--seeds", "2:3", "--duration", "5m", "--fork-at", "1m",
                "--branches", "2", "--jobs", "2", "--failure-db", str(tmp_path / "db")], tmp_path)
    assert out.returncode == 1, out.stderr
    assert "FAIL seed 2 branch 1: reference-model" in out.stdout
    assert "--fork-at 1m --branch 1" in out.stdout
    saved = sorted(os.listdir(tmp_path / "db" / "failures"))
    assert len(saved) == 2
    replay = _cli(["--scenarios", "planted", "repro", str(tmp_path / "loomsim-repro-ledger-storm-2-branch1.json"),
                   "--json"], tmp_path)
    body = json.loads(replay.stdout)
    assert replay.returncode == 1 and body["replay"]["reproduced"] and not body["replay"]["diverged"]


@pytest.mark.parametrize("args, says", [
    (["--fork-at", "1m"], "--fork-at T needs --branches K"),
    (["--branches", "2"], "--branches K needs --fork-at T"),
    (["--fork-at", "1m", "--branches", "0"], "--branches must be between 1"),
    (["--fork-at", "5m", "--branches", "2"], "is not before the run's end"),
    (["--fork-at", "1m", "--branches", "2", "--store", "sqlite"], "only the in-memory store forks"),
    (["--fork-at", "1m", "--branches", "2", "--shard", "1/2"], "--shard does not combine with --fork-at"),
])
def test_bad_sweep_branch_options_are_one_usage_line(args, says, capsys):
    code = main(["sweep", SCENARIO, "--seeds", "0:1", "--duration", "5m", "--failure-db", "none", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("loomsim: error: ") and says in err, err


def test_a_signalled_seed_process_stops_its_branches_and_keeps_what_finished(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen([sys.executable, "-m", "sim.face.branches", "--branches", "3", "--jobs", "1", "--",
                             "run", SCENARIO, "--seed", "3", "--duration", "1d", "--fork-at", "1m",
                             "--repro-dir", str(tmp_path), "--json"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            process_group=0, preexec_fn=_default_sigint)  # its own group: what is left of it can be asked for
    try:
        import time

        deadline = time.monotonic() + 120
        children: list[str] = []
        while not children and time.monotonic() < deadline:  # a branch is running
            time.sleep(0.1)
            path = f"/proc/{proc.pid}/task/{proc.pid}/children"
            children = open(path).read().split() if os.path.exists(path) else []
        assert children, "no branch started"
        proc.send_signal(2)  # SIGINT
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert out.strip() == ""  # no branch of a day's run finished in that time; none is reported
    assert _group_gone(proc.pid)  # nothing of its group is left running


# -- the bench figure -----------------------------------------------------------------


def _branch_figures(ratio: float) -> dict:
    return {"seed": 1, "quick": True,
            "scheduler": {"sleeps": 10, "floor_s": 1.0, "simruntime_s": 1.2, "ratio": 1.2, "budget_ratio": 1.5},
            "runs": {},
            "branches": {"scenario": "sentinel-year", "fork_at": "20d", "duration": "36d 12h", "branches": 8,
                         "jobs": 2, "statuses": ["pass"], "wall_s": 60.0, "prefix_cpu_s": 10.0,
                         "suffix_cpu_s": 80.0, "total_cpu_s": 90.0 * ratio, "ratio": ratio, "budget_ratio": 1.1,
                         "projected_full_cpu_s": 160.0, "saving": round(160 / (90 * ratio), 2)}}


def test_the_branches_figure_is_judged_and_shown():
    from sim.face.bench import render, verdicts

    assert ("branches: total CPU <= 1.1x prefix + suffixes", True) in verdicts(_branch_figures(1.02))
    assert ("branches: total CPU <= 1.1x prefix + suffixes", False) in verdicts(_branch_figures(1.3))
    shown = render(_branch_figures(1.02))
    assert "branches, 8 of sentinel-year 36d 12h forked at 20d" in shown and "160.0s projected" in shown


@pytest.mark.parametrize("shape", ["20d:10d:8", "20d:36d:0", "20d:36d", "soon:36d:8"])
def test_a_bad_branch_shape_is_one_usage_line(shape, capsys):
    assert main(["bench", "--branch-shape", shape]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "invalid branch shape" in err, err


@pytest.mark.parametrize("branch, says", [
    ({"fork_at_ms": 60_000, "key": "x"}, "branch.key must be a non-negative integer"),
    ({"fork_at_ms": 600_000, "key": 1}, "branch.fork_at_ms must be before the run's end (5m)"),
    ([1], "branch must be an object"),
])
def test_a_hand_edited_branch_in_a_repro_file_is_one_usage_line(tmp_path, branch, says, capsys):
    path = tmp_path / "loomsim-repro-ledger-storm-2-branch1.json"
    config = {"scenario": SCENARIO, "seed": 2, "duration": "5m", "store": "memory", "branch": branch}
    path.write_text(json.dumps({"format": "loomsim-repro/1", "config": config, "fault_script": []}), encoding="utf-8")
    assert main(["repro", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err, err


def test_an_interrupted_forking_sweep_stops_everything_and_sums_up_what_finished(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen([sys.executable, "-m", "sim", "sweep", SCENARIO, "--seeds", "0:2", "--duration", "1d",
                             "--fork-at", "1m", "--branches", "2", "--jobs", "1", "--failure-db", "none"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            process_group=0, preexec_fn=_default_sigint)
    try:
        import time

        def grandchildren() -> list[str]:
            found = []
            for child in _children(proc.pid):
                found.extend(_children(int(child)))
            return found

        deadline = time.monotonic() + 120
        while not grandchildren() and time.monotonic() < deadline:  # a branch of the first seed is running
            time.sleep(0.1)
        assert grandchildren(), "no branch started"
        proc.send_signal(2)  # SIGINT
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted by SIGINT" in err and "0 branch run(s) that finished" in err
    assert "sweep: 0 of 4 seeds" in out  # the summary, of what finished
    assert _group_gone(proc.pid)


def _default_sigint() -> None:
    """In the child: SIGINT at its default, whatever the test runner was
    started with (a background job ignores it, and so would the child)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _group_gone(pgid: int, wait_s: float = 30.0) -> bool:
    """No process of group ``pgid`` is left running. A killed member the
    machine's init has not reaped yet is a zombie: it runs nothing, so it
    counts as gone (how soon init reaps varies with the load)."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        running = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":  # (state, ppid, pgrp, ...) after the name
                running.append(entry)
        if not running:
            return True
        if time.monotonic() >= deadline:
            raise AssertionError(f"processes {running} of group {pgid} still run")
        time.sleep(0.1)


def _children(pid: int) -> list[str]:
    path = f"/proc/{pid}/task/{pid}/children"
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().split()
    except OSError:
        return []
