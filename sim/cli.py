"""The face: ``loomsim`` (also ``python -m sim``).

Exit codes: 0 every invariant held, 1 an invariant was violated, 2 usage
error (unknown scenario, malformed seed/duration/flag, unusable database or
trace path). Usage errors are one line on stderr, never a traceback.

This module and ``sim/bench.py`` are the only places in ``sim/`` that read
the wall clock, and only to report how long a run took.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sqlite3
import sys
import time
from typing import Any, NoReturn, Sequence

from sim.clock import DurationError, format_calendar, format_duration_ms, format_span_ms, parse_duration_ms
from sim.interleave import Deviation
from sim.runner import DETECTED, PASS, RunResult, run
from faults.script import ScriptError, load_script, script_to_json
from sim.scenario import STORES, ScenarioOptions, SetupError
from sim.trace import event_json

EXIT_PASS = 0
DEVIATIONS_SHOWN = 3  # scheduling deviations a failure report lists
EXIT_VIOLATION = 1
EXIT_USAGE = 2
SEED_MAX = 2**63 - 1
EXCERPT_LINES = 14  # the full excerpt is in the repro file


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _seed(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: expected a whole number, e.g. --seed 1") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: must be between 0 and 2**63-1")
    return value


def _duration(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except DurationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _count(text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: expected a whole number") from None


def _knob(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"invalid knob {text!r}: expected NAME=VALUE")
    try:
        return name, int(value, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid knob {text!r}: the value must be a whole number") from None


def _schedule(spec: str) -> str:
    from sim.interleave import parse_schedule

    try:
        parse_schedule(spec)
    except ValueError as error:
        raise UsageError(f"--schedule: {error}") from None
    return spec


def _names(text: str) -> tuple[str, ...]:
    return tuple(sorted({name.strip() for name in text.split(",") if name.strip()}))


def build_parser() -> _Parser:
    parser = _Parser(prog="loomsim", description="Deterministic simulation testing for durable agent runtimes.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.add_parser("list", help="list the scenarios")
    repro_p = sub.add_parser("repro", help="replay a repro file: its configuration and its fault script")
    repro_p.add_argument("file", help="a loomsim-repro-*.json file written by a failing run")
    repro_p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    shrink_p = sub.add_parser("shrink", help="reduce a repro file's fault script and duration to a minimum "
                                             "that still fails the same way")
    shrink_p.add_argument("file", help="a loomsim-repro-*.json file written by a failing run")
    shrink_p.add_argument("--out", default=None, metavar="FILE",
                          help="where to write the shrunk repro file (default: loomsim-shrunk-SCENARIO-SEED.json "
                               "next to the input)")
    shrink_p.add_argument("--max-runs", type=_count, default=300, metavar="N",
                          help="give up shrinking after N runs and keep the best so far (default 300)")
    bench_p = sub.add_parser("bench", help="measure the performance budgets (DESIGN §8) in one run")
    bench_p.add_argument("--quick", action="store_true", help="short runs (30d/3d) for a smoke check")
    bench_p.add_argument("--seed", type=_seed, default=1)
    bench_p.add_argument("--json", action="store_true", help="print the figures as JSON")
    run_p = sub.add_parser("run", help="run one scenario with one seed")
    run_p.add_argument("scenario", help="scenario name (see `loomsim list`)")
    run_p.add_argument("--seed", type=_seed, required=True, help="the seed: the handle to the whole run")
    run_p.add_argument("--db", default=None, metavar="PATH", help="SQLite file to use (implies --store sqlite)")
    run_p.add_argument("--trace", default=None, metavar="FILE", help="stream every trace event as JSON lines")
    run_p.add_argument("--faults", default=None, metavar="FILE",
                       help="run the faults of this script alone (a repro file, or a JSON list of faults); "
                            "probabilistic faults off")
    sweep_p = sub.add_parser("sweep", help="run many seeds (both cores), summarize, list failures and coverage")
    sweep_p.add_argument("scenario", help="scenario name (see `loomsim list`)")
    sweep_p.add_argument("--seeds", type=_seed_range, required=True, metavar="A:B",
                         help="seeds A (inclusive) to B (exclusive), e.g. 0:100")
    sweep_p.add_argument("--jobs", type=_count, default=2, help="runs at once (default 2)")
    for p in (run_p, sweep_p):
        _add_run_options(p)
    return parser


def _seed_range(text: str) -> range:
    first, sep, last = text.partition(":")
    try:
        seeds = range(int(first, 10), int(last, 10)) if sep else range(int(first, 10), int(first, 10) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seeds {text!r}: expected A:B (e.g. 0:100)") from None
    if not seeds or seeds.start < 0:
        raise argparse.ArgumentTypeError(f"invalid seeds {text!r}: expected 0 <= A < B")
    return seeds


def _add_run_options(run_p: argparse.ArgumentParser) -> None:
    """The options ``run`` and ``sweep`` share (a sweep passes them on to each run)."""
    run_p.add_argument("--duration", type=_duration, default=None,
                       help="simulated duration: 90s, 5m, 36h, 30d, 12mo (default: the scenario's)")
    run_p.add_argument("--store", choices=STORES, default="memory", help="store backend (default: memory)")
    run_p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    run_p.add_argument("--schedule", default="fifo", metavar="POLICY",
                       help="which ready task runs next: fifo (default), random, pct:D or pct:D:K "
                            "(probabilistic concurrency testing with D priority-change points)")
    run_p.add_argument("--no-swarm", action="store_true",
                       help="run the scenario's full fault mix with default knobs (default: the seed chooses "
                            "a subset of fault kinds, failpoints, workload switches and knob values)")
    run_p.add_argument("--beyond-contract", action="store_true",
                       help="let the stores break their promises (lose acknowledged writes, tear batches): "
                            "the run passes only if the system detects it, loudly (DETECTED)")
    run_p.add_argument("--faults-enable", default="", metavar="KINDS",
                       help="comma-separated fault kinds / workload switches to force on")
    run_p.add_argument("--faults-disable", default="", metavar="KINDS",
                       help="comma-separated fault kinds / workload switches to force off")
    run_p.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE", type=_knob,
                       help="pin a knob (repeatable), e.g. --knob lease_ms=15000")
    run_p.add_argument("--repro-dir", default=".", metavar="DIR",
                       help="where a failing run writes its repro file (default: current directory)")
    from scenarios import registry

    params: dict[str, list[str]] = {}
    helps: dict[str, str] = {}
    for scenario in registry.all_scenarios():
        for spec in scenario.params:
            params.setdefault(spec.name, []).append(scenario.name)
            helps.setdefault(spec.name, spec.help)
    for name in sorted(params):
        run_p.add_argument(param_flag(name), dest=name, type=_count, default=None,
                           help=f"{', '.join(params[name])}: {helps[name]}")


def param_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except UsageError as error:
        print(f"loomsim: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("loomsim: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str]) -> int:
    from scenarios import registry

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if args.command == "bench":
        from sim.bench import bench, render

        figures = bench(quick=args.quick, seed=args.seed)
        print(json.dumps(figures) if args.json else render(figures))
        return EXIT_PASS
    if args.command == "repro":
        return _main(repro_argv(args.file, json_output=args.json))
    if args.command == "shrink":
        return _shrink(parser, args)
    if args.command == "list":
        for scenario in registry.all_scenarios():
            print(f"{scenario.name:<16} {scenario.description} (default {format_duration_ms(scenario.default_duration_ms)})")
        return EXIT_PASS
    try:
        scenario = registry.get(args.scenario)
    except registry.UnknownScenario as error:
        raise UsageError(str(error)) from None
    if args.command == "sweep":
        from sim.sweep import sweep

        _scenario_params(scenario, args)  # refuse a wrong flag before starting anything
        if not os.path.isdir(args.repro_dir):
            raise UsageError(f"--repro-dir {args.repro_dir!r} is not a directory")
        return sweep(scenario, args, _sweep_child_args(scenario, args))
    return _run(scenario, args, argv)


def _sweep_child_args(scenario: Any, args: argparse.Namespace) -> list[str]:
    """The ``run`` flags every seed of a sweep gets (all but ``--seed``)."""
    child = ["--store", args.store, "--repro-dir", args.repro_dir]
    if args.duration:
        child += ["--duration", format_duration_ms(args.duration)]
    if args.no_swarm:
        child.append("--no-swarm")
    if args.beyond_contract:
        child.append("--beyond-contract")
    if args.schedule != "fifo":
        child += ["--schedule", _schedule(args.schedule)]
    if args.faults_enable:
        child += ["--faults-enable", args.faults_enable]
    if args.faults_disable:
        child += ["--faults-disable", args.faults_disable]
    for name, value in args.knob:
        child += ["--knob", f"{name}={value}"]
    for spec in scenario.params:
        value = getattr(args, spec.name, None)
        if value is not None:
            child += [param_flag(spec.name), str(value)]
    return child


def repro_argv(path: str, *, json_output: bool) -> list[str]:
    """The ``run`` command line a repro file stands for: its seed, duration,
    store, parameters and swarm choices, with its fault script (faults and
    scheduling deviations) as ``--faults``."""
    from scenarios import registry

    try:
        with open(path, encoding="utf-8") as handle:
            body = json.load(handle)
    except OSError as error:
        raise UsageError(f"cannot read repro file {path!r}: {error.strerror or error}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"repro file {path!r} is not JSON: {error}") from None
    if not isinstance(body, dict) or body.get("format") != "loomsim-repro/1":
        raise UsageError(f"{path!r} is not a loomsim repro file (format loomsim-repro/1)")
    config = body.get("config")
    try:
        name, seed, duration, store = config["scenario"], config["seed"], config["duration"], config["store"]
        params = dict(config.get("params", {}))
        swarm = config.get("swarm")
        scenario = registry.get(name)
        argv = ["run", name, "--seed", str(int(seed)), "--duration", str(duration), "--store", str(store),
                "--faults", path, "--repro-dir", os.path.dirname(os.path.abspath(path))]
        for key, value in sorted(params.items()):
            argv += [param_flag(key), str(int(value))]
        if config.get("beyond_contract"):
            argv.append("--beyond-contract")
        if isinstance(swarm, dict):
            if not swarm.get("swarm"):
                argv.append("--no-swarm")
            for knob, value in sorted(swarm.get("knobs", {}).items()):
                argv += ["--knob", f"{knob}={int(value)}"]
            space = scenario.swarm_space
            if space is not None and swarm.get("swarm"):
                on = set(swarm.get("workload", []))
                enable = [w for w in space.workload if w in on]
                disable = [w for w in space.workload if w not in on]
                if enable:
                    argv += ["--faults-enable", ",".join(enable)]
                if disable:
                    argv += ["--faults-disable", ",".join(disable)]
    except registry.UnknownScenario as error:
        raise UsageError(f"repro file {path!r}: {error}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise UsageError(f"repro file {path!r} has a malformed config: {error!r}") from None
    return argv + (["--json"] if json_output else [])


def _scenario_params(scenario: Any, args: argparse.Namespace) -> dict[str, int]:
    params = scenario.param_defaults()
    for spec in scenario.params:
        value = getattr(args, spec.name, None)
        if value is not None:
            if not spec.minimum <= value <= spec.maximum:
                raise UsageError(f"{param_flag(spec.name)} must be between {spec.minimum} and {spec.maximum}, got {value}")
            params[spec.name] = value
    known = {p.name for p in scenario.params}
    from scenarios import registry

    for name in sorted({p.name for other in registry.all_scenarios() for p in other.params}):
        if getattr(args, name, None) is not None and name not in known:
            raise UsageError(f"{param_flag(name)} does not apply to scenario {scenario.name!r}")
    return params


def _options(scenario: Any, args: argparse.Namespace) -> ScenarioOptions:
    """The run's options from its command line (``run``, and what ``repro``
    and ``shrink`` make of a repro file)."""
    store = "sqlite" if args.db else args.store
    if args.db:
        parent = os.path.dirname(os.path.abspath(args.db))
        if not os.path.isdir(parent):
            raise UsageError(f"--db {args.db!r}: directory {parent!r} does not exist")
    fault_script = None
    if args.faults:
        try:
            fault_script = load_script(args.faults)
        except ScriptError as error:
            raise UsageError(str(error)) from None
    knobs: dict[str, int] = {}
    for name, value in args.knob:
        if name in knobs:
            raise UsageError(f"--knob {name} given twice")
        knobs[name] = value
    return ScenarioOptions(seed=args.seed, duration_ms=args.duration or scenario.default_duration_ms,
                           store=store, db_path=args.db, params=_scenario_params(scenario, args),
                           fault_script=fault_script, swarm=not args.no_swarm,
                           faults_enable=_names(args.faults_enable), faults_disable=_names(args.faults_disable),
                           knobs=knobs, schedule=_schedule(args.schedule), beyond_contract=args.beyond_contract)


def _run(scenario: Any, args: argparse.Namespace, argv: list[str]) -> int:
    opts = _options(scenario, args)
    trace_file = None
    if args.trace:
        try:
            trace_file = open(args.trace, "w", encoding="utf-8")
        except OSError as error:
            raise UsageError(f"--trace {args.trace!r}: {error.strerror or error}") from None
    if not args.json:
        _print_config(scenario, opts)
    try:
        result = run(scenario, opts, trace_stream=trace_file, wall_clock=time.perf_counter,
                     on_start=None if args.json else _print_choices)
    except sqlite3.DatabaseError as error:
        raise UsageError(f"database {args.db or '(temporary)'}: {error}") from None
    except SetupError as error:
        raise UsageError(str(error)) from None
    finally:
        if trace_file is not None:
            trace_file.close()
    command = repro_command(scenario.name, opts, explicit_duration=args.duration is not None,
                            faults_path=args.faults)
    repro_path = None
    if not result.passed:
        target = os.path.join(args.repro_dir, f"loomsim-repro-{result.scenario}-{result.seed}.json")
        if args.faults and os.path.abspath(target) == os.path.abspath(args.faults):
            repro_path = args.faults  # replaying this very file: keep it as it is
        else:
            repro_path = write_repro(result, command, args.repro_dir)
    if args.json:
        print(json.dumps(result_json(result, command, repro_path), ensure_ascii=False))
    else:
        _print_result(result, command, repro_path)
    return EXIT_PASS if result.passed else EXIT_VIOLATION


def _shrink(parser: _Parser, args: argparse.Namespace) -> int:
    """``loomsim shrink FILE``: ddmin over the script, then the duration."""
    from scenarios import registry
    from sim.shrink import shrink

    if args.max_runs < 1:
        raise UsageError("--max-runs must be at least 1")
    run_args = parser.parse_args(repro_argv(args.file, json_output=False))
    scenario = registry.get(run_args.scenario)
    opts = _options(scenario, run_args)
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.file)),
                                   f"loomsim-shrunk-{scenario.name}-{opts.seed}.json")
    if os.path.abspath(out) == os.path.abspath(args.file):
        raise UsageError(f"--out {out!r} is the input file: the original is kept, choose another name")
    started_s = time.perf_counter()
    print(f"shrinking {args.file}: {len(opts.fault_script or ())} script entries, "
          f"duration {format_duration_ms(opts.duration_ms)}", flush=True)

    def progress(runs: int, still: bool, candidate: ScenarioOptions) -> None:
        if still:
            print(f"  run {runs}: still fails with {len(candidate.fault_script or ())} entries, "
                  f"duration {format_duration_ms(candidate.duration_ms)}", flush=True)

    try:
        shrunk = shrink(scenario, opts, runs_max=args.max_runs, on_run=progress)
    except ValueError as error:
        raise UsageError(f"{args.file}: {error}") from None
    except sqlite3.DatabaseError as error:
        raise UsageError(f"database (temporary): {error}") from None
    result = shrunk.result
    command = f"loomsim repro {shlex.quote(out)}"
    path = write_repro(result, command, "", path=out, extra={"shrunk_from": {
        "file": args.file, "entries": shrunk.original_entries,
        "duration": format_duration_ms(shrunk.original_duration_ms), "runs": shrunk.runs}})
    first = result.violations[0]
    kept = result.fault_script
    print(f"shrunk in {shrunk.runs} runs ({time.perf_counter() - started_s:.1f}s"
          f"{', run budget spent' if shrunk.budget_spent else ''}): {shrunk.original_entries} -> {len(kept)} "
          f"script entries, duration {format_duration_ms(shrunk.original_duration_ms)} -> "
          f"{format_duration_ms(shrunk.opts.duration_ms)}")
    print(f"the failure: {first.invariant} at {format_calendar(first.time_ms)}")
    print(f"  {first.message}")
    print("the script:" if kept else "the script: empty (the failure needs no fault)")
    for entry in kept:
        if isinstance(entry, Deviation):
            print(f"  {format_calendar(entry.time_ms)}  schedule: {entry.summary()}")
        else:
            hit = "" if entry.hit is None else f" (hit {entry.hit})"
            print(f"  {format_calendar(entry.time_ms)}  {entry.node}: {entry.kind} at {entry.site}{hit}")
    if path:
        print(f"repro file: {path}")
        print(f"replay: {command}")
    return EXIT_PASS if path else EXIT_VIOLATION


def repro_command(name: str, opts: ScenarioOptions, *, explicit_duration: bool = True,
                  faults_path: str | None = None) -> str:
    parts = ["loomsim", "run", name, "--seed", str(opts.seed), "--duration", format_duration_ms(opts.duration_ms)]
    if faults_path:
        parts += ["--faults", faults_path]
    if not opts.swarm:
        parts += ["--no-swarm"]
    if opts.beyond_contract:
        parts += ["--beyond-contract"]
    if opts.schedule != "fifo" and not faults_path:
        parts += ["--schedule", opts.schedule]
    if opts.faults_enable:
        parts += ["--faults-enable", ",".join(opts.faults_enable)]
    if opts.faults_disable:
        parts += ["--faults-disable", ",".join(opts.faults_disable)]
    for name, value in sorted(opts.knobs.items()):
        parts += ["--knob", f"{name}={value}"]
    if opts.db_path:
        parts += ["--db", opts.db_path]
    elif opts.store != "memory":
        parts += ["--store", opts.store]
    for key, value in sorted(opts.params.items()):
        parts += [param_flag(key), str(value)]
    return shlex.join(parts)


def result_json(result: RunResult, command: str, repro_path: str | None) -> dict[str, Any]:
    return {
        "scenario": result.scenario,
        "seed": result.seed,
        "store": result.store,
        "status": result.status,
        "trace_digest": result.trace_digest,
        "simulated_ms": result.simulated_ms,
        "wall_s": result.wall_s,
        "wakes": result.wakes,
        "events": result.events,
        "faults": result.faults,
        "invariants": result.invariants,
        "violations": [
            {"name": v.invariant, "message": v.message, "simulated_ms": v.time_ms,
             "simulated_time": format_calendar(v.time_ms)}
            for v in result.violations
        ],
        "stats": result.stats,
        "config": result.config,
        "coverage": result.coverage,
        "beyond_contract": [script_to_json((e,))[0] for e in result.beyond_contract],
        "peak_rss_mb": _peak_rss_mb(),
        "repro_command": command,
        "repro_file": repro_path,
    }


def _peak_rss_mb() -> float | None:
    try:
        import resource
    except ImportError:  # not on every platform
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)


def write_repro(result: RunResult, command: str, directory: str, *, path: str | None = None,
                extra: dict[str, Any] | None = None) -> str | None:
    """Write the failure's repro file; on failure to write, say so and go on."""
    path = path or os.path.join(directory, f"loomsim-repro-{result.scenario}-{result.seed}.json")
    body = {
        "format": "loomsim-repro/1",
        "config": result.config,
        "command": command,
        "trace_digest": result.trace_digest,
        "violations": [{"name": v.invariant, "message": v.message, "simulated_ms": v.time_ms}
                       for v in result.violations],
        "fault_script": script_to_json(result.fault_script),
        "excerpt": [json.loads(event_json(e)) for e in result.excerpt],
        **(extra or {}),
    }
    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(body, handle, ensure_ascii=False, indent=1)
    except OSError as error:
        print(f"loomsim: warning: could not write repro file {path!r}: {error.strerror or error}", file=sys.stderr)
        return None
    return path


def _print_config(scenario: Any, opts: ScenarioOptions) -> None:
    params = " ".join(f"{k}={v}" for k, v in sorted(opts.params.items()))
    print(f"loomsim {scenario.name}  seed={opts.seed}  duration={format_duration_ms(opts.duration_ms)}  "
          f"store={opts.store}{'  ' + params if params else ''}")


def _print_choices(extra: dict[str, Any]) -> None:
    line = extra.get("swarm_line")
    if line:
        print(line, flush=True)


def _print_result(result: RunResult, command: str, repro_path: str | None) -> None:
    stats = result.stats
    print(f"simulated {format_span_ms(result.simulated_ms)} in {result.wall_s:.2f}s wall: "
          f"{result.wakes} wakes, {result.events} events")
    faults = ", ".join(f"{k}={v}" for k, v in result.faults.items()) or "none"
    print(f"faults: {faults}")
    interesting = ("worker_crashes", "adopted_saves", "save_conflicts", "migrations_applied", "runs_failed",
                   "wakes_skipped", "operator_edits", "claim_checked_payloads", "findings", "pinned_blobs",
                   "blobs_reclaimed", "runs_archived", "broken_deploys_caught", "runs_migrated_on_resume")
    shown = ", ".join(f"{k}={stats[k]}" for k in interesting if k in stats)
    if shown:
        print(f"system: {shown}")
    checks = ", ".join(f"{k}={v}" for k, v in result.invariants.items())
    print(f"invariant checks: {checks}")
    cov = result.coverage
    if cov:
        never = ", ".join(cov["never_fired"]) or "none"
        missed = ", ".join(name for name, held in cov["sometimes"].items() if not held) or "none"
        print(f"coverage: never fired: {never}; sometimes-properties not reached: {missed}")
    print(f"trace digest: {result.trace_digest}")
    broken = result.beyond_contract
    if broken:
        shown = "; ".join(f"{e.kind} at {e.site} ({e.node}, {format_calendar(e.time_ms)})" for e in broken[:3])
        more = f" and {len(broken) - 3} more" if len(broken) > 3 else ""
        print(f"beyond the contract: {shown}{more}")
    if result.status == PASS:
        print("PASS: every invariant held")
        return
    first = result.violations[0]
    print()
    if result.status == DETECTED:
        print(f"DETECTED: the broken promise was caught by {first.invariant} at {format_calendar(first.time_ms)}")
    else:
        print(f"FAIL: invariant {first.invariant} violated at {format_calendar(first.time_ms)}")
    print(f"  {first.message}")
    if result.excerpt:
        print("related trace events:")
        for seq, t_ms, node, kind, fields in result.excerpt[-EXCERPT_LINES:]:
            detail = " ".join(f"{k}={_short(v)}" for k, v in fields.items())
            print(f"  {format_calendar(t_ms)}  #{seq:<8} {node:<12} {kind:<28} {detail}")
    deviations = [e for e in result.fault_script if isinstance(e, Deviation) and e.time_ms <= first.time_ms]
    if deviations:
        print(f"scheduling: {len(deviations)} deviation(s) from FIFO before it; the last:")
        for deviation in deviations[-DEVIATIONS_SHOWN:]:
            print(f"  {format_calendar(deviation.time_ms)}  {deviation.summary()}")
    for extra in result.violations[1:5]:
        print(f"also: {extra.invariant} at {format_calendar(extra.time_ms)}: {extra.message}")
    print()
    print(f"reproduce: {command}")
    if repro_path:
        print(f"repro file: {repro_path}")


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


if __name__ == "__main__":
    sys.exit(main())
