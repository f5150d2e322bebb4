"""Schedules are data: which ready task runs next, and what that choice was.

Interleavings happen only at traps (see ``sim.runtime``): a store call never
suspends, so the only freedom a scheduler has is *which of the tasks ready at
the current instant* (same ``wake_ms``) it resumes next. FIFO — the lowest
heap order, i.e. the task that became ready first — is the default and the
baseline. A schedule policy may pick another ready task; every such pick is a
``Deviation``, recorded by name (task, node, and the await site where the
passed-over task sat suspended), never as "draw #7 = 1". The recorded
deviations sit next to the fault script: replayed with ``ScriptedPolicy`` they
reproduce the run, and a shrinker may drop any of them (that decision just
goes back to FIFO).

Policies, chosen by ``parse_schedule``:

- ``fifo``: today's scheduler, byte for byte (the runtime keeps its fast loop).
- ``random``: a uniform pick among the ready-now tasks.
- ``pct:D`` (or ``pct:D:K``): probabilistic concurrency testing (Burckhardt,
  Kothari, Musuvathi, Nagarakatte, ASPLOS 2010). Each task gets a random
  priority when first seen; the highest-priority ready task runs; at D-1
  change points, drawn up front among the first K *contested* decisions, the
  task that just ran drops below every other priority.
- ``ScriptedPolicy(deviations)``: replay (built in Python, not parsed).

A policy object is immutable configuration (safe to share across seeds and
runs); ``bind(stream)`` makes the per-run ``Chooser`` that carries the state.
Every random draw comes from the ``scheduling`` stream handed to ``bind``, and
only at a contested decision (two or more tasks ready now), so a FIFO-only
stretch of a run draws nothing.

What PCT's bound does and does not say. The paper proves: for a program of
n threads and k steps, one run finds a given bug of depth d (d ordering
constraints between steps) with probability at least 1/(n * k^(d-1)). That
is for its model (every step a scheduling point, priorities for all threads
up front). This adaptation counts as steps only contested decisions and
gives priorities at first sight; the argument carries over for bugs whose
ordering constraints all sit on contested decisions, but that is our
reading, not a proof. Either way the bound covers only the order in which
trap-separated task segments resume *at one instant* of virtual time. It says
nothing about orders across instants (virtual time fixes those — explore
them with faults, latencies and clock choices), nothing about atomicity
inside a segment (store calls are atomic here; live mode covers real SQLite
concurrency), and nothing past the K-th contested decision. A sweep of
passing seeds is evidence, never a proof of correctness.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable, Protocol

import attrs

from sim.rng import Stream

if TYPE_CHECKING:  # typing only: sim.runtime imports this module
    from sim.runtime import Task

# Deviations kept verbatim on the runtime; beyond this only the count grows
# (memory must not grow with simulated time). Same bound as fault events.
DEVIATIONS_MAX = 100_000

# PCT draws its D-1 change points among the first K contested decisions
# (>= 2 tasks ready at one instant). PCT's bound degrades as 1/K^(d-1), so K
# should be about the number of contested decisions in the window where the
# bug lives — a handful in a focused test, thousands over a long run
# (sentinel-year: about 60 per simulated week).
# ``pct:D:K`` fixes K. Plain ``pct:D`` does not know the run's length, so each
# seed draws its own budget, log-uniformly: K = 2^e with e uniform in
# [PCT_SCALE_LOG2_MIN, PCT_SCALE_LOG2_MAX] (4 .. 1,048,576). For a run of
# k <= 2^20 contested decisions, a seed draws the smallest K >= k with
# probability 1/19, and then PCT's bound holds with K <= 2k: the price of not
# knowing k is a factor of 1/19 * 2^-(d-1). A seed whose K is far below k
# only perturbs the start of the run; one whose K is far above k rarely fires
# a change point before the end (it runs on its random priorities, i.e. d=1).
PCT_SCALE_LOG2_MIN = 2
PCT_SCALE_LOG2_MAX = 20
PCT_DEPTH_MAX = 64
PCT_STEPS_MAX = 1 << 40

# Depth bound on the cr_await walk: awaits nest a handful deep in practice.
_AWAIT_CHAIN_MAX = 256

# A deviation's ``kind`` in a script shared with faults (never a fault kind).
SCRIPT_KIND = "schedule"
_JSON_FIELDS = ("time_ms", "kind", "step", "node", "task", "preempted_node", "preempted_task", "await_site",
                "last_call")

_SPEC_HELP = "expected fifo, random, pct:D or pct:D:K"
_POSITIVE_INT = re.compile(r"[1-9][0-9]{0,15}")


@attrs.frozen
class Deviation:
    """One scheduling decision that was not FIFO's.

    At ``time_ms``, at the ``step``-th task resumption of that instant
    (0-based, counting every resumption at that instant, contested or not),
    ``chosen_task`` on ``chosen_node`` ran although ``preempted_task`` on
    ``preempted_node`` was first in line; the latter was suspended at
    ``await_site`` (the qualified name of its innermost awaiting coroutine),
    ``last_call`` the port call it made last ("after ledger.claim", "in
    log.append" when suspended inside one; empty before its first call).

    ``(time_ms, step)`` is the replay key, like a fault's ``(time_ms, site,
    hit)``: a change elsewhere in a run (a shrinker removing a fault at day 3)
    does not shift the key of a deviation at day 5. ``step`` None is for
    hand-written scripts: the first contested decision at or after
    ``time_ms`` at which ``chosen_task`` is ready but not first in line.
    ``preempted_*``, ``await_site`` and ``last_call`` are what a person
    reads; replay does not need them.
    """

    step: int | None
    time_ms: int
    chosen_task: str
    chosen_node: str
    preempted_task: str
    preempted_node: str
    await_site: str
    last_call: str = ""

    def summary(self) -> str:
        """"worker-2/worker preempted after ledger.claim (at worker_loop); worker-1/worker ran first"."""
        where = f"{self.last_call} (at {self.await_site})" if self.last_call else f"at {self.await_site}"
        return (f"{self.preempted_node}/{self.preempted_task} preempted {where}; "
                f"{self.chosen_node}/{self.chosen_task} ran first")

    def describe(self) -> str:
        at = "" if self.step is None else f", step {self.step}"
        return f"t={self.time_ms}ms{at}: {self.summary()}"

    def to_json(self) -> dict[str, Any]:
        """A flat script entry, shaped like a fault's (``faults.script``) so both share one list.

        ``node``/``task`` name the task the entry makes run; ``kind`` is
        ``schedule``; ``step`` is left out when None.
        """
        value: dict[str, Any] = {"time_ms": self.time_ms, "kind": SCRIPT_KIND}
        if self.step is not None:
            value["step"] = self.step
        value.update({"node": self.chosen_node, "task": self.chosen_task, "preempted_node": self.preempted_node,
                      "preempted_task": self.preempted_task, "await_site": self.await_site})
        if self.last_call:
            value["last_call"] = self.last_call
        return value

    @classmethod
    def from_json(cls, entry: Any, where: str = "schedule entry") -> "Deviation":
        """Inverse of ``to_json``. Hand-written entries need only time_ms, kind, node, task."""
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected an object, got {type(entry).__name__}")
        if entry.get("kind") != SCRIPT_KIND:
            raise ValueError(f"{where}: kind must be {SCRIPT_KIND!r}, got {entry.get('kind')!r:.40}")
        unknown = sorted(set(entry) - set(_JSON_FIELDS))
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(_JSON_FIELDS)}")
        for name in ("time_ms", "step"):
            value = entry.get(name)
            if (value is not None or name == "time_ms") and (type(value) is not int or value < 0):
                raise ValueError(f"{where}: {name!r} must be a non-negative integer, got {value!r:.40}")
        for name in ("node", "task"):
            if type(entry.get(name)) is not str or not entry[name]:
                raise ValueError(f"{where}: {name!r} must be a non-empty string, got {entry.get(name)!r:.40}")
        for name in ("preempted_node", "preempted_task", "await_site", "last_call"):
            if type(entry.get(name, "")) is not str:
                raise ValueError(f"{where}: {name!r} must be a string, got {entry[name]!r:.40}")
        return cls(entry.get("step"), entry["time_ms"], entry["task"], entry["node"],
                   entry.get("preempted_task", ""), entry.get("preempted_node", ""), entry.get("await_site", ""),
                   entry.get("last_call", ""))


def await_site(coro: Any) -> str:
    """Where a suspended coroutine waits: its innermost coroutine's qualified name.

    Follows ``cr_await`` (and ``gi_yieldfrom`` through generator-based
    awaitables such as a trap's ``__await__``) down to the last coroutine
    frame. Names only — no line numbers or paths — so the string is the same
    in every process and survives unrelated edits to the file.
    """
    code = getattr(coro, "cr_code", None)
    if code is None:
        return type(coro).__name__
    if getattr(coro, "cr_frame", None) is not None and coro.cr_await is None and not coro.cr_suspended:
        return f"{code.co_qualname or code.co_name} (not started)"
    innermost = code
    obj = coro
    for _ in range(_AWAIT_CHAIN_MAX):
        if obj is None:
            break
        code = getattr(obj, "cr_code", None)
        if code is not None:
            innermost = code
            obj = obj.cr_await
        else:
            obj = getattr(obj, "gi_yieldfrom", None)
    return innermost.co_qualname or innermost.co_name


class Chooser(Protocol):
    """Per-run scheduling state. Called only when two or more tasks are ready now."""

    def choose(self, ready: list["Task"], time_ms: int, step: int) -> int:
        """Index into ``ready`` (FIFO order: index 0 is FIFO's pick) of the task to resume."""
        ...


class SchedulePolicy(Protocol):
    @property
    def spec(self) -> str:
        """The canonical spec (``fifo``, ``random``, ``pct:3``, ``pct:3:200``, ``scripted:N``) for run configs."""
        ...

    def bind(self, stream: Stream | None) -> Chooser | None:
        """Fresh per-run state, or None for FIFO (the runtime's fast loop)."""
        ...


# -- FIFO ----------------------------------------------------------------------


@attrs.frozen
class FifoPolicy:
    @property
    def spec(self) -> str:
        return "fifo"

    def bind(self, stream: Stream | None) -> None:
        return None


# -- random --------------------------------------------------------------------


class _RandomChooser:
    __slots__ = ("_stream",)

    def __init__(self, stream: Stream) -> None:
        self._stream = stream

    def choose(self, ready: list["Task"], time_ms: int, step: int) -> int:
        return self._stream.below(len(ready))


@attrs.frozen
class RandomPolicy:
    @property
    def spec(self) -> str:
        return "random"

    def bind(self, stream: Stream | None) -> _RandomChooser:
        return _RandomChooser(_require_stream(stream, self.spec))


# -- PCT -------------------------------------------------------------------------


class _PctChooser:
    """PCT over contested decisions.

    Priorities live on the task (``Task.sched_priority``): a fresh task gets
    ``depth + u64`` (all above every lowered value), the task that ran the
    i-th change point gets ``depth - i`` (1..depth-1, later points lower), as
    in the paper. Ties (two equal u64 draws) go to FIFO order.
    """

    __slots__ = ("_stream", "_depth", "steps", "_change_points", "decisions")

    def __init__(self, stream: Stream, depth: int, steps: int | None) -> None:
        self._stream = stream
        self._depth = depth
        if steps is None:
            # Never fewer slots than change points.
            steps = max(1 << stream.between(PCT_SCALE_LOG2_MIN, PCT_SCALE_LOG2_MAX), depth - 1)
        self.steps = steps
        # decision index -> i (1-based change point number), drawn up front.
        # Distinct points by rejection; depth - 1 <= steps holds (PctPolicy
        # checks a given K, the drawn one is clamped above).
        self._change_points: dict[int, int] = {}
        for i in range(1, depth):
            point = stream.below(steps)
            while point in self._change_points:
                point = stream.below(steps)
            self._change_points[point] = i
        self.decisions = 0

    def change_points(self) -> list[int]:
        """The contested-decision indices at which a priority drops, ascending."""
        return sorted(self._change_points)

    def choose(self, ready: list["Task"], time_ms: int, step: int) -> int:
        best_index = 0
        best_priority = -1
        for index, task in enumerate(ready):
            priority = task.sched_priority
            if priority is None:
                task.sched_priority = priority = self._depth + self._stream.next_u64()
            if priority > best_priority:
                best_index, best_priority = index, priority
        lowered = self._change_points.get(self.decisions)
        self.decisions += 1
        if lowered is not None:
            ready[best_index].sched_priority = self._depth - lowered
        return best_index


@attrs.frozen
class PctPolicy:
    """PCT with bug depth ``depth`` over a budget of ``steps`` contested decisions (None: per-seed scale)."""

    depth: int
    steps: int | None = None

    def __attrs_post_init__(self) -> None:
        if type(self.depth) is not int or not 1 <= self.depth <= PCT_DEPTH_MAX:
            raise ValueError(f"pct depth D must be an integer in 1..{PCT_DEPTH_MAX}, got {self.depth!r}")
        if self.steps is not None and (type(self.steps) is not int or not 1 <= self.steps <= PCT_STEPS_MAX
                                       or self.steps < self.depth - 1):
            raise ValueError(f"pct step budget K must be an integer in {max(1, self.depth - 1)}..{PCT_STEPS_MAX} "
                             f"(K >= D-1 change points), got {self.steps!r}")

    @property
    def spec(self) -> str:
        return f"pct:{self.depth}" if self.steps is None else f"pct:{self.depth}:{self.steps}"

    def bind(self, stream: Stream | None) -> _PctChooser:
        return _PctChooser(_require_stream(stream, self.spec), self.depth, self.steps)


# -- scripted (replay) -------------------------------------------------------------


def _find(ready: list["Task"], task_name: str, node: str) -> int:
    # ``node`` is a label (``worker-1#3``, what runs record) or a bare name
    # (``worker-1``, what a person writes). Either names one live process:
    # at most one incarnation of a node has tasks at a time.
    for index, task in enumerate(ready):
        if task.name == task_name and (task.node.label == node or task.node.name == node):
            return index
    return -1


class _ScriptedChooser:
    """Replays recorded deviations; FIFO everywhere else.

    A keyed deviation applies at its exact ``(time_ms, step)`` if the chosen
    task is ready then; otherwise it is counted in ``missed`` (the run has
    diverged from the recording there, e.g. after a shrinker dropped a fault)
    and the decision stays FIFO.
    """

    __slots__ = ("_keyed", "_loose", "_lost", "applied", "missed")

    def __init__(self, deviations: Iterable[Deviation]) -> None:
        self._keyed: dict[tuple[int, int], Deviation] = {}
        loose: list[Deviation] = []
        for deviation in deviations:
            if deviation.step is None:
                loose.append(deviation)
            else:
                self._keyed[(deviation.time_ms, deviation.step)] = deviation
        loose.sort(key=lambda d: d.time_ms)  # stable: script order among equal times
        self._loose = loose
        self._lost: list[Deviation] = []  # the missed ones
        self.applied = 0
        self.missed = 0

    def pending(self) -> int:
        """Deviations not applied (yet): a replay that ends with some left diverged or ended early."""
        return len(self._keyed) + len(self._loose)

    def unapplied(self) -> list[Deviation]:
        """The deviations that never applied: missed, or never reached."""
        return [*self._lost, *self._keyed.values(), *self._loose]

    def choose(self, ready: list["Task"], time_ms: int, step: int) -> int:
        keyed = self._keyed
        if keyed:
            deviation = keyed.pop((time_ms, step), None)
            if deviation is not None:
                index = _find(ready, deviation.chosen_task, deviation.chosen_node)
                if index >= 0:
                    self.applied += 1
                    return index
                self.missed += 1
                self._lost.append(deviation)
        loose = self._loose
        if loose and loose[0].time_ms <= time_ms:
            for position, deviation in enumerate(loose):
                if deviation.time_ms > time_ms:
                    break
                index = _find(ready, deviation.chosen_task, deviation.chosen_node)
                if index > 0:
                    del loose[position]
                    self.applied += 1
                    return index
        return 0


@attrs.frozen
class ScriptedPolicy:
    """Replay ``deviations`` (recorded or hand-written); FIFO at every other decision."""

    deviations: tuple[Deviation, ...] = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        seen: set[tuple[int, int]] = set()
        for index, deviation in enumerate(self.deviations):
            if not isinstance(deviation, Deviation):
                raise ValueError(f"schedule script entry {index}: expected a Deviation, "
                                 f"got {type(deviation).__name__}")
            if deviation.step is not None:
                key = (deviation.time_ms, deviation.step)
                if key in seen:
                    raise ValueError(f"schedule script entry {index}: a second deviation at "
                                     f"t={key[0]}ms step {key[1]}")
                seen.add(key)

    @property
    def spec(self) -> str:
        return f"scripted:{len(self.deviations)}"

    def bind(self, stream: Stream | None) -> _ScriptedChooser:
        return _ScriptedChooser(self.deviations)


# -- the public boundary --------------------------------------------------------------


def _require_stream(stream: Stream | None, spec: str) -> Stream:
    if stream is None:
        raise ValueError(f"schedule {spec!r} needs a scheduling stream (SimRuntime(scheduling=...))")
    return stream


def parse_schedule(spec: str) -> FifoPolicy | RandomPolicy | PctPolicy:
    """``fifo`` | ``random`` | ``pct:D`` | ``pct:D:K`` -> a policy. Bad specs raise a one-line ValueError."""
    if not isinstance(spec, str):
        raise ValueError(f"schedule must be a string ({_SPEC_HELP}), got {type(spec).__name__}")
    text = spec.strip()
    if text == "fifo":
        return FifoPolicy()
    if text == "random":
        return RandomPolicy()
    head, _, rest = text.partition(":")
    if head == "pct":
        parts = rest.split(":") if rest else []
        if not 1 <= len(parts) <= 2 or not all(_POSITIVE_INT.fullmatch(p) for p in parts):
            raise ValueError(f"bad schedule {spec!r}: pct needs a positive integer depth D and optional "
                             f"step budget K, as pct:D or pct:D:K (e.g. pct:3)")
        depth = int(parts[0])
        steps = int(parts[1]) if len(parts) == 2 else None
        try:
            return PctPolicy(depth, steps)
        except ValueError as error:
            raise ValueError(f"bad schedule {spec!r}: {error}") from None
    raise ValueError(f"unknown schedule {spec!r}: {_SPEC_HELP}")
