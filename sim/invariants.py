"""The invariant API: online checkers fed by trace events, plus an auditor.

A ``Checker`` has a stable ``name`` (used in reports and the planted-bug
catalogue), subscribes to event kinds, and counts every check it performs so
a report can show that an invariant was really exercised ("checks: 0" is a
coverage gap, not a pass). ``audit`` runs at the end of the run and reads the
stores directly — it never trusts the model's own bookkeeping.

Checkers keep summaries, not histories: their memory must not grow with
simulated time (a year is 105,120 wakes).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import attrs

from sim.trace import Event, Trace


@attrs.frozen
class Violation:
    invariant: str
    message: str
    time_ms: int
    related: tuple[str, ...] = ()
    event_seq: int = 0


class RecentlySettled:
    """What a checker remembers of the submissions settled in the last
    ``window_ms`` (a stale owner, or a call in flight, may still act for
    one): submission -> a value, oldest first. Bounded by the window."""

    __slots__ = ("window_ms", "_entries")

    def __init__(self, window_ms: int) -> None:
        assert window_ms > 0, window_ms
        self.window_ms = window_ms
        self._entries: dict[str, tuple[int, Any]] = {}

    def add(self, submission: str, now_ms: int, value: Any = None) -> None:
        self._entries.pop(submission, None)
        self._entries[submission] = (now_ms, value)
        while self._entries:
            oldest = next(iter(self._entries))
            if self._entries[oldest][0] >= now_ms - self.window_ms:
                break
            del self._entries[oldest]

    def __contains__(self, submission: str) -> bool:
        return submission in self._entries

    def get(self, submission: str) -> Any:
        entry = self._entries.get(submission)
        return None if entry is None else entry[1]


class Checker:
    """Subclass, set ``name`` and ``kinds``, implement ``on_event``/``audit``."""

    name: str = ""
    kinds: tuple[str, ...] = ()

    def __init__(self) -> None:
        assert self.name, "a checker needs a stable name"
        self.checks = 0
        self._sink: Callable[[Violation], None] | None = None
        self._clock: Callable[[], int] = lambda: 0
        self._trace: Trace | None = None
        # The system's audit view (``scenarios.system.AuditView``): what a
        # checker reads of the stores, online and at the audit.
        self.view: Any = None

    def attach(self, trace: Trace, clock: Callable[[], int], sink: Callable[[Violation], None],
               view: Any = None) -> None:
        self.view = view
        self._sink = sink
        self._clock = clock
        self._trace = trace
        if self.kinds:
            # on_event directly, no wrapper: this runs for every event.
            trace.subscribe(self.kinds, self.on_event)

    def on_event(self, event: Event) -> None:  # pragma: no cover - default
        raise NotImplementedError

    def audit(self, view: Any) -> None:
        """End-of-run check against the stores (``view``: the system's
        ``AuditView``). Default: nothing to audit."""

    def audit_retiring(self, view: Any) -> None:
        """The audit of what retention is about to delete: ``view`` is scoped
        to those conversations (settled, closed). A checker whose audit
        reads conversation by conversation sets this to its ``audit``, so
        what the end-of-run audit would have read is read before it goes.
        Default: nothing."""

    def metrics(self) -> dict[str, Any]:
        """What this checker saw, for the run's stats (``wakes``, ``settled``)."""
        return {}

    def fail(self, message: str, related: Iterable[str] = ()) -> None:
        assert self._sink is not None, "checker not attached"
        seq = self._trace.events if self._trace is not None else 0
        self._sink(Violation(self.name, message, self._clock(), tuple(str(r) for r in related), seq))


class InvariantSet:
    """The checkers of one run and the violations they found."""

    def __init__(self, trace: Trace, clock: Callable[[], int], *, on_violation: Callable[[Violation], None]) -> None:
        self._trace = trace
        self._clock = clock
        self._on_violation = on_violation
        self.checkers: list[Checker] = []
        self.violations: list[Violation] = []
        self.view: Any = None  # set by the runner once the system is open

    def add(self, *checkers: Checker) -> None:
        for checker in checkers:
            if any(c.name == checker.name for c in self.checkers):
                raise ValueError(f"invariant {checker.name!r} added twice")
            checker.attach(self._trace, self._clock, self._record, self.view)
            self.checkers.append(checker)

    def _record(self, violation: Violation) -> None:
        self.violations.append(violation)
        self._on_violation(violation)

    def audit(self, world: Any) -> None:
        """Run every checker's audit. A store that refuses to be read back
        (a typed error such as ``HistoryCorrupted``) fails that checker's
        audit with the error named, rather than ending the run in a
        traceback: a damaged store is a finding, not a crash of the harness."""
        self._each_audit("audit", world)

    def audit_retiring(self, view: Any) -> None:
        """Every checker's ``audit_retiring`` over ``view`` (scoped to the
        conversations retention is about to delete), failing as ``audit`` does."""
        self._each_audit("audit_retiring", view)

    def _each_audit(self, method: str, view: Any) -> None:
        for checker in self.checkers:
            try:
                getattr(checker, method)(view)
            except Exception as error:  # noqa: BLE001 - reported, typed, never swallowed
                name = getattr(type(error), "name", None)
                name = name if isinstance(name, str) and name else type(error).__name__
                checker.fail(f"audit could not read the stores back: {name}: {error}")

    def metrics(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for checker in self.checkers:
            merged.update(checker.metrics())
        return merged

    def check_counts(self) -> dict[str, int]:
        return {c.name: c.checks for c in self.checkers}
