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

Which findings a pass closed is decided by the cutoff the pass itself asked
for (``findings.close_expired``'s ``before_ms``: its clock at the pass's
start, minus the TTL), not by the instant the pass ends: a pass slowed by
latency or a partition ends seconds later, and a finding settled in those
seconds three days before is still live. The oracle takes that cutoff from
the traced call, and checks it: a cutoff past the TTL (later than the true
time minus the TTL by more than a node's clock tolerance) closes findings
early, a violation. A close whose answer the caller never saw (an error:
it may or may not have committed) makes the findings it would have closed
beyond the last answered one ambiguous: left out of the comparison until a
later answered close covers them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from faults.clocks import CLOCK_TOLERANCE_MS
from faults.events import ERROR, FindingsCloseExpired, LedgerFinalizeSettlement, LogAppend, RetentionPass
from model.findings import ProjectedFinding, projection_digest
from model.ledger.records import settlement_of
from model.schedules import parse_run_id
from sim.invariants import Checker

if TYPE_CHECKING:
    from scenarios.system import AuditView

SETTLED_FAMILY = "submission-settled"


class FindingsProjection(Checker):
    name = "findings-projection"
    kinds = (LogAppend.kind, LedgerFinalizeSettlement.kind, FindingsCloseExpired.kind, RetentionPass.kind)

    def __init__(self, *, finding_ttl_ms: int) -> None:
        super().__init__()
        self._finding_ttl_ms = finding_ttl_ms
        self._pending: dict[str, tuple[str, list]] = {}  # submission -> (run id, findings), until finalized
        self._shadow: dict[str, ProjectedFinding] = {}   # finding id -> the finding, while live
        # Closes since the shadow last applied them: the largest answered
        # cutoff (it committed), and the largest unanswered one (it may have).
        self._closed_before_ms: int | None = None
        self._maybe_closed_before_ms: int | None = None
        # Findings an unanswered close may have closed: left out of comparisons until an answered one covers them.
        self._ambiguous: dict[str, ProjectedFinding] = {}

    def _live(self) -> tuple:
        return self.view.live_findings()

    def _checkpoint(self, schedule_id: str) -> int | None:
        return self.view.findings_checkpoint(schedule_id)

    def on_event(self, event: tuple) -> None:
        kind, fields = event.kind, event.fields
        if kind == FindingsCloseExpired.kind:
            self._on_close(event)
            return
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
            self._apply_closes(event.time_ms - self._finding_ttl_ms)
            self._compare()

    def _on_close(self, event: tuple) -> None:
        fields = event.fields
        before_ms = fields[FindingsCloseExpired.before_ms]
        if ERROR in fields:  # the caller never saw an answer: it may or may not have closed
            if self._maybe_closed_before_ms is None or before_ms > self._maybe_closed_before_ms:
                self._maybe_closed_before_ms = before_ms
            return
        latest_ms = max(0, event.time_ms - self._finding_ttl_ms + CLOCK_TOLERANCE_MS)  # times are never negative
        if before_ms > latest_ms:
            self.fail(f"findings closed early: close_expired(opened_before_ms={before_ms}) at {event.time_ms} ms "
                      f"closes findings opened up to {before_ms - latest_ms} ms past the TTL of "
                      f"{self._finding_ttl_ms} ms (and a node's clock tolerance of {CLOCK_TOLERANCE_MS} ms)")
        if self._closed_before_ms is None or before_ms > self._closed_before_ms:
            self._closed_before_ms = before_ms

    def audit(self, view: AuditView) -> None:
        if self._closed_before_ms is not None or self._maybe_closed_before_ms is not None:
            self._apply_closes(None)
        self._compare()

    def _apply_closes(self, fallback_ms: int | None) -> None:
        """The closes seen since the last pass, applied to the shadow: below
        the largest answered cutoff a finding is closed; between it and a
        larger unanswered one, ambiguous. (No close seen before a pass's end,
        which a pass always makes: ``fallback_ms``, the TTL by its end.)"""
        closed_ms = self._closed_before_ms
        if closed_ms is None:
            closed_ms = fallback_ms
        maybe_ms = self._maybe_closed_before_ms
        self._closed_before_ms = self._maybe_closed_before_ms = None
        if closed_ms is not None:
            for finding_id in [f for f, p in self._shadow.items() if p.opened_at_ms < closed_ms]:
                del self._shadow[finding_id]
            for finding_id in [f for f, p in self._ambiguous.items() if p.opened_at_ms < closed_ms]:
                del self._ambiguous[finding_id]
        if maybe_ms is not None and (closed_ms is None or maybe_ms > closed_ms):
            for finding_id in [f for f, p in self._shadow.items() if p.opened_at_ms < maybe_ms]:
                self._ambiguous[finding_id] = self._shadow.pop(finding_id)

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
        if self._ambiguous:
            live = tuple(f for f in live if f.finding_id not in self._ambiguous)
        if projection_digest(live) != projection_digest(expected):
            ids = sorted({f.finding_id for f in live} ^ {f.finding_id for f in expected})
            self.fail(f"the findings projection ({len(live)} live) differs from the one the canonical runs give "
                      f"({len(expected)}): {', '.join(ids[:3]) or 'same ids, different fields'}", tuple(ids[:3]))
