"""State contracts: a version, a validator and a migration chain.

A stored envelope carries the contract version it was written under. ``load``
brings it to the current version one step at a time (``migrations[v]`` maps a
payload at version ``v`` to version ``v + 1``) and then validates it. Each way
this can fail is a distinct, typed ``StateContractMismatchError`` kind: a run
never proceeds on unvalidated state, and nothing is ever coerced silently.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

NO_MIGRATION_PATH = "no-migration-path"
MIGRATION_FAILED = "migration-failed"
FUTURE_VERSION = "future-version"
VALIDATION_FAILED = "validation-failed"
MISMATCH_KINDS = (NO_MIGRATION_PATH, MIGRATION_FAILED, FUTURE_VERSION, VALIDATION_FAILED)

# A validator returns None when the payload conforms, else a one-line reason.
Validator = Callable[[Any], "str | None"]
Migration = Callable[[Any], Any]


class StateContractMismatchError(Exception):
    name = "StateContractMismatchError"

    def __init__(self, kind: str, *, contract_id: str, key: str, stored_version: int,
                 current_version: int, detail: str = "") -> None:
        assert kind in MISMATCH_KINDS, kind
        message = (f"{kind}: {key} stored at {contract_id} v{stored_version}, "
                   f"code expects v{current_version}")
        super().__init__(f"{message}: {detail}" if detail else message)
        self.kind = kind
        self.contract_id = contract_id
        self.key = key
        self.stored_version = stored_version
        self.current_version = current_version
        self.detail = detail


@attrs.frozen
class StateContract:
    """One deployed version of a state contract, with the chain to reach it."""

    contract_id: str
    version: int
    validate: Validator
    migrations: Mapping[int, Migration] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        assert self.version >= 1, self.version
        for from_version in self.migrations:
            assert 1 <= from_version < self.version, (self.contract_id, from_version, self.version)

    def upgrade(self, key: str, stored_version: int, payload: Any) -> Any:
        """Migrate ``payload`` from ``stored_version`` to ``self.version`` and validate.

        Raises ``StateContractMismatchError``; returns the current-version payload.
        """
        def mismatch(kind: str, detail: str = "") -> StateContractMismatchError:
            return StateContractMismatchError(kind, contract_id=self.contract_id, key=key,
                                              stored_version=stored_version,
                                              current_version=self.version, detail=detail)

        if stored_version > self.version:
            raise mismatch(FUTURE_VERSION)
        version = stored_version
        while version < self.version:
            migration = self.migrations.get(version)
            if migration is None:
                raise mismatch(NO_MIGRATION_PATH, f"no migration from v{version}")
            try:
                payload = migration(payload)
            except Exception as error:  # a migration bug is a typed failure, not a crash
                raise mismatch(MIGRATION_FAILED, f"v{version}->v{version + 1}: {type(error).__name__}: {error}") from error
            version += 1
        problem = self.validate(payload)
        if problem is not None:
            raise mismatch(VALIDATION_FAILED, problem)
        return payload

    def check_payload(self, key: str, payload: Any) -> None:
        """Validate a payload about to be saved at the current version."""
        problem = self.validate(payload)
        if problem is not None:
            raise StateContractMismatchError(VALIDATION_FAILED, contract_id=self.contract_id, key=key,
                                             stored_version=self.version, current_version=self.version,
                                             detail=problem)
