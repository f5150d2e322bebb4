"""The house shows its structure: what ``scenarios/`` holds, and where.

The top of ``scenarios/`` holds only the author's face, the registry and the
System's wiring; everything else lives in a subpackage whose name says what
it holds (``stacks/``, ``workloads/``, ``adversaries/``, and the oracles
``invariants/`` and ``reference/``). No module grows past ``LINES_MAX``, and
the adversaries define each helper once (in ``adversaries/common.py``).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
# The author's face, the registry, the System's wiring (and stacks read from files).
TOP_MODULES = {"__init__.py", "api.py", "registry.py", "system.py", "storage.py", "user_stores.py", "stackfile.py"}
SUBPACKAGES = {"stacks", "workloads", "adversaries", "invariants", "reference"}
LINES_MAX = 1_200


def misplaced(directory: Path) -> list[str]:
    """What the top of ``directory`` holds beyond the allowed modules and subpackages."""
    found = []
    for path in sorted(directory.iterdir()):
        if path.name == "README.md" or path.name.startswith(".") or path.name == "__pycache__":
            continue
        allowed = SUBPACKAGES if path.is_dir() else TOP_MODULES
        if path.name not in allowed:
            found.append(path.name)
    return found


def oversized(directory: Path, limit: int = LINES_MAX) -> list[str]:
    """The modules under ``directory`` longer than ``limit`` lines."""
    found = []
    for path in sorted(directory.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > limit:
            found.append(f"{path.relative_to(directory)}: {lines} lines")
    return found


def helpers_defined_twice(directory: Path) -> list[str]:
    """Module-level functions defined under the same name in two modules of ``directory``."""
    where: dict[str, list[str]] = {}
    for path in sorted(directory.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                where.setdefault(node.name, []).append(path.name)
    return [f"{name}: {', '.join(files)}" for name, files in sorted(where.items()) if len(files) > 1]


def test_the_top_of_scenarios_holds_only_the_face_the_registry_and_the_system():
    assert not misplaced(SCENARIOS)
    assert set(SUBPACKAGES) <= {path.name for path in SCENARIOS.iterdir() if path.is_dir()}
    for package in SUBPACKAGES:
        assert (SCENARIOS / package / "__init__.py").is_file(), package


def test_no_module_of_scenarios_is_over_the_line_budget():
    assert not oversized(SCENARIOS)


def test_the_adversaries_define_each_helper_once():
    assert not helpers_defined_twice(SCENARIOS / "adversaries")


def test_the_checks_see_what_they_guard_against(tmp_path):
    (tmp_path / "api.py").write_text("")
    (tmp_path / "adversary_ports.py").write_text("def _typed(error):\n    return True\n")
    (tmp_path / "adversary.py").write_text("import x\n\n\ndef _typed(error):\n    return False\n" + "x = 1\n" * 20)
    (tmp_path / "stacks").mkdir()
    assert misplaced(tmp_path) == ["adversary.py", "adversary_ports.py"]
    assert oversized(tmp_path, limit=20) == ["adversary.py: 25 lines"]
    assert helpers_defined_twice(tmp_path) == ["_typed: adversary.py, adversary_ports.py"]
