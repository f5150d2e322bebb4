"""The reference ledger's state and plumbing (``scenarios.reference.ledger``):
the port's parameters, a submission's row and a conversation as plain
Python values, and how a call is bound, shown and compared. Written from
the contract, apart from the model, like the reference ledger itself."""
from __future__ import annotations

import collections
import operator
from typing import Any

import attrs

from model.ledger.records import (AbortIntent, AdmissionResult, Claim, NonterminalSubmission, OwnershipRenewal,
                                  ParentLink, RecoverySnapshot, ReservedSettlement, Settlement, SubmissionOwnership,
                                  SubmissionRecord)
from scenarios.reference import HISTORY_MAX, error_name
from scenarios.reference.jcs import canonical, digest_text, read_back


_SETTLED = "submission-settled"
_ENVELOPE_MEMBERS = ("createdAt", "deploymentId", "family", "payload", "recordId", "schemaVersion")


_SETTLEMENT_IDS = ("receiptId", "runId", "settlementId", "submissionId")


def _settled_envelope(sid: str, outcome_record: dict, created_at_ms: int, deployment_id: str,
                      run_id: str | None, receipt: str) -> dict:
    """The settlement record envelope of ``sid`` (L16)."""
    payload = dict(outcome_record)
    payload.update(receiptId=receipt, settlementId="settlement:" + sid, submissionId=sid)
    if run_id is not None:
        payload["runId"] = run_id
    return {"createdAt": created_at_ms, "deploymentId": deployment_id, "family": _SETTLED, "payload": payload,
            "recordId": "settlement:" + sid, "schemaVersion": 1}


def _outcome_of(envelope: dict) -> str:
    return envelope["payload"]["outcome"]


def _outcome_record(envelope: dict) -> dict:
    """The outcome record of a settlement envelope: its payload less the ids (L16)."""
    return {key: value for key, value in envelope["payload"].items() if key not in _SETTLEMENT_IDS}
# The ledger's typed storage failure (persistence §9.2): a write contention
# crosses the port as this, the contention its ``cause``.
STORE_ERROR = "LedgerStoreError"
SCHEMA_VERSION = 1  # persistence §11: every record carries it; one version during development.
OUTCOMES = ("completed", "failed", "aborted")
READS = frozenset({"get", "get_by_idempotency_key", "load_recovery_snapshot", "scan_nonterminal", "capabilities"})
# The methods whose first argument names the submission, not the conversation.
BY_SUBMISSION = frozenset({"mark_ready", "request_abort", "finalize_settlement", "get", "resolve_unknown",
                           "decide_approval", "release_child"})
BY_TOKEN = frozenset({"renew_ownership", "release_ownership", "mark_input_applied", "reserve_settlement",
                      "mark_unknown", "suspend", "begin_join", "mark_joined", "revert_join", "reserve_child",
                      "attach_child"})
JOIN_LIMIT_MAX = 64
DECISIONS = ("approved", "rejected")
RESOLUTIONS = ("NeverHappened", "SafeToRetry", "CompletedWithResult")

# The port's parameters, in order (model/ledger/port.py): a call may pass any of them by keyword.
PARAMS: dict[str, tuple[str, ...]] = {
    "admit": ("conversation_id", "principal_id", "idempotency_key", "input", "now_ms", "parent", "admission_group",
              "admission_fence", "metadata"),
    "set_admission_fence": ("policy_id", "key", "revision"),
    "mark_ready": ("submission_id", "now_ms"),
    "claim": ("conversation_id", "owner_id", "lease_ms", "now_ms", "handoff"),
    "renew_ownership": ("token", "lease_ms", "now_ms"),
    "release_ownership": ("token",),
    "mark_input_applied": ("token", "record_id", "seq"),
    "request_abort": ("submission_id", "author", "reason", "now_ms"),
    "reserve_settlement": ("token", "record"),
    "finalize_settlement": ("submission_id", "now_ms"),
    "purge_conversation": ("conversation_id",),
    "mark_unknown": ("token", "tool_call_id"),
    "resolve_unknown": ("submission_id", "tool_call_id", "resolution", "resolver", "result", "now_ms"),
    "suspend": ("token", "tool_call_ids", "child_call_ids"),
    "begin_join": ("token", "limit"),
    "mark_joined": ("token", "submission_id", "record_id", "seq"),
    "revert_join": ("token", "submission_id"),
    "reserve_child": ("token", "tool_call_id", "allocation"),
    "attach_child": ("token", "tool_call_id", "child_submission_id"),
    "release_child": ("submission_id", "tool_call_id", "accounting", "now_ms"),
    "decide_approval": ("submission_id", "tool_call_id", "decision", "resolver", "reason", "now_ms"),
    "get": ("submission_id",),
    "get_by_idempotency_key": ("conversation_id", "principal_id", "idempotency_key"),
    "load_recovery_snapshot": ("conversation_id",),
    "scan_nonterminal": ("principal_id",),
    "capabilities": (),
}
# The parameters a call may leave out, and what they are then.
DEFAULTS: dict[str, dict[str, object]] = {"admit": {"parent": None, "admission_group": None, "admission_fence": None,
                                                     "metadata": None}, "claim": {"handoff": None},
                                          "suspend": {"child_call_ids": ()},
                                          "scan_nonterminal": {"principal_id": None}}


# --- the model's rows ---------------------------------------------------------------


class _Elided:
    """A settled row's JSON value, no longer held: only its digest is."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<the value of its digest>"


_ELIDED = _Elided()
# A scan row's fields (L18): a record's, but the input and the admission metadata.
_SCAN_FIELDS = tuple(field.name for field in attrs.fields(NonterminalSubmission))
# Every field of a SubmissionRecord but its two JSON values, in field order
# (compared as attrs' own __eq__ does: ``==`` field by field, in order).
_BUT_VALUES = operator.attrgetter(*(field.name for field in attrs.fields(SubmissionRecord)
                                    if field.name not in ("input", "reserved_record")))


class _Row:
    """One submission as the contract says the ledger holds it. Once
    settled, the input and the settlement record are kept as digests only:
    the history is retained indefinitely, and reads of it are rare."""

    __slots__ = ("submission_id", "conversation_id", "principal_id", "idempotency_key", "queue_seq",
                 "input_text", "input_digest", "receipt", "admitted_at_ms", "ready", "owner_id", "epoch",
                 "lease_expires_ms", "input_applied", "abort_author", "abort_reason", "abort_at_ms", "reserved_text",
                 "reserved_digest", "outcome", "settled_at_ms", "diagnostic", "unknown", "approvals", "join_host", "joined_at",
                 "followers", "children", "parent", "ready_at_ms", "attempt_id", "input_at", "settlement_id",
                 "group", "metadata_text", "_record", "_scan_row")

    def __init__(self, submission_id: str, conversation_id: str, principal_id: str, idempotency_key: str,
                 queue_seq: int, input_text: str, input_digest: str, receipt: str, admitted_at_ms: int) -> None:
        self.submission_id = submission_id
        self.conversation_id = conversation_id
        self.principal_id = principal_id
        self.idempotency_key = idempotency_key
        self.queue_seq = queue_seq
        self.input_text = input_text
        self.input_digest = input_digest
        self.receipt = receipt
        self.admitted_at_ms = admitted_at_ms
        self.ready = False
        self.owner_id: str | None = None
        self.epoch: int | None = None
        self.lease_expires_ms: int | None = None
        self.input_applied = False
        self.abort_author: str | None = None
        self.abort_reason: str | None = None
        self.abort_at_ms: int | None = None
        self.reserved_text: str | None = None
        self.reserved_digest: str | None = None
        self.outcome: str | None = None
        self.settled_at_ms: int | None = None
        self.diagnostic: object = None  # a failed settlement's, once finalized
        # Tool calls marked unknown, in marking order: call id -> None (open)
        # or its first resolution; None until the first is marked.
        self.unknown: dict | None = None
        # Approvals it suspended on: call id -> None (pending) or the first decision.
        self.approvals: dict | None = None
        # Joins: the host it joined, (record id, seq) of its input in the
        # host's log once joined; on a host, its followers (ids, queue order).
        self.join_host: str | None = None
        self.joined_at: tuple[str, int] | None = None
        self.followers: list[str] = []
        # Child reservations by tool call: [allocation text, child id, accounting text, released at,
        # awaited by a suspension].
        self.children: dict[str, list] = {}
        self.parent: ParentLink | None = None  # the link it was admitted with
        self.ready_at_ms: int | None = None  # the first mark_ready's instant
        self.attempt_id: str | None = None  # the latest claim's
        self.input_at: tuple[str, int] | None = None  # (record id, seq) of its input in the log
        self.settlement_id: str | None = None
        self.group: str | None = None  # its admission group (L16)
        self.metadata_text: str | None = None  # its admission metadata, canonical (L16)
        # The SubmissionRecord the contract says a read returns, built once
        # per change: workers scan the open work every poll, so a scan must
        # cost a comparison, not a decode. Every write calls ``changed``.
        self._record: SubmissionRecord | None = None
        self._scan_row: NonterminalSubmission | None = None

    def changed(self) -> None:
        self._record = None
        self._scan_row = None

    def scan_row(self) -> NonterminalSubmission:
        """What a scan answers for it (L18): its record's control fields,
        no input and no metadata (built once per change, as ``record``)."""
        if self._scan_row is None:
            record = self.record()
            self._scan_row = NonterminalSubmission(**{name: getattr(record, name) for name in _SCAN_FIELDS})
        return self._scan_row

    def record(self) -> SubmissionRecord:
        """What a read returns; once settled, with the two JSON values elided
        (``matches`` compares them by digest)."""
        if self.settled_at_ms is not None:
            return self._build_record()  # rarely read again: not worth its memory
        if self._record is None:
            self._record = self._build_record()
        return self._record

    def _build_record(self) -> SubmissionRecord:
        return SubmissionRecord(
            submission_id=self.submission_id, conversation_id=self.conversation_id,
            principal_id=self.principal_id, idempotency_key=self.idempotency_key, queue_seq=self.queue_seq,
            input=_ELIDED if self.input_text is None else read_back(self.input_text),
            input_digest=self.input_digest, receipt=self.receipt,
            admitted_at_ms=self.admitted_at_ms, ready=self.ready, owner_id=self.owner_id, epoch=self.epoch,
            lease_expires_ms=self.lease_expires_ms, input_applied=self.input_applied,
            abort_author=self.abort_author, abort_reason=self.abort_reason,
            abort_requested_at_ms=self.abort_at_ms,
            reserved_record=(None if self.reserved_digest is None else _ELIDED) if self.reserved_text is None
            else read_back(self.reserved_text),
            reserved_digest=self.reserved_digest, outcome=self.outcome, settled_at_ms=self.settled_at_ms,
            schema_version=SCHEMA_VERSION,
            unknown_calls=None if self.unknown is None else read_back(canonical(self.unknown)),
            approvals=None if self.approvals is None else read_back(canonical(self.approvals)),
            join_host=self.join_host, joined_record_id=None if self.joined_at is None else self.joined_at[0],
            joined_seq=None if self.joined_at is None else self.joined_at[1], joined_count=len(self.followers),
            children=None if not self.children else {
                call: {"allocation": read_back(alloc), "allocationDigest": digest_text(alloc), "awaited": awaited,
                       "child": child, "accounting": None if acct is None else read_back(acct), "releasedAtMs": at}
                for call, (alloc, child, acct, at, awaited) in self.children.items()},
            parent=self.parent, ready_at_ms=self.ready_at_ms, attempt_id=self.attempt_id,
            input_record_id=None if self.input_at is None else self.input_at[0],
            input_seq=None if self.input_at is None else self.input_at[1], settlement_id=self.settlement_id,
            admission_group=self.group,
            metadata=None if self.metadata_text is None else read_back(self.metadata_text))

    def pending_approvals(self) -> int:
        return 0 if self.approvals is None else sum(1 for v in self.approvals.values() if v is None)

    def awaited_children(self) -> int:
        """Children a suspension waits for, not yet released."""
        return sum(1 for entry in self.children.values() if entry[4] and entry[3] is None)

    def waiting(self) -> int:
        """Everything a suspension still waits for (L12)."""
        return self.pending_approvals() + self.awaited_children()

    def open_unknown(self) -> int:
        return 0 if self.unknown is None else sum(1 for v in self.unknown.values() if v is None)

    def matches(self, record: object) -> bool:
        """Is ``record`` (a store's read) the one the contract says?"""
        if self.input_text is not None:
            return type(record) is SubmissionRecord and record == self.record()
        if type(record) is not SubmissionRecord:
            return False
        try:
            values_agree = digest_text(canonical(record.input)) == self.input_digest and (
                digest_text(canonical(record.reserved_record)) == self.reserved_digest)
        except ValueError:
            return False
        if not values_agree:
            return False
        # ``attrs.evolve(record, input=_ELIDED, reserved_record=_ELIDED) ==
        # self.record()``, without building the copy: the two values are the
        # elided marker in the model's record, every other field equal.
        mine = self.record()
        return (mine.input is _ELIDED and mine.reserved_record is _ELIDED
                and all(map(operator.eq, _BUT_VALUES(record), _BUT_VALUES(mine))))

    def ownership(self) -> SubmissionOwnership:
        return SubmissionOwnership(
            submission_id=self.submission_id, queue_seq=self.queue_seq, ready=self.ready, owner_id=self.owner_id,
            epoch=self.epoch, lease_expires_ms=self.lease_expires_ms, input_applied=self.input_applied,
            abort_requested=self.abort_author is not None, abort_author=self.abort_author,
            abort_reason=self.abort_reason, abort_requested_at_ms=self.abort_at_ms,
            reserved_digest=self.reserved_digest,
            settled=self.settled_at_ms is not None, unknown_open=self.open_unknown(),
            approvals_pending=self.pending_approvals(), join_host=self.join_host,
            children_awaited=self.awaited_children(),
            input_record_id=None if self.input_at is None else self.input_at[0],
            input_seq=None if self.input_at is None else self.input_at[1],
            reserved_outcome=None if self.reserved_digest is None else (
                self.outcome if self.reserved_text is None else _outcome_of(read_back(self.reserved_text))),
            children=tuple(sorted((call, entry[1], entry[3] is not None) for call, entry in self.children.items())),
            attempt_id=self.attempt_id,
            approvals=None if self.approvals is None else read_back(canonical(self.approvals)),
            unknown_calls=None if self.unknown is None else read_back(canonical(self.unknown)),
            children_pending=tuple(sorted(call for call, entry in self.children.items()
                                          if entry[4] and entry[3] is None)),
            parent=self.parent, ready_at_ms=self.ready_at_ms, admission_group=self.group,
            metadata=None if self.metadata_text is None else read_back(self.metadata_text))

    def lease_live(self, now_ms: int) -> bool:
        # L1: live strictly before the expiry instant. The specification is
        # silent; both adapters (and the conformance check that a rival's
        # claim at exactly ``lease_expires_ms`` succeeds) treat the lease as
        # lapsed at that instant.
        return self.lease_expires_ms is not None and now_ms < self.lease_expires_ms


class _Conversation:
    __slots__ = ("epoch", "last_queue_seq", "rows", "open", "history", "lane")

    def __init__(self) -> None:
        self.epoch = 0  # the producer epoch: 0 before the first claim (RecoverySnapshot)
        self.last_queue_seq = 0
        self.rows: dict[str, _Row] = {}  # every held submission, by admission (= queue) order
        self.open: dict[str, _Row] = {}  # the unsettled ones, in queue order: the first is the FIFO head
        self.history: collections.deque = collections.deque(maxlen=HISTORY_MAX)
        # L16: what its first admission made it, until a purge: None (ordinary work) or a worker
        # admission's origin, as canonical text.
        self.lane: tuple[str | None] | None = None


class _Mismatch(Exception):
    """The store's answer is not one the contract allows: the message says why."""


_MISSING = object()
PORT_INT_MAX = 2 ** 53 - 1


def _settlement_id(submission_id: str, record_digest: str) -> str:
    """L10: "settlement:" + the submission id (one settlement per submission)."""
    return f"settlement:{submission_id}"


def _is_int(value: object) -> bool:
    # The contract's integers are JSON numbers: within +/-(2**53 - 1).
    return type(value) is int and -PORT_INT_MAX <= value <= PORT_INT_MAX


def _short(value: object, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _token_text(token: object) -> str:
    if isinstance(token, Claim):
        return f"token({token.submission_id}, owner={token.owner_id}, epoch={token.epoch})"
    return _short(token)


def _call_text(call: Any, bound: dict) -> str:
    parts = []
    for name, value in bound.items():
        if name == "token":
            parts.append(_token_text(value))
        elif name in ("input", "record"):
            parts.append(f"{name}={_short(value, 60)}")
        else:
            parts.append(f"{name}={value!r}")
    return f"{call.node} ledger.{call.method}({', '.join(parts)}) at {call.time_ms} ms"


def _answer_text(call: Any) -> str:
    if call.error is not None:
        return f"{error_name(call.error)}: {_short(str(call.error), 200)}"
    return _short(call.result, 300)


# What a history entry keeps of an answer: a few scalars, never a JSON value.
_BRIEF_FIELDS: dict[type, tuple[str, ...]] = {
    AdmissionResult: ("submission_id", "queue_seq", "replayed"),
    Claim: ("submission_id", "owner_id", "epoch", "lease_expires_ms"),
    OwnershipRenewal: ("submission_id", "owner_id", "epoch", "lease_expires_ms"),
    AbortIntent: ("submission_id", "author"),
    ReservedSettlement: ("submission_id",),
    Settlement: ("submission_id", "outcome", "settled_at_ms"),
    SubmissionRecord: ("submission_id", "ready", "owner_id", "epoch", "outcome"),
    RecoverySnapshot: ("epoch",),
}


# The same, as one attrgetter per type (a tuple of the fields' values).
_BRIEF_GETTERS: dict[type, Any] = {
    kind: (lambda get: lambda value: (get(value),))(operator.attrgetter(fields[0])) if len(fields) == 1
    else operator.attrgetter(*fields) for kind, fields in _BRIEF_FIELDS.items()}
_BRIEF_NAMES: dict[type, tuple[str]] = {kind: (kind.__name__,) for kind in _BRIEF_FIELDS}


def _brief_value(value: object) -> object:
    kind = type(value)
    if value is None or kind is str or kind is int or kind is bool:
        return value
    get = _BRIEF_GETTERS.get(kind)
    if get is not None:
        return _BRIEF_NAMES[kind] + get(value)
    if isinstance(value, dict) and "outcome" in value:
        return ("record", value["outcome"])
    if isinstance(value, dict) and isinstance(value.get("payload"), dict) and "outcome" in value["payload"]:
        return ("record", value["payload"]["outcome"])
    return type(value).__name__


def _brief(call: Any) -> tuple:
    """A history entry: small scalars that are mostly shared with the
    store's own rows, so a conversation's history costs a few hundred bytes
    whatever its calls carried (inputs, records, scans)."""
    answer = error_name(call.error) if call.error is not None else _brief_value(call.result)
    args = call.args + tuple(call.kwargs.values()) if call.kwargs else call.args
    return (call.time_ms, call.node, call.method, tuple(map(_brief_value, args)), answer)


def _bind(call: Any) -> dict | None:
    names = PARAMS.get(call.method)
    if names is None or len(call.args) > len(names):
        return None
    if not call.kwargs and len(call.args) == len(names):  # the common case, on every call of a long run
        return dict(zip(names, call.args))
    bound = dict(zip(names, call.args))
    for name, value in call.kwargs.items():
        if name not in names or name in bound:
            return None
        bound[name] = value
    for name, value in DEFAULTS.get(call.method, {}).items():
        bound.setdefault(name, value)
    if len(bound) != len(names):
        return None
    return {name: bound[name] for name in names}


# --- the model ------------------------------------------------------------------------
