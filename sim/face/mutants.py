"""``loomsim mutants``: sweep the mutant catalogue, detected or survived.

For each mutant (``faults.mutant_catalogue``, plus a user's ``--mutants
MODULE``), for each scenario it concerns, seeds run in child processes
(``python -m sim run SCENARIO --seed N --mutant NAME --json``, started as
a sweep's are: ``sim.face.children``) at the scenario's sweep duration, on the
adapter the mutant patches, until the first run (in seed, then scenario
order: seed A of every scenario, then seed A+1, as a sweep interleaves)
whose run fails an invariant: *detected*. A mutant no seed catches
*survived*. A child that errors (an exit other than 0/1, a ``MutantError``,
no JSON) is an *error*, never a detection: only an invariant of a scenario
run counts.

First the baseline: the same seeds of each (scenario, store) without any
mutant. A seed that fails clean (a bug of today's model, not the
mutant's) says nothing about a mutant, so no mutant is judged on it; the
table lists such seeds (``--no-baseline`` judges every seed).

Children run ``--jobs`` at a time, across mutants: a seed of a mutant that
has nothing in flight goes first, so one slow survivor does not hold the
others back. Once a seed detects a mutant, its later seeds are stopped (and
not started); earlier ones still in flight finish, so the detecting seed is
the first in order, whatever the timing.

"Seconds to detect" is the wall time the mutant's runs took up to and
including the detecting one, as each child measured it (this module reads
no clock: the face's children measure themselves).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Sequence

import attrs

from sim.clock import DurationError, format_duration_ms, parse_duration_ms
from reports.verdict import EXIT_ERROR
from sim.face.options import UsageError, check_repro_dir, parse_count, parse_seed_range, run_store
from sim.face.repro_file import scenarios_argv
from sim.face.children import (Job, check_interrupted, child_output, child_result, forwarding_signals, reap, spawning,
                               start_child)

# 0 every mutant detected, 1 one survived, 3 none survived but a child could
# not run (an infrastructure error; the CLI's usage error is 2).
EXIT_ALL_DETECTED, EXIT_SURVIVED = 0, 1
DETECTED, SURVIVED, ERROR, EQUIVALENT = "detected", "survived", "error", "equivalent"
# ``run --mutant``'s status when the run held every invariant but the
# mutant's patched code never executed: no test of the mutant (exit 1). In a
# sweep of the catalogue such a seed is one more that did not detect it.
MUTANT_UNEXECUTED = "mutant-unexecuted"
SEEDS_MAX = 10_000
JOBS_MAX = 64
WAIT_S = 0.05  # how long the loop waits on a child before looking at the others


def known_mutants(module: str | None) -> dict[str, Any]:
    """The catalogue, plus the user's mutants of ``module`` (a name may not
    be taken twice). Raises ``faults.mutants.MutantError``."""
    from faults.mutants import MutantError, catalogue, load_user_mutants

    known = catalogue()
    if module:
        from sim.face import discovery

        discovery.ensure_cwd_importable()
        for mutant in load_user_mutants(module):
            if mutant.name in known:
                raise MutantError(f"mutants module {module!r}: mutant {mutant.name!r} is already in the catalogue")
            known[mutant.name] = mutant
    return known


def apply_named(name: str, module: str | None, store: str) -> Any:
    """Apply the mutant ``name`` (catalogue or ``module``) to this process,
    for a run on ``store``; returns it. Raises ``faults.mutants.MutantError``
    (also for a store that never runs the patched code: refused before it
    is applied)."""
    from faults.mutants import MutantError, apply, store_problem

    known = known_mutants(module)
    mutant = known.get(name)
    if mutant is None:
        raise MutantError(f"unknown mutant {name!r} (see loomsim mutants --list)")
    problem = store_problem(mutant, store)
    if problem is not None:
        raise MutantError(problem)
    apply(mutant)
    return mutant


def apply_mutant(args: argparse.Namespace) -> Any:
    """``run --mutant NAME``: swap the planted bug in before anything runs
    (None without one). A mutant that cannot apply, or whose patched code
    the run's store never executes, is a usage error."""
    if args.mutant is None:
        if args.mutants:
            raise UsageError("--mutants MODULE names where mutants come from: give --mutant NAME too")
        return None
    from faults.mutants import MutantError

    try:
        return apply_named(args.mutant, args.mutants, run_store(args))
    except MutantError as error:
        raise UsageError(str(error)) from None


def unexecuted_note(mutant: Any, executions: int | None) -> str | None:
    """The line a passing run prints when ``mutant``'s patched code never
    executed (``executions`` 0); None when it did, or cannot be counted."""
    from faults.mutants import prepare

    if executions != 0:
        return None
    targets = ", ".join(prepare(mutant).targets)
    return (f"NOT A TEST: mutant {mutant.name}'s patched code ({targets}) never ran in this run, so the pass "
            f"above says nothing about it; the scenarios that run it: {', '.join(mutant.scenarios)}")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``loomsim mutants``'s arguments."""
    p = sub.add_parser("mutants", help="run the sweep against every planted bug of the mutant catalogue: "
                                       "detected or survived")
    p.add_argument("--only", default="", metavar="NAME[,NAME]", help="only these mutants (comma-separated)")
    p.add_argument("--seeds", type=parse_seed_range, default=range(0, 20), metavar="A:B",
                   help="seeds A (inclusive) to B (exclusive) per scenario (default 0:20)")
    p.add_argument("--jobs", type=parse_count, default=2, help="runs at once (default 2)")
    p.add_argument("--mutants", default=None, metavar="MODULE",
                   help="also the mutants of MODULE's MUTANTS list (a user's, beside the catalogue)")
    p.add_argument("--duration", action="append", default=[], metavar="[SCENARIO=]DURATION",
                   help="simulated duration of each run, for every scenario or one (repeatable; default: "
                        "each scenario's sweep duration, as loomsim sweep)")
    p.add_argument("--repro-dir", default=None, metavar="DIR",
                   help="keep the detecting runs' repro files in DIR/MUTANT/ (default: not kept)")
    p.add_argument("--no-baseline", action="store_true",
                   help="judge every seed (default: first run the seeds without a mutant and leave out "
                        "those that fail clean)")
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    p.add_argument("--json", action="store_true", help="print the table as one JSON object")
    return p


@attrs.define
class _Job:
    """The runs of one mutant (or of one clean baseline): its (seed,
    scenario index) keys in order, what is in flight, the results, and the
    first key that decided it (a baseline is never decided: it runs all)."""

    name: str
    mutant: Any  # None for a baseline
    scenarios: tuple[str, ...]
    store: str
    keys: list[tuple[int, int]]
    durations: dict[str, str]
    next_index: int = 0
    running: dict[tuple[int, int], subprocess.Popen] = attrs.field(factory=dict)
    results: dict[tuple[int, int], dict[str, Any]] = attrs.field(factory=dict)
    decided: tuple[int, int] | None = None
    repro_dir: str = ""
    reported: bool = False
    # Its beyond-the-contract seeds run as a sweep runs them (``--beyond-contract``):
    # a mutant whose ci run is one (``ci_beyond``), and the baseline it is judged against.
    beyond: bool = False

    def beyond_seed(self, seed: int) -> bool:
        return self.beyond and seed % BEYOND_EVERY == BEYOND_EVERY - 1

    def can_start(self) -> bool:
        return self.next_index < len(self.keys) and (self.decided is None or self.keys[self.next_index] < self.decided)

    def done(self) -> bool:
        return not self.running and not self.can_start()


# The sweep's beyond-the-contract seeds (``sim.face.sweep.BEYOND_EVERY_DEFAULT``).
BEYOND_EVERY = 8


def sweep_duration_ms(scenario: Any) -> int:
    """A scenario's sweep duration per seed (``Scenario.sweep_ms``), as
    ``loomsim sweep`` runs it; its default duration where it declares none."""
    return getattr(scenario, "sweep_ms", None) or scenario.default_duration_ms


def _durations(scenarios: Sequence[Any], specs: Sequence[str]) -> dict[str, str]:
    durations = {s.name: format_duration_ms(sweep_duration_ms(s)) for s in scenarios}
    for spec in specs:
        name, sep, text = spec.rpartition("=")
        try:
            ms = parse_duration_ms(text)
        except DurationError as error:
            raise UsageError(f"--duration {spec!r}: {error}") from None
        if sep and name not in durations:
            raise UsageError(f"--duration {spec!r}: no mutant concerns a scenario named {name!r}")
        for scenario in ([name] if sep else list(durations)):
            durations[scenario] = format_duration_ms(ms)
    return durations


def _select(known: dict[str, Any], only: str) -> list[Any]:
    if not only:
        return list(known.values())
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"--only: unknown mutant(s) {', '.join(unknown)} (see loomsim mutants --list)")
    return [known[n] for n in dict.fromkeys(names)]


def command(args: argparse.Namespace) -> int:
    """``loomsim mutants``: its children get the command's ``--scenarios``."""
    return mutants_command(args, scenarios_argv(args.scenarios))


def mutants_command(args: argparse.Namespace, global_args: Sequence[str]) -> int:
    """``loomsim mutants``: print the table; 0 when every mutant was detected."""
    from faults.mutants import MutantError
    from scenarios import registry

    if not 1 <= args.jobs <= JOBS_MAX:
        raise UsageError(f"--jobs must be between 1 and {JOBS_MAX}, got {args.jobs}")
    if len(args.seeds) > SEEDS_MAX:
        raise UsageError(f"--seeds: at most {SEEDS_MAX} seeds per scenario, got {len(args.seeds)}")
    try:
        known = known_mutants(args.mutants)
    except MutantError as error:
        raise UsageError(str(error)) from None
    selected = _select(known, args.only)
    if args.list:
        for mutant in selected:
            argued = f" (argued equivalent: {mutant.equivalent})" if mutant.equivalent else ""
            print(f"{mutant.name:<36} {','.join(mutant.scenarios)} [{mutant.store}]  {mutant.doc}{argued}")
        return EXIT_ALL_DETECTED
    scenarios = {}
    for mutant in selected:
        for name in mutant.scenarios:
            try:
                scenarios[name] = registry.get(name)
            except registry.UnknownScenario as error:
                raise UsageError(f"mutant {mutant.name!r}: {error}") from None
    durations = _durations(list(scenarios.values()), args.duration)
    if args.repro_dir is not None:  # found out now, not after the catalogue ran and its repro files were lost
        check_repro_dir(args.repro_dir)
    scratch = tempfile.mkdtemp(prefix="loomsim-mutants-")
    baselines: list[_Job] = []
    jobs: list[_Job] = []
    out = sys.stderr if args.json else sys.stdout
    failure: BaseException | None = None
    # SIGINT / SIGTERM: passed on to the children, reaped, ``Interrupted``.
    with forwarding_signals():
        try:
            _mutants_run(args, global_args, selected, durations, scratch, baselines, jobs, out)
        except BaseException as error:
            failure = error
            raise
        finally:
            # Interrupted: leave no child behind.
            reap([proc for job in (*baselines, *jobs) for proc in job.running.values()], failure)
            shutil.rmtree(scratch, ignore_errors=True)
    table = summarize([_row(job) for job in jobs], seeds=args.seeds, jobs=args.jobs,
                      baseline=[_baseline_row(job) for job in baselines])
    print(json.dumps(table, ensure_ascii=False) if args.json else render(table))
    if table["survived"]:
        return EXIT_SURVIVED
    return EXIT_ERROR if table["errors"] else EXIT_ALL_DETECTED


def _mutants_run(args: argparse.Namespace, global_args: Sequence[str], selected: list[Any],
                 durations: dict[str, str], scratch: str, baselines: list[_Job], jobs: list[_Job],
                 out: Any) -> None:
    """The baseline, then every selected mutant (``baselines`` and ``jobs``
    filled in as they start, for the caller to reap)."""
    if not args.no_baseline:
        # First the same seeds without any mutant: a seed that fails clean
        # says nothing about a mutant, so no mutant is judged on it. Beyond
        # the contract the clean run must end DETECTED (a beyond mutant's
        # own baseline, of its beyond seeds only).
        pairs = dict.fromkeys((name, m.store) for m in selected for name in m.scenarios)
        baselines.extend(_Job(f"baseline {name} ({store})", None, (name,), store,
                              [(seed, 0) for seed in args.seeds], durations, repro_dir=scratch)
                         for name, store in pairs)
        beyond_pairs = dict.fromkeys((name, m.store) for m in selected if m.ci_beyond for name in m.scenarios)
        baselines.extend(_Job(f"baseline {name} ({store}, beyond the contract)", None, (name,), store,
                              [(seed, 0) for seed in args.seeds if seed % BEYOND_EVERY == BEYOND_EVERY - 1],
                              durations, repro_dir=scratch, beyond=True)
                         for name, store in beyond_pairs)
        _drive(baselines, args, list(global_args), exhaustive=True, out=out)
    excluded = {(job.scenarios[0], job.store, job.beyond_seed(key[0]), key[0]): result for job in baselines
                for key, result in job.results.items()
                if result["status"] != ("detected" if job.beyond_seed(key[0]) else "pass")}
    for mutant in selected:
        directory = os.path.join(args.repro_dir or scratch, mutant.name)
        os.makedirs(directory, exist_ok=True)
        # Seed-major, as a sweep interleaves: seed A of every scenario the
        # mutant concerns, then seed A+1 of each (a port-level bug is met
        # by the port adversary at seed A, not after every sentinel seed).
        beyond = mutant.ci_beyond
        keys = [(seed, i) for seed in args.seeds for i, name in enumerate(mutant.scenarios)
                if (name, mutant.store, beyond and seed % BEYOND_EVERY == BEYOND_EVERY - 1, seed) not in excluded]
        jobs.append(_Job(mutant.name, mutant, mutant.scenarios, mutant.store, keys, durations,
                         repro_dir=directory, beyond=beyond))
    _drive(jobs, args, list(global_args), exhaustive=False, out=out)


def _child_job(job: _Job, key: tuple[int, int], module: str | None, global_args: Sequence[str]) -> Job:
    """The sweep's child for one (scenario, seed) of a job."""
    scenario = job.scenarios[key[1]]
    args = [scenario, "--seed", str(key[0]), "--duration", job.durations[scenario], "--store", job.store,
            "--repro-dir", job.repro_dir]
    if job.mutant is not None:
        args += ["--mutant", job.mutant.name] + (["--mutants", module] if module and _is_user(job.mutant) else [])
    beyond = job.beyond_seed(key[0])
    if beyond:
        args.append("--beyond-contract")
    return Job(scenario, key[0], beyond, (*global_args, "run", *args, "--json"))


def _is_user(mutant: Any) -> bool:
    from faults.mutants import catalogue

    return mutant.name not in catalogue()


def _drive(jobs: list[_Job], args: argparse.Namespace, global_args: list[str], *, exhaustive: bool,
           out: Any) -> None:
    """Run the jobs' seeds, ``args.jobs`` children at a time, until each is
    decided (``exhaustive``: until each ran every seed)."""
    # Bounded: every turn either starts a child, reaps one, or waits on one
    # that is running; each job has finitely many keys.
    while True:
        check_interrupted()
        running = sum(len(job.running) for job in jobs)
        while running < args.jobs:
            # A job with nothing in flight first: a seed of another mutant
            # is likelier to end a job than a second seed of the same one.
            job = next((j for j in jobs if j.can_start() and not j.running), None) or next(
                (j for j in jobs if j.can_start()), None)
            if job is None:
                break
            key = job.keys[job.next_index]
            job.next_index += 1
            with spawning():
                job.running[key] = start_child(_child_job(job, key, args.mutants, global_args), None)
            running += 1
        if running == 0:
            return
        oldest = next(proc for job in jobs for proc in job.running.values())
        try:
            oldest.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            pass
        for job in jobs:
            for key, proc in sorted(job.running.items()):
                # A decided job stops its later children (``_stop_later``)
                # while this loop walks its snapshot: those are gone.
                if key not in job.running or proc.poll() is None:
                    continue
                del job.running[key]
                result = job.results[key] = child_result(_child_job(job, key, args.mutants, global_args), proc)
                if not exhaustive and _detects(result) and (job.decided is None or key < job.decided):
                    job.decided = key
                    _stop_later(job)
            if job.done() and not job.reported:
                job.reported = True
                _progress(job, sum(1 for j in jobs if j.reported), len(jobs), out)


def _detects(result: dict[str, Any]) -> bool:
    """Whether a child's result decides its mutant (detected, or an error):
    a pass, or a pass whose mutant never ran, does not; beyond the contract
    neither does DETECTED (what the clean run ends in: the broken promise
    noticed as designed)."""
    undecided = ("pass", "detected", MUTANT_UNEXECUTED) if result.get("beyond") else ("pass", MUTANT_UNEXECUTED)
    return result["status"] not in undecided


def _stop_later(job: _Job) -> None:
    """A seed decided the job: children of later keys are stopped, unreported."""
    for key in sorted(job.running):
        if key > job.decided:  # type: ignore[operator]
            proc = job.running.pop(key)
            proc.kill()
            child_output(proc)


def _progress(job: _Job, done: int, total: int, out: Any) -> None:
    """One line per finished job (on stderr under --json: stdout is the table)."""
    head = f"[{done}/{total}] {job.name}:"
    if job.mutant is None:
        failing = [f"{k[0]} ({_verdict(r)})" for k, r in sorted(job.results.items()) if not _clean(job, k, r)]
        held = "end DETECTED" if job.beyond else "pass"
        print(f"{head} {len(job.results) - len(failing)} of {len(job.results)} seeds {held} without a mutant"
              + (f"; excluded: seed {', '.join(failing)}" if failing else ""), file=out, flush=True)
        return
    key = job.decided
    if key is None:
        runs = len(job.results)
        unexecuted = " (its patched code never ran in any)" if _never_executed(job) else ""
        print(f"{head} survived {runs} run{'' if runs == 1 else 's'}{unexecuted}", file=out, flush=True)
        return
    result = job.results[key]
    status = ERROR if result["status"] == "error" else DETECTED
    print(f"{head} {status} by {job.scenarios[key[1]]} seed {key[0]}: {_verdict(result)}", file=out, flush=True)


def _never_executed(job: _Job) -> bool:
    """Every run of the mutant held, and none executed its patched code."""
    return bool(job.results) and all(r["status"] == MUTANT_UNEXECUTED for r in job.results.values())


def _verdict(result: dict[str, Any]) -> str:
    if result["status"] == "error":
        return result["error"]
    return result["violations"][0]["name"] if result.get("violations") else result["status"]


def _baseline_row(job: _Job) -> dict[str, Any]:
    return {"scenario": job.scenarios[0], "store": job.store, "seeds": len(job.results),
            "failing": [{"seed": key[0], "verdict": _verdict(r)} for key, r in sorted(job.results.items())
                        if not _clean(job, key, r)]}


def _clean(job: _Job, key: tuple[int, int], result: dict[str, Any]) -> bool:
    """A baseline seed that ended as a clean run should: a pass, or beyond the contract DETECTED."""
    return result["status"] == ("detected" if job.beyond_seed(key[0]) else "pass")


def _row(job: _Job) -> dict[str, Any]:
    mutant = job.mutant
    key = job.decided
    upto = [r for k, r in sorted(job.results.items()) if key is None or k <= key]
    seconds = round(sum(r.get("wall_s") or 0.0 for r in upto), 1)
    row: dict[str, Any] = {"mutant": mutant.name, "doc": mutant.doc, "module": mutant.module,
                           "store": mutant.store, "scenarios": list(mutant.scenarios), "seconds": seconds,
                           "runs": len(upto)}
    if not job.keys:  # nothing to judge it on: not a survivor
        return {**row, "status": ERROR, "invariant": None, "scenario": None, "seed": None,
                "error": "every seed fails without a mutant (see the baseline)"}
    if key is None:
        # An argued-equivalent mutant that survived is told apart from the
        # survivors (the gaps); one a seed detected refutes its argument.
        status = EQUIVALENT if getattr(mutant, "equivalent", None) else SURVIVED
        return {**row, "status": status, "invariant": None, "scenario": None, "seed": None,
                "never_executed": _never_executed(job),
                **({"equivalent": mutant.equivalent} if status == EQUIVALENT else {})}
    if getattr(mutant, "equivalent", None):
        row["refutes_equivalence"] = True
    result = job.results[key]
    # Seeds to detect: the detecting key's place among the keys this mutant
    # was judged on (baseline-failing seeds left out).
    row.update(scenario=mutant.scenarios[key[1]], seed=key[0], seeds_to_detect=job.keys.index(key) + 1)
    if result["status"] == "error":
        return {**row, "status": ERROR, "invariant": None, "error": result["error"]}
    first = result["violations"][0]
    return {**row, "status": DETECTED, "invariant": first["name"], "message": first["message"],
            "simulated_time": first["simulated_time"], "repro_command": result.get("repro_command")}


def summarize(rows: list[dict[str, Any]], *, seeds: range, jobs: int,
              baseline: list[dict[str, Any]] = ()) -> dict[str, Any]:
    detected = [r for r in rows if r["status"] == DETECTED]
    slowest = max(detected, key=lambda r: (r["seconds"], r["mutant"]), default=None)
    equivalent = sum(1 for r in rows if r["status"] == EQUIVALENT)
    judged = len(rows) - equivalent  # the share leaves the argued-equivalent survivors out
    return {
        "mutants": len(rows),
        "detected": len(detected),
        "survived": sum(1 for r in rows if r["status"] == SURVIVED),
        "equivalent": equivalent,
        "errors": sum(1 for r in rows if r["status"] == ERROR),
        "detected_pct": round(100.0 * len(detected) / judged, 1) if judged else 0.0,
        "detected_pct_of_all": round(100.0 * len(detected) / len(rows), 1) if rows else 0.0,
        "refuted_equivalence": [r["mutant"] for r in rows if r.get("refutes_equivalence")],
        "median_seeds_to_detect": statistics.median(r["seeds_to_detect"] for r in detected) if detected else None,
        "slowest": None if slowest is None else {"mutant": slowest["mutant"], "seconds": slowest["seconds"]},
        "seeds": f"{seeds.start}:{seeds.stop}",
        "jobs": jobs,
        "baseline": list(baseline),
        "rows": rows,
    }


def render(table: dict[str, Any]) -> str:
    width = max([len("mutant"), *(len(r["mutant"]) for r in table["rows"])])
    lines = [f"{'mutant':<{width}}  {'status':<8}  {'invariant':<26}  {'scenario':<14}  {'seed':>5}  {'seconds':>8}"]
    for r in table["rows"]:
        invariant = r["invariant"] or ("-" if r["status"] != ERROR else r["error"][:60])
        seed = "-" if r["seed"] is None else str(r["seed"])
        lines.append(f"{r['mutant']:<{width}}  {r['status']:<8}  {invariant:<26}  {r['scenario'] or '-':<14}  "
                     f"{seed:>5}  {r['seconds']:>8.1f}")
    for base in table["baseline"]:
        if base["failing"]:
            shown = ", ".join(f"{f['seed']} ({f['verdict'][:60]})" for f in base["failing"])
            lines.append(f"baseline: {base['scenario']} ({base['store']}) fails without a mutant at seed {shown}: "
                         "no mutant is judged on it")
    slowest = table["slowest"]
    median = table["median_seeds_to_detect"]
    for r in table["rows"]:
        if r["status"] == EQUIVALENT:
            lines.append(f"equivalent: {r['mutant']}: {r['equivalent']}")
        if r.get("never_executed"):
            lines.append(f"unexecuted: {r['mutant']}: its patched code never ran in any of its {r['runs']} runs "
                         "(a workload gap, not a judgment of the oracles)")
    for name in table["refuted_equivalence"]:
        lines.append(f"refuted: {name} is marked equivalent in its catalogue entry, but a seed detected it")
    judged = table["mutants"] - table["equivalent"]
    lines.append(f"{table['detected']}/{judged} detected ({table['detected_pct']:.1f}%), "
                 f"{table['survived']} survived, {table['equivalent']} equivalent survivors left out "
                 f"({table['detected']}/{table['mutants']} = {table['detected_pct_of_all']:.1f}% of all), "
                 f"{table['errors']} errors; seeds {table['seeds']}, "
                 f"{table['jobs']} jobs; median seeds to detect: {'-' if median is None else median}; slowest: "
                 + ("-" if slowest is None else f"{slowest['mutant']} ({slowest['seconds']:.1f}s)"))
    return "\n".join(lines)
