"""No wall clock, no global randomness, no threads in the simulated path (ARCHITECTURE §2).

Walks the AST of every module under model/, sim/, faults/ and scenarios/ and
fails on imports of nondeterministic modules, calls that read the wall clock
or the OS entropy pool, and sorting by object identity or hash. The face
(``sim/face/run.py``, ``sim/face/shrink.py``, ``sim/face/bench.py``, ``sim/face/sweep.py``,
``sim/face/children.py``, ``sim/face/explore.py``: CPU and wall time of a search, its budget;
``sim/face/branches.py``) and the live
runtime (``sim/live*.py``) are exempt: they measure wall time for reports, give a signalled child its
time to exit, or run on real time on purpose.
"""
from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CHECKED_DIRS = ("model", "sim", "faults", "scenarios")
EXEMPT = ("sim/face/run.py", "sim/face/shrink.py", "sim/face/bench.py", "sim/face/sweep.py", "sim/face/children.py",
          "sim/face/explore.py", "sim/face/branches.py", "sim/live*.py")

BANNED_MODULES = frozenset({"time", "random", "uuid", "threading", "asyncio", "secrets", "datetime"})
# Dotted call names; a call matches if its dotted name equals one or ends with "." + it.
BANNED_CALLS = ("os.urandom", "time.time", "time.monotonic", "datetime.now", "uuid4")
IDENTITY_KEYS = frozenset({"id", "hash"})


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _uses_identity(node: ast.AST) -> bool:
    """``id``/``hash`` as a key function, or a lambda whose body calls them."""
    if isinstance(node, ast.Name) and node.id in IDENTITY_KEYS:
        return True
    if isinstance(node, ast.Lambda):
        return any(isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in IDENTITY_KEYS
                   for sub in ast.walk(node.body))
    return False


def violations_in(source: str, filename: str = "<source>") -> list[str]:
    """Every nondeterminism hazard in ``source``, as ``file:line: what``."""
    tree = ast.parse(source, filename=filename)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in BANNED_MODULES:
                    found.append(f"{filename}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and module.split(".")[0] in BANNED_MODULES:
                found.append(f"{filename}:{node.lineno}: from {module} import ...")
            for alias in node.names:
                if alias.name in ("uuid4", "urandom"):
                    found.append(f"{filename}:{node.lineno}: from {module} import {alias.name}")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name is not None and (name == "urandom" or any(
                    name == banned or name.endswith("." + banned) for banned in BANNED_CALLS)):
                found.append(f"{filename}:{node.lineno}: call {name}()")
            for keyword in node.keywords:
                if keyword.arg == "key" and _uses_identity(keyword.value):
                    found.append(f"{filename}:{node.lineno}: ordering by id()/hash() (key=...)")
    return found


def _is_exempt(relative: str) -> bool:
    return any(fnmatch.fnmatch(relative, pattern) for pattern in EXEMPT)


def _checked_files() -> list[Path]:
    files = []
    for directory in CHECKED_DIRS:
        files.extend(sorted((REPO_ROOT / directory).rglob("*.py")))
    return files


def test_simulated_path_has_no_nondeterminism():
    files = _checked_files()
    checked = 0
    problems = []
    for path in files:
        relative = path.relative_to(REPO_ROOT).as_posix()
        if _is_exempt(relative):
            continue
        checked += 1
        problems.extend(violations_in(path.read_text(encoding="utf-8"), relative))
    assert checked > 0
    assert problems == [], "nondeterminism in the simulated path:\n" + "\n".join(problems)


def test_every_checked_directory_has_modules():
    # Guards against the walk silently checking nothing (a moved tree, a typo).
    for directory in CHECKED_DIRS:
        modules = [p for p in (REPO_ROOT / directory).rglob("*.py")
                   if not _is_exempt(p.relative_to(REPO_ROOT).as_posix())]
        assert modules, directory
    assert (REPO_ROOT / "sim" / "runtime.py").exists()


def test_exemptions_are_exactly_the_face_and_live_modules():
    assert _is_exempt("sim/face/run.py")
    assert _is_exempt("sim/face/shrink.py")
    assert _is_exempt("sim/face/bench.py")
    assert _is_exempt("sim/face/sweep.py")
    assert _is_exempt("sim/face/children.py")
    assert _is_exempt("sim/face/explore.py")
    assert _is_exempt("sim/face/branches.py")
    assert _is_exempt("sim/live.py")
    assert _is_exempt("sim/live_runtime.py")
    for not_exempt in ("sim/runtime.py", "sim/clock.py", "model/runtime.py", "faults/cli.py", "sim/cli.py",
                       "sim/face/cli.py",
                       "sim/face/discovery.py", "sim/face/repro_file.py", "scenarios/live.py", "sim/sub/cli.py",
                       "model/live_store.py"):
        assert not _is_exempt(not_exempt), not_exempt


def test_walker_sees_the_wall_clock_in_the_exempt_run_command():
    # The face really does read the clock: proof the walker would catch it
    # anywhere the exemption does not apply.
    source = (REPO_ROOT / "sim" / "face" / "run.py").read_text(encoding="utf-8")
    assert any(": import time" in v for v in violations_in(source, "sim/face/run.py"))


@pytest.mark.parametrize("source, needle", [
    ("import random\n", "import random"),
    ("import random as r\n", "import random"),
    ("from random import Random\n", "from random import"),
    ("import time\n", "import time"),
    ("from time import monotonic\n", "from time import"),
    ("import uuid\n", "import uuid"),
    ("from uuid import uuid4\n", "uuid4"),
    ("import threading\n", "import threading"),
    ("import asyncio\n", "import asyncio"),
    ("import asyncio.events\n", "import asyncio.events"),
    ("import secrets\n", "import secrets"),
    ("import datetime\n", "import datetime"),
    ("from datetime import datetime\n", "from datetime import"),
    ("def f():\n    import time\n    return time\n", "import time"),
    ("x = time.time()\n", "call time.time()"),
    ("x = time.monotonic()\n", "call time.monotonic()"),
    ("x = os.urandom(8)\n", "call os.urandom()"),
    ("x = datetime.now()\n", "call datetime.now()"),
    ("x = datetime.datetime.now()\n", "call datetime.datetime.now()"),
    ("x = uuid.uuid4()\n", "call uuid.uuid4()"),
    ("x = uuid4()\n", "call uuid4()"),
    ("from os import urandom\nx = urandom(8)\n", "call urandom()"),
    ("xs = sorted(items, key=id)\n", "ordering by id()"),
    ("items.sort(key=hash)\n", "ordering by id()/hash()"),
    ("xs = sorted(items, key=lambda x: (x.t, id(x)))\n", "ordering by id()"),
    ("first = min(items, key=lambda x: hash(x.name))\n", "ordering by id()/hash()"),
])
def test_walker_catches_planted_violations(source, needle):
    found = violations_in(source, "planted.py")
    assert any(needle in v for v in found), found
    assert all(v.startswith("planted.py:") for v in found)


@pytest.mark.parametrize("source", [
    "import hashlib\nimport heapq\n",
    "from sim.clock import MS_PER_DAY\n",
    "from sim import rng\nrng.Stream(1).below(3)\n",
    "x = runtime.now_ms()\n",
    "xs = sorted(items, key=lambda x: x.name)\n",
    "seen = {id(x) for x in items}\n",  # identity for a cycle check, not for order
    "ok = hash_value == 3\nkey = 'id'\n",
    "from .time_utils import parse\n",
    "import timeit_like_name\n",
    "# import random\n'''import time'''\n",
])
def test_walker_leaves_clean_code_alone(source):
    assert violations_in(source) == []
