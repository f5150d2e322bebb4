"""The direction of imports (ARCHITECTURE §1), walked over the source.

model/ is the system under test and never imports the harness; the engine
(sim/ outside sim/face/) imports nothing above it; faults/ never reaches the
scenarios or the face; examples/ import only the author's face.
"""
from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = ("sim", "model", "faults", "scenarios", "reports", "examples", "tests")
# folder -> project packages it must never import (a prefix match on the dotted name)
FORBIDDEN = {
    "model": ("sim", "faults", "scenarios", "reports", "examples", "tests"),
    "sim": ("model", "faults", "scenarios", "reports", "sim.face", "examples", "tests"),
    "faults": ("scenarios", "reports", "sim.face", "examples", "tests"),
    "scenarios": ("reports", "sim.face", "examples", "tests"),
    "reports": ("model", "faults", "scenarios", "sim.face", "examples", "tests"),
}
# The face and ``python -m sim`` are the top of the house.
EXEMPT = ("sim/face/", "sim/__main__.py")


def _modules(folder: str):
    for directory, _, files in os.walk(os.path.join(ROOT, folder)):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                yield os.path.relpath(path, ROOT).replace(os.sep, "/"), path


def _imports(path: str) -> list[str]:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _hits(name: str, forbidden: tuple[str, ...]) -> bool:
    return any(name == f or name.startswith(f + ".") for f in forbidden)


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_no_import_points_the_wrong_way(folder):
    wrong = []
    for rel, path in _modules(folder):
        if rel.startswith(EXEMPT):
            continue
        wrong.extend(f"{rel} imports {name}" for name in _imports(path) if _hits(name, FORBIDDEN[folder]))
    assert not wrong, wrong


def test_examples_import_only_the_authors_face():
    imported = {name for _, path in _modules("examples") for name in _imports(path)}
    project = {name for name in imported if name.split(".")[0] in PROJECT}
    assert project == {"scenarios.api"}, project


def test_the_walker_sees_an_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import sim.runner\nfrom faults.plan import FaultPlan\n")
    assert _imports(str(planted)) == ["sim.runner", "faults.plan"]
    assert _hits("faults.plan", FORBIDDEN["model"]) and not _hits("simulate", ("sim",))


def test_the_command_line_imports_trio_and_networkx_only_when_a_command_uses_them():
    """Every seed of a sweep is a process: what ``sim.face.cli`` imports is
    paid per seed. trio (live mode) and networkx (the history checker's
    graphs) are named lazily (``sim.lazy``) and executed at first use."""
    import subprocess
    import sys

    probe = ("import sys, sim.face.cli, scenarios.reference.history as h\n"
             "print(sorted(n for n in ('trio', 'networkx') if n in sys.modules\n"
             "             and type(sys.modules[n]).__name__ != '_LazyModule'))\n"
             "h.nx.DiGraph()\n"
             "print(type(sys.modules['networkx']).__name__)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1])).stdout.split("\n")
    assert out[0] == "[]", out
    assert out[1] == "module", out  # loaded in full at its first use
