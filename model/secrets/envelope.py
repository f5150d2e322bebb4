"""Sealed fields: a record's sensitive fields stored as envelopes.

Which fields are sensitive is the event family's schema
(``SENSITIVE_FIELDS``, keyed by family and the payload's ``phase``). A
sealed field's value is the dict::

    {"$sealed": "sim-hmac-sha256-v1", "dataKeyId": DEK_ID,
     "nonce": HEX, "ciphertext": HEX, "tag": HEX}

its plaintext the canonical JSON of the field's value, its AAD
``f"{conversation_id}\\n{batch_id}\\n{index}\\n{family}\\n{field}"`` (UTF-8; ``index``
the record's place in its batch, from 0) so a
sealed value moved to another record, field or conversation does not open,
and its nonce the first 16 bytes of sha256(AAD) (a record's identity: it is
written once per attempt).

A data key serves one conversation under one key-encryption key:
``dek/{conversation_id}/{key_id}``. The envelope only names it: the wrapped
data key lives in the keyring (``model.secrets.keyring``), whose row names
the KEK that opens it. Records are immutable and chained by digest, so a
rotation re-wraps keyring rows and never rewrites a record.

``keyed_digest`` is the digest to use wherever a digest's preimage can hold
a secret: an HMAC under a digest key, so a low-entropy secret cannot be
guessed back from it.
"""
from __future__ import annotations

import hashlib
import hmac
from typing import Any

from model.canonical import CanonicalDecodeError, canonical_json, decode
from model.secrets.cipher import NONCE_BYTES, SIM_CIPHER, TAG_BYTES, open_bytes, seal_bytes
from model.secrets.errors import EnvelopeDamaged, KeyRetired
from model.secrets.keyring import DataKey

SEALED_KEY = "$sealed"
SEALED_FIELDS = ("$sealed", "ciphertext", "dataKeyId", "nonce", "tag")
_SEALING_ATTEMPTS = 4

# (family, payload["phase"] or None) -> the payload fields sealed.
SENSITIVE_FIELDS: dict[tuple[str, str | None], tuple[str, ...]] = {
    ("tool-call", "requested"): ("args",),
    ("tool-call", "prepared"): ("args",),
    ("tool-call", "settled"): ("output",),
    ("model-delta", None): ("text",),
    ("model-completed", None): ("text",),
}


def sensitive_fields(family: str, payload: object) -> tuple[str, ...]:
    phase = payload.get("phase") if isinstance(payload, dict) else None
    return SENSITIVE_FIELDS.get((family, phase if type(phase) is str else None), ())


def is_sealed(value: object) -> bool:
    return type(value) is dict and value.get(SEALED_KEY) is not None


def data_key_id(conversation_id: str, key_id: str) -> str:
    return f"dek/{conversation_id}/{key_id}"


def field_aad(conversation_id: str, batch_id: str, index: int, family: str, field: str) -> bytes:
    return f"{conversation_id}\n{batch_id}\n{index}\n{family}\n{field}".encode("utf-8")


def keyed_digest(digest_key: bytes, value: object) -> str:
    mac = hmac.new(digest_key, canonical_json(value).encode("utf-8"), hashlib.sha256)
    return "hmac-sha256:" + mac.hexdigest()


def seal_value(data_key: bytes, dek_id: str, aad: bytes, value: object) -> dict:
    nonce = hashlib.sha256(aad).digest()[:NONCE_BYTES]
    ciphertext, tag = seal_bytes(data_key, nonce, aad, canonical_json(value).encode("utf-8"))
    return {SEALED_KEY: SIM_CIPHER, "dataKeyId": dek_id, "nonce": nonce.hex(), "ciphertext": ciphertext.hex(),
            "tag": tag.hex()}


def _parts(where: str, sealed: object) -> tuple[str, bytes, bytes, bytes]:
    if not is_sealed(sealed):
        raise EnvelopeDamaged(where, "not sealed")
    assert isinstance(sealed, dict)
    if tuple(sorted(sealed)) != SEALED_FIELDS or sealed[SEALED_KEY] != SIM_CIPHER:
        raise EnvelopeDamaged(where, "not a sim-hmac-sha256-v1 envelope")
    if type(sealed["dataKeyId"]) is not str or not sealed["dataKeyId"]:
        raise EnvelopeDamaged(where, "no data key id")
    try:
        nonce, ciphertext, tag = (bytes.fromhex(sealed[k]) for k in ("nonce", "ciphertext", "tag"))
    except (TypeError, ValueError):
        raise EnvelopeDamaged(where, "not hex") from None
    if len(nonce) != NONCE_BYTES or len(tag) != TAG_BYTES:
        raise EnvelopeDamaged(where, "bad nonce or tag length")
    return sealed["dataKeyId"], nonce, ciphertext, tag


def open_value(data_key: bytes, aad: bytes, sealed: dict, *, where: str) -> object:
    _, nonce, ciphertext, tag = _parts(where, sealed)
    plaintext = open_bytes(data_key, nonce, aad, ciphertext, tag, where=where)
    try:
        return decode(plaintext.decode("utf-8"))
    except (UnicodeDecodeError, CanonicalDecodeError, ValueError):
        raise EnvelopeDamaged(where, "plaintext is not JSON") from None


class Sealer:
    """Seals and opens a process's records through the key service and the
    keyring (both ports). Plaintext data keys are cached per process
    (``cache_max``, the oldest evicted first)."""

    def __init__(self, keys: Any, keyring: Any, cache_max: int = 64) -> None:
        assert cache_max >= 1
        self._keys = keys
        self._keyring = keyring
        self._cache_max = cache_max
        self._cache: dict[str, bytes] = {}

    def _remember(self, dek_id: str, data_key: bytes) -> bytes:
        self._cache.pop(dek_id, None)
        self._cache[dek_id] = data_key
        while len(self._cache) > self._cache_max:
            del self._cache[next(iter(self._cache))]
        return data_key

    async def _sealing_key(self, conversation_id: str) -> tuple[str, bytes]:
        """The data key of the conversation under the current KEK. A new
        row is used only if the KEK is still current once it is stored: a
        rotation that began meanwhile may have scanned past it, so it is
        left unused and the new KEK's data key is taken instead."""
        for _ in range(_SEALING_ATTEMPTS):
            key_id = await self._keys.current()
            dek_id = data_key_id(conversation_id, key_id)
            cached = self._cache.get(dek_id)
            if cached is not None:
                return dek_id, cached
            row = await self._keyring.get(dek_id)
            if row is not None:
                return dek_id, self._remember(dek_id, await self._unwrap(row))
            try:
                plaintext, wrapped = await self._keys.generate_data_key(key_id)
            except KeyRetired:
                continue  # rotated and retired since it was read current
            row = await self._keyring.put_if_absent(DataKey(dek_id, key_id, wrapped))
            if await self._keys.current() != key_id:
                continue
            if row.wrapped != wrapped or row.key_id != key_id:
                plaintext = await self._keys.unwrap(row.key_id, row.wrapped)
            return dek_id, self._remember(dek_id, plaintext)
        raise KeyRetired(key_id)

    async def _opening_key(self, dek_id: str, where: str) -> bytes:
        cached = self._cache.get(dek_id)
        if cached is not None:
            return cached
        row = await self._keyring.get(dek_id)
        if row is None:
            raise EnvelopeDamaged(where, f"no data key {dek_id}")
        return self._remember(dek_id, await self._unwrap(row))

    async def _unwrap(self, row: DataKey) -> bytes:
        """``row``'s data key. A rotation may re-wrap the row and retire its
        key between the read of the row and the unwrap: then the row is read
        again, and only a row still under the retired key fails."""
        try:
            return await self._keys.unwrap(row.key_id, row.wrapped)
        except KeyRetired:
            again = await self._keyring.get(row.dek_id)
            if again is None or again.key_id == row.key_id:
                raise
            return await self._keys.unwrap(again.key_id, again.wrapped)

    async def seal_payload(self, conversation_id: str, batch_id: str, index: int, family: str,
                           payload: dict) -> dict:
        fields = [f for f in sensitive_fields(family, payload) if f in payload and not is_sealed(payload[f])]
        if not fields:
            return payload
        dek_id, data_key = await self._sealing_key(conversation_id)
        sealed = dict(payload)
        for field in fields:
            aad = field_aad(conversation_id, batch_id, index, family, field)
            sealed[field] = seal_value(data_key, dek_id, aad, payload[field])
        return sealed

    async def open_payload(self, conversation_id: str, batch_id: str, index: int, family: str,
                           payload: dict) -> dict:
        fields = [f for f in sensitive_fields(family, payload) if f in payload]
        if not fields:
            return payload
        opened = dict(payload)
        for field in fields:
            where = f"{conversation_id}/{batch_id}/{index}/{field}"
            dek_id, _, _, _ = _parts(where, payload[field])
            data_key = await self._opening_key(dek_id, where)
            opened[field] = open_value(data_key, field_aad(conversation_id, batch_id, index, family, field),
                                       payload[field], where=where)
        return opened
