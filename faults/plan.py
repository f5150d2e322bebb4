"""The fault plan: which fault fires where, drawn from the seed or from a script.

One object serves generation and replay (Hypothesis's ``ConjectureData``
is the model): a probabilistic run and a scripted run go through the same
``FaultPlan``, and no scenario or workload ever asks which one it has.

- **Point faults** (a port call, a failpoint, a read answer) are drawn per
  hit with ``draw(site, kinds)``. Probabilistic: each (site, kind) has a rate
  per hit and draws the gap to its next firing (uniform, mean ``1/rate``
  hits) from its own child of the ``faults`` stream (named ``site/kind``),
  so a run's faults are a pure function of (seed, each site's hits) and
  cost one integer comparison per hit; a site added to the code, or hit in
  another order, moves no other site's faults. Uniform gaps
  are not memoryless like per-hit coins, which does not matter for finding
  bugs and keeps the draw integer-exact on every platform. Scripted: each
  entry fires at its site's recorded hit index (a hand-written entry without
  a hit: the first hit at or after its time).
- **Timed faults** (kills, pauses, duplicate alarms) come from chaos
  workloads through ``drive(world, source)``: probabilistic, a harness loop
  waits ``source.every_ms`` and asks the source for its next fault;
  scripted, the script's faults of the source's kind fire at their times.

After ``heal_at_ms`` nothing new fires (the one heal instant, computed by
the runner): the run then shows it recovers. A script replays exactly what
it holds.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import attrs

from faults.kinds import (ALL_FAULT_KINDS, BEYOND_CONTRACT_KINDS, BOUNDARY_DELAY, CLOCK_SKEW, FAILPOINT_CRASH,
                          PORT_FAULT_KINDS, TIMED_FAULT_KINDS)
from sim.rng import Stream
from sim.seams import TimedSource
from sim.world import FaultEvent

# A harness chaos loop fires at most this many timed faults in one run (a
# kill every 10 minutes for a year is ~52,560): its bound, asserted.
TIMED_FAULTS_MAX = 1_000_000


# A site with no kind to fire: its next firing is beyond any hit count.
_NEVER = 1 << 62


class FaultPlan:
    """The run's faults: probabilistic from ``rates``, or exactly a ``script``."""

    def __init__(self, world: Any, *, rates: Mapping[str, float], heal_at_ms: int,
                 site_rates: Mapping[str, Mapping[str, float]] | None = None,
                 timed_kinds: Iterable[str] = TIMED_FAULT_KINDS,
                 script: Iterable[Any] | None = None) -> None:
        """``site_rates``: per-site overrides of ``rates`` (FoundationDB-style
        failpoint activation: a failpoint off for the run has rate 0).
        ``timed_kinds``: the timed kinds this run generates (the seed's
        swarm may leave some out). ``script``: replay these fault events
        (deviations in it are the scheduler's, skipped here); rates and
        timed kinds are then unused: the script holds what fires."""
        for kind, rate in list(rates.items()) + [kv for r in (site_rates or {}).values() for kv in r.items()]:
            if kind not in ALL_FAULT_KINDS:
                raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(ALL_FAULT_KINDS)}")
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"fault rate for {kind} must be in [0, 1], got {rate}")
        self._world = world
        self._stream = world.streams["faults"]
        self._clock: Callable[[], int] = world.runtime.now_ms
        self._runtime = world.runtime
        self.rates = dict(rates)
        self.heal_at_ms = heal_at_ms
        self.timed_kinds = frozenset(timed_kinds)
        self.scripted = script is not None
        self._hits: dict[str, int] = {}
        # Probabilistic: mean hits between firings of each kind (0: never).
        self._mean_gap = {kind: max(1, round(1.0 / rate)) for kind, rate in self.rates.items() if rate > 0}
        self._site_gaps = {site: {kind: max(1, round(1.0 / rate)) for kind, rate in r.items() if rate > 0}
                           for site, r in (site_rates or {}).items()}
        # site -> [[next firing's hit index, kind, mean gap, its stream], ...]
        self._next_fire: dict[str, list[list]] = {}
        # Armed by a workload (``arm_once``): site -> (kind, restart_after_ms),
        # fired at the site's next hit; and the restart delays of the fired.
        self._once: dict[str, tuple[str, int]] = {}
        self._once_delays: dict[tuple[str, int], int] = {}
        self._due: dict[str, int] = {}  # site -> the earliest hit index in its _next_fire
        # Scripted: the entries by (site, hit), and hand-written ones by time.
        # Each is known by its index in the script, to say which never fired.
        entries = [(index, e) for index, e in enumerate(script or ()) if isinstance(e, FaultEvent)]
        self.events = tuple(e for _, e in entries)
        self._entries = entries
        self._at_hit: dict[tuple[str, int], tuple[int, FaultEvent]] = {}
        self._by_time: dict[str, list[tuple[int, FaultEvent]]] = {}
        self._fired: dict[tuple[str, int], tuple[int, FaultEvent]] = {}
        self._timed: list[tuple[int, FaultEvent]] = []
        self._done: set[int] = set()  # script indices of the entries that fired
        for index, event in entries:
            if event.kind in TIMED_FAULT_KINDS:
                self._timed.append((index, event))
            elif event.hit is None:
                self._by_time.setdefault(event.site, []).append((index, event))
            else:
                self._at_hit[(event.site, event.hit)] = (index, event)
        for pending in self._by_time.values():
            pending.sort(key=lambda entry: entry[1].time_ms)
        # What this run may fire, for coverage: kinds with a rate, and the
        # timed kinds a chaos workload drives (``drive`` adds them).
        self.armed: list[str] = [kind for kind in ALL_FAULT_KINDS if kind in self._mean_gap or any(
            kind in gaps for gaps in self._site_gaps.values())] if not self.scripted else sorted(
            {e.kind for e in self.events})
        # The hot path: one bound method, chosen once.
        self.draw = self._draw_scripted if self.scripted else self._draw_random
        world.site_hits = self.hits

    # -- point faults --------------------------------------------------------

    def draw(self, site: str, kinds: tuple[str, ...]) -> tuple[int, str | None]:  # replaced per instance
        """Count one hit of ``site``; return ``(hit index, kind that fires or None)``."""
        raise AssertionError("bound in __init__")

    @staticmethod
    def _gap(stream: Stream, mean: int) -> int:
        # Uniform on [1, 2*mean - 1]: mean ``1/rate`` hits between firings,
        # one draw per firing instead of one per hit, integer-exact.
        return 1 + stream.below(2 * mean - 1) if mean > 1 else 1

    def _draw_random(self, site: str, kinds: tuple[str, ...]) -> tuple[int, str | None]:
        # Each (site, kind) holds the hit index of its next firing, so the
        # hot path is a dict lookup and an integer comparison per kind. At
        # most one kind fires per hit; a coinciding kind is rescheduled.
        # The site's earliest next firing is kept too: a hit before it (most
        # hits) is one comparison. Every entry's next firing is past the
        # current hit, so none is skipped.
        hits = self._hits
        n = hits.get(site, 0) + 1
        hits[site] = n
        due = self._due.get(site)
        if due is not None and n < due:
            return n, None
        schedule = self._next_fire.get(site)
        if schedule is None:
            gaps = self._site_gaps.get(site, self._mean_gap)
            schedule = []
            for kind in kinds:
                if kind in gaps:
                    own = self._stream.child(f"{site}/{kind}")
                    schedule.append([n - 1 + self._gap(own, gaps[kind]), kind, gaps[kind], own])
            self._next_fire[site] = schedule
        fired = None
        for entry in schedule:
            if entry[0] == n:
                entry[0] = n + self._gap(entry[3], entry[2])
                if fired is None:
                    fired = entry[1]
        self._due[site] = min([entry[0] for entry in schedule], default=_NEVER)
        if self._once:
            fired = self._fire_armed(site, n, kinds, fired)
        if fired is not None and self._clock() >= self.heal_at_ms:
            return n, None
        return n, fired

    def _fire_armed(self, site: str, n: int, kinds: tuple[str, ...], fired: str | None) -> str | None:
        armed = self._once.get(site)
        if armed is None or armed[0] not in kinds:
            return fired  # (after the heal instant the caller fires nothing, armed or not)
        del self._once[site]
        self._once_delays[(site, n)] = armed[1]
        return armed[0]

    def arm_once(self, site: str, kind: str, *, restart_after_ms: int) -> None:
        """The next hit of ``site`` fires ``kind``, whatever the rates, and a
        process it crashes stays down ``restart_after_ms``: a workload's
        planned fault (a worker down across a deploy). The fault is recorded
        like any other, so the run's script replays it; a scripted plan arms
        nothing (the script holds what fires)."""
        assert kind in ALL_FAULT_KINDS and restart_after_ms > 0, (kind, restart_after_ms)
        if self.scripted:
            return
        self._once[site] = (kind, restart_after_ms)
        self._due[site] = 0  # the next hit takes the slow path

    def disarm(self, site: str) -> None:
        """Forget an ``arm_once`` of ``site`` that has not fired."""
        self._once.pop(site, None)

    def _draw_scripted(self, site: str, kinds: tuple[str, ...]) -> tuple[int, str | None]:
        n = self._hits.get(site, 0) + 1
        self._hits[site] = n
        entry = self._at_hit.get((site, n))
        if entry is None:
            pending = self._by_time.get(site)
            if pending and pending[0][1].time_ms <= self._clock():
                # A hand-written entry fires at its own node's first hit (a
                # name: any incarnation; a label ``worker-1#3``: that one):
                # the node whose task makes the call.
                now_ms = self._clock()
                task = getattr(self._runtime, "current_task", None)
                node = None if task is None else task.node
                for position, (_, event) in enumerate(pending):
                    if event.time_ms > now_ms:
                        break
                    if event.kind in kinds and _is_node(event.node, node):
                        entry = pending.pop(position)
                        break
        if entry is None or entry[1].kind not in kinds:
            return n, None
        self._fired[(site, n)] = entry
        self._done.add(entry[0])
        return n, entry[1].kind

    def hits(self) -> dict[str, int]:
        return dict(sorted(self._hits.items()))

    def declined(self, site: str, hit: int) -> None:
        """The fault drawn at this hit found nothing to break (a torn batch
        of one record): it did not fire. A hand-written script entry (no hit)
        waits for the next hit it can break; a recorded one never declines."""
        entry = self._fired.pop((site, hit), None)
        if entry is not None:
            self._done.discard(entry[0])
            if entry[1].hit is None:
                self._by_time.setdefault(site, []).insert(0, entry)

    def restart_delay_ms(self, site: str, hit: int, fallback: Callable[[], int]) -> int:
        """How long a process crashed by this fault stays down: the script's
        figure, or drawn now."""
        entry = self._fired.get((site, hit))
        if entry is not None and entry[1].restart_after_ms is not None:
            return entry[1].restart_after_ms
        armed_ms = self._once_delays.pop((site, hit), None) if self._once_delays else None
        return fallback() if armed_ms is None else armed_ms

    def duration_ms(self, site: str, hit: int, fallback: Callable[[], int]) -> int:
        """How long this fault lasts (latency): the script's figure, or drawn now."""
        entry = self._fired.get((site, hit))
        if entry is not None and entry[1].duration_ms is not None:
            return entry[1].duration_ms
        return fallback()

    # -- timed faults ----------------------------------------------------------

    def timed(self, kind: str) -> tuple[FaultEvent, ...]:
        """The script's timed faults of ``kind``, in time order."""
        return tuple(sorted((e for e in self.events if e.kind == kind), key=lambda e: e.time_ms))

    def drive(self, world: Any, source: TimedSource) -> None:
        """Fire ``source``'s timed faults: the script's at their times, or
        generated every ``source.every_ms`` until the heal instant."""
        if (self.scripted or source.kind in self.timed_kinds) and source.kind not in self.armed:
            self.armed.append(source.kind)
        if self.scripted:
            for index, event in sorted((x for x in self._timed if x[1].kind == source.kind),
                                       key=lambda x: x[1].time_ms):
                world.at(event.time_ms, lambda i=index, e=event: self._apply_timed(world, source, i, e),
                         label=f"scripted {source.kind}")
            return
        if source.kind in self.timed_kinds:
            world.spawn_harness(f"chaos:{source.name}", self._generate(world, source))

    def _apply_timed(self, world: Any, source: TimedSource, index: int, event: FaultEvent) -> bool:
        fired = source.apply(world, event)
        if fired:
            self._done.add(index)
        return fired

    def take_scripted(self, kind: str, node: str) -> FaultEvent | None:
        """A script's first unfired entry of ``kind`` for node ``node`` (a
        name: any incarnation), now fired; None without one (or unscripted).
        For a fault that fires where it is needed rather than at a hit or a
        time: a node's clock skew, when its clock is made."""
        if not self.scripted:
            return None
        for index, event in self._entries:
            if event.kind == kind and index not in self._done and event.node.split("#", 1)[0] == node:
                self._done.add(index)
                return event
        return None

    def unfired(self) -> list[tuple[int, FaultEvent]]:
        """The script's faults that never fired, as (script index, entry), in
        script order: a wrong site or node, a kind nothing here drives, a
        time past the run's end, or a run that diverged from its recording."""
        return [(index, event) for index, event in self._entries if index not in self._done]

    async def _generate(self, world: Any, source: TimedSource) -> None:
        runtime = world.runtime
        chaos = source.stream(world)  # the instance's own: two sources never share draws
        fired = 0
        while fired < TIMED_FAULTS_MAX:
            await runtime.sleep_ms(chaos.between(*source.every_ms))
            if runtime.now_ms() >= self.heal_at_ms:
                return
            event = source.propose(world, fired + 1)
            if event is not None and source.apply(world, event):
                fired += 1
        raise AssertionError(f"more than {TIMED_FAULTS_MAX} {source.kind} faults in one run")


# A hand-written entry's node that matches whichever node makes the call.
ANY_NODE = "*"


def _is_node(wanted: str, node: Any) -> bool:
    """Whether ``node`` (a ``sim.node.Node``; None: the caller did not say)
    is the script's ``wanted`` node name or label (``*``: any node)."""
    if node is None or wanted == ANY_NODE:
        return True
    label = node.label
    return wanted == label if "#" in wanted else wanted == label.split("#", 1)[0]


# The most a boosted site's rate of any kind reaches.
BOOSTED_RATE_MAX = 0.5
# The swarm knob that scales a seed's point-fault rates, and its bound.
FAULT_INTENSITY = "fault_intensity"
INTENSITY_MAX = 1_000
# What it scales: the faults at a port call or a failpoint (read-answer
# faults already fire on a large share of reads; timed faults have periods).
INTENSIFIED_KINDS = frozenset(PORT_FAULT_KINDS) | {FAILPOINT_CRASH}


@attrs.frozen
class PortFaults:
    """A scenario's fault mix: per-hit rates by kind, its failpoints, and
    sites whose rates are boosted (calls so rare that a sweep would hardly
    see a fault there otherwise: FoundationDB's buggify). ``plan_for`` makes
    the run's one plan from the seed's swarm choices, or from ``--faults``."""

    rates: Mapping[str, float]
    failpoints: tuple[str, ...] = ()
    boosted_sites: tuple[str, ...] = ()
    boost: int = 1
    # Cadences whose period boundaries a boundary-delay lands calls on
    # (lease expiries it learns from the ledger's grants).
    periods_ms: tuple[int, ...] = ()
    # Kinds every seed runs at these rates, outside the swarm's choices (a
    # kind only one store meets, e.g. ``overtaking-commit`` on SQLite: adding
    # it to a swarm space would redraw every seed's choices). Pinned rates
    # (``--rate``) replace them.
    fixed_rates: Mapping[str, float] = attrs.field(factory=dict)

    def plan_for(self, world: Any, opts: Any, choices: Any) -> FaultPlan:
        from faults.beyond import beyond_rates  # beyond imports the plan's users
        from faults.clocks import install_clocks
        from faults.timing import Boundaries

        enabled = (lambda kind: True) if choices is None else choices.enabled
        # Rates the caller gave (``--rate``) are pinned: the swarm turns none off.
        pinned = opts.rates is not None
        # A seed's intensity (the ``fault_intensity`` knob: 1, 10 or 100)
        # multiplies the point-fault rates: a scenario's rates are set for
        # its long run, and a short sweep seed would otherwise see a kind it
        # enabled never fire. Pinned rates are taken as given.
        intensity = 1 if (pinned or choices is None) else choices.knob_or(FAULT_INTENSITY, 1)
        assert 1 <= intensity <= INTENSITY_MAX, intensity
        rates = {kind: min(1.0, rate * (intensity if kind in INTENSIFIED_KINDS else 1))
                 for kind, rate in self.rates.items() if pinned or enabled(kind)}
        if not pinned:
            rates.update(self.fixed_rates)
        rates.update(beyond_rates(opts))
        if rates.get(BOUNDARY_DELAY, 0) > 0 or opts.fault_script is not None:
            world.boundaries = Boundaries(world, tuple(self.periods_ms))
        site_rates: dict[str, dict[str, float]] = {}
        if choices is not None and FAILPOINT_CRASH in rates and enabled(FAILPOINT_CRASH):
            site_rates.update({site: {kind: min(1.0, rate * intensity) for kind, rate in r.items()}
                               for site, r in choices.site_rates(self.failpoints, FAILPOINT_CRASH).items()})
        for site in self.boosted_sites:
            # Capped: a site whose every call fails a retryable way would
            # never let a retry through (a rate of 1 is a stuck system).
            site_rates[site] = {k: min(BOOSTED_RATE_MAX, r * self.boost) for k, r in rates.items()
                                if k in PORT_FAULT_KINDS}
        # The timed kinds beyond the contract (a clock stepped past its tolerance,
        # the disk faults of ``faults.disk``) are on with the opt-in, like the others.
        timed = tuple(kind for kind in TIMED_FAULT_KINDS if (opts.beyond_contract if kind in BEYOND_CONTRACT_KINDS
                                                              else enabled(kind)))
        install_clocks(world, opts, choices)
        plan = FaultPlan(world, rates=rates, heal_at_ms=world.heal_at_ms, site_rates=site_rates,
                         timed_kinds=timed, script=opts.fault_script)
        if getattr(world.clocks, "skew", False):
            plan.armed.append(CLOCK_SKEW)  # counted per node whose clock it skews (``faults.clocks``)
        return plan
