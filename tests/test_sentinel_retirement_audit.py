"""sentinel-year's retention deletes each run a day after it settled, long
before the end-of-run audit, so the harness audits a run as its log is
deleted (``scenarios.system.System(audit_deletes=n)``): every run whose
history went through recovery, and one in n of the others (the knob
``retire_audit_every``)."""
from __future__ import annotations

import pytest

import model.runs as model_runs
from scenarios import registry
from scenarios.system import System
from sim.clock import parse_duration_ms
from sim.invariants import InvariantSet
from sim.runner import run
from sim.scenario import ScenarioOptions

FIRST_HOURS_MS = 2 * 3_600_000


def year(seed: int, duration: str, *, swarm: bool = False, **knobs: int):
    return run(registry.get("sentinel-year"),
               ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), swarm=swarm, knobs=knobs))


def forget_keys_in_the_first_hours(monkeypatch):
    """A planted bug in the first two hours only: a run's input record
    forgets its idempotency key, so those logs no longer rebuild the ledger.
    Retention deletes them at the second midnight."""
    real = model_runs.LedgerRuns._append

    async def forgetful(self, run_id, batch_id, records):
        if int(run_id.rpartition("@")[2]) < FIRST_HOURS_MS:
            records = [(entry[0], {k: v for k, v in entry[1].items() if k != "idempotencyKey"})
                       if type(entry) is tuple and entry[0] == "input" else entry for entry in records]
        return await real(self, run_id, batch_id, records)

    monkeypatch.setattr(model_runs.LedgerRuns, "_append", forgetful)


def test_a_run_is_audited_as_retention_deletes_it(monkeypatch):
    forget_keys_in_the_first_hours(monkeypatch)
    result = year(1, "50h", retire_audit_every=1)
    assert not result.passed
    first = result.violations[0]
    assert first.invariant == "exactly-once-settlement" and "rebuilding the ledger" in first.message, first
    assert first.time_ms < parse_duration_ms("49h"), first  # at the second midnight's pass, not the run's end


def test_without_the_audit_at_deletion_the_first_hours_would_go_unchecked(monkeypatch):
    """The same bug, the audit at deletion switched off: the end-of-run
    audit reads only the last day's runs, and the run passes."""
    forget_keys_in_the_first_hours(monkeypatch)
    monkeypatch.setattr(InvariantSet, "audit_retiring", lambda self, view: None)
    result = year(1, "50h", retire_audit_every=1)
    assert result.passed, result.violations


def record_audits(patch, audited: list[tuple[str, bool]]) -> None:
    """Each run audited before its deletion, and whether it went through recovery."""
    real = System._audit_before_delete

    def recording(self, conversation_id):
        recovered = conversation_id in self._recovered
        before = self.audited_before_delete
        real(self, conversation_id)
        if self.audited_before_delete > before:
            audited.append((conversation_id, recovered))

    patch.setattr(System, "_audit_before_delete", recording)


@pytest.fixture(scope="module")
def every_deleted_run_audited():
    """Seed 3 for 50 hours with every deleted run audited, and the runs it
    audited: one run shared by the two tests that need it."""
    audited: list[tuple[str, bool]] = []
    with pytest.MonkeyPatch.context() as patch:
        record_audits(patch, audited)
        result = year(3, "50h", retire_audit_every=1)
    return result, audited


def test_one_calm_run_in_n_and_every_recovered_run_is_audited(monkeypatch, every_deleted_run_audited):
    """``retire_audit_every=64``: of the ~280 runs of the first day, deleted
    at the second midnight, one calm run in 64 is audited and every run
    whose history went through recovery is; at 1, every deleted run is."""
    audited: list[tuple[str, bool]] = []
    record_audits(monkeypatch, audited)
    sampled = year(3, "50h", swarm=False, retire_audit_every=64, fault_intensity=100)
    assert sampled.passed, sampled.violations
    recovered = [c for c, r in audited if r]
    calm = [c for c, r in audited if not r]
    assert recovered, "fault intensity 100 sends some runs through recovery"
    # The calm ones: the first of every 64 deleted, in order of deletion.
    assert 1 <= len(calm) <= 288 // 64 + 1, len(calm)
    assert sampled.stats["conversations_audited_before_delete"] == len(audited)
    every, audited = every_deleted_run_audited
    assert every.passed, every.violations
    assert every.stats["conversations_audited_before_delete"] == len(audited) >= 280


def test_a_pass_cut_between_the_ledger_and_the_log_leaves_nothing_half_visible(monkeypatch):
    """Retention purges a run's ledger rows, then deletes its log. A process
    that dies between the two (here: at the last pass before the run ends,
    so no later pass finishes the promised deletion) leaves a log that no
    ledger row points at: no reader finds it, and every audit holds. (In the
    other order, the end-of-run audit found a settled run with no log:
    exactly-once-settlement and replay-determinism failed.)"""
    import model.retention as retention

    real = retention.Retention._delete
    cut: list[str] = []

    async def dies_after_the_purge(self, run_id):
        if not cut:
            cut.append(run_id)
            await self.ledger.purge_conversation(run_id)
            return
        await real(self, run_id)

    monkeypatch.setattr(retention.Retention, "_delete", dies_after_the_purge)
    result = year(1, "48h")
    assert cut == ["sentinel-0@0"]
    assert result.passed, result.violations


def test_exactly_once_wake_holds_the_archive_to_the_runs_that_started():
    """The archive is a run's only record once retention deleted its rows:
    a started occurrence archived as never run loses it, and a run archived
    for an occurrence that never started is invented. Both are caught as
    the ``schedules.retire`` commits; a held run and a skipped occurrence
    are as they should be."""
    from scenarios.invariants.exactly_once_wake import ExactlyOnceWake
    from model.schedules import Schedule
    from sim.trace import Trace

    trace = Trace(clock=lambda: 0)
    found = []
    checker = ExactlyOnceWake({"s": Schedule("s", 10, end_ms=100)}, end_ms=100)
    checker.attach(trace, lambda: 0, found.append)

    def admit(occurrence_ms):
        trace.emit("w", "ledger.admit", {"conversation": f"s@{occurrence_ms}", "principal": "s",
                                         "key": f"s@{occurrence_ms}", "admitted_ms": occurrence_ms, "parent": None,
                                         "submission": f"sub-{occurrence_ms}", "queue_seq": 1, "replayed": False})
        trace.emit("w", "ledger.finalize_settlement", {"submission": f"sub-{occurrence_ms}"})

    def retire(occurrence_ms, run, *, hold=False, retired=True):
        trace.emit("w", "schedules.retire", {"schedule": "s", "occurrence_ms": occurrence_ms, "run": run,
                                             "summary": None, "hold": hold, "retired": retired})

    for occurrence_ms in (0, 10, 20):
        admit(occurrence_ms)
    trace.emit("w", "wake.skipped", {"schedule": "s", "first_ms": 30, "last_ms": 30})
    retire(0, "s@0")  # archived with its summary
    retire(10, "s@10", hold=True)  # held by a pin
    retire(30, None)  # never ran: skipped
    assert found == []
    retire(20, None, retired=False)  # already retired: no change, nothing judged
    assert found == []
    retire(20, None)
    admit(40)
    retire(50, "s@50")
    assert [v.message for v in found] == [
        "s@20: the run started, yet retention archived the occurrence as one that never ran (its summary is lost)",
        "s@50: retention archived a run of an occurrence that never started"]


def test_the_audits_of_deleted_runs_are_counted_apart_from_the_wakes_work(monkeypatch, every_deleted_run_audited):
    """``stats.work`` is the system's work per wake (what bench budgets):
    with every deleted run audited it is what the same run counts with the
    audit switched off, and the audits' own encodings and digests are
    ``stats.audit_work``."""
    from sim.face.bench import work_per_wake

    audited, _ = every_deleted_run_audited
    assert audited.passed, audited.violations
    with monkeypatch.context() as patch:
        patch.setattr(InvariantSet, "audit_retiring", lambda self, view: None)
        unaudited = year(3, "50h", retire_audit_every=1)
    assert unaudited.trace_digest == audited.trace_digest
    assert audited.stats["work"] == unaudited.stats["work"]
    audit = audited.stats["audit_work"]
    assert audit["digests"] > 0 and audit["decodes"] > 0 and not any(unaudited.stats["audit_work"].values())
    assert work_per_wake(audited.stats)["audit"]["digests"] == round(audit["digests"] / audited.stats["wakes"], 2)


def test_the_last_occurrence_before_a_schedules_end_is_the_latest_due_after_it():
    """A schedule's occurrences lie in ``[first, end)``: a driver that wakes
    after the end (it was blocked behind a parked run until then) starts the
    last occurrence before the end, which catch-up ``latest`` allows; an
    occurrence at or past the end is not one (sentinel-year seed 6, 1h, once
    flagged this as a skipped latest occurrence)."""
    from model.schedules import Schedule
    from scenarios.invariants.exactly_once_wake import ExactlyOnceWake
    from sim.trace import Trace

    trace = Trace(clock=lambda: 0)
    found = []
    checker = ExactlyOnceWake({"s": Schedule("s", 10, end_ms=40)}, end_ms=40)
    checker.attach(trace, lambda: 0, found.append)
    trace.emit("w", "ledger.admit", {"conversation": "s@0", "principal": "s", "key": "s@0", "admitted_ms": 0,
                                     "parent": None, "submission": "sub-0", "queue_seq": 1, "replayed": False})
    trace.emit("w", "ledger.finalize_settlement", {"submission": "sub-0"})
    trace.emit("w", "wake.skipped", {"schedule": "s", "first_ms": 10, "last_ms": 20})
    trace.emit("w", "ledger.admit", {"conversation": "s@30", "principal": "s", "key": "s@30", "admitted_ms": 47,
                                     "parent": None, "submission": "sub-30", "queue_seq": 1, "replayed": False})
    assert found == []
