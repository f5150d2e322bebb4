"""The typed errors of secrets, keys and sealed fields.

Each is final (``retryable = False``), has a one-line message and a ``name``
other ports match it by (``model.retry.error_name``).
"""
from __future__ import annotations


class SecretsError(Exception):
    """The base of the errors below."""

    name = "SecretsError"
    retryable = False

    def __init__(self, *args: object) -> None:
        self._args = args
        super().__init__(self._message(*args))

    def _message(self, *args: object) -> str:  # pragma: no cover - every subclass says its own
        return repr(args)

    def __reduce__(self):
        return (type(self), self._args)


class SecretNotFound(SecretsError):
    """The secret store holds no value under this handle."""

    name = "SecretNotFound"

    def __init__(self, handle: str) -> None:
        self.handle = handle
        super().__init__(handle)

    def _message(self, handle: object) -> str:
        return f"no secret under handle {handle!r}"


class UnknownKey(SecretsError):
    """The key service has no key with this id."""

    name = "UnknownKey"

    def __init__(self, key_id: str) -> None:
        self.key_id = key_id
        super().__init__(key_id)

    def _message(self, key_id: object) -> str:
        return f"unknown key {key_id!r}"


class KeyRetired(SecretsError):
    """The key was retired: it no longer wraps or unwraps anything."""

    name = "KeyRetired"

    def __init__(self, key_id: str) -> None:
        self.key_id = key_id
        super().__init__(key_id)

    def _message(self, key_id: object) -> str:
        return f"key {key_id!r} is retired"


class EnvelopeDamaged(SecretsError):
    """A sealed value (or a wrapped data key) that does not open: bad tag,
    bad shape, or a sensitive field that is not sealed at all."""

    name = "EnvelopeDamaged"

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(where, problem)

    def _message(self, where: object, problem: object) -> str:
        return f"envelope at {where!s} is damaged: {problem!s}"


class SecretLeak(SecretsError):
    """A secret value found where none may be (reserved: nothing in the model raises it)."""

    name = "SecretLeak"

    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(where)

    def _message(self, where: object) -> str:
        return f"secret value found at {where!s}"


class RotationRefused(SecretsError):
    """A key operation the key service refuses (retiring the current key,
    making a retired key current)."""

    name = "RotationRefused"

    def __init__(self, key_id: str, reason: str) -> None:
        self.key_id = key_id
        self.reason = reason
        super().__init__(key_id, reason)

    def _message(self, key_id: object, reason: object) -> str:
        return f"key {key_id!r}: {reason!s}"


class RewrapConflict(SecretsError):
    """A re-wrap whose data key row is under neither the expected old key nor the new one."""

    name = "RewrapConflict"

    def __init__(self, dek_id: str, expected_key_id: str, actual_key_id: str) -> None:
        self.dek_id = dek_id
        self.expected_key_id = expected_key_id
        self.actual_key_id = actual_key_id
        super().__init__(dek_id, expected_key_id, actual_key_id)

    def _message(self, dek_id: object, expected: object, actual: object) -> str:
        return f"data key {dek_id!r} is under {actual!r}, expected {expected!r}"


class CredentialRejected(SecretsError):
    """A tool or model service refused the credential it was sent (not the
    secret store's current value, or none)."""

    name = "CredentialRejected"

    def __init__(self, service: str, handle: str) -> None:
        self.service = service
        self.handle = handle
        super().__init__(service, handle)

    def _message(self, service: object, handle: object) -> str:
        return f"{service!s} rejected the credential for {handle!r}"
