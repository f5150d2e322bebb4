"""``bounded-run``: a run's log and its replay depth do not grow with time.

A sentinel is a schedule over *bounded* runs, each a fresh
small log, so month twelve costs what month one did. Online, from the log's
commits: every run log stays within ``records_max`` records and its steps
within ``steps_max``; and the longest run of the last stretch of the history
is no longer than the longest run of the first (runs do not carry history
forward into their logs).

A run ends with its settlement: once the settlement record is in a run's
log, the log is sealed. Nothing is appended after it and no process takes
it over again (a ``log.materialize`` at a higher epoch): a recovery that
finds the settlement only finalizes it, it never resumes the run. Memory:
the sealed logs retention has not deleted yet (about a day of runs).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from faults.events import LogAppend, LogDeleteConversation, LogMaterialize
from sim.invariants import Checker

from model.runs import STEP_FAMILY  # noqa: E402

if TYPE_CHECKING:
    from scenarios.system import AuditView
SETTLED_FAMILY = "submission-settled"


class BoundedRun(Checker):
    name = "bounded-run"
    kinds = (LogAppend.kind, LogMaterialize.kind, LogDeleteConversation.kind)

    def __init__(self, *, records_max: int, steps_max: int | None = None) -> None:
        super().__init__()
        assert records_max > 0
        self.records_max = records_max
        self.steps_max = records_max if steps_max is None else steps_max
        self.longest = 0
        self._sealed: dict[str, int] = {}  # run id -> the epoch its settlement was appended at

    def metrics(self) -> dict:
        return {"longest_run_log": self.longest}

    def on_event(self, event: tuple) -> None:
        fields = event.fields
        if LogAppend.error in fields or fields.get(LogAppend.replayed):
            return
        kind = event.kind
        if kind == LogDeleteConversation.kind:
            self._sealed.pop(fields[LogDeleteConversation.conversation], None)
            return
        run_id = fields[LogAppend.conversation]
        sealed_epoch = self._sealed.get(run_id)
        if kind == LogMaterialize.kind:
            if sealed_epoch is not None:
                self.checks += 1
                if fields[LogMaterialize.epoch] > sealed_epoch:
                    self.fail(f"{run_id}: taken over at epoch {fields[LogMaterialize.epoch]} after its settlement "
                              f"(settled at epoch {sealed_epoch}): a settled run was resumed", (run_id,))
            return
        if sealed_epoch is not None:
            self.checks += 1
            self.fail(f"{run_id}: batch {fields[LogAppend.batch]} appended after the run's settlement", (run_id,))
        last_seq = fields[LogAppend.last_seq]
        envelopes = fields[LogAppend.envelopes]
        steps = [e["payload"]["seq"] for e in envelopes if e["family"] == STEP_FAMILY]
        settled = any(e["family"] == SETTLED_FAMILY for e in envelopes)
        if not settled and last_seq <= self.records_max and (not steps or steps[-1] <= self.steps_max):
            return
        self.checks += 1
        if last_seq > self.records_max:
            self.fail(f"{run_id}: run log reached {last_seq} records (bound {self.records_max})", (run_id,))
        elif steps and steps[-1] > self.steps_max:
            self.fail(f"{run_id}: run reached step {steps[-1]} (bound {self.steps_max})", (run_id,))
        if settled:
            self.longest = max(self.longest, last_seq)
            self._sealed[run_id] = fields[LogAppend.epoch]

    def audit(self, view: AuditView) -> None:
        self.checks += 1
        if self.longest == 0:
            self.fail("no run settled: the bound was never exercised")
