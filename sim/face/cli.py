"""The command line: ``loomsim`` (also ``python -m sim``).

Exit codes: 0 every invariant held, 1 an invariant was violated (a sweep: a
seed failed or a saved failure still fails; with --require-coverage, a
coverage gap; shrink: the shrunk run it wrote fails) or the run did not
test what it was asked to (a repro whose recorded failure did not recur, a
--mutant whose patched code never ran), 2 usage error (unknown
scenario, malformed seed/duration/flag, unusable database or trace path, a
scenario module that cannot be loaded), 3 infrastructure error (a sweep's or
``mutants``' child crashed or printed no result), 128 + the signal when
SIGINT (130) or SIGTERM (143) stopped it. Usage errors are one line on
stderr, never a traceback.

``--scenarios MODULE`` (repeatable) is a global option, before the command:
the user's scenario modules (``sim.face.discovery``), loaded with the
``loomsim.scenarios`` entry points before the parser is built (a user
scenario's parameters are flags). The repro file's format lives in
``sim.face.repro_file``; the parser, its value types, ``UsageError`` and a
run's options in ``sim.face.options``; the child processes of ``sweep``,
``mutants`` and ``check-determinism`` in ``sim.face.children``.

This module, ``sweep``, ``children`` and ``bench`` are the only places in
``sim/`` that read the wall clock: to report how long a run took, or how
long a signalled child may take to exit.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sqlite3
import sys
import time
from typing import Any, Callable, Sequence

from faults.script import script_to_json
from reports.verdict import decide, not_exercised_note
from sim.artifacts import ArtifactWriteError, NewFileStream
from sim.clock import format_calendar, format_duration_ms, format_span_ms
from sim.face import discovery
from sim.face.options import (NAMED_STORES, PROGRESS_EVERY_S, UsageError, apply_mutant, build_parser, check_report_option,
                              check_schedule, parse, parse_names, run_options, scenario_params, selected_scenarios,
                              wrap_names, write_report_or_warn)
from sim.face.repro_file import (NOT_REPRODUCED, ReproFileError, is_repro_file, param_flag, read_repro, replay_check,
                                 replay_command, repro_argv, repro_command, repro_filename, shrunk_filename,
                                 version_warning, write_repro)
from sim.interleave import Deviation
from sim.runner import DETECTED, PASS, RunResult, run
from sim.scenario import ScenarioOptions, SetupError
from sim.trace import event_json, field_text

BENCH_RUNS_MAX = 25
EXIT_PASS = 0
DEVIATIONS_SHOWN = 3  # scheduling deviations a failure report lists
EXIT_VIOLATION = 1
EXIT_USAGE = 2
EXIT_ERROR = 3  # infrastructure: a child of a sweep crashed or printed no result
RESULT_FORMAT = "loomsim-result/1"  # the ``format`` of ``run --json`` (a sweep's: sweep.SWEEP_FORMAT)
EXCERPT_LINES = 14  # the full excerpt is in the repro file


def main(argv: Sequence[str] | None = None) -> int:
    # A failure message may quote a lone surrogate (an adversary's key): print
    # it as its \uXXXX escape rather than crash on the way out.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "encoding", None):
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass
    from sim.face.children import sigterm_interrupts

    try:
        with sigterm_interrupts():  # SIGTERM cleans up on the way out, as SIGINT does
            return _main(list(sys.argv[1:] if argv is None else argv))
    except (UsageError, ReproFileError, discovery.ScenarioModuleError) as error:
        print(f"loomsim: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("loomsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (``loomsim list --faults | head``): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PASS
    except BaseException as error:
        from sim.face.children import Interrupted

        if not isinstance(error, Interrupted):
            raise
        stopped = f"; stopped {error.stopped} running child run(s)" if error.stopped else ""
        print(f"loomsim: interrupted by {error}{stopped}; no summary", file=sys.stderr)
        return 128 + error.signum


def _main(argv: list[str], *, replaying: bool = False) -> int:
    """``replaying``: ``argv`` is what a repro file stands for (``repro``)."""
    from scenarios import registry

    _, args = parse(argv)
    if args.version and args.command is None:
        print(f"loomsim {version()}")
        return EXIT_PASS
    if args.command is None:
        raise UsageError("no command given: expected one of list, run, sweep, merge, check-determinism, describe, "
                         "mutants, repro, shrink, bench (see loomsim --help)")
    if args.command == "bench":
        from sim.face.bench import bench, render, verdicts

        if not 1 <= args.runs <= BENCH_RUNS_MAX:
            raise UsageError(f"--runs {args.runs}: expected 1 to {BENCH_RUNS_MAX}")
        figures = bench(quick=args.quick, seed=args.seed, runs_each=args.runs)
        print(json.dumps(figures) if args.json else render(figures))
        missed = args.check and not all(met for _, met in verdicts(figures))
        return EXIT_VIOLATION if missed else EXIT_PASS
    if args.command == "repro":
        report = ["--report", args.report] if args.report else []
        replay = repro_argv(args.file, json_output=args.json, scenario_modules=args.scenarios) + report
        _warn_other_version(args.file)
        return _main(replay, replaying=True)
    if args.command == "shrink":
        return _shrink(args)
    if args.command == "list" and (args.faults or args.scenario is not None):
        return _list_faults(args.scenario)
    if args.command == "list":
        for scenario in registry.all_scenarios():
            print(f"{scenario.name:<16} {scenario.description} (default {format_duration_ms(scenario.default_duration_ms)})")
        return EXIT_PASS
    if args.command == "mutants":
        return _mutants(args)
    if args.command == "sweep":
        return _sweep(args)
    if args.command in ("merge", "check-determinism", "describe"):
        from sim.face import describe, determinism, shards

        return {"merge": shards, "check-determinism": determinism, "describe": describe}[args.command].command(args)
    try:
        scenario = registry.get(args.scenario)
    except registry.UnknownScenario as error:
        raise UsageError(str(error)) from None
    if not replaying:  # a replay writes next to its file if it can, and warns if not
        _check_repro_dir(args.repro_dir)
    check_report_option(args.report)
    return _run(scenario, args, argv, replaying=replaying)


def _warn_other_version(path: str) -> None:
    """``repro FILE``: one warning line when another loomsim wrote it."""
    from sim.runner import LOOMSIM_VERSION

    warning = version_warning(read_repro(path), path, LOOMSIM_VERSION)
    if warning is not None:
        print(f"loomsim: warning: {warning}", file=sys.stderr)


def version() -> str:
    """The installed package's version (the runner's own when not installed)."""
    from importlib import metadata

    from sim.runner import LOOMSIM_VERSION

    try:
        return metadata.version("loomsim")
    except metadata.PackageNotFoundError:
        return LOOMSIM_VERSION


def _list_faults(only: str | None) -> int:
    """``loomsim list --faults [SCENARIO]``: what each scenario's seeds choose from."""
    from faults.kinds import ALL_FAULT_KINDS
    from scenarios import registry

    if only is None:
        scenarios = registry.all_scenarios()
    else:
        try:
            scenarios = [registry.get(only)]
        except registry.UnknownScenario as error:
            raise UsageError(str(error)) from None
    print(f"fault kinds: {wrap_names(ALL_FAULT_KINDS, '  ', head='fault kinds: ')}")
    from sim.face.describe import swarm_lines  # shared with loomsim describe

    for scenario in scenarios:
        print(f"\n{scenario.name}: {scenario.description}")
        print("\n".join(swarm_lines(scenario)))
    return EXIT_PASS


def _progress_reporter(args: argparse.Namespace) -> Any:
    """``run``'s progress line on stderr every ``--progress-every`` wall
    seconds, when asked (``--progress``) or when stderr is a terminal; None
    without. It reads the wall clock only: the run does not see it."""
    every_s = args.progress_every
    wanted = args.progress or every_s is not None or _isatty(sys.stderr)
    if args.no_progress or not wanted:
        return None
    every_s = every_s or PROGRESS_EVERY_S
    started_s = time.perf_counter()
    last = [started_s]

    def report(now_ms: int, end_ms: int) -> None:
        wall_s = time.perf_counter()
        if wall_s - last[0] < every_s or now_ms >= end_ms:
            return
        last[0] = wall_s
        print(progress_line(now_ms, end_ms, wall_s - started_s), file=sys.stderr, flush=True)

    return report


def progress_line(now_ms: int, end_ms: int, elapsed_s: float) -> str:
    """``progress: simulated 93d of 365d 12h (25.5%), 2m 10s wall, ETA 6m 20s``."""
    from sim.face.sweep import format_wall_s

    share = now_ms / end_ms if end_ms > 0 else 1.0
    eta = format_wall_s(elapsed_s / share - elapsed_s) if share > 0 else "unknown"
    return (f"loomsim: progress: simulated {format_span_ms(now_ms)} of {format_span_ms(end_ms)} "
            f"({100 * share:.1f}%), {format_wall_s(elapsed_s)} wall, ETA {eta}")


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _check_new_file(flag: str, path: str) -> str:
    """Before a run: the output ``flag`` names a file in a writable directory."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a directory: expected a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path!r}: directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path!r}: directory {parent!r} is not writable")
    return path


def _check_repro_dir(path: str) -> None:
    """Before a run: a failure's repro file will have somewhere to go."""
    if not os.path.isdir(path):
        raise UsageError(f"--repro-dir {path!r} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--repro-dir {path!r} is not writable")


def _sweep(args: argparse.Namespace) -> int:
    """``loomsim sweep [SCENARIO]``: refuse here, once, whatever every child
    would refuse (a wrong flag, parameter or pin), then sweep
    (``sim.face.sweep``). Without SCENARIO: every registered scenario; a
    scenario parameter then goes to the scenarios that have it."""
    from faults.swarm import SwarmError, check_pins
    from scenarios import registry
    from sim.face.repro_file import scenarios_argv
    from sim.face import failures
    from sim.face.sweep import SweepOptions, sweep

    scenarios = selected_scenarios(args.scenario)
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    if args.beyond_every < 0:
        raise UsageError(f"--beyond-every must be 0 (none) or more, got {args.beyond_every}")
    if args.sqlite_every < 0:
        raise UsageError(f"--sqlite-every must be 0 (none) or more, got {args.sqlite_every}")
    _check_repro_dir(args.repro_dir)
    check_report_option(args.report)
    if args.model_coverage_out:
        _check_new_file("--model-coverage-out", args.model_coverage_out)
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
    opts = SweepOptions(seeds=args.seeds, jobs=args.jobs, json=args.json, time_budget_s=args.time_budget,
                        beyond_every=args.beyond_every, all_beyond=args.beyond_contract,
                        sqlite_every=0 if args.store is not None else args.sqlite_every,
                        model_coverage=args.model_coverage or bool(args.model_coverage_out),
                        model_coverage_out=args.model_coverage_out, require_coverage=args.require_coverage,
                        failure_db=failures.db_root(args.failure_db), all_saved=args.scenario is None,
                        saved_stores=NAMED_STORES if args.store is None else (args.store,),
                        report_dir=args.report)
    child_args = {s.name: _sweep_child_args(s, args) for s in scenarios}
    from sim.face.shards import plan_shard  # --shard I/N, --out FILE: the shard's seeds and its file

    opts, writer = plan_shard(args.shard, args.out, scenarios, opts, child_args, scenarios_argv(args.scenarios))
    return sweep(scenarios, opts, child_args, scenarios_argv(args.scenarios), shard_writer=writer)


def _sweep_child_args(scenario: Any, args: argparse.Namespace) -> list[str]:
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


def _mutants(args: argparse.Namespace) -> int:
    """``loomsim mutants``: the catalogue swept (``sim.face.mutants``)."""
    from sim.face.mutants import MutantsUsageError, mutants_command
    from sim.face.repro_file import scenarios_argv

    try:
        return mutants_command(args, scenarios_argv(args.scenarios))
    except MutantsUsageError as error:
        raise UsageError(str(error)) from None


# What ``run --faults REPRO`` keeps from its own command line whatever the file says.
_NOT_ADOPTED = ("command", "scenario", "seed", "faults", "repro_dir", "json", "trace", "db", "scenarios", "report")


def _given_options(argv: list[str]) -> set[str]:
    """The ``run`` options (their dests) ``argv`` sets explicitly."""
    parser = build_parser()
    (run_p,) = (action.choices["run"] for action in parser._actions
                if isinstance(action, argparse._SubParsersAction))
    given = set()
    for action in run_p._actions:
        for flag in action.option_strings:
            if any(token == flag or token.startswith(flag + "=") for token in argv):
                given.add(action.dest)
    return given


def _adopt_repro_config(scenario: Any, args: argparse.Namespace, argv: list[str]) -> argparse.Namespace:
    """``run --faults FILE`` with a repro file replays it as ``loomsim
    repro FILE`` does: the file's configuration (duration, store,
    parameters, swarm choices, knobs, rates, mutant) for whatever the
    command line does not set; a scenario or seed that contradicts the
    file's is a usage error. A hand-written script: ``args`` as they are."""
    if not args.faults or not is_repro_file(args.faults):
        return args
    _, recorded = parse(repro_argv(args.faults, json_output=args.json, scenario_modules=args.scenarios))
    for what, mine, theirs in (("scenario", scenario.name, recorded.scenario), ("seed", args.seed, recorded.seed)):
        if mine != theirs:
            raise UsageError(f"--faults {args.faults!r} is a repro file of {what} {theirs}, not {mine}: "
                             f"replay it as recorded with loomsim repro {shlex.quote(args.faults)}")
    given = _given_options(argv)
    merged = argparse.Namespace(**vars(args))
    for dest, value in vars(recorded).items():
        if dest not in _NOT_ADOPTED and dest not in given:
            setattr(merged, dest, value)
    # Pins merge one by one: the command line's win over the file's.
    mine_knobs = {name for name, _ in args.knob}
    merged.knob = [*(k for k in recorded.knob if k[0] not in mine_knobs), *args.knob]
    mine_rates = {kind for kind, _ in args.rate}
    merged.rate = [*(r for r in recorded.rate if r[0] not in mine_rates), *args.rate]
    enable, disable = set(parse_names(args.faults_enable)), set(parse_names(args.faults_disable))
    merged.faults_enable = ",".join(sorted(enable | (set(parse_names(recorded.faults_enable)) - disable)))
    merged.faults_disable = ",".join(sorted(disable | (set(parse_names(recorded.faults_disable)) - enable)))
    merged.scenarios = recorded.scenarios
    return merged


def _run(scenario: Any, args: argparse.Namespace, argv: list[str], *, replaying: bool = False) -> int:
    """One run. ``replaying``: ``args.faults`` is the repro file ``loomsim
    repro`` replays; the replay is then compared with its recording (a
    failure that did not recur is not a pass: exit 1, and said)."""
    from scenarios import registry

    args = _adopt_repro_config(scenario, args, argv)
    scenario = registry.get(scenario.name)  # a repro file's stack file: the copy it embeds, adopted just now
    mutant = apply_mutant(args)
    opts = run_options(scenario, args)
    # Created at the run's first event (a run refused before it creates
    # nothing), at a free name: an existing trace is never overwritten.
    trace_file = None if not args.trace else NewFileStream(_check_new_file("--trace", args.trace))
    if not args.json:
        _print_config(scenario, opts)
        if mutant is not None:
            print(f"mutant: {mutant.name} ({mutant.module}): {mutant.doc}")
    from faults.mutants import executions

    executed_before = executions()
    try:
        result = run(scenario, opts, trace_stream=trace_file, wall_clock=time.perf_counter, cpu_clock=time.process_time,
                     on_start=None if args.json else _print_choices, on_progress=_progress_reporter(args))
    except sqlite3.DatabaseError as error:
        raise UsageError(f"database {args.db or '(temporary)'}: {error}") from None
    except SetupError as error:
        raise UsageError(str(error)) from None
    except ArtifactWriteError as error:
        raise UsageError(f"--trace {error}") from None
    finally:
        if trace_file is not None:
            trace_file.close()
    if mutant is not None:  # the repro file's config carries it: a replay runs the same bug
        result.config["mutant"] = mutant.name
        if args.mutants:
            result.config["mutants_module"] = args.mutants
    command = repro_command(scenario.name, opts, explicit_duration=args.duration is not None,
                            faults_path=args.faults, scenario_modules=args.scenarios,
                            mutant=None if mutant is None else mutant.name, mutants_module=args.mutants)
    repro_path = None
    if not result.passed:
        if args.faults and is_repro_file(args.faults):
            repro_path = args.faults  # a replay of a repro file: it is the repro file, nothing new is written
        else:  # a new file, never over an existing one (write_repro takes the next free name)
            repro_path = _write_repro(result, command, args.repro_dir, scenario_modules=args.scenarios)
    body = result_json(result, command, repro_path)
    untested = None
    if mutant is not None:
        from sim.face.mutants import MUTANT_UNEXECUTED, unexecuted_note

        body["mutant"] = mutant.name
        after = executions()
        body["mutant_executions"] = None if after is None or executed_before is None else after - executed_before
        untested = unexecuted_note(mutant, body["mutant_executions"]) if result.passed else None
        if untested is not None:  # a green run that never ran the planted bug tested nothing
            body["status"] = MUTANT_UNEXECUTED
    check = replay_check(read_repro(args.faults), args.faults, result) if replaying else None
    if check is not None:
        body["replay"] = check.as_json()
        if result.passed and not check.reproduced:
            body["status"] = NOT_REPRODUCED
    if trace_file is not None:
        body["trace_file"] = trace_file.path
    if args.json:
        print(json.dumps(body, ensure_ascii=False))
    else:
        _print_result(result, command, repro_path)
        if trace_file is not None:
            print(f"trace file: {trace_file.path}")
        if untested is not None:
            print(untested)
        for line in check.lines() if check is not None else ():  # last: the verdict
            print(line)
    if args.report:  # after the repro file: a report that cannot be written costs only itself
        write_report_or_warn(args.report, body, to_stderr=args.json)
    return decide(body).exit_code  # the verdict the report shows


def _shrink(args: argparse.Namespace) -> int:
    """``loomsim shrink FILE``: ddmin over the script, then the duration
    (``sim.shrink``), printed as it goes and written as a repro file."""
    from scenarios import registry
    from sim.shrink import shrink

    if args.max_runs < 1:
        raise UsageError("--max-runs must be at least 1")
    check_report_option(args.report)
    # Parsed after the file's modules are loaded: their scenarios' flags.
    _, run_args = parse(repro_argv(args.file, json_output=False, scenario_modules=args.scenarios))
    mutant = apply_mutant(run_args)  # a repro of a planted bug shrinks with the bug in place
    scenario = registry.get(run_args.scenario)
    opts = run_options(scenario, run_args)
    out = _shrink_out(args.out, args.file, shrunk_filename(scenario.name, opts.seed))
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
    if mutant is not None:  # the shrunk file replays with the same planted bug
        result.config["mutant"] = mutant.name
        if run_args.mutants:
            result.config["mutants_module"] = run_args.mutants
    # The file's name is decided as it is written (a taken one gets -2, ...):
    # the command it embeds, prints and reports replays the file written.
    path = _write_repro(result, replay_command, "", path=out, scenario_modules=run_args.scenarios, extra={
        "shrunk_from": {"file": args.file, "entries": shrunk.original_entries,
                        "duration": format_duration_ms(shrunk.original_duration_ms), "runs": shrunk.runs}})
    command = replay_command(path) if path else ""
    first = result.violations[0]
    kept = result.fault_script
    print(f"shrunk in {shrunk.runs} runs ({time.perf_counter() - started_s:.1f}s"
          f"{', run budget spent' if shrunk.budget_spent else ''}): {shrunk.original_entries} -> {len(kept)} "
          f"script entries, duration {format_duration_ms(shrunk.original_duration_ms)} -> "
          f"{format_duration_ms(shrunk.opts.duration_ms)}")
    before = shrunk.original
    print(f"the failure: {first.invariant} at {format_calendar(first.time_ms)} (was "
          f"{format_calendar(before.failed_at_ms)}), after {result.events} trace events (was {before.events})")
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
    body = result_json(result, command, path)
    if args.report:
        if mutant is not None:
            body["mutant"] = mutant.name
        write_report_or_warn(args.report, body)
    # The shrunk run fails, as its report says: shrink exits with its verdict
    # (1), as ``repro`` of a failing file does.
    return decide(body).exit_code


def _shrink_out(out: str | None, source: str, default_name: str) -> str:
    """Where ``shrink`` writes (before any run): ``--out FILE``, a file in
    ``--out DIR`` (an existing directory) or, without ``--out``, next to
    the input; the name is then only a wish (taken: -2, -3, ...). A
    missing directory or the input itself is a usage error."""
    if out is None:
        out = os.path.join(os.path.dirname(os.path.abspath(source)), default_name)
    elif os.path.isdir(out):
        out = os.path.join(out, default_name)
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise UsageError(f"--out {out!r}: directory {parent!r} does not exist")
    if os.path.abspath(out) == os.path.abspath(source):
        raise UsageError(f"--out {out!r} is the input file: the original is kept, choose another name")
    return out


def result_json(result: RunResult, command: str, repro_path: str | None) -> dict[str, Any]:
    """The ``--json`` object of a run (``wakes`` only if the scenario counts them in its stats)."""
    wakes = result.stats.get("wakes")
    return {
        "format": RESULT_FORMAT,
        "scenario": result.scenario,
        "seed": result.seed,
        "store": result.store,
        "status": result.status,
        "trace_digest": result.trace_digest,
        "simulated_ms": result.simulated_ms,
        "wall_s": result.wall_s,
        "audit_cpu_s": result.audit_cpu_s,
        **({"wakes": wakes} if wakes is not None else {}),
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
        "coverage": {**result.coverage, **_never_fired_split(result)} if result.coverage else result.coverage,
        "beyond_contract": [script_to_json((e,))[0] for e in result.beyond_contract],
        "peak_rss_mb": _peak_rss_mb(),
        "repro_command": command,
        "repro_file": repro_path,
        # The first violation's related trace events (as the repro file has them) and
        # the bounded timeline (``sim.timeline``): what a report draws.
        "excerpt": [json.loads(event_json(e)) for e in result.excerpt],
        "timeline": result.timeline,
    }


def _peak_rss_mb() -> float | None:
    try:
        import resource
    except ImportError:  # not on every platform
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)


def _write_repro(result: RunResult, command: str | Callable[[str], str], directory: str,
                 **kwargs: Any) -> str | None:
    """Write the failure's repro file; on failure to write, say so and go on."""
    try:
        return write_repro(result, command, directory, **kwargs)
    except OSError as error:
        path = kwargs.get("path") or os.path.join(directory, repro_filename(result.scenario, result.seed))
        print(f"loomsim: warning: could not write repro file {path!r}: {error.strerror or error}", file=sys.stderr)
        return None


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
    wakes = f"{stats['wakes']} wakes, " if stats.get("wakes") is not None else ""
    print(f"simulated {format_span_ms(result.simulated_ms)} in {result.wall_s:.2f}s wall: "
          f"{wakes}{result.events} events")
    faults = ", ".join(f"{k}={v}" for k, v in result.faults.items()) or "none"
    print(f"faults: {faults}")
    interesting = ("worker_crashes", "adopted_saves", "save_conflicts", "migrations_applied", "runs_failed",
                   "wakes_skipped", "operator_edits", "claim_checked_payloads", "findings", "pinned_blobs",
                   "blobs_reclaimed", "runs_archived", "broken_deploys_caught", "runs_migrated_on_resume")
    shown = ", ".join(f"{k}={stats[k]}" for k in interesting if k in stats)
    if shown:
        print(f"system: {shown}")
    decisions = stats.get("recovery_decisions")
    if decisions:
        by_disposition = ", ".join(f"{k}={v}" for k, v in stats.get("recovery_dispositions", {}).items())
        print(f"recovery decisions: {', '.join(f'{k}={v}' for k, v in decisions.items())} ({by_disposition})")
    checks = ", ".join(f"{k}={v}" for k, v in result.invariants.items())
    print(f"invariant checks: {checks}")
    cov = result.coverage
    if cov:
        split = _never_fired_split(result)
        never = ", ".join(split["never_fired_enabled"]) or "none"
        off = ", ".join(split["switched_off"]) or "none"
        missed = ", ".join(name for name, held in cov["sometimes"].items() if not held) or "none"
        print(f"coverage: never fired (enabled): {never}; switched off by this seed's swarm: {off}; "
              f"sometimes-properties not reached: {missed}")
    print(f"trace digest: {result.trace_digest}")
    broken = result.beyond_contract
    if broken:
        shown = "; ".join(f"{e.kind} at {e.site} ({e.node}, {format_calendar(e.time_ms)})" for e in broken[:3])
        more = f" and {len(broken) - 3} more" if len(broken) > 3 else ""
        print(f"beyond the contract: {shown}{more}")
    if result.status == PASS:
        shown = {"config": result.config, "status": result.status, "beyond_contract": result.beyond_contract}
        print("PASS: every invariant held" + not_exercised_note(shown))
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
            detail = " ".join(f"{k}={field_text(v)}" for k, v in fields.items())
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


def _never_fired_split(result: RunResult) -> dict[str, list[str]]:
    """The run's ``never_fired``, told apart: enabled (by its swarm, its
    pinned rates, its plan) and never fired, or switched off for this seed
    (``sweep.enabled_in``: the same reading a sweep makes of the JSON)."""
    from sim.face.sweep import enabled_in

    kinds_on, failpoints_on = enabled_in({"config": result.config, "coverage": result.coverage})
    never = result.coverage.get("never_fired", [])
    on = kinds_on | failpoints_on
    return {"never_fired_enabled": [name for name in never if name in on],
            "switched_off": [name for name in never if name not in on]}


if __name__ == "__main__":
    sys.exit(main())
