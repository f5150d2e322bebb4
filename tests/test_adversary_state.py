"""The state adversary (``scenarios.adversaries.state_handle``): clients of the
durable-state handle, claim-check and checkpointed recovery in port-storm;
damaged blob reads (``faults.content_reads``); the oracles that judge them
(``adopt-own-write``, ``contract-safety``, the content reference)."""
from __future__ import annotations

import hashlib

import pytest

from faults import mutants as mx
from faults.content_reads import DamagedBlobs, damaged
from faults.kinds import CORRUPT_ROW
from faults.ports import PortCall
from model.canonical import digest
from model.conversation.content_store import ContentCorrupted, InMemoryContentStore, SqliteContentStore
from model.sqlite_db import open_database
from scenarios import registry
from scenarios.adversaries.state_handle import CONTRACTS, SOMETIMES, contracts_for_key
from scenarios.invariants.adopt_own_write import AdoptOwnWrite
from scenarios.invariants.contract_safety import ContractSafety
from scenarios.reference.content import ReferenceContent
from scenarios.storage import run_sync
from sim.clock import parse_duration_ms
from sim.invariants import InvariantSet
from sim.node import Node
from sim.runner import run
from sim.scenario import ScenarioOptions
from sim.trace import Trace
from sim.world import World


def storm(seed: int, duration: str, **options):
    return run(registry.get("port-storm"),
               ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), **options))


def test_the_handle_clients_run_clean_and_reach_every_trap():
    result = storm(2, "10m")
    assert result.passed, result.violations[:3]
    assert [stat for stat in SOMETIMES if result.stats[stat] == 0] == []
    assert result.stats["content_damaged_refused"] > 0  # this seed damages blob reads
    assert result.invariants["adopt-own-write"] > 100 and result.invariants["contract-safety"] > 100
    assert result.invariants["state-expectations"] > 100


# --- damaged blob reads ------------------------------------------------------------------


class _Always:
    """A plan whose every draw fires the read fault."""

    def draw(self, site, kinds):
        return 1, CORRUPT_ROW


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_damaged_blob_read_is_refused_by_the_store_and_leaves_the_blob_whole(backend, tmp_path):
    store = InMemoryContentStore() if backend == "memory" else SqliteContentStore(
        open_database(str(tmp_path / "content.db")))
    world = World(0)
    blobs = DamagedBlobs(store, world, Node("n1"), _Always())
    ref = run_sync(blobs.put(b"evidence"))
    with pytest.raises(ContentCorrupted) as refused:
        run_sync(blobs.get(ref))
    assert refused.value.ref == ref and world.fault_counts == {CORRUPT_ROW: 1}
    assert run_sync(store.get(ref)) == b"evidence"  # the damage was the read's, not the disk's
    with mx.applied(mx.catalogue()["content-unverified"]):
        assert run_sync(blobs.get(ref)) == damaged(b"evidence")  # what an unverified get hands back
    assert len(damaged(b"evidence")) == len(b"evidence") != 0


def test_the_content_reference_demands_contentcorrupted_of_a_damaged_read():
    reference = ReferenceContent()
    ref = "sha256:" + hashlib.sha256(b"blob").hexdigest()
    assert reference.observe(PortCall(1, "n", "content", "put", (b"blob",), {}, ref, None)) is None

    def get(result, error):
        return reference.observe(PortCall(2, "n", "content", "get", (ref,), {}, result, error, damaged=True))

    assert get(None, ContentCorrupted(ref, "sha256:" + "0" * 64)) is None
    assert "ContentCorrupted" in get(b"blob!", None)  # damaged bytes handed back
    assert get(b"blob", None) is not None  # a damaged read cannot have come back whole


# --- adopt-own-write: the adopted commit is the conflicting save's own -------------------------


def _attached(checker):
    trace = Trace(lambda: 0)
    violations = []
    invariants = InvariantSet(trace, lambda: 0, on_violation=violations.append)
    invariants.add(checker)
    return trace, violations


def _adoption(conflict: dict, commit: dict) -> list:
    """Another node commits ``commit``; node a's save of ``conflict`` conflicts, and it adopts."""
    trace, violations = _attached(AdoptOwnWrite())
    trace.emit("b", "ds.save", {"key": "k", "expected": 0, "version": 1, "payload": {"n": 0}, "revision": 1})
    trace.emit("b", "ds.save", {"key": "k", "expected": 1, **commit, "revision": 2})
    trace.emit("a", "ds.save", {"key": "k", **conflict, "error": "RevisionConflictError", "detail": "-"})
    trace.emit("a", "ds.saved", {"key": "k", "run": "r", "revision": 2, "adopted": True,
                                 "digest": digest(conflict["payload"])})
    return [v.message for v in violations]


def test_an_adoption_must_be_of_an_equal_envelope_at_exactly_expected_plus_one():
    assert _adoption({"expected": 1, "version": 1, "payload": {"n": 1}},
                     {"version": 1, "payload": {"n": 1.0}}) == []  # 1 and 1.0: one JSON number
    assert "expected r0" in _adoption({"expected": 0, "version": 1, "payload": {"n": 1}},
                                      {"version": 1, "payload": {"n": 1}})[0]
    assert "contract v2" in _adoption({"expected": 1, "version": 1, "payload": {"n": 1}},
                                      {"version": 2, "payload": {"n": 1}})[0]
    assert _adoption({"expected": 1, "version": 1, "payload": {"n": True}},
                     {"version": 1, "payload": {"n": 1}}) != []  # true is not 1


# --- contract-safety: forged state is the fault, refusing it the check ---------------------------


def test_contract_safety_judges_its_keys_only_and_not_a_damage_writer():
    trace, violations = _attached(ContractSafety(contracts_for_key, damage=lambda node: node == "forger"))
    key = "adv-state:0:e0"
    trace.emit("forger", "ds.save", {"key": key, "expected": 0, "version": 1, "payload": {"mode": "Idle"},
                                     "revision": 1})
    trace.emit("other", "ds.save", {"key": "raw", "expected": 0, "version": 7, "payload": [], "revision": 1})
    assert violations == []
    trace.emit("a", "ds.load", {"key": key, "found": True, "revision": 1, "version": 1,
                                "payload": {"mode": "Idle"}})
    trace.emit("a", "ds.loaded", {"key": key, "found": True, "current": 1, "stored_version": 1, "revision": 1,
                                  "payload": {"mode": "Idle"}, "migrated": False})
    assert len(violations) == 1 and "validation-failed" in violations[0].message
    assert CONTRACTS[2].migrations[1]({"mode": "idle", "last": 1}) == {"mode": "idle", "last": 1}
