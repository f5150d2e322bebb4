"""durableState(): carry state as recorded effects (versioned contracts; adopt-own-write).

``load`` and ``save`` run through ``ctx.execute`` so their results land in
``STEP_COMPLETED``; replay folds the recorded value and never re-reads the
store.

Save is honestly idempotent. A crash between the store write and the
step record re-runs the save with the same expected revision. If that re-run
conflicts at *exactly* ``expected + 1`` and the stored envelope is canonically
equal to what we tried to write, at the current contract version, the earlier
attempt committed: adopt it. Anything else — another revision, another
payload, another version — is a genuinely concurrent writer and stays a loud
``RevisionConflictError`` (DS-4's two-live-writers tripwire).
"""
from __future__ import annotations

from typing import Any

from model.canonical import canonical_equal, digest
from model.durable_state.contracts import StateContract, StateContractMismatchError
from model.durable_state.store import DurableStateStore, DurableStateWrite, is_revision_conflict
from model.failpoints import DURABLE_STATE_SAVE_AFTER_STORE_WRITE, NO_FAILPOINTS, Failpoints
from model.probe import NULL_PROBE, Probe


class DurableState:
    """One keyed piece of carry state under one contract, bound to one node's ports."""

    def __init__(self, contract: StateContract, key: str, store: DurableStateStore, *,
                 probe: Probe = NULL_PROBE, failpoints: Failpoints = NO_FAILPOINTS) -> None:
        assert key
        self.contract = contract
        self.key = key
        self.store = store
        self.probe = probe
        self.failpoints = failpoints

    @property
    def load_step(self) -> str:
        return f"{self.contract.contract_id}.load"

    @property
    def save_step(self) -> str:
        return f"{self.contract.contract_id}.save"

    async def load(self, ctx: Any) -> dict | None:
        """``{revision, contractVersion, payload[, migrated]}`` or None if absent."""
        return await ctx.execute(self.load_step, self._load_effect, idempotent=True, writes=False)

    async def save(self, ctx: Any, payload: Any, expected_revision: int) -> dict:
        """``{revision, contractVersion, adopted}`` after a CAS at ``expected_revision``."""

        async def effect() -> dict:
            return await self._save_effect(payload, expected_revision, ctx.run_id)

        return await ctx.execute(self.save_step, effect, idempotent=True)

    async def _load_effect(self) -> dict | None:
        record = await self.store.load(self.key)
        if record is None:
            self.probe.emit("ds.loaded", key=self.key, found=False, current=self.contract.version)
            return None
        current = self.contract.version
        try:
            payload = self.contract.upgrade(self.key, record.contract_version, record.payload)
        except StateContractMismatchError as mismatch:
            self.probe.emit("ds.load.rejected", key=self.key, current=current,
                            stored_version=record.contract_version, mismatch=mismatch.kind)
            raise
        result: dict[str, Any] = {"revision": record.revision, "contractVersion": current, "payload": payload}
        if record.contract_version != current:
            result["migrated"] = {"from": record.contract_version, "to": current}
        self.probe.emit("ds.loaded", key=self.key, found=True, current=current,
                        stored_version=record.contract_version, revision=record.revision,
                        payload=payload, migrated=record.contract_version != current)
        return result

    async def _save_effect(self, payload: Any, expected_revision: int, run_id: str) -> dict:
        contract = self.contract
        contract.check_payload(self.key, payload)
        write = DurableStateWrite(contract.version, payload)
        try:
            record = await self.store.save(self.key, write, expected_revision)
        except Exception as conflict:
            # Matched by name (the store contract): a third-party backend may raise
            # its own RevisionConflictError class.
            if not is_revision_conflict(conflict):
                raise
            adopted = await self._adopt_own_write(conflict, write, expected_revision, run_id)
            if adopted is None:
                raise
            return adopted
        self.failpoints.hit(DURABLE_STATE_SAVE_AFTER_STORE_WRITE)
        self.probe.emit("ds.saved", key=self.key, run=run_id, revision=record.revision, adopted=False)
        return {"revision": record.revision, "contractVersion": record.contract_version, "adopted": False}

    async def _adopt_own_write(self, conflict: Any, write: DurableStateWrite,
                               expected_revision: int, run_id: str) -> dict | None:
        if getattr(conflict, "actual", None) != expected_revision + 1:
            return None
        stored = await self.store.load(self.key)
        if stored is None or stored.revision != expected_revision + 1:
            return None
        if stored.contract_version != write.contract_version:
            return None
        if not canonical_equal(stored.payload, write.payload):
            return None
        self.probe.emit("ds.saved", key=self.key, run=run_id, revision=stored.revision, adopted=True,
                        digest=digest(write.payload))
        return {"revision": stored.revision, "contractVersion": stored.contract_version, "adopted": True}

    async def clear(self, ctx: Any) -> None:
        async def effect() -> None:
            await self.store.clear(self.key)

        await ctx.execute(f"{self.contract.contract_id}.clear", effect, idempotent=True)


def sentinel_state(schedule_id: str) -> tuple[str, str]:
    """A schedule's contract id and store key.

    ``<scheduleId>.state`` and ``sentinel:<scheduleId>``.
    """
    assert schedule_id
    return f"{schedule_id}.state", f"sentinel:{schedule_id}"


class SentinelState(DurableState):
    """``sentinelState()``: the wake-cycle shape — load(ctx) / save(ctx, value, revision)."""

    def __init__(self, schedule_id: str, contract: StateContract, store: DurableStateStore, *,
                 probe: Probe = NULL_PROBE, failpoints: Failpoints = NO_FAILPOINTS) -> None:
        contract_id, key = sentinel_state(schedule_id)
        if contract.contract_id != contract_id:
            raise ValueError(f"sentinel contract for {schedule_id} must be named {contract_id!r}, "
                             f"got {contract.contract_id!r}")
        super().__init__(contract, key, store, probe=probe, failpoints=failpoints)
        self.schedule_id = schedule_id
