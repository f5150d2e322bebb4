"""SimRuntime: the deterministic coroutine scheduler.

Model code is plain ``async def``. The only thing that ever crosses from a
task to the scheduler is a trap (trio's idea: one tiny, named boundary): the
wake time itself, a plain ``int`` yielded by a generator-based coroutine
(``_trap``, and the ``sleep_ms``/``sleep_until_ms``/``checkpoint`` written
in its shape). A trap says "wake me at ``wake_ms``"; sleeping, yielding
(``checkpoint``) and waiting all reduce to it; anything else a task yields
is a foreign awaitable, and the task fails. Store calls in simulation never suspend, so a store
call is atomic with respect to other tasks — interleavings happen only at
traps, and every trap is a point the scheduling stream may explore.

The ready structure is one heap of plain tuples ``(wake_ms, order, task)``.
``order`` is a global counter, so equal wake times run FIFO; with
``shuffle_ties`` the high bits come from the scheduling stream, which
permutes tasks that wake at the same instant while staying a pure function
of the seed. When nothing is runnable, time jumps to the next wake.

A ``schedule`` policy (``sim.interleave``: random, PCT, scripted replay)
replaces FIFO's pick among the tasks ready at the current instant; every
pick that is not FIFO's is recorded as a named ``Deviation`` in
``deviations``. FIFO (no policy) keeps the plain loop below untouched: the
policy loop is a separate method, so the common case pays nothing for it.

Why not trio: its deterministic mode is a private flag plus a seeded shuffle,
not a scheduler we can steer or record, and a ``trio.sleep`` under
``MockClock`` costs ~80x a switch here. The live runtime does use trio.
"""
from __future__ import annotations

import heapq
import itertools
import types
from typing import Any, Callable, Coroutine

from sim.interleave import DEVIATIONS_MAX, Chooser, Deviation, SchedulePolicy, await_site
from sim.node import Node, NodeCrashed, NodeDeadError
from sim.rng import Stream


@types.coroutine
def _trap(wake_ms: int):
    """Wake me at ``wake_ms``: the one trap. It yields the wake time itself,
    a plain ``int`` (``type(trap) is int``, never a subclass such as
    ``bool``), which is all the loop needs to push the task back: no trap
    object to build, no ``__await__`` call, no attribute to read back. A
    generator-based coroutine, so awaiting it costs one generator, about
    half of what a trap object with an ``__await__`` cost (the bare floor
    of ``loomsim bench`` still pays that, ARCHITECTURE §8)."""
    yield wake_ms


# A dying task's finally blocks may await (a cleanup step, a sleep): each
# such await is given GeneratorExit again, as a cancelled trio task gets
# Cancelled at each checkpoint, until the coroutine has ended. Bounded: a
# finally that catches GeneratorExit and awaits forever is a bug, asserted.
CLOSE_THROWS_MAX = 64


def close_coroutine(coro: Coroutine[Any, Any, Any]) -> None:
    """End ``coro`` now: its finally blocks run at this instant, never
    later at the garbage collector's (outside simulated time)."""
    try:
        coro.close()
        return
    except RuntimeError:
        pass  # it awaited in a finally block ("coroutine ignored GeneratorExit")
    for _ in range(CLOSE_THROWS_MAX):
        if coro.cr_frame is None:
            return
        try:
            coro.throw(GeneratorExit)
        except (GeneratorExit, StopIteration):
            return
        except BaseException:  # noqa: BLE001 - an error of a dying task's cleanup dies with it
            if coro.cr_frame is None:
                return
    raise AssertionError(f"a dying coroutine still awaits after {CLOSE_THROWS_MAX} GeneratorExits: "
                         f"{getattr(coro, '__qualname__', coro)!r}")


class Task:
    __slots__ = ("name", "node", "coro", "send", "alive", "sched_priority", "last_call", "parked_on")

    def __init__(self, name: str, node: Node, coro: Coroutine[Any, Any, Any]) -> None:
        self.name = name
        self.node = node
        self.coro = coro
        self.send = coro.send  # bound once: the hot loop calls it every switch
        self.alive = True
        # Owned by the schedule policy (PCT's priority); None until first seen.
        # On the task, not in a policy-side dict, so it dies with the task.
        self.sched_priority: int | None = None
        # The port call it made last ("after ledger.claim"), for reports.
        self.last_call = ""
        # The ``SimEvent`` it is parked on (``wait_until_ms``), or None.
        self.parked_on: SimEvent | None = None

    def __repr__(self) -> str:
        return f"<Task {self.node.label}/{self.name}>"


class SimEvent:
    """``model.runtime.Event`` on virtual time: a one-waiter latch.

    A parked task is an ordinary heap entry at its deadline; ``set()``
    moves it to now (the runtime takes its deadline entry out of the heap
    and pushes it at the current instant with a fresh order, so the waker
    runs on and the woken task follows in FIFO position, or wherever the
    scheduling policy puts it). Nothing here orders by identity: the heap
    entry is found by the task object's identity only to remove it, and the
    orders that decide who runs next are the runtime's counter. A crash of
    the waiter's node drops its entry and this event's reference to it
    (``SimRuntime.crash_node``): a woken dead task is never pushed.
    """

    __slots__ = ("_runtime", "_set", "_waiter")

    def __init__(self, runtime: "SimRuntime") -> None:
        self._runtime = runtime
        self._set = False
        self._waiter: Task | None = None

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            self._runtime._unpark(waiter)

    def is_set(self) -> bool:
        return self._set

    async def wait_until_ms(self, deadline_ms: int) -> bool:
        if self._set:
            return True  # latched: a set() before the wait is not lost
        runtime = self._runtime
        if deadline_ms <= runtime._now_ms:
            return False
        task = runtime._current
        assert task is not None, "wait_until_ms() outside a task"
        assert self._waiter is None, f"{task!r}: an event has one waiter, {self._waiter!r} waits already"
        assert task.parked_on is None, task
        self._waiter = task
        task.parked_on = self
        try:
            await _trap(deadline_ms)
        finally:
            # Woken, timed out, or closed by a crash: this task waits no more.
            task.parked_on = None
            if self._waiter is task:
                self._waiter = None
        return self._set


class TaskFailed(Exception):
    """A task raised an exception nobody handled: a bug, reported with its task."""

    def __init__(self, task_name: str, node_name: str, time_ms: int, error: BaseException) -> None:
        super().__init__(f"task {node_name}/{task_name} raised {type(error).__name__}: {error}")
        self.task_name = task_name
        self.node_name = node_name
        self.time_ms = time_ms
        self.error = error


# Tasks of a node with this role are the harness, not the system under test.
HARNESS_ROLE = "harness"

# Bound on scheduler steps at a single instant: a task that checkpoints in a
# loop without ever sleeping would otherwise spin forever at one time.
STEPS_PER_INSTANT_MAX = 1_000_000


class SimRuntime:
    """Implements ``model.runtime.Runtime`` on virtual time."""

    def __init__(self, scheduling: Stream | None = None, *, shuffle_ties: bool = False,
                 schedule: SchedulePolicy | None = None) -> None:
        self._heap: list[tuple[int, int, Task]] = []
        self._now_ms = 0
        # The heap's tie-break: a global counter (a C iterator, cheaper per
        # switch than an attribute's read-add-write).
        self._next_order = itertools.count(1).__next__
        self._scheduling = scheduling
        self._shuffle_ties = shuffle_ties and scheduling is not None
        self._current: Task | None = None
        self.stop_requested = False
        self.switches = 0
        self.on_task_crash: Callable[[Task], None] | None = None
        # Scheduling policy. ``chooser`` None means FIFO and the fast loop.
        self.schedule = schedule
        self.chooser: Chooser | None = None if schedule is None else schedule.bind(scheduling)
        if self.chooser is not None and self._shuffle_ties:
            raise ValueError(f"schedule {schedule.spec!r} and shuffle_ties are exclusive: a deviation is "
                             f"measured against FIFO order, which shuffle_ties replaces")
        # Every non-FIFO pick, in order, up to DEVIATIONS_MAX; ``deviation_count``
        # counts all of them. ``on_deviation`` (the world's trace) sees all.
        self.deviations: list[Deviation] = []
        self.deviation_count = 0
        self.on_deviation: Callable[[Deviation], None] | None = None
        # Decisions with two or more tasks ready at one instant (policy loop only).
        self.contested_decisions = 0
        # Resumptions so far at ``_instant_ms``: the ``step`` of a Deviation.
        # Kept across run() calls so a step index means the same thing
        # however the harness slices the run.
        self._instant_ms = -1
        self._instant_steps = 0

    # -- the Runtime protocol (what model code sees) -------------------------

    def now_ms(self) -> int:
        return self._now_ms

    # The three traps are generator-based coroutines (``_trap``'s shape,
    # written out rather than calling it: one generator per await, not two).
    # Their bodies run at the first ``send``, which the ``await`` makes at
    # once, in the same step and at the same instant as the call.

    @types.coroutine
    def sleep_ms(self, duration_ms: int):
        assert duration_ms >= 0, duration_ms
        yield self._now_ms + duration_ms

    @types.coroutine
    def sleep_until_ms(self, deadline_ms: int):
        now_ms = self._now_ms
        yield deadline_ms if deadline_ms > now_ms else now_ms

    @types.coroutine
    def checkpoint(self):
        yield self._now_ms

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> Task:
        current = self._current
        assert current is not None, "spawn() outside a task: use spawn_on()"
        return self.spawn_on(current.node, name, coro)

    def event(self) -> SimEvent:
        return SimEvent(self)

    def _unpark(self, task: Task) -> None:
        """``task`` is parked on an event that was just set: run it now.

        Its deadline entry leaves the heap (found by identity, O(heap): a
        wake is rare next to a switch, and the hot loops stay untouched);
        if it is not in the heap it is already due at this instant (moved
        to the policy loop's ready list) and wakes there anyway."""
        if not task.alive:
            return
        if self._drop_entry(task):
            self._push(self._now_ms, task)

    def _drop_entry(self, task: Task) -> bool:
        heap = self._heap
        for index, entry in enumerate(heap):
            if entry[2] is task:
                last = heap.pop()
                if index < len(heap):
                    heap[index] = last
                    heapq.heapify(heap)
                return True
        return False

    # -- harness API ----------------------------------------------------------

    @property
    def current_task(self) -> Task | None:
        return self._current

    def note_call(self, where: str) -> None:
        """The running task is in (or just after) a port call: a deviation
        that preempts it later names it ("preempted after ledger.claim")."""
        task = self._current
        if task is not None:
            task.last_call = where

    def spawn_on(self, node: Node, name: str, coro: Coroutine[Any, Any, Any], *, at_ms: int | None = None) -> Task:
        if not node.alive:
            coro.close()
            raise NodeDeadError(node.label, "runtime.spawn")
        task = Task(name, node, coro)
        node.tasks[task] = None
        self._push(self._now_ms if at_ms is None else max(at_ms, self._now_ms), task)
        return task

    def crash_node(self, node: Node) -> None:
        """Kill every task of ``node`` now. Raises in the caller if it is one of them."""
        if not node.alive:
            return
        node.alive = False
        current = self._current
        for task in list(node.tasks):
            task.alive = False
            if task.parked_on is not None:
                # Parked on an event: its deadline entry goes now (not left
                # to sit in the heap until a reconnect minutes away), and
                # closing it below unhooks it from the event.
                self._drop_entry(task)
            if task is current:
                continue  # a running coroutine can't be closed; it unwinds below
            # Run the dying task's finally blocks now, at a deterministic
            # instant, with the node already dead so any store call they make
            # is refused — and as the current task, so a spawn() from them
            # lands on the dead node and is refused too. Errors inside them
            # die with the node.
            self._current = task
            try:
                close_coroutine(task.coro)
            except BaseException:  # noqa: BLE001 - a dead node's errors are moot
                pass
            finally:
                self._current = current
        node.tasks.clear()
        if current is not None and current.node is node:
            raise NodeCrashed(node.label)

    def pause_node(self, node: Node, until_ms: int) -> None:
        node.paused_until_ms = max(node.paused_until_ms, until_ms)

    def _push(self, wake_ms: int, task: Task) -> None:
        order = self._next_order()
        if self._shuffle_ties:
            order |= self._scheduling.next_u64() << 40
        heapq.heappush(self._heap, (wake_ms, order, task))

    def run(self, until_ms: int) -> None:
        """Run tasks whose wake time is <= ``until_ms``; leave the clock there."""
        if self.chooser is not None:
            self._run_scheduled(until_ms)
            return
        # The hot loop of every simulation (ARCHITECTURE §8: within 1.5x of a
        # bare heap-of-coroutines loop). Locals instead of attribute lookups;
        # one try per switch (free in CPython 3.11 until it raises); the trap
        # is the wake time itself; the order comes from a C counter; the
        # switch count is kept in a local and stored once on the way out;
        # ``_current`` is set before each send and cleared on the way out
        # (between two sends only this loop runs, so nobody can see it
        # stale). No allocation besides the heap entry.
        heap = self._heap
        heappop = heapq.heappop
        heappush = heapq.heappush
        push = self._push
        next_order = self._next_order
        shuffle = self._shuffle_ties
        steps_at_instant = 0
        switches = 0
        now_ms = self._now_ms
        try:
            while heap and not self.stop_requested:
                entry = heap[0]
                wake_ms = entry[0]
                if wake_ms > until_ms:
                    break
                heappop(heap)
                task = entry[2]
                if not task.alive:
                    continue
                node = task.node
                if node.paused_until_ms > wake_ms:
                    push(node.paused_until_ms, task)
                    continue
                if wake_ms != now_ms:
                    assert wake_ms > now_ms, "time went backwards"
                    self._now_ms = now_ms = wake_ms
                    steps_at_instant = 0
                steps_at_instant += 1
                assert steps_at_instant <= STEPS_PER_INSTANT_MAX, f"livelock at t={wake_ms}ms"
                self._current = task
                switches += 1
                try:
                    trap = task.send(None)
                except StopIteration:
                    task.alive = False
                    node.tasks.pop(task, None)
                    continue
                except NodeCrashed:
                    task.alive = False
                    continue
                except Exception as error:
                    self._current = None
                    task.alive = False
                    node.tasks.pop(task, None)
                    if not node.alive:
                        # Its node crashed and a finally block then hit a dead
                        # port: the process is gone, the error with it.
                        continue
                    raise TaskFailed(task.name, node.label, now_ms, error) from error
                if type(trap) is not int:
                    self._current = None
                    task.alive = False
                    node.tasks.pop(task, None)
                    task.coro.close()
                    raise TaskFailed(task.name, node.label, now_ms,
                                     TypeError(f"task awaited a foreign awaitable: {type(trap).__name__}"))
                if shuffle:
                    push(trap, task)
                else:  # _push inlined: this line runs once per switch
                    heappush(heap, (trap, next_order(), task))
        finally:
            self._current = None
            self.switches += switches
        if until_ms > self._now_ms and not self.stop_requested:
            self._now_ms = until_ms

    def _run_scheduled(self, until_ms: int) -> None:
        """``run`` under a schedule policy: the policy picks among the tasks ready now.

        ``ready`` holds the heap entries due at ``now_ms`` in heap (FIFO)
        order: each step first moves newly due entries over from the heap —
        they were pushed after everything already in ``ready``, so appending
        keeps the order. Dead and paused entries are handled lazily when they
        reach the front, exactly when the FIFO loop would pop them, so a
        policy that always answers 0 reproduces the FIFO run. On exit (end,
        stop, or a failing task) the unrun entries go back to the heap with
        their original order, so the heap stays the only state between runs.
        """
        heap = self._heap
        heappop = heapq.heappop
        heappush = heapq.heappush
        chooser = self.chooser
        ready: list[tuple[int, int, Task]] = []
        now_ms = self._now_ms
        try:
            while not self.stop_requested:
                if not ready:
                    if not heap:
                        break
                    wake_ms = heap[0][0]
                    if wake_ms > until_ms:
                        break
                    if wake_ms != now_ms:
                        assert wake_ms > now_ms, "time went backwards"
                        self._now_ms = now_ms = wake_ms
                while heap and heap[0][0] == now_ms:
                    ready.append(heappop(heap))
                # The front as the FIFO loop would pop it: skip the dead,
                # send the paused to their wake time.
                while ready:
                    task = ready[0][2]
                    if not task.alive:
                        del ready[0]
                    elif task.node.paused_until_ms > now_ms:
                        del ready[0]
                        self._push(task.node.paused_until_ms, task)
                    else:
                        break
                if not ready:
                    continue
                if ready[0][2].node.role == HARNESS_ROLE:
                    # The harness (timers, chaos, the outside world) is not the
                    # system under test: it runs in FIFO position, is never a
                    # choice and counts no step, so whether it is there (a
                    # probabilistic run) or not (its script replayed) does not
                    # renumber the system's decisions.
                    entry = ready.pop(0)
                    task = entry[2]
                    wake_ms = self._resume(task, now_ms)
                    if wake_ms is not None:
                        heappush(heap, (wake_ms, self._next_order(), task))
                    continue
                if self._instant_ms != now_ms:
                    self._instant_ms = now_ms
                    self._instant_steps = 0
                step = self._instant_steps
                self._instant_steps = step + 1
                assert step < STEPS_PER_INSTANT_MAX, f"livelock at t={now_ms}ms"
                if len(ready) == 1:
                    entry = ready.pop()
                else:
                    candidates = [e for e in ready if e[2].alive and e[2].node.paused_until_ms <= now_ms
                                  and e[2].node.role != HARNESS_ROLE]
                    index = 0
                    if len(candidates) > 1:
                        self.contested_decisions += 1
                        index = chooser.choose([e[2] for e in candidates], now_ms, step)
                        assert 0 <= index < len(candidates), index
                    entry = candidates[index]
                    if index:
                        self._record_deviation(step, now_ms, entry[2], candidates[0][2])
                        ready.remove(entry)  # orders are unique: never compares tasks
                    else:
                        del ready[0]
                task = entry[2]
                wake_ms = self._resume(task, now_ms)
                if wake_ms is not None:
                    heappush(heap, (wake_ms, self._next_order(), task))
        finally:
            for entry in ready:
                heappush(heap, entry)
        if until_ms > self._now_ms and not self.stop_requested:
            self._now_ms = until_ms

    def _resume(self, task: Task, now_ms: int) -> int | None:
        """One step of ``task`` (the FIFO loop's body): its next wake, or None if it ended."""
        node = task.node
        self._current = task
        self.switches += 1
        try:
            trap = task.send(None)
        except StopIteration:
            task.alive = False
            node.tasks.pop(task, None)
            self._current = None
            return None
        except NodeCrashed:
            task.alive = False
            self._current = None
            return None
        except Exception as error:
            self._current = None
            task.alive = False
            node.tasks.pop(task, None)
            if not node.alive:
                return None
            raise TaskFailed(task.name, node.label, now_ms, error) from error
        self._current = None
        if type(trap) is not int:
            task.alive = False
            node.tasks.pop(task, None)
            task.coro.close()
            raise TaskFailed(task.name, node.label, now_ms,
                             TypeError(f"task awaited a foreign awaitable: {type(trap).__name__}"))
        return trap

    def _record_deviation(self, step: int, now_ms: int, chosen: Task, preempted: Task) -> None:
        deviation = Deviation(step, now_ms, chosen.name, chosen.node.label, preempted.name,
                              preempted.node.label, await_site(preempted.coro), preempted.last_call)
        self.deviation_count += 1
        if len(self.deviations) < DEVIATIONS_MAX:
            self.deviations.append(deviation)
        if self.on_deviation is not None:
            self.on_deviation(deviation)

    def shutdown(self) -> None:
        """End the run: close every pending coroutine now, in heap order.

        Without this, unfinished coroutines would be closed by the garbage
        collector at some later, unpredictable moment, running their
        ``finally`` blocks outside simulated time. Callers mark nodes dead
        first so nothing a closing task does can reach a store.
        """
        heap = sorted(self._heap, key=lambda entry: (entry[0], entry[1]))
        self._heap = []
        for _, _, task in heap:
            if task.alive:
                task.alive = False
                task.node.tasks.pop(task, None)
                try:
                    close_coroutine(task.coro)
                except BaseException:  # noqa: BLE001 - the run is over
                    pass

    def idle(self) -> bool:
        return not any(task.alive for _, _, task in self._heap)
