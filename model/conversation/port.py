"""The conversation ports: the log, its checkpoints, the content store.

Structural (``typing.Protocol``): an adapter need not inherit from them. The
adapters here implement every method with exactly these parameters (names,
kinds, defaults) — ``tests/test_ports.py`` checks it with
``inspect.signature`` — and the simulator's trace describers
(``faults.describe``) bind to these signatures, so a change here fails at
import there, not silently inside a traced call.

- ``ConversationLogPort``: ``memory_store.InMemoryConversationStore``,
  ``sqlite_store.SqliteConversationStore`` (rules: ``rules.py``; checked by
  ``conformance.py``).
- ``CheckpointStorePort``: ``checkpoints.InMemoryCheckpointStore``,
  ``checkpoints.SqliteCheckpointStore``.
- ``ContentStorePort``: ``content_store.InMemoryContentStore``,
  ``content_store.SqliteContentStore``.

Lifecycle and inspection helpers (``open``, ``close``, ``connection``,
``counts``, the SQLite adapter's ``*_now`` reads inside a caller's
transaction) are an adapter's own business and not part of a port.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, AsyncIterator, Protocol, runtime_checkable

from .records import AppendResult, BatchRecord, CanonicalRecord, ConversationTail, FencedAppendRequest

if TYPE_CHECKING:  # annotations only: importing checkpoints pulls in the SQLite adapter
    from .checkpoints import Checkpoint


@runtime_checkable
class ConversationLogPort(Protocol):
    async def materialize(self, conversation_id: str, producer_id: str, epoch: int) -> None:
        """Create the conversation owned by (producer_id, epoch); a higher
        epoch takes over, the same one is a no-op, a lower one is FenceRejected."""
        ...

    async def append(self, request: FencedAppendRequest) -> AppendResult:
        """Append one fenced batch atomically (an exact retry replays)."""
        ...

    async def delete_conversation(self, conversation_id: str) -> bool:
        """Retention: delete an archived conversation, whole; False when there was none."""
        ...

    async def inspect_tail(self, conversation_id: str) -> ConversationTail:
        ...

    async def read(self, conversation_id: str, after_seq: int, limit: int) -> tuple[CanonicalRecord, ...]:
        """Records after_seq+1 .. after_seq+limit (fewer at the tail)."""
        ...

    def observe(self, conversation_id: str, after_offset: str | None = None) -> AsyncIterator[CanonicalRecord]:
        """The records after ``after_offset`` (an opaque offset a read handed
        out on a record; None: from the start), in order, up to the tail
        (an async generator). ``MalformedOffset`` for an offset this store
        did not hand out for this conversation."""
        ...

    async def lookup_batch(self, conversation_id: str, batch_id: str) -> BatchRecord | None:
        ...

    async def digest_at(self, conversation_id: str, seq: int) -> str | None:
        """The tail digest when the tail was ``seq``; None beyond the tail or inside a batch."""
        ...


@runtime_checkable
class CheckpointStorePort(Protocol):
    async def save(self, checkpoint: Checkpoint) -> None:
        """Store a checkpoint that sits on a batch boundary of the log, with its digest."""
        ...

    async def load_latest(self, conversation_id: str, at_or_before_seq: int) -> Checkpoint | None:
        """The checkpoint with the highest covered_seq <= ``at_or_before_seq``,
        or None when the conversation has none there. ``NotMaterialized`` for
        a conversation the log does not have (never created, or deleted).
        Never a checkpoint the log no longer vouches for:
        ``CheckpointUnusable`` with kind ``digest-mismatch`` when its
        tail_digest is not the log's ``digest_at(covered_seq)``,
        ``unsupported-version`` or ``corrupt`` for a stored row this build
        cannot use (checked first)."""
        ...


@runtime_checkable
class ContentStorePort(Protocol):
    async def put(self, data: bytes) -> str:
        """Store ``data``; its ref (``sha256:<hex>``). Idempotent."""
        ...

    async def get(self, ref: str) -> bytes:
        """The verified bytes (ContentMissing, ContentCorrupted)."""
        ...

    async def has(self, ref: str) -> bool:
        ...

    async def delete(self, ref: str) -> bool:
        """True if a blob was deleted (idempotent)."""
        ...
