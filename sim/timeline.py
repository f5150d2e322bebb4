"""The run's timeline: what happened when, in simulated time, in bounded memory.

A report draws a run as a strip of simulated calendar time: how much work
settled, where the faults and crashes fell, and the rare events a reader
looks for first (deploys, migrations, pauses, crashes, the violation). A
``Timeline`` builds that strip from the trace while the run goes, as an
observer only: it subscribes to a few event kinds (never to every event),
never emits, and so never changes the trace digest.

Memory does not grow with simulated time (a year-long run has 105,120
wakes):

- counts go into a fixed number of bins (``BINS``). The run's real end is
  unknown in advance (a violation stops it early, the settle phase runs
  past the duration), so the bins start narrow (``BIN_MS_MIN``) and, when
  an event falls past the last one, neighbours are summed pairwise and the
  width doubles. At the end the run covers between half and all of the
  bins, whatever its length: a run stopped at its violation after an hour
  is drawn at minute resolution, not as one sliver of a planned year.
- marks (the rare events, one each) are capped in total (``MARKS_MAX``)
  and per category (``MARKS_PER_CATEGORY_MAX``, so a year of crashes cannot
  crowd out the deploys); what the cap drops is counted. Violations are
  kept apart (a run stops at its first one, so there are only a few), so
  the violation is never dropped.

The cost per watched event is a bin index and a list increment.
"""
from __future__ import annotations

from typing import Any

from sim.clock import format_span_ms
from sim.trace import Event, Trace

TIMELINE_FORMAT = "loomsim-timeline/1"
BINS = 240  # even: folding sums neighbours pairwise
BIN_MS_MIN = 1_000
MARKS_MAX = 300
MARKS_PER_CATEGORY_MAX = 100
VIOLATIONS_KEPT = 5
LABEL_CHARS_MAX = 160

# What counts as work done: a sentinel's bounded run settled, a submission settled.
SETTLED_KINDS = ("run.settled", "submission.settled")
# The fault kinds drawn as marks. The engine cannot import ``faults/``: these
# spell ``faults.kinds.NODE_PAUSE`` and ``BEYOND_CONTRACT_KINDS`` (a test
# holds them equal).
PAUSE_FAULT_KIND = "node-pause"
BEYOND_FAULT_KINDS = ("lost-write", "torn-batch", "row-rot", "clock-jump-beyond",
                      "latent-sector-error", "lost-tail", "torn-write", "misdirected-write")

# Mark categories.
DEPLOY, MIGRATION, MIGRATION_MISSING, PAUSE, CRASH, BEYOND = (
    "deploy", "migration", "migration-missing", "pause", "crash", "beyond-contract")

_WATCHED = (*SETTLED_KINDS, "fault", "node.crash", "deploy", "kernel.migrated", "run.migration_missing",
            "ds.loaded", "violation")


class Timeline:
    """Per-bin counts and capped marks of one run, fed by its trace."""

    __slots__ = ("bins", "bin_ms", "settled", "crashes", "faults", "marks", "marks_dropped", "_per_category",
                 "violations", "_handlers")

    def __init__(self, *, bins: int = BINS, bin_ms: int = BIN_MS_MIN) -> None:
        assert bins >= 2 and bins % 2 == 0, bins
        assert bin_ms >= 1, bin_ms
        self.bins = bins
        self.bin_ms = bin_ms
        self.settled = [0] * bins
        self.crashes = [0] * bins
        # kind -> per-bin counts; fault kinds are a fixed, small set.
        self.faults: dict[str, list[int]] = {}
        self.marks: list[dict[str, Any]] = []
        self.marks_dropped: dict[str, int] = {}
        self._per_category: dict[str, int] = {}
        self.violations: list[dict[str, Any]] = []
        self._handlers = {
            **{kind: self._on_settled for kind in SETTLED_KINDS},
            "fault": self._on_fault,
            "node.crash": self._on_crash,
            "deploy": self._on_deploy,
            "kernel.migrated": self._on_kernel_migrated,
            "run.migration_missing": self._on_migration_missing,
            "ds.loaded": self._on_state_loaded,
            "violation": self._on_violation,
        }

    def subscribe(self, trace: Trace) -> None:
        """Watch ``trace`` (before the workloads start: nothing is missed)."""
        for kind in _WATCHED:
            trace.subscribe((kind,), self._handlers[kind])

    # -- binning ---------------------------------------------------------------

    def _bin(self, t_ms: int) -> int:
        index = t_ms // self.bin_ms
        while index >= self.bins:
            self._fold()
            index = t_ms // self.bin_ms
        return index

    def _fold(self) -> None:
        """Twice as wide, half as many used: neighbours summed pairwise."""
        half = self.bins // 2

        def folded(counts: list[int]) -> list[int]:
            return [counts[2 * i] + counts[2 * i + 1] for i in range(half)] + [0] * half

        self.settled = folded(self.settled)
        self.crashes = folded(self.crashes)
        for kind in self.faults:
            self.faults[kind] = folded(self.faults[kind])
        self.bin_ms *= 2

    # -- marks -----------------------------------------------------------------

    def _mark(self, category: str, t_ms: int, node: str, label: str, **extra: Any) -> None:
        taken = self._per_category.get(category, 0)
        if taken >= MARKS_PER_CATEGORY_MAX or len(self.marks) >= MARKS_MAX:
            self.marks_dropped[category] = self.marks_dropped.get(category, 0) + 1
            return
        self._per_category[category] = taken + 1
        self.marks.append({"t_ms": t_ms, "kind": category, "node": node, "label": label[:LABEL_CHARS_MAX], **extra})

    # -- the watched events ----------------------------------------------------

    def _on_settled(self, event: Event) -> None:
        index = self._bin(event.time_ms)  # first: a fold replaces the lists
        self.settled[index] += 1

    def _on_fault(self, event: Event) -> None:
        _, t_ms, node, _, fields = event
        kind = fields.get("kind", "?")
        index = self._bin(t_ms)  # first: a fold replaces the lists
        counts = self.faults.get(kind)
        if counts is None:
            counts = self.faults[kind] = [0] * self.bins
        counts[index] += 1
        if kind == PAUSE_FAULT_KIND:
            pause_ms = fields.get("duration_ms") or 0
            self._mark(PAUSE, t_ms, node, f"pause {format_span_ms(pause_ms)} on {node}", duration_ms=pause_ms)
        elif kind in BEYOND_FAULT_KINDS:
            self._mark(BEYOND, t_ms, node, f"{kind} at {fields.get('site', '?')}")

    def _on_crash(self, event: Event) -> None:
        _, t_ms, node, _, fields = event
        index = self._bin(t_ms)  # first: a fold replaces the lists
        self.crashes[index] += 1
        restart_ms = fields.get("restart_after_ms")
        down = "no restart" if restart_ms is None else f"down {format_span_ms(restart_ms)}"
        self._mark(CRASH, t_ms, node, f"crash {node} ({down})")

    def _on_deploy(self, event: Event) -> None:
        _, t_ms, node, _, fields = event
        broken = fields.get("broken")
        label = f"deploy {fields.get('build', '?')} (v{fields.get('version', '?')})"
        self._mark(DEPLOY, t_ms, node, label + (f", broken: {broken}" if broken else ""))

    def _on_kernel_migrated(self, event: Event) -> None:
        _, t_ms, node, _, fields = event
        self._mark(MIGRATION, t_ms, node,
                   f"run migrated v{fields.get('from_version')}→v{fields.get('to_version')} ({fields.get('run')})")

    def _on_migration_missing(self, event: Event) -> None:
        _, t_ms, node, _, fields = event
        self._mark(MIGRATION_MISSING, t_ms, node,
                   f"migration missing v{fields.get('from_version')}→v{fields.get('to_version')} ({fields.get('run')})")

    def _on_state_loaded(self, event: Event) -> None:
        fields = event.fields
        if fields.get("migrated") is True:  # a durable-state payload migrated on load
            self._mark(MIGRATION, event.time_ms, event.node,
                       f"state migrated v{fields.get('stored_version')}→v{fields.get('current')} ({fields.get('key')})")

    def _on_violation(self, event: Event) -> None:
        if len(self.violations) < VIOLATIONS_KEPT:
            fields = event.fields
            self.violations.append({"t_ms": event.time_ms, "invariant": fields.get("invariant", "?"),
                                    "message": str(fields.get("message", ""))[:LABEL_CHARS_MAX]})

    # -- the result ------------------------------------------------------------

    def to_dict(self, end_ms: int, *, heal_ms: int | None = None, duration_ms: int | None = None) -> dict[str, Any]:
        """Plain data for ``RunResult.timeline`` (and the JSON): the bins
        widened until ``end_ms`` (the simulated end) falls in the last."""
        if end_ms > 0:
            self._bin(end_ms - 1)
        return {
            "format": TIMELINE_FORMAT,
            "bins": self.bins,
            "bin_ms": self.bin_ms,
            "end_ms": end_ms,
            "heal_ms": heal_ms,
            "duration_ms": duration_ms,
            "settled": list(self.settled),
            "crashes": list(self.crashes),
            "faults": {kind: list(counts) for kind, counts in sorted(self.faults.items())},
            "marks": [dict(m) for m in self.marks],
            "marks_dropped": dict(sorted(self.marks_dropped.items())),
            "violations": [dict(v) for v in self.violations],
        }
