"""At-least-once on the whole system: the sentinel's non-idempotent page.

With the ``pager`` switch, a high reading pages the on-call through the
external pager (``scenarios.workloads.pager``), declared non-idempotent to the kernel.
A crash (or a lost reply, a refusal) between the page and its recorded
completion parks the run at ``EFFECT_INDOUBT``; the on-call operator
(``faults.chaos.InDoubtResolver``) resolves it as the kernel allows: records
the completion the pager's history shows, re-sends an undelivered page and
records that, or abandons the run (FAILED). ``at-most-once-effect`` judges
it, and catches the planted bugs below. Plus two ``model/runs.py`` fixes
found on the way (half-admission order; a late alarm of a skipped occurrence).
"""
from __future__ import annotations

import pytest

from faults import mutants as mx
from faults.mutants import Mutant
from model.failpoints import ADMITTED_BEFORE_READY
from scenarios import registry
from scenarios.workloads import sentinels as fleet_module
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions
from tests.test_runs import EVERY, Crash, CrashAt, S, drive, run_id, start, world  # noqa: F401 (fixture)

# Pinned: the pager on, at the intensity that parks a few runs in a day.
# Seed 4 over a day parks 5 runs and resolves them every way.
SEED, DURATION = 4, "1d"


def _run(seed: int = SEED, duration: str = DURATION, **options):
    knobs = {"fault_intensity": 100, **options.pop("knobs", {})}
    return run(registry.get("sentinel-year"), ScenarioOptions(
        seed=seed, duration_ms=parse_duration_ms(duration), faults_enable=("pager",), knobs=knobs, **options))


def _mutant(module: str, old: str, new: str) -> Mutant:
    return Mutant("test-indoubt", "A test mutant.", module, old, new, ("sentinel-year",))


@pytest.fixture(autouse=True)
def _clean():
    mx.revert()
    yield
    mx.revert()


def _violations(result, name: str) -> list[str]:
    return [v.message for v in result.violations if v.invariant == name]


# -- the clean system -------------------------------------------------------------------


def test_parked_runs_are_resolved_every_way_and_nothing_is_paged_twice():
    result = _run()
    assert result.passed, result.violations
    stats = result.stats
    assert stats["runs_parked_in_doubt"] >= 3 and stats["indoubt_resolved"] == stats["runs_parked_in_doubt"]
    assert stats["indoubt_delivered"] and stats["indoubt_redriven"] and stats["indoubt_abandoned"], stats
    assert result.invariants["at-most-once-effect"] > 0


def test_without_the_switch_nothing_pages():
    # With the switch, the first 12h of this seed park two runs.
    result = run(registry.get("sentinel-year"), ScenarioOptions(
        seed=SEED, duration_ms=parse_duration_ms("12h"), faults_disable=("pager",),
        knobs={"fault_intensity": 100}))
    assert result.passed, result.violations
    assert result.stats["runs_parked_in_doubt"] == 0


def test_a_parked_run_blocks_only_its_own_schedule():
    """Two sentinels: while one is parked the other keeps waking on time."""
    import io
    import json
    stream = io.StringIO()
    # 12h: three runs park and are resolved, two of them parked longer than two periods.
    result = run(registry.get("sentinel-year"), ScenarioOptions(
        seed=SEED, duration_ms=parse_duration_ms("12h"), faults_enable=("pager",),
        knobs={"fault_intensity": 100}, params={"sentinels": 2}), trace_stream=stream)
    assert result.passed, result.violations
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    parked = {e["fields"]["run"]: e["t_ms"] for e in events if e["kind"] == "kernel.indoubt"}
    resolved = {e["fields"]["run"]: e["t_ms"] for e in events if e["kind"] == "operator.resolved"}
    admitted = [(e["t_ms"], e["fields"]["conversation"]) for e in events
                if e["kind"] == "ledger.admit" and "error" not in e["fields"] and not e["fields"]["replayed"]]
    assert parked and any(resolved[r] - parked[r] > 2 * EVERY for r in parked)
    for run_id_, parked_ms in parked.items():
        schedule_id = run_id_.split("@")[0]
        during = [r for t, r in admitted if parked_ms < t < resolved[run_id_]]
        assert not [r for r in during if r.startswith(schedule_id + "@")], (run_id_, during)
        if resolved[run_id_] - parked_ms > 2 * EVERY:
            assert [r for r in during if not r.startswith(schedule_id + "@")], (run_id_, during)


# -- planted bugs ------------------------------------------------------------------------


def test_a_kernel_that_reruns_a_non_idempotent_effect_is_caught():
    """No intent recorded: a crash after the page re-runs it on resume."""
    with mx.applied(_mutant("model.kernel.kernel", "        if not idempotent:\n            pending.append(",
                            "        if False:\n            pending.append(")):
        result = _run()
    assert any("reached the pager 2 times" in m for m in _violations(result, "at-most-once-effect")), \
        result.violations


def test_a_driver_that_ignores_its_parked_run_is_caught():
    """A run parks when it is resumed (``recover``): forgetting it there frees the slot."""
    with mx.applied(_mutant("model.schedules", '                self._parked = outcome.status == "parked"\n',
                            "                self._parked = False\n")):
        result = _run()
    assert any("is parked in doubt" in m for m in _violations(result, "at-most-once-effect")), result.violations


def test_an_operator_who_pages_again_without_looking_is_caught(monkeypatch):
    monkeypatch.setattr(fleet_module.Sentinels, "page_delivered", lambda self, run_id, step_id: None)
    result = _run()
    messages = _violations(result, "at-most-once-effect")
    assert any("which the pager had received" in m or "never reached" in m or "never reached" in m
               or "but the system's page reached" in m for m in messages), result.violations


def test_a_settlement_retried_after_its_reservation_lost_its_reply_adopts_it():
    """Seed 1, every switch on: a failed run's reservation commits and its
    reply is lost; the driver's retry builds the settlement again, created
    two seconds later, and must adopt the reservation it made (the same
    record) instead of failing on a conflict with itself."""
    result = _run(seed=1, swarm=False)
    assert result.passed, result.violations


# -- model/runs.py: found on the way ---------------------------------------------------------


def test_a_late_alarm_of_a_skipped_occurrence_is_retired(world):  # noqa: F811
    """Below the high-water mark, an occurrence never admitted was skipped:
    the execution store's rule (``decide_start``) retires it, and so must
    ``LedgerRuns`` (it used to start it, beside the later live run)."""
    runs = world.runs()
    start(runs, 2)
    start(runs, 5)  # 3 and 4 skipped (catch-up: latest)
    late = start(runs, 3)
    assert (late.replayed, late.record) == (True, None)
    assert world.record(run_id(3)) is None
    assert sorted(r.run_id for r in drive(runs.live_executions(S))) == sorted([run_id(2), run_id(5)])
    again = start(runs, 5)  # a duplicate of an admitted one still replays it
    assert again.replayed and again.record.run_id == run_id(5)


class _CrashOnAdvance:
    """A schedule store whose first ``advance`` kills the process before the call."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.fired = False

    def __getattr__(self, name):
        return getattr(self._inner, name)

    async def advance(self, schedule_id, occurrence_ms):
        if not self.fired:
            self.fired = True
            raise Crash("schedules.advance")
        return await self._inner.advance(schedule_id, occurrence_ms)


def test_finishing_a_half_admission_advances_the_cursor_before_ready(world):  # noqa: F811
    """A crash in the middle of finishing a half-admitted run must not leave
    it ready behind the cursor: admission's order (cursor, then ready)."""
    drive(world.schedules.advance(S, EVERY))
    with pytest.raises(Crash):
        start(world.runs("worker-a", CrashAt(ADMITTED_BEFORE_READY)), 3)
    crashy = _CrashOnAdvance(world.schedules)
    world_schedules, world.schedules = world.schedules, crashy
    try:
        with pytest.raises(Crash):
            drive(world.runs("worker-b").load_steps(run_id(3)))
    finally:
        world.schedules = world_schedules
    row = world.record(run_id(3))
    assert not row.ready  # still half-admitted: the next owner finishes it
    assert drive(world.runs("worker-c").load_steps(run_id(3))) == ()
    assert world.record(run_id(3)).ready and world.cursor().high_water_ms == 3 * EVERY


def test_a_driver_resumes_a_run_the_operator_resolved_under_a_claim_of_its_own():
    """Seed 10 over 12h: a run parks, the on-call operator claims it at a
    newer epoch and records the page as delivered; the worker's driver, which
    had held the run before it parked, resumes it. It must own the run again
    (claim at a newer epoch still), never write under its old claim: that
    write is fenced (``FenceRejected``, then ``OwnershipLost``) and used to
    crash the driver's task."""
    result = _run(10, "12h")
    assert result.passed, result.violations
    assert result.stats["indoubt_delivered"] >= 1
