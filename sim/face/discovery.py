"""Scenario discovery: importing the modules that register a user's scenarios.

A scenario registers itself when its module is imported (the ``@scenario``
decorator of ``scenarios.registry``), so discovering scenarios is importing
modules. Two sources, both loaded before any scenario is looked up:

* ``loomsim --scenarios MODULE`` (repeatable, before the command): a module
  of the user's, e.g. ``examples.two_cadences`` run from their checkout. The
  current directory is made importable for it (as ``python -m`` does).
* Every entry point of the group ``loomsim.scenarios`` (an installed
  package's ``[project.entry-points."loomsim.scenarios"]``), whose value
  names the module to import.

Children get the same modules: ``sweep`` passes ``--scenarios`` on to each
seed's process (which loads the entry points itself), and a repro file
records the ``--scenarios`` modules (``scenario_modules``) so that
``repro`` and ``shrink`` load them again.

A module that cannot be imported, or that raises while importing, is a
``ScenarioModuleError``: one line, which the CLI reports as a usage error.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from typing import Iterable

ENTRY_POINT_GROUP = "loomsim.scenarios"

_entry_points_loaded: tuple[str, ...] | None = None


class ScenarioModuleError(Exception):
    """A scenario module could not be loaded (one line: ``cannot load
    scenario module 'x': <reason>``)."""

    def __init__(self, module: str, reason: str, *, source: str = "") -> None:
        self.module = module
        self.reason = reason
        self.source = source  # "" for --scenarios, else where the name came from
        where = f" ({source})" if source else ""
        super().__init__(f"cannot load scenario module {module!r}{where}: {reason}")


def load(modules: Iterable[str] = (), *, source: str = "") -> tuple[str, ...]:
    """Load the built-in scenarios, the ``loomsim.scenarios`` entry points,
    then ``modules`` (the ``--scenarios`` ones); return ``modules`` in
    order, each once. Built-ins first: a user scenario that takes a built-in
    name fails as its own module's error, not later at a lookup."""
    from scenarios import registry

    registry.all_scenarios()
    load_entry_points()
    return load_modules(modules, source=source)


def load_modules(modules: Iterable[str], *, source: str = "") -> tuple[str, ...]:
    """Import each of ``modules`` (the current directory importable); return
    them in order, each once. ``source`` says where the names came from, for
    the error (e.g. ``named by repro file 'x.json'``)."""
    names = unique(modules)
    if names:
        ensure_cwd_importable()
    for name in names:
        _import(name, source)
    return names


def load_entry_points() -> tuple[str, ...]:
    """Import the module of every ``loomsim.scenarios`` entry point (once per
    process); return their names."""
    global _entry_points_loaded
    if _entry_points_loaded is not None:
        return _entry_points_loaded
    loaded = []
    points = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda p: (p.name, p.value))
    for point in points:
        if point.value in loaded:
            continue  # the same distribution seen twice on the path
        module = point.module
        try:
            if point.attr:
                point.load()  # the module, and the attribute it names (a typo fails here)
            else:
                importlib.import_module(module)
        except (Exception, SystemExit) as error:  # noqa: BLE001 - reported in one line
            raise ScenarioModuleError(module, _reason(module, error),
                                      source=f"entry point {point.name!r} of {ENTRY_POINT_GROUP}") from None
        loaded.append(point.value)
    _entry_points_loaded = tuple(loaded)
    return _entry_points_loaded


def ensure_cwd_importable() -> None:
    """Put the current directory first on ``sys.path`` unless it is there
    (the ``loomsim`` script's ``sys.path`` starts at its own directory)."""
    cwd = os.getcwd()
    real = os.path.realpath(cwd)
    for entry in sys.path:
        if os.path.realpath(entry or os.curdir) == real:
            return
    sys.path.insert(0, cwd)
    importlib.invalidate_caches()


def unique(modules: Iterable[str]) -> tuple[str, ...]:
    """``modules`` in order, each once."""
    return tuple(dict.fromkeys(modules))


def _import(name: str, source: str) -> None:
    try:
        importlib.import_module(name)
    except (Exception, SystemExit) as error:  # noqa: BLE001 - reported in one line
        raise ScenarioModuleError(name, _reason(name, error), source=source) from None


def _reason(name: str, error: BaseException) -> str:
    if isinstance(error, ImportError):
        text = str(error)
    elif isinstance(error, SyntaxError):
        text = f"SyntaxError: {error.msg} ({error.filename}, line {error.lineno})"
    elif isinstance(error, SystemExit):
        text = f"it exited while importing (SystemExit: {error.code!r})"
    else:
        text = f"{type(error).__name__}: {error}"
    text = " ".join(text.split()) or type(error).__name__
    if isinstance(error, (ImportError, ValueError, TypeError)) and (name.endswith(".py") or "/" in name
                                                                     or os.sep in name):
        text += "; give a module name (e.g. examples.two_cadences), not a file path"
    return text
