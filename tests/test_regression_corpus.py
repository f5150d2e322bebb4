"""The regression corpus (ARCHITECTURE §7): repro files of runs that once failed,
each shrunk (``loomsim shrink``) and kept in ``tests/corpus/`` with a
``regression`` note saying what was wrong. Every CI run replays them all
(``loomsim repro``) but those in SLOW (``-m slow``); each must now pass. Add one by shrinking a failure's
repro file, copying it here and writing its note."""
from __future__ import annotations

import glob
import json
import os

import pytest

from sim.face import cli, repro_file

CORPUS = sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "*.json")))
# Seven simulated days of sentinel-year: its fix is held in CI by
# test_sentinel_system.py::test_out_of_band_writers_are_judged_by_every_contract_not_the_deployed_build.
SLOW = {"sentinel-year-35-operator-edit-under-broken-build.json"}


def test_the_corpus_is_not_empty():
    assert CORPUS


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if os.path.basename(p) in SLOW else p
                                  for p in CORPUS], ids=os.path.basename)
def test_a_once_failing_run_now_passes(path, tmp_path, capsys):
    body = json.load(open(path, encoding="utf-8"))
    assert body["format"] == "loomsim-repro/1" and body["violations"], "a corpus entry records its old failure"
    assert body.get("regression"), "a corpus entry says what was wrong"
    argv = repro_file.repro_argv(path, json_output=True)
    argv[argv.index("--repro-dir") + 1] = str(tmp_path)  # a new failure's repro goes to tmp, not the corpus
    code = cli.main(argv)
    result = json.loads(capsys.readouterr().out)
    assert (code, result["status"]) == (0, "pass"), result["violations"]
