"""A user's store adapter (``--store MODULE:FACTORY``): every port the
factory returns is checked against the method set its protocol needs before
the run starts; a wrong one is one usage-error line naming what is wrong."""
from __future__ import annotations

import pytest

from scenarios.reference import judge, History, Refused
from scenarios.system import load_store_factory
from sim.face.cli import main
from sim.scenario import SetupError

MODULE = "tests.fixtures.bad_stores"


@pytest.mark.parametrize("factory, mentions", [
    ("wrong_object", ('"ds" store', "int", "load", "save", "clear")),
    ("no_clear", ('"ds" store', "lacks clear()", "load, save, clear")),
    ("ds_under_ledger", ('"ledger" store', "admit()", 'a durable-state store: give it as "ds"')),
    ("not_a_dict", ("mapping",)),
    ("unknown_key", ("durable_state",)),
])
def test_a_structurally_wrong_adapter_is_refused_naming_what_is_wrong(factory, mentions):
    with pytest.raises(SetupError) as caught:
        load_store_factory(f"{MODULE}:{factory}")
    message = str(caught.value)
    assert "\n" not in message
    assert f"{MODULE}:{factory}" in message
    for mention in mentions:
        assert mention in message, message


def test_a_right_adapter_is_accepted():
    stores = load_store_factory("tests.fixtures.buggy:make")
    assert set(stores) == {"ledger"}


@pytest.mark.parametrize("factory", ["wrong_object", "no_clear", "ds_under_ledger"])
def test_run_with_a_wrong_adapter_is_one_line_and_exit_2(factory, capsys, tmp_path):
    code = main(["run", "sentinel-year", "--seed", "1", "--duration", "1m", "--no-progress",
                 "--repro-dir", str(tmp_path), "--store", f"{MODULE}:{factory}"])
    captured = capsys.readouterr()
    assert code == 2, captured.err[-2000:]
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("loomsim: error: --store "), captured.err
    assert not list(tmp_path.iterdir())  # refused before any run: nothing written


class _Call:
    node, port, method, time_ms, args, kwargs, damaged, result = "worker-1", "ds", "save", 5, ("k",), {}, False, None

    def __init__(self, error):
        self.error = error


def test_a_store_that_raises_shows_the_exception_message():
    divergence = judge(_Call(TypeError("cannot encode the payload")), "k", Refused("RevisionConflict"),
                       lambda r: r, History())
    assert "raises TypeError" in divergence
    assert "cannot encode the payload" in divergence
