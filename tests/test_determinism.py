"""Same scenario + seed + code => identical trace digest, in any process, under any PYTHONHASHSEED."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from scenarios import registry
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions

REPO_ROOT = Path(__file__).resolve().parents[1]
COMPARED = ("status", "trace_digest", "simulated_ms", "wakes", "events", "faults", "invariants", "violations",
            "stats", "config")


def _start(args: list[str], cwd: Path, *, hash_seed: str) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = hash_seed
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen([sys.executable, "-m", "sim", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> dict:
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, (proc.args, proc.returncode, stderr[-2000:])
    return json.loads(stdout)


def _run_all(jobs: list[tuple[list[str], str]], cwd: Path) -> list[dict]:
    # Two at a time: the machine has two cores.
    results: list[dict] = []
    for i in range(0, len(jobs), 2):
        procs = [_start(args, cwd, hash_seed=seed) for args, seed in jobs[i:i + 2]]
        results.extend(_finish(p) for p in procs)
    return results


def _assert_same_run(a: dict, b: dict) -> None:
    for field in COMPARED:
        assert a[field] == b[field], field


def test_same_seed_same_digest_under_different_hash_seeds(tmp_path):
    trace_a, trace_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    # 32 hours: the shortest run of this seed past 10,000 events (10,886).
    base = ["run", "sentinel-year", "--seed", "3", "--duration", "32h", "--json"]
    a, b = _run_all([(base + ["--trace", str(trace_a)], "1"), (base + ["--trace", str(trace_b)], "4242")],
                    tmp_path)
    _assert_same_run(a, b)
    assert a["status"] == "pass"
    assert a["events"] > 10_000 and a["wakes"] + a["stats"]["wakes_skipped"] == 32 * 12  # a wake every 5 minutes
    assert sum(a["faults"].values()) > 0  # the run really exercised faults
    # Not just the digest: the whole trace is byte-identical.
    assert trace_a.read_bytes() == trace_b.read_bytes()
    assert len(trace_a.read_bytes().splitlines()) == a["events"]


@pytest.mark.slow  # the suite's budget: covered by the one-sentinel and fresh-file checks
def test_many_sentinels_same_digest_under_different_hash_seeds(tmp_path):
    # More keys, schedules and runs in flight: more chances for dict/set
    # ordering under a hash seed to leak into the trace.
    base = ["run", "sentinel-year", "--seed", "8", "--duration", "2d", "--sentinels", "4", "--json"]
    a, b = _run_all([(base, "0"), (base, "987654")], tmp_path)
    _assert_same_run(a, b)
    assert a["wakes"] == 4 * 2 * 288


@pytest.mark.slow  # the suite's budget: covered by the one-sentinel and fresh-file checks
def test_different_seeds_give_different_digests(tmp_path):
    base = ["run", "sentinel-year", "--duration", "7d", "--json"]
    three, four = _run_all([(base + ["--seed", "3"], "1"), (base + ["--seed", "4"], "1")], tmp_path)
    assert three["trace_digest"] != four["trace_digest"]
    assert three["seed"] == 3 and four["seed"] == 4


def test_sqlite_runs_are_deterministic(tmp_path):
    base = ["run", "sentinel-year", "--seed", "3", "--duration", "12h", "--store", "sqlite", "--json"]
    a, b = _run_all([(base, "1"), (base, "77")], tmp_path)
    _assert_same_run(a, b)
    assert a["store"] == "sqlite" and a["status"] == "pass"


@pytest.mark.slow  # the suite's budget: test_sqlite_runs_are_deterministic covers SQLite in CI
def test_sqlite_runs_on_fresh_db_files_are_deterministic(tmp_path):
    base = ["run", "sentinel-year", "--seed", "5", "--duration", "2d", "--json"]
    a, b = _run_all([(base + ["--db", str(tmp_path / "a.db")], "1"),
                     (base + ["--db", str(tmp_path / "b.db")], "2")], tmp_path)
    for field in COMPARED:
        if field != "config":
            assert a[field] == b[field], field


def _opts(seed: int, duration: str, **params: int) -> ScenarioOptions:
    return ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), params={"sentinels": 1, **params})


@pytest.mark.slow  # the suite's budget: covered by the one-sentinel and fresh-file checks
def test_in_process_reruns_are_identical():
    scenario = registry.get("sentinel-year")
    first = run(scenario, _opts(3, "7d"))
    second = run(scenario, _opts(3, "7d"))
    assert first.passed and second.passed
    assert first.trace_digest == second.trace_digest
    assert first.events == second.events
    assert first.fault_script == second.fault_script
    assert len(first.fault_script) > 0
    assert first.stats == second.stats
    other = run(scenario, _opts(4, "7d"))
    assert other.trace_digest != first.trace_digest
    # An unrelated run in between does not disturb the next one (no global state).
    assert run(scenario, _opts(3, "7d")).trace_digest == first.trace_digest


def test_a_stopped_run_leaves_no_coroutine_to_the_garbage_collector(monkeypatch):
    # A violation stops the run with harness timers and worker tasks still
    # pending. Their coroutines must be closed by the run at a known instant,
    # not by the garbage collector later (ARCHITECTURE §2: never rely on GC or
    # finalizers) — an unstarted one collected by GC warns "never awaited".
    from scenarios.invariants.cas_linear import CasLinear

    def on_event(self, event):
        self.fail("planted", ())

    monkeypatch.setattr(CasLinear, "on_event", on_event)
    scenario = registry.get("sentinel-year")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run(scenario, _opts(5, "1d"))
        assert not result.passed
        del result
        gc.collect()
    leaked = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert leaked == []


@pytest.mark.slow  # the suite's budget: each scenario's own memory-vs-SQLite test covers it in CI
def test_memory_and_sqlite_backends_produce_the_same_history():
    """A differential check for free: both backends must make the system see
    and do exactly the same things, so the trace digests are equal. A backend
    that differs in any observable result (a revision, an error, an order)
    breaks this."""
    scenario = registry.get("sentinel-year")
    memory = run(scenario, ScenarioOptions(seed=11, duration_ms=parse_duration_ms("2d")))
    sqlite = run(scenario, ScenarioOptions(seed=11, duration_ms=parse_duration_ms("2d"), store="sqlite"))
    assert memory.passed and sqlite.passed
    assert memory.trace_digest == sqlite.trace_digest
    # The same history; the counted work of getting there is not part of it.
    assert {k: v for k, v in memory.stats.items() if k != "work"} == {
        k: v for k, v in sqlite.stats.items() if k != "work"}
