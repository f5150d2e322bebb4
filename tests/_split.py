"""The whole suite on both of the machine's cores, with nothing but pytest.

A full run (``pytest -q`` with no test files named) starts one child pytest
on the same selection. Both run the test files in the suite's own order, so
each process meets its files in the order one process would: this process
from the first file, the child from a file about half-way through the
suite's measured cost (``FILE_SECONDS``). A file belongs to the process that
claims it first (an exclusive file create in a shared directory), so when
this process reaches the child's half it takes the files the child has not
started yet. For a file the child claimed, this process does not run the
tests; it waits for the child's reports of each of them and hands them to
its own reporting hooks (terminal, ``--durations``, JUnit, exit status): the
session's verdict is the verdict of one process. A test the child never
reported (it died, or collected differently) fails here, by name, with the
end of the child's output.

Off (one process, as before) when fewer than ``SPLIT_ITEMS_MIN`` tests are
selected, when test files or node ids are named, when the machine has one
core, in the child itself, or with ``LOOMSIM_TEST_JOBS=1``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

SPLIT_ITEMS_MIN = int(os.environ.get("LOOMSIM_TEST_SPLIT_MIN", "500"))
CHILD_ENV = "LOOMSIM_TEST_SPLIT_DIR"  # set in the child: the shared directory
JOBS_ENV = "LOOMSIM_TEST_JOBS"
# Files this process always keeps: the mutant detections start their own
# background child from this session's items (``conftest``).
KEPT_HERE = ("tests/test_mutants.py",)
IN_CHILD = False  # set in the child by its ``Plugin``
CHILD_WAIT_S = 3_600  # the longest a report may take to come
# This process's share of the measured cost before the child's first file:
# less than half, as this process also waits on the mutant detections.
MAIN_SHARE = 0.45
TEST_SECONDS_DEFAULT = 0.1  # a file not listed below: this much a test
# Seconds each heavy file took (``--durations=0``, summed per file, on a
# loaded machine: only the proportions matter).
FILE_SECONDS = {
    "test_shrink.py": 42, "test_cli.py": 35, "test_port_storm_clocks.py": 34, "test_adversary_edges.py": 34,
    "test_ledger_storm.py": 32, "test_sentinel_system.py": 30, "test_sweep_reach.py": 29,
    "test_fault_scripts.py": 28, "test_agent_conversations.py": 25, "test_discovery.py": 24,
    "test_blind_spots.py": 24, "test_beyond_contract.py": 24, "test_stackfile.py": 22,
    "test_conversation_retention.py": 22, "test_composition.py": 21, "test_fault_kinds.py": 20,
    "test_mutants.py": 17, "test_recovery_checkpoints.py": 16, "test_store_clock.py": 15,
    "test_recovery_decisions.py": 13, "test_describe.py": 13, "test_workloads.py": 12, "test_port_storm.py": 12,
    "test_face_exits.py": 12, "test_determinism.py": 12, "test_stackfile_faults.py": 11,
    "test_planted_bugs.py": 11, "test_adversary_ports.py": 11, "test_sentinel_retirement_audit.py": 10,
    "test_canonical.py": 10, "test_digests_kept.py": 9, "test_verdict_trust.py": 8, "test_partitions.py": 8,
    "test_issue_defects.py": 8, "test_clocks.py": 8, "test_adversary_values.py": 8, "test_adversary_state.py": 8,
    "test_explore.py": 45, "test_branches.py": 30, "test_live.py": 25, "test_corpus.py": 12, "test_history.py": 8,
}


def _file_of(item) -> str:
    return item.nodeid.split("::", 1)[0]


def _claim(directory: str, path: str, who: str) -> str:
    """The owner of ``path``: ``who`` if it claims it first, else the other."""
    name = os.path.join(directory, "claim-" + path.replace("/", "__"))
    try:
        fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        with open(name, encoding="utf-8") as f:
            return f.read() or ("child" if who == "main" else "main")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(who)
    return who


class Split:
    """The main process's side: the child, its reports, and who owns which file."""

    running: "Split | None" = None

    def __init__(self, config, files: list[str]) -> None:
        self.config = config
        self.directory = tempfile.mkdtemp(prefix="loomsim-split-")
        self.reports_path = os.path.join(self.directory, "reports.jsonl")
        open(self.reports_path, "w").close()
        self.owner: dict[str, str] = {}
        self.reports: dict[str, list[dict]] = {}
        self.ended = False
        self._offset = 0
        self._pending = ""
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
        if config.option.markexpr:
            argv += ["-m", config.option.markexpr]
        if config.option.keyword:
            argv += ["-k", config.option.keyword]
        if config.option.maxfail:
            argv += ["--maxfail", str(config.option.maxfail)]
        argv += files
        self.err = open(os.path.join(self.directory, "child.err"), "w+", encoding="utf-8")
        self.child = subprocess.Popen(argv, cwd=str(config.rootpath), stdin=subprocess.DEVNULL,
                                      stdout=self.err, stderr=subprocess.STDOUT,
                                      env={**os.environ, CHILD_ENV: self.directory})

    def owns(self, item) -> bool:
        """Does the child run this item's file? Claims the file for this
        process when the child has not."""
        path = _file_of(item)
        if path not in self.owner:
            self.owner[path] = "main" if path in KEPT_HERE else _claim(self.directory, path, "main")
        return self.owner[path] == "child"

    def _read(self) -> None:
        with open(self.reports_path, encoding="utf-8") as f:
            f.seek(self._offset)
            chunk = f.read()
            self._offset = f.tell()
        lines = (self._pending + chunk).split("\n")
        self._pending = lines.pop()  # a line the child is still writing
        for line in lines:
            data = json.loads(line)
            if data.get("end"):
                self.ended = True
            else:
                self.reports.setdefault(data["nodeid"], []).append(data)

    def reports_of(self, nodeid: str) -> list[dict] | None:
        """The child's reports of one test (setup, call, teardown), waiting
        for them; None when the child ended without them."""
        deadline = time.monotonic() + CHILD_WAIT_S
        while True:
            self._read()
            done = self.reports.get(nodeid, [])
            if any(r["when"] == "teardown" for r in done):
                return done
            if self.ended or self.child.poll() is not None:
                self._read()
                done = self.reports.get(nodeid, [])
                return done if any(r["when"] == "teardown" for r in done) else None
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)

    def summary(self) -> str:
        child = sorted(path for path, owner in self.owner.items() if owner == "child")
        return (f"{len(child)} of {len(self.owner)} test files ran in a second process "
                f"({JOBS_ENV}=1 runs them all in this one)")

    def child_error_tail(self) -> str:
        self.err.flush()
        self.err.seek(0)
        return self.err.read()[-3_000:]

    def close(self) -> None:
        try:
            self.child.wait(timeout=10)  # it has reported every test this session waited for
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
        self.err.close()
        shutil.rmtree(self.directory, ignore_errors=True)
        Split.running = None


def start(session, items: list) -> None:
    """Start the child when this session is a full run on a machine with two cores."""
    config = session.config
    if IN_CHILD or os.environ.get(JOBS_ENV) == "1":
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if len(items) < SPLIT_ITEMS_MIN or config.option.collectonly or cores < 2:
        return
    if config.args_source != config.ArgsSource.TESTPATHS:  # files or node ids named: run them here
        return
    files: list[str] = []
    seconds: dict[str, float] = {}
    for item in items:
        path = _file_of(item)
        if path not in seconds:
            files.append(path)
            seconds[path] = 0.0
        seconds[path] += TEST_SECONDS_DEFAULT
    for path in files:
        seconds[path] = FILE_SECONDS.get(os.path.basename(path), seconds[path])
    total, before, first = sum(seconds.values()), 0.0, len(files)
    for index, path in enumerate(files):
        if before >= MAIN_SHARE * total:
            first = index
            break
        before += seconds[path]
    theirs = [path for path in files[first:] if path not in KEPT_HERE]
    if theirs:
        Split.running = Split(config, theirs)


def run_in_child(item) -> bool:
    """For an item of a file the child owns: report the child's outcome
    here. True when handled (the item is not run in this process)."""
    split = Split.running
    if split is None or not split.owns(item):
        return False
    from _pytest.reports import TestReport

    hook = item.ihook
    hook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = split.reports_of(item.nodeid)
    if reports is None:
        failed = TestReport(item.nodeid, item.location, {}, "failed",
                            f"the split child never reported this test (it ended or collected differently):\n"
                            f"{split.child_error_tail()}", "call")
        hook.pytest_runtest_logreport(report=failed)
    else:
        for data in reports:
            report = item.config.hook.pytest_report_from_serializable(config=item.config, data=data["report"])
            if isinstance(report.longrepr, list):  # a skip's (path, line, reason), a list once through JSON
                report.longrepr = tuple(report.longrepr)
            hook.pytest_runtest_logreport(report=report)
    hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


# -- the child's side ----------------------------------------------------------------------


class ChildSide:
    """In the child: skip the files the main process claimed first, and
    write every report of the rest for it to read."""

    def __init__(self, directory: str, config) -> None:
        self.directory = directory
        self.config = config
        self.owner: dict[str, str] = {}
        self.out = open(os.path.join(directory, "reports.jsonl"), "a", encoding="utf-8")

    def mine(self, item) -> bool:
        path = _file_of(item)
        if path not in self.owner:
            self.owner[path] = _claim(self.directory, path, "child")
        return self.owner[path] == "child"

    def write(self, report) -> None:
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        self.out.write(json.dumps({"nodeid": report.nodeid, "when": report.when, "report": data}) + "\n")
        self.out.flush()

    def end(self) -> None:
        self.out.write(json.dumps({"end": True}) + "\n")
        self.out.close()


class Plugin:
    """The hooks of both sides, registered by the suite's ``conftest``."""

    def __init__(self) -> None:
        self.child_side: ChildSide | None = None

    def pytest_configure(self, config) -> None:
        # Read once and removed: a pytest that a test of the child starts is
        # a session of its own, not the child's.
        global IN_CHILD
        directory = os.environ.pop(CHILD_ENV, None)
        if directory:
            IN_CHILD = True
            self.child_side = ChildSide(directory, config)

    def pytest_collection_finish(self, session) -> None:
        if self.child_side is None:
            start(session, session.items)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if self.child_side is not None:
            return None if self.child_side.mine(item) else True
        return True if run_in_child(item) else None

    def pytest_runtest_logreport(self, report) -> None:
        if self.child_side is not None:
            self.child_side.write(report)

    def pytest_sessionfinish(self, session) -> None:
        if self.child_side is not None:
            self.child_side.end()

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if Split.running is not None:
            terminalreporter.write_line(Split.running.summary())

    def pytest_unconfigure(self, config) -> None:
        if Split.running is not None:
            Split.running.close()
