"""``findings-projection``: the findings read model is rebuildable from canonical records.

Findings are application events; the projection is only a read
model. The oracle keeps its own shadow of it, built from canonical records
alone — the settlement records the run logs commit (``log.append``) and the
ledger's settlement time (``ledger.finalize_settlement``) — and closes
findings by the same TTL rule. After every retention pass and at the audit,
the live projection must equal the shadow, field for field
(``projection_digest``), for every run the projector has reached (its
checkpoint). Checking at each pass matters: a finding the projection lost is
not pinned, so retention would archive its run and with it the evidence.
Memory: the live findings only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from faults.events import ERROR, LedgerFinalizeSettlement, LogAppend, RetentionPass
from model.findings import ProjectedFinding, projection_digest
from model.ledger.records import settlement_of
from model.schedules import parse_run_id
from sim.invariants import Checker

if TYPE_CHECKING:
    from scenarios.system import AuditView

SETTLED_FAMILY = "submission-settled"


class FindingsProjection(Checker):
    name = "findings-projection"
    kinds = (LogAppend.kind, LedgerFinalizeSettlement.kind, RetentionPass.kind)

    def __init__(self, *, finding_ttl_ms: int) -> None:
        super().__init__()
        self._finding_ttl_ms = finding_ttl_ms
        self._pending: dict[str, tuple[str, list]] = {}  # submission -> (run id, findings), until finalized
        self._shadow: dict[str, ProjectedFinding] = {}   # finding id -> the finding, while live

    def _live(self) -> tuple:
        return self.view.live_findings()

    def _checkpoint(self, schedule_id: str) -> int | None:
        return self.view.findings_checkpoint(schedule_id)

    def on_event(self, event: tuple) -> None:
        kind, fields = event.kind, event.fields
        if ERROR in fields or fields.get(LogAppend.replayed):
            return
        if kind == LogAppend.kind:
            for envelope in fields[LogAppend.envelopes]:
                if envelope["family"] != SETTLED_FAMILY:
                    continue
                record = settlement_of(envelope)
                findings = (record.get("result") or {}).get("findings") if record["outcome"] == "completed" else None
                if findings:
                    self._pending[envelope["payload"]["submissionId"]] = (fields[LogAppend.conversation], findings)
        elif kind == LedgerFinalizeSettlement.kind:
            pending = self._pending.pop(fields[LedgerFinalizeSettlement.submission], None)
            if pending is None:
                return
            run_id, findings = pending
            schedule_id, occurrence_ms = parse_run_id(run_id)
            for finding in findings:
                self._shadow.setdefault(finding["id"], ProjectedFinding(
                    finding_id=finding["id"], run_id=run_id, schedule_id=schedule_id, occurrence_ms=occurrence_ms,
                    category=finding["category"], severity=finding["severity"],
                    evidence=tuple(finding["evidence"]),
                    opened_at_ms=fields[LedgerFinalizeSettlement.settled_at_ms]))
        else:
            cutoff_ms = event.time_ms - self._finding_ttl_ms
            for finding_id in [f for f, p in self._shadow.items() if p.opened_at_ms < cutoff_ms]:
                del self._shadow[finding_id]
            self._compare()

    def audit(self, view: AuditView) -> None:
        self._compare()

    def _compare(self) -> None:
        self.checks += 1
        checkpoints: dict[str, int | None] = {}
        expected = []
        for finding in self._shadow.values():
            if finding.schedule_id not in checkpoints:
                checkpoints[finding.schedule_id] = self._checkpoint(finding.schedule_id)
            reached = checkpoints[finding.schedule_id]
            if reached is not None and finding.occurrence_ms <= reached:
                expected.append(finding)
        live = self._live()
        if projection_digest(live) != projection_digest(expected):
            ids = sorted({f.finding_id for f in live} ^ {f.finding_id for f in expected})
            self.fail(f"the findings projection ({len(live)} live) differs from the one the canonical runs give "
                      f"({len(expected)}): {', '.join(ids[:3]) or 'same ids, different fields'}", tuple(ids[:3]))
