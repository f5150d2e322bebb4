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


def _explore_json(capsys, *argv, scenarios=(SCENARIO,)):
    code = cli_main(["explore", *scenarios, *argv, "--json"])
    body = json.loads(capsys.readouterr().out)
    for summary in body.get("scenarios", [body]):
        assert summary.pop("measured")["wall_s"] >= 0  # what this machine took: the one part that may differ
    return code, body


def test_the_same_runs_and_seed_give_the_same_corpus_and_summary(capsys, tmp_path):
    os.chdir(tmp_path)
    first = _explore_json(capsys, "--runs", "2", "--seed", "7", "--duration", "1m")
    second = _explore_json(capsys, "--runs", "2", "--seed", "7", "--duration", "1m")
    assert first == second
    assert first[0] == 0 and first[1]["runs"] == 2 and first[1]["corpus_size"] >= 1
    other = _explore_json(capsys, "--runs", "2", "--seed", "8", "--duration", "1m")
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
    code, body = _explore_json(capsys, "--runs", "2", "--seed", "5", "--duration", "1m", "--corpus", str(corpus))
    files = sorted(os.listdir(corpus))
    assert code == 0 and len(files) == body["corpus_size"]
    entry = json.loads((corpus / files[0]).read_text())
    assert entry["format"] == "loomsim-corpus/1" and entry["scenario"] == SCENARIO
    assert {"seed", "knobs", "duration_ms", "added"} <= set(entry)
    assert [e["file"] for e in body["corpus"]] == [str(corpus / name) for name in files] or (
        sorted(e["file"] for e in body["corpus"]) == [str(corpus / name) for name in files])
    code, again = _explore_json(capsys, "--runs", "1", "--seed", "5", "--duration", "1m", "--corpus", str(corpus))
    assert again["runs"] == len(files) + 1  # the saved corpus ran first
    first = again["corpus"][0]
    assert first["mutation"] == "replay" and first["seed"] in {e["seed"] for e in body["corpus"]}


@pytest.mark.parametrize("argv", [
    ["explore", SCENARIO, "--seed", "1"],
    ["explore", SCENARIO, "--runs", "2", "--budget", "1m", "--seed", "1"],
    ["explore", SCENARIO, "--budget", "never", "--seed", "1"],
    ["explore", SCENARIO, "--runs", "2", "--jobs", "0", "--seed", "1"],
    ["explore", SCENARIO, "port-storm", "--runs", "1", "--seed", "1"],
    ["explore", SCENARIO, SCENARIO, "--runs", "2", "--seed", "1"],
    ["explore", SCENARIO, "--runs", "0", "--seed", "1"],
    ["explore", SCENARIO, "--runs", "x", "--seed", "1"],
    ["explore", "no-such-scenario", "--runs", "1", "--seed", "1"],
    ["explore", SCENARIO, "--runs", "1", "--seed", "1", "--store", "cassandra"],
    ["explore", SCENARIO, "--runs", "1", "--seed", "1", "--duration", "soon"],
    ["explore", SCENARIO, "--runs", "1", "--seed", "1", "--fork-at", "1m"],
    ["explore", SCENARIO, "--runs", "1", "--seed", "1", "--branches", "4"],
    ["explore", SCENARIO, "--runs", "1", "--seed", "1", "--duration", "1m", "--fork-at", "1m", "--branches", "4"],
    ["explore", SCENARIO, "--runs", "1", "--seed", "1", "--fork-at", "1m", "--branches", "4", "--store", "sqlite"],
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


def test_an_observed_run_has_the_digest_of_the_same_run_made_by_loomsim_run(capsys, tmp_path):
    from sim.explore import Input, run_input
    from sim.face.explore import observers_for

    os.chdir(tmp_path)
    item = Input(seed=1, duration_ms=300_000)
    observed = run_input(registry.get(SCENARIO), item, "memory", observers_for())
    assert cli_main(["run", SCENARIO, "--seed", "1", "--duration", "5m", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert observed.passed and observed.trace_digest == plain["trace_digest"]
    names = observed.features
    assert "event:ledger.admit" in names and any(n.startswith("shape:ledger.admit/") for n in names)
    assert "transition:ready/claim/applied" in names and "transition:admitted/mark_ready/applied" in names
    assert any(n.startswith("port:ledger.") and n.count("/") == 2 for n in names)  # a fault with the state it hit


def test_transitions_name_the_state_before_the_call_and_the_answer_class():
    from model.ledger.states import TRANSITIONS
    from sim.face.explore_feedback import TRANSITION_UNIVERSE, LedgerTransitions
    from sim.runner import run
    from sim.scenario import ScenarioOptions

    watcher = LedgerTransitions()
    run(registry.get(SCENARIO), ScenarioOptions(seed=3, duration_ms=120_000, swarm=True), on_world=watcher.attach)
    found = set(watcher.features())
    assert found and all(n.startswith("transition:") and n.count("/") == 2 for n in found)
    for name in found:
        state, operation, answer = name.split(":", 1)[1].split("/")
        if answer == "applied" and state in TRANSITIONS:  # an applied call is one the table allows
            assert operation in TRANSITIONS[state], name
    assert found & set(TRANSITION_UNIVERSE)
    assert len(TRANSITION_UNIVERSE) == len(set(TRANSITION_UNIVERSE)) > 50


@pytest.mark.skipif(not hasattr(__import__("sys"), "monitoring"), reason="sys.monitoring: Python 3.12+")
def test_model_arcs_are_feedback_on_312_and_leave_nothing_switched_on():
    import sys

    from sim.arcs import TOOL_IDS, ArcObserver
    from sim.runner import run
    from sim.scenario import ScenarioOptions

    import model.canonical

    opts = ScenarioOptions(seed=9, duration_ms=60_000, swarm=True)
    plain = run(registry.get(SCENARIO), opts).trace_digest
    for memo in model.canonical._MEMOS:  # as in a fresh process
        memo.clear()
    observer = ArcObserver(os.path.join(os.path.dirname(os.path.dirname(__file__)), "model"))
    watched = run(registry.get(SCENARIO), opts, on_world=observer.attach)
    arcs = observer.features()
    observer.close()
    assert watched.trace_digest == plain
    assert arcs and all(a.startswith("arc:model/") and "->" in a for a in arcs)
    assert all(sys.monitoring.get_tool(t) is None for t in TOOL_IDS)
    again = ArcObserver(os.path.join(os.path.dirname(os.path.dirname(__file__)), "model"))
    run(registry.get(SCENARIO), opts, on_world=again.attach)
    again.close()
    # Events restarted and the model's memos emptied (the first run filled them): the same arcs again.
    assert again.features() == arcs


def test_the_search_does_not_depend_on_the_hash_seed(tmp_path):
    import subprocess
    import sys

    outputs = set()
    for hash_seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-m", "sim", "explore", SCENARIO, "--runs", "3", "--seed", "11",
                               "--duration", "1m", "--json"], capture_output=True, text=True, env=env,
                              cwd=tmp_path, check=False)
        assert done.returncode == 0, done.stderr
        body = json.loads(done.stdout)
        body.pop("measured")  # what this machine took
        outputs.add(json.dumps(body, sort_keys=True))
    assert len(outputs) == 1


def test_a_knob_mutation_moves_one_knob_to_another_legal_value():
    from sim.explore import Input, mutate
    from sim.rng import Streams

    space = registry.get(SCENARIO).swarm_space
    base = Input(seed=5, duration_ms=4 * 60_000)  # at the cap: no doubling
    # Each mutation draws from named children of its own stream: one stream per input.
    moved = [mutate(Streams(n)["test"], base, space.knobs, 4 * 60_000) for n in range(40)]
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


# --- the summary, --jobs, --budget, several scenarios ------------------------------------


def test_the_json_summary_has_format_2(capsys, tmp_path):
    os.chdir(tmp_path)
    code = cli_main(["explore", SCENARIO, "--runs", "3", "--seed", "4", "--duration", "30s", "--json"])
    body = json.loads(capsys.readouterr().out)
    assert code == 0 and body["format"] == "loomsim-explore/2"
    assert set(body) == {"format", "scenario", "seed", "store", "fresh_only", "runs", "batch", "corpus_size", "corpus",
                         "features", "families", "timeline", "never_taken", "rarest", "moves", "failures", "measured"}
    assert body["batch"] == 8 and body["runs"] == 3 and len(body["timeline"]) == 3
    assert [t["run"] for t in body["timeline"]] == [0, 1, 2]
    assert body["timeline"][-1] == {"run": 2, "features": len(body["features"]), "corpus": body["corpus_size"]}
    entry = body["corpus"][0]
    assert set(entry) == {"run", "seed", "knobs", "duration_ms", "script_entries", "mutation", "parent", "added",
                          "file"}
    assert entry["mutation"] == "fresh" and entry["parent"] is None and entry["file"] is None
    families = body["families"]
    assert families["transition"]["universe"] > 50 and families["event"]["universe"] is None
    assert sum(f["reached"] for f in families.values()) == len(body["features"])
    assert body["never_taken"] and all(n.startswith("transition:") and n not in body["features"]
                                       for n in body["never_taken"])
    assert body["rarest"] == sorted(body["rarest"], key=lambda r: (r[1], r[0]))[:20]
    measured = body["measured"]
    assert len(measured["cpu_s_after_run"]) == 3 and measured["cpu_s"] > 0
    assert measured["cpu_s_after_run"] == sorted(measured["cpu_s_after_run"])


def test_the_search_is_the_same_with_any_number_of_jobs(capsys, tmp_path):
    os.chdir(tmp_path)
    argv = ("--runs", "10", "--seed", "6", "--duration", "5s")
    one = _explore_json(capsys, *argv, "--jobs", "1")
    two = _explore_json(capsys, *argv, "--jobs", "2")
    assert one == two and one[1]["runs"] == 10


def test_a_budget_stops_at_a_batch_end_and_names_the_runs_command_that_replays_it(capsys, tmp_path):
    os.chdir(tmp_path)
    code = cli_main(["explore", SCENARIO, "--budget", "1ms", "--seed", "9", "--duration", "5s", "--jobs", "2"])
    out = capsys.readouterr().out
    assert code == 0
    line = next(l for l in out.splitlines() if "the same search, replayed:" in l)
    command = line.split("replayed: ", 1)[1].split()
    assert command[:2] == ["loomsim", "explore"] and command[command.index("--runs") + 1] == "8"  # one batch
    budgeted = _explore_json(capsys, "--budget", "1ms", "--seed", "9", "--duration", "5s", "--jobs", "2")
    replayed = _explore_json(capsys, *command[3:])
    assert budgeted == replayed


def test_several_scenarios_split_the_runs_one_summary_each(capsys, tmp_path):
    os.chdir(tmp_path)
    code, body = _explore_json(capsys, "--runs", "3", "--seed", "2", "--duration", "10s",
                               scenarios=(SCENARIO, "port-storm"))
    assert code == 0 and body["format"] == "loomsim-explore/2"
    assert [(s["scenario"], s["runs"]) for s in body["scenarios"]] == [(SCENARIO, 2), ("port-storm", 1)]


def test_a_failing_input_with_a_script_writes_a_repro_file_that_replays_the_failure(capsys, tmp_path):
    from faults.script import script_to_json
    from sim.face.corpus import entry_json, write_entry
    from sim.runner import run
    from sim.scenario import ScenarioOptions

    mutant = CATALOGUE["settlement-receipt-is-the-key"]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    with mx.applied(mutant):
        failed = run(registry.get(SCENARIO), ScenarioOptions(seed=1, duration_ms=60_000, swarm=True))
        assert not failed.passed
        write_entry(str(corpus), entry_json(scenario=SCENARIO, store="memory", seed=1, knobs={}, duration_ms=60_000,
                                            fault_script=script_to_json(failed.fault_script)))
        code = cli_main(["explore", SCENARIO, "--runs", "1", "--seed", "1", "--duration", "1m", "--corpus",
                         str(corpus), "--repro-dir", str(tmp_path), "--json"])
        body = json.loads(capsys.readouterr().out)
    assert code == 1
    scripted = [f for f in body["failures"] if f["script_entries"] is not None]
    assert scripted, body["failures"]
    path = scripted[0]["repro_file"]
    assert path and f"--faults {path}" in scripted[0]["repro_command"]
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle)["fault_script"] == script_to_json(failed.fault_script)
    capsys.readouterr()
    try:
        assert cli_main(["repro", path]) == 1
    finally:
        mx.revert()


def test_a_signal_stops_the_workers_and_the_summary_of_the_finished_batches_is_printed(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    corpus = tmp_path / "corpus"
    proc = subprocess.Popen([sys.executable, "-m", "sim", "explore", SCENARIO, "--runs", "400", "--seed", "3",
                             "--duration", "5s", "--jobs", "2", "--corpus", str(corpus), "--json"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # SIGINT at its default, whatever the runner was started with (a background job ignores it)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (corpus.is_dir() and any(corpus.iterdir())) and time.monotonic() < deadline:  # a batch folded
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    body = json.loads(out)
    assert body["runs"] % 8 == 0 and 8 <= body["runs"] < 400
    assert "interrupted by SIGINT" in err and "Traceback" not in err


def test_report_writes_the_searchs_markdown_and_html_as_new_files(capsys, tmp_path):
    directory = tmp_path / "reports" / "explore"  # made when missing
    argv = ["explore", SCENARIO, "--runs", "2", "--seed", "4", "--duration", "30s", "--report", str(directory)]
    assert cli_main(argv) == 0
    assert cli_main(argv) == 0  # a second search never overwrites the first one's report
    names = sorted(os.listdir(directory))
    assert names == ["explore-ledger-storm-seed4-2.html", "explore-ledger-storm-seed4-2.md",
                     "explore-ledger-storm-seed4.html", "explore-ledger-storm-seed4.md"]
    text = (directory / "explore-ledger-storm-seed4.md").read_text(encoding="utf-8")
    assert text.startswith("# ✅ loomsim explore PASS (exit 0)")
    assert "<svg" in (directory / "explore-ledger-storm-seed4.html").read_text(encoding="utf-8")
    assert f"report: {directory / 'explore-ledger-storm-seed4.md'}" in capsys.readouterr().out


def test_report_into_a_file_is_a_usage_error(capsys, tmp_path):
    (tmp_path / "taken").write_text("x")
    code = cli_main(["explore", SCENARIO, "--runs", "1", "--seed", "4", "--report", str(tmp_path / "taken")])
    assert code == 2 and "--report" in capsys.readouterr().err


def test_mutant_option_searches_with_the_planted_bug_and_names_it_in_the_repro(capsys, tmp_path):
    try:
        code = cli_main(["explore", SCENARIO, "--runs", "2", "--seed", "1", "--duration", "1m",
                         "--mutant", "settlement-receipt-is-the-key", "--repro-dir", str(tmp_path), "--json"])
    finally:
        mx.revert()
    body = json.loads(capsys.readouterr().out)
    assert code == 1 and body["failures"]
    assert "--mutant settlement-receipt-is-the-key" in body["failures"][0]["repro_command"]
    assert cli_main(["explore", SCENARIO, "--runs", "1", "--seed", "1", "--mutant", "no-such-bug"]) == 2
    assert "unknown mutant" in capsys.readouterr().err


def test_fresh_inputs_are_a_sweeps_seeds_in_order_from_the_search_seed():
    scenario = registry.get(SCENARIO)
    outcome = explore(scenario, runs=10, seed=3, duration_ms=10_000)
    fresh = [e.input.seed for e in outcome.corpus if e.mutation == "fresh"]
    assert fresh and fresh == sorted(fresh) and set(fresh) <= set(range(3, 3 + outcome.fresh))
    assert outcome.fresh == 8 + 2  # the whole first batch, then the two runs left of the second (half of it)


def test_without_duration_a_fresh_seed_runs_for_the_scenarios_sweep_duration(capsys, monkeypatch):
    import sim.face.explore as face

    asked = []

    def recording(scenario, **kwargs):
        asked.append(kwargs["duration_ms"])
        return kwargs["into"]

    monkeypatch.setattr(face, "explore", recording)
    assert cli_main(["explore", SCENARIO, "--runs", "1", "--seed", "0", "--json"]) == 0
    capsys.readouterr()
    scenario = registry.get(SCENARIO)
    assert asked == [scenario.sweep_ms] and scenario.sweep_ms != scenario.default_duration_ms


def test_fresh_only_runs_a_sweeps_seeds_and_nothing_else():
    asked = []
    outcome = explore(registry.get(SCENARIO), runs=20, seed=4, duration_ms=60_000, execute=_fake_execute(asked),
                      fresh_only=True)
    assert [item.seed for item in asked] == list(range(4, 24))
    assert all(item.fault_script is None and item.branch is None and item.knobs == () for item in asked)
    assert {e.mutation for e in outcome.corpus} == {"fresh"}


def test_fresh_inputs_with_fork_at_are_the_branches_of_each_seed_in_order():
    from sim.explore import fresh_input

    made = [fresh_input(5, f, 600_000, 60_000, 3) for f in range(7)]
    assert [(i.seed, i.branch.key, i.branch.fork_at_ms) for i in made] == [
        (5, 0, 60_000), (5, 1, 60_000), (5, 2, 60_000), (6, 0, 60_000), (6, 1, 60_000), (6, 2, 60_000),
        (7, 0, 60_000)]
    assert all(i.branch.streams == () and i.duration_ms == 600_000 for i in made)
    assert fresh_input(5, 3, 600_000) == made[0].__class__(seed=8, duration_ms=600_000)


def test_branches_forked_from_one_prefix_answer_as_their_runs_made_in_full():
    """The face's shared prefix (one process, forked per branch) gives each
    branch the features, verdict and digest of ``run --fork-at T --branch k``
    made from the start, and a CPU time that includes a share of the prefix."""
    from sim.explore import fresh_input, run_input
    from sim.face.explore import ForkedBatches, observers_for

    scenario = registry.get(SCENARIO)
    items = [fresh_input(3, f, 60_000, 20_000, 3) for f in range(3)]
    observers = observers_for()
    forked = ForkedBatches(scenario, "memory", observers, jobs=2)(items)
    alone = [run_input(scenario, item, "memory", observers) for item in items]
    assert [o.trace_digest for o in forked] == [o.trace_digest for o in alone]
    assert len({o.trace_digest for o in forked}) == 3, "three keys, three futures"
    assert [o.features for o in forked] == [o.features for o in alone]
    assert [o.status for o in forked] == [o.status for o in alone]
    assert all(o.cpu_s > 0 for o in forked)


def test_a_forked_search_is_the_same_search_with_any_number_of_jobs(capsys, tmp_path):
    os.chdir(tmp_path)
    argv = ("--runs", "12", "--seed", "2", "--duration", "1m", "--fork-at", "30s", "--branches", "6")
    one = _explore_json(capsys, *argv, "--jobs", "1")
    two = _explore_json(capsys, *argv, "--jobs", "2")
    assert one == two and one[1]["runs"] == 12
    assert one[1]["branches"] == {"fork_at_ms": 30_000, "per_seed": 6}
    fresh = [e for e in one[1]["corpus"] if e["mutation"] == "fresh"]
    assert fresh and all(e["branch"]["fork_at_ms"] == 30_000 for e in fresh)


def test_the_summary_counts_what_each_move_gave(capsys, tmp_path):
    os.chdir(tmp_path)
    _, body = _explore_json(capsys, "--runs", "12", "--seed", "3", "--duration", "5s")
    moves = body["moves"]
    assert sum(m["runs"] for m in moves.values()) == body["runs"] == 12
    assert moves["fresh"]["runs"] >= 8 and sum(m["entries"] for m in moves.values()) == body["corpus_size"]
    assert sum(m["added"] for m in moves.values()) == len(body["features"])  # every feature was first added once
