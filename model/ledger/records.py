"""Records and typed errors of the Submission Ledger (persistence §3).

The ledger tracks each submission's operational obligations: admission under
an idempotency key, readiness, FIFO ownership with a lease and a producer
epoch, the canonical-input marker, abort intent, and the two-step settlement
(reserve the exact canonical record, then finalize). These are the only
shapes that cross the ledger boundary; both adapters (memory, SQLite) and any
third-party adapter return exactly these classes.

JSON values (``input``, settlement records) cross the boundary as canonical
text (``model.canonical``): what goes in is encoded, what comes out is a
fresh decode, so a caller mutating a dict cannot rewrite the ledger.
"""
from __future__ import annotations

import attrs

# Settlement outcomes (the canonical SubmissionSettled families).
COMPLETED = "completed"
FAILED = "failed"
ABORTED = "aborted"
OUTCOMES: tuple[str, ...] = (COMPLETED, FAILED, ABORTED)

SCHEMA_VERSION = 1

# The settlement record is a whole record envelope (persistence §4's
# ``RecordEnvelope``: recordId, family, schemaVersion, createdAt,
# deploymentId, payload): the ledger reserves it, digests it and hands it
# back, and the log appends exactly it ("reserve settlement -> append exact
# canonical record -> finalize ledger", §3). The producer's identity and
# epoch are not part of it: the fenced append adds them ("Producer-written
# records also include producer identity and epoch", §4), and a successor
# that appends its predecessor's reservation is another producer.
SETTLED_FAMILY = "submission-settled"
SETTLED_SCHEMA_VERSION = 1
#: The deployment id every record of the model carries.
DEPLOYMENT_ID = "loomsim"
ENVELOPE_KEYS = frozenset({"recordId", "family", "schemaVersion", "createdAt", "deploymentId", "payload"})


#: The members of a settlement payload that name it (the peer
#: implementation's ``SubmissionSettled`` payload); every other member is
#: the outcome record's (``outcome``, and ``result`` or ``diagnostic``, ...).
SETTLEMENT_IDENTITY_KEYS = ("submissionId", "settlementId", "receiptId", "runId")


def settlement_envelope(submission_id: str, record: dict, created_at_ms: int, *, receipt: str,
                        deployment_id: str = DEPLOYMENT_ID, run_id: str | None = None) -> dict:
    """The settlement record envelope of ``submission_id``: its id is
    ``settlement:{submissionId}``; its payload the peer implementation's
    ``SubmissionSettled`` payload: ``submissionId``, ``settlementId``
    (``settlement:{submissionId}``), ``receiptId`` (the admission's
    ``receipt``), the outcome record's own members at the top level
    (``outcome``, and ``result``, ``diagnostic``, ... as the record has
    them), and ``runId``, the run that settled it, when one did."""
    clash = [key for key in SETTLEMENT_IDENTITY_KEYS if key in record]
    if clash:
        raise ValueError(f"an outcome record carries no {clash}: they name the settlement")
    payload = {"submissionId": submission_id, "settlementId": f"settlement:{submission_id}", "receiptId": receipt,
               **record}
    if run_id is not None:
        payload["runId"] = run_id
    return {"recordId": f"settlement:{submission_id}", "family": SETTLED_FAMILY,
            "schemaVersion": SETTLED_SCHEMA_VERSION, "createdAt": created_at_ms, "deploymentId": deployment_id,
            "payload": payload}


def settlement_of(envelope: dict) -> dict:
    """The outcome record a settlement envelope carries: its payload without
    the members that name the settlement (``SETTLEMENT_IDENTITY_KEYS``)."""
    return {key: value for key, value in envelope["payload"].items() if key not in SETTLEMENT_IDENTITY_KEYS}

# How a tool call whose outcome was unknown is resolved (persistence §3: an
# unknown head is never replayed blindly; only a resolution makes it
# claimable again).
NEVER_HAPPENED = "NeverHappened"
SAFE_TO_RETRY = "SafeToRetry"
COMPLETED_WITH_RESULT = "CompletedWithResult"
RESOLUTIONS: tuple[str, ...] = (NEVER_HAPPENED, SAFE_TO_RETRY, COMPLETED_WITH_RESULT)
# An approval decision for a tool call the owner suspended on.
APPROVED = "approved"
REJECTED = "rejected"
DECISIONS: tuple[str, ...] = (APPROVED, REJECTED)


@attrs.frozen
class ParentLink:
    """Where a child submission was spawned: its parent submission and the
    parent's tool call holding the child reservation (``reserve_child``).
    The ledger does not require the parent to exist (it may live in another
    conversation and store); it is part of the admission's identity."""

    submission_id: str
    tool_call_id: str


@attrs.frozen
class AdmissionResult:
    """What ``admit`` returned. ``replayed=True``: an exact retry of an
    earlier admission under the same idempotency key (same input, same
    ``parent``); every other field is the original's."""

    submission_id: str
    receipt: str
    queue_seq: int
    replayed: bool
    input_digest: str
    parent: ParentLink | None = None
    # The admission group it occupies and its opaque admission metadata
    # (``admit(admission_group=..., metadata=...)``), the original's on a replay.
    admission_group: str | None = None
    metadata: object = None


@attrs.frozen
class AdmissionFence:
    """An admission's fence (``admit(admission_fence=...)``, the peer's
    ``admissionFence{policyId,key,revision}``): the admission is taken only
    while the ledger's fence ``(policy_id, key)`` stands at ``revision``
    (``set_admission_fence``), checked inside the admission's transaction."""

    policy_id: str
    key: str
    revision: int


@attrs.frozen
class AdmissionFenceState:
    """What ``set_admission_fence`` returned: the fence now stands at
    ``revision``; ``replayed``: it stood there already."""

    policy_id: str
    key: str
    revision: int
    replayed: bool = False


@attrs.frozen
class Readiness:
    """``mark_ready``'s answer: when the submission first became ready
    (``replayed``: it was ready already; ``ready_at_ms`` is the first time)."""

    submission_id: str
    ready_at_ms: int
    replayed: bool = False


@attrs.frozen
class InputApplied:
    """``mark_input_applied``'s answer: the submission's canonical input is
    in the log at ``record_id``/``seq`` (``replayed``: marked already at that
    very position)."""

    submission_id: str
    record_id: str
    seq: int
    replayed: bool = False


@attrs.frozen
class Claim:
    """The live ownership token. Only the claimer holds it; the recovery
    snapshot shows ownership without it."""

    submission_id: str
    owner_id: str
    epoch: int
    lease_expires_ms: int
    # This claim's attempt: ``f"{submission_id}#a{epoch}"`` (one per claim,
    # deterministic). Default: derived, so a token built by hand still is one.
    attempt_id: str = attrs.field(default=attrs.Factory(lambda self: attempt_id_for(self.submission_id, self.epoch),
                                                        takes_self=True))


def attempt_id_for(submission_id: str, epoch: int) -> str:
    """The attempt id of the claim of ``submission_id`` at ``epoch``."""
    return f"{submission_id}#a{epoch}"


@attrs.frozen
class ClaimHandoff:
    """A cooperative handoff (the peer's ``ClaimHandoff``): the producer that
    claimed at ``producer_epoch`` applied the input of each of
    ``deferred_submission_ids`` (the lane's unsettled rows ahead of
    ``submission_id``, in queue order), then released them unsettled; it
    hands the lane to ``submission_id``, the next ready one."""

    producer_epoch: int
    deferred_submission_ids: tuple[str, ...]
    submission_id: str


@attrs.frozen
class OwnershipRenewal:
    submission_id: str
    owner_id: str
    epoch: int
    lease_expires_ms: int


@attrs.frozen
class AbortIntent:
    """The durable abort intent: the FIRST author, reason and time, always
    (``replayed=True``: an intent already existed and this is it).

    ``settled_at_ms``: set when the intent settled the submission at once —
    it had never been ready, so nothing of it is in the log and the intent
    alone is the authority for its ``aborted`` outcome. A replay returns the
    original value."""

    submission_id: str
    author: str
    reason: str
    requested_at_ms: int
    replayed: bool = False
    settled_at_ms: int | None = None


@attrs.frozen
class UnknownMarked:
    """``mark_unknown``'s answer: the tool call's outcome is unknown; the
    owner's ownership ended (``replayed``: this token had marked it)."""

    submission_id: str
    tool_call_id: str
    replayed: bool = False


@attrs.frozen
class UnknownResolution:
    """A resolution of an unknown tool call: the FIRST one, always
    (``replayed=True`` on an identical repeat). ``result`` only for
    ``CompletedWithResult``. ``open_calls``: the submission's unknown calls
    still unresolved after it (0: claimable again)."""

    submission_id: str
    tool_call_id: str
    resolution: str
    resolver: str
    resolved_at_ms: int
    result: object = None
    replayed: bool = False
    open_calls: int = 0


@attrs.frozen
class Suspension:
    """``suspend``'s answer: the owner's ownership ended; ``pending``: the
    approvals still undecided, ``children_pending``: the awaited child calls
    whose child is not yet released (both empty: ``resumed`` at once,
    claimable again). ``replayed``: this token had suspended it on the same
    calls."""

    submission_id: str
    pending: tuple[str, ...]
    resumed: bool
    replayed: bool = False
    children_pending: tuple[str, ...] = ()


@attrs.frozen
class ApprovalDecision:
    """A decision on a tool call's approval: the FIRST one, always
    (``replayed=True`` on an identical repeat). ``pending``: how many things
    the submission still awaits after it: its undecided approvals plus its
    awaited children not yet released (0 resumes it)."""

    submission_id: str
    tool_call_id: str
    decision: str
    resolver: str
    reason: str
    decided_at_ms: int
    replayed: bool = False
    pending: int = 0


@attrs.frozen
class JoiningFollower:
    """A row ``begin_join`` took: its id, its queue position and its input
    (the peer's ``queueSequence`` and ``inputPayload``)."""

    submission_id: str
    queue_seq: int
    input: object


@attrs.frozen
class JoinBatch:
    """``begin_join``'s answer: the rows this call took (ready, right behind
    the host or its earlier followers), now joining it, in queue order. A
    row an earlier call took is not answered again (the peer's
    ``claimJoining``): the host's followers are in its recovery snapshot
    (``join_host``). ``replayed``: nothing new was taken."""

    host_submission_id: str
    followers: tuple[JoiningFollower, ...]
    replayed: bool = False

    @property
    def follower_ids(self) -> tuple[str, ...]:
        return tuple(follower.submission_id for follower in self.followers)


@attrs.frozen
class JoinMarked:
    """A follower joined its host: its input is in the host's log at
    ``record_id``/``seq``. It settles through the host's settlement."""

    submission_id: str
    host_submission_id: str
    record_id: str
    seq: int
    replayed: bool = False


@attrs.frozen
class ChildReservation:
    """A parent's budget reserved for a subagent at one of its tool calls:
    the allocation (canonical; its digest is its identity), the child
    submission once attached, the frozen accounting once released
    (``replayed``: this exact reservation, attachment or release existed).
    ``awaited``: a suspension of the parent named this call (it waits for
    the child's release); ``pending``: how many things the parent still
    awaits after this call (undecided approvals plus awaited unreleased
    children; a release that leaves 0 of an awaited child resumed it)."""

    submission_id: str  # the parent
    tool_call_id: str
    allocation: object
    allocation_digest: str
    child_submission_id: str | None = None
    accounting: object = None
    released_at_ms: int | None = None
    replayed: bool = False
    awaited: bool = False
    pending: int = 0


@attrs.frozen
class ReservedSettlement:
    """``replayed``: this exact record was reserved already.
    ``settlement_id`` (``settlement:{submissionId}``) and ``outcome``: the
    settlement it will finalize as (the peer's reservation answer)."""

    submission_id: str
    record_digest: str
    replayed: bool = False
    settlement_id: str | None = None
    outcome: str | None = None


@attrs.frozen
class Settlement:
    """A finalized settlement. ``diagnostic`` is the failed record's exact
    ``{errorTag, message}`` projected from the reserved record (None for the
    other outcomes), so a replayed finalize returns the same value.
    ``settlement_id``: ``"settlement:{submissionId}"`` (stable across replays). ``replayed``: it was finalized
    already; this is that settlement. ``receipt``: the admission's receipt."""

    submission_id: str
    outcome: str
    record_digest: str
    settled_at_ms: int
    diagnostic: object = None
    settlement_id: str | None = None
    replayed: bool = False
    receipt: str | None = None


@attrs.frozen
class SubmissionRecord:
    """Everything the ledger holds about one submission (``get``)."""

    submission_id: str
    conversation_id: str
    principal_id: str
    idempotency_key: str
    queue_seq: int
    input: object
    input_digest: str
    receipt: str
    admitted_at_ms: int
    ready: bool
    owner_id: str | None
    epoch: int | None
    lease_expires_ms: int | None
    input_applied: bool
    abort_author: str | None
    abort_reason: str | None
    abort_requested_at_ms: int | None
    reserved_record: object
    reserved_digest: str | None
    outcome: str | None
    settled_at_ms: int | None
    schema_version: int = SCHEMA_VERSION
    # Tool calls whose outcome its owner marked unknown: call id -> None while
    # open, else the resolution ``{resolution, resolver, resolvedAtMs[, result]}``.
    unknown_calls: object = None
    # Approvals it suspended on: call id -> None while pending, else the
    # decision ``{decision, resolver, reason, decidedAtMs}``.
    approvals: object = None
    # Joins: the host this submission joined (or is joining) and where its
    # input sits in the host's log; on a host, how many followers it holds.
    join_host: str | None = None
    joined_record_id: str | None = None
    joined_seq: int | None = None
    joined_count: int = 0
    # Child reservations by the parent's tool call: {callId: {allocation,
    # allocationDigest, awaited, child, accounting, releasedAtMs}}.
    children: object = None
    # The parent it was spawned for (``admit(parent=...)``), if any.
    parent: ParentLink | None = None
    # When ``mark_ready`` first made it ready.
    ready_at_ms: int | None = None
    # The latest claim's attempt id (``Claim.attempt_id``).
    attempt_id: str | None = None
    # The log position of its canonical input (``mark_input_applied``; for a
    # joined follower, where it sits in its host's log).
    input_record_id: str | None = None
    input_seq: int | None = None
    # Once settled: ``"settlement:{submissionId}"``.
    settlement_id: str | None = None
    # Its admission group and opaque admission metadata (``admit``), if any.
    admission_group: str | None = None
    metadata: object = None

    @property
    def settled(self) -> bool:
        return self.settled_at_ms is not None

    @property
    def unknown_open(self) -> int:
        """How many of its unknown tool calls are unresolved."""
        calls = self.unknown_calls
        return 0 if not calls else sum(1 for resolution in calls.values() if resolution is None)

    @property
    def approvals_pending(self) -> int:
        """How many of the approvals it waits for are undecided."""
        approvals = self.approvals
        return 0 if not approvals else sum(1 for decision in approvals.values() if decision is None)

    @property
    def children_awaited(self) -> int:
        """How many of the child calls it waits for are not yet released."""
        children = self.children
        return 0 if not children else sum(1 for entry in children.values()
                                          if entry["awaited"] and entry["releasedAtMs"] is None)


@attrs.frozen
class SubmissionOwnership:
    """One nonterminal submission in a recovery snapshot: ownership facts
    WITHOUT the live token (a recovering producer must claim anew)."""

    submission_id: str
    queue_seq: int
    ready: bool
    owner_id: str | None
    epoch: int | None
    lease_expires_ms: int | None
    input_applied: bool
    abort_requested: bool
    abort_author: str | None
    abort_reason: str | None
    abort_requested_at_ms: int | None
    reserved_digest: str | None
    settled: bool
    unknown_open: int = 0  # unknown tool calls not yet resolved (the head is not claimable)
    approvals_pending: int = 0  # approvals it is suspended on, undecided (not claimable)
    join_host: str | None = None  # the host it is joining / joined (it settles through the host)
    children_awaited: int = 0  # awaited child calls not yet released (not claimable)
    input_record_id: str | None = None  # where its canonical input sits in the log
    input_seq: int | None = None
    reserved_outcome: str | None = None  # the reserved record's outcome
    # Its child reservations, by tool call id (code-point order): (call, child or None, released).
    children: tuple[tuple[str, str | None, bool], ...] = ()
    attempt_id: str | None = None  # the latest claim's
    # What a recovering producer needs besides the counts (fresh copies, as
    # ``SubmissionRecord`` has them): each approval decision by call (None:
    # undecided), each unknown call's resolution (None: open), the awaited
    # child calls not yet released (code-point order), the parent link, and
    # when it was made ready.
    approvals: object = None
    unknown_calls: object = None
    children_pending: tuple[str, ...] = ()
    parent: ParentLink | None = None
    ready_at_ms: int | None = None
    # Its lifecycle state (``states.py``: the peer's names), and each
    # attached child as ``(call, child, child's state, child's outcome)`` in
    # code-point order of the calls (state None: the ledger no longer holds
    # the child; outcome None until it settled).
    state: str | None = None
    child_states: tuple[tuple[str, str, str | None, str | None], ...] = ()
    # Its admission group and opaque admission metadata (``admit``), if any.
    admission_group: str | None = None
    metadata: object = None


@attrs.frozen
class RecoverySnapshot:
    """``epoch`` is the conversation's current producer epoch (0 before the
    first claim); ``submissions`` are its nonterminal ones by queue_seq."""

    conversation_id: str
    epoch: int
    submissions: tuple[SubmissionOwnership, ...]


# --- errors -----------------------------------------------------------------
#
# Structured fields as attributes, a ``name`` matching the specification, and
# ``__reduce__`` so they survive pickling (sweep workers ship failures across
# processes).


class LedgerError(Exception):
    """Base class of the Submission Ledger's typed errors. ``operation``:
    the port operation that failed, where an error names it (None
    otherwise); ``message``: the error's text."""

    name = "LedgerError"
    operation: str | None = None

    @property
    def message(self) -> str:
        return str(self)


class UnknownSubmission(LedgerError):
    name = "UnknownSubmission"

    def __init__(self, submission_id: str) -> None:
        self.submission_id = submission_id
        super().__init__(f"no submission {submission_id!r}")

    def __reduce__(self):
        return (type(self), (self.submission_id,))


class AdmissionConflict(LedgerError):
    """The idempotency key was already used for a different admission:
    ``what`` names the difference (``input``: another input, the digests
    differ; ``parent``: the same input under another parent link, or one
    with a parent and one without; ``admission_group`` / ``metadata``:
    the same input and link under another admission group / admission
    metadata, or one where there was none, or none where there was one;
    the digests are then the input's)."""

    name = "AdmissionConflict"

    def __init__(
        self, conversation_id: str, principal_id: str, idempotency_key: str,
        existing_digest: str, attempted_digest: str, what: str = "input",
    ) -> None:
        self.conversation_id = conversation_id
        self.principal_id = principal_id
        self.idempotency_key = idempotency_key
        self.existing_digest = existing_digest
        self.attempted_digest = attempted_digest
        self.what = what
        detail = (f"admitted input digest {existing_digest}, attempted {attempted_digest}" if what == "input"
                  else f"admitted under another {what}")
        super().__init__(
            f"admission conflict on key {idempotency_key!r} (conversation {conversation_id!r}, "
            f"principal {principal_id!r}): {detail}"
        )

    def __reduce__(self):
        return (type(self), (
            self.conversation_id, self.principal_id, self.idempotency_key,
            self.existing_digest, self.attempted_digest, self.what,
        ))


class AdmissionPolicyError(LedgerError):
    """An admission policy refused a fresh admission (the peer's
    ``AdmissionPolicyError{reason, code}``); nothing was written.
    ``reason``: ``"occupied"`` (its admission group holds an unsettled
    submission, ``code="group-occupied"``), ``"refused"`` (its admission
    fence stands at another revision: ``code="stale-revision"`` for an
    older one, ``"unknown-revision"`` for a newer one; or a fence moved
    back: ``"revision-regressed"``) or ``"unavailable"`` (the ledger holds
    no such fence, ``code="no-fence"``). An exact replay of an earlier
    admission is never refused: it is resolved first."""

    name = "AdmissionPolicyError"

    def __init__(self, reason: str, code: str, detail: str = "") -> None:
        self.reason = reason
        self.code = code
        self.detail = detail
        super().__init__(f"admission refused ({reason}, {code})" + (f": {detail}" if detail else ""))

    def __reduce__(self):
        return (type(self), (self.reason, self.code, self.detail))


class OwnershipLost(LedgerError):
    """The token is stale: a later claim holds a higher epoch, the owner
    released, or the lease lapsed. Nothing was written. ``actual_epoch`` is
    the submission's current epoch (None if never claimed)."""

    name = "OwnershipLost"

    def __init__(self, submission_id: str, actual_epoch: int | None, detail: str = "") -> None:
        self.submission_id = submission_id
        self.actual_epoch = actual_epoch
        self.detail = detail
        super().__init__(
            f"ownership of {submission_id!r} lost (current epoch {actual_epoch!r})"
            + (f": {detail}" if detail else "")
        )

    def __reduce__(self):
        return (type(self), (self.submission_id, self.actual_epoch, self.detail))


class SettlementConflict(LedgerError):
    """Reserve with a record other than the reserved one (both digests), a
    write (``suspend``, ``mark_unknown``, ``request_abort``,
    ``decide_approval``, ``resolve_unknown``) on a settled submission
    (no digests), or finalize of a submission with no reservation (all
    None). ``existing_outcome``: the reserved or settled outcome, if any."""

    name = "SettlementConflict"

    def __init__(self, submission_id: str, existing_digest: str | None, attempted_digest: str | None,
                 existing_outcome: str | None = None) -> None:
        self.submission_id = submission_id
        self.existing_digest = existing_digest
        self.attempted_digest = attempted_digest
        self.existing_outcome = existing_outcome
        if existing_digest is not None:
            message = f"reserved record digest {existing_digest}, attempted {attempted_digest}"
        elif existing_outcome is not None:
            message = f"already settled {existing_outcome!r}"
        else:
            message = "no settlement is reserved"
        super().__init__(f"settlement conflict on {submission_id!r}: {message}")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.existing_digest, self.attempted_digest, self.existing_outcome))


class AbortConflict(LedgerError):
    """Abort requested for a submission already terminalizing
    (``settling``: its owner reserved a settlement record, which wins), with
    no earlier abort intent to replay (a settled one is
    ``SettlementConflict``). ``outcome`` names the reserved outcome. Nothing
    was written."""

    name = "AbortConflict"

    def __init__(self, submission_id: str, outcome: str, settling: bool = False) -> None:
        self.submission_id = submission_id
        self.outcome = outcome
        self.settling = settling
        state = "already settling" if settling else "already settled"
        super().__init__(f"cannot abort {submission_id!r}: {state} as {outcome!r}")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.outcome, self.settling))


class AbortRequested(LedgerError):
    """A reservation of a non-aborted settlement record for a submission whose
    durable abort intent exists: the intent is the authority, the owner must
    settle ``aborted``. Nothing was written."""

    name = "AbortRequested"

    def __init__(self, submission_id: str, author: str, reason: str, attempted_outcome: str) -> None:
        self.submission_id = submission_id
        self.author = author
        self.reason = reason
        self.attempted_outcome = attempted_outcome
        super().__init__(
            f"cannot settle {submission_id!r} as {attempted_outcome!r}: abort requested by {author!r} ({reason})"
        )

    def __reduce__(self):
        return (type(self), (self.submission_id, self.author, self.reason, self.attempted_outcome))


class InvalidSettlement(LedgerError):
    """A settlement record violating the family shape rules (persistence
    §10), refused before anything is written, or a stored one found corrupt
    at finalize."""

    name = "InvalidSettlement"

    def __init__(self, submission_id: str, reason: str) -> None:
        self.submission_id = submission_id
        self.reason = reason
        super().__init__(f"invalid settlement record for {submission_id!r}: {reason}")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.reason))


class PurgeRefused(LedgerError):
    """``purge_conversation`` on a conversation with unsettled work: only
    settled history is ever archived and deleted (retention)."""

    name = "PurgeRefused"

    def __init__(self, conversation_id: str, open_submissions: int) -> None:
        self.conversation_id = conversation_id
        self.open_submissions = open_submissions
        super().__init__(f"cannot purge {conversation_id!r}: {open_submissions} submission(s) not settled")

    def __reduce__(self):
        return (type(self), (self.conversation_id, self.open_submissions))


# --- storage failures (persistence §9.2, §10, §11) ----------------------------
#
# What a store's own storage failed at, typed on the ledger port: the
# adapters never let a bare ``SqliteWriteContention``, ``sqlite3.Error`` or
# ``CanonicalDecodeError`` cross it.


class LedgerStoreError(LedgerError):
    """The ledger's storage failed ``operation``; ``cause`` is the
    underlying error (e.g. ``SqliteWriteContention``). Retryable exactly
    when the cause is (a refused write lock: nothing was written)."""

    name = "LedgerStoreError"

    def __init__(self, operation: str, cause: BaseException | None = None, detail: str = "") -> None:
        self.operation = operation
        self.cause = cause
        self.detail = detail
        shown = detail or (f"{getattr(type(cause), 'name', type(cause).__name__)}: {cause}" if cause else "")
        super().__init__(f"ledger storage failed during {operation}" + (f": {shown}" if shown else ""))

    @property
    def retryable(self) -> bool:
        return self.cause is not None and getattr(self.cause, "retryable", False) is True

    def __reduce__(self):
        return (type(self), (self.operation, self.cause, self.detail))


class CorruptSubmission(LedgerError):
    """A stored submission row that does not decode (§10): JSON that is not
    canonical JSON, a column of the wrong type, an empty receipt. Nothing
    was written. ``operation``: the port operation it failed, when the
    failure is the whole call's (a scan meeting a row whose control fields
    it answers are unreadable)."""

    name = "CorruptSubmission"

    def __init__(self, submission_id: object, detail: str, operation: str | None = None) -> None:
        self.submission_id = submission_id
        self.detail = detail
        self.operation = operation
        during = f" ({operation})" if operation is not None else ""
        super().__init__(f"stored submission {submission_id!r} is corrupt{during}: {detail}")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.detail, self.operation))


class UnsupportedLedgerVersion(LedgerError):
    """A stored submission row of a schema version this build does not
    support (§11: no migration during development). Nothing was written."""

    name = "UnsupportedLedgerVersion"

    def __init__(self, submission_id: object, schema_version: object) -> None:
        self.submission_id = submission_id
        self.schema_version = schema_version
        super().__init__(
            f"stored submission {submission_id!r} has unsupported schema version {schema_version!r} "
            f"(supported: {SCHEMA_VERSION})"
        )

    def __reduce__(self):
        return (type(self), (self.submission_id, self.schema_version))


_RECORD_FIELDS = frozenset(attrs.fields_dict(SubmissionRecord)) | {"settled", "unknown_open", "approvals_pending",
                                                                   "children_awaited"}

# What a scan row leaves out: the payloads (the peer's scan rows carry no
# ``inputPayload`` and no worker or message admission).
SCAN_OMITS = ("input", "metadata")


class _ScanRowReads:
    settled = SubmissionRecord.settled
    unknown_open = SubmissionRecord.unknown_open
    approvals_pending = SubmissionRecord.approvals_pending
    children_awaited = SubmissionRecord.children_awaited


# ``scan_nonterminal``'s row: a ``SubmissionRecord``'s control fields, in
# its field order, without the input and the admission metadata (a by-id
# ``get`` carries them).
NonterminalSubmission = attrs.make_class(
    "NonterminalSubmission",
    {field.name: attrs.field(default=field.default) for field in attrs.fields(SubmissionRecord)
     if field.name not in SCAN_OMITS},
    bases=(_ScanRowReads,), frozen=True, slots=True)
NonterminalSubmission.__module__ = __name__
NonterminalSubmission.__doc__ = (
    "One unsettled submission as ``scan_nonterminal`` answers it: every field of its ``SubmissionRecord`` but "
    "the input and the admission metadata (control fields only, the peer's scan rows).")


@attrs.frozen
class UnreadableSubmission:
    """A nonterminal row ``scan_nonterminal`` found but could not decode:
    its identity (as stored) so the conversation still shows work, and the
    typed ``error`` (``CorruptSubmission`` / ``UnsupportedLedgerVersion``)
    that reading any other ``SubmissionRecord`` field raises."""

    submission_id: object
    conversation_id: object
    principal_id: object
    queue_seq: object
    error: LedgerError = attrs.field(eq=False)

    def __getattr__(self, name: str):
        # Only reached for attributes the class does not have.
        if name in _RECORD_FIELDS:
            raise self.error
        raise AttributeError(name)


class TransitionRefused(LedgerError):
    """An operation the submission's state does not allow (``states.py``),
    where no more specific error applies. Nothing was written."""

    name = "TransitionRefused"

    def __init__(self, submission_id: str, state: str, operation: str) -> None:
        self.submission_id = submission_id
        self.state = state
        self.operation = operation
        super().__init__(f"{operation} refused for {submission_id!r}: it is {state}")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.state, self.operation))


class UnknownToolCall(LedgerError):
    """A resolution of a tool call its submission never marked unknown."""

    name = "UnknownToolCall"

    def __init__(self, submission_id: str, tool_call_id: str) -> None:
        self.submission_id = submission_id
        self.tool_call_id = tool_call_id
        super().__init__(f"{submission_id!r} has no unknown tool call {tool_call_id!r}")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.tool_call_id))


class ResolutionConflict(LedgerError):
    """A resolution other than the first one of the same unknown tool call
    (``attempted`` ``"unknown"``: marking an already resolved call unknown)."""

    name = "ResolutionConflict"

    def __init__(self, submission_id: str, tool_call_id: str, existing: str, attempted: str) -> None:
        self.submission_id = submission_id
        self.tool_call_id = tool_call_id
        self.existing = existing
        self.attempted = attempted
        super().__init__(f"tool call {tool_call_id!r} of {submission_id!r} was resolved {existing!r}, "
                         f"attempted {attempted!r}")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.tool_call_id, self.existing, self.attempted))


class UnknownApproval(LedgerError):
    """A decision on a tool call its submission never suspended on."""

    name = "UnknownApproval"

    def __init__(self, submission_id: str, tool_call_id: str) -> None:
        self.submission_id = submission_id
        self.tool_call_id = tool_call_id
        super().__init__(f"{submission_id!r} never waited for an approval of {tool_call_id!r}")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.tool_call_id))


class ApprovalConflict(LedgerError):
    """A decision contrary to the first one on the same tool call."""

    name = "ApprovalConflict"

    def __init__(self, submission_id: str, tool_call_id: str, existing: str, attempted: str) -> None:
        self.submission_id = submission_id
        self.tool_call_id = tool_call_id
        self.existing = existing
        self.attempted = attempted
        super().__init__(f"approval of {tool_call_id!r} for {submission_id!r} was decided {existing!r}, "
                         f"attempted {attempted!r}")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.tool_call_id, self.existing, self.attempted))


class JoinedToHost(LedgerError):
    """An abort (or other lone settlement) of a submission joining or joined
    to a host: it settles only through its host's settlement."""

    name = "JoinedToHost"

    def __init__(self, submission_id: str, host_submission_id: str) -> None:
        self.submission_id = submission_id
        self.host_submission_id = host_submission_id
        super().__init__(f"{submission_id!r} is joined to {host_submission_id!r}: it settles through its host")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.host_submission_id))


class ChildReservationConflict(LedgerError):
    """A child reservation other than the existing one at the same tool call
    (``what``: ``allocation``, ``child`` or ``accounting`` differs)."""

    name = "ChildReservationConflict"

    def __init__(self, submission_id: str, tool_call_id: str, what: str) -> None:
        self.submission_id = submission_id
        self.tool_call_id = tool_call_id
        self.what = what
        super().__init__(f"child reservation at {tool_call_id!r} of {submission_id!r}: another {what} exists")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.tool_call_id, self.what))


class UnknownChildReservation(LedgerError):
    """An attach or release of a child reservation that was never made."""

    name = "UnknownChildReservation"

    def __init__(self, submission_id: str, tool_call_id: str) -> None:
        self.submission_id = submission_id
        self.tool_call_id = tool_call_id
        super().__init__(f"{submission_id!r} reserved no child budget at {tool_call_id!r}")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.tool_call_id))


class InputMarkerConflict(LedgerError):
    """``mark_input_applied`` at a log position other than the one already
    marked: the canonical input is at ``existing_record_id``/``existing_seq``.
    Nothing was written."""

    name = "InputMarkerConflict"

    def __init__(self, submission_id: str, existing_record_id: str, existing_seq: int, attempted_record_id: str,
                 attempted_seq: int) -> None:
        self.submission_id = submission_id
        self.existing_record_id = existing_record_id
        self.existing_seq = existing_seq
        self.attempted_record_id = attempted_record_id
        self.attempted_seq = attempted_seq
        super().__init__(f"the input of {submission_id!r} is marked at {existing_record_id!r}/{existing_seq}, "
                         f"attempted {attempted_record_id!r}/{attempted_seq}")

    def __reduce__(self):
        return (type(self), (self.submission_id, self.existing_record_id, self.existing_seq,
                             self.attempted_record_id, self.attempted_seq))
