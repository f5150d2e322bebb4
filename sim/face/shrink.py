"""``loomsim shrink FILE``: a repro file's fault script and duration reduced to a minimum that still fails alike.

ddmin over the script, then the duration (``sim.shrink``), printed as it
goes and written as a new repro file (``--out``; never over an existing
one). The shrunk run fails, as its report says: ``shrink`` exits with its
verdict (1), as ``repro`` of a failing file does.

Part of the face: it reads the wall clock only to say how long it took.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import time
from typing import Any

from reports.verdict import decide
from sim.clock import format_calendar, format_duration_ms
from sim.face import run
from sim.face.mutants import apply_mutant
from sim.face.options import UsageError, check_report_option, parse_count, run_options, write_report_or_warn
from sim.face.repro_file import replay_command, repro_argv, shrunk_filename
from sim.interleave import Deviation
from sim.scenario import ScenarioOptions


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``loomsim shrink``'s arguments."""
    shrink_p = sub.add_parser("shrink", help="reduce a repro file's fault script and duration to a minimum "
                                             "that still fails the same way")
    shrink_p.add_argument("file", help="a loomsim-repro-*.json file written by a failing run")
    shrink_p.add_argument("--out", default=None, metavar="FILE|DIR",
                          help="where to write the shrunk repro file: FILE, or a file in the directory DIR "
                               "(default: loomsim-shrunk-SCENARIO-SEED.json next to the input); never over "
                               "an existing file (-2, -3, ...: the name written is printed)")
    shrink_p.add_argument("--max-runs", type=parse_count, default=300, metavar="N",
                          help="give up shrinking after N runs and keep the best so far (default 300)")
    shrink_p.add_argument("--report", default=None, metavar="DIR",
                          help="also write a report of the shrunk failure into DIR (see loomsim run --report)")
    return shrink_p


def command(args: argparse.Namespace) -> int:
    """``loomsim shrink FILE``: ddmin over the script, then the duration
    (``sim.shrink``), printed as it goes and written as a repro file."""
    from scenarios import registry
    from sim.shrink import shrink

    if args.max_runs < 1:
        raise UsageError("--max-runs must be at least 1")
    check_report_option(args.report)
    # Parsed after the file's modules are loaded: their scenarios' flags.
    run_args = run.parse_line(repro_argv(args.file, json_output=False, scenario_modules=args.scenarios))
    mutant = apply_mutant(run_args)  # a repro of a planted bug shrinks with the bug in place
    scenario = registry.get(run_args.scenario)
    opts = run.with_branch(run_options(scenario, run_args), run_args)  # a branch's repro shrinks as that branch
    out = _shrink_out(args.out, args.file, shrunk_filename(scenario.name, opts.seed,
                                                          None if opts.branch is None else opts.branch.key))
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
    path = run.write_repro_or_warn(result, replay_command, "", path=out, scenario_modules=run_args.scenarios, extra={
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
    body = run.result_json(result, command, path)
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
