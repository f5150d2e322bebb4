"""No output file a user holds is overwritten, truncated or lost: ``run
--trace``, a refused ``--db`` and ``sweep --model-coverage-out`` follow the
rule the repro files follow (``sim.artifacts``: a taken name gets ``-2``,
..., the command says which name it wrote), and a command refused for its
arguments creates nothing."""
from __future__ import annotations

import json
import os

from sim.artifacts import NewFileStream
from sim.face import cli

RUN = ["run", "ledger-storm", "--seed", "1", "--duration", "1m", "--no-progress"]
KEPT = "a trace the user keeps\n"


def _files(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_an_existing_trace_survives_a_run_with_the_same_trace(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(KEPT)
    assert cli.main([*RUN, "--trace", str(trace)]) == 0
    assert trace.read_text() == KEPT
    written = tmp_path / "t-2.jsonl"
    assert f"trace file: {written}" in capsys.readouterr().out
    first = json.loads(written.read_text().splitlines()[0])
    assert first["seq"] == 0 or "kind" in first
    assert cli.main([*RUN, "--trace", str(trace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace_file"] == str(tmp_path / "t-3.jsonl")
    assert trace.read_text() == KEPT


def test_a_usage_error_after_trace_leaves_the_existing_file_and_creates_nothing(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(KEPT)
    before = _files(tmp_path)
    assert cli.main([*RUN, "--trace", str(trace), "--knob", "no_such_knob=3"]) == 2
    assert "unknown knob" in capsys.readouterr().err
    assert _files(tmp_path) == before


def test_a_refused_db_leaves_no_wal_or_shm_and_no_trace(tmp_path, capsys):
    used = tmp_path / "used.db"
    assert cli.main([*RUN, "--db", str(used)]) == 0  # a finished run's file (WAL mode): refused next time
    capsys.readouterr()
    trace = tmp_path / "t.jsonl"
    trace.write_text(KEPT)
    before = _files(tmp_path)
    assert cli.main([*RUN, "--db", str(used), "--trace", str(trace)]) == 2
    assert "already holds tables" in capsys.readouterr().err
    assert _files(tmp_path) == before


def test_trace_naming_a_directory_is_refused_in_one_line(tmp_path, capsys):
    assert cli.main([*RUN, "--trace", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loomsim: error: --trace") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_new_file_stream_creates_its_file_at_the_first_write_only(tmp_path):
    wanted = tmp_path / "x.jsonl"
    wanted.write_text(KEPT)
    stream = NewFileStream(str(wanted))
    stream.close()
    assert stream.path is None and os.listdir(tmp_path) == ["x.jsonl"]
    stream = NewFileStream(str(wanted))
    stream.write("{}\n")
    stream.close()
    assert stream.path == str(tmp_path / "x-2.jsonl") and wanted.read_text() == KEPT


def test_model_coverage_out_never_overwrites(tmp_path, capsys):
    out = tmp_path / "cov.json"
    out.write_text(KEPT)
    assert cli.main(["sweep", "ledger-storm", "--seeds", "0:1", "--jobs", "1", "--duration", "1m",
                     "--failure-db", "none", "--repro-dir", str(tmp_path), "--model-coverage-out", str(out)]) == 0
    assert out.read_text() == KEPT
    written = tmp_path / "cov-2.json"
    assert json.loads(written.read_text())["format"] == "loomsim-model-coverage/1"
    assert str(written) in capsys.readouterr().out


def test_check_determinism_keeps_an_existing_trace_and_reports_the_names_written(tmp_path, capsys):
    keep = tmp_path / "keep"
    keep.mkdir()
    taken = keep / "trace-ledger-storm-0-hashseed0.jsonl"
    taken.write_text(KEPT)
    assert cli.main(["check-determinism", "ledger-storm", "--seeds", "0:1", "--duration", "1m",
                     "--keep-traces", str(keep), "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["runs"]
    assert taken.read_text() == KEPT
    assert record["traces"] == [str(keep / "trace-ledger-storm-0-hashseed0-2.jsonl"),
                                str(keep / "trace-ledger-storm-0-hashseed1.jsonl")]
    assert all(os.path.getsize(path) > 0 for path in record["traces"])


def test_a_usage_error_leaves_no_report_directory(tmp_path, capsys):
    report = tmp_path / "report"
    assert cli.main([*RUN, "--report", str(report), "--knob", "no_such_knob=3"]) == 2
    assert "unknown knob" in capsys.readouterr().err
    assert not report.exists()
    # ... and a report directory that could never be made is still refused before the run.
    blocker = tmp_path / "file"
    blocker.write_text(KEPT)
    assert cli.main([*RUN, "--report", str(blocker / "report")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loomsim: error: --report") and err.count("\n") == 1
