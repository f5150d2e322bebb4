"""``loomsim live SCENARIO``: the model's own code on trio and real time,
against one real SQLite WAL file.

A simulated run makes concurrency abstract: one task at a time, each store
call atomic. A live run runs the same model code (``model.submissions``:
the client and ``worker_loop``) on ``sim.face.live_runtime.LiveRuntime``,
each live process (the client, each worker) a trio task group with its own
connection to the one database file, every store call in a thread on that
connection. SQLite's locks, busy timeouts and WAL visibility are real, and
so is the contention: no fault is injected. Time is trio's clock scaled by
``--time-scale``, so leases and periods shrink with it. With
``--processes`` each worker is an OS process of its own instead, and
``--kill-every`` SIGKILLs one now and then (the end of this module).

At the end (``--duration`` of wall time, the client stopped, the workers
given a bounded settle to drain) the end-of-run audit of the simulated
``ledger-storm`` that reads the stores directly runs on a fresh
connection to the file: ``exactly-once-settlement`` (one canonical
settlement record per settled submission, the ledger's digest its own, a
ledger rebuilt from the log agrees), ``log-chain`` (gap-free logs whose
chain recomputes to the stored tail) and ``liveness`` (nothing left
unsettled). The checks that judge a run event by event (fencing, queue
order, the reference model) need its trace: a live run has none.

A live run is not deterministic: thread and trio scheduling and the real
clock decide it. It has no trace digest, a seed does not reproduce it, and
no determinism check runs it. The seed only names the streams the client
and the step delays draw from (which conversation, how long a step takes,
which worker process a kill takes).
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
from typing import Any

import attrs

from model.conversation.sqlite_store import SqliteConversationStore
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.ledger.rules import submission_id_for
from model.retry import error_name, is_retryable
from model.sqlite_db import BUSY_TIMEOUT_MS_DEFAULT
from model.submissions import SubmissionClient, SubmissionWorker, worker_loop
from scenarios.invariants.exactly_once_settlement import ExactlyOnceSettlement
from scenarios.invariants.liveness import Liveness
from scenarios.invariants.log_chain import LogChain
from scenarios.storage import RunDatabase, run_sync
from scenarios.system import System
from scenarios.workloads.submissions import work
from sim.clock import format_span_ms
from sim.face.live_runtime import LiveClock, LiveRuntime, StoreCounts, open_stores
from sim.face.options import UsageError, check_db, parse_count, parse_duration, parse_seed
from sim.invariants import InvariantSet
from sim.rng import Streams
from sim.runner import FAIL, PASS
from sim.scenario import SetupError
from sim.trace import Trace
from sim.lazy import lazy_import

trio = lazy_import("trio")  # imported at first use: only `loomsim live` needs it

EXIT_ERROR = 3  # as ``sim.face.cli``'s: the harness itself failed (not the system under test)
RESULT_FORMAT = "loomsim-result/1"  # the fields of ``run --json`` that apply, and ``mode``/``deterministic``
SUPPORTED = ("ledger-storm",)
WORKERS_DEFAULT = 3
WORKERS_MAX = 64
DURATION_DEFAULT = "60s"
# ledger-storm's workload, as its stack sets it (``scenarios.stacks.ledger_storm``), in model ms.
CONVERSATIONS = 8
EVERY_MS = (1_000, 40_000)
CONVERSATION_LIFETIME_MS = 3_600_000
DEFER_SHARE = 1 / 8
LEASE_MS = 20_000
POLL_MS = 2_000
RETRY_MS = 2_000
STEP_DELAY_MS = (50, 3_000)
STEPS = 2
# The client's unreceipted requests: at most this many (each is retried
# until receipted; the client sends nothing new meanwhile).
PENDING_MAX = 64
# A worker process that failed is started again after this long (real s),
# at most this many times a run.
RESTART_S = 0.05
RESTARTS_MAX = 100
# The settle after the client stopped: the workers drain for at most
# SETTLE_MODEL_MS of model time (several leases: a head a killed process
# held is claimed again only once its lease is over), in real seconds at
# least SETTLE_S_MIN and at most SETTLE_S_MAX; the stores polled every
# SETTLE_POLL_S for unsettled work.
SETTLE_MODEL_MS = 300_000
SETTLE_S_MIN, SETTLE_S_MAX = 10.0, 300.0
SETTLE_POLL_S = 0.05
# Errors of failed worker processes the result keeps (the rest are counted).
ERRORS_KEPT = 5
# Time scale bounds: a real second is at least a thousandth of a model
# second and at most a model day.
TIME_SCALE_MIN, TIME_SCALE_MAX = 1e-3, 86_400.0


def settle_s(time_scale: float) -> float:
    """The settle's bound in real seconds at ``time_scale``."""
    return min(max(SETTLE_S_MIN, SETTLE_MODEL_MS / 1_000 / time_scale), SETTLE_S_MAX)


def parse_time_scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid time scale {text!r}: expected a number > 0, e.g. 60") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"invalid time scale {text!r}: must be > 0")
    if not TIME_SCALE_MIN <= value <= TIME_SCALE_MAX:
        raise argparse.ArgumentTypeError(f"invalid time scale {text!r}: must be between {TIME_SCALE_MIN:g} and "
                                         f"{TIME_SCALE_MAX:g}")
    return value


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``loomsim live``'s arguments."""
    p = sub.add_parser("live", help="run a scenario's model code on real time and threads against one SQLite "
                                    "file (not deterministic)")
    p.add_argument("scenario", help=f"scenario name (live mode supports: {', '.join(SUPPORTED)})")
    p.add_argument("--duration", type=parse_duration, default=None, metavar="DURATION",
                   help=f"wall time the client submits for (default {DURATION_DEFAULT}); then a settle of at "
                        f"most {SETTLE_MODEL_MS // 60_000} model minutes ({SETTLE_S_MIN:g}s to {SETTLE_S_MAX:g}s "
                        "of wall time)")
    p.add_argument("--workers", type=parse_count, default=None, metavar="N",
                   help="workers, each a task group of this process (default 3)")
    p.add_argument("--processes", type=parse_count, default=None, metavar="N",
                   help="N workers, each an OS process of its own on the same file (instead of --workers)")
    p.add_argument("--kill-every", type=parse_duration, default=None, metavar="DURATION",
                   help="with --processes: SIGKILL a worker process drawn from --seed's stream every DURATION "
                        "of wall time, and start it again")
    p.add_argument("--db", default=None, metavar="PATH",
                   help="the SQLite file (new or empty; kept after the run); default: a temporary one")
    p.add_argument("--time-scale", type=parse_time_scale, default=1.0, metavar="X",
                   help="one real second is X model seconds (default 1): leases and periods shrink by X")
    p.add_argument("--seed", type=parse_seed, default=0,
                   help="names the client's and the step delays' random streams (default 0); it does not "
                        "reproduce a live run")
    p.add_argument("--busy-timeout-ms", type=parse_count, default=BUSY_TIMEOUT_MS_DEFAULT, metavar="MS",
                   help=f"each connection's SQLite busy timeout, real ms (default {BUSY_TIMEOUT_MS_DEFAULT})")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return p


@attrs.define
class LiveTotals:
    """What the live processes did, across the run."""

    stores: StoreCounts = attrs.field(factory=StoreCounts)
    submitted: int = 0  # requests the client saw receipted
    worker_restarts: int = 0  # worker processes started again after they failed
    worker_kills: int = 0  # worker OS processes SIGKILLed (``--kill-every``), each started again
    worker_errors: list[str] = attrs.field(factory=list)  # the first ERRORS_KEPT failures, named
    client_error: str | None = None  # the client's failure, named (it sends nothing more)


@attrs.frozen
class LiveConfig:
    scenario: str
    duration_ms: int
    workers: int
    processes: bool  # the workers are OS processes (``--processes``)
    kill_every_ms: int | None  # wall ms between SIGKILLs of a worker process
    time_scale: float
    seed: int
    busy_timeout_ms: int
    db_path: str | None


def command(args: argparse.Namespace) -> int:
    """``loomsim live``."""
    config = _config(args)
    try:
        database = RunDatabase(config.db_path, file_name=f"{config.scenario}-live.db",
                               busy_timeout_ms=config.busy_timeout_ms)
    except SetupError as error:
        raise UsageError(str(error)) from None
    try:
        # The schema, once, before the processes open their connections.
        SqliteSubmissionLedger(database.conn)
        SqliteConversationStore(database.conn)
        database.conn.close()
        database.conn = None
        totals = LiveTotals()
        try:
            end_ms, wall_s = trio.run(_live, config, database.path, totals)
        except Exception as error:  # noqa: BLE001 - the harness's own failure: one line, exit 3
            print(f"loomsim: error: the live run stopped: {_named(error)}", file=sys.stderr)
            return EXIT_ERROR
        result = _audit(config, database.path, totals, end_ms, wall_s)
    finally:
        database.close()
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        _print_result(result)
    return 0 if result["status"] == PASS else 1


def _config(args: argparse.Namespace) -> LiveConfig:
    if args.scenario not in SUPPORTED:
        raise UsageError(f"scenario {args.scenario!r}: live mode supports: {', '.join(SUPPORTED)}")
    duration_ms = args.duration if args.duration is not None else parse_duration(DURATION_DEFAULT)
    if duration_ms <= 0:
        raise UsageError(f"--duration must be above 0s (got {duration_ms} ms)")
    if args.workers is not None and args.processes is not None:
        raise UsageError("give --workers (tasks) or --processes (OS processes), not both")
    flag, workers = ("--processes", args.processes) if args.processes is not None else ("--workers", args.workers)
    workers = WORKERS_DEFAULT if workers is None else workers
    if workers < 1:
        raise UsageError(f"{flag} {workers}: at least 1")
    if workers > WORKERS_MAX:
        raise UsageError(f"{flag} {workers}: at most {WORKERS_MAX}")
    if args.kill_every is not None and args.processes is None:
        raise UsageError("--kill-every needs --processes (only an OS process can be killed)")
    if args.kill_every is not None and args.kill_every <= 0:
        raise UsageError(f"--kill-every must be above 0s (got {args.kill_every} ms)")
    if args.db is not None:
        check_db(args.db, sqlite=True)
    return LiveConfig(args.scenario, duration_ms, workers, args.processes is not None, args.kill_every,
                      args.time_scale, args.seed, args.busy_timeout_ms, args.db)


# -- the live processes ---------------------------------------------------------


async def _live(config: LiveConfig, path: str, totals: LiveTotals) -> tuple[int, float]:
    """The client for ``duration_ms`` of wall time and the workers until the
    work settled (at most ``settle_s`` more): the model time it ended
    at, and the real seconds it took (trio's clock: the face measures)."""
    clock = LiveClock(config.time_scale)
    started_s = trio.current_time()
    streams = Streams(config.seed)
    stop = trio.Event()
    async with trio.open_nursery() as everything:
        children = _Children(config.workers)
        for index in range(config.workers):
            if config.processes:
                everything.start_soon(_worker_os_process, index + 1, clock, path, config, totals, children,
                                      name=f"worker-{index + 1}")
            else:
                everything.start_soon(_worker_process, index + 1, clock, streams, path, config, totals,
                                      name=f"worker-{index + 1}")
        async with trio.open_nursery() as client:
            client.start_soon(_client_until_failed, clock, streams, path, config, totals, stop, name="client")
            async with trio.open_nursery() as kills:
                if config.kill_every_ms is not None:
                    # Kills stop with the client, before the settle (as a simulated run's faults heal).
                    kills.start_soon(_kill_every, config.kill_every_ms, streams, children, totals, name="killer")
                await trio.sleep(config.duration_ms / 1_000)
                kills.cancel_scope.cancel()
            stop.set()  # the client finishes its unreceipted requests, then ends
        await _settle(path, config, totals)
        everything.cancel_scope.cancel()
    return clock.now_ms(), trio.current_time() - started_s


async def _settle(path: str, config: LiveConfig, totals: LiveTotals) -> None:
    """Until no submission is unsettled in the file, at most ``settle_s``."""
    reader = await open_stores(path, busy_timeout_ms=config.busy_timeout_ms, counts=totals.stores)
    try:
        limit_s = settle_s(config.time_scale)
        with trio.move_on_after(limit_s):
            for _ in range(int(limit_s / SETTLE_POLL_S) + 1):
                if not await reader.ledger.scan_nonterminal():
                    return
                await trio.sleep(SETTLE_POLL_S)
    finally:
        reader.close()


async def _client_until_failed(clock: LiveClock, streams: Streams, path: str, config: LiveConfig,
                               totals: LiveTotals, stop: trio.Event) -> None:
    """The client process; an error no retry clears ends it, named (the run fails)."""
    try:
        await _client_process(clock, streams, path, config, totals, stop)
    except Exception as error:  # noqa: BLE001 - a failed process: named in the result
        totals.client_error = f"client: {_named(error)}"


async def _client_process(clock: LiveClock, streams: Streams, path: str, config: LiveConfig, totals: LiveTotals,
                          stop: trio.Event) -> None:
    """ledger-storm's client (``scenarios.workloads.submissions.Submitters``,
    without aborts, admission groups or second principals): a request every
    ``EVERY_MS`` to one of ``CONVERSATIONS`` conversations, at least once."""
    stores = await open_stores(path, busy_timeout_ms=config.busy_timeout_ms, counts=totals.stores)
    try:
        async with trio.open_nursery() as nursery:
            runtime = LiveRuntime(clock, nursery)
            client = SubmissionClient(stores.ledger, stores.log, now_ms=runtime.now_ms)
            await _submit_until_stopped(client, runtime, streams, totals, stop)
    finally:
        stores.close()


async def _submit_until_stopped(client: SubmissionClient, runtime: LiveRuntime, streams: Streams,
                                totals: LiveTotals, stop: trio.Event) -> None:
    workload = streams["submitters"]
    pending: list[tuple[str, str, Any]] = []
    sent = 0
    while True:  # bounded: it ends at ``stop`` once every request is receipted
        while pending:
            conversation_id, key, request = pending[0]
            try:
                await client.submit(conversation_id, "client", key, request)
            except Exception as error:
                if not is_retryable(error):
                    raise
                await runtime.sleep_ms(RETRY_MS)  # the request stays pending: same key again
                continue
            pending.pop(0)
            totals.submitted += 1
        if stop.is_set():
            return
        with trio.move_on_after(runtime.clock.real_s(workload.between(*EVERY_MS))):
            await stop.wait()
        if stop.is_set():
            return
        sent += 1
        generation = runtime.now_ms() // CONVERSATION_LIFETIME_MS
        conversation_id = f"submitters/conv-{workload.below(CONVERSATIONS)}-g{generation}"
        # A drawn share asks its worker to defer it, and the next request to
        # the same conversation comes right behind it (as ledger-storm's).
        if streams.fork(f"submitters/defer/{sent}").chance(DEFER_SHARE):
            pending.append((conversation_id, f"req-{sent}", {"n": sent, "defer": True}))
            sent += 1
        pending.append((conversation_id, f"req-{sent}", {"n": sent}))
        assert len(pending) <= PENDING_MAX, len(pending)


async def _worker_process(index: int, clock: LiveClock, streams: Streams, path: str, config: LiveConfig,
                          totals: LiveTotals) -> None:
    """Worker ``index``: recover, then claim and settle until cancelled; a
    failed incarnation is counted, named and started again (``worker-1#2``)."""
    for incarnation in range(1, RESTARTS_MAX + 2):
        owner = f"worker-{index}" if incarnation == 1 else f"worker-{index}#{incarnation}"
        try:
            await _worker_incarnation(owner, clock, streams, path, config, totals)
        except Exception as error:  # noqa: BLE001 - a failed process: named in the result, then restarted
            if len(totals.worker_errors) < ERRORS_KEPT:
                totals.worker_errors.append(f"{owner}: {_named(error)}")
            totals.worker_restarts += 1
            await trio.sleep(RESTART_S)
    raise AssertionError(f"worker-{index} failed {RESTARTS_MAX + 1} times")


async def _worker_incarnation(owner: str, clock: LiveClock, streams: Streams, path: str, config: LiveConfig,
                              totals: LiveTotals) -> None:
    stores = await open_stores(path, busy_timeout_ms=config.busy_timeout_ms, counts=totals.stores)
    try:
        async with trio.open_nursery() as nursery:
            runtime = LiveRuntime(clock, nursery)
            step = work()

            async def step_delay(submission_id: str, index: int) -> None:
                await runtime.sleep_ms(streams.fork(f"workers/{submission_id}/{index}").between(*STEP_DELAY_MS))

            worker = SubmissionWorker(stores.ledger, stores.log, owner, lease_ms=LEASE_MS, now_ms=runtime.now_ms,
                                      work=lambda request, index: step(request, index, owner, runtime.now_ms()),
                                      steps=STEPS, step_delay=step_delay)
            runtime.spawn("worker", worker_loop(worker, runtime, poll_ms=POLL_MS, retry_ms=RETRY_MS))
    finally:
        stores.close()


def _named(error: BaseException) -> str:
    """``Name: message`` of ``error`` (the first of a group's)."""
    for _ in range(8):  # nested task groups
        if not isinstance(error, BaseExceptionGroup):
            break
        error = error.exceptions[0]
    return f"{error_name(error)}: {error}"


# -- the audit --------------------------------------------------------------------


class LiveAuditView:
    """The audit view (``scenarios.system.AuditView``) of a live run's file,
    on fresh connections: the conversations and submissions are listed
    from the stores themselves (a live run has no trace to observe them
    from); the reads are ``System``'s own, so the audit reads the file as
    a simulated run's audit does."""

    log_records = System.log_records
    log_tail = System.log_tail
    submissions = System.submissions
    nonterminal_submissions = System.nonterminal_submissions
    rebuild_mismatches = System.rebuild_mismatches
    conversation_ids = System.conversation_ids
    scoped = System.scoped

    def __init__(self, path: str, end_ms: int) -> None:
        # Every chain verified as the log opens (as a restarted process would open it).
        self.log = SqliteConversationStore.open(path, verify_on_open=True)
        try:
            self.ledger = SqliteSubmissionLedger.open(path)
        except BaseException:
            self.log.close()
            raise
        self._scope = None
        # ``rebuild_mismatches`` reads the run's end time from its world.
        self._world = _Ended(end_ms)
        rows = self.ledger.connection.execute(
            "SELECT conversation_id, last_queue_seq FROM ledger_conversations ORDER BY conversation_id").fetchall()
        self._conversations = {conversation: [submission_id_for(conversation, seq) for seq in range(1, last + 1)]
                               for conversation, last in rows}
        logged = self.ledger.connection.execute(  # the same file: the log's table
            "SELECT conversation_id FROM conv_conversations ORDER BY conversation_id").fetchall()
        for (conversation,) in logged:
            self._conversations.setdefault(conversation, [])

    def close(self) -> None:
        self.log.close()
        self.ledger.close()


@attrs.frozen
class _EndedRuntime:
    end_ms: int

    def now_ms(self) -> int:
        return self.end_ms


class _Ended:
    def __init__(self, end_ms: int) -> None:
        self.runtime = _EndedRuntime(end_ms)


def _audit(config: LiveConfig, path: str, totals: LiveTotals, end_ms: int, wall_s: float) -> dict[str, Any]:
    trace = Trace(lambda: end_ms)
    invariants = InvariantSet(trace, lambda: end_ms, on_violation=lambda violation: None)
    invariants.add(ExactlyOnceSettlement(), LogChain(), Liveness())
    settled, reopen_error = 0, None
    try:
        view = LiveAuditView(path, end_ms)
    except Exception as error:  # noqa: BLE001 - a file that does not reopen (a chain that does not verify) is the finding
        view, reopen_error = None, _named(error)
    if view is not None:
        try:
            invariants.audit(view)
            settled = sum(1 for conversation in view.conversation_ids()
                          for row in view.submissions(conversation) if row.outcome is not None)
        finally:
            view.close()
    violations = [{"name": v.invariant, "message": v.message} for v in invariants.violations]
    if reopen_error is not None:
        violations.append({"name": "reopen", "message": f"the run's file does not reopen: {reopen_error}"})
    if totals.client_error is not None:
        violations.append({"name": "client-failed", "message": f"the client process failed: {totals.client_error}"})
    for error in totals.worker_errors:
        violations.append({"name": "worker-failed", "message": f"a worker process failed: {error}"})
    return {
        "format": RESULT_FORMAT,
        "mode": "live",
        "deterministic": False,
        "scenario": config.scenario,
        "seed": config.seed,
        "store": "sqlite",
        "status": PASS if not violations else FAIL,
        "trace_digest": None,
        "simulated_ms": end_ms,
        "wall_s": round(wall_s, 3),
        "invariants": {checker.name: checker.checks for checker in invariants.checkers},
        "violations": violations,
        "stats": {"submitted": totals.submitted, "settled": settled,
                  "busy_answers_retried": totals.stores.busy_answers, "worker_restarts": totals.worker_restarts,
                  "worker_kills": totals.worker_kills,
                  "store_calls": totals.stores.store_calls},
        "config": {"workers": config.workers, "processes": config.processes,
                   "kill_every_ms": config.kill_every_ms, "duration_ms": config.duration_ms, "time_scale": config.time_scale,
                   "busy_timeout_ms": config.busy_timeout_ms, "db": config.db_path},
    }


def _print_result(result: dict[str, Any]) -> None:
    config, stats = result["config"], result["stats"]
    db = config["db"] or "a temporary file"
    print(f"live {result['scenario']}: {result['wall_s']:.2f}s wall, {format_span_ms(result['simulated_ms'])} of "
          f"model time at {config['time_scale']:g}x, {config['workers']} workers "
          f"({'OS processes' if config['processes'] else 'tasks'}), SQLite {db}")
    print("not deterministic: real time, threads and SQLite's own locking decide this run; it has no trace "
          "digest and its seed does not reproduce it")
    print("system: " + ", ".join(f"{name}={value}" for name, value in stats.items()))
    print("invariant checks: " + ", ".join(f"{name}={count}" for name, count in result["invariants"].items()))
    if result["status"] == PASS:
        unsettled = " (nothing settled: a longer --duration or a larger --time-scale tests more)" if not stats[
            "settled"] else ""
        print(f"PASS: every invariant the audit reads from the file held{unsettled}")
        return
    first = result["violations"][0]
    print(f"FAIL: invariant {first['name']} violated")
    print(f"  {first['message']}")
    for extra in result["violations"][1:5]:
        print(f"also: {extra['name']}: {extra['message']}")


# -- workers as OS processes (``--processes``, ``--kill-every``) --------------------
#
# A worker process is ``python -m sim.face.live --child ...``: it says
# ``ready`` on its stdout, reads its parent's model time on its stdin (so
# every process reads the same model time, give or take a pipe's latency),
# then runs one worker incarnation, reporting ``counts STORE_CALLS BUSY``
# every CHILD_REPORT_S and, if it fails, ``error NAME: MESSAGE`` before it
# exits 1. Its stderr goes where the parent's goes.

CHILD_REPORT_S = 0.1
CHILD_LINE_MAX = 4_096  # bytes of one line a child writes
CHILD_START_S_MAX = 30.0  # a child that has not said ready by then failed


class _Children:
    """The live worker OS processes, by worker index: the one running now."""

    def __init__(self, count: int) -> None:
        self.running: dict[int, Any] = {}
        self.killed: set[Any] = set()
        self.count = count


async def _kill_every(every_ms: int, streams: Streams, children: _Children, totals: LiveTotals) -> None:
    """SIGKILL a worker process drawn from the seed's ``kills`` stream every
    ``every_ms`` of wall time (its supervisor starts it again)."""
    draws = streams["kills"]
    while True:  # ends when the run cancels it
        await trio.sleep(every_ms / 1_000)
        index = draws.below(children.count) + 1
        process = children.running.get(index)
        if process is None or process.returncode is not None:
            continue  # between incarnations: nothing to kill this time
        children.killed.add(process)
        process.send_signal(signal.SIGKILL)
        totals.worker_kills += 1


async def _worker_os_process(index: int, clock: LiveClock, path: str, config: LiveConfig, totals: LiveTotals,
                             children: _Children) -> None:
    """Worker ``index`` as an OS process, started again when it is killed or fails."""
    for incarnation in range(1, RESTARTS_MAX + 2):
        owner = f"worker-{index}" if incarnation == 1 else f"worker-{index}#{incarnation}"
        argv = [sys.executable, "-m", "sim.face.live", "--child", path, owner, repr(config.time_scale),
                str(config.seed), str(config.busy_timeout_ms)]
        process = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        children.running[index] = process
        counts = [0, 0]
        error: str | None = None
        try:
            lines = _lines(process.stdout)
            with trio.fail_after(CHILD_START_S_MAX):
                first = await anext(lines, None)
            if first == "ready":
                try:
                    await process.stdin.send_all(f"{clock.now_ms()}\n".encode())
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass  # killed just after it said ready: its output ends, and it is waited for below
                async for line in lines:
                    kind, _, rest = line.partition(" ")
                    if kind == "counts":
                        counts = [int(part) for part in rest.split()]
                    elif kind == "error":
                        error = rest
            elif first is not None:
                error = f"said {first!r}, not ready"
            await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
            children.running.pop(index, None)
            totals.stores.store_calls += counts[0]
            totals.stores.busy_answers += counts[1]
        if process in children.killed:
            children.killed.discard(process)
        elif process.returncode != 0 or error is not None:
            if len(totals.worker_errors) < ERRORS_KEPT:
                totals.worker_errors.append(f"{owner}: {error or f'exited with {process.returncode}'}")
            totals.worker_restarts += 1
        await trio.sleep(RESTART_S)
    raise AssertionError(f"worker-{index} ended {RESTARTS_MAX + 1} times")


class ChildFailed(Exception):
    """A worker process broke the protocol above."""

    name = "ChildFailed"


async def _lines(stream: Any) -> Any:
    """The lines of ``stream`` (UTF-8, without their newline) until it ends."""
    buffered = b""
    while True:  # ends with the stream
        chunk = await stream.receive_some(CHILD_LINE_MAX)
        if not chunk:
            return
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            yield line.decode("utf-8", "replace")
        if len(buffered) > CHILD_LINE_MAX:
            raise ChildFailed(f"a line of over {CHILD_LINE_MAX} bytes from a worker process")


def child_main(argv: list[str]) -> int:
    """A worker OS process (``python -m sim.face.live --child PATH OWNER
    TIME_SCALE SEED BUSY_TIMEOUT_MS``): the protocol above."""
    path, owner, time_scale, seed, busy_timeout_ms = argv
    trio.current_time  # noqa: B018 - trio loaded now, not after the start time: its import takes real time
    print("ready", flush=True)
    start_ms = int(sys.stdin.readline())
    config = LiveConfig(SUPPORTED[0], 1, 1, True, None, float(time_scale), int(seed), int(busy_timeout_ms), path)
    totals = LiveTotals()

    async def main() -> None:
        clock = LiveClock(config.time_scale, start_ms=start_ms)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_report, totals)
            await _worker_incarnation(owner, clock, Streams(config.seed), path, config, totals)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    except Exception as error:  # noqa: BLE001 - reported to the parent, which names it
        _report_once(totals)
        print(f"error {_named(error)}".replace("\n", " ")[:CHILD_LINE_MAX - 1], flush=True)
        return 1
    return 0


async def _report(totals: LiveTotals) -> None:
    while True:  # ends when the process does
        _report_once(totals)
        await trio.sleep(CHILD_REPORT_S)


def _report_once(totals: LiveTotals) -> None:
    print(f"counts {totals.stores.store_calls} {totals.stores.busy_answers}", flush=True)


if __name__ == "__main__":
    assert sys.argv[1:2] == ["--child"], sys.argv
    sys.exit(child_main(sys.argv[2:]))
