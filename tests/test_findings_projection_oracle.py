"""The ``findings-projection`` oracle closes its shadow by the cutoff each
retention pass asked for, not by the instant the pass ended.

The false alarm this pins was found by the 200d:365d:32 branch benchmark:
two of 32 sentinel-year futures (seed 1, --no-swarm, branches 16 and 17)
failed ``findings-projection`` at midnight 274 and 286 days in. A run that
settled a few seconds after midnight three days earlier had its finding
kept live by the pass (whose clock read midnight when it began), while the
oracle closed it by the pass's end, ten seconds later, slowed by a
partition. Driven here with events, beside a fake projection."""
from __future__ import annotations

from faults.clocks import CLOCK_TOLERANCE_MS
from faults.events import ERROR, FindingsCloseExpired, RetentionPass
from model.findings import ProjectedFinding
from scenarios.invariants.findings_projection import FindingsProjection
from sim.trace import Event

DAY = 86_400_000
TTL = 3 * DAY


class _View:
    def __init__(self) -> None:
        self.live: dict[str, ProjectedFinding] = {}

    def live_findings(self):
        return tuple(self.live[k] for k in sorted(self.live))

    def findings_checkpoint(self, schedule_id):
        return 10 * DAY


def _finding(name: str, opened_at_ms: int) -> ProjectedFinding:
    return ProjectedFinding(finding_id=name, run_id=f"s@{opened_at_ms}", schedule_id="s", occurrence_ms=opened_at_ms,
                            category="slow-query", severity="warn", evidence=(), opened_at_ms=opened_at_ms)


def _oracle():
    view = _View()
    checker = FindingsProjection(finding_ttl_ms=TTL)
    found = []
    checker._sink = found.append
    checker.view = view
    return checker, view, found


def _close(checker, at_ms, before_ms, *, error=False):
    fields = {"before_ms": before_ms, "closed": None if error else 0}
    if error:
        fields[ERROR] = "ReplyLost"
    checker.on_event(Event(1, at_ms, "w", FindingsCloseExpired.kind, fields))


def _pass(checker, at_ms):
    checker.on_event(Event(2, at_ms, "w", RetentionPass.kind, {}))


def _both(checker, view, finding):
    checker._shadow[finding.finding_id] = finding
    view.live[finding.finding_id] = finding


def test_a_pass_that_ends_late_is_judged_by_the_cutoff_it_asked_for():
    checker, view, found = _oracle()
    early, late = _finding("early", 4 * DAY - 5_000), _finding("late", 4 * DAY + 4_000)  # settled 4 s after midnight
    _both(checker, view, early)
    _both(checker, view, late)
    midnight = 7 * DAY
    _close(checker, midnight + 1, midnight - TTL)  # the pass began at midnight: closes "early" only
    del view.live["early"]
    _pass(checker, midnight + 10_770)  # ... and ended 10.77 s later, slowed by a partition
    assert found == [] and set(checker._shadow) == {"late"}
    checker.audit(view)
    assert found == []


def test_a_cutoff_past_the_ttl_is_findings_closed_early():
    checker, view, found = _oracle()
    now = 7 * DAY
    _close(checker, now, now - TTL + CLOCK_TOLERANCE_MS)  # a clock ahead by the tolerance: allowed
    assert found == []
    _close(checker, now, now - TTL // 2)  # half the TTL: evidence unpinned while its finding should live
    assert len(found) == 1 and "findings closed early" in found[0].message


def test_an_unanswered_close_leaves_what_it_may_have_closed_out_until_an_answered_one_covers_it():
    checker, view, found = _oracle()
    a, b = _finding("a", 4 * DAY - 1_000), _finding("b", 4 * DAY + 2_000)
    _both(checker, view, a)
    _both(checker, view, b)
    midnight = 7 * DAY
    _close(checker, midnight, midnight - TTL + 5_000, error=True)  # may have closed a and b: it did
    view.live.clear()
    _close(checker, midnight + 60_000, midnight - TTL)  # the retried pass, its clock jumped back 5 s
    _pass(checker, midnight + 61_000)
    assert found == [] and "b" in checker._ambiguous and "a" not in checker._shadow
    checker.audit(view)
    assert found == []
    _close(checker, midnight + DAY, midnight + DAY - TTL)  # the next day's pass covers b for sure
    _pass(checker, midnight + DAY + 1_000)
    assert found == [] and checker._ambiguous == {}


def test_a_finding_the_projection_kept_past_an_answered_close_still_fails():
    checker, view, found = _oracle()
    stale = _finding("stale", 4 * DAY - 1_000)
    _both(checker, view, stale)
    midnight = 7 * DAY
    _close(checker, midnight, midnight - TTL)  # answered: the projection says it closed it ...
    _pass(checker, midnight + 1_000)           # ... but it is still live
    assert len(found) == 1 and "stale" in found[0].message


def test_before_the_first_ttl_a_cutoff_of_zero_is_on_time():
    checker, view, found = _oracle()
    _close(checker, DAY, 0)  # max(0, now - TTL): nothing is old enough yet
    assert found == []
    _close(checker, DAY, 1)
    assert len(found) == 1 and "findings closed early" in found[0].message
