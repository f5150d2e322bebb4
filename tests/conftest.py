"""Fixtures shared by the test files: planted bugs more than one file needs."""
from __future__ import annotations

import attrs
import pytest

import model.ledger.rules as ledger_rules
# The fault layer's describer tables are built from the adapters' methods at
# import: import them before any test monkeypatches one of those methods (a
# test run alone would otherwise build them from the planted replacement).
import faults.describe  # noqa: F401
from tests import _split


_BACKGROUND: list = []  # the session's background detection child, if it started one


def pytest_collection_finish(session) -> None:
    """Start the mutant detection runs in the background when they are a
    small part of the session (``test_mutants.Background``)."""
    detecting = [item for item in session.items
                 if getattr(item, "originalname", None) == "test_the_sweep_detects_the_mutant"]
    if detecting and 2 * len(detecting) < len(session.items):
        module = detecting[0].module
        names = module.selected_detections(detecting)
        if names:
            _BACKGROUND.append(module.Background.start(names))


def pytest_configure(config) -> None:
    """A full run shares its test files with a second process (``tests._split``)."""
    config.pluginmanager.register(_split.Plugin(), "loomsim-split")


def pytest_unconfigure(config) -> None:
    """The background detection child never outlives its session."""
    while _BACKGROUND:
        _BACKGROUND.pop().close()


@pytest.fixture(autouse=True)
def _failure_db_out_of_the_repository(tmp_path_factory, monkeypatch) -> None:
    """A sweep saves its failures (and replays them first next time) in
    ``.loomsim/`` of the current directory: a test's sweep must neither
    write into the checkout nor replay another test's failures."""
    monkeypatch.setenv("LOOMSIM_FAILURE_DB", str(tmp_path_factory.mktemp("failure-db")))


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


@pytest.fixture
def without_reference_model(monkeypatch) -> None:
    """Silence the reference-model oracle: it judges every store call as it
    commits, so it sees most planted store bugs first; a test that asks
    whether another invariant (or the system itself) notices turns it off."""
    from scenarios.invariants.reference_model import ReferenceModel

    monkeypatch.setattr(ReferenceModel, "on_port_call", lambda self, call: None)
    monkeypatch.setattr(ReferenceModel, "audit", lambda self, view: None)


@pytest.fixture(params=["memory", "sqlite"])
def stores(request, tmp_path):
    """``tests.fakes.Stores`` on each backend (the SQLite connection closed after)."""
    from tests.fakes import Stores

    s = Stores(request.param, tmp_path)
    yield s
    if s.conn is not None:
        s.conn.close()
