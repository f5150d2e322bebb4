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

from typing import Callable, Mapping

from faults.kinds import ACK_LOST, ALL_FAULT_KINDS, CRASH_BEFORE_CALL, FAILPOINT_CRASH
from sim.rng import Stream


class FaultPlan:
    def __init__(self, stream: Stream, clock: Callable[[], int], *,
                 rates: Mapping[str, float], heal_at_ms: int,
                 site_filter: Callable[[str], bool] | None = None) -> None:
        for kind, rate in rates.items():
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
        self._hits: dict[str, int] = {}
        self._next_fire: dict[str, list[list]] = {}  # site -> [[hit index, kind], ...]

    def _gap(self, kind: str) -> int:
        # Uniform on [1, 2*mean - 1]: mean ``1/rate`` hits between firings,
        # one draw per firing instead of one per hit, integer-exact.
        mean = self._mean_gap[kind]
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
            if self._site_filter is not None and not self._site_filter(site):
                schedule = []
            else:
                schedule = [[n - 1 + self._gap(kind), kind] for kind in kinds if kind in self._mean_gap]
            self._next_fire[site] = schedule
        fired = None
        for entry in schedule:
            if entry[0] == n:
                entry[0] = n + self._gap(entry[1])
                if fired is None:
                    fired = entry[1]
        if fired is not None and self._clock() >= self.heal_at_ms:
            return n, None
        return n, fired

    def hits(self) -> dict[str, int]:
        return dict(sorted(self._hits.items()))
