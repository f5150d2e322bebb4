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


# -- ``loomsim sweep ... --corpus DIR``: the corpus replays first ----------------------------

_SWEEP = ("sweep", "ledger-storm", "--seeds", "0:1", "--duration", "30s", "--store", "memory", "--failure-db", "none")


def _entry(directory, seed, *, knobs=None, duration_ms=30_000, fault_script=None, scenario="ledger-storm"):
    body = corpus.entry_json(scenario=scenario, store="memory", seed=seed, knobs=knobs or {},
                             duration_ms=duration_ms, fault_script=fault_script, added=("event:x",))
    path = corpus.write_entry(str(directory), body)
    assert path is not None
    return os.path.basename(path)


def test_sweep_replays_the_corpus_first_and_counts_what_passes(capsys, tmp_path):
    os.chdir(tmp_path)
    entries = tmp_path / "corpus"
    entries.mkdir()
    _entry(entries, 3)
    _entry(entries, 4, duration_ms=60_000)
    _entry(entries, 5, scenario="sentinel-year")  # another scenario's: not this sweep's to replay
    code, text, _ = _cli(capsys, *_SWEEP, "--corpus", str(entries))
    assert code == 0
    lines = text.splitlines()
    done = [i for i, line in enumerate(lines) if line.startswith("[corpus]")]
    seed_lines = [i for i, line in enumerate(lines) if line.startswith("[1/1]")]
    assert len(done) == 2 and done[-1] < seed_lines[0]  # replayed before any seed ran
    assert "corpus: 2 entries replayed, all pass" in lines
    code, out, _ = _cli(capsys, *_SWEEP, "--corpus", str(entries), "--json")
    body = json.loads(out)
    assert code == 0 and body["exit_code"] == 0
    replays = body["corpus_replays"]
    assert sorted((r["seed"], r["outcome"]) for r in replays) == [(3, "pass"), (4, "pass")]
    assert [r["file"] for r in replays] == sorted(r["file"] for r in replays)  # in file name order


def test_sweep_reports_entries_that_no_longer_apply_and_never_counts_them_as_passing(capsys, tmp_path):
    os.chdir(tmp_path)
    entries = tmp_path / "corpus"
    entries.mkdir()
    unknown = _entry(entries, 3, knobs={"no_such_knob": 1})
    unparsable = _entry(entries, 4, fault_script=[{"site": 5, "kind": "no-such-kind"}])
    code, out, _ = _cli(capsys, *_SWEEP, "--corpus", str(entries), "--json")
    body = json.loads(out)
    replays = {r["file"]: r for r in body["corpus_replays"]}
    assert set(replays) == {unknown, unparsable}
    assert all(r["outcome"] == "not-applicable" for r in replays.values())
    assert "no_such_knob" in replays[unknown]["detail"]
    assert "script" in replays[unparsable]["detail"]
    assert code == 0  # not a failure, and not a pass either
    code, text, _ = _cli(capsys, *_SWEEP, "--corpus", str(entries))
    assert "corpus: 2 entries replayed: 0 fail, 0 pass, 2 not applicable" in text
    assert text.count("NOT APPLICABLE") >= 2 and "all pass" not in text


def _seeds_under(mutant, count=20):
    """The first seed that fails and the first that passes, 30s of ledger-storm with ``mutant`` applied."""
    from scenarios import registry
    from sim.runner import run
    from sim.scenario import ScenarioOptions

    scenario = registry.get("ledger-storm")
    failing = passing = None
    for seed in range(count):
        passed = run(scenario, ScenarioOptions(seed=seed, duration_ms=30_000, swarm=True)).passed
        if passed and passing is None:
            passing = seed
        if not passed and failing is None:
            failing = seed
        if failing is not None and passing is not None:
            return failing, passing
    raise AssertionError(f"no failing and passing seed among {count} under {mutant.name}")


def test_a_corpus_entry_that_fails_fails_the_sweep_with_a_new_repro_file(capsys, tmp_path):
    from faults import mutants as mx
    from faults.mutant_catalogue import MUTANTS
    from sim.face.repro_file import repro_filename

    os.chdir(tmp_path)
    entries, repros = tmp_path / "corpus", tmp_path / "repros"
    entries.mkdir(), repros.mkdir()
    mutant = {m.name: m for m in MUTANTS}["settlement-receipt-is-the-key"]
    with mx.applied(mutant):
        bad_seed, good_seed = _seeds_under(mutant)
        _entry(entries, good_seed)
        failing = _entry(entries, bad_seed)
        taken = repros / repro_filename("ledger-storm", bad_seed)
        taken.write_text("an earlier artifact\n")
        code, out, _ = _cli(capsys, *_SWEEP, "--corpus", str(entries), "--repro-dir", str(repros), "--json",
                            "--report", str(tmp_path / "report"))
        text_code, text, _ = _cli(capsys, *_SWEEP, "--corpus", str(entries), "--repro-dir", str(repros))
    body = json.loads(out)
    assert code == text_code == 1 and body["exit_code"] == 1 and body["status"] == "fail"
    bad = [r for r in body["corpus_replays"] if r["outcome"] == "fail"]
    assert [r["file"] for r in bad] == [failing]
    assert bad[0]["invariant"] and bad[0]["seed"] == bad_seed
    assert "--mutant settlement-receipt-is-the-key" in bad[0]["repro_command"]
    assert bad[0]["repro_file"] and os.path.exists(bad[0]["repro_file"])
    assert taken.read_text() == "an earlier artifact\n"  # never written over
    assert os.path.basename(bad[0]["repro_file"]) == repro_filename("ledger-storm", bad_seed)[:-5] + "-2.json"
    lines = text.splitlines()
    summary_at = next(i for i, line in enumerate(lines) if line.startswith("corpus: "))
    assert lines[summary_at] == "corpus: 2 entries replayed: 1 fail, 1 pass, 0 not applicable"
    assert lines[summary_at + 1].startswith(f"  FAIL ledger-storm seed {bad_seed} (corpus entry {failing})")
    assert lines[summary_at + 2].strip().startswith(f"reproduce: loomsim run ledger-storm --seed {bad_seed}")
    assert lines[-1].startswith("FAIL (exit 1)") and "corpus entr" in lines[-1]
    # The reports read the same verdict: the failing entry is a failure in each.
    md = (tmp_path / "report" / "loomsim-report.md").read_text(encoding="utf-8")
    assert md.startswith("# ❌ loomsim FAIL (exit 1)") and f"corpus entry {failing} fails" in md
    junit = (tmp_path / "report" / "loomsim-junit.xml").read_text(encoding="utf-8")
    assert f'name="corpus entry {failing}"' in junit and junit.count("<failure") == 1
    page = (tmp_path / "report" / "loomsim-report.html").read_text(encoding="utf-8")
    assert "corpus entries replayed: <b>2 (1 fail, 1 pass)</b>" in page and f"corpus entry {failing} fails" in page


def test_a_corpus_that_cannot_be_read_is_a_usage_error_before_anything_runs(capsys, tmp_path):
    os.chdir(tmp_path)
    entries = tmp_path / "corpus"
    entries.mkdir()
    (entries / "junk.json").write_text("[]")
    for path, message in ((entries, "junk.json"), (tmp_path / "missing", "does not exist")):
        code, text, err = _cli(capsys, *_SWEEP, "--corpus", str(path))
        assert code == 2 and text == "" and message in err and err.count("\n") == 1


def test_merged_shards_list_the_corpus_replays_once(capsys, tmp_path):
    os.chdir(tmp_path)
    entries = tmp_path / "corpus"
    entries.mkdir()
    _entry(entries, 3)
    _entry(entries, 4, knobs={"no_such_knob": 1})
    shards = []
    for index in (1, 2):
        shard = tmp_path / f"shard-{index}.json"
        code, _, _ = _cli(capsys, "sweep", "ledger-storm", "--seeds", "0:2", "--duration", "30s", "--store", "memory",
                          "--failure-db", "none", "--corpus", str(entries), "--shard", f"{index}/2",
                          "--out", str(shard), "--json")
        assert code == 0
        shards.append(str(shard))
    code, out, _ = _cli(capsys, "merge", *shards, "--json")
    merged = json.loads(out)
    assert code == 0
    assert sorted((r["seed"], r["outcome"]) for r in merged["corpus_replays"]) == [(3, "pass"), (4, "not-applicable")]
