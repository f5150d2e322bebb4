"""In-memory execution store: the fast backend of the simulator.

Sized for a simulated year (105,120 runs of one sentinel, with retention
purging as it goes): no call scans all executions.

- ``live_executions`` reads a per-schedule index of live runs (normally one
  entry: at most one live occurrence per schedule).
- ``purge_finished`` pops a min-heap of ``(finished_at_ms, run_id)``. In
  practice finished_at_ms only grows, so the heap behaves like a FIFO, but it
  stays exact if a caller finishes runs out of time order. Each finished run
  is pushed exactly once (a finished run never changes, and a purged run id
  can only come back as a new execution that finishes anew), so the heap
  holds no stale entries and its size is the number of finished runs held.

Values are held as canonical JSON text (``store.encode_json``) and decoded on
every read: the deep copy both ways that a durable store gives for free.
"""
from __future__ import annotations

import heapq

from .records import (
    PARKED,
    RUNNING,
    TERMINAL_STATUSES,
    ExecutionRecord,
    StartOutcome,
    StepRecord,
)
from .store import (
    NULL_JSON,
    RETIRED_OUTCOME,
    START_CREATE,
    START_REPLAY,
    check_append,
    decide_finish,
    decide_park,
    decide_start,
    decode_json,
    encode_json,
    encode_steps,
    require_int,
    require_str,
    validate_append_args,
    validate_finish_args,
    validate_first_seq,
    validate_start_args,
)


class _Execution:
    """The mutable row behind an ExecutionRecord (values as JSON text)."""

    __slots__ = (
        "run_id",
        "schedule_id",
        "occurrence_ms",
        "flow_version",
        "input_json",
        "status",
        "started_at_ms",
        "finished_at_ms",
        "output_json",
        "steps",
    )

    def __init__(self, run_id, schedule_id, occurrence_ms, flow_version, input_json, started_at_ms):
        self.run_id = run_id
        self.schedule_id = schedule_id
        self.occurrence_ms = occurrence_ms
        self.flow_version = flow_version
        self.input_json = input_json
        self.status = RUNNING
        self.started_at_ms = started_at_ms
        self.finished_at_ms = None
        self.output_json = NULL_JSON
        # Step i (seq i + 1) as a plain (step_id, kind, output_json) tuple.
        self.steps: list[tuple[str, str, str]] = []

    def record(self) -> ExecutionRecord:
        return ExecutionRecord(
            self.run_id,
            self.schedule_id,
            self.occurrence_ms,
            self.flow_version,
            decode_json(self.input_json),
            self.status,
            self.started_at_ms,
            self.finished_at_ms,
            decode_json(self.output_json),
        )


class InMemoryExecutionStore:
    """``ExecutionStore`` in process memory. Not durable across a restart of
    the Python process; durable across simulated node crashes (the store
    object outlives the nodes)."""

    def __init__(self) -> None:
        self._executions: dict[str, _Execution] = {}
        self._high_water_ms: dict[str, int] = {}
        # schedule_id -> {run_id: row} for RUNNING and PARKED runs only.
        self._live: dict[str, dict[str, _Execution]] = {}
        self._finished_heap: list[tuple[int, str]] = []
        self._step_count = 0

    # --- writes -------------------------------------------------------------

    async def start_execution(
        self,
        run_id: str,
        *,
        schedule_id: str | None,
        occurrence_ms: int | None,
        flow_version: int,
        input: object,
        started_at_ms: int,
    ) -> StartOutcome:
        validate_start_args(run_id, schedule_id, occurrence_ms, flow_version, started_at_ms)
        input_json = encode_json(input)
        existing = self._executions.get(run_id)
        high_water_ms = None if schedule_id is None else self._high_water_ms.get(schedule_id)
        decision = decide_start(existing is not None, schedule_id, occurrence_ms, high_water_ms)
        if decision == START_REPLAY:
            return StartOutcome(existing.record(), True)
        if decision != START_CREATE:
            return RETIRED_OUTCOME
        row = _Execution(run_id, schedule_id, occurrence_ms, flow_version, input_json, started_at_ms)
        self._executions[run_id] = row
        if schedule_id is not None:
            self._high_water_ms[schedule_id] = occurrence_ms
            live = self._live.get(schedule_id)
            if live is None:
                live = self._live[schedule_id] = {}
            live[run_id] = row
        return StartOutcome(row.record(), False)

    async def append_step(self, run_id: str, seq: int, step_id: str, kind: str, output: object) -> StepRecord:
        validate_append_args(run_id, seq, step_id, kind)
        output_json = encode_json(output)
        self._append(run_id, seq, ((step_id, kind, output_json),))
        return StepRecord(run_id, seq, step_id, kind, decode_json(output_json))

    async def append_steps(
        self, run_id: str, first_seq: int, steps: tuple[tuple[str, str, object], ...]
    ) -> tuple[StepRecord, ...]:
        require_str("run_id", run_id)
        require_int("first_seq", first_seq)
        encoded = encode_steps(steps)
        self._append(run_id, first_seq, encoded)
        return tuple(
            StepRecord(run_id, seq, step_id, kind, decode_json(output_json))
            for seq, (step_id, kind, output_json) in enumerate(encoded, first_seq)
        )

    def _append(self, run_id: str, first_seq: int, encoded: tuple[tuple[str, str, str], ...]) -> None:
        row = self._executions.get(run_id)
        if row is None:
            check_append(run_id, None, 0, first_seq)
        steps = row.steps
        check_append(run_id, row.status, len(steps), first_seq)
        steps.extend(encoded)
        self._step_count += len(encoded)

    async def park_execution(self, run_id: str) -> ExecutionRecord:
        require_str("run_id", run_id)
        row = self._executions.get(run_id)
        if decide_park(run_id, None if row is None else row.status):
            row.status = PARKED
        return row.record()

    async def finish_execution(
        self,
        run_id: str,
        *,
        status: str,
        output: object,
        finished_at_ms: int,
        steps: tuple[tuple[str, str, object], ...] = (),
        first_seq: int | None = None,
    ) -> ExecutionRecord:
        validate_finish_args(run_id, status, finished_at_ms)
        output_json = encode_json(output)
        encoded = encode_steps(steps)
        validate_first_seq(first_seq, encoded)
        row = self._executions.get(run_id)
        if row is None:
            decide_finish(run_id, None, NULL_JSON, status, output_json)
        if decide_finish(
            run_id, row.status, row.output_json, status, output_json,
            len(row.steps), first_seq if encoded else 1, len(encoded),
        ):
            if encoded:
                row.steps.extend(encoded)
                self._step_count += len(encoded)
            row.status = status
            row.output_json = output_json
            row.finished_at_ms = finished_at_ms
            if row.schedule_id is not None:
                live = self._live[row.schedule_id]
                del live[run_id]
                if not live:
                    # Bound the index by live schedules, not schedules ever seen.
                    del self._live[row.schedule_id]
            heapq.heappush(self._finished_heap, (finished_at_ms, run_id))
        return row.record()

    async def purge_finished(self, finished_before_ms: int) -> int:
        require_int("finished_before_ms", finished_before_ms)
        heap = self._finished_heap
        executions = self._executions
        purged = 0
        while heap and heap[0][0] < finished_before_ms:
            _, run_id = heapq.heappop(heap)
            row = executions.pop(run_id)
            assert row.status in TERMINAL_STATUSES, (run_id, row.status)
            self._step_count -= len(row.steps)
            purged += 1
        return purged

    # --- reads --------------------------------------------------------------

    async def load_execution(self, run_id: str) -> ExecutionRecord | None:
        require_str("run_id", run_id)
        row = self._executions.get(run_id)
        return None if row is None else row.record()

    async def load_steps(self, run_id: str) -> tuple[StepRecord, ...]:
        require_str("run_id", run_id)
        row = self._executions.get(run_id)
        if row is None:
            return ()
        return tuple(
            StepRecord(run_id, index, step_id, kind, decode_json(output_json))
            for index, (step_id, kind, output_json) in enumerate(row.steps, 1)
        )

    async def live_executions(self, schedule_id: str) -> tuple[ExecutionRecord, ...]:
        require_str("schedule_id", schedule_id)
        live = self._live.get(schedule_id)
        if not live:
            return ()
        rows = live.values()
        if len(live) > 1:
            rows = sorted(rows, key=_live_order)
        return tuple(row.record() for row in rows)

    async def schedule_high_water_ms(self, schedule_id: str) -> int | None:
        require_str("schedule_id", schedule_id)
        return self._high_water_ms.get(schedule_id)

    def counts(self) -> dict[str, int]:
        return {"executions": len(self._executions), "steps": self._step_count}


def _live_order(row: _Execution) -> tuple[int, str]:
    # Same order as SQLite's ORDER BY occurrence_ms, run_id (BINARY collation
    # compares UTF-8 bytes, which orders like Python's code-point comparison).
    return (row.occurrence_ms, row.run_id)
