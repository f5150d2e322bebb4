"""``loomsim check-determinism``: a deterministic seed passes; a planted
nondeterminism (``tests/fixtures/hash_order.py``: one event whose field is
``hash("x")``, loaded with ``--scenarios``) is caught and its first
diverging event named, with its index, simulated time and both events."""
from __future__ import annotations

import importlib
import json
import os
import sys

import pytest

from scenarios import registry
from sim.clock import format_calendar
from sim.face import cli
from sim.face.determinism import first_divergence, render_record

MODULE = "tests.fixtures.hash_order"
PLANTED = ["--scenarios", MODULE]


@pytest.fixture
def planted(monkeypatch):
    """The test-only scenario, registered for this test only: no other test
    (nor ``loomsim sweep`` of every scenario in them) ever sees it."""
    registry.all_scenarios()  # the built-ins registered first: the copy restored afterwards has them
    monkeypatch.setattr(registry, "_SCENARIOS", dict(registry._SCENARIOS))
    sys.modules.pop(MODULE, None)
    yield importlib.import_module(MODULE)
    sys.modules.pop(MODULE, None)


def test_planted_nondeterminism_names_the_first_diverging_event(capsys, tmp_path, planted):
    PLANTED_AT_MS, PLANTED_KIND = planted.PLANTED_AT_MS, planted.PLANTED_KIND
    keep = tmp_path / "traces"
    keep.mkdir()
    code = cli.main([*PLANTED, "check-determinism", "hash-order", "--seeds", "0:1", "--duration", "2h",
                     "--keep-traces", str(keep), "--json"])
    body = json.loads(capsys.readouterr().out)
    assert code == 1 and body["diverged"] == 1 and body["deterministic"] == 0
    (run,) = body["runs"]
    div = run["divergence"]
    assert run["verdict"] == "diverged" and run["digests"][0] != run["digests"][1]
    assert [e["kind"] for e in div["events"]] == [PLANTED_KIND, PLANTED_KIND]
    assert div["events"][0]["fields"] != div["events"][1]["fields"]
    assert div["simulated_time"] == format_calendar(PLANTED_AT_MS) and div["index"] == div["events"][0]["seq"] > 1
    assert sorted(os.listdir(keep)) == sorted(os.path.basename(p) for p in run["traces"])
    # The text report (what the command prints without --json) says the same.
    out = "\n".join(render_record(run))
    assert f"first diverging event: #{div['index']} at {format_calendar(PLANTED_AT_MS)}" in out
    assert out.count(PLANTED_KIND) == 2


def test_a_deterministic_seed_passes_and_leaves_no_trace_files(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    code = cli.main(["check-determinism", "sentinel-year", "--seeds", "0:1", "--duration", "2h"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "sentinel-year seed 0: DETERMINISTIC" in out and "1 deterministic, 0 diverged, 0 errors" in out
    assert os.listdir(tmp_path) == []


def test_first_divergence_of_streams_of_different_lengths(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    line = '{"seq":1,"t_ms":5,"node":"n","kind":"k","fields":{}}'
    a.write_text(line + "\n")
    b.write_text(line + "\n" + '{"seq":2,"t_ms":7,"node":"n","kind":"k2","fields":{}}\n')
    div = first_divergence(str(a), str(b))
    assert div["index"] == 2 and div["events"][0] is None and div["events"][1]["kind"] == "k2"
    assert div["simulated_time"] == format_calendar(7)
    assert first_divergence(str(a), str(a))["index"] is None


def test_usage_errors_are_one_line(capsys, tmp_path):
    for argv in (["check-determinism", "nope", "--seeds", "0:1"],
                 ["check-determinism", "sentinel-year", "--seeds", "0:1", "--keep-traces", str(tmp_path / "no")]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("loomsim: error: ") and len(err.strip().splitlines()) == 1
