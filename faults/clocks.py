"""Clocks per node: skew, drift and jumps, the way real machines keep time.

In a real deployment every machine has its own clock. It starts some way
off the true time (an offset), runs a little fast or slow (a drift, in parts
per million) until its time daemon corrects it (every ``CLOCK_SYNC_MS``:
the drift's error grows from zero again after each sync), and now and then
is stepped by hand or by a confused daemon (a jump, forward or back). This
module gives every simulated node such a clock:

    node clock = true time + offset + drift since the last sync + the jumps so far

The clock belongs to the *machine*, keyed by node name: a restarted
incarnation (``worker-1#3``) keeps ``worker-1``'s clock.

What reads which clock (ARCHITECTURE §3):

- model code on a node reads its node's clock: the runtime a workload
  hands it (``World.runtime_for(node)``) answers ``now_ms`` from the clock,
  and ``sleep_until_ms`` / ``Event.wait_until_ms`` deadlines are read in
  that clock (sleeping ``deadline - now`` true milliseconds); ``sleep_ms``
  is a true duration (a monotonic timer). Everything such code hands a
  store as ``now_ms`` (lease expiries, createdAt, settlement times,
  schedule occurrences) is therefore the node's time: the stores take
  ``now_ms`` from their caller, as an embedded SQLite adapter must.
- the harness keeps true time: trace events, ``FaultEvent.time_ms``, the
  scheduler, the oracles.

**The claimed tolerance.** The system claims to run correctly while every
node's clock is within ``CLOCK_TOLERANCE_MS`` (1 s) of the true time, so
any two nodes within twice that: an offset of at most 500 ms, a drift of at
most 100 ppm between syncs an hour apart (at most 360 ms), and steps that
keep the jumps' sum within 140 ms. One second is a fifth of the shortest
lease any scenario draws (5 s) and a tiny share of a sentinel's default
cadence (5 minutes), so a clock error can move a takeover or a wake by a
share of a lease or a period, never by a whole one (a sentinel run with
``--every-ms`` near its 1 s floor is outside the claim). Safety does not
rest on it: every ownership write is fenced by the epoch the ledger
grants, so a node that believes its lease is live when it is not is
refused, whatever its clock says. Beyond the tolerance (``clock-jump-beyond``,
``--beyond-contract`` only) a node acts on beliefs its clock cannot
support: it takes over a lane whose owner's lease is live, it starts a
schedule's occurrence before it is due, it writes timestamps the rest of
the deployment will read as the future. The ``clock-tolerance`` oracle
(``scenarios/invariants/clock_tolerance.py``) watches for exactly that, in
true time, and the run ends DETECTED.

Faults: ``clock-skew`` (a swarm kind: when enabled, each node draws its
offset and drift from the stream ``clock/<node name>`` within the knobs
``clock_offset_ms_max`` and ``clock_drift_ppm_max``); ``clock-jump`` (timed,
``ClockJumps``: a node's clock stepped forward or back within the
tolerance, through the fault plan, so a script replays it at its time);
``clock-jump-beyond`` (timed, beyond the contract: a step of 20 minutes to
two hours). The system's own side of the claim is ``model.clocks``: a
process that reads a durable timestamp further in its future than the
claim allows refuses to act, ``ClockOffsetExceeded``. A skewed clock is a
recorded fault of its machine (site ``clock.skew``), made when the clock
is: a script's entry skews that node on replay (the seed says by how much),
so an empty script skews nothing and shrinking can drop one node's skew.
With neither skew nor jumps in a run every node's clock is the true clock
and model code is handed ``world.runtime`` itself: no call pays for clocks
it does not have, and the trace is the one a run had before clocks existed.
"""
from __future__ import annotations

from typing import Any, Callable

from faults.kinds import CLOCK_JUMP, CLOCK_JUMP_BEYOND, CLOCK_SKEW
from model.clocks import MAX_CLOCK_OFFSET_MS
from sim.clock import MS_PER_HOUR, MS_PER_MINUTE
from sim.node import Node
from sim.workload import Workload
from sim.world import FaultEvent, World

# The claimed tolerance: every node's clock within this of the true time
# (half the offset between two machines the system claims, ``model.clocks``).
CLOCK_TOLERANCE_MS = MAX_CLOCK_OFFSET_MS // 2
# Its parts: the largest offset, drift and jumps' sum a node may have.
CLOCK_OFFSET_MS_MAX = 500
CLOCK_DRIFT_PPM_MAX = 100
CLOCK_SYNC_MS = MS_PER_HOUR  # the time daemon's period: a drift's error restarts from 0 at each sync
CLOCK_JUMP_SUM_MS_MAX = 140
PPM = 1_000_000
assert CLOCK_OFFSET_MS_MAX + CLOCK_DRIFT_PPM_MAX * CLOCK_SYNC_MS // PPM + CLOCK_JUMP_SUM_MS_MAX <= CLOCK_TOLERANCE_MS
# Two nodes' clocks are at most this far apart within the tolerance.
CLOCK_SKEW_MS_MAX = 2 * CLOCK_TOLERANCE_MS
assert CLOCK_SKEW_MS_MAX == MAX_CLOCK_OFFSET_MS
# A step beyond the tolerance: from 20 minutes (far out of the band, and
# further than any call is held, so a timestamp behind by it is a clock,
# not a slow call: ``scenarios/invariants/clock_tolerance.py``) to 2 hours.
BEYOND_JUMP_MS = (20 * MS_PER_MINUTE, 2 * MS_PER_HOUR)

# The site a skewed clock's fault is recorded at (its offset and drift in
# the ``clock.skew`` event beside it), when the node's clock is made.
CLOCK_SITE_SKEW = "clock.skew"
CLOCK_SITE_FORWARD = "clock.forward"
CLOCK_SITE_BACK = "clock.back"
CLOCK_SITES = (CLOCK_SITE_FORWARD, CLOCK_SITE_BACK)
# The kinds after which a node's clock may be off true time: an oracle
# whose bound is read on two clocks widens it by the tolerance once one fired.
CLOCK_FAULT_KINDS = (CLOCK_SKEW, CLOCK_JUMP, CLOCK_JUMP_BEYOND)
# The swarm knobs (added last to a scenario's knobs: drawn by name).
OFFSET_KNOB = "clock_offset_ms_max"
DRIFT_KNOB = "clock_drift_ppm_max"
# Which clock the stores decide on (``STORE_CLOCK_KNOB``, drawn after the
# two above, in effect only with ``clock-skew``): 0, the caller's (the
# ``now_ms`` it hands the store, as an embedded SQLite adapter must take
# it); 1, their own machine's, ``STORE_MACHINE`` (a store on its own
# server: a Durable Object's SQLite). The run's config says which
# (``store_clock``: ``STORE_MACHINE`` or ``CALLER_CLOCK``).
STORE_CLOCK_KNOB = "store_clock"
STORE_MACHINE = "store"
CALLER_CLOCK = "caller"
# The parameter a port method takes its caller's time in.
NOW_PARAMETER = "now_ms"


def clock_knobs() -> tuple[Any, ...]:
    """The knobs bounding a seed's skew, each legal up to the tolerance's
    part, and the one choosing the stores' clock."""
    from faults.swarm import Knob

    return (Knob(OFFSET_KNOB, CLOCK_OFFSET_MS_MAX, 0, CLOCK_OFFSET_MS_MAX,
                 "largest clock offset a node draws under clock-skew (ms)", values=(10, 100, 250, CLOCK_OFFSET_MS_MAX)),
            Knob(DRIFT_KNOB, CLOCK_DRIFT_PPM_MAX, 0, CLOCK_DRIFT_PPM_MAX,
                 "largest clock drift a node draws under clock-skew (ppm)", values=(0, 10, 50, CLOCK_DRIFT_PPM_MAX)),
            Knob(STORE_CLOCK_KNOB, 0, 0, 1, "under clock-skew, the stores decide on their own machine's clock "
                 f"({STORE_MACHINE!r}, 1) or on their caller's (0)", values=(0, 1)))


def tolerance_line() -> str:
    """The claimed tolerance, as ``loomsim describe`` prints it."""
    return (f"every node's clock within {CLOCK_TOLERANCE_MS} ms of true time (any two within "
            f"{CLOCK_SKEW_MS_MAX} ms): offset <= {CLOCK_OFFSET_MS_MAX} ms, drift <= {CLOCK_DRIFT_PPM_MAX} ppm "
            f"between syncs every {CLOCK_SYNC_MS // MS_PER_MINUTE} min, jumps summing to <= "
            f"{CLOCK_JUMP_SUM_MS_MAX} ms; safety rests on the epoch fence, not on clocks; beyond it "
            f"({CLOCK_JUMP_BEYOND}) the clock-tolerance oracle must detect; the stores decide on their "
            f"caller's clock, or ({STORE_CLOCK_KNOB}=1, one seed in two with {CLOCK_SKEW}) on their own clock "
            f"(machine {STORE_MACHINE!r}, skewed like any node)")


class NodeClock:
    """One machine's clock (see the module docstring for the formula)."""

    __slots__ = ("name", "offset_ms", "drift_ppm", "jump_ms", "_true_ms")

    def __init__(self, name: str, true_ms: Callable[[], int], offset_ms: int = 0, drift_ppm: int = 0,
                 jump_ms: int = 0) -> None:
        self.name = name
        self._true_ms = true_ms
        self.offset_ms = offset_ms
        self.drift_ppm = drift_ppm
        self.jump_ms = jump_ms

    def at(self, true_ms: int) -> int:
        """What this clock reads at true time ``true_ms`` (integer-exact).
        Never before the simulation's epoch: the system's timestamps start
        there (a clock behind it at the start reads 0 until true time
        catches up, as a machine's clock set at its boot would)."""
        local_ms = true_ms + self.offset_ms + (true_ms % CLOCK_SYNC_MS) * self.drift_ppm // PPM + self.jump_ms
        return local_ms if local_ms > 0 else 0

    def now_ms(self) -> int:
        return self.at(self._true_ms())

    def error_ms(self) -> int:
        """This clock minus the true time, now."""
        true_ms = self._true_ms()
        return self.at(true_ms) - true_ms

    def jump(self, amount_ms: int) -> None:
        self.jump_ms += amount_ms


class _NodeEvent:
    """``model.runtime.Event`` whose deadline is read in the node's clock."""

    __slots__ = ("_event", "_clock", "set", "is_set")

    def __init__(self, event: Any, clock: NodeClock) -> None:
        self._event = event
        self._clock = clock
        self.set = event.set
        self.is_set = event.is_set

    def wait_until_ms(self, deadline_ms: int) -> Any:
        true_ms = self._clock._true_ms()
        return self._event.wait_until_ms(true_ms + deadline_ms - self._clock.at(true_ms))


class NodeRuntime:
    """``model.runtime.Runtime`` for the tasks of one node: ``now_ms`` and
    deadlines in the node's clock; sleeps, spawns, checkpoints on the
    simulation's runtime (the harness API, e.g. ``spawn_on``, passes
    through)."""

    def __init__(self, runtime: Any, clock: NodeClock) -> None:
        self._runtime = runtime
        self.clock = clock
        self.now_ms = clock.now_ms
        self.sleep_ms = runtime.sleep_ms
        self.checkpoint = runtime.checkpoint
        self.spawn = runtime.spawn

    def sleep_until_ms(self, deadline_ms: int) -> Any:
        # ``deadline - now`` true milliseconds; a deadline not yet reached
        # sleeps at least 1 ms, so a slow clock's caller that loops until
        # its clock reaches the deadline always moves time on.
        left_ms = deadline_ms - self.clock.now_ms()
        return self._runtime.sleep_ms(left_ms if left_ms > 0 else 0)

    def event(self) -> _NodeEvent:
        return _NodeEvent(self._runtime.event(), self.clock)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)


class NodeClocks:
    """The run's clocks, by node name (``World.clocks``): installed by the
    fault plan when the run has skew or jumps; without them there is none
    and every node reads the true clock."""

    def __init__(self, world: Any, *, skew: bool, offset_ms_max: int = CLOCK_OFFSET_MS_MAX,
                 drift_ppm_max: int = CLOCK_DRIFT_PPM_MAX, scripted: bool = False,
                 store_clock: bool = False) -> None:
        """``store_clock``: the stores decide on their own machine's clock
        (``STORE_MACHINE``'s, made at the first call that carries a time:
        ``faults.ports`` reads ``store_now_ms`` then), not their caller's."""
        assert 0 <= offset_ms_max <= CLOCK_OFFSET_MS_MAX and 0 <= drift_ppm_max <= CLOCK_DRIFT_PPM_MAX
        self._world = world
        self.skew = skew
        self.store_clock = store_clock
        # The store's machine: not one of the run's nodes (nothing crashes,
        # pauses or cuts it; no task runs on it), but its clock's skew is a
        # recorded fault of it, so a script replays it and shrinking can drop it.
        self._store_node = Node(STORE_MACHINE, role="store") if store_clock else None
        self.scripted = scripted
        self.offset_ms_max = offset_ms_max
        self.drift_ppm_max = drift_ppm_max
        self._clocks: dict[str, NodeClock] = {}
        self._runtimes: dict[str, NodeRuntime] = {}
        self._skewed = 0

    def clock(self, name: str) -> NodeClock:
        """``name``'s clock, made (its skew drawn from ``clock/<name>``) at first sight."""
        clock = self._clocks.get(name)
        if clock is None:
            world = self._world
            offset_ms = drift_ppm = 0
            # A scripted run skews the clocks its script says were skewed
            # (the seed says by how much): an empty script skews none, and
            # shrinking can drop one node's skew.
            skewed = self.skew if not self.scripted else world.plan.take_scripted(CLOCK_SKEW, name) is not None
            if skewed:
                stream = world.streams[f"clock/{name}"]
                offset_ms = stream.between(-self.offset_ms_max, self.offset_ms_max)
                drift_ppm = stream.between(-self.drift_ppm_max, self.drift_ppm_max)
            clock = self._clocks[name] = NodeClock(name, world.runtime.now_ms, offset_ms, drift_ppm)
            node = world.nodes.get(name)
            if node is None and name == STORE_MACHINE:
                node = self._store_node
            if (offset_ms or drift_ppm) and node is not None:
                # A fault of the machine, recorded when its clock is made:
                # in the script (the entry that skews it on replay), the
                # coverage and the trace. An exact clock is not: it behaves
                # as the runtime itself, and its run's trace is one without
                # clocks.
                self._skewed += 1  # the hit: the n-th clock skewed (a script's entries differ by it)
                world.record_fault(node, CLOCK_SITE_SKEW, CLOCK_SKEW, self._skewed)
                world.emit("clock.skew", node=name, offset_ms=offset_ms, drift_ppm=drift_ppm)
        return clock

    def runtime_for(self, name: str) -> NodeRuntime:
        runtime = self._runtimes.get(name)
        if runtime is None:
            runtime = self._runtimes[name] = NodeRuntime(self._world.runtime, self.clock(name))
        return runtime

    def now_ms(self, name: str) -> int:
        return self.clock(name).now_ms()

    def store_now_ms(self) -> int:
        """What the stores' own machine's clock reads now (store-clock mode)."""
        return self.clock(STORE_MACHINE).now_ms()

    def error_ms(self, name: str) -> int:
        return self.clock(name).error_ms()

    def jump(self, name: str, amount_ms: int) -> None:
        self.clock(name).jump(amount_ms)

    def names(self) -> tuple[str, ...]:
        return tuple(self._clocks)


def clocks_wanted(opts: Any, choices: Any) -> tuple[bool, bool]:
    """(skew, jumps) for this run: the swarm's (or full mix's) choices, a
    script holding clock jumps, or a run beyond the contract."""
    enabled = (lambda kind: False) if choices is None else choices.enabled  # no swarm space: not the family's
    script = opts.fault_script
    if script is not None:  # the script holds what fires: the skewed clocks and the steps
        kinds = {getattr(e, "kind", None) for e in script}
        return CLOCK_SKEW in kinds, bool(kinds & {CLOCK_JUMP, CLOCK_JUMP_BEYOND})
    return enabled(CLOCK_SKEW), enabled(CLOCK_JUMP) or bool(opts.beyond_contract)


def store_clock_wanted(opts: Any, choices: Any, skew: bool) -> bool:
    """Do the stores decide on their own clock in this run? Only a run with
    skewed clocks (``skew``: the seed's swarm enabled ``clock-skew``, or its
    script skews a clock) that drew (or pinned) the ``store_clock`` knob: a
    run without skew keeps its stores on their callers' clocks, so its trace
    is the one it had before the mode existed. Not beyond the contract: a
    clock stepped past the tolerance is judged by the readings its node
    hands the stores (``clock-tolerance``), which a store on its own clock
    never takes."""
    return (skew and choices is not None and not opts.beyond_contract
            and choices.knob_or(STORE_CLOCK_KNOB, 0) == 1)


def install_clocks(world: Any, opts: Any, choices: Any) -> None:
    """Give the run its node clocks if it has skew or jumps (else none), and
    say in its config which clock the stores decide on."""
    skew, jumps = clocks_wanted(opts, choices)
    store_clock = store_clock_wanted(opts, choices, skew)
    if choices is not None and STORE_CLOCK_KNOB in dict(choices.knobs):
        world.config_extra["store_clock"] = STORE_MACHINE if store_clock else CALLER_CLOCK
        if store_clock and "swarm_line" in world.config_extra:
            world.config_extra["swarm_line"] = (f"{world.config_extra['swarm_line']}; the stores decide on their "
                                                f"own clock ({STORE_MACHINE!r})")
    if not (skew or jumps):
        return
    knob = (lambda name, default: default) if choices is None else choices.knob_or
    world.clocks = NodeClocks(world, skew=skew, offset_ms_max=knob(OFFSET_KNOB, CLOCK_OFFSET_MS_MAX),
                              drift_ppm_max=knob(DRIFT_KNOB, CLOCK_DRIFT_PPM_MAX),
                              scripted=opts.fault_script is not None, store_clock=store_clock)


# The oracle whose judged readings say whether a stepped clock was ever seen
# (``scenarios.invariants.clock_tolerance.ClockTolerance``).
CLOCK_ORACLE = "clock-tolerance"


class ClockJumps(Workload):
    """A node's clock stepped every ``every_ms``: within the tolerance
    (``clock-jump``: the node's jumps' sum moves to a new value inside
    ±``CLOCK_JUMP_SUM_MS_MAX``), or, with ``beyond``, past it
    (``clock-jump-beyond``: seconds to an hour, forward or back). Any node
    of the run's but the harness may be stepped (its clock is the machine's:
    a restart keeps the step). Recorded as a fault at ``clock.forward`` or
    ``clock.back`` with the step's size as ``duration_ms``."""

    name = "clock-jumps"

    def __init__(self, *, every_ms: tuple[int, int] = (2 * MS_PER_MINUTE, MS_PER_HOUR),
                 beyond: bool = False) -> None:
        assert every_ms[0] > 0, every_ms
        self.every_ms = every_ms
        self.beyond = beyond
        self.kind = CLOCK_JUMP_BEYOND if beyond else CLOCK_JUMP
        self.jumps = 0
        self.unseen = 0
        self._world: World | None = None

    def setup(self, world: World) -> None:
        self._world = world

    def start(self, world: World) -> None:
        world.plan.drive(world, self)

    def check(self, view: Any) -> None:
        """At the audit of a run nothing stopped: a step past the tolerance
        whose node handed no store a reading of its clock afterwards (its
        next wake past the run's end, an operator that only scans) put that
        clock where nothing could see it, the system or an oracle. It is withdrawn
        from the broken promises (still counted as fired, and as
        ``beyond_clock_jumps_unseen``), so the run is not judged a silent
        pass for it."""
        world = self._world
        if not self.beyond or world is None:
            return
        # What the clock-tolerance oracle judged: node name -> the true time
        # of the latest clock reading of that node a store call carried.
        oracle = next((c for c in world.invariants.checkers if c.name == CLOCK_ORACLE), None)
        read_ms = {} if oracle is None else oracle.last_reading_ms
        for event in [e for e in world.beyond_contract if e.kind == self.kind]:
            if read_ms.get(event.node.split("#", 1)[0], -1) <= event.time_ms:
                world.beyond_contract.remove(event)
                self.unseen += 1

    def propose(self, world: World, hit: int) -> FaultEvent | None:
        clocks = world.clocks
        names = sorted(name for name, node in world.nodes.items() if node.alive)
        if clocks is None or not names:
            return None
        chaos = self.stream(world)
        name = names[0] if len(names) == 1 else chaos.choice(names)
        if self.beyond:
            amount_ms = chaos.between(*BEYOND_JUMP_MS) * (1 if chaos.below(2) == 0 else -1)
        else:
            current = clocks.clock(name).jump_ms
            amount_ms = chaos.between(-CLOCK_JUMP_SUM_MS_MAX, CLOCK_JUMP_SUM_MS_MAX) - current
            if amount_ms == 0:
                return None
        site = CLOCK_SITE_FORWARD if amount_ms > 0 else CLOCK_SITE_BACK
        return FaultEvent(world.runtime.now_ms(), world.nodes[name].label, site, self.kind, hit,
                          duration_ms=abs(amount_ms))

    def apply(self, world: World, event: FaultEvent) -> bool:
        name = event.node.split("#", 1)[0]
        node = world.nodes.get(name)
        if (node is None or world.clocks is None or event.duration_ms is None or event.site not in CLOCK_SITES
                or event.kind != self.kind):
            return False
        amount_ms = event.duration_ms if event.site == CLOCK_SITE_FORWARD else -event.duration_ms
        world.clocks.clock(name)  # made (and its skew traced) before the step, whether proposed now or replayed
        world.record_fault(node, event.site, self.kind, event.hit or 0, duration_ms=event.duration_ms,
                           beyond_contract=self.beyond)
        world.clocks.jump(name, amount_ms)
        self.jumps += 1
        return True

    def metrics(self) -> dict[str, Any]:
        if self.beyond:
            return {"beyond_clock_jumps": self.jumps, "beyond_clock_jumps_unseen": self.unseen}
        return {"clock_jumps": self.jumps}


def clock_workloads() -> list[Workload]:
    """What a stack adds for the family: the in-contract jumps and the
    beyond ones (each fires only when its kind is armed: ``FaultPlan.drive``)."""
    return [ClockJumps(), ClockJumps(every_ms=(2 * MS_PER_MINUTE, 30 * MS_PER_MINUTE), beyond=True)]


__all__ = ["CLOCK_TOLERANCE_MS", "CLOCK_SKEW_MS_MAX", "ClockJumps", "NodeClock", "NodeClocks", "NodeRuntime",
           "STORE_CLOCK_KNOB", "STORE_MACHINE", "clock_knobs", "clock_workloads", "install_clocks",
           "store_clock_wanted", "tolerance_line"]
