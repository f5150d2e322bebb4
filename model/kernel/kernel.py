"""A minimal durable-execution kernel: step logs, at-least-once effects, replay.

An execution (one bounded run) has an append-only step log in an
``ExecutionStore``. ``ctx.execute(step_id, effect)`` runs an effect and
appends ``STEP_COMPLETED`` with its output; when the run is resumed after a
crash the kernel folds the recorded outputs instead of calling the effect
again, so a recorded step never re-runs and replay never touches a store.

The gap between "effect done" and "STEP_COMPLETED appended" is where K9
at-least-once lives: after a crash there, an *idempotent* effect simply
re-runs; a *non-idempotent* one had an intent (``STEP_STARTED``) recorded
before it ran, so recovery sees an intent without a completion and parks the
run at ``EFFECT_INDOUBT`` for an operator rather than guess.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

import attrs

from model.failpoints import KERNEL_EFFECT_DONE_BEFORE_RECORD, NO_FAILPOINTS, Failpoints
from model.kernel.records import (
    COMPLETED,
    EFFECT_INDOUBT,
    EVENT_EMITTED,
    FAILED,
    STEP_COMPLETED,
    STEP_STARTED,
    ExecutionRecord,
    StepRecord,
)
from model.probe import NULL_PROBE, Probe
from model.runtime import Runtime

Flow = Callable[["ExecutionContext", Any], Awaitable[Any]]
EffectFn = Callable[[], Awaitable[Any]]

# Bound on steps per run: a sentinel wake is a handful of steps; a run that
# grows past this is a runaway loop, not a workload (ADR 0051 D1 bounded runs).
STEPS_PER_RUN_MAX = 10_000


class EffectInDoubt(Exception):
    """A non-idempotent effect may or may not have happened; the run is parked."""

    name = "EffectInDoubt"

    def __init__(self, run_id: str, step_id: str) -> None:
        super().__init__(f"{run_id}: effect {step_id!r} in doubt (intent recorded, no completion); run parked")
        self.run_id = run_id
        self.step_id = step_id


class ReplayDivergence(Exception):
    """The flow asked for a different step than the log recorded at that position."""

    name = "ReplayDivergence"

    def __init__(self, run_id: str, seq: int, recorded: str, requested: str) -> None:
        super().__init__(f"{run_id}: step {seq} recorded {recorded!r} but flow requested {requested!r}")
        self.run_id = run_id
        self.seq = seq
        self.recorded = recorded
        self.requested = requested


class ReplayIncomplete(Exception):
    """Pure replay reached a step the log does not have."""

    name = "ReplayIncomplete"

    def __init__(self, run_id: str, step_id: str) -> None:
        super().__init__(f"{run_id}: replay needs unrecorded step {step_id!r}")
        self.run_id = run_id
        self.step_id = step_id


@attrs.frozen
class RunOutcome:
    run_id: str
    status: str
    output: Any
    steps_replayed: int
    steps_executed: int


def error_output(error: BaseException) -> dict[str, str]:
    """The settled shape of a failure: exactly ``{errorTag, message}``."""
    tag = getattr(type(error), "name", None) or type(error).__name__
    return {"errorTag": str(tag), "message": str(error)}


class ExecutionContext:
    """What a flow sees: ``execute`` for effects, ``emit`` for app events."""

    __slots__ = ("run_id", "record", "_kernel", "_log", "_cursor", "_replay_only", "replayed", "executed")

    def __init__(self, kernel: "Kernel | None", record: ExecutionRecord,
                 log: tuple[StepRecord, ...], *, replay_only: bool) -> None:
        self.run_id = record.run_id
        self.record = record
        self._kernel = kernel
        self._log = log
        self._cursor = 0  # index into _log of the next recorded step to fold
        self._replay_only = replay_only
        self.replayed = 0
        self.executed = 0

    @property
    def replaying(self) -> bool:
        return self._cursor < len(self._log)

    def _next_seq(self) -> int:
        return self._cursor + 1

    async def execute(self, step_id: str, effect: EffectFn, *, idempotent: bool = True) -> Any:
        log = self._log
        if self._cursor < len(log):
            step = log[self._cursor]
            if step.step_id != step_id:
                raise ReplayDivergence(self.run_id, step.seq, step.step_id, step_id)
            if step.kind == STEP_COMPLETED:
                self._cursor += 1
                self.replayed += 1
                return step.output
            if step.kind in (STEP_STARTED, EFFECT_INDOUBT):
                nxt = log[self._cursor + 1] if self._cursor + 1 < len(log) else None
                if nxt is not None and nxt.step_id == step_id and nxt.kind == STEP_COMPLETED:
                    self._cursor += 2
                    self.replayed += 1
                    return nxt.output
                if self._replay_only:
                    raise EffectInDoubt(self.run_id, step_id)
                kernel = self._kernel
                assert kernel is not None
                if step.kind == STEP_STARTED:
                    await kernel.store.append_step(self.run_id, step.seq + 1, step_id, EFFECT_INDOUBT, None)
                await kernel.store.park_execution(self.run_id)
                kernel.probe.emit("kernel.indoubt", run=self.run_id, step=step_id)
                raise EffectInDoubt(self.run_id, step_id)
            raise ReplayDivergence(self.run_id, step.seq, f"{step.kind}:{step.step_id}", step_id)
        if self._replay_only:
            raise ReplayIncomplete(self.run_id, step_id)
        kernel = self._kernel
        assert kernel is not None
        seq = len(log) + 1
        assert seq <= STEPS_PER_RUN_MAX, f"{self.run_id}: more than {STEPS_PER_RUN_MAX} steps"
        if not idempotent:
            intent = await kernel.store.append_step(self.run_id, seq, step_id, STEP_STARTED, None)
            log = self._log = log + (intent,)
            seq += 1
        output = await effect()
        kernel.failpoints.hit(KERNEL_EFFECT_DONE_BEFORE_RECORD)
        record = await kernel.store.append_step(self.run_id, seq, step_id, STEP_COMPLETED, output)
        self._log = log + (record,)
        self._cursor = len(self._log)
        self.executed += 1
        return record.output

    async def emit(self, event_type: str, payload: Any) -> None:
        """An application event (e.g. a finding), recorded in the run's log."""

        async def record_event() -> Any:
            return {"type": event_type, "payload": payload}

        await self.execute(f"emit:{event_type}", record_event)


class Kernel:
    """Runs and resumes executions against one node's ports."""

    def __init__(self, runtime: Runtime, store: Any, *, probe: Probe = NULL_PROBE,
                 failpoints: Failpoints = NO_FAILPOINTS) -> None:
        self.runtime = runtime
        self.store = store
        self.probe = probe
        self.failpoints = failpoints

    async def run(self, record: ExecutionRecord, flow: Flow, *, fresh: bool = False) -> RunOutcome:
        """Run (or resume) ``record`` to a terminal state. Returns its outcome.

        ``fresh``: the caller just created the execution, so its log is known
        to be empty and need not be read back.
        """
        log: tuple[StepRecord, ...] = () if fresh else await self.store.load_steps(record.run_id)
        ctx = ExecutionContext(self, record, log, replay_only=False)
        try:
            output = await flow(ctx, record.input)
        except EffectInDoubt:
            return RunOutcome(record.run_id, "parked", None, ctx.replayed, ctx.executed)
        except ReplayDivergence:
            raise
        except Exception as error:  # a flow's typed failure settles the run as failed
            final = await self.store.finish_execution(
                record.run_id, status=FAILED, output=error_output(error), finished_at_ms=self.runtime.now_ms())
            return RunOutcome(record.run_id, final.status, final.output, ctx.replayed, ctx.executed)
        final = await self.store.finish_execution(
            record.run_id, status=COMPLETED, output=output, finished_at_ms=self.runtime.now_ms())
        return RunOutcome(record.run_id, final.status, final.output, ctx.replayed, ctx.executed)


async def replay(record: ExecutionRecord, log: tuple[StepRecord, ...], flow: Flow) -> Any:
    """Fold a run's recorded steps through ``flow`` with no store at all.

    Replay has no kernel, hence no store: an effect that was recorded returns
    its recorded output, anything else is ``ReplayIncomplete``. Returns the
    flow's output (or raises the flow's error, as the original run did).
    """
    ctx = ExecutionContext(None, record, log, replay_only=True)
    return await flow(ctx, record.input)


def is_app_event(step: StepRecord) -> bool:
    return step.kind == EVENT_EMITTED or step.step_id.startswith("emit:")
