"""``exactly-once-wake``: started runs = due occurrences under the catch-up policy.

A fleet of sentinels brings it for its own schedules (``Sentinels.checks``):
it judges the runs of those schedules and reads past every other
conversation (another fleet's runs, a submission client's conversations).

Online, per schedule, from the ledger's own commits (a run starts when the
ledger admits its id ``scheduleId@occurrenceMs`` for the first time; a
replayed admission is a duplicate alarm; it ends when it is finalized):

- a created run is an occurrence of its schedule, never one started before
  (no duplicate ``scheduleId@occurrenceMs``, even after the first was purged);
- every occurrence between the previous accounted one and this one was
  recorded as skipped (``wake.skipped``) — nothing vanishes silently;
- under the ``latest`` policy the started occurrence is the latest one due at
  the instant it starts: when the driver chose, by its own clock (the
  admission's ``now_ms``; with the stores on their own clock, which stamp
  the admission with their reading, the caller's reading ``store.now``
  traced just before it);
- at most one occurrence of a schedule is live at a time;
- retention archives a started occurrence as a run (summary or hold), never
  as one that never ran, and never archives an occurrence that did not start
  as a run (``schedules.retire``: the archive is the run's only record once
  its rows are deleted).

Audit: started + skipped equals the number of occurrences due before the
schedule's end, and no run is left live (liveness after the faults stop).
Memory: a few integers per schedule, and the started occurrences retention
has not archived yet (bounded by its TTL).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from faults.events import LedgerAdmit, LedgerFinalizeSettlement, SchedulesRetire, StoreNow, WakeSkipped
from model.schedules import Schedule, parse_run_id
from sim.invariants import Checker

if TYPE_CHECKING:
    from scenarios.system import AuditView


class _ScheduleState:
    __slots__ = ("last_started_ms", "accounted_ms", "live_run", "started", "skipped", "unarchived")

    def __init__(self) -> None:
        self.last_started_ms: int | None = None
        self.accounted_ms: int | None = None
        self.live_run: str | None = None
        self.started = 0
        self.skipped = 0
        self.unarchived: set[int] = set()  # started occurrences retention has not archived yet


class ExactlyOnceWake(Checker):
    name = "exactly-once-wake"
    kinds = (LedgerAdmit.kind, WakeSkipped.kind, LedgerFinalizeSettlement.kind, SchedulesRetire.kind,
             StoreNow.kind)

    def __init__(self, schedules: Mapping[str, Schedule], *, end_ms: int) -> None:
        super().__init__()
        self.schedules = dict(schedules)
        self.end_ms = end_ms
        self._state = {sid: _ScheduleState() for sid in self.schedules}
        self._live_runs: dict[str, str] = {}  # run id -> schedule id
        # Stores on their own clock: (node, the caller's reading) of the
        # admission whose event comes next (``store.now`` precedes it).
        self._caller_read: tuple[str, int] | None = None

    @property
    def started(self) -> int:
        return sum(s.started for s in self._state.values())

    @property
    def skipped(self) -> int:
        return sum(s.skipped for s in self._state.values())

    def metrics(self) -> dict:
        return {"wakes": self.started, "wakes_skipped": self.skipped}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        if kind == StoreNow.kind:
            site = fields[StoreNow.site]
            self._caller_read = (event.node, fields[StoreNow.caller_ms]) if site == LedgerAdmit.kind else None
            return
        caller_read, self._caller_read = self._caller_read, None
        if kind == LedgerAdmit.kind:
            # A run starts when the ledger admits its id for the first time
            # (a replayed admission is a duplicate delivery, not a start).
            if LedgerAdmit.error not in fields and not fields[LedgerAdmit.replayed]:
                run_id = fields[LedgerAdmit.conversation]
                try:
                    schedule_id, occurrence_ms = parse_run_id(run_id)
                except ValueError:
                    return  # not a schedule's run: another workload's conversation
                if schedule_id not in self.schedules:
                    return  # another fleet's schedule: its own check judges it
                # Judged at the instant the driver decided, on its own clock
                # (the admission's ``now_ms`` as the driver handed it): a slow
                # admit commits later, when a newer occurrence may be due, and
                # a store on its own clock stamps it with its reading; neither
                # is a fault of the choice.
                decided_ms = fields[LedgerAdmit.admitted_ms]
                if caller_read is not None and caller_read[0] == event.node:
                    decided_ms = caller_read[1]
                self._started(decided_ms, {"run": run_id, "schedule": schedule_id,
                                         "occurrence_ms": occurrence_ms,
                                         "submission": fields[LedgerAdmit.submission]})
        elif kind == WakeSkipped.kind:
            self._skipped(fields)
        elif kind == SchedulesRetire.kind:
            if SchedulesRetire.error not in fields and fields[SchedulesRetire.retired]:
                self._archived(fields)
        elif LedgerFinalizeSettlement.error not in fields:
            run_id = self._live_runs.pop(fields[LedgerFinalizeSettlement.submission], None)
            if run_id is not None:
                state = self._state[parse_run_id(run_id)[0]]
                if state.live_run == run_id:
                    state.live_run = None

    def _started(self, now_ms: int, fields: dict) -> None:
        self.checks += 1
        run_id = fields["run"]
        schedule_id = fields["schedule"]
        schedule = self.schedules[schedule_id]
        state = self._state[schedule_id]
        occurrence_ms = fields["occurrence_ms"]
        if not schedule.is_occurrence(occurrence_ms):
            self.fail(f"{run_id}: {occurrence_ms} is not an occurrence of {schedule_id}", (run_id,))
        elif state.last_started_ms is not None and occurrence_ms <= state.last_started_ms:
            self.fail(f"{run_id}: occurrence started twice (latest start was {state.last_started_ms})", (run_id,))
        else:
            expected_ms = schedule.first_ms if state.accounted_ms is None else state.accounted_ms + schedule.every_ms
            if occurrence_ms != expected_ms:
                self.fail(f"{run_id}: occurrences {expected_ms}..{occurrence_ms - schedule.every_ms} "
                          "were neither started nor recorded as skipped", (run_id, schedule_id))
            # Its occurrences lie in [first, end): after its end, the latest
            # due one is the last before the end.
            horizon_ms = now_ms if schedule.end_ms is None else min(now_ms, schedule.end_ms - 1)
            latest_ms = schedule.latest_due_at(horizon_ms)
            if latest_ms != occurrence_ms:
                self.fail(f"{run_id}: catch-up policy {schedule.catch_up!r} starts the latest due "
                          f"occurrence ({latest_ms}), not {occurrence_ms}", (run_id,))
        if state.live_run is not None:
            self.fail(f"{run_id}: started while {state.live_run} is still live", (run_id, state.live_run))
        state.live_run = run_id
        self._live_runs[fields["submission"]] = run_id
        state.last_started_ms = occurrence_ms
        state.unarchived.add(occurrence_ms)
        state.accounted_ms = occurrence_ms if state.accounted_ms is None else max(state.accounted_ms, occurrence_ms)
        state.started += 1

    def _archived(self, fields: dict) -> None:
        """Retention moved the archive watermark to ``occurrence_ms``: as a
        run (``run`` given: archived with a summary, or held by a pin) or as
        an occurrence that never ran (``run`` None)."""
        schedule_id, occurrence_ms = fields[SchedulesRetire.schedule], fields[SchedulesRetire.occurrence_ms]
        state = self._state.get(schedule_id)
        if state is None:
            return  # another fleet's schedule
        self.checks += 1
        ran = occurrence_ms in state.unarchived
        state.unarchived.discard(occurrence_ms)
        run_id = fields[SchedulesRetire.run]
        if run_id is None and ran:
            self.fail(f"{schedule_id}@{occurrence_ms}: the run started, yet retention archived the occurrence as "
                      "one that never ran (its summary is lost)", (f"{schedule_id}@{occurrence_ms}", schedule_id))
        elif run_id is not None and not ran:
            self.fail(f"{run_id}: retention archived a run of an occurrence that never started", (run_id,))

    def _skipped(self, fields: dict) -> None:
        schedule_id = fields[WakeSkipped.schedule]
        schedule = self.schedules.get(schedule_id)
        if schedule is None:
            return  # another fleet's schedule
        self.checks += 1
        state = self._state[schedule_id]
        first_ms, last_ms = fields[WakeSkipped.first_ms], fields[WakeSkipped.last_ms]
        if state.accounted_ms is not None and last_ms <= state.accounted_ms:
            return  # re-announced after a crash before the start: already counted
        expected_first = schedule.first_ms if state.accounted_ms is None else state.accounted_ms + schedule.every_ms
        if first_ms > expected_first:
            self.fail(f"{schedule_id}: skip starts at {first_ms}, but {expected_first} was never accounted",
                      (schedule_id,))
        start_ms = max(first_ms, expected_first)
        state.skipped += (last_ms - start_ms) // schedule.every_ms + 1
        state.accounted_ms = last_ms

    def audit(self, view: AuditView) -> None:
        for schedule_id, schedule in sorted(self.schedules.items()):
            self.checks += 1
            state = self._state[schedule_id]
            due = schedule.due_count(self.end_ms if schedule.end_ms is None else min(self.end_ms, schedule.end_ms))
            if state.started + state.skipped != due:
                self.fail(f"{schedule_id}: {due} occurrences due, {state.started} started + "
                          f"{state.skipped} skipped", (schedule_id,))
            live = view.live_runs(schedule_id)
            if live:
                self.fail(f"{schedule_id}: runs still live after the faults stopped: {', '.join(live)}",
                          (schedule_id, *live))
            stored_ms = view.schedule_high_water_ms(schedule_id)
            if stored_ms != state.last_started_ms:
                self.fail(f"{schedule_id}: store's high-water {stored_ms} != last started {state.last_started_ms}",
                          (schedule_id,))
