"""The claim-check plugin's blob/pin index.

Retention asks one question before it reclaims a blob: is anything still
citing it? The kernel only evaluates a pin predicate; the bookkeeping lives
here, in the plugin that knows the claim-check envelope. The index is keyed
by content ref, never by run, so evidence pinned by a finding outlives the
archival of the run that recorded it.

Two tables of facts, both keyed by ref:

- **blobs**: ``ref -> (size_bytes, stored_at_ms)``, one row per claim-checked
  blob the middleware stored. Re-storing an equal payload upserts the row and
  keeps the later ``stored_at_ms`` (a fresh citation restarts the TTL).
- **pins**: ``(ref, holder)`` pairs; a holder is e.g. a finding id. A ref may
  have many holders and is pinned while it has at least one. Pinning a ref
  whose blob row the index has not seen (yet) is allowed.

Nothing is kept once it is no longer live: ``forget`` drops the blob row and
``unpin`` of the last holder drops every trace of the ref's pins, so memory
is bounded by live blobs plus live pins.

Both adapters behave identically; every method is ``async`` but never
suspends, so each call is one atomic step for the simulator. SQLite writes
are one ``BEGIN IMMEDIATE`` transaction each (``model.sqlite_db``).
"""
from __future__ import annotations

import re
from typing import Any

import attrs

from model.bounds import INT64_MAX, is_valid_unicode
from model.sqlite_db import SqliteAdapter, write_transaction

__all__ = [
    "BlobRecord",
    "BlobSizeMismatch",
    "HOLDER_MAX_LENGTH",
    "InMemoryPinIndex",
    "PinIndexError",
    "SqlitePinIndex",
    "check_ref",
    "is_ref",
    "reclaim_expired_blobs",
]

HOLDER_MAX_LENGTH = 1_024
_REF_RE = re.compile(r"sha256:[0-9a-f]{64}")


def is_ref(value: object) -> bool:
    """True for a content ref as ``content_ref`` makes them: ``sha256:`` + 64 lowercase hex."""
    return type(value) is str and _REF_RE.fullmatch(value) is not None


def check_ref(ref: object) -> str:
    if not is_ref(ref):
        raise ValueError(f"not a content ref: {ref!r:.80}")
    return ref  # type: ignore[return-value]


def _check_holder(holder: object) -> str:
    if type(holder) is not str or not holder:
        raise ValueError(f"a pin holder must be a non-empty str, got {holder!r:.80}")
    if len(holder) > HOLDER_MAX_LENGTH:
        raise ValueError(f"pin holder of length {len(holder)} exceeds {HOLDER_MAX_LENGTH}")
    if not is_valid_unicode(holder):  # ``model.bounds``: what SQLite can store
        raise ValueError(f"a pin holder must be valid Unicode (no lone surrogates), got {holder!r:.80}")
    return holder


def _check_ms(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value <= INT64_MAX:
        raise ValueError(f"{what} must be an int in 0..2**63-1, got {value!r:.80}")
    return value


def _check_limit(limit: object) -> int:
    if type(limit) is not int or not 0 <= limit <= INT64_MAX:
        raise ValueError(f"limit must be an int in 0..2**63-1, got {limit!r:.80}")
    return limit


class PinIndexError(Exception):
    """Base class of the pin index's typed errors."""

    name = "PinIndexError"


class BlobSizeMismatch(PinIndexError):
    """A ref was recorded with a size different from the one already known.

    A ref names its bytes, so two sizes for one ref mean a caller bug (or a
    ref that was not computed from the bytes). Nothing was written."""

    name = "BlobSizeMismatch"

    def __init__(self, ref: str, recorded_size_bytes: int, attempted_size_bytes: int) -> None:
        self.ref = ref
        self.recorded_size_bytes = recorded_size_bytes
        self.attempted_size_bytes = attempted_size_bytes
        super().__init__(
            f"blob {ref} is recorded with size {recorded_size_bytes} bytes, "
            f"attempted {attempted_size_bytes} bytes"
        )

    def __reduce__(self):
        return (type(self), (self.ref, self.recorded_size_bytes, self.attempted_size_bytes))


@attrs.frozen
class BlobRecord:
    ref: str
    size_bytes: int
    stored_at_ms: int


# --------------------------------------------------------------------------
# In memory
# --------------------------------------------------------------------------


class InMemoryPinIndex:
    __slots__ = ("_blobs", "_holders", "_pin_count")

    def __init__(self) -> None:
        self._blobs: dict[str, BlobRecord] = {}
        # ref -> its holders; a ref with no holder has no entry at all.
        self._holders: dict[str, set[str]] = {}
        self._pin_count = 0

    async def record_blob(self, ref: str, size_bytes: int, *, stored_at_ms: int) -> None:
        check_ref(ref)
        _check_ms(size_bytes, "size_bytes")
        _check_ms(stored_at_ms, "stored_at_ms")
        old = self._blobs.get(ref)
        if old is None:
            self._blobs[ref] = BlobRecord(ref, size_bytes, stored_at_ms)
            return
        if old.size_bytes != size_bytes:
            raise BlobSizeMismatch(ref, old.size_bytes, size_bytes)
        if stored_at_ms > old.stored_at_ms:
            self._blobs[ref] = BlobRecord(ref, size_bytes, stored_at_ms)

    async def blob(self, ref: str) -> BlobRecord | None:
        return self._blobs.get(check_ref(ref))

    async def forget(self, ref: str) -> bool:
        """Drop the blob row (its pins stay). True if a row was dropped."""
        return self._blobs.pop(check_ref(ref), None) is not None

    async def pin(self, ref: str, holder: str) -> bool:
        """True if the pin is new (idempotent)."""
        check_ref(ref)
        _check_holder(holder)
        holders = self._holders.get(ref)
        if holders is None:
            holders = self._holders[ref] = set()
        if holder in holders:
            return False
        holders.add(holder)
        self._pin_count += 1
        return True

    async def unpin(self, ref: str, holder: str) -> bool:
        """True if a pin was removed (idempotent)."""
        check_ref(ref)
        _check_holder(holder)
        holders = self._holders.get(ref)
        if holders is None or holder not in holders:
            return False
        holders.remove(holder)
        self._pin_count -= 1
        if not holders:
            del self._holders[ref]
        return True

    async def is_pinned(self, ref: str) -> bool:
        return check_ref(ref) in self._holders

    async def pinned_refs(self) -> tuple[str, ...]:
        return tuple(sorted(self._holders))

    async def holders(self, ref: str) -> tuple[str, ...]:
        return tuple(sorted(self._holders.get(check_ref(ref), ())))

    async def expired_unpinned(self, stored_before_ms: int, limit: int) -> tuple[str, ...]:
        _check_ms(stored_before_ms, "stored_before_ms")
        _check_limit(limit)
        candidates = sorted(
            (record.stored_at_ms, ref)
            for ref, record in self._blobs.items()
            if record.stored_at_ms < stored_before_ms and ref not in self._holders
        )
        return tuple(ref for _, ref in candidates[:limit])

    def counts(self) -> dict[str, int]:
        return {"blobs": len(self._blobs), "pins": self._pin_count}


# --------------------------------------------------------------------------
# SQLite
# --------------------------------------------------------------------------

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS cc_blobs (
        ref TEXT PRIMARY KEY NOT NULL,
        size_bytes INTEGER NOT NULL,
        stored_at_ms INTEGER NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS cc_blobs_by_age ON cc_blobs (stored_at_ms, ref)",
    """CREATE TABLE IF NOT EXISTS cc_pins (
        ref TEXT NOT NULL,
        holder TEXT NOT NULL,
        PRIMARY KEY (ref, holder)
    ) WITHOUT ROWID""",
)
_BLOB_SQL = "SELECT size_bytes, stored_at_ms FROM cc_blobs WHERE ref = ?"
_UPSERT_BLOB_SQL = (
    "INSERT INTO cc_blobs (ref, size_bytes, stored_at_ms) VALUES (?, ?, ?) "
    "ON CONFLICT (ref) DO UPDATE SET stored_at_ms = max(stored_at_ms, excluded.stored_at_ms)"
)
_FORGET_SQL = "DELETE FROM cc_blobs WHERE ref = ?"
_PIN_SQL = "INSERT INTO cc_pins (ref, holder) VALUES (?, ?) ON CONFLICT (ref, holder) DO NOTHING"
_UNPIN_SQL = "DELETE FROM cc_pins WHERE ref = ? AND holder = ?"
_IS_PINNED_SQL = "SELECT 1 FROM cc_pins WHERE ref = ? LIMIT 1"
_PINNED_REFS_SQL = "SELECT DISTINCT ref FROM cc_pins ORDER BY ref"
_HOLDERS_SQL = "SELECT holder FROM cc_pins WHERE ref = ? ORDER BY holder"
_EXPIRED_SQL = (
    "SELECT b.ref FROM cc_blobs AS b "
    "WHERE b.stored_at_ms < ? AND NOT EXISTS (SELECT 1 FROM cc_pins AS p WHERE p.ref = b.ref) "
    "ORDER BY b.stored_at_ms, b.ref LIMIT ?"
)
_COUNT_BLOBS_SQL = "SELECT count(*) FROM cc_blobs"
_COUNT_PINS_SQL = "SELECT count(*) FROM cc_pins"


class SqlitePinIndex(SqliteAdapter):
    """The pin index in ``cc_blobs`` / ``cc_pins`` (created idempotently).

    The connection is shared, not owned, unless the index was made by
    :meth:`open`. Refs and holders are ASCII-compared by SQLite's BINARY
    collation, which orders them as Python's ``sorted`` does.
    """

    __slots__ = ()
    SCHEMA = _SCHEMA

    async def record_blob(self, ref: str, size_bytes: int, *, stored_at_ms: int) -> None:
        check_ref(ref)
        _check_ms(size_bytes, "size_bytes")
        _check_ms(stored_at_ms, "stored_at_ms")
        conn = self._conn
        with write_transaction(conn):
            row = conn.execute(_BLOB_SQL, (ref,)).fetchone()
            if row is not None and row[0] != size_bytes:
                raise BlobSizeMismatch(ref, row[0], size_bytes)
            conn.execute(_UPSERT_BLOB_SQL, (ref, size_bytes, stored_at_ms))

    async def blob(self, ref: str) -> BlobRecord | None:
        row = self._conn.execute(_BLOB_SQL, (check_ref(ref),)).fetchone()
        return None if row is None else BlobRecord(ref, row[0], row[1])

    async def forget(self, ref: str) -> bool:
        check_ref(ref)
        with write_transaction(self._conn):
            return self._conn.execute(_FORGET_SQL, (ref,)).rowcount > 0

    async def pin(self, ref: str, holder: str) -> bool:
        check_ref(ref)
        _check_holder(holder)
        with write_transaction(self._conn):
            return self._conn.execute(_PIN_SQL, (ref, holder)).rowcount > 0

    async def unpin(self, ref: str, holder: str) -> bool:
        check_ref(ref)
        _check_holder(holder)
        with write_transaction(self._conn):
            return self._conn.execute(_UNPIN_SQL, (ref, holder)).rowcount > 0

    async def is_pinned(self, ref: str) -> bool:
        return self._conn.execute(_IS_PINNED_SQL, (check_ref(ref),)).fetchone() is not None

    async def pinned_refs(self) -> tuple[str, ...]:
        return tuple(row[0] for row in self._conn.execute(_PINNED_REFS_SQL))

    async def holders(self, ref: str) -> tuple[str, ...]:
        return tuple(row[0] for row in self._conn.execute(_HOLDERS_SQL, (check_ref(ref),)))

    async def expired_unpinned(self, stored_before_ms: int, limit: int) -> tuple[str, ...]:
        _check_ms(stored_before_ms, "stored_before_ms")
        _check_limit(limit)
        return tuple(row[0] for row in self._conn.execute(_EXPIRED_SQL, (stored_before_ms, limit)))

    def counts(self) -> dict[str, int]:
        return {
            "blobs": self._conn.execute(_COUNT_BLOBS_SQL).fetchone()[0],
            "pins": self._conn.execute(_COUNT_PINS_SQL).fetchone()[0],
        }


# --------------------------------------------------------------------------
# Retention
# --------------------------------------------------------------------------


async def reclaim_expired_blobs(
    index: Any, content_store: Any, *, stored_before_ms: int, limit: int = 1000
) -> tuple[str, ...]:
    """Reclaim up to ``limit`` blobs stored before ``stored_before_ms`` that no
    holder pins; returns the reclaimed refs in (stored_at_ms, ref) order.

    Per ref: re-check it is still unpinned and still expired (a pin or a fresh
    ``record_blob`` of the same payload may have landed since the listing),
    delete the blob from the content store, then forget its index row. A crash
    between the two leaves an index row whose blob is gone; the next run lists
    it again, the (idempotent) delete is a no-op and the row is forgotten.
    """
    _check_ms(stored_before_ms, "stored_before_ms")
    _check_limit(limit)
    reclaimed: list[str] = []
    for ref in await index.expired_unpinned(stored_before_ms, limit):
        if await index.is_pinned(ref):
            continue
        record = await index.blob(ref)
        if record is None or record.stored_at_ms >= stored_before_ms:
            continue
        await content_store.delete(ref)
        await index.forget(ref)
        reclaimed.append(ref)
    assert len(reclaimed) <= limit
    return tuple(reclaimed)
