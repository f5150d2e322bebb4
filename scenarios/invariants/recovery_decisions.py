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
``RepairJoinMarker`` / ``SettleJoinedWithHost``: settled with the outcome of
its host. A submission still open at the audit is liveness's to report.

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
                           RecoveryDecision)
from model.canonical import digest
from sim.invariants import Checker

_REPAIRED, _DEFERRED, _UNKNOWN = "repaired", "deferred", "unknown"


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


def expected_decision(row: dict, has_input: bool, has_settlement: bool) -> tuple[str, str]:
    """This oracle's table: (decision, disposition) for what the pass read."""
    state = row["state"]
    if state == "unreadable":
        return "HoldUnreadableRow", _UNKNOWN
    if state in ("joining", "joined"):
        if state == "joining":
            return ("RepairJoinMarker" if has_input else "RevertJoining"), _REPAIRED
        return ("AwaitHostSettlement", _DEFERRED) if row["hostOpen"] else ("SettleJoinedWithHost", _REPAIRED)
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
        return "ResumeFromTurnBoundary", _DEFERRED
    if state == "unknown":
        return "AwaitUnknownResolution", _UNKNOWN
    if state == "suspended":
        if row["approvals"]:
            return "AwaitApprovalDecision", _DEFERRED
        if row["childSettled"]:
            return "ResumeWaitingParent", _REPAIRED
        return "AwaitChildSettlement", _DEFERRED
    return "AlreadySettled", "none"


class RecoveryDecisions(Checker):
    name = "recovery-decisions"
    kinds = (RecoveryDecision.kind, LedgerClaim.kind, LedgerReserveSettlement.kind, LedgerFinalizeSettlement.kind,
             LogAppend.kind)

    def __init__(self) -> None:
        super().__init__()
        # conversation -> {submission: decisions (repaired) it was given}
        self._repaired: dict[str, dict[str, set[str]]] = {}
        self._facts_key: tuple[str, int] | None = None
        self._facts: dict[str, tuple[bool, bool]] = {}
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
        facts: dict[str, list[bool]] = {}
        for record in self.view.log_records(conversation):
            if record.seq > tail_seq:
                break
            payload = record.envelope.payload
            sid = payload.get("submissionId") if isinstance(payload, dict) else None
            if not isinstance(sid, str):
                continue
            entry = facts.setdefault(sid, [False, False])
            if record.envelope.family == "input":
                entry[0] = True
            elif record.envelope.family == "submission-settled":
                entry[1] = True
        self._facts = {sid: (entry[0], entry[1]) for sid, entry in facts.items()}
        self._facts_key = (conversation, tail_seq)

    def on_event(self, event: tuple) -> None:
        fields = event[4]
        kind = event[3]
        if kind != RecoveryDecision.kind:
            self._on_settlement_event(kind, fields)
            return
        sid, conversation = fields[RecoveryDecision.submission], fields[RecoveryDecision.conversation]
        row = fields[RecoveryDecision.row]
        decision = (fields[RecoveryDecision.decision], fields[RecoveryDecision.disposition])
        self._read(conversation, fields[RecoveryDecision.tail_seq])
        has_input, has_settlement = self._facts.get(sid, (False, False))
        self.checks += 1
        wanted = expected_decision(row, has_input, has_settlement)
        if decision != wanted:
            self.fail(f"{sid}: recovery decided {decision[0]} [{decision[1]}] for a {row['state']} row "
                      f"(log through seq {fields[RecoveryDecision.tail_seq]}: input {has_input}, settlement "
                      f"{has_settlement}); its row and prefix imply {wanted[0]} [{wanted[1]}]", (sid,))
        stored = next((r for r in self.view.submissions(conversation) if r.submission_id == sid), None)
        if stored is not None and row["state"] != "unreadable":
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
        elif decision in ("RepairJoinMarker", "SettleJoinedWithHost"):
            host = rows.get(row.join_host) if row.join_host is not None else None
            if row.join_host is not None and host is not None and host.outcome != row.outcome:
                return f"it settled {row.outcome!r}, its host {host.outcome!r}"
            if row.join_host is not None and len(inputs) == 1 and row.joined_seq != inputs[0].seq:
                return f"its join marker says seq {row.joined_seq}, its input is at {inputs[0].seq}"
        return None
