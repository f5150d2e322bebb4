"""The children of the face's commands that run seeds in processes
(``sweep``, ``mutants``, ``check-determinism``; ``bench``'s measured runs:
``run_child``; a forking sweep's seed processes, ``start_module``, and their
branches, ``fork``): a ``Job`` (a seed of a
scenario as a ``loomsim run`` command line), its process
(``start_child``), what the process printed (``child_output``) and its
result (``child_result``); and a signal's way through the parent:
recorded (``forwarding_signals``), raised at a loop's safe point
(``check_interrupted``) as ``Interrupted``, passed on to the children,
which are reaped (``reap``).

Part of the face: it reads the wall clock only for how long a signalled
child may take to exit, and starts processes; nothing simulated runs here.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterable, Mapping, Sequence

import attrs

from reports.verdict import EXIT_PASS, EXIT_VIOLATION

REAP_S = 5.0  # how long a signalled child may take to exit before it is killed
POLL_S = 0.05  # how often the parent looks at its running children

# The directory holding the ``sim`` package (sim/face/children.py -> its root).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached a command that runs children (``sweep``,
    ``mutants``, ``check-determinism``): recorded by ``forwarding_signals``,
    raised at the loop's next safe point (``check_interrupted``); the
    command's ``finally`` passes the signal on to its children and reaps
    them (``reap``), the CLI prints one line and exits 128 + the signal.
    A ``BaseException``, like ``KeyboardInterrupt``: no ``except Exception``
    swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.stopped = 0  # children stopped on the way out (set by ``reap``)


class _Signals:
    """The state of ``forwarding_signals``: the signal that arrived and is
    not raised yet (``pending``), and whether children are being reaped."""

    reaping = False
    pending: int | None = None


def _on_signal(signum: int, _frame: Any) -> None:
    # Never raise here. An exception thrown between two bytecodes can land
    # inside ``subprocess``'s own bookkeeping (``Popen.poll`` between taking
    # its wait lock and the ``try`` that releases it): the lock stays taken
    # and the ``wait()`` of the reaping blocks forever (seen under load: a
    # SIGINT-ed sweep that never exited). The loops raise at safe points.
    if _Signals.pending is None:
        _Signals.pending = signum


def check_interrupted() -> None:
    """Raise ``Interrupted`` for a signal that arrived (a loop's safe point:
    every turn of the sweep's, ``mutants``' and ``check-determinism``'s)."""
    pending = _Signals.pending
    if pending is not None and not _Signals.reaping:
        _Signals.pending = None
        raise Interrupted(pending)


@contextlib.contextmanager
def forwarding_signals() -> Any:
    """Within: SIGINT and SIGTERM are recorded, and raised as
    ``Interrupted`` at the next ``check_interrupted`` (the main thread
    only; elsewhere, or when they are ignored, nothing changes). One that
    came after the loop's last check is raised on the way out: the command
    was asked to stop."""
    previous = {}
    _Signals.pending = None
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is signal.SIG_IGN:  # nohup / a background job: stay as told
            continue
        try:
            previous[signum] = signal.signal(signum, _on_signal)
        except ValueError:  # not the main thread: signals stay as they are
            break
    try:
        yield
        check_interrupted()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _Signals.pending = None


def _raise_interrupted(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def sigterm_interrupts() -> Any:
    """Within (a whole CLI command): SIGTERM, where it is at its default,
    raises ``Interrupted`` as SIGINT raises ``KeyboardInterrupt``, so the
    ``finally`` blocks run on the way out (a run's temporary SQLite
    database is removed; at its default SIGTERM kills without them) and the
    CLI exits 143. The loops that run children record it instead
    (``forwarding_signals``), raising it only at their safe points."""
    try:
        previous = signal.getsignal(signal.SIGTERM)
        if previous is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _raise_interrupted)
    except ValueError:  # not the main thread: SIGTERM stays as it is
        previous = None
    try:
        yield
    finally:
        if previous is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def spawning() -> Any:
    """Around starting a child and recording it as running: a signal that
    comes meanwhile is raised once both are done, so no child is started
    and then forgotten."""
    yield
    check_interrupted()


def reap(procs: Iterable[subprocess.Popen], error: BaseException | None) -> None:
    """Leave no child behind: on ``Interrupted``, pass its signal on and give
    each child ``REAP_S`` to exit; then (or at once, on any other way out)
    kill what is left, and wait for every one. A second signal meanwhile
    waits (and is dropped): the reaping finishes."""
    _Signals.reaping = True
    try:
        _reap([proc for proc in procs if proc.poll() is None], error)
    finally:
        _Signals.reaping, _Signals.pending = False, None


def _reap(procs: list[subprocess.Popen], error: BaseException | None) -> None:
    if isinstance(error, Interrupted):
        error.stopped += len(procs)
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(error.signum)
        deadline = time.monotonic() + REAP_S
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        child_output(proc)


@attrs.frozen
class Job:
    """One child: a seed of a scenario, maybe beyond the contract."""

    scenario: str
    seed: int
    beyond: bool
    argv: tuple[str, ...]  # ``[global args] run SCENARIO --seed N ... --json``


def child_env(env_extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A child's environment: this one, ``env_extra`` set, the project's
    root first on ``PYTHONPATH`` (the child imports the same ``sim``)."""
    env = {**os.environ, **(env_extra or {})}
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_child(module_argv: Sequence[str]) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS...`` (``module_argv``) run to its end, its
    output captured (``bench``'s measured runs, one at a time: the parent
    reads the children's CPU time around each)."""
    return subprocess.run([sys.executable, "-m", *module_argv], capture_output=True, text=True, env=child_env(),
                          check=False)


def start_child(job: Job, lines_file: str | None, env_extra: Mapping[str, str] | None = None) -> subprocess.Popen:
    """The job's process, in this process's directory (where ``--scenarios``
    modules are importable from); under the line recorder if ``lines_file``;
    ``env_extra`` set in its environment (``check-determinism``: ``PYTHONHASHSEED``)."""
    env = child_env(env_extra)
    head = ["-m", "sim"] if lines_file is None else ["-m", "sim.face.coverage_child", lines_file, "--"]
    # Its output goes to unnamed temporary files, not pipes: the parent polls
    # and reads only after the child exits, and a child that wrote more than
    # a pipe holds (64 KiB) would block on a pipe forever.
    out, err = tempfile.TemporaryFile("w+", encoding="utf-8"), tempfile.TemporaryFile("w+", encoding="utf-8")
    proc = subprocess.Popen([sys.executable, *head, *job.argv], stdout=out, stderr=err, text=True, env=env)
    proc.output_files = (out, err)  # type: ignore[attr-defined]
    return proc


def start_module(module_argv: Sequence[str]) -> subprocess.Popen:
    """``python -m MODULE ARGS...`` started, its output to unnamed temporary
    files (read with ``child_output`` once it exited): a forking sweep's
    seed process (``python -m sim.face.branches``)."""
    out, err = tempfile.TemporaryFile("w+", encoding="utf-8"), tempfile.TemporaryFile("w+", encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", *module_argv], stdout=out, stderr=err, text=True, env=child_env())
    proc.output_files = (out, err)  # type: ignore[attr-defined]
    return proc


def fork() -> int:
    """``os.fork``: a branch of a seed process (``sim.face.branches``), a
    copy-on-write copy of its simulation at the fork instant, or an explore
    input's own process (``sim.face.explore``). 0 in the child; the child's
    pid in the parent, which must wait for it."""
    return os.fork()


def child_output(proc: subprocess.Popen) -> tuple[str, str]:
    """What an exited ``start_child`` wrote to stdout and stderr, once: its files
    are closed after (a second call reads nothing)."""
    proc.wait()
    texts = []
    for handle in proc.output_files:  # type: ignore[attr-defined]
        if handle.closed:
            texts.append("")
            continue
        handle.seek(0)
        texts.append(handle.read())
        handle.close()
    return texts[0], texts[1]


def child_result(job: Job, proc: subprocess.Popen) -> dict[str, Any]:
    """The child's JSON result, tagged with the job; an ``error`` record when
    it printed none (a usage error, a crash of the harness)."""
    out, err = child_output(proc)
    result = None
    if proc.returncode in (EXIT_PASS, EXIT_VIOLATION):
        try:
            result = json.loads(out)
        except json.JSONDecodeError:
            result = None
    if result is None:
        line = (err.strip().splitlines() or ["no output"])[-1]
        result = {"seed": job.seed, "status": "error", "error": f"exit {proc.returncode}: {line}"}
    result["scenario"] = job.scenario
    result["beyond"] = job.beyond
    return result
