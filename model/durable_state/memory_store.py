"""The reference durable-state backend: a dict in memory.

Every method body is synchronous code behind ``async def`` — there is no
``await`` anywhere in this class, so a call never suspends. The simulator
relies on that: a store call is one atomic step, never interleaved with
another task's call.

Rows hold the payload as its JSON text (an immutable str), so nothing the
caller holds can alias the store: a save encodes (copy in), every load and
save decodes a fresh value (copy out).
"""
from __future__ import annotations

from model.durable_state.store import (
    DurableStateRecord,
    DurableStateWrite,
    check_key,
    check_save_arguments,
    decode_payload,
    encode_payload,
    next_revision,
)

__all__ = ["InMemoryDurableStateStore"]


class InMemoryDurableStateStore:
    """Deep-copying in-memory implementation of ``DurableStateStore``."""

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        # key -> (contract_version, revision, payload JSON text)
        self._rows: dict[str, tuple[int, int, str]] = {}

    async def load(self, key: str) -> DurableStateRecord | None:
        check_key(key)
        row = self._rows.get(key)
        if row is None:
            return None
        return DurableStateRecord(row[0], row[1], decode_payload(row[2]))

    async def save(self, key: str, write: DurableStateWrite, expected_revision: int) -> DurableStateRecord:
        check_save_arguments(key, write, expected_revision)
        text, payload = encode_payload(write.payload)
        row = self._rows.get(key)
        revision = next_revision(key, expected_revision, 0 if row is None else row[1])
        contract_version = write.contract_version
        self._rows[key] = (contract_version, revision, text)
        return DurableStateRecord(contract_version, revision, payload)

    async def clear(self, key: str) -> None:
        check_key(key)
        self._rows.pop(key, None)

    # --- inspection (not part of the SPI) -------------------------------------

    def snapshot(self) -> dict[str, DurableStateRecord]:
        """Every record, keyed and ordered by key (code-point order), as fresh copies."""
        return {
            key: DurableStateRecord(row[0], row[1], decode_payload(row[2]))
            for key, row in sorted(self._rows.items())
        }

    def __len__(self) -> int:
        return len(self._rows)
