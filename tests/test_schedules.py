"""Schedules over bounded runs (ARCHITECTURE §5 "Schedules").

Reads top to bottom: the occurrence arithmetic and the run-id scheme; then
``ScheduleDriver`` on ``SimRuntime`` with the in-memory execution store —
cadence, idempotent starts and the high-water mark, catch-up after
downtime, recovery of a live run, one live occurrence at a time, and the
schedule's end.

Flows record what they see into a shared list (run id, event, virtual time)
so that ordering is asserted on what actually ran, never on timing.
"""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from model.kernel.kernel import Kernel
from model.kernel.memory_store import InMemoryExecutionStore
from model.kernel.records import COMPLETED, PARKED, RUNNING, STEP_COMPLETED
from model.failpoints import KERNEL_EFFECT_DONE_BEFORE_RECORD
from model.schedules import (
    CATCH_UP_LATEST,
    WAKE_BUSY,
    WAKE_DUPLICATE,
    WAKE_REJECTED,
    Schedule,
    ScheduleDriver,
    parse_run_id,
    run_id_for,
)
from sim.node import Node
from sim.runtime import SimRuntime

MINUTE = 60_000
EVERY = 5 * MINUTE
HOUR = 60 * MINUTE
DAY = 24 * HOUR


# --- Schedule math -----------------------------------------------------------------


def test_latest_due_at():
    s = Schedule("s", EVERY)
    assert s.latest_due_at(0) == 0
    assert s.latest_due_at(1) == 0
    assert s.latest_due_at(EVERY - 1) == 0
    assert s.latest_due_at(EVERY) == EVERY
    assert s.latest_due_at(23 * MINUTE) == 20 * MINUTE
    late = Schedule("late", EVERY, first_ms=1_000)
    assert late.latest_due_at(999) is None
    assert late.latest_due_at(1_000) == 1_000
    assert late.latest_due_at(1_000 + EVERY - 1) == 1_000
    assert late.latest_due_at(1_000 + 2 * EVERY + 7) == 1_000 + 2 * EVERY


def test_is_occurrence():
    s = Schedule("s", EVERY, first_ms=1_000)
    assert s.is_occurrence(1_000) and s.is_occurrence(1_000 + 12 * EVERY)
    assert not s.is_occurrence(0)
    assert not s.is_occurrence(1_000 - EVERY)  # before the first: not an occurrence
    assert not s.is_occurrence(1_001)
    assert not s.is_occurrence(1_000 + EVERY - 1)


def test_due_count():
    s = Schedule("s", EVERY)
    assert s.due_count(0) == 0
    assert s.due_count(1) == 1
    assert s.due_count(EVERY) == 1
    assert s.due_count(EVERY + 1) == 2
    assert s.due_count(HOUR) == 12
    assert s.due_count(365 * DAY) == 105_120
    late = Schedule("late", EVERY, first_ms=HOUR)
    assert late.due_count(HOUR) == 0
    assert late.due_count(HOUR + 1) == 1
    assert late.due_count(2 * HOUR) == 12


@given(first=st.integers(0, 10**9), every=st.integers(1, 10**7), t=st.integers(0, 2 * 10**9))
def test_schedule_math_agrees_with_itself(first, every, t):
    s = Schedule("s", every, first_ms=first)
    latest = s.latest_due_at(t)
    if t < first:
        assert latest is None and s.due_count(t + 1) == 0
        return
    assert s.is_occurrence(latest) and latest <= t < latest + every
    # due_count counts [first, end): it steps by one exactly at occurrences.
    assert s.due_count(t + 1) - s.due_count(t) == (1 if s.is_occurrence(t) else 0)
    assert s.due_count(latest + 1) == (latest - first) // every + 1


def test_schedule_rejects_bad_definitions():
    for bad in (dict(schedule_id="", every_ms=1), dict(schedule_id="a@b", every_ms=1),
                dict(schedule_id="s", every_ms=0), dict(schedule_id="s", every_ms=1, first_ms=-1),
                dict(schedule_id="s", every_ms=1, first_ms=10, end_ms=10),
                dict(schedule_id="s", every_ms=1, catch_up="all")):
        with pytest.raises(AssertionError):
            Schedule(**bad)
    assert Schedule("s", 1).catch_up == CATCH_UP_LATEST


@pytest.mark.parametrize("schedule_id, occurrence_ms", [
    ("s", 0), ("s", 300_000), ("sentinel-7", 31_535_700_000), ("db.copilot/nightly", 5), ("ünïcode", 12)])
def test_run_id_round_trip(schedule_id, occurrence_ms):
    run_id = run_id_for(schedule_id, occurrence_ms)
    assert run_id == f"{schedule_id}@{occurrence_ms}"
    assert parse_run_id(run_id) == (schedule_id, occurrence_ms)


@pytest.mark.parametrize("garbage", [
    "", "s", "@", "@5", "s@", "s@-5", "s@5.0", "s@ 5", "s@5 ", "s@abc", "s@5x", "s@0x10", "s@+5", "s@1e3"])
def test_parse_run_id_rejects_garbage(garbage):
    with pytest.raises(ValueError):
        parse_run_id(garbage)


@pytest.mark.parametrize("non_canonical", ["s@007", "s@\u0661\u0662"])  # 007; Arabic-Indic "12"
def test_parse_run_id_accepts_only_what_run_id_for_produces(non_canonical):
    try:
        parsed = parse_run_id(non_canonical)
    except ValueError:
        return
    assert run_id_for(*parsed) == non_canonical


# --- the driver on SimRuntime: harness ------------------------------------------------


class RecordingProbe:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    def of(self, kind: str) -> list[dict]:
        return [fields for k, fields in self.events if k == kind]


def drive(coro: Any) -> Any:
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError(f"coroutine suspended (yielded {yielded!r})")


class Harness:
    """A simulated world: durable stores that outlive nodes, and worker nodes
    each running one ``ScheduleDriver``."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.runtime = SimRuntime()
        self.store = InMemoryExecutionStore()
        self.probe = RecordingProbe()
        self.log: list[tuple[str, str, int]] = []  # (event, run id, virtual ms)
        self.effects: dict[tuple[str, str], int] = {}  # (run id, step) -> calls
        self.incarnation = 0
        self.node: Node | None = None
        self.driver: ScheduleDriver | None = None
        self.task: Any = None

    def effect(self, run_id: str, step: str):
        async def run() -> Any:
            key = (run_id, step)
            self.effects[key] = self.effects.get(key, 0) + 1
            return self.runtime.now_ms()

        return run

    def start_worker(self, flow, *, failpoints: Any = None) -> ScheduleDriver:
        self.incarnation += 1
        self.node = Node("worker", incarnation=self.incarnation)
        kwargs = {"probe": self.probe}
        if failpoints is not None:
            kwargs["failpoints"] = failpoints(self)
        kernel = Kernel(self.runtime, self.store, **kwargs)
        self.driver = ScheduleDriver(self.schedule, kernel, self.runtime, flow_for=lambda version: flow,
                                     deployed_version=lambda: 1, probe=self.probe)
        self.task = self.runtime.spawn_on(self.node, "driver", self.driver.run_forever())
        return self.driver

    def crash(self) -> None:
        self.runtime.crash_node(self.node)

    def run(self, until_ms: int) -> None:
        self.runtime.run(until_ms)

    # -- observations
    def started(self) -> list[str]:
        return [run_id for event, run_id, _ in self.log if event == "begin"]

    def execution(self, run_id: str):
        return drive(self.store.load_execution(run_id))

    def high_water(self) -> int | None:
        return drive(self.store.schedule_high_water_ms(self.schedule.schedule_id))

    def live(self) -> tuple[str, ...]:
        return tuple(r.run_id for r in drive(self.store.live_executions(self.schedule.schedule_id)))


def trivial_flow(h: Harness):
    async def flow(ctx, _input):
        h.log.append(("begin", ctx.run_id, h.runtime.now_ms()))
        at = await ctx.execute("tick", h.effect(ctx.run_id, "tick"))
        h.log.append(("end", ctx.run_id, h.runtime.now_ms()))
        return {"at": at}

    return flow


def sleeping_flow(h: Harness, sleep_ms: int):
    """begin; step a; sleep; step b (also records how many runs are live)."""

    async def flow(ctx, _input):
        h.log.append(("begin", ctx.run_id, h.runtime.now_ms()))
        await ctx.execute("a", h.effect(ctx.run_id, "a"))
        await ctx.flush()  # group commit: make step a durable before the long wait
        await h.runtime.sleep_ms(sleep_ms)
        h.log.append(("live", ",".join(h.live()), h.runtime.now_ms()))
        await ctx.execute("b", h.effect(ctx.run_id, "b"))
        h.log.append(("end", ctx.run_id, h.runtime.now_ms()))
        return "ok"

    return flow


def ids(*occurrences: int) -> list[str]:
    return [run_id_for("s", ms) for ms in occurrences]


# --- cadence -------------------------------------------------------------------------------


def test_one_hour_starts_exactly_twelve_runs_with_deterministic_ids():
    h = Harness(Schedule("s", EVERY))
    driver = h.start_worker(trivial_flow(h))
    h.run(HOUR - 1)

    expected = ids(*range(0, HOUR, EVERY))
    assert len(expected) == 12 and expected[:2] == ["s@0", "s@300000"] and expected[-1] == "s@3300000"
    assert h.started() == expected
    assert driver.wakes == 12
    assert h.store.counts()["executions"] == 12
    for run_id in expected:
        record = h.execution(run_id)
        _, occurrence_ms = parse_run_id(run_id)
        assert (record.schedule_id, record.occurrence_ms) == ("s", occurrence_ms)
        assert record.status == COMPLETED and record.output == {"at": occurrence_ms}
        assert record.started_at_ms == record.finished_at_ms == occurrence_ms
    assert h.high_water() == 55 * MINUTE
    assert h.probe.of("wake.skipped") == []
    assert h.live() == ()


def test_a_duplicate_start_of_the_same_occurrence_starts_no_second_run():
    h = Harness(Schedule("s", EVERY))
    driver = h.start_worker(trivial_flow(h))
    h.run(HOUR - 1)
    before = (list(h.log), dict(h.effects), h.store.counts(), driver.wakes)

    assert drive(driver.wake(0)) == WAKE_DUPLICATE
    assert drive(driver.wake(55 * MINUTE)) == WAKE_DUPLICATE  # the latest, at the high-water mark
    assert (list(h.log), dict(h.effects), h.store.counts(), driver.wakes) == before
    assert h.execution("s@0").status == COMPLETED


def test_a_duplicate_of_a_live_occurrence_is_busy_and_the_owner_finishes_it():
    h = Harness(Schedule("s", EVERY))
    driver = h.start_worker(sleeping_flow(h, MINUTE))
    h.run(30_000)  # s@0 is live, asleep inside its flow
    assert h.live() == ("s@0",)
    assert drive(driver.wake(0)) == WAKE_BUSY  # its own run is in progress
    h.run(2 * MINUTE)
    assert h.started() == ["s@0"]
    assert h.effects == {("s@0", "a"): 1, ("s@0", "b"): 1}
    assert h.execution("s@0").status == COMPLETED


def test_after_purge_a_start_of_the_same_id_is_still_refused():
    h = Harness(Schedule("s", EVERY))
    driver = h.start_worker(trivial_flow(h))
    h.run(HOUR - 1)

    assert drive(h.store.purge_finished(h.runtime.now_ms() + 1)) == 12
    assert h.store.counts() == {"executions": 0, "steps": 0}
    assert h.execution("s@0") is None

    assert drive(driver.wake(0)) == WAKE_DUPLICATE
    assert drive(driver.wake(55 * MINUTE)) == WAKE_DUPLICATE
    assert h.execution("s@0") is None and h.execution("s@3300000") is None  # not re-created
    assert h.store.counts()["executions"] == 0
    assert h.high_water() == 55 * MINUTE
    assert len(h.started()) == 12

    # The driver itself carries on with the next occurrence.
    h.run(HOUR)
    assert h.started()[-1] == "s@3600000"
    assert h.execution("s@3600000").status == COMPLETED


# --- catch-up after downtime ------------------------------------------------------------------


def test_catch_up_runs_only_the_latest_missed_occurrence_and_records_the_skipped_ones():
    h = Harness(Schedule("s", EVERY))
    h.start_worker(trivial_flow(h))
    h.run(10 * MINUTE + 1)
    assert h.started() == ids(0, 5 * MINUTE, 10 * MINUTE)

    dead = h.task
    h.crash()
    down_until = 10 * MINUTE + 1 + 23 * MINUTE
    h.run(down_until)  # 23 minutes of downtime: nothing runs
    assert not dead.alive
    assert h.started() == ids(0, 5 * MINUTE, 10 * MINUTE)

    h.start_worker(trivial_flow(h))
    h.run(down_until)
    # Missed: 15, 20, 25, 30 minutes. Only the latest (30) runs, late.
    assert h.started() == ids(0, 5 * MINUTE, 10 * MINUTE, 30 * MINUTE)
    assert h.execution("s@1800000").started_at_ms == down_until
    for missed in (15, 20, 25):
        assert h.execution(run_id_for("s", missed * MINUTE)) is None
    assert h.probe.of("wake.skipped") == [{
        "schedule": "s", "first_ms": 15 * MINUTE, "last_ms": 25 * MINUTE, "count": 3, "policy": "latest"}]

    # Then the cadence resumes on time, with no further skips.
    h.run(40 * MINUTE)
    assert h.started()[-2:] == ids(35 * MINUTE, 40 * MINUTE)
    assert h.execution("s@2100000").started_at_ms == 35 * MINUTE
    assert len(h.probe.of("wake.skipped")) == 1


def test_restart_within_the_same_cadence_misses_nothing():
    h = Harness(Schedule("s", EVERY))
    h.start_worker(trivial_flow(h))
    h.run(EVERY + 1)
    h.crash()
    h.run(EVERY + 30_000)
    h.start_worker(trivial_flow(h))
    h.run(HOUR - 1)
    assert h.started() == ids(*range(0, HOUR, EVERY))
    assert h.probe.of("wake.skipped") == []


# --- recovery of a live run --------------------------------------------------------------------


def test_a_live_running_execution_is_resumed_and_finished_before_any_new_occurrence():
    h = Harness(Schedule("s", EVERY))
    h.start_worker(sleeping_flow(h, MINUTE))
    h.run(30_000)  # s@0 did step a, sleeps until 60 s
    h.crash()
    assert h.execution("s@0").status == RUNNING
    assert h.live() == ("s@0",)

    restart_ms = 11 * MINUTE + 40_000
    h.run(restart_ms)
    h.start_worker(sleeping_flow(h, MINUTE))
    h.run(16 * MINUTE)

    # s@0: step a folded from the log (its effect ran once), step b executed.
    assert h.effects[("s@0", "a")] == 1 and h.effects[("s@0", "b")] == 1
    steps = drive(h.store.load_steps("s@0"))
    assert [(s.step_id, s.kind) for s in steps] == [("a", STEP_COMPLETED), ("b", STEP_COMPLETED)]
    finished_0 = h.execution("s@0")
    assert finished_0.status == COMPLETED and finished_0.finished_at_ms == restart_ms + MINUTE

    # The next occurrence (the latest due at that point, 10 min) started only
    # after s@0 finished; 5 min was skipped under the catch-up policy.
    events = [(event, run_id) for event, run_id, _ in h.log if event in ("begin", "end")]
    assert events == [("begin", "s@0"), ("begin", "s@0"), ("end", "s@0"),
                      ("begin", "s@600000"), ("end", "s@600000"),
                      ("begin", "s@900000"), ("end", "s@900000")]
    assert h.execution("s@600000").started_at_ms == finished_0.finished_at_ms
    assert h.probe.of("wake.skipped") == [{
        "schedule": "s", "first_ms": 5 * MINUTE, "last_ms": 5 * MINUTE, "count": 1, "policy": "latest"}]
    # Every run saw exactly one live execution: itself.
    assert [run_ids for event, run_ids, _ in h.log if event == "live"] == ["s@0", "s@600000", "s@900000"]


# --- one live occurrence at a time ---------------------------------------------------------------


def test_a_flow_longer_than_the_cadence_never_overlaps_and_late_starts_follow_catch_up():
    schedule = Schedule("s", EVERY)
    h = Harness(schedule)
    h.start_worker(sleeping_flow(h, 12 * MINUTE))
    h.run(HOUR - 1)

    started = h.started()
    assert started[:3] == ids(0, 10 * MINUTE, 20 * MINUTE)
    assert h.execution("s@600000").started_at_ms == 12 * MINUTE
    assert h.execution("s@1200000").started_at_ms == 24 * MINUTE

    # No overlap: each run starts at or after the previous one finished.
    records = [h.execution(run_id) for run_id in started]
    for previous, current in zip(records, records[1:]):
        assert previous.status == COMPLETED
        assert current.started_at_ms >= previous.finished_at_ms
    # Each run, once past its sleep, saw only itself live.
    assert [run_ids for event, run_ids, _ in h.log if event == "live"] == [
        r.run_id for r in records if r.status == COMPLETED]
    # Each late start is the latest occurrence due when it started ...
    for record in records:
        assert record.occurrence_ms == schedule.latest_due_at(record.started_at_ms)
    # ... and every occurrence in between is accounted for by exactly one skip.
    skipped: list[int] = []
    for event in h.probe.of("wake.skipped"):
        span = list(range(event["first_ms"], event["last_ms"] + 1, EVERY))
        assert event["count"] == len(span) and event["policy"] == "latest"
        skipped += span
    occurrences = sorted(skipped + [r.occurrence_ms for r in records])
    assert occurrences == list(range(0, records[-1].occurrence_ms + 1, EVERY))


def test_an_alarm_for_the_next_occurrence_while_one_is_live_does_not_start_a_second_live_run():
    h = Harness(Schedule("s", EVERY))
    driver = h.start_worker(sleeping_flow(h, 12 * MINUTE))
    h.run(EVERY - 1)
    # An at-least-once alarm for the 5-minute occurrence arrives while s@0 runs.
    h.runtime.spawn_on(h.node, "alarm", driver.wake(EVERY), at_ms=EVERY)
    h.run(HOUR)
    assert all("," not in run_ids for event, run_ids, _ in h.log if event == "live"), h.log


def test_a_parked_run_holds_the_schedules_single_live_slot():
    class CrashNodeOnce:
        def __init__(self, h: Harness) -> None:
            self.h = h

        def hit(self, name: str) -> None:
            if name == KERNEL_EFFECT_DONE_BEFORE_RECORD and not getattr(CrashNodeOnce, "fired", False):
                CrashNodeOnce.fired = True
                self.h.crash()  # raises NodeCrashed in the running task

    h = Harness(Schedule("s", EVERY))

    def flow_for(h: Harness):
        async def flow(ctx, _input):
            h.log.append(("live", ",".join(h.live()), h.runtime.now_ms()))
            return await ctx.execute("charge", h.effect(ctx.run_id, "charge"), idempotent=False)

        return flow

    h.start_worker(flow_for(h), failpoints=CrashNodeOnce)
    h.run(1_000)
    assert not h.node.alive and h.execution("s@0").status == RUNNING
    h.start_worker(flow_for(h))
    h.run(2_000)
    assert h.execution("s@0").status == PARKED  # recovery parked the in-doubt run
    assert h.effects == {("s@0", "charge"): 1}

    h.run(HOUR)
    live_seen = [run_ids for event, run_ids, _ in h.log if event == "live"]
    assert all("," not in run_ids for run_ids in live_seen), live_seen


# --- the schedule's end ----------------------------------------------------------------------------


def test_end_ms_stops_the_driver():
    h = Harness(Schedule("s", EVERY, end_ms=1_000_000))
    h.start_worker(trivial_flow(h))
    h.run(HOUR)
    assert h.started() == ids(0, 5 * MINUTE, 10 * MINUTE, 15 * MINUTE)  # [0, end)
    assert not h.task.alive  # run_forever returned
    assert h.runtime.idle()


def test_end_ms_exactly_on_an_occurrence_excludes_it():
    h = Harness(Schedule("s", EVERY, end_ms=15 * MINUTE))
    h.start_worker(trivial_flow(h))
    h.run(HOUR)
    assert h.started() == ids(0, 5 * MINUTE, 10 * MINUTE)
    assert not h.task.alive


def test_catch_up_past_the_end_runs_the_last_occurrence_before_the_end_then_stops():
    h = Harness(Schedule("s", EVERY, end_ms=1_000_000))
    h.start_worker(trivial_flow(h))
    h.run(5 * MINUTE + 1)
    h.crash()
    h.run(2_000_000)
    h.start_worker(trivial_flow(h))
    h.run(HOUR)
    assert h.started() == ids(0, 5 * MINUTE, 15 * MINUTE)
    assert h.execution("s@900000").started_at_ms == 2_000_000
    assert h.probe.of("wake.skipped") == [{
        "schedule": "s", "first_ms": 10 * MINUTE, "last_ms": 10 * MINUTE, "count": 1, "policy": "latest"}]
    assert not h.task.alive


def test_restart_after_the_end_starts_nothing():
    h = Harness(Schedule("s", EVERY, end_ms=1_000_000))
    h.start_worker(trivial_flow(h))
    h.run(HOUR)
    h.crash()
    h.start_worker(trivial_flow(h))
    h.run(2 * HOUR)
    assert h.started() == ids(0, 5 * MINUTE, 10 * MINUTE, 15 * MINUTE)
    assert not h.task.alive and h.probe.of("wake.skipped") == []


def test_wake_rejects_what_is_not_a_due_occurrence():
    h = Harness(Schedule("s", EVERY, end_ms=HOUR))
    driver = h.start_worker(trivial_flow(h))
    h.run(10 * MINUTE + 1)
    assert drive(driver.wake(30 * MINUTE)) == WAKE_REJECTED  # in the future
    assert drive(driver.wake(3_300_123)) == WAKE_REJECTED    # not on the cadence
    assert drive(driver.wake(HOUR)) == WAKE_REJECTED         # at or past the schedule's end
    assert h.high_water() == 10 * MINUTE                      # nothing was started
    assert [e["occurrence_ms"] for e in h.probe.of("wake.rejected")] == [30 * MINUTE, 3_300_123, HOUR]
