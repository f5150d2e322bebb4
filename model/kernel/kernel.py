"""A minimal durable-execution kernel: step logs, at-least-once effects, replay.

An execution (one bounded run) has an append-only step log in an
``ExecutionStore``. ``ctx.execute(step_id, effect)`` runs an effect and
appends ``STEP_COMPLETED`` with its output; when the run is resumed after a
crash the kernel folds the recorded outputs instead of calling the effect
again, so a recorded step never re-runs and replay never touches a store.

Three opt-in seams; with none of them passed the kernel makes
exactly the same store calls and probe events as without them:

- ``middleware`` (used by the claim-check): each effect's
  output passes through ``on_output`` of every middleware, in order, before it
  is recorded. What the last one returns is the recorded value. Replay only
  folds records, so middleware never runs there.
- ``transforms``: a run started on flow version A and resumed on
  version B continues only through a registered ``(A, B)`` transform. The
  kernel records an ``EXECUTION_MIGRATED`` marker durably, then folds: every
  ``STEP_COMPLETED`` output recorded before a marker passes through that
  marker's transform (and every later one's, in chain order); the markers
  themselves are skipped. No transform: ``MigrationMissing``, nothing written.
- ``input_schemas`` (D7): a run whose step log is empty when ``run`` is called
  has its input validated against the validator of the version it will run
  on; a rejected input fails the run (``InputValidationError``) without
  calling the flow.

The gap between "effect done" and "STEP_COMPLETED appended" is where K9
at-least-once lives: after a crash there, an *idempotent* effect simply
re-runs; a *non-idempotent* one had an intent (``STEP_STARTED``) recorded
before it ran, so recovery sees an intent without a completion and parks the
run at ``EFFECT_INDOUBT`` for an operator rather than guess.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Awaitable, Callable, Mapping, Protocol

import attrs

from model.failpoints import KERNEL_EFFECT_DONE_BEFORE_RECORD, NO_FAILPOINTS, Failpoints
from model.kernel.records import (
    COMPLETED,
    EFFECT_INDOUBT,
    EVENT_EMITTED,
    EXECUTION_MIGRATED,
    FAILED,
    STEP_COMPLETED,
    STEP_STARTED,
    ExecutionRecord,
    ExecutionStoreError,
    StepRecord,
)
from model.kernel.store import decode_json, encode_json
from model.probe import NULL_PROBE, Probe
from model.retry import is_retryable
from model.runtime import Runtime

Flow = Callable[["ExecutionContext", Any], Awaitable[Any]]
EffectFn = Callable[[], Awaitable[Any]]
# A flow-version migration: ``(step_id, recorded output) -> output under the new version``. Must
# be pure and deterministic (it runs on every fold, replay included) and
# return a JSON value.
StateTransform = Callable[[str, Any], Any]
# D7: ``input -> None`` (accepted) or a one-line reason (rejected). Pure.
InputValidator = Callable[[Any], "str | None"]

# RunOutcome.status of ``Kernel.start`` for a retired run id (its occurrence
# is at or below the schedule's high-water mark and the run is gone).
RETIRED = "retired"

_NO_TRANSFORMS: Mapping[tuple[int, int], StateTransform] = MappingProxyType({})


class EffectMiddleware(Protocol):
    """The effect middleware seam: sees (and may replace) every effect output before it is recorded."""

    async def on_output(self, tool: str | None, step_id: str, output: Any) -> Any: ...

# Bound on steps per run: a sentinel wake is a handful of steps; a run that
# grows past this is a runaway loop, not a workload (bounded runs).
STEPS_PER_RUN_MAX = 10_000


class EffectInDoubt(Exception):
    """A non-idempotent effect may or may not have happened; the run is parked."""

    name = "EffectInDoubt"

    def __init__(self, run_id: str, step_id: str) -> None:
        super().__init__(f"{run_id}: effect {step_id!r} in doubt (intent recorded, no completion); run parked")
        self.run_id = run_id
        self.step_id = step_id

    def __reduce__(self):  # picklable across worker processes, as the stores' errors are
        return (type(self), (self.run_id, self.step_id))


class ReplayDivergence(Exception):
    """The flow asked for a different step than the log recorded at that position."""

    name = "ReplayDivergence"

    def __init__(self, run_id: str, seq: int, recorded: str, requested: str) -> None:
        super().__init__(f"{run_id}: step {seq} recorded {recorded!r} but flow requested {requested!r}")
        self.run_id = run_id
        self.seq = seq
        self.recorded = recorded
        self.requested = requested

    def __reduce__(self):  # picklable across worker processes, as the stores' errors are
        return (type(self), (self.run_id, self.seq, self.recorded, self.requested))


class ReplayIncomplete(Exception):
    """Pure replay reached a step the log does not have."""

    name = "ReplayIncomplete"

    def __init__(self, run_id: str, step_id: str) -> None:
        super().__init__(f"{run_id}: replay needs unrecorded step {step_id!r}")
        self.run_id = run_id
        self.step_id = step_id

    def __reduce__(self):  # picklable across worker processes, as the stores' errors are
        return (type(self), (self.run_id, self.step_id))


class MigrationMissing(Exception):
    """A run on flow version ``from_version`` was asked to continue on
    ``to_version`` and no state transform is registered for that pair.

    Raised before anything is written: the execution stays live and unchanged
    (never silent coercion; the caller decides).
    """

    name = "MigrationMissing"

    def __init__(self, run_id: str, from_version: int, to_version: int) -> None:
        super().__init__(
            f"{run_id}: no state transform registered from flow version {from_version!r} "
            f"to {to_version!r}; the execution cannot continue on {to_version!r}"
        )
        self.run_id = run_id
        self.from_version = from_version
        self.to_version = to_version

    def __reduce__(self):
        return (type(self), (self.run_id, self.from_version, self.to_version))


class InputValidationError(Exception):
    """D7: the run's input was rejected by its flow version's input schema."""

    name = "InputValidationError"

    def __init__(self, run_id: str, flow_version: int, reason: str) -> None:
        super().__init__(f"{run_id}: input rejected by the input schema of flow version {flow_version!r}: {reason}")
        self.run_id = run_id
        self.flow_version = flow_version
        self.reason = reason

    def __reduce__(self):
        return (type(self), (self.run_id, self.flow_version, self.reason))


def migration_step_id(from_version: int, to_version: int) -> str:
    return f"migrate:{from_version}->{to_version}"


def _marker_versions(run_id: str, step: StepRecord) -> tuple[int, int]:
    output = step.output
    if not isinstance(output, dict) or type(output.get("from")) is not int or type(output.get("to")) is not int:
        raise ValueError(f"{run_id}: corrupt {EXECUTION_MIGRATED} step {step.seq}: output {output!r:.80}")
    return output["from"], output["to"]


def effective_version(record: ExecutionRecord, log: tuple[StepRecord, ...]) -> int:
    """The flow version ``record`` runs on: the ``to`` of the last migration
    marker in ``log``, else the version it was started on."""
    for step in reversed(log):
        if step.kind == EXECUTION_MIGRATED:
            return _marker_versions(record.run_id, step)[1]
    return record.flow_version


def _json_copy(value: Any) -> Any:
    return decode_json(encode_json(value))


def _identity(step_id: str, output: Any) -> Any:
    return output


def _folds_anything(log: tuple[StepRecord, ...]) -> bool:
    return any(step.kind == STEP_COMPLETED for step in log)


def migrated_view(record: ExecutionRecord, log: tuple[StepRecord, ...],
                  transforms: Mapping[tuple[int, int], StateTransform]) -> tuple[StepRecord, ...]:
    """The steps a flow folds: ``log`` itself when it holds no migration
    marker; otherwise ``log`` without its markers, each ``STEP_COMPLETED``
    output recorded before a marker passed through the transforms of that
    marker and of every later one, in chain order.

    Raises ``MigrationMissing`` if a marker's transform is not in
    ``transforms``, ``ValueError`` for a marker chain that does not start at
    ``record.flow_version`` or does not connect.
    """
    for step in log:
        if step.kind == EXECUTION_MIGRATED:
            break
    else:
        return log
    run_id = record.run_id
    chain: list[StateTransform] = []
    version = record.flow_version
    folded = False  # a STEP_COMPLETED before this marker: something to transform
    for step in log:
        if step.kind == STEP_COMPLETED:
            folded = True
        elif step.kind == EXECUTION_MIGRATED:
            from_version, to_version = _marker_versions(run_id, step)
            if from_version != version:
                raise ValueError(f"{run_id}: migration step {step.seq} is from version {from_version!r}, "
                                 f"but the run was on version {version!r}")
            transform = transforms.get((from_version, to_version))
            if transform is None:
                if folded:
                    raise MigrationMissing(run_id, from_version, to_version)
                transform = _identity  # nothing recorded before it: nothing to transform
            chain.append(transform)
            version = to_version
    view: list[StepRecord] = []
    passed = 0  # markers seen so far: chain[passed:] applies to this step
    for step in log:
        if step.kind == EXECUTION_MIGRATED:
            passed += 1
            continue
        if step.kind == STEP_COMPLETED and passed < len(chain):
            output = step.output
            for transform in chain[passed:]:
                # Each transform gets its own JSON copy: it cannot rewrite the
                # caller's log, and first run and replay see the same values.
                output = transform(step.step_id, _json_copy(output))
            step = StepRecord(step.run_id, step.seq, step.step_id, step.kind, _json_copy(output))
        view.append(step)
    return tuple(view)


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

    __slots__ = ("run_id", "record", "_kernel", "_stored", "_log", "_cursor", "_replay_only", "_pending",
                 "replayed", "executed")

    def __init__(self, kernel: "Kernel | None", record: ExecutionRecord,
                 log: tuple[StepRecord, ...], *, replay_only: bool,
                 transforms: Mapping[tuple[int, int], StateTransform] | None = None) -> None:
        """``transforms``: for a log with migration markers (default: the
        kernel's, or none without a kernel). Raises ``MigrationMissing`` if
        the log needs one it does not have."""
        self.run_id = record.run_id
        self.record = record
        self._kernel = kernel
        self._stored = log  # the durable log, markers included: seqs count these
        # What the flow folds: ``log`` itself unless the run was migrated.
        for step in log:
            if step.kind == EXECUTION_MIGRATED:
                if transforms is None:
                    transforms = _NO_TRANSFORMS if kernel is None else kernel.transforms
                log = migrated_view(record, log, transforms)
                break
        self._log = log
        self._cursor = 0  # index into _log of the next recorded step to fold
        self._replay_only = replay_only
        self._pending: list[tuple[str, str, Any]] = []  # (step_id, kind, output) not yet durable
        self.replayed = 0
        self.executed = 0

    @property
    def replaying(self) -> bool:
        return self._cursor < len(self._log)

    @property
    def unfolded(self) -> tuple[StepRecord, ...]:
        """The recorded steps the flow has not folded yet (from the next one on)."""
        return tuple(self._log[self._cursor:])

    async def execute(self, step_id: str, effect: EffectFn, *, idempotent: bool = True,
                      writes: bool = True, tool: str | None = None) -> Any:
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

        ``tool``: the name the effect middleware sees (``None`` if not a tool
        call). The effect's output passes through every middleware, in order,
        before it is recorded; the flow gets what was recorded.
        """
        log = self._log
        if self._cursor < len(log):
            return await self._fold(step_id)
        if self._replay_only:
            raise ReplayIncomplete(self.run_id, step_id)
        kernel = self._kernel
        assert kernel is not None
        pending = self._pending
        seq = len(self._stored) + len(pending) + 1
        assert seq <= STEPS_PER_RUN_MAX, f"{self.run_id}: more than {STEPS_PER_RUN_MAX} steps"
        if not idempotent:
            pending.append((step_id, STEP_STARTED, None))
            await self.flush()
        elif writes and pending:
            await self.flush()
        output = await effect()
        for middleware in kernel.middleware:
            output = await middleware.on_output(tool, step_id, output)
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
                # Right after the intent; past any migration marker recorded
                # after it (a resume on a new version of a run left in doubt).
                seq = step.seq + 1
                stored = self._stored
                while seq <= len(stored) and stored[seq - 1].kind == EXECUTION_MIGRATED:
                    seq += 1
                await kernel.store.append_step(self.run_id, seq, step_id, EFFECT_INDOUBT, None)
            await kernel.store.park_execution(self.run_id)
            kernel.probe.emit("kernel.indoubt", run=self.run_id, step=step_id)
            raise EffectInDoubt(self.run_id, step_id)
        raise ReplayDivergence(self.run_id, step.seq, f"{step.kind}:{step.step_id}", step_id)

    @property
    def pending_steps(self) -> tuple[tuple[str, str, Any], ...]:
        return tuple(self._pending)

    @property
    def next_durable_seq(self) -> int:
        return len(self._stored) + 1

    async def flush(self) -> None:
        """Make every pending step record durable, in one store call."""
        if not self._pending:
            return
        kernel = self._kernel
        assert kernel is not None
        records = await kernel.store.append_steps(self.run_id, len(self._stored) + 1, tuple(self._pending))
        self._pending.clear()
        self._log = self._stored = self._stored + tuple(records)
        self._cursor = len(self._log)

    async def emit(self, event_type: str, payload: Any) -> None:
        """An application event (e.g. a finding), recorded in the run's log."""

        async def record_event() -> Any:
            return {"type": event_type, "payload": payload}

        await self.execute(f"emit:{event_type}", record_event, writes=False)


class Kernel:
    """Runs and resumes executions against one node's ports."""

    def __init__(self, runtime: Runtime, store: Any, *, probe: Probe = NULL_PROBE,
                 failpoints: Failpoints = NO_FAILPOINTS,
                 middleware: tuple[EffectMiddleware, ...] = (),
                 transforms: Mapping[tuple[int, int], StateTransform] = _NO_TRANSFORMS,
                 input_schemas: Mapping[int, InputValidator] | None = None) -> None:
        """``middleware``: effect middleware, applied in order.
        ``transforms``: flow-version state transforms keyed ``(from_version,
        to_version)``. ``input_schemas``: D7 input validators keyed by flow
        version; ``None`` (default) = no validation at all."""
        self.runtime = runtime
        self.store = store
        self.probe = probe
        self.failpoints = failpoints
        self.middleware = tuple(middleware)
        for layer in self.middleware:
            if not callable(getattr(layer, "on_output", None)):
                raise TypeError(f"middleware {layer!r:.80} has no on_output(tool, step_id, output)")
        self.transforms: Mapping[tuple[int, int], StateTransform] = MappingProxyType(dict(transforms))
        for key, transform in self.transforms.items():
            if (type(key) is not tuple or len(key) != 2 or type(key[0]) is not int or type(key[1]) is not int
                    or key[0] == key[1]):
                raise TypeError(f"transform key must be (from_version, to_version), two different ints; got {key!r}")
            if not callable(transform):
                raise TypeError(f"transform for {key!r} is not callable")
        self.input_schemas: Mapping[int, InputValidator] | None = None
        if input_schemas is not None:
            self.input_schemas = MappingProxyType(dict(input_schemas))
            for version, validator in self.input_schemas.items():
                if type(version) is not int:
                    raise TypeError(f"input schema key must be a flow version (int), got {version!r}")
                if not callable(validator):
                    raise TypeError(f"input schema for version {version!r} is not callable")

    async def start(self, run_id: str, *, flow: Flow, flow_version: int, input: Any,
                    schedule_id: str | None = None, occurrence_ms: int | None = None) -> RunOutcome:
        """Direct entry path: create the execution and run it.

        If the run id already exists (``start_execution`` replayed) nothing
        runs: the outcome is the existing record's status and output (a live
        one is ``running``/``parked`` with output None); a retired run id is
        status ``RETIRED``. Both with 0 steps replayed and executed.
        """
        started = await self.store.start_execution(
            run_id, schedule_id=schedule_id, occurrence_ms=occurrence_ms, flow_version=flow_version,
            input=input, started_at_ms=self.runtime.now_ms())
        if started.replayed:
            existing = started.record
            if existing is None:
                return RunOutcome(run_id, RETIRED, None, 0, 0)
            return RunOutcome(run_id, existing.status, existing.output, 0, 0)
        return await self.run(started.record, flow, fresh=True, flow_version=flow_version)

    async def run(self, record: ExecutionRecord, flow: Flow, *, fresh: bool = False,
                  flow_version: int | None = None) -> RunOutcome:
        """Run (or resume) ``record`` to a terminal state. Returns its outcome.

        ``fresh``: the caller just created the execution, so its log is known
        to be empty and need not be read back.

        ``flow_version``: the version ``flow`` is (None: the caller vouches it
        is the run's own). If it differs from the run's effective version and
        the run has recorded steps, the run is migrated: with a
        transform registered for (effective, flow_version) an
        ``EXECUTION_MIGRATED`` step is appended before the flow runs; without
        one, ``MigrationMissing`` and nothing is written. A run with no
        completed steps yet needs no transform: it is only marked, so its log
        says which version its steps are.

        With ``input_schemas`` wired, a run whose log is empty has its input
        validated first (D7); a rejection finishes it FAILED with
        ``InputValidationError`` and the flow is not called. (Validation is
        deterministic, so resuming a rejected run rejects it again: an
        idempotent finish.)
        """
        log: tuple[StepRecord, ...] = () if fresh else await self.store.load_steps(record.run_id)
        if flow_version is not None and (log or flow_version != record.flow_version):
            # A run with no steps yet is marked too (with nothing to transform):
            # otherwise its record would still name the old version while the
            # steps it records next are the new version's.
            log = await self._migrate(record, log, flow_version)
        if self.input_schemas is not None and all(step.kind == EXECUTION_MIGRATED for step in log):
            rejected = self._validate_input(record, record.flow_version if flow_version is None else flow_version)
            if rejected is not None:
                ctx = ExecutionContext(self, record, log, replay_only=False)
                self.probe.emit("kernel.input_rejected", run=record.run_id, version=rejected.flow_version,
                                reason=rejected.reason)
                return await self._finish(ctx, FAILED, error_output(rejected))
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
            if is_retryable(error):
                # A transient store error (busy writer, blip) is nobody's
                # verdict on the run: it stays live and is resumed later.
                raise

            return await self._finish(ctx, FAILED, error_output(error))
        return await self._finish(ctx, COMPLETED, output)

    async def _migrate(self, record: ExecutionRecord, log: tuple[StepRecord, ...],
                       flow_version: int) -> tuple[StepRecord, ...]:
        """``log`` with a migration marker to ``flow_version`` appended (durably)
        if the run is on another version; ``log`` itself if not."""
        current = effective_version(record, log)
        if flow_version == current:
            return log
        run_id = record.run_id
        if (current, flow_version) not in self.transforms and _folds_anything(log):
            raise MigrationMissing(run_id, current, flow_version)
        migrated_view(record, log, self.transforms)  # every earlier marker must fold too: check before writing
        marker = await self.store.append_step(
            run_id, len(log) + 1, migration_step_id(current, flow_version), EXECUTION_MIGRATED,
            {"from": current, "to": flow_version})
        self.probe.emit("kernel.migrated", run=run_id, from_version=current, to_version=flow_version)
        return log + (marker,)

    def _validate_input(self, record: ExecutionRecord, version: int) -> InputValidationError | None:
        validator = self.input_schemas.get(version)
        if validator is None:
            return None
        reason = validator(_json_copy(record.input))
        if reason is None:
            return None
        if type(reason) is not str:
            raise TypeError(f"input schema of version {version!r} returned {reason!r:.80}; expected None or a str")
        return InputValidationError(record.run_id, version, reason)

    async def _finish(self, ctx: ExecutionContext, status: str, output: Any) -> RunOutcome:
        # The last pending step records and the terminal status commit together.
        final = await self.store.finish_execution(
            ctx.run_id, status=status, output=output, finished_at_ms=self.runtime.now_ms(),
            steps=ctx.pending_steps, first_seq=ctx.next_durable_seq)
        return RunOutcome(ctx.run_id, final.status, final.output, ctx.replayed, ctx.executed)


async def replay(record: ExecutionRecord, log: tuple[StepRecord, ...], flow: Flow, *,
                 transforms: Mapping[tuple[int, int], StateTransform] = _NO_TRANSFORMS) -> Any:
    """Fold a run's recorded steps through ``flow`` with no store at all.

    Replay has no kernel, hence no store: an effect that was recorded returns
    its recorded output, anything else is ``ReplayIncomplete``. Returns the
    flow's output (or raises the flow's error, as the original run did).

    A migrated run folds as the kernel folds it, through ``transforms``; one
    missing for a marker in ``log`` is ``MigrationMissing``.
    """
    ctx = ExecutionContext(None, record, log, replay_only=True, transforms=transforms)
    return await flow(ctx, record.input)


def is_app_event(step: StepRecord) -> bool:
    return step.kind == EVENT_EMITTED or step.step_id.startswith("emit:")
