"""Reports of a run or a sweep: ``loomsim ... --report DIR``.

``write_report(directory, body)`` renders a result body — a run's
``loomsim-result/1`` JSON or any sweep's ``loomsim-sweep/1`` summary (a
sweep's own, a merge of sharded sweeps) — into four files:

- ``loomsim-report.json``: the body as given;
- ``loomsim-report.md``: a CI job summary (``$GITHUB_STEP_SUMMARY``), the
  verdict on its first line (``reports.markdown``);
- ``loomsim-junit.xml``: JUnit XML, a testsuite per scenario and a testcase
  per seed (``reports.junit``);
- ``loomsim-report.html``: one self-contained page with the SVG timeline
  (``reports.html``, ``reports.svg``).

A report is an artifact and is never overwritten: if any of the four names
is taken, the set takes the next suffix free for all four
(``loomsim-report-2.html`` with ``loomsim-junit-2.xml`` ...), each file
created exclusively. Everything is rendered before the first file exists,
so a rendering error leaves nothing behind.

Rendering works from the JSON dicts alone and imports only ``sim``'s result
constants (and the artifact naming of ``sim.face.repro_file``): a saved
result can be rendered again without the scenarios that made it.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping

from reports.html import render_html
from reports.junit import render_junit
from reports.markdown import render_markdown
from reports.verdict import ReportBodyError, kind_of
from sim.artifacts import FREE_NAMES_MAX, free_path

HTML_NAME = "loomsim-report.html"
MARKDOWN_NAME = "loomsim-report.md"
JUNIT_NAME = "loomsim-junit.xml"
JSON_NAME = "loomsim-report.json"

__all__ = ["ReportBodyError", "ReportDirError", "check_report_dir", "report_line", "write_report"]


class ReportDirError(Exception):
    """A report directory that cannot be made or written (one line)."""


def check_report_dir(directory: str) -> None:
    """Before a run: a report can be written into ``directory`` (an existing
    writable directory, or one ``write_report`` can make under its nearest
    existing, writable ancestor), so that the run's end never finds out.
    Nothing is made here: a command refused later leaves nothing behind."""
    if not directory:
        raise ReportDirError("the report directory is empty")
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ReportDirError(f"{directory!r} is not a directory")
    existing = os.path.abspath(directory)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ReportDirError(f"{directory!r} cannot be created: {existing!r} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ReportDirError(f"{directory!r} is not writable" if existing == os.path.abspath(directory)
                             else f"{directory!r} cannot be created: {existing!r} is not writable")


def _json(body: Mapping[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False, indent=1) + "\n"


_FORMATS: tuple[tuple[str, Callable[[Mapping[str, Any]], str]], ...] = (
    (HTML_NAME, render_html), (MARKDOWN_NAME, render_markdown), (JUNIT_NAME, render_junit), (JSON_NAME, _json))


def write_report(directory: str, body: Mapping[str, Any]) -> list[str]:
    """Write the report set of ``body`` into ``directory`` (made if
    missing) at the first suffix free for every file; return the paths,
    the HTML first. Raises ``ReportBodyError`` (not a result body) or
    ``OSError``."""
    kind_of(body)
    texts = [(name, render(body)) for name, render in _FORMATS]
    os.makedirs(directory, exist_ok=True)
    for attempt in range(1, FREE_NAMES_MAX + 1):
        opened: list[tuple[str, int]] = []
        try:
            for name, _ in texts:
                path = free_path(os.path.join(directory, name), attempt)
                opened.append((path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)))
        except FileExistsError:
            _discard(opened)  # only the empty files this attempt made
            continue
        except OSError:
            _discard(opened)
            raise
        pending = [fd for _, fd in opened]
        try:
            for (path, fd), (_, text) in zip(opened, texts):
                pending.remove(fd)
                # A lone surrogate (an adversary's key) is written as its \uXXXX escape.
                with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
                    handle.write(text)
        finally:
            for fd in pending:  # a write failed (a full disk): what is written stays, nothing leaks
                os.close(fd)
        return [path for path, _ in opened]
    raise FileExistsError(f"{os.path.join(directory, HTML_NAME)} and {FREE_NAMES_MAX - 1} numbered sets after it "
                          "all exist")


def _discard(opened: list[tuple[str, int]]) -> None:
    for path, fd in opened:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass


def report_line(paths: list[str]) -> str:
    """``report: DIR/loomsim-report.html (+ loomsim-report.md, ...)``: the one line a command prints."""
    head, *rest = paths
    return f"report: {head}" + (f" (+ {', '.join(os.path.basename(p) for p in rest)})" if rest else "")
