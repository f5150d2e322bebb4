"""Reference of a sealed field: opening one, written apart from the model's sealer.

Why a second implementation: the oracles that judge sealed records
(``sealed-under-live-key``, ``no-secret-leak``) would otherwise open them
with the very code that sealed them, so a fault in it would agree with
itself. This one is written from the rules below, favours being plain over
being fast, and shares nothing with the model's cipher or sealer.

The simulated cipher (``sim-hmac-sha256-v1``) is not a real cipher: what is
judged is the protocol around it (which key sealed which field of which
record, and whether that key is still live).

- keystream block ``i``: HMAC-SHA256(key, ``b"stream"`` + nonce + ``i`` as
  4 bytes big-endian), XORed over the plaintext;
- tag: the first 16 bytes of HMAC-SHA256(key, ``b"tag"`` + the AAD's
  length as 8 bytes big-endian + AAD + nonce + ciphertext); a mismatch
  means the field does not open under that key.

A key-encryption key's material is HMAC-SHA256(root, key id). A data key
is stored wrapped: the hex text of nonce (16 bytes), ciphertext and tag (16
bytes), sealed under the key-encryption key's material with the AAD
``b"wrap/"`` + key id.

A sealed field is the object ``{"$sealed": "sim-hmac-sha256-v1",
"dataKeyId", "nonce", "ciphertext", "tag"}`` (all hex text but the names);
its plaintext is the canonical JSON of the field's value; its AAD is
``"{conversation}\\n{batch}\\n{index}\\n{family}\\n{field}"`` in UTF-8, so
a sealed value moved to another record, place or field no longer opens.

Digests over a preimage: ``unkeyed_digest`` is the plain sha256 of the
canonical text (what a digest over a secret must never be: guessable);
``keyed_digest`` the HMAC-SHA256 under a digest key, spelled
``hmac-sha256:<hex>``.
"""
from __future__ import annotations

import hashlib
import hmac
from typing import Any

from scenarios.reference.jcs import JcsError, canonical, digest, read_back

SIM_CIPHER = "sim-hmac-sha256-v1"
SEALED_MARK = "$sealed"
SEALED_KEYS = frozenset({SEALED_MARK, "dataKeyId", "nonce", "ciphertext", "tag"})
NONCE_LENGTH = 16
TAG_LENGTH = 16
KEYED_PREFIX = "hmac-sha256:"


class SealedFieldUnopenable(Exception):
    """A sealed value (or a wrapped data key) that does not open: not the
    envelope's shape, not hex, or its tag does not match under the key."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def _mac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def _xor_stream(key: bytes, nonce: bytes, data: bytes) -> bytes:
    out = bytearray()
    block = 0
    while len(out) < len(data):  # ends: each pass adds 32 bytes
        out += _mac(key, b"stream" + nonce + block.to_bytes(4, "big"))
        block += 1
    return bytes(x ^ y for x, y in zip(data, out))


def _tag(key: bytes, nonce: bytes, aad: bytes, ciphertext: bytes) -> bytes:
    return _mac(key, b"tag" + len(aad).to_bytes(8, "big") + aad + nonce + ciphertext)[:TAG_LENGTH]


def seal(key: bytes, nonce: bytes, aad: bytes, plaintext: bytes) -> tuple[bytes, bytes]:
    """(ciphertext, tag): the reference's own sealing (tests build envelopes with it)."""
    ciphertext = _xor_stream(key, nonce, plaintext)
    return ciphertext, _tag(key, nonce, aad, ciphertext)


def open_sealed(key: bytes, nonce: bytes, aad: bytes, ciphertext: bytes, tag: bytes, *, where: str) -> bytes:
    """The plaintext, or ``SealedFieldUnopenable`` when the tag does not match."""
    if not hmac.compare_digest(_tag(key, nonce, aad, ciphertext), tag):
        raise SealedFieldUnopenable(where, "the tag does not match (damaged, or another key)")
    return _xor_stream(key, nonce, ciphertext)


def kek_material(root: bytes, key_id: str) -> bytes:
    """A key-encryption key's material, from the key service's root."""
    return _mac(root, key_id.encode("utf-8"))


def wrap_data_key(kek: bytes, key_id: str, data_key: bytes, nonce: bytes) -> str:
    """``data_key`` wrapped under ``kek`` (tests build keyring rows with it)."""
    ciphertext, tag = seal(kek, nonce, b"wrap/" + key_id.encode("utf-8"), data_key)
    return (nonce + ciphertext + tag).hex()


def unwrap_data_key(kek: bytes, key_id: str, wrapped: Any) -> bytes:
    """The data key a keyring row holds wrapped under ``key_id``."""
    where = f"data key wrapped under {key_id}"
    raw = _hex(wrapped, where)
    if len(raw) < NONCE_LENGTH + TAG_LENGTH:
        raise SealedFieldUnopenable(where, f"{len(raw)} bytes: shorter than a nonce and a tag")
    nonce, ciphertext, tag = raw[:NONCE_LENGTH], raw[NONCE_LENGTH:-TAG_LENGTH], raw[-TAG_LENGTH:]
    return open_sealed(kek, nonce, b"wrap/" + key_id.encode("utf-8"), ciphertext, tag, where=where)


def field_aad(conversation_id: str, batch_id: str, index: int, family: str, field: str) -> bytes:
    """The AAD binding a sealed value to its record's identity and its field."""
    return f"{conversation_id}\n{batch_id}\n{index}\n{family}\n{field}".encode("utf-8")


def field_nonce(aad: bytes) -> bytes:
    """The nonce the sealer derives from the record's identity (the AAD)."""
    return hashlib.sha256(aad).digest()[:NONCE_LENGTH]


def is_sealed(value: Any) -> bool:
    """Whether ``value`` is a sealed field's envelope (its shape, not whether it opens)."""
    return type(value) is dict and set(value) == SEALED_KEYS and value[SEALED_MARK] == SIM_CIPHER and all(
        type(value[k]) is str for k in SEALED_KEYS)


def seal_field(data_key: bytes, data_key_id: str, aad: bytes, value: Any) -> dict:
    """A sealed field holding ``value`` (tests build records with it)."""
    nonce = field_nonce(aad)
    ciphertext, tag = seal(data_key, nonce, aad, canonical(value).encode("utf-8"))
    return {SEALED_MARK: SIM_CIPHER, "dataKeyId": data_key_id, "nonce": nonce.hex(), "ciphertext": ciphertext.hex(),
            "tag": tag.hex()}


def open_field_text(data_key: bytes, sealed: Any, aad: bytes, *, where: str) -> str:
    """The canonical text a sealed field holds (its plaintext)."""
    if not is_sealed(sealed):
        raise SealedFieldUnopenable(where, "not a sealed envelope")
    nonce = _hex(sealed["nonce"], where)
    if len(nonce) != NONCE_LENGTH:
        raise SealedFieldUnopenable(where, f"a nonce of {len(nonce)} bytes")
    plaintext = open_sealed(data_key, nonce, aad, _hex(sealed["ciphertext"], where), _hex(sealed["tag"], where),
                            where=where)
    try:
        return plaintext.decode("utf-8")
    except UnicodeDecodeError:
        raise SealedFieldUnopenable(where, "the plaintext is not UTF-8") from None


def open_field(data_key: bytes, sealed: Any, aad: bytes, *, where: str) -> Any:
    """The value a sealed field holds."""
    text = open_field_text(data_key, sealed, aad, where=where)
    try:
        return read_back(text)
    except (ValueError, JcsError):
        raise SealedFieldUnopenable(where, "the plaintext is not JSON") from None


def unkeyed_digest(value: Any) -> str:
    """sha256 hex of the canonical text: what anyone can recompute by guessing the preimage."""
    return digest(value)


def keyed_digest(digest_key: bytes, value: Any) -> str:
    """``hmac-sha256:<hex>`` of the canonical text under ``digest_key``."""
    return KEYED_PREFIX + hmac.new(digest_key, canonical(value).encode("utf-8"), hashlib.sha256).hexdigest()


def _hex(text: Any, where: str) -> bytes:
    if type(text) is not str:
        raise SealedFieldUnopenable(where, "not hex text")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise SealedFieldUnopenable(where, "not hex text") from None
