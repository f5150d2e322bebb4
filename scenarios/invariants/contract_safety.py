"""``contract-safety``: no run proceeds on state its contract does not accept.

The oracle carries its own reference implementation of the load rule (walk
the registered migrations from the stored version to the reader's version,
then validate; future versions, gaps, throwing migrations and invalid results
are the four typed mismatch kinds). It never calls the model's contract code,
so a bug there cannot hide from it. For every load:

- the store's answer (``ds.load`` event) gives the stored envelope;
- the model's verdict (``ds.loaded`` or ``ds.load.rejected``) must match the
  oracle: same payload and migration record on success, same mismatch kind on
  rejection;
- the load's step output as the run recorded it (the step record
  ``{contract}.load`` that node appends next: a ``tool-call`` record of the
  run's log, or ``kernel.append_step(s)`` and the steps a
  ``kernel.finish_execution`` carries), which a replay folds instead of
  loading again, must be what the oracle's load gives: the same revision,
  the reader's version, the migrated payload and the migration, or nothing
  for an absent key. The report and the record are judged apart: a
  migration that reaches one and not the other is caught.
For every committed save: the written version is a version the oracle knows,
its payload validates under that version, and versions never go backwards
(a ``ds.clear`` starts the key over). Keys the scenario gives no contracts
for are not this oracle's (a raw store client's). A save by a ``damage``
writer (a buggy or foreign writer that skipped validation: an injected
fault) is not judged: the next load of it must be refused, and the audit
leaves the key alone until a judged save or a clear replaces it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from faults.events import (DsClear, DsLoad, DsLoaded, DsLoadRejected, DsSave, KernelAppendStep, KernelAppendSteps,
                           KernelFinish, LogAppend)
from model.canonical import json_equal
from model.kernel.records import STEP_COMPLETED
from model.durable_state.contracts import (
    FUTURE_VERSION,
    MIGRATION_FAILED,
    NO_MIGRATION_PATH,
    VALIDATION_FAILED,
    StateContract,
)
from sim.invariants import Checker

if TYPE_CHECKING:
    from scenarios.system import AuditView

ContractsForKey = Callable[[str], Mapping[int, StateContract]]
# The persistence family of a run's durable step records in its log.
STEP_RECORD_FAMILY = "tool-call"


def expected_load(contracts: Mapping[int, StateContract], reader_version: int,
                  stored_version: int, payload: Any) -> tuple[str, Any]:
    """The oracle: ``("ok", payload)`` or ``("rejected", kind)``."""
    reader = contracts.get(reader_version)
    if reader is None:
        return ("rejected", NO_MIGRATION_PATH)
    if stored_version > reader_version:
        return ("rejected", FUTURE_VERSION)
    for version in range(stored_version, reader_version):
        step = reader.migrations.get(version)
        if step is None:
            return ("rejected", NO_MIGRATION_PATH)
        try:
            payload = step(payload)
        except Exception:  # noqa: BLE001 - any failure of a migration is the typed kind
            return ("rejected", MIGRATION_FAILED)
    if reader.validate(payload) is not None:
        return ("rejected", VALIDATION_FAILED)
    return ("ok", payload)


class ContractSafety(Checker):
    name = "contract-safety"
    kinds = (DsLoad.kind, DsLoaded.kind, DsLoadRejected.kind, DsSave.kind, DsClear.kind, KernelAppendStep.kind,
             KernelAppendSteps.kind, KernelFinish.kind, LogAppend.kind)

    def __init__(self, contracts_for_key: ContractsForKey, *, out_of_band: Callable[[str], bool] = lambda node: False,
                 every_contract_for_key: ContractsForKey | None = None,
                 damage: Callable[[str], bool] = lambda node: False) -> None:
        """``contracts_for_key``: the deployed build's contracts (empty: a key
        the oracle does not judge). A save by an ``out_of_band`` writer (an
        operator's tool, not a run of the build) is judged by
        ``every_contract_for_key``, every version the system has ever had:
        it must write a real version, validly, never backwards. A save by a
        ``damage`` writer is a fault, not judged (see the module docstring)."""
        super().__init__()
        self._contracts_for_key = contracts_for_key
        self._out_of_band = out_of_band
        self._every_contract_for_key = every_contract_for_key or contracts_for_key
        self._damage = damage
        self._pending: dict[str, tuple[str, int, Any, int]] = {}  # node -> (key, stored version, payload, revision)
        # (node, load step id) -> (key, the step output the oracle's load
        # gives), until that node records the step (bounded by nodes x keys:
        # a load that never got recorded, its process dead, is replaced by
        # the node's next load of the key).
        self._due: dict[tuple[str, str], tuple[str, Any]] = {}
        self.recorded_loads = 0
        self._versions: dict[str, int] = {}  # key -> last committed version
        self._damaged: dict[str, None] = {}  # keys a damage writer wrote last (membership only)
        self.migrations = 0
        self.rejections = 0

    def metrics(self) -> dict:
        return {"migrations_applied": self.migrations, "contract_rejections": self.rejections,
                "recorded_loads_checked": self.recorded_loads}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        node = event.node
        fields = event.fields
        if kind == DsLoad.kind:
            if fields.get(DsLoad.found):
                self._pending[node] = (fields[DsLoad.key], fields[DsLoad.version], fields[DsLoad.payload],
                                       fields[DsLoad.revision])
            else:
                self._pending.pop(node, None)
        elif kind == KernelAppendStep.kind:
            if self._due and KernelAppendStep.error not in fields:
                self._check_recorded(node, fields[KernelAppendStep.step], fields[KernelAppendStep.step_kind],
                                     fields[KernelAppendStep.output])
        elif kind == LogAppend.kind:
            if self._due and LogAppend.error not in fields:
                for envelope in fields[LogAppend.envelopes]:
                    if envelope.get("family") == STEP_RECORD_FAMILY:
                        step = envelope.get("payload") or {}
                        self._check_recorded(node, step.get("stepId"), step.get("kind"), step.get("output"))
        elif kind == KernelAppendSteps.kind or kind == KernelFinish.kind:
            if self._due and KernelAppendSteps.error not in fields:
                for step_id, step_kind, output in fields[KernelAppendSteps.steps]:
                    self._check_recorded(node, step_id, step_kind, output)
        elif kind == DsSave.kind:
            if DsSave.revision in fields:
                if self._damage(node):
                    self._damaged[fields[DsSave.key]] = None
                else:
                    self._damaged.pop(fields[DsSave.key], None)
                    self._check_save(fields, self._out_of_band(node))
        elif kind == DsClear.kind:
            if DsClear.error not in fields:
                self._versions.pop(fields[DsClear.key], None)
                self._damaged.pop(fields[DsClear.key], None)
        else:
            self._check_load(node, kind, fields)

    def _check_load(self, node: str, kind: str, fields: dict) -> None:
        pending = self._pending.pop(node, None)
        if not fields.get(DsLoaded.found, True):  # a rejection has no "found": it found something
            contracts = self._contracts_for_key(fields[DsLoaded.key])
            reader = contracts.get(fields[DsLoaded.current])
            if reader is not None:
                self._due[(node, f"{reader.contract_id}.load")] = (fields[DsLoaded.key], None)
            return
        loaded = kind == DsLoaded.kind
        key = fields[DsLoaded.key if loaded else DsLoadRejected.key]
        contracts = self._contracts_for_key(key)
        if not contracts:
            return
        self.checks += 1
        if pending is None or pending[0] != key:
            self.fail(f"{key}: model reported a load the store never answered", (key,))
            return
        _, stored_version, stored_payload, revision = pending
        current = fields[DsLoaded.current if loaded else DsLoadRejected.current]
        verdict, value = expected_load(contracts, current, stored_version, stored_payload)
        if verdict == "ok":
            # What the load's step must record (the handle's output shape).
            output: dict[str, Any] = {"revision": revision, "contractVersion": current, "payload": value}
            if stored_version != current:
                output["migrated"] = {"from": stored_version, "to": current}
            self._due[(node, f"{contracts[current].contract_id}.load")] = (key, output)
        if loaded:
            migrated = fields.get(DsLoaded.migrated)
            if migrated:
                self.migrations += 1
            if verdict != "ok":
                self.fail(f"{key}: load of v{stored_version} under v{current} succeeded; "
                          f"the contract demands {value}", (key,))
            elif not json_equal(value, fields[DsLoaded.payload]):
                self.fail(f"{key}: load of v{stored_version} under v{current} returned "
                          f"{fields[DsLoaded.payload]!r}, migrations and validation give {value!r}", (key,))
            elif migrated != (stored_version != current):
                self.fail(f"{key}: migration from v{stored_version} to v{current} "
                          "not recorded as migrated", (key,))
        else:
            self.rejections += 1
            mismatch = fields[DsLoadRejected.mismatch]
            if verdict == "ok":
                self.fail(f"{key}: load of v{stored_version} under v{current} rejected as "
                          f"{mismatch}, but the contract accepts it", (key,))
            elif value != mismatch:
                self.fail(f"{key}: load rejected as {mismatch}, the contract says {value}", (key,))

    def _check_recorded(self, node: str, step_id: str, step_kind: str, output: Any) -> None:
        """A step record of ``node``: a load step the oracle expects is judged."""
        if step_kind != STEP_COMPLETED:
            return
        due = self._due.pop((node, step_id), None)
        if due is None:
            return
        key, expected = due
        self.checks += 1
        self.recorded_loads += 1
        if not json_equal(output, expected):
            self.fail(f"{key}: the load's step {step_id!r} recorded {output!r}; the store's answer under the "
                      f"contract gives {expected!r} (a replay folds the record)", (key,))

    def audit(self, view: AuditView) -> None:
        """Every stored envelope validates under the version it claims (any
        version the key has had: a run may end while a build that does not
        know the stored version is deployed, the broken one of a rollback)."""
        for key in sorted(self._versions):
            if key in self._damaged:
                continue  # a damage writer's state, which no load may accept (checked online)
            self.checks += 1
            stored = view.durable_state_snapshot(key)
            if stored is None:
                continue
            contract = self._every_contract_for_key(key).get(stored.contract_version)
            if contract is None or contract.validate(stored.payload) is not None:
                self.fail(f"{key}: the store holds v{stored.contract_version} state that does not validate "
                          "under that version", (key,))
            elif stored.contract_version != self._versions[key]:
                self.fail(f"{key}: the store holds v{stored.contract_version}, the last commit wrote "
                          f"v{self._versions[key]}", (key,))

    def _check_save(self, fields: dict, out_of_band: bool) -> None:
        key = fields[DsSave.key]
        version = fields[DsSave.version]
        contracts = self._every_contract_for_key(key) if out_of_band else self._contracts_for_key(key)
        if not contracts:
            return
        self.checks += 1
        contract = contracts.get(version)
        if contract is None:
            self.fail(f"{key}: committed at unknown contract version v{version}", (key,))
            return
        problem = contract.validate(fields[DsSave.payload])
        if problem is not None:
            self.fail(f"{key}: committed a payload invalid under v{version}: {problem}", (key,))
        last = self._versions.get(key, 0)
        if version < last:
            self.fail(f"{key}: committed v{version} after v{last} (version went backwards)", (key,))
        self._versions[key] = max(last, version)
