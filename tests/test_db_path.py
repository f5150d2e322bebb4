"""``run --db PATH``: a path SQLite cannot use is one clear line, said
before anything is opened (no "disk I/O error"), and the refusal leaves the
directory as it was: no ``-wal``/``-shm`` files, a user's file untouched."""
from __future__ import annotations

from pathlib import Path

import pytest

from sim.face import cli


def _refused(tmp_path: Path, capsys, db: str) -> str:
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code = cli.main(["run", "ledger-storm", "--seed", "1", "--duration", "1m", "--no-progress", "--db", db,
                     "--repro-dir", str(tmp_path)])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("loomsim: error: --db "), lines
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no -wal, -shm, journal or repro file
    return lines[0]


def test_a_directory_is_not_a_database_file(tmp_path, capsys):
    directory = tmp_path / "state"
    directory.mkdir()
    line = _refused(tmp_path, capsys, str(directory))
    assert line == f"loomsim: error: --db {str(directory)!r} is a directory, not a database file"


def test_a_missing_directory_is_named(tmp_path, capsys):
    line = _refused(tmp_path, capsys, str(tmp_path / "missing" / "x.db"))
    assert "does not exist" in line and str(tmp_path / "missing") in line


@pytest.mark.parametrize("content", [b"hello, not a database\n", b"SQLite format 2\x00" + bytes(200)])
def test_a_file_that_is_not_sqlite_is_refused_and_left_as_it_was(tmp_path, capsys, content):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(content)
    line = _refused(tmp_path, capsys, str(notes))
    assert line == f"loomsim: error: --db {str(notes)!r} is not an SQLite database file"
    assert notes.read_bytes() == content


def test_an_empty_file_and_a_new_name_still_run(tmp_path, capsys):
    empty = tmp_path / "empty.db"
    empty.touch()  # SQLite takes an empty file as an empty database
    for db in (empty, tmp_path / "new.db"):
        code = cli.main(["run", "ledger-storm", "--seed", "1", "--duration", "1m", "--no-progress", "--db", str(db),
                         "--repro-dir", str(tmp_path)])
        assert code == 0, capsys.readouterr().err
        assert db.read_bytes().startswith(b"SQLite format 3\x00")
