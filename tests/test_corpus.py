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


# -- ``loomsim merge --corpus OUT DIR...`` ------------------------------------------------


def _cli(capsys, *argv):
    from sim.face.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_merge_corpus_through_the_cli_folds_directories_and_says_how_many(capsys, tmp_path):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    a.mkdir(), b.mkdir()
    corpus.write_entry(str(a), _body(seed=1))
    corpus.write_entry(str(b), _body(seed=1))
    corpus.write_entry(str(b), _body(seed=2))
    code, text, err = _cli(capsys, "merge", "--corpus", str(out), str(a), str(b))
    assert (code, err) == (0, "")
    assert text == f"merged 2 entries into {out} (1 already there)\n"
    assert sorted(os.listdir(out)) == sorted(corpus.entry_filename(_body(seed=s)) for s in (1, 2))
    before = {n: (out / n).read_text() for n in os.listdir(out)}
    corpus.write_entry(str(a), _body(seed=3))
    code, text, _ = _cli(capsys, "merge", "--corpus", str(out), str(a))
    assert code == 0 and text == f"merged 1 entry into {out} (1 already there)\n"
    assert all((out / n).read_text() == t for n, t in before.items())  # never rewritten


def test_merge_corpus_refuses_bad_input_in_one_line_and_writes_nothing(capsys, tmp_path):
    good, bad, out = tmp_path / "good", tmp_path / "bad", tmp_path / "out"
    good.mkdir(), bad.mkdir()
    corpus.write_entry(str(good), _body(seed=1))
    corpus.write_entry(str(bad), _body(seed=2))
    (bad / "zz-broken.json").write_text("{not json")
    a_file = tmp_path / "file.json"
    a_file.write_text("{}")
    shard_like = tmp_path / "shard.json"
    shard_like.write_text(json.dumps({"format": "loomsim-shard/1"}))
    for argv, message in (
            (["--corpus", str(out), str(good), str(bad)], "zz-broken.json"),
            (["--corpus", str(out), str(good), str(tmp_path / "missing")], "does not exist"),
            (["--corpus", str(out), str(shard_like)], "is not a directory"),
            (["--corpus", str(a_file), str(good)], "is not a directory"),
            (["--corpus", str(out), str(good), "--json"], "--corpus"),
    ):
        code, text, err = _cli(capsys, "merge", *argv)
        assert code == 2 and text == "", argv
        assert err.startswith("loomsim: error: ") and err.count("\n") == 1 and message in err, (argv, err)
        assert "Traceback" not in err
    assert not out.exists()  # nothing was written for any of them
    assert a_file.read_text() == "{}"


def test_merge_of_shard_files_is_unchanged_without_corpus(capsys, tmp_path):
    not_shard = tmp_path / "x.json"
    not_shard.write_text("{}")
    code, _, err = _cli(capsys, "merge", str(not_shard))
    assert code == 2 and "is not a loomsim shard file" in err
