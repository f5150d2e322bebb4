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


# --- fault-script mutations ---------------------------------------------------------

def _script():
    from sim.interleave import Deviation
    from sim.world import FaultEvent

    return (FaultEvent(1_000, "workers/worker-1", "ledger.claim", "ack-lost", 3, restart_after_ms=5_000),
            FaultEvent(2_000, "workers/worker-2", "ledger.claim", "transient-error", 7),
            Deviation(2_500, 2_500, "worker", "workers/worker-1", "worker", "workers/worker-2", "worker_loop"),
            FaultEvent(3_000, "workers/worker-1", "process", "node-kill", None, restart_after_ms=1_000),
            FaultEvent(9_000, "workers/worker-3", "log.append", "latency", 2, duration_ms=40))


def _valid(script):
    from faults.script import parse_script, script_to_json

    return parse_script(json.loads(json.dumps(script_to_json(list(script))))) == tuple(script)


@pytest.mark.parametrize("move", ["script-add", "script-drop", "script-shift", "script-move-hit", "script-splice",
                                  "schedule-add", "schedule-drop", "schedule-shift"])
def test_each_script_mutation_makes_a_valid_script_that_differs_as_named(move):
    from sim.explore import HIT_MOVE_MAX, TIMED_KINDS, mutate_script
    from sim.interleave import Deviation
    from sim.rng import Streams
    from sim.world import FaultEvent

    base = _script()
    other = (FaultEvent(500, "workers/worker-2", "ledger.reserve_settlement", "crash-before-call", 1),
             FaultEvent(8_000, "workers/worker-2", "ledger.finalize_settlement", "ack-lost", 4))
    kinds_at = {"ledger.claim": ["ack-lost", "reply-lost", "transient-error"]}
    changed = 0
    for n in range(12):
        out = mutate_script(Streams(n)["t"], move, base, 10_000, kinds_at, other)
        assert _valid(out) and len(out) <= 64 and [e.time_ms for e in out] == sorted(e.time_ms for e in out)
        assert all(0 <= e.time_ms < 10_000 for e in out)
        added = [e for e in out if e not in base]
        gone = [e for e in base if e not in out]
        changed += out != base
        if move == "script-drop":
            assert len(gone) == 1 and not added and isinstance(gone[0], FaultEvent)
        elif move == "schedule-drop":
            assert len(gone) == 1 and not added and isinstance(gone[0], Deviation)
        elif move == "script-add":
            assert len(added) == 1 and not gone and isinstance(added[0], FaultEvent)
            new = added[0]
            if new.kind not in TIMED_KINDS:  # a point fault fires at the first hit at/after its new time
                assert new.hit is None
                assert new.site != "ledger.claim" or new.kind in kinds_at["ledger.claim"]
        elif move == "schedule-add":
            assert len(added) == 1 and not gone and isinstance(added[0], Deviation) and added[0].step is None
        elif move in ("script-shift", "schedule-shift"):
            assert len(added) <= 1 and len(gone) == len(added)
            if added:
                old, new = gone[0], added[0]
                assert (new.site, new.kind) == (old.site, old.kind) if isinstance(new, FaultEvent) else True
                assert new.time_ms != old.time_ms or getattr(new, "hit", 0) != getattr(old, "hit", 0) or (
                    isinstance(new, Deviation))
                if isinstance(new, FaultEvent) and new.kind not in TIMED_KINDS:
                    assert new.hit is None
                if isinstance(new, Deviation):
                    assert new.step is None
        elif move == "script-move-hit":
            assert len(added) == len(gone) == 1
            old, new = gone[0], added[0]
            assert (new.site, new.time_ms, new.kind) == (old.site, old.time_ms, old.kind)
            assert new.hit != old.hit and abs(new.hit - old.hit) <= HIT_MOVE_MAX and new.hit >= 1
        else:  # a splice: the first's entries before a time, the second's after it
            cut = next((e.time_ms for e in out if e in other), 10_000)
            assert all(e in base for e in out if e.time_ms < cut)
            assert [e for e in out if e in other] == [e for e in other if e.time_ms >= cut]
    assert changed


def test_a_script_never_grows_past_its_bound():
    from sim.explore import SCRIPT_EVENTS_MAX, mutate_script
    from sim.rng import Streams
    from sim.world import FaultEvent

    long = tuple(FaultEvent(t, "workers/worker-1", "ledger.claim", "transient-error", t + 1) for t in range(100))
    out = mutate_script(Streams(1)["t"], "script-add", long, 10_000, {})
    assert len(out) == SCRIPT_EVENTS_MAX


def test_the_engine_knows_the_timed_kinds():
    from faults.kinds import TIMED_FAULT_KINDS
    from sim.explore import TIMED_KINDS

    assert TIMED_KINDS == frozenset(TIMED_FAULT_KINDS)


def _fake_execute(asked):
    """A batch runner that runs nothing: each input's features and fired script follow from it."""
    from sim.explore import Observed
    from sim.world import FaultEvent

    def execute(items):
        out = []
        for item in items:
            asked.append(item)
            script = item.fault_script if item.fault_script is not None else tuple(
                FaultEvent(1_000 * k, "workers/worker-1", "ledger.claim", "ack-lost", item.seed % 50 + k)
                for k in range(1, 4))
            reached = frozenset({f"fake:seed{item.seed % 13}", f"fake:script{len(script)}",
                                 *(f"fake:t{e.time_ms // 7_000}" for e in script)})
            out.append(Observed(reached, "pass", True, (), tuple(script)))
        return out
    return execute


def test_a_search_pins_scripts_mutated_from_each_entrys_recorded_script():
    asked = []
    outcome = explore(registry.get(SCENARIO), runs=40, seed=2, duration_ms=60_000, execute=_fake_execute(asked))
    assert len(asked) == 40 and outcome.runs == 40
    scripted = [e for e in outcome.corpus if e.input.fault_script is not None]
    assert scripted and {e.mutation for e in scripted} <= {"script-add", "script-drop", "script-shift",
                                                         "script-move-hit", "script-splice"}
    for entry in scripted:  # mutated from an earlier entry's recorded script
        assert entry.parent is not None and entry.parent < outcome.corpus.index(entry)
        assert entry.input.fault_script != outcome.corpus[entry.parent].script
    assert all(e.script for e in outcome.corpus)
