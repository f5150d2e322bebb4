"""``loomsim sweep SCENARIO --seeds A:B --fork-at T --branches K``: K futures of each seed from one prefix.

A long history costs its whole past every time it is run: day 300 of a
year costs the 299 days before it. Here each seed's process runs the
prefix to T once, then forks itself (``os.fork``: a copy-on-write, exact
copy of the single-threaded simulation) into K children, at most
``--jobs`` alive at a time. Each child re-keys the run's streams by its
branch key (``sim.runner.branch_at``, called through the runner's
``at_fork``), runs to the end, writes its result (the ``run --json``
object, with ``branch``, and a failure's repro file) to a file of its own
and leaves by ``os._exit``. A forked branch is exactly the run ``loomsim
run SCENARIO --seed S --fork-at T --branch k`` makes without a fork (its
repro command): same trace digest. The prefix never reads the key.

The sweep (``run_branches``, summed up by ``sim.face.sweep.sweep_forked``)
runs one seed process at a time (the process itself idles while its
children run, so ``--jobs`` children are the cores used); each branch is a
result of its own, ``seed S branch k``, printed as its seed finishes;
failures are saved to the failure database and replay by re-running the
prefix.

The seed process is ``python -m sim.face.branches --branches K --jobs J
-- LOOMSIM-ARGV`` (``LOOMSIM-ARGV``: ``[--scenarios M] run SCENARIO --seed
S ... --fork-at T --json``); it prints one JSON line per finished branch,
as each finishes. SIGINT or SIGTERM stop its children (killed) and it
exits 128 + the signal; the sweep reports the branches that finished.

Only the in-memory store forks: an inherited SQLite connection must never
be used or closed in a child (closing may checkpoint or remove the
parent's write-ahead log), so ``--store sqlite`` (or an adapter) with
``--fork-at`` is a usage error; ``loomsim run ... --fork-at T --branch k``
runs any store.

Part of the face: it forks processes and reads the clocks only to measure;
nothing simulated reads them.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Mapping, Sequence

import attrs

from sim.face.children import POLL_S, REAP_S, Interrupted, fork, start_module

BRANCHES_MAX = 4096  # a bound on K: more is a typo, not a sweep
EXIT_CHILD_ERROR = 3
CPU_FORMAT = "loomsim-branches-cpu/1"  # the last line of ``--cpu``


class Forked(BaseException):
    """Raised in the seed process once every branch child has ended: the
    run it was in is not this process's to finish (the children lived its
    futures). A ``BaseException``: the runner's handlers let it through."""

    def __init__(self, bodies: list[dict[str, Any]], prefix_cpu_s: float, children_cpu_s: float) -> None:
        super().__init__(f"{len(bodies)} branches")
        self.bodies = bodies
        self.prefix_cpu_s = prefix_cpu_s
        self.children_cpu_s = children_cpu_s


@attrs.define
class Forker:
    """The runner's ``at_fork`` for a seed process: fork a child per key (at
    most ``jobs`` alive), wait for them, collect what each wrote; in a
    child, return its key (``key`` is then set: this process is a branch)."""

    keys: Sequence[int]
    jobs: int
    directory: str
    on_body: Any = None  # called with each branch's body as it arrives (the seed process prints it)
    key: int | None = None
    _signal: int | None = None

    def at_fork(self) -> int:
        assert self.jobs >= 1 and len(self.keys) >= 1, (self.jobs, self.keys)
        sys.stdout.flush()
        sys.stderr.flush()
        # The prefix's objects, frozen out of the collector's reach: a
        # child's collections would otherwise write to (and so copy) every
        # page holding one. Pages stay shared until a branch changes them.
        gc.collect()
        gc.freeze()
        prefix_cpu_s = time.process_time()
        pending = list(self.keys)
        running: dict[int, int] = {}  # pid -> key
        bodies: list[dict[str, Any]] = []
        children_cpu_s = 0.0
        previous = self._record_signals()
        try:
            # Ends: each turn starts a child while fewer than ``jobs`` run or
            # reaps one; ``pending`` only shrinks and every child exits.
            while pending or running:
                if self._signal is not None:
                    raise Interrupted(self._signal)
                while pending and len(running) < self.jobs:
                    key = pending.pop(0)
                    pid = fork()
                    if pid == 0:  # the branch: from here this process lives key's future
                        self.key = key
                        for signum in (signal.SIGINT, signal.SIGTERM):
                            signal.signal(signum, signal.SIG_DFL)
                        return key
                    running[pid] = key
                pid, status, usage = os.wait4(-1, os.WNOHANG)
                if pid == 0:
                    time.sleep(POLL_S)
                    continue
                key = running.pop(pid)
                children_cpu_s += usage.ru_utime + usage.ru_stime
                body = self._body_of(key, status)
                bodies.append(body)
                if self.on_body is not None:
                    self.on_body(body)
        finally:
            if self.key is None:  # never in a child: its siblings are not its to stop
                gc.unfreeze()
                _stop(running, self._signal)
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
        raise Forked(bodies, prefix_cpu_s, children_cpu_s)

    def _record_signals(self) -> dict[int, Any]:
        previous = {}

        def record(signum: int, _frame: Any) -> None:
            if self._signal is None:
                self._signal = signum

        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) is signal.SIG_IGN:
                continue
            try:
                previous[signum] = signal.signal(signum, record)
            except ValueError:  # not the main thread
                break
        return previous

    def _body_of(self, key: int, status: int) -> dict[str, Any]:
        path = result_path(self.directory, key)
        try:
            with open(path, encoding="utf-8") as handle:
                body = json.load(handle)
            os.remove(path)
            return body
        except (OSError, json.JSONDecodeError):
            code = os.waitstatus_to_exitcode(status)
            return {"status": "error", "branch": key, "error": f"branch {key} exit {code}: it wrote no result"}


def _stop(running: Mapping[int, int], signum: int | None) -> None:
    """Leave no branch behind: pass the signal on, give them ``REAP_S``, then kill."""
    if not running:
        return
    for pid in running:
        try:
            os.kill(pid, signum or signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + REAP_S
    left = set(running)
    while left and time.monotonic() < deadline:
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(POLL_S)
        else:
            left.discard(pid)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def result_path(directory: str, key: int) -> str:
    return os.path.join(directory, f"branch-{key}.json")


def _write_result(directory: str, key: int, body: Mapping[str, Any]) -> None:
    """A branch's body, whole or not at all (written aside, then renamed)."""
    path = result_path(directory, key)
    with open(path + ".part", "w", encoding="utf-8") as handle:
        json.dump(body, handle, ensure_ascii=False)
    os.replace(path + ".part", path)


def _child_exit(forker: Forker, body: Mapping[str, Any] | None, error: BaseException | None) -> None:
    """A branch's end: its result written, then ``os._exit`` (no ``finally``,
    no ``atexit``, nothing of the parent's torn down or flushed twice)."""
    code = 0
    try:
        assert forker.key is not None
        if body is None:
            body = {"status": "error", "branch": forker.key,
                    "error": f"branch {forker.key}: {type(error).__name__}: {error}"}
            code = EXIT_CHILD_ERROR
        cpu = os.times()
        _write_result(forker.directory, forker.key, {**body, "branch_cpu_s": round(cpu.user + cpu.system, 3)})
    except BaseException:  # noqa: BLE001 - nothing may return into the parent's code
        code = EXIT_CHILD_ERROR
    finally:
        os._exit(code)


def seed_process(branches: int, jobs: int, argv: Sequence[str], *, emit: Any = None) -> dict[str, Any]:
    """Run the ``loomsim run`` command line ``argv`` (with ``--fork-at``)
    to its fork instant, then ``branches`` branches in forked children.
    Returns ``{"bodies": [...], "prefix_cpu_s", "children_cpu_s"}``;
    ``emit(body)`` is told of each branch as it ends."""
    from scenarios import registry
    from sim.face import run as run_face
    from sim.face.mutants import apply_mutant
    from sim.face.options import run_options
    from sim.runner import run
    from sim.scenario import Branch

    args = run_face.parse_line(argv)
    scenario = registry.get(args.scenario)
    mutant = apply_mutant(args)
    args.branch = 0  # the key each child lives comes from the fork (``Forker.at_fork``)
    opts = run_face.with_branch(run_options(scenario, args), args)
    assert opts.branch is not None and opts.store == "memory", opts
    directory = tempfile.mkdtemp(prefix="loomsim-branches-")
    forker = Forker(tuple(range(branches)), jobs, directory, on_body=emit)
    try:
        try:
            result = run(scenario, opts, wall_clock=time.perf_counter, cpu_clock=time.process_time,
                         at_fork=forker.at_fork)
        except Forked as done:
            return {"bodies": sorted(done.bodies, key=lambda b: b["branch"]), "prefix_cpu_s": done.prefix_cpu_s,
                    "children_cpu_s": done.children_cpu_s}
        except BaseException as error:
            if forker.key is not None:
                _child_exit(forker, None, error)
            raise
        if forker.key is not None:  # a branch, at its end
            body = None
            try:
                mine = attrs.evolve(opts, branch=Branch(opts.branch.fork_at_ms, forker.key))
                _, _, body = run_face.recorded(scenario, args, mine, result, mutant)
                body = {**body, "branch": forker.key, "fork_at": result.config["branch"]["fork_at"]}
                if mutant is not None:
                    body["mutant"] = mutant.name
            except BaseException as error:  # noqa: BLE001
                _child_exit(forker, None, error)
            _child_exit(forker, body, None)
        # The run ended before its fork instant was reached (a task failed in
        # the prefix): every branch is that prefix, as each would be alone.
        bodies = []
        for key in range(branches):
            result.config["branch"] = {**result.config["branch"], "key": key}
            mine = attrs.evolve(opts, branch=Branch(opts.branch.fork_at_ms, key))
            _, _, body = run_face.recorded(scenario, args, mine, result, mutant)
            body = {**body, "branch": key, "fork_at": result.config["branch"]["fork_at"]}
            bodies.append(body)
            if emit is not None:
                emit(body)
        return {"bodies": bodies, "prefix_cpu_s": time.process_time(), "children_cpu_s": 0.0}
    finally:
        if forker.key is None:
            for name in os.listdir(directory):
                os.remove(os.path.join(directory, name))
            os.rmdir(directory)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sim.face.branches --branches K --jobs J -- LOOMSIM-ARGV``:
    a seed process of a forking sweep; one JSON line per finished branch."""
    from sim.face.options import UsageError

    parser = argparse.ArgumentParser(prog="python -m sim.face.branches")
    parser.add_argument("--branches", type=int, required=True)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--cpu", action="store_true",
                        help="last, print the CPU of the prefix and of the branches (loomsim bench)")
    parser.add_argument("loomsim_argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    rest = args.loomsim_argv[1:] if args.loomsim_argv[:1] == ["--"] else args.loomsim_argv

    def emit(body: Mapping[str, Any]) -> None:
        print(json.dumps(body, ensure_ascii=False), flush=True)

    try:
        done = seed_process(args.branches, args.jobs, rest, emit=emit)
        if args.cpu:
            emit({"format": CPU_FORMAT, "prefix_cpu_s": round(done["prefix_cpu_s"], 3),
                  "children_cpu_s": round(done["children_cpu_s"], 3),
                  "branch_cpu_s": [b.get("branch_cpu_s") for b in done["bodies"]]})
    except UsageError as error:
        print(f"loomsim: error: {error}", file=sys.stderr)
        return 2
    except Interrupted as error:
        return 128 + error.signum
    return 0


# -- the sweep ---------------------------------------------------------------------------


def check_branch_options(args: argparse.Namespace, duration_ms: int | None, *, sweep: bool = True) -> None:
    """``sweep`` (or ``explore``, ``sweep=False``) ``--fork-at T --branches
    K``: both or neither, T before each run's end, K at least 1, the
    in-memory store only, and (a sweep) not with the sweep's options that
    deal seeds to other processes. Usage errors."""
    from sim.clock import format_duration_ms
    from sim.face.options import UsageError

    fork_at_ms, branches = args.fork_at, args.branches
    if fork_at_ms is None and branches is None:
        return
    if fork_at_ms is None:
        raise UsageError("--branches K needs --fork-at T: the simulated instant every branch parts from its seed")
    if branches is None:
        raise UsageError("--fork-at T needs --branches K: how many futures to fork from each seed")
    if not 1 <= branches <= BRANCHES_MAX:
        raise UsageError(f"--branches must be between 1 and {BRANCHES_MAX}, got {branches}")
    if duration_ms is not None and fork_at_ms >= duration_ms:
        raise UsageError(f"--fork-at {format_duration_ms(fork_at_ms)} is not before the run's end "
                         f"(duration {format_duration_ms(duration_ms)}): branch earlier or run longer")
    if args.store not in (None, "memory"):
        raise UsageError(f"--fork-at forks the process, and only the in-memory store forks safely (--store "
                         f"{args.store}: a forked child must not touch an inherited database); run one branch with "
                         "loomsim run ... --fork-at T --branch K on it")
    if not sweep:
        return
    for flag, given in (("--shard", args.shard), ("--out", args.out), ("--model-coverage", args.model_coverage),
                        ("--model-coverage-out", args.model_coverage_out), ("--time-budget", args.time_budget),
                        ("--corpus", getattr(args, "corpus", None))):
        if given:
            raise UsageError(f"{flag} does not combine with --fork-at (yet): sweep the branches without it")


def _seed_argv(global_args: Sequence[str], name: str, seed: int, child_args: Sequence[str], beyond: bool,
               fork_at: str) -> list[str]:
    args = list(child_args)
    if beyond and "--beyond-contract" not in args:
        args.append("--beyond-contract")
    return [*global_args, "run", name, "--seed", str(seed), *args, "--store", "memory", "--fork-at", fork_at,
            "--json"]


def _stop_seed(proc: subprocess.Popen, error: BaseException | None) -> None:
    """A seed process told the signal that stopped the sweep (it stops its
    branches and exits), given ``REAP_S``, then killed; waited for."""
    if proc.poll() is None:
        try:
            proc.send_signal(error.signum if isinstance(error, Interrupted) else signal.SIGTERM)
            proc.wait(timeout=REAP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
        except ProcessLookupError:
            pass
    proc.wait()


def _seed_results(proc: subprocess.Popen, name: str, seed: int, beyond: bool, branches: int) -> list[dict[str, Any]]:
    """What a seed process printed, a result per branch (every line that is
    whole JSON; an error record for each branch it did not report)."""
    from sim.face.children import child_output

    out, err = child_output(proc)
    by_key: dict[int, dict[str, Any]] = {}
    for line in out.splitlines():
        try:
            body = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(body, dict) and type(body.get("branch")) is int:
            by_key[body["branch"]] = body
    why = (err.strip().splitlines() or ["no output"])[-1]
    results = []
    for key in range(branches):
        body = by_key.get(key) or {"status": "error", "error": f"exit {proc.returncode}: {why}"}
        body = {**body, "seed": seed, "branch": key, "scenario": name, "beyond": beyond}
        if body["status"] == "error" and "error" not in body:
            body["error"] = "no result"
        results.append(body)
    return results


def run_branches(names: Sequence[str], opts: Any, child_args: Mapping[str, Sequence[str]],
                 global_args: Sequence[str], fork_at_ms: int, branches: int,
                 on_result: Any = None) -> tuple[list[dict[str, Any]], Interrupted | None]:
    """The forking sweep's runs: per seed (and scenario), one seed process
    that forks ``branches`` branches at ``fork_at_ms``, ``opts.jobs`` at a
    time; returns every branch's result (tagged ``scenario``, ``seed``,
    ``branch``, ``beyond``; ``on_result`` told of each) and the signal that
    stopped it (None: it ran every seed). ``sim.face.sweep`` sums them up."""
    from sim.clock import format_duration_ms
    from sim.face.children import check_interrupted, forwarding_signals

    fork_at = format_duration_ms(fork_at_ms)
    results: list[dict[str, Any]] = []
    proc: subprocess.Popen | None = None
    failure: BaseException | None = None
    try:
        with forwarding_signals():
            try:
                for seed in opts.seeds:
                    for name in names:
                        check_interrupted()
                        beyond = opts.beyond(seed)
                        argv = _seed_argv(global_args, name, seed, child_args[name], beyond, fork_at)
                        proc = start_module(["sim.face.branches", "--branches", str(branches), "--jobs",
                                             str(opts.jobs), "--", *argv])
                        while proc.poll() is None:  # ends: the seed process's children end, and so does it
                            check_interrupted()
                            time.sleep(POLL_S)
                        done, proc = _seed_results(proc, name, seed, beyond, branches), None
                        for result in done:
                            results.append(result)
                            if on_result is not None:
                                on_result(result)
            except BaseException as error:
                failure = error
                raise
            finally:
                if proc is not None:  # stopped: its branches are stopped by it; what they finished is reported
                    _stop_seed(proc, failure)
                    results.extend(r for r in _seed_results(proc, name, seed, beyond, branches)
                                   if r["status"] != "error")
    except Interrupted as error:
        return results, error
    return results, None


if __name__ == "__main__":
    sys.exit(main())
