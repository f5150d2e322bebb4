"""Seed ranges are lazy: a time-budgeted sweep over a huge range starts its
first seed at once, in constant memory; a range past the largest seed is
refused in one line; a sharded sweep deals its seeds without listing them."""
from __future__ import annotations

import collections.abc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from sim.face import cli, shards
from sim.face.sweep import SweepOptions, plan_jobs

REPO_ROOT = Path(__file__).resolve().parents[1]
HUGE = 10**10  # seeds: a list of them is ~80 GB of pointers alone


def _loomsim(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # Generous: the sweep must stop after its 1 s budget and its first seed; a list of every seed never ends.
    return subprocess.run([sys.executable, "-m", "sim", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=240)


def test_a_time_budgeted_sweep_over_a_huge_range_runs_and_stops(tmp_path):
    proc = _loomsim(["sweep", "ledger-storm", "--seeds", f"0:{HUGE}", "--time-budget", "1", "--duration", "1m",
                     "--jobs", "1", "--failure-db", "none", "--repro-dir", str(tmp_path), "--json"], tmp_path)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["seeds"] == HUGE and 1 <= summary["ran"] < HUGE and summary["budget_stopped"]
    assert [run["seed"] for run in summary["runs"]] == list(range(summary["ran"]))


def test_the_jobs_of_a_sweep_are_planned_lazily():
    jobs = plan_jobs(["a", "b"], {"a": [], "b": []}, SweepOptions(seeds=range(5, 10**6)))
    assert not isinstance(jobs, collections.abc.Sized)  # an iterator, not a list of every (seed, scenario)
    assert [(job.scenario, job.seed) for job in (next(jobs), next(jobs), next(jobs))] == [("a", 5), ("b", 5),
                                                                                          ("a", 6)]


def test_a_shard_of_a_huge_range_is_dealt_without_listing_it():
    size = 2**62
    seeds = shards.shard_seeds(range(0, size), shards.Shard(2, 3), beyond_every=8, sqlite_every=4)
    assert len(seeds) == len(range(1, size, 3))  # the second of every three dealt
    first = [seed for _, seed in zip(range(24), seeds)]
    assert first == sorted(first) and all(seed in seeds for seed in first) and len(set(first)) == 24


def _dealt_by_sorting(seeds: range, shard: shards.Shard, p: int) -> list[int]:
    """The dealing the module doc describes, spelled out: order by (seed % P, seed), deal round-robin."""
    return sorted(sorted(seeds, key=lambda seed: (seed % p, seed))[shard.index - 1::shard.count])


@settings(max_examples=200, deadline=None)
@given(start=st.integers(0, 10**6), size=st.integers(1, 200), count=st.integers(1, 7),
       beyond_every=st.integers(0, 12), sqlite_every=st.integers(0, 6), data=st.data())
def test_the_lazy_shard_deals_as_the_module_doc_says(start, size, count, beyond_every, sqlite_every, data):
    seeds = range(start, start + size)
    shard = shards.Shard(data.draw(st.integers(1, count)), count)
    lazy = shards.shard_seeds(seeds, shard, beyond_every=beyond_every, sqlite_every=sqlite_every)
    expected = _dealt_by_sorting(seeds, shard, shards.period(beyond_every, sqlite_every))
    assert list(lazy) == expected and len(lazy) == len(expected)
    assert [seed for seed in seeds if seed in lazy] == expected


@pytest.mark.parametrize("seeds", ["0:99999999999999999999", f"0:{2**63}", f"{2**63}:{2**63 + 1}"])
def test_seeds_past_the_largest_are_refused_in_one_line(seeds, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()  # the battery's case: an --out that exists as well
    code = cli.main(["sweep", "ledger-storm", "--seeds", seeds, "--time-budget", "1", "--duration", "1m",
                     "--jobs", "1", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("loomsim: error: argument --seeds:"), err
    assert "2**63-1" in err[0]


def test_an_existing_out_is_refused_at_once_whatever_the_range(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    code = cli.main(["sweep", "ledger-storm", "--seeds", f"0:{2**63 - 1}", "--duration", "1m", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("loomsim: error: --out"), err
