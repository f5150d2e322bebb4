"""The probe port: how model code reports what it did to an observer.

The simulator plugs in a probe that feeds the trace (and through it the
invariant checkers and the rolling digest); outside simulation the default
probe discards everything. Field values must be plain data (str, int, bool,
None, tuples, and JSON-shaped dicts/lists): they are hashed into the trace
digest in the order given, so never pass a set.
"""
from __future__ import annotations

from typing import Any, Protocol


class Probe(Protocol):
    def emit(self, kind: str, **fields: Any) -> None: ...


class NullProbe:
    """Discards every event. The default outside simulation."""

    __slots__ = ()

    def emit(self, kind: str, **fields: Any) -> None:
        return None


NULL_PROBE = NullProbe()
