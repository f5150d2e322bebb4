"""Records and typed errors of the kernel's execution store.

An *execution* is one bounded run (for a schedule: one per occurrence, run id
``scheduleId@occurrenceMs``). Each execution has an append-only *step log*
numbered 1, 2, 3, ... with no gaps. These are the only shapes that cross the
store boundary; both adapters (memory, SQLite) and any user adapter return
exactly these classes.

``input`` and ``output`` are JSON values. A store never hands out a reference
to what it holds: what goes in is copied (encoded), what comes out is a fresh
decode, so a caller mutating a dict it passed or received cannot rewrite
history.
"""
from __future__ import annotations

import attrs

# --- execution status -------------------------------------------------------

RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
# Stopped at EFFECT_INDOUBT: a non-idempotent effect may or may not have
# happened and only an operator can say which. Still live (non-terminal): it
# holds its schedule's single live slot and may still get steps appended (the
# operator's resolution) and be finished.
PARKED = "parked"

EXECUTION_STATUSES: tuple[str, ...] = (RUNNING, PARKED, COMPLETED, FAILED)
LIVE_STATUSES: tuple[str, ...] = (RUNNING, PARKED)
TERMINAL_STATUSES: tuple[str, ...] = (COMPLETED, FAILED)

# --- step kinds -------------------------------------------------------------

# Intent recorded *before* a non-idempotent effect. Finding a STEP_STARTED
# without its STEP_COMPLETED on replay is how the kernel knows the effect is
# in doubt.
STEP_STARTED = "STEP_STARTED"
STEP_COMPLETED = "STEP_COMPLETED"
EFFECT_INDOUBT = "EFFECT_INDOUBT"
# An application event (a finding), not an effect result.
EVENT_EMITTED = "EVENT_EMITTED"
# A resumed execution moved from flow version ``from``
# to ``to`` through a registered state transform. Step id
# ``migrate:<from>-><to>``, output ``{"from": A, "to": B}``. Written by the
# kernel, never requested by a flow: the fold skips it, and passes the
# STEP_COMPLETED outputs recorded before it through the transform.
EXECUTION_MIGRATED = "EXECUTION_MIGRATED"

STEP_KINDS: tuple[str, ...] = (STEP_STARTED, STEP_COMPLETED, EFFECT_INDOUBT, EVENT_EMITTED, EXECUTION_MIGRATED)


@attrs.frozen
class ExecutionRecord:
    run_id: str
    schedule_id: str | None
    occurrence_ms: int | None
    flow_version: int
    input: object
    status: str
    started_at_ms: int
    finished_at_ms: int | None
    output: object


@attrs.frozen
class StepRecord:
    run_id: str
    seq: int
    step_id: str
    kind: str
    output: object


@attrs.frozen
class StartOutcome:
    """What ``start_execution`` did.

    ``replayed=False``: this call created ``record``. ``replayed=True`` with a
    record: the run already existed and ``record`` is it, unchanged.
    ``replayed=True`` with ``record=None``: the run id is *retired* — its
    occurrence is at or below the schedule's high-water mark but the run is
    gone (finished and purged), so starting it again would be a duplicate wake.
    """

    record: ExecutionRecord | None
    replayed: bool


# --- errors -----------------------------------------------------------------
#
# Each error keeps its structured fields as attributes and defines __reduce__
# so it survives pickling (sweep workers send failures across processes; the
# default Exception pickling would call __init__ with the message only).


class ExecutionStoreError(Exception):
    """Base class of the execution store's typed errors."""


class StepSequenceConflict(ExecutionStoreError):
    """``append_step`` at a seq other than (number of steps) + 1 — or
    ``append_steps`` / ``finish_execution(steps=...)`` at such a ``first_seq``.

    ``expected_seq`` is the seq the caller asked for (the seq it expected to
    be next); ``actual_next_seq`` is the seq the store would have accepted.
    A duplicate append (an ack lost after commit) shows up as
    ``expected_seq < actual_next_seq``.
    """

    def __init__(self, run_id: str, expected_seq: int, actual_next_seq: int) -> None:
        self.run_id = run_id
        self.expected_seq = expected_seq
        self.actual_next_seq = actual_next_seq
        super().__init__(
            f"step sequence conflict on run {run_id!r}: append at seq {expected_seq!r}, "
            f"but the next free seq is {actual_next_seq!r}"
        )

    def __reduce__(self):
        return (type(self), (self.run_id, self.expected_seq, self.actual_next_seq))


class UnknownExecution(ExecutionStoreError):
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no execution with run id {run_id!r}")

    def __reduce__(self):
        return (type(self), (self.run_id,))


class ExecutionNotRunning(ExecutionStoreError):
    """Append to, or park, an execution that has already finished."""

    def __init__(self, run_id: str, status: str) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(f"execution {run_id!r} is {status!r}, not running or parked")

    def __reduce__(self):
        return (type(self), (self.run_id, self.status))


class FinishConflict(ExecutionStoreError):
    """``finish_execution`` on a finished execution with a different result.

    When ``existing_status == attempted_status`` and ``detail`` is None the
    outputs differ (compared as canonical JSON text). ``detail`` explains any
    other conflict: a repeated finish carrying steps the stored log does not
    hold.
    """

    def __init__(
        self, run_id: str, existing_status: str, attempted_status: str, detail: str | None = None
    ) -> None:
        self.run_id = run_id
        self.existing_status = existing_status
        self.attempted_status = attempted_status
        self.detail = detail
        if detail is not None:
            message = f"already {existing_status!r}, but {detail}"
        elif existing_status == attempted_status:
            message = f"already {existing_status!r} with a different output"
        else:
            message = f"already {existing_status!r}, cannot finish as {attempted_status!r}"
        super().__init__(f"finish conflict on execution {run_id!r}: {message}")

    def __reduce__(self):
        return (type(self), (self.run_id, self.existing_status, self.attempted_status, self.detail))
