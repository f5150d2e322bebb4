"""The execution store port, and the rules every adapter applies.

The port (``ExecutionStore``) is what the kernel awaits. Its methods are
``async`` so a simulated store can be wrapped with faults and latency, but an
implementation must contain **no await**: in the simulator a call is one
atomic step (no other task can run in the middle of it), exactly as a SQLite
write transaction is atomic for other connections.

The rules themselves (start idempotency and the high-water mark, the step
sequence, park and finish transitions) are written once, below, as pure
functions over the rows a call needs (h11 style, ARCHITECTURE §9). Each adapter
fetches those rows — inside its write transaction for SQLite — calls the rule,
and writes what the rule decided. One exception, for speed: the SQLite start
is a write guarded by the rule's *create* condition, and only when the guard
does not apply does it read the rows and let ``decide_start`` decide (see
``sqlite_store``). Every error and every decision off that happy path is made
here; the conformance suite and the memory-vs-SQLite property test pin the
two adapters to identical results.

JSON values (``input``, ``output``) cross the boundary as canonical text made
by ``encode_json``: both adapters store that text and decode it on every read.
That makes every read a fresh deep copy, makes the two adapters
observationally identical (same values, same dict key order), and gives
``finish_execution`` a canonical comparison for free.
"""
from __future__ import annotations

import json
from typing import Protocol

from model.bounds import INT64_MAX, INT64_MIN, is_valid_unicode

from .records import (
    EXECUTION_STATUSES,
    PARKED,
    RUNNING,
    STEP_KINDS,
    TERMINAL_STATUSES,
    ExecutionNotRunning,
    ExecutionRecord,
    FinishConflict,
    StartOutcome,
    StepRecord,
    StepSequenceConflict,
    UnknownExecution,
)


class ExecutionStore(Protocol):
    """Durable executions, each with an append-only step log.

    Every method is atomic. Errors are the typed classes of
    ``model.kernel.records``; bad argument types raise ``TypeError``, bad
    argument values (a non-terminal finish status, an unknown step kind, a
    non-JSON or NaN value, a str holding a lone surrogate, an int outside the
    signed 64 bits a SQLite INTEGER holds) raise ``ValueError`` — both before
    anything changes, and alike in every adapter.
    """

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
        """Create the execution (RUNNING) unless it exists or is retired.

        Idempotent by ``run_id``: an existing execution is returned unchanged
        with ``replayed=True`` whatever the other arguments. For a scheduled
        run (``schedule_id`` not None) the store keeps the schedule's
        high-water mark (max ``occurrence_ms`` ever started, kept across
        purges): a missing run at or below it is retired,
        ``StartOutcome(None, replayed=True)``. Creating raises the mark in the
        same atomic step.
        """
        ...

    async def append_step(self, run_id: str, seq: int, step_id: str, kind: str, output: object) -> StepRecord:
        """Append step ``seq``, which must be (number of steps) + 1.

        Raises, in this order of precedence: ``UnknownExecution``;
        ``ExecutionNotRunning`` if COMPLETED/FAILED (a PARKED run accepts
        steps); ``StepSequenceConflict``.
        """
        ...

    async def append_steps(
        self, run_id: str, first_seq: int, steps: tuple[tuple[str, str, object], ...]
    ) -> tuple[StepRecord, ...]:
        """Append ``steps`` (``(step_id, kind, output)`` each) atomically as
        seqs ``first_seq``, ``first_seq + 1``, ...; returns their records.

        Same rules and errors as ``append_step`` for ``first_seq``, all or
        nothing: a refused batch appends no step. Empty ``steps`` appends
        nothing and returns ``()``, but still raises what a non-empty batch
        at ``first_seq`` would (a cheap "is my view of the log current?").
        """
        ...

    async def load_steps(self, run_id: str) -> tuple[StepRecord, ...]:
        """All steps ordered by seq; ``()`` for an unknown run."""
        ...

    async def load_execution(self, run_id: str) -> ExecutionRecord | None: ...

    async def park_execution(self, run_id: str) -> ExecutionRecord:
        """RUNNING -> PARKED; PARKED stays PARKED; finished -> ExecutionNotRunning."""
        ...

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
        """Finish as COMPLETED or FAILED (from RUNNING or PARKED).

        Idempotent: finishing again with the same status and a canonically
        equal output returns the stored record unchanged (its original
        ``finished_at_ms``); anything else is ``FinishConflict``.

        With ``steps`` (``first_seq`` then required), the steps are appended
        as by ``append_steps`` and the run finished in one atomic step: both
        or neither. On a live run a wrong ``first_seq`` is
        ``StepSequenceConflict``. On a finished run the finish rule comes
        first: an idempotent repeat appends nothing and returns the stored
        record (the first, identical finish committed the steps), provided
        the stored log holds at least ``first_seq - 1 + len(steps)`` steps —
        otherwise ``FinishConflict``. Without ``steps``, ``first_seq`` is
        ignored (it must be None or an int).
        """
        ...

    async def live_executions(self, schedule_id: str) -> tuple[ExecutionRecord, ...]:
        """RUNNING and PARKED executions of the schedule, by (occurrence_ms, run_id)."""
        ...

    async def schedule_high_water_ms(self, schedule_id: str) -> int | None: ...

    async def purge_finished(self, finished_before_ms: int) -> int:
        """Delete finished executions with ``finished_at_ms < finished_before_ms``
        and their steps; return how many executions. High-water marks stay."""
        ...

    def counts(self) -> dict[str, int]:
        """``{"executions": n, "steps": m}`` currently held (memory-flatness checks)."""
        ...


# --- JSON values --------------------------------------------------------------
#
# Encoding and decoding are on every call's path (a simulated year makes
# about a million of them), so both go straight to the C accelerators of the
# json module: ``JSONEncoder.encode`` rebuilds its C encoder on every call and
# ``json.loads`` adds a BOM check and two regex matches around the C scanner.
# Calling them directly halves the cost. The output is byte-identical to
# ``json.dumps(value, allow_nan=False, ensure_ascii=False,
# separators=(",", ":"), sort_keys=True)``; the pure-Python fallbacks below
# are used only if the C accelerators are missing.

_encoder = json.JSONEncoder(
    allow_nan=False, ensure_ascii=False, separators=(",", ":"), sort_keys=True
)
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_c_encode_basestring = getattr(json.encoder, "c_encode_basestring", None)
if _c_make_encoder is not None and _c_encode_basestring is not None:
    # markers=None: no per-call cycle-tracking dict (a dict the C encoder can
    # leave dirty after an error). A cyclic value recurses until
    # RecursionError, which encode_json turns into ValueError.
    _c_encode = _c_make_encoder(
        None, _encoder.default, _c_encode_basestring, None, ":", ",", True, False, False
    )

    def _encode(value: object) -> str:
        return "".join(_c_encode(value, 0))

else:  # pragma: no cover - CPython always has the accelerator
    _encode = _encoder.encode

_scan_once = json.decoder.JSONDecoder().scan_once

# The canonical text of ``None``; an execution's output before it finishes.
NULL_JSON = "null"


def encode_json(value: object) -> str:
    """Canonical JSON text of ``value`` (keys sorted, compact, raw UTF-8).

    Raises ``ValueError`` for NaN/Infinity, for a cyclic or absurdly deep
    value, and for a string that is not valid Unicode (a lone surrogate, which
    SQLite cannot store); ``TypeError`` for anything that is not JSON. Tuples
    become lists, as in any JSON round trip.
    """
    try:
        text = _encode(value)
    except ValueError as exc:
        raise ValueError(f"not a JSON value: {exc}") from None
    except RecursionError:
        raise ValueError("not a JSON value: circular reference or nesting too deep") from None
    # ensure_ascii=False lets a lone surrogate through as a raw code point;
    # reject it here so the memory store refuses exactly what SQLite refuses.
    if not is_valid_unicode(text):
        raise ValueError("not a JSON value: a string holds a lone surrogate (not valid Unicode)")
    return text


def decode_json(text: str) -> object:
    """Decode text made by ``encode_json`` (a fresh object every call).

    Strict: anything but exactly one JSON value is ``ValueError``, so a
    damaged row fails loudly instead of decoding a prefix.
    """
    if text == NULL_JSON:
        return None
    try:
        value, end = _scan_once(text, 0)
    except StopIteration:
        raise ValueError(f"corrupt JSON value {text[:80]!r}") from None
    if end != len(text):
        raise ValueError(f"corrupt JSON value {text[:80]!r} (trailing data at {end})")
    return value


# --- argument validation (the public boundary) --------------------------------


# Every int argument is stored in a SQLite INTEGER column and every str as
# UTF-8 (``model.bounds``): what does not fit is refused by every adapter
# alike, typed, before anything changes.
def require_str(name: str, value: object) -> None:
    if type(value) is not str:
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not is_valid_unicode(value):
        raise ValueError(f"{name} must be valid Unicode (no lone surrogates), got {value!r:.80}")


def require_int(name: str, value: object) -> None:
    # bool is an int subclass; a True seq or timestamp is always a bug.
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{name} must fit in a signed 64-bit integer, got {value}")


def validate_start_args(
    run_id: object, schedule_id: object, occurrence_ms: object, flow_version: object, started_at_ms: object
) -> None:
    require_str("run_id", run_id)
    if schedule_id is not None:
        require_str("schedule_id", schedule_id)
        # The high-water mark is an occurrence time: a scheduled run needs one.
        require_int("occurrence_ms (required with schedule_id)", occurrence_ms)
    elif occurrence_ms is not None:
        require_int("occurrence_ms", occurrence_ms)
    require_int("flow_version", flow_version)
    require_int("started_at_ms", started_at_ms)


def validate_append_args(run_id: object, seq: object, step_id: object, kind: object) -> None:
    require_str("run_id", run_id)
    require_int("seq", seq)
    require_str("step_id", step_id)
    require_str("kind", kind)
    if kind not in STEP_KINDS:
        raise ValueError(f"unknown step kind {kind!r}; expected one of {STEP_KINDS}")


def validate_finish_args(run_id: object, status: object, finished_at_ms: object) -> None:
    require_str("run_id", run_id)
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"finish status must be one of {TERMINAL_STATUSES}, got {status!r}")
    require_int("finished_at_ms", finished_at_ms)


def encode_steps(steps: object) -> tuple[tuple[str, str, str], ...]:
    """Validate a batch of ``(step_id, kind, output)`` and encode each output:
    ``(step_id, kind, output_json)`` per step. Raises before anything changes."""
    if type(steps) is not tuple and type(steps) is not list:
        raise TypeError(f"steps must be a tuple of (step_id, kind, output), got {type(steps).__name__}")
    encoded = []
    for index, step in enumerate(steps):
        if (type(step) is not tuple and type(step) is not list) or len(step) != 3:
            raise TypeError(f"steps[{index}] must be a (step_id, kind, output) tuple, got {step!r:.80}")
        step_id, kind, output = step
        require_str(f"steps[{index}] step_id", step_id)
        require_str(f"steps[{index}] kind", kind)
        if kind not in STEP_KINDS:
            raise ValueError(f"unknown step kind {kind!r} in steps[{index}]; expected one of {STEP_KINDS}")
        encoded.append((step_id, kind, encode_json(output)))
    return tuple(encoded)


def validate_first_seq(first_seq: object, steps: tuple) -> None:
    """``finish_execution``'s ``first_seq``: an int with steps; None or an
    int (ignored) without."""
    if first_seq is None and steps:
        raise TypeError("first_seq is required with steps")
    if first_seq is not None:
        require_int("first_seq", first_seq)


# --- the rules ---------------------------------------------------------------
#
# Pure functions of the rows a call reads. ``status is None`` means "no such
# execution". Each either raises the typed error or says what to write.

START_REPLAY = "replay"  # the run exists: return it unchanged
START_RETIRED = "retired"  # at or below the high-water mark and gone
START_CREATE = "create"  # insert RUNNING and raise the high-water mark


def decide_start(exists: bool, schedule_id: str | None, occurrence_ms: int | None, high_water_ms: int | None) -> str:
    if exists:
        return START_REPLAY
    if schedule_id is not None and high_water_ms is not None and occurrence_ms <= high_water_ms:
        return START_RETIRED
    return START_CREATE


RETIRED_OUTCOME = StartOutcome(None, True)


def check_append(run_id: str, status: str | None, step_count: int, seq: int) -> None:
    """Raise unless step ``seq`` may be appended to a run in ``status`` holding
    ``step_count`` steps."""
    if status is None:
        raise UnknownExecution(run_id)
    if status != RUNNING and status != PARKED:
        raise ExecutionNotRunning(run_id, status)
    if seq != step_count + 1:
        raise StepSequenceConflict(run_id, seq, step_count + 1)


def decide_park(run_id: str, status: str | None) -> bool:
    """True if the status must change to PARKED; False if already parked."""
    if status is None:
        raise UnknownExecution(run_id)
    if status == RUNNING:
        return True
    if status == PARKED:
        return False
    assert status in EXECUTION_STATUSES, status
    raise ExecutionNotRunning(run_id, status)


def decide_finish(
    run_id: str,
    existing_status: str | None,
    existing_output_json: str,
    status: str,
    output_json: str,
    step_count: int = 0,
    first_seq: int = 1,
    n_steps: int = 0,
) -> bool:
    """True if the finish (and its ``n_steps`` steps from ``first_seq``) must
    be written; False for an idempotent repeat, which writes nothing.

    ``step_count`` is the run's stored log length; it matters only with
    steps: a live run needs ``first_seq == step_count + 1``, and a repeat of a
    finish that carried steps needs them in the log already.
    """
    if existing_status is None:
        raise UnknownExecution(run_id)
    if existing_status == RUNNING or existing_status == PARKED:
        if n_steps and first_seq != step_count + 1:
            raise StepSequenceConflict(run_id, first_seq, step_count + 1)
        return True
    assert existing_status in TERMINAL_STATUSES, existing_status
    if existing_status != status or existing_output_json != output_json:
        raise FinishConflict(run_id, existing_status, status)
    if step_count < first_seq - 1 + n_steps:
        raise FinishConflict(
            run_id, existing_status, status,
            detail=f"it holds {step_count} steps, fewer than the {first_seq - 1 + n_steps} this finish implies",
        )
    return False


def check_step_log(run_id: str, steps_seq_last: int, step_count: int) -> None:
    """A read step log must be 1..n: seqs are unique and ordered, so the last
    one equal to the count proves there is no gap."""
    if steps_seq_last != step_count:
        raise AssertionError(
            f"step log of {run_id!r} is not contiguous: {step_count} steps, last seq {steps_seq_last}"
        )
