"""``replay-determinism``: refolding a settled run's log reproduces its outcome.

The oracle rebuilds each run's step log from the execution store's commits
(``kernel.append_step`` events — not from the model's memory), and when the
run settles it replays the flow over that log with no kernel at all, through
state handles bound to a store that counts every call. It must:

- finish without suspending (replay never sleeps or waits on I/O),
- touch no store (the counter stays put) — replay folds recorded values,
- return the settled output (completed runs), or stop exactly at the end of
  the log or with the same error tag (failed runs).
Memory: the logs of live runs only. The audit replays every run the store
still retains, reading its log and outcome from the store itself.
"""
from __future__ import annotations

from typing import Any, Callable

from model.canonical import json_equal
from model.kernel.kernel import ExecutionContext, ReplayIncomplete, error_output
from model.kernel.records import ExecutionRecord, StepRecord
from sim.invariants import Checker


class ReplayDeterminism(Checker):
    name = "replay-determinism"
    kinds = ("kernel.start_execution", "kernel.append_step", "kernel.append_steps", "kernel.finish_execution")

    def __init__(self, replay_flow_for: Callable[[ExecutionRecord], Any], replay_store_calls: Callable[[], int]) -> None:
        super().__init__()
        self._flow_for = replay_flow_for
        self._store_calls = replay_store_calls
        self._runs: dict[str, tuple[ExecutionRecord, list[StepRecord]]] = {}
        self.replays = 0

    def on_event(self, event: tuple) -> None:
        kind = event[3]
        fields = event[4]
        if "error" in fields:
            return
        run_id = fields["run"]
        if kind == "kernel.start_execution":
            if fields.get("created"):
                record = ExecutionRecord(run_id=run_id, schedule_id=fields["schedule"],
                                         occurrence_ms=fields["occurrence_ms"], flow_version=fields["flow_version"],
                                         input=fields.get("input"), status="running", started_at_ms=event[1],
                                         finished_at_ms=None, output=None)
                self._runs[run_id] = (record, [])
        elif kind == "kernel.append_step":
            run = self._runs.get(run_id)
            if run is not None:
                run[1].append(StepRecord(run_id, fields["seq"], fields["step"], fields["step_kind"], fields["output"]))
        elif kind == "kernel.append_steps":
            self._append_batch(run_id, fields["first_seq"], fields["steps"])
        elif "final_status" in fields:
            run = self._runs.pop(run_id, None)
            if run is not None:
                log = run[1]
                if fields["steps"] and len(log) == fields["first_seq"] - 1:
                    log.extend(StepRecord(run_id, fields["first_seq"] + i, step_id, step_kind, output)
                               for i, (step_id, step_kind, output) in enumerate(fields["steps"]))
                self._check(run[0], tuple(log), fields["final_status"], fields["output"])

    def _append_batch(self, run_id: str, first_seq: int, steps: tuple) -> None:
        run = self._runs.get(run_id)
        if run is None:
            return
        log = run[1]
        if len(log) != first_seq - 1:
            self.fail(f"{run_id}: the store accepted steps at seq {first_seq} after {len(log)} steps", (run_id,))
            return
        log.extend(StepRecord(run_id, first_seq + i, step_id, step_kind, output)
                   for i, (step_id, step_kind, output) in enumerate(steps))

    def audit(self, world: Any) -> None:
        """Replay the runs the store still holds, from the store's own logs."""
        for record, log in world.retained_runs():
            if record.status in ("completed", "failed"):
                self._check(record, log, record.status, record.output)

    def _check(self, record: ExecutionRecord, log: tuple[StepRecord, ...], status: str, output: Any) -> None:
        self.checks += 1
        self.replays += 1
        run_id = record.run_id
        calls_before = self._store_calls()
        ctx = ExecutionContext(None, record, log, replay_only=True)
        coro = self._flow_for(record)(ctx, record.input)
        outcome: tuple[str, Any]
        try:
            coro.send(None)
        except StopIteration as stop:
            outcome = ("completed", stop.value)
        except ReplayIncomplete as incomplete:
            outcome = ("incomplete", incomplete.step_id)
        except Exception as error:  # the flow's own failure, replayed
            outcome = ("failed", error_output(error))
        else:
            coro.close()
            self.fail(f"{run_id}: replay suspended (awaited the runtime or a store)", (run_id,))
            return
        calls = self._store_calls() - calls_before
        if calls:
            self.fail(f"{run_id}: replay made {calls} store call(s); it must fold recorded values only", (run_id,))
            return
        if status == "completed":
            if outcome[0] != "completed" or not json_equal(outcome[1], output):
                self.fail(f"{run_id}: replay gave {outcome!r}, the run settled with {output!r}", (run_id,))
        elif outcome[0] == "completed":
            self.fail(f"{run_id}: run failed ({output!r}) but its replay completed", (run_id,))
        elif outcome[0] == "incomplete" and ctx.replaying:
            self.fail(f"{run_id}: replay stopped before the end of the log", (run_id,))
        elif outcome[0] == "failed" and outcome[1].get("errorTag") != (output or {}).get("errorTag"):
            self.fail(f"{run_id}: replay failed with {outcome[1]!r}, run with {output!r}", (run_id,))
