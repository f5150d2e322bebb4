"""Which lines of ``model/`` a sweep executed (``loomsim sweep --model-coverage``).

The child side (``python -m sim.face.coverage_child OUTFILE -- ARGV...``)
installs this module's tracer (``LineRecorder``), runs the CLI on ARGV (a
sweep's usual child, ``run ... --json``), and writes the ``model/`` lines
it executed to OUTFILE as JSON. The parent (``sim.face.sweep``) merges the children's files and
compares them with the executable lines of every ``model/`` file
(``executable_lines``), which gives the report: the share of ``model/``
executed, per file, and the unreached lines as ranges.

Why a child entry point and not a flag of ``run``: tracing is a concern of
the sweep, not of a run; a run must not know it is traced. The tracer only
observes (``sys.settrace`` changes no value the simulation computes), so a
traced run has the same trace digest as an untraced one; a test checks it.

Why ``sys.settrace`` (Python 3.11 has no ``sys.monitoring``): the global
trace function is called once per frame entry and returns ``None`` for a
frame outside ``model/``, so only model frames pay for line events; the
decision is cached per file name, the line sets per file, so the hot path
is one dict lookup per call and one ``set.add`` per model line.

Executable lines come from the compiled code objects (``co_lines()``,
recursively through nested functions and classes), minus docstrings, the
bodies of stubs that are only ``...`` (a ``Protocol``'s methods: no
behaviour to reach) and ``if TYPE_CHECKING:`` imports. The conformance kits
in ``model/`` (``KIT_PATTERNS``) are reported apart, outside the figure.
"""
from __future__ import annotations

import ast
import fnmatch
import json
import os
import sys
from typing import Any, Callable, Iterable, Mapping

# The checkout's root (sim/face/model_coverage.py -> root) and its model/.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_DIR = os.path.join(ROOT, "model")
FORMAT = "loomsim-model-lines/1"
UNREACHED_SHOWN = 12  # ranges per file in the human report (all of them are in --json)
# Conformance kits live in model/ beside the ports they test, but they are
# test code a store author runs against an adapter (the test suite runs
# them), never the system a sweep simulates: reported apart, not counted.
KIT_PATTERNS = ("conformance*.py", "*_conformance.py")


# -- the child: record executed lines ----------------------------------------------


class LineRecorder:
    """A ``sys.settrace`` tracer that records the lines executed in files
    under ``model_dir`` (absolute paths, as code objects name them)."""

    def __init__(self, model_dir: str = MODEL_DIR) -> None:
        self._prefix = os.path.abspath(model_dir) + os.sep
        # file name -> its local tracer, or None outside model/ (the cache).
        self._tracers: dict[str, Callable | None] = {}
        self.lines: dict[str, set[int]] = {}  # absolute path -> executed line numbers

    def _tracer_for(self, filename: str) -> Callable | None:
        path = os.path.abspath(filename)
        if not path.startswith(self._prefix) or not path.endswith(".py"):
            self._tracers[filename] = None
            return None
        lines = self.lines.setdefault(path, set())
        add = lines.add

        def local(frame: Any, event: str, arg: Any) -> Callable:
            if event == "line":
                add(frame.f_lineno)
            return local

        self._tracers[filename] = local
        return local

    def __call__(self, frame: Any, event: str, arg: Any) -> Callable | None:
        # Called on every frame entry (``call``): only model frames get a
        # local tracer; the others run untraced.
        filename = frame.f_code.co_filename
        try:
            tracer = self._tracers[filename]
        except KeyError:
            tracer = self._tracer_for(filename)
        return tracer

    def start(self) -> None:
        sys.settrace(self)

    def stop(self) -> None:
        sys.settrace(None)

    def to_json(self, root: str = ROOT, *, lost: bool = False) -> dict[str, Any]:
        """The executed lines, by path relative to ``root`` (``model/x.py``);
        ``lost``: the tracer was switched off before the run ended."""
        files = {os.path.relpath(path, root).replace(os.sep, "/"): sorted(lines)
                 for path, lines in sorted(self.lines.items()) if lines}
        return {"format": FORMAT, "files": files, "tracing_lost": lost}


# -- the parent: merge and report ----------------------------------------------------


def read_lines(path: str) -> dict[str, set[int]]:
    """A child's file: ``{relative path: executed lines}`` (empty if missing
    or unreadable: a child that died before writing contributes nothing)."""
    try:
        with open(path, encoding="utf-8") as stream:
            body = json.load(stream)
    except (OSError, ValueError):
        return {}
    if body.get("format") != FORMAT:
        return {}
    return {name: set(lines) for name, lines in body.get("files", {}).items()}


def tracing_lost(path: str) -> bool:
    """Whether the child that wrote ``path`` lost its tracer before the end."""
    try:
        with open(path, encoding="utf-8") as stream:
            return bool(json.load(stream).get("tracing_lost"))
    except (OSError, ValueError, AttributeError):
        return False


def merge(into: dict[str, set[int]], more: Mapping[str, Iterable[int]]) -> None:
    for name, lines in more.items():
        into.setdefault(name, set()).update(lines)


def _code_lines(code: Any) -> set[int]:
    lines = {line for _, _, line in code.co_lines() if line is not None}
    for const in code.co_consts:
        if hasattr(const, "co_lines"):
            lines |= _code_lines(const)
    return lines


def _not_code(tree: ast.AST) -> set[int]:
    """Lines that compile to instructions but are no behaviour: docstrings,
    the bodies of ``...``-only stubs (``Protocol`` methods) and of
    ``if TYPE_CHECKING:``."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            # ``if TYPE_CHECKING:`` imports exist for annotations only.
            for stmt in node.body:
                skip.update(range(stmt.lineno, stmt.end_lineno + 1))
            continue
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            skip.update(range(body[0].lineno, body[0].end_lineno + 1))
            body = body[1:]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and body and all(
                isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and s.value.value is Ellipsis
                for s in body):
            for stmt in body:  # not the ``def`` line itself (``def m(self): ...``): it runs
                skip.update(n for n in range(stmt.lineno, stmt.end_lineno + 1) if n != node.lineno)
    return skip


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def executable_lines(path: str) -> set[int]:
    """The lines of ``path`` that can execute: every line a code object of
    it names (``co_lines()``), minus docstrings and ``...`` stub bodies."""
    with open(path, encoding="utf-8") as stream:
        source = stream.read()
    code = compile(source, path, "exec", dont_inherit=True)
    return _code_lines(code) - _not_code(ast.parse(source, path)) - {0}


def model_files(root: str = ROOT) -> list[str]:
    """Every ``model/`` source file, relative to ``root``, sorted."""
    found = []
    for directory, dirs, files in os.walk(os.path.join(root, "model")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                found.append(os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/"))
    return sorted(found)


def ranges(missing: Iterable[int], executable: set[int]) -> list[str]:
    """``[12, 13, 15, 40]`` -> ``["12-15", "40"]``: consecutive unreached
    lines, joined across lines that cannot execute (blank, comments)."""
    out: list[list[int]] = []
    for line in sorted(missing):
        if out and all(n not in executable for n in range(out[-1][1] + 1, line)):
            out[-1][1] = line
        else:
            out.append([line, line])
    return [f"{a}" if a == b else f"{a}-{b}" for a, b in out]


def is_kit(name: str) -> bool:
    """A conformance kit (``KIT_PATTERNS``): reported, not counted."""
    base = name.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(base, pattern) for pattern in KIT_PATTERNS)


def report(executed: Mapping[str, Iterable[int]], root: str = ROOT) -> dict[str, Any]:
    """The coverage of ``model/`` by ``executed`` (``{relative path: lines}``):
    overall and per file, percentages and the unreached lines as ranges.
    The conformance kits are in ``kits``, outside the overall figure."""
    files, kits = {}, {}
    total_lines = total_hit = 0
    for name in model_files(root):
        executable = executable_lines(os.path.join(root, name))
        hit = executable & set(executed.get(name, ()))
        missing = executable - hit
        entry = {"lines": len(executable), "executed": len(hit),
                 "percent": _percent(len(hit), len(executable)), "unreached": ranges(missing, executable)}
        if is_kit(name):
            kits[name] = entry
            continue
        files[name] = entry
        total_lines += len(executable)
        total_hit += len(hit)
    return {"percent": _percent(total_hit, total_lines), "lines": total_lines, "executed": total_hit,
            "files": files, "kits": kits}


def _percent(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 1) if whole else 100.0


def render(cov: Mapping[str, Any]) -> str:
    """The human report: the overall share, then a line per file (the least
    covered first), with its unreached ranges."""
    lines = [f"model coverage: {cov['percent']:.1f}% of model/ lines executed "
             f"({cov['executed']} of {cov['lines']})"]
    width = max((len(name) for name in cov["files"]), default=0)
    for name, entry in sorted(cov["files"].items(), key=lambda item: (item[1]["percent"], item[0])):
        if not entry["lines"]:
            continue  # an empty __init__.py
        unreached = entry["unreached"]
        shown = ", ".join(unreached[:UNREACHED_SHOWN])
        more = f", ... ({len(unreached) - UNREACHED_SHOWN} more ranges)" if len(unreached) > UNREACHED_SHOWN else ""
        tail = f"  unreached: {shown}{more}" if unreached else ""
        lines.append(f"  {name:<{width}} {entry['percent']:5.1f}% of {entry['lines']:>4}{tail}")
    if cov.get("tracing_lost_seeds"):
        lines.append(f"  tracing stopped early in {cov['tracing_lost_seeds']} seed(s) (a RecursionError switches the "
                     "tracer off): the figure is a floor")
    kits = cov.get("kits") or {}
    if kits:
        shown = ", ".join(f"{name} {entry['percent']:.0f}%" for name, entry in sorted(kits.items()))
        lines.append(f"  not counted (conformance kits, run by the tests): {shown}")
    return "\n".join(lines)

