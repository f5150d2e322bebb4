"""The Submission Ledger's rules, written once (h11 style, ARCHITECTURE §9).

Every rule is a pure function over the rows a call needs: a
``ConversationRow`` (queue and epoch counters) and/or a ``SubmissionRow``
(``None`` = no such row). It raises the typed error or returns the decision:
the value to hand back and the new rows to write (``None`` = write nothing).
Each adapter fetches those rows — inside its ``BEGIN IMMEDIATE`` transaction
for SQLite — calls the rule, and writes what it returned. No rule is
restated in SQL; the conformance suite and the memory-vs-SQLite property test
pin the adapters to identical results.

Rows hold JSON values as canonical text (``model.canonical``), so rows are
plain immutable data, digests are over exactly what is stored, and every
read is a fresh decode.

Which operation a submission's state allows, and the state it leaves, is
one table (``states.py``): ``decide_claim``, ``decide_abort``,
``decide_finalize`` and ``decide_mark_unknown`` read it; the crash points are
derived from it.

Decisions where the specification is silent (all in one place, here):

- Submission ids are ``sub-{conversation_id}-{queue_seq}`` (unique: the seq is
  the last dash-separated integer); receipts are ``rcpt-`` + the digest of
  ``{submissionId, inputDigest}``; a claim's attempt id is
  ``{submission_id}#a{epoch}`` (``Claim.attempt_id``, also the row's
  ``attempt_id``: the latest claim's); a settlement id is
  ``settlement:{submissionId}``, the peer implementation's format (a
  finalize, its replays, a joined follower's settlement with its own
  record, an abort that settled a never-claimed one). No randomness anywhere.
- ``admit(..., parent=None)``: the parent link (``ParentLink``: parent
  submission and its tool call) is part of the admission's identity: an
  exact retry (same input, same link) replays; the same key with the same
  input and another link, or a link where there was none (or none where
  there was one), is ``AdmissionConflict(what="parent")`` (another input:
  ``what="input"``, checked first). The parent need not exist in this
  ledger (it may live in another conversation and store); only its type
  is checked (``TypeError``).
- Admission policies (the peer's admission groups and fences; the
  specification is silent on both). ``admit(..., admission_group=...,
  metadata=...)``: the group and the opaque metadata (any JSON, kept
  canonical and apart from the input; None: none) are part of the
  admission's identity, checked after the input and the parent, in that
  order (``AdmissionConflict(what="admission_group"/"metadata")``). A
  group is ledger-wide, across keys, principals and conversations (the
  peer's cases name a group, "entity", and never a conversation: a lane
  already runs its work one at a time, so a group serializes work about
  one entity across lanes): it holds at most one unsettled submission, from
  admission through terminalizing until its finalize (or any other
  settlement); a fresh admission into an occupied group is
  ``AdmissionPolicyError(reason="occupied", code="group-occupied")``.
  ``admit(..., admission_fence=AdmissionFence(policy_id, key, revision))``
  is taken only while the ledger's fence ``(policy_id, key)`` stands at
  ``revision``; ``set_admission_fence`` moves a fence forward (its current
  revision replays; an older one is refused, ``revision-regressed``). A
  fence at another revision is ``reason="refused"`` (``stale-revision``
  for an older one, ``unknown-revision`` for a newer one), a fence the
  ledger does not hold ``reason="unavailable"`` (``no-fence``); the fence
  is not part of the identity. Every policy is checked inside the
  admission's transaction, after the replay (an exact retry replays
  whatever the group or fence say now), fence first, then the group, then
  the lane: a conversation's first admission fixes its lane kind until the
  conversation is purged (the peer's worker lanes, case
  ``workerAdmissionIdentity``): a worker admission (metadata ``{"kind":
  "WorkerAdmission", "origin": ...}``) makes it the worker lane of that
  origin, any other admission an ordinary lane; a fresh admission of
  another kind is ``AdmissionPolicyError(reason="refused")``
  (``ordinary-lane``: a worker admission where ordinary work is;
  ``worker-lane``: ordinary work on a worker lane; ``worker-origin``: a
  worker admission omitting or replacing the lane's origin). A fresh
  worker admission carries the peer's fields: an ``origin`` with an
  integer ``expiresAtMillis`` (else ``worker-origin``, a fresh lane
  included) and its idempotency key as ``messageId`` (else
  ``worker-message-id``); ``parameters`` and ``sourceSubmissionId`` are
  part of the metadata's identity (``check_worker_admission``). A refusal
  writes nothing.
- ``mark_ready(submission_id, now_ms)`` answers a ``Readiness``: the first
  mark stamps ``ready_at_ms``; a repeat replays it (``replayed``).
- ``claim``: the same owner may claim again while its own lease is live; it
  gets a fresh epoch, fencing its previous incarnation's token. Any other
  owner's live lease (``lease_expires_ms > now_ms``) blocks the claim.
- ``claim(..., handoff=ClaimHandoff(producer_epoch, deferred_submission_ids,
  submission_id))``, the peer implementation's cooperative handoff
  (``cooperativeHandoff``): a producer that applied its head's input and
  released it unsettled (deferred it) hands the lane to the next ready
  submission. ``decide_claim_handoff`` grants exactly ``submission_id``, at
  a new epoch, only when the lane's epoch is still ``producer_epoch`` (no
  claim since the producer's), the deferred ids are exactly the lane's
  unsettled rows ahead of ``submission_id`` in queue order (no gap, no
  other ready row between), each of them input-applied, released, with no
  abort intent, not suspended, unknown, terminalizing or hosting followers,
  the last of them claimed at ``producer_epoch``, and ``submission_id`` a
  ready, never-claimed row of this lane; otherwise None (nothing written).
  An ordinary claim is unchanged: the FIFO head (the deferred one, once its
  successor settled; the successor's token stays valid on its own row, as
  every token does until its row is claimed again).
- A token is valid while the submission's row still carries its owner and
  epoch. No fenced call takes the clock into account, ``renew`` included
  (the peer implementation's rule): until another owner actually claims (a
  higher epoch), a lapsed owner's writes are still the only ones possible,
  so they are safe, and its renewal extends the lease from ``now_ms``.
- ``release`` of a token already released by itself (owner cleared, same
  epoch) is an idempotent no-op.
- ``mark_input_applied(token, record_id, seq)``: the position in the log
  of the input record it refers to is stored (``input_record_id``,
  ``input_seq``); a repeat at the same position (by any live token)
  replays (``InputApplied.replayed``), one at another position is
  ``InputMarkerConflict`` (nothing written). ``seq`` >= 1. A joined
  follower settled by its host takes its joined position as its input's.
- Every idempotent answer says whether it replayed: ``Readiness``,
  ``InputApplied``, ``ReservedSettlement`` (this record was reserved
  already), ``Settlement`` (finalized already: the first settlement).
- ``request_abort`` on a settled submission is ``SettlementConflict``
  naming its ``existing_outcome``, with or without an earlier intent (the
  peer implementation's answer), except one its own intent settled before
  it was ever claimed (below): the peer holds that one as an intent until
  recovery settles it, so its repeat returns the first intent, as on any
  unsettled one that already has an intent (author, reason, time;
  ``replayed=True``); on one whose owner already reserved a record and that
  has no intent it raises ``AbortConflict`` (``settling=True``: the
  reservation wins, so the ledger never holds an intent next to another
  outcome). A submission admitted but never ready settles ``aborted`` in
  the same write (its conversation may not exist yet: nothing of it is in
  the log). Otherwise the intent is stored: a running one's owner observes
  it at its next step; a queued one (ready, never claimed) settles through
  the log, because "settlement intentionally spans the two stores":
  ``reserve_settlement`` of its ``aborted`` record needs no ownership (the
  peer's ``QueuedAbort`` authority: any token, for a row with an intent
  that no claim ever granted; without an intent, or another outcome,
  ``OwnershipLost``), its aborter appends ``abort:{sid}`` and
  ``settlement:{sid}`` to the log, then finalizes
  (``model.lifecycle.SubmissionLifecycle.settle_queued_abort``), so it
  never waits behind its lane's head. A repeat of the abort once it settled
  is ``SettlementConflict``.
- ``reserve_settlement`` of a non-aborted record while an abort intent
  exists is ``AbortRequested`` (nothing written): the owner settles
  ``aborted`` instead.
- ``mark_unknown`` (the owner cannot tell whether a tool call happened)
  needs the input applied (else ``TransitionRefused``) and ends ownership:
  no claim grants the head while a call is open, except with an abort
  intent (for aborted settlement only). ``resolve_unknown`` by anyone (a
  reconciler): the first resolution wins, an identical repeat replays it
  with its resolver and time, another is ``ResolutionConflict``; a call
  never marked is ``UnknownToolCall``. A resolution after the submission
  settled (aborted meanwhile) is ``SettlementConflict`` (below).
- ``suspend(token, tool_call_ids, child_call_ids=())`` (the owner waits for
  approvals of ``tool_call_ids`` and for the release of the child
  reservations at ``child_call_ids``; either may be empty, not both:
  ``ValueError``) needs the input applied and ends ownership. A child call
  with no reservation is ``UnknownChildReservation`` (nothing written).
  Each named child entry is marked ``awaited`` (``ChildReservation.awaited``,
  the ``awaited`` flag of its ``children`` entry; it stays set), and the
  row counts the awaited ones not yet released (``children_awaited``). It
  is suspended while an approval is undecided or an awaited child
  unreleased (``Suspension.pending`` / ``children_pending``: the named ones
  still open) and resumes at once (claimable, ``resumed``) when all are
  decided / released already. ``decide_approval`` by anyone: only for a
  call some suspension named (else ``UnknownApproval``); the first decision
  wins, an identical repeat replays it with its resolver, reason and time,
  a contrary one is ``ApprovalConflict``. ``ApprovalDecision.pending`` and
  ``ChildReservation.pending`` count what the submission still awaits after
  the call (undecided approvals + awaited unreleased children): the last
  decision or awaited release (pending 0) resumes it; a decision while a
  child is still awaited does not, nor does a release while an approval is
  pending. A suspended head is claimable only with an abort intent
  (aborted settlement).
- Joins: ``begin_join(token, limit)`` takes the contiguous prefix of ready
  submissions behind a claimed host (stopping at a gap: a row neither ready
  nor already its follower), each ``joining``, and answers the rows it
  took, each with its queue position and input (a row an earlier call took
  is not answered again: the host's followers are in its recovery
  snapshot, the peer's ``claimJoining``); ``mark_joined`` records where
  the follower's input sits in the host's log (``joined``); ``revert_join``
  puts a joining one back to ready (idempotent; a joined one stays joined,
  a no-op, as the peer's ``revertJoining``). A
  follower is never claimed, aborted (``JoinedToHost``) or finalized alone:
  the host's finalize settles its joined followers in the same write, each
  with ``joined_record`` (the host's outcome, no independent result), and
  reverts its joining ones. ``limit`` is at most ``JOIN_LIMIT_MAX``.
- Child reservations: the running owner reserves one child budget per
  tool call (``reserve_child``; identity = the allocation's canonical
  digest, so key order is irrelevant; another allocation at the same call
  is ``ChildReservationConflict``) and attaches the child submission
  (``attach_child``; another child is a conflict), whether or not its
  input is applied yet; an existing reservation (attachment) is answered
  before the token is checked — an identical replay, even by a fenced
  owner, replays it (it creates nothing), another is the conflict — and
  only what is new is fenced; ``release_child`` by
  anyone freezes the child's accounting once (a repeat replays it, another
  accounting conflicts), in any state of the parent; the first release of
  an awaited child wakes a parent suspended on it when it was the last
  thing the parent awaited (above).
- The recovery snapshot's ``SubmissionOwnership`` carries the input's log
  position, the reserved record's outcome, the child reservations as
  ``(call, child, released)`` in code-point order of the call ids, the
  awaited children still unreleased (their count and their calls), the
  latest attempt id, every approval decision and unknown-call resolution
  (None while open), the parent link and the readiness time.
- Settlement shape (§10): ``outcome`` in completed/failed/aborted; failed
  carries ``diagnostic`` = exactly ``{errorTag: str, message: str}`` and no
  ``result``, ``cause`` or ``stack``; aborted carries no ``result`` key (not
  even null). ``completed`` may omit ``result`` (a joined completion).
- ``suspend``, ``mark_unknown``, ``request_abort`` (but for the replay
  above), ``decide_approval`` and ``resolve_unknown`` of a settled
  submission are ``SettlementConflict`` naming its ``existing_outcome``
  (before any replay, token or unknown-call check); a reserve of another record names the
  reserved one's.
- Finalize of an unknown id is ``UnknownSubmission``; of a known id with no
  reservation, ``SettlementConflict(existing_digest=None)``. Finalize leaves
  the ownership columns as they were (the row is terminal; nothing claims it).
- Stored rows are validated on every read (§10, §11): a row of another
  ``schema_version`` is ``UnsupportedLedgerVersion``, a column of the wrong
  type or JSON that does not decode is ``CorruptSubmission`` (both typed
  ``LedgerError``s naming the submission), raised before any rule decides,
  so nothing is written. ``scan_nonterminal`` answers control fields only
  (``NonterminalSubmission``: a record without its input and admission
  metadata, as the peer's ``scanNonterminal`` rows; the specification
  names only "the ordered scanNonterminal stream", and a by-id ``get``
  carries both). It never reads the payloads: a row whose input or
  metadata is damaged scans like any other (its control fields), and only
  a by-id read of it fails, ``CorruptSubmission``. It does not fail on a
  row whose control columns are corrupt either (the specification:
  "per-operation Schema decoding and the digest chain already fail
  clearly on corrupt rows"): it answers a scan row per readable row and,
  in its place, an
  ``UnreadableSubmission`` (its stored identity: submission, conversation,
  principal, queue_seq; reading any other field raises the typed error), so
  the conversation still shows work, a claim there fails typed, and every
  other conversation proceeds — unless the row's receipt (a control field
  the scan answers) is empty or not a string: then the scan itself fails,
  ``CorruptSubmission`` with ``operation="scan_nonterminal"``. Storage failures of the SQLite adapter
  (write contention, any ``sqlite3.Error``) are ``LedgerStoreError`` with
  the failure as ``cause``, retryable exactly when the cause is.
"""
from __future__ import annotations

import operator

import attrs

from model.canonical import CanonicalDecodeError, canonical_json, decode, decode_own, digest, digest_text

from .states import (ABORT, ADMITTED, ATTACH_CHILD, BEGIN_JOIN, RESERVE_CHILD, DECIDE, FINALIZE, JOINED, JOINING, MARK_JOINED, MARK_UNKNOWN,
                     INPUT_APPLIED, READY, REVERT_JOIN, SETTLE_JOINED, SETTLED, SUSPEND, TERMINALIZING, claimable, state_of, target)
from .records import (
    ABORTED,
    ENVELOPE_KEYS,
    SETTLED_FAMILY,
    SETTLED_SCHEMA_VERSION,
    settlement_envelope,
    settlement_of,
    COMPLETED,
    FAILED,
    OUTCOMES,
    SCHEMA_VERSION,
    AbortConflict,
    AbortIntent,
    AbortRequested,
    COMPLETED_WITH_RESULT,
    DECISIONS,
    ApprovalConflict,
    ApprovalDecision,
    ChildReservation,
    ChildReservationConflict,
    UnknownChildReservation,
    JoinBatch,
    JoiningFollower,
    NonterminalSubmission,
    JoinedToHost,
    JoinMarked,
    Suspension,
    UnknownApproval,
    RESOLUTIONS,
    ResolutionConflict,
    TransitionRefused,
    UnknownMarked,
    UnknownResolution,
    UnknownToolCall,
    AdmissionConflict,
    AdmissionFence,
    AdmissionFenceState,
    AdmissionPolicyError,
    AdmissionResult,
    Claim,
    ClaimHandoff,
    InputApplied,
    InputMarkerConflict,
    ParentLink,
    Readiness,
    attempt_id_for,
    CorruptSubmission,
    InvalidSettlement,
    OwnershipLost,
    OwnershipRenewal,
    PurgeRefused,
    RecoverySnapshot,
    ReservedSettlement,
    Settlement,
    SettlementConflict,
    SubmissionOwnership,
    SubmissionRecord,
    UnknownSubmission,
    UnreadableSubmission,
    UnsupportedLedgerVersion,
)

# --- rows ---------------------------------------------------------------------


@attrs.frozen
class ConversationRow:
    conversation_id: str
    last_queue_seq: int  # 0 before the first admission
    epoch: int  # the conversation's producer epoch; 0 before the first claim
    lane: str | None = None  # its lane kind (``lane_of``), fixed by its first admission until a purge


@attrs.frozen
class SubmissionRow:
    submission_id: str
    conversation_id: str
    principal_id: str
    idempotency_key: str
    queue_seq: int
    input_json: str
    input_digest: str
    receipt: str
    admitted_at_ms: int
    ready: bool = False
    owner_id: str | None = None
    epoch: int | None = None
    lease_expires_ms: int | None = None
    input_applied: bool = False
    abort_author: str | None = None
    abort_reason: str | None = None
    abort_requested_at_ms: int | None = None
    reserved_json: str | None = None
    reserved_digest: str | None = None
    outcome: str | None = None
    settled_at_ms: int | None = None
    unknown_json: str | None = None  # {callId: None | resolution}: its unknown tool calls, canonical
    unknown_open: int = 0  # how many of them are unresolved
    approvals_json: str | None = None  # {callId: None | decision}: the approvals it suspended on, canonical
    approvals_pending: int = 0  # how many of them are undecided
    join_host: str | None = None  # the host it is joining/joined
    joined_record_id: str | None = None  # where its input sits in the host's log
    joined_seq: int | None = None
    joined_count: int = 0  # on a host: its followers still joining or joined
    children_json: str | None = None  # {callId: child reservation}, canonical
    children_awaited: int = 0  # awaited child reservations (a suspension named them) not yet released
    parent_submission_id: str | None = None  # the parent link it was admitted with (both or neither)
    parent_tool_call_id: str | None = None
    ready_at_ms: int | None = None  # when mark_ready first made it ready
    attempt_id: str | None = None  # the latest claim's (``attempt_id_for``)
    input_record_id: str | None = None  # where its canonical input sits in the log
    input_seq: int | None = None
    settlement_id: str | None = None  # once settled (``settlement_id_for``)
    admission_group: str | None = None  # the admission group it occupies until settled
    metadata_json: str | None = None  # its opaque admission metadata, canonical
    schema_version: int = SCHEMA_VERSION


# Column order shared by the SQLite adapter (and its row <-> SubmissionRow mapping).
SUBMISSION_FIELDS: tuple[str, ...] = tuple(field.name for field in attrs.fields(SubmissionRow))
_SUBMISSION_FIELD_SET = frozenset(SUBMISSION_FIELDS)


def _make_evolve_row():
    # ``attrs.evolve`` walks the class's 39 fields generically on every
    # call (~7 us); a wake rewrites its row ~8 times. This is the same
    # function written out once for SubmissionRow's fields (~3.5 us).
    args = ", ".join(f"changes[{name!r}] if {name!r} in changes else row.{name}" for name in SUBMISSION_FIELDS)
    namespace = {"SubmissionRow": SubmissionRow}
    exec(f"def evolve_row(row, changes):\n    return SubmissionRow({args})\n", namespace)  # noqa: S102 - our own field names
    return namespace["evolve_row"]


_evolve_row = _make_evolve_row()


def evolve_row(row: SubmissionRow, **changes: object) -> SubmissionRow:
    """``attrs.evolve(row, **changes)`` for a SubmissionRow, faster."""
    if not changes.keys() <= _SUBMISSION_FIELD_SET:
        raise TypeError(f"SubmissionRow has no field {sorted(changes.keys() - _SUBMISSION_FIELD_SET)}")
    return _evolve_row(row, changes)


# Column types of a stored row (§10: validate what storage hands back).
_STR = (str,)
_INT = (int,)
_BOOL = (bool,)
_OPT_STR = (str, type(None))
_OPT_INT = (int, type(None))
_ROW_TYPES: tuple[tuple[str, tuple[type, ...]], ...] = (
    ("submission_id", _STR), ("conversation_id", _STR), ("principal_id", _STR), ("idempotency_key", _STR),
    ("queue_seq", _INT), ("input_json", _STR), ("input_digest", _STR), ("receipt", _STR),
    ("admitted_at_ms", _INT), ("ready", _BOOL), ("owner_id", _OPT_STR), ("epoch", _OPT_INT),
    ("lease_expires_ms", _OPT_INT), ("input_applied", _BOOL), ("abort_author", _OPT_STR),
    ("abort_reason", _OPT_STR), ("abort_requested_at_ms", _OPT_INT), ("reserved_json", _OPT_STR), ("reserved_digest", _OPT_STR),
    ("outcome", _OPT_STR), ("settled_at_ms", _OPT_INT), ("unknown_json", _OPT_STR), ("unknown_open", _INT),
    ("approvals_json", _OPT_STR), ("approvals_pending", _INT), ("join_host", _OPT_STR),
    ("joined_record_id", _OPT_STR), ("joined_seq", _OPT_INT), ("joined_count", _INT),
    ("children_json", _OPT_STR), ("children_awaited", _INT), ("parent_submission_id", _OPT_STR),
    ("parent_tool_call_id", _OPT_STR), ("ready_at_ms", _OPT_INT), ("attempt_id", _OPT_STR),
    ("input_record_id", _OPT_STR), ("input_seq", _OPT_INT), ("settlement_id", _OPT_STR),
    ("admission_group", _OPT_STR), ("metadata_json", _OPT_STR),
)

# The typed columns' values in ``_ROW_TYPES`` order, read in one call.
_ROW_VALUES = operator.attrgetter(*(name for name, _ in _ROW_TYPES))


# The payload columns: what a by-id read decodes and a scan row never
# carries, so a scan neither reads nor checks them.
_PAYLOAD_COLUMNS = frozenset({"input_json", "metadata_json"})
_CONTROL_ROW_TYPES = tuple((name, types) for name, types in _ROW_TYPES if name not in _PAYLOAD_COLUMNS)
_CONTROL_ROW_VALUES = operator.attrgetter(*(name for name, _ in _CONTROL_ROW_TYPES))


def read_row(row: SubmissionRow, *, own: bool = False, payloads: bool = True) -> tuple[object, object]:
    """Validate a stored row and decode its JSON columns: ``(input,
    reserved_record)``. ``UnsupportedLedgerVersion`` for a schema version
    this build does not support (§11, checked first), ``CorruptSubmission``
    for a column of the wrong type or JSON that does not decode (§10).

    ``payloads=False``: the control columns only (a scan row's): the input
    and the admission metadata are neither checked nor decoded (the input
    answered is None), so a row whose payload alone is damaged still scans.

    ``own``: the row is one the rules made and this process kept in memory
    (no file, no surgery in between): its columns are the rules' own typed
    values and canonical texts, decoded without re-validating them. A row
    read from a file, or put in place by something else, is never ``own``."""
    sid = row.submission_id
    version = row.schema_version
    if type(version) is not int:
        raise CorruptSubmission(sid, f"schema_version must be an int, got {type(version).__name__}")
    if version != SCHEMA_VERSION:
        # Private development promises no migration (§11): fail clearly.
        raise UnsupportedLedgerVersion(sid, version)
    if own:
        reserved_json = row.reserved_json
        return (decode_own(row.input_json) if payloads else None,
                None if reserved_json is None else decode_own(reserved_json))
    types_values = (zip(_ROW_TYPES, _ROW_VALUES(row)) if payloads
                    else zip(_CONTROL_ROW_TYPES, _CONTROL_ROW_VALUES(row)))
    for (name, types), value in types_values:
        if type(value) not in types:
            raise CorruptSubmission(sid, f"{name} has the wrong type ({type(value).__name__})")
    if not row.receipt:
        raise CorruptSubmission(sid, "receipt is empty")
    value = None
    if payloads:
        try:
            value = decode(row.input_json)
        except CanonicalDecodeError as exc:
            raise CorruptSubmission(sid, f"input_json does not decode: {exc}") from None
    reserved = None
    if row.reserved_json is not None:
        try:
            reserved = decode(row.reserved_json)
        except CanonicalDecodeError as exc:
            raise CorruptSubmission(sid, f"reserved_json does not decode: {exc}") from None
    if payloads and row.metadata_json is not None:
        try:
            decode(row.metadata_json)
        except CanonicalDecodeError as exc:
            raise CorruptSubmission(sid, f"metadata_json does not decode: {exc}") from None
    return value, reserved


def check_row(row: SubmissionRow | None) -> SubmissionRow | None:
    """``row`` if it reads back whole (``read_row``), else its typed error:
    what an adapter calls on every row it fetches before a rule decides, so
    a corrupt or unsupported row fails before anything is written."""
    if row is not None:
        read_row(row)
    return row


def row_to_record(row: SubmissionRow, *, own: bool = False) -> SubmissionRecord:
    """The record of a stored row (``read_row``; ``own`` as there)."""
    value, reserved = read_row(row, own=own)
    decode_column = decode_own if own else decode
    return SubmissionRecord(
        input=value,
        metadata=None if row.metadata_json is None else decode_column(row.metadata_json),
        **_control_fields(row, reserved, decode_column),
    )


def row_to_scan_row(row: SubmissionRow, *, own: bool = False) -> NonterminalSubmission:
    """The scan row of a stored row: its control columns validated
    (``read_row``: a control column that does not decode fails here,
    typed), answered with its control fields only; the input and metadata
    are not read at all, so a damaged payload fails only a by-id read."""
    _, reserved = read_row(row, own=own, payloads=False)
    return NonterminalSubmission(**_control_fields(row, reserved, decode_own if own else decode))


def _control_fields(row: SubmissionRow, reserved: object, decode_column) -> dict:
    return dict(
        submission_id=row.submission_id,
        conversation_id=row.conversation_id,
        principal_id=row.principal_id,
        idempotency_key=row.idempotency_key,
        queue_seq=row.queue_seq,
        input_digest=row.input_digest,
        receipt=row.receipt,
        admitted_at_ms=row.admitted_at_ms,
        ready=row.ready,
        owner_id=row.owner_id,
        epoch=row.epoch,
        lease_expires_ms=row.lease_expires_ms,
        input_applied=row.input_applied,
        abort_author=row.abort_author,
        abort_reason=row.abort_reason,
        abort_requested_at_ms=row.abort_requested_at_ms,
        reserved_record=reserved,
        reserved_digest=row.reserved_digest,
        outcome=row.outcome,
        settled_at_ms=row.settled_at_ms,
        schema_version=row.schema_version,
        unknown_calls=None if row.unknown_json is None else decode_column(row.unknown_json),
        approvals=None if row.approvals_json is None else decode_column(row.approvals_json),
        join_host=row.join_host,
        joined_record_id=row.joined_record_id,
        joined_seq=row.joined_seq,
        joined_count=row.joined_count,
        children=None if row.children_json is None else decode_column(row.children_json),
        parent=_parent_of(row),
        ready_at_ms=row.ready_at_ms,
        attempt_id=row.attempt_id,
        input_record_id=row.input_record_id,
        input_seq=row.input_seq,
        settlement_id=row.settlement_id,
        admission_group=row.admission_group,
    )


def _parent_of(row: SubmissionRow) -> ParentLink | None:
    if row.parent_submission_id is None:
        return None
    return ParentLink(row.parent_submission_id, row.parent_tool_call_id)


def scan_records(rows, own=None) -> tuple[NonterminalSubmission | UnreadableSubmission, ...]:
    """``scan_nonterminal``'s answer over the unsettled rows in order: a
    scan row (``NonterminalSubmission``: control fields only, the peer's
    ``scanNonterminal``; a by-id ``get`` carries the input and metadata)
    per row whose control columns read back (the payloads are not read),
    an ``UnreadableSubmission`` (identity only; its other fields raise the
    typed error) per row whose control columns do not, so one
    corrupt row never hides the other conversations' work. ``own(row)``:
    whether a row is the store's own (``read_row``); None: none is."""
    found: list[NonterminalSubmission | UnreadableSubmission] = []
    for row in rows:
        if type(row.receipt) is not str or not row.receipt:
            # A control field the scan answers for every row, readable or
            # not: without it the row cannot be named as work, so the scan
            # itself fails, typed, naming the operation.
            raise CorruptSubmission(row.submission_id, f"receipt is {row.receipt!r}", "scan_nonterminal")
        try:
            found.append(row_to_scan_row(row, own=own is not None and own(row)))
        except (CorruptSubmission, UnsupportedLedgerVersion) as error:
            found.append(UnreadableSubmission(row.submission_id, row.conversation_id, row.principal_id,
                                              row.queue_seq, error))
    return tuple(found)


def attached_children(row: SubmissionRow) -> list[str]:
    """The child submissions attached to ``row``'s reservations (whose state
    its recovery snapshot names)."""
    return [entry["child"] for entry in _children(row).values() if entry["child"] is not None]


def row_to_ownership(row: SubmissionRow, *, own: bool = False, child_rows=None) -> SubmissionOwnership:
    """``child_rows``: the rows of ``attached_children(row)`` by id (None:
    the ledger no longer holds it)."""
    _, reserved = read_row(row, own=own)
    decode_column = decode_own if own else decode
    children = _children(row)
    return SubmissionOwnership(
        submission_id=row.submission_id,
        queue_seq=row.queue_seq,
        ready=row.ready,
        owner_id=row.owner_id,
        epoch=row.epoch,
        lease_expires_ms=row.lease_expires_ms,
        input_applied=row.input_applied,
        abort_requested=row.abort_author is not None,
        abort_author=row.abort_author,
        abort_reason=row.abort_reason,
        abort_requested_at_ms=row.abort_requested_at_ms,
        reserved_digest=row.reserved_digest,
        settled=row.settled_at_ms is not None,
        unknown_open=row.unknown_open,
        approvals_pending=row.approvals_pending,
        join_host=row.join_host,
        children_awaited=row.children_awaited,
        input_record_id=row.input_record_id,
        input_seq=row.input_seq,
        reserved_outcome=None if reserved is None else settlement_of(reserved)["outcome"],
        children=tuple(sorted((call, entry["child"], entry["releasedAtMs"] is not None)
                              for call, entry in children.items())),
        attempt_id=row.attempt_id,
        approvals=None if row.approvals_json is None else decode_column(row.approvals_json),
        unknown_calls=None if row.unknown_json is None else decode_column(row.unknown_json),
        children_pending=tuple(sorted(call for call, entry in children.items()
                                      if entry["awaited"] and entry["releasedAtMs"] is None)),
        parent=_parent_of(row),
        ready_at_ms=row.ready_at_ms,
        state=state_of(row),
        child_states=tuple(sorted(
            (call, entry["child"], *_child_state((child_rows or {}).get(entry["child"])))
            for call, entry in children.items() if entry["child"] is not None)),
        admission_group=row.admission_group,
        metadata=None if row.metadata_json is None else decode_column(row.metadata_json),
    )


def _child_state(child: SubmissionRow | None) -> tuple[str | None, str | None]:
    if child is None:
        return None, None
    return state_of(child), child.outcome


def recovery_snapshot(
    conversation_id: str, conversation: ConversationRow | None, nonterminal: list[SubmissionRow], own=None,
    child_rows=None,
) -> RecoverySnapshot:
    """``nonterminal``: the conversation's unsettled rows by queue_seq;
    ``own`` as in ``scan_records``; ``child_rows``: every row of their
    ``attached_children`` the ledger holds, by id."""
    return RecoverySnapshot(
        conversation_id,
        0 if conversation is None else conversation.epoch,
        tuple(row_to_ownership(row, own=own is not None and own(row), child_rows=child_rows) for row in nonterminal),
    )


# --- argument validation (the public boundary) ----------------------------------


def require_str(name: str, value: object) -> None:
    if type(value) is not str:
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")


INT_ARG_MAX = 2 ** 53 - 1


def require_int(name: str, value: object) -> None:
    if type(value) is not int:  # bool is an int subclass and always a bug here
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not -INT_ARG_MAX <= value <= INT_ARG_MAX:
        # Every integer a port stores is a JSON number (and an SQLite
        # INTEGER): outside +/-(2**53 - 1) both adapters refuse it alike.
        raise ValueError(f"{name} must be within +/-(2**53 - 1), got {value}")


def require_positive_ms(name: str, value: object) -> None:
    require_int(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")


def require_token(token: object) -> None:
    if not isinstance(token, Claim):
        raise TypeError(f"token must be a Claim, got {type(token).__name__}")


def encode_input(value: object) -> tuple[str, str]:
    """``(canonical_json, digest)`` of an admission input; ``ValueError`` /
    ``CanonicalEncodingError`` if it is not JSON."""
    text = canonical_json(value)
    return text, digest_text(text)


# --- identities -----------------------------------------------------------------


def submission_id_for(conversation_id: str, queue_seq: int) -> str:
    return f"sub-{conversation_id}-{queue_seq}"


def queue_seq_of(submission_id: str) -> int:
    """The queue position a submission id names (``submission_id_for``'s inverse)."""
    return int(submission_id.rsplit("-", 1)[1])


def receipt_for(submission_id: str, input_digest: str) -> str:
    return "rcpt-" + digest({"inputDigest": input_digest, "submissionId": submission_id})


def settlement_id_for(submission_id: str, record_digest: str) -> str:
    """``settlement:{submissionId}``: one settlement per submission, so the
    id names the submission alone (``record_digest`` does not enter it)."""
    return f"settlement:{submission_id}"


# --- admission --------------------------------------------------------------------


@attrs.frozen
class AdmitDecision:
    result: AdmissionResult
    conversation: ConversationRow | None  # write (upsert) if not None
    submission: SubmissionRow | None  # insert if not None


def decide_admit(
    conversation_id: str,
    principal_id: str,
    idempotency_key: str,
    input_json: str,
    input_digest: str,
    now_ms: int,
    conversation: ConversationRow | None,
    existing: SubmissionRow | None,
    parent: ParentLink | None = None,
    admission_group: str | None = None,
    metadata_json: str | None = None,
    fence: AdmissionFence | None = None,
    fence_revision: int | None = None,
    group_rows: tuple[SubmissionRow, ...] = (),
) -> AdmitDecision:
    """``existing``: the row under (conversation, principal, key), if any.
    The admission's identity is its input, its parent link, its admission
    group and its metadata (canonical text). ``fence_revision``: the
    revision the ledger's fence ``fence`` names stands at (None: no such
    fence); ``group_rows``: the ledger's rows in ``admission_group`` the
    adapter holds as unsettled (any conversation). An exact replay is
    resolved before the policies (fence, group) are checked."""
    if existing is not None:
        if existing.input_digest != input_digest:
            raise AdmissionConflict(
                conversation_id, principal_id, idempotency_key, existing.input_digest, input_digest
            )
        if _parent_of(existing) != parent:
            raise AdmissionConflict(conversation_id, principal_id, idempotency_key, existing.input_digest,
                                    input_digest, "parent")
        for what, same in (("admission_group", existing.admission_group == admission_group),
                           ("metadata", existing.metadata_json == metadata_json)):
            if not same:
                raise AdmissionConflict(conversation_id, principal_id, idempotency_key, existing.input_digest,
                                        input_digest, what)
        return AdmitDecision(
            AdmissionResult(existing.submission_id, existing.receipt, existing.queue_seq, True, input_digest,
                            parent, admission_group, None if metadata_json is None else decode(metadata_json)),
            None,
            None,
        )
    check_admission_policy(fence, fence_revision, admission_group, group_rows)
    lane = lane_of(metadata_json)
    check_lane(conversation, lane)
    check_worker_admission(idempotency_key, metadata_json)
    last_queue_seq = 0 if conversation is None else conversation.last_queue_seq
    epoch = 0 if conversation is None else conversation.epoch
    queue_seq = last_queue_seq + 1
    submission_id = submission_id_for(conversation_id, queue_seq)
    receipt = receipt_for(submission_id, input_digest)
    row = SubmissionRow(
        submission_id=submission_id,
        conversation_id=conversation_id,
        principal_id=principal_id,
        idempotency_key=idempotency_key,
        queue_seq=queue_seq,
        input_json=input_json,
        input_digest=input_digest,
        receipt=receipt,
        admitted_at_ms=now_ms,
        parent_submission_id=None if parent is None else parent.submission_id,
        parent_tool_call_id=None if parent is None else parent.tool_call_id,
        admission_group=admission_group,
        metadata_json=metadata_json,
    )
    return AdmitDecision(
        AdmissionResult(submission_id, receipt, queue_seq, False, input_digest, parent, admission_group,
                        None if metadata_json is None else decode_own(metadata_json)),
        ConversationRow(conversation_id, queue_seq, epoch, lane if conversation is None else conversation.lane or lane),
        row,
    )


def group_occupied(rows) -> bool:
    """Does one of an admission group's rows hold it? An unsettled one does,
    terminalizing included: the group is free only once its submission is
    finalized (or settled otherwise)."""
    return any(row.settled_at_ms is None for row in rows)


def check_admission_policy(fence: AdmissionFence | None, fence_revision: int | None,
                           admission_group: str | None, group_rows) -> None:
    """A fresh admission's policies, in order: its fence must stand at the
    revision it names, then its group must be free (``AdmissionPolicyError``)."""
    if fence is not None:
        if fence_revision is None:
            raise AdmissionPolicyError("unavailable", "no-fence",
                                       f"no admission fence {fence.policy_id!r}/{fence.key!r}")
        if fence.revision != fence_revision:
            raise AdmissionPolicyError(
                "refused", "stale-revision" if fence.revision < fence_revision else "unknown-revision",
                f"fence {fence.policy_id!r}/{fence.key!r} stands at {fence_revision}, the admission names "
                f"{fence.revision}")
    if admission_group is not None and group_occupied(group_rows):
        raise AdmissionPolicyError("occupied", "group-occupied",
                                   f"admission group {admission_group!r} holds an unsettled submission")


WORKER_ADMISSION = "WorkerAdmission"
ORDINARY_LANE = "ordinary"


def lane_of(metadata_json: str | None) -> str:
    """The lane kind an admission asks for: a worker admission (metadata
    ``{"kind": "WorkerAdmission", "origin": ...}``) asks for the worker lane
    of its origin, ``"worker:"`` + the origin's canonical text (an omitted
    origin is ``null``); any other admission for an ordinary lane."""
    if metadata_json is not None:
        metadata = decode_own(metadata_json)
        if type(metadata) is dict and metadata.get("kind") == WORKER_ADMISSION:
            return "worker:" + canonical_json(metadata.get("origin"))
    return ORDINARY_LANE


def check_lane(conversation: ConversationRow | None, lane: str) -> None:
    """A conversation's first admission fixes its lane kind; a fresh
    admission of another kind is ``AdmissionPolicyError(refused)``: a
    worker admission on an ordinary lane (``ordinary-lane``), an ordinary
    one on a worker lane (``worker-lane``), a worker admission of another
    origin (``worker-origin``)."""
    held = None if conversation is None else conversation.lane
    if held is None or held == lane:
        return
    code = ("ordinary-lane" if held == ORDINARY_LANE else "worker-lane" if lane == ORDINARY_LANE
            else "worker-origin")
    raise AdmissionPolicyError("refused", code, f"the lane holds {held[:80]!r} work, the admission asks {lane[:80]!r}")


def check_worker_admission(idempotency_key: str, metadata_json: str | None) -> None:
    """A fresh worker admission carries the peer's fields: an ``origin``
    object with an integer ``expiresAtMillis`` (else the lane it asks for
    has no origin: ``worker-origin``) and a ``messageId`` that is its
    idempotency key (``worker-message-id``); its ``parameters`` and
    ``sourceSubmissionId`` are part of its identity (the metadata's).
    Checked after the lane, so a lane of another kind is named first.
    ``AdmissionPolicyError(reason="refused")``; nothing is written."""
    if metadata_json is None:
        return
    metadata = decode_own(metadata_json)
    if type(metadata) is not dict or metadata.get("kind") != WORKER_ADMISSION:
        return
    origin = metadata.get("origin")
    if type(origin) is not dict or type(origin.get("expiresAtMillis")) is not int:
        raise AdmissionPolicyError("refused", "worker-origin",
                                   f"a worker admission needs an origin with expiresAtMillis, got {origin!r:.80}")
    if metadata.get("messageId") != idempotency_key:
        raise AdmissionPolicyError("refused", "worker-message-id",
                                   f"a worker admission's messageId {metadata.get('messageId')!r:.80} is not its "
                                   f"idempotency key {idempotency_key!r:.80}")


def decide_set_admission_fence(policy_id: str, key: str, revision: int,
                               current: int | None) -> tuple[AdmissionFenceState, bool]:
    """``(answer, write)``: a fence moves forward only; its current revision
    replays; an older one is ``AdmissionPolicyError(refused, revision-regressed)``."""
    if current is not None:
        if revision == current:
            return AdmissionFenceState(policy_id, key, revision, True), False
        if revision < current:
            raise AdmissionPolicyError("refused", "revision-regressed",
                                       f"fence {policy_id!r}/{key!r} stands at {current}, not moved back to "
                                       f"{revision}")
    return AdmissionFenceState(policy_id, key, revision), True


def decide_mark_ready(submission_id: str, row: SubmissionRow | None,
                      now_ms: int) -> tuple[Readiness, SubmissionRow | None]:
    """The first mark stamps ``ready_at_ms``; a repeat replays it."""
    if row is None:
        raise UnknownSubmission(submission_id)
    if row.ready:
        return Readiness(submission_id, row.ready_at_ms, True), None
    return Readiness(submission_id, now_ms), evolve_row(row, ready=True, ready_at_ms=now_ms)


# --- claim --------------------------------------------------------------------------


@attrs.frozen
class ClaimDecision:
    claim: Claim | None
    conversation: ConversationRow | None
    submission: SubmissionRow | None


NO_CLAIM = ClaimDecision(None, None, None)


def decide_claim(
    conversation: ConversationRow | None,
    head: SubmissionRow | None,
    owner_id: str,
    lease_ms: int,
    now_ms: int,
) -> ClaimDecision:
    """``head``: the conversation's unsettled submission with the lowest
    queue_seq (FIFO: nothing behind it is ever claimable)."""
    if head is None:
        return NO_CLAIM
    assert conversation is not None and head.settled_at_ms is None, (conversation, head)
    if not claimable(state_of(head), head.abort_author is not None):
        # An unready head is an unknown one: never claimable (its abort
        # intent settles it instead: nothing of it is in the log to clean up).
        return NO_CLAIM
    if (
        head.owner_id is not None
        and head.owner_id != owner_id
        and head.lease_expires_ms is not None
        and head.lease_expires_ms > now_ms
    ):
        return NO_CLAIM
    return _grant(conversation, head, owner_id, lease_ms, now_ms)


def _grant(conversation: ConversationRow, row: SubmissionRow, owner_id: str, lease_ms: int,
           now_ms: int) -> ClaimDecision:
    """Claim ``row`` for ``owner_id`` at the lane's next epoch."""
    epoch = conversation.epoch + 1
    lease_expires_ms = now_ms + lease_ms
    attempt_id = attempt_id_for(row.submission_id, epoch)
    return ClaimDecision(
        Claim(row.submission_id, owner_id, epoch, lease_expires_ms, attempt_id),
        attrs.evolve(conversation, epoch=epoch),
        evolve_row(row, owner_id=owner_id, epoch=epoch, lease_expires_ms=lease_expires_ms, attempt_id=attempt_id),
    )


def decide_claim_handoff(
    conversation: ConversationRow | None,
    lane: list[SubmissionRow],
    handoff: ClaimHandoff,
    owner_id: str,
    lease_ms: int,
    now_ms: int,
) -> ClaimDecision:
    """``lane``: the conversation's unsettled submissions in queue order.
    Grants ``handoff.submission_id`` or nothing (module docstring)."""
    if conversation is None or not handoff.deferred_submission_ids:
        return NO_CLAIM
    ids = [row.submission_id for row in lane]
    if handoff.submission_id not in ids:
        return NO_CLAIM  # foreign, unknown or settled
    at = ids.index(handoff.submission_id)
    deferred = lane[:at]
    if tuple(row.submission_id for row in deferred) != tuple(handoff.deferred_submission_ids):
        return NO_CLAIM  # a gap or another ready row ahead of it: not the next one
    for row in deferred:
        if (state_of(row) != INPUT_APPLIED or row.owner_id is not None or row.abort_author is not None
                or row.joined_count):
            return NO_CLAIM  # live, unapplied, aborted, suspended, unknown, ... : not deferred
    if not conversation.epoch == deferred[-1].epoch == handoff.producer_epoch:
        return NO_CLAIM  # stale: a claim came since the producer's, or another producer deferred it
    nxt = lane[at]
    if state_of(nxt) != READY or nxt.owner_id is not None or nxt.abort_author is not None:
        return NO_CLAIM
    return _grant(conversation, nxt, owner_id, lease_ms, now_ms)  # a new epoch for the lane


def validate_claim_handoff(handoff: object) -> None:
    if handoff is None:
        return
    if not isinstance(handoff, ClaimHandoff):
        raise TypeError(f"handoff must be a ClaimHandoff or None, not {type(handoff).__name__}")
    require_int("handoff.producer_epoch", handoff.producer_epoch)
    if not isinstance(handoff.deferred_submission_ids, tuple):
        raise TypeError("handoff.deferred_submission_ids must be a tuple of str")
    for sid in handoff.deferred_submission_ids:
        require_str("handoff.deferred_submission_ids[]", sid)
    require_str("handoff.submission_id", handoff.submission_id)


# --- fenced ownership operations ------------------------------------------------------


def refuse_settled(row: SubmissionRow | None) -> None:
    """A write on a settled submission (``suspend``, ``mark_unknown``,
    ``request_abort``, ``decide_approval``, ``resolve_unknown``):
    ``SettlementConflict`` naming its outcome, before any replay, token or
    call check (whatever is asked, nothing can change)."""
    if row is not None and row.settled_at_ms is not None:
        raise SettlementConflict(row.submission_id, None, None, row.outcome)


def check_token(row: SubmissionRow | None, token: Claim, now_ms: int | None = None) -> SubmissionRow:
    """The row, if ``token`` still owns it; else ``OwnershipLost``."""
    if row is None:
        raise UnknownSubmission(token.submission_id)
    if row.epoch != token.epoch:
        raise OwnershipLost(row.submission_id, row.epoch, f"token epoch {token.epoch}")
    if row.owner_id != token.owner_id:
        raise OwnershipLost(row.submission_id, row.epoch, "ownership was released")
    if now_ms is not None and (row.lease_expires_ms is None or row.lease_expires_ms <= now_ms):
        raise OwnershipLost(row.submission_id, row.epoch, f"lease expired at {row.lease_expires_ms}")
    return row


def decide_renew(
    row: SubmissionRow | None, token: Claim, lease_ms: int, now_ms: int
) -> tuple[OwnershipRenewal, SubmissionRow | None]:
    row = check_token(row, token)  # a lapsed lease renews until another owner claims
    lease_expires_ms = max(row.lease_expires_ms, now_ms + lease_ms)  # never shortens
    renewal = OwnershipRenewal(row.submission_id, row.owner_id, row.epoch, lease_expires_ms)
    if lease_expires_ms == row.lease_expires_ms:
        return renewal, None
    return renewal, evolve_row(row, lease_expires_ms=lease_expires_ms)


def decide_release(row: SubmissionRow | None, token: Claim) -> SubmissionRow | None:
    if row is not None and row.owner_id is None and row.epoch == token.epoch:
        return None  # this token already released it
    row = check_token(row, token)
    return evolve_row(row, owner_id=None, lease_expires_ms=None)


def decide_input_applied(row: SubmissionRow | None, token: Claim, record_id: str,
                         seq: int) -> tuple[InputApplied, SubmissionRow | None]:
    """The input is in the log at ``record_id``/``seq``: the first mark
    stores the position; a repeat at the same position replays, one at
    another position is ``InputMarkerConflict``."""
    row = check_token(row, token)
    applied = InputApplied(row.submission_id, record_id, seq)
    if row.input_applied:
        if (row.input_record_id, row.input_seq) != (record_id, seq):
            raise InputMarkerConflict(row.submission_id, row.input_record_id, row.input_seq, record_id, seq)
        return attrs.evolve(applied, replayed=True), None
    return applied, evolve_row(row, input_applied=True, input_record_id=record_id, input_seq=seq)


def validate_input_applied(token: object, record_id: object, seq: object) -> None:
    require_token(token)
    require_str("record_id", record_id)
    require_int("seq", seq)
    if seq < 1:
        raise ValueError(f"seq must be >= 1, got {seq}")


# The outcome record a submission aborted before it ever ran settles with
# (in its settlement envelope, created when its intent settled it).
ABORTED_RECORD = {"outcome": ABORTED}


def settled_by_abort(row: SubmissionRow) -> bool:
    """Settled by its abort intent alone: admitted but never ready (its
    conversation may not even exist), so nothing of it is in the log (no
    input, no settlement record)."""
    return row.settled_at_ms is not None and row.epoch is None and row.abort_author is not None and not row.ready


def queued_abort(row: SubmissionRow) -> bool:
    """The ``QueuedAbort`` settlement authority (the peer's): a submission
    with a durable abort intent that no claim ever granted (nor a host
    took) reserves its ``aborted`` record with no ownership, so its aborter
    settles it through the log without waiting for its lane's head."""
    return row.epoch is None and row.abort_author is not None and row.join_host is None


def decide_abort(
    submission_id: str, row: SubmissionRow | None, author: str, reason: str, now_ms: int
) -> tuple[AbortIntent, SubmissionRow | None]:
    if row is None:
        raise UnknownSubmission(submission_id)
    if not settled_by_abort(row):  # settled by its own intent: that intent replays
        refuse_settled(row)
    if row.abort_author is not None:
        return AbortIntent(submission_id, row.abort_author, row.abort_reason, row.abort_requested_at_ms, True,
                           row.settled_at_ms if settled_by_abort(row) else None), None
    state = state_of(row)
    after = target(state, ABORT)
    if after is None:
        if state in (JOINING, JOINED):
            raise JoinedToHost(submission_id, row.join_host)  # it settles through its host
        # Terminalizing: the owner's reserved record wins; an intent stored
        # now would sit next to another outcome.
        assert state == TERMINALIZING, state
        raise AbortConflict(submission_id, settlement_of(decode(row.reserved_json))["outcome"], settling=True)
    if after == SETTLED:
        # Admitted, never ready: its conversation may not exist yet ("admit
        # ledger row -> materialize Conversation -> mark ready"), no receipt
        # went out and no owner will ever run it. The intent settles it
        # ``aborted`` at once; its record is the ledger's alone (no log
        # holds it): the envelope ``settlement:{sid}`` created then.
        # A ready one (queued) keeps the intent only: its aborter settles it
        # through the log under the ``QueuedAbort`` authority.
        aborted_json = canonical_json(settlement_envelope(submission_id, ABORTED_RECORD, now_ms, receipt=row.receipt))
        aborted_digest = digest_text(aborted_json)
        return AbortIntent(submission_id, author, reason, now_ms, False, now_ms), attrs.evolve(
            row, abort_author=author, abort_reason=reason, abort_requested_at_ms=now_ms,
            reserved_json=aborted_json, reserved_digest=aborted_digest, outcome=ABORTED,
            settled_at_ms=now_ms, settlement_id=settlement_id_for(submission_id, aborted_digest))
    return AbortIntent(submission_id, author, reason, now_ms), attrs.evolve(
        row, abort_author=author, abort_reason=reason, abort_requested_at_ms=now_ms)


# --- unknown tool outcomes -----------------------------------------------------------


def _unknown_calls(row: SubmissionRow) -> dict:
    return {} if row.unknown_json is None else decode(row.unknown_json)


def decide_mark_unknown(
    row: SubmissionRow | None, token: Claim, tool_call_id: str
) -> tuple[UnknownMarked, SubmissionRow | None]:
    """The owner cannot tell whether a tool call happened: the call is open
    and the submission unknown; ownership ends (nothing may replay it). A
    repeat by the token that marked it (its ownership already ended) replays."""
    refuse_settled(row)
    if row is not None and row.owner_id is None and row.epoch == token.epoch:
        calls = _unknown_calls(row)
        if tool_call_id in calls and calls[tool_call_id] is None:
            return UnknownMarked(row.submission_id, tool_call_id, True), None
    row = check_token(row, token)
    state = state_of(row)
    if target(state, MARK_UNKNOWN) is None:
        raise TransitionRefused(row.submission_id, state, MARK_UNKNOWN)
    calls = _unknown_calls(row)
    if tool_call_id in calls:
        existing = calls[tool_call_id]
        if existing is not None:
            raise ResolutionConflict(row.submission_id, tool_call_id, existing["resolution"], "unknown")
        return UnknownMarked(row.submission_id, tool_call_id, True), None
    calls[tool_call_id] = None
    return UnknownMarked(row.submission_id, tool_call_id), attrs.evolve(
        row, unknown_json=canonical_json(calls), unknown_open=row.unknown_open + 1, owner_id=None,
        lease_expires_ms=None)


def decide_resolve(
    submission_id: str, row: SubmissionRow | None, tool_call_id: str, resolution: str, resolver: str,
    result: object, now_ms: int,
) -> tuple[UnknownResolution, SubmissionRow | None]:
    """The first resolution of an unknown call wins; an identical repeat
    replays it (its resolver and time); another is ``ResolutionConflict``."""
    if row is None:
        raise UnknownSubmission(submission_id)
    refuse_settled(row)
    calls = _unknown_calls(row)
    if tool_call_id not in calls:
        raise UnknownToolCall(submission_id, tool_call_id)
    existing = calls[tool_call_id]
    if existing is not None:
        same = existing["resolution"] == resolution and (
            resolution != COMPLETED_WITH_RESULT or digest(existing["result"]) == digest(result))
        if not same:
            raise ResolutionConflict(submission_id, tool_call_id, existing["resolution"], resolution)
        return UnknownResolution(submission_id, tool_call_id, resolution, existing["resolver"],
                                 existing["resolvedAtMs"], existing.get("result"), True, row.unknown_open), None
    entry = {"resolution": resolution, "resolver": resolver, "resolvedAtMs": now_ms}
    if resolution == COMPLETED_WITH_RESULT:
        entry["result"] = result
    calls[tool_call_id] = entry
    open_calls = row.unknown_open - 1
    assert open_calls >= 0, row
    return UnknownResolution(submission_id, tool_call_id, resolution, resolver, now_ms,
                             entry.get("result"), False, open_calls), attrs.evolve(
        row, unknown_json=canonical_json(calls), unknown_open=open_calls)


def validate_mark_unknown(token: object, tool_call_id: object) -> None:
    require_token(token)
    require_str("tool_call_id", tool_call_id)


def validate_resolve(submission_id: object, tool_call_id: object, resolution: object, resolver: object,
                     result: object, now_ms: object) -> object:
    """The checks, and ``result`` as the ledger will hold it (a fresh copy)."""
    require_str("submission_id", submission_id)
    require_str("tool_call_id", tool_call_id)
    require_str("resolver", resolver)
    require_int("now_ms", now_ms)
    if resolution not in RESOLUTIONS:
        raise ValueError(f"resolution must be one of {RESOLUTIONS}, got {resolution!r}")
    if resolution != COMPLETED_WITH_RESULT:
        if result is not None:
            raise ValueError(f"a {resolution} resolution carries no result")
        return None
    return decode(canonical_json(result))  # not JSON: ValueError / CanonicalEncodingError


# --- suspension and approvals ----------------------------------------------------------


def _approvals(row: SubmissionRow) -> dict:
    return {} if row.approvals_json is None else decode(row.approvals_json)


def decide_suspend(
    row: SubmissionRow | None, token: Claim, tool_call_ids: tuple[str, ...], child_call_ids: tuple[str, ...] = ()
) -> tuple[Suspension, SubmissionRow | None]:
    """The owner waits for approvals of ``tool_call_ids`` and for the
    release of the child reservations at ``child_call_ids``: ownership
    ends; suspended while any approval is undecided or any awaited child
    unreleased, resumed at once (claimable) if all are decided / released
    already. A repeat by the token that suspended replays."""
    wanted = tuple(dict.fromkeys(tool_call_ids))  # order kept, duplicates dropped
    wanted_children = tuple(dict.fromkeys(child_call_ids))
    refuse_settled(row)
    if row is not None and row.owner_id is None and row.epoch == token.epoch:
        approvals = _approvals(row)
        children = _children(row)
        if all(call in approvals for call in wanted) and all(
                call in children and children[call]["awaited"] for call in wanted_children):
            pending = tuple(call for call in wanted if approvals[call] is None)
            children_pending = tuple(call for call in wanted_children if children[call]["releasedAtMs"] is None)
            return Suspension(row.submission_id, pending, not pending and not children_pending, True,
                              children_pending), None
    row = check_token(row, token)
    state = state_of(row)
    if target(state, SUSPEND) is None:
        raise TransitionRefused(row.submission_id, state, SUSPEND)
    children = _children(row)
    for call in wanted_children:
        if call not in children:
            raise UnknownChildReservation(row.submission_id, call)
    approvals = _approvals(row)
    for call in wanted:
        approvals.setdefault(call, None)
    for call in wanted_children:
        children[call]["awaited"] = True
    pending_total = sum(1 for decision in approvals.values() if decision is None)
    awaited_total = sum(1 for entry in children.values() if entry["awaited"] and entry["releasedAtMs"] is None)
    pending = tuple(call for call in wanted if approvals[call] is None)
    children_pending = tuple(call for call in wanted_children if children[call]["releasedAtMs"] is None)
    return Suspension(row.submission_id, pending, not pending and not children_pending, False,
                      children_pending), attrs.evolve(
        row, approvals_json=canonical_json(approvals) if wanted else row.approvals_json,
        approvals_pending=pending_total,
        children_json=canonical_json(children) if wanted_children else row.children_json,
        children_awaited=awaited_total, owner_id=None, lease_expires_ms=None)


def decide_approval(
    submission_id: str, row: SubmissionRow | None, tool_call_id: str, decision: str, resolver: str, reason: str,
    now_ms: int,
) -> tuple[ApprovalDecision, SubmissionRow | None]:
    """The first decision on a tool call wins; an identical repeat replays it
    (its resolver, reason and time); a contrary one is ``ApprovalConflict``.
    The last pending decision resumes the submission."""
    if row is None:
        raise UnknownSubmission(submission_id)
    refuse_settled(row)
    approvals = _approvals(row)
    if tool_call_id not in approvals:
        raise UnknownApproval(submission_id, tool_call_id)
    existing = approvals[tool_call_id]
    if existing is not None:
        if existing["decision"] != decision:
            raise ApprovalConflict(submission_id, tool_call_id, existing["decision"], decision)
        return ApprovalDecision(submission_id, tool_call_id, decision, existing["resolver"], existing["reason"],
                                existing["decidedAtMs"], True, row.approvals_pending + row.children_awaited), None
    assert target(state_of(row), DECIDE) is not None, row
    approvals[tool_call_id] = {"decision": decision, "resolver": resolver, "reason": reason, "decidedAtMs": now_ms}
    pending = row.approvals_pending - 1
    assert pending >= 0, row
    return ApprovalDecision(submission_id, tool_call_id, decision, resolver, reason, now_ms, False,
                            pending + row.children_awaited), \
        attrs.evolve(row, approvals_json=canonical_json(approvals), approvals_pending=pending)


def validate_suspend(token: object, tool_call_ids: object, child_call_ids: object = ()) -> None:
    require_token(token)
    for name, calls in (("tool_call_ids", tool_call_ids), ("child_call_ids", child_call_ids)):
        if not isinstance(calls, (tuple, list)):
            raise ValueError(f"{name} must be a tuple or list of str")
        for call in calls:
            require_str(f"{name}[]", call)
    if not tool_call_ids and not child_call_ids:
        raise ValueError("a suspension awaits something: tool_call_ids and child_call_ids are both empty")


def validate_decide(submission_id: object, tool_call_id: object, decision: object, resolver: object,
                    reason: object, now_ms: object) -> None:
    require_str("submission_id", submission_id)
    require_str("tool_call_id", tool_call_id)
    require_str("resolver", resolver)
    require_str("reason", reason)
    require_int("now_ms", now_ms)
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}, got {decision!r}")


# --- joins ------------------------------------------------------------------------------

JOIN_LIMIT_MAX = 64  # followers one host may hold


def decide_begin_join(
    host: SubmissionRow | None, token: Claim, behind: list[SubmissionRow], limit: int
) -> tuple[JoinBatch, SubmissionRow | None, list[SubmissionRow]]:
    """``behind``: the conversation's unsettled rows after the host, in queue
    order. The host takes the contiguous prefix of ready ones (its own
    followers count towards ``limit``), stopping at the first row that is
    neither ready nor already its follower: a gap is never skipped. An
    aborted queued submission is settled, so it is no gap; one whose abort
    intent is durable but not settled yet is a gap (taken, it would settle
    with its host's outcome). The answer is the rows this call took, each
    with its queue position and input (the peer's ``claimJoining``): a row
    already joining is skipped in it."""
    host = check_token(host, token)
    state = state_of(host)
    if target(state, BEGIN_JOIN) is None:
        raise TransitionRefused(host.submission_id, state, BEGIN_JOIN)
    mine: list[SubmissionRow] = []  # its followers already (not answered again)
    taken: list[SubmissionRow] = []
    for row in behind:
        assert row.queue_seq > host.queue_seq, (row, host)
        if row.join_host == host.submission_id:
            mine.append(row)
            continue
        # (an aborting one is a gap: it settles aborted, never with the host)
        if len(mine) + len(taken) >= limit or state_of(row) != READY or row.abort_author is not None:
            break
        taken.append(row)
    if not taken:
        return JoinBatch(host.submission_id, (), True), None, []
    followers = [attrs.evolve(row, join_host=host.submission_id) for row in taken]
    answer = tuple(JoiningFollower(row.submission_id, row.queue_seq, decode(row.input_json)) for row in taken)
    return (JoinBatch(host.submission_id, answer),
            attrs.evolve(host, joined_count=host.joined_count + len(taken)), followers)


def decide_mark_joined(
    host: SubmissionRow | None, token: Claim, submission_id: str, follower: SubmissionRow | None, record_id: str,
    seq: int,
) -> tuple[JoinMarked, SubmissionRow | None]:
    host = check_token(host, token)
    if follower is None:
        raise UnknownSubmission(submission_id)
    state = state_of(follower)
    if follower.join_host != host.submission_id or target(state, MARK_JOINED) is None:
        raise TransitionRefused(submission_id, state, MARK_JOINED)
    marked = JoinMarked(submission_id, host.submission_id, record_id, seq)
    if follower.joined_seq is not None:
        if (follower.joined_record_id, follower.joined_seq) != (record_id, seq):
            raise TransitionRefused(submission_id, state, MARK_JOINED)  # joined elsewhere in the log already
        return attrs.evolve(marked, replayed=True), None
    return marked, attrs.evolve(follower, joined_record_id=record_id, joined_seq=seq)


def decide_revert_join(
    host: SubmissionRow | None, token: Claim, submission_id: str, follower: SubmissionRow | None
) -> tuple[SubmissionRow | None, SubmissionRow | None]:
    """A joining follower back to ready (the host will not apply its input).
    Idempotent; reverting a joined one changes nothing (its input is in
    the host's log: it stays joined, the peer's ``revertJoining``)."""
    host = check_token(host, token)
    if follower is None:
        raise UnknownSubmission(submission_id)
    state = state_of(follower)
    if follower.join_host is None and state == READY:
        return None, None  # reverted already
    if follower.join_host == host.submission_id and state == JOINED:
        return None, None  # joined: it settles with its host
    if follower.join_host != host.submission_id or target(state, REVERT_JOIN) is None:
        raise TransitionRefused(submission_id, state, REVERT_JOIN)
    return (attrs.evolve(host, joined_count=host.joined_count - 1),
            attrs.evolve(follower, join_host=None))


def joined_record(host_record: dict) -> dict:
    """A joined follower's settlement record: its host's outcome, no
    independent result (§10: a joined completed record has none)."""
    if host_record["outcome"] == FAILED:
        return {"outcome": FAILED, "diagnostic": host_record["diagnostic"]}
    return {"outcome": host_record["outcome"]}


def joined_envelope(host_envelope: dict, follower_id: str, follower_receipt: str) -> dict:
    """A joined follower's settlement record envelope, derived from its
    host's: ``settlement:{followerId}`` with the follower's own receipt
    (``receiptId``), the host's ``createdAt``, ``deploymentId`` and run
    (``runId``, when the host's names one), and the host's outcome with no
    independent result (``joined_record``). The host's settlement batch
    appends exactly this; the host's finalize settles the follower with its
    digest."""
    host = host_envelope["payload"]
    return settlement_envelope(follower_id, joined_record(settlement_of(host_envelope)), host_envelope["createdAt"],
                               receipt=follower_receipt, deployment_id=host_envelope["deploymentId"],
                               run_id=host.get("runId"))


def validate_begin_join(token: object, limit: object) -> None:
    require_token(token)
    require_int("limit", limit)
    if not 1 <= limit <= JOIN_LIMIT_MAX:
        raise ValueError(f"limit must be within 1..{JOIN_LIMIT_MAX}, got {limit}")


def validate_mark_joined(token: object, submission_id: object, record_id: object, seq: object) -> None:
    require_token(token)
    require_str("submission_id", submission_id)
    require_str("record_id", record_id)
    require_int("seq", seq)
    if seq < 1:
        raise ValueError(f"seq must be >= 1, got {seq}")


def validate_revert_join(token: object, submission_id: object) -> None:
    require_token(token)
    require_str("submission_id", submission_id)


# --- child reservations (subagents) ----------------------------------------------------


def _children(row: SubmissionRow) -> dict:
    return {} if row.children_json is None else decode(row.children_json)


def _child_answer(row: SubmissionRow, call: str, entry: dict, replayed: bool) -> ChildReservation:
    """``row``: the parent as it is after the call (its awaited count)."""
    return ChildReservation(row.submission_id, call, entry["allocation"], entry["allocationDigest"], entry["child"],
                            entry["accounting"], entry["releasedAtMs"], replayed, entry["awaited"],
                            row.approvals_pending + row.children_awaited)


def decide_reserve_child(
    row: SubmissionRow | None, token: Claim, tool_call_id: str, allocation: object, allocation_digest: str
) -> tuple[ChildReservation, SubmissionRow | None]:
    """One child budget per parent tool call, identified by its allocation's
    canonical digest (key order irrelevant): the same again replays it,
    another is ``ChildReservationConflict``. An existing reservation is
    answered before the token is checked: an identical replay creates
    nothing, so a fenced owner's retry learns it stands; anything new is
    fenced."""
    if row is not None:
        entry = _children(row).get(tool_call_id)
        if entry is not None:
            if entry["allocationDigest"] != allocation_digest:
                raise ChildReservationConflict(row.submission_id, tool_call_id, "allocation")
            return _child_answer(row, tool_call_id, entry, True), None
    row = check_token(row, token)
    state = state_of(row)
    if target(state, RESERVE_CHILD) is None:
        raise TransitionRefused(row.submission_id, state, RESERVE_CHILD)
    children = _children(row)
    entry = {"allocation": allocation, "allocationDigest": allocation_digest, "awaited": False, "child": None,
             "accounting": None, "releasedAtMs": None}
    children[tool_call_id] = entry
    row = attrs.evolve(row, children_json=canonical_json(children))
    return _child_answer(row, tool_call_id, entry, False), row


def decide_attach_child(
    row: SubmissionRow | None, token: Claim, tool_call_id: str, child_submission_id: str
) -> tuple[ChildReservation, SubmissionRow | None]:
    """An attached child is answered before the token is checked (as
    ``decide_reserve_child``): the same child replays, another conflicts."""
    if row is not None:
        entry = _children(row).get(tool_call_id)
        if entry is not None and entry["child"] is not None:
            if entry["child"] != child_submission_id:
                raise ChildReservationConflict(row.submission_id, tool_call_id, "child")
            return _child_answer(row, tool_call_id, entry, True), None
    row = check_token(row, token)
    state = state_of(row)
    if target(state, ATTACH_CHILD) is None:
        raise TransitionRefused(row.submission_id, state, ATTACH_CHILD)
    children = _children(row)
    entry = children.get(tool_call_id)
    if entry is None:
        raise UnknownChildReservation(row.submission_id, tool_call_id)
    entry["child"] = child_submission_id
    row = attrs.evolve(row, children_json=canonical_json(children))
    return _child_answer(row, tool_call_id, entry, False), row


def decide_release_child(
    submission_id: str, row: SubmissionRow | None, tool_call_id: str, accounting: object, accounting_digest: str,
    now_ms: int,
) -> tuple[ChildReservation, SubmissionRow | None]:
    """The child's accounting is frozen once, at the first release; a repeat
    with the same accounting replays it, another is a conflict. Applies in
    any state of the parent (the child settles when it settles). The first
    release of an awaited child counts it off the parent's awaited ones:
    the last thing a suspended parent awaited resumes it."""
    if row is None:
        raise UnknownSubmission(submission_id)
    children = _children(row)
    entry = children.get(tool_call_id)
    if entry is None:
        raise UnknownChildReservation(submission_id, tool_call_id)
    if entry["releasedAtMs"] is not None:
        if digest(entry["accounting"]) != accounting_digest:
            raise ChildReservationConflict(submission_id, tool_call_id, "accounting")
        return _child_answer(row, tool_call_id, entry, True), None
    entry["accounting"] = accounting
    entry["releasedAtMs"] = now_ms
    awaited = row.children_awaited - 1 if entry["awaited"] else row.children_awaited
    assert awaited >= 0, row
    row = attrs.evolve(row, children_json=canonical_json(children), children_awaited=awaited)
    return _child_answer(row, tool_call_id, entry, False), row


def encode_json_arg(name: str, value: object) -> tuple[object, str]:
    """A JSON argument as the ledger holds it (a fresh copy) and its digest."""
    text = canonical_json(value)  # not JSON: ValueError / CanonicalEncodingError
    return decode(text), digest_text(text)


def validate_reserve_child(token: object, tool_call_id: object) -> None:
    require_token(token)
    require_str("tool_call_id", tool_call_id)


def validate_attach_child(token: object, tool_call_id: object, child_submission_id: object) -> None:
    require_token(token)
    require_str("tool_call_id", tool_call_id)
    require_str("child_submission_id", child_submission_id)


def validate_release_child(submission_id: object, tool_call_id: object, now_ms: object) -> None:
    require_str("submission_id", submission_id)
    require_str("tool_call_id", tool_call_id)
    require_int("now_ms", now_ms)


# --- settlement ---------------------------------------------------------------------


_DIAGNOSTIC_KEYS = frozenset(("errorTag", "message"))


def check_settlement_shape(submission_id: str, envelope: object) -> None:
    """The settlement record envelope of ``submission_id`` (its six members,
    family ``submission-settled``, id ``settlement:{submissionId}``, payload
    the peer implementation's ``SubmissionSettled`` payload:
    ``submissionId``, ``settlementId`` = ``settlement:{submissionId}``,
    ``receiptId`` (a non-empty string), ``runId`` (a string) when present,
    and the outcome record's members beside them), and its outcome record's
    persistence §10 family rules; ``InvalidSettlement`` on a violation.
    The receipt is not compared with the admission's here: as the peer's
    publication, the write checks the settlement's own ids, and a reader
    of the canonical record checks its receipt."""
    if not isinstance(envelope, dict):
        raise InvalidSettlement(submission_id, f"record must be a JSON object (a record envelope), got "
                                               f"{type(envelope).__name__}")
    if set(envelope) != ENVELOPE_KEYS:
        raise InvalidSettlement(submission_id, f"a settlement is a record envelope {sorted(ENVELOPE_KEYS)}, got "
                                               f"{envelope!r:.200}")
    if (envelope["family"] != SETTLED_FAMILY or envelope["recordId"] != f"settlement:{submission_id}"
            or envelope["schemaVersion"] != SETTLED_SCHEMA_VERSION or type(envelope["createdAt"]) is not int
            or type(envelope["deploymentId"]) is not str):
        raise InvalidSettlement(submission_id, "not this submission's settlement envelope: "
                                               f"{ {k: v for k, v in envelope.items() if k != 'payload'}!r:.300}")
    payload = envelope["payload"]
    if (not isinstance(payload, dict) or payload.get("submissionId") != submission_id
            or payload.get("settlementId") != f"settlement:{submission_id}"
            or type(payload.get("receiptId")) is not str or not payload["receiptId"]
            or ("runId" in payload and type(payload["runId"]) is not str)):
        raise InvalidSettlement(submission_id, f"payload must be {{submissionId, settlementId, receiptId, outcome, "
                                               f"...[, runId]}} of this submission, got {payload!r:.200}")
    record = settlement_of(envelope)
    outcome = record.get("outcome")
    if outcome not in OUTCOMES:
        raise InvalidSettlement(submission_id, f"outcome must be one of {OUTCOMES}, got {outcome!r}")
    if outcome == FAILED:
        diagnostic = record.get("diagnostic")
        if (
            not isinstance(diagnostic, dict)
            or set(diagnostic) != _DIAGNOSTIC_KEYS
            or type(diagnostic["errorTag"]) is not str
            or type(diagnostic["message"]) is not str
        ):
            raise InvalidSettlement(
                submission_id, f"a failed record carries exactly {{errorTag, message}} strings, got {diagnostic!r:.200}"
            )
        extra = sorted({"result", "cause", "stack"} & set(record))
        if extra:
            raise InvalidSettlement(submission_id, f"a failed record carries no {extra}")
    elif outcome == ABORTED:
        if "result" in record:
            raise InvalidSettlement(submission_id, "an aborted record carries no result")
    else:
        assert outcome == COMPLETED


def encode_settlement(submission_id: str, record: object) -> tuple[str, str, str]:
    """Validate the record envelope's shape and return ``(canonical_json,
    digest, outcome)``: the digest is over the whole envelope (the peer's
    ``recordDigest = digestJson(encode(RecordEnvelope))``)."""
    check_settlement_shape(submission_id, record)
    try:
        text = canonical_json(record)
    except ValueError as exc:
        raise InvalidSettlement(submission_id, f"not canonical JSON: {exc}") from None
    return text, digest_text(text), settlement_of(record)["outcome"]


def decide_reserve(
    row: SubmissionRow | None, token: Claim, record_json: str, record_digest: str, outcome: str
) -> tuple[ReservedSettlement, SubmissionRow | None]:
    """``outcome``: the record's (its shape already checked). An
    ``aborted`` record of a queued submission with an abort intent needs no
    ownership (``queued_abort``): any token."""
    if row is None or outcome != ABORTED or not queued_abort(row):
        row = check_token(row, token)
    reserved = ReservedSettlement(row.submission_id, record_digest, False,
                                  settlement_id_for(row.submission_id, record_digest), outcome)
    if row.reserved_digest is None:
        if row.abort_author is not None and outcome != ABORTED:
            raise AbortRequested(row.submission_id, row.abort_author, row.abort_reason, outcome)
        return reserved, evolve_row(row, reserved_json=record_json, reserved_digest=record_digest)
    if row.reserved_digest != record_digest:
        raise SettlementConflict(row.submission_id, row.reserved_digest, record_digest,
                                 settlement_of(decode(row.reserved_json))["outcome"])
    return attrs.evolve(reserved, replayed=True), None


def decide_finalize(
    submission_id: str, row: SubmissionRow | None, now_ms: int, behind: list[SubmissionRow] = ()
) -> tuple[Settlement, SubmissionRow | None, list[SubmissionRow]]:
    """``behind``: the conversation's unsettled rows (needed only when the
    row hosts followers, ``joined_count``): its joined followers settle with
    it (``joined_record``), its joining ones go back to ready."""
    if row is None:
        raise UnknownSubmission(submission_id)
    if state_of(row) in (JOINING, JOINED):
        raise JoinedToHost(submission_id, row.join_host)
    if target(state_of(row), FINALIZE) is None:  # nothing reserved
        raise SettlementConflict(submission_id, None, None)
    # Validate what was stored, even though we wrote it (§10): a corrupt
    # reservation fails clearly rather than settling.
    try:
        record = decode(row.reserved_json)
    except CanonicalDecodeError as exc:
        raise CorruptSubmission(submission_id, f"reserved_json does not decode: {exc}") from None
    check_settlement_shape(submission_id, record)
    if digest(record) != row.reserved_digest:
        raise InvalidSettlement(submission_id, "stored record does not match its reserved digest")
    outcome = settlement_of(record)["outcome"]
    diagnostic = settlement_of(record)["diagnostic"] if outcome == FAILED else None
    if row.settled_at_ms is not None:
        assert row.outcome == outcome, (row.outcome, outcome)
        return Settlement(submission_id, outcome, row.reserved_digest, row.settled_at_ms, diagnostic,
                          row.settlement_id, True, row.receipt), None, []
    settlement_id = settlement_id_for(submission_id, row.reserved_digest)
    settlement = Settlement(submission_id, outcome, row.reserved_digest, now_ms, diagnostic, settlement_id,
                            receipt=row.receipt)
    followers: list[SubmissionRow] = []
    if row.joined_count:
        for other in behind:
            if other.join_host != submission_id:
                continue
            if state_of(other) == JOINED:
                follower_json = canonical_json(joined_envelope(record, other.submission_id, other.receipt))
                follower_digest = digest_text(follower_json)
                assert target(JOINED, SETTLE_JOINED) == SETTLED
                followers.append(attrs.evolve(other, reserved_json=follower_json, reserved_digest=follower_digest,
                                              outcome=outcome,
                                              settled_at_ms=now_ms, input_applied=True,
                                              input_record_id=other.joined_record_id, input_seq=other.joined_seq,
                                              settlement_id=settlement_id_for(other.submission_id,
                                                                              follower_digest)))
            else:
                assert target(JOINING, REVERT_JOIN) == READY
                followers.append(attrs.evolve(other, join_host=None))
        assert len(followers) == row.joined_count, (row, followers)
    return settlement, evolve_row(row, outcome=outcome, settled_at_ms=now_ms, joined_count=0,
                                  settlement_id=settlement_id), followers


# --- declared capabilities ---------------------------------------------------------


def decide_purge(conversation_id: str, rows: list[SubmissionRow]) -> None:
    """Retention may delete a conversation's ledger rows only when every one
    is settled: open work is never archived away (raises ``PurgeRefused``)."""
    open_rows = sum(1 for row in rows if row.settled_at_ms is None)
    if open_rows:
        raise PurgeRefused(conversation_id, open_rows)


def capabilities(*, durable: bool, adapter: str, encryption_at_rest: bool = False) -> dict:
    """What an adapter declares. ``encryption_at_rest``: whether what it
    stores is encrypted where it is stored (the adapter's, or its storage's,
    promise): a workload that requires it is refused a store that does not
    declare it."""
    return {
        "adapter": adapter,
        "durable": durable,
        "durability": "durable-node" if durable else "non-durable",  # the peer's declaration
        "atomic_admission": True,
        "atomic_settlement_transitions": True,
        "fencing": "epoch",
        "claim_order": "fifo",
        "strongly_consistent_reads": True,
        "schema_version": SCHEMA_VERSION,
        "encryption_at_rest": encryption_at_rest,
    }


# --- per-method argument checks (both adapters call these first) ---------------------


def validate_admit(conversation_id: object, principal_id: object, idempotency_key: object, now_ms: object,
                   parent: object = None, admission_group: object = None, admission_fence: object = None,
                   metadata: object = None) -> str | None:
    """Checks the arguments; returns the metadata's canonical text (None: no metadata)."""
    require_str("conversation_id", conversation_id)
    require_str("principal_id", principal_id)
    require_str("idempotency_key", idempotency_key)
    require_int("now_ms", now_ms)
    if parent is not None:
        if type(parent) is not ParentLink:
            raise TypeError(f"parent must be a ParentLink or None, got {type(parent).__name__}")
        require_str("parent.submission_id", parent.submission_id)
        require_str("parent.tool_call_id", parent.tool_call_id)
    if admission_group is not None:
        require_str("admission_group", admission_group)
    if admission_fence is not None:
        if type(admission_fence) is not AdmissionFence:
            raise TypeError(f"admission_fence must be an AdmissionFence or None, got {type(admission_fence).__name__}")
        validate_set_admission_fence(admission_fence.policy_id, admission_fence.key, admission_fence.revision)
    return None if metadata is None else canonical_json(metadata)


def validate_set_admission_fence(policy_id: object, key: object, revision: object) -> None:
    require_str("policy_id", policy_id)
    require_str("key", key)
    require_int("revision", revision)
    if revision < 1:
        raise ValueError(f"revision must be >= 1, got {revision}")


def validate_mark_ready(submission_id: object, now_ms: object) -> None:
    require_str("submission_id", submission_id)
    require_int("now_ms", now_ms)


def validate_claim(conversation_id: object, owner_id: object, lease_ms: object, now_ms: object) -> None:
    require_str("conversation_id", conversation_id)
    require_str("owner_id", owner_id)
    require_positive_ms("lease_ms", lease_ms)
    require_int("now_ms", now_ms)


def validate_renew(token: object, lease_ms: object, now_ms: object) -> None:
    require_token(token)
    require_positive_ms("lease_ms", lease_ms)
    require_int("now_ms", now_ms)


def validate_abort(submission_id: object, author: object, reason: object, now_ms: object) -> None:
    require_str("submission_id", submission_id)
    require_str("author", author)
    require_str("reason", reason)
    require_int("now_ms", now_ms)


def validate_finalize(submission_id: object, now_ms: object) -> None:
    require_str("submission_id", submission_id)
    require_int("now_ms", now_ms)
