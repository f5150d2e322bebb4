"""The mutant catalogue and its machinery (``faults.mutants``,
``faults.mutant_catalogue``, ``loomsim mutants``).

- The mechanism: a mutant swaps the live function's code, so references
  taken with ``from m import f`` run it too; a module constant is rebound;
  revert puts the clean code back; every way a mutant cannot apply is a
  one-line ``MutantError``.
- Every catalogue entry applies (and reverts) cleanly, in one fresh process.
- The fast CI subset: for each mutant with a measured detecting seed, that
  one seed at its shortest duration fails an invariant (the sweep's
  detection, never a unit test's).
- The full table (``loomsim mutants --seeds 0:20``), marked slow.
"""
from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from faults import mutants as mx
from faults.mutants import Mutant, MutantError
from scenarios import registry
from sim.clock import parse_duration_ms
from sim.face.cli import main as cli_main
from sim.runner import run
from sim.scenario import ScenarioOptions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CATALOGUE = mx.catalogue()
DETECTED_SHARE_MIN = 0.95


@pytest.fixture(autouse=True)
def _clean():
    """No test leaves a mutant applied, whatever happens in it."""
    mx.revert()
    yield
    mx.revert()


def _mutant(name: str, module: str, old: str, new: str) -> Mutant:
    return Mutant(name, "A test mutant.", module, old, new, ("sentinel-year",))


# -- the mechanism ---------------------------------------------------------------------


def test_apply_swaps_the_code_every_reference_runs():
    import model.durable_state.memory_store as memory_store
    from model.durable_state.store import RevisionConflictError, next_revision  # a from-import copy

    with pytest.raises(RevisionConflictError):
        next_revision("k", 1, 5)
    with mx.applied(CATALOGUE["ds-cas-accepts-stale"]) as patch:
        assert patch.targets == ("next_revision",)
        assert next_revision("k", 1, 5) == 6  # the stale save lands
        assert memory_store.next_revision("k", 1, 5) == 6  # the adapter's own reference too
        assert mx.current() is CATALOGUE["ds-cas-accepts-stale"]
    assert mx.current() is None
    with pytest.raises(RevisionConflictError):
        next_revision("k", 1, 5)


def _sync(coroutine):
    """Drive a store call that never suspends (the in-memory adapters)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the call suspended")


def test_a_method_is_swapped_on_its_class_and_its_instances():
    from model.ledger.memory_store import InMemorySubmissionLedger

    ledger = InMemorySubmissionLedger()  # made before the mutant: it runs the mutant all the same
    for key in ("a", "b"):
        admission = _sync(ledger.admit("c", "p", key, {"k": key}, 1))
        _sync(ledger.mark_ready(admission.submission_id, 0))
    with mx.applied(CATALOGUE["ledger-claim-newest-first"]):
        assert _sync(ledger.claim("c", "w", 1_000, 2)).submission_id == "sub-c-2"  # newest first
    fresh = InMemorySubmissionLedger()
    for key in ("a", "b"):
        _sync(fresh.mark_ready(_sync(fresh.admit("c", "p", key, {"k": key}, 1)).submission_id, 0))
    assert _sync(fresh.claim("c", "w", 1_000, 2)).submission_id == "sub-c-1"  # FIFO again


def test_a_module_constant_is_rebound_and_restored():
    import model.ledger.sqlite_store as store

    clean = store._SELECT_HEAD
    with mx.applied(CATALOGUE["ledger-sqlite-head-desc"]) as patch:
        assert patch.targets == ("_SELECT_HEAD",)
        assert store._SELECT_HEAD.endswith("ORDER BY queue_seq DESC LIMIT 1")
    assert store._SELECT_HEAD == clean


def test_apply_is_idempotent_and_a_run_applies_at_most_one():
    first, second = CATALOGUE["ds-cas-accepts-stale"], CATALOGUE["log-chain-unlinked"]
    assert mx.apply(first) is mx.apply(first)
    with pytest.raises(MutantError, match="is applied already"):
        mx.apply(second)


@pytest.mark.parametrize("old, new, problem", [
    ("no such text anywhere", "x", "not found"),
    ("return", "return ", "occurs"),
    ("        keys = sorted(d)\n", "        keys = sorted(d\n", "does not compile"),
    ("        keys = sorted(d)\n", "        keys = sortd(d)\n", "would read the global 'sortd'"),
    ('    __slots__ = ("_rows",)\n', '    __slots__ = ("_rows", "_x")\n', "in the body of class"),
])
def test_a_mutant_that_cannot_apply_is_one_typed_line(old, new, problem):
    module = "model.durable_state.memory_store" if "__slots__" in old else "model.canonical"
    with pytest.raises(MutantError) as caught:
        mx.prepare(_mutant("broken", module, old, new))
    message = str(caught.value)
    assert problem in message and "\n" not in message, message
    assert mx.current() is None


def test_a_def_header_edit_is_refused():
    with pytest.raises(MutantError, match="header"):
        mx.prepare(_mutant("header", "model.durable_state.store",
                           "def next_revision(key: str, expected_revision: int, actual_revision: int) -> int:",
                           "def next_revision(key: str, expected_revision: int, actual_revision: int = 0) -> int:"))


@pytest.mark.parametrize("fields, problem", [
    (dict(name="Bad Name"), "name"),
    (dict(doc="two\nlines"), "doc"),
    (dict(module="sim.runner"), "system under test"),
    (dict(new="same"), "not a mutant"),
    (dict(scenarios=()), "scenarios"),
    (dict(store="postgres"), "store"),
    (dict(ci_seed=1), "come together"),
])
def test_a_malformed_mutant_is_refused(fields, problem):
    base = dict(name="ok-name", doc="A bug.", module="model.canonical", old="same", new="other",
                scenarios=("sentinel-year",))
    with pytest.raises(MutantError, match=problem):
        Mutant(**{**base, **fields})


def test_users_add_their_own_mutants(tmp_path, monkeypatch):
    (tmp_path / "my_mutants.py").write_text(textwrap.dedent('''
        from faults.mutants import Mutant
        MUTANTS = [Mutant("my-renew", "Renewal never extends.", "model.ledger.rules",
                          "    lease_expires_ms = max(row.lease_expires_ms, now_ms + lease_ms)  # never shortens\\n",
                          "    lease_expires_ms = row.lease_expires_ms\\n", ("ledger-storm",))]
    '''))
    (tmp_path / "no_mutants.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (mutant,) = mx.load_user_mutants("my_mutants")
    assert mutant.name == "my-renew" and mx.prepare(mutant).targets == ("decide_renew",)
    with pytest.raises(MutantError, match="no MUTANTS"):
        mx.load_user_mutants("no_mutants")
    with pytest.raises(MutantError, match="cannot load"):
        mx.load_user_mutants("no_such_module_anywhere")


# -- the catalogue ---------------------------------------------------------------------


def test_the_catalogue_covers_the_model():
    assert len(CATALOGUE) >= 40
    modules = {m.module for m in CATALOGUE.values()}
    for module in ("model.canonical", "model.durable_state.handle", "model.durable_state.contracts",
                   "model.ledger.rules", "model.conversation.rules", "model.conversation.recovery",
                   "model.lifecycle", "model.runs", "model.schedules", "model.kernel.kernel",
                   "model.claimcheck", "model.findings", "model.retention", "model.conversation.checkpoints",
                   "model.sqlite_db"):
        assert module in modules, module
    assert {m.store for m in CATALOGUE.values()} == {"memory", "sqlite"}
    known = {s.name for s in registry.all_scenarios()}
    assert all(set(m.scenarios) <= known for m in CATALOGUE.values())


def test_every_catalogue_entry_applies_cleanly_in_a_fresh_process():
    """One process for the whole catalogue: each entry prepared, applied
    (its functions really run the new code), reverted (the clean code back)."""
    script = textwrap.dedent('''
        import json
        from faults import mutants as mx
        out = {}
        for name, mutant in mx.catalogue().items():
            try:
                patch = mx.apply(mutant)
                swapped = all(f.__code__ is code for f, code in patch.swaps)
                bound = all(vars(patch.module)[n] is v for n, v in patch.bindings)
                mx.revert()
                restored = all(f.__code__ is not code for f, code in patch.swaps)
                out[name] = "ok" if swapped and bound and restored and patch.targets else "not swapped"
            except mx.MutantError as error:
                out[name] = str(error)
        print(json.dumps(out))
    ''')
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcome = json.loads(proc.stdout)
    assert set(outcome) == set(CATALOGUE)
    assert {name: o for name, o in outcome.items() if o != "ok"} == {}


# -- runs with a mutant: the CLI, repro files, determinism --------------------------------


def _run_with(mutant: Mutant, scenario: str, seed: int, duration: str):
    """The mutant's run as the sweep runs that seed: on its store, beyond the
    contract when its ci run is (``ci_beyond``: a sweep's beyond seed)."""
    options = ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), store=mutant.store, swarm=True,
                              beyond_contract=mutant.ci_beyond)
    with mx.applied(mutant):
        return run(registry.get(scenario), options)


def test_same_seed_and_mutant_give_the_same_trace():
    mutant = CATALOGUE["ds-cas-accepts-stale"]
    first = _run_with(mutant, "sentinel-year", 3, "6h")  # 6h runs the mutated code ~60 times
    second = _run_with(mutant, "sentinel-year", 3, "6h")
    assert first.trace_digest == second.trace_digest


def test_run_with_an_unknown_mutant_is_a_usage_error(capsys):
    assert cli_main(["run", "sentinel-year", "--seed", "1", "--mutant", "no-such-mutant"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loomsim: error: ") and "no-such-mutant" in err and err.count("\n") == 1
    assert mx.current() is None
    assert cli_main(["run", "sentinel-year", "--seed", "1", "--mutants", "x"]) == 2


@pytest.mark.parametrize("argv, problem", [
    (["--only", "no-such-mutant"], "unknown mutant"),
    (["--jobs", "0"], "--jobs"),
    (["--seeds", "5:2"], "invalid seeds"),
    (["--duration", "nowhere=1d"], "no mutant concerns"),
    (["--duration", "1 fortnight"], "--duration"),
    (["--mutants", "no_such_module_anywhere"], "cannot load"),
    (["--repro-dir", __file__], "is not a directory"),
])
def test_mutants_bad_input_is_one_usage_line(argv, problem, capsys):
    assert cli_main(["mutants", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loomsim: error: ") and problem in err and err.count("\n") == 1, err


def test_mutants_list(capsys):
    assert cli_main(["mutants", "--list", "--only", "log-chain-unlinked,sqlite-deferred-begin"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["log-chain-unlinked", "sqlite-deferred-begin"]
    assert "[sqlite]" in lines[1]


def test_a_failing_mutant_run_writes_a_repro_that_replays_it(tmp_path, capsys):
    from sim.face.repro_file import read_repro, repro_argv

    mutant = CATALOGUE["log-chain-unlinked"]
    scenario, seed, duration = mutant.ci_run
    argv = ["run", scenario, "--seed", str(seed), "--duration", duration, "--mutant", mutant.name,
            "--repro-dir", str(tmp_path), "--json"]
    assert cli_main(argv) == 1
    body = json.loads(capsys.readouterr().out)
    mx.revert()  # the CLI applied it in this process
    assert body["mutant"] == mutant.name and body["config"]["mutant"] == mutant.name
    assert f"--mutant {mutant.name}" in body["repro_command"]
    assert read_repro(body["repro_file"])["config"]["mutant"] == mutant.name
    replay = repro_argv(body["repro_file"], json_output=True)
    assert replay[replay.index("--mutant") + 1] == mutant.name
    assert cli_main(replay) == 1
    again = json.loads(capsys.readouterr().out)
    assert again["violations"][0]["name"] == body["violations"][0]["name"]


def test_the_mutants_table_detects_and_tells_survivors(capsys):
    """Two mutants, one seed: the one the sweep catches is detected with its
    invariant and seed; exit 1 because the other (a user's equivalent
    mutant, beside the catalogue) survives."""
    code = cli_main(["mutants", "--mutants", "tests.fixtures.equivalent_mutants",
                     "--only", "log-chain-unlinked,equivalent-sort", "--seeds", "0:1",
                     # sentinel-year seed 0 detects it at 15m; the other scenarios' runs are clean baselines.
                     "--duration", "15m", "--duration", "ledger-storm=2m", "--duration", "port-storm=1m",
                     "--jobs", "2", "--json"])
    table = json.loads(capsys.readouterr().out)
    rows = {r["mutant"]: r for r in table["rows"]}
    assert (code, table["detected"], table["survived"], table["errors"]) == (1, 1, 1, 0), table
    assert rows["log-chain-unlinked"]["status"] == "detected" and rows["log-chain-unlinked"]["seed"] == 0
    assert rows["log-chain-unlinked"]["invariant"]
    assert rows["equivalent-sort"]["status"] == "survived"
    assert table["median_seeds_to_detect"] == 1


def test_an_argued_equivalent_mutant_is_told_apart_and_left_out_of_the_share():
    from sim.face.mutants import render, summarize

    def row(name, status, **more):
        return {"mutant": name, "status": status, "invariant": "x" if status == "detected" else None,
                "scenario": None, "seed": None, "seconds": 1.0, "seeds_to_detect": 1, **more}

    rows = [row("a", "detected"), row("b", "detected"), row("c", "survived"),
            row("d", "equivalent", equivalent="no run can tell"), row("e", "detected", refutes_equivalence=True)]
    table = summarize(rows, seeds=range(0, 2), jobs=1)
    assert (table["mutants"], table["detected"], table["survived"], table["equivalent"]) == (5, 3, 1, 1)
    assert table["detected_pct"] == 75.0 and table["detected_pct_of_all"] == 60.0
    assert table["refuted_equivalence"] == ["e"]
    text = render(table)
    assert "equivalent: d: no run can tell" in text and "refuted: e is marked equivalent" in text
    assert "3/4 detected (75.0%), 1 survived, 1 equivalent survivors left out (3/5 = 60.0% of all)" in text
    with pytest.raises(MutantError, match="equivalent must be the argument on one line"):
        Mutant("m-x", "A test mutant.", "model.canonical", "a", "b", ("sentinel-year",), equivalent="two\nlines")
    with pytest.raises(MutantError, match="not equivalent"):
        Mutant("m-x", "A test mutant.", "model.canonical", "a", "b", ("sentinel-year",), ci_seed=1,
               ci_duration="1h", equivalent="but it was detected")


# -- the fast CI subset: one known-detecting seed per mutant ---------------------------------


# Each selected mutant's ci run, in a child process. In a whole suite, one
# child started as soon as the session is collected runs them all beside the
# other tests (``Background``). Run on their own, two children (one per core)
# take the runs from one queue, the dearest first, each the next one as it
# finishes its last (a run's cost is hard to guess: most stop at their first
# violation), so neither waits for the other.
DETECTION_CHILDREN = 2
_CHILD = """
import json, sys
sys.path.insert(0, "tests")
from test_mutants import CATALOGUE, _run_with
from faults.mutants import ci_detects
print(json.dumps(None), flush=True)  # ready: send me a name
for line in sys.stdin:
    name = line.strip()
    scenario, seed, duration = CATALOGUE[name].ci_run
    result = _run_with(CATALOGUE[name], scenario, seed, duration)
    # Held: the run did not catch the mutant (beyond the contract, DETECTED is
    # what the clean run ends in: only a failure catches it, ``ci_detects``).
    print(json.dumps([name, not ci_detects(CATALOGUE[name], result.status)]), flush=True)
"""


# Rough CPU per simulated millisecond of each scenario, relative to
# sentinel-year's: the order the queue hands the runs out in.
SCENARIO_COST = {"sentinel-year": 1, "ledger-storm": 10, "agent-conversations": 50, "port-storm": 150}


def _dearest_first(names: list[str]) -> list[str]:
    def cost(name: str) -> int:
        scenario, _, duration = CATALOGUE[name].ci_run
        return parse_duration_ms(duration) * SCENARIO_COST.get(scenario, 50)

    return sorted(names, key=lambda n: (-cost(n), n))


def selected_detections(items: list) -> list[str]:
    """The catalogue entries whose detection test the session selected (and
    that have a ci run)."""
    return sorted({item.callspec.params["name"] for item in items
                   if item.originalname == "test_the_sweep_detects_the_mutant"
                   and CATALOGUE[item.callspec.params["name"]].ci_run is not None})


class Background:
    """One child with the whole queue, started once the session is collected
    (``conftest.pytest_collection_finish``) when the detections are a small
    part of the session: pytest runs every other test in its one process, so
    the child has the machine's second core to itself, and by the time the
    detection tests come it has answered."""

    running: "Background | None" = None  # the session's, once started

    @classmethod
    def start(cls, names: list[str]) -> "Background":
        cls.running = cls(names)
        return cls.running

    def __init__(self, names: list[str]) -> None:
        self.directory = tempfile.mkdtemp(prefix="loomsim-detections-")
        self.out = open(os.path.join(self.directory, "out"), "w+", encoding="utf-8")
        self.err = open(os.path.join(self.directory, "err"), "w+", encoding="utf-8")
        self.child = subprocess.Popen([sys.executable, "-c", _CHILD], cwd=ROOT, stdin=subprocess.PIPE,
                                      stdout=self.out, stderr=self.err, text=True)
        self.child.stdin.write("".join(f"{name}\n" for name in _dearest_first(names)))
        self.child.stdin.close()

    def collect(self) -> dict[str, bool]:
        code = self.child.wait(timeout=3_600)
        self.out.seek(0)
        self.err.seek(0)
        assert code == 0, self.err.read()[-4_000:]
        return dict(json.loads(line) for line in self.out.read().splitlines() if json.loads(line) is not None)

    def close(self) -> None:
        Background.running = None
        if self.child.poll() is None:
            self.child.kill()
            self.child.wait()
        self.out.close()
        self.err.close()
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture(scope="module")
def detections(request) -> dict[str, bool]:
    """name -> did its ci run pass, for the detection tests this session
    selected (one ``-k`` name runs that one only): from the background child
    when the session started one, else from ``DETECTION_CHILDREN`` children
    taking the runs from one queue."""
    if Background.running is not None:
        return Background.running.collect()
    queue = _dearest_first(selected_detections(request.session.items))
    with tempfile.TemporaryDirectory(prefix="loomsim-detections-") as directory:
        return _from_queue(queue, directory)


def _from_queue(queue: list[str], directory: str) -> dict[str, bool]:
    children = []
    for index in range(min(DETECTION_CHILDREN, len(queue))):
        err = open(os.path.join(directory, f"err-{index}"), "w+", encoding="utf-8")
        children.append((subprocess.Popen([sys.executable, "-c", _CHILD], cwd=ROOT, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=err, text=True), err))
    passed: dict[str, bool] = {}
    with selectors.DefaultSelector() as waiting:
        for child, err in children:
            waiting.register(child.stdout, selectors.EVENT_READ, (child, err))
        while waiting.get_map():
            for key, _ in waiting.select(timeout=3_600):
                child, err = key.data
                line = child.stdout.readline()
                if not line:  # the child ended before it was told to: its error says why
                    err.seek(0)
                    raise AssertionError(f"a detection child died: {err.read()[-4_000:]}")
                answer = json.loads(line)
                if answer is not None:
                    passed[answer[0]] = answer[1]
                if queue:
                    child.stdin.write(queue.pop(0) + "\n")
                    child.stdin.flush()
                else:
                    waiting.unregister(child.stdout)
                    child.stdin.close()
                    code = child.wait(timeout=600)
                    err.seek(0)
                    assert code == 0, err.read()[-4_000:]
                    err.close()
    return passed


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_the_sweep_detects_the_mutant(name, detections):
    mutant = CATALOGUE[name]
    if mutant.ci_run is None:
        pytest.skip("argued equivalent (see its catalogue entry)" if mutant.equivalent else
                    "no seed of the measured sweep detects this mutant yet (it survives: see the catalogue)")
    scenario, seed, duration = mutant.ci_run
    assert detections[name] is False, f"{name}: seed {seed} at {duration} no longer detects it"


def test_the_table_runs_a_beyond_mutants_beyond_seeds_beyond_the_contract():
    from sim.face import mutants as face

    mutant = CATALOGUE["sqlite-corruption-untyped"]
    job = face._Job(mutant.name, mutant, mutant.scenarios, "sqlite", [(6, 0), (7, 0)], {"ledger-storm": "5m"},
                    beyond=True)
    plain = face._child_job(job, (6, 0), None, ())
    assert "--beyond-contract" not in plain.argv and not plain.beyond
    beyond = face._child_job(job, (7, 0), None, ())
    assert "--beyond-contract" in beyond.argv and beyond.beyond
    assert [face._detects({"status": s, "beyond": True}) for s in ("pass", "detected", "fail")] == [False, False, True]
    assert [face._detects({"status": s}) for s in ("pass", "fail")] == [False, True]
    baseline = face._Job("baseline", None, ("ledger-storm",), "sqlite", [(7, 0)], {"ledger-storm": "5m"}, beyond=True)
    assert face._clean(baseline, (7, 0), {"status": "detected"}) and not face._clean(baseline, (7, 0), {"status": "pass"})


def test_a_beyond_mutant_is_caught_only_by_a_failure_where_the_clean_run_detects():
    """Beyond the contract the clean run at the ci seed ends DETECTED (the
    broken promise noticed as designed): the ci run catches the mutant only
    when it ends FAIL, never by a DETECTED or a PASS."""
    from faults.mutants import ci_detects

    mutant = CATALOGUE["sqlite-corruption-untyped"]
    assert mutant.ci_beyond and mutant.store == "sqlite"
    assert [ci_detects(mutant, s) for s in ("pass", "detected", "fail")] == [False, False, True]
    plain = CATALOGUE["ds-cas-accepts-stale"]
    assert [ci_detects(plain, s) for s in ("pass", "fail")] == [False, True]
    scenario, seed, duration = mutant.ci_run
    clean = run(registry.get(scenario), ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration),
                                                        store="sqlite", swarm=True, beyond_contract=True))
    assert clean.status == "detected", [v.invariant for v in clean.violations]
    assert "latent-sector-error" in [e.kind for e in clean.beyond_contract]
    caught = _run_with(mutant, scenario, seed, duration)
    assert caught.status == "fail" and "beyond-contract-undetected" in [v.invariant for v in caught.violations]


@pytest.mark.slow
def test_the_full_table_detects_nearly_every_mutant(capsys):
    code = cli_main(["mutants", "--seeds", "0:20", "--json"])
    table = json.loads(capsys.readouterr().out)
    assert table["errors"] == 0, [r for r in table["rows"] if r["status"] == "error"]
    assert not table["refuted_equivalence"], table["refuted_equivalence"]  # an argued equivalent was detected
    share = table["detected"] / (table["mutants"] - table["equivalent"])
    survivors = [r["mutant"] for r in table["rows"] if r["status"] == "survived"]
    assert share >= DETECTED_SHARE_MIN, f"{share:.0%} detected; survivors: {', '.join(survivors)}"
    assert code in (0, 1)


def test_the_table_interleaves_scenarios_seed_by_seed(capsys):
    """Seed 0 of every scenario a mutant concerns comes before seed 1 of any:
    a port-level bug the adversary meets at seed 0 is not judged after every
    sentinel seed first (it would cost a sentinel week per seed)."""
    mutant = CATALOGUE["canonical-equal-by-value"]
    assert mutant.scenarios == ("sentinel-year", "port-storm") and mutant.ci_run == ("port-storm", 0, "2m")
    code = cli_main(["mutants", "--only", mutant.name, "--seeds", "0:3", "--duration", "sentinel-year=30m",
                     "--duration", "port-storm=2m", "--no-baseline", "--jobs", "1", "--json"])
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert code == 0 and row["status"] == "detected", row
    assert (row["scenario"], row["seed"], row["seeds_to_detect"], row["runs"]) == ("port-storm", 0, 2, 2), row


# -- a mutant the run cannot execute (issue 28, item 4a) ----------------------------------


@pytest.mark.parametrize("name, store, advice", [
    ("ds-sqlite-cas-unguarded", "memory", "add --store sqlite"),
    ("ledger-claim-newest-first", "sqlite", "use --store memory"),
])
def test_run_refuses_a_mutant_its_store_never_executes(name, store, advice, capsys, tmp_path):
    code = cli_main(["run", "sentinel-year", "--seed", "1", "--duration", "1h", "--store", store, "--mutant", name,
                     "--no-progress", "--repro-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"loomsim: error: mutant {name} patches "), err
    assert f"--store {store}" in err and advice in err
    assert mx.current() is None  # refused before it was applied


def test_a_catalogue_entry_declares_the_adapter_it_patches():
    assert CATALOGUE["ds-sqlite-cas-unguarded"].adapter == "sqlite"
    assert CATALOGUE["ledger-claim-newest-first"].adapter == "memory"
    assert CATALOGUE["ds-cas-accepts-stale"].adapter is None  # model code: every store runs it
    with pytest.raises(MutantError, match="store must be 'sqlite'"):
        Mutant("bad-store", "A bug.", "model.durable_state.sqlite_store", '    "WHERE key = ? AND revision = ?"\n',
               '    "WHERE key = ?"\n', ("sentinel-year",), store="memory")


def test_a_run_whose_mutant_never_executed_does_not_pass(capsys, tmp_path):
    mutant = CATALOGUE["agent-run-clock-reset"]
    assert "sentinel-year" not in mutant.scenarios
    argv = ["run", "sentinel-year", "--seed", "1", "--duration", "1h", "--mutant", mutant.name, "--no-progress",
            "--repro-dir", str(tmp_path)]
    assert cli_main(argv) == 1
    out = capsys.readouterr().out
    assert f"mutant {mutant.name}" in out and "never ran" in out and "agent-conversations" in out
    mx.revert()
    assert cli_main([*argv, "--json"]) == 1
    body = json.loads(capsys.readouterr().out)
    assert body["status"] == "mutant-unexecuted" and body["mutant_executions"] == 0


def test_a_run_whose_mutant_executed_says_how_often(capsys, tmp_path):
    mutant = CATALOGUE["ds-cas-accepts-stale"]
    assert cli_main(["run", "sentinel-year", "--seed", "1", "--duration", "1h", "--mutant", mutant.name, "--json",
                     "--repro-dir", str(tmp_path)]) in (0, 1)
    body = json.loads(capsys.readouterr().out)
    assert body["status"] != "mutant-unexecuted" and body["mutant_executions"] > 0


def test_the_table_tells_a_survivor_whose_code_never_ran(capsys):
    # sentinel-year never runs the agents' code: the mutant's runs all hold without executing it.
    mutant = Mutant("agent-clock-unexecuted", "A test mutant.", CATALOGUE["agent-run-clock-reset"].module,
                    CATALOGUE["agent-run-clock-reset"].old, CATALOGUE["agent-run-clock-reset"].new, ("sentinel-year",))
    from sim.face import mutants as face

    job = face._Job(mutant.name, mutant, mutant.scenarios, "memory", [(0, 0)], {"sentinel-year": "1h"})
    job.results[(0, 0)] = {"status": face.MUTANT_UNEXECUTED, "wall_s": 0.1}
    row = face._row(job)
    assert row["status"] == face.SURVIVED and row["never_executed"] is True
    table = face.summarize([row], seeds=range(0, 1), jobs=1)
    assert f"unexecuted: {mutant.name}: its patched code never ran" in face.render(table)
    assert not face._detects(job.results[(0, 0)])
