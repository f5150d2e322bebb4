"""Records and typed errors of the conversation log (persistence §2.1, §4, §6).

A *conversation* is an append-only log of canonical records numbered 1, 2,
3, ... with no gaps, written in atomic *batches* by a fenced producer. These
are the only shapes that cross the store boundary; the memory and SQLite
adapters (and any user adapter) return exactly these classes.

Payloads are JSON values. A store never hands out what it holds: every read
is a fresh decode of the stored canonical text.
"""
from __future__ import annotations

import attrs

from model.canonical import canonical_json

# --- record families and the schema versions this build reads and writes ------
#
# Persistence §11: records carry versions, unsupported versions fail before
# mutation, no migrations. Every family is at version 1.
RECORD_FAMILIES: tuple[str, ...] = (
    "conversation-created",
    "conversation-closed",
    "input",
    "run-started",
    "run-completed",
    "model-request",
    "model-delta",
    "model-completed",
    "model-output",
    "tool-call",
    "compaction",
    "subagent",
    "run-warning",
    "run-failure",
    "abort-requested",
    "terminal-outcome",
    "submission-settled",
    "repair-annotation",
)
SUPPORTED_SCHEMA_VERSIONS: dict[str, frozenset[int]] = {family: frozenset({1}) for family in RECORD_FAMILIES}

#: Largest page a forward read returns, and the recovery page size (§7).
PAGE_SIZE_MAX = 1024
#: Most records one batch may carry: 256, the peer implementation's limit
#: on one canonical batch (a larger batch is refused with the typed
#: ``BatchTooLarge`` before anything is read or written).
BATCH_RECORDS_MAX = 256
#: Largest canonical JSON (UTF-8 bytes) of one batch's envelopes.
BATCH_BYTES_MAX = 8 * 1024 * 1024


@attrs.frozen
class RecordEnvelope:
    """Persistence §4. ``producer_id``/``epoch`` are set on producer-written
    records (every record that goes through a fenced append)."""

    record_id: str
    family: str
    schema_version: int
    created_at_ms: int
    deployment_id: str
    payload: object
    producer_id: str | None = None
    epoch: int | None = None
    # The envelope's canonical text, encoded once (``canonical_text``): by
    # the producer's append, or known from the row a store read it from.
    # Not a field of the record: never compared, never passed to ``evolve``
    # (an evolved envelope is another record and encodes itself again).
    _text: str | None = attrs.field(default=None, init=False, eq=False, repr=False)

    def canonical_text(self) -> str:
        """``canonical_json(self.to_json())``, computed at most once per
        envelope. The payload is the caller's value: an envelope is not to
        be mutated after it was appended (a frozen record's payload is data
        given away, as with any store write)."""
        text = self._text
        if text is None:
            text = canonical_json(self.to_json())
            object.__setattr__(self, "_text", text)
        return text

    def known_text(self) -> str | None:
        """The canonical text if it was encoded or handed back already, else
        None (never encodes: for observers that must not add work)."""
        return self._text

    def with_text(self, text: str) -> "RecordEnvelope":
        """This envelope, its canonical text known to be ``text`` (a store
        that wrote that text itself hands it back with the record)."""
        object.__setattr__(self, "_text", text)
        return self

    def to_json(self) -> dict:
        """The envelope as a JSON object (the form that is stored and digested).
        ``producerId``/``epoch`` are present only when set."""
        value = {
            "recordId": self.record_id,
            "family": self.family,
            "schemaVersion": self.schema_version,
            "createdAt": self.created_at_ms,
            "deploymentId": self.deployment_id,
            "payload": self.payload,
        }
        if self.producer_id is not None:
            value["producerId"] = self.producer_id
        if self.epoch is not None:
            value["epoch"] = self.epoch
        return value


@attrs.frozen
class CanonicalRecord:
    """One record of the log at ``seq``, written by batch ``batch_id``.

    ``batch_id`` is kept on every record so a reader can regroup batches and
    recompute the digest chain from records alone (recovery, verify_on_open).
    """

    conversation_id: str
    seq: int
    batch_id: str
    envelope: RecordEnvelope
    #: The adapter's opaque observation offset of this record (``observe``
    #: resumes after it); set by a store's read, not part of the record's
    #: identity (each adapter spells it its own way).
    offset: str | None = attrs.field(default=None, eq=False, repr=False, kw_only=True)


@attrs.frozen
class FencedAppendRequest:
    conversation_id: str
    batch_id: str
    producer_id: str
    epoch: int
    expected_tail_seq: int
    expected_tail_digest: str
    records: tuple[RecordEnvelope, ...]


@attrs.frozen
class AppendResult:
    first_seq: int
    last_seq: int
    tail_digest: str
    batch_digest: str
    replayed: bool


@attrs.frozen
class ConversationTail:
    tail_seq: int
    tail_digest: str
    epoch: int


@attrs.frozen
class BatchRecord:
    """What batch lookup by id returns (and what a replay is answered from)."""

    conversation_id: str
    batch_id: str
    producer_id: str
    epoch: int
    first_seq: int
    last_seq: int
    batch_digest: str
    previous_tail_digest: str
    tail_digest: str


# --- errors -------------------------------------------------------------------
#
# Structured fields as attributes; __reduce__ re-calls __init__ with the same
# arguments so errors survive pickling (sweep workers send them across
# processes).


class ConversationStoreError(Exception):
    """Base class of the conversation store's typed errors. ``cause`` carries
    an underlying typed error (e.g. ``SqliteWriteContention``, retryable)."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        self.cause = cause
        self._args = (message, cause)
        super().__init__(message)

    @property
    def retryable(self) -> bool:
        return self.cause is not None and type(self.cause).__name__ == "SqliteWriteContention"

    def __reduce__(self):
        return (type(self), self._args)


class NotMaterialized(ConversationStoreError):
    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(f"conversation {conversation_id!r} is not materialized")
        self._args = (conversation_id,)


class FenceRejected(ConversationStoreError):
    """A write by a stale producer: ``attempted_epoch`` is not the
    conversation's ``actual_epoch`` (an append), or is below it or equal to
    it from another producer (a materialize: only a higher epoch takes
    over)."""

    def __init__(self, conversation_id: str, attempted_epoch: int, actual_epoch: int, detail: str = "") -> None:
        self.conversation_id = conversation_id
        self.attempted_epoch = attempted_epoch
        self.actual_epoch = actual_epoch
        self.detail = detail
        super().__init__(
            f"fenced on conversation {conversation_id!r}: epoch {attempted_epoch} "
            f"is stale (current epoch {actual_epoch}){': ' + detail if detail else ''}"
        )
        self._args = (conversation_id, attempted_epoch, actual_epoch, detail)


APPEND_CONFLICT_KINDS: tuple[str, ...] = ("batch-digest", "record-identity", "tail")


class AppendConflict(ConversationStoreError):
    """§6. ``kind`` is one of APPEND_CONFLICT_KINDS. A ``tail`` conflict carries
    the actual committed tail (``actual_tail_seq``/``actual_tail_digest``) as
    a resume hint; ``record-identity`` names the reused ``record_id``."""

    def __init__(
        self,
        conversation_id: str,
        kind: str,
        batch_id: str,
        *,
        record_id: str | None = None,
        actual_tail_seq: int | None = None,
        actual_tail_digest: str | None = None,
    ) -> None:
        assert kind in APPEND_CONFLICT_KINDS, kind
        self.conversation_id = conversation_id
        self.kind = kind
        self.batch_id = batch_id
        self.record_id = record_id
        self.actual_tail_seq = actual_tail_seq
        self.actual_tail_digest = actual_tail_digest
        extra = ""
        if record_id is not None:
            extra = f", record id {record_id!r} already used"
        if actual_tail_seq is not None:
            extra = f", actual tail {actual_tail_seq} {actual_tail_digest}"
        super().__init__(f"append conflict ({kind}) on conversation {conversation_id!r}, batch {batch_id!r}{extra}")
        self._args = (conversation_id, kind, batch_id)
        self._kwargs = dict(record_id=record_id, actual_tail_seq=actual_tail_seq, actual_tail_digest=actual_tail_digest)

    def __reduce__(self):
        return (_rebuild_append_conflict, (self._args, self._kwargs))


def _rebuild_append_conflict(args, kwargs):
    return AppendConflict(*args, **kwargs)


class BatchTooLarge(ConversationStoreError, ValueError):
    """An append whose batch carries more than ``limit`` records (the
    canonical batch holds at most 256): refused before anything is read or
    written. Names the ``operation`` and the ``limit``; also a ValueError."""

    def __init__(self, operation: str, limit: int, actual: int) -> None:
        self.operation = operation
        self.limit = limit
        self.actual = actual
        super().__init__(f"{operation}: a batch of {actual} records is over the limit of {limit} records")
        self._args = (operation, limit, actual)


class ReadLimitOutOfRange(ConversationStoreError, ValueError):
    """A read or observation ``limit`` outside ``1..limit_max`` (1024)."""

    def __init__(self, operation: str, limit: object, limit_max: int) -> None:
        self.operation = operation
        self.limit = limit
        self.limit_max = limit_max
        super().__init__(f"{operation}: limit must be an integer in 1..{limit_max}, got {limit!r}")
        self._args = (operation, limit, limit_max)


class MalformedOffset(ConversationStoreError, ValueError):
    """``observe`` given an offset this adapter did not hand out for this
    conversation (the peer's "Malformed observation offset"). The offset is
    ``offset``, not part of the message: it is the adapter's own spelling,
    and the message is the same whichever adapter refused it."""

    def __init__(self, conversation_id: str, offset: object) -> None:
        self.conversation_id = conversation_id
        self.offset = offset
        super().__init__(f"Malformed observation offset for conversation {conversation_id!r}")
        self._args = (conversation_id, offset)


class UnsupportedSchemaVersion(ConversationStoreError):
    """A record (written or read) whose family/version this build does not
    support (§11): refused before any mutation, or reported on read."""

    def __init__(self, family: str, schema_version: object) -> None:
        self.family = family
        self.schema_version = schema_version
        super().__init__(f"unsupported schema version {schema_version!r} for record family {family!r}")
        self._args = (family, schema_version)


class HistoryCorrupted(ConversationStoreError):
    """Stored history is not what the log guarantees: a short page or a gap
    (``expected_seq`` was due, ``got`` arrived — None for nothing), a row that
    does not decode, a spilled payload whose digest does not match, or a
    digest chain that does not recompute.

    A recovery read's refusal names its ``reason`` (``SHORT_PAGE``,
    ``LONG_PAGE``, ``GAP``, ``CHAIN_MISMATCH``, ``BEHIND_CHECKPOINT``) and,
    for a page's own check, the page (``page_after_seq``: the seq the page
    was read after); ``expected_seq`` is the record it expected. Other
    refusals leave ``reason`` None."""

    SHORT_PAGE = "short-page"  # fewer records than asked: ``expected_seq`` never came
    LONG_PAGE = "long-page"  # more records than asked
    GAP = "gap"  # a record out of sequence: ``expected_seq`` was due, ``got`` came
    CHAIN_MISMATCH = "chain-mismatch"  # the digest chain does not recompute to the tail's
    BEHIND_CHECKPOINT = "behind-checkpoint"  # the log's tail is behind a checkpoint

    def __init__(self, conversation_id: str, expected_seq: int | None, got: int | None, detail: str = "",
                 reason: str | None = None, page_after_seq: int | None = None) -> None:
        self.conversation_id = conversation_id
        self.expected_seq = expected_seq
        self.got = got
        self.detail = detail
        self.reason = reason
        self.page_after_seq = page_after_seq
        super().__init__(
            f"history of conversation {conversation_id!r} is corrupted: expected seq {expected_seq!r}, "
            f"got {got!r}{': ' + detail if detail else ''}"
        )
        self._args = (conversation_id, expected_seq, got, detail, reason, page_after_seq)


class AcknowledgedWriteLost(HistoryCorrupted):
    """The log's tail is behind a tail it acknowledged to this writer:
    committed records are gone. A log never shrinks (deletion aside), so this
    is a store beyond its contract (a lost fsync, a lagging failover). Unlike
    a damaged read answer, a retry cannot clear it: never retryable."""

    name = "AcknowledgedWriteLost"

    def __init__(self, conversation_id: str, acknowledged_seq: int, tail_seq: int) -> None:
        super().__init__(conversation_id, acknowledged_seq, tail_seq,
                         "the log's tail went back: records it acknowledged are gone")
        self._args = (conversation_id, acknowledged_seq, tail_seq)


class StorageVersionMismatch(ConversationStoreError):
    """Opening a database whose conversation tables are missing or carry a
    storage version other than this build's."""

    def __init__(self, expected: int, found: object, detail: str = "") -> None:
        self.expected = expected
        self.found = found
        self.detail = detail
        super().__init__(
            f"conversation storage version mismatch: expected {expected}, found {found!r}"
            f"{': ' + detail if detail else ''}"
        )
        self._args = (expected, found, detail)
