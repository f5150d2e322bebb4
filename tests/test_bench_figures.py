"""``loomsim bench``'s counted figures and verdicts (no timing here: the
figures are judged, not measured, by these tests)."""
from __future__ import annotations

import attrs
import pytest

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
                                     "budget_s": 60.0, "work_budgeted": True},
                     # The month's work per wake is shown, not budgeted (start-up weighs in it).
                     "memory 30d": {"status": "pass", "wall_s": 5.0, "cpu_s": 5.0, "wakes": 8_640,
                                    "us_per_wake": 600.0, "work_per_wake": dict(work, encodings=99.0),
                                    "peak_rss_mb": 70.0, "budget_s": None, "work_budgeted": False}},
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
        # The fleet runs' audits: 1 s at 1 sentinel, 4 s at 100 (they retain more).
        audit = {"1": 1.0, "100": 4.0}.get(args[args.index("--sentinels") + 1], 0.0) if "--sentinels" in args else 0.0
        return {"status": "pass", "wall_s": cpu_s, "cpu_s": cpu_s, "peak_rss_mb": 50.0, "audit_cpu_s": audit,
                "stats": {"wakes": 100, "store_calls": 2_000,
                          "work": {"encodings": 1_500, "scalars": 2_500, "digests": 900, "decodes": 500, "hashed_bytes": 500_000,
                                   "trace_hashed_bytes": 400_000}}}

    direct_calls = []

    def direct_child(args):
        direct_calls.append(tuple(args))
        judged = "--judged" in args
        return {"wakes": 100, "due": 100, "settled": {"completed": 100}, "unsettled": 0, "pages": 2,
                "switches": 300, "cpu_s": 2.4 if judged else 1.6, "judged": judged,
                "reference_checks": 2_300 if judged else 0, "violations": []}

    monkeypatch.setattr(bench_module, "_run_child", child)
    monkeypatch.setattr(bench_module, "_run_direct_child", direct_child)
    monkeypatch.setattr(bench_module, "_bare_floor", lambda sleeps: 1.0)
    monkeypatch.setattr(bench_module, "_bare_sim", lambda sleeps: 1.25)
    monkeypatch.setattr(bench_module, "_trio_mock_clock", lambda sleeps: 2.5)  # per sleep: 10x SimRuntime's
    sweeps = []

    def sweep(args):
        sweeps.append(tuple(args))
        jobs = int(args[args.index("--jobs") + 1])
        return {"wall_s": 12.0 / jobs, "seeds": 6, "passed": 6}

    monkeypatch.setattr(bench_module, "_run_sweep", sweep)
    # The branches figure measured in a real forking sweep is judged and shown in test_branches.
    shapes = []

    def branches(*, seed, shape):
        shapes.append(shape)
        fork_at, duration, count = shape
        return {"scenario": "sentinel-year", "fork_at": fork_at, "duration": duration, "branches": count, "jobs": 2,
                "statuses": ["pass"], "wall_s": 6.0, "prefix_cpu_s": 1.0, "suffix_cpu_s": 8.0, "total_cpu_s": 9.18,
                "ratio": 1.02, "budget_ratio": 1.1, "projected_full_cpu_s": 12.0, "saving": 1.31}

    monkeypatch.setattr(bench_module, "branches_figure", branches)
    figures = bench_module.bench(quick=True, runs_each=3)
    assert shapes == [bench_module.BRANCHES_QUICK] and figures["branches"]["branches"] == 4
    assert "branches, 4 of sentinel-year 3d 15h forked at 2d" in render(figures)
    # The sweep figure: the same seeds at --jobs 1 and 2, 6 seeds in 12 s and in 6 s = 2.0x, met.
    assert [s[s.index("--seeds") + 1] for s in sweeps] == ["1:7", "1:7"] and [s[-1] for s in sweeps] == ["1", "2"]
    assert figures["sweep_throughput"]["ratio"] == 2.0
    assert ("sweep --jobs 2 >= 1.8x the throughput of --jobs 1", True) in verdicts(figures)
    assert "--jobs 2 6.00s (1.0 seeds/s) = 2.0x (budget >= 1.8x)" in render(figures)
    del figures["sweep_throughput"]
    # 3 sentinel-year runs and 3 fleet sizes, 3 times each, then ledger-storm at
    # 1 and 3 days, once each, with retention and without
    assert len(calls) == 22 and figures["runs_each"] == 3
    assert [c[:1] + c[c.index("--duration") + 1:][:1] for c in calls[18:]] == [("ledger-storm", "1d"),
                                                                                 ("ledger-storm", "3d")] * 2
    scaling = figures["scaling"]
    assert list(scaling["sentinels"]) == ["1", "10", "100"] and [tuple(c[c.index("--sentinels") + 1:][:1])
                                                                 for c in calls[9:18:3]] == [("1",), ("10",), ("100",)]
    # Medians: calls 10-12 (11 s) at 1 sentinel, calls 16-18 (17 s) at 100, each over 100 wakes, their audits
    # (1 s and 4 s) set apart: 130,000 vs 100,000 us a wake = 1.3x, missed.
    assert scaling["sentinels"]["1"]["cpu_us_per_wake"] == 100_000.0 and scaling["ratio"] == 1.3
    assert "the end-of-run audits, 1.00, 0.00, 4.00 s, set apart" in render(figures)
    assert ("per-wake CPU at 100 sentinels <= 1.2x at 1", False) in verdicts(figures)
    assert figures["scheduler"]["speedup_vs_trio"] == 20.0
    assert ("scheduler >= 20x faster than trio's MockClock per sleep", True) in verdicts(figures)
    # The harness figure: the month run (calls 7-9, median 8 s over 100 wakes) over the direct driver's.
    assert direct_calls == [("--seed", "1", "--duration", "3d")] * 3 + [("--seed", "1", "--duration", "3d",
                                                                         "--judged")] * 3
    over = figures["harness_overhead"]
    assert (over["harness_cpu_us_per_wake"], over["direct_cpu_us_per_wake"], over["ratio"]) == (80_000.0, 16_000.0, 5.0)
    assert ("harness <= 1.4x direct calls per wake (sentinel-year 3d)", False) in verdicts(figures)
    # The checked floor: the judged direct runs (2.4 s over 100 wakes), the reference's share, a year of them.
    floor = figures["checked_floor"]
    assert (floor["judged_cpu_us_per_wake"], floor["reference_cpu_us_per_wake"], floor["year_cpu_s"]) == (
        24_000.0, 8_000.0, 2522.9)
    assert "(the model 16000.0, its reference 8000.0), 2522.9s for a year's 105120 wakes" in render(figures)
    del figures["scaling"], figures["harness_overhead"], figures["checked_floor"]
    first = figures["runs"]["memory 30d"]
    assert first["cpu_s"] == 2.0 and first["cpu_s_range"] == [1.0, 3.0]
    assert first["work_per_wake"] == {"encodings": 15.0, "scalars": 25.0, "digests": 9.0, "decodes": 5.0, "hashed_kb": 9.0,
                                      "store_calls": 20.0}
    assert all(met for _, met in verdicts(figures)), verdicts(figures)
    assert "median of 3 runs" in render(figures)


def _direct(**overrides) -> dict:
    result = {"wakes": 864, "due": 864, "settled": {"completed": 860, "failed": 4}, "unsettled": 0, "pages": 20,
              "switches": 2_700, "cpu_s": 1.0}
    result.update(overrides)
    return result


def test_harness_overhead_is_cpu_per_wake_over_the_direct_drivers_with_its_verdict():
    from sim.face.bench import harness_overhead

    harnessed = {"cpu_s": 5.16, "wakes": 860}  # 6,000 us a wake
    over = harness_overhead(harnessed, [_direct(cpu_s=2.0), _direct(cpu_s=1.728), _direct(cpu_s=1.9)], "3d")
    assert over["direct_cpu_s"] == 1.9 and over["direct_cpu_s_range"] == [1.728, 2.0]  # the median
    assert over["ratio"] == round(6_000.0 / (1.9 / 864 * 1e6), 2) == 2.73 and over["budget_ratio"] == 1.4
    figures = {**_figures(encodings=18.0, cpu_s=50.0), "harness_overhead": over}
    assert ("harness <= 1.4x direct calls per wake (sentinel-year 3d)", False) in verdicts(figures)
    assert "MISSED harness <= 1.4x direct calls per wake" in render(figures)
    lean = harness_overhead({"cpu_s": 1.2, "wakes": 860}, [_direct(cpu_s=1.0)], "3d")
    assert lean["ratio"] == 1.21
    figures["harness_overhead"] = lean
    assert all(ok for _, ok in verdicts(figures)) and "MISSED" not in render(figures)


@pytest.mark.parametrize("short", [{"wakes": 800}, {"settled": {"completed": 860}}, {"unsettled": 3},
                                   {"wakes": 0, "due": 0, "settled": {}}])
def test_harness_overhead_refuses_a_direct_run_that_did_less_than_it_claims(short):
    from sim.face.bench import harness_overhead

    with pytest.raises(RuntimeError, match="did not run the wakes it claims"):
        harness_overhead({"cpu_s": 2.0, "wakes": 860}, [_direct(), _direct(**short)], "3d")


def _counted_stores(calls: dict):
    """``DirectStores`` whose calls are counted into ``calls`` by store name."""
    from scenarios.workloads.direct import DirectStores

    class Counting:
        def __init__(self, name, store):
            self._name, self._store = name, store

        def __getattr__(self, attr):
            value = getattr(self._store, attr)
            if not callable(value):
                return value

            def call(*args, **kwargs):
                calls[self._name] = calls.get(self._name, 0) + 1
                return value(*args, **kwargs)

            return call

    bare = DirectStores()
    return DirectStores(**{name: Counting(name, getattr(bare, name)) for name in attrs.fields_dict(DirectStores)})


def _judged(**overrides) -> dict:
    return _direct(**{"judged": True, "reference_checks": 19_000, "violations": [], "cpu_s": 1.7, **overrides})


def test_the_checked_floor_is_the_judged_direct_runs_cpu_per_wake_scaled_to_a_year():
    from sim.face.bench import checked_floor, harness_overhead, render

    over = harness_overhead({"cpu_s": 5.16, "wakes": 860}, [_direct(cpu_s=0.432)], "3d")  # 500 us a wake
    floor = checked_floor([_judged(cpu_s=0.9), _judged(cpu_s=0.864), _judged(cpu_s=1.2)], over)
    assert floor["judged_cpu_s"] == 0.9 and floor["judged_cpu_us_per_wake"] == round(0.9 / 864 * 1e6, 1) == 1041.7
    assert floor["reference_cpu_us_per_wake"] == 541.7 and floor["year_cpu_s"] == round(1041.7 * 105_120 / 1e6, 1)
    # A figure, not a budget: no verdict of its own.
    figures = {**_figures(encodings=18.0, cpu_s=50.0), "harness_overhead": over}
    assert verdicts({**figures, "checked_floor": floor}) == verdicts(figures)
    assert "a checked run's floor (not a budget; the memory year's budget is 60s)" in render(
        {**figures, "checked_floor": floor})


@pytest.mark.parametrize("short", [{"judged": False}, {"reference_checks": 100}, {"violations": ["x"]},
                                   {"wakes": 800, "due": 800}, {"unsettled": 1}])
def test_the_checked_floor_refuses_a_run_that_did_or_judged_less_than_it_claims(short):
    from sim.face.bench import checked_floor, harness_overhead

    over = harness_overhead({"cpu_s": 5.16, "wakes": 860}, [_direct()], "3d")
    with pytest.raises(RuntimeError, match="did not run and judge the wakes it claims"):
        checked_floor([_judged(), _judged(**short)], over)


def test_the_judged_direct_driver_shows_every_store_answer_to_the_reference_and_reports_a_wrong_one():
    """``scenarios.workloads.direct --judged``: the reference model judges each call
    the wakes make (a clean model: no violation); a store that answers
    wrongly (a durable-state load handing back another payload than the
    one stored, which the wake goes on with) is reported, naming the call."""
    from model.durable_state.memory_store import InMemoryDurableStateStore
    from model.durable_state.store import DurableStateRecord
    from scenarios.workloads.direct import DirectStores, run_direct

    calls = {}
    clean = run_direct(seed=2, duration_ms=parse_duration_ms("6h"), judged=True, stores=_counted_stores(calls))
    assert clean.judged and clean.wakes == clean.due == 72 and clean.violations == ()
    assert clean.reference_checks == sum(calls.values()) >= 15 * clean.wakes  # every call the wakes made, judged

    class Forgetful(InMemoryDurableStateStore):
        async def load(self, key):
            record = await super().load(key)
            if record is None or record.revision < 10:
                return record
            return DurableStateRecord(record.contract_version, record.revision, {**record.payload, "wakes": 0})

    wrong = run_direct(seed=2, duration_ms=parse_duration_ms("6h"), judged=True, stores=DirectStores(ds=Forgetful()))
    assert wrong.wakes == 72 and wrong.violations, wrong
    assert wrong.violations[0].startswith("reference-model at ") and "ds.load" in wrong.violations[0]
    plain = run_direct(seed=2, duration_ms=parse_duration_ms("6h"), stores=DirectStores(ds=Forgetful()))
    assert not plain.judged and plain.reference_checks == 0 and plain.violations == ()  # unjudged: unseen


def test_the_direct_driver_runs_the_wakes_it_claims_with_the_harnessed_runs_store_calls():
    """``scenarios.workloads.direct`` starts every due occurrence and settles every run
    it started, making about the store calls per wake a harnessed
    sentinel-year run makes (the harness's faults add recoveries and its
    chaos removes a few wakes, so not exactly): the floor the harness is
    held to does the same work, not less."""
    from scenarios.workloads.direct import run_direct

    calls = {}
    result = run_direct(seed=2, duration_ms=parse_duration_ms("6h"), stores=_counted_stores(calls))
    assert result.wakes == result.due == 72
    assert sum(result.settled.values()) == 72 and result.settled.get("completed", 0) >= 70 and result.unsettled == 0
    assert calls["ledger"] >= 6 * 72 and calls["log"] >= 5 * 72 and calls["ds"] >= 2 * 72  # admit..finalize, appends, load+save
    harnessed = _sentinels(2)
    direct_per_wake = sum(calls.values()) / result.wakes
    harness_per_wake = harnessed.stats["store_calls"] / harnessed.stats["wakes"]
    assert 0.85 * harness_per_wake <= direct_per_wake <= 1.15 * harness_per_wake, (direct_per_wake, harness_per_wake)


def test_the_direct_runtime_steps_the_earliest_task_fifo_at_an_instant():
    from scenarios.workloads.direct import DirectRuntime

    runtime, seen = DirectRuntime(), []

    async def task(name, sleeps):
        for sleep_ms in sleeps:
            await runtime.sleep_ms(sleep_ms)
            seen.append((runtime.now_ms(), name))

    runtime.spawn("a", task("a", [10, 0, 5]))
    runtime.spawn("b", task("b", [10, 3]))
    runtime.run(12)
    assert seen == [(10, "a"), (10, "b"), (10, "a")] and runtime.now_ms() == 12
    runtime.run(100)
    assert seen[3:] == [(13, "b"), (15, "a")] and not runtime._tasks


def _storm(short_mb: float, long_mb: float, *, quick: bool) -> dict:
    from sim.face import bench as bench_module

    peaks = iter([short_mb, long_mb, 70.0, 110.0])  # retention on (judged), then off (shown)
    return {"seed": 1, "quick": quick, "runs": {}, "scheduler": {"sleeps": 10, "floor_s": 1.0, "simruntime_s": 1.2, "ratio": 1.2,
                                      "budget_ratio": 1.5},
            "ledger_storm_memory": _measured(bench_module, peaks, quick)}


def _measured(bench_module, peaks, quick):
    import pytest

    calls = []

    def child(args):
        calls.append(args)
        return {"status": "pass", "peak_rss_mb": next(peaks), "stats": {"submitted": 4_000}}

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench_module, "_run_child", child)
        figure = bench_module.ledger_storm_memory(quick=quick, seed=1)
    # The judged runs pin retention on at its default TTL; the shown ones switch it off.
    assert [args[args.index("--duration") + 1:] for args in calls] == [
        [f"{d}d", *bench_module.LEDGER_STORM_RETENTION] for d in (
            bench_module.LEDGER_STORM_DAYS_QUICK if quick else bench_module.LEDGER_STORM_DAYS)] + [
        [f"{d}d", *bench_module.LEDGER_STORM_KEEP_ALL] for d in bench_module.LEDGER_STORM_KEEP_ALL_DAYS]
    return figure


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
    assert storm["without_retention"]["mb_per_day"] == 20.0
    assert "retention off (every record kept; not judged): peak RSS 1d: 70.0 MB (pass), 3d: 110.0 MB (pass), " \
           "+20.0 MB a simulated day" in render(flat)
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


def test_sweep_throughput_is_judged_and_refuses_a_sweep_that_skipped_seeds(monkeypatch):
    """--jobs 2 at 1.5x the throughput of --jobs 1 misses the 1.8x budget; a
    sweep that ran fewer seeds than asked is no figure at all."""
    import pytest

    from sim.face import bench as bench_module

    walls = iter([30.0, 20.0])
    monkeypatch.setattr(bench_module, "_run_sweep", lambda args: {"wall_s": next(walls), "seeds": 24, "passed": 24})
    figure = bench_module.sweep_throughput(quick=False, seed=3)
    assert (figure["jobs_1"]["seeds_per_s"], figure["jobs_2"]["seeds_per_s"], figure["ratio"]) == (0.8, 1.2, 1.5)
    figures = {"seed": 3, "quick": False, "runs": {}, "sweep_throughput": figure,
               "scheduler": {"sleeps": 10, "floor_s": 1.0, "simruntime_s": 1.2, "ratio": 1.2, "budget_ratio": 1.5}}
    assert ("sweep --jobs 2 >= 1.8x the throughput of --jobs 1", False) in verdicts(figures)
    monkeypatch.setattr(bench_module, "_run_sweep", lambda args: {"wall_s": 5.0, "seeds": 23, "passed": 23})
    with pytest.raises(RuntimeError, match="ran 23 of 24 seeds"):
        bench_module.sweep_throughput(quick=False, seed=3)


@pytest.mark.parametrize("argv", [["--duration", "nonsense"], ["--duration", "0d"], ["--seed", "x"],
                                  ["--sentinels", "0"], ["--seed", "²"], ["--bogus"]])
def test_the_direct_driver_refuses_bad_input_in_one_line(argv, capsys):
    from scenarios.workloads.direct import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("python -m scenarios.workloads.direct: error: ")
