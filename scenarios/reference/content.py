"""Reference model of the digest-addressed content store (persistence §2.6, STORE-009).

The contract: a blob's ref is ``"sha256:"`` and the lowercase hex sha256 of
its bytes, so ``put`` is idempotent and answers that ref; ``get(ref)``
answers bytes that hash to the ref, or ``ContentMissing``; ``has`` tells;
``delete`` answers True when a blob was deleted (idempotent). ``put``
takes bytes-like data (else TypeError); a ref that is not ``sha256:`` and
64 characters is a ValueError.

The model holds refs only: the bytes an answer carries must hash to its ref,
which is the whole of what the contract says about them. A read whose
bytes were damaged below the store (a fault fired inside the call) must be
``ContentCorrupted`` of that ref: the store verifies what it returns.
"""
from __future__ import annotations

import hashlib
from typing import Any

import attrs

from scenarios.reference import History, PortReference, Refused, bind, judge

REF_PREFIX = "sha256:"
REF_LENGTH = len(REF_PREFIX) + 64


def ref_of(data: bytes) -> str:
    return REF_PREFIX + hashlib.sha256(data).hexdigest()


def _ref_problem(ref: object) -> Refused | None:
    if type(ref) is not str or not ref.startswith(REF_PREFIX) or len(ref) != REF_LENGTH:
        return Refused("ValueError")
    return None


def _blob_view(data: Any) -> str:
    if not isinstance(data, bytes):
        return f"not bytes: {type(data).__name__}"
    return ref_of(data)


def _same(value: object) -> object:
    return value


class ReferenceContent(PortReference):
    """``ContentStorePort``'s contract over the set of refs stored."""

    port = "content"
    scope = "content"

    def __init__(self) -> None:
        self._refs: dict[str, None] = {}  # membership only
        self._history = History()
        self._handlers = {"put": self._put, "get": self._get, "has": self._has, "delete": self._delete}

    def _table(self) -> dict:
        return self._refs

    def key_of(self, call: Any) -> str:
        value = call.args[0] if call.args else next(iter(call.kwargs.values()), None)
        if call.method == "put":
            return ref_of(bytes(value)) if isinstance(value, (bytes, bytearray, memoryview)) else repr(value)
        return value if isinstance(value, str) else repr(value)


    def _put(self, call: Any) -> str | None:
        key = self.key_of(call)
        try:
            (data,) = bind(call, ("data",))
        except (TypeError, KeyError):
            return judge(call, key, Refused("TypeError"), _same, self._history)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            return judge(call, key, Refused("TypeError"), _same, self._history)
        message = judge(call, key, key, _same, self._history, f"{len(bytes(data))} bytes")
        if message is None:
            self._refs[key] = None
            self._history.note(key, call, (), "stored")
        return message

    def _ref_call(self, call: Any) -> tuple[str, Refused | None]:
        try:
            (ref,) = bind(call, ("ref",))
        except (TypeError, KeyError):
            return self.key_of(call), Refused("TypeError")
        return self.key_of(call), _ref_problem(ref)

    def _get(self, call: Any) -> str | None:
        key, problem = self._ref_call(call)
        expected: Any = problem or (key if key in self._refs else Refused("ContentMissing", ref=key))
        if call.damaged and problem is None and key in self._refs:
            # The bytes the store read were damaged below it (``faults.content_reads``):
            # unlike a damaged log answer, this one the store itself must refuse.
            return judge(attrs.evolve(call, damaged=False), key, Refused("ContentCorrupted", ref=key), _blob_view,
                         self._history, "a blob read damaged below the store")
        message = judge(call, key, expected, _blob_view, self._history)
        if message is None and key in self._refs:
            self._history.note(key, call, (), "bytes")
        return message

    def _has(self, call: Any) -> str | None:
        key, problem = self._ref_call(call)
        message = judge(call, key, problem or key in self._refs, _same, self._history)
        if message is None and key in self._refs:
            self._history.note(key, call, (), True)
        return message

    def _delete(self, call: Any) -> str | None:
        key, problem = self._ref_call(call)
        message = judge(call, key, problem or key in self._refs, _same, self._history)
        if message is None and problem is None:
            self._refs.pop(key, None)
            self._history.drop(key)
        return message
