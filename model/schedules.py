"""Schedules over bounded runs (ADR 0051 D1, T1).

A sentinel is a schedule: every ``every_ms`` an occurrence is due, and each
occurrence starts a fresh, bounded execution with the deterministic run id
``<scheduleId>@<occurrenceMs>``. Starting is idempotent in the execution
store (the same id never makes a second run, even after the first was
purged), and a schedule has at most one live occurrence: the driver finishes
(or resumes) the live run before it starts the next.

Catch-up after downtime is an explicit policy. The default, ``LATEST``, runs
only the most recent missed occurrence and records the skipped ones as a
``wake.skipped`` event (first, last, count) — a sentinel reading telemetry
gains nothing by replaying an hour of stale wakes.
"""
from __future__ import annotations

from typing import Any, Callable

import attrs

from model.kernel.kernel import Flow, Kernel, RunOutcome
from model.probe import NULL_PROBE, Probe
from model.runtime import Runtime

CATCH_UP_LATEST = "latest"
CATCH_UP_POLICIES = (CATCH_UP_LATEST,)


def run_id_for(schedule_id: str, occurrence_ms: int) -> str:
    return f"{schedule_id}@{occurrence_ms}"


def parse_run_id(run_id: str) -> tuple[str, int]:
    schedule_id, _, occurrence = run_id.rpartition("@")
    if not schedule_id or not occurrence.isdigit():
        raise ValueError(f"not a schedule run id: {run_id!r}")
    return schedule_id, int(occurrence)


@attrs.frozen
class Schedule:
    schedule_id: str
    every_ms: int
    first_ms: int = 0
    catch_up: str = CATCH_UP_LATEST
    end_ms: int | None = None  # occurrences are due in [first_ms, end_ms)

    def __attrs_post_init__(self) -> None:
        assert self.schedule_id and "@" not in self.schedule_id, self.schedule_id
        assert self.every_ms > 0 and self.first_ms >= 0
        assert self.end_ms is None or self.end_ms > self.first_ms
        assert self.catch_up in CATCH_UP_POLICIES, self.catch_up

    def latest_due_at(self, now_ms: int) -> int | None:
        """The latest occurrence with ``occurrence <= now_ms`` (None before the first)."""
        if now_ms < self.first_ms:
            return None
        return self.first_ms + (now_ms - self.first_ms) // self.every_ms * self.every_ms

    def is_occurrence(self, t_ms: int) -> bool:
        return t_ms >= self.first_ms and (t_ms - self.first_ms) % self.every_ms == 0

    def due_count(self, end_ms: int) -> int:
        """Occurrences in ``[first_ms, end_ms)``."""
        if end_ms <= self.first_ms:
            return 0
        return (end_ms - 1 - self.first_ms) // self.every_ms + 1


class ScheduleDriver:
    """Fires a schedule's occurrences on one node, resuming its live run first.

    ``flow_for`` maps an execution's ``flow_version`` to the flow code, so a
    run resumed after a deploy continues on the code it started on (every
    *new* occurrence starts on the currently deployed version).
    """

    def __init__(self, schedule: Schedule, kernel: Kernel, runtime: Runtime, *,
                 flow_for: Callable[[int], Flow], deployed_version: Callable[[], int],
                 input_for: Callable[[str, int], Any] = lambda schedule_id, occurrence_ms: None,
                 probe: Probe = NULL_PROBE) -> None:
        self.schedule = schedule
        self.kernel = kernel
        self.runtime = runtime
        self.flow_for = flow_for
        self.deployed_version = deployed_version
        self.input_for = input_for
        self.probe = probe
        self.wakes = 0

    async def recover(self) -> int | None:
        """Finish any live run of this schedule; return the high-water occurrence."""
        store = self.kernel.store
        schedule_id = self.schedule.schedule_id
        live = await store.live_executions(schedule_id)
        assert len(live) <= 1, f"{schedule_id}: {len(live)} live occurrences"
        for record in live:
            if record.status == "running":
                await self._run(record)
        return await store.schedule_high_water_ms(schedule_id)

    async def run_forever(self) -> None:
        schedule = self.schedule
        runtime = self.runtime
        high_water_ms = await self.recover()
        while True:
            next_ms = schedule.first_ms if high_water_ms is None else high_water_ms + schedule.every_ms
            if schedule.end_ms is not None and next_ms >= schedule.end_ms:
                return
            now_ms = runtime.now_ms()
            if next_ms > now_ms:
                await runtime.sleep_until_ms(next_ms)
                continue
            occurrence_ms = schedule.latest_due_at(now_ms)
            if schedule.end_ms is not None and occurrence_ms >= schedule.end_ms:
                occurrence_ms = schedule.latest_due_at(schedule.end_ms - 1)
            assert occurrence_ms is not None and occurrence_ms >= next_ms
            if occurrence_ms > next_ms:
                skipped = (occurrence_ms - next_ms) // schedule.every_ms
                self.probe.emit("wake.skipped", schedule=schedule.schedule_id, first_ms=next_ms,
                                last_ms=occurrence_ms - schedule.every_ms, count=skipped,
                                policy=schedule.catch_up)
            await self.wake(occurrence_ms)
            high_water_ms = occurrence_ms

    async def wake(self, occurrence_ms: int) -> RunOutcome | None:
        """Start (idempotently) and run the occurrence; None if it already ran."""
        schedule_id = self.schedule.schedule_id
        run_id = run_id_for(schedule_id, occurrence_ms)
        outcome = await self.kernel.store.start_execution(
            run_id, schedule_id=schedule_id, occurrence_ms=occurrence_ms,
            flow_version=self.deployed_version(), input=self.input_for(schedule_id, occurrence_ms),
            started_at_ms=self.runtime.now_ms())
        if outcome.replayed:
            # A duplicate delivery (at-least-once alarms): the run exists or
            # existed. If it is still live, recovery or its owner finishes it.
            return None
        record = outcome.record
        self.wakes += 1
        return await self._run(record, fresh=True)

    async def _run(self, record: Any, *, fresh: bool = False) -> RunOutcome:
        result = await self.kernel.run(record, self.flow_for(record.flow_version), fresh=fresh)
        self.probe.emit("run.settled", run=record.run_id, status=result.status,
                        replayed=result.steps_replayed, executed=result.steps_executed)
        return result
