"""``loomsim explore SCENARIO... (--runs N | --budget D) --seed S``: a deterministic coverage-guided search.

The engine is ``sim.explore``; this module parses the command, gives the
engine its feedback observers (ledger transitions, ``sim.face.
explore_feedback``; model branch arcs on Python 3.12+, ``sim.arcs``), runs
its batches in ``--jobs`` processes (forked; SIGINT or SIGTERM stops them
and the summary of the batches that finished is printed), writes a failing
run's repro file (a new file, never over an existing one; a run that pinned
a fault script gets a command replaying its repro file), keeps the
``--corpus`` directory (``sim.face.corpus``) and prints the summary
(``loomsim-explore/2``). It measures CPU and wall time (``measured``),
which nothing in the search reads but ``--budget``.
Exit codes as ``run``/``sweep``: 0 every run passed, 1 a failure found,
2 a usage error, 128 + the signal when stopped.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

import attrs

from sim.explore import BATCH, Entry, Input, Observed, Outcome, explore, prefix_of, run_input
from sim.face.children import POLL_S, Interrupted, check_interrupted, fork, forwarding_signals, spawning
from sim.face.options import UsageError, check_repro_dir, check_report_option, parse_count, parse_duration, parse_seed
from sim.face.repro_file import repro_command
from sim.face.run import write_repro_or_warn

STORES = ("memory", "sqlite")
FORMAT = "loomsim-explore/2"
RAREST_PRINTED = 5
ADDED_PRINTED = 3
REAP_S = 5.0  # how long a signalled worker may take to exit before it is killed


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("explore", help="coverage-guided search of scenarios' seeds, knobs, durations and fault scripts")
    p.add_argument("names", nargs="+", metavar="scenario", help="scenario name(s) (see `loomsim list`)")
    p.add_argument("--runs", type=parse_count, default=None, metavar="N",
                   help="runs to make (at least 1; split evenly between the scenarios)")
    p.add_argument("--budget", type=parse_duration, default=None, metavar="D",
                   help="wall time to search for instead of --runs (10m, 1h; split evenly between the scenarios): "
                        "stops at the end of the batch that spends it, and prints the --runs command that "
                        "replays the same search")
    p.add_argument("--seed", type=parse_seed, required=True, help="the search's own seed: same seed, same search")
    p.add_argument("--jobs", type=parse_count, default=1, metavar="N",
                   help="worker processes running each batch (default 1; the search is the same with any N)")
    p.add_argument("--duration", type=parse_duration, default=None, metavar="D",
                   help="base simulated duration of a run (mutations double it, up to 4x; default: the scenario's "
                        "sweep duration, so a fresh seed runs as a sweep runs it)")
    p.add_argument("--store", default="memory", metavar="STORE", help="memory or sqlite (default memory)")
    p.add_argument("--corpus", default=None, metavar="DIR",
                   help="keep the corpus in DIR as JSON files (an existing corpus there is replayed first)")
    p.add_argument("--repro-dir", default=".", metavar="DIR", help="where a failure's repro file is written")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--mutant", default=None, metavar="NAME",
                   help="search with the planted bug NAME of the mutant catalogue (see loomsim mutants --list)")
    p.add_argument("--mutants", default=None, metavar="MODULE",
                   help="also know the mutants of MODULE's MUTANTS list (a user's, for --mutant)")
    p.add_argument("--fresh-only", action="store_true",
                   help="no mutations: every run a fresh seed, as a sweep of as many runs (its feedback is the "
                        "baseline a search is measured against)")
    p.add_argument("--fork-at", type=parse_duration, default=None, metavar="T",
                   help="with --branches K: fresh inputs are K branches of each seed forked at simulated time T "
                        "(run --fork-at T --branch k), the seed's prefix run once per batch and forked (in-memory "
                        "store only)")
    p.add_argument("--branches", type=parse_count, default=None, metavar="K",
                   help="with --fork-at: branches per seed (fresh input f is branch f %% K of seed S + f // K)")
    p.add_argument("--report", default=None, metavar="DIR",
                   help="write the search's report into DIR (Markdown and HTML: the feedback curve, the corpus by "
                        "what each entry added, the rarest features, the transitions never taken)")
    return p


def observers_for(model_root: str | None = None) -> Callable[[], Sequence[Any]]:
    """The feedback observers of one run: ledger transitions, and model arcs where ``sys.monitoring`` exists."""
    from sim import arcs
    from sim.face.explore_feedback import LedgerTransitions

    root = model_root or os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                      "model")
    if arcs.available():
        return lambda: (LedgerTransitions(), arcs.ArcObserver(root))
    return lambda: (LedgerTransitions(),)


def universes(outcome: Outcome) -> dict[str, tuple[str, ...]]:
    """The families with a known universe, for ``never_taken``: ledger
    transitions, once the search reached any (a scenario without a ledger
    has no transitions to miss)."""
    from sim.face.explore_feedback import TRANSITION_UNIVERSE

    if any(name.startswith("transition:") for name in outcome.counts):
        return {"transition": TRANSITION_UNIVERSE}
    return {}


def _corpus_inputs(directory: str, scenario: Any, store: str) -> list[Input]:
    from faults.script import ScriptError, parse_script
    from sim.face.corpus import CorpusError, check_directory, read_corpus
    from sim.scenario import Branch

    space = scenario.swarm_space
    knob_names = {k.name for k in space.knobs} if space is not None else set()
    try:
        check_directory(directory, create=True)
        bodies = read_corpus(directory, scenario.name)
    except CorpusError as error:
        raise UsageError(f"--corpus: {error}") from None
    inputs = []
    for body in bodies:
        if body["store"] != store:
            continue
        unknown = sorted(set(body["knobs"]) - knob_names)
        if unknown:
            raise UsageError(f"--corpus {directory!r}: an entry pins knob(s) {', '.join(unknown)} that "
                             f"{scenario.name} does not have")
        script = None
        if "fault_script" in body:
            try:
                script = parse_script(body["fault_script"])
            except ScriptError as error:
                raise UsageError(f"--corpus {directory!r}: {error}") from None
        branch = body.get("branch")
        inputs.append(Input(seed=body["seed"], knobs=tuple(sorted(body["knobs"].items())),
                            duration_ms=body["duration_ms"], fault_script=script,
                            branch=None if branch is None else Branch.from_json(branch)))
    return inputs


def _entry_writer(directory: str | None, scenario: str, store: str) -> Callable[[Entry], str | None]:
    from faults.script import script_to_json
    from sim.face.corpus import entry_filename, entry_json, write_entry

    def on_entry(entry: Entry) -> str | None:
        if directory is None:
            return None
        item = entry.input
        body = entry_json(scenario=scenario, store=store, seed=item.seed, knobs=dict(item.knobs),
                          duration_ms=item.duration_ms, added=entry.added,
                          fault_script=None if item.fault_script is None else script_to_json(item.fault_script),
                          branch=None if item.branch is None else item.branch.as_json())
        write_entry(directory, body)  # None: the same input is there already (kept, never rewritten)
        return os.path.join(directory, entry_filename(body))

    return on_entry


# --- running a batch in processes ---------------------------------------------------------


def _worker(scenario: Any, index: int, item: Input, store: str, observers: Any, path: str) -> None:
    """In a forked child: run ``item``, pickle ``(index, Observed)`` to ``path``; never returns."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # finally blocks run (temporary databases go)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        done = (index, run_input(scenario, item, store, observers, time.process_time))
        with open(path, "wb") as handle:
            pickle.dump(done, handle, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:  # noqa: BLE001 - a child never returns into the parent's code
        code = 3
    finally:
        sys.stdout.flush()
        os._exit(code)


def _prefix_worker(scenario: Any, items: Sequence[Input], indexes: list[int], store: str, observers: Any,
                   jobs: int, workdir: str) -> None:
    """In a forked child: run the branches ``items[i]`` (``i`` in ``indexes``,
    one prefix) to their fork instant once, then fork a child per branch
    (``Forker``); each child runs its branch to the end and pickles
    ``(index, Observed)``; this process writes its own CPU to
    ``prefix-<first index>.json`` when every branch has ended. Never returns."""
    from sim.face.branches import Forked, Forker

    code = 0
    forker = Forker(tuple(range(len(indexes))), jobs, workdir)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)

        def at_fork() -> int:
            position = forker.at_fork()
            return items[indexes[position]].branch.key  # type: ignore[union-attr]

        try:
            observed = run_input(scenario, items[indexes[0]], store, observers, time.process_time, at_fork=at_fork)
        except Forked as done:  # this process ran the prefix; its children ran the branches
            with open(os.path.join(workdir, f"prefix-{indexes[0]}.json"), "w", encoding="utf-8") as handle:
                json.dump({"prefix_cpu_s": done.prefix_cpu_s}, handle)
        else:
            assert forker.key is not None, "a branch input ran without forking"
            index = indexes[forker.key]
            path = os.path.join(workdir, f"{index}.pickle")
            with open(path + ".part", "wb") as handle:
                pickle.dump((index, observed), handle, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(path + ".part", path)
    except BaseException:  # noqa: BLE001 - a child never returns into the parent's code
        code = 3
    finally:
        sys.stdout.flush()
        os._exit(code)


class WorkerFailed(RuntimeError):
    """A worker process ended without writing its result (the harness failed: exit 3)."""

    name = "WorkerFailed"


class ForkedBatches:
    """Runs each input of a batch in a process of its own, forked from this
    one (which runs no simulation itself), at most ``jobs`` at once; answers
    in input order. Every run so starts from the same process state,
    whatever ran before it and however many jobs there are: what a module
    of the model keeps between calls (a memo) cannot make one run's
    feedback depend on another's. Polls for a signal (``check_interrupted``)
    while it waits; on the way out, by any path, no child is left
    (``_reap``)."""

    def __init__(self, scenario: Any, store: str, observers: Any, jobs: int) -> None:
        self.scenario, self.store, self.observers, self.jobs = scenario, store, observers, jobs

    def __call__(self, items: Sequence[Input]) -> list[Observed]:
        workdir = tempfile.mkdtemp(prefix="loomsim-explore-")
        running: dict[int, str] = {}
        error: BaseException | None = None
        try:
            answers: dict[int, Observed] = {}
            # Branches of one run (``explore --fork-at``'s fresh inputs): its
            # prefix runs once, in a process that forks the branches.
            groups: dict[Input, list[int]] = {}
            for index, item in enumerate(items):
                prefix = prefix_of(item)
                if prefix is not None and self.store == "memory":
                    groups.setdefault(prefix, []).append(index)
            shared = [indexes for indexes in groups.values() if len(indexes) > 1]
            for indexes in shared:
                self._run_shared(items, indexes, workdir, answers)
            in_shared = {index for indexes in shared for index in indexes}
            upcoming = [(index, item) for index, item in enumerate(items) if index not in in_shared]
            while upcoming or running:
                check_interrupted()
                while upcoming and len(running) < self.jobs:
                    index, item = upcoming.pop(0)
                    path = os.path.join(workdir, f"{index}.pickle")
                    with spawning():
                        sys.stdout.flush()
                        sys.stderr.flush()
                        pid = fork()
                        if pid == 0:
                            _worker(self.scenario, index, item, self.store, self.observers, path)
                        running[pid] = path
                for pid in list(running):
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done == 0:
                        continue
                    path = running.pop(pid)
                    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0 or not os.path.exists(path):
                        raise WorkerFailed(f"an explore worker process ended without its result "
                                           f"(wait status {status})")
                    with open(path, "rb") as handle:
                        index, observed = pickle.load(handle)
                    answers[index] = observed
                if running:
                    time.sleep(POLL_S)
            return [answers[i] for i in range(len(items))]
        except BaseException as failure:
            error = failure
            raise
        finally:
            self._reap(running, error)
            for name in os.listdir(workdir):
                os.remove(os.path.join(workdir, name))
            os.rmdir(workdir)

    def _run_shared(self, items: Sequence[Input], indexes: list[int], workdir: str,
                    answers: dict[int, Observed]) -> None:
        """One process runs the branches' common prefix and forks one child
        per branch (``sim.face.branches.Forker``, at most ``jobs`` alive);
        each child's answer is its branch's, with an equal share of the
        prefix's CPU added. Nothing else runs meanwhile."""
        paths = [os.path.join(workdir, f"{index}.pickle") for index in indexes]
        with spawning():
            sys.stdout.flush()
            sys.stderr.flush()
            pid = fork()
            if pid == 0:
                _prefix_worker(self.scenario, items, indexes, self.store, self.observers, self.jobs, workdir)
        running = {pid: workdir}
        error: BaseException | None = None
        try:
            while True:
                check_interrupted()
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                time.sleep(POLL_S)
        except BaseException as failure:
            error = failure
            raise
        finally:
            if error is not None:
                self._reap(running, error)
        prefix_path = os.path.join(workdir, f"prefix-{indexes[0]}.json")
        missing = [p for p in paths if not os.path.exists(p)]
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0 or missing or not os.path.exists(prefix_path):
            raise WorkerFailed(f"an explore prefix process ended without its branches' results (wait status "
                               f"{status}, {len(missing)} of {len(paths)} missing)")
        with open(prefix_path, encoding="utf-8") as handle:
            share_s = json.load(handle)["prefix_cpu_s"] / len(indexes)
        for path in paths:
            with open(path, "rb") as handle:
                index, observed = pickle.load(handle)
            answers[index] = attrs.evolve(observed, cpu_s=round(observed.cpu_s + share_s, 6))

    @staticmethod
    def _reap(running: dict[int, str], error: BaseException | None) -> None:
        signum = error.signum if isinstance(error, Interrupted) else signal.SIGKILL
        for pid in running:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + REAP_S
        for pid in list(running):
            while True:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(POLL_S)
        if isinstance(error, Interrupted):
            error.stopped += len(running)


def _serial(scenario: Any, store: str, observers: Any) -> Callable[[Sequence[Input]], list[Observed]]:
    def execute(items: Sequence[Input]) -> list[Observed]:
        out = []
        for item in items:
            check_interrupted()
            out.append(run_input(scenario, item, store, observers, time.process_time))
        return out

    return execute


# --- the command ---------------------------------------------------------------------------------


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


def command(args: argparse.Namespace) -> int:
    from scenarios import registry

    scenarios = []
    for name in args.names:
        try:
            scenarios.append(registry.get(name))
        except registry.UnknownScenario as error:
            raise UsageError(str(error)) from None
    if len({s.name for s in scenarios}) != len(scenarios):
        raise UsageError("a scenario is named twice")
    if (args.runs is None) == (args.budget is None):
        raise UsageError("give exactly one of --runs N and --budget D")
    if args.runs is not None and args.runs < len(scenarios):
        raise UsageError(f"--runs {args.runs}: expected at least 1 per scenario ({len(scenarios)})")
    if args.budget is not None and args.budget <= 0:
        raise UsageError("--budget: expected a positive duration")
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: expected at least 1")
    if args.store not in STORES:
        raise UsageError(f"--store {args.store!r}: expected memory or sqlite")
    from sim.face.branches import check_branch_options

    for scenario in scenarios:
        check_branch_options(args, args.duration or scenario.sweep_ms, sweep=False)
    check_repro_dir(args.repro_dir)
    check_report_option(args.report)
    replays = {s.name: (_corpus_inputs(args.corpus, s, args.store) if args.corpus is not None else [])
               for s in scenarios}
    from faults import mutants as mx
    from sim.face.mutants import apply_mutant

    args.db = None  # explore runs on a fresh store per run: no --db
    mutant = apply_mutant(args) or mx.current()
    runs = _split(args.runs, len(scenarios)) if args.runs is not None else [None] * len(scenarios)
    budget_s = None if args.budget is None else args.budget / 1000.0 / len(scenarios)
    summaries: list[dict[str, Any]] = []
    interrupted: Interrupted | None = None
    try:
        with forwarding_signals():
            for scenario, scenario_runs in zip(scenarios, runs):
                summary, interrupted = _search(scenario, args, scenario_runs, budget_s, replays[scenario.name],
                                               mutant)
                summaries.append(summary)
                if interrupted is not None:
                    break
    except WorkerFailed as error:  # the harness failed, not the system: exit 3, as a sweep's broken child
        print(f"loomsim: {error}", file=sys.stderr)
        return 3
    if args.json:
        commands = [s.pop("replay_command") for s in summaries if "replay_command" in s]
        body = summaries[0] if len(summaries) == 1 and len(scenarios) == 1 else {
            "format": FORMAT, "seed": args.seed, "scenarios": summaries}
        print(json.dumps(body, sort_keys=True))
        for line in commands:  # not part of the summary's schema: said beside it
            print(f"loomsim: the same search, replayed: {line}", file=sys.stderr)
    else:
        for summary in summaries:
            _print_summary(summary)
    if args.report is not None:
        _write_reports(args.report, summaries, to_stderr=args.json)
    if interrupted is not None:
        stopped = f"; stopped {interrupted.stopped} running worker(s)" if interrupted.stopped else ""
        print(f"loomsim: interrupted by {signal.Signals(interrupted.signum).name}{stopped}; the summary is of "
              f"the batches that finished", file=sys.stderr, flush=True)
        return 128 + interrupted.signum
    return 1 if any(s["failures"] for s in summaries) else 0


def _search(scenario: Any, args: argparse.Namespace, runs: int | None, budget_s: float | None,
            replay: list[Input], mutant: Any) -> tuple[dict[str, Any], Interrupted | None]:
    duration_ms = args.duration or scenario.sweep_ms
    observers = observers_for()

    def on_failure(item: Input, opts: Any, result: Any) -> tuple[str, str | None]:
        if mutant is not None:
            result.config["mutant"] = mutant.name
        name = None if mutant is None else mutant.name
        if item.fault_script is None:
            cmd: Any = repro_command(scenario.name, opts, explicit_duration=True, mutant=name)
        else:  # the run's faults came from its script: the replay reads it from the repro file
            def cmd(path: str) -> str:
                return repro_command(scenario.name, opts, explicit_duration=True, mutant=name, faults_path=path)
        path = write_repro_or_warn(result, cmd, args.repro_dir)
        return (cmd if isinstance(cmd, str) else cmd(path or "REPRO_FILE")), path

    # Without fork (not a POSIX system): one run after the other, here.
    execute = (ForkedBatches(scenario, args.store, observers, args.jobs) if hasattr(os, "fork")
               else _serial(scenario, args.store, observers))
    started_s, cpu_started_s = time.perf_counter(), _cpu_s()

    def spent(_outcome: Outcome) -> bool:
        return budget_s is not None and time.perf_counter() - started_s >= budget_s

    outcome = Outcome()
    interrupted = None
    try:
        explore(scenario, runs=runs if runs is not None else 2 ** 62, seed=args.seed, duration_ms=duration_ms,
                store=args.store, replay=replay, on_failure=on_failure,
                on_entry=_entry_writer(args.corpus, scenario.name, args.store), observers=observers,
                execute=execute, stop=spent if budget_s is not None else None, into=outcome,
                fresh_only=args.fresh_only, fork_at_ms=args.fork_at, branches=args.branches or 0)
    except Interrupted as error:
        interrupted = error
    summary = {"format": FORMAT, "scenario": scenario.name, "seed": args.seed, "store": args.store,
               "fresh_only": args.fresh_only, **outcome.as_json(universes(outcome))}
    if args.fork_at is not None:
        summary["branches"] = {"fork_at_ms": args.fork_at, "per_seed": args.branches}
    summary["measured"] = {"cpu_s": round(_cpu_s() - cpu_started_s, 3), "cpu_s_after_run": outcome.cpu_s_after_run,
                           "wall_s": round(time.perf_counter() - started_s, 3)}
    if budget_s is not None:
        summary["replay_command"] = replay_command(scenario.name, args, outcome.runs - len(replay), duration_ms,
                                                   bool(replay))
    return summary, interrupted


def replay_command(name: str, args: argparse.Namespace, runs: int, duration_ms: int, replayed: bool) -> str:
    """The ``--runs`` command that makes the same search as a budgeted one."""
    from sim.clock import format_duration_ms

    command = (f"loomsim explore {name} --runs {max(1, runs)} --seed {args.seed} "
               f"--duration {format_duration_ms(duration_ms)} --store {args.store}")
    if args.fresh_only:
        command += " --fresh-only"
    if args.fork_at is not None:
        command += f" --fork-at {format_duration_ms(args.fork_at)} --branches {args.branches}"
    if replayed:
        command += " --corpus COPY (a copy of the corpus directory as it was before this search)"
    return command


def _cpu_s() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _write_reports(directory: str, summaries: list[dict[str, Any]], *, to_stderr: bool) -> None:
    """Each scenario's search report, Markdown and HTML, as new files in
    ``directory``; one that cannot be written is a warning (the summary and
    any repro file are out already)."""
    from reports.explore import render

    out = sys.stderr if to_stderr else sys.stdout
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        print(f"loomsim: warning: could not make the report directory {directory!r}: {error.strerror or error}",
              file=sys.stderr)
        return
    for summary in summaries:
        stem = os.path.join(directory, f"explore-{summary['scenario']}-seed{summary['seed']}")
        for suffix in (".md", ".html"):
            try:
                path = render(summary, stem + suffix)
            except (OSError, ValueError) as error:
                print(f"loomsim: warning: could not write the explore report {stem + suffix!r}: "
                      f"{getattr(error, 'strerror', None) or error}", file=sys.stderr)
                continue
            print(f"report: {path}", file=out, flush=True)


def _print_summary(summary: dict[str, Any]) -> None:
    corpus = summary["corpus"]
    print(f"explore {summary['scenario']} --seed {summary['seed']}: {summary['runs']} run(s) in batches of "
          f"{summary['batch']}, corpus {len(corpus)} entr{'y' if len(corpus) == 1 else 'ies'}, "
          f"{len(summary['features'])} feature(s) reached, {summary['measured']['cpu_s']:.1f} s CPU")
    families = ", ".join(f"{name} {f['reached']}" + (f"/{f['universe']}" if f["universe"] is not None else "")
                         for name, f in summary["families"].items())
    print(f"  families: {families}")
    for index, entry in enumerate(corpus):
        knobs = "".join(f" {k}={v}" for k, v in entry["knobs"].items())
        script = "" if entry["script_entries"] is None else f", script of {entry['script_entries']}"
        origin = entry["mutation"] + ("" if entry["parent"] is None else f" of #{entry['parent']}")
        shown = sorted(entry["added"], key=lambda name: (name.startswith("arc:"), name))  # arcs are many: last
        added = ", ".join(shown[:ADDED_PRINTED]) + (
            f", +{len(entry['added']) - ADDED_PRINTED} more" if len(entry["added"]) > ADDED_PRINTED else "")
        print(f"  #{index} run {entry.get('run', '?')} {origin}: seed {entry['seed']} {entry['duration_ms']}ms"
              f"{knobs}{script}: +{len(entry['added'])} ({added})")
    if summary["rarest"]:
        print("  rarest: " + ", ".join(f"{name} ({count})" for name, count in summary["rarest"][:RAREST_PRINTED]))
    if summary["never_taken"]:
        print(f"  never taken: {len(summary['never_taken'])} of the known universes (--json lists them)")
    if "replay_command" in summary:
        print(f"  the same search, replayed: {summary['replay_command']}")
    if not summary["failures"]:
        print("no failures")
    for finding in summary["failures"]:
        print(f"FAILURE ({finding['status']}: {', '.join(finding['violations']) or '-'}): {finding['repro_command']}")
        if finding["repro_file"]:
            print(f"  repro file: {finding['repro_file']}")
