"""The kernel (ARCHITECTURE §5 "Kernel"): step logs, at-least-once effects, replay.

Reads top to bottom: a first run executes and records; a resumed run folds
what was recorded and executes only the rest; the K9 gap between "effect
done" and "STEP_COMPLETED appended" (re-run if idempotent, park at
EFFECT_INDOUBT if not); pure replay touches no store; divergence; how a
flow's failure settles; application events.

The memory store never suspends, so every coroutine here is driven by hand
(``drive``): it must finish on the first send. A process death is a
``BaseException`` (``Crash``) so that neither the kernel nor the flow can
swallow it, exactly like ``sim.node.NodeCrashed``.
"""
from __future__ import annotations

from typing import Any

import pytest

from model.durable_state.contracts import VALIDATION_FAILED, StateContractMismatchError
from model.failpoints import DURABLE_STATE_SAVE_AFTER_STORE_WRITE, KERNEL_EFFECT_DONE_BEFORE_RECORD
from model.kernel.kernel import (
    EffectInDoubt,
    Kernel,
    ReplayDivergence,
    ReplayIncomplete,
    RunOutcome,
    error_output,
    is_app_event,
    replay,
)
from model.kernel.memory_store import InMemoryExecutionStore
from model.kernel.records import (
    COMPLETED,
    EFFECT_INDOUBT,
    FAILED,
    PARKED,
    RUNNING,
    STEP_COMPLETED,
    STEP_STARTED,
    ExecutionRecord,
)
from sim.runtime import SimRuntime


# --- harness -------------------------------------------------------------------


def drive(coro: Any) -> Any:
    """Run a coroutine that must never suspend; return its value."""
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError(f"coroutine suspended (yielded {yielded!r}); the memory stores never suspend")


class Crash(BaseException):
    """The process died here. Not an Exception: nothing may swallow it."""


class CrashAt:
    """Failpoints that kill the process the first time ``name`` is hit."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.fired = 0
        self.hits: list[str] = []

    def hit(self, name: str) -> None:
        self.hits.append(name)
        if name == self.name and not self.fired:
            self.fired += 1
            raise Crash(name)


class RecordingProbe:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]


class ExplodingStore:
    """Every attribute is a method that fails the test: proves nobody called it."""

    def __init__(self) -> None:
        self.touched: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def refuse(*args: Any, **kwargs: Any) -> Any:
            self.touched.append(name)
            raise AssertionError(f"replay called store.{name}{args}")

        return refuse


class Backend:
    """The outside world an effect acts on: counts calls per effect name."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def effect(self, name: str, output: Any):
        async def run() -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return output

        return run


class ExplodingBackend:
    """Effects whose every run calls an ``ExplodingStore``: replay must never run one."""

    def __init__(self) -> None:
        self.store = ExplodingStore()

    def effect(self, name: str, output: Any):
        async def run() -> Any:
            return await self.store.load(name)

        return run


def new_store_and_record(run_id: str = "run-1", input: Any = None) -> tuple[InMemoryExecutionStore, ExecutionRecord]:
    store = InMemoryExecutionStore()
    outcome = drive(store.start_execution(run_id, schedule_id=None, occurrence_ms=None,
                                          flow_version=1, input=input, started_at_ms=0))
    assert outcome.replayed is False
    return store, outcome.record


def kernel(store: Any, **kwargs: Any) -> Kernel:
    return Kernel(SimRuntime(), store, **kwargs)


def steps(store: InMemoryExecutionStore, run_id: str = "run-1") -> list[tuple[int, str, str, Any]]:
    return [(s.seq, s.step_id, s.kind, s.output) for s in drive(store.load_steps(run_id))]


def status(store: InMemoryExecutionStore, run_id: str = "run-1") -> str:
    return drive(store.load_execution(run_id)).status


# --- execute: run once, record ---------------------------------------------------


def test_execute_runs_effect_once_and_records_step_completed_with_its_output():
    store, record = new_store_and_record()
    backend = Backend()

    async def flow(ctx, _input):
        return await ctx.execute("fetch", backend.effect("fetch", {"rows": [1, 2], "ok": True}))

    outcome = drive(kernel(store).run(record, flow))

    assert outcome == RunOutcome("run-1", COMPLETED, {"rows": [1, 2], "ok": True}, 0, 1)
    assert backend.calls == {"fetch": 1}
    assert steps(store) == [(1, "fetch", STEP_COMPLETED, {"rows": [1, 2], "ok": True})]
    final = drive(store.load_execution("run-1"))
    assert final.status == COMPLETED and final.output == {"rows": [1, 2], "ok": True}


def test_execute_returns_the_recorded_value_so_first_run_and_replay_agree():
    # An effect returning a tuple: the log holds JSON (a list). The first run
    # must see what replay will see, or the two could branch differently.
    store, record = new_store_and_record()
    seen: list[Any] = []

    async def flow(ctx, _input):
        async def effect():
            return (1, 2)

        value = await ctx.execute("pair", effect)
        seen.append(value)
        return value

    outcome = drive(kernel(store).run(record, flow))
    assert seen == [[1, 2]] and outcome.output == [1, 2]
    assert drive(replay(record, drive(store.load_steps("run-1")), flow)) == [1, 2]


def test_fresh_run_does_not_read_the_log_back():
    store, record = new_store_and_record()

    class NoLoadSteps:
        def __getattr__(self, name):
            if name == "load_steps":
                raise AssertionError("fresh=True must not read the log")
            return getattr(store, name)

    async def flow(ctx, _input):
        return await ctx.execute("a", Backend().effect("a", 1))

    assert drive(kernel(NoLoadSteps()).run(record, flow, fresh=True)).status == COMPLETED


# --- resume after a crash: fold the recorded prefix ------------------------------


def test_rerun_after_crash_folds_recorded_step_and_executes_the_rest():
    store, record = new_store_and_record(input={"n": 3})
    backend = Backend()

    async def dying_flow(ctx, flow_input):
        first = await ctx.execute("first", backend.effect("first", flow_input["n"] * 2))

        async def die():
            backend.calls["second"] = backend.calls.get("second", 0) + 1
            raise Crash("process died inside the second effect")

        await ctx.execute("second", die)
        raise AssertionError("unreachable")

    with pytest.raises(Crash):
        drive(kernel(store).run(record, dying_flow))
    assert steps(store) == [(1, "first", STEP_COMPLETED, 6)]
    assert status(store) == RUNNING  # a crash settles nothing

    async def flow(ctx, flow_input):
        first = await ctx.execute("first", backend.effect("first", flow_input["n"] * 2))
        second = await ctx.execute("second", backend.effect("second", first + 1))
        return {"first": first, "second": second}

    # Recovery: a fresh kernel (new process) re-reads the record and the log.
    recovered = drive(store.load_execution("run-1"))
    outcome = drive(kernel(store).run(recovered, flow))

    assert outcome == RunOutcome("run-1", COMPLETED, {"first": 6, "second": 7}, 1, 1)
    assert backend.calls == {"first": 1, "second": 2}  # first never re-ran
    assert steps(store) == [(1, "first", STEP_COMPLETED, 6), (2, "second", STEP_COMPLETED, 7)]


def test_rerun_of_a_fully_recorded_run_calls_no_effect():
    store, record = new_store_and_record()
    backend = Backend()

    async def flow(ctx, _input):
        a = await ctx.execute("a", backend.effect("a", 1))
        b = await ctx.execute("b", backend.effect("b", 2))
        return a + b

    drive(kernel(store).run(record, flow))
    again = drive(kernel(store).run(drive(store.load_execution("run-1")), flow))
    assert again == RunOutcome("run-1", COMPLETED, 3, 2, 0)
    assert backend.calls == {"a": 1, "b": 1}
    assert len(steps(store)) == 2


# --- the K9 gap: effect done, STEP_COMPLETED not appended --------------------------


def test_crash_before_record_reruns_an_idempotent_effect_on_recovery():
    store, record = new_store_and_record()
    backend = Backend()
    failpoints = CrashAt(KERNEL_EFFECT_DONE_BEFORE_RECORD)

    async def flow(ctx, _input):
        return await ctx.execute("observe", backend.effect("observe", {"reading": 42}), idempotent=True)

    with pytest.raises(Crash):
        drive(kernel(store, failpoints=failpoints).run(record, flow))
    assert backend.calls == {"observe": 1}
    assert steps(store) == []  # idempotent: no intent was recorded

    outcome = drive(kernel(store).run(drive(store.load_execution("run-1")), flow))
    assert outcome.status == COMPLETED and outcome.output == {"reading": 42}
    assert backend.calls == {"observe": 2}  # at least once: it ran again
    assert steps(store) == [(1, "observe", STEP_COMPLETED, {"reading": 42})]


def test_crash_before_record_parks_a_non_idempotent_effect_at_effect_indoubt():
    store, record = new_store_and_record()
    backend = Backend()
    probe = RecordingProbe()

    async def flow(ctx, _input):
        return await ctx.execute("charge", backend.effect("charge", {"charged": 10}), idempotent=False)

    with pytest.raises(Crash):
        drive(kernel(store, failpoints=CrashAt(KERNEL_EFFECT_DONE_BEFORE_RECORD)).run(record, flow))
    assert backend.calls == {"charge": 1}
    assert steps(store) == [(1, "charge", STEP_STARTED, None)]  # the intent, no completion

    outcome = drive(kernel(store, probe=probe).run(drive(store.load_execution("run-1")), flow))

    assert outcome.status == "parked" and outcome.output is None
    assert backend.calls == {"charge": 1}  # never guessed: not re-run
    assert steps(store) == [(1, "charge", STEP_STARTED, None), (2, "charge", EFFECT_INDOUBT, None)]
    assert status(store) == PARKED
    assert probe.events == [("kernel.indoubt", {"run": "run-1", "step": "charge"})]


def test_non_idempotent_effect_without_crash_records_intent_then_completion():
    store, record = new_store_and_record()
    backend = Backend()

    async def flow(ctx, _input):
        return await ctx.execute("charge", backend.effect("charge", 10), idempotent=False)

    outcome = drive(kernel(store).run(record, flow))
    assert outcome.status == COMPLETED and outcome.output == 10
    assert steps(store) == [(1, "charge", STEP_STARTED, None), (2, "charge", STEP_COMPLETED, 10)]
    # Resumed again, the intent+completion pair folds as one step.
    again = drive(kernel(store).run(drive(store.load_execution("run-1")), flow))
    assert (again.status, again.output, again.steps_replayed, again.steps_executed) == (COMPLETED, 10, 1, 0)
    assert backend.calls == {"charge": 1}
    # And pure replay folds it too.
    assert drive(replay(record, drive(store.load_steps("run-1")), flow)) == 10


def test_replay_of_a_log_with_an_intent_but_no_completion_is_in_doubt():
    store, record = new_store_and_record()

    async def flow(ctx, _input):
        return await ctx.execute("charge", Backend().effect("charge", 1), idempotent=False)

    with pytest.raises(Crash):
        drive(kernel(store, failpoints=CrashAt(KERNEL_EFFECT_DONE_BEFORE_RECORD)).run(record, flow))
    with pytest.raises(EffectInDoubt) as info:
        drive(replay(record, drive(store.load_steps("run-1")), flow))
    assert (info.value.run_id, info.value.step_id) == ("run-1", "charge")


def test_the_replay_oracle_accepts_a_failed_run_whose_log_ends_in_doubt_and_nothing_recorded_after():
    # Found by sentinel-year seed 2 at 2h: a run left in doubt by a crash,
    # resumed after a rollback, failed MigrationMissing before its flow ran;
    # its replay stops at the unresolved intent, the end of its history.
    from model.kernel.records import StepRecord
    from scenarios.invariants.replay_determinism import ReplayDeterminism

    store, record = new_store_and_record()

    async def flow(ctx, _input):
        await ctx.execute("charge", Backend().effect("charge", 1), idempotent=False)
        return await ctx.execute("after", Backend().effect("after", 2))

    with pytest.raises(Crash):
        drive(kernel(store, failpoints=CrashAt(KERNEL_EFFECT_DONE_BEFORE_RECORD)).run(record, flow))
    log = drive(store.load_steps("run-1"))
    failures = []
    oracle = ReplayDeterminism(lambda _record, _version: flow, lambda: 0)
    oracle.fail = lambda message, related=(): failures.append(message)
    failed = {"errorTag": "MigrationMissing", "message": "no transform"}
    oracle._check(record, log, "failed", failed)
    assert failures == []
    oracle._check(record, log, "completed", 2)  # a completed run cannot end in doubt
    assert len(failures) == 1 and "replay gave" in failures[0]
    # A step recorded past the unresolved intent: the run went on without knowing.
    later = log + (StepRecord("run-1", len(log) + 1, "after", STEP_COMPLETED, 2),)
    oracle._check(record, later, "failed", failed)
    assert len(failures) == 2 and "in doubt in its log" in failures[1], failures


def test_recovery_that_crashed_between_indoubt_and_park_still_parks():
    store, record = new_store_and_record()
    backend = Backend()

    async def flow(ctx, _input):
        return await ctx.execute("charge", backend.effect("charge", 1), idempotent=False)

    with pytest.raises(Crash):
        drive(kernel(store, failpoints=CrashAt(KERNEL_EFFECT_DONE_BEFORE_RECORD)).run(record, flow))

    class CrashOnPark:
        """The first recovery dies right after appending EFFECT_INDOUBT."""

        def __getattr__(self, name):
            if name == "park_execution":
                async def park(run_id):
                    raise Crash("died before park_execution")
                return park
            return getattr(store, name)

    with pytest.raises(Crash):
        drive(kernel(CrashOnPark()).run(drive(store.load_execution("run-1")), flow))
    assert [s[2] for s in steps(store)] == [STEP_STARTED, EFFECT_INDOUBT]
    assert status(store) == RUNNING

    outcome = drive(kernel(store).run(drive(store.load_execution("run-1")), flow))
    assert outcome.status == "parked"
    assert status(store) == PARKED
    assert backend.calls == {"charge": 1}


def test_rerun_of_a_parked_execution_stays_parked():
    store, record = new_store_and_record()
    backend = Backend()

    async def flow(ctx, _input):
        return await ctx.execute("charge", backend.effect("charge", 1), idempotent=False)

    with pytest.raises(Crash):
        drive(kernel(store, failpoints=CrashAt(KERNEL_EFFECT_DONE_BEFORE_RECORD)).run(record, flow))
    assert drive(kernel(store).run(drive(store.load_execution("run-1")), flow)).status == "parked"
    assert status(store) == PARKED

    again = drive(kernel(store).run(drive(store.load_execution("run-1")), flow))
    assert again.status == "parked"
    assert status(store) == PARKED
    assert backend.calls == {"charge": 1}


# --- pure replay --------------------------------------------------------------------


def _three_step_flow(backend: Any):
    async def flow(ctx, flow_input):
        a = await ctx.execute("a", backend.effect("a", flow_input["base"] + 1))
        await ctx.emit("finding", {"severity": "low", "a": a})
        b = await ctx.execute("b", backend.effect("b", {"a": a, "twice": a * 2}), idempotent=False)
        return {"a": a, "b": b}

    return flow


def test_replay_of_the_recorded_log_returns_the_same_output_and_touches_no_store():
    store, record = new_store_and_record(input={"base": 4})
    outcome = drive(kernel(store).run(record, _three_step_flow(Backend())))
    assert outcome.status == COMPLETED
    log = drive(store.load_steps("run-1"))

    # The replay flow's effects are bound to a store that refuses every call,
    # and replay has no kernel, hence no execution store, at all.
    exploding = ExplodingBackend()
    replayed = drive(replay(record, log, _three_step_flow(exploding)))
    assert replayed == outcome.output == {"a": 5, "b": {"a": 5, "twice": 10}}
    assert exploding.store.touched == []


def test_replay_raises_replay_incomplete_when_a_step_is_missing():
    store, record = new_store_and_record(input={"base": 0})
    drive(kernel(store).run(record, _three_step_flow(Backend())))
    log = drive(store.load_steps("run-1"))
    truncated = log[:2]  # "a" and the emitted finding; "b" is missing

    with pytest.raises(ReplayIncomplete) as info:
        drive(replay(record, truncated, _three_step_flow(ExplodingBackend())))
    assert (info.value.run_id, info.value.step_id) == ("run-1", "b")
    with pytest.raises(ReplayIncomplete):
        drive(replay(record, (), _three_step_flow(ExplodingBackend())))


def test_flow_asking_a_different_step_than_recorded_is_replay_divergence():
    store, record = new_store_and_record()
    backend = Backend()

    async def v1(ctx, _input):
        return await ctx.execute("fetch-v1", backend.effect("fetch-v1", 1))

    async def v2(ctx, _input):
        return await ctx.execute("fetch-v2", backend.effect("fetch-v2", 2))

    drive(kernel(store).run(record, v1))
    log = drive(store.load_steps("run-1"))

    with pytest.raises(ReplayDivergence) as info:
        drive(replay(record, log, v2))
    error = info.value
    assert (error.run_id, error.seq, error.recorded, error.requested) == ("run-1", 1, "fetch-v1", "fetch-v2")

    # A resumed run diverging is not settled as an ordinary failure either.
    store2, record2 = new_store_and_record()
    with pytest.raises(Crash):
        async def dying(ctx, _input):
            await ctx.execute("fetch-v1", backend.effect("fetch-v1", 1))

            async def die():
                raise Crash()

            # A writing effect makes earlier records durable before it runs.
            await ctx.execute("next", die)

        drive(kernel(store2).run(record2, dying))
    with pytest.raises(ReplayDivergence):
        drive(kernel(store2).run(record2, v2))
    assert status(store2) == RUNNING
    assert backend.calls == {"fetch-v1": 2}  # v2's effect never ran


# --- how a run settles ----------------------------------------------------------------


def test_flow_raising_a_typed_error_settles_failed_with_exactly_error_tag_and_message():
    store, record = new_store_and_record()
    error = StateContractMismatchError(VALIDATION_FAILED, contract_id="c", key="k",
                                       stored_version=1, current_version=1, detail="bad")

    async def flow(ctx, _input):
        await ctx.execute("a", Backend().effect("a", 1))
        raise error

    outcome = drive(kernel(store).run(record, flow))
    expected = {"errorTag": "StateContractMismatchError", "message": str(error)}
    assert outcome.status == FAILED and outcome.output == expected
    final = drive(store.load_execution("run-1"))
    assert final.status == FAILED and final.output == expected
    assert set(final.output) == {"errorTag", "message"}
    assert steps(store) == [(1, "a", STEP_COMPLETED, 1)]  # what ran stays recorded


def test_error_tag_is_the_name_attribute_when_set_else_the_class_name():
    class Tagged(Exception):
        name = "CustomTag"

    class Plain(Exception):
        pass

    assert error_output(Tagged("m")) == {"errorTag": "CustomTag", "message": "m"}
    assert error_output(Plain("p")) == {"errorTag": "Plain", "message": "p"}
    assert error_output(KeyError("k")) == {"errorTag": "KeyError", "message": "'k'"}


@pytest.mark.parametrize("error", [AttributeError("no attr"), ImportError("no module"),
                                   ModuleNotFoundError("no module")], ids=type)
def test_error_tag_of_builtin_errors_with_a_name_instance_attribute(error):
    assert error_output(error)["errorTag"] == type(error).__name__


def test_typed_error_during_a_flow_settles_once_and_a_rerun_is_idempotent():
    store, record = new_store_and_record()

    class Boom(Exception):
        name = "Boom"

    async def flow(ctx, _input):
        raise Boom("x")

    first = drive(kernel(store).run(record, flow))
    second = drive(kernel(store).run(drive(store.load_execution("run-1")), flow))
    assert first.output == second.output == {"errorTag": "Boom", "message": "x"}
    assert drive(store.load_execution("run-1")).status == FAILED


# --- application events ---------------------------------------------------------------


def test_emit_records_an_application_event_step():
    store, record = new_store_and_record()

    async def flow(ctx, _input):
        await ctx.emit("finding", {"severity": "high", "evidence": ["ref-1"]})
        await ctx.emit("finding", {"severity": "low", "evidence": []})
        return "done"

    outcome = drive(kernel(store).run(record, flow))
    assert outcome.status == COMPLETED
    log = drive(store.load_steps("run-1"))
    assert [(s.seq, s.step_id, s.kind, s.output) for s in log] == [
        (1, "emit:finding", STEP_COMPLETED, {"type": "finding", "payload": {"severity": "high", "evidence": ["ref-1"]}}),
        (2, "emit:finding", STEP_COMPLETED, {"type": "finding", "payload": {"severity": "low", "evidence": []}}),
    ]
    assert all(is_app_event(step) for step in log)
    # Replay folds the events without re-recording anything.
    assert drive(replay(record, log, flow)) == "done"


def test_effect_steps_are_not_app_events():
    store, record = new_store_and_record()

    async def flow(ctx, _input):
        await ctx.execute("a", Backend().effect("a", 1))
        await ctx.emit("finding", {})

    drive(kernel(store).run(record, flow))
    assert [is_app_event(s) for s in drive(store.load_steps("run-1"))] == [False, True]


def test_durable_state_failpoint_name_is_distinct_from_kernel_one():
    # Guard for the crash-point matrix: the kernel only hits its own point.
    store, record = new_store_and_record()
    failpoints = CrashAt(DURABLE_STATE_SAVE_AFTER_STORE_WRITE)

    async def flow(ctx, _input):
        return await ctx.execute("a", Backend().effect("a", 1))

    assert drive(kernel(store, failpoints=failpoints).run(record, flow)).status == COMPLETED
    assert failpoints.hits == [KERNEL_EFFECT_DONE_BEFORE_RECORD]


def test_the_kernels_errors_survive_pickling():
    """Sweep workers hand failures across processes: every typed error keeps its fields."""
    import pickle

    from model.kernel.kernel import EffectInDoubt, MigrationMissing, ReplayDivergence, ReplayIncomplete

    for error in (EffectInDoubt("r", "s"), ReplayDivergence("r", 1, "a", "b"), ReplayIncomplete("r", "s"),
                  MigrationMissing("r", 1, 2)):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error) and vars(copy) == vars(error)
