"""Row rot past the decode caps, and rot of the ledger's stored reservation.

Each rot is a document a reader must refuse with a typed error, never hand
back as a value: another record of the same outcome (only the reserved
digest tells it apart), a row schema version the store does not support,
and text past each cap the ledger's reader passes to ``decode``. In a run,
the rot must end DETECTED, and finalize's own digest check must name it
even with the reference model silenced.
"""
from __future__ import annotations

import pytest

import faults.beyond as beyond
from faults.beyond import (EMPTY_RECEIPT, LEDGER_ROTS, OTHER_RECORD, ROTS, SCHEMA_VERSION_ROT, LedgerSurgery,
                           beyond_surgeries)
from faults.kinds import ROW_ROT
from faults.script import parse_script
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.records import CorruptSubmission, InvalidSettlement, UnsupportedLedgerVersion
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.sqlite_db import open_database
from scenarios import registry
from scenarios.storage import run_sync
from sim.clock import parse_duration_ms
from sim.rng import Streams
from sim.runner import DETECTED, run
from sim.scenario import ScenarioOptions
from model.ledger.records import settlement_envelope


def _env(claim, record):
    """``record`` in ``claim``'s settlement record envelope (what the ledger reserves)."""
    return settlement_envelope(claim.submission_id, record, 0, receipt="rcpt-test")


# What each text rot's refusal names: the check it must reach.
REFUSALS = {
    "member-twice": "duplicate object key",
    "non-finite": "non-finite",
    "unsafe-integer": "2**53",
    "too-deep": "max_depth",
    "half": "invalid JSON",
    "not-utf8": "not valid UTF-8",
    "bare-string": "must be a JSON object",
    "too-many-items": "max_items",
    "long-string": "string of length",
    "long-key": "object key of length",
    "too-many-bytes": "max_bytes=1048576 (UTF-8)",
    "blob-too-big": "bytes exceeds max_bytes",
}


def _names(sqlite: bool) -> list[str]:
    return [name for name, _, sqlite_only in LEDGER_ROTS + ROTS if sqlite or not sqlite_only]


def _ledger(store: str, path):
    if store == "memory":
        return InMemorySubmissionLedger()
    return SqliteSubmissionLedger(open_database(str(path)))


def _reserved(ledger):
    """A submission claimed and reserved, not yet finalized."""
    submission_id = run_sync(ledger.admit("c", "p", "k", {"q": 1}, 0)).submission_id
    run_sync(ledger.mark_ready(submission_id, 0))
    claim = run_sync(ledger.claim("c", "w", 1_000, 1))
    record = {"outcome": "failed", "diagnostic": {"errorTag": "E", "message": "m"}}
    return submission_id, claim, run_sync(ledger.reserve_settlement(claim, _env(claim, record)))


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_every_rot_of_a_reservation_is_refused_typed(store, tmp_path):
    assert set(REFUSALS) == {name for name, _, _ in ROTS}
    for index, name in enumerate(_names(store == "sqlite")):
        ledger = _ledger(store, tmp_path / f"{index}.db")
        submission_id, claim, reserved = _reserved(ledger)
        surgery = LedgerSurgery(ledger, lambda row: index)
        assert surgery.apply(ROW_ROT, "reserve_settlement", (claim, {}), {}, reserved, None), name
        if name == SCHEMA_VERSION_ROT:
            with pytest.raises(UnsupportedLedgerVersion, match="unsupported schema version"):
                run_sync(ledger.get(submission_id))
            continue
        if name == EMPTY_RECEIPT:  # a control field every scan answers: the scan itself fails, typed
            with pytest.raises(CorruptSubmission, match="receipt is ''") as refused:
                run_sync(ledger.scan_nonterminal())
            assert refused.value.operation == "scan_nonterminal"
            continue
        with pytest.raises((CorruptSubmission, InvalidSettlement)) as refused:
            run_sync(ledger.finalize_settlement(submission_id, 2))
        expected = "does not match its reserved digest" if name == OTHER_RECORD else REFUSALS[name]
        if store == "sqlite" and name in ("not-utf8", "blob-too-big"):
            expected = "reserved_json has the wrong type (bytes)"  # SQLite hands the bytes back as a BLOB
        assert expected in str(refused.value), (name, str(refused.value)[:200])


def test_where_the_rots_start_depends_on_the_seed_and_the_row():
    """A run stops at its first detection: the first rot must vary across
    seeds and rows, or a sweep would only ever meet one entry."""
    class _Store:
        log = ds = None
        ledger = InMemorySubmissionLedger()

    def firsts(seed: int) -> list[str]:
        surgery = beyond_surgeries(_Store, Streams(seed))["ledger"]
        rots = surgery._rotter._rots
        return [rots[surgery._rotter._offset(f"row-{i}") % len(rots)][0] for i in range(40)]

    assert firsts(7) == firsts(7) != firsts(15)
    assert len(set(firsts(7))) >= 8


def _force(monkeypatch, name: str) -> None:
    """Every ledger rot of the run is ``name``."""
    real = LedgerSurgery

    def make(store, offset):
        surgery = real(store)
        index = [entry[0] for entry in surgery._rotter._rots].index(name)
        surgery._rotter._offset = lambda row: index
        return surgery

    monkeypatch.setattr(beyond, "LedgerSurgery", make)


def _rot_a_reservation(store: str = "memory"):
    script = parse_script([{"time_ms": parse_duration_ms("5m"), "node": "workers/worker-1",
                            "site": "ledger.reserve_settlement", "kind": ROW_ROT}])
    opts = ScenarioOptions(seed=1, duration_ms=parse_duration_ms("20m"), store=store, fault_script=script)
    return run(registry.get("ledger-storm"), opts)


@pytest.mark.parametrize("name, store", [(OTHER_RECORD, "memory"), (SCHEMA_VERSION_ROT, "sqlite"),
                                         ("long-key", "memory"), (EMPTY_RECEIPT, "memory"),
                                         (EMPTY_RECEIPT, "sqlite")])
def test_a_rotten_reservation_in_a_run_is_detected(monkeypatch, name, store):
    _force(monkeypatch, name)
    result = _rot_a_reservation(store)
    assert result.status == DETECTED, result.violations
    (broken,) = result.beyond_contract
    assert (broken.site, broken.kind) == ("ledger.reserve_settlement", ROW_ROT)


def test_finalize_itself_names_another_record_than_the_reserved_one(monkeypatch, without_reference_model):
    """Not only the reference model: the worker's finalize refuses it."""
    _force(monkeypatch, OTHER_RECORD)
    result = _rot_a_reservation()
    first = result.violations[0]
    assert result.status == DETECTED and first.invariant == "no-uncaught-errors", first
    assert "does not match its reserved digest" in first.message, first.message


def test_an_emptied_receipt_is_refused_by_the_scan_itself(monkeypatch, without_reference_model):
    """Not only the reference model: the stores refuse the row typed when it
    is read back (a scan names the operation; issue 29: an empty receipt is
    not readable)."""
    _force(monkeypatch, EMPTY_RECEIPT)
    result = _rot_a_reservation()
    assert result.status == DETECTED, result.violations
    assert any("CorruptSubmission" in v.message and "receipt is" in v.message for v in result.violations), \
        result.violations
