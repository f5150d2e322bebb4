"""The command line's options: the parser, the types of its values, usage errors, and what a run's options are.

The one options object every command reads its shared flags through.
``root_parser`` makes ``loomsim``'s parser with its global options; each
command's module adds its own subcommand (``add_parser(sub)``), and
``parse`` (given those) loads the user's scenario modules first (their
parameters are flags). ``add_run_options`` adds the flags ``run`` and
``sweep`` share. The value types (``parse_seed``, ``parse_seed_range``,
``parse_duration``, ...) raise ``argparse.ArgumentTypeError``; everything
else the user got wrong is a ``UsageError``: one line, exit 2.
``run_options`` builds a run's ``ScenarioOptions`` from its command line
(``run``, and a saved failure replayed in process).
``write_report_or_warn`` writes a command's report (``--report DIR``),
warning rather than failing.

The commands are their own modules (``sim.face.cli`` dispatches to them);
this module imports none of them.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, Callable, Iterable, NoReturn, Sequence

from faults.script import ScriptError, load_script
from sim.clock import DurationError, parse_duration_ms
from sim.face import discovery
from sim.face.repro_file import is_repro_file, param_flag, read_repro
from sim.numbers import NumberError, parse_decimal, parse_whole
from sim.scenario import ScenarioOptions

PROGRESS_EVERY_S = 10.0  # a long run's progress line on stderr, every so many wall seconds
EPILOG = """\
exit codes: 0 pass, 1 an invariant violated (sweep: a seed failed; with
--require-coverage also a coverage gap; repro: also a recorded failure that
did not recur; run --mutant: also a mutant whose code never ran; shrink:
the shrunk run it wrote fails), 2 usage
error, 3 infrastructure error (a sweep's child crashed or printed no
result), 130/143 stopped by SIGINT/SIGTERM.

fault kinds (--faults-enable/--faults-disable/--rate KIND=P):
  {kinds}
each scenario's fault kinds, failpoints, workload switches and knobs
(--knob NAME=VALUE): loomsim list --faults [SCENARIO]
"""
# The largest seed: any whole number would hash into streams (``sim.rng``), but a
# seed is also an SQLite INTEGER and a JSON number other tools read: signed 64 bits.
SEED_MAX = 2**63 - 1
NAMED_STORES = ("memory", "sqlite")
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
# A user's store adapter: a factory in an importable module (loaded and
# validated by the scenario's system, which raises SetupError).
STORE_FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
SCENARIOS_FLAG = "--scenarios"


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parse_seed(text: str) -> int:
    try:
        value = parse_whole(text)
    except NumberError:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: expected a whole number, e.g. --seed 1") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: must be between 0 and 2**63-1")
    return value


def parse_duration(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except DurationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_count(text: str) -> int:
    try:
        return parse_whole(text)
    except NumberError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: expected a whole number") from None


def parse_rate(text: str) -> tuple[str, float]:
    from faults.kinds import ALL_FAULT_KINDS

    kind, sep, value = text.partition("=")
    if not sep or kind not in ALL_FAULT_KINDS:
        raise argparse.ArgumentTypeError(f"invalid rate {text!r}: expected KIND=PROBABILITY with KIND one of "
                                         f"{', '.join(ALL_FAULT_KINDS)}")
    try:
        rate = parse_decimal(value)
    except NumberError:
        rate = -1.0
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"invalid rate {text!r}: the probability per hit must be in [0, 1]")
    return kind, rate


def parse_knob(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"invalid knob {text!r}: expected NAME=VALUE")
    try:
        return name, parse_whole(value)
    except NumberError:
        raise argparse.ArgumentTypeError(f"invalid knob {text!r}: the value must be a whole number") from None


def check_schedule(spec: str) -> str:
    from sim.interleave import parse_schedule

    try:
        parse_schedule(spec)
    except ValueError as error:
        raise UsageError(f"--schedule: {error}") from None
    return spec


def parse_store(text: str) -> str:
    if text in NAMED_STORES or STORE_FACTORY.fullmatch(text):
        return text
    raise argparse.ArgumentTypeError(f"invalid store {text!r}: expected memory, sqlite or MODULE:FACTORY "
                                     "(a store adapter factory, e.g. mystores:make_store)")


def parse_names(text: str) -> tuple[str, ...]:
    return tuple(sorted({name.strip() for name in text.split(",") if name.strip()}))


def root_parser() -> tuple[Parser, Any]:
    """``loomsim``'s parser with its global options and no command yet; and
    the subparsers object each command module's ``add_parser(sub)`` adds to."""
    from faults.kinds import ALL_FAULT_KINDS

    parser = Parser(prog="loomsim", description="Deterministic simulation testing for durable agent runtimes.",
                     epilog=EPILOG.format(kinds=wrap_names(ALL_FAULT_KINDS, "  ")),
                     formatter_class=argparse.RawDescriptionHelpFormatter,
                     allow_abbrev=False)  # --scenarios is read before parsing: spelled out in full
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(SCENARIOS_FLAG, action="append", default=[], metavar="MODULE",
                        help="import MODULE (repeatable; before the command) to register its scenarios, "
                             "e.g. --scenarios examples.two_cadences; the current directory is importable")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    return parser, sub


def wrap_names(names: Sequence[str], indent: str, width: int = 76, head: str = "") -> str:
    """``names`` comma-separated, wrapped at ``width`` (continuation lines
    indented; the first after ``head``, printed before it)."""
    lines: list[str] = []
    line = ""
    for name in names:
        piece = name if not line else f"{line}, {name}"
        if line and len(indent if lines else head) + len(piece) > width:
            lines.append(line + ",")
            piece = name
        line = piece
    return f"\n{indent}".join([*lines, line])


def parse_progress_every(text: str) -> float:
    try:
        seconds = parse_decimal(text)
    except NumberError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"invalid progress interval {text!r}: expected seconds, a positive number")
    return seconds


def parse_seed_range(text: str) -> range:
    first, sep, last = text.partition(":")
    try:
        start = parse_whole(first)
        seeds = range(start, parse_whole(last) if sep else start + 1)
    except NumberError:
        raise argparse.ArgumentTypeError(f"invalid seeds {text!r}: expected A:B (e.g. 0:100)") from None
    if not seeds or seeds.start < 0:
        raise argparse.ArgumentTypeError(f"invalid seeds {text!r}: expected 0 <= A < B")
    if seeds.stop > SEED_MAX:  # B is exclusive; the range's size stays a machine integer
        raise argparse.ArgumentTypeError(f"invalid seeds {text!r}: expected 0 <= A < B <= 2**63-1")
    return seeds


def parse_time_budget(text: str) -> float:
    """``--time-budget S``: wall-clock seconds, a positive finite number."""
    try:
        seconds = parse_decimal(text)
    except NumberError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):  # NaN fails too
        raise argparse.ArgumentTypeError(f"invalid time budget {text!r}: expected seconds, a positive number "
                                         "(e.g. --time-budget 600)")
    return seconds


def add_run_options(run_p: argparse.ArgumentParser) -> None:
    """The options ``run`` and ``sweep`` share (a sweep passes them on to each run)."""
    run_p.add_argument("--duration", type=parse_duration, default=None,
                       help="simulated duration: 90s, 5m, 36h, 30d, 12mo (default: the scenario's)")
    run_p.add_argument("--store", type=parse_store, default="memory", metavar="STORE",
                       help="store backend: memory (default), sqlite, or MODULE:FACTORY (a store adapter factory)")
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
    run_p.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE", type=parse_knob,
                       help="pin a knob (repeatable), e.g. --knob lease_ms=15000")
    run_p.add_argument("--rate", action="append", default=[], metavar="KIND=P", type=parse_rate,
                       help="per-hit probability of a point fault kind (repeatable); any --rate replaces the "
                            "scenario's default mix, e.g. --rate ack-lost=1e-3")
    run_p.add_argument("--repro-dir", default=".", metavar="DIR",
                       help="where a failing run writes its repro file (default: current directory)")
    run_p.add_argument("--report", default=None, metavar="DIR",
                       help="also write a report into DIR (made if missing): loomsim-report.html (with the "
                            "timeline), loomsim-report.md (a CI job summary), loomsim-junit.xml, "
                            "loomsim-report.json; never over an earlier report (-2, -3, ...)")
    from scenarios import registry

    params: dict[str, list[str]] = {}
    helps: dict[str, str] = {}
    for scenario in registry.all_scenarios():
        for spec in scenario.params:
            params.setdefault(spec.name, []).append(scenario.name)
            helps.setdefault(spec.name, spec.help)
    for name in sorted(params):
        run_p.add_argument(param_flag(name), dest=name, type=parse_count, default=None,
                           help=f"{', '.join(params[name])}: {helps[name]}")


def leading_scenario_modules(argv: Sequence[str]) -> list[str]:
    """The ``--scenarios`` modules of a command line: the global options
    before the command (read before the parser is built, which needs them)."""
    modules: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        if token == SCENARIOS_FLAG:
            if index + 1 == len(argv):
                break  # the parser says what is missing
            modules.append(argv[index + 1])
            index += 2
        elif token.startswith(SCENARIOS_FLAG + "="):
            modules.append(token.partition("=")[2])
            index += 1
        elif token in ("-h", "--help", "--version"):
            index += 1
        elif token.startswith("-") and token != "--":
            raise UsageError(f"unrecognized option {token!r} before the command "
                             f"(the global options: {SCENARIOS_FLAG} MODULE, --version, -h)")
        else:
            break
    for token in argv[index + 1:]:
        if token == SCENARIOS_FLAG or token.startswith(SCENARIOS_FLAG + "="):
            raise UsageError(f"{SCENARIOS_FLAG} is a global option: give it before the command, "
                             f"e.g. loomsim {SCENARIOS_FLAG} MODULE run SCENARIO --seed 1")
    return modules


def parse(argv: Sequence[str], add_parsers: Iterable[Callable[[Any], Any]]) -> tuple[Parser, argparse.Namespace]:
    """Load the scenario modules (entry points, ``--scenarios``), then parse
    ``argv`` with the commands ``add_parsers`` add; ``args.scenarios`` is
    the modules, each once, ``args.argv`` the command line as given."""
    modules = discovery.load(leading_scenario_modules(argv))
    parser, sub = root_parser()
    for add_parser in add_parsers:
        add_parser(sub)
    args = parser.parse_args(list(argv))
    args.scenarios = list(modules)
    args.argv = list(argv)
    return parser, args


def check_new_file(flag: str, path: str) -> str:
    """Before a run: the output ``flag`` names a file in a writable directory."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a directory: expected a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path!r}: directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path!r}: directory {parent!r} is not writable")
    return path


def check_repro_dir(path: str) -> None:
    """Before a run: a failure's repro file will have somewhere to go."""
    if not os.path.isdir(path):
        raise UsageError(f"--repro-dir {path!r} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--repro-dir {path!r} is not writable")


def check_report_option(path: str | None) -> None:
    """Before a run: ``--report DIR`` exists (made now if missing) and is writable."""
    if path is None:
        return
    from reports import ReportDirError, check_report_dir

    try:
        check_report_dir(path)
    except ReportDirError as error:
        raise UsageError(f"--report {error}") from None


def write_report_or_warn(directory: str, body: dict[str, Any], *, to_stderr: bool = False) -> list[str]:
    """Write the report of ``body`` (``reports.write_report``) and print
    its line (on stderr when stdout is JSON); a failure is a warning, never
    the command's failure: the result and its repro file are out already."""
    from reports import report_line, write_report

    try:
        paths = write_report(directory, body)
    except OSError as error:
        print(f"loomsim: warning: could not write the report into {directory!r}: {error.strerror or error}",
              file=sys.stderr)
        return []
    print(report_line(paths), file=sys.stderr if to_stderr else sys.stdout, flush=True)
    return paths


def selected_scenarios(name: str | None) -> list[Any]:
    """The scenario ``name`` (a usage error if unknown), or every one for None."""
    from scenarios import registry

    if name is None:
        return registry.all_scenarios()
    try:
        return [registry.get(name)]
    except registry.UnknownScenario as error:
        raise UsageError(str(error)) from None


def scenario_params(scenario: Any, args: argparse.Namespace) -> dict[str, int]:
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


def run_store(args: argparse.Namespace) -> str:
    """The store a run uses: --db implies sqlite; a user's adapter
    (MODULE:FACTORY) gets the path as given."""
    return "sqlite" if args.db and args.store in NAMED_STORES else args.store


def run_options(scenario: Any, args: argparse.Namespace) -> ScenarioOptions:
    """The run's options from its command line (``run``, and what ``repro``
    and ``shrink`` make of a repro file)."""
    store = run_store(args)
    if store not in NAMED_STORES:
        discovery.ensure_cwd_importable()  # the adapter's module, from the user's checkout (as --scenarios)
    if args.db:
        check_db(args.db, sqlite=store == "sqlite")
    fault_script = None
    must_fire = False
    if args.faults:
        try:
            fault_script = load_script(args.faults)
        except ScriptError as error:
            raise UsageError(str(error)) from None
        must_fire = script_must_fire(args.faults)
    knobs: dict[str, int] = {}
    for name, value in args.knob:
        if name in knobs:
            raise UsageError(f"--knob {name} given twice")
        knobs[name] = value
    rates: dict[str, float] = {}
    for kind, rate in args.rate:
        if kind in rates:
            raise UsageError(f"--rate {kind} given twice")
        rates[kind] = rate
    return ScenarioOptions(seed=args.seed, duration_ms=args.duration or scenario.default_duration_ms,
                           store=store, db_path=args.db, params=scenario_params(scenario, args),
                           fault_script=fault_script, swarm=not args.no_swarm,
                           faults_enable=parse_names(args.faults_enable), faults_disable=parse_names(args.faults_disable),
                           knobs=knobs, schedule=check_schedule(args.schedule), beyond_contract=args.beyond_contract,
                           rates=rates or None, script_must_fire=must_fire)


def check_db(path: str, *, sqlite: bool) -> None:
    """Before anything opens it: ``--db`` is in a directory that exists and,
    for the SQLite store, names a new file, an empty one or an SQLite
    database (a user's adapter, MODULE:FACTORY, gets the path as given)."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"--db {path!r}: directory {parent!r} does not exist")
    if not sqlite:
        return
    if os.path.isdir(path):
        raise UsageError(f"--db {path!r} is a directory, not a database file")
    try:
        with open(path, "rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return  # a new database
    except OSError as error:
        raise UsageError(f"--db {path!r}: {error.strerror or error}") from None
    if header and header != SQLITE_HEADER:
        raise UsageError(f"--db {path!r} is not an SQLite database file")


def script_must_fire(path: str) -> bool:
    """A hand-written script's every entry must fire (a targeted test that
    fires nothing tests nothing); a repro file's recorded script is a replay
    (after a fix it may diverge), held to it only if its run was."""
    if not is_repro_file(path):
        return True
    config = read_repro(path).get("config")
    return isinstance(config, dict) and config.get("script_must_fire") is True
