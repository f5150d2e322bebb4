"""The face's modules share only public names, and none of them reaches into the CLI.

Walks the AST of every module of ``sim/face/`` and fails on (a) an import of
a name starting with ``_`` from another ``sim.face`` module (or such a name
read off an imported face module: ``cli._options``), (b) an import of
``sim.face.cli`` (the commands) from any face module but the CLI itself. A
module's own ``main`` (what ``python -m`` runs) is an entry point and may
run the CLI: ``model_coverage``'s runs it under the line tracer.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FACE = REPO_ROOT / "sim" / "face"
CLI = "sim.face.cli"


def _imports(tree: ast.AST) -> list[tuple[ast.AST, str, list[str], str | None]]:
    """Every import of ``tree``: (node, module, names, enclosing top-level function)."""
    found = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if function is None and isinstance(child, ast.FunctionDef) else function
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append((child, alias.name, [], function))
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [alias.name for alias in child.names]
                if child.module == "sim.face":  # ``from sim.face import cli``: the module itself
                    for name in names:
                        found.append((child, f"sim.face.{name}", [], function))
                else:
                    found.append((child, child.module, names, function))
            visit(child, inner)

    visit(tree, None)
    return found


def violations(source: str, filename: str) -> list[str]:
    """What ``source`` (the face module ``filename``) does against the layout."""
    own = "sim.face." + Path(filename).stem
    found = []
    for node, module, names, function in _imports(ast.parse(source, filename=filename)):
        if not module.startswith("sim.face") or module == own:
            continue
        private = [name for name in names if name.startswith("_")]
        if private:
            found.append(f"{filename}:{node.lineno}: from {module} import {', '.join(private)} (private)")
        if module == CLI and own != CLI and function != "main":
            found.append(f"{filename}:{node.lineno}: imports {CLI}")
    tree = ast.parse(source, filename=filename)
    bound = {alias.asname or alias.name for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "sim.face"
             for alias in node.names if f"sim.face.{alias.name}" != own}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{filename}:{node.lineno}: {node.value.id}.{node.attr} (private)")
    return found


def test_face_modules_share_only_public_names_and_do_not_import_the_cli():
    modules = sorted(FACE.glob("*.py"))
    assert len(modules) > 10 and (FACE / "cli.py") in modules
    found = [v for path in modules
             for v in violations(path.read_text(encoding="utf-8"), f"sim/face/{path.name}")]
    assert not found, "\n".join(found)


def test_the_walker_sees_what_it_forbids():
    assert violations("from sim.face.sweep import _child\n", "sim/face/mutants.py")
    assert violations("def f():\n    from sim.face.cli import UsageError\n", "sim/face/shards.py")
    assert violations("from sim.face import cli\n", "sim/face/failures.py")
    assert violations("import sim.face.cli\n", "sim/face/failures.py")
    assert violations("from sim.face import sweep\nsweep._child(job)\n", "sim/face/mutants.py")
    assert violations("def main():\n    from sim.face.cli import _short\n", "sim/face/model_coverage.py")
    # what stays allowed: public names, the CLI's own imports, an entry point's ``main``, a module's own names
    assert not violations("from sim.face.sweep import render\n", "sim/face/shards.py")
    assert not violations("from sim.face.options import UsageError\n", "sim/face/cli.py")
    assert not violations("def main():\n    from sim.face import cli\n", "sim/face/model_coverage.py")
    assert not violations("from sim.face.cli import _main\n", "sim/face/cli.py")
