"""The port-storm adversaries at the edges of durable state, checkpoints and
the payload check: damaged checkpoint rows (``faults.content_reads``),
another build's checkpoints, foreign-spelled state text, the handle's
refusal and clear (``scenarios.adversaries.state_handle``), payloads no port call can
carry (``scenarios.adversaries.values``) — and each expectation firing when
the model answers wrongly."""
from __future__ import annotations

import json

import pytest

import model.conversation.checkpoints as checkpoints
import model.durable_state.store as ds_store
import scenarios.adversaries.state_handle as adversary_state
from faults.content_reads import CHECKPOINT_DAMAGES, DamagedCheckpoints, damaged_checkpoint_row, respell_state
from faults.kinds import CORRUPT_ROW
from model.canonical import ZERO_DIGEST, digest
from model.conversation.checkpoints import (Checkpoint, CheckpointDecision, CheckpointUnusable,
                                            InMemoryCheckpointStore, SqliteCheckpointStore)
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.records import FencedAppendRequest, RecordEnvelope
from model.conversation.sqlite_store import SqliteConversationStore
from model.durable_state.contracts import StateContract
from model.durable_state.memory_store import InMemoryDurableStateStore
from model.durable_state.sqlite_store import SqliteDurableStateStore
from model.durable_state.store import DurableStateWrite, encode_payload
from model.sqlite_db import open_database
from scenarios import registry
from scenarios.adversaries.values import DS_DEPTH_PAST_CAP, FLOAT_EDGES, _nested, cycle
from scenarios.reference.durable_state import _payload_problem
from scenarios.reference.jcs import canonical
from scenarios.storage import run_sync
from sim.clock import parse_duration_ms
from sim.node import Node
from sim.runner import run
from sim.scenario import ScenarioOptions
from sim.world import World


class _Always:
    """A plan whose every draw fires the read fault (hit ``hit``)."""

    def __init__(self, hit: int = 1) -> None:
        self.hit = hit

    def draw(self, site, kinds):
        return self.hit, CORRUPT_ROW


def _stores(backend: str, tmp_path):
    if backend == "memory":
        log = InMemoryConversationStore()
        return log, InMemoryCheckpointStore(log)
    log = SqliteConversationStore(open_database(str(tmp_path / "ck.db")))
    return log, SqliteCheckpointStore(log)


def _checkpointed(log, store) -> Checkpoint:
    run_sync(log.materialize("c", "p", 1))
    records = tuple(RecordEnvelope(f"r{i}", "model-output", 1, 1, "d", {"i": i}, "p", 1) for i in range(2))
    out = run_sync(log.append(FencedAppendRequest("c", "b", "p", 1, 0, ZERO_DIGEST, records)))
    checkpoint = Checkpoint("c", "s", out.last_seq, out.tail_digest, "e/1", "d/1", "m/1", "t/1", 1, {"records": 2}, 5)
    run_sync(store.save(checkpoint))
    return checkpoint


# --- damaged checkpoint rows ------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("index", range(len(CHECKPOINT_DAMAGES)))
def test_a_damaged_checkpoint_row_is_refused_with_its_kind_and_left_whole(backend, index, tmp_path):
    log, store = _stores(backend, tmp_path)
    checkpoint = _checkpointed(log, store)
    world = World(0)
    how, kind = CHECKPOINT_DAMAGES[index]
    reads = DamagedCheckpoints(store, world, Node("n1"), _Always(hit=index + len(CHECKPOINT_DAMAGES)))
    with pytest.raises(CheckpointUnusable) as refused:
        run_sync(reads.load_latest("c", 10))
    assert refused.value.kind == kind and reads.damaged == 1 and reads.last_damage == (how, kind)
    assert world.fault_counts == {CORRUPT_ROW: 1}
    assert run_sync(store.load_latest("c", 10)) == checkpoint  # the damage was the read's, not the row's
    # Nothing stored at or before the seq: nothing to damage, no fault drawn.
    assert run_sync(reads.load_latest("c", 0)) is None and reads.damaged == 1


def test_each_damage_breaks_what_its_kind_says():
    text = json.dumps({"schemaVersion": 1, "throughSequence": 2}, separators=(",", ":"), sort_keys=True)
    integrity = digest(json.loads(text))
    assert damaged_checkpoint_row(text, integrity, "integrity") == (text, integrity[:-1] + (
        "0" if integrity[-1] != "0" else "1"))
    assert damaged_checkpoint_row(text, integrity, "torn")[0] == text[:len(text) // 2]
    newer, newer_digest = damaged_checkpoint_row(text, integrity, "newer-schema")
    assert json.loads(newer)["schemaVersion"] == 2 and newer_digest == digest(json.loads(newer))
    field, _ = damaged_checkpoint_row(text, integrity, "field")
    assert json.loads(field)["throughSequence"] == "2"


# --- foreign-spelled durable state ------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_state_text_respelled_with_whitespace_reads_back_as_the_same_record(backend, tmp_path):
    store = InMemoryDurableStateStore() if backend == "memory" else SqliteDurableStateStore(
        open_database(str(tmp_path / "ds.db")))
    payload = {"mode": "idle", "last": 1.0, "s": "\ud800"}
    run_sync(store.save("k", DurableStateWrite(2, payload), 0))
    before = store.snapshot()
    assert respell_state(store, "k") and not respell_state(store, "absent")
    record = run_sync(store.load("k"))
    assert (record.contract_version, record.revision, record.payload) == (2, 1, payload)
    assert store.snapshot() == before and len(store) == 1
    saved = run_sync(store.save("k", DurableStateWrite(2, {"n": 1}), 1))  # a CAS over respelled text
    assert saved.revision == 2


# --- values: ordinary fractions, and payloads no port call can carry ----------------------------


def test_ordinary_fractions_encode_alike_in_both_encoders():
    from model.canonical import canonical_json
    for value in FLOAT_EDGES:
        assert canonical_json(value) == canonical(value), value
    assert canonical_json([1.5, -123.456, 0.1 + 0.2]) == "[1.5,-123.456,0.30000000000000004]"


def test_a_cycle_and_nesting_past_the_cap_are_refused_by_the_store_and_the_reference_alike():
    for value, want in ((cycle(), "$[0] is circular"), (_nested(DS_DEPTH_PAST_CAP), "is nested too deeply")):
        with pytest.raises(ValueError) as refused:
            encode_payload(value)
        assert str(refused.value).endswith(want)
        assert _payload_problem(value).name == "ValueError"


# --- each expectation fires when the model answers wrongly ---------------------------------------


def _storm(seed: int, duration: str, **options):
    return run(registry.get("port-storm"),
               ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), **options))


def _messages(result, checker: str) -> list[str]:
    return [v.message for v in result.violations if v.invariant == checker]


@pytest.fixture(scope="module")
def damaged_reads_storm():
    """Seed 2 for two minutes with damaged checkpoint reads: one run shared by
    the two tests below that run exactly it."""
    return _storm(2, "2m", rates={CORRUPT_ROW: 0.3})


def test_the_storm_reaches_the_new_edges_clean(damaged_reads_storm):
    result = damaged_reads_storm
    assert result.passed, result.violations[:3]
    for stat in ("checkpoint_mismatch_refused", "checkpoint_damaged_refused", "checkpoint_recovered",
                 "state_invalid_save_refused", "state_cleared", "values_ds_unencodable_refused"):
        assert result.stats[stat] > 0, stat


def test_a_recovery_given_another_builds_checkpoint_is_caught(monkeypatch):
    async def blind(store, log, conversation_id, at_or_before_seq, *, engine_version, definition_digest, **digests):
        found = await store.load_latest(conversation_id, at_or_before_seq)  # engine and configuration unchecked
        if found is None or await log.digest_at(conversation_id, found.covered_seq) != found.tail_digest:
            return CheckpointDecision(None, "none" if found is None else "digest-mismatch")
        return CheckpointDecision(found, None)

    monkeypatch.setattr(adversary_state, "usable_checkpoint", blind)
    messages = _messages(_storm(1, "3m"), "state-expectations")
    reasons = ("engine-version", "definition-digest", "model-digest", "tool-digest")
    assert any(f"it must be refused ({reason})" in m for m in messages for reason in reasons), messages[:3]
    assert any("a rebuild from the log reaches" in m for m in messages), messages[:3]


def test_a_damaged_checkpoint_used_anyway_is_caught(monkeypatch):
    def trusting(conversation_id, text, integrity):  # no integrity, schema or field check
        value = json.loads(text) if text.endswith("}") else {}
        return Checkpoint(value.get("conversationId", conversation_id), value.get("submissionId", ""),
                          value.get("throughSequence", 0), value.get("tailDigest", ZERO_DIGEST),
                          value.get("engineVersion", ""), value.get("agentDefinitionDigest", ""),
                          value.get("modelDigest", ""), value.get("toolDigest", ""),
                          value.get("schemaVersion", 1), value.get("state"), value.get("createdAt", 0))

    monkeypatch.setattr(checkpoints, "decode_checkpoint_row", trusting)
    messages = _messages(_storm(2, "12m", rates={CORRUPT_ROW: 0.3}), "state-expectations")
    assert any("read damaged below the store" in m and "never used" in m for m in messages), messages[:3]


def test_a_decoder_that_misreads_foreign_text_is_caught(monkeypatch):
    scan = ds_store._DECODER.scan_once

    def strict(text):  # reads only text it wrote: anything else decodes as an empty object
        try:
            value, end = scan(text, 0)
        except StopIteration:
            return {}
        return value if end == len(text) else {}

    monkeypatch.setattr(ds_store, "_decode", strict)
    result = _storm(4, "10m")
    assert result.stats["state_respelled"] > 0
    assert any("respelled with whitespace, a load answered" in m
               for m in _messages(result, "state-expectations")), result.violations[:3]


def test_a_handle_that_saves_what_its_contract_refuses_is_caught(monkeypatch):
    monkeypatch.setattr(StateContract, "check_payload", lambda self, key, payload: None)
    messages = _messages(_storm(2, "12m"), "state-expectations")
    assert any("the contract refuses it (validation-failed)" in m for m in messages), messages[:3]


def test_a_payload_check_that_misses_a_cycle_is_caught(monkeypatch):
    monkeypatch.setattr(ds_store, "_find_non_json", lambda payload: None)
    messages = _messages(_storm(2, "3m"), "values-expectations")
    assert any("encode_payload of a cycle raised" in m for m in messages), messages[:3]


def test_forged_state_a_build_accepts_is_caught():
    from faults import mutants as mx
    with mx.applied(mx.catalogue()["ds-load-skips-validation"]):
        result = _storm(2, "4m")
    messages = _messages(result, "state-expectations")
    assert result.stats["state_forged"] > 0
    assert any("state-forger: forged" in m and "it must refuse it" in m for m in messages), messages[:3]


def test_a_run_with_damaged_checkpoint_reads_replays_from_its_script_to_the_same_digest(damaged_reads_storm):
    import attrs

    from faults.content_reads import CHECKPOINT_SITE
    opts = ScenarioOptions(seed=2, duration_ms=parse_duration_ms("2m"), rates={CORRUPT_ROW: 0.3})
    first = damaged_reads_storm  # run(registry.get("port-storm"), opts)
    assert first.passed and any(e.site == CHECKPOINT_SITE for e in first.fault_script)
    again = run(registry.get("port-storm"), attrs.evolve(opts, fault_script=tuple(first.fault_script)))
    assert again.passed and again.trace_digest == first.trace_digest
    assert again.stats["checkpoint_damaged_refused"] == first.stats["checkpoint_damaged_refused"] > 0


def test_a_model_assertion_or_an_overflow_is_never_a_typed_refusal():
    """The adversaries count a refusal as typed only when it is one: a model
    assertion that fired (``UnclassifiableRow``: the model is broken) or an
    OverflowError is a bug, whatever module its class is in or what it is
    named; argument validation and the model's named errors are typed."""
    from model.ledger.records import AdmissionPolicyError
    from model.recovery_decisions import UnclassifiableRow
    from scenarios.adversaries.common import _typed

    overflow = type("IntegerOverflow", (OverflowError,), {"__module__": "model.sqlite_db", "name": "IntegerOverflow"})
    assert not _typed(UnclassifiableRow("sub-1", "running"))
    assert not _typed(overflow("past INTEGER"))
    assert not _typed(UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"))
    assert _typed(ValueError("limit must be positive")) and _typed(TypeError("data must be bytes"))
    assert _typed(AdmissionPolicyError("occupied", "group-occupied"))
