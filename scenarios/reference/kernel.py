"""Reference model of the kernel's execution store (``model.kernel.store``).

The contract, as plain rules over ``run_id -> execution`` (its fields, its
step log) and ``schedule_id -> high-water mark``:

- ``start_execution``: an existing run is answered unchanged, replayed,
  whatever the other arguments; a missing scheduled run whose occurrence is
  at or below its schedule's mark is *retired* (``StartOutcome(None,
  True)``, nothing created); otherwise the run is created RUNNING and, when
  scheduled, the mark becomes its occurrence. Marks outlive purges;
  unscheduled runs have none.
- ``append_step`` / ``append_steps``: ``UnknownExecution``, then
  ``ExecutionNotRunning`` for a finished run (a parked one takes steps),
  then ``StepSequenceConflict(run, asked, next)`` unless the (first) seq is
  the log's length + 1; a batch is all or nothing, an empty one only checks.
- ``park_execution``: RUNNING -> PARKED, PARKED stays, finished ->
  ``ExecutionNotRunning``, missing -> ``UnknownExecution``.
- ``finish_execution``: from RUNNING or PARKED, with its steps appended in
  the same step (a wrong ``first_seq`` on a live run is
  ``StepSequenceConflict``); on a finished run the same status and a
  canonically equal output answer the stored record (its first
  ``finished_at_ms``) provided the log holds every step the call implies,
  anything else is ``FinishConflict``.
- ``live_executions``: RUNNING and PARKED runs of the schedule by
  (occurrence, run id); ``purge_finished(t)``: deletes runs finished before
  ``t`` with their steps, answers how many.
- Arguments are checked first: a wrong type is TypeError; a wrong value (an
  unknown step kind or finish status, NaN/Infinity, a str with a lone
  surrogate, an int outside 64 bits) is ValueError; nothing changes.
- JSON values are copied both ways: an answer holds the JSON round trip of
  what was given (tuples become lists), compared exactly (``1``, ``1.0``
  and ``true`` differ).

Written from ``ExecutionStore``'s docstrings and the conformance kit, not
from the adapters' rule functions: it imports only the record and error
types and the two tuples of names.
"""
from __future__ import annotations

import math
from typing import Any

from model.kernel.records import STEP_KINDS, TERMINAL_STATUSES
from scenarios.reference import History, PortReference, Refused, exact_json, judge, same, valid_text

RUNNING, PARKED = "running", "parked"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The start arguments after the run id, as the port names them.
START_NAMES = ("schedule_id", "occurrence_ms", "flow_version", "input", "started_at_ms")
# Values nested deeper than this the reference does not judge (the adversary sends none).
DEPTH_MAX = 64


class _Unjudged(Exception):
    """A value outside what this model covers (e.g. a non-str member name)."""


def _str_problem(value: object) -> Refused | None:
    if type(value) is not str:
        return Refused("TypeError")
    return None if valid_text(value) else Refused("ValueError")


def _int_problem(value: object) -> Refused | None:
    if type(value) is not int:
        return Refused("TypeError")
    return None if INT64_MIN <= value <= INT64_MAX else Refused("ValueError")


def _json_problem(value: object, depth: int = 0) -> Refused | None:
    """TypeError for what is not JSON, ValueError for NaN/Infinity and lone surrogates."""
    if depth > DEPTH_MAX:
        raise _Unjudged("a value nested too deep")
    kind = type(value)
    if value is None or kind is bool or kind is int:
        return None
    if kind is float:
        return None if math.isfinite(value) else Refused("ValueError")
    if kind is str:
        return None if valid_text(value) else Refused("ValueError")
    if kind is list or kind is tuple:
        for item in value:
            problem = _json_problem(item, depth + 1)
            if problem is not None:
                return problem
        return None
    if kind is dict:
        for name, item in value.items():
            if type(name) is not str:
                raise _Unjudged("a non-str member name")
            problem = _str_problem(name) or _json_problem(item, depth + 1)
            if problem is not None:
                return problem
        return None
    return Refused("TypeError")


def _steps_problem(steps: object) -> Refused | None:
    if type(steps) is not tuple and type(steps) is not list:
        return Refused("TypeError")
    for step in steps:
        if (type(step) is not tuple and type(step) is not list) or len(step) != 3:
            return Refused("TypeError")
        step_id, kind, output = step
        problem = _str_problem(step_id) or _str_problem(kind)
        if problem is not None:
            return problem
        if kind not in STEP_KINDS:
            return Refused("ValueError")
        problem = _json_problem(output)
        if problem is not None:
            return problem
    return None


class _Run:
    __slots__ = ("run_id", "schedule_id", "occurrence_ms", "flow_version", "input", "status", "started_at_ms",
                 "finished_at_ms", "output", "steps")

    def __init__(self, run_id: str, schedule_id: Any, occurrence_ms: Any, flow_version: int, input_text: str,
                 started_at_ms: int) -> None:
        self.run_id = run_id
        self.schedule_id = schedule_id
        self.occurrence_ms = occurrence_ms
        self.flow_version = flow_version
        self.input = input_text
        self.status = RUNNING
        self.started_at_ms = started_at_ms
        self.finished_at_ms: int | None = None
        self.output = "null"
        self.steps: list[tuple[str, str, str]] = []  # (step_id, kind, output as exact JSON)

    def view(self) -> tuple:
        return (self.run_id, self.schedule_id, self.occurrence_ms, self.flow_version, self.input, self.status,
                self.started_at_ms, self.finished_at_ms, self.output)


def _record_view(record: Any) -> tuple | None:
    if record is None:
        return None
    return (record.run_id, record.schedule_id, record.occurrence_ms, record.flow_version, exact_json(record.input),
            record.status, record.started_at_ms, record.finished_at_ms, exact_json(record.output))


def _step_view(step: Any) -> tuple:
    return (step.run_id, step.seq, step.step_id, step.kind, exact_json(step.output))


def _steps_view(steps: Any) -> tuple:
    return tuple(_step_view(step) for step in steps)


def _start_view(outcome: Any) -> tuple:
    return (_record_view(outcome.record), outcome.replayed)


def _kwargs(call: Any, positional: tuple[str, ...], defaults: dict[str, Any]) -> dict[str, Any] | None:
    """The call's arguments by name (None: they do not bind)."""
    if len(call.args) > len(positional):
        return None
    bound = dict(zip(positional, call.args))
    for name, value in call.kwargs.items():
        if name in bound:
            return None
        bound[name] = value
    for name, value in defaults.items():
        bound.setdefault(name, value)
    return bound


class ReferenceKernel(PortReference):
    """``ExecutionStore``'s contract over a dict of runs and marks."""

    port = "kernel"
    scope = "kernel"
    KEY_PARAM = "run_id"
    _SCHEDULE_METHODS = ("live_executions", "schedule_high_water_ms")

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._marks: dict[str, int] = {}
        self._history = History()
        self._handlers = {
            "start_execution": self._start, "append_step": self._append_step, "append_steps": self._append_steps,
            "load_steps": self._load_steps, "load_execution": self._load_execution, "park_execution": self._park,
            "finish_execution": self._finish, "live_executions": self._live,
            "schedule_high_water_ms": self._high_water, "purge_finished": self._purge}

    def _table(self) -> dict:
        return self._runs

    def key_of(self, call: Any) -> str:
        if call.method == "purge_finished":
            return "purge"
        if call.method in self._SCHEDULE_METHODS:
            key = call.args[0] if call.args else call.kwargs.get("schedule_id")
            return f"schedule:{key}" if isinstance(key, str) else repr(key)
        return super().key_of(call)

    def forget(self, key: str) -> None:
        self._runs.pop(key, None)
        self._history.drop(key)

    # -- writes -----------------------------------------------------------------------

    def _start(self, call: Any) -> str | None:
        key = self.key_of(call)
        a = _kwargs(call, ("run_id",), {})
        if a is None or set(a) != {"run_id", *START_NAMES}:
            return judge(call, key, Refused("TypeError"), same, self._history)
        run_id, schedule_id, occurrence_ms = a["run_id"], a["schedule_id"], a["occurrence_ms"]
        problem = _str_problem(run_id)
        if problem is None and schedule_id is not None:
            problem = _str_problem(schedule_id) or _int_problem(occurrence_ms)
        elif problem is None and occurrence_ms is not None:
            problem = _int_problem(occurrence_ms)
        problem = problem or _int_problem(a["flow_version"]) or _int_problem(a["started_at_ms"]) or _json_problem(
            a["input"])
        if problem is not None:
            return judge(call, key, problem, same, self._history)
        existing = self._runs.get(run_id)
        if existing is not None:
            expected: Any = (existing.view(), True)
            outcome = "replayed"
        elif schedule_id is not None and schedule_id in self._marks and occurrence_ms <= self._marks[schedule_id]:
            expected, outcome = (None, True), "retired"
        else:
            row = _Run(run_id, schedule_id, occurrence_ms, a["flow_version"], exact_json(a["input"]),
                       a["started_at_ms"])
            expected, outcome = (row.view(), False), "created"
        message = judge(call, key, expected, _start_view, self._history)
        if message is None:
            if outcome == "created":
                self._runs[run_id] = row
                if schedule_id is not None:
                    self._marks[schedule_id] = occurrence_ms
            self._history.note(key, call, (schedule_id, occurrence_ms), outcome)
        return message

    def _append_rule(self, run_id: str, first_seq: int) -> Refused | None:
        row = self._runs.get(run_id)
        if row is None:
            return Refused("UnknownExecution", run_id=run_id)
        if row.status != RUNNING and row.status != PARKED:
            return Refused("ExecutionNotRunning", run_id=run_id, status=row.status)
        if first_seq != len(row.steps) + 1:
            return Refused("StepSequenceConflict", run_id=run_id, expected_seq=first_seq,
                           actual_next_seq=len(row.steps) + 1)
        return None

    def _append_step(self, call: Any) -> str | None:
        key = self.key_of(call)
        a = _kwargs(call, ("run_id", "seq", "step_id", "kind", "output"), {})
        if a is None or len(a) != 5:
            return judge(call, key, Refused("TypeError"), same, self._history)
        run_id, seq, step_id, kind, output = a["run_id"], a["seq"], a["step_id"], a["kind"], a["output"]
        problem = _str_problem(run_id) or _int_problem(seq) or _str_problem(step_id) or _str_problem(kind)
        if problem is None and kind not in STEP_KINDS:
            problem = Refused("ValueError")
        problem = problem or _json_problem(output) or self._append_rule(run_id, seq)
        if problem is not None:
            message = judge(call, key, problem, same, self._history)
            if message is None:
                self._history.note(key, call, (seq, kind), problem.name)
            return message
        text = exact_json(output)
        message = judge(call, key, (run_id, seq, step_id, kind, text), _step_view, self._history)
        if message is None:
            self._runs[run_id].steps.append((step_id, kind, text))
            self._history.note(key, call, (seq, kind), "appended")
        return message

    def _append_steps(self, call: Any) -> str | None:
        key = self.key_of(call)
        a = _kwargs(call, ("run_id", "first_seq", "steps"), {})
        if a is None or len(a) != 3:
            return judge(call, key, Refused("TypeError"), same, self._history)
        run_id, first_seq, steps = a["run_id"], a["first_seq"], a["steps"]
        problem = _str_problem(run_id) or _int_problem(first_seq) or _steps_problem(steps) or self._append_rule(
            run_id, first_seq)
        if problem is not None:
            message = judge(call, key, problem, same, self._history)
            if message is None:
                self._history.note(key, call, (first_seq, len(steps) if isinstance(steps, (list, tuple)) else steps),
                                   problem.name)
            return message
        encoded = [(step_id, kind, exact_json(output)) for step_id, kind, output in steps]
        expected = tuple((run_id, seq, step_id, kind, text)
                         for seq, (step_id, kind, text) in enumerate(encoded, first_seq))
        message = judge(call, key, expected, _steps_view, self._history)
        if message is None:
            self._runs[run_id].steps.extend(encoded)
            self._history.note(key, call, (first_seq, len(encoded)), "appended")
        return message

    def _park(self, call: Any) -> str | None:
        key = self.key_of(call)
        a = _kwargs(call, ("run_id",), {})
        if a is None or len(a) != 1:
            return judge(call, key, Refused("TypeError"), same, self._history)
        run_id = a["run_id"]
        problem = _str_problem(run_id)
        row = self._runs.get(run_id) if problem is None else None
        if problem is None and row is None:
            problem = Refused("UnknownExecution", run_id=run_id)
        elif row is not None and row.status not in (RUNNING, PARKED):
            problem = Refused("ExecutionNotRunning", run_id=run_id, status=row.status)
        if problem is not None:
            return judge(call, key, problem, same, self._history)
        before = row.status
        row.status = PARKED
        message = judge(call, key, row.view(), _record_view, self._history)
        if message is None:
            self._history.note(key, call, (), f"{before} -> parked")
        else:
            row.status = before
        return message

    def _finish(self, call: Any) -> str | None:
        key = self.key_of(call)
        a = _kwargs(call, ("run_id",), {"steps": (), "first_seq": None})
        if a is None or set(a) != {"run_id", "status", "output", "finished_at_ms", "steps", "first_seq"}:
            return judge(call, key, Refused("TypeError"), same, self._history)
        run_id, status, output, steps, first_seq = a["run_id"], a["status"], a["output"], a["steps"], a["first_seq"]
        problem = _str_problem(run_id)
        if problem is None:
            try:
                terminal = status in TERMINAL_STATUSES
            except Exception:  # noqa: BLE001 - an argument whose == raises: not judged here
                raise _Unjudged("a status whose comparison raises") from None
            if not terminal:
                problem = Refused("ValueError")
        problem = problem or _int_problem(a["finished_at_ms"]) or _json_problem(output) or _steps_problem(steps)
        if problem is None:
            if first_seq is None and steps:
                problem = Refused("TypeError")
            elif first_seq is not None:
                problem = _int_problem(first_seq)
        row = self._runs.get(run_id) if problem is None else None
        if problem is None and row is None:
            problem = Refused("UnknownExecution", run_id=run_id)
        if problem is not None:
            message = judge(call, key, problem, same, self._history)
            if message is None:
                self._history.note(key, call, (status,), problem.name)
            return message
        text = exact_json(output)
        n_steps = len(steps)
        if row.status in (RUNNING, PARKED):
            if n_steps and first_seq != len(row.steps) + 1:
                problem = Refused("StepSequenceConflict", run_id=run_id, expected_seq=first_seq,
                                  actual_next_seq=len(row.steps) + 1)
                message = judge(call, key, problem, same, self._history)
                if message is None:
                    self._history.note(key, call, (status, first_seq, n_steps), problem.name)
                return message
            before = (row.status, row.output, row.finished_at_ms)
            row.status, row.output, row.finished_at_ms = status, text, a["finished_at_ms"]
            message = judge(call, key, row.view(), _record_view, self._history)
            if message is None:
                row.steps.extend((step_id, kind, exact_json(value)) for step_id, kind, value in steps)
                self._history.note(key, call, (status, first_seq, n_steps), "finished")
            else:
                row.status, row.output, row.finished_at_ms = before
            return message
        if row.status != status or row.output != text:
            problem = Refused("FinishConflict", run_id=run_id, existing_status=row.status, attempted_status=status)
        elif len(row.steps) < (first_seq if n_steps else 1) - 1 + n_steps:
            problem = Refused("FinishConflict", run_id=run_id, existing_status=row.status, attempted_status=status)
        expected: Any = problem if problem is not None else row.view()
        message = judge(call, key, expected, _record_view, self._history)
        if message is None:
            self._history.note(key, call, (status, first_seq, n_steps), "conflict" if problem else "repeat")
        return message

    def _purge(self, call: Any) -> str | None:
        key = self.key_of(call)
        a = _kwargs(call, ("finished_before_ms",), {})
        if a is None or len(a) != 1:
            return judge(call, key, Refused("TypeError"), same, self._history)
        before = a["finished_before_ms"]
        problem = _int_problem(before)
        if problem is not None:
            return judge(call, key, problem, same, self._history)
        doomed = [run_id for run_id, row in self._runs.items()
                  if row.finished_at_ms is not None and row.finished_at_ms < before]
        message = judge(call, key, len(doomed), same, self._history)
        if message is None:
            for run_id in doomed:
                del self._runs[run_id]
                self._history.drop(run_id)
            self._history.note(key, call, (before,), len(doomed))
        return message

    # -- reads ------------------------------------------------------------------------

    def _run_read(self, call: Any) -> tuple[str, Any, Refused | None]:
        key = self.key_of(call)
        a = _kwargs(call, ("run_id",), {})
        if a is None or len(a) != 1:
            return key, None, Refused("TypeError")
        return key, a["run_id"], _str_problem(a["run_id"])

    def _load_steps(self, call: Any) -> str | None:
        key, run_id, problem = self._run_read(call)
        if problem is not None:
            return judge(call, key, problem, same, self._history)
        row = self._runs.get(run_id)
        expected = () if row is None else tuple(
            (run_id, seq, step_id, kind, text) for seq, (step_id, kind, text) in enumerate(row.steps, 1))
        return judge(call, key, expected, _steps_view, self._history)

    def _load_execution(self, call: Any) -> str | None:
        key, run_id, problem = self._run_read(call)
        if problem is not None:
            return judge(call, key, problem, same, self._history)
        row = self._runs.get(run_id)
        return judge(call, key, None if row is None else row.view(), _record_view, self._history)

    def _schedule_read(self, call: Any) -> tuple[str, Any, Refused | None]:
        key = self.key_of(call)
        a = _kwargs(call, ("schedule_id",), {})
        if a is None or len(a) != 1:
            return key, None, Refused("TypeError")
        return key, a["schedule_id"], _str_problem(a["schedule_id"])

    def _live(self, call: Any) -> str | None:
        key, schedule_id, problem = self._schedule_read(call)
        if problem is not None:
            return judge(call, key, problem, same, self._history)
        live = sorted((row for row in self._runs.values()
                       if row.schedule_id == schedule_id and row.status in (RUNNING, PARKED)),
                      key=lambda row: (row.occurrence_ms, row.run_id))
        return judge(call, key, tuple(row.view() for row in live),
                     lambda records: tuple(_record_view(r) for r in records), self._history)

    def _high_water(self, call: Any) -> str | None:
        key, schedule_id, problem = self._schedule_read(call)
        if problem is not None:
            return judge(call, key, problem, same, self._history)
        return judge(call, key, self._marks.get(schedule_id), same, self._history)

    # -- the end state --------------------------------------------------------------------

    def audit(self, view: Any) -> list[tuple[str, str | None]]:
        """Every run the model holds is the store's, steps and all (read
        through the audit view, when the system offers the kernel store)."""
        read = getattr(view, "kernel_execution", None)
        if read is None:
            return []
        found = []
        for run_id, row in self._runs.items():
            record, steps = read(run_id)
            want = (row.view(), tuple((run_id, seq, step_id, kind, text)
                                      for seq, (step_id, kind, text) in enumerate(row.steps, 1)))
            have = (_record_view(record), _steps_view(steps))
            found.append((run_id, None if have == want else (
                f"kernel run {run_id!r} at the end of the run: the store holds {have!r:.300}, the contract's "
                f"reference model {want!r:.300}")))
        return found
