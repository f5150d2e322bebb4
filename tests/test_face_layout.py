"""The face's modules share only public names, import no circle, and each command is its own module.

Walks the AST of every module of ``sim/face/`` and fails on (a) an import of
a name starting with ``_`` from another ``sim.face`` module (or such a name
read off an imported face module: ``cli._options``), (b) an import of
``sim.face.cli`` (the dispatcher) from any face module but the CLI itself,
(c) a circle of imports among the face's modules, counting the imports
inside functions (a lazy import is still a dependency). A module's own
``main`` (what ``python -m`` runs) is an entry point and may run the CLI:
``coverage_child``'s runs it under the line tracer. And ``cli.py`` is the
dispatcher only: every command is a module of its own with
``add_parser(sub)`` and ``command(args)``; only ``children.py`` starts
processes (the children of sweep, mutants, check-determinism and bench).
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


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """``{face module: the face modules it imports}`` (by stem), every
    import counted, at the top or inside a function."""
    graph: dict[str, set[str]] = {}
    for stem, source in sources.items():
        deps = set()
        for _, module, _, _ in _imports(ast.parse(source)):
            if module.startswith("sim.face."):
                deps.add(module.split(".")[2])
        graph[stem] = deps - {stem}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (one per import that closes one), each
    as a path back to its start: a depth-first walk, an import of a module
    still on the walk's path closes a circle."""
    found: list[list[str]] = []
    done: set[str] = set()

    def walk(node: str, path: list[str]) -> None:
        for dep in sorted(graph.get(node, ())):
            if dep in path:
                found.append([*path[path.index(dep):], dep])
            elif dep not in done:
                walk(dep, [*path, dep])
        done.add(node)

    for start in sorted(graph):
        if start not in done:
            walk(start, [start])
    return found


def test_no_import_circle_among_the_face_modules():
    sources = {path.stem: path.read_text(encoding="utf-8") for path in sorted(FACE.glob("*.py"))}
    found = circles(import_graph(sources))
    assert not found, "\n".join(" -> ".join(circle) for circle in found)


def test_the_circle_finder_sees_a_lazy_import():
    sources = {"a": "from sim.face import b\n", "b": "def f():\n    from sim.face.c import g\n",
               "c": "import sim.face.a\n", "d": "from sim.face.a import x\n"}
    assert circles(import_graph(sources)) == [["a", "b", "c", "a"]]
    sources["c"] = "from sim.face.d import y\n"
    sources["d"] = "import os\n"
    assert not circles(import_graph(sources))


# The dispatcher's own functions: everything else in cli.py would be a command's body.
DISPATCHER = {"main", "_main", "build_parser", "version"}


def test_the_cli_is_only_the_dispatcher():
    tree = ast.parse((FACE / "cli.py").read_text(encoding="utf-8"))
    functions = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert functions <= DISPATCHER, f"cli.py defines {sorted(functions - DISPATCHER)}: a command's body"
    calls = {node.func.attr for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert "add_argument" not in calls, "cli.py adds a command's flags"


def test_every_command_is_a_module_with_add_parser_and_command():
    import argparse

    from sim.face import cli
    from sim.face.options import root_parser

    parser = cli.build_parser()
    (sub,) = (action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    assert list(sub.choices) == list(cli.COMMANDS)  # every command the parser knows is dispatched
    modules = [module.__name__ for module in cli.COMMANDS.values()]
    assert len(set(modules)) == len(modules) and cli.__name__ not in modules  # one module per command
    for name, module in cli.COMMANDS.items():
        assert callable(module.add_parser) and callable(module.command), module.__name__
        _, alone = root_parser()
        module.add_parser(alone)
        assert list(alone.choices) == [name], module.__name__  # the module adds its command, and only it


# What starts a process: only the face's one child-process module calls these.
STARTERS = {"subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
            "subprocess.check_output", "os.system", "os.fork", "os.posix_spawn", "os.execv", "os.execve",
            "os.spawnv", "os.spawnve", "os.popen"}


def process_starts(source: str, filename: str) -> list[str]:
    """The calls of ``source`` that start a process (``subprocess.Popen(...)``, ``os.system(...)``, ...)."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and f"{node.func.value.id}.{node.func.attr}" in STARTERS:
            found.append(f"{filename}:{node.lineno}: {node.func.value.id}.{node.func.attr}")
    return found


def test_only_the_child_process_module_starts_processes():
    found = [start for path in sorted(FACE.glob("*.py")) if path.name != "children.py"
             for start in process_starts(path.read_text(encoding="utf-8"), f"sim/face/{path.name}")]
    assert not found, "\n".join(found)
    assert process_starts((FACE / "children.py").read_text(encoding="utf-8"), "sim/face/children.py")
    assert process_starts("import subprocess\nsubprocess.run(['x'])\n", "sim/face/bench.py")
    assert not process_starts("import subprocess\nexcept_ = subprocess.TimeoutExpired\n", "sim/face/sweep.py")
