"""The cyclic collector over a long run: what has lived through a full
collection is set aside, so the next one does not walk it again.

A simulated year keeps every conversation, record and row it wrote: the
heap grows by millions of objects. CPython's full (generation 2) collection
walks every tracked object, so its cost grows with the history, and a
year's wakes got slower the longer it ran (a 60-day sentinel run spent 7.8
of its 62 CPU-s in 69 full collections). ``LongRunHeap`` watches the
collector; after a full collection, at the runner's next slice boundary, it
moves every tracked object to the permanent generation (``gc.freeze``), so
later collections walk only what is newer. Garbage cycles among frozen
objects wait for the end of the run, when ``gc.unfreeze`` hands everything
back to the collector.

Nothing simulated can observe this: no model or harness code reads the
collector, and finalizers and weak references do not decide any draw (a
branch re-keys every tracked stream, alive or not, with the same key).
"""
from __future__ import annotations

import gc
from typing import Any


class LongRunHeap:
    """``with LongRunHeap() as heap: ... heap.settle() ...``: ``settle`` (cheap,
    O(1)) freezes the heap if a full collection has run since the last call."""

    __slots__ = ("_full_since", "froze", "freezes")

    def __init__(self) -> None:
        self._full_since = False
        self.froze = False
        self.freezes = 0

    def _watch(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info.get("generation") == 2:
            self._full_since = True

    def settle(self) -> None:
        if self._full_since:
            self._full_since = False
            gc.freeze()
            self.froze = True
            self.freezes += 1

    def __enter__(self) -> LongRunHeap:
        gc.callbacks.append(self._watch)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._watch)
        if self.froze:
            gc.unfreeze()
