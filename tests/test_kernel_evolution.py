"""Kernel evolution seams: effect middleware (the claim-check
seam), contract-versioned migration of a resumed execution, and
opt-in input validation at start (D7).

Every store-touching test runs on both kernel stores. Coroutines are driven by
hand (``drive``) as in ``tests/test_kernel.py``: neither store ever suspends.
"""
from __future__ import annotations

import itertools
import pickle
from typing import Any

import pytest

from model.failpoints import KERNEL_EFFECT_DONE_BEFORE_RECORD
from model.kernel.kernel import (
    RETIRED,
    EffectInDoubt,
    ExecutionContext,
    InputValidationError,
    Kernel,
    MigrationMissing,
    ReplayDivergence,
    RunOutcome,
    effective_version,
    error_output,
    migration_step_id,
    replay,
)
from model.kernel.memory_store import InMemoryExecutionStore
from model.kernel.records import (
    COMPLETED,
    EFFECT_INDOUBT,
    EXECUTION_MIGRATED,
    FAILED,
    PARKED,
    RUNNING,
    STEP_COMPLETED,
    STEP_KINDS,
    STEP_STARTED,
    ExecutionNotRunning,
)
from model.kernel.sqlite_store import SqliteExecutionStore
from sim.runtime import SimRuntime


# --- harness -----------------------------------------------------------------------


def drive(coro: Any) -> Any:
    """Run a coroutine that must never suspend; return its value."""
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError(f"coroutine suspended (yielded {yielded!r})")


class Crash(BaseException):
    """The process died here. Not an Exception: nothing may swallow it."""


class CrashAt:
    def __init__(self, name: str) -> None:
        self.name = name
        self.fired = 0

    def hit(self, name: str) -> None:
        if name == self.name and not self.fired:
            self.fired += 1
            raise Crash(name)


class RecordingProbe:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))


class CountingStore:
    """Wraps a store; records every method call by name (and its arguments)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            return attr(*args, **kwargs)

        return call

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]


class Backend:
    """The outside world: counts effect runs per name."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def effect(self, name: str, output: Any):
        async def run() -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return output

        return run


def die(name: str = "died"):
    async def run() -> Any:
        raise Crash(name)

    return run


@pytest.fixture(params=["memory", "sqlite"])
def new_store(request, tmp_path):
    """A factory of fresh, empty kernel stores of one kind."""
    opened: list[SqliteExecutionStore] = []
    counter = itertools.count()

    def make() -> Any:
        if request.param == "memory":
            return InMemoryExecutionStore()
        store = SqliteExecutionStore.open(str(tmp_path / f"kernel-{next(counter)}.db"))
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def start(store: Any, run_id: str = "run-1", *, flow_version: int = 1, input: Any = None,
          schedule_id: str | None = None, occurrence_ms: int | None = None):
    outcome = drive(store.start_execution(run_id, schedule_id=schedule_id, occurrence_ms=occurrence_ms,
                                          flow_version=flow_version, input=input, started_at_ms=0))
    assert outcome.replayed is False
    return outcome.record


def kernel(store: Any, **kwargs: Any) -> Kernel:
    return Kernel(SimRuntime(), store, **kwargs)


def steps(store: Any, run_id: str = "run-1") -> list[tuple[int, str, str, Any]]:
    return [(s.seq, s.step_id, s.kind, s.output) for s in drive(store.load_steps(run_id))]


def load(store: Any, run_id: str = "run-1"):
    return drive(store.load_execution(run_id))


def contents(store: Any, run_ids: list[str]) -> list[Any]:
    return [(load(store, run_id), drive(store.load_steps(run_id))) for run_id in run_ids]


# --- 1. effect middleware ---------------------------------------------


class ClaimCheck:
    """A toy claim-check: outputs over ``cap`` characters become a reference."""

    def __init__(self, cap: int = 10) -> None:
        self.cap = cap
        self.seen: list[tuple[str | None, str, Any]] = []
        self.blobs: dict[str, Any] = {}

    async def on_output(self, tool: str | None, step_id: str, output: Any) -> Any:
        self.seen.append((tool, step_id, output))
        if isinstance(output, str) and len(output) > self.cap:
            ref = f"blob-{len(self.blobs)}"
            self.blobs[ref] = output
            return {"ref": ref, "size": len(output)}
        return output


class Tagger:
    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.calls = 0

    async def on_output(self, tool: str | None, step_id: str, output: Any) -> Any:
        self.calls += 1
        return {"tag": self.tag, "tool": tool, "inner": output}


def test_middleware_output_is_what_is_recorded_and_what_the_flow_gets(new_store):
    store = new_store()
    record = start(store)
    claim = ClaimCheck(cap=10)
    seen: list[Any] = []

    async def flow(ctx, _input):
        small = await ctx.execute("small", Backend().effect("small", "tiny"), tool="stats")
        big = await ctx.execute("big", Backend().effect("big", "x" * 50), tool="explain")
        seen.extend([small, big])
        return {"small": small, "big": big}

    outcome = drive(kernel(store, middleware=(claim,)).run(record, flow))

    ref = {"ref": "blob-0", "size": 50}
    assert outcome == RunOutcome("run-1", COMPLETED, {"small": "tiny", "big": ref}, 0, 2)
    assert seen == ["tiny", ref]
    assert steps(store) == [(1, "small", STEP_COMPLETED, "tiny"), (2, "big", STEP_COMPLETED, ref)]
    assert claim.seen == [("stats", "small", "tiny"), ("explain", "big", "x" * 50)]
    assert claim.blobs == {"blob-0": "x" * 50}


def test_middleware_runs_in_order_and_emit_passes_no_tool(new_store):
    store = new_store()
    record = start(store)
    first, second = Tagger("first"), Tagger("second")

    async def flow(ctx, _input):
        await ctx.emit("finding", {"n": 1})
        return await ctx.execute("a", Backend().effect("a", 1), tool="t")

    drive(kernel(store, middleware=(first, second)).run(record, flow))
    assert steps(store) == [
        (1, "emit:finding", STEP_COMPLETED,
         {"tag": "second", "tool": None, "inner": {"tag": "first", "tool": None,
                                                   "inner": {"type": "finding", "payload": {"n": 1}}}}),
        (2, "a", STEP_COMPLETED, {"tag": "second", "tool": "t", "inner": {"tag": "first", "tool": "t", "inner": 1}}),
    ]


def test_middleware_never_runs_on_fold_or_replay(new_store):
    store = new_store()
    record = start(store)
    claim = ClaimCheck(cap=3)
    backend = Backend()

    async def flow(ctx, _input):
        a = await ctx.execute("a", backend.effect("a", "abcdef"), tool="read")
        b = await ctx.execute("b", backend.effect("b", "ghijkl"), tool="read")
        return [a, b]

    first = drive(kernel(store, middleware=(claim,)).run(record, flow))
    assert len(claim.seen) == 2

    # A resumed run folds the recorded (already claim-checked) values: the
    # middleware is not called again, and no value is checked twice.
    again = drive(kernel(store, middleware=(claim,)).run(load(store), flow))
    assert (again.output, again.steps_replayed, again.steps_executed) == (first.output, 2, 0)
    # Pure replay has no kernel and so no middleware at all.
    assert drive(replay(record, drive(store.load_steps("run-1")), flow)) == first.output
    assert len(claim.seen) == 2
    assert backend.calls == {"a": 1, "b": 1}
    assert first.output == [{"ref": "blob-0", "size": 6}, {"ref": "blob-1", "size": 6}]


def test_middleware_runs_before_the_record_failpoint_and_again_on_rerun(new_store):
    store = new_store()
    record = start(store)
    claim = ClaimCheck(cap=3)

    async def flow(ctx, _input):
        return await ctx.execute("a", Backend().effect("a", "abcdef"), tool="read")

    with pytest.raises(Crash):
        drive(kernel(store, middleware=(claim,),
                     failpoints=CrashAt(KERNEL_EFFECT_DONE_BEFORE_RECORD)).run(record, flow))
    assert len(claim.seen) == 1 and steps(store) == []
    outcome = drive(kernel(store, middleware=(claim,)).run(load(store), flow))
    assert outcome.output == {"ref": "blob-1", "size": 6}  # re-run effect, re-checked
    assert len(claim.seen) == 2


def test_middleware_returning_a_non_json_value_fails_loudly(new_store):
    store = new_store()
    record = start(store)

    class Bad:
        async def on_output(self, tool, step_id, output):
            return {1, 2}

    async def flow(ctx, _input):
        return await ctx.execute("a", Backend().effect("a", 1))

    outcome = drive(kernel(store, middleware=(Bad(),)).run(record, flow))
    assert outcome.status == FAILED and outcome.output["errorTag"] == "TypeError"
    assert steps(store) == []


def test_middleware_without_on_output_is_refused():
    with pytest.raises(TypeError):
        kernel(InMemoryExecutionStore(), middleware=(object(),))


# --- 2. contract-versioned migration of a resumed run ---------------------------


def to_cents(step_id: str, output: Any) -> Any:
    """v1 recorded prices in dollars ({"usd": 1.5}); v2 expects {"cents": 150}."""
    if isinstance(output, dict) and "usd" in output:
        return {"cents": round(output["usd"] * 100)}
    return output


def flow_v1(backend: Backend, *, crash_after: str | None = None):
    async def flow(ctx, _input):
        price = await ctx.execute("price", backend.effect("price", {"usd": 1.5}))
        await ctx.emit("seen", {"price": price})
        if crash_after == "price":
            await ctx.execute("boom", die())
        qty = await ctx.execute("qty", backend.effect("qty", 3))
        return {"total_usd": price["usd"] * qty}

    return flow


def flow_v2(backend: Backend, seen: list | None = None):
    async def flow(ctx, _input):
        price = await ctx.execute("price", backend.effect("price", {"cents": 999}))
        await ctx.emit("seen", {"price": price})
        if seen is not None:
            seen.append(price)
        qty = await ctx.execute("qty", backend.effect("qty", 3))
        return {"total_cents": price["cents"] * qty}

    return flow


def crashed_v1_run(store: Any, backend: Backend):
    """A v1 run that recorded ``price`` and its event, then died."""
    record = start(store, flow_version=1)
    with pytest.raises(Crash):
        drive(kernel(store).run(record, flow_v1(backend, crash_after="price")))
    assert [s[1] for s in steps(store)] == ["price", "emit:seen"]
    return record


def test_migrated_resume_records_one_marker_and_the_flow_sees_transformed_outputs(new_store):
    store = new_store()
    backend = Backend()
    record = crashed_v1_run(store, backend)
    probe = RecordingProbe()
    seen: list[Any] = []

    k = kernel(store, transforms={(1, 2): to_cents}, probe=probe)
    outcome = drive(k.run(load(store), flow_v2(backend, seen), flow_version=2))

    assert outcome == RunOutcome("run-1", COMPLETED, {"total_cents": 450}, 2, 1)
    assert seen == [{"cents": 150}]  # recorded {"usd": 1.5}, transformed
    assert backend.calls == {"price": 1, "qty": 1}  # nothing re-ran
    assert steps(store) == [
        (1, "price", STEP_COMPLETED, {"usd": 1.5}),  # the log itself is never rewritten
        (2, "emit:seen", STEP_COMPLETED, {"type": "seen", "payload": {"price": {"usd": 1.5}}}),
        (3, "migrate:1->2", EXECUTION_MIGRATED, {"from": 1, "to": 2}),
        (4, "qty", STEP_COMPLETED, 3),
    ]
    assert probe.events == [("kernel.migrated", {"run": "run-1", "from_version": 1, "to_version": 2})]
    log = drive(store.load_steps("run-1"))
    assert effective_version(record, log) == 2 and effective_version(record, log[:2]) == 1
    assert load(store).flow_version == 1  # the record keeps the version it started on

    # Resumed again on v2: the marker is already there, so nothing is appended.
    again = drive(k.run(load(store), flow_v2(backend), flow_version=2))
    assert again.output == {"total_cents": 450}
    assert len(steps(store)) == 4

    # Replay with the transforms reproduces the output and touches no store.
    assert drive(replay(record, log, flow_v2(Backend()), transforms={(1, 2): to_cents})) == {"total_cents": 450}
    # Without them it fails loudly instead of folding v1 values into v2.
    with pytest.raises(MigrationMissing) as info:
        drive(replay(record, log, flow_v2(Backend())))
    assert (info.value.run_id, info.value.from_version, info.value.to_version) == ("run-1", 1, 2)
    # With a different transform the replay diverges from the recorded output.
    assert drive(replay(record, log, flow_v2(Backend()), transforms={(1, 2): lambda s, o: {"cents": 1}})) \
        == {"total_cents": 3}


def test_missing_transform_raises_and_leaves_the_execution_untouched(new_store):
    inner = new_store()
    backend = Backend()
    crashed_v1_run(inner, backend)
    before = contents(inner, ["run-1"])
    store = CountingStore(inner)
    probe = RecordingProbe()
    ran: list[str] = []

    async def v2(ctx, _input):
        ran.append("v2")
        return None

    with pytest.raises(MigrationMissing) as info:
        drive(kernel(store, probe=probe, transforms={(2, 3): to_cents}).run(load(inner), v2, flow_version=2))
    error = info.value
    assert (error.name, error.run_id, error.from_version, error.to_version) == ("MigrationMissing", "run-1", 1, 2)
    assert store.names() == ["load_steps"]  # read the log; wrote nothing
    assert contents(inner, ["run-1"]) == before
    assert load(inner).status == RUNNING and ran == [] and probe.events == []
    # The caller may still resume it on its own version.
    outcome = drive(kernel(inner).run(load(inner), flow_v1(backend), flow_version=1))
    assert outcome.output == {"total_usd": 4.5}


def test_chained_migration_over_two_resumes(new_store):
    store = new_store()
    backend = Backend()
    t12 = lambda step_id, out: {"v2": out} if step_id != "emit:mark" else out  # noqa: E731
    t23 = lambda step_id, out: {"v3": out}  # noqa: E731
    transforms = {(1, 2): t12, (2, 3): t23}
    record = start(store, flow_version=1)
    seen: list[Any] = []

    async def v1(ctx, _input):
        await ctx.execute("a", backend.effect("a", "A"))
        await ctx.execute("crash", die())

    async def v2(ctx, _input):
        a = await ctx.execute("a", backend.effect("a", "A2"))
        await ctx.execute("b", backend.effect("b", "B"))
        await ctx.execute("crash", die())

    async def v3(ctx, _input):
        a = await ctx.execute("a", backend.effect("a", "A3"))
        b = await ctx.execute("b", backend.effect("b", "B3"))
        c = await ctx.execute("c", backend.effect("c", "C"))
        seen.append((a, b, c))
        return [a, b, c]

    with pytest.raises(Crash):
        drive(kernel(store, transforms=transforms).run(record, v1, flow_version=1))
    with pytest.raises(Crash):
        drive(kernel(store, transforms=transforms).run(load(store), v2, flow_version=2))
    outcome = drive(kernel(store, transforms=transforms).run(load(store), v3, flow_version=3))

    expected = [{"v3": {"v2": "A"}}, {"v3": "B"}, "C"]
    assert outcome.status == COMPLETED and outcome.output == expected and seen == [tuple(expected)]
    assert backend.calls == {"a": 1, "b": 1, "c": 1}
    assert steps(store) == [
        (1, "a", STEP_COMPLETED, "A"),
        (2, migration_step_id(1, 2), EXECUTION_MIGRATED, {"from": 1, "to": 2}),
        (3, "b", STEP_COMPLETED, "B"),
        (4, "migrate:2->3", EXECUTION_MIGRATED, {"from": 2, "to": 3}),
        (5, "c", STEP_COMPLETED, "C"),
    ]
    log = drive(store.load_steps("run-1"))
    assert effective_version(record, log) == 3
    assert drive(replay(record, log, v3, transforms=transforms)) == expected
    with pytest.raises(MigrationMissing) as info:
        drive(replay(record, log, v3, transforms={(2, 3): t23}))
    assert (info.value.from_version, info.value.to_version) == (1, 2)
    # A kernel missing an earlier link of the chain refuses the next resume
    # before writing anything, even though the last link is registered.
    before = contents(store, ["run-1"])
    with pytest.raises(MigrationMissing):
        drive(kernel(store, transforms={(3, 4): t23}).run(load(store), v3, flow_version=4))
    assert contents(store, ["run-1"]) == before


def test_same_version_and_empty_log_need_no_migration(new_store):
    store = new_store()
    backend = Backend()
    record = start(store, flow_version=1)
    counting = CountingStore(store)

    # Empty log on another version: no transform needed (nothing to fold),
    # but the log is marked, so a later resume knows its steps are v2's.
    outcome = drive(kernel(counting).run(record, flow_v2(backend), fresh=True, flow_version=2))
    assert outcome.output == {"total_cents": 999 * 3}
    assert [s[2] for s in steps(store)] == [EXECUTION_MIGRATED] + [STEP_COMPLETED] * 3
    assert counting.names() == ["append_step", "append_steps", "finish_execution"]  # marker, group commit, finish
    assert effective_version(record, drive(store.load_steps(record.run_id))) == 2

    # Same version as the record: exactly the unversioned behaviour.
    store2 = new_store()
    record2 = start(store2, flow_version=1)
    with pytest.raises(Crash):
        drive(kernel(store2).run(record2, flow_v1(backend, crash_after="price")))
    drive(kernel(store2).run(load(store2), flow_v1(backend), flow_version=1))
    assert EXECUTION_MIGRATED not in [s[2] for s in steps(store2)]


def test_migrating_a_run_left_in_doubt_parks_it_past_the_marker(new_store):
    # A non-idempotent effect died between effect and record; the run is then
    # resumed on v2. The intent is still in doubt: the kernel parks the run,
    # with EFFECT_INDOUBT appended after the migration marker.
    store = new_store()
    backend = Backend()
    record = start(store, flow_version=1)

    async def charge_v1(ctx, _input):
        return await ctx.execute("charge", backend.effect("charge", {"usd": 2}), idempotent=False)

    seen: list[Any] = []

    async def charge_v2(ctx, _input):
        out = await ctx.execute("charge", backend.effect("charge", {"cents": 1}), idempotent=False)
        seen.append(out)
        return out

    with pytest.raises(Crash):
        drive(kernel(store, failpoints=CrashAt(KERNEL_EFFECT_DONE_BEFORE_RECORD)).run(record, charge_v1))
    k = kernel(store, transforms={(1, 2): to_cents})
    parked = drive(k.run(load(store), charge_v2, flow_version=2))
    assert parked.status == PARKED and load(store).status == PARKED
    assert steps(store) == [
        (1, "charge", STEP_STARTED, None),
        (2, "migrate:1->2", EXECUTION_MIGRATED, {"from": 1, "to": 2}),
        (3, "charge", EFFECT_INDOUBT, None),
    ]
    with pytest.raises(EffectInDoubt):
        drive(replay(record, drive(store.load_steps("run-1")), charge_v2, transforms={(1, 2): to_cents}))

    # An operator resolves it (in v2 terms, after the migration); it folds.
    drive(store.append_step("run-1", 4, "charge", STEP_COMPLETED, {"cents": 200}))
    done = drive(k.run(load(store), charge_v2, flow_version=2))
    assert done.status == COMPLETED and done.output == {"cents": 200} and seen == [{"cents": 200}]
    assert backend.calls == {"charge": 1}


def test_migrating_a_finished_run_is_refused_by_the_store(new_store):
    store = new_store()
    record = start(store, flow_version=1)
    drive(kernel(store).run(record, flow_v1(Backend())))
    with pytest.raises(ExecutionNotRunning):
        drive(kernel(store, transforms={(1, 2): to_cents}).run(load(store), flow_v2(Backend()), flow_version=2))
    assert EXECUTION_MIGRATED not in [s[2] for s in steps(store)]


def test_transform_gets_a_copy_and_its_output_is_normalised_to_json(new_store):
    store = new_store()
    backend = Backend()
    crashed_v1_run(store, backend)

    def mutating(step_id: str, output: Any) -> Any:
        if isinstance(output, dict):
            output["touched"] = True
        return (output, step_id)  # a tuple: folded as a list, like any recorded value

    seen: list[Any] = []

    async def v2(ctx, _input):
        seen.append(await ctx.execute("price", backend.effect("price", None)))
        return None

    log_before = drive(store.load_steps("run-1"))
    drive(kernel(store, transforms={(1, 2): mutating}).run(load(store), v2, flow_version=2))
    assert seen == [[{"usd": 1.5, "touched": True}, "price"]]
    assert log_before[0].output == {"usd": 1.5}
    assert steps(store)[0] == (1, "price", STEP_COMPLETED, {"usd": 1.5})


def test_execution_context_constructor_stays_compatible(new_store):
    # The replay-determinism invariant builds contexts positionally.
    store = new_store()
    record = start(store)
    drive(kernel(store).run(record, flow_v1(Backend())))
    ctx = ExecutionContext(None, record, drive(store.load_steps("run-1")), replay_only=True)
    assert ctx.replaying


def test_bad_transform_keys_are_refused():
    for key in [(1, 1), (1,), ("1", 2), (True, 2), [1, 2]]:
        with pytest.raises(TypeError):
            kernel(InMemoryExecutionStore(), transforms={key if not isinstance(key, list) else (1, 2, 3): to_cents})


def test_new_step_kind_is_known():
    assert EXECUTION_MIGRATED in STEP_KINDS


# --- 3. D7: opt-in input validation at start -------------------------------------------


def needs_limit(value: Any) -> str | None:
    if not isinstance(value, dict) or type(value.get("limit")) is not int:
        return "input.limit must be an int"
    return None


SCHEMAS = {1: needs_limit}


def counted_flow(calls: list[str]):
    async def flow(ctx, flow_input):
        calls.append(ctx.run_id)
        await ctx.emit("seen", flow_input)
        return await ctx.execute("read", Backend().effect("read", flow_input["limit"] * 2))

    return flow


def rejection(run_id: str, version: int = 1, reason: str = "input.limit must be an int") -> dict:
    return error_output(InputValidationError(run_id, version, reason))


def test_bad_input_fails_typed_on_the_schedule_path_without_calling_the_flow(new_store):
    store = new_store()
    record = start(store, "sched@1000", schedule_id="sched", occurrence_ms=1_000, input={"limit": "ten"})
    calls: list[str] = []
    probe = RecordingProbe()

    outcome = drive(kernel(store, input_schemas=SCHEMAS, probe=probe).run(record, counted_flow(calls), fresh=True))

    expected = rejection("sched@1000")
    assert expected == {"errorTag": "InputValidationError",
                        "message": "sched@1000: input rejected by the input schema of flow version 1: "
                                   "input.limit must be an int"}
    assert outcome == RunOutcome("sched@1000", FAILED, expected, 0, 0)
    assert calls == [] and steps(store, "sched@1000") == []
    final = load(store, "sched@1000")
    assert (final.status, final.output) == (FAILED, expected)
    assert drive(store.live_executions("sched")) == ()  # the schedule's live slot is free again
    assert probe.events == [("kernel.input_rejected",
                             {"run": "sched@1000", "version": 1, "reason": "input.limit must be an int"})]


def test_bad_input_fails_a_resumed_run_that_never_stepped(new_store):
    # Started, then the node died before the first step: recovery resumes it
    # with the log read back (fresh=False). Still its start: validated.
    store = new_store()
    start(store, input={"limit": None})
    calls: list[str] = []
    outcome = drive(kernel(store, input_schemas=SCHEMAS).run(load(store), counted_flow(calls)))
    assert (outcome.status, outcome.output) == (FAILED, rejection("run-1"))
    assert calls == [] and load(store).status == FAILED
    # Resuming the failed run again is idempotent.
    again = drive(kernel(store, input_schemas=SCHEMAS).run(load(store), counted_flow(calls)))
    assert (again.status, again.output) == (FAILED, rejection("run-1")) and calls == []


def test_bad_input_fails_on_kernel_start_and_a_repeated_start_does_not_run(new_store):
    store = new_store()
    calls: list[str] = []
    k = kernel(store, input_schemas=SCHEMAS)
    outcome = drive(k.start("direct-1", flow=counted_flow(calls), flow_version=1, input={"limit": [1]}))
    assert outcome == RunOutcome("direct-1", FAILED, rejection("direct-1"), 0, 0)
    assert calls == []
    repeated = drive(k.start("direct-1", flow=counted_flow(calls), flow_version=1, input={"limit": 5}))
    assert repeated == RunOutcome("direct-1", FAILED, rejection("direct-1"), 0, 0)
    assert calls == [] and load(store, "direct-1").input == {"limit": [1]}


def test_kernel_start_runs_a_good_input_and_reports_duplicates_and_retired_runs(new_store):
    store = new_store()
    calls: list[str] = []
    k = kernel(store, input_schemas=SCHEMAS)
    ok = drive(k.start("s@2000", flow=counted_flow(calls), flow_version=1, input={"limit": 4},
                       schedule_id="s", occurrence_ms=2_000))
    assert ok == RunOutcome("s@2000", COMPLETED, 8, 0, 2)
    again = drive(k.start("s@2000", flow=counted_flow(calls), flow_version=1, input={"limit": 4},
                          schedule_id="s", occurrence_ms=2_000))
    assert again == RunOutcome("s@2000", COMPLETED, 8, 0, 0)
    retired = drive(k.start("s@1000", flow=counted_flow(calls), flow_version=1, input={"limit": 4},
                            schedule_id="s", occurrence_ms=1_000))
    assert retired == RunOutcome("s@1000", RETIRED, None, 0, 0)
    assert calls == ["s@2000"]
    # A live duplicate is reported as it stands, not run.
    start(store, "live", input={"limit": 1})
    assert drive(k.start("live", flow=counted_flow(calls), flow_version=1, input={"limit": 1})) \
        == RunOutcome("live", RUNNING, None, 0, 0)
    assert calls == ["s@2000"]


def test_validator_of_the_version_the_run_will_run_on(new_store):
    store = new_store()
    record = start(store, flow_version=1, input={"limit": 1})
    schemas = {1: needs_limit, 2: lambda value: None if "window" in value else "input.window is required"}
    outcome = drive(kernel(store, input_schemas=schemas).run(record, counted_flow([]), fresh=True, flow_version=2))
    assert (outcome.status, outcome.output) == (FAILED, rejection("run-1", 2, "input.window is required"))


def test_no_validator_for_the_version_means_no_check(new_store):
    store = new_store()
    record = start(store, flow_version=7, input={"limit": 2})
    calls: list[str] = []
    outcome = drive(kernel(store, input_schemas=SCHEMAS).run(record, counted_flow(calls), fresh=True))
    assert outcome.status == COMPLETED and calls == ["run-1"]


def test_a_run_that_already_stepped_is_not_validated_again(new_store):
    store = new_store()
    record = start(store, input={"limit": 3})
    calls: list[str] = []

    async def dying(ctx, flow_input):
        await ctx.emit("seen", flow_input)
        await ctx.execute("boom", die())

    with pytest.raises(Crash):
        drive(kernel(store).run(record, dying))
    assert len(steps(store)) == 1
    # The schema got stricter since; a run past its start is not re-judged.
    strict = {1: lambda value: "everything is rejected now"}
    outcome = drive(kernel(store, input_schemas=strict).run(load(store), counted_flow(calls)))
    assert outcome.status == COMPLETED and outcome.output == 6


def test_passing_validation_makes_no_store_calls_and_emits_nothing(new_store):
    results = []
    for schemas in (None, SCHEMAS):
        store = CountingStore(new_store())
        probe = RecordingProbe()
        record = start(store, "sched@1000", schedule_id="sched", occurrence_ms=1_000, input={"limit": 3})
        calls: list[str] = []
        k = kernel(store, input_schemas=schemas, probe=probe)
        outcome = drive(k.run(record, counted_flow(calls), fresh=True))
        # And the resumed-empty-log path.
        start(store, "other", input={"limit": 5})
        resumed = drive(k.run(load(store, "other"), counted_flow(calls)))
        results.append((outcome, resumed, calls, probe.events, store.calls))
    assert results[0] == results[1]
    assert results[0][0].status == COMPLETED


def _workload(k: Kernel, store: Any) -> None:
    """A mixed workload: fresh scheduled run, direct start, resumed crash."""
    record = start(store, "sched@1000", schedule_id="sched", occurrence_ms=1_000, input={"limit": 1})
    drive(k.run(record, counted_flow([]), fresh=True))
    drive(k.start("direct", flow=counted_flow([]), flow_version=1, input={"limit": 2}))
    record = start(store, "crashy", input={"limit": 3})

    async def dying(ctx, flow_input):
        await ctx.emit("seen", flow_input)
        await ctx.execute("boom", die())

    with pytest.raises(Crash):
        drive(k.run(record, dying))
    drive(k.run(load(store, "crashy"), counted_flow([])))


def test_unwired_is_identical_to_wired_with_a_passing_validator(new_store):
    unwired, wired = new_store(), new_store()
    _workload(kernel(unwired), unwired)
    _workload(kernel(wired, input_schemas=SCHEMAS), wired)
    run_ids = ["sched@1000", "direct", "crashy"]
    assert contents(unwired, run_ids) == contents(wired, run_ids)
    assert unwired.counts() == wired.counts()
    assert all(record.status == COMPLETED for record, _ in contents(wired, run_ids))


def test_validator_must_return_none_or_a_str(new_store):
    store = new_store()
    record = start(store, input={"limit": 1})
    with pytest.raises(TypeError):
        drive(kernel(store, input_schemas={1: lambda value: False}).run(record, counted_flow([]), fresh=True))
    assert load(store).status == RUNNING


def test_validator_gets_a_copy_of_the_input(new_store):
    store = new_store()
    record = start(store, input={"limit": 1})

    def mutating(value: Any) -> None:
        value["limit"] = "changed"
        return None

    outcome = drive(kernel(store, input_schemas={1: mutating}).run(record, counted_flow([]), fresh=True))
    assert outcome.output == 2


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize("error", [MigrationMissing("r", 1, 2), InputValidationError("r", 3, "bad")], ids=type)
def test_errors_carry_fields_and_survive_pickling(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error) and copy.__dict__ == error.__dict__
    assert error_output(copy)["errorTag"] == type(error).name


def test_replay_divergence_still_detected_after_migration(new_store):
    store = new_store()
    backend = Backend()
    crashed_v1_run(store, backend)
    k = kernel(store, transforms={(1, 2): to_cents})
    drive(k.run(load(store), flow_v2(backend), flow_version=2))

    async def other(ctx, _input):
        return await ctx.execute("not-price", backend.effect("x", 1))

    with pytest.raises(ReplayDivergence) as info:
        drive(replay(load(store), drive(store.load_steps("run-1")), other, transforms={(1, 2): to_cents}))
    assert (info.value.seq, info.value.recorded) == (1, "price")
