"""``unknown-never-replayed``: a tool call whose outcome is unknown is never
called again on a guess; each call reaches a non-idempotent tool at most once.

The tool service's own history (``scenarios.workloads.agents.ToolService``) is the
witness, not the agent's log. Online, at every call that reaches the tools:

- a non-idempotent call id reaches the tool at most once (a second arrival
  is an in-doubt call replayed blindly);
- the next attempt of a step (``{step}.{k+1}``) is called only after attempt
  ``k`` was resolved ``NeverHappened`` or ``SafeToRetry`` in the ledger, and
  attempt ``k`` indeed never reached the tool;
- a ``CompletedWithResult`` resolution names a call that did happen, and
  a call resolved ``NeverHappened`` or ``SafeToRetry`` never lands later;
- a ``tool-settled`` record holds exactly the result the tool gave that call;
- a run settles other than aborted only once each non-idempotent call it
  prepared is settled or marked unknown in the log (a run never settles
  over a call in doubt: whether it landed or may still land, nobody knows).

Counted: ``doubt_marked_past_deadline``, a successor (a claim at a later
epoch than the call's preparation, made when the run was already past its
deadline) logging a call in doubt unknown: the rule that a call in doubt is
marked before the run's clock refuses the step, reached.

Audit: per step, at most one effect of a non-idempotent tool over all its
attempts. Memory: the unresolved calls of open submissions, and the
resolutions of those not yet settled.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from faults.events import (ERROR, LedgerClaim, LedgerFinalizeSettlement, LedgerMarkUnknown, LedgerRequestAbort,
                           LedgerResolveUnknown, LogAppend, ToolInvoke)
from model.agent import TOOL_CALL_FAMILY, TOOL_PREPARED, TOOL_SETTLED, TOOL_UNKNOWN
from model.canonical import digest
from sim.invariants import Checker, RecentlySettled

if TYPE_CHECKING:
    from scenarios.workloads.agents import ToolService  # the tool service's own history

RETRY_RESOLUTIONS = ("NeverHappened", "SafeToRetry")
SETTLED_MEMORY_MS = 60 * 60 * 1000  # longer than any call's transit and deadline


def _step_and_attempt(call: str) -> tuple[str, int]:
    step, _, attempt = call.rpartition(".")
    return step, int(attempt)


def _submission_of(call: str) -> str:
    return call.rpartition("/s")[0]


class UnknownNeverReplayed(Checker):
    name = "unknown-never-replayed"
    kinds = (ToolInvoke.kind, LedgerClaim.kind, LedgerMarkUnknown.kind, LedgerResolveUnknown.kind, LedgerRequestAbort.kind,
             LedgerFinalizeSettlement.kind, LogAppend.kind)

    def __init__(self, tools: ToolService, *, opener: Any = None) -> None:
        """``opener``: opens a sealed field of an append (records whose
        sensitive fields are sealed: ``scenarios.invariants.secrets.SealedFieldOpener``)."""
        super().__init__()
        self.tools = tools
        self.opener = opener
        self._open: dict[str, set[str]] = {}  # submission -> its unknown calls not yet resolved
        self._resolved: dict[str, str] = {}  # call -> its resolution (open submissions only)
        # Submissions settled in the last SETTLED_MEMORY_MS -> their outcome (oldest first): a call in flight
        # may still land after its run settled.
        self._settled = RecentlySettled(SETTLED_MEMORY_MS)
        self.unknown_marked = 0
        self.tool_unknown_resolved = 0
        self.aborted_unknown = 0
        # Open submission -> {non-idempotent call prepared, neither settled nor marked unknown: the epoch that
        # prepared it} and the run's deadline (its logged start + allowance); dropped at settlement.
        self._in_doubt: dict[str, dict[str, int]] = {}
        self._deadline: dict[str, int] = {}
        self._claimed_past_deadline: dict[str, int] = {}  # open submission -> the last epoch claimed past its deadline
        self.doubt_marked_past_deadline = 0

    def metrics(self) -> dict:
        return {"tool_unknown_marked": self.unknown_marked, "tool_unknown_resolved": self.tool_unknown_resolved,
                "aborted_unknown": self.aborted_unknown, "doubt_marked_past_deadline": self.doubt_marked_past_deadline}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        if kind == ToolInvoke.kind:
            self._on_invoke(fields)
            return
        if kind == LogAppend.kind and LogAppend.envelopes in fields:
            # Replays and failed appends too: an append whose reply was lost
            # may have committed (its retry is a replay); only what surely
            # committed opens a doubt, anything that may have closes it.
            for envelope in fields[LogAppend.envelopes]:
                self._track_doubt(envelope, fields[LogAppend.epoch], event.time_ms, committed=ERROR not in fields)
        if ERROR in fields:
            return
        if kind == LedgerClaim.kind:
            submission = fields.get(LedgerClaim.submission)
            deadline_ms = self._deadline.get(submission) if submission is not None else None
            if deadline_ms is not None and event.time_ms > deadline_ms:
                self._claimed_past_deadline[submission] = fields[LedgerClaim.epoch]
        elif kind == LedgerMarkUnknown.kind:
            if not fields[LedgerMarkUnknown.replayed]:
                self.unknown_marked += 1
                self._open.setdefault(fields[LedgerMarkUnknown.submission], set()).add(fields[LedgerMarkUnknown.call])
        elif kind == LedgerResolveUnknown.kind:
            if fields[LedgerResolveUnknown.replayed]:
                return
            self.checks += 1
            call, resolution = fields[LedgerResolveUnknown.call], fields[LedgerResolveUnknown.resolution]
            submission = fields[LedgerResolveUnknown.submission]
            self._open.get(submission, set()).discard(call)
            self._resolved[call] = resolution
            self.tool_unknown_resolved += 1
            happened = self.tools.effect(call) is not None
            if resolution == "CompletedWithResult" and not happened:
                self.fail(f"{call}: resolved CompletedWithResult, but it never reached the tool", (call,))
        elif kind == LedgerRequestAbort.kind:
            if not fields[LedgerRequestAbort.replayed] and self._open.get(fields[LedgerRequestAbort.submission]):
                self.aborted_unknown += 1
        elif kind == LedgerFinalizeSettlement.kind:
            submission = fields[LedgerFinalizeSettlement.submission]
            outcome = fields[LedgerFinalizeSettlement.outcome]
            self._settled.add(submission, event.time_ms, outcome)
            in_doubt = self._in_doubt.pop(submission, {})
            self._deadline.pop(submission, None)
            self._claimed_past_deadline.pop(submission, None)
            if not fields.get(LedgerFinalizeSettlement.replayed):
                self.checks += 1
                if in_doubt and outcome != "aborted":
                    self.fail(f"{submission}: settled {outcome} while {sorted(in_doubt)} was prepared and neither "
                              f"settled nor marked unknown (it settled over a call in doubt)", (submission,))
            self._open.pop(submission, None)
            for call in [call for call in self._resolved if _submission_of(call) == submission]:
                del self._resolved[call]
        elif not fields.get(LogAppend.replayed):
            for index, envelope in enumerate(fields[LogAppend.envelopes]):
                if envelope["family"] != TOOL_CALL_FAMILY or envelope["payload"]["phase"] != TOOL_SETTLED:
                    continue
                self.checks += 1
                payload = envelope["payload"]
                call = payload["call"]
                output = payload["output"]
                if self.opener is not None:
                    output = self.opener(self.view, fields[LogAppend.conversation], fields[LogAppend.batch], index,
                                         TOOL_CALL_FAMILY, "output", output)
                effect = self.tools.effect(call)
                if effect is None or digest(effect) != digest(output["result"]):
                    self.fail(f"{call}: the log settled it with a result the tool never gave it", (call,))

    def _track_doubt(self, envelope: dict, epoch: int, time_ms: int, *, committed: bool) -> None:
        payload = envelope["payload"]
        if not isinstance(payload, dict):
            return
        if envelope["family"] == "run-started" and committed:
            run = payload.get("submissionId")
            if isinstance(run, str) and isinstance(payload.get("maxDurationMillis"), int):
                self._deadline[run] = envelope["createdAt"] + payload["maxDurationMillis"]
            return
        if envelope["family"] != TOOL_CALL_FAMILY:
            return
        call = payload.get("call")
        if not isinstance(call, str):
            return
        phase = payload.get("phase")
        if phase == TOOL_PREPARED and payload.get("idempotent") is False and committed:
            self._in_doubt.setdefault(_submission_of(call), {}).setdefault(call, epoch)
        elif phase in (TOOL_SETTLED, TOOL_UNKNOWN):
            submission = _submission_of(call)
            prepared_epoch = self._in_doubt.get(submission, {}).pop(call, None)
            if (phase == TOOL_UNKNOWN and committed and prepared_epoch is not None and epoch > prepared_epoch
                    and self._claimed_past_deadline.get(submission) == epoch):
                self.doubt_marked_past_deadline += 1

    def _on_invoke(self, fields: dict) -> None:
        call = fields[ToolInvoke.call]
        arrivals = self.tools.arrivals(call)
        if arrivals == 0:
            return  # it never reached the tool (a crash before the call, a refusal)
        self.checks += 1
        outcome = self._settled.get(_submission_of(call))
        if outcome is not None and fields[ToolInvoke.key] is None and self.tools.effect(call) is not None:
            # A non-idempotent call's effect after its run settled. The spec
            # lets an aborted run settle with a call in doubt (never replaying
            # it); any other outcome was settled over an effect nobody knew of.
            # (An idempotent call landing late is deduplicated by its key.)
            if outcome != "aborted":
                self.fail(f"{call}: reached the tool after its run settled {outcome} (it settled over a call in "
                          f"doubt)", (call,))
            return
        resolved = self._resolved.get(call)
        if resolved in RETRY_RESOLUTIONS and self.tools.effect(call) is not None:
            self.fail(f"{call}: resolved {resolved}, yet it reached the tool afterwards (a call in flight landed "
                      f"after the resolution said it never would)", (call,))
        if fields[ToolInvoke.key] is None and arrivals > 1:
            self.fail(f"{call}: a non-idempotent call reached the tool {arrivals} times (its outcome was in "
                      f"doubt and it was called again)", (call,))
        step, attempt = _step_and_attempt(call)
        if attempt and arrivals == 1:
            previous = f"{step}.{attempt - 1}"
            resolution = self._resolved.get(previous)
            if resolution not in RETRY_RESOLUTIONS:
                self.fail(f"{call}: called again although {previous} was resolved {resolution!r} (only "
                          f"NeverHappened or SafeToRetry permit another call)", (call,))
            elif self.tools.effect(previous) is not None:
                self.fail(f"{previous}: resolved {resolution}, yet it had reached the tool: {call} repeats it",
                          (call,))

    def audit(self, view) -> None:
        effects: dict[str, int] = {}
        for call in self.tools.calls():
            self.checks += 1
            step, _ = _step_and_attempt(call)
            if self.tools.effect(call) is not None:
                effects[step] = effects.get(step, 0) + 1
        for step, count in sorted(effects.items()):
            if count > 1:
                self.fail(f"{step}: the tool acted {count} times for one step", (step,))
