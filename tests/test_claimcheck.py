"""Claim-check middleware: the inline cap boundary, the recorded
reference with and without a declared digest, idempotent storage of equal
payloads, resolve_ref, and verify_claim as an oracle catching a wrong size,
ref or digest."""
from __future__ import annotations

import pickle

import pytest

from model.canonical import CanonicalEncodingError, canonical_bytes
from model.claimcheck import (
    INLINE_CAP_BYTES_DEFAULT,
    ClaimCheck,
    ClaimDigestTooLarge,
    ClaimMismatch,
    NotAClaimRef,
    is_claim_ref,
    resolve_ref,
    verify_claim,
)
from model.conversation.content_store import (
    ContentMissing,
    InMemoryContentStore,
    SqliteContentStore,
    content_ref,
)
from model.pins import InMemoryPinIndex, SqlitePinIndex
from model.sqlite_db import open_database
from scenarios.storage import run_sync


def rows_digest(payload):
    return {"rows": len(payload["rows"]), "max": max(payload["rows"])}


class Clock:
    def __init__(self, now_ms: int = 1_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture(params=["memory", "sqlite"])
def stores(request, tmp_path):
    if request.param == "memory":
        yield InMemoryContentStore(), InMemoryPinIndex()
        return
    conn = open_database(str(tmp_path / "cc.db"))
    yield SqliteContentStore(conn), SqlitePinIndex(conn)
    conn.close()


def make(stores, clock=None, **kwargs):
    content, index = stores
    return ClaimCheck(content, index, now_ms=clock or Clock(), **kwargs)


def string_of_size(size_bytes: int) -> str:
    """A payload whose canonical JSON is exactly ``size_bytes`` bytes."""
    value = "a" * (size_bytes - 2)
    assert len(canonical_bytes(value)) == size_bytes
    return value


def rows_of_size(size_bytes: int) -> dict:
    """``{"rows": [7, 7, ..., 7, 8]}`` whose canonical JSON is ``size_bytes`` bytes."""
    # {"rows":[ ... ]} is 11 bytes of framing; each row is "7," except the last "8".
    n = (size_bytes - 11 + 1) // 2
    value = {"rows": [7] * (n - 1) + [8]}
    pad = size_bytes - len(canonical_bytes(value))
    assert pad in (0, 1)
    if pad:
        value["rows"][-1] = 18
    assert len(canonical_bytes(value)) == size_bytes
    return value


# --- the inline cap -----------------------------------------------------------------


def test_default_cap_is_16_kib():
    assert INLINE_CAP_BYTES_DEFAULT == 16_384


@pytest.mark.parametrize("size_bytes", [2, 100, 16_383, 16_384])
def test_at_or_under_cap_stays_inline_and_is_the_same_object(stores, size_bytes):
    cc = make(stores)
    output = string_of_size(size_bytes)
    assert run_sync(cc.on_output("read_stats", "s1", output)) is output
    assert (cc.inline, cc.claim_checked) == (1, 0)
    assert stores[1].counts() == {"blobs": 0, "pins": 0}


def test_inline_dict_is_returned_unchanged():
    cc = ClaimCheck(InMemoryContentStore(), InMemoryPinIndex(), now_ms=Clock())
    output = {"b": 1, "a": [1, 2, {"c": None}]}
    assert run_sync(cc.on_output(None, "s1", output)) is output


def test_one_byte_over_cap_goes_out(stores):
    content, index = stores
    clock = Clock(5_000)
    cc = make(stores, clock)
    output = string_of_size(16_385)
    recorded = run_sync(cc.on_output("read_stats", "s1", output))
    data = canonical_bytes(output)
    assert recorded == {"ref": content_ref(data), "size": 16_385}
    assert is_claim_ref(recorded)
    assert (cc.inline, cc.claim_checked) == (0, 1)
    assert run_sync(content.get(recorded["ref"])) == data
    blob = run_sync(index.blob(recorded["ref"]))
    assert (blob.size_bytes, blob.stored_at_ms) == (16_385, 5_000)
    assert run_sync(resolve_ref(content, recorded)) == output


def test_custom_cap(stores):
    cc = make(stores, cap_bytes=10)
    assert run_sync(cc.on_output(None, "s", string_of_size(10))) == string_of_size(10)
    assert is_claim_ref(run_sync(cc.on_output(None, "s", string_of_size(11))))


def test_cap_measures_utf8_bytes_not_characters():
    cc = ClaimCheck(InMemoryContentStore(), InMemoryPinIndex(), now_ms=Clock(), cap_bytes=10)
    # 4 characters, 8 UTF-8 bytes, 10 with quotes: inline; one more goes out.
    assert run_sync(cc.on_output(None, "s", "éééé")) == "éééé"
    recorded = run_sync(cc.on_output(None, "s", "ééééa"))
    assert recorded["size"] == 11


def test_non_json_output_is_refused():
    cc = ClaimCheck(InMemoryContentStore(), InMemoryPinIndex(), now_ms=Clock())
    with pytest.raises(CanonicalEncodingError):
        run_sync(cc.on_output(None, "s", {"x": object()}))
    assert (cc.inline, cc.claim_checked) == (0, 0)


# --- digest -----------------------------------------------------------------------


def test_declared_digest_is_recorded(stores):
    content, _ = stores
    cc = make(stores, digests={"read_stats": rows_digest})
    output = rows_of_size(20_000)
    recorded = run_sync(cc.on_output("read_stats", "s1", output))
    assert set(recorded) == {"ref", "size", "digest"}
    assert recorded["size"] == 20_000
    assert recorded["digest"] == rows_digest(output)
    assert is_claim_ref(recorded)
    data = run_sync(content.get(recorded["ref"]))
    assert verify_claim(data, recorded, rows_digest) is None


def test_tool_without_declared_digest_records_ref_and_size_only(stores):
    cc = make(stores, digests={"read_stats": rows_digest})
    output = rows_of_size(20_000)
    assert set(run_sync(cc.on_output("other_tool", "s1", output))) == {"ref", "size"}
    assert set(run_sync(cc.on_output(None, "s2", output))) == {"ref", "size"}


def test_digest_is_not_computed_for_inline_outputs():
    calls = []

    def digest(payload):
        calls.append(payload)
        return 0

    cc = ClaimCheck(InMemoryContentStore(), InMemoryPinIndex(), now_ms=Clock(), digests={"t": digest})
    run_sync(cc.on_output("t", "s", [1, 2, 3]))
    assert calls == []


def test_digest_sees_the_payload_as_stored():
    seen = []

    def digest(payload):
        seen.append(payload)
        return list(payload)  # depends on key order: canonical order is the stored one

    cc = ClaimCheck(InMemoryContentStore(), InMemoryPinIndex(), now_ms=Clock(), cap_bytes=15,
                    digests={"t": digest})
    recorded = run_sync(cc.on_output("t", "s", {"z": 1, "a": 2, "m": 3}))
    assert recorded["digest"] == ["a", "m", "z"]
    data = canonical_bytes({"a": 2, "m": 3, "z": 1})
    assert verify_claim(data, recorded, digest) is None


def test_oversized_digest_is_a_typed_error_and_stores_nothing():
    content, index = InMemoryContentStore(), InMemoryPinIndex()
    cc = ClaimCheck(content, index, now_ms=Clock(), cap_bytes=64, digests={"t": lambda p: p})
    with pytest.raises(ClaimDigestTooLarge) as info:
        run_sync(cc.on_output("t", "step-9", "x" * 100))
    err = info.value
    assert err.name == "ClaimDigestTooLarge"
    assert (err.tool, err.step_id, err.digest_size_bytes, err.cap_bytes) == ("t", "step-9", 102, 64)
    assert pickle.loads(pickle.dumps(err)).digest_size_bytes == 102
    assert index.counts() == {"blobs": 0, "pins": 0}
    assert content._blobs == {}
    assert cc.claim_checked == 0


# --- idempotence ------------------------------------------------------------------


def test_equal_payloads_share_one_blob_and_the_later_stored_at(stores):
    content, index = stores
    clock = Clock(1_000)
    cc = make(stores, clock, digests={"t": rows_digest})
    first = rows_of_size(30_000)
    # Equal JSON value, different dict insertion order and list/tuple spelling.
    second = {"rows": tuple(first["rows"])}
    a = run_sync(cc.on_output("t", "s1", first))
    clock.now_ms = 9_000
    b = run_sync(cc.on_output("t", "s2", second))
    assert a == b
    assert cc.claim_checked == 2
    assert index.counts() == {"blobs": 1, "pins": 0}
    assert run_sync(index.blob(a["ref"])).stored_at_ms == 9_000
    clock.now_ms = 3_000  # an earlier clock reading never moves stored_at back
    run_sync(cc.on_output("t", "s3", first))
    assert run_sync(index.blob(a["ref"])).stored_at_ms == 9_000


def test_different_payloads_get_different_refs():
    index = InMemoryPinIndex()
    cc = ClaimCheck(InMemoryContentStore(), index, now_ms=Clock(), cap_bytes=10)
    a = run_sync(cc.on_output(None, "s1", "x" * 20))
    b = run_sync(cc.on_output(None, "s2", "y" * 20))
    assert a["ref"] != b["ref"]
    assert index.counts()["blobs"] == 2


# --- is_claim_ref / resolve_ref ----------------------------------------------------

REF = content_ref(b"hello")


@pytest.mark.parametrize("value", [
    {"ref": REF, "size": 5},
    {"ref": REF, "size": 0},
    {"ref": REF, "size": 5, "digest": None},
    {"ref": REF, "size": 5, "digest": {"rows": 3}},
])
def test_is_claim_ref_accepts(value):
    assert is_claim_ref(value)


@pytest.mark.parametrize("value", [
    None,
    "sha256:" + "0" * 64,
    [REF, 5],
    {"ref": REF},
    {"size": 5},
    {"ref": REF, "size": 5, "extra": 1},
    {"ref": REF, "size": 5, "digest": 1, "extra": 1},
    {"ref": REF, "size": "5"},
    {"ref": REF, "size": 5.0},
    {"ref": REF, "size": True},
    {"ref": REF, "size": -1},
    {"ref": REF.upper(), "size": 5},
    {"ref": "sha256:" + "0" * 63, "size": 5},
    {"ref": "md5:" + "0" * 64, "size": 5},
    {"ref": 5, "size": 5},
])
def test_is_claim_ref_rejects(value):
    assert not is_claim_ref(value)


def test_resolve_ref_errors():
    content = InMemoryContentStore()
    with pytest.raises(NotAClaimRef) as info:
        run_sync(resolve_ref(content, {"ref": "nope", "size": 1}))
    assert info.value.name == "NotAClaimRef"
    with pytest.raises(ContentMissing):
        run_sync(resolve_ref(content, {"ref": REF, "size": 5}))
    ref = run_sync(content.put(canonical_bytes("hello")))
    assert run_sync(resolve_ref(content, {"ref": ref, "size": 7})) == "hello"
    with pytest.raises(ClaimMismatch) as info:
        run_sync(resolve_ref(content, {"ref": ref, "size": 8}))
    assert (info.value.name, info.value.ref) == ("ClaimMismatch", ref)


def test_resolve_ref_handles_payloads_above_decode_defaults():
    # Bigger than canonical.decode's default 1 MiB / 256 Ki-character caps.
    content = InMemoryContentStore()
    cc = ClaimCheck(content, InMemoryPinIndex(), now_ms=Clock())
    output = {"blob": "z" * 1_200_000, "rows": list(range(120_000))}
    recorded = run_sync(cc.on_output(None, "s", output))
    assert run_sync(resolve_ref(content, recorded)) == output


# --- verify_claim -----------------------------------------------------------------


@pytest.fixture
def claimed():
    content = InMemoryContentStore()
    cc = ClaimCheck(content, InMemoryPinIndex(), now_ms=Clock(), digests={"t": rows_digest})
    output = rows_of_size(20_001)
    recorded = run_sync(cc.on_output("t", "s", output))
    return run_sync(content.get(recorded["ref"])), recorded


def test_verify_claim_accepts_the_real_blob(claimed):
    data, recorded = claimed
    assert verify_claim(data, recorded, rows_digest) is None
    assert verify_claim(bytearray(data), recorded, rows_digest) is None


def test_verify_claim_catches_wrong_size(claimed):
    data, recorded = claimed
    reason = verify_claim(data, dict(recorded, size=recorded["size"] + 1), rows_digest)
    assert reason is not None and reason.startswith("size mismatch")
    reason = verify_claim(data + b" ", recorded, rows_digest)
    assert reason is not None and reason.startswith("size mismatch")


def test_verify_claim_catches_wrong_ref(claimed):
    data, recorded = claimed
    tampered = data.replace(b"7", b"6", 1)  # same size, different bytes
    assert len(tampered) == len(data)
    reason = verify_claim(tampered, recorded, rows_digest)
    assert reason is not None and reason.startswith("ref mismatch")
    other = dict(recorded, ref=content_ref(b"other"))
    reason = verify_claim(data, other, rows_digest)
    assert reason is not None and reason.startswith("ref mismatch")


def test_verify_claim_catches_wrong_digest(claimed):
    data, recorded = claimed
    wrong = dict(recorded, digest=dict(recorded["digest"], rows=recorded["digest"]["rows"] + 1))
    reason = verify_claim(data, wrong, rows_digest)
    assert reason is not None and reason.startswith("digest mismatch")
    # A different digest function than the one declared when recording.
    reason = verify_claim(data, recorded, lambda p: {"rows": 0})
    assert reason is not None and reason.startswith("digest mismatch")


def test_verify_claim_digest_compares_canonically(claimed):
    data, recorded = claimed
    respelled = dict(recorded, digest={"max": float(recorded["digest"]["max"]), "rows": recorded["digest"]["rows"]})
    assert verify_claim(data, respelled, rows_digest) is None


def test_verify_claim_digest_presence_must_match_the_declaration(claimed):
    data, recorded = claimed
    reason = verify_claim(data, recorded, None)
    assert reason is not None and reason.startswith("unexpected digest")
    plain = {"ref": recorded["ref"], "size": recorded["size"]}
    assert verify_claim(data, plain, None) is None
    reason = verify_claim(data, plain, rows_digest)
    assert reason is not None and reason.startswith("digest missing")


def test_verify_claim_reports_rather_than_raises(claimed):
    data, recorded = claimed

    def broken(payload):
        raise KeyError("no\nsuch")

    reason = verify_claim(data, recorded, broken)
    assert reason is not None and reason.startswith("digest function raised KeyError") and "\n" not in reason
    reason = verify_claim(data, {"ref": "x"}, rows_digest)
    assert reason is not None and reason.startswith("not a claim-check reference")
    reason = verify_claim("text", recorded, rows_digest)  # type: ignore[arg-type]
    assert reason is not None and reason.startswith("data must be bytes")
    not_json = b"\xff" * 4
    reason = verify_claim(not_json, {"ref": content_ref(not_json), "size": 4, "digest": 1}, rows_digest)
    assert reason is not None and reason.startswith("payload does not decode") and "\n" not in reason
    reason = verify_claim(data, recorded, lambda p: {"x": object()})
    assert reason is not None and reason.startswith("digest is not a JSON value")
