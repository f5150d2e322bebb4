"""Named random streams derived from the seed.

Every random decision in a run comes from a stream named for its purpose
(``workload``, ``faults``, ``scheduling``, ``clock``, ...). A stream's seed is
``sha256(f"{seed}/{name}")``, so adding draws to one stream never reshuffles
another — which is what lets a shrinker remove faults without changing the
workload, and a workload change leave the fault schedule alone.

The generator is SplitMix64, written out here instead of ``random.Random``:
its output is defined by these dozen lines, not by a CPython version, and no
module-level global state exists to leak between runs.
"""
from __future__ import annotations

import hashlib

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def derive_seed64(seed: int, name: str) -> int:
    """The 64-bit seed of stream ``name`` under run seed ``seed``."""
    material = f"{seed}/{name}".encode("utf-8")
    return int.from_bytes(hashlib.sha256(material).digest()[:8], "big")


REJECTIONS_MAX = 256


class Stream:
    """A SplitMix64 stream. Not thread-safe; nothing here uses threads."""

    __slots__ = ("name", "_state", "draws", "seed64")

    def __init__(self, seed64: int, name: str = "") -> None:
        self.name = name
        self.seed64 = seed64 & _MASK64
        self._state = self.seed64
        self.draws = 0

    def child(self, name: str) -> "Stream":
        """A stream of its own for one named choice, depending only on this
        stream's seed and ``name`` (never on how much this stream or any
        other child was drawn): a choice drawn by name keeps its value when
        choices are added, removed or reordered around it."""
        material = f"{self.seed64}/{name}".encode("utf-8")
        return Stream(int.from_bytes(hashlib.sha256(material).digest()[:8], "big"), f"{self.name}/{name}")

    def next_u64(self) -> int:
        self.draws += 1
        self._state = z = (self._state + _GOLDEN) & _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)

    def below(self, bound: int) -> int:
        """Uniform integer in ``[0, bound)``, without modulo bias."""
        assert bound > 0, bound
        if bound == 1:
            return 0
        # Rejection sampling on the smallest power-of-two mask covering bound.
        # Each draw is accepted with probability over 1/2, so the bound
        # below is reached with probability under 2**-REJECTIONS_MAX.
        bits = (bound - 1).bit_length()
        if bits <= 64:
            for _ in range(REJECTIONS_MAX):
                value = self.next_u64() >> (64 - bits)
                if value < bound:
                    return value
            raise AssertionError(f"below({bound}): {REJECTIONS_MAX} rejections in a row")
        words = (bits + 63) // 64
        for _ in range(REJECTIONS_MAX):
            value = 0
            for _ in range(words):
                value = (value << 64) | self.next_u64()
            value >>= words * 64 - bits
            if value < bound:
                return value
        raise AssertionError(f"below({bound}): {REJECTIONS_MAX} rejections in a row")

    def between(self, low: int, high: int) -> int:
        """Uniform integer in ``[low, high]`` inclusive."""
        assert low <= high, (low, high)
        return low + self.below(high - low + 1)

    def unit(self) -> float:
        """Uniform float in ``[0, 1)`` with 53 bits."""
        return (self.next_u64() >> 11) * (1.0 / 9007199254740992.0)

    def chance(self, probability: float) -> bool:
        assert 0.0 <= probability <= 1.0, probability
        return self.unit() < probability

    def choice(self, items):
        assert len(items) > 0
        return items[self.below(len(items))]

    def shuffle(self, items: list) -> None:
        """Fisher-Yates, in place."""
        for i in range(len(items) - 1, 0, -1):
            j = self.below(i + 1)
            items[i], items[j] = items[j], items[i]

    @staticmethod
    def threshold(probability: float) -> int:
        """Integer threshold for ``next_u64() < threshold`` == chance(p).

        Fault sites test every hit against a precomputed integer: exact on
        every platform (no libm in the path) and one comparison per hit.
        """
        assert 0.0 <= probability <= 1.0, probability
        return int(probability * 18446744073709551616.0)


class Streams:
    """The run's named streams, created on first use."""

    __slots__ = ("seed", "_streams")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._streams: dict[str, Stream] = {}

    def __getitem__(self, name: str) -> Stream:
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = Stream(derive_seed64(self.seed, name), name)
        return stream

    def fork(self, name: str) -> Stream:
        """A fresh stream that depends only on (seed, name), never on order of use."""
        return Stream(derive_seed64(self.seed, name), name)
