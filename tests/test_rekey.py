"""Re-keying one stream family from an instant on: the same run, another
future for one part of it (its scheduling, its workers' choices, its
faults' draws), and ``loomsim explore``'s ``rekey`` mutation that makes it.

``Branch(fork_at_ms, key, streams=(family, ...))`` (``run --fork-at T
--branch K --branch-streams F``) re-keys only the named families at T; a
failure found this way is an ordinary repro file, and a corpus entry keeps
its branch."""
from __future__ import annotations

import json

import pytest

from scenarios import registry
from sim.explore import REKEY_KEY_BOUND, Input, Observed, explore, rekey
from sim.face.cli import main
from sim.face.corpus import CorpusError, _entry, check_branch, entry_json, read_corpus, write_entry
from sim.rng import BranchError, Streams, rekeyed_at_branch
from sim.runner import run
from sim.scenario import Branch, ScenarioOptions

SCENARIO = "ledger-storm"


def test_a_branch_of_one_family_rekeys_that_family_and_keeps_every_other_draw():
    plain, branched = Streams(11), Streams(11)
    for streams in (plain, branched):
        streams.track()
        streams["scheduling"].below(1_000)
        streams["faults"].below(1_000)
    assert branched.branch(5, ("scheduling",)) == 1
    assert plain["faults"].below(10 ** 9) == branched["faults"].below(10 ** 9)  # kept
    assert plain["scheduling"].below(10 ** 9) != branched["scheduling"].below(10 ** 9)  # re-keyed
    # Made after the fork: a stream of the family starts re-keyed, one of another family does not.
    assert plain.fork("workers/w1/0").next_u64() == branched.fork("workers/w1/0").next_u64()
    assert plain.fork("scheduling/x").next_u64() != branched.fork("scheduling/x").next_u64()
    assert rekeyed_at_branch("scheduling/x", frozenset({"scheduling"}))
    assert not rekeyed_at_branch("workers/x", frozenset({"scheduling"}))
    assert not rekeyed_at_branch("swarm", frozenset())


def test_a_branch_never_rekeys_the_runs_configuration():
    with pytest.raises(BranchError, match="never re-keys swarm"):
        Streams(1).branch(0, ("swarm",))


def test_streams_name_the_families_they_drew_from():
    streams = Streams(3)
    streams["scheduling"].below(2)
    streams.fork("workers/a/1")  # not recorded: recording was off
    streams.record_families()
    streams.fork("workers/b/2")
    streams.fork("submitters/defer/1")
    assert streams.families() == ("scheduling", "submitters", "workers")
    # Recording changes no draw.
    assert Streams(3).fork("workers/b/2").next_u64() == streams.fork("workers/b/2").next_u64()


def test_rekeying_one_family_changes_the_future_and_replays_from_the_command_line(capsys):
    scenario = registry.get(SCENARIO)
    base = ScenarioOptions(seed=4, duration_ms=300_000, swarm=True)
    branch = Branch(60_000, 7, ("scheduling",))
    plain = run(scenario, base)
    one = run(scenario, ScenarioOptions(seed=4, duration_ms=300_000, swarm=True, branch=branch))
    every = run(scenario, ScenarioOptions(seed=4, duration_ms=300_000, swarm=True, branch=Branch(60_000, 7)))
    assert one.passed and len({plain.trace_digest, one.trace_digest, every.trace_digest}) == 3
    assert one.config["branch"]["streams"] == ["scheduling"]
    assert main(["run", SCENARIO, "--seed", "4", "--duration", "5m", "--fork-at", "1m", "--branch", "7",
                 "--branch-streams", "scheduling", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace_digest"] == one.trace_digest


@pytest.mark.parametrize("argv, says", [
    (["--branch-streams", "scheduling"], "--branch-streams needs --fork-at"),
    (["--fork-at", "1m", "--branch", "1", "--branch-streams", "swarm"], "never re-keys"),
    (["--fork-at", "1m", "--branch", "1", "--branch-streams", "a/b"], "invalid stream family"),
])
def test_bad_branch_streams_are_one_line_usage_errors(capsys, argv, says):
    assert main(["run", SCENARIO, "--seed", "1", "--duration", "2m", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_the_rekey_mutation_names_a_family_the_parent_drew_from_at_an_instant_of_its_run():
    base = Input(seed=3, duration_ms=120_000)
    families = ("clock", "scheduling", "swarm", "workers")
    made = [rekey(Streams(k)["explore"], base, families) for k in range(40)]
    for item in made:
        assert item.seed == 3 and item.branch is not None
        assert item.branch.streams in {("scheduling",), ("workers",)}  # never clock or swarm
        assert 0 <= item.branch.fork_at_ms < base.duration_ms and item.branch.fork_at_ms % 1_000 == 0
        assert 0 <= item.branch.key < REKEY_KEY_BOUND
    assert {m.branch.streams for m in made} == {("scheduling",), ("workers",)}


def test_a_search_rekeys_families_its_runs_reported():
    asked = []

    def execute(items):
        out = []
        for item in items:
            asked.append(item)
            tag = "none" if item.branch is None else f"{item.branch.streams[0]}{item.branch.key % 5}"
            out.append(Observed(frozenset({f"fake:seed{item.seed % 7}", f"fake:{tag}"}), "pass", True, (), (),
                                families=("clock", "scheduling", "workers")))
        return out

    outcome = explore(registry.get(SCENARIO), runs=48, seed=1, duration_ms=60_000, execute=execute)
    rekeyed = [e for e in outcome.corpus if e.mutation == "rekey"]
    assert rekeyed, [e.mutation for e in outcome.corpus]
    for entry in rekeyed:
        assert entry.input.branch.streams[0] in ("scheduling", "workers")
        assert entry.input.as_json()["branch"]["streams"] == list(entry.input.branch.streams)


def test_a_corpus_entry_keeps_its_branch_and_refuses_a_malformed_one(tmp_path):
    body = entry_json(scenario=SCENARIO, store="memory", seed=2, knobs={}, duration_ms=60_000,
                      branch={"fork_at_ms": 1_000, "key": 9, "streams": ["scheduling"]})
    plain = entry_json(scenario=SCENARIO, store="memory", seed=2, knobs={}, duration_ms=60_000)
    assert write_entry(str(tmp_path), body) and write_entry(str(tmp_path), plain)  # two inputs, two files
    assert sorted(b.get("branch", {}).get("key", -1) for b in read_corpus(str(tmp_path))) == [-1, 9]
    assert check_branch({"fork_at_ms": 60_000, "key": 1, "streams": []}, 60_000) is not None
    assert check_branch({"fork_at_ms": 0, "key": 1, "streams": ["b", "a"]}, 60_000) is not None
    with pytest.raises(CorpusError, match="branch"):
        _entry({**body, "branch": {"fork_at_ms": -1, "key": 0}}, "x.json", SCENARIO)


def test_the_fork_of_a_rekeyed_input_is_no_feedback():
    from sim.explore import run_input

    item = Input(seed=4, duration_ms=120_000, branch=Branch(30_000, 3, ("scheduling",)))
    reached = run_input(registry.get(SCENARIO), item, "memory").features
    assert reached and not any("run.branch" in name for name in reached)
