"""The pytest plugin (``sim.face.pytest_plugin``) and its marker (``sim.testing``), through ``pytester``.

Each inner run happens in a fresh directory with no tests of its own, at
``--loomsim-duration 2h``. The planted bug ``ds-cas-accepts-stale`` fails
sentinel-year seeds 4 and 5 within 2h (seed 4's script has one fault, which
the stale-file test renames to a site that does not exist); the real code
passes them.
"""
from __future__ import annotations

import json
import os

import pytest

import faults.mutant_catalogue  # noqa: F401
import hypothesis  # noqa: F401  (its pytest plugin would import it afresh in every inner run: seconds each)
import sim.face.cli  # noqa: F401
import sim.face.mutants  # noqa: F401
from scenarios import registry
from sim.face import failures

pytest_plugins = ["pytester"]
# Imported here, before pytester snapshots ``sys.modules``: an in-process inner
# run finds them loaded instead of importing every scenario afresh.
registry.all_scenarios()

MUTANT = "ds-cas-accepts-stale"
BASE = ("-p", "no:cacheprovider", "--loomsim-scenario", "sentinel-year", "--loomsim-duration", "2h")


@pytest.fixture(autouse=True)
def _default_failure_db(monkeypatch) -> None:
    """These inner runs use the default database, ``.loomsim`` of their own
    fresh directory (conftest points every other test elsewhere)."""
    monkeypatch.delenv("LOOMSIM_FAILURE_DB", raising=False)


def _saved(pytester) -> list[str]:
    directory = pytester.path / ".loomsim" / "failures"
    return sorted(os.listdir(directory)) if directory.is_dir() else []


def test_seed_items_are_named_and_only_they_run_without_test_paths(pytester):
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    listed = pytester.runpytest(*BASE, "--loomsim-seeds", "0:2", "--collect-only", "-q")
    assert "loomsim::sentinel-year::seed-0" in listed.outlines and "loomsim::sentinel-year::seed-1" in listed.outlines
    assert not any("test_plain" in line for line in listed.outlines)  # no test paths: only the seeds
    both = pytester.runpytest(*BASE, "--loomsim-seeds", "0:2", "-k", "seed-1 or plain", "test_plain.py")
    both.assert_outcomes(passed=2, deselected=1)


def test_a_plain_run_is_untouched(pytester):
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / ".loomsim").exists() and "loomsim::" not in result.stdout.str()


def test_a_failure_is_reported_saved_replayed_first_then_fixed(pytester):
    first = pytester.runpytest(*BASE, "--loomsim-seeds", "3", "--loomsim-mutant", MUTANT)
    first.assert_outcomes(failed=1)
    out = first.stdout.str()
    assert "loomsim sentinel-year seed 3: invariant cas-linear violated at 2026-01-01" in out
    assert "related trace events:" in out and "Traceback" not in out
    assert f"reproduce: loomsim run sentinel-year --seed 3 --duration 2h --mutant {MUTANT}" in out
    assert "repro file: ./loomsim-repro-sentinel-year-3.json" in out
    assert json.loads((pytester.path / "loomsim-repro-sentinel-year-3.json").read_text())["config"]["mutant"] == MUTANT
    (saved,) = _saved(pytester)
    assert saved.startswith("sentinel-year-3-")

    again = pytester.runpytest(*BASE, "--loomsim-seeds", "3", "--loomsim-mutant", MUTANT, "-v")
    again.assert_outcomes(failed=2)
    order = [line for line in again.outlines if line.startswith("loomsim::") and "FAILED" in line]
    assert order[0].startswith("loomsim::saved::sentinel-year-3-"), order  # replayed before any new seed
    assert "still fails: cas-linear (the same invariant)" in again.stdout.str()
    assert (pytester.path / "loomsim-repro-sentinel-year-3-2.json").exists()  # never over the first
    assert _saved(pytester) == [saved]

    fixed = pytester.runpytest(*BASE, "--loomsim-seeds", "3")
    fixed.assert_outcomes(passed=2)
    fixed.stdout.fnmatch_lines(["*loomsim saved failures*",
                                "saved failures: 1 replayed: 0 still fail, 1 fixed, 0 no longer apply",
                                "  FIXED sentinel-year seed 3: *"])
    assert _saved(pytester) == []


def test_a_saved_failure_naming_a_missing_site_no_longer_applies(pytester):
    done = failures.run_in_process(["run", "sentinel-year", "--seed", "4", "--duration", "2h", "--mutant", MUTANT])
    from sim.face.repro_file import read_repro, write_repro

    body = read_repro(write_repro(done.result, done.command, str(pytester.path)))
    assert body["fault_script"], "seed 4's failure needs its fault"
    body["fault_script"][0]["site"] = "ledger.no_such_site"
    path = failures.FailureDb(str(pytester.path / ".loomsim")).save_body(body)
    result = pytester.runpytest(*BASE, "--loomsim-seeds", "4")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["saved failures: 1 replayed: 0 still fail, 0 fixed, 1 no longer apply",
                                 "  NO LONGER APPLIES sentinel-year seed 4: *ledger.no_such_site*"])
    assert not os.path.exists(path) and _saved(pytester) == []
    assert os.listdir(pytester.path / ".loomsim" / "stale") == [os.path.basename(path)]


def test_x_and_last_failed_work_on_seed_items(pytester):
    common = ("--loomsim-scenario", "sentinel-year", "--loomsim-duration", "2h", "--loomsim-mutant", MUTANT,
              "--loomsim-failure-db", "none", "--loomsim-seeds", "3:5")
    stopped = pytester.runpytest(*common, "-x")  # seeds 3 and 4 both fail with the bug
    stopped.assert_outcomes(failed=1)
    assert "seed-4" not in stopped.stdout.str()
    last = pytester.runpytest(*common, "--lf")
    last.assert_outcomes(failed=1, deselected=1)
    assert "loomsim::sentinel-year::seed-3" in last.stdout.str()
    assert not (pytester.path / ".loomsim").exists()  # --loomsim-failure-db none


@pytest.mark.parametrize("flags, wanted", [
    (("--loomsim-seeds", "5:2"), "ERROR: --loomsim-seeds: invalid seeds '5:2': expected 0 <= A < B"),
    (("--loomsim-seeds", "0:1", "--loomsim-scenario", "nope"), "ERROR: --loomsim-scenario: unknown scenario 'nope'*"),
    (("--loomsim-seeds", "0:1", "--loomsim-duration", "soon"), "ERROR: --loomsim-duration: *"),
    (("--loomsim-seeds", "0:1", "--loomsim-mutant", "nope"), "ERROR: --loomsim-mutant: unknown mutant 'nope'*"),
])
def test_bad_options_are_one_line_usage_errors(pytester, flags, wanted):
    result = pytester.runpytest("-p", "no:cacheprovider", *flags)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([wanted])
    assert len([line for line in result.errlines if line.strip()]) == 1, result.errlines


def test_the_marker_runs_a_test_per_seed(pytester):
    pytester.makepyfile(test_marked=f"""
        from sim import testing as loomsim

        @loomsim.seeds("0:2", scenario="sentinel-year", duration="2h")
        def test_holds(loomsim_result):
            assert loomsim_result.passed and loomsim_result.scenario == "sentinel-year"

        @loomsim.seeds("3", scenario="sentinel-year", duration="2h", mutant="{MUTANT}", expect_failure=True)
        def test_bug_is_caught(loomsim_result):
            assert loomsim_result.violations[0].invariant == "cas-linear"

        @loomsim.seeds("3", scenario="sentinel-year", duration="2h", mutant="{MUTANT}")
        def test_body_never_runs(loomsim_result):
            raise AssertionError("THE BODY RAN")
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*test_holds?seed-0? PASSED*", "*test_holds?seed-1? PASSED*",
                                 "*test_body_never_runs?seed-3? FAILED*"])
    out = result.stdout.str()
    assert "invariant cas-linear violated" in out and "THE BODY RAN" not in out
    assert "reproduce: loomsim run sentinel-year --seed 3" in out and (pytester.path / "loomsim-repro-sentinel-year-3.json").exists()


def test_a_bad_marker_is_a_collection_error(pytester):
    pytester.makepyfile(test_bad="""
        from sim import testing as loomsim

        @loomsim.seeds("0:1", scenario="no-such-scenario")
        def test_x(loomsim_result):
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    assert "unknown scenario 'no-such-scenario'" in result.stdout.str()


# -- a user's adapter and scenario modules (issue 28, item 10) ----------------------------

SCENARIO_MODULE = "tests.fixtures.hash_order"  # registers ``hash-order``, a scenario no built-in registry has
BUGGY_STORE = "tests.fixtures.buggy:make"      # a user's ledger adapter with a planted bug (ledger-storm fails)


@pytest.fixture
def user_registry(monkeypatch) -> None:
    """The user scenario an inner run registers is forgotten after the test
    (pytester drops the module it imported; the registry would keep it)."""
    monkeypatch.setattr(registry, "_SCENARIOS", dict(registry._SCENARIOS))


USER_FLAGS = ("-p", "no:cacheprovider", "--loomsim-scenario", "hash-order", "--loomsim-duration", "1h",
              "--loomsim-seeds", "0:1", "--loomsim-failure-db", "none", "-v")


def test_scenario_modules_load_from_the_option(pytester, user_registry):
    result = pytester.runpytest(*USER_FLAGS, "--loomsim-scenarios", SCENARIO_MODULE)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*loomsim::hash-order::seed-0 PASSED*"])


def test_scenario_modules_load_from_the_ini(pytester, user_registry):
    pytester.makeini(f"[pytest]\nloomsim_scenarios = {SCENARIO_MODULE}\n")
    result = pytester.runpytest(*USER_FLAGS)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*loomsim::hash-order::seed-0 PASSED*"])


def test_a_scenario_module_that_cannot_load_is_one_usage_line(pytester):
    result = pytester.runpytest("-p", "no:cacheprovider", "--loomsim-seeds", "0:1",
                                "--loomsim-scenarios", "no_such_scenarios_module")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --loomsim-scenarios: cannot load scenario module 'no_such_scenarios_module'*"])


def test_a_user_store_adapter_is_put_under_test(pytester):
    result = pytester.runpytest("-p", "no:cacheprovider", "--loomsim-scenario", "ledger-storm", "--loomsim-duration",
                                "1h", "--loomsim-seeds", "1", "--loomsim-failure-db", "none",
                                "--loomsim-store", BUGGY_STORE)
    result.assert_outcomes(failed=1)
    assert f"--store {BUGGY_STORE}" in result.stdout.str()  # the repro command runs the same adapter


def test_a_wrong_store_adapter_is_one_usage_line(pytester):
    result = pytester.runpytest("-p", "no:cacheprovider", "--loomsim-seeds", "0:1",
                                "--loomsim-store", "tests.fixtures.bad_stores:no_clear")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(['ERROR: --loomsim-store: --store tests.fixtures.bad_stores:no_clear: '
                                 'the "ds" store (NoClear) lacks clear()*'])


def test_the_marker_takes_a_user_store_and_scenario_modules(pytester, user_registry):
    pytester.makepyfile(test_marked=f"""
        from sim import testing as loomsim

        @loomsim.seeds("1", scenario="ledger-storm", duration="1h", store="{BUGGY_STORE}", expect_failure=True)
        def test_the_adapter_bug_is_caught(loomsim_result):
            assert not loomsim_result.passed and loomsim_result.store == "{BUGGY_STORE}"

        @loomsim.seeds("0", scenario="hash-order", duration="1h", scenario_modules=["{SCENARIO_MODULE}"])
        def test_a_user_scenario(loomsim_result):
            assert loomsim_result.passed and loomsim_result.scenario == "hash-order"
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=2)
