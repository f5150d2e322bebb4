"""A stack file names node clocks, partitions and disk faults
(``scenarios/stackfile.py``: the kinds ``clocks``, ``partitions`` and
``disk-faults``): their fault kinds and knobs join the file's swarm, their
oracles come with them, and every bad value is one line naming the file,
the table and the field."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from faults.kinds import CLOCK_JUMP, CLOCK_SKEW, DISK_FAULT_KINDS, PARTITION
from scenarios import registry
from sim.clock import parse_duration_ms
from sim.face.cli import main
from sim.runner import run
from sim.scenario import Run, ScenarioOptions

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_PATH = REPO / "examples" / "cut_off.toml"
EXAMPLE = EXAMPLE_PATH.read_text()
FIXTURE = REPO / "tests" / "fixtures" / "agent_conversations.toml"


@pytest.fixture(autouse=True)
def _fresh_files(monkeypatch) -> None:
    monkeypatch.setattr(registry, "_FILES", {})


def _file(tmp_path: Path, text: str, name: str = "stack.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- the new kinds join the swarm, with their knobs and oracles -------------------------

def test_the_new_kinds_join_the_files_swarm_after_its_own_with_the_clock_knobs():
    space = registry.get(str(EXAMPLE_PATH)).swarm_space
    assert space.fault_kinds == ("crash-before-call", "ack-lost", "transient-error", "reply-lost", "node-kill",
                                 "node-pause", CLOCK_SKEW, CLOCK_JUMP, PARTITION)
    assert [k.name for k in space.knobs] == ["lease_ms", "workers", "clock_offset_ms_max", "clock_drift_ppm_max"]
    assert (space.knob("clock_offset_ms_max").maximum, space.knob("clock_drift_ppm_max").maximum) == (500, 100)


def test_clock_options_bound_the_knobs_and_the_skew_a_node_draws(tmp_path):
    text = EXAMPLE.replace('offset_max = "500ms"', 'offset_max = "40ms"').replace("drift_max_ppm = 100",
                                                                                "drift_max_ppm = 5")
    scenario = registry.get(_file(tmp_path, text))
    offset, drift = scenario.swarm_space.knob("clock_offset_ms_max"), scenario.swarm_space.knob("clock_drift_ppm_max")
    assert (offset.minimum, offset.default, offset.maximum) == (0, 40, 40)
    assert (drift.minimum, drift.default, drift.maximum) == (0, 5, 5)
    assert all(v <= 40 for v in offset.values) and all(v <= 5 for v in drift.values)
    trace = io.StringIO()
    result = run(scenario, ScenarioOptions(seed=0, duration_ms=parse_duration_ms("10m"), swarm=True,
                                           faults_enable=(CLOCK_SKEW,)), trace_stream=trace)
    assert result.passed, result.violations
    skews = [json.loads(line)["fields"] for line in trace.getvalue().splitlines() if '"kind":"clock.skew"' in line]
    assert skews and all(abs(s["offset_ms"]) <= 40 and abs(s["drift_ppm"]) <= 5 for s in skews), skews


def test_the_oracles_come_with_their_workloads():
    scenario = registry.get(str(EXAMPLE_PATH))
    for store, beyond in (("memory", False), ("sqlite", True)):
        opts = ScenarioOptions(seed=0, duration_ms=parse_duration_ms("1h"), swarm=True, store=store,
                               beyond_contract=beyond, faults_enable=(CLOCK_SKEW, CLOCK_JUMP, PARTITION))
        from sim.world import World

        choices = scenario.swarm_space.choices_for(World(0), opts)
        stack = scenario.build(Run(opts, choices, scenario))
        names = [c.name for c in stack.checks]
        assert "clock-tolerance" in names
        owned = [c.name for w in stack.workloads for c in w.checks()]
        assert "effect-under-lease" in owned or "effect-under-lease[workers]" in owned
        disk = [w for w in stack.workloads if getattr(w, "kinds", None) == DISK_FAULT_KINDS]
        assert bool(disk) == beyond, stack.workloads  # only on SQLite beyond the contract
        if disk:
            assert "storage-integrity" in owned


def test_without_clock_kinds_the_clock_oracle_stays_out():
    scenario = registry.get(str(EXAMPLE_PATH))
    from sim.world import World

    opts = ScenarioOptions(seed=0, duration_ms=parse_duration_ms("1h"), swarm=True,
                           faults_disable=(CLOCK_SKEW, CLOCK_JUMP))
    stack = scenario.build(Run(opts, scenario.swarm_space.choices_for(World(0), opts), scenario))
    assert "clock-tolerance" not in [c.name for c in stack.checks]


def test_describe_and_list_show_the_new_kinds(capsys):
    assert main(["describe", str(EXAMPLE_PATH), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert {CLOCK_SKEW, CLOCK_JUMP, PARTITION} <= set(body["fault_kinds"])
    assert body["clock_tolerance"] is not None
    assert {"clock-tolerance", "effect-under-lease"} <= {i["name"].split("[")[0] for i in body["invariants"]}
    disk = [entry for entry in body["beyond_contract"] if entry["site"] == "sqlite.file"]
    assert disk and set(disk[0]["kinds"]) == set(DISK_FAULT_KINDS) and disk[0]["checks"] == ["storage-integrity"]
    assert main(["list", str(EXAMPLE_PATH), "--faults"]) == 0
    listed = capsys.readouterr().out
    assert "partition" in listed and "clock-skew" in listed and "knob clock_offset_ms_max" in listed


def test_the_example_runs_and_its_new_kinds_fire_in_a_short_run(capsys):
    fired: dict[str, int] = {}
    for seed in (0, 1):
        assert main(["run", str(EXAMPLE_PATH), "--seed", str(seed), "--duration", "1h", "--json"]) == 0
        counts = json.loads(capsys.readouterr().out)["coverage"]["fault_kinds"]
        for kind in (CLOCK_SKEW, CLOCK_JUMP, PARTITION):
            fired[kind] = fired.get(kind, 0) + counts.get(kind, 0)
    assert all(fired[kind] > 0 for kind in (CLOCK_SKEW, CLOCK_JUMP, PARTITION)), fired


def test_the_example_beyond_the_contract_on_sqlite_fires_disk_faults_and_detects_them(capsys):
    code = main(["run", str(EXAMPLE_PATH), "--seed", "0", "--duration", "30m", "--store", "sqlite",
                 "--beyond-contract", "--json"])
    body = json.loads(capsys.readouterr().out)
    assert set(body["faults"]) & set(DISK_FAULT_KINDS), body["faults"]
    # The broken promise noticed, as designed: the run ends DETECTED.
    assert code == 0 and body["status"] == "detected" and body["beyond_contract"], body["status"]


def test_a_bug_planted_in_the_workers_is_named_by_their_check_in_the_file_stack():
    from faults import mutants as mx

    opts = ScenarioOptions(seed=15, duration_ms=parse_duration_ms("30m"), swarm=True)
    scenario = registry.get(str(EXAMPLE_PATH))
    assert run(scenario, opts).passed
    with mx.applied(mx.catalogue()["worker-acts-past-lease"]):
        result = run(scenario, opts)
    assert not result.passed and result.violations[0].invariant == "effect-under-lease", result.violations[:1]


# -- the stores a partition may cut are the ones its targets call -------------------------

def test_the_stores_a_workers_target_may_lose_are_the_ones_its_processes_call():
    """The stack file's list of a workers target's stores, against what a run's
    worker processes really called (their port calls in the trace)."""
    from scenarios.stackfile import CALLED_STORES

    scenario = registry.get(str(EXAMPLE_PATH))
    trace = io.StringIO()
    # (checkpoints: in a recovery only, after a worker was killed)
    result = run(scenario, ScenarioOptions(seed=0, duration_ms=parse_duration_ms("1h"), swarm=True,
                                           faults_enable=("node-kill",), faults_disable=(PARTITION,)),
                 trace_stream=trace)
    assert result.passed, result.violations
    partitionable = {"ledger", "log", "ds", "kernel", "schedules", "content", "pins", "findings", "checkpoints",
                     "keyring", "tools", "model", "pager"}
    called = set()
    for line in trace.getvalue().splitlines():
        event = json.loads(line)
        port = event["kind"].split(".", 1)[0]
        if event["node"].startswith("workers/") and "." in event["kind"] and port in partitionable:
            called.add(port)
    assert called == set(CALLED_STORES["workers"])


# -- the file without its new kinds' faults is the file it was -----------------------------

# Digests of tests/fixtures/agent_conversations.toml before it named clocks,
# partitions and disk faults (same seed, duration, store; swarm on).
BEFORE = {(0, "15m", "memory"): "b867dd4a8ef42a3bab9fbc4416f8416a83a516e2565d535c63627b77a6bcdf56",
          (2, "10m", "sqlite"): "6b21daa1c5a80d850c48eb6b063d119dc74efe3a716b593ea616da7799489ad8"}


@pytest.mark.parametrize("key", sorted(BEFORE), ids=lambda key: "-".join(map(str, key)))
def test_a_file_run_with_the_new_kinds_off_keeps_its_digest(key):
    seed, duration, store = key
    result = run(registry.get(str(FIXTURE)), ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration),
                                                             store=store, swarm=True,
                                                             faults_disable=(CLOCK_SKEW, CLOCK_JUMP, PARTITION)))
    assert result.passed, result.violations
    assert result.trace_digest == BEFORE[key]


# The built-in stacks are untouched by the file kinds: digests computed on the
# commit before them, with every kind on and with the three families off.
BUILT_IN = {
    ("ledger-storm", 0, "30m", "memory", False): "2c788552a6ea458d85b682212bdd64d9b53cc131e63d7f2813ba1f2159116d60",
    ("ledger-storm", 1, "10m", "sqlite", False): "29202fabc6a74696dc4c65b230fba6961ab60e6f9651be8277e7c573255b4dc0",
    ("sentinel-year", 0, "6h", "memory", False): "b05964e563487669b7702d46d11bd50c279742ac934d9bb2a93326a5d11e6734",
    ("ledger-storm", 0, "30m", "memory", True): "55f5932f21b9c15b431baa6f09bb32d64f8e7b13be7d7249fbc1f0a9a5470101",
    ("ledger-storm", 1, "10m", "sqlite", True): "ae59aef91439270f420077346b76c72e4e4ffc924be3cc5c7ee0ef75d7123395",
    ("sentinel-year", 0, "6h", "memory", True): "4dcb6450cf3fca0caa392f2b26f4b69c64dd9d2064b9689a3a30c46c4ad4e2da",
}


@pytest.mark.parametrize("key", sorted(BUILT_IN), ids=lambda key: "-".join(map(str, key)))
def test_a_built_in_run_keeps_its_digest(key):
    name, seed, duration, store, off = key
    # On the callers' clocks: a seed drawing the stores' own clock runs otherwise since that mode came.
    result = run(registry.get(name), ScenarioOptions(
        seed=seed, duration_ms=parse_duration_ms(duration), store=store, swarm=True,
        faults_disable=(CLOCK_SKEW, CLOCK_JUMP, PARTITION) if off else (), knobs={"store_clock": 0}))
    assert result.passed, result.violations
    assert result.trace_digest == BUILT_IN[key]


# -- every bad value: one line, exit 2 ------------------------------------------------

_CLOCKS = 'kind = "clocks"\noffset_max = "500ms"\ndrift_max_ppm = 100\n'
_PART = 'stores = ["ledger", "log", "checkpoints"]'
ERRORS = [
    ('offset_max = "500ms"', 'offset_max = "2s"',
     "[workload 6] offset_max: expected at most 500ms (the claimed tolerance's offset), got '2s'"),
    ('offset_max = "500ms"', 'offset_max = 5',
     '[workload 6] offset_max: expected a duration like "5m", got 5'),
    ("drift_max_ppm = 100", "drift_max_ppm = 101",
     "[workload 6] drift_max_ppm: expected at most 100 (the claimed tolerance's drift), got 101"),
    ("drift_max_ppm = 100", "drift_ppm = 100",
     "[workload 6] unknown key 'drift_ppm' (known: offset_max, drift_max_ppm)"),
    (_PART, 'stores = ["ledger", "pager"]',
     "[workload 5] stores: workers does not call 'pager' (it calls: ledger, log, checkpoints)"),
    (_PART, 'stores = []', "[workload 5] stores: expected a list of names, got []"),
    (_PART, 'stores = ["ledger", "ledger"]', "[workload 5] stores: 'ledger' is named twice"),
    ('cut = [["1s", "lease / 2"], ["lease", "4 * lease"]]', 'cut = [["0s", "lease"]]',
     "[workload 5] cut: a cut lasts more than 0 ms"),
    ('cut = [["1s", "lease / 2"], ["lease", "4 * lease"]]', 'cut = [["1s", "lease / 0"]]',
     "[workload 5] cut: bad duration 'lease / 0'"),
    ('every = ["5m", "30m"]', 'every = ["30m", "5m"]', "[workload 5] every: range ['30m', '5m'] runs backwards"),
    ('every = ["5m", "30m"]', 'modes = ["refuse", "drop"]\nevery = ["5m", "30m"]',
     "[workload 5] modes: unknown mode 'drop' (known: refuse, hang, reply-held)"),
    ('kind = "partitions"\ntargets = "workers"', 'kind = "partitions"\ntargets = "requests"',
     "[workload 5] targets: no workload 'requests' it can act on (sentinels, workers, agent-workers; known: workers)"),
    ('kind = "partitions"\ntargets = "workers"', 'kind = "partitions"\nnodes = ["workers/worker-1"]',
     "[workload 5] unknown key 'nodes' (known: name, when, targets, stores, every, cut, modes)"),
    ('kind = "disk-faults"\nrestart = ["1s", "30s"]', 'kind = "disk-faults"\nrestart = "30s"',
     '[workload 7] restart: expected a range like ["1s", "20s"], got \'30s\''),
    ('[faults]', f'[[workload]]\n{_CLOCKS}\n[faults]', "[workload 8] a stack has one clocks workload"),
    ('[faults]', '[[workload]]\nkind = "disk-faults"\nrestart = ["1s", "2s"]\n\n[faults]',
     "[workload 8] a stack has one disk-faults workload"),
    ('"reference-model",', '"reference-model", "clock-tolerance",',
     "[scenario] checks: clock-tolerance comes with its workload (clocks): remove it from checks"),
    ('"reference-model",', '"reference-model", "storage-integrity",',
     "[scenario] checks: storage-integrity comes with its workload (disk-faults): remove it from checks"),
    ('help = "worker processes"', 'help = "worker processes"\n\n[[swarm.knob]]\nname = "clock_drift_ppm_max"\n'
     'default = 1\nmin = 0\nmax = 2',
     "[swarm] knob clock_drift_ppm_max comes with the clocks workload: bound it there (drift_max_ppm)"),
]
WITHOUT_CLOCKS = EXAMPLE.replace(f"[[workload]]\n{_CLOCKS}", "")
NOT_SWARMED = EXAMPLE.split("# clock-skew, clock-jump and partition join")[0].replace(
    'count = { knob = "workers" }\nlease = { knob = "lease_ms" }', 'count = 2\nlease = "20s"')


@pytest.mark.parametrize("old,new,message", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_a_wrong_new_kind_is_one_line_exit_2(tmp_path, capsys, old, new, message):
    assert old in EXAMPLE
    path = _file(tmp_path, EXAMPLE.replace(old, new, 1))
    assert main(["run", path, "--seed", "0", "--duration", "1h"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"loomsim: error: {path}: {message}"), err
    assert err.count("\n") == 1, err


def test_a_clock_kind_in_the_swarm_without_its_workload_is_one_line(tmp_path, capsys):
    assert f"[[workload]]\n{_CLOCKS}" in EXAMPLE
    path = _file(tmp_path, WITHOUT_CLOCKS.replace('"node-pause"]', '"node-pause", "clock-jump"]'))
    assert main(["run", path, "--seed", "0", "--duration", "1h"]) == 2
    assert capsys.readouterr().err == (f"loomsim: error: {path}: [swarm] fault_kinds: clock-jump comes with a "
                                       f'clocks workload: add one (kind = "clocks") or leave it out\n')


def test_clocks_without_a_swarm_is_one_line_and_partitions_run_every_seed(tmp_path, capsys):
    path = _file(tmp_path, NOT_SWARMED)
    assert main(["run", path, "--seed", "0", "--duration", "1h"]) == 2
    assert capsys.readouterr().err == (
        f"loomsim: error: {path}: [workload 6] clocks: a node's skew and steps are drawn per seed by the swarm: "
        "the file needs a [swarm] table (fault_kinds may be empty)\n")
    path = _file(tmp_path, NOT_SWARMED.replace(f"[[workload]]\n{_CLOCKS}", ""), "partitioned.toml")
    assert main(["run", path, "--seed", "1", "--duration", "1h", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["coverage"]["fault_kinds"][PARTITION] > 0
