"""``loomsim bench``'s counted figures and verdicts (no timing here: the
figures are judged, not measured, by these tests)."""
from __future__ import annotations

from scenarios import registry
from sim.clock import parse_duration_ms
from sim.face.bench import render, verdicts, work_per_wake
from sim.runner import run
from sim.scenario import ScenarioOptions


def _sentinels(seed: int):
    return run(registry.get("sentinel-year"), ScenarioOptions(seed=seed, duration_ms=parse_duration_ms("6h")))


def test_a_run_counts_its_work_the_same_way_every_time():
    """Encodings, digests, decodes and bytes hashed are counted per run (not
    per process: two runs in one process count alike), and do not touch the
    trace digest."""
    first, second = _sentinels(2), _sentinels(2)
    assert first.trace_digest == second.trace_digest
    work = first.stats["work"]
    assert work == second.stats["work"]
    assert work["encodings"] > 0 and work["digests"] > 0 and work["decodes"] > 0
    assert work["trace_hashed_bytes"] > 0 and work["hashed_bytes"] > 0
    per_wake = work_per_wake(first.stats)
    assert per_wake["encodings"] == round(work["encodings"] / first.stats["wakes"], 1)
    assert per_wake["hashed_kb"] == round((work["hashed_bytes"] + work["trace_hashed_bytes"])
                                          / first.stats["wakes"] / 1000, 2)


def _figures(encodings: float, cpu_s: float) -> dict:
    work = {"encodings": encodings, "digests": 9.0, "decodes": 5.0, "hashed_kb": 8.0, "store_calls": 20.0}
    return {"seed": 1, "quick": False,
            "scheduler": {"sleeps": 10, "floor_s": 1.0, "simruntime_s": 1.2, "ratio": 1.2, "budget_ratio": 1.5},
            "runs": {"memory 365d": {"status": "pass", "wall_s": cpu_s, "cpu_s": cpu_s, "wakes": 105_120,
                                     "us_per_wake": 500.0, "work_per_wake": work, "peak_rss_mb": 80.0,
                                     "budget_s": 60.0}},
            "memory_flatness": {"month_rss_mb": 70.0, "year_rss_mb": 80.0, "ratio": 1.14, "budget_ratio": 1.3,
                                "budget_mb": 300}}


def test_every_budget_gets_a_verdict_and_a_miss_is_named():
    met = _figures(encodings=18.0, cpu_s=50.0)
    assert all(ok for _, ok in verdicts(met)) and "MISSED" not in render(met)
    missed = _figures(encodings=49.0, cpu_s=170.0)
    names = [name for name, ok in verdicts(missed) if not ok]
    assert names == ["sentinel-year memory 365d <= 60s CPU", "sentinel-year memory 365d: encodings per wake <= 20"]
    assert render(missed).count("MISSED") == 2


def test_bench_runs_out_of_range_is_one_usage_line(capsys):
    from sim.face.cli import main

    assert main(["bench", "--runs", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["loomsim: error: --runs 0: expected 1 to 25"]


def test_the_median_run_is_reported_with_the_spread(monkeypatch):
    from sim.face import bench as bench_module

    cpu = iter([3.0, 1.0, 2.0])
    monkeypatch.setattr(bench_module, "_run_child", lambda args: {"cpu_s": next(cpu), "args": args})
    median = bench_module._median_run(["sentinel-year"], 3)
    assert median["cpu_s"] == 2.0 and median["cpu_s_range"] == (1.0, 3.0)


def test_bench_assembles_its_figures_from_median_runs(monkeypatch):
    """The whole of ``bench`` with its measurements stubbed: every run is
    asked ``runs_each`` times and its figure is the median one."""
    from sim.face import bench as bench_module

    calls = []

    def child(args):
        calls.append(tuple(args))
        cpu_s = float(len(calls))
        return {"status": "pass", "wall_s": cpu_s, "cpu_s": cpu_s, "peak_rss_mb": 50.0,
                "stats": {"wakes": 100, "store_calls": 2_000,
                          "work": {"encodings": 1_500, "digests": 900, "decodes": 500, "hashed_bytes": 500_000,
                                   "trace_hashed_bytes": 400_000}}}

    monkeypatch.setattr(bench_module, "_run_child", child)
    monkeypatch.setattr(bench_module, "_bare_floor", lambda sleeps: 1.0)
    monkeypatch.setattr(bench_module, "_bare_sim", lambda sleeps: 1.25)
    monkeypatch.setattr(bench_module, "_trio_mock_clock", lambda sleeps: 2.5)  # per sleep: 10x SimRuntime's
    figures = bench_module.bench(quick=True, runs_each=3)
    # 3 sentinel-year runs and 3 fleet sizes, 3 times each, then ledger-storm at 1 and 3 days, once each
    assert len(calls) == 20 and figures["runs_each"] == 3
    assert [c[:1] + c[c.index("--duration") + 1:][:1] for c in calls[18:]] == [("ledger-storm", "1d"),
                                                                                 ("ledger-storm", "3d")]
    scaling = figures["scaling"]
    assert list(scaling["sentinels"]) == ["1", "10", "100"] and [tuple(c[c.index("--sentinels") + 1:][:1])
                                                                 for c in calls[9:18:3]] == [("1",), ("10",), ("100",)]
    # Medians: calls 10-12 (11 s) at 1 sentinel, calls 16-18 (17 s) at 100, each over 100 wakes: 1.55x, missed.
    assert scaling["ratio"] == round(170_000.0 / 110_000.0, 2)
    assert ("per-wake CPU at 100 sentinels <= 1.2x at 1", False) in verdicts(figures)
    assert figures["scheduler"]["speedup_vs_trio"] == 20.0
    assert ("scheduler >= 20x faster than trio's MockClock per sleep", True) in verdicts(figures)
    del figures["scaling"]
    first = figures["runs"]["memory 30d"]
    assert first["cpu_s"] == 2.0 and first["cpu_s_range"] == [1.0, 3.0]
    assert first["work_per_wake"] == {"encodings": 15.0, "digests": 9.0, "decodes": 5.0, "hashed_kb": 9.0,
                                      "store_calls": 20.0}
    assert all(met for _, met in verdicts(figures)), verdicts(figures)
    assert "median of 3 runs" in render(figures)


def _storm(short_mb: float, long_mb: float, *, quick: bool) -> dict:
    from sim.face import bench as bench_module

    peaks = iter([short_mb, long_mb])
    return {"seed": 1, "quick": quick, "runs": {}, "scheduler": {"sleeps": 10, "floor_s": 1.0, "simruntime_s": 1.2, "ratio": 1.2,
                                      "budget_ratio": 1.5},
            "ledger_storm_memory": _measured(bench_module, peaks, quick)}


def _measured(bench_module, peaks, quick):
    import pytest

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench_module, "_run_child", lambda args: {"status": "pass", "peak_rss_mb": next(peaks),
                                                                "stats": {"submitted": 4_000}})
        return bench_module.ledger_storm_memory(quick=quick, seed=1)


def test_ledger_storm_memory_is_judged_for_flatness_and_its_30_day_peak():
    """Full bench: 30 days measured against 3 (<= 1.3x, <= 300 MB); a store
    that grows per submission misses both."""
    flat = _storm(120.0, 140.0, quick=False)
    storm = flat["ledger_storm_memory"]
    assert list(storm["durations"]) == ["3d", "30d"] and storm["peak_30d_mb"] == 140.0 and not storm["projected"]
    assert verdicts(flat) == [("scheduler <= 1.5x the bare loop", True),
                              ("ledger-storm memory flatness: peak RSS 30d <= 1.3x 3d", True),
                              ("ledger-storm 30d peak RSS <= 300 MB", True)]
    assert "ledger-storm memory: peak RSS 3d: 120.0 MB" in render(flat) and "MISSED" not in render(flat)
    growing = _storm(120.0, 917.0, quick=False)
    assert [name for name, met in verdicts(growing) if not met] == [
        "ledger-storm memory flatness: peak RSS 30d <= 1.3x 3d", "ledger-storm 30d peak RSS <= 300 MB"]
    assert render(growing).count("MISSED") == 2


def test_quick_ledger_storm_memory_projects_the_30_day_peak_on_a_line():
    """--quick: 3 days against 1, the 30-day peak projected through both:
    60 -> 80 MB is 10 MB a day, 80 + 27 x 10 = 350 MB: missed, though 3
    days alone are far under the budget."""
    storm = _storm(60.0, 80.0, quick=True)
    figure = storm["ledger_storm_memory"]
    assert list(figure["durations"]) == ["1d", "3d"] and figure["projected"]
    assert figure["peak_30d_mb"] == 350.0 and figure["ratio"] == round(80 / 60, 3)
    assert dict(verdicts(storm)) == {"scheduler <= 1.5x the bare loop": True,
                                     "ledger-storm memory flatness: peak RSS 3d <= 1.3x 1d": False,
                                     "ledger-storm 30d peak RSS (projected) <= 300 MB": False}
    assert "projected on a line through both: 350.0 MB" in render(storm)
    assert dict(verdicts(_storm(60.0, 62.0, quick=True)))["ledger-storm 30d peak RSS (projected) <= 300 MB"]
