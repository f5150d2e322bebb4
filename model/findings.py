"""The findings projection: an application-owned read model.

Findings are application domain events, not a kernel primitive: a sentinel
run emits them with an app-owned schema and its settlement names them. This
module is the projection the application builds from those canonical run
records -- the queryable "what is currently wrong" view -- and nothing in it
is authoritative: :func:`rebuild_projection` rebuilds the live set from the
canonical runs, and :func:`projection_digest` lets an auditor compare the
rebuilt set with the live one.

One finding, as a run emits it (:data:`FINDING_SCHEMA_VERSION` 1), is a dict
with exactly these keys (:func:`validate_finding`):

- ``id``: non-empty str;
- ``category``: one of :data:`CATEGORIES`;
- ``severity``: one of :data:`SEVERITIES`;
- ``confidence``: int in 0..100 (not a bool);
- ``targets``: list of 1..8 non-empty str;
- ``evidence``: list of 0..8 content refs (``sha256:`` + 64 lowercase hex),
  cited by reference (claim-check);
- ``model``: non-empty str (the acting model).

The projection keeps, per schedule, a checkpoint ``applied_through_ms`` (the
highest occurrence applied) and the *live* findings only; a closed finding is
returned once by :meth:`close_expired` and then dropped, so memory is bounded
by the live set plus one checkpoint per schedule plus two counters.

Application rules every adapter follows:

- ``apply_run`` validates every finding first (an invalid one raises
  :class:`InvalidFinding` and nothing is written), then, in one atomic step,
  opens each new finding (``opened_at_ms = settled_at_ms``) and advances the
  schedule's checkpoint to ``max(old, occurrence_ms)``.
- A run whose ``occurrence_ms`` is ``<=`` the schedule's checkpoint is taken
  as already applied: a no-op returning 0. Runs of one schedule must
  therefore be applied in occurrence order (as settlements arrive); a late
  earlier occurrence is dropped, not back-filled.
- A finding whose id is already live is skipped (it stays as first opened);
  the return value counts only newly opened findings. The projection keeps
  no closed ids, so an id closed earlier and re-emitted by a later run opens
  again; finding ids are expected to be unique per run (e.g. derived from the
  run id).
- Two findings with the same id in one run are invalid.

Both adapters behave identically; every method is ``async`` but never
suspends, so each call is one atomic step for the simulator. SQLite writes
are one ``BEGIN IMMEDIATE`` transaction each (``model.sqlite_db``); tables are
prefixed ``fp_``. Ids compare by SQLite's BINARY collation (UTF-8 bytes),
which orders them as Python's ``sorted`` does.
"""
from __future__ import annotations

import bisect
import re
from typing import Any, Callable, Iterable, Sequence

import attrs

from model.bounds import INT64_MAX, is_valid_unicode
from model.canonical import MAX_SAFE_INTEGER, canonical_json, decode, digest
from model.ledger.records import settlement_of
from model.retry import is_retryable
from model.runtime import Runtime
from model.schedules import Schedule, run_id_for
from model.sqlite_db import SqliteAdapter, write_transaction

__all__ = [
    "CATEGORIES",
    "CONFIDENCE_MAX",
    "EVIDENCE_MAX",
    "FINDING_KEYS",
    "FINDING_SCHEMA_VERSION",
    "FindingsError",
    "InMemoryFindingsProjection",
    "InvalidFinding",
    "ProjectedFinding",
    "SEVERITIES",
    "SqliteFindingsProjection",
    "TARGETS_MAX",
    "project_forever",
    "project_once",
    "projection_digest",
    "rebuild_projection",
    "validate_finding",
]

FINDING_SCHEMA_VERSION = 1

CATEGORIES: tuple[str, ...] = ("slow-query", "lock-wait", "bloat")
SEVERITIES: tuple[str, ...] = ("low", "medium", "high")
FINDING_KEYS: tuple[str, ...] = ("category", "confidence", "evidence", "id", "model", "severity", "targets")
CONFIDENCE_MAX = 100
TARGETS_MAX = 8
EVIDENCE_MAX = 8

_REF_RE = re.compile(r"sha256:[0-9a-f]{64}")


# --------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------


def _non_empty_str(value: object) -> bool:
    return isinstance(value, str) and value != ""


def validate_finding(value: object) -> str | None:
    """``None`` when ``value`` is a valid finding, else a one-line reason."""
    if not isinstance(value, dict):
        return f"a finding must be a dict, got {type(value).__name__}"
    missing = [key for key in FINDING_KEYS if key not in value]
    if missing:
        return "missing keys: " + ", ".join(missing)
    extra = sorted(repr(key) for key in value if key not in FINDING_KEYS)
    if extra:
        return "unexpected keys: " + ", ".join(extra)
    if not _non_empty_str(value["id"]) or not is_valid_unicode(value["id"]):
        return f"id must be a non-empty str of valid Unicode, got {value['id']!r:.80}"
    if not isinstance(value["category"], str) or value["category"] not in CATEGORIES:
        return f"category must be one of {', '.join(CATEGORIES)}, got {value['category']!r:.80}"
    if not isinstance(value["severity"], str) or value["severity"] not in SEVERITIES:
        return f"severity must be one of {', '.join(SEVERITIES)}, got {value['severity']!r:.80}"
    confidence = value["confidence"]
    if type(confidence) is not int or not 0 <= confidence <= CONFIDENCE_MAX:
        return f"confidence must be an int in 0..{CONFIDENCE_MAX}, got {confidence!r:.80}"
    targets = value["targets"]
    if not isinstance(targets, list) or not 1 <= len(targets) <= TARGETS_MAX:
        return f"targets must be a list of 1..{TARGETS_MAX} non-empty str, got {targets!r:.80}"
    for i, target in enumerate(targets):
        if not _non_empty_str(target):
            return f"targets[{i}] must be a non-empty str, got {target!r:.80}"
    evidence = value["evidence"]
    if not isinstance(evidence, list) or len(evidence) > EVIDENCE_MAX:
        return f"evidence must be a list of 0..{EVIDENCE_MAX} content refs, got {evidence!r:.80}"
    for i, ref in enumerate(evidence):
        if not isinstance(ref, str) or _REF_RE.fullmatch(ref) is None:
            return f"evidence[{i}] must be a content ref (sha256: + 64 lowercase hex), got {ref!r:.80}"
    if not _non_empty_str(value["model"]):
        return f"model must be a non-empty str, got {value['model']!r:.80}"
    return None


class FindingsError(Exception):
    """Base class of the findings projection's typed errors."""

    name = "FindingsError"


class InvalidFinding(FindingsError):
    """A run carried a finding that does not match the schema (or the run's
    findings are not a list, or repeat an id). Nothing was written."""

    name = "InvalidFinding"

    def __init__(self, run_id: str, reason: str) -> None:
        self.run_id = run_id
        self.reason = reason
        super().__init__(f"InvalidFinding: run {run_id!r:.200}: {reason}")

    def __reduce__(self):
        return (type(self), (self.run_id, self.reason))


@attrs.frozen
class ProjectedFinding:
    """One finding as the projection holds it. ``closed_at_ms`` is ``None``
    while live; only :meth:`close_expired` returns closed ones."""

    finding_id: str
    run_id: str
    schedule_id: str
    occurrence_ms: int
    category: str
    severity: str
    evidence: tuple[str, ...]
    opened_at_ms: int
    closed_at_ms: int | None = None


# --------------------------------------------------------------------------
# Argument checks shared by both adapters
# --------------------------------------------------------------------------


def _check_id(value: object, what: str) -> str:
    if not _non_empty_str(value) or not is_valid_unicode(value):  # type: ignore[arg-type]
        raise ValueError(f"{what} must be a non-empty str of valid Unicode, got {value!r:.80}")
    return value  # type: ignore[return-value]


def _check_ms(value: object, what: str) -> int:
    # Bounded by the canonical-JSON safe range so every projected value digests.
    if type(value) is not int or not 0 <= value <= MAX_SAFE_INTEGER:
        raise ValueError(f"{what} must be an int in 0..2**53-1, got {value!r:.80}")
    return value


def _check_limit(limit: object) -> int:
    # Bound to a SQLite INTEGER: one past 64 bits is refused alike, typed.
    if type(limit) is not int or not 0 <= limit <= INT64_MAX:
        raise ValueError(f"limit must be an int in 0..2**63-1, got {limit!r:.80}")
    return limit


def _check_run(
    schedule_id: object, occurrence_ms: object, run_id: object, findings: object, settled_at_ms: object
) -> list[ProjectedFinding]:
    """Validate a whole run; return its findings as projected (open) rows."""
    _check_id(schedule_id, "schedule_id")
    _check_ms(occurrence_ms, "occurrence_ms")
    _check_id(run_id, "run_id")
    _check_ms(settled_at_ms, "settled_at_ms")
    if not isinstance(findings, (list, tuple)):
        raise InvalidFinding(run_id, f"findings must be a list, got {type(findings).__name__}")  # type: ignore[arg-type]
    rows: list[ProjectedFinding] = []
    seen: set[str] = set()
    for i, finding in enumerate(findings):
        reason = validate_finding(finding)
        if reason is not None:
            raise InvalidFinding(run_id, f"findings[{i}]: {reason}")  # type: ignore[arg-type]
        finding_id = finding["id"]
        if finding_id in seen:
            raise InvalidFinding(run_id, f"findings[{i}]: duplicate finding id {finding_id!r:.80}")  # type: ignore[arg-type]
        seen.add(finding_id)
        rows.append(ProjectedFinding(
            finding_id=str.__str__(finding_id),
            run_id=run_id,  # type: ignore[arg-type]
            schedule_id=schedule_id,  # type: ignore[arg-type]
            occurrence_ms=occurrence_ms,  # type: ignore[arg-type]
            category=str.__str__(finding["category"]),
            severity=str.__str__(finding["severity"]),
            evidence=tuple(str.__str__(ref) for ref in finding["evidence"]),
            opened_at_ms=settled_at_ms,  # type: ignore[arg-type]
        ))
    return rows


def _digest_row(finding: ProjectedFinding) -> dict[str, object]:
    return {
        "findingId": finding.finding_id,
        "runId": finding.run_id,
        "scheduleId": finding.schedule_id,
        "occurrenceMs": finding.occurrence_ms,
        "category": finding.category,
        "severity": finding.severity,
        "evidence": list(finding.evidence),
        "openedAtMs": finding.opened_at_ms,
        "closedAtMs": finding.closed_at_ms,
    }


def projection_digest(findings: Iterable[ProjectedFinding]) -> str:
    """Lowercase hex sha256 of the canonical JSON of ``findings`` sorted by id.

    Independent of the order given, so a rebuilt projection and the live one
    digest equal exactly when they hold the same findings. Two findings with
    one id are not a projection: ``ValueError``.
    """
    rows = sorted(findings, key=lambda f: f.finding_id)
    for a, b in zip(rows, rows[1:]):
        if a.finding_id == b.finding_id:
            raise ValueError(f"finding id {a.finding_id!r:.80} appears twice")
    return digest({
        "findingSchemaVersion": FINDING_SCHEMA_VERSION,
        "findings": [_digest_row(f) for f in rows],
    })


# --------------------------------------------------------------------------
# In memory
# --------------------------------------------------------------------------


class InMemoryFindingsProjection:
    __slots__ = ("_live", "_by_age", "_by_run", "_checkpoints", "_opened", "_closed")

    def __init__(self) -> None:
        self._live: dict[str, ProjectedFinding] = {}
        # (opened_at_ms, finding_id) of every live finding, kept sorted.
        self._by_age: list[tuple[int, str]] = []
        # run_id -> ids of its live findings; a run with none has no entry.
        self._by_run: dict[str, set[str]] = {}
        self._checkpoints: dict[str, int] = {}
        self._opened = 0
        self._closed = 0

    async def apply_run(
        self, schedule_id: str, occurrence_ms: int, run_id: str, findings: list, *, settled_at_ms: int
    ) -> int:
        rows = _check_run(schedule_id, occurrence_ms, run_id, findings, settled_at_ms)
        old = self._checkpoints.get(schedule_id)
        if old is not None and occurrence_ms <= old:
            return 0
        opened = 0
        for row in rows:
            if row.finding_id in self._live:
                continue
            self._live[row.finding_id] = row
            bisect.insort(self._by_age, (row.opened_at_ms, row.finding_id))
            ids = self._by_run.get(run_id)
            if ids is None:
                ids = self._by_run[run_id] = set()
            ids.add(row.finding_id)
            opened += 1
        self._checkpoints[schedule_id] = occurrence_ms
        self._opened += opened
        return opened

    async def checkpoint(self, schedule_id: str) -> int | None:
        return self._checkpoints.get(_check_id(schedule_id, "schedule_id"))

    async def advance_checkpoint(self, schedule_id: str, occurrence_ms: int) -> None:
        _check_id(schedule_id, "schedule_id")
        _check_ms(occurrence_ms, "occurrence_ms")
        old = self._checkpoints.get(schedule_id)
        if old is None or occurrence_ms > old:
            self._checkpoints[schedule_id] = occurrence_ms

    async def close_expired(
        self, opened_before_ms: int, *, now_ms: int, limit: int
    ) -> tuple[ProjectedFinding, ...]:
        _check_ms(opened_before_ms, "opened_before_ms")
        _check_ms(now_ms, "now_ms")
        _check_limit(limit)
        by_age = self._by_age
        count = 0
        while count < limit and count < len(by_age) and by_age[count][0] < opened_before_ms:
            count += 1
        closed: list[ProjectedFinding] = []
        for _, finding_id in by_age[:count]:
            row = self._live.pop(finding_id)
            ids = self._by_run[row.run_id]
            ids.remove(finding_id)
            if not ids:
                del self._by_run[row.run_id]
            closed.append(attrs.evolve(row, closed_at_ms=now_ms))
        del by_age[:count]
        self._closed += count
        return tuple(closed)

    async def live_findings(self) -> tuple[ProjectedFinding, ...]:
        return tuple(self._live[finding_id] for finding_id in sorted(self._live))

    async def live_for_run(self, run_id: str) -> tuple[ProjectedFinding, ...]:
        ids = self._by_run.get(_check_id(run_id, "run_id"), ())
        return tuple(self._live[finding_id] for finding_id in sorted(ids))

    def counts(self) -> dict[str, int]:
        live = len(self._live)
        assert live == self._opened - self._closed, (live, self._opened, self._closed)
        return {"live": live, "opened": self._opened, "closed": self._closed}


# --------------------------------------------------------------------------
# SQLite
# --------------------------------------------------------------------------

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS fp_findings (
        finding_id TEXT PRIMARY KEY NOT NULL,
        run_id TEXT NOT NULL,
        schedule_id TEXT NOT NULL,
        occurrence_ms INTEGER NOT NULL,
        category TEXT NOT NULL,
        severity TEXT NOT NULL,
        evidence TEXT NOT NULL,
        opened_at_ms INTEGER NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS fp_findings_by_age ON fp_findings (opened_at_ms, finding_id)",
    "CREATE INDEX IF NOT EXISTS fp_findings_by_run ON fp_findings (run_id, finding_id)",
    """CREATE TABLE IF NOT EXISTS fp_checkpoints (
        schedule_id TEXT PRIMARY KEY NOT NULL,
        applied_through_ms INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS fp_counters (
        name TEXT PRIMARY KEY NOT NULL,
        value INTEGER NOT NULL
    ) WITHOUT ROWID""",
    "INSERT INTO fp_counters (name, value) VALUES ('opened', 0), ('closed', 0) ON CONFLICT (name) DO NOTHING",
)
_COLUMNS = "finding_id, run_id, schedule_id, occurrence_ms, category, severity, evidence, opened_at_ms"
_CHECKPOINT_SQL = "SELECT applied_through_ms FROM fp_checkpoints WHERE schedule_id = ?"
_ADVANCE_SQL = (
    "INSERT INTO fp_checkpoints (schedule_id, applied_through_ms) VALUES (?, ?) "
    "ON CONFLICT (schedule_id) DO UPDATE SET "
    "applied_through_ms = max(applied_through_ms, excluded.applied_through_ms)"
)
_INSERT_SQL = (
    f"INSERT INTO fp_findings ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (finding_id) DO NOTHING"
)
_BUMP_SQL = "UPDATE fp_counters SET value = value + ? WHERE name = ?"
_EXPIRED_SQL = (
    f"SELECT {_COLUMNS} FROM fp_findings WHERE opened_at_ms < ? "
    "ORDER BY opened_at_ms, finding_id LIMIT ?"
)
_DELETE_SQL = "DELETE FROM fp_findings WHERE finding_id = ?"
_LIVE_SQL = f"SELECT {_COLUMNS} FROM fp_findings ORDER BY finding_id"
_LIVE_FOR_RUN_SQL = f"SELECT {_COLUMNS} FROM fp_findings WHERE run_id = ? ORDER BY finding_id"
_COUNTERS_SQL = "SELECT name, value FROM fp_counters ORDER BY name"
_COUNT_LIVE_SQL = "SELECT count(*) FROM fp_findings"


def _from_row(row: tuple) -> ProjectedFinding:
    evidence = decode(row[6])
    assert isinstance(evidence, list), row
    return ProjectedFinding(
        finding_id=row[0],
        run_id=row[1],
        schedule_id=row[2],
        occurrence_ms=row[3],
        category=row[4],
        severity=row[5],
        evidence=tuple(evidence),
        opened_at_ms=row[7],
    )


class SqliteFindingsProjection(SqliteAdapter):
    """The findings projection in ``fp_findings`` / ``fp_checkpoints`` /
    ``fp_counters`` (created idempotently).

    The connection is shared, not owned, unless the projection was made by
    :meth:`open`.
    """

    __slots__ = ()
    SCHEMA = _SCHEMA

    async def apply_run(
        self, schedule_id: str, occurrence_ms: int, run_id: str, findings: list, *, settled_at_ms: int
    ) -> int:
        rows = _check_run(schedule_id, occurrence_ms, run_id, findings, settled_at_ms)
        conn = self._conn
        with write_transaction(conn):
            old = conn.execute(_CHECKPOINT_SQL, (schedule_id,)).fetchone()
            if old is not None and occurrence_ms <= old[0]:
                return 0
            opened = 0
            for row in rows:
                opened += conn.execute(_INSERT_SQL, (
                    row.finding_id, row.run_id, row.schedule_id, row.occurrence_ms,
                    row.category, row.severity, canonical_json(list(row.evidence)), row.opened_at_ms,
                )).rowcount
            conn.execute(_ADVANCE_SQL, (schedule_id, occurrence_ms))
            if opened:
                conn.execute(_BUMP_SQL, (opened, "opened"))
        return opened

    async def checkpoint(self, schedule_id: str) -> int | None:
        row = self._conn.execute(_CHECKPOINT_SQL, (_check_id(schedule_id, "schedule_id"),)).fetchone()
        return None if row is None else row[0]

    async def advance_checkpoint(self, schedule_id: str, occurrence_ms: int) -> None:
        _check_id(schedule_id, "schedule_id")
        _check_ms(occurrence_ms, "occurrence_ms")
        with write_transaction(self._conn):
            self._conn.execute(_ADVANCE_SQL, (schedule_id, occurrence_ms))

    async def close_expired(
        self, opened_before_ms: int, *, now_ms: int, limit: int
    ) -> tuple[ProjectedFinding, ...]:
        _check_ms(opened_before_ms, "opened_before_ms")
        _check_ms(now_ms, "now_ms")
        _check_limit(limit)
        conn = self._conn
        with write_transaction(conn):
            closed = tuple(
                attrs.evolve(_from_row(row), closed_at_ms=now_ms)
                for row in conn.execute(_EXPIRED_SQL, (opened_before_ms, limit)).fetchall()
            )
            for finding in closed:
                deleted = conn.execute(_DELETE_SQL, (finding.finding_id,)).rowcount
                assert deleted == 1, finding.finding_id
            if closed:
                conn.execute(_BUMP_SQL, (len(closed), "closed"))
        return closed

    async def live_findings(self) -> tuple[ProjectedFinding, ...]:
        return tuple(_from_row(row) for row in self._conn.execute(_LIVE_SQL))

    async def live_for_run(self, run_id: str) -> tuple[ProjectedFinding, ...]:
        return tuple(
            _from_row(row)
            for row in self._conn.execute(_LIVE_FOR_RUN_SQL, (_check_id(run_id, "run_id"),))
        )

    def counts(self) -> dict[str, int]:
        counters = dict(self._conn.execute(_COUNTERS_SQL).fetchall())
        live = self._conn.execute(_COUNT_LIVE_SQL).fetchone()[0]
        return {"live": live, "opened": counters["opened"], "closed": counters["closed"]}


# --------------------------------------------------------------------------
# Rebuild (audit)
# --------------------------------------------------------------------------


async def rebuild_projection(
    runs: Iterable[tuple[str, int, str, list, int]], *, closed_ids: set | frozenset
) -> InMemoryFindingsProjection:
    """A fresh in-memory projection built from canonical run data.

    ``runs`` are ``(schedule_id, occurrence_ms, run_id, findings,
    settled_at_ms)`` in the order the live projection applied them
    (settlement order); findings whose id is in ``closed_ids`` are skipped
    (validated all the same). The rebuilt live set digests equal to the live
    projection's when the projection is a faithful read model of the runs.
    Never suspends.
    """
    if not isinstance(closed_ids, (set, frozenset)):
        raise TypeError(f"closed_ids must be a set or frozenset, got {type(closed_ids).__name__}")
    projection = InMemoryFindingsProjection()
    for run in runs:
        schedule_id, occurrence_ms, run_id, findings, settled_at_ms = run
        # Validate the whole run as the live projection did, then apply the
        # findings that are still open.
        _check_run(schedule_id, occurrence_ms, run_id, findings, settled_at_ms)
        still_open = [f for f in findings if f["id"] not in closed_ids]
        await projection.apply_run(schedule_id, occurrence_ms, run_id, still_open, settled_at_ms=settled_at_ms)
    return projection


# --------------------------------------------------------------------------
# The projector (a process of the system)
# --------------------------------------------------------------------------


async def project_once(ledger: Any, findings: Any, pins: Any, schedules: Sequence[Schedule],
                       now_ms: int | Callable[[], int]) -> None:
    """One projection pass: apply every settled run past each schedule's
    checkpoint, in occurrence order, pinning each finding's evidence before
    the run is applied (so retention never sees a cited blob unpinned).

    ``schedules``: in a fixed order (the order of the store calls).
    ``now_ms``: the clock, read once per schedule as the pass reaches it (or
    a fixed time). Per schedule: an occurrence that never ran moves the
    checkpoint past it (skipped), except the latest, which may not be
    admitted yet; an unsettled run stops the schedule (projected in order,
    so it waits for the next pass)."""
    clock = now_ms if callable(now_ms) else (lambda: now_ms)
    assert len({s.schedule_id for s in schedules}) == len(schedules), "a schedule listed twice"
    for schedule in schedules:
        schedule_id = schedule.schedule_id
        checkpoint_ms = await findings.checkpoint(schedule_id)
        occurrence_ms = schedule.first_ms if checkpoint_ms is None else checkpoint_ms + schedule.every_ms
        high_ms = schedule.latest_due_at(clock())
        while high_ms is not None and occurrence_ms <= high_ms:
            run_id = run_id_for(schedule_id, occurrence_ms)
            record = await ledger.get_by_idempotency_key(run_id, schedule_id, run_id)
            if record is None:
                if occurrence_ms + schedule.every_ms > high_ms:
                    break  # the latest occurrence may not be admitted yet
                await findings.advance_checkpoint(schedule_id, occurrence_ms)  # skipped
            elif record.outcome is None:
                break  # not settled: projected in order, so wait
            else:
                result = settlement_of(record.reserved_record).get("result") if record.outcome == "completed" else None
                found = (result or {}).get("findings", [])
                for finding in found:
                    for ref in finding["evidence"]:
                        await pins.pin(ref, finding["id"])
                await findings.apply_run(schedule_id, occurrence_ms, run_id, found,
                                         settled_at_ms=record.settled_at_ms)
            occurrence_ms += schedule.every_ms


async def project_forever(ledger: Any, findings: Any, pins: Any, schedules: Sequence[Schedule], runtime: Runtime,
                          *, every_ms: int) -> None:
    """The findings projector: a consumer of settled runs with its own
    checkpoint (``project_once`` every ``every_ms``). A retryable failure
    (``model.retry``) ends the pass; the next one starts over from the
    checkpoint. Anything else is raised: the process fails loudly."""
    assert every_ms > 0, every_ms
    schedules = tuple(schedules)
    # The projector process's forever loop: it never ends by itself; it ends
    # when its node is killed (every pass waits ``every_ms``).
    while True:
        try:
            await project_once(ledger, findings, pins, schedules, runtime.now_ms)
        except Exception as error:
            if not is_retryable(error):
                raise  # a transient failure: the next tick starts over from the checkpoint
        await runtime.sleep_ms(every_ms)
