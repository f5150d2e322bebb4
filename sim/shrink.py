"""Shrinking: reduce a failing run's fault script and duration to a minimum
that still fails the same way.

A failing run is a pure function of (scenario, seed, options, script), so a
candidate is judged by running it: it counts when its first violation is
the same invariant on the same objects (``Violation.related``) and it is
no bigger than the best so far by any measure the user sees (``Measures``:
trace events up to the failure, script entries, the failure's instant, the
duration). Another failure, or the same one later, is not a smaller repro
of this one. Two phases, each bounded by the run budget:

1. Delta debugging (Zeller's ddmin) over the script's entries, faults and
   scheduling deviations alike: try halves, then complements, at finer and
   finer granularity, keeping any subset that still fails. First of all,
   the empty script (the bug may need no fault at all).
2. Bisecting the duration (in whole minutes): first a run that ends just
   past the failure's time, then below it: the shortest run that still fails.

Removing an entry can shift the per-site hit index of the later ones (a
crash that no longer happens makes fewer calls), so a subset may simply
stop failing; ddmin only keeps what was seen to fail, and the final
candidate is the last run that did.

A shorter duration is a different plan, not a prefix of the same run: the
heal instant and timelines drawn over the run (deploys, operator edits)
are placed as fractions of the duration, so a shortened run may fail the
same invariant later, after more events and more crashes; the measures
refuse it and the longer duration stays. (Stopping the same plan earlier
would gain nothing: a run already stops at its first violation.) Nothing
here reads the wall clock: the face times it.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import attrs

from sim.clock import MS_PER_MINUTE
from sim.runner import RunResult, run
from sim.scenario import Scenario, ScenarioOptions

RUNS_MAX_DEFAULT = 300


class BudgetSpent(Exception):
    """The run budget is spent: keep the best candidate so far."""


@attrs.frozen(order=False)
class Measures:
    """What a user sees of a failing run: a shrunk one is no bigger by any."""

    events: int          # trace events up to the failure (a run stops at its first violation)
    script_entries: int  # entries of its realized script (faults and scheduling deviations)
    failed_at_ms: int    # the first violation's simulated instant
    duration_ms: int

    def within(self, other: "Measures") -> bool:
        """No bigger than ``other`` by any measure."""
        return all(mine <= theirs for mine, theirs in zip(attrs.astuple(self), attrs.astuple(other)))


def measures(opts: ScenarioOptions, result: RunResult) -> Measures:
    return Measures(result.events, len(result.fault_script), result.violations[0].time_ms, opts.duration_ms)


@attrs.frozen
class ShrinkResult:
    opts: ScenarioOptions          # the smallest failing options (script, duration)
    result: RunResult              # its run
    runs: int                      # runs made, the original's included
    original_entries: int
    original_duration_ms: int
    budget_spent: bool
    original: Measures             # the original run's: ``result``'s are no bigger by any


class _Judge:
    """Runs candidates against the budget; remembers the best one: the
    last that failed the same way and was no bigger than the best before."""

    def __init__(self, scenario: Scenario, runs_max: int,
                 on_run: Callable[[int, bool, ScenarioOptions], None] | None) -> None:
        self.scenario = scenario
        self.runs_max = runs_max
        self.on_run = on_run
        self.runs = 0
        self.failure: tuple[str, tuple[str, ...]] = ("", ())  # the original's: invariant, objects
        self.best: tuple[ScenarioOptions, RunResult] | None = None

    def start(self, opts: ScenarioOptions, result: RunResult) -> None:
        """The original run: the failure every candidate must show, the first best."""
        first = result.violations[0]
        self.failure = (first.invariant, first.related)
        self.best = (opts, result)

    def fails(self, opts: ScenarioOptions) -> bool:
        if opts.branch is not None and opts.duration_ms <= opts.branch.fork_at_ms:
            return False  # a branch's run must reach its fork instant: no shorter run is that branch
        if self.runs >= self.runs_max:
            raise BudgetSpent()
        self.runs += 1
        result = run(self.scenario, opts)
        still = self._same_failure(result) and measures(opts, result).within(measures(*self.best))
        if still:
            self.best = (opts, result)
        if self.on_run is not None:
            self.on_run(self.runs, still, opts)
        return still

    def _same_failure(self, result: RunResult) -> bool:
        if result.passed or not result.violations:
            return False
        first = result.violations[0]
        return (first.invariant, first.related) == self.failure


def ddmin(items: Sequence[Any], fails: Callable[[list], bool]) -> list:
    """The smallest subset of ``items`` (order kept) that ``fails`` found
    failing, by delta debugging; ``items`` itself is assumed to fail."""
    items = list(items)
    if not items:
        return items
    if fails([]):
        return []
    granularity = 2
    while len(items) >= 2:
        chunks = _split(items, granularity)
        for chunk in chunks:
            if fails(chunk):
                items, granularity = chunk, 2
                break
        else:
            for index in range(len(chunks)):
                complement = [x for j, chunk in enumerate(chunks) if j != index for x in chunk]
                if fails(complement):
                    items, granularity = complement, max(granularity - 1, 2)
                    break
            else:
                if granularity >= len(items):
                    break
                granularity = min(len(items), 2 * granularity)
    return items


def _split(items: list, parts: int) -> list[list]:
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        if end > start:
            chunks.append(items[start:end])
        start = end
    return chunks


def shrink(scenario: Scenario, opts: ScenarioOptions, *, runs_max: int = RUNS_MAX_DEFAULT,
           on_run: Callable[[int, bool, ScenarioOptions], None] | None = None) -> ShrinkResult:
    """Shrink the failing run ``opts`` (its ``fault_script`` is the realized
    script of the failure). Raises ``ValueError`` if it does not fail."""
    script = tuple(opts.fault_script or ())
    judge = _Judge(scenario, max(1, runs_max), on_run)
    first = run(scenario, opts)
    judge.runs = 1
    if first.passed or not first.violations:
        raise ValueError("the run does not fail: nothing to shrink (is it the repro file of a failure?)")
    judge.start(opts, first)
    spent = False
    try:
        # ddmin keeps a subset only when the judge took it: the best is the subset kept.
        ddmin(script, lambda subset: judge.fails(attrs.evolve(opts, fault_script=tuple(subset))))
        _shorten(judge, judge.best[0])
    except BudgetSpent:
        spent = True
    best_opts, best_result = judge.best
    return ShrinkResult(best_opts, best_result, judge.runs, len(script), opts.duration_ms, spent,
                        measures(opts, first))


def _shorten(judge: _Judge, opts: ScenarioOptions) -> None:
    """Bisect the duration in whole minutes: the shortest the judge takes.
    A failure inside the run is tried first with the run ending just past
    it (the run need not go on), then bisected below that; only if that
    run does not fail (faults heal earlier in a shorter run) above it."""
    failed_at_ms = judge.best[1].violations[0].time_ms
    high = -(-opts.duration_ms // MS_PER_MINUTE)  # fails (or is the original)
    # A failure inside the run: a run that ends well before it cannot show it
    # (the settle phase after the end may still). One found after the run's
    # end (settling, the audit) may show in any length.
    low = max(0, failed_at_ms // MS_PER_MINUTE - 1) if failed_at_ms < opts.duration_ms else 0
    if opts.branch is not None:  # a branch ends after its fork instant (a run up to it is not the branch)
        low = max(low, opts.branch.fork_at_ms // MS_PER_MINUTE)
    past = failed_at_ms // MS_PER_MINUTE + 1  # the first whole minute after the failure
    if failed_at_ms < opts.duration_ms and low < past < high:
        if judge.fails(attrs.evolve(opts, duration_ms=past * MS_PER_MINUTE)):
            high = past
        else:
            low = past
    while high - low > 1:
        middle = (low + high) // 2
        if judge.fails(attrs.evolve(opts, duration_ms=middle * MS_PER_MINUTE)):
            high = middle
        else:
            low = middle
