"""Secret references: a payload names a secret by handle, never by value.

A reference is exactly the dict ``{"$secret": HANDLE}``. Records, recorded
arguments and requests carry references; ``resolve_refs`` replaces them by
the current values at the one place a value may exist: the call that leaves
the process (the effect boundary). Its result is sent, never recorded.
"""
from __future__ import annotations

from typing import Any

SECRET_REF_KEY = "$secret"


def secret_ref(handle: str) -> dict:
    if type(handle) is not str or not handle:
        raise TypeError(f"a secret handle is a non-empty str, got {handle!r:.40}")
    return {SECRET_REF_KEY: handle}


def is_secret_ref(value: object) -> bool:
    return (type(value) is dict and len(value) == 1 and type(value.get(SECRET_REF_KEY)) is str
            and bool(value[SECRET_REF_KEY]))


def _walk(value: object, found: set[str]) -> None:
    if is_secret_ref(value):
        found.add(value[SECRET_REF_KEY])  # type: ignore[index]
    elif isinstance(value, dict):
        for member in value.values():
            _walk(member, found)
    elif isinstance(value, (list, tuple)):
        for member in value:
            _walk(member, found)


def refs_in(value: object) -> tuple[str, ...]:
    """The handles referenced anywhere in ``value``, sorted, each once."""
    found: set[str] = set()
    _walk(value, found)
    return tuple(sorted(found))


async def resolve_refs(value: Any, secrets: Any) -> Any:
    """A copy of ``value`` with every reference replaced by the secret
    store's current value (``await secrets.resolve(handle)``, in document
    order). Values without references come back as they are."""
    if is_secret_ref(value):
        return await secrets.resolve(value[SECRET_REF_KEY])
    if isinstance(value, dict):
        out = {}
        for key, member in value.items():
            out[key] = await resolve_refs(member, secrets)
        return out
    if isinstance(value, (list, tuple)):
        items = [await resolve_refs(member, secrets) for member in value]
        return items if isinstance(value, list) else tuple(items)
    return value
