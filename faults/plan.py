"""The fault plan: which fault fires where, drawn from the ``faults`` stream.

Each (site, kind) has a probability per hit; a site is a port method
(``ds.save``) or a failpoint name. Every hit draws from the ``faults`` stream
and compares against a precomputed integer threshold, so a run's faults are a
pure function of (seed, the order of hits) and cost one comparison per kind.
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
        self._thresholds = {kind: Stream.threshold(rate) for kind, rate in self.rates.items() if rate > 0}
        self._hits: dict[str, int] = {}

    def draw(self, site: str, kinds: tuple[str, ...]) -> tuple[int, str | None]:
        """Count one hit of ``site`` and decide which of ``kinds`` (if any) fires.

        One draw per hit: the kinds' probabilities are laid side by side on
        [0, 2**64), so at most one fires and the stream advances once.
        Returns ``(hit index, kind or None)``.
        """
        n = self._hits.get(site, 0) + 1
        self._hits[site] = n
        if self._clock() >= self.heal_at_ms:
            return n, None
        if self._site_filter is not None and not self._site_filter(site):
            return n, None
        value = self._stream.next_u64()
        for kind in kinds:
            threshold = self._thresholds.get(kind)
            if threshold is not None:
                if value < threshold:
                    return n, kind
                value -= threshold
        return n, None

    def hits(self) -> dict[str, int]:
        return dict(sorted(self._hits.items()))


__all__ = ["FaultPlan", "CRASH_BEFORE_CALL", "ACK_LOST", "FAILPOINT_CRASH"]
