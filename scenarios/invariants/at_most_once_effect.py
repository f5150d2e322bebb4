"""``at-most-once-effect``: a non-idempotent effect in doubt is never re-run blindly.

The sentinel's page (``scenarios.workloads.pager``) is its one non-idempotent effect
(K9): the kernel records an intent before it runs, and a run that crashed
between the page and its recorded completion is parked at
``EFFECT_INDOUBT`` until the on-call operator resolves it. Online, from the
pager's own traced calls (``pager.page``: what reached the service), the
kernel's ``kernel.indoubt``, the operator's ``operator.resolved``, the log's
commits and the ledger's admissions and settlements:

- the system pages at most once per intent (run, step): a second page from
  a worker is an in-doubt effect re-run on a guess;
- the operator re-sends only a page the pager never received, at most once;
  its resolution agrees with the pager's history (``delivered`` only what
  was received; ``redriven`` and ``abandoned`` only what was not);
- a recorded completion of a page is an incident the pager opened for that
  very run and step (nothing recorded that did not happen);
- a parked run blocks its own schedule: no occurrence of that schedule
  starts until the parked run is resolved or settled;
- retention never retires an occurrence behind open work: nothing after an
  unsettled (running or parked) run of the schedule is retired before it.

Audit: the pager's own history (``PagerService``) says the same — at most
one page per intent from the system, an operator's page only where the
system's never arrived. Memory: the pages and intents of runs retention has
not deleted, and the open runs of each schedule (one at a time).
"""
from __future__ import annotations

from typing import Any, Callable

from faults.events import LedgerAdmit, LedgerFinalizeSettlement, LogAppend, LogDeleteConversation, SchedulesRetire
from model.kernel.records import STEP_COMPLETED
from model.runs import STEP_FAMILY
from model.schedules import parse_run_id
from scenarios.workloads.sentinel_app import PAGE_STEP
from scenarios.workloads.pager import KernelInDoubt, OperatorResolved, PagerPage, PagerService
from sim.invariants import Checker


def _node_name(label: str) -> str:
    return label.split("#", 1)[0]


class AtMostOnceEffect(Checker):
    name = "at-most-once-effect"
    kinds = (PagerPage.kind, KernelInDoubt.kind, OperatorResolved.kind, LogAppend.kind, LogDeleteConversation.kind,
             LedgerAdmit.kind, LedgerFinalizeSettlement.kind, SchedulesRetire.kind)

    def __init__(self, pager: PagerService, *, operator_node: Callable[[], str]) -> None:
        """``operator_node()``: the on-call operator's process name (read
        once the stack has named its workloads)."""
        super().__init__()
        self.pager = pager
        self._operator_node = operator_node
        # (run, step) -> [system pages, operator pages, incidents...]
        self._pages: dict[tuple[str, str], list[Any]] = {}
        self._parked: dict[str, str] = {}        # schedule -> its run parked in doubt
        self._open: dict[str, dict[str, int]] = {}  # schedule -> {open run: occurrence}
        self._submissions: dict[str, str] = {}   # submission -> open run
        self.parks = 0
        self.resolutions = 0

    @property
    def operator_node(self) -> str:
        return self._operator_node()

    def metrics(self) -> dict:
        return {"runs_parked_in_doubt": self.parks, "indoubt_resolved": self.resolutions}

    def on_event(self, event: tuple) -> None:
        kind, fields = event.kind, event.fields
        if kind == PagerPage.kind:
            if PagerPage.error not in fields:
                self._paged(_node_name(event.node), fields)
        elif kind == KernelInDoubt.kind:
            run_id = fields[KernelInDoubt.run]
            self.parks += 1
            self._parked[parse_run_id(run_id)[0]] = run_id
        elif kind == OperatorResolved.kind:
            self._resolved(fields)
        elif kind == LogAppend.kind:
            if LogAppend.error not in fields and not fields.get(LogAppend.replayed):
                self._appended(fields)
        elif kind == LogDeleteConversation.kind:
            run_id = fields[LogDeleteConversation.conversation]
            for key in [k for k in self._pages if k[0] == run_id]:
                del self._pages[key]
        elif kind == LedgerAdmit.kind:
            if LedgerAdmit.error not in fields and not fields[LedgerAdmit.replayed]:
                self._admitted(fields)
        elif kind == LedgerFinalizeSettlement.kind:
            if LedgerFinalizeSettlement.error not in fields:
                run_id = self._submissions.pop(fields[LedgerFinalizeSettlement.submission], None)
                if run_id is not None:
                    schedule_id = parse_run_id(run_id)[0]
                    self._open.get(schedule_id, {}).pop(run_id, None)
                    if self._parked.get(schedule_id) == run_id:
                        del self._parked[schedule_id]
        elif SchedulesRetire.error not in fields and fields[SchedulesRetire.retired]:
            self._retired(fields)

    # -- pages -----------------------------------------------------------------------

    def _paged(self, sender: str, fields: dict) -> None:
        self.checks += 1
        run_id, step_id = fields[PagerPage.run], fields[PagerPage.step]
        entry = self._pages.setdefault((run_id, step_id), [0, 0])
        if sender == self.operator_node:
            if entry[0] or entry[1]:
                self.fail(f"{run_id}: the operator re-sent {step_id!r}, which the pager had received "
                          f"({entry[0] + entry[1]} page(s))", (run_id,))
            entry[1] += 1
        else:
            if entry[0] or entry[1]:
                self.fail(f"{run_id}: {step_id!r} reached the pager {entry[0] + entry[1] + 1} times: a "
                          "non-idempotent effect was re-run without an operator's word", (run_id,))
            entry[0] += 1
        entry.append(fields[PagerPage.incident])

    def _resolved(self, fields: dict) -> None:
        self.checks += 1
        self.resolutions += 1
        run_id, step_id = fields[OperatorResolved.run], fields[OperatorResolved.step]
        resolution = fields[OperatorResolved.resolution]
        entry = self._pages.get((run_id, step_id), [0, 0])
        received = entry[0] > 0
        if (resolution == "delivered") != received:
            self.fail(f"{run_id}: the operator resolved {step_id!r} as {resolution!r}, but the system's page "
                      f"{'reached' if received else 'never reached'} the pager", (run_id,))
        schedule_id = parse_run_id(run_id)[0]
        if self._parked.get(schedule_id) == run_id:
            del self._parked[schedule_id]

    def _appended(self, fields: dict) -> None:
        run_id = fields[LogAppend.conversation]
        for envelope in fields[LogAppend.envelopes]:
            if envelope["family"] != STEP_FAMILY:
                continue
            payload = envelope["payload"]
            step_id = payload["stepId"]
            if payload["kind"] != STEP_COMPLETED or step_id != PAGE_STEP:
                continue
            self.checks += 1
            output = payload["output"]
            incidents = self._pages.get((run_id, step_id), [0, 0])[2:]
            incident = output.get("incident") if type(output) is dict else None
            if incident not in incidents:
                self.fail(f"{run_id}: the log records {step_id!r} as {output!r:.80}, which the pager never "
                          f"answered (it opened {incidents or 'nothing'})", (run_id,))

    # -- the schedule's slot and retention -------------------------------------------

    def _admitted(self, fields: dict) -> None:
        run_id = fields[LedgerAdmit.conversation]
        try:
            schedule_id, occurrence_ms = parse_run_id(run_id)
        except ValueError:
            return  # not a schedule run
        self.checks += 1
        parked = self._parked.get(schedule_id)
        if parked is not None:
            self.fail(f"{run_id}: started while {parked} is parked in doubt (a parked run holds its schedule)",
                      (run_id, parked))
        self._open.setdefault(schedule_id, {})[run_id] = occurrence_ms
        self._submissions[fields[LedgerAdmit.submission]] = run_id

    def _retired(self, fields: dict) -> None:
        self.checks += 1
        schedule_id, occurrence_ms = fields[SchedulesRetire.schedule], fields[SchedulesRetire.occurrence_ms]
        behind = sorted(r for r, o in self._open.get(schedule_id, {}).items() if o < occurrence_ms)
        if behind:
            self.fail(f"{schedule_id}: retention retired {occurrence_ms} behind open work {', '.join(behind)}",
                      (schedule_id, *behind))

    # -- audit -------------------------------------------------------------------------

    def audit(self, view: Any) -> None:
        pager = self.pager
        for run_id, step_id in pager.keys():
            self.checks += 1
            senders = [sender for sender, _ in pager.received(run_id, step_id)]
            system = sum(1 for s in senders if s != self.operator_node)
            operator = len(senders) - system
            if system > 1 or operator > 1 or (operator and system):
                self.fail(f"{run_id}: the pager received {step_id!r} {len(senders)} times "
                          f"(from {', '.join(senders)})", (run_id,))
