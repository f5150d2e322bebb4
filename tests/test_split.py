"""The suite's split across two processes (``tests._split``) keeps the
verdict of one process: a failure in a file the second process ran fails the
session by name, a skip stays a skip, and nothing is counted twice."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests import _split

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFTEST = f"""
import sys
sys.path.insert(0, {ROOT!r})
from tests import _split

def pytest_configure(config):
    config.pluginmanager.register(_split.Plugin(), "loomsim-split")
"""

# The first file waits until the second process has claimed the last one, so
# each process surely runs a file of its own (the child starts at test_d.py,
# past this process's share of five files of default weight).
FIRST = """
import os, time
from tests import _split

def test_waits_for_the_child_to_claim_the_last_file():
    split = _split.Split.running
    assert split is not None
    claim = os.path.join(split.directory, "claim-t__test_z.py")
    deadline = time.monotonic() + 120
    while not os.path.exists(claim):
        assert time.monotonic() < deadline, "the child never claimed its first file"
        time.sleep(0.05)

def test_passes_here():
    assert not _split.IN_CHILD
"""

LAST = """
import os
import pytest
from tests import _split

def test_runs_in_the_child():
    assert _split.IN_CHILD

def test_fails_in_the_child():
    assert 1 + 1 == 3, "planted failure"

def test_is_skipped_in_the_child():
    pytest.skip("planted skip")
"""


def _project(tmp_path, last: str = LAST):
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["t"]\n')
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "conftest.py").write_text(CONFTEST)
    (tests / "test_a.py").write_text(FIRST)
    for middle in "bcd":
        (tests / f"test_{middle}.py").write_text("def test_one():\n    pass\n")
    (tests / "test_z.py").write_text(textwrap.dedent(last))
    return tmp_path


def _pytest(directory, **env):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA"],
                          cwd=directory, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "LOOMSIM_TEST_SPLIT_MIN": "2", _split.JOBS_ENV: "2", **env})


def test_a_failure_in_the_second_process_fails_the_session_by_name(tmp_path):
    done = _pytest(_project(tmp_path))
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "FAILED t/test_z.py::test_fails_in_the_child" in out and "planted failure" in out, out
    assert "PASSED t/test_z.py::test_runs_in_the_child" in out, out
    assert "SKIPPED" in out and "planted skip" in out, out
    assert "1 failed, 6 passed, 1 skipped" in out, out
    assert "of 5 test files ran in a second process" in out and "0 of 5" not in out, out


def test_one_process_when_told(tmp_path):
    done = _pytest(_project(tmp_path, last=LAST.replace("assert _split.IN_CHILD",
                                                        "assert not _split.IN_CHILD")),
                   LOOMSIM_TEST_JOBS="1")
    out = done.stdout
    # The first file's wait needs a second process: without one it fails, and
    # every other test runs here.
    assert "FAILED t/test_a.py::test_waits_for_the_child_to_claim_the_last_file" in out, out
    assert "PASSED t/test_z.py::test_runs_in_the_child" in out and "second process" not in out, out


def test_a_child_that_dies_fails_the_tests_it_never_reported(tmp_path):
    dying = LAST.replace('def test_fails_in_the_child():\n    assert 1 + 1 == 3, "planted failure"',
                         "def test_fails_in_the_child():\n    os._exit(3)")
    done = _pytest(_project(tmp_path, last=dying))
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "FAILED t/test_z.py::test_fails_in_the_child" in out, out
    assert "never reported this test" in out, out
