"""Conformance suite for ``ExecutionStore`` adapters.

Every adapter — the in-memory and SQLite stores here, and yours — must pass
the same named checks, one per rule of the port (``store.py``). Each check
gets a fresh store, so the checks are independent and a failure names the
rule that broke.

Running it against your own adapter::

    import trio
    from model.kernel.store_conformance import run_execution_store_conformance

    def make_store():
        # A *fresh, empty* store per call: a new database/schema/namespace.
        return MyPostgresExecutionStore(fresh_test_database())

    def test_my_store_conforms():
        passed = trio.run(run_execution_store_conformance, make_store)
        assert passed  # names of the checks that ran

``make_store`` is a zero-argument callable returning the store or an
awaitable of it (``async def make_store(): ...`` works too). The suite only
awaits the store's own methods, so any async driver can run it: ``trio.run``,
``asyncio.run``, or the simulator. The suite never closes stores; if yours
hold connections, close them in your fixture's teardown.

All checks run even when some fail; at the end a ``ConformanceFailure`` (an
``AssertionError``, so pytest reports it as a plain failure) lists every
failing check with its reason, and carries them as ``.failures``.
``checks=("start-idempotent-by-run-id", ...)`` runs a subset while you work
on one rule. ``CONFORMANCE_CHECKS`` is the ordered tuple of all names.
"""
from __future__ import annotations

import math
from typing import Any, Awaitable, Callable, Iterable

from model import conformance_kit as _kit

from .records import (
    COMPLETED,
    EFFECT_INDOUBT,
    EVENT_EMITTED,
    EXECUTION_MIGRATED,
    FAILED,
    PARKED,
    RUNNING,
    STEP_COMPLETED,
    STEP_KINDS,
    STEP_STARTED,
    ExecutionNotRunning,
    ExecutionRecord,
    FinishConflict,
    StartOutcome,
    StepRecord,
    StepSequenceConflict,
    UnknownExecution,
)


class ConformanceFailure(_kit.ConformanceFailure):
    subject = "execution store"


_SUITE = _kit.CheckSuite(ConformanceFailure)
_check = _SUITE.check
_raises = _kit.expect_raises
_eq = _kit.expect_eq


async def _start(store, run_id: str, schedule_id: str | None = "sched", occurrence_ms: int | None = 1_000, **overrides):
    args = dict(
        schedule_id=schedule_id,
        occurrence_ms=occurrence_ms,
        flow_version=1,
        input={"n": 1},
        started_at_ms=occurrence_ms if occurrence_ms is not None else 0,
    )
    args.update(overrides)
    return await store.start_execution(run_id, **args)


async def _started(store, run_id: str, **kwargs) -> ExecutionRecord:
    outcome = await _start(store, run_id, **kwargs)
    if not isinstance(outcome, StartOutcome) or outcome.record is None or outcome.replayed:
        raise AssertionError(f"fresh start of {run_id!r} did not create it: {outcome!r}")
    return outcome.record


async def _finished(store, run_id: str, finished_at_ms: int, *, status: str = COMPLETED, **kwargs) -> ExecutionRecord:
    await _started(store, run_id, **kwargs)
    return await store.finish_execution(run_id, status=status, output={"ok": True}, finished_at_ms=finished_at_ms)


# --- start_execution ---------------------------------------------------------------


@_check("start-creates-running")
async def _(store) -> None:
    outcome = await store.start_execution(
        "sched@1000", schedule_id="sched", occurrence_ms=1_000, flow_version=3,
        input={"k": [1, "two", None]}, started_at_ms=1_005,
    )
    expected = ExecutionRecord(
        run_id="sched@1000", schedule_id="sched", occurrence_ms=1_000, flow_version=3,
        input={"k": [1, "two", None]}, status=RUNNING, started_at_ms=1_005,
        finished_at_ms=None, output=None,
    )
    _eq(outcome, StartOutcome(expected, replayed=False), "start outcome")
    _eq(await store.load_execution("sched@1000"), expected, "load_execution after start")
    unscheduled = await store.start_execution(
        "adhoc-1", schedule_id=None, occurrence_ms=None, flow_version=1, input=None, started_at_ms=7,
    )
    _eq(
        unscheduled,
        StartOutcome(ExecutionRecord("adhoc-1", None, None, 1, None, RUNNING, 7, None, None), False),
        "unscheduled start outcome",
    )


@_check("start-idempotent-by-run-id")
async def _(store) -> None:
    first = await _started(store, "sched@1000", input={"v": 1})
    again = await store.start_execution(
        "sched@1000", schedule_id="other", occurrence_ms=5_000, flow_version=9,
        input={"v": 2}, started_at_ms=9_999,
    )
    _eq(again, StartOutcome(first, replayed=True), "second start with different arguments")
    _eq(await store.load_execution("sched@1000"), first, "stored execution after second start")
    _eq(await store.schedule_high_water_ms("other"), None, "high-water of the replayed start's schedule")
    _eq(await store.schedule_high_water_ms("sched"), 1_000, "high-water after replayed start")
    # Idempotent in every state: parked and finished runs replay too.
    await store.park_execution("sched@1000")
    parked = await _start(store, "sched@1000")
    _eq((parked.replayed, parked.record.status), (True, PARKED), "start of a parked run")
    done = await store.finish_execution("sched@1000", status=FAILED, output="boom", finished_at_ms=2_000)
    _eq(await _start(store, "sched@1000"), StartOutcome(done, True), "start of a finished run")
    _eq(store.counts()["executions"], 1, "executions after repeated starts")


@_check("start-high-water-mark")
async def _(store) -> None:
    _eq(await store.schedule_high_water_ms("sched"), None, "high-water of an unknown schedule")
    await _started(store, "sched@1000", occurrence_ms=1_000)
    _eq(await store.schedule_high_water_ms("sched"), 1_000, "high-water after first start")
    await _started(store, "sched@3000", occurrence_ms=3_000)
    _eq(await store.schedule_high_water_ms("sched"), 3_000, "high-water after a later start")
    # Below and at the mark, a run that does not exist is retired.
    for run_id, occurrence_ms in (("sched@2000", 2_000), ("sched@3000-dup", 3_000)):
        outcome = await _start(store, run_id, occurrence_ms=occurrence_ms)
        _eq(outcome, StartOutcome(None, replayed=True), f"start of {run_id!r} at occurrence {occurrence_ms}")
        _eq(await store.load_execution(run_id), None, f"retired {run_id!r} must not be created")
    _eq(await store.schedule_high_water_ms("sched"), 3_000, "high-water after retired starts")
    # Marks are per schedule.
    await _started(store, "other@500", schedule_id="other", occurrence_ms=500)
    _eq(await store.schedule_high_water_ms("other"), 500, "high-water of a second schedule")
    _eq(await store.schedule_high_water_ms("sched"), 3_000, "first schedule's mark after a second schedule")
    _eq(store.counts()["executions"], 3, "executions held")


@_check("start-retired-after-purge")
async def _(store) -> None:
    await _finished(store, "sched@1000", 1_500, occurrence_ms=1_000)
    _eq(await store.purge_finished(10_000), 1, "purged")
    _eq(await store.load_execution("sched@1000"), None, "purged execution")
    _eq(await store.schedule_high_water_ms("sched"), 1_000, "high-water survives purge")
    _eq(await _start(store, "sched@1000"), StartOutcome(None, True), "restart of a purged occurrence")
    _eq(await store.load_execution("sched@1000"), None, "retired run must not be re-created")
    await _started(store, "sched@2000", occurrence_ms=2_000)


@_check("start-unscheduled-has-no-high-water")
async def _(store) -> None:
    await _finished(store, "adhoc", 10, schedule_id=None, occurrence_ms=None)
    await _started(store, "adhoc-with-time", schedule_id=None, occurrence_ms=50)
    _eq(await store.purge_finished(11), 1, "purged")
    # No schedule, no mark: a purged unscheduled run id starts afresh.
    again = await _start(store, "adhoc", schedule_id=None, occurrence_ms=None)
    _eq((again.replayed, again.record is not None), (False, True), "restart of a purged unscheduled run")


# --- append_step / load_steps -----------------------------------------------------


@_check("append-step-sequence")
async def _(store) -> None:
    await _started(store, "r")
    step = await store.append_step("r", 1, "fetch", STEP_COMPLETED, {"rows": 3})
    _eq(step, StepRecord("r", 1, "fetch", STEP_COMPLETED, {"rows": 3}), "returned step")
    await store.append_step("r", 2, "send", STEP_STARTED, None)
    for bad_seq, what in ((4, "a gap"), (2, "a duplicate"), (1, "a rewrite of step 1"), (0, "seq 0"), (-1, "a negative seq")):
        exc = await _raises(StepSequenceConflict, store.append_step("r", bad_seq, "x", STEP_COMPLETED, 1), f"append with {what}")
        _eq((exc.run_id, exc.expected_seq, exc.actual_next_seq), ("r", bad_seq, 3), f"conflict fields for {what}")
    _eq(len(await store.load_steps("r")), 2, "steps after refused appends")
    await store.append_step("r", 3, "send", STEP_COMPLETED, "sent")
    _eq(store.counts()["steps"], 3, "steps counted")


@_check("append-unknown-execution")
async def _(store) -> None:
    exc = await _raises(UnknownExecution, store.append_step("nope", 1, "a", STEP_COMPLETED, 1), "append to unknown run")
    _eq(exc.run_id, "nope", "UnknownExecution.run_id")
    _eq(await store.load_execution("nope"), None, "append must not create an execution")
    _eq(store.counts(), {"executions": 0, "steps": 0}, "counts")


@_check("append-to-finished-refused")
async def _(store) -> None:
    for run_id, status in (("done", COMPLETED), ("dead", FAILED)):
        await _started(store, run_id, schedule_id=None, occurrence_ms=None)
        await store.append_step(run_id, 1, "a", STEP_COMPLETED, 1)
        await store.finish_execution(run_id, status=status, output=None, finished_at_ms=5)
        exc = await _raises(
            ExecutionNotRunning, store.append_step(run_id, 2, "b", STEP_COMPLETED, 2), f"append to a {status} run"
        )
        _eq((exc.run_id, exc.status), (run_id, status), "ExecutionNotRunning fields")
        _eq(len(await store.load_steps(run_id)), 1, f"steps of the {status} run")


@_check("append-to-parked-allowed")
async def _(store) -> None:
    await _started(store, "r")
    await store.append_step("r", 1, "charge", STEP_STARTED, None)
    await store.append_step("r", 2, "charge", EFFECT_INDOUBT, None)
    await store.park_execution("r")
    step = await store.append_step("r", 3, "charge", STEP_COMPLETED, {"resolved_by": "operator"})
    _eq(step.seq, 3, "seq appended to a parked run")
    _eq((await store.load_execution("r")).status, PARKED, "status after append (append does not unpark)")


@_check("append-every-step-kind")
async def _(store) -> None:
    # Every kind of STEP_KINDS round-trips through each appending call,
    # including EXECUTION_MIGRATED on a parked run.
    migrated = {"from": 1, "to": 2}
    await _started(store, "one", occurrence_ms=1)
    for seq, kind in enumerate(STEP_KINDS, 1):
        await store.append_step("one", seq, f"s{seq}", kind, {"kind": kind})
    await _started(store, "batch", occurrence_ms=2)
    await store.append_steps("batch", 1, tuple((f"s{seq}", kind, {"kind": kind})
                                               for seq, kind in enumerate(STEP_KINDS, 1)))
    await _started(store, "finish", occurrence_ms=3)
    await store.finish_execution("finish", status=COMPLETED, output=None, finished_at_ms=10, first_seq=1,
                                 steps=tuple((f"s{seq}", kind, {"kind": kind})
                                             for seq, kind in enumerate(STEP_KINDS, 1)))
    for run_id in ("one", "batch", "finish"):
        _eq(
            await store.load_steps(run_id),
            tuple(StepRecord(run_id, seq, f"s{seq}", kind, {"kind": kind}) for seq, kind in enumerate(STEP_KINDS, 1)),
            f"steps of every kind ({run_id})",
        )
    await _started(store, "parked", occurrence_ms=4)
    await store.append_steps("parked", 1, (("charge", STEP_STARTED, None), ("charge", EFFECT_INDOUBT, None)))
    await store.park_execution("parked")
    step = await store.append_step("parked", 3, "migrate:1->2", EXECUTION_MIGRATED, migrated)
    _eq(step, StepRecord("parked", 3, "migrate:1->2", EXECUTION_MIGRATED, migrated), "migration marker on a parked run")
    _eq((await store.load_execution("parked")).status, PARKED, "status after the marker")


@_check("load-steps-ordered")
async def _(store) -> None:
    _eq(await store.load_steps("unknown"), (), "steps of an unknown run")
    await _started(store, "a", occurrence_ms=1)
    await _started(store, "b", occurrence_ms=2)
    _eq(await store.load_steps("a"), (), "steps of a run without steps")
    kinds = (STEP_STARTED, STEP_COMPLETED, EVENT_EMITTED, EFFECT_INDOUBT)
    for seq in range(1, 13):
        # Interleave two runs: each has its own sequence starting at 1.
        await store.append_step("a", seq, f"s{seq}", kinds[seq % 4], {"seq": seq})
        if seq <= 3:
            await store.append_step("b", seq, f"b{seq}", STEP_COMPLETED, [seq])
    steps = await store.load_steps("a")
    _eq(type(steps), tuple, "load_steps type")
    _eq(
        steps,
        tuple(StepRecord("a", seq, f"s{seq}", kinds[seq % 4], {"seq": seq}) for seq in range(1, 13)),
        "steps of run a in seq order",
    )
    _eq(
        await store.load_steps("b"),
        tuple(StepRecord("b", seq, f"b{seq}", STEP_COMPLETED, [seq]) for seq in range(1, 4)),
        "steps of run b",
    )


@_check("load-execution-unknown-is-none")
async def _(store) -> None:
    _eq(await store.load_execution("missing"), None, "load of an unknown run")


# --- append_steps (batch) ---------------------------------------------------------


async def _no_change(store, run_id: str, steps_before: int, what: str, status: str = RUNNING) -> None:
    _eq(len(await store.load_steps(run_id)), steps_before, f"steps after {what} (all or nothing)")
    _eq((await store.load_execution(run_id)).status, status, f"status after {what}")


@_check("append-steps-batch")
async def _(store) -> None:
    await _started(store, "r")
    batch = (("charge", STEP_STARTED, None), ("charge", STEP_COMPLETED, {"id": "ch_1"}), ("note", EVENT_EMITTED, [1]))
    records = await store.append_steps("r", 1, batch)
    expected = (
        StepRecord("r", 1, "charge", STEP_STARTED, None),
        StepRecord("r", 2, "charge", STEP_COMPLETED, {"id": "ch_1"}),
        StepRecord("r", 3, "note", EVENT_EMITTED, [1]),
    )
    _eq(records, expected, "returned steps")
    _eq(type(records), tuple, "append_steps type")
    _eq(await store.load_steps("r"), expected, "stored steps")
    # Batches and single appends share one sequence.
    await store.append_step("r", 4, "single", STEP_COMPLETED, 4)
    _eq(
        await store.append_steps("r", 5, [("one", STEP_COMPLETED, 5)]),
        (StepRecord("r", 5, "one", STEP_COMPLETED, 5),),
        "a one-step batch (a list is accepted too)",
    )
    # An empty batch appends nothing and only checks first_seq.
    _eq(await store.append_steps("r", 6, ()), (), "empty batch at the next seq")
    _eq(store.counts(), {"executions": 1, "steps": 5}, "counts after batches")
    # A parked run accepts a batch, and stays parked.
    await store.park_execution("r")
    await store.append_steps("r", 6, (("resolve", STEP_COMPLETED, "ok"),))
    _eq(((await store.load_execution("r")).status, len(await store.load_steps("r"))), (PARKED, 6), "batch on a parked run")


@_check("append-steps-all-or-nothing")
async def _(store) -> None:
    await _started(store, "r")
    await store.append_step("r", 1, "a", STEP_COMPLETED, 1)
    two = (("b", STEP_COMPLETED, 2), ("c", STEP_COMPLETED, 3))
    for first_seq, what in ((3, "a gap"), (1, "a duplicate"), (0, "seq 0"), (-5, "a negative seq")):
        for steps in (two, ()):
            exc = await _raises(
                StepSequenceConflict, store.append_steps("r", first_seq, steps), f"batch of {len(steps)} at {what}"
            )
            _eq((exc.run_id, exc.expected_seq, exc.actual_next_seq), ("r", first_seq, 2), f"conflict fields for {what}")
        await _no_change(store, "r", 1, f"a batch at {what}")
    # A bad value anywhere in the batch refuses all of it, before anything is written.
    bad_batches = (
        (ValueError, (("b", STEP_COMPLETED, 2), ("c", STEP_COMPLETED, math.nan)), "NaN in the last step"),
        (TypeError, (("b", STEP_COMPLETED, 2), ("c", STEP_COMPLETED, {1, 2})), "a set in the last step"),
        (ValueError, (("b", STEP_COMPLETED, 2), ("c", "STEP_DONE", 3)), "an unknown kind in the last step"),
        (TypeError, (("b", STEP_COMPLETED, 2), ("c", STEP_COMPLETED)), "a 2-tuple step"),
        (TypeError, (("b", STEP_COMPLETED, 2), (7, STEP_COMPLETED, 3)), "a non-str step id"),
        (TypeError, "bad", "steps that are a str"),
    )
    for exc_type, steps, what in bad_batches:
        await _raises(exc_type, store.append_steps("r", 2, steps), f"batch with {what}")
        await _no_change(store, "r", 1, f"a batch with {what}")
    await _raises(TypeError, store.append_steps("r", True, two), "batch with a bool first_seq")
    # Unknown and finished runs, with the same precedence as append_step.
    for steps in (two, ()):
        exc = await _raises(UnknownExecution, store.append_steps("nope", 1, steps), f"batch of {len(steps)} on an unknown run")
        _eq(exc.run_id, "nope", "UnknownExecution.run_id")
    _eq(await store.load_execution("nope"), None, "a batch must not create an execution")
    await store.finish_execution("r", status=COMPLETED, output=None, finished_at_ms=5)
    for steps in (two, ()):
        exc = await _raises(ExecutionNotRunning, store.append_steps("r", 2, steps), f"batch of {len(steps)} on a finished run")
        _eq((exc.run_id, exc.status), ("r", COMPLETED), "ExecutionNotRunning fields")
    await _no_change(store, "r", 1, "a batch on a finished run", status=COMPLETED)
    _eq(store.counts(), {"executions": 1, "steps": 1}, "counts after refused batches")


# --- park / finish ----------------------------------------------------------------


@_check("park-execution")
async def _(store) -> None:
    started = await _started(store, "r")
    parked = await store.park_execution("r")
    expected = ExecutionRecord(
        started.run_id, started.schedule_id, started.occurrence_ms, started.flow_version,
        started.input, PARKED, started.started_at_ms, None, None,
    )
    _eq(parked, expected, "parked record")
    _eq(await store.park_execution("r"), expected, "parking again (idempotent)")
    _eq(await store.load_execution("r"), expected, "stored parked record")
    exc = await _raises(UnknownExecution, store.park_execution("nope"), "park of an unknown run")
    _eq(exc.run_id, "nope", "UnknownExecution.run_id")
    for run_id, status in (("done", COMPLETED), ("dead", FAILED)):
        await _finished(store, run_id, 9, status=status, schedule_id=None, occurrence_ms=None)
        exc = await _raises(ExecutionNotRunning, store.park_execution(run_id), f"park of a {status} run")
        _eq((exc.run_id, exc.status), (run_id, status), "ExecutionNotRunning fields")
        _eq((await store.load_execution(run_id)).status, status, "status after refused park")


@_check("finish-execution")
async def _(store) -> None:
    started = await _started(store, "r")
    done = await store.finish_execution("r", status=COMPLETED, output={"result": [1, 2]}, finished_at_ms=4_000)
    expected = ExecutionRecord(
        started.run_id, started.schedule_id, started.occurrence_ms, started.flow_version,
        started.input, COMPLETED, started.started_at_ms, 4_000, {"result": [1, 2]},
    )
    _eq(done, expected, "finished record")
    _eq(await store.load_execution("r"), expected, "stored finished record")
    # A parked run can be finished (operator resolution), as FAILED here.
    await _started(store, "p", occurrence_ms=2_000)
    await store.park_execution("p")
    failed = await store.finish_execution("p", status=FAILED, output="abandoned", finished_at_ms=4_500)
    _eq((failed.status, failed.output, failed.finished_at_ms), (FAILED, "abandoned", 4_500), "finish of a parked run")


@_check("finish-requires-terminal-status")
async def _(store) -> None:
    await _started(store, "r")
    for status in (RUNNING, PARKED, "succeeded"):
        await _raises(
            ValueError, store.finish_execution("r", status=status, output=None, finished_at_ms=1), f"finish as {status!r}"
        )
    _eq((await store.load_execution("r")).status, RUNNING, "status after refused finishes")


@_check("finish-idempotent")
async def _(store) -> None:
    await _started(store, "r")
    first = await store.finish_execution("r", status=COMPLETED, output={"a": 1, "b": [True, None]}, finished_at_ms=100)
    # Same status, canonically equal output (other key order), later time.
    again = await store.finish_execution("r", status=COMPLETED, output={"b": [True, None], "a": 1}, finished_at_ms=999)
    _eq(again, first, "repeated finish returns the stored record unchanged")
    _eq((await store.load_execution("r")).finished_at_ms, 100, "finished_at_ms after repeated finish")


@_check("finish-conflict")
async def _(store) -> None:
    await _started(store, "r")
    first = await store.finish_execution("r", status=COMPLETED, output={"x": 1}, finished_at_ms=100)
    exc = await _raises(
        FinishConflict, store.finish_execution("r", status=FAILED, output={"x": 1}, finished_at_ms=200), "finish with another status"
    )
    _eq((exc.run_id, exc.existing_status, exc.attempted_status), ("r", COMPLETED, FAILED), "FinishConflict fields")
    for other in ({"x": 2}, {"x": 1.0}, {"x": True}, {"x": 1, "y": None}, None):
        exc = await _raises(
            FinishConflict, store.finish_execution("r", status=COMPLETED, output=other, finished_at_ms=200), f"finish with output {other!r}"
        )
        _eq((exc.existing_status, exc.attempted_status), (COMPLETED, COMPLETED), "FinishConflict fields (output differs)")
    _eq(await store.load_execution("r"), first, "record after refused finishes")


@_check("finish-unknown-execution")
async def _(store) -> None:
    exc = await _raises(
        UnknownExecution, store.finish_execution("nope", status=COMPLETED, output=None, finished_at_ms=1), "finish of unknown run"
    )
    _eq(exc.run_id, "nope", "UnknownExecution.run_id")
    _eq(await store.load_execution("nope"), None, "finish must not create an execution")


@_check("finish-with-steps")
async def _(store) -> None:
    started = await _started(store, "r")
    await store.append_step("r", 1, "fetch", STEP_COMPLETED, {"rows": 2})
    done = await store.finish_execution(
        "r", status=COMPLETED, output={"sent": 1}, finished_at_ms=4_000,
        steps=(("send", STEP_COMPLETED, "sent"), ("finding", EVENT_EMITTED, {"n": 1})), first_seq=2,
    )
    _eq(
        done,
        ExecutionRecord(
            started.run_id, started.schedule_id, started.occurrence_ms, started.flow_version,
            started.input, COMPLETED, started.started_at_ms, 4_000, {"sent": 1},
        ),
        "record finished with steps",
    )
    _eq(
        await store.load_steps("r"),
        (
            StepRecord("r", 1, "fetch", STEP_COMPLETED, {"rows": 2}),
            StepRecord("r", 2, "send", STEP_COMPLETED, "sent"),
            StepRecord("r", 3, "finding", EVENT_EMITTED, {"n": 1}),
        ),
        "steps appended by the finish",
    )
    _eq(await store.live_executions("sched"), (), "live set after finishing with steps")
    # Operator resolution of a parked run: record the outcome and finish at once.
    await _started(store, "p", occurrence_ms=2_000)
    await store.append_steps("p", 1, (("charge", STEP_STARTED, None), ("charge", EFFECT_INDOUBT, None)))
    await store.park_execution("p")
    failed = await store.finish_execution(
        "p", status=FAILED, output="refunded", finished_at_ms=5_000,
        steps=(("charge", STEP_COMPLETED, {"resolved_by": "operator"}),), first_seq=3,
    )
    _eq((failed.status, len(await store.load_steps("p"))), (FAILED, 3), "finish of a parked run with steps")
    # steps=() is a plain finish; its first_seq, if given, is not checked.
    await _started(store, "q", occurrence_ms=3_000)
    plain = await store.finish_execution("q", status=COMPLETED, output=None, finished_at_ms=6_000, steps=(), first_seq=99)
    _eq((plain.status, await store.load_steps("q")), (COMPLETED, ()), "finish with steps=() and a first_seq")
    _eq(store.counts(), {"executions": 3, "steps": 6}, "counts")


@_check("finish-with-steps-all-or-nothing")
async def _(store) -> None:
    await _started(store, "r")
    await store.append_step("r", 1, "a", STEP_COMPLETED, 1)
    step = (("b", STEP_COMPLETED, 2),)
    for first_seq, what in ((3, "a gap"), (1, "a duplicate"), (0, "seq 0")):
        exc = await _raises(
            StepSequenceConflict,
            store.finish_execution("r", status=COMPLETED, output=None, finished_at_ms=9, steps=step, first_seq=first_seq),
            f"finish with steps at {what}",
        )
        _eq((exc.run_id, exc.expected_seq, exc.actual_next_seq), ("r", first_seq, 2), f"conflict fields for {what}")
        await _no_change(store, "r", 1, f"a finish with steps at {what}")
    bad = (
        (TypeError, dict(steps=step), "steps without first_seq"),
        (TypeError, dict(steps=step, first_seq="2"), "a str first_seq"),
        (TypeError, dict(steps=(), first_seq=2.0), "a float first_seq"),
        (ValueError, dict(steps=(("b", STEP_COMPLETED, 2), ("c", STEP_COMPLETED, math.inf)), first_seq=2), "inf in a step"),
        (ValueError, dict(steps=(("b", "NOPE", 2),), first_seq=2), "an unknown step kind"),
        (TypeError, dict(steps=[["b", STEP_COMPLETED]], first_seq=2), "a 2-item step"),
    )
    for exc_type, kwargs, what in bad:
        await _raises(
            exc_type, store.finish_execution("r", status=COMPLETED, output=None, finished_at_ms=9, **kwargs), f"finish with {what}"
        )
        await _no_change(store, "r", 1, f"a finish with {what}")
    exc = await _raises(
        UnknownExecution,
        store.finish_execution("nope", status=COMPLETED, output=None, finished_at_ms=9, steps=step, first_seq=1),
        "finish with steps of an unknown run",
    )
    _eq(exc.run_id, "nope", "UnknownExecution.run_id")
    _eq(store.counts(), {"executions": 1, "steps": 1}, "counts after refused finishes")


@_check("finish-with-steps-idempotent")
async def _(store) -> None:
    await _started(store, "r")
    steps = (("a", STEP_COMPLETED, 1), ("b", STEP_COMPLETED, {"x": [1]}))
    first = await store.finish_execution(
        "r", status=COMPLETED, output={"k": 1}, finished_at_ms=100, steps=steps, first_seq=1
    )
    logged = await store.load_steps("r")
    # The identical call again (an ack lost after commit): the stored record,
    # nothing appended — the first call committed the steps.
    again = await store.finish_execution(
        "r", status=COMPLETED, output={"k": 1}, finished_at_ms=999, steps=steps, first_seq=1
    )
    _eq(again, first, "repeated finish with steps returns the stored record")
    _eq(await store.load_steps("r"), logged, "steps after a repeated finish with steps")
    # Also idempotent without steps, or with a tail the log already holds.
    _eq(await store.finish_execution("r", status=COMPLETED, output={"k": 1}, finished_at_ms=5), first, "repeat without steps")
    _eq(
        await store.finish_execution(
            "r", status=COMPLETED, output={"k": 1}, finished_at_ms=5, steps=steps[1:], first_seq=2
        ),
        first,
        "repeat with the last step only",
    )
    # A repeat implying steps the log does not hold is a conflict, not a repeat.
    exc = await _raises(
        FinishConflict,
        store.finish_execution("r", status=COMPLETED, output={"k": 1}, finished_at_ms=5, steps=steps, first_seq=2),
        "repeat implying a third step",
    )
    _eq((exc.run_id, exc.existing_status, exc.attempted_status), ("r", COMPLETED, COMPLETED), "FinishConflict fields")
    # The finish rule comes first on a finished run: another result is a
    # FinishConflict, not a sequence or not-running error.
    for status, output, first_seq in ((COMPLETED, {"k": 2}, 1), (FAILED, {"k": 1}, 1), (FAILED, {"k": 1}, 7)):
        exc = await _raises(
            FinishConflict,
            store.finish_execution("r", status=status, output=output, finished_at_ms=5, steps=steps, first_seq=first_seq),
            f"finish as {status} with output {output!r} at seq {first_seq}",
        )
        _eq((exc.existing_status, exc.attempted_status), (COMPLETED, status), "FinishConflict fields")
    _eq(await store.load_execution("r"), first, "record after repeats and conflicts")
    _eq(await store.load_steps("r"), logged, "steps after repeats and conflicts")


# --- live set, retention, counts -----------------------------------------------------


@_check("live-executions-by-schedule")
async def _(store) -> None:
    _eq(await store.live_executions("sched"), (), "live set of an unknown schedule")
    # Started out of occurrence order; the live set comes back ordered.
    await _started(store, "sched@3000", occurrence_ms=3_000)
    await _start(store, "sched@1000", occurrence_ms=1_000)  # retired: below the mark
    await _started(store, "sched@5000", occurrence_ms=5_000)
    await _started(store, "sched@7000", occurrence_ms=7_000)
    await _started(store, "other@2000", schedule_id="other", occurrence_ms=2_000)
    await _started(store, "adhoc", schedule_id=None, occurrence_ms=None)
    await store.park_execution("sched@5000")
    await store.finish_execution("sched@7000", status=COMPLETED, output=None, finished_at_ms=8_000)
    live = await store.live_executions("sched")
    _eq(type(live), tuple, "live_executions type")
    _eq(
        [(r.run_id, r.status) for r in live],
        [("sched@3000", RUNNING), ("sched@5000", PARKED)],
        "live executions of sched (running and parked, by occurrence)",
    )
    _eq(live[0], await store.load_execution("sched@3000"), "live record equals stored record")
    _eq([r.run_id for r in await store.live_executions("other")], ["other@2000"], "live executions of other")
    await store.finish_execution("sched@3000", status=FAILED, output=None, finished_at_ms=9_000)
    await store.finish_execution("sched@5000", status=COMPLETED, output=None, finished_at_ms=9_000)
    _eq(await store.live_executions("sched"), (), "live set after every run finished")


@_check("purge-finished")
async def _(store) -> None:
    # Finished out of time order, to catch adapters that assume it.
    await _finished(store, "sched@1000", 5_000, occurrence_ms=1_000)
    await _finished(store, "sched@2000", 3_000, occurrence_ms=2_000, status=FAILED)
    await _finished(store, "sched@3000", 6_000, occurrence_ms=3_000)
    await _started(store, "sched@4000", occurrence_ms=4_000)  # live, started long ago
    await _started(store, "parked@1", schedule_id="p", occurrence_ms=1)
    await store.park_execution("parked@1")
    await store.append_step("sched@4000", 1, "x", STEP_COMPLETED, 0)
    _eq(await store.purge_finished(3_000), 0, "purge before any finish time (strictly less)")
    _eq(await store.purge_finished(5_001), 2, "purge of runs finished before 5001")
    _eq(await store.load_execution("sched@1000"), None, "purged run")
    _eq(await store.load_execution("sched@2000"), None, "purged run")
    _eq((await store.load_execution("sched@3000")).finished_at_ms, 6_000, "run finished at the cutoff or later stays")
    _eq((await store.load_execution("sched@4000")).status, RUNNING, "live run is never purged")
    _eq((await store.load_execution("parked@1")).status, PARKED, "parked run is never purged")
    _eq(await store.purge_finished(5_001), 0, "purge again")
    _eq(await store.purge_finished(10**15), 1, "purge everything finished")
    _eq(await store.schedule_high_water_ms("sched"), 4_000, "high-water after purge")
    _eq(store.counts(), {"executions": 2, "steps": 1}, "counts after purge")


@_check("purge-deletes-steps")
async def _(store) -> None:
    for run_id, occurrence_ms in (("sched@1", 1), ("sched@2", 2)):
        await _started(store, run_id, occurrence_ms=occurrence_ms)
        for seq in range(1, 4):
            await store.append_step(run_id, seq, "s", STEP_COMPLETED, seq)
    await store.finish_execution("sched@1", status=COMPLETED, output=None, finished_at_ms=10)
    _eq(store.counts(), {"executions": 2, "steps": 6}, "counts before purge")
    _eq(await store.purge_finished(11), 1, "purged")
    _eq(await store.load_steps("sched@1"), (), "steps of a purged run")
    _eq(len(await store.load_steps("sched@2")), 3, "steps of a live run")
    _eq(store.counts(), {"executions": 1, "steps": 3}, "counts after purge")


@_check("counts")
async def _(store) -> None:
    counts = store.counts()
    _eq(counts, {"executions": 0, "steps": 0}, "counts of an empty store")
    await _started(store, "a", occurrence_ms=1)
    await _started(store, "b", occurrence_ms=2)
    await store.append_step("a", 1, "s", STEP_COMPLETED, None)
    await _start(store, "a", occurrence_ms=1)  # replay adds nothing
    await _start(store, "z", occurrence_ms=0)  # retired adds nothing
    await _raises(StepSequenceConflict, store.append_step("a", 1, "s", STEP_COMPLETED, None), "duplicate append")
    _eq(store.counts(), {"executions": 2, "steps": 1}, "counts")


# --- JSON values ------------------------------------------------------------------


_ROUND_TRIP_VALUES = (
    None, True, False, 0, -7, 2**53 + 1, 1.5, -0.25, 1e300, "", "plain", "ünïcödé ✓ 𝄞", "quote\" and \\ and \n",
    [], {}, [1, [2, [3, {"deep": [None]}]]], {"z": 1, "a": {"m": [True, 2.5, "s"]}},
)


@_check("json-values-round-trip")
async def _(store) -> None:
    for index, value in enumerate(_ROUND_TRIP_VALUES, 1):
        run_id = f"v{index}"
        record = await _started(store, run_id, schedule_id=None, occurrence_ms=None, input=value)
        _eq(record.input, value, f"input {value!r} as returned by start")
        _eq((await store.load_execution(run_id)).input, value, f"input {value!r} as loaded")
        step = await store.append_step(run_id, 1, "s", STEP_COMPLETED, value)
        _eq(step.output, value, f"step output {value!r} as returned by append")
        _eq((await store.load_steps(run_id))[0].output, value, f"step output {value!r} as loaded")
        done = await store.finish_execution(run_id, status=COMPLETED, output=value, finished_at_ms=1)
        _eq(done.output, value, f"execution output {value!r} as returned by finish")
        _eq((await store.load_execution(run_id)).output, value, f"execution output {value!r} as loaded")
    # JSON has no tuples: a tuple comes back as a list, like any JSON round trip.
    record = await _started(store, "tuple", schedule_id=None, occurrence_ms=None, input={"t": (1, 2)})
    _eq(record.input, {"t": [1, 2]}, "tuple input")


@_check("json-values-copied")
async def _(store) -> None:
    value = {"list": [1, 2], "nested": {"k": "v"}}
    record = await _started(store, "r", input=value)
    value["list"].append(3)
    value["nested"]["k"] = "changed"
    record.input["list"].append(99)
    _eq((await store.load_execution("r")).input, {"list": [1, 2], "nested": {"k": "v"}}, "input after caller mutations")
    output = {"rows": [1]}
    step = await store.append_step("r", 1, "s", STEP_COMPLETED, output)
    output["rows"].append(2)
    step.output["rows"].append(3)
    (await store.load_steps("r"))[0].output["rows"].append(4)
    _eq((await store.load_steps("r"))[0].output, {"rows": [1]}, "step output after caller mutations")
    batch_output = {"rows": [5]}
    (batch_step,) = await store.append_steps("r", 2, (("t", STEP_COMPLETED, batch_output),))
    batch_output["rows"].append(6)
    batch_step.output["rows"].append(7)
    _eq((await store.load_steps("r"))[1].output, {"rows": [5]}, "batch step output after caller mutations")
    result = {"done": [1]}
    finished = await store.finish_execution("r", status=COMPLETED, output=result, finished_at_ms=5)
    result["done"].append(2)
    finished.output["done"].append(3)
    (await store.load_execution("r")).output["done"].append(4)
    (await store.live_executions("sched"))  # must not hand out shared state either
    _eq((await store.load_execution("r")).output, {"done": [1]}, "execution output after caller mutations")
    # The idempotent repeat compares against the stored value, not a mutated alias.
    await store.finish_execution("r", status=COMPLETED, output={"done": [1]}, finished_at_ms=6)


@_check("json-invalid-values-refused")
async def _(store) -> None:
    for bad in (math.nan, math.inf, {"x": [-math.inf]}):
        await _raises(ValueError, _start(store, "bad", input=bad), f"start with input {bad!r}")
    await _raises(TypeError, _start(store, "bad", input={"x": object()}), "start with a non-JSON input")
    _eq(await store.load_execution("bad"), None, "refused start must create nothing")
    _eq(await store.schedule_high_water_ms("sched"), None, "refused start must not move the high-water mark")
    await _started(store, "r")
    await _raises(ValueError, store.append_step("r", 1, "s", STEP_COMPLETED, math.nan), "append with NaN output")
    await _raises(TypeError, store.append_step("r", 1, "s", STEP_COMPLETED, {1, 2}), "append with a set output")
    _eq(await store.load_steps("r"), (), "refused appends must append nothing")
    await _raises(
        ValueError, store.finish_execution("r", status=COMPLETED, output=math.inf, finished_at_ms=1), "finish with inf output"
    )
    _eq((await store.load_execution("r")).status, RUNNING, "refused finish must not finish")


CONFORMANCE_CHECKS: tuple[str, ...] = _SUITE.names()


async def run_execution_store_conformance(make_store: Callable[[], Any], *, checks: Iterable[str] | None = None) -> list[str]:
    """Run the conformance checks, each on a fresh store from ``make_store``.

    Returns the names of the checks that ran (all passed); raises
    ``ConformanceFailure`` naming every failing check otherwise.
    """
    return await _SUITE.run(make_store, checks)
