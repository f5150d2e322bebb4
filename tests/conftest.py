"""Fixtures shared by the test files: planted bugs more than one file needs."""
from __future__ import annotations

import attrs
import pytest

import model.ledger.rules as ledger_rules


@pytest.fixture
def stale_tokens_accepted(monkeypatch) -> None:
    """Planted bug: the ledger checks only the owner, not the epoch, so an
    owner that stalled past its lease writes with its superseded token
    (caught by ``fencing``; it needs a pause longer than a lease)."""
    real = ledger_rules.check_token

    def owner_only(row, token, now_ms=None):
        if row is not None and row.epoch != token.epoch:
            token = attrs.evolve(token, epoch=row.epoch, owner_id=row.owner_id)
        return real(row, token, now_ms)

    monkeypatch.setattr(ledger_rules, "check_token", owner_only)
