"""durableState(): contracts and the handle, as recorded effects inside kernel runs (durable-state contracts, the handle, schedule-scoped keys).

Reads top to bottom: load and save on an empty key; migration on load,
recorded in STEP_COMPLETED and persisted by the next save; the four typed
``StateContractMismatchError`` kinds; save validation; adopt-own-write
after a crash between the store write and the step record, and every way a
conflict must stay loud; a third-party backend's conflict matched by name;
``sentinel_state`` / ``SentinelState``; the probe events.

Every load/save runs inside a real execution (``InMemoryExecutionStore`` +
``Kernel``). The memory stores never suspend, so coroutines are driven by
hand (``drive``).
"""
from __future__ import annotations

from typing import Any

import pytest

from model.canonical import digest
from model.durable_state.contracts import (
    FUTURE_VERSION,
    MIGRATION_FAILED,
    NO_MIGRATION_PATH,
    VALIDATION_FAILED,
    StateContract,
    StateContractMismatchError,
)
from model.durable_state.handle import DurableState, SentinelState, sentinel_state
from model.durable_state.memory_store import InMemoryDurableStateStore
from model.durable_state.store import DurableStateRecord, DurableStateWrite, RevisionConflictError
from model.failpoints import DURABLE_STATE_SAVE_AFTER_STORE_WRITE, NO_FAILPOINTS
from model.kernel.kernel import Kernel, replay
from model.kernel.memory_store import InMemoryExecutionStore
from model.kernel.records import COMPLETED, FAILED, RUNNING, STEP_COMPLETED
from sim.runtime import SimRuntime

KEY = "agent:state"
CID = "agent.state"


# --- harness -------------------------------------------------------------------



def adoptions(probe):
    """The ``ds.saved`` events that adopted an earlier write, without the flag."""
    return [{k: v for k, v in fields.items() if k != "adopted"}
            for fields in probe.of("ds.saved") if fields["adopted"]]

def drive(coro: Any) -> Any:
    """Run a coroutine that must never suspend; return its value."""
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError(f"coroutine suspended (yielded {yielded!r}); the memory stores never suspend")


class Crash(BaseException):
    """The process died here."""


class CrashAt:
    """Failpoints that kill the process the first time ``name`` is hit."""

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

    def of(self, kind: str) -> list[dict]:
        return [fields for k, fields in self.events if k == kind]


class CountingStore:
    """Wraps a durable-state store and counts calls (successful saves separately)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.saves_committed = 0

    async def load(self, key):
        self.calls.append("load")
        return await self.inner.load(key)

    async def save(self, key, write, expected_revision):
        self.calls.append("save")
        record = await self.inner.save(key, write, expected_revision)
        self.saves_committed += 1
        return record

    async def clear(self, key):
        self.calls.append("clear")
        return await self.inner.clear(key)


class RefusingStore:
    """A durable-state store that fails the test on any call (replay must not touch it)."""

    def __init__(self) -> None:
        self.calls = 0

    async def load(self, key):
        self.calls += 1
        raise AssertionError("replay called load")

    async def save(self, key, write, expected_revision):
        self.calls += 1
        raise AssertionError("replay called save")

    async def clear(self, key):
        self.calls += 1
        raise AssertionError("replay called clear")


# Contracts. v1: {"count": int, ...}; v2 adds "tags": list; v3 adds "owner": str.

def validate_v1(payload: Any) -> str | None:
    if not isinstance(payload, dict) or type(payload.get("count")) is not int:
        return "v1 state needs an integer count"
    return None


def validate_v2(payload: Any) -> str | None:
    problem = validate_v1(payload)
    if problem is None and not isinstance(payload.get("tags"), list):
        problem = "v2 state needs a tags list"
    return problem


def validate_v3(payload: Any) -> str | None:
    problem = validate_v2(payload)
    if problem is None and not isinstance(payload.get("owner"), str):
        problem = "v3 state needs an owner"
    return problem


def migrate_1_to_2(payload: dict) -> dict:
    return {**payload, "tags": []}


def migrate_2_to_3(payload: dict) -> dict:
    return {**payload, "owner": "nobody"}


V1 = StateContract(CID, 1, validate_v1)
V2 = StateContract(CID, 2, validate_v2, {1: migrate_1_to_2})
V3_NO_PATH = StateContract(CID, 3, validate_v3, {1: migrate_1_to_2})  # no 2 -> 3


class World:
    """One execution store + one durable-state store; runs flows as executions."""

    def __init__(self, ds: Any = None) -> None:
        self.executions = InMemoryExecutionStore()
        self.ds = ds if ds is not None else InMemoryDurableStateStore()
        self.runtime = SimRuntime()
        self._runs = 0

    def start(self, run_id: str | None = None):
        if run_id is None:
            self._runs += 1
            run_id = f"run-{self._runs}"
        outcome = drive(self.executions.start_execution(run_id, schedule_id=None, occurrence_ms=None,
                                                        flow_version=1, input=None, started_at_ms=0))
        return outcome.record

    def run(self, flow, record=None, *, failpoints=None, probe=None):
        record = self.start() if record is None else drive(self.executions.load_execution(record.run_id))
        kwargs = {}
        if failpoints is not None:
            kwargs["failpoints"] = failpoints
        if probe is not None:
            kwargs["probe"] = probe
        return record, drive(Kernel(self.runtime, self.executions, **kwargs).run(record, flow))

    def handle(self, contract: StateContract, *, store: Any = None, **kwargs: Any) -> DurableState:
        return DurableState(contract, KEY, self.ds if store is None else store, **kwargs)

    def steps(self, record) -> list[tuple[str, str, Any]]:
        return [(s.step_id, s.kind, s.output) for s in drive(self.executions.load_steps(record.run_id))]

    def stored(self, key: str = KEY) -> DurableStateRecord | None:
        return drive(self.ds.load(key))

    def put(self, version: int, payload: Any, expected: int) -> DurableStateRecord:
        """Someone else (an operator, another writer) saves directly to the store."""
        return drive(self.ds.save(KEY, DurableStateWrite(version, payload), expected))


def load_flow(handle: DurableState, seen: list | None = None):
    async def flow(ctx, _input):
        try:
            return await handle.load(ctx)
        except StateContractMismatchError as mismatch:
            if seen is not None:
                seen.append(mismatch)
            raise

    return flow


def save_flow(handle: DurableState, payload: Any, expected: int, seen: list | None = None):
    async def flow(ctx, _input):
        try:
            return await handle.save(ctx, payload, expected)
        except Exception as error:
            if seen is not None:
                seen.append(error)
            raise

    return flow


def load_then_save_flow(handle: DurableState, make_payload, *, between=None):
    """The wake-cycle shape: load, compute, save at the loaded revision."""

    async def flow(ctx, _input):
        loaded = await handle.load(ctx)
        revision = 0 if loaded is None else loaded["revision"]
        if between is not None:
            between()
        saved = await handle.save(ctx, make_payload(loaded), revision)
        return {"loaded": loaded, "saved": saved}

    return flow


# --- load / save basics ------------------------------------------------------------


def test_load_of_an_absent_key_returns_none_and_records_it():
    w = World()
    record, outcome = w.run(load_flow(w.handle(V1)))
    assert outcome.status == COMPLETED and outcome.output is None
    assert w.steps(record) == [(f"{CID}.load", STEP_COMPLETED, None)]


def test_save_with_expected_zero_creates_revision_one_at_the_current_contract_version():
    w = World()
    record, outcome = w.run(save_flow(w.handle(V2), {"count": 1, "tags": ["a"]}, 0))
    expected = {"revision": 1, "contractVersion": 2, "adopted": False}
    assert outcome.status == COMPLETED and outcome.output == expected
    assert w.steps(record) == [(f"{CID}.save", STEP_COMPLETED, expected)]
    assert w.stored() == DurableStateRecord(2, 1, {"count": 1, "tags": ["a"]})


def test_load_after_save_returns_the_envelope_without_migrated():
    w = World()
    w.run(save_flow(w.handle(V1), {"count": 7}, 0))
    _, outcome = w.run(load_flow(w.handle(V1)))
    assert outcome.output == {"revision": 1, "contractVersion": 1, "payload": {"count": 7}}


# --- migration on load, persisted by the next save -----------------------------------


def test_load_of_a_v1_record_under_a_v2_contract_migrates_and_records_it():
    w = World()
    w.run(save_flow(w.handle(V1), {"count": 5}, 0))
    assert w.stored() == DurableStateRecord(1, 1, {"count": 5})

    record, outcome = w.run(load_flow(w.handle(V2)))
    expected = {"revision": 1, "contractVersion": 2, "payload": {"count": 5, "tags": []},
                "migrated": {"from": 1, "to": 2}}
    assert outcome.status == COMPLETED and outcome.output == expected
    # What the flow saw is exactly what STEP_COMPLETED recorded.
    assert w.steps(record) == [(f"{CID}.load", STEP_COMPLETED, expected)]
    # Loading does not write: the store still holds v1.
    assert w.stored() == DurableStateRecord(1, 1, {"count": 5})


def test_the_save_after_a_migrated_load_writes_the_current_version():
    w = World()
    w.run(save_flow(w.handle(V1), {"count": 5}, 0))
    v2 = w.handle(V2)

    def bump(loaded):
        return {**loaded["payload"], "count": loaded["payload"]["count"] + 1}

    record, outcome = w.run(load_then_save_flow(v2, bump))
    assert outcome.output["saved"] == {"revision": 2, "contractVersion": 2, "adopted": False}
    assert w.stored() == DurableStateRecord(2, 2, {"count": 6, "tags": []})
    # A later load under v2 is no longer a migration.
    _, again = w.run(load_flow(v2))
    assert "migrated" not in again.output and again.output["contractVersion"] == 2


def test_replay_of_a_migrated_load_and_save_folds_the_record_and_never_touches_the_store():
    w = World()
    w.run(save_flow(w.handle(V1), {"count": 5}, 0))

    def bump(loaded):
        return {**loaded["payload"], "count": 9}

    record, outcome = w.run(load_then_save_flow(w.handle(V2), bump))
    refusing = RefusingStore()
    replayed = drive(replay(record, drive(w.executions.load_steps(record.run_id)),
                            load_then_save_flow(w.handle(V2, store=refusing), bump)))
    assert replayed == outcome.output
    assert replayed["loaded"]["migrated"] == {"from": 1, "to": 2}
    assert refusing.calls == 0


# --- the four typed mismatch kinds ------------------------------------------------------


def _assert_load_rejected(w: World, contract: StateContract, kind: str, stored_version: int,
                          current_version: int) -> StateContractMismatchError:
    seen: list = []
    probe = RecordingProbe()
    record, outcome = w.run(load_flow(w.handle(contract, probe=probe), seen))
    assert len(seen) == 1
    error = seen[0]
    assert isinstance(error, StateContractMismatchError)
    assert (error.kind, error.key, error.contract_id, error.stored_version, error.current_version) == (
        kind, KEY, CID, stored_version, current_version)
    assert str(error).startswith(f"{kind}: ")
    # Loud: the run fails with the typed tag; nothing about the load is recorded.
    assert outcome.status == FAILED
    assert outcome.output == {"errorTag": "StateContractMismatchError", "message": str(error)}
    assert w.steps(record) == []
    assert probe.of("ds.load.rejected") == [
        {"key": KEY, "current": current_version, "stored_version": stored_version, "mismatch": kind}]
    assert probe.of("ds.loaded") == []
    return error


def test_future_version_stored_v3_code_v2():
    w = World()
    w.put(3, {"count": 1, "tags": [], "owner": "x"}, 0)
    _assert_load_rejected(w, V2, FUTURE_VERSION, 3, 2)


def test_no_migration_path_v1_stored_v3_contract_lacking_2_to_3():
    w = World()
    w.put(1, {"count": 1}, 0)
    error = _assert_load_rejected(w, V3_NO_PATH, NO_MIGRATION_PATH, 1, 3)
    assert "v2" in error.detail


def test_migration_failed_when_a_migration_raises():
    def broken(payload):
        return {**payload, "tags": payload["missing"]}

    w = World()
    w.put(1, {"count": 1}, 0)
    error = _assert_load_rejected(w, StateContract(CID, 2, validate_v2, {1: broken}), MIGRATION_FAILED, 1, 2)
    assert isinstance(error.__cause__, KeyError)
    assert "v1->v2" in error.detail


def test_validation_failed_when_the_validator_rejects_the_stored_payload():
    w = World()
    w.put(2, {"count": "not an int", "tags": []}, 0)
    error = _assert_load_rejected(w, V2, VALIDATION_FAILED, 2, 2)
    assert error.detail == "v1 state needs an integer count"


def test_validation_failed_after_a_migration_that_produces_an_invalid_payload():
    w = World()
    w.put(1, {"count": 1}, 0)
    _assert_load_rejected(w, StateContract(CID, 2, validate_v2, {1: lambda p: {"count": 1}}),
                          VALIDATION_FAILED, 1, 2)


def test_a_multi_step_migration_chain_is_applied_in_order():
    w = World()
    w.put(1, {"count": 4}, 0)
    v3 = StateContract(CID, 3, validate_v3, {1: migrate_1_to_2, 2: migrate_2_to_3})
    _, outcome = w.run(load_flow(w.handle(v3)))
    assert outcome.output == {"revision": 1, "contractVersion": 3,
                              "payload": {"count": 4, "tags": [], "owner": "nobody"},
                              "migrated": {"from": 1, "to": 3}}


def test_saving_a_payload_invalid_under_the_current_contract_is_validation_failed_and_writes_nothing():
    w = World()
    counting = CountingStore(w.ds)
    seen: list = []
    record, outcome = w.run(save_flow(w.handle(V2, store=counting), {"count": 1}, 0, seen))
    assert outcome.status == FAILED
    (error,) = seen
    assert isinstance(error, StateContractMismatchError)
    assert (error.kind, error.key, error.stored_version, error.current_version) == (VALIDATION_FAILED, KEY, 2, 2)
    assert counting.calls == []  # the store was never asked
    assert w.stored() is None
    assert w.steps(record) == []

    # The same with an existing record: it stays untouched.
    w.put(2, {"count": 1, "tags": []}, 0)
    _, outcome = w.run(save_flow(w.handle(V2), {"tags": []}, 1))
    assert outcome.status == FAILED and outcome.output["errorTag"] == "StateContractMismatchError"
    assert w.stored() == DurableStateRecord(2, 1, {"count": 1, "tags": []})


# --- adopt-own-write -----------------------------------------------------------------


def _crash_after_store_write(w: World, handle: DurableState, flow_first):
    """Run ``flow_first`` (which saves through ``handle``) until the store write
    commits, then kill the process at ``durable_state.save.after_store_write``.

    The re-run that follows uses the handle without the failpoint: what a
    restarted process would build from the same configuration.
    """
    record = w.start()
    failpoints = CrashAt(DURABLE_STATE_SAVE_AFTER_STORE_WRITE)
    handle.failpoints = failpoints
    try:
        with pytest.raises(Crash):
            drive(Kernel(w.runtime, w.executions).run(record, flow_first))
    finally:
        handle.failpoints = NO_FAILPOINTS
    assert failpoints.fired == 1
    assert drive(w.executions.load_execution(record.run_id)).status == RUNNING
    return record


def test_adopt_own_write_on_create_after_crash_before_step_completed():
    w = World()
    counting = CountingStore(w.ds)
    probe = RecordingProbe()
    payload = {"count": 1, "tags": ["x"]}
    handle = w.handle(V2, store=counting, probe=probe)
    flow = load_then_save_flow(handle, lambda loaded: payload)

    record = _crash_after_store_write(w, handle, flow)
    assert w.stored() == DurableStateRecord(2, 1, payload)
    assert w.steps(record) == [(f"{CID}.load", STEP_COMPLETED, None)]  # save not recorded
    assert counting.saves_committed == 1

    _, outcome = w.run(flow, record)
    adopted = {"revision": 1, "contractVersion": 2, "adopted": True}
    assert outcome.status == COMPLETED and outcome.output == {"loaded": None, "saved": adopted}
    assert w.steps(record)[-1] == (f"{CID}.save", STEP_COMPLETED, adopted)
    assert w.stored() == DurableStateRecord(2, 1, payload)  # no double write
    assert counting.saves_committed == 1
    # The load was folded from the log: only the first attempt read the store to load.
    assert counting.calls == ["load", "save", "save", "load"]
    assert adoptions(probe) == [{"key": KEY, "run": record.run_id, "revision": 1, "digest": digest(payload)}]


def test_adopt_own_write_at_a_later_revision():
    w = World()
    w.put(2, {"count": 0, "tags": []}, 0)
    w.put(2, {"count": 1, "tags": []}, 1)
    w.put(2, {"count": 2, "tags": []}, 2)
    handle = w.handle(V2)
    flow = load_then_save_flow(handle, lambda loaded: {**loaded["payload"], "count": 3})

    record = _crash_after_store_write(w, handle, flow)
    assert w.stored().revision == 4
    _, outcome = w.run(flow, record)
    assert outcome.output["saved"] == {"revision": 4, "contractVersion": 2, "adopted": True}
    assert w.stored() == DurableStateRecord(2, 4, {"count": 3, "tags": []})


def test_adopt_own_write_compares_canonically_independent_of_key_order():
    w = World()
    first = {"count": 1, "tags": ["a"], "meta": {"x": 1, "y": [1, {"p": 1, "q": 2}]}}
    # The re-run computes the same value with every dict built in another order.
    second = {"meta": {"y": [1, {"q": 2, "p": 1}], "x": 1}, "tags": ["a"], "count": 1}
    assert list(first) != list(second) and first == second
    first_handle = w.handle(V2)
    flow_first = load_then_save_flow(first_handle, lambda loaded: first)
    flow_second = load_then_save_flow(w.handle(V2), lambda loaded: second)

    record = _crash_after_store_write(w, first_handle, flow_first)
    _, outcome = w.run(flow_second, record)
    assert outcome.status == COMPLETED
    assert outcome.output["saved"] == {"revision": 1, "contractVersion": 2, "adopted": True}
    assert w.stored().revision == 1


def test_a_genuinely_concurrent_writer_at_expected_plus_one_is_a_loud_conflict():
    w = World()
    w.put(2, {"count": 0, "tags": []}, 0)
    probe = RecordingProbe()
    seen: list = []
    handle = w.handle(V2, probe=probe)

    async def flow(ctx, _input):
        loaded = await handle.load(ctx)
        # Between our load and our save, someone else saves a different payload.
        w.put(2, {"count": 100, "tags": ["operator"]}, loaded["revision"])
        try:
            return await handle.save(ctx, {"count": 1, "tags": []}, loaded["revision"])
        except Exception as error:
            seen.append(error)
            raise

    record, outcome = w.run(flow)
    (error,) = seen
    assert isinstance(error, RevisionConflictError)
    assert (error.key, error.expected, error.actual) == (KEY, 1, 2)
    assert outcome.status == FAILED and outcome.output["errorTag"] == "RevisionConflictError"
    assert w.stored() == DurableStateRecord(2, 2, {"count": 100, "tags": ["operator"]})  # theirs, kept
    assert adoptions(probe) == []
    assert [s[0] for s in w.steps(record)] == [f"{CID}.load"]


def test_a_concurrent_writer_that_crashed_our_save_window_is_not_adopted_either():
    # Our write committed (rev 1), then the process died; before recovery
    # another writer changed the payload at rev 2. The re-run's CAS at 0 sees
    # actual=2: not expected+1, so a conflict.
    w = World()
    handle = w.handle(V2)
    flow = load_then_save_flow(handle, lambda loaded: {"count": 1, "tags": []})
    record = _crash_after_store_write(w, handle, flow)
    w.put(2, {"count": 50, "tags": []}, 1)
    _, outcome = w.run(flow, record)
    assert outcome.status == FAILED and outcome.output["errorTag"] == "RevisionConflictError"


def test_conflict_at_expected_plus_two_stays_a_conflict_even_with_equal_content():
    w = World()
    payload = {"count": 1, "tags": []}
    probe = RecordingProbe()
    seen: list = []
    handle = w.handle(V2, probe=probe)
    record = _crash_after_store_write(w, handle, load_then_save_flow(handle, lambda loaded: payload))
    w.put(2, payload, 1)  # the very same content again, at expected + 2
    assert w.stored() == DurableStateRecord(2, 2, payload)

    async def rerun(ctx, _input):
        await handle.load(ctx)
        try:
            return await handle.save(ctx, payload, 0)
        except Exception as error:
            seen.append(error)
            raise

    _, outcome = w.run(rerun, record)
    (error,) = seen
    assert isinstance(error, RevisionConflictError) and (error.expected, error.actual) == (0, 2)
    assert outcome.status == FAILED
    assert adoptions(probe) == []
    assert w.stored().revision == 2


def test_conflict_with_equal_payload_but_a_different_stored_version_is_not_adopted():
    w = World()
    payload = {"count": 1, "tags": []}  # valid under v1 and v2
    seen: list = []
    probe = RecordingProbe()
    w.put(1, payload, 0)  # someone else wrote it at expected+1, but at contract v1
    _, outcome = w.run(save_flow(w.handle(V2, probe=probe), payload, 0, seen))
    (error,) = seen
    assert isinstance(error, RevisionConflictError) and (error.expected, error.actual) == (0, 1)
    assert outcome.status == FAILED
    assert adoptions(probe) == []
    assert w.stored() == DurableStateRecord(1, 1, payload)


def test_conflict_on_create_when_the_key_exists_with_other_content():
    w = World()
    w.put(2, {"count": 9, "tags": []}, 0)
    seen: list = []
    _, outcome = w.run(save_flow(w.handle(V2), {"count": 1, "tags": []}, 0, seen))
    assert isinstance(seen[0], RevisionConflictError) and outcome.status == FAILED


def test_stale_expected_revision_below_stored_is_a_conflict_even_if_content_equal():
    # actual = expected + 1 is required: here the key is *behind* (actual < expected).
    w = World()
    payload = {"count": 1, "tags": []}
    w.put(2, payload, 0)
    seen: list = []
    _, outcome = w.run(save_flow(w.handle(V2), payload, 5, seen))
    assert isinstance(seen[0], RevisionConflictError) and (seen[0].expected, seen[0].actual) == (5, 1)
    assert outcome.status == FAILED


# --- a third-party backend's conflict, matched by name ---------------------------------------


def _third_party_conflict_class() -> type:
    class RevisionConflictError(Exception):
        """A third-party backend's own conflict class: same name, not the plugin's
        class, and no ``name`` attribute (matched by the class name alone)."""

        def __init__(self, key: str, expected: int, actual: int) -> None:
            super().__init__(f"3p conflict {key} {expected} {actual}")
            self.key = key
            self.expected = expected
            self.actual = actual

    return RevisionConflictError


ThirdPartyConflict = _third_party_conflict_class()
assert ThirdPartyConflict is not RevisionConflictError and not issubclass(ThirdPartyConflict, RevisionConflictError)


class ThirdPartyStore:
    """A user's backend: same rules, its own error class."""

    def __init__(self, inner: InMemoryDurableStateStore) -> None:
        self.inner = inner

    async def load(self, key):
        return await self.inner.load(key)

    async def save(self, key, write, expected_revision):
        try:
            return await self.inner.save(key, write, expected_revision)
        except RevisionConflictError as conflict:
            raise ThirdPartyConflict(conflict.key, conflict.expected, conflict.actual) from None

    async def clear(self, key):
        return await self.inner.clear(key)


def test_third_party_conflict_matched_by_name_is_adopted_after_a_crash():
    w = World()
    third = ThirdPartyStore(w.ds)
    probe = RecordingProbe()
    payload = {"count": 1, "tags": []}
    handle = w.handle(V2, store=third, probe=probe)
    flow = load_then_save_flow(handle, lambda loaded: payload)
    record = _crash_after_store_write(w, handle, flow)
    _, outcome = w.run(flow, record)
    assert outcome.status == COMPLETED
    assert outcome.output["saved"] == {"revision": 1, "contractVersion": 2, "adopted": True}
    assert w.stored() == DurableStateRecord(2, 1, payload)
    assert len(adoptions(probe)) == 1


def test_third_party_conflict_that_is_not_ours_is_re_raised_as_is():
    w = World()
    third = ThirdPartyStore(w.ds)
    w.put(2, {"count": 9, "tags": []}, 0)
    seen: list = []
    _, outcome = w.run(save_flow(w.handle(V2, store=third), {"count": 1, "tags": []}, 0, seen))
    (error,) = seen
    assert type(error) is ThirdPartyConflict and (error.expected, error.actual) == (0, 1)
    assert outcome.status == FAILED and outcome.output["errorTag"] == "RevisionConflictError"


def test_a_non_conflict_store_error_is_not_taken_for_a_conflict():
    class Flaky:
        async def load(self, key):
            return None

        async def save(self, key, write, expected_revision):
            raise OSError("disk on fire")

        async def clear(self, key):
            return None

    w = World()
    seen: list = []
    _, outcome = w.run(save_flow(w.handle(V2, store=Flaky()), {"count": 1, "tags": []}, 0, seen))
    assert type(seen[0]) is OSError
    assert outcome.output == {"errorTag": "OSError", "message": "disk on fire"}


# --- sentinelState ------------------------------------------------------------------------


def test_sentinel_state_derives_contract_id_and_key_from_the_schedule():
    assert sentinel_state("nightly") == ("nightly.state", "sentinel:nightly")


def test_sentinel_state_handle_uses_the_derived_key_and_step_ids():
    w = World()
    contract = StateContract("nightly.state", 1, validate_v1)
    state = SentinelState("nightly", contract, w.ds)
    assert (state.key, state.schedule_id, state.load_step, state.save_step) == (
        "sentinel:nightly", "nightly", "nightly.state.load", "nightly.state.save")

    async def flow(ctx, _input):
        loaded = await state.load(ctx)
        return await state.save(ctx, {"count": 1}, 0 if loaded is None else loaded["revision"])

    record, outcome = w.run(flow)
    assert outcome.output == {"revision": 1, "contractVersion": 1, "adopted": False}
    assert w.stored("sentinel:nightly") == DurableStateRecord(1, 1, {"count": 1})
    assert [s[0] for s in w.steps(record)] == ["nightly.state.load", "nightly.state.save"]


def test_sentinel_state_refuses_a_contract_with_the_wrong_id():
    with pytest.raises(ValueError, match="nightly.state"):
        SentinelState("nightly", StateContract("daily.state", 1, validate_v1), InMemoryDurableStateStore())
    with pytest.raises(ValueError):
        SentinelState("nightly", StateContract("nightly", 1, validate_v1), InMemoryDurableStateStore())


# --- the probe -----------------------------------------------------------------------------------


def test_probe_sees_loaded_rejected_and_adopted():
    w = World()
    probe = RecordingProbe()
    v1 = w.handle(V1, probe=probe)
    w.run(load_flow(v1))
    assert probe.events == [("ds.loaded", {"key": KEY, "found": False, "current": 1})]

    w.run(save_flow(v1, {"count": 2}, 0))
    probe.events.clear()
    w.run(load_flow(w.handle(V2, probe=probe)))
    assert probe.events == [("ds.loaded", {
        "key": KEY, "found": True, "current": 2, "stored_version": 1, "revision": 1,
        "payload": {"count": 2, "tags": []}, "migrated": True})]

    probe.events.clear()
    strict_v2 = StateContract(CID, 2, validate_v3, {1: migrate_1_to_2})  # demands an owner
    w.run(load_flow(w.handle(strict_v2, probe=probe)))
    assert [k for k, _ in probe.events] == ["ds.load.rejected"]
    assert probe.events[0][1]["mismatch"] == VALIDATION_FAILED

    probe.events.clear()
    handle = w.handle(V1, probe=probe)
    flow = load_then_save_flow(handle, lambda loaded: {"count": 3})
    record = _crash_after_store_write(w, handle, flow)
    w.run(flow, record)
    kinds = [k for k, _ in probe.events]
    assert kinds == ["ds.loaded", "ds.saved"]  # the re-run's load is folded, not re-emitted
    assert probe.events[1][1] == {"key": KEY, "run": record.run_id, "revision": 2, "adopted": True,
                                  "digest": digest({"count": 3})}


def test_clear_is_a_recorded_step_and_a_create_works_again_afterwards():
    w = World()
    handle = w.handle(V1)
    w.run(save_flow(handle, {"count": 1}, 0))

    async def flow(ctx, _input):
        await handle.clear(ctx)
        return await handle.save(ctx, {"count": 2}, 0)

    record, outcome = w.run(flow)
    assert outcome.output == {"revision": 1, "contractVersion": 1, "adopted": False}
    assert [s[0] for s in w.steps(record)] == [f"{CID}.clear", f"{CID}.save"]
    assert w.stored() == DurableStateRecord(1, 1, {"count": 2})
