"""Reference model of the findings projection (``model.findings``).

The contract, over the live findings by id and one checkpoint per schedule:

- ``apply_run(s, t, run, findings, settled_at_ms=...)``: the arguments are
  checked first — ids non-empty str of valid Unicode, times ints in
  0..2**53-1 (ValueError) — then the whole run: ``findings`` a list (or
  tuple) of findings each exactly of the schema (below), no id twice;
  anything else is ``InvalidFinding(run, reason)`` and nothing changes.
  A run at or below the schedule's checkpoint was applied already: 0. Else
  every finding whose id is not live opens (``opened_at_ms`` the settlement
  time), the checkpoint becomes ``t``, and the answer is how many opened.
- The schema (version 1): a dict of exactly ``id`` (non-empty str, valid
  Unicode), ``category`` (``slow-query | lock-wait | bloat``), ``severity``
  (``low | medium | high``), ``confidence`` (an int 0..100, not a bool),
  ``targets`` (a list of 1..8 non-empty str), ``evidence`` (a list of 0..8
  content refs: ``sha256:`` + 64 lowercase hex), ``model`` (non-empty str).
- ``checkpoint(s)``: the checkpoint or None; ``advance_checkpoint(s, t)``:
  ``max``; ``close_expired(before, now_ms=, limit=)``: the live findings
  opened before ``before``, by (opened_at_ms, id), at most ``limit``, are
  closed (``closed_at_ms = now_ms``), answered and dropped;
  ``live_findings()`` by id; ``live_for_run(run)`` by id. A limit is an int
  in 0..2**63-1.

Written from the module's documented rules; the validation is this file's
own. One key for the port: a run's findings are unique across schedules.
"""
from __future__ import annotations

import re
from typing import Any

from scenarios.reference import History, PortReference, Refused, bound_args, judge, same, valid_text

KEY = "findings"
SAFE_MAX = 2**53 - 1
INT64_MAX = 2**63 - 1
SCHEMA = ("category", "confidence", "evidence", "id", "model", "severity", "targets")
CATEGORIES = ("slow-query", "lock-wait", "bloat")
SEVERITIES = ("low", "medium", "high")
_REF = re.compile(r"sha256:[0-9a-f]{64}")


def _text(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _id_problem(value: object) -> Refused | None:
    return None if _text(value) and valid_text(value) else Refused("ValueError")


def _ms_problem(value: object) -> Refused | None:
    return None if type(value) is int and 0 <= value <= SAFE_MAX else Refused("ValueError")


def _limit_problem(value: object) -> Refused | None:
    return None if type(value) is int and 0 <= value <= INT64_MAX else Refused("ValueError")


def invalid(finding: object) -> bool:
    """True unless ``finding`` is exactly of schema version 1."""
    if not isinstance(finding, dict) or sorted(k for k in finding if isinstance(k, str)) != list(SCHEMA) or len(
            finding) != len(SCHEMA):
        return True
    if not _text(finding["id"]) or not valid_text(finding["id"]):
        return True
    if not isinstance(finding["category"], str) or finding["category"] not in CATEGORIES:
        return True
    if not isinstance(finding["severity"], str) or finding["severity"] not in SEVERITIES:
        return True
    confidence = finding["confidence"]
    if type(confidence) is not int or not 0 <= confidence <= 100:
        return True
    targets, evidence = finding["targets"], finding["evidence"]
    if not isinstance(targets, list) or not 1 <= len(targets) <= 8 or not all(_text(t) for t in targets):
        return True
    if not isinstance(evidence, list) or len(evidence) > 8:
        return True
    if not all(isinstance(ref, str) and _REF.fullmatch(ref) for ref in evidence):
        return True
    return not _text(finding["model"])


def _row_view(row: Any) -> tuple:
    return (row.finding_id, row.run_id, row.schedule_id, row.occurrence_ms, row.category, row.severity,
            tuple(row.evidence), row.opened_at_ms, row.closed_at_ms)


def _rows_view(rows: Any) -> tuple:
    return tuple(_row_view(row) for row in rows)


class ReferenceFindings(PortReference):
    """The findings projection's contract over a dict of live rows and checkpoints."""

    port = "findings"
    scope = "findings"

    def __init__(self) -> None:
        # finding id -> (id, run, schedule, occurrence, category, severity, evidence, opened_at_ms, None)
        self._live: dict[str, tuple] = {}
        self._checkpoints: dict[str, int] = {}
        self._history = History()
        self._handlers = {"apply_run": self._apply_run, "checkpoint": self._checkpoint,
                          "advance_checkpoint": self._advance, "close_expired": self._close_expired,
                          "live_findings": self._live_findings, "live_for_run": self._live_for_run}

    def _table(self) -> dict:
        return {}

    def key_of(self, call: Any) -> str:
        return KEY

    def forget(self, key: str) -> None:
        self._live.clear()
        self._checkpoints.clear()
        self._history.drop(key)

    def _refused(self, call: Any, problem: Refused) -> str | None:
        message = judge(call, KEY, problem, same, self._history)
        if message is None:
            self._history.note(KEY, call, call.args[:3], problem.name)
        return message

    def _apply_run(self, call: Any) -> str | None:
        a = bound_args(call, ("schedule_id", "occurrence_ms", "run_id", "findings", "settled_at_ms"))
        if a is None:
            return self._refused(call, Refused("TypeError"))
        schedule_id, occurrence_ms, run_id, findings = a["schedule_id"], a["occurrence_ms"], a["run_id"], a["findings"]
        settled_at_ms = a["settled_at_ms"]
        problem = (_id_problem(schedule_id) or _ms_problem(occurrence_ms) or _id_problem(run_id)
                   or _ms_problem(settled_at_ms))
        if problem is None:
            if not isinstance(findings, (list, tuple)) or any(invalid(f) for f in findings) or len(
                    {f["id"] for f in findings}) != len(findings):
                problem = Refused("InvalidFinding", run_id=run_id)
        if problem is not None:
            return self._refused(call, problem)
        old = self._checkpoints.get(schedule_id)
        if old is not None and occurrence_ms <= old:
            message = judge(call, KEY, 0, same, self._history)
            if message is None:
                self._history.note(KEY, call, (schedule_id, occurrence_ms, run_id), "already applied")
            return message
        opening = [f for f in findings if f["id"] not in self._live]
        message = judge(call, KEY, len(opening), same, self._history)
        if message is None:
            for f in opening:
                self._live[f["id"]] = (f["id"], run_id, schedule_id, occurrence_ms, f["category"], f["severity"],
                                       tuple(f["evidence"]), settled_at_ms, None)
            self._checkpoints[schedule_id] = occurrence_ms
            self._history.note(KEY, call, (schedule_id, occurrence_ms, run_id), len(opening))
        return message

    def _checkpoint(self, call: Any) -> str | None:
        a = bound_args(call, ("schedule_id",))
        if a is None:
            return self._refused(call, Refused("TypeError"))
        problem = _id_problem(a["schedule_id"])
        if problem is not None:
            return self._refused(call, problem)
        return judge(call, KEY, self._checkpoints.get(a["schedule_id"]), same, self._history)

    def _advance(self, call: Any) -> str | None:
        a = bound_args(call, ("schedule_id", "occurrence_ms"))
        if a is None:
            return self._refused(call, Refused("TypeError"))
        schedule_id, occurrence_ms = a["schedule_id"], a["occurrence_ms"]
        problem = _id_problem(schedule_id) or _ms_problem(occurrence_ms)
        if problem is not None:
            return self._refused(call, problem)
        message = judge(call, KEY, None, same, self._history)
        if message is None:
            old = self._checkpoints.get(schedule_id)
            if old is None or occurrence_ms > old:
                self._checkpoints[schedule_id] = occurrence_ms
            self._history.note(KEY, call, (schedule_id, occurrence_ms), "advanced")
        return message

    def _close_expired(self, call: Any) -> str | None:
        a = bound_args(call, ("opened_before_ms", "now_ms", "limit"))
        if a is None:
            return self._refused(call, Refused("TypeError"))
        before, now_ms, limit = a["opened_before_ms"], a["now_ms"], a["limit"]
        problem = _ms_problem(before) or _ms_problem(now_ms) or _limit_problem(limit)
        if problem is not None:
            return self._refused(call, problem)
        due = sorted((row[7], row[0]) for row in self._live.values() if row[7] < before)[:limit]
        closed = tuple((*self._live[finding_id][:8], now_ms) for _, finding_id in due)
        message = judge(call, KEY, closed, _rows_view, self._history)
        if message is None:
            for _, finding_id in due:
                del self._live[finding_id]
            self._history.note(KEY, call, (before, limit), len(closed))
        return message

    def _live_findings(self, call: Any) -> str | None:
        if call.args or call.kwargs:
            return self._refused(call, Refused("TypeError"))
        return judge(call, KEY, tuple(self._live[i] for i in sorted(self._live)), _rows_view, self._history)

    def _live_for_run(self, call: Any) -> str | None:
        a = bound_args(call, ("run_id",))
        if a is None:
            return self._refused(call, Refused("TypeError"))
        run_id = a["run_id"]
        problem = _id_problem(run_id)
        if problem is not None:
            return self._refused(call, problem)
        rows = tuple(self._live[i] for i in sorted(self._live) if self._live[i][1] == run_id)
        return judge(call, KEY, rows, _rows_view, self._history)

    def audit(self, view: Any) -> list[tuple[str, str | None]]:
        """The live set the model holds is the store's (``AuditView.live_findings``)."""
        have = _rows_view(view.live_findings())
        want = tuple(self._live[i] for i in sorted(self._live))
        return [(KEY, None if have == want else (
            f"findings projection at the end of the run: the store holds {len(have)} live findings "
            f"{have!r:.300}, the contract's reference model {len(want)} {want!r:.300}"))]
