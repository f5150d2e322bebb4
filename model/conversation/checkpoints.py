"""Checkpoints (persistence §2.4, §8, STORE-007): derived, disposable
interpreter snapshots bound to a canonical log position and digest.

``save`` refuses a checkpoint that covers more than the log holds
(``ahead-of-tail``), whose ``tail_digest`` is not the log's digest when its
tail was ``covered_seq`` (``digest-mismatch``; a seq inside a batch was never
a tail and has no digest), or whose ``schema_version`` is unsupported
(``unsupported-version``). The checks and the write are one atomic step (one
SQLite write transaction on the log's connection).

``load_latest`` returns the checkpoint with the highest ``covered_seq`` at or
before a sequence (None when the conversation has none there), raises
``NotMaterialized`` for a conversation the log does not have (never
created, or deleted: its checkpoints stay, unused), or raises
``CheckpointUnusable`` (``unsupported-version``, ``corrupt`` — a row that
does not decode or whose stored integrity digest no longer matches —, or
``digest-mismatch`` — its ``tail_digest`` is no longer the log's digest at
its ``covered_seq``: the log was deleted and written again, or changed). It
never returns a checkpoint the log does not vouch for; the read of the row
and of the log's digest is one snapshot (one read transaction on SQLite).
``usable_checkpoint`` is what an engine calls: a checkpoint it may use, or
None and the reason to rebuild from the log (``digest-mismatch`` among
them); never a mismatched checkpoint.
"""
from __future__ import annotations

import sqlite3

import attrs

from model.canonical import CanonicalDecodeError, CanonicalEncodingError, canonical_json, decode, digest

from .records import ConversationStoreError, NotMaterialized
from .rules import require_digest, require_int, require_str
from .sqlite_store import writing

SUPPORTED_CHECKPOINT_VERSIONS = frozenset({1})


@attrs.frozen
class Checkpoint:
    """A checkpoint. Its stored JSON (``to_json``) uses the peer
    implementation's keys wherever the two name the same thing:
    ``schemaVersion``, ``conversationId``, ``throughSequence`` (the
    ``covered_seq`` attribute), ``tailDigest``, ``engineVersion``,
    ``agentDefinitionDigest``, ``modelDigest`` and ``toolDigest`` (the
    digests of the model configuration and of the tool set the writer ran),
    ``state`` (the ``snapshot``) and ``createdAt`` (epoch milliseconds). It
    also keeps ``submissionId``, which the peer's checkpoint lacks:
    persistence §8 lists "conversation and submission identity" among a
    checkpoint's contents. Loaded skill versions are not recorded: this
    model's agents load no skills, so there is nothing a checkpoint could
    depend on there."""

    conversation_id: str
    submission_id: str
    covered_seq: int
    tail_digest: str
    engine_version: str
    definition_digest: str
    model_digest: str
    tool_digest: str
    schema_version: int
    snapshot: object
    created_at_ms: int

    def to_json(self) -> dict:
        return {
            "conversationId": self.conversation_id,
            "submissionId": self.submission_id,
            "throughSequence": self.covered_seq,
            "tailDigest": self.tail_digest,
            "engineVersion": self.engine_version,
            "agentDefinitionDigest": self.definition_digest,
            "modelDigest": self.model_digest,
            "toolDigest": self.tool_digest,
            "schemaVersion": self.schema_version,
            "state": self.snapshot,
            "createdAt": self.created_at_ms,
        }


class CheckpointRejected(ConversationStoreError):
    KINDS = ("ahead-of-tail", "digest-mismatch", "unsupported-version")

    def __init__(self, kind: str, conversation_id: str, covered_seq: int, detail: str = "") -> None:
        assert kind in self.KINDS, kind
        self.kind = kind
        self.conversation_id = conversation_id
        self.covered_seq = covered_seq
        self.detail = detail
        super().__init__(f"checkpoint rejected ({kind}) for {conversation_id!r} at seq {covered_seq}: {detail}")
        self._args = (kind, conversation_id, covered_seq, detail)


class CheckpointUnusable(ConversationStoreError):
    KINDS = ("unsupported-version", "corrupt", "digest-mismatch")

    def __init__(self, kind: str, conversation_id: str, detail: str = "") -> None:
        assert kind in self.KINDS, kind
        self.kind = kind
        self.conversation_id = conversation_id
        self.detail = detail
        super().__init__(f"checkpoint unusable ({kind}) for {conversation_id!r}: {detail}")
        self._args = (kind, conversation_id, detail)


def _validate(checkpoint: object) -> str:
    if not isinstance(checkpoint, Checkpoint):
        raise TypeError(f"expected a Checkpoint, got {type(checkpoint).__name__}")
    require_str("conversation_id", checkpoint.conversation_id)
    require_str("submission_id", checkpoint.submission_id)
    require_int("covered_seq", checkpoint.covered_seq)
    require_digest("tail_digest", checkpoint.tail_digest)
    require_str("engine_version", checkpoint.engine_version)
    require_str("definition_digest", checkpoint.definition_digest)
    require_str("model_digest", checkpoint.model_digest)
    require_str("tool_digest", checkpoint.tool_digest)
    require_int("schema_version", checkpoint.schema_version)
    require_int("created_at_ms", checkpoint.created_at_ms)
    if checkpoint.covered_seq < 0:
        raise ValueError("covered_seq must be >= 0")
    try:
        return canonical_json(checkpoint.to_json())
    except CanonicalEncodingError as exc:
        raise ValueError(f"checkpoint snapshot is not canonical JSON: {exc}") from None


def decide_checkpoint_save(checkpoint: Checkpoint, tail_seq: int, digest_at_covered: str | None) -> None:
    """The save rule over the log's tail and its digest at covered_seq."""
    cid, seq = checkpoint.conversation_id, checkpoint.covered_seq
    if checkpoint.schema_version not in SUPPORTED_CHECKPOINT_VERSIONS:
        raise CheckpointRejected("unsupported-version", cid, seq, f"schema version {checkpoint.schema_version}")
    if seq > tail_seq:
        raise CheckpointRejected("ahead-of-tail", cid, seq, f"log tail is {tail_seq}")
    if digest_at_covered != checkpoint.tail_digest:
        raise CheckpointRejected(
            "digest-mismatch", cid, seq, f"log digest at {seq} is {digest_at_covered}, checkpoint has {checkpoint.tail_digest}"
        )


def decode_checkpoint_row(conversation_id: str, text: str, integrity: str) -> Checkpoint:
    """A stored row back to a Checkpoint, or CheckpointUnusable."""
    try:
        value = decode(text, max_bytes=64 * 1024 * 1024, max_string_length=64 * 1024 * 1024, max_items=10_000_000)
        if digest(value) != integrity:
            raise ValueError("integrity digest mismatch")
        version = value["schemaVersion"]
    except (CanonicalDecodeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointUnusable("corrupt", conversation_id, str(exc)) from None
    if type(version) is not int or version not in SUPPORTED_CHECKPOINT_VERSIONS:
        raise CheckpointUnusable("unsupported-version", conversation_id, f"schema version {version!r}")
    try:
        checkpoint = Checkpoint(
            value["conversationId"], value["submissionId"], value["throughSequence"], value["tailDigest"],
            value["engineVersion"], value["agentDefinitionDigest"], value["modelDigest"], value["toolDigest"],
            version, value["state"], value["createdAt"],
        )
        _validate(checkpoint)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointUnusable("corrupt", conversation_id, str(exc)) from None
    return checkpoint


def decide_checkpoint_load(checkpoint: Checkpoint, log_digest: str | None) -> Checkpoint:
    """The load rule over the log's digest at the checkpoint's covered_seq
    (None: that seq is no longer a tail of the log): a decoded checkpoint is
    returned only while that is still its tail digest (§8)."""
    if log_digest != checkpoint.tail_digest:
        raise CheckpointUnusable(
            "digest-mismatch", checkpoint.conversation_id,
            f"log digest at {checkpoint.covered_seq} is {log_digest}, checkpoint has {checkpoint.tail_digest}",
        )
    return checkpoint


class InMemoryCheckpointStore:
    """Checkpoints of an ``InMemoryConversationStore`` (or any log with
    ``inspect_tail``/``digest_at`` that never suspend)."""

    def __init__(self, log) -> None:
        self._log = log
        # conversation_id -> {covered_seq: (text, integrity)}
        self._rows: dict[str, dict[int, tuple[str, str]]] = {}

    async def save(self, checkpoint: Checkpoint) -> None:
        text = _validate(checkpoint)
        tail = await self._log.inspect_tail(checkpoint.conversation_id)
        at = None
        if checkpoint.covered_seq <= tail.tail_seq:
            at = await self._log.digest_at(checkpoint.conversation_id, checkpoint.covered_seq)
        decide_checkpoint_save(checkpoint, tail.tail_seq, at)
        self._rows.setdefault(checkpoint.conversation_id, {})[checkpoint.covered_seq] = (text, digest(decode(text)))

    async def load_latest(self, conversation_id: str, at_or_before_seq: int) -> Checkpoint | None:
        require_str("conversation_id", conversation_id)
        require_int("at_or_before_seq", at_or_before_seq)
        await self._log.inspect_tail(conversation_id)  # NotMaterialized for a conversation the log lacks
        rows = self._rows.get(conversation_id, {})
        eligible = [seq for seq in rows if seq <= at_or_before_seq]
        if not eligible:
            return None
        checkpoint = decode_checkpoint_row(conversation_id, *rows[max(eligible)])
        return decide_checkpoint_load(checkpoint, await self._log.digest_at(conversation_id, checkpoint.covered_seq))


_SCHEMA = """CREATE TABLE IF NOT EXISTS conv_checkpoints (
    conversation_id TEXT NOT NULL,
    covered_seq INTEGER NOT NULL,
    checkpoint_json TEXT NOT NULL,
    integrity_digest TEXT NOT NULL,
    PRIMARY KEY (conversation_id, covered_seq)
) WITHOUT ROWID"""
_UPSERT = (
    "INSERT INTO conv_checkpoints (conversation_id, covered_seq, checkpoint_json, integrity_digest) "
    "VALUES (?, ?, ?, ?) ON CONFLICT (conversation_id, covered_seq) DO UPDATE SET "
    "checkpoint_json = excluded.checkpoint_json, integrity_digest = excluded.integrity_digest"
)
_SELECT_LATEST = (
    "SELECT checkpoint_json, integrity_digest FROM conv_checkpoints "
    "WHERE conversation_id = ? AND covered_seq <= ? ORDER BY covered_seq DESC LIMIT 1"
)


class SqliteCheckpointStore:
    """Checkpoints in ``conv_checkpoints`` on the log's own connection, so
    the save rule reads the log inside the checkpoint's write transaction."""

    def __init__(self, log) -> None:
        self._log = log
        self._conn: sqlite3.Connection = log.connection
        with writing(self._conn, "create checkpoint table"):
            self._conn.execute(_SCHEMA)

    async def save(self, checkpoint: Checkpoint) -> None:
        text = _validate(checkpoint)
        cid = checkpoint.conversation_id
        with writing(self._conn, "checkpoint save"):
            tail = self._log.tail_now(cid)
            if tail is None:
                raise NotMaterialized(cid)
            at = None
            if checkpoint.covered_seq <= tail.tail_seq:
                at = self._log.digest_at_now(cid, checkpoint.covered_seq)
            decide_checkpoint_save(checkpoint, tail.tail_seq, at)
            self._conn.execute(_UPSERT, (cid, checkpoint.covered_seq, text, digest(decode(text))))

    async def load_latest(self, conversation_id: str, at_or_before_seq: int) -> Checkpoint | None:
        require_str("conversation_id", conversation_id)
        require_int("at_or_before_seq", at_or_before_seq)
        conn = self._conn
        # The row and the log's digest from one snapshot (a deferred read
        # transaction), so a concurrent rewrite cannot slip between them.
        conn.execute("BEGIN")
        try:
            if self._log.tail_now(conversation_id) is None:
                raise NotMaterialized(conversation_id)
            row = conn.execute(_SELECT_LATEST, (conversation_id, at_or_before_seq)).fetchone()
            if row is None:
                return None
            checkpoint = decode_checkpoint_row(conversation_id, row[0], row[1])
            at = self._log.digest_at_now(conversation_id, checkpoint.covered_seq)
        finally:
            conn.execute("COMMIT")
        return decide_checkpoint_load(checkpoint, at)


@attrs.frozen
class CheckpointDecision:
    checkpoint: Checkpoint | None
    # why there is none: "none", "engine-version", "definition-digest", "model-digest", "tool-digest",
    # "digest-mismatch"
    reason: str | None


async def usable_checkpoint(
    checkpoints, log, conversation_id: str, at_or_before_seq: int, *, engine_version: str, definition_digest: str,
    model_digest: str, tool_digest: str,
) -> CheckpointDecision:
    """The latest checkpoint an engine may use, or None and why (rebuild from
    the log): one written by another engine version, or under another agent
    definition, model configuration or tool set than the caller runs, is
    ``engine-version``, ``definition-digest``, ``model-digest`` or
    ``tool-digest`` (the log holds the history, so the rebuild is always
    possible; the checkpoint is merely not used); a checkpoint whose digest
    the log no longer has (the store's ``CheckpointUnusable("digest-mismatch")``,
    or this check of the log) is ``digest-mismatch``. Any other ``CheckpointUnusable`` (unsupported
    version, corrupt row) propagates: a typed compatibility failure, never a
    silent fallback. ``NotMaterialized`` propagates too."""
    try:
        checkpoint = await checkpoints.load_latest(conversation_id, at_or_before_seq)
    except CheckpointUnusable as unusable:
        if unusable.kind != "digest-mismatch":
            raise
        return CheckpointDecision(None, "digest-mismatch")
    if checkpoint is None:
        return CheckpointDecision(None, "none")
    if checkpoint.engine_version != engine_version:
        return CheckpointDecision(None, "engine-version")
    if checkpoint.definition_digest != definition_digest:
        return CheckpointDecision(None, "definition-digest")
    if checkpoint.model_digest != model_digest:
        return CheckpointDecision(None, "model-digest")
    if checkpoint.tool_digest != tool_digest:
        return CheckpointDecision(None, "tool-digest")
    if await log.digest_at(conversation_id, checkpoint.covered_seq) != checkpoint.tail_digest:
        return CheckpointDecision(None, "digest-mismatch")
    return CheckpointDecision(checkpoint, None)
