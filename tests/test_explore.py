"""``loomsim explore``: a deterministic, coverage-guided search (sim/explore.py)."""
from __future__ import annotations

import json
import os

import pytest

from faults import mutants as mx
from faults.mutant_catalogue import MUTANTS
from scenarios import registry
from sim.explore import explore, features
from sim.face.cli import main as cli_main

SCENARIO = "ledger-storm"
CATALOGUE = {m.name: m for m in MUTANTS}


def _explore_json(capsys, *argv):
    code = cli_main(["explore", SCENARIO, *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_same_runs_and_seed_give_the_same_corpus_and_summary(capsys, tmp_path):
    os.chdir(tmp_path)
    first = _explore_json(capsys, "--runs", "4", "--seed", "7", "--duration", "2m")
    second = _explore_json(capsys, "--runs", "4", "--seed", "7", "--duration", "2m")
    assert first == second
    assert first[0] == 0 and first[1]["runs"] == 4 and first[1]["corpus_size"] >= 1
    other = _explore_json(capsys, "--runs", "4", "--seed", "8", "--duration", "2m")
    assert [e["seed"] for e in other[1]["corpus"]] != [e["seed"] for e in first[1]["corpus"]]


def test_the_corpus_grows_only_by_inputs_that_add_features():
    scenario = registry.get(SCENARIO)
    outcome = explore(scenario, runs=5, seed=3, duration_ms=120_000)
    seen: set[str] = set()
    for entry in outcome.corpus:
        assert entry.added and set(entry.added) == entry.features - seen
        seen |= entry.features
    assert len(outcome.corpus) < outcome.runs  # some runs added nothing and were not kept
    # Every mutated duration stays within 4x the base, every knob pin within its range.
    space = scenario.swarm_space
    for entry in outcome.corpus:
        assert 120_000 <= entry.input.duration_ms <= 4 * 120_000
        for name, value in entry.input.knobs:
            knob = space.knob(name)
            assert knob.minimum <= value <= knob.maximum


def test_a_planted_bug_is_found_and_its_repro_file_replays_as_a_failure(capsys, tmp_path):
    mutant = CATALOGUE["settlement-receipt-is-the-key"]
    with mx.applied(mutant):
        code = cli_main(["explore", SCENARIO, "--runs", "2", "--seed", "1", "--duration", "1m",
                         "--repro-dir", str(tmp_path), "--json"])
        body = json.loads(capsys.readouterr().out)
    assert code == 1 and body["failures"]
    path = body["failures"][0]["repro_file"]
    assert path and os.path.exists(path) and "--mutant settlement-receipt-is-the-key" in body["failures"][0]["repro_command"]
    capsys.readouterr()
    try:
        assert cli_main(["repro", path]) == 1  # the repro file names the mutant: the replay runs the same bug
    finally:
        mx.revert()  # the CLI applied it in this process


def test_the_corpus_directory_is_written_and_replayed(capsys, tmp_path):
    corpus = tmp_path / "corpus"
    os.chdir(tmp_path)
    code, body = _explore_json(capsys, "--runs", "2", "--seed", "5", "--duration", "2m", "--corpus", str(corpus))
    files = sorted(os.listdir(corpus))
    assert code == 0 and len(files) == body["corpus_size"]
    entry = json.loads((corpus / files[0]).read_text())
    assert set(entry) == {"seed", "knobs", "duration_ms", "added"}
    code, again = _explore_json(capsys, "--runs", "1", "--seed", "5", "--duration", "2m", "--corpus", str(corpus))
    assert again["runs"] == len(files) + 1  # the saved corpus ran first
    assert again["corpus"][0]["seed"] == body["corpus"][0]["seed"]


@pytest.mark.parametrize("argv", [
    ["explore", SCENARIO, "--seed", "1"],
    ["explore", SCENARIO, "--runs", "0", "--seed", "1"],
    ["explore", SCENARIO, "--runs", "x", "--seed", "1"],
    ["explore", "no-such-scenario", "--runs", "1", "--seed", "1"],
    ["explore", SCENARIO, "--runs", "1", "--seed", "1", "--store", "cassandra"],
    ["explore", SCENARIO, "--runs", "1", "--seed", "1", "--duration", "soon"],
])
def test_bad_arguments_are_one_error_line_and_exit_2(capsys, argv):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("loomsim: error: ") and err.count("\n") == 1


def test_features_name_what_fired():
    from sim.runner import run
    from sim.scenario import ScenarioOptions

    result = run(registry.get(SCENARIO), ScenarioOptions(seed=1, duration_ms=300_000, swarm=True))
    names = features(result)
    assert "fault:ack-lost" in names and "port:ledger/ack-lost" in names
    assert "failpoint:submit:after-materialize" in names and "sometimes:worker_crashes" in names
    assert "invariant:fencing" in names and "fault:node-kill" not in names


def test_event_kinds_are_feedback_and_leave_the_digest_alone():
    from sim.explore import EventKinds
    from sim.runner import run
    from sim.scenario import ScenarioOptions

    opts = ScenarioOptions(seed=1, duration_ms=300_000, swarm=True)
    sink = EventKinds()
    with_sink = run(registry.get(SCENARIO), opts, trace_stream=sink)
    without = run(registry.get(SCENARIO), opts)
    assert with_sink.trace_digest == without.trace_digest
    assert "ledger.admit" in sink.kinds and "event:ledger.admit" in features(with_sink, sink.kinds)


def test_the_search_does_not_depend_on_the_hash_seed(tmp_path):
    import subprocess
    import sys

    outputs = set()
    for hash_seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-m", "sim", "explore", SCENARIO, "--runs", "3", "--seed", "11",
                               "--duration", "2m", "--json"], capture_output=True, text=True, env=env,
                              cwd=tmp_path, check=False)
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout)
    assert len(outputs) == 1


def test_a_knob_mutation_moves_one_knob_to_another_legal_value():
    from sim.explore import Input, mutate
    from sim.rng import Streams

    space = registry.get(SCENARIO).swarm_space
    stream = Streams(1)["test"]
    base = Input(seed=5, duration_ms=4 * 60_000)  # at the cap: no doubling
    moved = [mutate(stream, base, space.knobs, 4 * 60_000) for _ in range(40)]
    knobbed = [m for m in moved if m.knobs]
    assert knobbed and all(m.seed == base.seed and len(m.knobs) == 1 for m in knobbed)
    for m in knobbed:
        (name, value), = m.knobs
        assert space.knob(name).minimum <= value <= space.knob(name).maximum
    assert all(m.duration_ms == base.duration_ms for m in moved)


@pytest.mark.parametrize("name, duration_ms, digest", [
    # Measured on the commit before explore existed: adding it changed no run.
    ("ledger-storm", 300_000, "549662da864facf26e5ffba8cf3946c0d6db45fca1a6b62eb0909d9a6118a6b9"),
    ("sentinel-year", 86_400_000, "c7d5573dbd9ec5c2c3e33e486522c8e57235d8464f8771e06aba36aa57278bed"),
])
def test_existing_runs_keep_their_digest(name, duration_ms, digest):
    from sim.runner import run
    from sim.scenario import ScenarioOptions

    assert run(registry.get(name), ScenarioOptions(seed=1, duration_ms=duration_ms, swarm=True)).trace_digest == digest
