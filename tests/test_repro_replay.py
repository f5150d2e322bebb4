"""``loomsim repro FILE``: a replay says whether the recorded failure
recurred (a non-reproducing repro is not a pass), whether the trace
diverged from the recorded one, and which loomsim wrote the file; a
hand-edited file is checked field by field (issue 28, item 4)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.face.cli import main
from sim.runner import LOOMSIM_VERSION

RUN = ["run", "ledger-storm", "--seed", "1", "--duration", "1h", "--store", "tests.fixtures.buggy:make",
       "--no-progress"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict:
    """A failing run's repro file (the buggy ledger adapter), as JSON."""
    directory = tmp_path_factory.mktemp("recorded")
    assert main([*RUN, "--repro-dir", str(directory)]) == 1
    (path,) = directory.glob("loomsim-repro-*.json")
    return json.loads(path.read_text())


def _file(tmp_path: Path, body: dict, **config) -> str:
    edited = json.loads(json.dumps(body))
    edited["config"].update(config)
    path = tmp_path / "loomsim-repro-edited.json"
    path.write_text(json.dumps(edited))
    return str(path)


def test_a_repro_that_recurs_says_nothing_more(recorded, tmp_path, capsys):
    assert main(["repro", _file(tmp_path, recorded)]) == 1
    captured = capsys.readouterr()
    assert "did not reproduce" not in captured.out and "diverged" not in captured.out
    assert "warning" not in captured.err


def test_a_repro_whose_failure_does_not_recur_is_not_a_pass(recorded, tmp_path, capsys):
    path = _file(tmp_path, recorded, store="memory")  # the buggy adapter gone: the run holds
    assert main(["repro", path]) == 1
    out = capsys.readouterr().out
    assert "PASS" not in out.splitlines()[-1]
    assert f"the recorded failure did not reproduce: {path} records {recorded['violations'][0]['name']}" in out
    assert main(["repro", path, "--json"]) == 1
    body = json.loads(capsys.readouterr().out)
    assert body["status"] == "not-reproduced"
    assert body["replay"]["reproduced"] is False
    assert body["replay"]["recorded_invariant"] == recorded["violations"][0]["name"]


def test_a_replay_that_diverges_from_the_recorded_trace_says_so(recorded, tmp_path, capsys):
    edited = dict(recorded, trace_digest="0" * 64)
    path = _file(tmp_path, edited)
    assert main(["repro", path]) == 1
    out = capsys.readouterr().out
    assert "the replay diverged from the recorded run: trace digest " in out
    assert f", recorded {'0' * 64}" in out


def test_a_file_of_another_loomsim_version_is_warned_about(recorded, tmp_path, capsys):
    path = _file(tmp_path, recorded, loomsim="0.0.1")
    assert main(["repro", path]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"loomsim: warning: {path} was written by loomsim 0.0.1, this is {LOOMSIM_VERSION}: "
                   "the replay may differ"]


def test_the_version_is_recorded(recorded):
    assert recorded["config"]["loomsim"] == LOOMSIM_VERSION


@pytest.mark.parametrize("field, value, problem", [
    ("seed", 1.5, "seed must be a non-negative integer, got 1.5"),
    ("seed", -1, "seed must be a non-negative integer, got -1"),
    ("seed", True, "seed must be a non-negative integer, got true"),
    ("swarm", "yes", 'swarm must be an object, got "yes"'),
    ("duration", 5, "duration must be a duration text (e.g. \"1h\"), got 5"),
    ("duration", "5x", "duration "),
    ("store", "mongo", "store must be memory, sqlite or MODULE:FACTORY"),
    ("params", {"conversations": "8"}, "params.conversations must be a non-negative integer"),
    ("beyond_contract", "no", "beyond_contract must be true or false"),
    ("rates", {"ack-lost": 2}, "rates.ack-lost must be a probability in [0, 1]"),
    ("mutant", 7, "mutant must be a mutant name"),
])
def test_a_hand_edited_field_is_refused_naming_the_file_and_the_field(recorded, tmp_path, capsys, field, value,
                                                                      problem):
    path = _file(tmp_path, recorded, **{field: value})
    assert main(["repro", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"loomsim: error: {path}: "), err
    assert problem in err, err


@pytest.mark.parametrize("swarm, problem", [
    ({"swarm": "yes"}, "swarm.swarm must be true or false"),
    ({"swarm": True, "knobs": {"lease_ms": 1.5}}, "swarm.knobs.lease_ms must be an integer"),
    ({"swarm": True, "workload": "pager"}, "swarm.workload must be a list of names"),
])
def test_a_hand_edited_swarm_is_refused_field_by_field(recorded, tmp_path, capsys, swarm, problem):
    path = _file(tmp_path, recorded, swarm={**recorded["config"]["swarm"], **swarm})
    assert main(["repro", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"loomsim: error: {path}: ") and problem in err, err
