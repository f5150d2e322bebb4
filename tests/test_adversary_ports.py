"""The ports adversary (``scenarios.adversaries.ports``) and the reference models
of the ports it drives (``scenarios.reference.kernel``, ``.schedules``,
``.pins``, ``.findings``): the storm reaches every method and edge and runs
clean; each reference agrees with both adapters and names a planted bug;
the model bugs the adversary found stay fixed (lone surrogates and ints
past 64 bits were untyped errors on SQLite and accepted in memory; an
illegal ``retire`` was an AssertionError)."""
from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest

import model.schedule_store
from faults.ports import PortCall
from model.findings import InMemoryFindingsProjection, SqliteFindingsProjection
from model.kernel.memory_store import InMemoryExecutionStore
from model.kernel.sqlite_store import SqliteExecutionStore
from model.pins import InMemoryPinIndex, SqlitePinIndex
from model.schedule_store import InMemoryScheduleStore, SqliteScheduleStore
from model.sqlite_db import open_database
from scenarios import registry
from scenarios.adversaries.ports import CALL_STATS, EDGES
from scenarios.reference.findings import ReferenceFindings
from scenarios.reference.kernel import ReferenceKernel
from scenarios.reference.pins import ReferencePins
from scenarios.reference.schedules import ReferenceSchedules
from scenarios.storage import run_sync
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions

REF = "sha256:" + "ab" * 32
LONE = "x\ud800"


def storm(seed: int, duration: str, store: str = "memory"):
    return run(registry.get("port-storm"),
               ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), store=store))


class Judged:
    """A store whose every call is shown to a reference, as the oracle does
    (an error is returned, not raised: the reference judged it)."""

    def __init__(self, store: Any, reference: Any) -> None:
        self.store = store
        self.reference = reference
        self.divergences: list[str] = []

    def __getattr__(self, method: str):
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result, error = run_sync(getattr(self.store, method)(*args, **kwargs)), None
            except Exception as exc:  # noqa: BLE001 - shown to the reference, then raised
                result, error = None, exc
            message = self.reference.observe(PortCall(0, "test", self.reference.port, method, args, kwargs, result,
                                                      error))
            if message is not None:
                self.divergences.append(message)
            return result if error is None else error
        return call


def quietly(fn, *args, **kwargs) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - the reference judged it
        return error


@pytest.fixture(params=["memory", "sqlite"])
def adapters(request, tmp_path):
    if request.param == "memory":
        yield {"kernel": InMemoryExecutionStore(), "schedules": InMemoryScheduleStore(), "pins": InMemoryPinIndex(),
               "findings": InMemoryFindingsProjection()}
        return
    conn = open_database(str(tmp_path / "ports.db"))
    yield {"kernel": SqliteExecutionStore(conn), "schedules": SqliteScheduleStore(conn), "pins": SqlitePinIndex(conn),
           "findings": SqliteFindingsProjection(conn)}
    conn.close()


def drive_kernel(k: Judged) -> None:
    start = dict(schedule_id="s", occurrence_ms=10, flow_version=1, input={"\U0001F600": 1.0, "a": (1, -0.0)},
                 started_at_ms=5)
    k.start_execution("s@10", **start)
    k.start_execution("s@10", **dict(start, input=None))  # replayed unchanged
    k.start_execution("s@9", **dict(start, occurrence_ms=9))  # retired
    quietly(k.start_execution, LONE, **start)
    quietly(k.start_execution, "big", **dict(start, occurrence_ms=2**64))
    k.append_step("s@10", 1, "a", "STEP_STARTED", None)
    quietly(k.append_step, "s@10", 1, "a", "STEP_COMPLETED", None)
    quietly(k.append_step, "s@10", 5, "a", "STEP_COMPLETED", None)
    k.append_steps("s@10", 2, (("b", "EVENT_EMITTED", [1]), ("c", "EFFECT_INDOUBT", {"x": math.pi})))
    k.append_steps("s@10", 4, ())
    quietly(k.append_steps, "s@10", 3, ())
    k.park_execution("s@10")
    k.park_execution("s@10")
    k.live_executions("s")
    k.finish_execution("s@10", status="completed", output={"a": 1, "b": 2}, finished_at_ms=50,
                       steps=(("d", "STEP_COMPLETED", 1),), first_seq=4)
    k.finish_execution("s@10", status="completed", output={"b": 2, "a": 1}, finished_at_ms=99)  # a repeat
    quietly(k.finish_execution, "s@10", status="completed", output={"a": 1, "b": 2.0}, finished_at_ms=99)
    quietly(k.finish_execution, "s@10", status="failed", output={"a": 1, "b": 2}, finished_at_ms=99)
    quietly(k.finish_execution, "s@10", status="completed", output={"a": 1, "b": 2}, finished_at_ms=99,
            steps=(("e", "STEP_COMPLETED", 1),), first_seq=5)
    quietly(k.append_step, "s@10", 5, "e", "STEP_COMPLETED", None)
    quietly(k.park_execution, "nope")
    k.load_steps("s@10")
    k.load_execution("s@10")
    k.purge_finished(51)
    k.start_execution("s@10", **start)  # retired: the mark outlives the purge
    k.schedule_high_water_ms("s")
    k.load_execution("s@10")


def drive_schedules(s: Judged) -> None:
    s.cursor("sch")
    s.advance("sch", 50)
    s.advance("sch", 40)
    s.retire("sch", 10, None, None)
    s.retire("sch", 10, None, None)
    s.retire("sch", 20, "sch@20", {"\U0001F600": 1e21, "\ufb01": [5e-324, -0.0], "n": 2**53 - 1})
    s.cursor("sch")  # the archive digest: RFC 8785's
    s.retire("sch", 30, "sch@30", None, hold=True)
    quietly(s.retire, "sch", 40, "sch@40", {"x": math.nan})
    quietly(s.retire, "sch", 40, "sch@40", {"a": 1}, hold=True)
    quietly(s.advance, LONE, 1)
    s.release("sch", "sch@30", {"held": True})
    s.release("sch", "sch@30", {"held": True})
    s.cursor("sch")


def drive_pins(p: Judged) -> None:
    other = "sha256:" + "cd" * 32
    p.record_blob(REF, 10, stored_at_ms=5)
    p.record_blob(REF, 10, stored_at_ms=3)
    quietly(p.record_blob, REF, 11, stored_at_ms=5)
    p.record_blob(other, 1, stored_at_ms=1)
    p.pin(REF, "h-\u00e9")
    p.pin(REF, "h-z")
    p.pin(REF, "h-z")
    quietly(p.pin, REF, LONE)
    quietly(p.expired_unpinned, 2**63, 1)
    p.holders(REF)
    p.expired_unpinned(10, 10)
    p.unpin(REF, "h-z")
    p.unpin(REF, "h-\u00e9")
    p.unpin(REF, "h-\u00e9")
    p.is_pinned(REF)
    p.expired_unpinned(10, 10)
    p.expired_unpinned(10, 1)
    p.pinned_refs()
    p.forget(REF)
    p.forget(REF)
    p.blob(REF)


def finding(finding_id: str, **changes: Any) -> dict:
    return {"id": finding_id, "category": "bloat", "severity": "low", "confidence": 100, "targets": ["t"],
            "evidence": [REF], "model": "m", **changes}


def drive_findings(f: Judged) -> None:
    f.apply_run("s", 10, "s@10", [finding("a"), finding("b")], settled_at_ms=0)
    f.apply_run("s", 10, "s@10", [finding("c")], settled_at_ms=0)
    f.apply_run("s", 20, "s@20", (finding("a"), finding("d")), settled_at_ms=7)
    quietly(f.apply_run, "s", 30, "s@30", [finding("e", confidence=True)], settled_at_ms=7)
    quietly(f.apply_run, "s", 30, "s@30", [finding("e"), finding("e")], settled_at_ms=7)
    quietly(f.apply_run, "s", 30, "s@30", [finding(LONE)], settled_at_ms=7)
    quietly(f.apply_run, LONE, 30, "s@30", [], settled_at_ms=7)
    f.checkpoint("s")
    f.advance_checkpoint("s", 25)
    f.live_for_run("s@10")
    f.close_expired(1, now_ms=9, limit=1)
    f.live_findings()
    f.apply_run("s", 40, "s@40", [finding("a")], settled_at_ms=8)
    f.close_expired(100, now_ms=9, limit=10)
    f.live_findings()


DRIVERS = {"kernel": (ReferenceKernel, drive_kernel), "schedules": (ReferenceSchedules, drive_schedules),
           "pins": (ReferencePins, drive_pins), "findings": (ReferenceFindings, drive_findings)}


@pytest.mark.parametrize("port", sorted(DRIVERS))
def test_each_reference_agrees_with_both_adapters(adapters, port):
    reference, drive = DRIVERS[port]
    judged = Judged(adapters[port], reference())
    drive(judged)
    assert judged.divergences == []


# --- planted bugs: each reference names the call -------------------------------------


_purge = InMemoryExecutionStore.purge_finished
_finish = InMemoryExecutionStore.finish_execution
_unpin = InMemoryPinIndex.unpin
_apply_run = InMemoryFindingsProjection.apply_run


async def purge_forgetting_marks(self, finished_before_ms):
    purged = await _purge(self, finished_before_ms)
    self._high_water_ms.clear()  # planted: the marks do not outlive the purge
    return purged


async def finish_minding_member_order(self, run_id, *, status, output, finished_at_ms, steps=(), first_seq=None):
    row = self._executions.get(run_id)
    if row is not None and row.status == status and isinstance(output, dict) and list(output) != sorted(output):
        raise ValueError("planted: a repeat compares member order")
    return await _finish(self, run_id, status=status, output=output, finished_at_ms=finished_at_ms, steps=steps,
                         first_seq=first_seq)


def code_point_link(previous, summary):
    """planted: the archive chain over code-point-sorted JSON, not RFC 8785."""
    text = json.dumps({"previous": previous, "run": summary}, sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def unpin_keeping_last_holder(self, ref, holder):
    if self._holders.get(ref) == {holder}:
        return True  # planted: says removed, keeps it
    return await _unpin(self, ref, holder)


async def apply_reopening_live_ids(self, schedule_id, occurrence_ms, run_id, findings, *, settled_at_ms):
    for f in findings:
        if isinstance(f, dict) and f.get("id") in self._live:
            del self._live[f["id"]]  # planted: a live id opens again
            self._by_age[:] = [entry for entry in self._by_age if entry[1] != f["id"]]
    return await _apply_run(self, schedule_id, occurrence_ms, run_id, findings, settled_at_ms=settled_at_ms)


PLANTED = {
    "mark-forgotten-at-purge": ("kernel", InMemoryExecutionStore, "purge_finished", purge_forgetting_marks,
                                "kernel.start_execution"),
    "repeat-minds-member-order": ("kernel", InMemoryExecutionStore, "finish_execution", finish_minding_member_order,
                                  "kernel.finish_execution"),
    "code-point-archive": ("schedules", model.schedule_store, "archive_link", code_point_link, "schedules.cursor"),
    "unpin-keeps-last-holder": ("pins", InMemoryPinIndex, "unpin", unpin_keeping_last_holder, "pins.unpin"),
    "live-ids-reopened": ("findings", InMemoryFindingsProjection, "apply_run", apply_reopening_live_ids,
                          "findings.apply_run"),
}
MEMORY = {"kernel": InMemoryExecutionStore, "schedules": InMemoryScheduleStore, "pins": InMemoryPinIndex,
          "findings": InMemoryFindingsProjection}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_a_planted_bug_is_named_by_its_reference(monkeypatch, bug):
    port, owner, attr, planted, needle = PLANTED[bug]
    monkeypatch.setattr(owner, attr, planted)
    reference, drive = DRIVERS[port]
    judged = Judged(MEMORY[port](), reference())
    drive(judged)
    assert judged.divergences and needle in judged.divergences[0], judged.divergences[:1]


def test_a_mark_forgotten_at_purge_is_caught_in_the_storm(monkeypatch):
    """A purge that forgets the schedules' high-water marks lets a purged
    occurrence start again (a duplicate wake): only the ports adversary
    purges the execution store, and the reference model names the start."""
    monkeypatch.setattr(InMemoryExecutionStore, "purge_finished", purge_forgetting_marks)
    result = storm(2, "10m")
    assert not result.passed
    first = result.violations[0]
    assert first.invariant in ("reference-model", "ports-expectations"), result.violations[:2]
    assert "start_execution" in first.message or "retired" in first.message, first.message


# --- the storm --------------------------------------------------------------------------


def test_the_storm_runs_clean_and_reaches_every_ports_method_and_edge():
    result = storm(1, "6m")
    assert result.passed, result.violations[:3]
    stats = result.stats
    assert [stat for stat in CALL_STATS if stats[stat] == 0] == []
    reached = [name for name in EDGES if stats[f"edge_{name}"] > 0]
    assert len(reached) >= 0.9 * len(EDGES), sorted(set(EDGES) - set(reached))
    assert stats["ports_typed_rejections"] > 20 and result.invariants["ports-expectations"] > 500


# --- the model bugs it found ----------------------------------------------------------------


def refused(coro) -> BaseException:
    with pytest.raises(Exception) as caught:
        run_sync(coro)
    return caught.value


def test_ids_with_lone_surrogates_and_ints_past_64_bits_are_refused_alike(adapters):
    """Were: accepted in memory, an untyped UnicodeEncodeError/OverflowError mid-call on SQLite."""
    k, s, p, f = adapters["kernel"], adapters["schedules"], adapters["pins"], adapters["findings"]
    start = dict(schedule_id=None, occurrence_ms=None, flow_version=1, input=None, started_at_ms=0)
    assert type(refused(k.start_execution(LONE, **start))) is ValueError
    assert type(refused(k.start_execution("r", **dict(start, input={LONE: 1})))) is ValueError
    assert type(refused(k.start_execution("r", **dict(start, flow_version=2**63)))) is ValueError
    assert type(refused(k.purge_finished(-(2**63) - 1))) is ValueError
    assert run_sync(k.load_execution("r")) is None
    assert type(refused(p.pin(REF, LONE))) is ValueError
    assert type(refused(p.record_blob(REF, 2**63, stored_at_ms=0))) is ValueError
    assert type(refused(p.expired_unpinned(0, 2**63))) is ValueError
    assert type(refused(f.apply_run(LONE, 1, "r", [], settled_at_ms=0))) is ValueError
    assert refused(f.apply_run("s", 1, "r", [finding(LONE)], settled_at_ms=0)).name == "InvalidFinding"
    assert type(refused(f.close_expired(0, now_ms=0, limit=2**63))) is ValueError
    assert type(refused(s.advance(LONE, 1))) is TypeError
    assert type(refused(s.advance("s", 2**63))) is TypeError
    assert type(refused(s.retire("s", 1, LONE, None))) is TypeError


def test_an_illegal_retire_is_a_typed_error_before_anything_changes(adapters):
    """Was: an AssertionError (and nothing at all under ``python -O``)."""
    s = adapters["schedules"]
    assert type(refused(s.retire("s", 1, "r", {"a": 1}, hold=True))) is ValueError
    assert type(refused(s.retire("s", 1, None, None, hold=True))) is ValueError
    assert type(refused(s.retire("s", 1, None, {"a": 1}))) is ValueError
    assert type(refused(s.retire("s", 1, "r", None, hold=1))) is TypeError
    assert type(refused(s.release("s", None, {}))) is TypeError
    cursor = run_sync(s.cursor("s"))
    assert (cursor.archived_through_ms, cursor.held, cursor.archived_runs) == (None, (), 0)
