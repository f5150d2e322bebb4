"""The secret store port: handles to values, each handle with versions.

It lives outside every simulated process (an operator's vault): a crash
loses nothing of it. ``put`` is the operator's console, not a port call.
"""
from __future__ import annotations

from typing import Protocol

from model.secrets.errors import SecretNotFound


class SecretStore(Protocol):
    async def resolve(self, handle: str) -> str: ...

    async def version(self, handle: str) -> int: ...


class InMemorySecretStore:
    """``values``: handle -> its versions, oldest first (version n is ``values[handle][n - 1]``)."""

    def __init__(self, values: dict[str, list[str]] | None = None) -> None:
        self._values: dict[str, list[str]] = {}
        for handle, versions in sorted((values or {}).items()):
            for value in versions:
                self.put(handle, value)

    def put(self, handle: str, value: str) -> int:
        """Store a new version of ``handle``; returns its number (from 1)."""
        if type(handle) is not str or not handle:
            raise TypeError(f"a secret handle is a non-empty str, got {handle!r:.40}")
        if type(value) is not str or not value:
            raise TypeError("a secret value is a non-empty str")
        versions = self._values.setdefault(handle, [])
        versions.append(value)
        return len(versions)

    def handles(self) -> tuple[str, ...]:
        return tuple(sorted(self._values))

    def versions_of(self, handle: str) -> tuple[str, ...]:
        """Every value ``handle`` ever had, oldest first (for the oracles)."""
        return tuple(self._values.get(handle, ()))

    def current(self, handle: str) -> str:
        """The current value, read synchronously (the services that check a credential)."""
        versions = self._values.get(handle)
        if not versions:
            raise SecretNotFound(handle)
        return versions[-1]

    async def resolve(self, handle: str) -> str:
        return self.current(handle)

    async def version(self, handle: str) -> int:
        versions = self._values.get(handle)
        if not versions:
            raise SecretNotFound(handle)
        return len(versions)
