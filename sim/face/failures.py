"""The failure database: every failure found is kept and replayed first, next time.

Hypothesis's example database is the model. A failing run found by
``loomsim sweep`` (the parent saves each failing seed's repro file, after
the child wrote it) or by the pytest plugin (``sim.face.pytest_plugin``) is saved
under ``.loomsim/failures/`` (relative to the current directory; else
``--failure-db DIR`` on ``sweep``, ``--loomsim-failure-db DIR`` for pytest,
or the environment variable ``LOOMSIM_FAILURE_DB``; ``none`` switches it
off). One file per failure: the repro file's content (``loomsim-repro/1``,
``sim.face.repro_file``), named ``<scenario>-<seed>-<digest>.json`` where the
digest is of the configuration and the fault script, so the same failure is
saved once however often it is found. ``loomsim run`` saves nothing: it
writes its repro file and prints it (a single run is a question the user
asked; a sweep or a test run is a search whose findings must not be lost).

The next sweep of a scenario the database holds failures for (an
all-scenario sweep: of every one), and the next pytest run of the selected
scenarios, **replay the saved failures first**, in this process
(``replay``), each with one of three outcomes:

- ``still-fails``: the replay violates an invariant (the saved one or
  another: ``Replay.invariant`` says which): a failure of the sweep or the
  test run, listed first with its repro command. The file stays.
- ``fixed``: the replay passes. The file is removed (Hypothesis deletes an
  example that no longer fails).
- ``no-longer-applies``: the saved failure cannot be replayed against the
  current code, so passing says nothing: the file is unreadable or of an
  older format; its scenario is no longer registered (nor loadable from the
  modules it records); it names a mutant, parameter, fault kind or knob the
  code no longer has; or its fault script cannot be applied. The file is
  kept, moved to ``.loomsim/stale/`` (beside ``failures/``), never dropped.

Telling "fixed" from "cannot be applied" (the rule). The replay runs the
recorded script with ``ScenarioOptions.script_must_fire`` on, so the runner
judges every entry (``sim.runner.unfired_entries``: only a run that
otherwise passed is judged). An entry can miss for two reasons. The fix
changed the path: the recorded hit of a real site is never reached, the
run having gone another way (the point of a fix): the failure is
**fixed**. Or the entry names what the run does not have at all: a site
the replay never hit (``ledger.no_such_site``: renamed or removed) or a
node that never existed (the runner's verdict says "was never hit" /
"never existed" for exactly these): the script **no longer applies**. So:
a replay that passes with every entry fired, or whose only complaint is
entries at real sites and nodes that were not reached, is fixed; one whose
``fault-script-unfired`` verdict names a missing site or node no longer
applies.

A planted bug is the code, not the input: a saved failure of a run with a
mutant replays against the code under test now (the pytest session's
``--loomsim-mutant``; a sweep runs none), so with the bug removed it passes
and is reported fixed, as when a real bug is fixed. A recorded mutant the
catalogue no longer has makes the failure stale.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Iterable, Mapping, Sequence

import attrs

from reports.verdict import STILL_FAILS
from sim.artifacts import free_path
from sim.clock import format_calendar
from sim.face.repro_file import ReproFileError, read_repro

ENV = "LOOMSIM_FAILURE_DB"
OFF = "none"
DEFAULT_ROOT = ".loomsim"
FAILURES_DIR = "failures"
STALE_DIR = "stale"
DIGEST_CHARS = 12
# A database is read whole before a sweep: past this many files the rest
# wait for the next one (each replay is a run; the newest are not favoured).
REPLAYS_MAX = 200
# ``STILL_FAILS`` is spelled by the reports, which fail a sweep on it (``reports.verdict``).
FIXED, NO_LONGER_APPLIES = "fixed", "no-longer-applies"
UNFIRED = "fault-script-unfired"
# The runner's ``fault-script-unfired`` verdict names an entry whose site
# or node the run never had with these words (``sim.runner.unfired_entries``).
_MISSING = re.compile(r"site '[^']*' was never hit|node '[^']*' never existed")
# Keys of a run's config that say where it ran, not what failed.
_ENVIRONMENT_KEYS = ("python", "loomsim")


class FailureDbError(Exception):
    """The database cannot be used (its directory cannot be made)."""


def db_root(flag: str | None = None) -> str | None:
    """The database's directory (holding ``failures/`` and ``stale/``):
    ``flag`` (``--failure-db``), else ``$LOOMSIM_FAILURE_DB``, else
    ``.loomsim``; None when switched off (``none``)."""
    chosen = flag if flag is not None else os.environ.get(ENV) or DEFAULT_ROOT
    return None if chosen == OFF else chosen


def failure_name(body: Mapping[str, Any]) -> str:
    """``<scenario>-<seed>-<digest>.json``: the digest of the configuration
    (without the Python and loomsim versions) and the fault script, so the
    same failure found twice is one file."""
    config = dict(body.get("config") or {})
    scenario = re.sub(r"[^\w.-]", "_", str(config.get("scenario", "unknown")))
    seed = config.get("seed", "x")
    what = {"config": {k: v for k, v in config.items() if k not in _ENVIRONMENT_KEYS},
            "fault_script": body.get("fault_script", [])}
    stack = body.get("stack_file")
    if isinstance(stack, dict):  # a stack file's failure: the same path with other text is another stack
        what["stack_sha256"] = stack.get("sha256")
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, ensure_ascii=True).encode()).hexdigest()
    return f"{scenario}-{seed}-{digest[:DIGEST_CHARS]}.json"


@attrs.frozen
class FailureDb:
    """The database at ``root``: ``root/failures/*.json``, ``root/stale/``."""

    root: str

    @property
    def failures_dir(self) -> str:
        return os.path.join(self.root, FAILURES_DIR)

    @property
    def stale_dir(self) -> str:
        return os.path.join(self.root, STALE_DIR)

    def save(self, repro_path: str) -> str | None:
        """Save the failure of the repro file at ``repro_path``; return the
        saved file's path (the existing one if it is saved already), None
        if the file is not a repro file. Raises ``OSError``."""
        try:
            body = read_repro(repro_path)
        except ReproFileError:
            return None
        return self.save_body(body)

    def save_body(self, body: Mapping[str, Any]) -> str:
        """Save a repro file's ``body``, once (created exclusively: a file of
        the same name holds the same failure and is kept as it is)."""
        os.makedirs(self.failures_dir, exist_ok=True)
        path = os.path.join(self.failures_dir, failure_name(body))
        text = json.dumps(dict(body), ensure_ascii=False, indent=1)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return path
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(text)
        return path

    def paths(self) -> list[str]:
        """The saved failures, by name (at most ``REPLAYS_MAX``)."""
        try:
            names = sorted(n for n in os.listdir(self.failures_dir) if n.endswith(".json"))
        except FileNotFoundError:
            return []
        return [os.path.join(self.failures_dir, n) for n in names[:REPLAYS_MAX]]

    def select(self, scenarios: Sequence[str] | None, stores: Sequence[str] | None = None) -> list[str]:
        """The saved failures of ``scenarios`` (None: all) recorded on one of
        ``stores`` (None: any), plus every file that is no repro file at all
        (it belongs to no scenario: the replay moves it to ``stale/``). A
        failure on another store (a user's adapter, when this sweep runs
        memory) is not this run's to judge: it stays saved, unreplayed."""
        chosen = []
        for path in self.paths():
            try:
                config = read_repro(path).get("config") or {}
                name, store = config.get("scenario"), config.get("store")
            except (ReproFileError, AttributeError):
                name = store = None
            if name is not None and stores is not None and store not in stores:
                continue
            if scenarios is None or name is None or name in scenarios:
                chosen.append(path)
        return chosen

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def move_stale(self, path: str) -> str:
        """Move ``path`` into ``stale/`` at a free name (never over another
        stale file); return where it went."""
        os.makedirs(self.stale_dir, exist_ok=True)
        target = os.path.join(self.stale_dir, os.path.basename(path))
        for attempt in range(1, 10_000):
            candidate = free_path(target, attempt)
            try:
                os.link(path, candidate)  # exclusive: fails if the name is taken
            except FileExistsError:
                continue
            except OSError:  # no hard links here: a copy, created exclusively
                try:
                    with open(path, "rb") as src, open(candidate, "xb") as dst:
                        dst.write(src.read())
                except FileExistsError:
                    continue
            os.remove(path)
            return candidate
        raise FileExistsError(f"{target}: no free name in {self.stale_dir}")


def open_db(flag: str | None = None) -> FailureDb | None:
    root = db_root(flag)
    return None if root is None else FailureDb(root)


# -- in-process runs ---------------------------------------------------------------------


@attrs.frozen
class InProcessRun:
    """One ``loomsim run`` in this process: its result, the command that
    reproduces it, the scenario and options the CLI built."""

    result: Any  # sim.runner.RunResult
    command: str
    scenario: Any
    opts: Any  # sim.scenario.ScenarioOptions
    args: Any  # the parsed ``run`` namespace


def run_in_process(argv: Sequence[str], *, must_fire: bool | None = None) -> InProcessRun:
    """Run ``loomsim run ...`` (``argv`` without the program name) in this
    process, the options built by the CLI's own parser and helpers, the
    mutant (``--mutant``) applied for the run and reverted after. Raises
    ``sim.face.options.UsageError`` (also for a repro file or scenario module
    that cannot be used)."""
    import sqlite3

    # By module path, as ``apply_named`` applies it: the state it keeps is that module's.
    from faults.mutants import current as current_mutant
    from faults.mutants import revert as revert_mutant
    from scenarios import registry
    from sim.face import discovery, options
    from sim.face.mutants import apply_mutant
    from sim.face.repro_file import repro_command
    from sim.face.run import parse_line
    from sim.runner import run
    from sim.scenario import SetupError

    try:
        args = parse_line(list(argv))
    except (ReproFileError, discovery.ScenarioModuleError) as error:
        raise options.UsageError(str(error)) from None
    if args.command != "run":
        raise options.UsageError(f"expected a run command line, got {args.command!r}")
    try:
        scenario = registry.get(args.scenario)
    except registry.UnknownScenario as error:
        raise options.UsageError(str(error)) from None
    mine = current_mutant() is None  # revert only what this call applied
    mutant = apply_mutant(args)
    try:
        opts = options.run_options(scenario, args)
        if must_fire is not None:
            opts = attrs.evolve(opts, script_must_fire=must_fire)
        result = run(scenario, opts)
    except SetupError as error:
        raise options.UsageError(str(error)) from None
    except sqlite3.DatabaseError as error:
        raise options.UsageError(f"database {args.db or '(temporary)'}: {error}") from None
    finally:
        if mutant is not None and mine:
            revert_mutant()
    if mutant is not None:  # as ``loomsim run`` records it: a replay runs the same bug
        result.config["mutant"] = mutant.name
        if args.mutants:
            result.config["mutants_module"] = args.mutants
    command = repro_command(scenario.name, opts, faults_path=args.faults, scenario_modules=args.scenarios,
                            mutant=None if mutant is None else mutant.name, mutants_module=args.mutants)
    return InProcessRun(result, command, scenario, opts, args)


# -- replaying saved failures ------------------------------------------------------------


@attrs.frozen
class Replay:
    """How one saved failure fared against the current code."""

    name: str                 # the saved file's name
    path: str                 # where it is now (removed when fixed)
    outcome: str              # STILL_FAILS, FIXED or NO_LONGER_APPLIES
    detail: str               # which invariant now, or why it no longer applies
    scenario: str | None = None
    seed: int | None = None
    saved_invariant: str | None = None
    invariant: str | None = None
    repro_command: str | None = None
    run: InProcessRun | None = attrs.field(default=None, eq=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The replay in a sweep's summary (``saved_failures``); one that
        still fails with when its violation came (what a report shows)."""
        violations = self.run.result.violations if self.run is not None and self.outcome == STILL_FAILS else ()
        return {"file": self.name, "path": self.path, "outcome": self.outcome, "detail": self.detail,
                "scenario": self.scenario, "seed": self.seed, "saved_invariant": self.saved_invariant,
                "invariant": self.invariant, "repro_command": self.repro_command,
                "simulated_time": format_calendar(violations[0].time_ms) if violations else None,
                "message": violations[0].message if violations else None}


def _strip_mutant(argv: Sequence[str]) -> list[str]:
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token in ("--mutant", "--mutants"):
            skip = True
        else:
            out.append(token)
    return out


def replay(path: str, *, mutant: str | None = None, mutants_module: str | None = None,
           scenario_modules: Iterable[str] = ()) -> Replay:
    """Replay the saved failure at ``path`` in this process, against the
    current code with ``mutant`` (None: the real code); classify it (the
    rule is in this module's docstring). Moves no file (``replay_saved``).
    A stack file's failure replays the stack it embeds."""
    from sim.face.repro_file import replaying_embedded

    with replaying_embedded(path):
        return _replay(path, mutant=mutant, mutants_module=mutants_module, scenario_modules=scenario_modules)


def _replay(path: str, *, mutant: str | None, mutants_module: str | None, scenario_modules: Iterable[str]) -> Replay:
    from sim.face.options import UsageError
    from sim.face.repro_file import repro_argv

    name = os.path.basename(path)

    def stale(why: str, **known: Any) -> Replay:
        return Replay(name, path, NO_LONGER_APPLIES, why, **known)

    try:
        body = read_repro(path)
    except ReproFileError as error:
        return stale(str(error))
    config = body.get("config") if isinstance(body.get("config"), dict) else {}
    violations = body.get("violations") or [{}]
    known = {"scenario": config.get("scenario"), "seed": config.get("seed"),
             "saved_invariant": violations[0].get("name") if isinstance(violations[0], dict) else None}
    saved_mutant = config.get("mutant")
    if saved_mutant:
        from faults.mutants import MutantError
        from sim.face.mutants import known_mutants

        try:
            if saved_mutant not in known_mutants(config.get("mutants_module")):
                return stale(f"its mutant {saved_mutant!r} is no longer in the catalogue", **known)
        except MutantError as error:
            return stale(str(error), **known)
    try:
        argv = _strip_mutant(repro_argv(path, json_output=False, scenario_modules=scenario_modules))
    except Exception as error:  # ReproFileError, ScenarioModuleError: an unregistered scenario and the like
        return stale(str(error).splitlines()[0] if str(error) else repr(error), **known)
    if mutant is not None:
        argv += ["--mutant", mutant] + (["--mutants", mutants_module] if mutants_module else [])
    command = f"loomsim repro {path}"
    try:
        done = run_in_process(argv, must_fire=True)
    except UsageError as error:  # a parameter, knob or fault kind the code no longer has
        return stale(str(error), **known)
    result = done.result
    if result.passed:
        return Replay(name, path, FIXED, "it passes now", **known, run=done)
    first = result.violations[0]
    if first.invariant == UNFIRED:
        missing = _MISSING.search(first.message)
        if missing:
            return stale(f"its fault script cannot be applied: {missing.group(0)} ({first.message[:200]})",
                         **known, invariant=UNFIRED, run=done)
        return Replay(name, path, FIXED, "it passes now (the run took another path: recorded faults not reached)",
                      **known, run=done)
    same = "the same invariant" if first.invariant == known["saved_invariant"] else (
        f"another invariant (saved: {known['saved_invariant']})")
    return Replay(name, path, STILL_FAILS, f"{first.invariant} ({same}): {first.message[:160]}", **known,
                  invariant=first.invariant, repro_command=command, run=done)


def settle(db: FailureDb, outcome: Replay) -> Replay:
    """Act on a replay's outcome: remove a fixed failure, move one that no
    longer applies to ``stale/``, keep one that still fails."""
    if outcome.outcome == FIXED:
        db.remove(outcome.path)
        return outcome
    if outcome.outcome == NO_LONGER_APPLIES and os.path.exists(outcome.path):
        return attrs.evolve(outcome, path=db.move_stale(outcome.path))
    return outcome


def replay_saved(db: FailureDb | None, scenarios: Sequence[str] | None, *, stores: Sequence[str] | None = None,
                 mutant: str | None = None,
                 mutants_module: str | None = None, scenario_modules: Iterable[str] = (),
                 on_replay: Any = None) -> list[Replay]:
    """Replay and settle every saved failure of ``scenarios`` (None: all);
    ``on_replay(replay)`` after each (a progress line)."""
    if db is None:
        return []
    done = []
    for path in db.select(scenarios, stores):
        outcome = settle(db, replay(path, mutant=mutant, mutants_module=mutants_module,
                                    scenario_modules=scenario_modules))
        done.append(outcome)
        if on_replay is not None:
            on_replay(outcome)
    return done


def save_sweep_failures(db: FailureDb | None, results: Iterable[Mapping[str, Any]]) -> list[str]:
    """Save the repro file of every failing seed of a sweep (the child
    JSON objects); a file that cannot be read or saved is skipped with a
    warning, never an error of the sweep."""
    import sys

    if db is None:
        return []
    saved = []
    for result in results:
        repro = result.get("repro_file")
        if not repro or result.get("status") in ("pass", "detected", "error"):
            continue
        try:
            path = db.save(repro)
        except OSError as error:
            print(f"loomsim: warning: could not save failure {repro!r} to {db.failures_dir!r}: "
                  f"{error.strerror or error}", file=sys.stderr)
            continue
        if path is not None:
            saved.append(path)
    return saved


def progress_line(outcome: Replay) -> str:
    """The line a sweep prints as each saved failure is replayed."""
    return f"[saved] {outcome.name}: {outcome.outcome.upper().replace('-', ' ')}: {outcome.detail[:160]}"


def render(replays: Sequence[Mapping[str, Any]]) -> list[str]:
    """The sweep summary's section: ``saved failures: N replayed: a still
    fail, b fixed, c no longer apply``, then a line each (still failing first)."""
    if not replays:
        return []
    count = {o: sum(1 for r in replays if r["outcome"] == o) for o in (STILL_FAILS, FIXED, NO_LONGER_APPLIES)}
    lines = [f"saved failures: {len(replays)} replayed: {count[STILL_FAILS]} still fail, {count[FIXED]} fixed, "
             f"{count[NO_LONGER_APPLIES]} no longer apply"]
    order = {STILL_FAILS: 0, NO_LONGER_APPLIES: 1, FIXED: 2}
    for r in sorted(replays, key=lambda r: order[r["outcome"]]):
        who = f"{r['scenario']} seed {r['seed']}" if r.get("scenario") is not None else r["file"]
        if r["outcome"] == STILL_FAILS:
            lines.append(f"  STILL FAILS {who}: {r['detail']}")
            lines.append(f"    reproduce: {r['repro_command']}")
        elif r["outcome"] == FIXED:
            lines.append(f"  FIXED {who}: {r['detail']} (removed {r['file']})")
        else:
            lines.append(f"  NO LONGER APPLIES {who}: {r['detail'][:200]} (kept: {r['path']})")
    return lines
