"""The failure database (``sim.face.failures``): saved once, replayed first, settled.

In process, in tmp dirs: a planted bug (``ds-cas-accepts-stale``) fails
sentinel-year seed 4 within 2h (it stops at the violation); replayed with
the bug it still fails, without it it is fixed and removed; a script that
names a site the code does not have, a scenario that is gone, a mutant that
is gone, an unreadable file: no longer applies, moved to ``stale/``.
"""
from __future__ import annotations

import json
import os

import pytest

from faults.mutants import applied, catalogue
from sim.face import cli, failures
from sim.face.repro_file import read_repro, write_repro

MUTANT = "ds-cas-accepts-stale"
FAILING_RUN = ["run", "sentinel-year", "--seed", "4", "--duration", "2h", "--mutant", MUTANT]


@pytest.fixture(scope="module")
def repro_body(tmp_path_factory):
    """A real failure's repro file body (one in-process run, shared)."""
    directory = tmp_path_factory.mktemp("repro")
    done = failures.run_in_process([*FAILING_RUN, "--repro-dir", str(directory)])
    assert not done.result.passed and done.result.violations[0].invariant == "cas-linear"
    path = write_repro(done.result, done.command, str(directory), scenario_modules=done.args.scenarios)
    return read_repro(path)


def _saved(tmp_path, body, **changes) -> tuple[failures.FailureDb, str]:
    body = json.loads(json.dumps(body))
    for key, value in changes.items():
        body["config"][key] = value
    db = failures.FailureDb(str(tmp_path / "db"))
    return db, db.save_body(body)


def test_the_database_directory_follows_flag_env_and_none(monkeypatch):
    monkeypatch.delenv(failures.ENV, raising=False)
    assert failures.db_root() == ".loomsim"
    monkeypatch.setenv(failures.ENV, "/elsewhere")
    assert failures.db_root() == "/elsewhere"
    assert failures.db_root("mine") == "mine"
    assert failures.db_root("none") is None
    monkeypatch.setenv(failures.ENV, "none")
    assert failures.db_root() is None and failures.open_db() is None


def test_the_same_failure_is_saved_once(tmp_path, repro_body):
    repro = tmp_path / "loomsim-repro-sentinel-year-4.json"
    repro.write_text(json.dumps(repro_body))
    db = failures.FailureDb(str(tmp_path / "db"))
    first = db.save(str(repro))
    assert db.save(str(repro)) == first and db.paths() == [first]
    name = os.path.basename(first)
    assert name.startswith("sentinel-year-4-") and name.endswith(".json")
    assert read_repro(first)["fault_script"] == repro_body["fault_script"]
    other = json.loads(json.dumps(repro_body))
    other["fault_script"][0]["hit"] += 1  # another script: another failure
    assert db.save_body(other) != first and len(db.paths()) == 2
    assert db.save(str(tmp_path / "nope.json")) is None


def test_with_the_bug_it_still_fails_and_stays(tmp_path, repro_body):
    db, path = _saved(tmp_path, repro_body)
    outcome = failures.settle(db, failures.replay(path, mutant=MUTANT))
    assert outcome.outcome == failures.STILL_FAILS, outcome.detail
    assert outcome.invariant == "cas-linear" and "the same invariant" in outcome.detail
    assert outcome.repro_command == f"loomsim repro {path}" and os.path.exists(path)


def test_without_the_bug_it_is_fixed_and_removed(tmp_path, repro_body):
    db, path = _saved(tmp_path, repro_body)
    outcome = failures.settle(db, failures.replay(path))
    assert outcome.outcome == failures.FIXED, outcome.detail
    assert not os.path.exists(path) and db.paths() == []


def test_a_script_naming_a_missing_site_no_longer_applies(tmp_path, repro_body):
    db, path = _saved(tmp_path, repro_body)
    body = read_repro(path)
    body["fault_script"][0]["site"] = "ledger.no_such_site"
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(body, handle)
    outcome = failures.settle(db, failures.replay(path))
    assert outcome.outcome == failures.NO_LONGER_APPLIES, outcome.detail
    assert "ledger.no_such_site" in outcome.detail
    assert not os.path.exists(path) and os.path.dirname(outcome.path) == db.stale_dir
    assert read_repro(outcome.path)["fault_script"][0]["site"] == "ledger.no_such_site"  # kept whole


@pytest.mark.parametrize("change, why", [
    ({"scenario": "retired-scenario"}, "unknown scenario"),
    ({"mutant": "no-such-mutant"}, "no longer in the catalogue"),
])
def test_a_gone_scenario_or_mutant_no_longer_applies(tmp_path, repro_body, change, why):
    db, path = _saved(tmp_path, repro_body, **change)
    outcome = failures.settle(db, failures.replay(path))
    assert outcome.outcome == failures.NO_LONGER_APPLIES and why in outcome.detail
    assert os.path.exists(outcome.path) and not os.path.exists(path)


def test_an_unreadable_file_is_moved_to_stale_never_over_another(tmp_path):
    db = failures.FailureDb(str(tmp_path / "db"))
    os.makedirs(db.failures_dir)
    os.makedirs(db.stale_dir)
    (tmp_path / "db" / "stale" / "junk.json").write_text("an earlier one")
    (tmp_path / "db" / "failures" / "junk.json").write_text("{not json")
    (outcome,) = failures.replay_saved(db, ["sentinel-year"])  # belongs to no scenario: replayed by any sweep
    assert outcome.outcome == failures.NO_LONGER_APPLIES and "not JSON" in outcome.detail
    assert outcome.path.endswith("junk-2.json") and open(outcome.path).read() == "{not json"
    assert (tmp_path / "db" / "stale" / "junk.json").read_text() == "an earlier one"


def test_select_keeps_to_the_swept_scenarios(tmp_path, repro_body):
    db, path = _saved(tmp_path, repro_body)
    assert db.select(["ledger-storm"]) == [] and db.select(["sentinel-year"]) == [path]
    assert db.select(None) == [path]


def test_a_sweep_replays_saved_failures_first_and_lists_them(tmp_path, repro_body, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db, path = _saved(tmp_path, repro_body)
    argv = ["sweep", "sentinel-year", "--seeds", "0:1", "--duration", "2h", "--jobs", "1",
            "--failure-db", db.root, "--repro-dir", str(tmp_path)]
    # The replay runs in the sweep's process: the bug applied here reaches it (not the children).
    with applied(catalogue()[MUTANT]):
        code = cli.main(argv)
    out = capsys.readouterr().out
    assert code == 1, out
    summary = out[out.index("saved failures:"):]
    assert summary.startswith("saved failures: 1 replayed: 1 still fail, 0 fixed, 0 no longer apply")
    assert summary.index("STILL FAILS sentinel-year seed 4") < summary.index("sentinel-year: 1 seeds")
    assert f"reproduce: loomsim repro {path}" in summary
    assert out.index("[saved]") < out.index("[1/1]")  # replayed before the sweep's own seeds
    code = cli.main([*argv, "--json"])  # the real code: fixed, removed
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert code == 0 and [r["outcome"] for r in summary["saved_failures"]] == [failures.FIXED]
    assert db.paths() == [] and summary["failed"] == 0


def test_a_sweep_saves_each_failing_seed_from_its_repro_file(tmp_path, repro_body):
    repro = tmp_path / "loomsim-repro-sentinel-year-4.json"
    repro.write_text(json.dumps(repro_body))
    db = failures.FailureDb(str(tmp_path / "db"))
    results = [{"status": "fail", "repro_file": str(repro)}, {"status": "pass", "repro_file": None},
               {"status": "fail", "repro_file": str(repro)}]
    saved = failures.save_sweep_failures(db, results)
    assert len(saved) == 2 and len(set(saved)) == 1 and db.paths() == saved[:1]
    assert failures.save_sweep_failures(None, results) == []
