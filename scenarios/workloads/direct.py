"""The sentinel wakes of ``sentinel-year`` driven by direct calls: the harness's floor.

ARCHITECTURE §8 holds the harness to 1.4x "the same workload driven by
direct calls", and this module is that workload. It runs the worker process
``sentinel-year`` runs (``scenarios.workloads.sentinels.worker_processes``: a schedule
driver per sentinel, the findings projector, daily retention; each wake
admitted, claimed, run as a bounded flow with claim-check, settled by
reserve -> append -> finalize) with the same parameters and the same
effects (``scenarios.workloads.sentinels.wake_effects``, drawn from the same named
streams), but with everything the harness adds taken away:

- the in-memory stores are called directly: no ``faults.ports.BoundPort``
  (no fault plan, no trace, no port observers, no dead-node refusal), no
  failpoints, the null probe;
- no invariant checkers, no reference model, no end-of-run audit;
- no chaos: no node kills, deploys (the first build runs throughout),
  duplicate alarms, operator edits or on-call operator (with no crash, no
  run is ever parked in doubt for one);
- no ``SimRuntime``: ``DirectRuntime`` below is a list of tasks, the
  earliest stepped with ``coro.send(None)``, and a plain clock.

What it keeps is the wake itself, so a harnessed run's CPU per wake over this
driver's is what the harness costs. ``loomsim bench`` runs it as a child
process (``python -m scenarios.workloads.direct``), as it runs the harnessed one, so
both figures are whole-process CPU. The counts it prints (wakes started,
runs settled and how, submissions left unsettled) are the evidence that it
did the work it claims: a driver doing less would make the ratio a lie.

``--judged`` puts back one piece of the harness, the one no speed-up may
remove: the reference model (``reference-model``: an independent model of
every port's contract) judges every store call's answer, as in a harnessed
run. Each store is reached through ``JudgedStore`` (the call, then its answer
shown to the reference: no fault plan, no trace, no other oracle). What that
run costs per wake is the floor of any harnessed run that checks every
answer; ``loomsim bench`` prints it beside the harness's figure.
"""
from __future__ import annotations

import argparse
import json
import sys
import types
from typing import Any, Coroutine, NoReturn

import attrs

from faults.describe import DESCRIBERS_BY_PORT
from faults.ports import PortCall
from model.claimcheck import INLINE_CAP_BYTES_DEFAULT
from model.conversation.content_store import InMemoryContentStore
from model.conversation.memory_store import InMemoryConversationStore
from model.durable_state.memory_store import InMemoryDurableStateStore
from model.findings import InMemoryFindingsProjection
from model.ledger.memory_store import InMemorySubmissionLedger
from model.pins import InMemoryPinIndex
from model.runs import LedgerRuns
from model.schedule_store import InMemoryScheduleStore
from model.schedules import Schedule, parse_run_id
from scenarios.workloads import sentinel_app as app
from scenarios.invariants.reference_model import ReferenceModel
from scenarios.workloads.pager import PagerService
from scenarios.stacks.sentinel_year import RETENTION
from scenarios.workloads.sentinels import WORKER_NODE, Sentinels, build_chains, wake_effects, worker_processes
from sim.clock import MS_PER_HOUR, MS_PER_MINUTE, MS_PER_SECOND, DurationError, parse_duration_ms
from sim.numbers import NumberError, parse_whole
from sim.invariants import Violation
from sim.rng import Streams

# sentinel-year's defaults (its scenario parameters and knobs, ``--no-swarm``).
EVERY_MS = 5 * MS_PER_MINUTE
LEASE_MS = 30 * MS_PER_SECOND
PROJECT_EVERY_MS = MS_PER_HOUR
SETTLE_MS = MS_PER_HOUR  # sentinel-year's settle: the runner runs this long past the duration
# Bound on steps at one instant: a task that never sleeps would spin forever.
STEPS_PER_INSTANT_MAX = 1_000_000


class DirectEvent:
    """``model.runtime.Event`` for ``DirectRuntime``: a one-waiter latch.
    (The sentinel wakes never wait on one; here for the protocol's sake.)"""

    __slots__ = ("_runtime", "_set", "_waiter")

    def __init__(self, runtime: "DirectRuntime") -> None:
        self._runtime = runtime
        self._set = False
        self._waiter: list | None = None

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            waiter[0] = self._runtime._now_ms  # due now, behind what is due already
            waiter[1] = self._runtime._next_order()

    def is_set(self) -> bool:
        return self._set

    async def wait_until_ms(self, deadline_ms: int) -> bool:
        if self._set:
            return True
        if deadline_ms <= self._runtime._now_ms:
            return False
        self._waiter = self._runtime._current
        try:
            await _wake_at(deadline_ms)
        finally:
            self._waiter = None
        return self._set


@types.coroutine
def _wake_at(wake_ms: int):
    yield wake_ms


class DirectRuntime:
    """``model.runtime.Runtime`` at its plainest: tasks are ``[wake_ms, order,
    coro]`` lists in one list, the earliest (by wake time, then order: FIFO
    at an instant) is stepped with ``coro.send(None)`` and the clock set to
    its wake time. A task yields the time it wants to wake at. No heap (a
    worker has a handful of tasks), no nodes, no crash or pause, no policy."""

    def __init__(self) -> None:
        self._tasks: list[list] = []
        self._now_ms = 0
        self._order = 0
        self._current: list | None = None
        self.switches = 0

    def _next_order(self) -> int:
        self._order += 1
        return self._order

    def now_ms(self) -> int:
        return self._now_ms

    @types.coroutine
    def sleep_ms(self, duration_ms: int):
        assert duration_ms >= 0, duration_ms
        yield self._now_ms + duration_ms

    @types.coroutine
    def sleep_until_ms(self, deadline_ms: int):
        yield max(deadline_ms, self._now_ms)

    @types.coroutine
    def checkpoint(self):
        yield self._now_ms

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any], *, at_ms: int | None = None) -> None:
        self._tasks.append([self._now_ms if at_ms is None else max(at_ms, self._now_ms), self._next_order(), coro])

    def event(self) -> DirectEvent:
        return DirectEvent(self)

    def run(self, until_ms: int) -> None:
        """Step tasks due by ``until_ms``, earliest first; leave the clock there.
        A task that raises ends the run: nothing here expects a failure."""
        tasks = self._tasks
        steps_at_instant = 0
        # Ends when no task is due by ``until_ms``: every step either ends a
        # task or moves it to a wake time, and the steps at one instant are bounded.
        while tasks:
            task = min(tasks)  # orders are unique: never compares two coroutines
            wake_ms = task[0]
            if wake_ms > until_ms:
                break
            if wake_ms != self._now_ms:
                self._now_ms = wake_ms
                steps_at_instant = 0
            steps_at_instant += 1
            assert steps_at_instant <= STEPS_PER_INSTANT_MAX, f"livelock at t={wake_ms}ms"
            self._current = task
            self.switches += 1
            try:
                wake_ms = task[2].send(None)
            except StopIteration:
                tasks.remove(task)
                continue
            finally:
                self._current = None
            assert type(wake_ms) is int, f"a task yielded {type(wake_ms).__name__}, not a wake time"
            task[0] = wake_ms
            task[1] = self._next_order()
        if until_ms > self._now_ms:
            self._now_ms = until_ms

    def close(self) -> None:
        """Close every unfinished task now, in order (not at garbage collection)."""
        for task in sorted(self._tasks, key=lambda t: (t[0], t[1])):
            task[2].close()
        self._tasks.clear()


class CountingRuns(LedgerRuns):
    """``LedgerRuns`` that counts the settlements it finalized, by status:
    the direct driver's evidence that its wakes ran to the end."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settled: dict[str, int] = {}

    async def finish_execution(self, run_id: str, **kwargs: Any) -> Any:
        record = await super().finish_execution(run_id, **kwargs)
        self.settled[record.status] = self.settled.get(record.status, 0) + 1
        return record


@attrs.frozen
class DirectStores:
    """The bare in-memory stores a worker calls (the fields ``worker_processes`` reads)."""

    ds: Any = attrs.field(factory=InMemoryDurableStateStore)
    ledger: Any = attrs.field(factory=InMemorySubmissionLedger)
    log: Any = attrs.field(factory=InMemoryConversationStore)
    schedules: Any = attrs.field(factory=InMemoryScheduleStore)
    content: Any = attrs.field(factory=InMemoryContentStore)
    pins: Any = attrs.field(factory=InMemoryPinIndex)
    findings: Any = attrs.field(factory=InMemoryFindingsProjection)


class JudgedStore:
    """``target``'s port methods (those a harnessed run traces:
    ``faults.describe.DESCRIBERS_BY_PORT[port]``), each handing the call and
    its answer (result, or the error it raised) to ``judge`` once the store
    answered, as ``faults.ports.BoundPort`` hands them to the run's port
    observers. Nothing else: no fault, no trace, no dead-node refusal."""

    def __init__(self, port: str, target: Any, judge: Any, now_ms: Any, node: str = WORKER_NODE) -> None:
        for method in DESCRIBERS_BY_PORT[port]:
            setattr(self, method, _judged(port, method, getattr(target, method), judge, now_ms, node))


def _judged(port: str, method: str, fn: Any, judge: Any, now_ms: Any, node: str) -> Any:
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            result = await fn(*args, **kwargs)
        except Exception as error:
            judge(PortCall(now_ms(), node, port, method, args, kwargs, None, error))
            raise
        judge(PortCall(now_ms(), node, port, method, args, kwargs, result, None))
        return result

    call.__name__ = f"{port}.{method}"
    return call


def judged_stores(stores: "DirectStores", runtime: "DirectRuntime") -> tuple["DirectStores", ReferenceModel,
                                                                              list[Violation]]:
    """``stores`` behind ``JudgedStore``s feeding one ``ReferenceModel``; its
    violations are collected in the list returned (a divergence does not
    end the run: the counts and the list are the evidence)."""
    reference = ReferenceModel()
    violations: list[Violation] = []
    reference.attach(None, runtime.now_ms, violations.append)  # no trace: it judges port calls, not events
    judged = DirectStores(**{name: JudgedStore(name, getattr(stores, name), reference.on_port_call, runtime.now_ms)
                             for name in attrs.fields_dict(DirectStores)})
    return judged, reference, violations


@attrs.frozen
class DirectResult:
    duration_ms: int
    sentinels: int
    wakes: int           # runs started by the drivers (sentinel-year's ``wakes``)
    due: int             # occurrences due in the duration
    settled: dict        # finalized settlements by status
    unsettled: int       # submissions the ledger still holds non-terminal at the end
    pages: int           # pages the pager received
    switches: int        # task steps
    judged: bool = False  # the reference model judged every store call (``--judged``)
    reference_checks: int = 0   # the answers it judged
    violations: tuple = ()      # what it found, one line each (a clean model: none)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def run_direct(*, seed: int = 1, duration_ms: int, sentinels: int = 1, every_ms: int = EVERY_MS,
               paging: bool = True, stores: DirectStores | None = None, judged: bool = False) -> DirectResult:
    """Run ``sentinels`` schedules for ``duration_ms`` (then sentinel-year's
    settle) on bare stores, driven by ``DirectRuntime``. ``paging``: as
    ``sentinel-year --no-swarm`` (its ``pager`` switch on). ``stores``:
    fresh in-memory ones unless given (a test may count their calls).
    ``judged``: the reference model judges every store call (module docstring)."""
    assert duration_ms > 0 and sentinels >= 1
    runtime = DirectRuntime()
    streams = Streams(seed)
    stores = DirectStores() if stores is None else stores
    reference = None
    violations: list[Violation] = []
    if judged:
        stores, reference, violations = judged_stores(stores, runtime)
    schedules = {s.schedule_id: s for s in (Schedule(f"sentinel-{i}", every_ms, end_ms=duration_ms)
                                            for i in range(sentinels))}
    pager = PagerService().bind(WORKER_NODE)
    runs = CountingRuns(stores.ledger, stores.log, stores.schedules, WORKER_NODE, lease_ms=LEASE_MS,
                        now_ms=runtime.now_ms, sleep_ms=runtime.sleep_ms)
    drivers: dict[str, Any] = {}

    def alarm_on_time(run_id: str, busy_until_ms: int) -> None:
        # As the fleet's alarm service: a slow publish does not stop the next
        # occurrence's alarm from reaching its (busy) driver on time.
        schedule_id, occurrence_ms = parse_run_id(run_id)
        next_ms = occurrence_ms + schedules[schedule_id].every_ms
        if next_ms < busy_until_ms:
            runtime.spawn(f"alarm:{schedule_id}@{next_ms}", _alarm(drivers[schedule_id], next_ms), at_ms=next_ms)

    def effects(run_id: str):
        return wake_effects(run_id, runtime=runtime, streams=streams, prefix=Sentinels.name,
                            period_ms=lambda r: schedules[parse_run_id(r)[0]].every_ms,
                            alarm_on_time=alarm_on_time, pager=lambda: pager)

    made, processes = worker_processes(
        runtime, runs, stores, schedules, app.BUILD_V1, chains=build_chains(schedules), effects=effects,
        inline_cap_bytes=INLINE_CAP_BYTES_DEFAULT, validate_inputs=True, paging=paging,
        project_every_ms=PROJECT_EVERY_MS, retention_policy=RETENTION)
    drivers.update(made)
    for name, coro in processes:
        runtime.spawn(name, coro)
    try:
        runtime.run(duration_ms + SETTLE_MS)
        unsettled = _run_once(runtime, stores.ledger.scan_nonterminal())
    finally:
        runtime.close()
    return DirectResult(duration_ms=duration_ms, sentinels=sentinels,
                        wakes=sum(d.wakes for d in drivers.values()),
                        due=sum(s.due_count(duration_ms) for s in schedules.values()),
                        settled=dict(sorted(runs.settled.items())), unsettled=len(unsettled),
                        pages=pager._service.pages, switches=runtime.switches, judged=judged,
                        reference_checks=0 if reference is None else reference.checks,
                        violations=tuple(f"{v.invariant} at {v.time_ms} ms: {v.message}" for v in violations))


async def _alarm(driver: Any, occurrence_ms: int) -> None:
    await driver.wake(occurrence_ms)  # no faults here: any error is a bug, and ends the run


def _run_once(runtime: DirectRuntime, coro: Coroutine[Any, Any, Any]) -> Any:
    """A store call outside the loop (in-memory stores never suspend)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("an in-memory store call suspended")


class _Parser(argparse.ArgumentParser):
    """Bad input: one ``error:`` line and exit 2, never a usage dump or a traceback."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _duration_ms(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except DurationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _count(text: str) -> int:
    try:
        value = parse_whole(text)
    except NumberError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: expected a whole number of at least 1")
    return value


def _seed(text: str) -> int:
    try:
        value = parse_whole(text)
    except NumberError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: expected a whole number, e.g. --seed 1")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m scenarios.workloads.direct",
                     description="sentinel-year's wakes driven by direct calls (the harness's floor)")
    parser.add_argument("--seed", type=_seed, default=1)
    parser.add_argument("--duration", type=_duration_ms, default="30d")
    parser.add_argument("--sentinels", type=_count, default=1)
    parser.add_argument("--judged", action="store_true",
                        help="the reference model judges every store call's answer (the floor of a checked run)")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args(argv)
    result = run_direct(seed=args.seed, duration_ms=args.duration, sentinels=args.sentinels, judged=args.judged)
    if args.json:
        print(json.dumps(result.to_json(), sort_keys=True))
    else:
        judged = (f", {result.reference_checks} answers judged, {len(result.violations)} violations"
                  if result.judged else "")
        print(f"direct: {result.wakes} wakes ({result.due} due), settled {result.settled}, "
              f"{result.unsettled} unsettled, {result.pages} pages, {result.switches} switches{judged}")
        for line in result.violations[:5]:
            print(f"  {line}")
    # A divergence is a finding (a clean model has none): never a figure.
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
