"""The face: ``loomsim`` / ``python -m sim`` — exit codes, output, repro files."""
from __future__ import annotations

import json
import os
import random
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sim.face.cli import main
from sim.face.cli import build_parser

REPO_ROOT = Path(__file__).resolve().parents[1]
INVARIANTS = ("cas-linear", "adopt-own-write", "exactly-once-wake", "replay-determinism", "contract-safety")
RESULT_KEYS = ("scenario", "seed", "store", "status", "trace_digest", "simulated_ms", "wall_s", "wakes", "events",
               "faults", "invariants", "violations")


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-m", "sim", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _main_json(args: list[str], capsys) -> tuple[int, dict]:
    code = main(args + ["--json"])
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert len(lines) == 1, out[-2000:]
    return code, json.loads(lines[0])


# -- happy paths -------------------------------------------------------------------


def test_list_names_sentinel_year(tmp_path):
    proc = _cli(["list"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    names = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    assert "sentinel-year" in names


RUN_ONE_DAY = ["run", "sentinel-year", "--seed", "1", "--duration", "1d"]


@pytest.fixture(scope="module")
def one_day_json(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """``python -m sim run ... --json`` for one day, once: the JSON test reads
    it, and the human-output test compares its own run's digest with it."""
    cwd = tmp_path_factory.mktemp("run-json")
    return _cli(RUN_ONE_DAY + ["--json"], cwd), cwd


def test_run_json_prints_one_object_with_the_result(one_day_json):
    proc, tmp_path = one_day_json
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    for key in RESULT_KEYS:
        assert key in result, key
    assert result["scenario"] == "sentinel-year"
    assert result["seed"] == 1
    assert result["store"] == "memory"
    assert result["status"] == "pass"
    assert isinstance(result["trace_digest"], str) and len(result["trace_digest"]) == 64
    int(result["trace_digest"], 16)
    assert result["simulated_ms"] >= 24 * 3_600_000
    assert isinstance(result["wall_s"], (int, float)) and result["wall_s"] >= 0
    # One sentinel, every 5 minutes, for one day: each wake ran, or was
    # skipped (its schedule held by a run parked in doubt, or down).
    assert result["wakes"] + result["stats"]["wakes_skipped"] == 288
    assert result["events"] > result["wakes"]
    assert isinstance(result["faults"], dict)
    assert all(isinstance(v, int) for v in result["faults"].values())
    assert isinstance(result["invariants"], dict)
    assert set(INVARIANTS) <= set(result["invariants"])
    assert all(isinstance(v, int) for v in result["invariants"].values())
    assert result["invariants"]["cas-linear"] > 0 and result["invariants"]["exactly-once-wake"] > 0
    assert result["violations"] == []
    assert not list(tmp_path.glob("loomsim-repro-*"))  # a passing run writes no repro file


def test_human_output_prints_configuration_first_and_pass_last(capsys, one_day_json):
    code = main(RUN_ONE_DAY)
    out = capsys.readouterr().out
    assert code == 0
    lines = [line for line in out.splitlines() if line.strip()]
    first, last = lines[0], lines[-1]
    assert first.startswith("loomsim sentinel-year")
    for part in ("seed=1", "duration=1d", "store=memory", "sentinels=1"):
        assert part in first, part
    assert last.startswith("PASS")
    assert "FAIL" not in out
    proc, _ = one_day_json  # the same run with --json
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert f"trace digest: {result['trace_digest']}" in out  # human and JSON agree


def test_db_runs_on_sqlite_and_leaves_a_valid_sqlite_file(tmp_path, capsys):
    db = tmp_path / "run.db"
    code, result = _main_json(["run", "sentinel-year", "--seed", "2", "--duration", "2h", "--db", str(db)], capsys)
    assert code == 0
    assert result["store"] == "sqlite" and result["status"] == "pass"
    assert db.read_bytes()[:16] == b"SQLite format 3\x00"
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = conn.execute("SELECT key, revision FROM durable_state").fetchall()
    finally:
        conn.close()
    assert [key for key, _ in rows] == ["sentinel:sentinel-0"]
    assert rows[0][1] >= 1
    assert str(db) in result["repro_command"]


TRACE_RUN = ["run", "sentinel-year", "--seed", "3", "--duration", "12h"]  # half a day with faults in it


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> tuple[int, dict, Path]:
    """One traced run, read by the trace-file tests: its exit code, its
    ``--json`` result and its trace file."""
    import contextlib
    import io

    trace = tmp_path_factory.mktemp("trace") / "t.jsonl"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(TRACE_RUN + ["--trace", str(trace), "--json"])
    (line,) = out.getvalue().strip().splitlines()
    return code, json.loads(line), trace


def test_trace_file_has_one_json_line_per_event(traced):
    code, result, trace = traced
    assert code == 0
    assert sum(result["faults"].values()) > 0
    lines = trace.read_text(encoding="utf-8").splitlines()
    assert len(lines) == result["events"]
    objects = [json.loads(line) for line in lines]
    for obj in objects:
        for key in ("seq", "t_ms", "node", "kind"):
            assert key in obj
    times = [obj["t_ms"] for obj in objects]
    assert times == sorted(times)
    assert objects[0]["kind"] == "node.start"
    assert times[-1] <= result["simulated_ms"]


def test_trace_file_envelope_is_the_events_own(traced):
    # Regression: fields named kind/seq used to overwrite the envelope, so
    # fault events streamed as kind="ack-lost" and step events carried the
    # step's seq instead of the event's.
    code, result, trace = traced
    assert code == 0
    objects = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert [obj["seq"] for obj in objects] == list(range(1, result["events"] + 1))
    fault_lines = [obj for obj in objects if obj["kind"] == "fault"]
    assert len(fault_lines) == sum(result["faults"].values()) > 0
    assert not {obj["kind"] for obj in objects} & set(result["faults"])
    fired: dict[str, int] = {}
    for obj in fault_lines:
        fired[obj["fields"]["kind"]] = fired.get(obj["fields"]["kind"], 0) + 1
    assert fired == result["faults"]


# -- usage errors -------------------------------------------------------------------


def _garbage_db(tmp_path: Path) -> str:
    path = tmp_path / "garbage.db"
    # Deterministic junk (this is a test, not the simulated path).
    path.write_bytes(random.Random(1234).randbytes(8192))
    return str(path)


BAD_INPUTS = {
    "unknown-scenario": (["run", "no-such-scenario", "--seed", "1"], "sentinel-year"),
    "seed-not-a-number": (["run", "sentinel-year", "--seed", "abc"], "abc"),
    "seed-negative": (["run", "sentinel-year", "--seed", "-1"], "-1"),
    "seed-too-big": (["run", "sentinel-year", "--seed", str(2**63)], "seed"),
    "duration-bad-unit": (["run", "sentinel-year", "--seed", "1", "--duration", "3q"], "3q"),
    "duration-no-unit": (["run", "sentinel-year", "--seed", "1", "--duration", "30"], "30"),
    "duration-zero": (["run", "sentinel-year", "--seed", "1", "--duration", "0d"], "0d"),
    "store-unknown": (["run", "sentinel-year", "--seed", "1", "--store", "mongo"], "mongo"),
    "db-dir-missing": (["run", "sentinel-year", "--seed", "1", "--db", "/nonexistent-dir/x.db"], "nonexistent-dir"),
    "trace-dir-missing": (["run", "sentinel-year", "--seed", "1", "--trace", "/nonexistent-dir/t.jsonl"],
                          "nonexistent-dir"),
    "sentinels-zero": (["run", "sentinel-year", "--seed", "1", "--sentinels", "0"], "sentinels"),
    "sentinels-not-a-number": (["run", "sentinel-year", "--seed", "1", "--sentinels", "x"], "x"),
    "seed-missing": (["run", "sentinel-year"], "--seed"),
    "unknown-command": (["frobnicate"], "frobnicate"),
    "corrupt-db": (["run", "sentinel-year", "--seed", "1", "--duration", "1d", "--db", "<garbage>"], "garbage.db"),
    "repro-dir-missing": (["run", "sentinel-year", "--seed", "1", "--duration", "1d", "--repro-dir", "/nonexistent-dir"],
                          "nonexistent-dir"),
    "store-not-a-factory": (["run", "sentinel-year", "--seed", "1", "--store", "mystores"], "MODULE:FACTORY"),
    "no-command": ([], "no command given"),
    "sweep-jobs-zero": (["sweep", "ledger-storm", "--seeds", "0:2", "--jobs", "0"], "--jobs"),
}


# Through ``python -m sim`` (a process of its own); the others call ``main``
# in process, as ``python -m sim`` does (``sys.exit(main())``).
BAD_INPUT_IN_A_PROCESS = "corrupt-db"


def _main_in_process(args: list[str], cwd: Path, capsys, monkeypatch) -> subprocess.CompletedProcess:
    """``python -m sim ARGS`` run in this process: its exit status and output."""
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    try:
        code = main(args)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, captured.out, captured.err)


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(name, tmp_path, capsys, monkeypatch):
    args, mention = BAD_INPUTS[name]
    garbage = _garbage_db(tmp_path)
    before = Path(garbage).read_bytes()
    args = [garbage if a == "<garbage>" else a for a in args]
    if name == BAD_INPUT_IN_A_PROCESS:
        proc = _cli(args, tmp_path)
    else:
        proc = _main_in_process(args, tmp_path, capsys, monkeypatch)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-1000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("loomsim: error:")
    assert mention in lines[0]
    assert Path(garbage).read_bytes() == before  # a user's file is never clobbered
    assert not list(tmp_path.glob("loomsim-repro-*"))


def test_unknown_scenario_lists_the_known_ones(capsys):
    assert main(["run", "nope", "--seed", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "nope" in err and "known scenarios" in err and "sentinel-year" in err


def test_no_command_is_a_usage_error(capsys):
    assert main([]) == 2


def test_a_db_that_already_holds_a_run_is_refused(tmp_path, capsys):
    # Regression: reusing a --db file (e.g. rerunning the printed repro
    # command) used to continue from the old state and report a spurious
    # cas-linear "lost update". A run starts from empty stores.
    db = tmp_path / "reuse.db"
    args = ["run", "sentinel-year", "--seed", "1", "--duration", "2h", "--db", str(db), "--repro-dir", str(tmp_path)]
    code, first = _main_json(args, capsys)
    assert code == 0

    def rows() -> list:
        conn = sqlite3.connect(db)
        try:
            return conn.execute("SELECT key, revision, payload FROM durable_state ORDER BY key").fetchall()
        finally:
            conn.close()

    before = rows()
    assert before
    code = main(args + ["--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("loomsim: error:")
    assert str(db) in lines[0]
    assert rows() == before  # the refused run wrote nothing
    assert not list(tmp_path.glob("loomsim-repro-*"))


# -- the failure path -------------------------------------------------------------------


@pytest.fixture
def planted_cas_bug(monkeypatch):
    """cas-linear reports a violation on the first event it sees."""
    from scenarios.invariants.cas_linear import CasLinear

    def on_event(self, event):
        self.checks += 1
        self.fail("planted", ("sentinel:sentinel-0",))

    monkeypatch.setattr(CasLinear, "on_event", on_event)


def test_violation_exits_1_and_explains_itself(planted_cas_bug, tmp_path, capsys):
    repro_dir = tmp_path / "repros"
    repro_dir.mkdir()
    code = main(["run", "sentinel-year", "--seed", "5", "--duration", "1d", "--repro-dir", str(repro_dir)])
    out = capsys.readouterr().out
    assert code == 1
    assert "PASS" not in out
    assert "FAIL: invariant cas-linear violated at 2026-01-01 " in out
    assert "planted" in out
    assert "related trace events:" in out
    excerpt = out.split("related trace events:", 1)[1].split("reproduce:", 1)[0]
    excerpt_lines = [line for line in excerpt.splitlines() if line.strip()]
    assert excerpt_lines
    assert all(line.strip().startswith("2026-01-0") for line in excerpt_lines)
    assert any("sentinel:sentinel-0" in line for line in excerpt_lines)

    reproduce = [line for line in out.splitlines() if line.startswith("reproduce: ")]
    assert len(reproduce) == 1
    command = reproduce[0][len("reproduce: "):]
    assert command.startswith("loomsim run sentinel-year --seed 5 ")
    argv = shlex.split(command)
    assert argv[0] == "loomsim"
    parsed = build_parser().parse_args(argv[1:])
    assert (parsed.scenario, parsed.seed, parsed.duration) == ("sentinel-year", 5, 24 * 3_600_000)

    repro_files = list(repro_dir.glob("*.json"))
    assert len(repro_files) == 1
    assert f"repro file: {repro_files[0]}" in out
    repro = json.loads(repro_files[0].read_text(encoding="utf-8"))
    assert repro["command"] == command
    assert repro["config"]["seed"] == 5 and repro["config"]["scenario"] == "sentinel-year"
    assert repro["violations"][0]["name"] == "cas-linear"
    assert repro["violations"][0]["message"] == "planted"
    assert isinstance(repro["fault_script"], list)
    # The excerpt: events touching the failing key, plus the faults and
    # process restarts that explain them.
    context = {"fault", "node.crash", "node.start", "deploy", "violation"}
    assert any("sentinel:sentinel-0" in json.dumps(e) for e in repro["excerpt"])
    assert all("sentinel:sentinel-0" in json.dumps(e) or e["kind"] in context for e in repro["excerpt"])
    assert len(repro["trace_digest"]) == 64


def test_violation_in_json_mode(planted_cas_bug, tmp_path, capsys):
    code, result = _main_json(["run", "sentinel-year", "--seed", "6", "--duration", "1d",
                               "--repro-dir", str(tmp_path)], capsys)
    assert code == 1
    assert result["status"] == "fail"
    assert [v["name"] for v in result["violations"]][:1] == ["cas-linear"]
    assert result["violations"][0]["simulated_time"].startswith("2026-01-01 ")
    assert result["repro_command"].startswith("loomsim run sentinel-year --seed 6 ")
    assert result["repro_file"] and Path(result["repro_file"]).is_file()
    assert Path(result["repro_file"]).parent == tmp_path


def test_unwritable_repro_dir_warns_but_still_reports_the_violation(planted_cas_bug, tmp_path, capsys, monkeypatch):
    # The directory is checked before the run; a write that fails anyway
    # (here: a full disk) is a warning. (A name taken, even by a directory,
    # is no failure: the writer takes the next free name.)
    import errno

    from sim.face import run

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run, "write_repro", full)
    code = main(["run", "sentinel-year", "--seed", "5", "--duration", "1d", "--repro-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 1
    assert "reproduce: loomsim run sentinel-year --seed 5 " in captured.out
    assert "Traceback" not in captured.err
    warnings = captured.err.splitlines()
    assert len(warnings) == 1 and warnings[0].startswith("loomsim: warning:")
