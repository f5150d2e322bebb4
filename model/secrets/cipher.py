"""THE SIMULATED CIPHER (``sim-hmac-sha256-v1``): not a real cipher.

An authenticated stream construction out of ``hmac``/``hashlib`` standing
in for the production AEAD, so the protocol around it (which key, which
field, when; rotation and recovery) runs without a new dependency. Its
strength is not what is tested; do not use it to protect anything.

- keystream block ``i`` = HMAC-SHA256(key, b"stream" + nonce + i as 4 bytes
  big-endian), XORed over the plaintext;
- tag = HMAC-SHA256(key, b"tag" + len(aad) as 8 bytes big-endian + aad +
  nonce + ciphertext), its first 16 bytes.

A wrapped key (``wrap_key``) is the hex text of nonce (16 bytes) +
ciphertext + tag (16 bytes), sealed under the wrapping key with the AAD
``b"wrap/" + key id`` and the nonce HMAC-SHA256(wrapping key, b"wrap-nonce"
+ plaintext)[:16].
"""
from __future__ import annotations

import hashlib
import hmac

from model.secrets.errors import EnvelopeDamaged

SIM_CIPHER = "sim-hmac-sha256-v1"
NONCE_BYTES = 16
TAG_BYTES = 16


def _keystream(key: bytes, nonce: bytes, length: int) -> bytes:
    blocks = []
    for i in range((length + 31) // 32):
        blocks.append(hmac.new(key, b"stream" + nonce + i.to_bytes(4, "big"), hashlib.sha256).digest())
    return b"".join(blocks)[:length]


def _tag(key: bytes, nonce: bytes, aad: bytes, ciphertext: bytes) -> bytes:
    message = b"tag" + len(aad).to_bytes(8, "big") + aad + nonce + ciphertext
    return hmac.new(key, message, hashlib.sha256).digest()[:TAG_BYTES]


def seal_bytes(key: bytes, nonce: bytes, aad: bytes, plaintext: bytes) -> tuple[bytes, bytes]:
    """(ciphertext, tag) of ``plaintext`` under ``key``/``nonce``, bound to ``aad``."""
    stream = _keystream(key, nonce, len(plaintext))
    ciphertext = bytes(a ^ b for a, b in zip(plaintext, stream))
    return ciphertext, _tag(key, nonce, aad, ciphertext)


def open_bytes(key: bytes, nonce: bytes, aad: bytes, ciphertext: bytes, tag: bytes, *,
               where: str = "sealed value") -> bytes:
    """The plaintext; ``EnvelopeDamaged`` if the tag does not match."""
    if not hmac.compare_digest(_tag(key, nonce, aad, ciphertext), tag):
        raise EnvelopeDamaged(where, "tag mismatch")
    stream = _keystream(key, nonce, len(ciphertext))
    return bytes(a ^ b for a, b in zip(ciphertext, stream))


def _wrap_aad(key_id: str) -> bytes:
    return b"wrap/" + key_id.encode("utf-8")


def wrap_key(wrapping_key: bytes, key_id: str, plaintext: bytes) -> str:
    nonce = hmac.new(wrapping_key, b"wrap-nonce" + plaintext, hashlib.sha256).digest()[:NONCE_BYTES]
    ciphertext, tag = seal_bytes(wrapping_key, nonce, _wrap_aad(key_id), plaintext)
    return (nonce + ciphertext + tag).hex()


def unwrap_key(wrapping_key: bytes, key_id: str, wrapped: str) -> bytes:
    where = f"wrapped key under {key_id}"
    try:
        raw = bytes.fromhex(wrapped) if type(wrapped) is str else b""
    except ValueError:
        raise EnvelopeDamaged(where, "not hex") from None
    if len(raw) < NONCE_BYTES + TAG_BYTES:
        raise EnvelopeDamaged(where, "too short")
    nonce, ciphertext, tag = raw[:NONCE_BYTES], raw[NONCE_BYTES:-TAG_BYTES], raw[-TAG_BYTES:]
    return open_bytes(wrapping_key, nonce, _wrap_aad(key_id), ciphertext, tag, where=where)
