"""Retention with a pin seam (model/retention.py), both adapters.

A schedule every 5 minutes, a handful of runs settled through LedgerRuns, a
findings projector as the scenario runs it (pin the evidence, then apply the
run), and ``Retention.run_pass``:

- runs older than the TTL are archived (summary chained into the cursor's
  archive digest) and deleted (log conversation and ledger rows gone), the
  watermark moves, and a late duplicate start of them is refused;
- a pass stops at the first run with open work and never passes the
  findings projection's checkpoint;
- a run a live finding cites is held (the watermark passes it, the archive
  does not), and archived + deleted once its findings close;
- blobs past their TTL are reclaimed unless pinned; a pin whose holder
  finding closed is dropped (and its blob then reclaimed);
- a crash after the archive step and before the delete (``pending_delete``)
  is finished by the next pass, without archiving anything twice;
- the retention process (``retention_forever``) runs a pass at every
  midnight; a retryable failure waits a minute and starts the pass over.
"""
from __future__ import annotations

import pytest

from scenarios.storage import run_sync as drive  # a call that must not suspend (the fake sleep never does)

from model.canonical import ZERO_DIGEST
from model.conversation.content_store import InMemoryContentStore, SqliteContentStore
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.records import NotMaterialized
from model.conversation.sqlite_store import SqliteConversationStore
from model.findings import InMemoryFindingsProjection, SqliteFindingsProjection
from model.kernel.records import COMPLETED, STEP_COMPLETED, StartOutcome
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.records import PurgeRefused
from model.ledger.rules import submission_id_for
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.pins import InMemoryPinIndex, SqlitePinIndex
from model.retention import (
    RETENTION_EVERY_MS,
    RETENTION_RETRY_MS,
    Retention,
    RetentionPolicy,
    RetentionReport,
    retention_forever,
    run_summary,
)
from model.runs import LedgerRuns
from model.schedule_store import InMemoryScheduleStore, SqliteScheduleStore, archive_link
from model.schedules import Schedule, run_id_for
from model.sqlite_db import open_database
from model.ledger.records import settlement_of
from tests.fakes import FakeRuntime, Flaky, Stop

S = "sentinel"
MIN = 60_000
EVERY = 5 * MIN
LEASE_MS = 30_000
SCHEDULE = Schedule(S, EVERY)
# Runs older than 12 minutes go; blobs after 30; findings close after an hour.
POLICY = RetentionPolicy(run_ttl_ms=12 * MIN, blob_ttl_ms=30 * MIN, finding_ttl_ms=60 * MIN)
SETTLE_AFTER_MS = 1_000  # a run settles a second after its occurrence


class Crash(BaseException):
    """The process dies here."""


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def now(self) -> int:
        return self.ms

    async def sleep(self, ms: int) -> None:
        self.ms += ms


class Probe:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def emit(self, kind: str, **fields) -> None:
        self.events.append((kind, fields))


class CrashAfter:
    """A port that lets ``method`` complete, then kills the caller (once)."""

    def __init__(self, target, method: str) -> None:
        self._target = target
        self._method = method
        self.fired = False

    def __getattr__(self, name):
        attribute = getattr(self._target, name)
        if name != self._method:
            return attribute

        async def call(*args, **kwargs):
            result = await attribute(*args, **kwargs)
            if not self.fired:
                self.fired = True
                raise Crash(name)
            return result

        return call


def finding(finding_id: str, *evidence: str) -> dict:
    return {"id": finding_id, "category": "slow-query", "severity": "high", "confidence": 90,
            "targets": ["db.orders"], "evidence": list(evidence), "model": "m-1"}


class World:
    """Every store retention touches (memory, or all on one SQLite connection)."""

    def __init__(self, kind: str, tmp_path) -> None:
        self.kind = kind
        self.clock = Clock()
        self.probe = Probe()
        self.conn = None
        if kind == "memory":
            self.ledger = InMemorySubmissionLedger()
            self.log = InMemoryConversationStore()
            self.schedules = InMemoryScheduleStore()
            self.findings = InMemoryFindingsProjection()
            self.pins = InMemoryPinIndex()
            self.content = InMemoryContentStore()
        else:
            self.conn = open_database(str(tmp_path / "retention.db"))
            self.ledger = SqliteSubmissionLedger(self.conn)
            self.log = SqliteConversationStore(self.conn)
            self.schedules = SqliteScheduleStore(self.conn)
            self.findings = SqliteFindingsProjection(self.conn)
            self.pins = SqlitePinIndex(self.conn)
            self.content = SqliteContentStore(self.conn)
        self.runs = LedgerRuns(self.ledger, self.log, self.schedules, "worker-1", lease_ms=LEASE_MS,
                               now_ms=self.clock.now, sleep_ms=self.clock.sleep)

    def retention(self, **ports) -> Retention:
        stores = dict(ledger=self.ledger, log=self.log, schedules=self.schedules, findings=self.findings,
                      pins=self.pins, content=self.content)
        stores.update(ports)
        return Retention(**stores, policy=POLICY, probe=self.probe)

    def run_pass(self, now_ms: int, **ports) -> RetentionReport:
        self.clock.ms = max(self.clock.ms, now_ms)
        return drive(self.retention(**ports).run_pass([SCHEDULE], now_ms))

    # -- the workload -----------------------------------------------------------

    def start(self, n: int) -> str:
        occurrence_ms = n * EVERY
        self.clock.ms = max(self.clock.ms, occurrence_ms)
        run = run_id_for(S, occurrence_ms)
        started = drive(self.runs.start_execution(run, schedule_id=S, occurrence_ms=occurrence_ms, flow_version=1,
                                                  input={"n": n}, started_at_ms=occurrence_ms))
        assert started.replayed is False
        drive(self.runs.append_step(run, 1, "stats", STEP_COMPLETED, {"n": n}))
        return run

    def finish(self, n: int, findings: list | None = None) -> None:
        run = run_id_for(S, n * EVERY)
        drive(self.runs.finish_execution(run, status=COMPLETED, output={"findings": findings or []},
                                         finished_at_ms=n * EVERY + SETTLE_AFTER_MS))

    def settle(self, n: int, findings: list | None = None) -> str:
        run = self.start(n)
        self.finish(n, findings)
        return run

    def project(self, through_n: int) -> None:
        """The findings projector (as sentinel_year runs it): settled runs in
        occurrence order, evidence pinned before the run is applied."""
        checkpoint = drive(self.findings.checkpoint(S))
        occurrence_ms = 0 if checkpoint is None else checkpoint + EVERY
        while occurrence_ms <= through_n * EVERY:
            run = run_id_for(S, occurrence_ms)
            record = self.record(run)
            if record is None:
                drive(self.findings.advance_checkpoint(S, occurrence_ms))  # skipped
            elif record.outcome is None:
                return  # not settled: wait, in order
            else:
                found = settlement_of(record.reserved_record)["result"]["findings"]
                for f in found:
                    for ref in f["evidence"]:
                        drive(self.pins.pin(ref, f["id"]))
                drive(self.findings.apply_run(S, occurrence_ms, run, found, settled_at_ms=record.settled_at_ms))
            occurrence_ms += EVERY

    def blob(self, data: bytes, stored_at_ms: int) -> str:
        ref = drive(self.content.put(data))
        drive(self.pins.record_blob(ref, len(data), stored_at_ms=stored_at_ms))
        return ref

    # -- reading the stores directly --------------------------------------------

    def record(self, run: str):
        return drive(self.ledger.get_by_idempotency_key(run, S, run))

    def summary(self, run: str) -> dict:
        return drive(run_summary(self.ledger, self.log, run, self.record(run)))

    def cursor(self):
        return drive(self.schedules.cursor(S))

    def present(self, run: str) -> bool:
        """Both the run's log and its ledger rows exist (False: both gone)."""
        in_ledger = self.record(run) is not None
        try:
            drive(self.log.inspect_tail(run))
            in_log = True
        except NotMaterialized:
            in_log = False
        if not in_ledger:
            assert drive(self.ledger.get(submission_id_for(run, 1))) is None
        assert in_ledger == in_log, (run, in_ledger, in_log)
        return in_log

    def has_blob(self, ref: str) -> bool:
        has = drive(self.content.has(ref))
        assert has == (drive(self.pins.blob(ref)) is not None), ref  # reclaimed: content and index row together
        return has

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


@pytest.fixture(params=["memory", "sqlite"])
def world(request, tmp_path):
    w = World(request.param, tmp_path)
    yield w
    w.close()


def chain(summaries) -> str:
    value = ZERO_DIGEST
    for s in summaries:
        value = archive_link(value, s)
    return value


def run_of(n: int) -> str:
    return run_id_for(S, n * EVERY)


# --- archive and delete ---------------------------------------------------------------


def test_a_pass_archives_and_deletes_runs_older_than_the_ttl(world):
    runs = [world.settle(n) for n in range(6)]  # occurrences 0, 5, ..., 25 min
    world.project(5)
    summaries = [world.summary(run) for run in runs]
    # At 30 min, runs before 18 min go: occurrences 0, 5, 10, 15.
    report = world.run_pass(30 * MIN)
    assert report == RetentionReport(archived=4)
    for run in runs[:4]:
        assert not world.present(run)
    for run in runs[4:]:
        assert world.present(run)
    cursor = world.cursor()
    assert cursor.archived_through_ms == 15 * MIN
    assert cursor.archived_runs == 4
    assert cursor.archive_digest == chain(summaries[:4])
    assert cursor.pending_delete == runs[3]
    assert cursor.held == ()
    assert cursor.high_water_ms == 25 * MIN  # the driver's mark is untouched
    assert world.probe.events[-1] == ("retention.pass", dict(archived=4, held=0, released=0, skipped=0,
                                                             findings_closed=0, unpinned=0, reclaimed=0))
    # The summary commits to the run's log and settlement.
    assert summaries[0]["runId"] == runs[0] and summaries[0]["outcome"] == "completed"
    assert summaries[0]["tailSeq"] == 4  # conversation-created, the input, the step, the settlement
    # A late duplicate alarm for an archived run is refused (by a fresh process).
    fresh = LedgerRuns(world.ledger, world.log, world.schedules, "worker-2", lease_ms=LEASE_MS,
                       now_ms=world.clock.now, sleep_ms=world.clock.sleep)
    assert drive(fresh.start_execution(runs[1], schedule_id=S, occurrence_ms=EVERY, flow_version=1,
                                       input={"n": 1}, started_at_ms=world.clock.ms)) == StartOutcome(None, True)
    assert world.record(runs[1]) is None
    # The same pass again: nothing more to do, nothing archived twice.
    assert world.run_pass(30 * MIN) == RetentionReport()
    assert world.cursor() == cursor
    # Later, the rest ages out and chains on.
    assert world.run_pass(40 * MIN).archived == 2
    final = world.cursor()
    assert final.archived_through_ms == 25 * MIN and final.archived_runs == 6
    assert final.archive_digest == chain(summaries)
    assert all(not world.present(run) for run in runs)
    if world.kind == "memory":
        assert world.log.counts()["conversations"] == 0


def test_skipped_occurrences_move_the_watermark_without_archiving(world):
    runs = [world.settle(0), world.settle(2)]  # occurrence 5 min never ran
    world.project(2)
    summaries = [world.summary(run) for run in runs]
    report = world.run_pass(30 * MIN)
    assert report == RetentionReport(archived=2, skipped=1)
    cursor = world.cursor()
    assert cursor.archived_through_ms == 10 * MIN
    assert cursor.archive_digest == chain(summaries)
    assert cursor.archived_runs == 2


def test_an_empty_schedule_is_left_alone(world):
    assert world.run_pass(60 * MIN) == RetentionReport()
    assert world.cursor().archived_through_ms is None


# --- what a pass never passes -------------------------------------------------------------


def test_a_pass_stops_at_a_run_with_open_work(world):
    world.settle(0)
    world.settle(1)
    open_run = world.start(2)  # started, never finished
    world.settle(3)
    world.project(1)
    drive(world.findings.advance_checkpoint(S, 3 * EVERY))  # isolate the open-work rule from the checkpoint
    report = world.run_pass(60 * MIN)
    assert report.archived == 2
    assert world.cursor().archived_through_ms == EVERY
    assert world.present(open_run) and world.present(run_of(3))
    assert world.record(open_run).outcome is None
    # Purging it directly is refused as well: open work is never deleted.
    with pytest.raises(PurgeRefused):
        drive(world.ledger.purge_conversation(open_run))
    # Once it settles, the next pass continues from there.
    world.finish(2)
    assert world.run_pass(60 * MIN).archived == 2
    assert world.cursor().archived_through_ms == 3 * EVERY
    assert not world.present(open_run) and not world.present(run_of(3))


def test_a_pass_never_passes_the_findings_checkpoint(world):
    runs = [world.settle(n) for n in range(6)]
    # Nothing projected yet: nothing may be retired (a run might pin something).
    assert world.run_pass(60 * MIN) == RetentionReport()
    assert world.cursor().archived_through_ms is None
    assert all(world.present(run) for run in runs)
    # Projected through 5 min: only occurrences 0 and 5 go, though all are past the TTL.
    world.project(1)
    assert world.run_pass(60 * MIN).archived == 2
    assert world.cursor().archived_through_ms == EVERY
    assert all(world.present(run) for run in runs[2:])
    world.project(5)
    assert world.run_pass(60 * MIN).archived == 4
    assert world.cursor().archived_through_ms == 5 * EVERY


def test_a_run_the_projector_has_not_applied_is_not_retired_even_if_its_finding_would_pin_it(world):
    world.settle(0)
    world.settle(1, [finding("f-1")])
    world.project(0)  # run 1 (with a finding) not projected yet
    world.run_pass(60 * MIN)
    assert world.cursor().archived_through_ms == 0
    assert world.present(run_of(1))


# --- pins: held runs ----------------------------------------------------------------------


def test_runs_with_live_findings_are_held_then_released_when_they_close(world):
    evidence = world.blob(b"EXPLAIN plan of run 1", stored_at_ms=EVERY)
    runs = [world.settle(0), world.settle(1, [finding("f-1", evidence)]), world.settle(2), world.settle(3),
            world.settle(4), world.settle(5)]
    world.project(5)
    summaries = [world.summary(run) for run in runs]
    report = world.run_pass(30 * MIN)
    assert (report.archived, report.held) == (3, 1)
    cursor = world.cursor()
    assert cursor.held == (runs[1],)
    assert cursor.archived_through_ms == 15 * MIN  # the watermark passes the held run ...
    assert cursor.archived_runs == 3
    assert cursor.archive_digest == chain([summaries[0], summaries[2], summaries[3]])  # ... the archive does not
    assert world.present(runs[1])
    assert not any(world.present(run) for run in (runs[0], runs[2], runs[3]))
    # A held occurrence is retired all the same: a duplicate start is refused.
    assert drive(world.runs.start_execution(runs[1], schedule_id=S, occurrence_ms=EVERY, flow_version=1,
                                            input={"n": 1}, started_at_ms=world.clock.ms)) == StartOutcome(None, True)
    # The evidence outlives its blob TTL while the finding is live.
    assert world.run_pass(50 * MIN).held == 0  # held once, not again
    assert world.has_blob(evidence) and world.present(runs[1])
    assert world.cursor().held == (runs[1],)
    # The finding ages out (opened at 5 min + 1 s, closes after 60 min): this
    # pass closes it and drops its pin (the blob is past its TTL: reclaimed) ...
    report = world.run_pass(70 * MIN)
    assert (report.findings_closed, report.unpinned, report.reclaimed) == (1, 1, 1)
    assert not world.has_blob(evidence)
    assert drive(world.pins.pinned_refs()) == ()
    # ... (the run's release comes first in a pass, so it is the next pass's work) ...
    assert world.present(runs[1]) and world.cursor().held == (runs[1],)
    # ... which archives it after everything archived so far, and deletes it.
    report = world.run_pass(70 * MIN)
    assert report.released == 1
    final = world.cursor()
    assert final.held == ()
    assert final.archived_runs == 6
    assert final.archive_digest == chain([summaries[n] for n in (0, 2, 3, 4, 5, 1)])
    assert final.pending_delete == runs[1]
    assert not world.present(runs[1])
    # Released exactly once.
    assert world.run_pass(70 * MIN) == RetentionReport()
    assert world.cursor() == final


def test_a_held_run_whose_finding_closed_early_is_released_by_the_next_pass(world):
    runs = [world.settle(0, [finding("f-0")]), world.settle(1)]
    world.project(1)
    summaries = [world.summary(run) for run in runs]
    assert world.run_pass(30 * MIN).held == 1
    drive(world.findings.close_expired(10 ** 9, now_ms=30 * MIN, limit=10))  # closed by the app
    report = world.run_pass(30 * MIN)
    assert report.released == 1
    assert world.cursor().archive_digest == chain([summaries[1], summaries[0]])
    assert not world.present(runs[0])


# --- pins: blobs ---------------------------------------------------------------------------


def test_blobs_past_the_ttl_are_reclaimed_unless_pinned(world):
    cited = world.blob(b"cited evidence", stored_at_ms=0)
    loose = world.blob(b"raw telemetry", stored_at_ms=0)
    recent = world.blob(b"recent telemetry", stored_at_ms=35 * MIN)
    orphan = world.blob(b"evidence of a finding that is gone", stored_at_ms=0)
    drive(world.pins.pin(orphan, "f-gone"))  # its holder is no live finding
    world.settle(8, [finding("f-live", cited)])
    world.project(8)
    report = world.run_pass(40 * MIN)  # blobs stored before 10 min are past the TTL
    assert (report.reclaimed, report.unpinned) == (2, 1)
    assert world.has_blob(cited)  # pinned by a live finding
    assert not world.has_blob(loose)  # past its TTL, nobody cites it
    assert world.has_blob(recent)  # within its TTL
    assert not world.has_blob(orphan)  # the pin of a closed finding went first
    assert drive(world.pins.pinned_refs()) == (cited,)
    assert drive(world.pins.holders(cited)) == ("f-live",)
    # The finding closes (opened at 40 min + 1 s): its pin goes, then its blob.
    report = world.run_pass(101 * MIN)
    assert (report.findings_closed, report.unpinned, report.reclaimed) == (1, 1, 2)
    assert not world.has_blob(cited) and not world.has_blob(recent)
    assert drive(world.pins.pinned_refs()) == ()


def test_a_blob_cited_by_two_findings_survives_until_both_close(world):
    ref = world.blob(b"shared evidence", stored_at_ms=0)
    world.settle(0, [finding("f-a", ref)])
    world.settle(6, [finding("f-b", ref)])
    world.project(6)
    world.run_pass(70 * MIN)  # f-a (opened at 1 s) closes; f-b (opened at 30 min) is live
    assert world.has_blob(ref)
    assert drive(world.pins.holders(ref)) == ("f-b",)
    world.run_pass(95 * MIN)
    assert not world.has_blob(ref)


# --- crash between archive and delete ---------------------------------------------------------------


def test_a_crash_between_retire_and_delete_is_finished_by_the_next_pass(world):
    runs = [world.settle(n) for n in range(4)]
    world.project(3)
    summaries = [world.summary(run) for run in runs]
    # A pass archived occurrence 0 and died before deleting it.
    assert drive(world.schedules.retire(S, 0, runs[0], summaries[0])) is True
    assert world.cursor().pending_delete == runs[0]
    assert world.present(runs[0])
    report = world.run_pass(30 * MIN)
    assert report.archived == 3  # runs 1..3; run 0 was archived by the dead pass, not again
    assert not world.present(runs[0])
    cursor = world.cursor()
    assert cursor.archived_runs == 4
    assert cursor.archive_digest == chain(summaries)


def test_a_crash_inside_the_delete_is_finished_by_the_next_pass(world):
    runs = [world.settle(n) for n in range(2)]
    world.project(1)
    summaries = [world.summary(run) for run in runs]
    # Archived, log deleted, died before the ledger rows went.
    drive(world.schedules.retire(S, 0, runs[0], summaries[0]))
    drive(world.log.delete_conversation(runs[0]))
    assert world.record(runs[0]) is not None
    world.run_pass(30 * MIN)
    assert world.record(runs[0]) is None
    assert not world.present(runs[0])
    assert world.cursor().archive_digest == chain(summaries)


def test_a_crash_between_release_and_delete_is_finished_by_the_next_pass(world):
    runs = [world.settle(0, [finding("f-0")]), world.settle(1)]
    world.project(1)
    world.run_pass(30 * MIN)
    assert world.cursor().held == (runs[0],)
    summary = world.summary(runs[0])
    # Its finding closed; a pass released it and died before deleting it.
    drive(world.findings.close_expired(10 ** 9, now_ms=30 * MIN, limit=10))
    assert drive(world.schedules.release(S, runs[0], summary)) is True
    assert world.present(runs[0])
    report = world.run_pass(30 * MIN)
    assert report.released == 0  # released once, by the dead pass
    assert not world.present(runs[0])
    assert world.cursor().archived_runs == 2


@pytest.mark.parametrize("port, method", [("schedules", "retire"), ("log", "delete_conversation"),
                                          ("ledger", "purge_conversation"), ("schedules", "release")])
def test_a_pass_killed_after_any_write_converges_with_a_clean_one(world, port, method, tmp_path):
    """Kill the pass right after one of its writes; the next pass must leave
    exactly the state a crash-free pass leaves."""

    def workload(w):
        runs = [w.settle(0), w.settle(1, [finding("f-1")]), w.settle(2), w.settle(3)]
        w.project(3)
        if method == "release":
            # Held first (by a clean pass), then released by the pass that dies.
            w.run_pass(30 * MIN)
            drive(w.findings.close_expired(10 ** 9, now_ms=30 * MIN, limit=10))
        return runs

    clean = World("memory", tmp_path)
    clean_runs = workload(clean)
    clean.run_pass(30 * MIN)
    expected = clean.cursor()

    runs = workload(world)
    crashing = CrashAfter(getattr(world, port), method)
    with pytest.raises(Crash):
        world.run_pass(30 * MIN, **{port: crashing})
    assert crashing.fired
    world.run_pass(30 * MIN)
    assert world.cursor() == expected
    assert [world.present(run) for run in runs] == [clean.present(run) for run in clean_runs]


# --- the retention process (retention_forever) ------------------------------------------

DAY = RETENTION_EVERY_MS


class Passes:
    """A retention stand-in: records each pass; ``fail`` is raised by the first ones."""

    def __init__(self, *fail: BaseException) -> None:
        self.calls: list[tuple[list, int]] = []
        self._fail = list(fail)

    async def run_pass(self, schedules, now_ms: int):
        self.calls.append((list(schedules), now_ms))
        if self._fail:
            raise self._fail.pop(0)
        return RetentionReport()


OTHER = Schedule("other", EVERY)


def test_retention_runs_a_pass_at_every_midnight():
    runtime = FakeRuntime(ms=DAY + 5 * MIN, sleeps_max=3)
    passes = Passes()
    with pytest.raises(Stop):
        drive(retention_forever(passes, iter([SCHEDULE, OTHER]), runtime))
    assert runtime.slept == [("sleep_until_ms", 2 * DAY), ("sleep_until_ms", 3 * DAY), ("sleep_until_ms", 4 * DAY)]
    # The schedules in the order given, every pass (a one-shot iterable too).
    assert passes.calls == [([SCHEDULE, OTHER], 2 * DAY), ([SCHEDULE, OTHER], 3 * DAY)]


def test_a_retryable_failure_waits_a_minute_and_starts_the_pass_over():
    runtime = FakeRuntime(ms=0, sleeps_max=5)
    passes = Passes(Flaky("busy"), Flaky("busy again"))
    with pytest.raises(Stop):
        drive(retention_forever(passes, [SCHEDULE], runtime))
    retry = ("sleep_ms", RETENTION_RETRY_MS)
    assert runtime.slept == [("sleep_until_ms", DAY), retry, retry, ("sleep_until_ms", 2 * DAY),
                             ("sleep_until_ms", 3 * DAY)]
    assert [now for _, now in passes.calls] == [DAY, DAY + MIN, DAY + 2 * MIN, 2 * DAY]


def test_a_failure_no_retry_clears_is_raised():
    passes = Passes(PurgeRefused("c", 1))
    with pytest.raises(PurgeRefused):
        drive(retention_forever(passes, [SCHEDULE], FakeRuntime(ms=0, sleeps_max=10)))
    assert len(passes.calls) == 1


def test_retention_forever_retires_on_the_real_stores(world):
    runs = [world.settle(n) for n in range(4)]
    world.project(3)
    runtime = FakeRuntime(ms=world.clock.ms, sleeps_max=2)
    with pytest.raises(Stop):
        drive(retention_forever(world.retention(), [SCHEDULE], runtime))
    assert all(not world.present(run) for run in runs)  # at midnight, all are past the TTL
    assert world.cursor().archived_runs == 4
    assert world.probe.events[-1] == ("retention.pass", dict(archived=4, held=0, released=0, skipped=0,
                                                             findings_closed=0, unpinned=0, reclaimed=0))
