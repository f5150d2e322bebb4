"""The fault plan: which fault fires where, drawn from the ``faults`` stream.

Each (site, kind) has a rate per hit; a site is a port method (``ds.save``)
or a failpoint name. Rather than a coin flip per hit, each (site, kind) draws
the gap to its next firing (uniform, mean ``1/rate`` hits) from the
``faults`` stream, so a run's faults are a pure function of (seed, order of
hits) and cost one integer comparison per hit. Uniform gaps are not
memoryless like per-hit coins, which does not matter for finding bugs and
keeps the draw integer-exact on every platform.
After ``heal_at_ms`` nothing fires: the run then shows it recovers.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

from faults.kinds import ALL_FAULT_KINDS, TIMED_FAULT_KINDS
from sim.rng import Stream
from sim.world import FaultEvent


class FaultPlan:
    """Probabilistic faults: the default, what a seed explores."""

    scripted = False

    def __init__(self, stream: Stream, clock: Callable[[], int], *,
                 rates: Mapping[str, float], heal_at_ms: int,
                 site_filter: Callable[[str], bool] | None = None,
                 site_rates: Mapping[str, Mapping[str, float]] | None = None) -> None:
        """``site_rates``: per-site overrides of ``rates`` (FoundationDB-style
        failpoint activation: a failpoint off for the run has rate 0)."""
        for kind, rate in list(rates.items()) + [kv for r in (site_rates or {}).values() for kv in r.items()]:
            if kind not in ALL_FAULT_KINDS:
                raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(ALL_FAULT_KINDS)}")
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"fault rate for {kind} must be in [0, 1], got {rate}")
        self._stream = stream
        self._clock = clock
        self.rates = dict(rates)
        self.heal_at_ms = heal_at_ms
        self._site_filter = site_filter
        # Mean hits between firings of each kind (0: never fires).
        self._mean_gap = {kind: max(1, round(1.0 / rate)) for kind, rate in self.rates.items() if rate > 0}
        self._site_gaps = {site: {kind: max(1, round(1.0 / rate)) for kind, rate in r.items() if rate > 0}
                           for site, r in (site_rates or {}).items()}
        self._hits: dict[str, int] = {}
        self._next_fire: dict[str, list[list]] = {}  # site -> [[hit index, kind], ...]

    def _gap(self, kind: str, gaps: Mapping[str, int]) -> int:
        # Uniform on [1, 2*mean - 1]: mean ``1/rate`` hits between firings,
        # one draw per firing instead of one per hit, integer-exact.
        mean = gaps[kind]
        return 1 + self._stream.below(2 * mean - 1) if mean > 1 else 1

    def draw(self, site: str, kinds: tuple[str, ...]) -> tuple[int, str | None]:
        """Count one hit of ``site``; return ``(hit index, kind that fires or None)``.

        Each (site, kind) holds the hit index of its next firing, so the hot
        path is a dict lookup and an integer comparison per kind. At most one
        kind fires per hit; a coinciding kind is rescheduled.
        """
        n = self._hits.get(site, 0) + 1
        self._hits[site] = n
        schedule = self._next_fire.get(site)
        if schedule is None:
            gaps = self._site_gaps.get(site, self._mean_gap)
            if self._site_filter is not None and not self._site_filter(site):
                schedule = []
            else:
                schedule = [[n - 1 + self._gap(kind, gaps), kind, gaps] for kind in kinds if kind in gaps]
            self._next_fire[site] = schedule
        fired = None
        for entry in schedule:
            if entry[0] == n:
                entry[0] = n + self._gap(entry[1], entry[2])
                if fired is None:
                    fired = entry[1]
        if fired is not None and self._clock() >= self.heal_at_ms:
            return n, None
        return n, fired

    def hits(self) -> dict[str, int]:
        return dict(sorted(self._hits.items()))

    def declined(self, site: str, hit: int) -> None:
        """The fault drawn at this hit found nothing to break (a torn batch
        of one record): it simply did not fire."""

    def restart_delay_ms(self, site: str, hit: int, fallback: Callable[[], int]) -> int:
        """How long a process crashed by this fault stays down: drawn now."""
        return fallback()

    def duration_ms(self, site: str, hit: int, fallback: Callable[[], int]) -> int:
        """How long this fault lasts (latency): drawn now."""
        return fallback()


class ScriptedPlan:
    """Faults from a script alone (probabilistic faults off).

    Each point fault (a port call, a failpoint, a read answer) fires at its
    site's recorded hit index, so replaying a run's realized script replays
    the run: every other decision of the run is a pure function of the seed
    and the order of events, which the same faults reproduce. A hand-written
    entry without a hit fires at the first hit of its site at or after its
    time. Timed faults (kills, pauses, duplicate alarms) are not drawn here:
    the scenario schedules them at their times (``timed``).
    """

    scripted = True

    def __init__(self, events: Iterable[FaultEvent]) -> None:
        # Deviations (scheduling entries of the same script) are the scheduler's.
        self.events = tuple(e for e in events if isinstance(e, FaultEvent))
        self._at_hit: dict[tuple[str, int], FaultEvent] = {}
        self._by_time: dict[str, list[FaultEvent]] = {}
        for event in self.events:
            if event.kind in TIMED_FAULT_KINDS:
                continue
            if event.hit is None:
                self._by_time.setdefault(event.site, []).append(event)
            else:
                self._at_hit[(event.site, event.hit)] = event
        for pending in self._by_time.values():
            pending.sort(key=lambda e: e.time_ms)
        self._hits: dict[str, int] = {}
        self._fired: dict[tuple[str, int], FaultEvent] = {}
        self._clock: Callable[[], int] = lambda: 0

    def bind_clock(self, clock: Callable[[], int]) -> None:
        self._clock = clock

    def draw(self, site: str, kinds: tuple[str, ...]) -> tuple[int, str | None]:
        n = self._hits.get(site, 0) + 1
        self._hits[site] = n
        event = self._at_hit.get((site, n))
        if event is None:
            pending = self._by_time.get(site)
            if pending and pending[0].time_ms <= self._clock() and pending[0].kind in kinds:
                event = pending.pop(0)
        if event is None or event.kind not in kinds:
            return n, None
        self._fired[(site, n)] = event
        return n, event.kind

    def hits(self) -> dict[str, int]:
        return dict(sorted(self._hits.items()))

    def declined(self, site: str, hit: int) -> None:
        """The fault at this hit found nothing to break (a torn batch of one
        record). A hand-written entry (no hit) waits for the next hit it can
        break; a recorded one never declines (it fired when recorded)."""
        event = self._fired.pop((site, hit), None)
        if event is not None and event.hit is None:
            self._by_time.setdefault(site, []).insert(0, event)

    def restart_delay_ms(self, site: str, hit: int, fallback: Callable[[], int]) -> int:
        event = self._fired.get((site, hit))
        if event is not None and event.restart_after_ms is not None:
            return event.restart_after_ms
        return fallback()

    def duration_ms(self, site: str, hit: int, fallback: Callable[[], int]) -> int:
        event = self._fired.get((site, hit))
        if event is not None and event.duration_ms is not None:
            return event.duration_ms
        return fallback()

    def timed(self, kind: str) -> tuple[FaultEvent, ...]:
        """The script's timed faults of ``kind``, in time order."""
        return tuple(sorted((e for e in self.events if e.kind == kind), key=lambda e: e.time_ms))


def make_plan(world, opts, *, rates: Mapping[str, float], heal_at_ms: int,
              site_filter: Callable[[str], bool] | None = None,
              site_rates: Mapping[str, Mapping[str, float]] | None = None) -> "FaultPlan | ScriptedPlan":
    """The run's plan: the script of ``--faults`` if given, else probabilistic."""
    plan: FaultPlan | ScriptedPlan
    if opts.fault_script is not None:
        plan = ScriptedPlan(opts.fault_script)
        plan.bind_clock(world.runtime.now_ms)
    else:
        plan = FaultPlan(world.streams["faults"], world.runtime.now_ms, rates=rates, heal_at_ms=heal_at_ms,
                         site_filter=site_filter, site_rates=site_rates)
    world.site_hits = plan.hits
    return plan
