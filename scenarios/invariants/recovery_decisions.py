"""``recovery-decisions``: every recovery decision is the one its ledger row
and its conversation's verified prefix imply, and a repair it names happens.

Online, on each ``recovery.decision``: the log facts are read from the log
store directly (its records through the prefix's ``tail_seq``: the
submission's input record, its settlement record), the row facts come from
the trace (what the pass read of the row, ``row``) and are held against the
ledger's row now where they cannot have changed since (its state, when it is
still the one the pass saw; the parent link; an abort intent, which stays);
the decision and its disposition must be the one this oracle's own table
gives (written apart from ``model.recovery_decisions``, never importing it).

Audit, from the stores: each submission a ``repaired`` decision named and
that has settled since shows the repair — ``FinalizeLedgerFromHistory`` and
``AppendReservedSettlement``: one settlement record in the log, the digest
the ledger settled with (a repair annotation, when there is one, before
it); ``ApplyInput`` / ``RepairInputMarker``: its input record once in the
log, the ledger's marker at it (unless it settled aborted before it ran);
``CompleteMaterialization``: it became ready (or its abort settled it);
``SettleAborted`` / ``PropagateChildAbort``: settled ``aborted``;
``RepairJoinMarker``: settled with the outcome of its host;
``AwaitApprovalDecision`` [repaired]: its row waited for each approval its
log requested; ``ApplyJoinAccounting``: a ``joined`` record of each
released child; ``CompleteChildAdmission`` / ``RepairSubagentStartLink``:
each reserved child attached and started in its log;
``EnsureWaitingForChild``: each started child waited on (the last three,
and the approval's, of a parent that completed: a failed run stops at a step). A submission still open at the audit is liveness's to report.

The repairs the pass applies itself (``CompleteMaterialization``,
``FinalizeLedgerFromHistory``, a never-claimed row's ``SettleAborted`` once
a claim has taken its lane over) are checked when the pass says it is done
with the conversation (``recovery.classified``), not at the audit: the row
is ready / settled then, before any claim holder could have done it
instead (the next holder reaches the same end, so only then can a pass that
skipped its own repair be told apart).

Online, from the trace: a settlement record appended under another epoch
than the one its record was reserved under is a successor's repair
(``AppendReservedSettlement``): its repair annotation
``repair:{sid}:AppendReservedSettlement`` reached the log before it. A
queued abort's reservation (no claim ever granted the submission: the
ledger's ``QueuedAbort`` authority) names no epoch and is not judged here.

Memory: the repaired decisions per conversation until its audit (the end
of the run, or retention's audit of it), one conversation's log facts, the
epoch of each open reservation.
"""
from __future__ import annotations

from faults.events import (ERROR, LedgerClaim, LedgerFinalizeSettlement, LedgerReserveSettlement, LogAppend,
                           RecoveryClassified, RecoveryDecision)
from model.canonical import digest
from sim.invariants import Checker

_REPAIRED, _DEFERRED, _UNKNOWN = "repaired", "deferred", "unknown"
# What a ledger answers for a stored row it cannot read (by the error's name).
_UNREADABLE = ("CorruptSubmission", "UnsupportedLedgerVersion")


def _store_state(row) -> str:
    """A ledger row's lifecycle state, from its stored facts (its own reading)."""
    if row.settled_at_ms is not None:
        return "settled"
    if row.join_host is not None:
        return "joined" if row.joined_seq is not None else "joining"
    if row.reserved_digest is not None:
        return "terminalizing"
    if any(resolution is None for resolution in (row.unknown_calls or {}).values()):
        return "unknown"
    if any(decision is None for decision in (row.approvals or {}).values()) or any(
            entry["awaited"] and entry["releasedAtMs"] is None for entry in (row.children or {}).values()):
        return "suspended"
    if row.input_applied:
        return "input-applied"
    if row.epoch is not None:
        return "running"
    return "ready" if row.ready else "admitted"


_TOOLS = ("tool", "tool-once")
# The repairs the recovery pass applies itself (no claim).
_PASS_APPLIES = ("CompleteMaterialization", "FinalizeLedgerFromHistory", "SettleAborted")
_NO_FACTS: dict = {}


def log_facts(records, tail_seq: int) -> dict[str, dict]:
    """Per submission, what the log through ``tail_seq`` says (this oracle's
    own reading): ``input``, ``settlement``; ``steps`` (its steps recorded);
    ``turns`` (the steps whose model response is logged); ``tools_settled``
    (the steps a tool call settled); ``in_doubt`` (non-idempotent calls
    prepared, never settled); ``approvals_requested`` (requested, never
    decided); ``subagents_{requested,started,joined}`` (calls)."""
    out: dict[str, dict] = {}
    prepared: dict[str, set] = {}
    settled_calls: dict[str, set] = {}
    asked: dict[str, set] = {}
    answered: dict[str, set] = {}

    def of(sid: str) -> dict:
        return out.setdefault(sid, {"input": False, "plan": [], "settlement": False, "steps": 0, "turns": set(),
                                    "tools_settled": set(), "in_doubt": set(), "approvals_requested": set(),
                                    "subagents_requested": set(), "subagents_started": set(),
                                    "subagents_joined": set()})

    for record in records:
        if record.seq > tail_seq:
            break
        family, payload = record.envelope.family, record.envelope.payload
        if not isinstance(payload, dict):
            continue
        if family == "model-completed" and isinstance(payload.get("call"), str) and "/s" in payload["call"]:
            owner, _, index = payload["call"].rpartition("/s")
            if index.isdigit():
                of(owner)["turns"].add(int(index))
            continue
        sid = payload.get("submissionId")
        if not isinstance(sid, str):
            continue
        facts = of(sid)
        phase, call = payload.get("phase"), payload.get("call")
        if family == "input":
            facts["input"] = True
            request = payload.get("input")
            if isinstance(request, dict) and isinstance(request.get("plan"), list):
                facts["plan"] = list(request["plan"])
        elif family == "submission-settled":
            facts["settlement"] = True
        elif family == "model-output" and isinstance(payload.get("step"), int):
            facts["steps"] = max(facts["steps"], payload["step"] + 1)
        elif family == "tool-call" and phase == "prepared" and payload.get("idempotent") is False:
            prepared.setdefault(sid, set()).add(call)
        elif family == "tool-call" and phase == "settled":
            settled_calls.setdefault(sid, set()).add(call)
            step = call.rpartition("/s")[2].split(".")[0] if isinstance(call, str) else ""
            if step.isdigit():
                facts["tools_settled"].add(int(step))
        elif family == "tool-call" and phase == "approval-requested":
            asked.setdefault(sid, set()).add(call)
        elif family == "tool-call" and phase == "approval-decided":
            answered.setdefault(sid, set()).add(call)
        elif family == "subagent" and phase in ("requested", "started", "joined"):
            facts[f"subagents_{phase}"].add(call)
    for sid, calls in prepared.items():
        of(sid)["in_doubt"] = calls - settled_calls.get(sid, set())
    for sid, calls in asked.items():
        of(sid)["approvals_requested"] = calls - answered.get(sid, set())
    return out


def _input_applied_decision(row: dict, log: dict) -> tuple[str, str]:
    """An input-applied row without an abort intent: where its next step stands."""
    children = row.get("childCalls", {})
    if set(log.get("in_doubt", ())) - set(row.get("unknownCalls", ())):
        return "MarkUnknown", _UNKNOWN
    if set(log.get("approvals_requested", ())) - set(row.get("approvalCalls", ())):
        return "AwaitApprovalDecision", _REPAIRED
    joined, started = set(log.get("subagents_joined", ())), set(log.get("subagents_started", ()))
    if any(e["released"] and e["child"] and call not in joined for call, e in children.items()):
        return "ApplyJoinAccounting", _REPAIRED
    waiting = {call: e for call, e in children.items() if not e["released"]}
    if any(call in started and not e["awaited"] for call, e in waiting.items()):
        return "EnsureWaitingForChild", _REPAIRED
    if any(call not in started and (e["child"] or e["admitted"]) for call, e in waiting.items()):
        return "RepairSubagentStartLink", _REPAIRED
    if any(call not in started for call in waiting):
        return "CompleteChildAdmission", _REPAIRED
    if set(log.get("subagents_requested", ())) - set(children):
        return "ResumePendingToolBatch", _DEFERRED
    plan, at = log.get("plan", []), log.get("steps", 0)
    if at < len(plan):
        if plan[at] in _TOOLS and at not in log.get("tools_settled", ()):
            return "ResumePendingToolBatch", _DEFERRED
        if plan[at] == "model" and at in log.get("turns", ()) and at + 1 < len(plan) and plan[at + 1] in _TOOLS:
            return "ResumePendingToolBatch", _DEFERRED
    return "ResumeFromTurnBoundary", _DEFERRED


def expected_decision(row: dict, log: dict) -> tuple[str, str] | None:
    """This oracle's table: (decision, disposition) for what the pass read
    (``row``) and what the log says of the submission (``log``: ``log_facts``'s);
    None for a row no pass can meet (a settled one; a joined one whose host
    is not open: the host's finalize settles its followers with it)."""
    has_input, has_settlement = log.get("input", False), log.get("settlement", False)
    state = row["state"]
    if state == "unreadable":
        return "HoldUnreadableRow", _UNKNOWN
    if state in ("joining", "joined"):
        if state == "joining":
            return ("RepairJoinMarker" if has_input else "RevertJoining"), _REPAIRED
        return ("AwaitHostSettlement", _DEFERRED) if row["hostOpen"] else None
    if has_settlement:  # the canonical record wins over the row
        return "FinalizeLedgerFromHistory", _REPAIRED
    if state == "admitted":
        return ("AwaitChildAdmission", _DEFERRED) if row["child"] else ("CompleteMaterialization", _REPAIRED)
    if state == "ready":
        if row["aborting"]:  # a queued abort its aborter did not finish
            return "SettleAborted", _REPAIRED
        return ("ApplyInput", _REPAIRED) if row["head"] else ("AwaitQueueTurn", _DEFERRED)
    if state == "running":
        if row["aborting"]:
            return "SettleAborted", _REPAIRED
        return ("RepairInputMarker" if has_input else "ApplyInput"), _REPAIRED
    if state == "terminalizing":
        return "AppendReservedSettlement", _REPAIRED
    if state in ("input-applied", "suspended", "unknown") and row["aborting"]:
        return ("PropagateChildAbort" if row["children"] else "SettleAborted"), _REPAIRED
    if state == "input-applied":
        return _input_applied_decision(row, log)
    if state == "unknown":
        return "AwaitUnknownResolution", _UNKNOWN
    if state == "suspended":
        if row["approvals"]:
            return "AwaitApprovalDecision", _DEFERRED
        if row["childSettled"]:
            return "ResumeWaitingParent", _REPAIRED
        return "AwaitChildSettlement", _DEFERRED
    return None  # settled: the scan returns open rows only


class RecoveryDecisions(Checker):
    name = "recovery-decisions"
    kinds = (RecoveryDecision.kind, RecoveryClassified.kind, LedgerClaim.kind, LedgerReserveSettlement.kind,
             LedgerFinalizeSettlement.kind, LogAppend.kind)

    def __init__(self) -> None:
        super().__init__()
        # conversation -> {submission: decisions (repaired) it was given}
        self._repaired: dict[str, dict[str, set[str]]] = {}
        self._facts_key: tuple[str, int] | None = None
        self._facts: dict[str, dict] = {}
        # (process, conversation) -> the repairs a pass applies itself that it decided, until it says
        # the conversation is done (``recovery.classified``).
        self._by_pass: dict[tuple[str, str], list[tuple[str, str]]] = {}
        # Open reservations: submission -> the epoch it was reserved under; and
        # the submissions whose AppendReservedSettlement annotation reached the log.
        self._reserved_at: dict[str, int] = {}
        self._annotated: set[str] = set()
        # Open submissions some claim granted: a reservation of one no claim
        # ever granted (a queued abort's, under the ledger's QueuedAbort
        # authority) has no epoch, and its aborter appends at the log's.
        self._claimed: set[str] = set()

    def _read(self, conversation: str, tail_seq: int) -> None:
        """The conversation's log facts through ``tail_seq`` (a prefix never
        changes: read once per conversation group of a pass)."""
        if self._facts_key == (conversation, tail_seq):
            return
        self._facts = log_facts(self.view.log_records(conversation), tail_seq)
        self._facts_key = (conversation, tail_seq)

    def on_event(self, event: tuple) -> None:
        fields = event.fields
        kind = event.kind
        if kind == RecoveryClassified.kind:
            self._on_classified(event.node, fields)
            return
        if kind != RecoveryDecision.kind:
            self._on_settlement_event(kind, fields)
            return
        sid, conversation = fields[RecoveryDecision.submission], fields[RecoveryDecision.conversation]
        row = fields[RecoveryDecision.row]
        decision = (fields[RecoveryDecision.decision], fields[RecoveryDecision.disposition])
        self._read(conversation, fields[RecoveryDecision.tail_seq])
        facts = self._facts.get(sid, _NO_FACTS)
        has_input, has_settlement = facts.get("input", False), facts.get("settlement", False)
        self.checks += 1
        wanted = expected_decision(row, facts)
        if decision != wanted:
            implied = "a row no pass can meet" if wanted is None else f"{wanted[0]} [{wanted[1]}]"
            self.fail(f"{sid}: recovery decided {decision[0]} [{decision[1]}] for a {row['state']} row "
                      f"(log through seq {fields[RecoveryDecision.tail_seq]}: input {has_input}, settlement "
                      f"{has_settlement}); its row and prefix imply {implied}", (sid,))
        try:
            rows = self.view.submissions(conversation)
        except Exception as error:  # noqa: BLE001 - judged below by its name
            if type(error).__name__ not in _UNREADABLE:
                raise
            rows = None  # the ledger cannot read a row of the conversation back
        if row["state"] == "unreadable":
            self.checks += 1
            if rows is not None:
                self.fail(f"{sid}: recovery held it as unreadable, but every row of {conversation!r} reads back",
                          (sid,))
            rows = ()
        stored = next((r for r in rows or () if r.submission_id == sid), None)
        if stored is not None:
            self.checks += 1
            # What cannot have changed since the pass read the row: its state
            # (when still the one it saw) with its parent link, an abort intent.
            if _store_state(stored) == row["state"] and (stored.parent is not None) != row["child"]:
                self.fail(f"{sid}: the decision's row says parent link {row['child']}, the ledger's row "
                          f"{stored.parent}", (sid,))
            if row["aborting"] and stored.abort_author is None:
                self.fail(f"{sid}: the decision's row holds an abort intent the ledger's row does not", (sid,))
        if decision[1] == _REPAIRED:
            self._repaired.setdefault(conversation, {}).setdefault(sid, set()).add(decision[0])
            if decision[0] in _PASS_APPLIES:
                self._by_pass.setdefault((event.node, conversation), []).append((sid, decision[0]))

    def _on_classified(self, actor: str, fields: dict) -> None:
        """The pass says the conversation's rows are classified and its own
        repairs applied: each is in the ledger now, before any claim could
        have done it instead."""
        pending = self._by_pass.pop((actor, fields[RecoveryClassified.conversation]), ())
        if not pending or not fields[RecoveryClassified.repairs]:
            return
        rows = {row.submission_id: row for row in self.view.submissions(fields[RecoveryClassified.conversation])}
        for sid, decision in pending:
            row = rows.get(sid)
            if row is None:
                continue  # gone with its conversation
            self.checks += 1
            if decision == "CompleteMaterialization" and not row.ready and row.settled_at_ms is None:
                self.fail(f"{sid}: the recovery pass decided CompleteMaterialization and finished the "
                          f"conversation with the row still not ready", (sid,))
            elif decision == "FinalizeLedgerFromHistory" and row.settled_at_ms is None \
                    and row.reserved_digest is not None:
                self.fail(f"{sid}: the recovery pass decided FinalizeLedgerFromHistory and finished the "
                          f"conversation with the row still not settled", (sid,))
            elif decision == "SettleAborted" and row.epoch is None and row.settled_at_ms is None \
                    and row.reserved_digest is None and row.abort_author is not None and row.ready:
                # A never-claimed row with its intent (its aborter died after
                # storing it): the pass settles it through the log, unless no
                # claim has taken the lane over yet (epoch 0: nothing may
                # append). A reservation it made whose append met a moving
                # tail is finished by the next pass or claim.
                tail = self.view.log_tail(fields[RecoveryClassified.conversation])
                if tail is not None and tail.epoch >= 1:
                    self.fail(f"{sid}: the recovery pass decided SettleAborted for a never-claimed row and "
                              f"finished the conversation with nothing of its abort settled", (sid,))

    def _on_settlement_event(self, kind: str, fields: dict) -> None:
        """A reserved record appended under another epoch than its
        reservation's is a successor's repair (``AppendReservedSettlement``):
        its annotation must be in the log before it."""
        if kind == LedgerClaim.kind:
            if ERROR not in fields and LedgerClaim.submission in fields:
                self._claimed.add(fields[LedgerClaim.submission])
        elif kind == LedgerReserveSettlement.kind:
            if ERROR not in fields and fields[LedgerReserveSettlement.submission] in self._claimed:
                self._reserved_at.setdefault(fields[LedgerReserveSettlement.submission],
                                             fields[LedgerReserveSettlement.epoch])
        elif kind == LedgerFinalizeSettlement.kind:
            if ERROR not in fields:
                sid = fields[LedgerFinalizeSettlement.submission]
                self._reserved_at.pop(sid, None)
                self._annotated.discard(sid)
                self._claimed.discard(sid)
        else:
            # An annotation counts even from a call that failed (its reply
            # may be lost after it committed): a miss, never a false alarm.
            for envelope in fields[LogAppend.envelopes]:
                payload = envelope["payload"]
                if envelope["family"] == "repair-annotation" and isinstance(payload, dict) and \
                        payload.get("decision") == "AppendReservedSettlement":
                    self._annotated.add(payload.get("submissionId"))
            if ERROR in fields or fields.get(LogAppend.replayed):
                return
            for envelope in fields[LogAppend.envelopes]:
                payload = envelope["payload"]
                if envelope["family"] != "submission-settled" or not isinstance(payload, dict):
                    continue
                sid = payload.get("submissionId")
                reserved_at = self._reserved_at.get(sid)
                if reserved_at is None or reserved_at == fields[LogAppend.epoch]:
                    continue
                self.checks += 1
                if sid not in self._annotated:
                    self.fail(f"{sid}: its settlement, reserved at epoch {reserved_at}, was appended at epoch "
                              f"{fields[LogAppend.epoch]} with no repair annotation "
                              f"repair:{sid}:AppendReservedSettlement before it", (sid,))

    def audit(self, view) -> None:
        for conversation in view.conversation_ids():
            repaired = self._repaired.pop(conversation, None)
            if repaired:
                self._audit_conversation(view, conversation, repaired)

    audit_retiring = audit

    def _audit_conversation(self, view, conversation: str, repaired: dict[str, set[str]]) -> None:
        rows = {row.submission_id: row for row in view.submissions(conversation)}
        where: dict[str, dict[str, list]] = {}  # submission -> family -> [(seq, record)]
        for record in view.log_records(conversation):
            payload = record.envelope.payload
            sid = payload.get("submissionId") if isinstance(payload, dict) else None
            if isinstance(sid, str) and sid in repaired:
                where.setdefault(sid, {}).setdefault(record.envelope.family, []).append(record)
        for sid, decisions in sorted(repaired.items()):
            row = rows.get(sid)
            if row is None or row.settled_at_ms is None:
                continue  # gone with its conversation, or open: liveness reports it
            logged = where.get(sid, {})
            for decision in sorted(decisions):
                self.checks += 1
                problem = self._repair_missing(decision, row, rows, logged)
                if problem:
                    self.fail(f"{sid}: recovery decided {decision}, but {problem}", (sid,))

    @staticmethod
    def _subagent_repair_missing(decision: str, row, logged: dict) -> str | None:
        """A subagent repair shows in the settled parent: each released
        child's outcome joined in its log (``ApplyJoinAccounting``), each
        reserved child admitted, attached and started in its log
        (``CompleteChildAdmission``, ``RepairSubagentStartLink``), each
        started child waited on or released (``EnsureWaitingForChild``) — a
        completed parent's (a failed run stops at a step; an aborted one's
        abort releases its orphans and joins the rest)."""
        phases: dict[str, set] = {}
        for record in logged.get("subagent", []):
            phases.setdefault(record.envelope.payload.get("phase"), set()).add(record.envelope.payload.get("call"))
        children = row.children or {}
        if row.outcome == "failed":
            return None  # its run stopped at a step (its clock, a rejection): the later steps never ran
        if decision == "ApplyJoinAccounting":
            unjoined = sorted(call for call, entry in children.items() if entry["releasedAtMs"] is not None
                              and entry["child"] is not None and call not in phases.get("joined", set()))
            return f"the log holds no joined record of its released child {unjoined[0]}" if unjoined else None
        if row.outcome != "completed":
            return None
        if decision == "EnsureWaitingForChild":
            idle = sorted(call for call, entry in children.items()
                          if call in phases.get("started", set()) and not entry["awaited"]
                          and entry["releasedAtMs"] is None)
            return f"it never waited for its started child {idle[0]}" if idle else None
        unlinked = sorted(call for call, entry in children.items()
                          if entry["child"] is None or call not in phases.get("started", set()))
        return f"its child of {unlinked[0]} was never attached and started" if unlinked else None

    @staticmethod
    def _repair_missing(decision: str, row, rows: dict, logged: dict) -> str | None:
        settled = logged.get("submission-settled", [])
        inputs = logged.get("input", [])
        if decision in ("FinalizeLedgerFromHistory", "AppendReservedSettlement"):
            if len(settled) != 1:
                return f"the log holds {len(settled)} settlement records of it"
            logged_envelope = {key: value for key, value in settled[0].envelope.to_json().items()
                               if key not in ("producerId", "epoch")}
            if digest(logged_envelope) != row.reserved_digest:
                return "the ledger settled with another digest than the logged record's"
            annotations = [r for r in logged.get("repair-annotation", [])
                           if r.envelope.payload.get("decision") == decision]
            if any(r.seq > settled[0].seq for r in annotations):
                return "its repair annotation follows the settlement record"
        elif decision in ("ApplyInput", "RepairInputMarker"):
            if row.outcome == "aborted" and not inputs:
                return None  # its abort settled it before it ran
            if len(inputs) != 1:
                return f"the log holds {len(inputs)} input records of it"
            if row.input_seq != inputs[0].seq:
                return f"its input marker says seq {row.input_seq}, the record is at {inputs[0].seq}"
        elif decision == "CompleteMaterialization":
            if not row.ready and row.outcome != "aborted":
                return "it never became ready"
        elif decision in ("SettleAborted", "PropagateChildAbort"):
            if row.outcome != "aborted":
                return f"it settled {row.outcome!r}"
        elif decision == "AwaitApprovalDecision":  # the successor suspended for each request
            requested = [r.envelope.payload.get("call") for r in logged.get("tool-call", [])
                         if r.envelope.payload.get("phase") == "approval-requested"]
            missing = sorted(call for call in requested if call not in (row.approvals or {}))
            if missing and row.outcome == "completed":  # a failed or aborted run may stop before it
                return f"its row never waited for the approval of {missing[0]}"
        elif decision in ("ApplyJoinAccounting", "EnsureWaitingForChild", "RepairSubagentStartLink",
                          "CompleteChildAdmission"):
            return RecoveryDecisions._subagent_repair_missing(decision, row, logged)
        elif decision == "RepairJoinMarker":
            host = rows.get(row.join_host) if row.join_host is not None else None
            if row.join_host is not None and host is not None and host.outcome != row.outcome:
                return f"it settled {row.outcome!r}, its host {host.outcome!r}"
            if row.join_host is not None and len(inputs) == 1 and row.joined_seq != inputs[0].seq:
                return f"its join marker says seq {row.joined_seq}, its input is at {inputs[0].seq}"
        return None
