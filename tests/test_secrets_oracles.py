"""The secrets oracles on hand-made input: ``no-secret-leak`` fails on a
secret value in a traced event or a stored record (sealed or not) and on an
unkeyed fingerprint; ``sealed-under-live-key`` fails on an unsealed
sensitive field, a data key under a retired key, a missing keyring row and a
damaged envelope; both pass on clean input."""
from __future__ import annotations

import hashlib
from typing import Any, NamedTuple


from model.conversation.records import CanonicalRecord, RecordEnvelope
from scenarios.invariants import NoSecretLeak, SealedUnderLiveKey
from scenarios.reference import envelope as ref
from sim.trace import Trace

ROOT = b"root-of-the-key-service-000000000"
CONV = "agents/conv-1-g0"
SEARCH_KEY = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
PIN = "4821"
DIGEST_KEY = b"k" * 32


class Row(NamedTuple):
    dek_id: str
    key_id: str
    wrapped: str


class LedgerRow(NamedTuple):
    submission_id: str
    input: Any


class Witness:
    def __init__(self) -> None:
        self.values = {"search-api-key": (SEARCH_KEY,), "email-pin": ("1111", PIN)}
        self.values_revision = 1
        self.retired: dict[str, int] = {}

    def versions_by_handle(self) -> dict[str, tuple[str, ...]]:
        return dict(self.values)

    def key_root(self) -> bytes:
        return ROOT

    def retired_at_ms(self) -> dict[str, int]:
        return dict(self.retired)


def _data_key(key_id: str) -> tuple[bytes, Row]:
    dek_id = f"dek/{CONV}/{key_id}"
    data_key = hashlib.sha256(dek_id.encode()).digest()
    kek = ref.kek_material(ROOT, key_id)
    return data_key, Row(dek_id, key_id, ref.wrap_data_key(kek, key_id, data_key, b"n" * 16))


class View:
    def __init__(self, records: list[CanonicalRecord], rows: list[Row]) -> None:
        self.records, self.rows = records, rows
        self.checkpoint: Any = None
        self.ledger: list[Any] = []

    def conversation_ids(self) -> tuple[str, ...]:
        return (CONV,)

    def log_records(self, conversation_id: str) -> tuple:
        return tuple(self.records)

    def latest_checkpoint(self, conversation_id: str) -> Any:
        return self.checkpoint

    def submissions(self, conversation_id: str) -> tuple:
        return tuple(self.ledger)

    def keyring_rows(self) -> tuple:
        return tuple(self.rows)


def _record(seq: int, batch: str, family: str, payload: dict) -> CanonicalRecord:
    envelope = RecordEnvelope(f"{batch}/{seq}", family, 1, 1_000 * seq, "deploy-1", payload, "worker-1", 1)
    return CanonicalRecord(CONV, seq, batch, envelope)


def _sealed(key_id: str, batch: str, index: int, family: str, field: str, value: Any) -> dict:
    data_key, row = _data_key(key_id)
    return ref.seal_field(data_key, row.dek_id, ref.field_aad(CONV, batch, index, family, field), value)


ARGS = {"query": "weather", "credential": {"$secret": "email-pin"}}
RESOLVED = {"query": "weather", "credential": PIN}


def _history(*, args: Any = None, fingerprint: str | None = None, key_id: str = "kek-1",
             output: Any = None) -> list[CanonicalRecord]:
    batch = "tool-prepared:sub-1/s0.0"
    args = _sealed(key_id, batch, 1, "tool-call", "args", ARGS) if args is None else args
    output = _sealed(key_id, "tool-settled:sub-1/s0.0", 0, "tool-call", "output",
                     {"result": {"ok": True}}) if output is None else output
    fingerprint = ref.keyed_digest(DIGEST_KEY, RESOLVED) if fingerprint is None else fingerprint
    return [
        _record(1, "conversation-created:c", "conversation-created", {"conversationId": CONV}),
        _record(2, batch, "run-warning", {"note": "first in its batch"}),
        _record(3, batch, "tool-call", {"phase": "prepared", "call": "sub-1/s0.0", "args": args,
                                        "fingerprint": fingerprint}),
        _record(4, "tool-settled:sub-1/s0.0", "tool-call", {"phase": "settled", "call": "sub-1/s0.0",
                                                            "output": output}),
    ]


def _rows(*key_ids: str) -> list[Row]:
    return [_data_key(k)[1] for k in key_ids]


def _run(checker_type: type, view: View, witness: Witness | None = None, events: list = ()) -> tuple[Any, list]:
    violations: list = []
    checker = checker_type(witness or Witness())
    trace = Trace(lambda: 0)
    checker.attach(trace, lambda: 0, violations.append, view)
    for node, kind, fields in events:
        trace.emit(node, kind, fields)
    checker.audit(view)
    return checker, violations


def test_clean_history_passes_both_checks():
    view = View(_history(), _rows("kek-1"))
    events = [("agents/worker-1", "secrets.resolve", {"handle": "email-pin", "length": 4}),
              ("agents/worker-1", "ledger.claim", {"submission": "sub-1", "epoch": 4821, "t": 48210})]
    checker, violations = _run(NoSecretLeak, view, events=events)
    assert violations == [] and checker.checks >= 6 and checker.fingerprints_checked == 1
    checker, violations = _run(SealedUnderLiveKey, view)
    assert violations == [] and checker.fields_opened == 2


def test_a_secret_value_in_any_traced_event_fails():
    witness = Witness()
    events = [("agents/worker-1", "tools.invoke", {"call": "c", "result": {"args": {"credential": PIN}}})]
    _, violations = _run(NoSecretLeak, View(_history(), _rows("kek-1")), witness, events)
    assert [v.invariant for v in violations] == ["no-secret-leak"]
    assert "'email-pin' (version 2)" in violations[0].message and "tools.invoke" in violations[0].message
    assert PIN not in violations[0].message
    # A long value inside a longer string is found too; a new version is learnt when it is put.
    witness.values["search-api-key"] = (SEARCH_KEY, "a" * 32)
    witness.values_revision += 1
    events = [("n", "keys.unwrap", {"detail": "Bearer " + "a" * 32})]
    _, violations = _run(NoSecretLeak, View([], []), witness, events)
    assert len(violations) == 1 and "'search-api-key' (version 2)" in violations[0].message


def test_a_secret_resolved_into_recorded_args_fails_even_sealed():
    batch = "tool-prepared:sub-1/s0.0"
    leaked = _sealed("kek-1", batch, 1, "tool-call", "args", RESOLVED)
    _, violations = _run(NoSecretLeak, View(_history(args=leaked), _rows("kek-1")))
    assert any("the sealed" in v.message and "'email-pin'" in v.message for v in violations), violations


def test_a_secret_in_a_checkpoint_or_a_ledger_row_fails():
    view = View(_history(), _rows("kek-1"))
    view.checkpoint = {"state": {"lastOutput": {"credential": SEARCH_KEY}}}
    view.ledger = [LedgerRow("sub-1", {"metadata": {"pin": PIN}})]
    _, violations = _run(NoSecretLeak, view)
    assert len(violations) == 2 and "checkpoint" in violations[0].message


def test_an_unkeyed_fingerprint_over_a_secret_fails():
    # The PIN's plain digest: anyone with the record tries 10,000 PINs.
    plain = hashlib.sha256(b'{"credential":"4821","query":"weather"}').hexdigest()
    for fingerprint in (plain, "sha256:" + plain):
        _, violations = _run(NoSecretLeak, View(_history(fingerprint=fingerprint), _rows("kek-1")))
        assert len(violations) == 1 and "fingerprint" in violations[0].message, violations


def test_an_unsealed_sensitive_field_fails():
    _, violations = _run(SealedUnderLiveKey, View(_history(args=ARGS), _rows("kek-1")))
    assert len(violations) == 1 and "unsealed" in violations[0].message


def test_a_field_under_a_retired_key_fails():
    witness = Witness()
    witness.retired["kek-1"] = 7_000
    _, violations = _run(SealedUnderLiveKey, View(_history(), _rows("kek-1")), witness)
    assert len(violations) == 2 and all("retired at 7000 ms" in v.message for v in violations)
    # Re-wrapped under the next key (same data key, its row now names kek-2): passes.
    data_key, row = _data_key("kek-1")
    rewrapped = Row(row.dek_id, "kek-2", ref.wrap_data_key(ref.kek_material(ROOT, "kek-2"), "kek-2", data_key,
                                                           b"m" * 16))
    _, violations = _run(SealedUnderLiveKey, View(_history(), [rewrapped]), witness)
    assert violations == []


def test_a_missing_row_or_a_damaged_envelope_fails():
    _, violations = _run(SealedUnderLiveKey, View(_history(), []))
    assert len(violations) == 2 and all("no row in the keyring" in v.message for v in violations)
    good = _sealed("kek-1", "tool-settled:sub-1/s0.0", 0, "tool-call", "output", {"result": 1})
    damaged = {**good, "tag": "00" * 16}
    _, violations = _run(SealedUnderLiveKey, View(_history(output=damaged), _rows("kek-1")))
    assert len(violations) == 1 and "does not open" in violations[0].message
    # Sealed for another place in the log (index 0 of its batch, not 1): does not open either.
    moved = _sealed("kek-1", "tool-prepared:sub-1/s0.0", 0, "tool-call", "args", ARGS)
    _, violations = _run(SealedUnderLiveKey, View(_history(args=moved), _rows("kek-1")))
    assert len(violations) == 1 and "does not open" in violations[0].message


def test_a_credential_refused_by_a_tool_or_the_model_fails():
    from scenarios.invariants import CredentialsAccepted

    violations: list = []
    checker = CredentialsAccepted()
    trace = Trace(lambda: 0)
    checker.attach(trace, lambda: 0, violations.append, None)
    trace.emit("w", "tools.invoke", {"call": "c1", "tool": "search", "key": "c1", "result": {"ok": True}})
    trace.emit("w", "model.stream", {"call": "m1", "chunks": 3})
    assert violations == [] and checker.checks == 2
    trace.emit("w", "model.stream", {"call": "m2", "error": "CredentialRejected",
                                     "detail": "model rejected the credential for 'model-api-key'"})
    trace.emit("w", "tools.invoke", {"call": "c2", "tool": "send-email", "key": None, "error": "CredentialRejected",
                                     "detail": "tool send-email rejected the credential for 'email-pin'"})
    assert [v.message.split(":")[0] for v in violations] == ["m2", "c2"]
