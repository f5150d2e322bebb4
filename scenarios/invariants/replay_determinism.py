"""``replay-determinism``: refolding a settled run's log reproduces its outcome.

The oracle rebuilds each run's step log from the log's own commits
(``log.append`` events: the run's input record, its step records and its
settlement record — not from the model's memory), and when the settlement
record lands it replays the flow over that log with no kernel at all,
through state handles bound to a store that counts every call. A run that
was migrated on resume is folded through the same registered
transforms, on the flow of its effective version. It must:

- finish without suspending (replay never sleeps or waits on I/O),
- touch no store (the counter stays put) — replay folds recorded values,
- return the settled output (completed runs), or stop exactly at the end of
  the log or with the same error tag (failed runs).
Memory: the logs of live runs only. The audit replays every run the stores
still retain, reading its log and outcome from the stores themselves.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from faults.events import LogAppend
from model.canonical import json_equal
from model.kernel.kernel import EffectInDoubt, ExecutionContext, ReplayIncomplete, effective_version, error_output
from model.kernel.records import EFFECT_INDOUBT, EXECUTION_MIGRATED, STEP_STARTED, ExecutionRecord, StepRecord
from model.ledger.records import settlement_of
from sim.invariants import Checker

INPUT_FAMILY = "input"
from model.runs import STEP_FAMILY  # noqa: E402

if TYPE_CHECKING:
    from scenarios.system import AuditView
SETTLED_FAMILY = "submission-settled"


class ReplayDeterminism(Checker):
    name = "replay-determinism"
    kinds = (LogAppend.kind,)

    def __init__(self, replay_flow_for: Callable[[ExecutionRecord, int], Any],
                 replay_store_calls: Callable[[], int], *,
                 transforms_for: Callable[[str], Any] = lambda schedule_id: {}) -> None:
        super().__init__()
        self._flow_for = replay_flow_for
        self._store_calls = replay_store_calls
        self._transforms_for = transforms_for
        self._runs: dict[str, tuple[ExecutionRecord, list[StepRecord]]] = {}
        self.replays = 0
        self.migrated_runs = 0

    def metrics(self) -> dict:
        return {"replays_verified": self.replays}

    def on_event(self, event: tuple) -> None:
        fields = event.fields
        if LogAppend.error in fields or fields.get(LogAppend.replayed):
            return
        run_id = fields[LogAppend.conversation]
        for envelope in fields[LogAppend.envelopes]:
            family = envelope["family"]
            payload = envelope["payload"]
            if family == INPUT_FAMILY:
                run_input = payload["input"]
                if type(run_input) is not dict or "flowVersion" not in run_input:
                    continue  # not a schedule run
                self._runs[run_id] = (ExecutionRecord(
                    run_id=run_id, schedule_id=run_input["scheduleId"], occurrence_ms=run_input["occurrenceMs"],
                    flow_version=run_input["flowVersion"], input=run_input["input"], status="running",
                    started_at_ms=envelope["createdAt"], finished_at_ms=None, output=None), [])
            elif family == STEP_FAMILY:
                run = self._runs.get(run_id)
                if run is None:
                    continue
                log = run[1]
                if payload["seq"] != len(log) + 1:
                    self.fail(f"{run_id}: the log accepted step {payload['seq']} after {len(log)} steps", (run_id,))
                    self._runs.pop(run_id)
                    continue
                log.append(StepRecord(run_id, payload["seq"], payload["stepId"], payload["kind"], payload["output"]))
            elif family == SETTLED_FAMILY:
                run = self._runs.pop(run_id, None)
                if run is not None:
                    record = settlement_of({"payload": payload})
                    status = "completed" if record["outcome"] == "completed" else "failed"
                    output = record.get("result") if status == "completed" else record.get("diagnostic")
                    self._check(run[0], tuple(run[1]), status, output)

    def audit(self, view: AuditView) -> None:
        """Replay the runs the stores still hold, from the stores' own logs."""
        for record, log in view.retained_runs():
            if record.status in ("completed", "failed"):
                self._check(record, log, record.status, record.output)

    def _check(self, record: ExecutionRecord, log: tuple[StepRecord, ...], status: str, output: Any) -> None:
        self.checks += 1
        self.replays += 1
        run_id = record.run_id
        calls_before = self._store_calls()
        migrated = any(step.kind == EXECUTION_MIGRATED for step in log)
        if migrated:
            self.migrated_runs += 1
        try:
            ctx = ExecutionContext(None, record, log, replay_only=True,
                                   transforms=self._transforms_for(record.schedule_id) if migrated else None)
        except Exception as error:  # a marker without a registered transform, or a broken chain
            self.fail(f"{run_id}: its migrated log cannot be folded: {type(error).__name__}: {error}", (run_id,))
            return
        coro = self._flow_for(record, effective_version(record, log))(ctx, record.input)
        outcome: tuple[str, Any]
        try:
            coro.send(None)
        except StopIteration as stop:
            outcome = ("completed", stop.value)
        except ReplayIncomplete as incomplete:
            outcome = ("incomplete", incomplete.step_id)
        except EffectInDoubt as doubt:
            # The log ends on an unresolved intent (a crash between a
            # non-idempotent effect and its record; perhaps its in-doubt
            # marker, migration markers after it): the flow's history stops
            # there. Only at the log's end: a step folded past it would mean
            # the run went on without the effect's outcome.
            at_end = all(step.kind in (STEP_STARTED, EFFECT_INDOUBT, EXECUTION_MIGRATED) and
                         (step.step_id == doubt.step_id or step.kind == EXECUTION_MIGRATED)
                         for step in ctx.unfolded)
            outcome = ("in-doubt-at-end" if at_end else "in-doubt-mid-log", doubt.step_id)
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
        elif outcome[0] == "in-doubt-mid-log":
            self.fail(f"{run_id}: effect {outcome[1]!r} is in doubt in its log, yet steps were recorded after it",
                      (run_id,))
        elif outcome[0] == "failed" and outcome[1].get("errorTag") != (output or {}).get("errorTag"):
            self.fail(f"{run_id}: replay failed with {outcome[1]!r}, run with {output!r}", (run_id,))
