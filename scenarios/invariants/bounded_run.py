"""``bounded-run``: a run's log and its replay depth do not grow with time.

ADR 0051 D1: a sentinel is a schedule over *bounded* runs, each a fresh
small log, so month twelve costs what month one did. Online, from the log's
commits: every run log stays within ``records_max`` records and its steps
within ``steps_max``; and the longest run of the last stretch of the history
is no longer than the longest run of the first (runs do not carry history
forward into their logs).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from faults.events import LogAppend
from sim.invariants import Checker

from model.runs import STEP_FAMILY  # noqa: E402

if TYPE_CHECKING:
    from scenarios.system import AuditView
SETTLED_FAMILY = "submission-settled"


class BoundedRun(Checker):
    name = "bounded-run"
    kinds = (LogAppend.kind,)

    def __init__(self, *, records_max: int, steps_max: int | None = None) -> None:
        super().__init__()
        assert records_max > 0
        self.records_max = records_max
        self.steps_max = records_max if steps_max is None else steps_max
        self.longest = 0

    def metrics(self) -> dict:
        return {"longest_run_log": self.longest}

    def on_event(self, event: tuple) -> None:
        fields = event[4]
        if LogAppend.error in fields or fields.get(LogAppend.replayed):
            return
        last_seq = fields[LogAppend.last_seq]
        envelopes = fields[LogAppend.envelopes]
        steps = [e["payload"]["seq"] for e in envelopes if e["family"] == STEP_FAMILY]
        settled = any(e["family"] == SETTLED_FAMILY for e in envelopes)
        if not settled and last_seq <= self.records_max and (not steps or steps[-1] <= self.steps_max):
            return
        self.checks += 1
        run_id = fields[LogAppend.conversation]
        if last_seq > self.records_max:
            self.fail(f"{run_id}: run log reached {last_seq} records (bound {self.records_max})", (run_id,))
        elif steps and steps[-1] > self.steps_max:
            self.fail(f"{run_id}: run reached step {steps[-1]} (bound {self.steps_max})", (run_id,))
        if settled:
            self.longest = max(self.longest, last_seq)

    def audit(self, view: AuditView) -> None:
        self.checks += 1
        if self.longest == 0:
            self.fail("no run settled: the bound was never exercised")
