"""Where ``loomsim shrink`` writes, and what it says it wrote: the name it
prints, embeds in the new file's ``command`` and in its reports is always
the name of the file it wrote (never the one it found taken), and ``--out
DIR`` writes into that directory."""
from __future__ import annotations

import json
import os

import pytest

from sim.face import cli

SHRUNK = "loomsim-shrunk-ledger-storm-0.json"


@pytest.fixture
def failing_repro(tmp_path, capsys):
    """A failing run's repro file (a planted bug, seconds to run), in ``tmp_path/in``."""
    from faults import mutants

    directory = tmp_path / "in"
    directory.mkdir()
    try:
        assert cli.main(["run", "ledger-storm", "--seed", "0", "--duration", "40m", "--no-progress",
                         "--mutant", "ledger-claim-newest-first", "--repro-dir", str(directory)]) == 1
        capsys.readouterr()
        yield directory / "loomsim-repro-ledger-storm-0.json"
    finally:
        mutants.revert()


def _shrink(capsys, *argv: str) -> tuple[str, dict]:
    """Run ``loomsim shrink`` (one run: the budget keeps the test short);
    return the path it printed and that file's body."""
    assert cli.main(["shrink", *argv, "--max-runs", "1"]) == 1
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("repro file: ")]
    path = line[len("repro file: "):]
    assert f"replay: loomsim repro {path}" in out
    with open(path, encoding="utf-8") as handle:
        return path, json.load(handle)


def test_a_taken_default_name_is_kept_and_the_command_names_the_file_written(failing_repro, tmp_path, capsys):
    taken = failing_repro.parent / SHRUNK
    taken.write_text("another bug's shrunk repro\n")
    report = tmp_path / "report"
    path, body = _shrink(capsys, str(failing_repro), "--report", str(report))
    assert taken.read_text() == "another bug's shrunk repro\n"
    assert path == str(failing_repro.parent / "loomsim-shrunk-ledger-storm-0-2.json")
    assert body["command"] == f"loomsim repro {path}"
    reported = json.loads((report / "loomsim-report.json").read_text())
    assert reported["repro_command"] == f"loomsim repro {path}" and reported["repro_file"] == path
    assert f"loomsim repro {path}" in (report / "loomsim-report.md").read_text()
    # The report's verdict is the process's: the shrunk run fails, exit 1 (``_shrink``).
    assert (report / "loomsim-report.md").read_text().startswith("# ❌ loomsim FAIL (exit 1)")


def test_out_over_an_unrelated_file_prints_and_embeds_the_name_it_wrote(failing_repro, tmp_path, capsys):
    mine = tmp_path / "mine.json"
    mine.write_text("my notes\n")
    path, body = _shrink(capsys, str(failing_repro), "--out", str(mine))
    assert mine.read_text() == "my notes\n"
    assert path == str(tmp_path / "mine-2.json")
    assert body["command"] == f"loomsim repro {path}"


def test_out_an_existing_directory_writes_into_it(failing_repro, tmp_path, capsys):
    directory = tmp_path / "shrunk"
    directory.mkdir()
    path, body = _shrink(capsys, str(failing_repro), "--out", str(directory))
    assert path == str(directory / SHRUNK)
    assert body["command"] == f"loomsim repro {path}"
    assert not os.path.exists(f"{directory}-2")


def test_out_in_a_missing_directory_is_refused_before_any_run(failing_repro, tmp_path, capsys):
    assert cli.main(["shrink", str(failing_repro), "--out", str(tmp_path / "nowhere" / "x.json")]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("loomsim: error: --out") and captured.err.count("\n") == 1
    assert "shrinking" not in captured.out
