"""``loomsim run SCENARIO --seed N``: one run, its printed result, its JSON and its repro file.

``add_parser`` adds ``run`` and its options (``options.add_run_options``:
the flags it shares with ``sweep``); ``command`` runs it. ``parse_line``
parses a ``run`` command line alone (what a repro file stands for:
``repro``, ``shrink`` and the failure database read theirs with it) and
``replay`` runs one as ``loomsim repro`` does. ``run --faults REPRO``
adopts the repro file's configuration for what its command line does not
set. ``result_json`` is a run's ``--json`` object (``loomsim-result/1``);
``enabled_in`` reads back of one what its seed could fire (a sweep reads
its children's alike).

Part of the face: it reads the wall clock to report how long a run took
and to pace its progress lines (never seen by the run).
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import shlex
import sys
import time
from typing import Any, Callable, Mapping, Sequence

import attrs

from faults.kinds import FAILPOINT_CRASH, TIMED_FAULT_KINDS
from faults.script import script_to_json
from reports.verdict import decide, not_exercised_note
from sim.artifacts import ArtifactWriteError, NewFileStream
from sim.clock import format_calendar, format_duration_ms, format_span_ms
from sim.face.mutants import MUTANT_UNEXECUTED, apply_mutant, unexecuted_note
from sim.face.options import (PROGRESS_EVERY_S, UsageError, add_run_options, check_new_file, check_report_option,
                              check_repro_dir, parse, parse_duration, parse_names, parse_progress_every, parse_seed,
                              root_parser, run_options, write_report_or_warn)
from sim.face.repro_file import (NOT_REPRODUCED, branch_key, is_repro_file, read_repro, replay_check, repro_argv,
                                 repro_command, repro_filename, write_repro)
from sim.interleave import Deviation
from sim.runner import DETECTED, PASS, RunResult, run
from sim.numbers import NumberError, parse_whole
from sim.scenario import Branch, ScenarioOptions, SetupError
from sim.trace import event_json, field_text

DEVIATIONS_SHOWN = 3  # scheduling deviations a failure report lists
RESULT_FORMAT = "loomsim-result/1"  # the ``format`` of ``run --json`` (a sweep's: sweep.SWEEP_FORMAT)
EXCERPT_LINES = 14  # the full excerpt is in the repro file
BRANCH_KEY_MAX = 2**31 - 1  # a branch key is a small index; this only bounds a typo


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``loomsim run``'s arguments."""
    run_p = sub.add_parser("run", help="run one scenario with one seed")
    run_p.add_argument("scenario", help="scenario name (see `loomsim list`)")
    run_p.add_argument("--seed", type=parse_seed, required=True, help="the seed: the handle to the whole run")
    run_p.add_argument("--db", default=None, metavar="PATH", help="SQLite file to use (implies --store sqlite)")
    run_p.add_argument("--trace", default=None, metavar="FILE", help="stream every trace event as JSON lines")
    run_p.add_argument("--faults", default=None, metavar="FILE",
                       help="run the faults of this script alone (a repro file, or a JSON list of faults); "
                            "probabilistic faults off")
    run_p.add_argument("--mutant", default=None, metavar="NAME",
                       help="run with the planted bug NAME of the mutant catalogue (see loomsim mutants --list)")
    run_p.add_argument("--mutants", default=None, metavar="MODULE",
                       help="also know the mutants of MODULE's MUTANTS list (a user's, for --mutant)")
    run_p.add_argument("--progress", action="store_true",
                       help=f"print progress on stderr every {PROGRESS_EVERY_S:g} wall seconds: simulated time "
                            "reached, percent, wall time, ETA (the default when stderr is a terminal)")
    run_p.add_argument("--progress-every", type=parse_progress_every, default=None, metavar="S",
                       help="... every S wall seconds instead (implies --progress)")
    run_p.add_argument("--no-progress", action="store_true", help="no progress lines, even on a terminal")
    run_p.add_argument("--fork-at", type=parse_duration, default=None, metavar="T",
                       help="branch the run at simulated time T (e.g. 200d; with --branch): the history up to T "
                            "is the seed's, the future after it branch K's")
    run_p.add_argument("--branch", type=parse_branch_key, default=None, metavar="K",
                       help="the branch to live after --fork-at (0, 1, ...): its random streams are re-keyed by K "
                            "there; what `loomsim sweep --fork-at T --branches N` forks")
    run_p.add_argument("--branch-streams", type=parse_branch_streams, default=None, metavar="A,B",
                       help="re-key only these stream families at the fork (scheduling, faults, workers, ...; "
                            "what `loomsim explore` re-keys one at a time); the others keep the seed's draws")
    add_run_options(run_p)
    return run_p


def parse_branch_key(text: str) -> int:
    try:
        value = parse_whole(text)
    except NumberError:
        raise argparse.ArgumentTypeError(f"invalid branch {text!r}: expected a whole number, e.g. --branch 3") from None
    if not 0 <= value <= BRANCH_KEY_MAX:
        raise argparse.ArgumentTypeError(f"invalid branch {text!r}: must be between 0 and {BRANCH_KEY_MAX}")
    return value


def parse_branch_streams(text: str) -> tuple[str, ...]:
    from sim.rng import KEPT_AT_BRANCH

    names = [part.strip() for part in text.split(",")]
    for name in names:
        if not name or "/" in name or not name.isprintable() or name != name.strip():
            raise argparse.ArgumentTypeError(f"invalid stream family {name!r}: expected names like scheduling,faults")
        if name in KEPT_AT_BRANCH:
            raise argparse.ArgumentTypeError(f"invalid stream family {name!r}: a branch never re-keys "
                                             f"{', '.join(sorted(KEPT_AT_BRANCH))}")
    return tuple(sorted(set(names)))


def with_branch(opts: ScenarioOptions, args: argparse.Namespace) -> ScenarioOptions:
    """``opts`` with the branch ``--fork-at T --branch K`` names (both or
    neither; T before the run's end), checked as a usage error."""
    fork_at_ms, key = getattr(args, "fork_at", None), getattr(args, "branch", None)
    streams = getattr(args, "branch_streams", None)
    if fork_at_ms is None and key is None:
        if streams is not None:
            raise UsageError("--branch-streams needs --fork-at T --branch K: the branch whose streams it names")
        return opts
    if fork_at_ms is None:
        raise UsageError("--branch K needs --fork-at T: the simulated instant the branch parts from the seed's run")
    if key is None:
        raise UsageError("--fork-at T needs --branch K: which branch's future to run after T "
                         "(a sweep forks many: loomsim sweep --fork-at T --branches N)")
    check_fork_at(fork_at_ms, opts.duration_ms)
    return attrs.evolve(opts, branch=Branch(fork_at_ms, key, streams or ()))


def check_fork_at(fork_at_ms: int, duration_ms: int) -> None:
    """A fork instant must lie before the run's end."""
    if fork_at_ms >= duration_ms:
        raise UsageError(f"--fork-at {format_duration_ms(fork_at_ms)} is not before the run's end "
                         f"(duration {format_duration_ms(duration_ms)}): branch earlier or run longer")


def parse_line(argv: Sequence[str]) -> argparse.Namespace:
    """A ``run`` command line (``[--scenarios MODULE ...] run SCENARIO
    ...``) parsed as ``loomsim`` parses it, the scenario modules it names
    loaded."""
    _, args = parse(argv, (add_parser,))
    return args


def command(args: argparse.Namespace, *, replaying: bool = False) -> int:
    """``loomsim run``. ``replaying``: ``args.faults`` is the repro file
    ``loomsim repro`` replays (a replay writes next to its file if it can,
    and warns if not)."""
    from scenarios import registry

    try:
        scenario = registry.get(args.scenario)
    except registry.UnknownScenario as error:
        raise UsageError(str(error)) from None
    if not replaying:
        check_repro_dir(args.repro_dir)
    check_report_option(args.report)
    return _run(scenario, args, args.argv, replaying=replaying)


def replay(argv: Sequence[str]) -> int:
    """Run the ``run`` command line a repro file stands for as its replay
    (``loomsim repro``): compared with its recording."""
    return command(parse_line(argv), replaying=True)


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
    share = now_ms / end_ms if end_ms > 0 else 1.0
    eta = format_wall_s(elapsed_s / share - elapsed_s) if share > 0 else "unknown"
    return (f"loomsim: progress: simulated {format_span_ms(now_ms)} of {format_span_ms(end_ms)} "
            f"({100 * share:.1f}%), {format_wall_s(elapsed_s)} wall, ETA {eta}")


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def format_wall_s(seconds: float) -> str:
    """Wall seconds as ``45s``, ``3m 05s``, ``1h 02m``."""
    if seconds < 10:
        return f"{max(0.0, seconds):.1f}s"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds // 60 % 60:02d}m"


# What ``run --faults REPRO`` keeps from its own command line whatever the file says.
_NOT_ADOPTED = ("command", "scenario", "seed", "faults", "repro_dir", "json", "trace", "db", "scenarios", "report",
                "argv")


def _given_options(argv: list[str]) -> set[str]:
    """The ``run`` options (their dests) ``argv`` sets explicitly."""
    parser, sub = root_parser()
    run_p = add_parser(sub)
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
    recorded = parse_line(repro_argv(args.faults, json_output=args.json, scenario_modules=args.scenarios))
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
    opts = with_branch(run_options(scenario, args), args)
    # Created at the run's first event (a run refused before it creates
    # nothing), at a free name: an existing trace is never overwritten.
    trace_file = None if not args.trace else NewFileStream(check_new_file("--trace", args.trace))
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
    command, repro_path, body = recorded(scenario, args, opts, result, mutant)
    untested = None
    if mutant is not None:
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


def recorded(scenario: Any, args: argparse.Namespace, opts: ScenarioOptions, result: RunResult,
             mutant: Any) -> tuple[str, str | None, dict[str, Any]]:
    """What a finished run leaves: its repro command, its repro file (a
    failure's, new, never over an existing one; a replay's is the file it
    replays) and its ``--json`` object. ``opts`` as the command must name
    them (a forked branch: with its own key)."""
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
            repro_path = write_repro_or_warn(result, command, args.repro_dir, scenario_modules=args.scenarios)
    return command, repro_path, result_json(result, command, repro_path)


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


def write_repro_or_warn(result: RunResult, command: str | Callable[[str], str], directory: str,
                 **kwargs: Any) -> str | None:
    """Write the failure's repro file; on failure to write, say so and go on."""
    try:
        return write_repro(result, command, directory, **kwargs)
    except OSError as error:
        path = kwargs.get("path") or os.path.join(directory, repro_filename(result.scenario, result.seed,
                                                                            branch_key(result.config)))
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
    (``enabled_in``: the same reading a sweep makes of the JSON)."""
    kinds_on, failpoints_on = enabled_in({"config": result.config, "coverage": result.coverage})
    never = result.coverage.get("never_fired", [])
    on = kinds_on | failpoints_on
    return {"never_fired_enabled": [name for name in never if name in on],
            "switched_off": [name for name in never if name not in on]}


def enabled_in(result: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The fault kinds and failpoints this seed's run could fire, from its
    JSON: its swarm's choices (``config.swarm``), pinned rates
    (``config.rates``: the rated point kinds are on whatever the swarm
    says), and, where the run reports it, the kinds its plan armed
    (``coverage.armed``). Without a swarm space the run lists only the
    kinds its plan armed: all enabled."""
    config = result.get("config") or {}
    cov = result.get("coverage") or {}
    kinds = list(cov.get("fault_kinds", {}))
    failpoints = list(cov.get("failpoints", {}))
    swarm = config.get("swarm")
    if swarm is None:
        on = set(kinds)
        swarm_failpoints: Any = "all"
        failpoint_chosen = FAILPOINT_CRASH in on
    else:
        chosen = set(swarm.get("fault_kinds", ()))
        on = {k for k in kinds if k in chosen}
        rates = config.get("rates")
        if rates is not None:  # pinned: the rated point kinds, the swarm's timed kinds
            on = {k for k in kinds if (k in chosen if k in TIMED_FAULT_KINDS else rates.get(k, 0) > 0)}
        swarm_failpoints = swarm.get("failpoints", "all")
        failpoint_chosen = FAILPOINT_CRASH in chosen
    armed = cov.get("armed")
    if armed is not None:
        on &= set(armed)
    if FAILPOINT_CRASH not in on:
        fps: set[str] = set()
    elif swarm_failpoints == "all" or not failpoint_chosen:
        # The full mix, or failpoint-crash pinned by --rate while the swarm
        # left it off: every failpoint at the pinned rate.
        fps = set(failpoints)
    else:
        fps = {name for name in failpoints if swarm_failpoints.get(name, 0) > 0}
    return on, fps
