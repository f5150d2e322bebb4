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


def conversation_of(fields: dict) -> str | None:
    """The conversation an event is about: its ``conversation`` field, or
    the one its ``submission`` id names (``sub-{conversation}-{seq}``);
    None when it names neither."""
    conversation = fields.get("conversation")
    if type(conversation) is str:
        return conversation
    submission = fields.get("submission")
    if type(submission) is str and submission.startswith("sub-") and "-" in submission[4:]:
        return submission[4:].rsplit("-", 1)[0]
    return None


class Checker:
    """Subclass, set ``name`` and ``kinds``, implement ``on_event``/``audit``.

    A checker a workload brings for its own conversations is ``scoped`` to
    the workload's namespace: it reads only the events about conversations
    named ``{namespace}/...`` (and events about no conversation), and its
    audit reads only those conversations."""

    name: str = ""
    kinds: tuple[str, ...] = ()
    scope: str | None = None  # a namespace: conversations ``{scope}/...`` (None: every one)

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
            # on_event directly, no wrapper: this runs for every event
            # (a scoped checker pays for its filter).
            trace.subscribe(self.kinds, self.on_event if self.scope is None else self._on_scoped_event)

    def scoped(self, namespace: str) -> "Checker":
        """This checker, judging the conversations of ``namespace`` only (chainable)."""
        assert namespace and "/" not in namespace, namespace
        self.scope = namespace
        return self

    def in_scope(self, conversation_id: str) -> bool:
        return self.scope is None or conversation_id.startswith(f"{self.scope}/")

    def _on_scoped_event(self, event: Event) -> None:
        conversation = conversation_of(event.fields)
        if conversation is None or conversation.startswith(f"{self.scope}/"):
            self.on_event(event)

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
                if checker.scope is None:
                    getattr(checker, method)(view)
                    continue
                mine = [c for c in view.conversation_ids() if checker.in_scope(c)]
                if method == "audit_retiring":
                    if mine:  # a retiring view is one conversation's: audited by the checks of its namespace
                        getattr(checker, method)(view)
                    continue
                with view.scoped(mine) as scoped:
                    getattr(checker, method)(scoped)
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
