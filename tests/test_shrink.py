"""Shrinking: delta debugging over a failing run's script (faults and
scheduling deviations alike), then bisecting its duration; the result is a
repro file that still fails the same way."""
from __future__ import annotations

import json

import attrs
import pytest

from faults.kinds import PARTITION
from faults.script import parse_script
from scenarios import registry
from sim.face import cli, repro_file
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions
from sim.shrink import ddmin, shrink

MINUTE_MS = 60_000


def test_ddmin_finds_the_two_entries_that_matter():
    calls = []

    def fails(subset):
        calls.append(list(subset))
        return 3 in subset and 7 in subset

    assert ddmin(list(range(12)), fails) == [3, 7]
    assert calls[0] == []  # first of all: does it fail with no fault at all?


def test_ddmin_keeps_nothing_when_nothing_is_needed_and_everything_when_all_is():
    assert ddmin([1, 2, 3], lambda subset: True) == []
    assert ddmin([1, 2, 3], lambda subset: len(subset) == 3) == [1, 2, 3]
    assert ddmin([], lambda subset: True) == []


# Five transient errors that do not matter, and one 28 s partition of
# worker-2's ledger calls (past the 20 s lease) that lets a successor take
# its submission over: with the planted bug, its stale token still settles
# (the reference model sees the ledger accept it first). Every entry must fire.
NOISE = [{"time_ms": m * MINUTE_MS, "node": "workers/worker-3", "site": site, "kind": "transient-error"}
         for m, site in ((5, "ledger.claim"), (9, "log.append"), (14, "ledger.renew_ownership"),
                         (21, "log.inspect_tail"), (26, "ledger.get"))]
# (A partition, not a pause: a paused worker now stops by itself before its
# step's effect, its lease over; one whose ledger calls hang 28 s lands one.)
PAUSE = {"time_ms": 31 * MINUTE_MS + 45_000, "node": "workers/worker-2", "site": "partition/hang/ledger",
         "kind": "partition", "duration_ms": 28_000}
OPTS = ScenarioOptions(seed=0, duration_ms=parse_duration_ms("80m"), fault_script=parse_script([*NOISE, PAUSE]),
                       script_must_fire=True)


def test_shrinking_keeps_the_decisive_pause_and_bisects_the_duration_from_just_past_the_failure(
        stale_tokens_accepted):
    # One shrink, two promises (each shrink costs seconds): the script is cut
    # to the pause that matters, and the duration bisection starts just past
    # the failure (80m: the old bisection first tried the middle, 55m).
    original = run(registry.get("ledger-storm"), OPTS)
    assert original.violations[0].invariant == "reference-model"
    tried = []
    shrunk = shrink(registry.get("ledger-storm"), OPTS, runs_max=60,
                    on_run=lambda runs, still, candidate: tried.append(candidate.duration_ms))
    assert not shrunk.budget_spent and shrunk.original_entries == 6
    (kept,) = shrunk.opts.fault_script
    assert (kept.kind, kept.node, kept.duration_ms) == (PARTITION, "workers/worker-2", 28_000)
    assert shrunk.result.violations[0].invariant == "reference-model"
    failed_at_ms = shrunk.result.violations[0].time_ms
    # Bisected in whole minutes: well under the original 80m, never before the failure.
    assert failed_at_ms < shrunk.opts.duration_ms <= OPTS.duration_ms // 2
    assert shrunk.opts.duration_ms % MINUTE_MS == 0
    just_past_ms = (failed_at_ms // MINUTE_MS + 1) * MINUTE_MS
    shortened = [d for d in tried if d != OPTS.duration_ms]
    assert shortened[0] == just_past_ms  # not the middle of the full duration
    # (that run heals its faults earlier and passes: the bisection goes on above it)
    assert failed_at_ms < shrunk.opts.duration_ms < just_past_ms + 10 * MINUTE_MS
    again = run(registry.get("ledger-storm"), shrunk.opts)
    assert again.trace_digest == shrunk.result.trace_digest


def test_shrunk_durations_print_in_calendar_units():
    from sim.clock import format_duration_ms

    assert format_duration_ms(5_695 * MINUTE_MS) == "3d 22h 55m"
    assert parse_duration_ms(format_duration_ms(5_695 * MINUTE_MS)) == 5_695 * MINUTE_MS


def test_shrinking_a_passing_run_is_refused():
    with pytest.raises(ValueError, match="does not fail"):
        shrink(registry.get("ledger-storm"), OPTS)  # no planted bug: it passes


def test_loomsim_shrink_writes_a_repro_file_that_still_fails_and_its_repro_changes_no_file(
        stale_tokens_accepted, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    failing = run(registry.get("ledger-storm"), attrs.evolve(OPTS, duration_ms=parse_duration_ms("45m")))
    path = repro_file.write_repro(failing, "loomsim run ...", str(tmp_path))
    before = open(path, encoding="utf-8").read()
    assert cli.main(["shrink", path]) == 1  # the shrunk run fails, as its report says
    out = tmp_path / "loomsim-shrunk-ledger-storm-0.json"  # the default name, next to the input
    shown = capsys.readouterr().out
    assert "6 -> 1 script entries" in shown and "workers/worker-2: partition at partition/hang/ledger" in shown
    assert f"replay: loomsim repro {out}" in shown
    assert open(path, encoding="utf-8").read() == before  # the original is kept
    body = json.load(open(out, encoding="utf-8"))
    assert body["shrunk_from"]["entries"] == 6 and len(body["fault_script"]) == 1
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert cli.main(["repro", str(out), "--json"]) == 1
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["violations"][0]["name"] == "reference-model"
    assert replayed["trace_digest"] == body["trace_digest"]
    assert replayed["repro_file"] == str(out)  # the input is the repro file: nothing new written
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files


def test_loomsim_shrink_refuses_bad_input_in_one_line(tmp_path, capsys):
    passing = run(registry.get("ledger-storm"), attrs.evolve(OPTS, duration_ms=parse_duration_ms("40m")))
    path = repro_file.write_repro(passing, "loomsim run ...", str(tmp_path))
    assert cli.main(["shrink", path]) == 2
    assert "does not fail: nothing to shrink" in capsys.readouterr().err
    assert cli.main(["shrink", path, "--out", path]) == 2
    assert "is the input file" in capsys.readouterr().err
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2")
    assert cli.main(["shrink", str(junk)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not JSON" in err


def test_no_writer_overwrites_a_repro_file(stale_tokens_accepted, tmp_path):
    failing = run(registry.get("ledger-storm"), OPTS)
    first = repro_file.write_repro(failing, "first", str(tmp_path))
    second = repro_file.write_repro(failing, "second", str(tmp_path))
    third = repro_file.write_repro(failing, "third", str(tmp_path), path=first)
    assert first.endswith("loomsim-repro-ledger-storm-0.json")
    assert (second, third) == (first[:-len(".json")] + "-2.json", first[:-len(".json")] + "-3.json")
    assert [json.load(open(p, encoding="utf-8"))["command"] for p in (first, second, third)] == [
        "first", "second", "third"]


def test_a_shrunk_repro_of_a_planted_bug_replays_with_the_bug(tmp_path, capsys, monkeypatch):
    """``run --mutant`` records the bug in its repro file; the shrunk file must
    carry it too, or its replay runs the correct code and passes."""
    from faults import mutants

    monkeypatch.chdir(tmp_path)
    argv = ["run", "ledger-storm", "--seed", "0", "--duration", "40m", "--mutant", "ledger-claim-newest-first"]
    try:
        assert cli.main(argv) == 1
        assert cli.main(["shrink", "loomsim-repro-ledger-storm-0.json"]) == 1
        body = json.load(open("loomsim-shrunk-ledger-storm-0.json", encoding="utf-8"))
        assert body["config"]["mutant"] == "ledger-claim-newest-first"
        capsys.readouterr()
        mutants.revert()  # the replay must put the bug back in from the file alone
        assert cli.main(["repro", "loomsim-shrunk-ledger-storm-0.json", "--json"]) == 1
        assert json.loads(capsys.readouterr().out)["violations"][0]["name"] == "fifo-one-active"
    finally:
        mutants.revert()  # in-process runs: the next test gets the clean code


def test_a_shrunk_repro_is_never_bigger_than_its_original_and_names_the_same_failure():
    """Issue 28 item 3: a shorter duration re-plans the run (the heal instant
    and the deploy timeline are fractions of it), so a shortened run may fail
    the same invariant later, on a longer prefix. A 1-day run of this planted
    bug (seed 8) fails at 00:30 with 5 script entries; without them it fails
    again, but at 14:35, after 20 times the events (run 2; runs 3, 6-9 are
    such subsets too), and re-planned at 31m it fails at the same instant
    after more events (run 11; runs 15-16 too): a candidate counts only if it
    is no bigger by any measure and fails the same way on the same object.
    16 runs reach both kinds of such candidates and end with the budget
    spent."""
    from faults import mutants
    from sim.face.mutants import apply_named
    from sim.shrink import measures

    scenario = registry.get("sentinel-year")
    try:
        apply_named("ds-cas-accepts-stale", None, "memory")
        recorded = run(scenario, ScenarioOptions(seed=8, duration_ms=parse_duration_ms("1d"), swarm=True))
        assert not recorded.passed
        opts = ScenarioOptions(seed=8, duration_ms=parse_duration_ms("1d"), swarm=True,
                               fault_script=recorded.fault_script)
        original = run(scenario, opts)  # the repro file's replay: what the user shrinks
        shrunk = shrink(scenario, opts, runs_max=16)
    finally:
        mutants.revert()
    before, after = measures(opts, original), measures(shrunk.opts, shrunk.result)
    assert shrunk.budget_spent and shrunk.original == before
    for name in ("events", "script_entries", "failed_at_ms", "duration_ms"):
        assert getattr(after, name) <= getattr(before, name), name
    first, got = original.violations[0], shrunk.result.violations[0]
    assert (got.invariant, got.related) == (first.invariant, first.related)
