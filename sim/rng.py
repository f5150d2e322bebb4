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
import weakref
from typing import Iterable

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def derive_seed64(seed: int, name: str) -> int:
    """The 64-bit seed of stream ``name`` under run seed ``seed``."""
    material = f"{seed}/{name}".encode("utf-8")
    return int.from_bytes(hashlib.sha256(material).digest()[:8], "big")


def branched_seed64(seed64: int, draws: int, branch_key: int) -> int:
    """The 64-bit seed a stream continues from in branch ``branch_key`` when
    it had ``draws`` draws from ``seed64`` at the fork instant: a pure
    function of the three, so a branch replayed without a process fork (or
    a stream first made after the fork, with 0 draws) gets the same one."""
    assert branch_key >= 0, branch_key
    material = f"{seed64}/{draws}/branch/{branch_key}".encode("utf-8")
    return int.from_bytes(hashlib.sha256(material).digest()[:8], "big")


# The streams a branch does NOT re-key, by the first part of their name: the
# run's configuration (``swarm``: which fault kinds, failpoints and knobs the
# seed chose, drawn once at the start), each machine's clock (``clock/<node>``:
# its offset and drift belong to the machine, not to what happens next; a
# node first seen after the fork gets the clock it would have had), and where
# a store's rot starts (``beyond/...``: a function of a row's name that must
# answer the same before and after the fork). Every other stream (workloads,
# faults, chaos, scheduling, latency, restarts, disk damage, and their
# children and forks) shapes the future, and is re-keyed.
KEPT_AT_BRANCH = frozenset({"swarm", "clock", "beyond"})


def family_of(name: str) -> str:
    """A stream's family: the first part of its name (``workers`` of
    ``workers/sub-3/0``)."""
    return name.split("/", 1)[0]


def rekeyed_at_branch(name: str, families: frozenset[str] = frozenset()) -> bool:
    """Whether the stream ``name`` gets a new state when a run branches:
    with ``families``, only a stream of one of them (a branch that re-keys
    one part of the run's future, say its scheduling, and keeps the rest);
    without, every stream but those ``KEPT_AT_BRANCH``."""
    family = family_of(name)
    if family in KEPT_AT_BRANCH:
        return False
    return not families or family in families


REJECTIONS_MAX = 256


class Stream:
    """A SplitMix64 stream. Not thread-safe; nothing here uses threads."""

    # ``_family``: the ``Streams`` that tracks this stream for a branch
    # (None: nobody does, the case of every run without one); weakly
    # referenced there, so a dead stream is never kept alive for it.
    __slots__ = ("name", "_state", "draws", "seed64", "_family", "__weakref__")

    def __init__(self, seed64: int, name: str = "", family: "Streams | None" = None) -> None:
        self.name = name
        self.seed64 = seed64 & _MASK64
        self._state = self.seed64
        self.draws = 0
        self._family = family
        if family is not None:
            family._born(self)

    def child(self, name: str) -> "Stream":
        """A stream of its own for one named choice, depending only on this
        stream's seed and ``name`` (never on how much this stream or any
        other child was drawn): a choice drawn by name keeps its value when
        choices are added, removed or reordered around it."""
        material = f"{self.seed64}/{name}".encode("utf-8")
        return Stream(int.from_bytes(hashlib.sha256(material).digest()[:8], "big"), f"{self.name}/{name}",
                      self._family)

    def rekey(self, branch_key: int) -> None:
        """Continue as branch ``branch_key`` (``branched_seed64``): a new
        seed, from which its next draws and its children come."""
        self.seed64 = branched_seed64(self.seed64, self.draws, branch_key)
        self._state = self.seed64

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


class BranchError(Exception):
    """A run's streams were asked to branch twice, or with a negative key."""


class Streams:
    """The run's named streams, created on first use.

    A run that will branch (``sim.runner``: ``ScenarioOptions.branch``)
    calls ``track()`` before its first draw; at the fork instant
    ``branch(key)`` re-keys every live stream that ``rekeyed_at_branch``
    (``Stream.rekey``), and every stream made afterwards starts re-keyed
    (as a stream made before it with no draws would be). Order plays no
    part: each stream's new seed depends on its own seed, draws and the
    key only, so the weak set's order (by address) reaches nothing."""

    __slots__ = ("seed", "_streams", "_live", "branch_key", "branch_families", "_forked_families")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._streams: dict[str, Stream] = {}
        # Streams made since ``track()`` (weakly: a year-long run makes
        # hundreds of thousands of short-lived forks); None: not tracking.
        self._live: weakref.WeakSet[Stream] | None = None
        self.branch_key: int | None = None
        self.branch_families: frozenset[str] = frozenset()  # empty: the branch re-keyed every family
        # The families of forked streams, once ``record_families()`` asked (None: not recorded).
        self._forked_families: set[str] | None = None

    def record_families(self) -> None:
        """From now on, note the family of every forked stream (``families``)."""
        if self._forked_families is None:
            self._forked_families = set()

    def families(self) -> tuple[str, ...]:
        """The families of the named streams made so far, and of the forked
        ones since ``record_families()``, sorted."""
        found = {family_of(name) for name in self._streams}
        found.update(self._forked_families or ())
        return tuple(sorted(found))

    def track(self) -> None:
        """From now on, keep (weakly) every stream made from these, so
        ``branch`` can reach each one still alive."""
        if self._live is None:
            self._live = weakref.WeakSet()
            for stream in self._streams.values():
                stream._family = self
                self._live.add(stream)

    def _born(self, stream: Stream) -> None:
        if self.branch_key is None and self._live is not None:
            self._live.add(stream)

    def branch(self, branch_key: int, families: Iterable[str] = ()) -> int:
        """Re-key every live stream that ``rekeyed_at_branch`` by
        ``branch_key`` (only those of ``families``, if given); return how
        many. Once per run."""
        if self.branch_key is not None:
            raise BranchError(f"the run already branched (key {self.branch_key})")
        if branch_key < 0:
            raise BranchError(f"a branch key is a non-negative integer, got {branch_key}")
        chosen = frozenset(families)
        kept = sorted(chosen & KEPT_AT_BRANCH)
        if kept:
            raise BranchError(f"a branch never re-keys {', '.join(kept)} (the run's configuration and machines)")
        live: Iterable[Stream] = list(self._live) if self._live is not None else list(self._streams.values())
        rekeyed = 0
        for stream in live:  # each one's new state depends on itself alone: order reaches nothing
            if rekeyed_at_branch(stream.name, chosen):
                stream.rekey(branch_key)
                rekeyed += 1
        self.branch_key = branch_key
        self.branch_families = chosen
        self._live = None  # nothing made from here on needs reaching again
        return rekeyed

    def _seed64(self, name: str) -> int:
        seed64 = derive_seed64(self.seed, name)
        if self.branch_key is not None and rekeyed_at_branch(name, self.branch_families):
            seed64 = branched_seed64(seed64, 0, self.branch_key)
        return seed64

    def _family(self) -> "Streams | None":
        return self if self._live is not None else None

    def __getitem__(self, name: str) -> Stream:
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = Stream(self._seed64(name), name, self._family())
        return stream

    def fork(self, name: str) -> Stream:
        """A fresh stream that depends only on (seed, name), never on order of use."""
        if self._live is None and self.branch_key is None and self._forked_families is None:
            return Stream(derive_seed64(self.seed, name), name)  # the common case (no branch): as cheap as before
        if self._forked_families is not None:
            self._forked_families.add(family_of(name))
        return Stream(self._seed64(name), name, self._family())
