"""``loomsim sweep``: many seeds of one scenario, or of every one, both cores, one summary.

Each seed runs in its own process (``python -m sim [--scenarios MODULE ...]
run SCENARIO --seed N ... --json``: the sweep's scenario modules passed on,
the entry points loaded by the child itself), at most ``jobs`` at a time,
each for its scenario's sweep duration (``Scenario.sweep_ms``, passed as
``--duration`` by the CLI) unless ``--duration`` says otherwise; a line per
finished seed shows progress. Sweeping every scenario interleaves them
(seed A of each, then seed A+1 of each, ...), so a time budget that stops
the sweep early still leaves every scenario swept.

Without ``--store``, every ``sqlite_every``-th seed (``seed % sqlite_every
== 1``: seeds 1, 5, 9, ... by default) runs on SQLite and the others in
memory: the adapters a user deploys are swept too, at a share of the cost
(a SQLite seed costs about three memory ones). Every second seed beyond the
contract runs on SQLite too (``seed % (2 * beyond_every) == 2 *
beyond_every - 1``: 15, 31, 47, ...), so the disk faults on the real file
are swept; the other beyond seeds (7, 23, ...) stay in memory.

A share of the seeds (every ``beyond_every``-th: seeds with ``seed %
beyond_every == beyond_every - 1``) runs beyond the contract
(``--beyond-contract``): the stores break their promises and the only good
outcome is a loud, typed detection (DETECTED); one in which a promise broke
and nothing noticed is a failure (``run`` reports it as
``beyond-contract-undetected`` itself). One in which no promise broke before
its end (a short ``--duration``) tested nothing: it is ``not-exercised``,
counted apart and a coverage gap (failing the sweep only with
``require_coverage``), neither a failure nor a pass.

SIGINT or SIGTERM stops the running children (they clean up: a SQLite
seed's temporary database goes), then the sweep prints the summary, and
writes the report, of the seeds that finished, marked ``interrupted``, and
exits 128 + the signal. It writes no shard file (a merge then names the
shard missing, rather than passing on the seeds it did not run).

The summary lists failing seeds with the command that reproduces each (and
the repro file each wrote), then coverage per scenario. Coverage gaps are
told apart by what each seed's swarm enabled (the run's ``config.swarm``):
a fault kind or failpoint enabled in some seed and fired in none is a gap
in the faults or the workload (it is armed and nothing reaches it); one
enabled in no seed is a gap of the sweep (the swarm starved it: the
covering design of ``faults.swarm`` rules that out for fault kinds over 8
consecutive seeds). A ``sometimes`` property no seed reached, and an
invariant that checked nothing in any seed, are gaps too. Gaps are printed
as ``COVERAGE GAP``; ``require_coverage`` makes them fail the sweep.

``model_coverage``: every child runs under ``sim.face.coverage_child``,
which records the ``model/`` lines it executed; the summary adds what share
of ``model/`` the sweep executed and what it never reached.

Part of the face (like ``bench``): it reads the wall clock to report times
and to keep a time budget, and starts processes; nothing simulated runs here.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Collection, Iterable, Iterator, Mapping, Sequence

import attrs

from reports.verdict import EXIT_ERROR, NOT_EXERCISED, decide_sweep, not_exercised_why, verdict
from sim.clock import format_duration_ms
from sim.face import corpus_replay, failures, model_coverage
from sim.face.children import (POLL_S, Interrupted, Job, check_interrupted, child_result, forwarding_signals, reap,
                               spawning, start_child)
from sim.face.options import (NAMED_STORES, UsageError, add_run_options, check_new_file, check_report_option,
                              check_repro_dir, check_schedule, parse_count, parse_duration, parse_names,
                              parse_seed_range,
                              parse_time_budget, scenario_params, selected_scenarios, write_report_or_warn)
from sim.face.repro_file import param_flag, scenarios_argv
from sim.face.run import enabled_in, format_wall_s
from sim.face.shards import plan_shard

# The exit codes (``reports.verdict.decide``, the one decision of a sweep's
# verdict): 0 every seed passed, 1 a seed or a saved failure failed (or,
# with ``require_coverage``, a coverage gap), 3 a child could not run (an
# infrastructure error: it crashed, printed no result); 2 is the CLI's usage
# error. A failure outranks an error. (``EXIT_ERROR`` is imported for the
# face modules that read a sweep's codes from here: shards, the tests.)
# The ``format`` of the sweep's --json object (a run's is ``loomsim-result/1``).
SWEEP_FORMAT = "loomsim-sweep/1"
# Every 8th seed runs beyond the contract (seeds 7, 15, 23, ...).
BEYOND_EVERY_DEFAULT = 8
# Every 4th seed runs on SQLite when the sweep is not told a store (1, 5, 9, ...).
SQLITE_EVERY_DEFAULT = 4
# A seed beyond the contract that passed green with a broken promise (the
# runner never ends one so: it is DETECTED or FAIL): a failure of the sweep.
# One in which no promise broke is ``NOT_EXERCISED``: it tested nothing.
BEYOND_PASSED = "beyond-contract-passed"


@attrs.frozen
class SweepOptions:
    """What the sweep itself decides (the run flags go to every child as given)."""

    # A range, or a shard's seeds of one (``sim.face.shards.shard_seeds``): lazy either way, never a
    # list of every seed (a time-budgeted sweep over 0:10000000000 starts its first seed at once).
    seeds: Collection[int]
    jobs: int = 2
    json: bool = False
    time_budget_s: float | None = None       # wall clock: no new seed starts after it
    beyond_every: int = BEYOND_EVERY_DEFAULT  # 0: no seed beyond the contract
    all_beyond: bool = False                  # --beyond-contract: every seed
    sqlite_every: int = 0                     # 0: every seed on the child args' store
    model_coverage: bool = False
    model_coverage_out: str | None = None
    require_coverage: bool = False
    # The failure database's directory (``sim.face.failures``; None: off): its
    # failures of the swept scenarios (``all_saved``: every one) replay first.
    failure_db: str | None = None
    all_saved: bool = False
    saved_stores: tuple[str, ...] | None = None  # the stores whose saved failures replay (None: any)
    report_dir: str | None = None             # --report DIR: ``reports.write_report`` of the summary
    corpus: Any = None  # --corpus DIR: its entries replay first (``sim.face.corpus_replay.CorpusPlan``)

    def __attrs_post_init__(self) -> None:
        assert self.jobs >= 1, self.jobs
        assert self.time_budget_s is None or self.time_budget_s > 0, self.time_budget_s
        assert self.beyond_every >= 0, self.beyond_every
        assert self.sqlite_every >= 0, self.sqlite_every

    def beyond(self, seed: int) -> bool:
        """Whether ``seed`` runs beyond the contract."""
        every = self.beyond_every
        return self.all_beyond or (every > 0 and seed % every == every - 1)

    def store(self, seed: int) -> str | None:
        """The store ``seed`` runs on when the sweep picks it (None: the
        child args say): every ``sqlite_every``-th seed, and every second
        seed beyond the contract (``beyond_on_sqlite``)."""
        every = self.sqlite_every
        if every == 0:
            return None
        if self.beyond_on_sqlite(seed):
            return "sqlite"
        return "sqlite" if seed % every == 1 % every else "memory"

    def beyond_on_sqlite(self, seed: int) -> bool:
        """Whether ``seed`` is one of the beyond-the-contract seeds the sweep
        runs on SQLite (when it picks the store): every second one (``seed
        % (2 * beyond_every) == 2 * beyond_every - 1``: 15, 31, 47, ... by
        default), where the disk faults on the real file (``faults.disk``)
        are drawn. The SQLite share (``seed % sqlite_every == 1``) never
        meets a beyond seed, and the other beyond seeds stay in memory."""
        every = self.beyond_every
        return not self.all_beyond and every > 0 and seed % (2 * every) == 2 * every - 1


def plan_jobs(scenarios: Sequence[str], child_args: Mapping[str, Sequence[str]], opts: SweepOptions,
              global_args: Sequence[str] = ()) -> Iterator[Job]:
    """Every (seed, scenario) of the sweep, seed-major: seed A of every
    scenario first, so the first ``len(scenarios)`` jobs cover them all.
    Lazy: each job is made when the sweep is ready to start it."""
    for seed in opts.seeds:
        for name in scenarios:
            args = list(child_args[name])
            beyond = opts.beyond(seed)
            if beyond and "--beyond-contract" not in args:
                args.append("--beyond-contract")
            store = opts.store(seed)
            if store is not None and "--store" not in args:
                args += ["--store", store]
            yield Job(name, seed, beyond, (*global_args, "run", name, "--seed", str(seed), *args, "--json"))


def sweep(scenarios: Sequence[Any], opts: SweepOptions, child_args: Mapping[str, Sequence[str]],
          global_args: Sequence[str] = (), shard_writer: Any = None) -> int:
    """Run ``opts.seeds`` of each of ``scenarios`` (``child_args[name]``: the
    ``run`` flags of its seeds, all but ``--seed``); print the summary.
    Exit 1 if a seed or a saved failure failed (or, with
    ``require_coverage``, on a coverage gap), else 3 if a seed could not
    run, else 0 (``seal``). SIGINT or SIGTERM stops the children; what
    finished is summarized (and reported) all the same, and the exit code is
    128 + the signal. ``shard_writer``
    (``sim.face.shards.ShardWriter``, ``--out``): given the summary and the
    seeds' results, writes the shard file before the summary is printed."""
    names = [s.name for s in scenarios]
    pending = plan_jobs(names, child_args, opts, global_args)
    planned = len(opts.seeds) * len(names)  # jobs the sweep would start without a time budget
    lines_dir = tempfile.mkdtemp(prefix="loomsim-model-lines-") if opts.model_coverage else None
    executed: dict[str, set[int]] = {}
    lost_seeds = 0  # children whose tracer was switched off before the end
    started_s = time.perf_counter()
    db = None if opts.failure_db is None else failures.FailureDb(opts.failure_db)
    replays = failures.replay_saved(db, None if opts.all_saved else names, stores=opts.saved_stores, on_replay=None if opts.json else (
        lambda r: print(failures.progress_line(r), flush=True)))
    corpus_replays = corpus_replay.replay_corpus(opts.corpus, {s.name: s for s in scenarios}, on_replay=None if opts.json
                                                 else lambda r: print(corpus_replay.progress_line(r), flush=True))
    upcoming = next(pending, None)  # the next job to start (None: none left)
    begun: list[Job] = []  # the jobs started, in order (seed-major)
    running: list[tuple[Job, subprocess.Popen, str | None]] = []
    results: dict[tuple[str, int], dict[str, Any]] = {}
    started: set[str] = set()  # scenarios with a seed started (membership only, never iterated)
    budget_stopped_s = None
    failure: BaseException | None = None
    interrupted: Interrupted | None = None
    try:
        with forwarding_signals():
            try:
                while upcoming is not None or running:
                    check_interrupted()
                    if (opts.time_budget_s is not None and budget_stopped_s is None
                            and time.perf_counter() - started_s >= opts.time_budget_s):
                        # The budget is spent: start no more seeds, except the first
                        # of a scenario not started yet (every scenario gets one).
                        budget_stopped_s = time.perf_counter() - started_s
                        firsts = _first_seeds(upcoming, pending, started, len(names))
                        planned = len(begun) + len(firsts)
                        pending = iter(firsts)
                        upcoming = next(pending, None)
                    while upcoming is not None and len(running) < opts.jobs:
                        job, upcoming = upcoming, next(pending, None)
                        begun.append(job)
                        started.add(job.scenario)
                        lines_file = (None if lines_dir is None
                                      else os.path.join(lines_dir, f"{len(begun)}.json"))  # a stack file's name has slashes
                        with spawning():
                            running.append((job, start_child(job, lines_file), lines_file))
                    for entry in list(running):
                        job, proc, lines_file = entry
                        if proc.poll() is None:
                            continue
                        running.remove(entry)
                        result = results[(job.scenario, job.seed)] = child_result(job, proc)
                        if lines_file is not None:
                            model_coverage.merge(executed, model_coverage.read_lines(lines_file))
                            lost_seeds += model_coverage.tracing_lost(lines_file)
                            if os.path.exists(lines_file):
                                os.remove(lines_file)
                        if not opts.json:
                            _progress(len(results), planned, result, len(names) > 1,
                                      eta_s=_eta_s(time.perf_counter() - started_s, len(results), planned))
                    if running:
                        time.sleep(POLL_S)
            except BaseException as error:
                failure = error
                raise
            finally:
                # Interrupted (a signal, or anything else): leave no child behind.
                reap([proc for _, proc, _ in running], failure)
                if lines_dir is not None:
                    shutil.rmtree(lines_dir, ignore_errors=True)
    except Interrupted as error:  # the seeds that finished are summarized all the same
        interrupted = error
    finished = [results[(job.scenario, job.seed)] for job in begun if (job.scenario, job.seed) in results]
    per_scenario = [summarize_scenario(scenario, [r for r in finished if r["scenario"] == scenario.name],
                                       planned=len(opts.seeds)) for scenario in scenarios]
    summary = summarize_sweep(per_scenario, wall_s=time.perf_counter() - started_s, jobs=opts.jobs,
                              time_budget_s=opts.time_budget_s, budget_stopped_s=budget_stopped_s)
    failures.save_sweep_failures(db, [r for r in results.values() if outcome(r) == "fail"])
    summary["saved_failures"] = [r.to_json() for r in replays]
    if opts.corpus is not None:
        summary["corpus_replays"] = [r.to_json() for r in corpus_replays]
    summary["runs"] = [seed_record(result) for result in finished]
    if opts.model_coverage:
        summary["model_coverage"] = {**model_coverage.report(executed), "tracing_lost_seeds": lost_seeds}
        if opts.model_coverage_out:
            summary["model_coverage_file"] = _write_model_coverage(opts.model_coverage_out, summary["model_coverage"],
                                                                   executed)
    code = seal(summary, require_coverage=opts.require_coverage,
                interrupted=None if interrupted is None else signal.Signals(interrupted.signum).name)
    if shard_writer is not None and interrupted is None:  # an interrupted shard is a missing one
        shard_writer(summary, finished, executed if opts.model_coverage else None)
    if opts.json:
        print(json.dumps(summary, ensure_ascii=False), flush=True)
    else:
        print(render(summary), flush=True)
        if summary.get("model_coverage_file"):
            print(f"model coverage file: {summary['model_coverage_file']}")
    if opts.report_dir is not None:
        write_report_or_warn(opts.report_dir, summary, to_stderr=opts.json)
    if interrupted is not None:
        stopped = f"; stopped {interrupted.stopped} running child run(s)" if interrupted.stopped else ""
        unwritten = "; no shard file written" if shard_writer is not None else ""
        print(f"loomsim: interrupted by {summary['interrupted']}{stopped}; the summary is of the {summary['ran']} "
              f"seed run(s) that finished{unwritten}", file=sys.stderr, flush=True)
    return code


def sweep_forked(scenarios: Sequence[Any], opts: SweepOptions, child_args: Mapping[str, Sequence[str]],
                 global_args: Sequence[str], fork_at_ms: int, branches: int) -> int:
    """``sweep --fork-at T --branches K`` (``sim.face.branches.run_branches``):
    each branch a result of its own (``seed S branch k``), summed up,
    saved and judged as a sweep's seeds are."""
    from sim.face.branches import run_branches

    names = [s.name for s in scenarios]
    started_s = time.perf_counter()
    db = None if opts.failure_db is None else failures.FailureDb(opts.failure_db)
    replays = failures.replay_saved(db, None if opts.all_saved else names, stores=opts.saved_stores, on_replay=None if opts.json else (
        lambda r: print(failures.progress_line(r), flush=True)))
    planned = len(opts.seeds) * len(names) * branches
    done = [0]

    def progress(result: Mapping[str, Any]) -> None:
        done[0] += 1
        if not opts.json:
            _progress(done[0], planned, result, len(names) > 1)

    results, interrupted = run_branches(names, opts, child_args, global_args, fork_at_ms, branches, progress)
    per_scenario = [summarize_scenario(s, [r for r in results if r["scenario"] == s.name],
                                       planned=len(opts.seeds) * branches) for s in scenarios]
    summary = summarize_sweep(per_scenario, wall_s=time.perf_counter() - started_s, jobs=opts.jobs)
    summary["branches"] = {"fork_at": format_duration_ms(fork_at_ms), "fork_at_ms": fork_at_ms, "per_seed": branches}
    failures.save_sweep_failures(db, [r for r in results if outcome(r) == "fail"])
    summary["saved_failures"] = [r.to_json() for r in replays]
    summary["runs"] = [seed_record(result) for result in results]
    code = seal(summary, require_coverage=opts.require_coverage,
                interrupted=None if interrupted is None else signal.Signals(interrupted.signum).name)
    print(json.dumps(summary, ensure_ascii=False) if opts.json else render(summary), flush=True)
    if opts.report_dir is not None:
        write_report_or_warn(opts.report_dir, summary, to_stderr=opts.json)
    if interrupted is not None:
        print(f"loomsim: interrupted by {summary['interrupted']}; the summary is of the {len(results)} branch "
              "run(s) that finished", file=sys.stderr, flush=True)
    return code


def seal(summary: dict[str, Any], *, require_coverage: bool, interrupted: str | None = None) -> int:
    """Record in ``summary`` what its verdict depends on beyond its seeds
    (``require_coverage``; ``interrupted``: the name of the signal that
    stopped the sweep, or None), then the verdict itself (``status``,
    ``exit_code``: ``reports.verdict.decide``, which every report reads
    too); return the exit code."""
    summary["require_coverage"] = require_coverage
    summary["interrupted"] = interrupted
    summary["status"], summary["exit_code"] = decide_sweep(summary)
    return summary["exit_code"]


def _first_seeds(upcoming: Job | None, pending: Iterator[Job], started: set[str], scenarios: int) -> list[Job]:
    """Of ``upcoming`` and then ``pending``, the first job of each scenario
    none of whose seeds has started: what a spent time budget still runs.
    The jobs are seed-major, so those are among the next ``scenarios``
    jobs: no more are read (the rest may be billions of seeds)."""
    seen = set(started)
    kept = []
    ahead = [] if upcoming is None else [upcoming]
    for job in itertools.chain(ahead, itertools.islice(pending, max(0, scenarios - len(ahead)))):
        if job.scenario not in seen:
            seen.add(job.scenario)
            kept.append(job)
    return kept


def exit_code(summary: Mapping[str, Any], *, require_coverage: bool) -> int:
    """The exit code of ``summary`` (``reports.verdict.decide``): 1 on a
    failing seed or saved failure (or a required coverage gap), else 3 on a
    seed that could not run, else 0."""
    return decide_sweep({**summary, "require_coverage": require_coverage}).exit_code


def _eta_s(elapsed_s: float, done: int, total: int) -> float | None:
    """The wall seconds left, at the pace so far (None before the first seed)."""
    if done == 0:
        return None
    return elapsed_s / done * (total - done)


def seed_record(result: Mapping[str, Any]) -> dict[str, Any]:
    """One seed in the sweep's --json ``runs``: what it was, how it ended
    (``status``: the sweep's outcome, ``run_status``: the run's own), its
    trace digest, its first violation and its repro file."""
    status = outcome(result)
    first = _first_failure(result) if status in ("fail", "detected") else None
    return {
        "scenario": result["scenario"],
        "seed": result["seed"],
        "store": result.get("store"),
        "beyond": bool(result.get("beyond")),
        "status": status,
        "run_status": result["status"],
        "trace_digest": result.get("trace_digest"),
        "wall_s": result.get("wall_s"),
        "first_violation": first,
        "repro_command": result.get("repro_command"),
        "repro_file": result.get("repro_file"),
        "error": result.get("error"),
        **({"branch": result["branch"]} if "branch" in result else {}),
        # What a report draws of a failing seed (its timeline, the related
        # events); only for failures, to keep the sweep's JSON small.
        **({key: result[key] for key in ("timeline", "excerpt") if key in result} if status == "fail" else {}),
    }


def _write_model_coverage(path: str, cov: Mapping[str, Any], executed: Mapping[str, set[int]]) -> str | None:
    """Write ``--model-coverage-out`` as a new file (a taken name gets -2,
    ...); return the name written (None, with a warning, if it could not)."""
    from sim.artifacts import write_new

    body = {"format": "loomsim-model-coverage/1", **cov,
            "executed_lines": {name: sorted(lines) for name, lines in sorted(executed.items())}}
    try:
        return write_new(path, lambda _name: json.dumps(body, indent=1))
    except OSError as error:
        print(f"loomsim: warning: could not write --model-coverage-out {path!r}: {error.strerror or error}",
              file=sys.stderr)
        return None


def outcome(result: Mapping[str, Any]) -> str:
    """A seed's outcome in the sweep: ``pass``, ``detected`` (beyond the
    contract, caught: good), ``not-exercised`` (beyond the contract, no
    promise broke: nothing tested), ``fail`` or ``error``."""
    status = result["status"]
    if status == "pass" and result.get("beyond"):
        return "fail" if result.get("beyond_contract") else NOT_EXERCISED
    if status in ("pass", "detected", "error"):
        return status
    return "fail"


def _first_failure(result: Mapping[str, Any]) -> dict[str, Any]:
    if result["status"] == "pass":  # beyond the contract, passed green with a broken promise
        broken = len(result.get("beyond_contract") or ())
        message = f"passed green beyond the contract: {broken} broken promise(s), no detection"
        return {"invariant": BEYOND_PASSED, "message": message, "simulated_time": "the end"}
    first = result["violations"][0]
    return {"invariant": first["name"], "message": first["message"], "simulated_time": first["simulated_time"]}


def _progress(done: int, total: int, result: Mapping[str, Any], named: bool, eta_s: float | None = None) -> None:
    status = outcome(result)
    if status == "pass":
        detail = f"{result['wall_s']:.1f}s"
    elif status in ("fail", "detected"):
        first = _first_failure(result)
        detail = f"{first['invariant']} at {first['simulated_time']}"
    elif status == NOT_EXERCISED:
        detail = not_exercised_why(result)
    else:
        detail = result["error"]
    who = f"{result['scenario']} seed {result['seed']}" if named else f"seed {result['seed']}"
    who += f" branch {result['branch']}" if "branch" in result else ""  # a forked future (sim.face.branches)
    beyond = " (beyond the contract)" if result.get("beyond") else ""
    store = f" [{result['store']}]" if result.get("store") not in (None, "memory") else ""
    eta = "" if eta_s is None or done == total else f"  (ETA {format_wall_s(eta_s)})"
    word = status.upper() if status != NOT_EXERCISED else "NOT EXERCISED:"
    print(f"[{done}/{total}] {who}{store}{beyond}: {word} {detail}{eta}", flush=True)


# -- coverage: what each seed enabled, what fired ----------------------------------------


def summarize_scenario(scenario: Any, results: Sequence[Mapping[str, Any]], planned: int | None = None) -> dict[str, Any]:
    """One scenario's part of the summary from its seeds' results (the
    child JSON objects, each with ``beyond``); ``planned``: its seeds in the
    sweep (default: as many as ran). ``scenario`` needs ``name`` and
    ``sometimes``."""
    kinds: dict[str, int] = {}            # fired, summed over seeds
    beyond_kinds: dict[str, int] = {}     # beyond the contract: fired, summed over the seeds that armed each
    kinds_on: dict[str, int] = {}         # seeds that enabled it
    ports: dict[str, dict[str, int]] = {}
    failpoints: dict[str, int] = {}       # fired
    failpoints_on: dict[str, int] = {}    # seeds that enabled it
    failpoint_hits_on: dict[str, int] = {}  # hits in the seeds that enabled it
    checks: dict[str, int] = {}
    decisions: dict[str, int] = {}  # recovery decisions, summed over seeds
    dispositions: dict[str, int] = {}
    sometimes: dict[str, int] = {name: 0 for name in scenario.sometimes}
    failing, errors = [], []
    counts = {"pass": 0, "detected": 0, NOT_EXERCISED: 0, "fail": 0, "error": 0}
    beyond_seeds = 0
    for result in results:
        status = outcome(result)
        counts[status] += 1
        if status == "error":
            errors.append({"scenario": scenario.name, "seed": result["seed"], "error": result["error"]})
            continue
        beyond_seeds += 1 if result.get("beyond") else 0
        cov = result.get("coverage") or {}
        kinds_enabled, failpoints_enabled = enabled_in(result)
        for kind, count in cov.get("fault_kinds", {}).items():
            kinds[kind] = kinds.get(kind, 0) + count
            kinds_on[kind] = kinds_on.get(kind, 0) + (kind in kinds_enabled)
        for kind, count in cov.get("beyond_contract", {}).items():
            beyond_kinds[kind] = beyond_kinds.get(kind, 0) + count
        for port, port_counts in cov.get("ports", {}).items():
            total = ports.setdefault(port, {})
            for kind, count in port_counts.items():
                total[kind] = total.get(kind, 0) + count
        for name, fp in cov.get("failpoints", {}).items():
            failpoints[name] = failpoints.get(name, 0) + fp["fired"]
            on = name in failpoints_enabled
            failpoints_on[name] = failpoints_on.get(name, 0) + on
            failpoint_hits_on[name] = failpoint_hits_on.get(name, 0) + (fp["hits"] if on else 0)
        for name, held in cov.get("sometimes", {}).items():
            sometimes[name] = sometimes.get(name, 0) + (1 if held else 0)
        for name, count in (result.get("invariants") or {}).items():
            checks[name] = checks.get(name, 0) + count
        stats = result.get("stats") or {}
        for total, key in ((decisions, "recovery_decisions"), (dispositions, "recovery_dispositions")):
            for name, count in (stats.get(key) or {}).items():
                total[name] = total.get(name, 0) + count
        if status == "fail":
            failing.append({"scenario": scenario.name, "seed": result["seed"], "beyond": bool(result.get("beyond")),
                            **({"branch": result["branch"]} if "branch" in result else {}),
                            **_first_failure(result), "repro_command": result["repro_command"],
                            "repro_file": result.get("repro_file")})
    ran = len(results) - counts["error"]
    gaps = _gaps(scenario.name, ran, kinds, kinds_on, failpoints, failpoints_on, failpoint_hits_on, sometimes,
                 checks, audited=counts["pass"] + counts[NOT_EXERCISED])
    if counts[NOT_EXERCISED]:
        gaps.append({"scenario": scenario.name, "what": "beyond the contract", "name": "broken promises",
                     "reason": NOT_EXERCISED,
                     "detail": f"{counts[NOT_EXERCISED]} of {beyond_seeds} seeds beyond the contract not exercised: "
                               "no broken promise fired within the duration (lengthen --duration)"})
    return {
        "scenario": scenario.name,
        "seeds": len(results) if planned is None else planned,
        "ran": len(results),
        "passed": counts["pass"],
        # Beyond the contract: seeds whose broken promises were caught, and
        # seeds in which no promise broke (they tested nothing: a gap).
        "detected": counts["detected"],
        "not_exercised": counts[NOT_EXERCISED],
        "beyond_seeds": beyond_seeds,
        "failed": counts["fail"],
        "errors": counts["error"],
        "failing": failing,
        "error_runs": errors,
        "fault_kinds_fired": kinds,
        "fault_kinds_enabled": kinds_on,
        "beyond_kinds_fired": beyond_kinds,
        "faults_by_port": {port: dict(sorted(c.items())) for port, c in sorted(ports.items())},
        "failpoints_fired": failpoints,
        "failpoints_enabled": failpoints_on,
        "never_fired": [k for k, n in kinds.items() if n == 0] + [f for f, n in failpoints.items() if n == 0],
        # The same, told apart: enabled in some seed and never fired there,
        # or switched off by the swarm in every seed.
        "never_fired_enabled": [k for k, n in kinds.items() if n == 0 and kinds_on.get(k)]
                               + [f for f, n in failpoints.items() if n == 0 and failpoints_on.get(f)],
        "switched_off": [k for k, n in kinds.items() if n == 0 and not kinds_on.get(k)]
                        + [f for f, n in failpoints.items() if n == 0 and not failpoints_on.get(f)],
        "sometimes_reached": sometimes,
        "sometimes_never": [name for name, n in sometimes.items() if n == 0],
        "invariant_checks": checks,
        # The recovery passes' decisions over its seeds (``model.recovery_decisions``): by name, by disposition.
        "recovery_decisions": dict(sorted(decisions.items())),
        "recovery_dispositions": dict(sorted(dispositions.items())),
        "coverage_gaps": gaps,
    }


def _gaps(scenario: str, ran: int, kinds: Mapping[str, int], kinds_on: Mapping[str, int],
          failpoints: Mapping[str, int], failpoints_on: Mapping[str, int], hits_on: Mapping[str, int],
          sometimes: Mapping[str, int], checks: Mapping[str, int], *, audited: int | None = None) -> list[dict[str, Any]]:
    """Every coverage gap of a scenario's seeds, each with why (``reason``).
    ``audited``: the seeds that ran to their audit (passed; None: all that
    ran). A failing seed stops at its violation, before the checks an audit
    makes: with none audited, an invariant's 0 checks says nothing."""
    if ran == 0:
        return []
    gaps = []

    def gap(what: str, name: str, reason: str, detail: str) -> None:
        gaps.append({"scenario": scenario, "what": what, "name": name, "reason": reason, "detail": detail})

    for what, fired, enabled in (("fault kind", kinds, kinds_on), ("failpoint", failpoints, failpoints_on)):
        for name, count in fired.items():
            if count:
                continue
            seeds_on = enabled.get(name, 0)
            if seeds_on == 0:
                gap(what, name, "never-enabled", f"the swarm turned it off in all {ran} seeds")
            elif what == "failpoint" and hits_on.get(name, 0) == 0:
                gap(what, name, "enabled-never-reached",
                    f"enabled in {seeds_on} of {ran} seeds, never reached in them")
            elif what == "failpoint":
                gap(what, name, "enabled-never-fired",
                    f"enabled in {seeds_on} of {ran} seeds, reached {hits_on[name]} times there, never fired")
            else:
                gap(what, name, "enabled-never-fired", f"enabled in {seeds_on} of {ran} seeds, never fired")
    for name, count in sometimes.items():
        if count == 0:
            gap("sometimes", name, "never-reached", f"no seed of {ran} reached it")
    audited = ran if audited is None else audited
    for name, count in checks.items():
        if count == 0 and audited > 0:
            more = "" if audited == ran else f" ({audited} ran to their audit)"
            gap("invariant", name, "no-checks", f"0 checks in all {ran} seeds{more}")
    return gaps


TOTALS = ("seeds", "ran", "passed", "detected", "not_exercised", "beyond_seeds", "failed", "errors")
# With one scenario, its coverage is the sweep's, at the top of the JSON too.
SCENARIO_KEYS = ("scenario", "fault_kinds_fired", "fault_kinds_enabled", "faults_by_port", "failpoints_fired",
                 "failpoints_enabled", "never_fired", "never_fired_enabled", "switched_off", "sometimes_reached", "sometimes_never", "invariant_checks")


def summarize_sweep(per_scenario: Sequence[Mapping[str, Any]], *, wall_s: float, jobs: int,
                    time_budget_s: float | None = None, budget_stopped_s: float | None = None) -> dict[str, Any]:
    """The whole sweep: totals over its scenarios, their failures and gaps,
    the budget, and each scenario's own summary (``scenarios``)."""
    summary: dict[str, Any] = {"format": SWEEP_FORMAT}
    summary.update({key: sum(s[key] for s in per_scenario) for key in TOTALS})
    summary.update({
        "wall_s": round(wall_s, 2),
        "jobs": jobs,
        "time_budget_s": time_budget_s,
        # Whether the budget left seeds unstarted, and when it stopped starting them.
        "budget_stopped": summary["ran"] < summary["seeds"] and budget_stopped_s is not None,
        "budget_stopped_at_s": None if budget_stopped_s is None else round(budget_stopped_s, 2),
        "failing": [f for s in per_scenario for f in s["failing"]],
        "error_runs": [e for s in per_scenario for e in s["error_runs"]],
        "coverage_gaps": [g for s in per_scenario for g in s["coverage_gaps"]],
        "scenarios": {s["scenario"]: dict(s) for s in per_scenario},
        "recovery_decisions": _sum_counts(s.get("recovery_decisions") for s in per_scenario),
        "recovery_dispositions": _sum_counts(s.get("recovery_dispositions") for s in per_scenario),
    })
    if len(per_scenario) == 1:
        summary.update({key: per_scenario[0][key] for key in SCENARIO_KEYS})
    return summary


def _sum_counts(parts: Any) -> dict[str, int]:
    total: dict[str, int] = {}
    for part in parts:
        for name, count in (part or {}).items():
            total[name] = total.get(name, 0) + count
    return dict(sorted(total.items()))


def render_decisions(counts: Mapping[str, Any]) -> str | None:
    """``recovery decisions: A=n, ... (repaired=n, ...)``, or None without any."""
    decisions = counts.get("recovery_decisions")
    if not decisions:
        return None
    by_disposition = ", ".join(f"{k}={v}" for k, v in (counts.get("recovery_dispositions") or {}).items())
    return f"recovery decisions: {', '.join(f'{k}={v}' for k, v in decisions.items())} ({by_disposition})"


# -- the human summary -------------------------------------------------------------------


def _counts(s: Mapping[str, Any]) -> str:
    seeds = f"{s['ran']} of {s['seeds']} seeds" if s["ran"] != s["seeds"] else f"{s['seeds']} seeds"
    unexercised = f" ({s['not_exercised']} not exercised)" if s.get("not_exercised") else ""
    detected = (f"{s['detected']} detected of {s['beyond_seeds']} beyond the contract{unexercised}, "
                if s["beyond_seeds"] else "")
    return f"{seeds}, {s['passed']} passed, {detected}{s['failed']} failed, {s['errors']} errors"


def render_scenario(s: Mapping[str, Any]) -> list[str]:
    lines = [f"{s['scenario']}: {_counts(s)}"]
    for fail in s["failing"]:
        beyond = " (beyond the contract)" if fail["beyond"] else ""
        branch = f" branch {fail['branch']}" if "branch" in fail else ""  # a forked future (sim.face.branches)
        lines.append(f"  FAIL seed {fail['seed']}{branch}{beyond}: {fail['invariant']} at {fail['simulated_time']}: "
                     f"{fail['message'][:120]}")
        lines.append(f"    reproduce: {fail['repro_command']}"
                     + (f"  (repro file {fail['repro_file']})" if fail["repro_file"] else ""))
    for error in s["error_runs"]:
        lines.append(f"  ERROR seed {error['seed']}: {error['error']}")
    ran = s["ran"] - s["errors"]
    kinds = ", ".join(f"{k}={n} (on in {s['fault_kinds_enabled'].get(k, 0)}/{ran})"
                      for k, n in s["fault_kinds_fired"].items())
    fps = ", ".join(f"{k}={n} (on in {s['failpoints_enabled'].get(k, 0)}/{ran})"
                    for k, n in s["failpoints_fired"].items())
    lines.append(f"  faults fired: {kinds or 'none'}")
    for port, counts in s["faults_by_port"].items():
        lines.append(f"    at {port}: " + ", ".join(f"{k}={n}" for k, n in counts.items()))
    if s.get("beyond_kinds_fired"):
        lines.append("  beyond the contract fired: " + ", ".join(f"{k}={n}" for k, n in s["beyond_kinds_fired"].items()))
    lines.append(f"  failpoints fired: {fps or 'none'}")
    lines.append(f"  never fired (enabled in some seed): {', '.join(s['never_fired_enabled']) or 'none'}; "
                 f"switched off by the swarm in every seed: {', '.join(s['switched_off']) or 'none'}")
    reached = ", ".join(f"{k} in {n}" for k, n in s["sometimes_reached"].items())
    lines.append(f"  sometimes (seeds reaching each): {reached or 'none declared'}")
    decided = render_decisions(s)
    if decided:
        lines.append(f"  {decided} over its seeds")
    return lines


def render(summary: Mapping[str, Any]) -> str:
    """Per scenario: its counts, failures and coverage; then the sweep: the
    totals, the budget, every coverage gap, the model coverage, and last
    the verdict (``reports.verdict.verdict``)."""
    lines = failures.render(summary.get("saved_failures") or [])  # replayed first: listed first
    lines += corpus_replay.render(summary.get("corpus_replays"))  # then the corpus, replayed next
    for s in summary["scenarios"].values():
        lines.extend(render_scenario(s))
    many = len(summary["scenarios"]) > 1
    what = f"sweep of {len(summary['scenarios'])} scenarios" if many else "sweep"
    lines.append(f"{what}: {_counts(summary)} in {summary['wall_s']:.1f}s ({summary['jobs']} jobs)")
    decided = render_decisions(summary)
    if decided and many:
        lines.append(f"{decided} over every seed")
    if summary["budget_stopped"]:
        lines.append(f"time budget {summary['time_budget_s']:g}s spent (at {summary['budget_stopped_at_s']:.1f}s): "
                     f"stopped starting seeds; ran {summary['ran']} of {summary['seeds']} seeds")
    for g in summary["coverage_gaps"]:
        lines.append(f"COVERAGE GAP {g['scenario']}: {g['what']} {g['name']}: {g['detail']}")
    if not summary["ran"] or summary["ran"] <= summary.get("errors", 0):
        lines.append("coverage: not judged (no seed ran to a result)")
    elif not summary["coverage_gaps"]:
        lines.append("coverage: no gaps (every enabled fault kind and failpoint fired, every sometimes-property "
                     "was reached, every invariant checked)")
    if "model_coverage" in summary:
        lines.append(model_coverage.render(summary["model_coverage"]))
    lines.append(verdict(summary))  # the first line of every report, the exit code the process returns
    return "\n".join(lines)


def gap_names(gaps: Iterable[Mapping[str, Any]], reason: str) -> list[str]:
    """The names of the gaps with ``reason`` (for tests and reports)."""
    return [g["name"] for g in gaps if g["reason"] == reason]


# -- the command: ``loomsim sweep [SCENARIO] --seeds A:B`` -----------------------------


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``loomsim sweep``'s arguments (its runs' flags: ``options.add_run_options``)."""
    sweep_p = sub.add_parser("sweep", help="run many seeds (both cores), summarize, list failures and coverage")
    sweep_p.add_argument("scenario", nargs="?", default=None,
                         help="scenario name (see `loomsim list`; default: every scenario, seeds interleaved)")
    sweep_p.add_argument("--seeds", type=parse_seed_range, required=True, metavar="A:B",
                         help="seeds A (inclusive) to B (exclusive) of each scenario, e.g. 0:100")
    sweep_p.add_argument("--jobs", type=parse_count, default=2, help="runs at once (default 2)")
    sweep_p.add_argument("--time-budget", type=parse_time_budget, default=None, metavar="S",
                         help="wall-clock seconds: start no seed after S (the running ones finish; every "
                              "scenario still runs its first seed)")
    sweep_p.add_argument("--beyond-every", type=parse_count, default=8, metavar="N",
                         help="every N-th seed (N-1, 2N-1, ...) runs beyond the contract and must end DETECTED "
                              "(default 8; 0: none)")
    sweep_p.add_argument("--require-coverage", action="store_true",
                         help="exit 1 on a coverage gap (default: print it, exit 0)")
    sweep_p.add_argument("--model-coverage", action="store_true",
                         help="trace every seed and report which lines of model/ the sweep executed")
    sweep_p.add_argument("--model-coverage-out", default=None, metavar="FILE",
                         help="write the model coverage, executed lines and all, as JSON (implies --model-coverage); "
                              "a new file only (taken: -2, -3, ...)")
    sweep_p.add_argument("--sqlite-every", type=parse_count, default=4, metavar="N",
                         help="without --store: every Nth seed runs on SQLite, the others in memory "
                              "(default 4: seeds 1, 5, 9, ...; 0 for none)")
    sweep_p.add_argument("--failure-db", default=None, metavar="DIR",
                         help="the failure database (sim.face.failures): its saved failures replay first, new "
                              "ones are saved (default $LOOMSIM_FAILURE_DB or .loomsim; none: off)")
    sweep_p.add_argument("--shard", default=None, metavar="I/N",
                         help="run only shard I of N of the seeds (each shard a fair share of stores and "
                              "beyond-the-contract seeds); combine the shards with loomsim merge")
    sweep_p.add_argument("--out", default=None, metavar="FILE",
                         help="write the shard file (loomsim-shard/1) loomsim merge reads; a new file only")
    sweep_p.add_argument("--corpus", default=None, metavar="DIR",
                         help="an explore corpus (explore --corpus DIR): its entries of the swept scenario(s) "
                              "replay first; a failing one fails the sweep")
    sweep_p.add_argument("--fork-at", type=parse_duration, default=None, metavar="T",
                         help="run each seed once to simulated time T, then fork it into --branches futures "
                              "(sim.face.branches; in-memory store only)")
    sweep_p.add_argument("--branches", type=parse_count, default=None, metavar="K",
                         help="with --fork-at: K branches per seed, --jobs at a time, each a result of its own")
    add_run_options(sweep_p)
    # A sweep without --store mixes the stores (--sqlite-every); one with it runs that store only.
    sweep_p.set_defaults(store=None)
    return sweep_p


def command(args: argparse.Namespace) -> int:
    """``loomsim sweep [SCENARIO]``: refuse here, once, whatever every child
    would refuse (a wrong flag, parameter or pin), then sweep
    (``sweep``). Without SCENARIO: every registered scenario; a
    scenario parameter then goes to the scenarios that have it."""
    from faults.swarm import SwarmError, check_pins
    from scenarios import registry

    scenarios = selected_scenarios(args.scenario)
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    if args.beyond_every < 0:
        raise UsageError(f"--beyond-every must be 0 (none) or more, got {args.beyond_every}")
    if args.sqlite_every < 0:
        raise UsageError(f"--sqlite-every must be 0 (none) or more, got {args.sqlite_every}")
    check_repro_dir(args.repro_dir)
    check_report_option(args.report)
    if args.model_coverage_out:
        check_new_file("--model-coverage-out", args.model_coverage_out)
    every_param = {p.name for other in registry.all_scenarios() for p in other.params}
    for scenario in scenarios:
        own = {p.name for p in scenario.params}
        # Sweeping them all: each scenario is judged on its own parameters.
        mine = args if len(scenarios) == 1 else argparse.Namespace(
            **{k: (None if k in every_param and k not in own else v) for k, v in vars(args).items()})
        scenario_params(scenario, mine)
        if scenario.swarm_space is not None:
            try:
                check_pins(scenario.swarm_space, enable=parse_names(args.faults_enable),
                           disable=parse_names(args.faults_disable), knobs=dict(args.knob))
            except SwarmError as error:
                raise UsageError(str(error) if len(scenarios) == 1 else f"{scenario.name}: {error}") from None
        _check_builds(scenario, len(scenarios) > 1)
    opts = SweepOptions(seeds=args.seeds, jobs=args.jobs, json=args.json, time_budget_s=args.time_budget,
                        beyond_every=args.beyond_every, all_beyond=args.beyond_contract,
                        sqlite_every=0 if args.store is not None else args.sqlite_every,
                        model_coverage=args.model_coverage or bool(args.model_coverage_out),
                        model_coverage_out=args.model_coverage_out, require_coverage=args.require_coverage,
                        failure_db=failures.db_root(args.failure_db), all_saved=args.scenario is None,
                        saved_stores=NAMED_STORES if args.store is None else (args.store,),
                        report_dir=args.report,
                        corpus=corpus_replay.plan(args.corpus, None if args.scenario is None else [s.name for s in scenarios],
                                                  store=args.store, repro_dir=args.repro_dir,
                                                  scenario_modules=args.scenarios or ()))
    child_args = {s.name: _child_args(s, args) for s in scenarios}
    if args.fork_at is not None or args.branches is not None:  # one prefix per seed, forked (sim.face.branches)
        from sim.face.branches import check_branch_options

        for scenario in scenarios:
            check_branch_options(args, args.duration or scenario.sweep_ms)
        return sweep_forked(scenarios, opts, child_args, scenarios_argv(args.scenarios), args.fork_at, args.branches)
    # --shard I/N, --out FILE: the shard's seeds and its file
    opts, writer = plan_shard(args.shard, args.out, scenarios, opts, child_args, scenarios_argv(args.scenarios))
    return sweep(scenarios, opts, child_args, scenarios_argv(args.scenarios), shard_writer=writer)


def _check_builds(scenario: Any, named: bool) -> None:
    """Build the scenario's stack once, for seed 0, before any child runs:
    a stack that cannot be built (two workloads under one name, two claiming
    one schedule: a ``SetupError``) is one usage error here, not a child's
    error per seed."""
    from faults.swarm import choose
    from sim.rng import Streams
    from sim.scenario import Run, ScenarioOptions, SetupError

    opts = ScenarioOptions(seed=0, duration_ms=scenario.sweep_ms, swarm=True)
    space = scenario.swarm_space
    choices = choose(space, Streams(0)["swarm"], swarm=True, seed=0) if space is not None else None
    try:
        scenario.build(Run(opts, choices, scenario))
    except SetupError as error:
        raise UsageError(f"{scenario.name}: {error}" if named else str(error)) from None


def _child_args(scenario: Any, args: argparse.Namespace) -> list[str]:
    """The ``run`` flags every seed of a sweep gets (all but ``--seed``): at
    ``--duration``, or else the scenario's own sweep duration (``sweep_ms``:
    many short histories, not its one long default run)."""
    child = ["--repro-dir", args.repro_dir]
    if args.store is not None:  # else the sweep picks each seed's store (--sqlite-every)
        child = ["--store", args.store, *child]
    duration_ms = args.duration or getattr(scenario, "sweep_ms", None)
    if duration_ms:
        child += ["--duration", format_duration_ms(duration_ms)]
    if args.no_swarm:
        child.append("--no-swarm")
    if args.beyond_contract:
        child.append("--beyond-contract")
    if args.schedule != "fifo":
        child += ["--schedule", check_schedule(args.schedule)]
    if args.faults_enable:
        child += ["--faults-enable", args.faults_enable]
    if args.faults_disable:
        child += ["--faults-disable", args.faults_disable]
    for name, value in args.knob:
        child += ["--knob", f"{name}={value}"]
    for kind, rate in args.rate:
        child += ["--rate", f"{kind}={rate!r}"]
    for spec in scenario.params:
        value = getattr(args, spec.name, None)
        if value is not None:
            child += [param_flag(spec.name), str(value)]
    return child
