"""The reference opener of sealed fields (``scenarios.reference.envelope``):
envelopes built by hand open; a flipped byte, another key, another record's
identity or a damaged wrapped data key do not."""
from __future__ import annotations

import hashlib
import hmac

import pytest

from scenarios.reference import envelope as ref
from scenarios.reference.jcs import canonical

ROOT = b"r" * 32
AAD = ref.field_aad("secrets/conv-1-g0", "tool-prepared:sub-1/s0.0", 0, "tool-call", "args")
DATA_KEY = hashlib.sha256(b"a data key").digest()
VALUE = {"query": "weather", "credential": {"$secret": "search-api-key"}, "n": 3}


def _flip(hex_text: str, at: int = 0) -> str:
    raw = bytearray(bytes.fromhex(hex_text))
    raw[at] ^= 0x01
    return raw.hex()


def test_a_sealed_field_opens_to_its_value():
    sealed = ref.seal_field(DATA_KEY, "dek/secrets/conv-1-g0/kek-1", AAD, VALUE)
    assert ref.is_sealed(sealed) and sealed["$sealed"] == "sim-hmac-sha256-v1"
    assert sealed["nonce"] == hashlib.sha256(AAD).digest()[:16].hex()
    assert ref.open_field(DATA_KEY, sealed, AAD, where="t") == VALUE
    assert ref.open_field_text(DATA_KEY, sealed, AAD, where="t") == canonical(VALUE)
    assert canonical(VALUE).encode() not in bytes.fromhex(sealed["ciphertext"])


def test_the_keystream_and_tag_are_the_ones_the_rules_name():
    key, nonce, aad, plain = b"k" * 32, b"n" * 16, b"aad", b"x" * 40  # two keystream blocks
    stream = b"".join(hmac.new(key, b"stream" + nonce + i.to_bytes(4, "big"), hashlib.sha256).digest()
                      for i in range(2))
    ciphertext, tag = ref.seal(key, nonce, aad, plain)
    assert ciphertext == bytes(a ^ b for a, b in zip(plain, stream))
    assert tag == hmac.new(key, b"tag" + (3).to_bytes(8, "big") + aad + nonce + ciphertext,
                           hashlib.sha256).digest()[:16]


@pytest.mark.parametrize("member", ["ciphertext", "tag", "nonce"])
def test_a_flipped_byte_does_not_open(member):
    sealed = ref.seal_field(DATA_KEY, "dek/x/kek-1", AAD, VALUE)
    damaged = {**sealed, member: _flip(sealed[member])}
    with pytest.raises(ref.SealedFieldUnopenable, match="tag does not match"):
        ref.open_field(DATA_KEY, damaged, AAD, where="t")


def test_another_key_or_another_place_does_not_open():
    sealed = ref.seal_field(DATA_KEY, "dek/x/kek-1", AAD, VALUE)
    with pytest.raises(ref.SealedFieldUnopenable):
        ref.open_field(hashlib.sha256(b"other").digest(), sealed, AAD, where="t")
    moved = ref.field_aad("secrets/conv-1-g0", "tool-prepared:sub-1/s0.0", 1, "tool-call", "args")
    with pytest.raises(ref.SealedFieldUnopenable):
        ref.open_field(DATA_KEY, sealed, moved, where="t")


def test_what_is_not_an_envelope_is_refused_typed():
    for value in ({"query": "x"}, "text", None, {"$sealed": "aes-gcm", "dataKeyId": "d", "nonce": "00",
                                                 "ciphertext": "", "tag": ""}):
        assert not ref.is_sealed(value)
        with pytest.raises(ref.SealedFieldUnopenable, match="not a sealed envelope"):
            ref.open_field(DATA_KEY, value, AAD, where="t")
    sealed = ref.seal_field(DATA_KEY, "dek/x/kek-1", AAD, VALUE)
    with pytest.raises(ref.SealedFieldUnopenable, match="not hex"):
        ref.open_field(DATA_KEY, {**sealed, "ciphertext": "zz"}, AAD, where="t")


def test_a_wrapped_data_key_unwraps_under_its_kek_only():
    kek = ref.kek_material(ROOT, "kek-1")
    assert kek == hmac.new(ROOT, b"kek-1", hashlib.sha256).digest()
    wrapped = ref.wrap_data_key(kek, "kek-1", DATA_KEY, b"w" * 16)
    assert ref.unwrap_data_key(kek, "kek-1", wrapped) == DATA_KEY
    with pytest.raises(ref.SealedFieldUnopenable):
        ref.unwrap_data_key(ref.kek_material(ROOT, "kek-2"), "kek-2", wrapped)
    with pytest.raises(ref.SealedFieldUnopenable):
        ref.unwrap_data_key(kek, "kek-1", _flip(wrapped, 20))
    with pytest.raises(ref.SealedFieldUnopenable, match="shorter"):
        ref.unwrap_data_key(kek, "kek-1", "00" * 8)


def test_digests_over_a_preimage():
    value = {"to": "a@example.org", "credential": "4821"}
    assert ref.unkeyed_digest(value) == hashlib.sha256(canonical(value).encode()).hexdigest()
    keyed = ref.keyed_digest(b"d" * 32, value)
    assert keyed == "hmac-sha256:" + hmac.new(b"d" * 32, canonical(value).encode(), hashlib.sha256).hexdigest()
    assert ref.unkeyed_digest(value) not in keyed
