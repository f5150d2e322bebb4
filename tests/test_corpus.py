"""The corpus format (sim/face/corpus.py): one file per input, named by the input, never rewritten."""
from __future__ import annotations

import json
import os

import pytest

from sim.face import corpus


def _body(seed=3, added=("port:ledger.claim/ack-lost",), **extra):
    return corpus.entry_json(scenario="ledger-storm", store="memory", seed=seed, knobs={"k": 1},
                             duration_ms=60_000, added=added, **extra)


def test_the_same_input_is_one_file_whatever_it_added(tmp_path):
    first = corpus.write_entry(str(tmp_path), _body())
    assert first and os.path.exists(first)
    before = open(first, encoding="utf-8").read()
    assert corpus.write_entry(str(tmp_path), _body(added=("something:else",))) is None
    assert open(first, encoding="utf-8").read() == before  # never rewritten
    assert corpus.write_entry(str(tmp_path), _body(seed=4)) != first
    assert [e["seed"] for e in corpus.read_corpus(str(tmp_path))] == sorted([3, 4], key=lambda s: corpus.entry_filename(_body(seed=s)))


def test_a_fault_script_is_part_of_the_input(tmp_path):
    script = [{"time_ms": 5, "node": "*", "site": "ledger.claim", "kind": "ack-lost"}]
    assert corpus.input_digest(_body()) != corpus.input_digest(_body(fault_script=script))
    corpus.write_entry(str(tmp_path), _body(fault_script=script))
    (entry,) = corpus.read_corpus(str(tmp_path), "ledger-storm")
    assert entry["fault_script"] == script
    assert corpus.read_corpus(str(tmp_path), "sentinel-year") == []


def test_merge_folds_directories_and_refuses_a_bad_file_before_writing(tmp_path):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    a.mkdir(), b.mkdir()
    corpus.write_entry(str(a), _body(seed=1))
    corpus.write_entry(str(b), _body(seed=1))
    corpus.write_entry(str(b), _body(seed=2))
    assert corpus.merge(str(out), [str(a), str(b)]) == (2, 1)
    assert len(os.listdir(out)) == 2
    (b / "junk.json").write_text("[1, 2]")
    with pytest.raises(corpus.CorpusError, match="junk.json"):
        corpus.merge(str(tmp_path / "out2"), [str(a), str(b)])
    assert not (tmp_path / "out2").exists()


def test_an_early_entry_without_format_is_read_for_its_scenario(tmp_path):
    (tmp_path / "old.json").write_text(json.dumps({"seed": 9, "knobs": {}, "duration_ms": 1000, "added": []}))
    (entry,) = corpus.read_corpus(str(tmp_path), "ledger-storm")
    assert entry["scenario"] == "ledger-storm" and entry["seed"] == 9
    with pytest.raises(corpus.CorpusError, match="names no scenario"):
        corpus.read_corpus(str(tmp_path))
