"""The findings projection: schema validation, both adapters'
shared behaviour (idempotent apply, monotonic checkpoints, expiry order and
removal, counters), SQLite durability across reopen, rebuild-from-runs
digest equality, and the projector process (``project_once``,
``project_forever``) on the in-memory stores."""
from __future__ import annotations

import hashlib
import itertools
import pickle

import pytest

from model.findings import (
    FINDING_SCHEMA_VERSION,
    InMemoryFindingsProjection,
    InvalidFinding,
    ProjectedFinding,
    SqliteFindingsProjection,
    project_forever,
    project_once,
    projection_digest,
    rebuild_projection,
    validate_finding,
)
from model.ledger.memory_store import InMemorySubmissionLedger
from model.pins import InMemoryPinIndex
from model.schedules import Schedule, run_id_for
from model.sqlite_db import open_database
from scenarios.storage import run_sync
from tests.fakes import FakeRuntime, Flaky, Stop
from model.ledger.records import settlement_envelope


def _env(claim, record):
    """``record`` in ``claim``'s settlement record envelope (what the ledger reserves)."""
    return settlement_envelope(claim.submission_id, record, 0, receipt="rcpt-test")



def ref(n: int) -> str:
    return "sha256:" + hashlib.sha256(str(n).encode()).hexdigest()


def finding(fid: str, **overrides) -> dict:
    value = {
        "id": fid,
        "category": "slow-query",
        "severity": "medium",
        "confidence": 80,
        "targets": ["public.orders"],
        "evidence": [ref(1)],
        "model": "copilot-1",
    }
    value.update(overrides)
    return value


# --- adapters ------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def make_projection(request, tmp_path):
    """A factory: each call returns a projection; for SQLite, a new
    connection to the same file (a reopen keeps everything)."""
    opened = []

    def make():
        if request.param == "memory":
            if not opened:
                opened.append(InMemoryFindingsProjection())
            return opened[0]
        conn = open_database(str(tmp_path / "findings.db"))
        opened.append(conn)
        return SqliteFindingsProjection(conn)

    yield make
    if request.param == "sqlite":
        for conn in opened:
            conn.close()


@pytest.fixture
def projection(make_projection):
    return make_projection()


def apply(p, schedule_id, occurrence_ms, run_id, findings, settled_at_ms):
    return run_sync(p.apply_run(schedule_id, occurrence_ms, run_id, findings, settled_at_ms=settled_at_ms))


def live_ids(p) -> list[str]:
    return [f.finding_id for f in run_sync(p.live_findings())]


# --- schema --------------------------------------------------------------------------


def test_schema_version():
    assert FINDING_SCHEMA_VERSION == 1


def test_valid_findings_pass():
    assert validate_finding(finding("f1")) is None
    assert validate_finding(finding("f1", evidence=[], confidence=0)) is None
    assert validate_finding(finding("f1", confidence=100, targets=[f"t{i}" for i in range(8)],
                                    evidence=[ref(i) for i in range(8)])) is None
    for category in ("slow-query", "lock-wait", "bloat"):
        for severity in ("low", "medium", "high"):
            assert validate_finding(finding("f", category=category, severity=severity)) is None


def _without(key):
    value = finding("f1")
    del value[key]
    return value


BAD_FINDINGS = [
    ("not-a-dict", ["f1"], "must be a dict"),
    ("none", None, "must be a dict"),
    ("missing-id", _without("id"), "missing keys: id"),
    ("missing-model", _without("model"), "missing keys: model"),
    ("extra-key", {**finding("f1"), "note": "x"}, "unexpected keys: 'note'"),
    ("id-empty", finding(""), "id must be"),
    ("id-int", finding(7), "id must be"),
    ("category-unknown", finding("f1", category="deadlock"), "category must be"),
    ("category-type", finding("f1", category=["bloat"]), "category must be"),
    ("severity-unknown", finding("f1", severity="critical"), "severity must be"),
    ("severity-none", finding("f1", severity=None), "severity must be"),
    ("confidence-negative", finding("f1", confidence=-1), "confidence must be"),
    ("confidence-over", finding("f1", confidence=101), "confidence must be"),
    ("confidence-float", finding("f1", confidence=50.0), "confidence must be"),
    ("confidence-bool", finding("f1", confidence=True), "confidence must be"),
    ("confidence-str", finding("f1", confidence="50"), "confidence must be"),
    ("targets-empty", finding("f1", targets=[]), "targets must be"),
    ("targets-too-many", finding("f1", targets=[f"t{i}" for i in range(9)]), "targets must be"),
    ("targets-tuple", finding("f1", targets=("t",)), "targets must be"),
    ("targets-str", finding("f1", targets="public.orders"), "targets must be"),
    ("target-empty", finding("f1", targets=["a", ""]), "targets[1]"),
    ("target-int", finding("f1", targets=[3]), "targets[0]"),
    ("evidence-too-many", finding("f1", evidence=[ref(i) for i in range(9)]), "evidence must be"),
    ("evidence-not-list", finding("f1", evidence=ref(1)), "evidence must be"),
    ("evidence-no-prefix", finding("f1", evidence=[ref(1)[7:]]), "evidence[0]"),
    ("evidence-uppercase", finding("f1", evidence=[ref(1), ref(2).upper()]), "evidence[1]"),
    ("evidence-short", finding("f1", evidence=[ref(1)[:-1]]), "evidence[0]"),
    ("evidence-long", finding("f1", evidence=[ref(1) + "0"]), "evidence[0]"),
    ("evidence-newline", finding("f1", evidence=[ref(1) + "\n"]), "evidence[0]"),
    ("evidence-other-algo", finding("f1", evidence=["md5:" + "0" * 64]), "evidence[0]"),
    ("evidence-int", finding("f1", evidence=[1]), "evidence[0]"),
    ("model-empty", finding("f1", model=""), "model must be"),
    ("model-none", finding("f1", model=None), "model must be"),
]


@pytest.mark.parametrize("value, needle", [(v, n) for _, v, n in BAD_FINDINGS],
                         ids=[name for name, _, _ in BAD_FINDINGS])
def test_invalid_findings_are_named(value, needle):
    reason = validate_finding(value)
    assert reason is not None and needle in reason, reason
    assert "\n" not in reason


@pytest.mark.parametrize("value, needle", [(v, n) for _, v, n in BAD_FINDINGS],
                         ids=[name for name, _, _ in BAD_FINDINGS])
def test_invalid_finding_writes_nothing(projection, value, needle):
    with pytest.raises(InvalidFinding) as info:
        apply(projection, "s", 100, "s@100", [finding("ok"), value], 150)
    assert info.value.name == "InvalidFinding"
    assert info.value.run_id == "s@100"
    assert info.value.reason.startswith("findings[1]: ") and needle in info.value.reason
    assert live_ids(projection) == []
    assert run_sync(projection.checkpoint("s")) is None
    assert projection.counts() == {"live": 0, "opened": 0, "closed": 0}


def test_duplicate_id_in_one_run_is_invalid(projection):
    with pytest.raises(InvalidFinding, match="duplicate finding id"):
        apply(projection, "s", 100, "s@100", [finding("a"), finding("a")], 150)
    assert live_ids(projection) == [] and run_sync(projection.checkpoint("s")) is None


def test_findings_must_be_a_list(projection):
    with pytest.raises(InvalidFinding, match="findings must be a list"):
        apply(projection, "s", 100, "s@100", {"id": "a"}, 150)


def test_invalid_finding_error_pickles():
    exc = InvalidFinding("s@1", "findings[0]: id must be a non-empty str")
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is InvalidFinding and (copy.run_id, copy.reason) == (exc.run_id, exc.reason)
    assert str(copy) == str(exc)


@pytest.mark.parametrize("args", [
    ("", 1, "r", [], 1),
    ("s", -1, "r", [], 1),
    ("s", True, "r", [], 1),
    ("s", 1, "", [], 1),
    ("s", 1, "r", [], -5),
    ("s", 2**53, "r", [], 1),
])
def test_bad_arguments_are_value_errors(projection, args):
    with pytest.raises(ValueError):
        apply(projection, *args)
    assert run_sync(projection.checkpoint("s")) is None


# --- apply / checkpoint ---------------------------------------------------------------


def test_apply_projects_the_findings(projection):
    assert apply(projection, "s", 100, "s@100", [finding("b", severity="high", evidence=[ref(2), ref(3)]),
                                                   finding("a")], 150) == 2
    a, b = run_sync(projection.live_findings())
    assert a == ProjectedFinding("a", "s@100", "s", 100, "slow-query", "medium", (ref(1),), 150, None)
    assert b == ProjectedFinding("b", "s@100", "s", 100, "slow-query", "high", (ref(2), ref(3)), 150, None)
    assert run_sync(projection.checkpoint("s")) == 100
    assert run_sync(projection.live_for_run("s@100")) == (a, b)
    assert run_sync(projection.live_for_run("s@200")) == ()


def test_reapply_is_a_noop(projection):
    findings = [finding("a"), finding("b")]
    assert apply(projection, "s", 100, "s@100", findings, 150) == 2
    before = run_sync(projection.live_findings())
    # The same run again, even with a different settlement time: nothing changes.
    assert apply(projection, "s", 100, "s@100", findings, 999) == 0
    assert run_sync(projection.live_findings()) == before
    assert projection.counts() == {"live": 2, "opened": 2, "closed": 0}
    # An earlier occurrence arriving late is taken as applied too.
    assert apply(projection, "s", 50, "s@50", [finding("c")], 160) == 0
    assert live_ids(projection) == ["a", "b"]
    assert run_sync(projection.checkpoint("s")) == 100


def test_reapply_after_close_does_not_reopen(projection):
    apply(projection, "s", 100, "s@100", [finding("a")], 150)
    assert len(run_sync(projection.close_expired(1_000, now_ms=1_000, limit=10))) == 1
    assert apply(projection, "s", 100, "s@100", [finding("a")], 150) == 0
    assert live_ids(projection) == []
    assert projection.counts() == {"live": 0, "opened": 1, "closed": 1}


def test_live_id_from_another_run_is_not_reopened(projection):
    apply(projection, "s", 100, "s@100", [finding("a")], 150)
    assert apply(projection, "t", 100, "t@100", [finding("a", severity="high"), finding("b")], 160) == 1
    a, b = run_sync(projection.live_findings())
    assert (a.run_id, a.severity, a.opened_at_ms) == ("s@100", "medium", 150)
    assert b.run_id == "t@100"
    assert run_sync(projection.checkpoint("t")) == 100


def test_checkpoint_is_monotonic_and_per_schedule(projection):
    assert run_sync(projection.checkpoint("s")) is None
    run_sync(projection.advance_checkpoint("s", 300))
    assert run_sync(projection.checkpoint("s")) == 300
    run_sync(projection.advance_checkpoint("s", 200))
    assert run_sync(projection.checkpoint("s")) == 300
    assert apply(projection, "s", 250, "s@250", [finding("a")], 260) == 0
    assert apply(projection, "s", 300, "s@300", [finding("a")], 310) == 0
    assert apply(projection, "s", 400, "s@400", [finding("a")], 410) == 1
    assert run_sync(projection.checkpoint("s")) == 400
    assert apply(projection, "s", 500, "s@500", [], 510) == 0  # a run with no findings still moves it
    assert run_sync(projection.checkpoint("s")) == 500
    assert run_sync(projection.checkpoint("other")) is None
    assert apply(projection, "other", 100, "other@100", [finding("b")], 110) == 1
    assert run_sync(projection.checkpoint("other")) == 100
    assert run_sync(projection.checkpoint("s")) == 500


# --- close_expired -------------------------------------------------------------------


def _seed(projection):
    # opened_at_ms: c,d 100; a 200; b 300; e 400
    apply(projection, "s", 10, "s@10", [finding("d"), finding("c")], 100)
    apply(projection, "s", 20, "s@20", [finding("a")], 200)
    apply(projection, "t", 10, "t@10", [finding("b")], 300)
    apply(projection, "t", 20, "t@20", [finding("e")], 400)


def test_close_expired_order_limit_and_removal(projection):
    _seed(projection)
    first = run_sync(projection.close_expired(301, now_ms=1_000, limit=2))
    assert [f.finding_id for f in first] == ["c", "d"]
    assert all(f.closed_at_ms == 1_000 for f in first)
    assert live_ids(projection) == ["a", "b", "e"]
    assert run_sync(projection.live_for_run("s@10")) == ()
    assert projection.counts() == {"live": 3, "opened": 5, "closed": 2}

    second = run_sync(projection.close_expired(301, now_ms=2_000, limit=10))
    assert [(f.finding_id, f.opened_at_ms, f.closed_at_ms) for f in second] == [("a", 200, 2_000), ("b", 300, 2_000)]
    assert second[1] == ProjectedFinding("b", "t@10", "t", 10, "slow-query", "medium", (ref(1),), 300, 2_000)
    assert live_ids(projection) == ["e"]
    # The cutoff is exclusive; nothing else is old enough.
    assert run_sync(projection.close_expired(400, now_ms=3_000, limit=10)) == ()
    assert run_sync(projection.close_expired(10_000, now_ms=3_000, limit=0)) == ()
    assert live_ids(projection) == ["e"]
    assert [f.finding_id for f in run_sync(projection.close_expired(401, now_ms=3_000, limit=10))] == ["e"]
    assert live_ids(projection) == []
    assert projection.counts() == {"live": 0, "opened": 5, "closed": 5}
    assert run_sync(projection.close_expired(10_000, now_ms=4_000, limit=10)) == ()


def test_close_expired_rejects_bad_arguments(projection):
    with pytest.raises(ValueError):
        run_sync(projection.close_expired(-1, now_ms=1, limit=1))
    with pytest.raises(ValueError):
        run_sync(projection.close_expired(1, now_ms=1, limit=-1))


def test_counters_accumulate(projection):
    for i in range(5):
        apply(projection, "s", 100 * (i + 1), f"s@{100 * (i + 1)}", [finding(f"f{i}-a"), finding(f"f{i}-b")], 1_000 * i)
        run_sync(projection.close_expired(1_000 * i, now_ms=1_000 * i, limit=1))
    # Each round closes one of the previous round's findings.
    assert projection.counts() == {"live": 6, "opened": 10, "closed": 4}


# --- durability ----------------------------------------------------------------------


def test_sqlite_reopen_keeps_everything(tmp_path):
    path = str(tmp_path / "reopen.db")
    first = SqliteFindingsProjection.open(path)
    _seed(first)
    run_sync(first.advance_checkpoint("u", 70))
    run_sync(first.close_expired(101, now_ms=500, limit=1))
    before = (run_sync(first.live_findings()), first.counts(),
              [run_sync(first.checkpoint(s)) for s in ("s", "t", "u", "v")])
    first.close()

    again = SqliteFindingsProjection.open(path)  # schema creation is idempotent
    try:
        after = (run_sync(again.live_findings()), again.counts(),
                 [run_sync(again.checkpoint(s)) for s in ("s", "t", "u", "v")])
        assert after == before
        assert after[1] == {"live": 4, "opened": 5, "closed": 1}
        assert after[2] == [20, 20, 70, None]
        assert apply(again, "s", 20, "s@20", [finding("a")], 200) == 0
    finally:
        again.close()


def test_shared_connection_projection_sees_the_same_file(make_projection):
    first = make_projection()
    _seed(first)
    second = make_projection()
    assert run_sync(second.live_findings()) == run_sync(first.live_findings())
    assert second.counts() == first.counts()


def test_memory_and_sqlite_agree(tmp_path):
    conn = open_database(str(tmp_path / "agree.db"))
    try:
        projections = [InMemoryFindingsProjection(), SqliteFindingsProjection(conn)]
        results = []
        for p in projections:
            out = []
            for step in range(30):
                schedule = f"s{step % 3}"
                occurrence = 100 * (step // 3 + 1)
                findings = [finding(f"{schedule}-{occurrence}-{k}", severity=("low", "high")[k % 2],
                                    evidence=[ref(step + k)]) for k in range(step % 4)]
                out.append(apply(p, schedule, occurrence, f"{schedule}@{occurrence}", findings, 10 * step))
                out.append(apply(p, schedule, occurrence, f"{schedule}@{occurrence}", findings, 10 * step))
                if step % 5 == 4:
                    out.append(run_sync(p.close_expired(10 * step - 30, now_ms=10 * step, limit=3)))
            out.append(run_sync(p.live_findings()))
            out.append(p.counts())
            results.append(out)
        assert results[0] == results[1]
    finally:
        conn.close()


# --- digest and rebuild ---------------------------------------------------------------


def test_projection_digest_is_order_independent_and_sensitive():
    a = ProjectedFinding("a", "s@1", "s", 1, "bloat", "low", (ref(1),), 10)
    b = ProjectedFinding("b", "s@1", "s", 1, "bloat", "low", (), 10)
    assert projection_digest([a, b]) == projection_digest((b, a)) == projection_digest(iter([b, a]))
    assert len(projection_digest([])) == 64
    assert projection_digest([a]) != projection_digest([a, b])
    assert projection_digest([a, b]) != projection_digest([a, ProjectedFinding("b", "s@1", "s", 1, "bloat", "high", (), 10)])
    with pytest.raises(ValueError, match="appears twice"):
        projection_digest([a, a])


def _runs():
    runs = []
    for n, (schedule, occurrence) in enumerate(itertools.product(("s", "t"), (100, 200, 300, 400))):
        findings = [finding(f"{schedule}@{occurrence}/{k}", category=("bloat", "lock-wait")[k % 2],
                            evidence=[ref(n), ref(k)]) for k in range(n % 3)]
        runs.append((schedule, occurrence, f"{schedule}@{occurrence}", findings, 1_000 * occurrence + n))
    # Settlement order interleaves the schedules.
    return sorted(runs, key=lambda run: (run[1], run[0]))


def test_rebuild_digest_equals_live_digest(projection):
    runs = _runs()
    closed_ids: set[str] = set()
    for i, (schedule, occurrence, run_id, findings, settled) in enumerate(runs):
        apply(projection, schedule, occurrence, run_id, findings, settled)
        if i in (3, 5):
            closed = run_sync(projection.close_expired(settled, now_ms=settled, limit=2))
            assert closed
            closed_ids.update(f.finding_id for f in closed)
    # A redelivered run changes neither side.
    apply(projection, *runs[2][:4], runs[2][4])

    live = run_sync(projection.live_findings())
    assert live
    rebuilt = run_sync(rebuild_projection(runs, closed_ids=frozenset(closed_ids)))
    assert isinstance(rebuilt, InMemoryFindingsProjection)
    assert run_sync(rebuilt.live_findings()) == live
    assert projection_digest(run_sync(rebuilt.live_findings())) == projection_digest(live)
    for schedule in ("s", "t"):
        assert run_sync(rebuilt.checkpoint(schedule)) == run_sync(projection.checkpoint(schedule)) == 400
    # Forgetting one closed id makes the rebuilt set differ.
    forgotten = set(closed_ids)
    forgotten.pop()
    wrong = run_sync(rebuild_projection(runs, closed_ids=forgotten))
    assert projection_digest(run_sync(wrong.live_findings())) != projection_digest(live)


def test_rebuild_validates_and_requires_a_set():
    with pytest.raises(TypeError):
        run_sync(rebuild_projection([], closed_ids=["a"]))
    with pytest.raises(InvalidFinding):
        run_sync(rebuild_projection([("s", 1, "s@1", [finding("a", confidence=101)], 5)], closed_ids={"a"}))
    empty = run_sync(rebuild_projection([], closed_ids=set()))
    assert empty.counts() == {"live": 0, "opened": 0, "closed": 0}


# --- the projector (model.findings.project_once / project_forever) -----------------------
#
# Driven on the in-memory stores: the ledger settles runs the way the runs
# layer does (run id = conversation id = idempotency key, principal = the
# schedule), the projector applies them.

EVERY = 5 * 60_000
HOUR = 60 * 60_000


class System:
    """The ledger, the projection and the pin index of one world."""

    def __init__(self) -> None:
        self.ledger = InMemorySubmissionLedger()
        self.findings = InMemoryFindingsProjection()
        self.pins = InMemoryPinIndex()

    def admit(self, schedule_id: str, n: int):
        run = run_id_for(schedule_id, n * EVERY)
        admission = run_sync(self.ledger.admit(run, schedule_id, run, {"n": n}, n * EVERY))
        run_sync(self.ledger.mark_ready(admission.submission_id, 0))
        return run, admission

    def settle(self, schedule_id: str, n: int, found: list | None = None, *, failed: bool = False) -> str:
        run, admission = self.admit(schedule_id, n)
        claim = run_sync(self.ledger.claim(run, "worker-1", 30_000, n * EVERY))
        record = ({"outcome": "failed", "diagnostic": {"errorTag": "Boom", "message": "no"}} if failed
                  else {"outcome": "completed", "result": {"findings": found or []}})
        run_sync(self.ledger.reserve_settlement(claim, _env(claim, record)))
        run_sync(self.ledger.finalize_settlement(admission.submission_id, n * EVERY + 1_000))
        return run

    def project(self, schedules, now_ms) -> None:
        run_sync(project_once(self.ledger, self.findings, self.pins, schedules, now_ms))

    def checkpoint(self, schedule_id: str):
        return run_sync(self.findings.checkpoint(schedule_id))

    def holders(self, evidence: str):
        return run_sync(self.pins.holders(evidence))


A = Schedule("sentinel-a", EVERY)
B = Schedule("sentinel-b", EVERY)


def test_project_once_applies_settled_runs_in_order_and_pins_their_evidence():
    system = System()
    system.settle(A.schedule_id, 0, [finding("f0", evidence=[ref(0)])])
    run1 = system.settle(A.schedule_id, 1, [finding("f1", evidence=[ref(1), ref(2)])])
    # Occurrence 2 never ran (a skipped wake); 3 settled without findings, 4 failed.
    system.settle(A.schedule_id, 3)
    system.settle(A.schedule_id, 4, failed=True)
    system.project([A], 4 * EVERY + 10)
    assert system.checkpoint(A.schedule_id) == 4 * EVERY
    assert live_ids(system.findings) == ["f0", "f1"]
    (f1,) = [f for f in run_sync(system.findings.live_findings()) if f.finding_id == "f1"]
    assert (f1.run_id, f1.opened_at_ms) == (run1, EVERY + 1_000)
    assert system.holders(ref(0)) == ("f0",) and system.holders(ref(2)) == ("f1",)
    # Again: nothing new, nothing twice.
    system.project([A], 4 * EVERY + 10)
    assert system.findings.counts()["opened"] == 2


def test_project_once_waits_at_a_run_that_is_not_settled():
    system = System()
    system.settle(A.schedule_id, 0, [finding("f0")])
    system.admit(A.schedule_id, 1)  # admitted, still running
    system.settle(A.schedule_id, 2, [finding("f2")])
    system.project([A], 2 * EVERY)
    assert system.checkpoint(A.schedule_id) == 0 and live_ids(system.findings) == ["f0"]


def test_the_latest_occurrence_is_not_skipped_before_it_could_be_admitted():
    system = System()
    system.settle(A.schedule_id, 0)
    system.project([A], EVERY + 5)  # occurrence 1 is due, not admitted yet
    assert system.checkpoint(A.schedule_id) == 0
    system.project([A], 2 * EVERY + 5)  # 2 is due now: 1 never ran, it is skipped
    assert system.checkpoint(A.schedule_id) == EVERY


def test_schedules_are_projected_in_the_order_given_each_at_the_clock_then():
    system = System()
    for n in range(3):
        system.settle(A.schedule_id, n)
        system.settle(B.schedule_id, n)
    calls = []

    class Recording:
        def __init__(self, target):
            self._target = target

        def __getattr__(self, name):
            fn = getattr(self._target, name)

            async def call(*args, **kwargs):
                calls.append((name, args[0]))
                return await fn(*args, **kwargs)

            return call

    readings = iter([EVERY, 2 * EVERY])  # the clock moves while the pass runs
    run_sync(project_once(system.ledger, Recording(system.findings), system.pins, [B, A], lambda: next(readings)))
    assert calls[0] == ("checkpoint", B.schedule_id)
    assert [c for c in calls if c[0] == "checkpoint"] == [("checkpoint", B.schedule_id), ("checkpoint", A.schedule_id)]
    assert (system.checkpoint(B.schedule_id), system.checkpoint(A.schedule_id)) == (EVERY, 2 * EVERY)
    with pytest.raises(AssertionError):
        system.project([A, A], EVERY)


def test_project_forever_projects_every_tick_and_survives_a_retryable_failure():
    system = System()
    runtime = FakeRuntime(ms=0, sleeps_max=4)
    system.settle(A.schedule_id, 0, [finding("f0")])

    class FlakyOnce:
        failed = 0

        def __init__(self, target):
            self._target = target

        def __getattr__(self, name):
            return getattr(self._target, name)

        async def apply_run(self, *args, **kwargs):
            if not FlakyOnce.failed:
                FlakyOnce.failed += 1
                raise Flaky("busy")
            return await self._target.apply_run(*args, **kwargs)

    def meanwhile() -> None:  # a run settles while the projector sleeps
        if runtime.ms == HOUR:
            system.settle(A.schedule_id, HOUR // EVERY, [finding(f"f{HOUR}")])

    runtime.on_sleep = meanwhile
    with pytest.raises(Stop):
        run_sync(project_forever(system.ledger, FlakyOnce(system.findings), system.pins, [A], runtime,
                                 every_ms=HOUR))
    assert runtime.slept == [("sleep_ms", HOUR)] * 4
    assert FlakyOnce.failed == 1  # the first tick failed; the next started over from the checkpoint
    assert live_ids(system.findings) == ["f0", f"f{HOUR}"]
    # Three passes after the failed one: every wake that never ran is skipped
    # but the latest, which may not be admitted yet.
    assert system.checkpoint(A.schedule_id) == 3 * HOUR - EVERY


def test_project_forever_raises_what_a_retry_cannot_clear():
    system = System()
    system.settle(A.schedule_id, 0, [finding("f0", severity="bogus")])
    with pytest.raises(InvalidFinding):
        run_sync(project_forever(system.ledger, system.findings, system.pins, [A], FakeRuntime(), every_ms=HOUR))
