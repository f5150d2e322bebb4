"""Schedules over bounded runs.

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

import re
from typing import Any, Callable

import attrs

from model.clocks import check_observed
from model.kernel.kernel import Flow, Kernel, MigrationMissing, RunOutcome, error_output
from model.kernel.records import FAILED
from model.probe import NULL_PROBE, Probe
from model.retry import is_retryable
from model.runtime import Runtime

CATCH_UP_LATEST = "latest"
CATCH_UP_POLICIES = (CATCH_UP_LATEST,)

WAKE_RAN = "ran"
WAKE_DUPLICATE = "duplicate"
WAKE_BUSY = "busy"
WAKE_REJECTED = "rejected"
# How long a driver waits before retrying a wake that found its schedule busy.
BUSY_RETRY_MS = 1_000
# How long a driver waits after a retryable store error before starting over.
RETRY_MS = 2_000


def run_id_for(schedule_id: str, occurrence_ms: int) -> str:
    return f"{schedule_id}@{occurrence_ms}"


_OCCURRENCE_RE = re.compile(r"0|[1-9][0-9]*")


def parse_run_id(run_id: str) -> tuple[str, int]:
    """Inverse of ``run_id_for``: only ids it could have produced parse."""
    schedule_id, _, occurrence = run_id.rpartition("@")
    if not schedule_id or _OCCURRENCE_RE.fullmatch(occurrence) is None:
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

    ``flow_for`` maps a flow version to its code. Every run — new or resumed —
    runs on the currently deployed version (code is versioned by deploy);
    a resumed run started on another version crosses over only through the
    kernel's registered transforms.
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
        self._busy = False          # a run of this schedule is in progress here
        self._parked = False        # a parked run holds the live slot
        self._high_water_ms: int | None = None

    async def recover(self) -> int | None:
        """Finish any running run of this schedule; return the high-water occurrence.

        A parked run (``EFFECT_INDOUBT``) keeps the schedule's single live
        slot until an operator resolves it: the driver then starts nothing.
        """
        store = self.kernel.store
        schedule_id = self.schedule.schedule_id
        live = await store.live_executions(schedule_id)
        if len(live) > 1:
            raise AssertionError(f"{schedule_id}: {len(live)} live occurrences: "
                                 f"{', '.join(r.run_id for r in live)}")
        self._parked = False
        for record in live:
            if record.status == "running":
                self._busy = True
                try:
                    outcome = await self._run(record)
                finally:
                    self._busy = False
                self._parked = outcome.status == "parked"
            else:
                self._parked = True
        self._high_water_ms = await store.schedule_high_water_ms(schedule_id)
        # An occurrence is started once due by its starter's clock: one
        # further ahead of this clock than the claimed offset means a clock
        # (this one or the starter's) is off past it (``model.clocks``).
        check_observed(f"{schedule_id}'s latest started occurrence", self._high_water_ms, self.runtime.now_ms())
        return self._high_water_ms

    async def run_forever(self) -> None:
        """Recover, then fire occurrences forever. A retryable store error
        (``is_retryable``) anywhere in a wake is waited out and the loop
        starts over from the stores: the live run is resumed by ``recover``."""
        runtime = self.runtime
        # Not bounded by a count: every retryable error in the schedule's
        # whole life lands here (a year of wakes has as many as the stores'
        # fault rate makes). It ends when the schedule does, or with the
        # process (its node killed); every retry waits RETRY_MS.
        while True:
            try:
                await self._run_forever()
                return
            except Exception as error:
                if not is_retryable(error):
                    raise
                self.probe.emit("driver.retry", schedule=self.schedule.schedule_id,
                                cause=getattr(type(error), "name", type(error).__name__))
                await runtime.sleep_ms(RETRY_MS)

    async def _run_forever(self) -> None:
        schedule = self.schedule
        runtime = self.runtime
        await self.recover()
        # The driver's forever loop: it ends at the schedule's ``end_ms`` (an
        # open-ended schedule never ends; its process does, when its node is
        # killed). Every turn sleeps, or runs a wake, before the next.
        while True:
            if self._parked:
                # Blocked behind a parked run; look again once per cadence.
                await runtime.sleep_ms(schedule.every_ms)
                await self.recover()
                continue
            high_water_ms = self._high_water_ms
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
            if await self.wake(occurrence_ms) == WAKE_BUSY:
                await runtime.sleep_ms(BUSY_RETRY_MS)

    async def wake(self, occurrence_ms: int) -> str:
        """Deliver the alarm for ``occurrence_ms``: start it (idempotently) and run it.

        Returns ``WAKE_RAN``, ``WAKE_DUPLICATE`` (the occurrence was started
        before: at-least-once alarms), ``WAKE_BUSY`` (a run of this schedule is
        in progress or parked: one live occurrence at a time) or
        ``WAKE_REJECTED`` (not a due occurrence of this schedule).
        """
        schedule = self.schedule
        schedule_id = schedule.schedule_id
        now_ms = self.runtime.now_ms()
        if (not schedule.is_occurrence(occurrence_ms) or occurrence_ms > now_ms
                or (schedule.end_ms is not None and occurrence_ms >= schedule.end_ms)):
            self.probe.emit("wake.rejected", schedule=schedule_id, occurrence_ms=occurrence_ms)
            return WAKE_REJECTED
        if self._busy or self._parked:
            return WAKE_BUSY
        high_water_ms = self._high_water_ms
        next_ms = schedule.first_ms if high_water_ms is None else high_water_ms + schedule.every_ms
        if occurrence_ms > next_ms:
            # Catch-up policy ``latest``: the occurrences in between are
            # skipped, on the record.
            self.probe.emit("wake.skipped", schedule=schedule_id, first_ms=next_ms,
                            last_ms=occurrence_ms - schedule.every_ms,
                            count=(occurrence_ms - next_ms) // schedule.every_ms, policy=schedule.catch_up)
        self._busy = True
        try:
            outcome = await self.kernel.store.start_execution(
                run_id_for(schedule_id, occurrence_ms), schedule_id=schedule_id, occurrence_ms=occurrence_ms,
                flow_version=self.deployed_version(), input=self.input_for(schedule_id, occurrence_ms),
                started_at_ms=now_ms)
            if high_water_ms is None or occurrence_ms > high_water_ms:
                self._high_water_ms = occurrence_ms
            if outcome.replayed:
                return WAKE_DUPLICATE
            self.wakes += 1
            result = await self._run(outcome.record, fresh=True)
            self._parked = result.status == "parked"
            return WAKE_RAN
        finally:
            self._busy = False

    async def _run(self, record: Any, *, fresh: bool = False) -> RunOutcome:
        """Run (or resume) on the deployed code. A run started on older code
        continues on the new version only through a registered flow-version
        transform; without one it is failed, explicitly and on the record."""
        version = self.deployed_version()
        try:
            return await self.kernel.run(record, self.flow_for(version), fresh=fresh, flow_version=version)
        except MigrationMissing as missing:
            self.probe.emit("run.migration_missing", run=record.run_id, from_version=missing.from_version,
                            to_version=missing.to_version)
            final = await self.kernel.store.finish_execution(
                record.run_id, status=FAILED, output=error_output(missing), finished_at_ms=self.runtime.now_ms())
            return RunOutcome(record.run_id, final.status, final.output, 0, 0)
