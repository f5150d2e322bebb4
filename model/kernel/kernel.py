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
    ExecutionStoreError,
    StepRecord,
)
from model.kernel.store import decode_json, encode_json
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
    tag = getattr(type(error), "name", None)
    if not isinstance(tag, str) or not tag:
        # Built-ins such as AttributeError have a ``name`` *descriptor*.
        tag = type(error).__name__
    return {"errorTag": tag, "message": str(error)}


class ExecutionContext:
    """What a flow sees: ``execute`` for effects, ``emit`` for app events."""

    __slots__ = ("run_id", "record", "_kernel", "_log", "_cursor", "_replay_only", "_pending",
                 "replayed", "executed")

    def __init__(self, kernel: "Kernel | None", record: ExecutionRecord,
                 log: tuple[StepRecord, ...], *, replay_only: bool) -> None:
        self.run_id = record.run_id
        self.record = record
        self._kernel = kernel
        self._log = log
        self._cursor = 0  # index into _log of the next recorded step to fold
        self._replay_only = replay_only
        self._pending: list[tuple[str, str, Any]] = []  # (step_id, kind, output) not yet durable
        self.replayed = 0
        self.executed = 0

    @property
    def replaying(self) -> bool:
        return self._cursor < len(self._log)

    async def execute(self, step_id: str, effect: EffectFn, *, idempotent: bool = True,
                      writes: bool = True) -> Any:
        """Run ``effect`` at least once and record its output; fold it on replay.

        ``idempotent``: safe to re-run after a crash (K9). If False, an intent
        is recorded first, so a crash between effect and record parks the run
        at ``EFFECT_INDOUBT`` instead of running it twice.

        ``writes``: the effect changes the world (default). Records of earlier
        steps are made durable *before* such an effect runs — otherwise a
        re-run after a crash could re-read state the write already changed.
        Read-only effects (``writes=False``) skip that flush, so their records
        ride along with the next flush: group commit of step records. The
        record of an idempotent effect may itself wait for the next flush (at
        worst it re-runs after a crash, which K9 allows); a non-idempotent
        effect's completion is flushed at once.
        """
        log = self._log
        if self._cursor < len(log):
            return await self._fold(step_id)
        if self._replay_only:
            raise ReplayIncomplete(self.run_id, step_id)
        kernel = self._kernel
        assert kernel is not None
        pending = self._pending
        seq = len(log) + len(pending) + 1
        assert seq <= STEPS_PER_RUN_MAX, f"{self.run_id}: more than {STEPS_PER_RUN_MAX} steps"
        if not idempotent:
            pending.append((step_id, STEP_STARTED, None))
            await self.flush()
        elif writes and pending:
            await self.flush()
        output = await effect()
        kernel.failpoints.hit(KERNEL_EFFECT_DONE_BEFORE_RECORD)
        # The flow gets what replay will get (the JSON value, e.g. a list for
        # a tuple), as its own copy: mutating it cannot rewrite the pending
        # record. A non-JSON output fails here, loudly.
        text = encode_json(output)
        self._pending.append((step_id, STEP_COMPLETED, decode_json(text)))
        if not idempotent:
            await self.flush()
        self.executed += 1
        return decode_json(text)

    async def _fold(self, step_id: str) -> Any:
        log = self._log
        step = log[self._cursor]
        if step.step_id != step_id:
            raise ReplayDivergence(self.run_id, step.seq, step.step_id, step_id)
        if step.kind == STEP_COMPLETED:
            self._cursor += 1
            self.replayed += 1
            return step.output
        if step.kind == STEP_STARTED:
            # An intent: look past it (and past an EFFECT_INDOUBT marker an
            # earlier recovery left) for a completion recorded by the effect
            # itself or by an operator resolving the doubt.
            index = self._cursor + 1
            marked = index < len(log) and log[index].step_id == step_id and log[index].kind == EFFECT_INDOUBT
            if marked:
                index += 1
            if index < len(log) and log[index].step_id == step_id and log[index].kind == STEP_COMPLETED:
                self._cursor = index + 1
                self.replayed += 1
                return log[index].output
            if self._replay_only:
                raise EffectInDoubt(self.run_id, step_id)
            kernel = self._kernel
            assert kernel is not None
            if not marked:
                await kernel.store.append_step(self.run_id, step.seq + 1, step_id, EFFECT_INDOUBT, None)
            await kernel.store.park_execution(self.run_id)
            kernel.probe.emit("kernel.indoubt", run=self.run_id, step=step_id)
            raise EffectInDoubt(self.run_id, step_id)
        raise ReplayDivergence(self.run_id, step.seq, f"{step.kind}:{step.step_id}", step_id)

    @property
    def pending_steps(self) -> tuple[tuple[str, str, Any], ...]:
        return tuple(self._pending)

    @property
    def next_durable_seq(self) -> int:
        return len(self._log) + 1

    async def flush(self) -> None:
        """Make every pending step record durable, in one store call."""
        if not self._pending:
            return
        kernel = self._kernel
        assert kernel is not None
        records = await kernel.store.append_steps(self.run_id, len(self._log) + 1, tuple(self._pending))
        self._pending.clear()
        self._log = self._log + tuple(records)
        self._cursor = len(self._log)

    async def emit(self, event_type: str, payload: Any) -> None:
        """An application event (e.g. a finding), recorded in the run's log."""

        async def record_event() -> Any:
            return {"type": event_type, "payload": payload}

        await self.execute(f"emit:{event_type}", record_event, writes=False)


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
        except (ReplayDivergence, ExecutionStoreError):
            # Not the flow's failure: the kernel's own store refused a rule.
            # Settling the run would hide that; the worker task fails loudly.
            raise
        except Exception as error:  # a flow's typed failure settles the run as failed
            return await self._finish(ctx, FAILED, error_output(error))
        return await self._finish(ctx, COMPLETED, output)

    async def _finish(self, ctx: ExecutionContext, status: str, output: Any) -> RunOutcome:
        # The last pending step records and the terminal status commit together.
        final = await self.store.finish_execution(
            ctx.run_id, status=status, output=output, finished_at_ms=self.runtime.now_ms(),
            steps=ctx.pending_steps, first_seq=ctx.next_durable_seq)
        return RunOutcome(ctx.run_id, final.status, final.output, ctx.replayed, ctx.executed)


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
