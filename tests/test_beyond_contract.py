"""Beyond the contract: stores that lose acknowledged writes or tear batches.

The system is not expected to survive these, only to notice, loudly and
typed: a run with a broken promise ends DETECTED (its first violation came
after the break), and one in which nothing noticed ends FAIL with
``beyond-contract-undetected``, never PASS.
"""
from __future__ import annotations

import json

import attrs
import pytest

from faults.beyond import DurableStateSurgery, LogSurgery
from faults.describe import DURABLE_STATE_DESCRIBERS
from faults.beyond import ROTS
from faults.kinds import LOST_WRITE, ROW_ROT, TORN_BATCH
from faults.plan import PortFaults
from scenarios.system import System
from sim.workload import Stack, Workload
from faults.ports import BoundPort, PortStats
from faults.script import parse_script
from model.canonical import ZERO_DIGEST
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.records import AppendConflict, FencedAppendRequest, HistoryCorrupted, RecordEnvelope
from model.conversation.recovery import read_recovery_prefix
from model.conversation.sqlite_store import SqliteConversationStore
from model.durable_state.memory_store import InMemoryDurableStateStore
from model.durable_state.sqlite_store import SqliteDurableStateStore
from model.durable_state.store import DurableStateWrite
from model.sqlite_db import open_database
from scenarios import registry
from scenarios.invariants.cas_linear import CasLinear
from scenarios.storage import run_sync
from sim.clock import parse_duration_ms
from sim.runner import DETECTED, FAIL, PASS, UNDETECTED, run
from sim.scenario import Scenario, ScenarioOptions

HOUR_MS = parse_duration_ms("1h")


# -- the surgeries, on both stores ---------------------------------------------

def _log(kind: str, tmp_path):
    if kind == "memory":
        return InMemoryConversationStore()
    return SqliteConversationStore(open_database(str(tmp_path / "log.db")))


def _ds(kind: str, tmp_path):
    if kind == "memory":
        return InMemoryDurableStateStore()
    return SqliteDurableStateStore(open_database(str(tmp_path / "ds.db")))


def _request(cid: str, batch: str, tail, count: int) -> FencedAppendRequest:
    records = tuple(RecordEnvelope(record_id=f"{batch}#{i}", family="tool-call", schema_version=1, created_at_ms=1,
                                   deployment_id="d", payload={"i": i, "text": "x" * 40}, producer_id="p", epoch=1)
                    for i in range(count))
    return FencedAppendRequest(cid, batch, "p", 1, tail[0], tail[1], records)


def _append(log, batch: str, tail, count: int):
    request = _request("c", batch, tail, count)
    return request, run_sync(log.append(request))


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_lost_append_rewinds_the_log_cleanly_and_only_its_writer_can_tell(store, tmp_path):
    log = _log(store, tmp_path)
    run_sync(log.materialize("c", "p", 1))
    _, first = _append(log, "b1", (0, ZERO_DIGEST), 2)
    request, second = _append(log, "b2", (first.last_seq, first.tail_digest), 3)
    assert LogSurgery(log).apply(LOST_WRITE, "append", (request,), {}, second, None)
    tail = run_sync(log.inspect_tail("c"))
    assert (tail.tail_seq, tail.tail_digest) == (first.last_seq, first.tail_digest)
    assert run_sync(log.lookup_batch("c", "b2")) is None
    # The chain is whole again, just shorter: a reader cannot see the loss.
    assert len(run_sync(read_recovery_prefix(log, "c")).records) == 2
    # The writer can: its next append expects the tail the log acknowledged.
    with pytest.raises(AppendConflict) as conflict:
        _append(log, "b3", (second.last_seq, second.tail_digest), 1)
    assert conflict.value.actual_tail_seq == first.last_seq < second.last_seq


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_torn_batch_is_caught_by_the_recovery_read(store, tmp_path):
    log = _log(store, tmp_path)
    run_sync(log.materialize("c", "p", 1))
    request, result = _append(log, "b1", (0, ZERO_DIGEST), 4)
    assert LogSurgery(log).apply(TORN_BATCH, "append", (request,), {}, result, None)
    assert run_sync(log.inspect_tail("c")).tail_seq == 4  # the tail still covers the whole batch
    with pytest.raises(HistoryCorrupted) as caught:
        run_sync(read_recovery_prefix(log, "c"))
    assert caught.value.expected_seq == 3  # the first torn record: the second half of the batch


def test_a_one_record_batch_cannot_tear_and_a_replayed_append_cannot_be_lost(tmp_path):
    log = _log("memory", tmp_path)
    run_sync(log.materialize("c", "p", 1))
    request, result = _append(log, "b1", (0, ZERO_DIGEST), 1)
    surgery = LogSurgery(log)
    assert not surgery.apply(TORN_BATCH, "append", (request,), {}, result, None)
    replayed = run_sync(log.append(request))
    assert replayed.replayed and not surgery.apply(LOST_WRITE, "append", (request,), {}, replayed, None)
    assert len(run_sync(read_recovery_prefix(log, "c")).records) == 1


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_lost_save_rolls_the_key_back_to_its_previous_revision(store, tmp_path):
    ds = _ds(store, tmp_path)
    surgery = DurableStateSurgery(ds)
    run_sync(ds.save("k", DurableStateWrite(1, {"n": 1}), 0))
    args = ("k", DurableStateWrite(1, {"n": 2}), 1)
    token = surgery.before("save", args, {})
    saved = run_sync(ds.save(*args))
    assert saved.revision == 2 and surgery.apply(LOST_WRITE, "save", args, {}, saved, token)
    back = run_sync(ds.load("k"))
    assert (back.revision, back.payload) == (1, {"n": 1})
    args = ("new", DurableStateWrite(1, {"n": 1}), 0)
    token = surgery.before("save", args, {})
    assert surgery.apply(LOST_WRITE, "save", args, {}, run_sync(ds.save(*args)), token)
    assert run_sync(ds.load("new")) is None



def _rots(store: str) -> list[str]:
    return [name for name, _, sqlite_only in ROTS if store == "sqlite" or not sqlite_only]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_every_rot_of_a_log_record_is_refused_typed_by_the_recovery_read(store, tmp_path):
    """Each damaged document in turn (the surgery takes them in order): the
    reader never hands back a value for it, it raises HistoryCorrupted."""
    for index, name in enumerate(_rots(store)):
        log = _log(store, tmp_path / name) if store == "memory" else None
        if log is None:
            (tmp_path / name).mkdir()
            log = _log(store, tmp_path / name)
        surgery = LogSurgery(log)
        surgery._rotter._count = index
        run_sync(log.materialize("c", "p", 1))
        request, result = _append(log, "b1", (0, ZERO_DIGEST), 2)
        assert surgery.apply(ROW_ROT, "append", (request,), {}, result, None)
        with pytest.raises(HistoryCorrupted):
            run_sync(read_recovery_prefix(log, "c"))
        assert name


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_every_rot_of_a_saved_payload_is_refused_or_read_as_something_else(store, tmp_path):
    """The durable-state store has no corruption error of its own: a rotten
    payload either fails to load or loads as another value, which the
    reference model (holding what was saved) reports."""
    for index, name in enumerate(_rots(store)):
        (tmp_path / name).mkdir()
        ds = _ds(store, tmp_path / name)
        surgery = DurableStateSurgery(ds)
        surgery._rotter._count = index
        args = ("k", DurableStateWrite(1, {"n": 1, "text": "abc"}), 0)
        saved = run_sync(ds.save(*args))
        assert surgery.apply(ROW_ROT, "save", args, {}, saved, None)
        try:
            back = run_sync(ds.load("k"))
        except Exception:  # noqa: BLE001 - any refusal will do; a value must differ
            continue
        assert back is None or back.payload != {"n": 1, "text": "abc"}, name


# -- the runner's verdict, on a minimal scenario ----------------------------------

class _Saver(Workload):
    """One process saving a counter every hour through a crashy port."""

    def setup(self, world) -> None:
        def start(node) -> None:
            ds = world.system.ports_for(node).ds

            async def loop() -> None:
                while True:
                    await world.runtime.sleep_ms(HOUR_MS)
                    current = await ds.load("counter")
                    revision = 0 if current is None else current.revision
                    await ds.save("counter", DurableStateWrite(1, {"n": revision + 1}), revision)

            world.runtime.spawn_on(node, "saver", loop())

        world.add_node("saver-1", start)


def _saver(checked: bool) -> Scenario:
    def build(run) -> Stack:
        return Stack(system=System(restart_ms=(1_000, 1_000)), workloads=[_Saver()], faults=PortFaults({}),
                     checks=[CasLinear()] if checked else [])

    return Scenario("saver", "test", build, parse_duration_ms("1d"))


LOSE_A_SAVE = parse_script([{"time_ms": 5 * HOUR_MS, "node": "saver-1", "site": "ds.save", "kind": "lost-write"}])


def test_a_broken_promise_that_a_checker_notices_is_detected():
    result = run(_saver(checked=True), ScenarioOptions(seed=1, duration_ms=parse_duration_ms("1d"),
                                                       fault_script=LOSE_A_SAVE))
    assert result.status == DETECTED and result.passed
    (broken,) = result.beyond_contract
    assert (broken.kind, broken.site) == (LOST_WRITE, "ds.save")
    assert result.violations[0].invariant == "cas-linear" and result.violations[0].time_ms > broken.time_ms


def test_a_broken_promise_nothing_notices_is_a_failure_not_a_pass():
    """Planted blindness: no checker follows the revision chain."""
    result = run(_saver(checked=False), ScenarioOptions(seed=1, duration_ms=parse_duration_ms("1d"),
                                                        fault_script=LOSE_A_SAVE))
    assert result.status == FAIL and not result.passed
    assert [v.invariant for v in result.violations] == [UNDETECTED]
    assert "lost-write at ds.save" in result.violations[0].message


def test_without_a_broken_promise_the_same_scenario_passes():
    result = run(_saver(checked=True), ScenarioOptions(seed=1, duration_ms=parse_duration_ms("1d")))
    assert result.status == PASS and result.beyond_contract == ()


# -- the real scenarios ------------------------------------------------------------

# Each scenario's first worker process, named by its workload instance.
WORKER_1 = {"sentinel-year": "sentinels/worker-1", "ledger-storm": "workers/worker-1"}


def _script(site: str, kind: str, at_ms: int, node: str):
    return parse_script([{"time_ms": at_ms, "node": node, "site": site, "kind": kind}])


@pytest.mark.parametrize("scenario, store, site, kind", [
    ("sentinel-year", "memory", "log.append", LOST_WRITE),
    ("sentinel-year", "sqlite", "log.append", LOST_WRITE),
    ("sentinel-year", "memory", "log.append", TORN_BATCH),
    ("sentinel-year", "sqlite", "log.append", TORN_BATCH),
    ("sentinel-year", "memory", "ds.save", LOST_WRITE),
    ("sentinel-year", "sqlite", "ds.save", LOST_WRITE),
    ("ledger-storm", "memory", "log.append", LOST_WRITE),
    ("ledger-storm", "sqlite", "log.append", LOST_WRITE),
    ("sentinel-year", "memory", "ds.save", ROW_ROT),
    ("sentinel-year", "sqlite", "log.append", ROW_ROT),
])
def test_every_broken_promise_is_detected_in_the_scenarios(scenario, store, site, kind):
    at_ms = (10 if scenario == "sentinel-year" else 1) * HOUR_MS  # a storm has written plenty by then
    # A day of sentinel-year catches each break (the slowest, a torn batch or a rotten row, at the end-of-run
    # audit); a storm's run stops at its first violation, well within the 3 days it is given.
    duration = "1d" if scenario == "sentinel-year" else "3d"
    opts = ScenarioOptions(seed=3, duration_ms=parse_duration_ms(duration), store=store,
                           fault_script=_script(site, kind, at_ms, WORKER_1[scenario]))
    result = run(registry.get(scenario), opts)
    assert result.status == DETECTED, result.violations
    (broken,) = result.beyond_contract
    assert (broken.site, broken.kind) == (site, kind) and broken.time_ms >= at_ms
    assert result.violations[0].time_ms >= broken.time_ms


def test_the_system_itself_names_a_lost_append_and_a_torn_archive(without_reference_model):
    """Not only the harness's oracles: the run's own writer sees its log's
    tail go back, and retention's scrub refuses to archive a torn history."""
    for kind, error in ((LOST_WRITE, "AcknowledgedWriteLost"), (TORN_BATCH, "HistoryCorrupted")):
        opts = ScenarioOptions(seed=3, duration_ms=parse_duration_ms("3d"),
                               fault_script=_script("log.append", kind, 10 * HOUR_MS, WORKER_1["sentinel-year"]))
        result = run(registry.get("sentinel-year"), opts)
        first = result.violations[0]
        assert result.status == DETECTED and first.invariant == "no-uncaught-errors", first
        assert f"raised {error}" in first.message, first.message


def test_a_submission_worker_names_a_lost_append_before_its_next_one(without_reference_model):
    """ledger-storm: the worker remembers the tail the log acknowledged to it;
    a shorter tail before its next append is AcknowledgedWriteLost (typed,
    never retried), not a log silently continuing from the shorter tail."""
    caught = []
    for hour in range(1, 4):  # each run stops at its first violation, an hour or so after the loss
        opts = ScenarioOptions(seed=3, duration_ms=parse_duration_ms("8h"),
                               fault_script=_script("log.append", LOST_WRITE, hour * HOUR_MS,
                                                    WORKER_1["ledger-storm"]))
        result = run(registry.get("ledger-storm"), opts)
        assert result.status == DETECTED, result.violations
        caught.append(result.violations[0].message)
    assert any("raised AcknowledgedWriteLost" in message for message in caught), caught


@pytest.mark.parametrize("scenario, duration", [("sentinel-year", "2d"), ("ledger-storm", "6h")])
def test_probabilistic_broken_promises_never_pass_silently(scenario, duration):
    verdicts = []
    for seed in range(4):
        opts = ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), swarm=True,
                               beyond_contract=True)
        result = run(registry.get(scenario), opts)
        if result.beyond_contract:
            assert result.status == DETECTED, (seed, result.violations[0])
        else:
            assert result.status == PASS, (seed, result.violations)
        verdicts.append(result.status)
    assert DETECTED in verdicts


def test_without_the_flag_nothing_beyond_the_contract_fires():
    result = run(registry.get("ledger-storm"), ScenarioOptions(seed=2, duration_ms=parse_duration_ms("2h")))
    assert result.passed and result.beyond_contract == ()
    assert not {LOST_WRITE, TORN_BATCH} & set(result.faults)


def test_cli_reports_detected_with_exit_zero_and_carries_the_flag(tmp_path, capsys, monkeypatch):
    from sim.face.cli import main

    monkeypatch.chdir(tmp_path)  # in this process: the CLI's own code, without a new interpreter per command
    script = tmp_path / "lose.json"
    script.write_text(json.dumps([{"time_ms": 10 * HOUR_MS, "node": WORKER_1["sentinel-year"], "site": "ds.save",
                                   "kind": "lost-write"}]))
    base = ["run", "sentinel-year", "--seed", "3", "--duration", "1d"]
    code = main([*base, "--faults", str(script)])
    shown, err = capsys.readouterr()
    assert code == 0, err
    assert "beyond the contract: lost-write at ds.save" in shown
    assert ("DETECTED: the broken promise was caught by reference-model" in shown
            or "DETECTED: the broken promise was caught by cas-linear" in shown)
    code = main([*base, "--beyond-contract", "--json"])
    body = json.loads(capsys.readouterr().out)
    assert body["config"]["beyond_contract"] is True and "--beyond-contract" in body["repro_command"]
    assert body["status"] in ("detected", "pass") and code == 0
    assert (body["status"] == "detected") == bool(body["beyond_contract"])


def test_acknowledged_write_lost_is_a_typed_corruption_no_retry_clears():
    import pickle

    from model.conversation.records import AcknowledgedWriteLost
    from model.retry import is_retryable

    error = AcknowledgedWriteLost("c", 5, 3)
    assert isinstance(error, HistoryCorrupted) and (error.expected_seq, error.got) == (5, 3)
    assert not is_retryable(error) and not is_retryable(error, reread=True)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is AcknowledgedWriteLost and str(again) == str(error)
