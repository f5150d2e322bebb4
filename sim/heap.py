"""The cyclic collector over a long run: what has lived through a full
collection is set aside, so the next one does not walk it again.

A simulated year keeps every conversation, record and row it wrote: the
heap grows by millions of objects. CPython's full (generation 2) collection
walks every tracked object, so its cost grows with the history, and a
year's wakes got slower the longer it ran (a 60-day sentinel run spent 7.8
of its 62 CPU-s in 69 full collections). ``LongRunHeap`` reads the
collector's count of full collections at each of the runner's slice
boundaries; when one has run since, it moves every tracked object to the
permanent generation (``gc.freeze``), so
later collections walk only what is newer. Garbage cycles among frozen
objects wait for the end of the run, when ``gc.unfreeze`` hands everything
back to the collector.

Nothing simulated can observe this: no model or harness code reads the
collector, and finalizers and weak references do not decide any draw (a
branch re-keys every tracked stream, alive or not, with the same key).
"""
from __future__ import annotations

import gc


class LongRunHeap:
    """``with LongRunHeap() as heap: ... heap.settle() ...``: ``settle`` (cheap)
    freezes the heap if a full collection has run since the last call.

    It reads the collector's own count of full collections (``gc.get_stats``)
    rather than hooking ``gc.callbacks``: a callback is Python code run inside
    a collection, and a signal arriving there (Ctrl-C) would be reported as
    an error in the callback and swallowed."""

    __slots__ = ("_full_seen", "froze", "freezes")

    def __init__(self) -> None:
        self._full_seen = _full_collections()
        self.froze = False
        self.freezes = 0

    def settle(self) -> None:
        full = _full_collections()
        if full != self._full_seen:
            self._full_seen = full
            gc.freeze()
            self.froze = True
            self.freezes += 1

    def __enter__(self) -> LongRunHeap:
        self._full_seen = _full_collections()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.froze:
            gc.unfreeze()


def _full_collections() -> int:
    return gc.get_stats()[2]["collections"]
