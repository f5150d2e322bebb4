"""Typed trace events: one type per event kind, shared by its writer and its readers.

The trace itself holds plain dicts (``sim.trace``: marshal-hashed on the hot
path, streamed as JSON lines), so an event type is a *schema with a
constructor*, never an object that lives per event:

- ``kind``: the event's kind string (``LogAppend.kind == "log.append"``);
- each field is a class attribute holding the field's name
  (``LogAppend.epoch == "epoch"``; the annotation documents the value).
  Readers index the trace's dict with it — ``fields[LogAppend.epoch]`` — so
  a field renamed or removed here breaks every reader with an
  ``AttributeError`` (at import for a checker's ``kinds``; for ``on_event``
  in the first test that delivers the event, and on every branch in
  ``tests/test_events.py``, which checks each ``Type.name`` an invariant
  spells against the type), instead of a ``KeyError`` deep in a year-long run
  or, worse, a ``.get`` that silently reads None. A field whose name the
  type itself uses (``kind``) is declared with a trailing underscore
  (``Fault.kind_ == "kind"``).

Two families:

``PortEvent`` — a port call as ``faults.ports.BoundPort`` traces it, written
only by ``faults.describe`` through the type: ``build(**fields)`` returns the
trace's dict with exactly ``fields`` in declared order (keyword-only: a
missing, extra or misspelled field is a ``TypeError`` at the describer);
given the result fields as well (all of them, or it is a ``TypeError`` too)
it appends the result group, which is there when the call returned
something; ``add_result(fields, **result)`` appends it to a dict already
built. A call that raised is traced as ``fields`` plus ``error`` and
``detail``. These builders are generated once per type (as
``attrs``/``namedtuple`` generate ``__init__``) and build the dict directly:
no intermediate object, a call or two more than the dict literal the
describers used to write (a few hundred nanoseconds a port call).

``ProbeEvent`` — an event the model's probe, the world or a scenario emits
(``ds.saved``, ``recovery.read``, ``fault``, ``deploy``, ...). Its writer is
model or harness code, so here it is a schema only: required fields and
independently optional ones. Invariants read them through the type all the
same, and ``tests/test_events.py`` checks every traced event of both families
against its type.

Why not attrs classes or NamedTuples per event: an instance per event (a
year emits millions) would be built only to be converted into the dict the
digest and the JSON stream need, and readers would pay a conversion per
checker per event; the fields would still have to be plain data in a fixed
order. The schema-with-generated-constructor keeps the hot path a dict
literal and still makes the field names a single definition.
"""
from __future__ import annotations

import keyword
from typing import Any, Callable, ClassVar

# The fields a failed port call carries after its own (``faults.ports``).
ERROR = "error"
DETAIL = "detail"
ERROR_FIELDS = (ERROR, DETAIL)


class _Marker:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


# ``name: T = RESULT`` (a port event): in the result group, present together
# iff the call returned something. ``name: T = OPTIONAL`` (a probe event): may
# be absent, independently of the others.
RESULT: Any = _Marker("RESULT")
OPTIONAL: Any = _Marker("OPTIONAL")
# A builder's default for a result field: not given (the call returned nothing).
ABSENT: Any = _Marker("ABSENT")


def _declared(cls: type, allowed: tuple[Any, ...]) -> list[tuple[str, Any]]:
    """(field name, marker or None) in declaration order; sets the name attributes."""
    reserved = {name for base in cls.__mro__[1:] for name in (*vars(base), *vars(base).get("__annotations__", ()))}
    out = []
    for attr in cls.__dict__.get("__annotations__", {}):
        if attr.startswith("_") or attr in reserved:
            raise TypeError(f"{cls.__name__}: field {attr!r} would shadow the type's own attribute; "
                            f"declare it as {attr}_")
        marker = cls.__dict__.get(attr)
        if marker is not None and marker not in allowed:
            raise TypeError(f"{cls.__name__}.{attr}: a field's default can only be one of {allowed}")
        name = attr[:-1] if attr.endswith("_") else attr
        if not name.isidentifier() or keyword.iskeyword(name):
            raise TypeError(f"{cls.__name__}: {name!r} cannot be a keyword argument")
        setattr(cls, attr, name)
        out.append((name, marker))
    if len({name for name, _ in out}) != len(out):
        raise TypeError(f"{cls.__name__}: a field is declared twice")
    return out


class TraceEvent:
    """Base of every event type: its kind and its fields' names."""

    kind: ClassVar[str]
    fields: ClassVar[tuple[str, ...]]  # always present

    _by_kind: ClassVar[dict[str, type[TraceEvent]]] = {}

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{cls.__name__} is a schema: build the trace's dict with {cls.__name__}.build(...)")

    @classmethod
    def _register(cls) -> None:
        kind = cls.__dict__.get("kind")
        if not isinstance(kind, str) or not kind:
            raise TypeError(f"{cls.__name__} needs its kind string")
        known = TraceEvent._by_kind.get(kind)
        # The same class defined again (a module reload) replaces itself; another one is a clash.
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(f"{cls.__name__}: kind {kind!r} is already {known.__name__}")
        TraceEvent._by_kind[kind] = cls


class PortEvent(TraceEvent):
    """A traced port call: ``fields``, then the result group or ``error``/``detail``."""

    result_fields: ClassVar[tuple[str, ...]]
    error: ClassVar[str] = ERROR
    detail: ClassVar[str] = DETAIL
    build: ClassVar[Callable[..., dict]]
    add_result: ClassVar[Callable[..., dict]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = _declared(cls, (RESULT,))
        fields = tuple(name for name, marker in declared if marker is None)
        result = tuple(name for name, marker in declared if marker is RESULT)
        if [name for name, _ in declared] != [*fields, *result]:
            raise TypeError(f"{cls.__name__}: result fields come after every other field")
        if set(fields + result) & set(ERROR_FIELDS):
            raise TypeError(f"{cls.__name__}: {ERROR_FIELDS} are the failed call's fields")
        cls.fields, cls.result_fields = fields, result
        # Plain functions, not staticmethods: read off the class they are the
        # functions themselves (no instance ever exists), and the call is cheaper.
        cls.build, cls.add_result = _generate(cls, fields, result)
        cls._register()

    @classmethod
    def check(cls, fields: dict) -> str | None:
        """None if ``fields`` is exactly one of the event's shapes, in order; else what is wrong."""
        keys = tuple(fields)
        shapes = (cls.fields + cls.result_fields, cls.fields, cls.fields + ERROR_FIELDS)
        if keys in shapes:
            return None
        return f"{cls.kind}: fields {keys} are none of {shapes}"


class ProbeEvent(TraceEvent):
    """An event emitted outside the ports (model probe, world, scenario): a schema."""

    optional_fields: ClassVar[tuple[str, ...]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = _declared(cls, (OPTIONAL,))
        cls.fields = tuple(name for name, marker in declared if marker is None)
        cls.optional_fields = tuple(name for name, marker in declared if marker is OPTIONAL)
        cls._register()

    @classmethod
    def check(cls, fields: dict) -> str | None:
        missing = [name for name in cls.fields if name not in fields]
        extra = [name for name in fields if name not in cls.fields and name not in cls.optional_fields]
        if missing or extra:
            return f"{cls.kind}: missing {missing}, undeclared {extra}"
        return None


def _generate(cls: type, fields: tuple[str, ...], result: tuple[str, ...]) -> tuple[Callable, Callable]:
    """The type's two builders, generated (like ``attrs`` and ``namedtuple`` do
    their ``__init__``) so the hot path is a plain call that returns a literal:

    ``build(*, a, b, r=ABSENT, s=ABSENT)``: ``{"a": a, "b": b}``, or with the
    result group ``{"a": a, "b": b, "r": r, "s": s}`` (all of it or none);
    ``add_result(fields, *, r, s)``: the result group appended to ``fields``.
    """
    lines = []
    call = ", ".join(f"{n!r}: {n}" for n in fields)
    if result:
        params = ", ".join([*fields, *(f"{n}=_ABSENT" for n in result)])
        first, rest = result[0], result[1:]
        lines += [f"def build(*, {params}):", f"    if {first} is _ABSENT:"]
        if rest:
            lines += [f"        if {' or '.join(f'{n} is not _ABSENT' for n in rest)}:", "            _partial()"]
        lines += [f"        return {{{call}}}"]
        if rest:
            lines += [f"    if {' or '.join(f'{n} is _ABSENT' for n in rest)}:", "        _partial()"]
        lines += ["    return {" + ", ".join(f"{n!r}: {n}" for n in (*fields, *result)) + "}"]
        lines += [f"def add_result(fields, *, {', '.join(result)}):"]
        lines += [f"    fields[{n!r}] = {n}" for n in result] + ["    return fields"]
    else:
        lines += [f"def build(*, {', '.join(fields)}):" if fields else "def build():", f"    return {{{call}}}"]
        lines += ["def add_result(fields):", "    return fields"]

    def partial() -> None:
        raise TypeError(f"{cls.__name__}: the result fields {result} go together, all of them or none")

    namespace: dict[str, Any] = {}
    code = compile("\n".join(lines) + "\n", f"<{cls.__name__} builders>", "exec")
    exec(code, {"_ABSENT": ABSENT, "_partial": partial}, namespace)  # noqa: S102 - our own field names,
    # none of which starts with "_" (``_declared``), so none shadows these two
    for what in ("build", "add_result"):
        fn = namespace[what]
        fn.__qualname__ = f"{cls.__name__}.{what}"
        fn.__module__ = cls.__module__
        fn.__doc__ = f"The trace fields of a {cls.kind!r} event."
    return namespace["build"], namespace["add_result"]


def event_type(kind: str) -> type[TraceEvent] | None:
    return TraceEvent._by_kind.get(kind)


def port_events() -> dict[str, type[PortEvent]]:
    return {k: t for k, t in TraceEvent._by_kind.items() if issubclass(t, PortEvent)}


def probe_events() -> dict[str, type[ProbeEvent]]:
    return {k: t for k, t in TraceEvent._by_kind.items() if issubclass(t, ProbeEvent)}


# =============================================================================
# Port events (written by faults.describe)
# =============================================================================

# -- durable state (``ds``) ----------------------------------------------------

class DsLoad(PortEvent):
    kind = "ds.load"
    key: str
    found: bool
    revision: int = RESULT
    version: int = RESULT
    payload: Any = RESULT


class DsSave(PortEvent):
    kind = "ds.save"
    key: str
    expected: int  # the expected revision
    version: int  # the written contract version
    payload: Any
    revision: int = RESULT  # the committed revision


class DsClear(PortEvent):
    kind = "ds.clear"
    key: str


# -- kernel execution store (``kernel``) ---------------------------------------

class KernelStart(PortEvent):
    kind = "kernel.start_execution"
    run: str
    schedule: str | None
    occurrence_ms: int | None
    flow_version: int
    input: Any
    created: bool = RESULT
    retired: bool = RESULT


class KernelAppendStep(PortEvent):
    kind = "kernel.append_step"
    run: str
    seq: int
    step: str
    step_kind: str
    output: Any


class KernelAppendSteps(PortEvent):
    kind = "kernel.append_steps"
    run: str
    first_seq: int
    steps: tuple


class KernelLoadSteps(PortEvent):
    kind = "kernel.load_steps"
    run: str
    steps: int = RESULT  # how many


class KernelLoadExecution(PortEvent):
    kind = "kernel.load_execution"
    run: str


class KernelParkExecution(PortEvent):
    kind = "kernel.park_execution"
    run: str


class KernelFinish(PortEvent):
    kind = "kernel.finish_execution"
    run: str
    status: str
    output: Any
    first_seq: int | None
    steps: tuple
    final_status: str = RESULT


class KernelLiveExecutions(PortEvent):
    kind = "kernel.live_executions"
    schedule: str
    live: tuple = RESULT  # run ids


class KernelHighWater(PortEvent):
    kind = "kernel.schedule_high_water_ms"
    schedule: str
    high_water_ms: int | None


class KernelPurgeFinished(PortEvent):
    kind = "kernel.purge_finished"
    before_ms: int
    purged: int | None


# -- submission ledger (``ledger``) ---------------------------------------------

class LedgerAdmit(PortEvent):
    kind = "ledger.admit"
    conversation: str
    principal: str
    key: str  # the idempotency key
    admitted_ms: int  # the caller's instant (a slow call commits later)
    parent: tuple | None  # (parent submission, its tool call), or None
    group: str | None  # the admission group, or None
    fence: tuple | None  # the admission fence (policy, key, revision), or None
    metadata: object  # the opaque admission metadata, or None
    submission: str = RESULT
    queue_seq: int = RESULT
    replayed: bool = RESULT


class LedgerSetAdmissionFence(PortEvent):
    kind = "ledger.set_admission_fence"
    policy: str
    key: str
    revision: int
    replayed: bool = RESULT


class LedgerMarkReady(PortEvent):
    kind = "ledger.mark_ready"
    submission: str
    ready_ms: int  # the caller's instant
    ready_at_ms: int = RESULT  # when it first became ready
    replayed: bool = RESULT


class LedgerClaim(PortEvent):
    kind = "ledger.claim"
    conversation: str
    owner: str
    # A cooperative handoff's (producer epoch, deferred ids, handed-to id); None: an ordinary claim.
    handoff: Any
    submission: str = RESULT  # the result group is absent when nothing was claimable
    epoch: int = RESULT
    lease_expires_ms: int = RESULT
    attempt: str = RESULT  # the claim's attempt id


class LedgerRenewOwnership(PortEvent):
    kind = "ledger.renew_ownership"
    submission: str  # the token's
    owner: str
    epoch: int


class LedgerReleaseOwnership(PortEvent):
    kind = "ledger.release_ownership"
    submission: str
    owner: str
    epoch: int


class LedgerMarkInputApplied(PortEvent):
    kind = "ledger.mark_input_applied"
    submission: str
    owner: str
    epoch: int
    record_id: str  # the input record's position in the log
    seq: int
    replayed: bool = RESULT


class LedgerRequestAbort(PortEvent):
    kind = "ledger.request_abort"
    submission: str
    author: str
    requested_ms: int  # the caller's instant
    replayed: bool = RESULT  # an intent already existed: this is the first one
    settled_at_ms: int | None = RESULT  # the intent settled a never-claimed submission at once


class LedgerMarkUnknown(PortEvent):
    kind = "ledger.mark_unknown"
    submission: str  # the token's
    owner: str
    epoch: int
    call: str  # the tool call whose outcome is unknown
    replayed: bool = RESULT


class LedgerResolveUnknown(PortEvent):
    kind = "ledger.resolve_unknown"
    submission: str
    call: str
    resolution: str
    replayed: bool = RESULT
    open_calls: int = RESULT  # unknown calls still open after it


class LedgerSuspend(PortEvent):
    kind = "ledger.suspend"
    submission: str  # the token's
    owner: str
    epoch: int
    calls: tuple  # the tool calls whose approvals it waits for
    children: tuple  # the tool calls whose child's release it waits for
    pending: tuple = RESULT  # of the approvals, the undecided ones
    children_pending: tuple = RESULT  # of the children, the unreleased ones
    resumed: bool = RESULT
    replayed: bool = RESULT


class LedgerDecideApproval(PortEvent):
    kind = "ledger.decide_approval"
    submission: str
    call: str
    decision: str
    replayed: bool = RESULT
    pending: int = RESULT  # approvals undecided + awaited children unreleased after it (0: resumed)


class LedgerBeginJoin(PortEvent):
    kind = "ledger.begin_join"
    submission: str  # the host (the token's)
    owner: str
    epoch: int
    limit: int
    followers: tuple = RESULT  # the ids this call took (now joining it), in queue order
    replayed: bool = RESULT


class LedgerMarkJoined(PortEvent):
    kind = "ledger.mark_joined"
    host: str  # the token's submission
    owner: str
    epoch: int
    submission: str  # the follower
    record_id: str
    seq: int
    replayed: bool = RESULT


class LedgerRevertJoin(PortEvent):
    kind = "ledger.revert_join"
    host: str
    owner: str
    epoch: int
    submission: str


class LedgerReserveChild(PortEvent):
    kind = "ledger.reserve_child"
    submission: str  # the parent (the token's)
    owner: str
    epoch: int
    call: str
    allocation_digest: str = RESULT
    replayed: bool = RESULT


class LedgerAttachChild(PortEvent):
    kind = "ledger.attach_child"
    submission: str
    owner: str
    epoch: int
    call: str
    child: str
    replayed: bool = RESULT


class LedgerReleaseChild(PortEvent):
    kind = "ledger.release_child"
    submission: str  # the parent
    call: str
    released_at_ms: int = RESULT
    replayed: bool = RESULT
    awaited: bool = RESULT  # a suspension of the parent waits for it
    pending: int = RESULT  # what the parent still awaits after it (0 with awaited: resumed)


class LedgerReserveSettlement(PortEvent):
    kind = "ledger.reserve_settlement"
    submission: str
    owner: str
    epoch: int
    record: Any
    digest: str = RESULT  # the reserved record's
    replayed: bool = RESULT


class LedgerFinalizeSettlement(PortEvent):
    kind = "ledger.finalize_settlement"
    submission: str
    outcome: str = RESULT
    digest: str = RESULT
    settled_at_ms: int = RESULT
    settlement_id: str = RESULT
    replayed: bool = RESULT


class LedgerGet(PortEvent):
    kind = "ledger.get"
    submission: str


class LedgerScanNonterminal(PortEvent):
    kind = "ledger.scan_nonterminal"
    principal: str | None  # only this principal's rows (None: every one)
    nonterminal: tuple = RESULT  # submission ids


class LedgerLoadRecoverySnapshot(PortEvent):
    kind = "ledger.load_recovery_snapshot"
    conversation: str
    epoch: int = RESULT  # the conversation's lane epoch
    open: tuple = RESULT  # the open submissions' ids, in queue order


class LedgerGetByIdempotencyKey(PortEvent):
    kind = "ledger.get_by_idempotency_key"
    conversation: str
    principal: str
    key: str
    submission: str = RESULT
    outcome: str | None = RESULT
    ready: bool = RESULT
    input_applied: bool = RESULT


class LedgerPurgeConversation(PortEvent):
    kind = "ledger.purge_conversation"
    conversation: str
    purged: int | None


# -- conversation log (``log``) ---------------------------------------------------

class LogMaterialize(PortEvent):
    kind = "log.materialize"
    conversation: str
    producer: str
    epoch: int


class LogAppend(PortEvent):
    kind = "log.append"
    conversation: str
    batch: str
    producer: str
    epoch: int
    expected_tail_seq: int
    record_ids: tuple
    envelopes: tuple  # each record's envelope JSON: family, payload, createdAt, ...
    sizes: tuple  # each envelope's canonical JSON size in UTF-8 bytes (of the text the append encoded)
    first_seq: int = RESULT
    last_seq: int = RESULT
    tail_digest: str = RESULT
    batch_digest: str = RESULT  # the trace's digest takes it in place of record_ids, envelopes, sizes
    replayed: bool = RESULT


# The trace's digest takes a committed append's batch digest in place of its
# envelopes, their record ids and sizes (``sim.trace.Trace.cover``): the
# digest already covers them, so they are hashed once, by the store, not
# again by the trace. A refused append has no batch digest and is hashed
# whole.
COVERED_FIELDS = {LogAppend.kind: ((LogAppend.record_ids, LogAppend.envelopes, LogAppend.sizes),
                                   LogAppend.batch_digest),
                  # A refused recovery read is hashed by its error's name, as
                  # before refusals named their reason: the reason, the record
                  # expected and the page are for the oracles, the JSON
                  # stream and the excerpts, so a run keeps its digest.
                  "recovery.failed": (("conversation", "reason", "expected_seq", "page"), "error")}


class LogInspectTail(PortEvent):
    kind = "log.inspect_tail"
    conversation: str
    tail_seq: int = RESULT
    tail_digest: str = RESULT
    epoch: int = RESULT


class LogRead(PortEvent):
    kind = "log.read"
    conversation: str
    after_seq: int
    limit: int
    seqs: tuple = RESULT


class LogObserve(PortEvent):
    """An observation, drained whole by the fault layer (``faults.ports``):
    whether it resumed from an offset (``from_offset``; the offset itself is
    the adapter's opaque spelling, so the trace of a memory run and of a
    SQLite run stays one) and the seqs it answered."""
    kind = "log.observe"
    conversation: str
    from_offset: bool
    seqs: tuple = RESULT


class LogLookupBatch(PortEvent):
    kind = "log.lookup_batch"
    conversation: str
    batch: str
    first_seq: int = RESULT
    last_seq: int = RESULT


class LogDeleteConversation(PortEvent):
    kind = "log.delete_conversation"
    conversation: str
    deleted: bool | None


class LogDigestAt(PortEvent):
    kind = "log.digest_at"
    conversation: str
    seq: int
    digest: str | None


# -- checkpoints (``checkpoints``) -----------------------------------------------

class CheckpointSave(PortEvent):
    kind = "checkpoints.save"
    conversation: str
    covered_seq: int
    tail_digest: str
    snapshot: Any


class CheckpointLoadLatest(PortEvent):
    kind = "checkpoints.load_latest"
    conversation: str
    at_or_before_seq: int
    covered_seq: int = RESULT
    tail_digest: str = RESULT


# -- schedule cursors and the run archive (``schedules``) --------------------------

class SchedulesCursor(PortEvent):
    kind = "schedules.cursor"
    schedule: str
    high_water_ms: int | None = RESULT
    archived_through_ms: int | None = RESULT
    archived_runs: int = RESULT


class SchedulesAdvance(PortEvent):
    kind = "schedules.advance"
    schedule: str
    occurrence_ms: int


class SchedulesRetire(PortEvent):
    kind = "schedules.retire"
    schedule: str
    occurrence_ms: int
    run: str | None
    summary: Any
    hold: bool
    retired: bool | None


class SchedulesRelease(PortEvent):
    kind = "schedules.release"
    schedule: str
    run: str
    summary: Any
    released: bool | None


# -- content store (``content``) ----------------------------------------------------

class ContentPut(PortEvent):
    kind = "content.put"
    size: int
    ref: str | None


class ContentGet(PortEvent):
    kind = "content.get"
    ref: str


class ContentHas(PortEvent):
    kind = "content.has"
    ref: str
    found: bool | None


class ContentDelete(PortEvent):
    kind = "content.delete"
    ref: str
    deleted: bool | None


# -- pin index (``pins``) ---------------------------------------------------------

class PinRecordBlob(PortEvent):
    kind = "pins.record_blob"
    ref: str
    size: int
    stored_at_ms: int


class PinPin(PortEvent):
    kind = "pins.pin"
    ref: str
    holder: str
    new: bool | None


class PinUnpin(PortEvent):
    kind = "pins.unpin"
    ref: str
    holder: str
    removed: bool | None


class PinIsPinned(PortEvent):
    kind = "pins.is_pinned"
    ref: str
    pinned: bool | None


class PinPinnedRefs(PortEvent):
    kind = "pins.pinned_refs"
    refs: int | None  # how many


class PinHolders(PortEvent):
    kind = "pins.holders"
    ref: str
    holders: tuple | None


class PinExpiredUnpinned(PortEvent):
    kind = "pins.expired_unpinned"
    before_ms: int
    refs: tuple | None


class PinBlob(PortEvent):
    kind = "pins.blob"
    ref: str
    found: bool


class PinForget(PortEvent):
    kind = "pins.forget"
    ref: str
    forgotten: bool | None


# -- findings projection (``findings``) ---------------------------------------------

class FindingsApplyRun(PortEvent):
    kind = "findings.apply_run"
    schedule: str
    occurrence_ms: int
    run: str
    findings: int  # how many
    opened: int | None


class FindingsCheckpoint(PortEvent):
    kind = "findings.checkpoint"
    schedule: str
    checkpoint_ms: int | None


class FindingsAdvanceCheckpoint(PortEvent):
    kind = "findings.advance_checkpoint"
    schedule: str
    occurrence_ms: int


class FindingsCloseExpired(PortEvent):
    kind = "findings.close_expired"
    before_ms: int
    closed: int | None  # how many


class FindingsLive(PortEvent):
    kind = "findings.live_findings"
    live: int | None  # how many


class FindingsLiveForRun(PortEvent):
    kind = "findings.live_for_run"
    run: str
    live: int | None


# -- the keyring of wrapped data keys (``keyring``) -----------------------------------
# A wrapped key is ciphertext, yet only its length is recorded; a plaintext
# data key never reaches a port.

class KeyringPutIfAbsent(PortEvent):
    kind = "keyring.put_if_absent"
    dek: str
    key: str
    wrapped_len: int
    stored_key: str | None  # the stored row's KEK (None: the call raised)
    stored_own: bool | None  # whether the stored row is the one sent


class KeyringGet(PortEvent):
    kind = "keyring.get"
    dek: str
    found: bool | None
    key: str | None


class KeyringRewrap(PortEvent):
    kind = "keyring.rewrap"
    dek: str
    from_key: str
    to_key: str
    wrapped_len: int
    stored_key: str | None


class KeyringScan(PortEvent):
    kind = "keyring.scan"
    after: str
    limit: int
    rows: int | None
    last: str | None


class KeyringGetRotation(PortEvent):
    kind = "keyring.get_rotation"
    rotation: str
    found: bool | None
    cursor: str | None
    done: bool | None


class KeyringSaveRotation(PortEvent):
    kind = "keyring.save_rotation"
    rotation: Any
    from_key: Any
    to_key: Any
    cursor: Any
    done: Any


# =============================================================================
# Probe events (emitted by the model, the world or a scenario: schemas)
# =============================================================================

class NodeCrash(ProbeEvent):
    """``sim.world``: a process died (its tasks end; it may restart)."""

    kind = "node.crash"
    restart_after_ms: int | None


class NodeStart(ProbeEvent):
    """``sim.world``: a process (re)started: a fresh incarnation, no memory."""

    kind = "node.start"
    incarnation: int


class DsLoaded(ProbeEvent):
    """``model.durable_state.handle``: a load the contract accepted (or found nothing)."""

    kind = "ds.loaded"
    key: str
    found: bool
    current: int  # the reader's contract version
    stored_version: int = OPTIONAL  # the rest only when found
    revision: int = OPTIONAL
    payload: Any = OPTIONAL  # after migrations
    migrated: bool = OPTIONAL


class DsLoadRejected(ProbeEvent):
    """A load the contract rejected with a typed mismatch."""

    kind = "ds.load.rejected"
    key: str
    current: int
    stored_version: int
    mismatch: str  # the mismatch kind


class DsSaved(ProbeEvent):
    """A save the model reports as its own (``adopted``: an earlier identical commit)."""

    kind = "ds.saved"
    key: str
    run: str
    revision: int
    adopted: bool
    digest: str = OPTIONAL  # of the adopted content


class WakeSkipped(ProbeEvent):
    """``model.schedules``: occurrences skipped under the catch-up policy."""

    kind = "wake.skipped"
    schedule: str
    first_ms: int
    last_ms: int
    count: int
    policy: str


class RetentionPass(ProbeEvent):
    kind = "retention.pass"
    archived: int
    held: int
    released: int
    skipped: int
    findings_closed: int
    unpinned: int
    reclaimed: int


class RecoveryRead(ProbeEvent):
    """``model.submissions``: one conversation's recovery read."""

    kind = "recovery.read"
    conversation: str
    tail_seq: int
    records: int
    requests: int
    from_checkpoint: int = OPTIONAL  # with a checkpoint store: the seq it started after
    rejected: str = OPTIONAL  # a checkpoint it would not use, and why (engine-version, definition-digest, ...)
    definition: str = OPTIONAL  # the configuration the reader runs, when not the recovery's own
    model: str = OPTIONAL  # the digest of the reader's model configuration, when it has one
    tools: str = OPTIONAL  # the digest of the reader's tool set, when it has one
    page_size: int = OPTIONAL  # when not the spec's


class RecoveryDecision(ProbeEvent):
    """``model.submissions``: a recovery pass's decision for one open
    submission (``model.recovery_decisions``), made against the verified
    prefix through ``tail_seq``."""

    kind = "recovery.decision"
    submission: str
    conversation: str
    decision: str
    disposition: str
    tail_seq: int
    row: dict  # what the table read of the ledger row (``model.recovery_decisions.row_facts``)


class RecoveryClassified(ProbeEvent):
    """``model.submissions``: a recovery pass classified the open rows of
    ``conversation`` and applied the repairs it applies itself (``repairs``:
    a pass without a clock applies none)."""

    kind = "recovery.classified"
    conversation: str
    rows: int
    repairs: bool


class RecoveryFailed(ProbeEvent):
    kind = "recovery.failed"
    owner: str
    error: str
    # A refused recovery read (``HistoryCorrupted.reason``): the conversation,
    # why (short-page, long-page, gap, chain-mismatch, behind-checkpoint),
    # the record it expected and the page (the seq it was read after; None
    # for a refusal of the whole read).
    conversation: str = OPTIONAL
    reason: str = OPTIONAL
    expected_seq: int = OPTIONAL
    page: int | None = OPTIONAL


class AgentStep(ProbeEvent):
    """``model.agent``: an agent begins step ``index`` of ``submission`` now
    (after its run's clock allowed it)."""

    kind = "agent.step"
    submission: str
    index: int


class Fault(ProbeEvent):
    """``sim.world.World.record_fault``: an injected fault."""

    kind = "fault"
    site: str
    kind_: str  # the fault kind
    hit: int
    restart_after_ms: int = OPTIONAL
    duration_ms: int = OPTIONAL


class DiskDamage(ProbeEvent):
    """``faults.disk``: what a disk fault did to the run's SQLite file (right
    after its ``fault`` event)."""

    kind = "disk.damage"
    kind_: str  # the fault kind
    page: int = OPTIONAL  # the page damaged (a latent sector error, a misdirected write)
    from_page: int = OPTIONAL  # the page whose content a misdirected write put there
    snapshot_ms: int = OPTIONAL  # when the snapshot a lost tail went back to was taken
    frames: int = OPTIONAL  # the torn transaction's WAL frames
    torn: str = OPTIONAL  # how its commit frame tore: "cut" or "overwritten"


class StoreNow(ProbeEvent):
    """``faults.ports``, stores on their own clock: a call's time as its
    caller handed it (``caller_ms``, the caller's own clock) and as the
    store read it on arrival (``store_ms``, what the call carries from
    there). Emitted just before the call's own event, by the same node."""

    kind = "store.now"
    site: str
    caller_ms: int
    store_ms: int


class Deploy(ProbeEvent):
    """A scenario deploying a build."""

    kind = "deploy"
    build: str
    version: int
    broken: bool


# -- progress waits (``faults.notifications``, ``scenarios.workloads.watchers``) ------------

class ProgressRegister(ProbeEvent):
    """``faults.notifications``: a registration installed in the notifier
    (from this instant a notify of its conversation wakes it)."""

    kind = "progress.register"
    registration: int
    conversation: str


class ProgressPark(ProbeEvent):
    """A waiter parks on its registration until a wake or ``deadline_ms``."""

    kind = "progress.park"
    registration: int
    conversation: str
    deadline_ms: int


class ProgressResume(ProbeEvent):
    """A parked waiter runs again: ``woken`` by a notification, else at its deadline."""

    kind = "progress.resume"
    registration: int
    conversation: str
    woken: bool


class ProgressClose(ProbeEvent):
    """A registration discarded (the wait returned, reconnects, or its process died)."""

    kind = "progress.close"
    registration: int
    conversation: str


class ProgressNotify(ProbeEvent):
    """A notification after a committed append: how many registrations it
    woke, or ``dropped`` (a ``dropped-notification`` fault: none)."""

    kind = "progress.notify"
    conversation: str
    seq: int
    woken: int
    dropped: bool


class WatchStarted(ProbeEvent):
    """``scenarios.workloads.watchers``: a watcher starts following a conversation from
    ``from_seq`` (0 after a restart: its cursor is not durable) until ``until_ms``."""

    kind = "watch.started"
    watcher: str
    conversation: str
    from_seq: int
    until_ms: int


class WatchDelivered(ProbeEvent):
    """A record a watcher delivered (to its user): its position and fingerprint."""

    kind = "watch.delivered"
    watcher: str
    conversation: str
    seq: int
    record_id: str
    fingerprint: str


class WatchClosed(ProbeEvent):
    """A watcher stopped following a conversation (its window ended)."""

    kind = "watch.closed"
    watcher: str
    conversation: str
    delivered_seq: int


class ToolInvoke(ProbeEvent):
    """``tools.invoke``: one call that reached (or failed on the way to) the
    tool service, as its ``BoundPort`` traces it."""

    kind = "tools.invoke"
    call: str
    tool: str
    key: str | None
    deadline_ms: int = OPTIONAL
    result: Any = OPTIONAL
    error: str = OPTIONAL
    detail: str = OPTIONAL
