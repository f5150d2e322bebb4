"""The key service port (a KMS) and its simulation.

Key-encryption keys (KEKs) are named ``kek-1``, ``kek-2``, ...; each is
``active`` or ``retired``, and exactly one is current: new data keys are
generated under it. A retired key neither wraps nor unwraps (``KeyRetired``):
whatever is still under it no longer opens, loudly.
"""
from __future__ import annotations

import hashlib
import hmac
from typing import Callable, Protocol

from model.secrets.cipher import unwrap_key, wrap_key
from model.secrets.errors import KeyRetired, RotationRefused, UnknownKey

ACTIVE = "active"
RETIRED = "retired"
DATA_KEY_BYTES = 32


class KeyService(Protocol):
    async def current(self) -> str: ...

    async def generate_data_key(self, key_id: str) -> tuple[bytes, str]: ...

    async def unwrap(self, key_id: str, wrapped: str) -> bytes: ...

    async def wrap(self, key_id: str, plaintext: bytes) -> str: ...

    async def rotate(self, new_key_id: str) -> str: ...

    async def retire(self, key_id: str) -> None: ...

    async def state(self, key_id: str) -> str: ...


class SimulatedKeyService:
    """KEK material is HMAC-SHA256(root, key id); the n-th data key it
    generates is HMAC-SHA256(KEK material, "data-key/n") (deterministic in a
    simulation), wrapped by the simulated cipher (``model.secrets.cipher``).
    It outlives every process. ``retired_at_ms`` records when each key was
    retired, for the oracles."""

    def __init__(self, root: bytes, now_ms: Callable[[], int], *, initial_key_id: str = "kek-1") -> None:
        self._root = bytes(root)
        self._now_ms = now_ms
        self._states: dict[str, str] = {initial_key_id: ACTIVE}
        self._current = initial_key_id
        self._generated = 0
        self.retired_at_ms: dict[str, int] = {}

    def material(self, key_id: str) -> bytes:
        return hmac.new(self._root, key_id.encode("utf-8"), hashlib.sha256).digest()

    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._states)

    @property
    def current_key_id(self) -> str:
        return self._current

    def _live(self, key_id: str) -> bytes:
        state = self._states.get(key_id)
        if state is None:
            raise UnknownKey(key_id)
        if state == RETIRED:
            raise KeyRetired(key_id)
        return self.material(key_id)

    async def current(self) -> str:
        return self._current

    async def generate_data_key(self, key_id: str) -> tuple[bytes, str]:
        material = self._live(key_id)
        self._generated += 1
        plaintext = hmac.new(material, f"data-key/{self._generated}".encode(), hashlib.sha256).digest()
        return plaintext, wrap_key(material, key_id, plaintext)

    async def unwrap(self, key_id: str, wrapped: str) -> bytes:
        return unwrap_key(self._live(key_id), key_id, wrapped)

    async def wrap(self, key_id: str, plaintext: bytes) -> str:
        return wrap_key(self._live(key_id), key_id, plaintext)

    async def rotate(self, new_key_id: str) -> str:
        if type(new_key_id) is not str or not new_key_id:
            raise TypeError(f"a key id is a non-empty str, got {new_key_id!r:.40}")
        if self._states.get(new_key_id) == RETIRED:
            raise RotationRefused(new_key_id, "a retired key cannot become current")
        self._states.setdefault(new_key_id, ACTIVE)
        self._current = new_key_id
        return new_key_id

    async def retire(self, key_id: str) -> None:
        state = self._states.get(key_id)
        if state is None:
            raise UnknownKey(key_id)
        if state == RETIRED:
            return None
        if key_id == self._current:
            raise RotationRefused(key_id, "the current key cannot be retired")
        self._states[key_id] = RETIRED
        self.retired_at_ms[key_id] = self._now_ms()
        return None

    async def state(self, key_id: str) -> str:
        state = self._states.get(key_id)
        if state is None:
            raise UnknownKey(key_id)
        return state
