"""A module that is imported on its first use, not where it is named.

``loomsim`` starts a Python process for every seed a sweep runs, so what the
command line imports is paid once per seed. Two dependencies only some
commands need are heavy to import (trio, for ``loomsim live``; networkx,
for the history checker's dependency graphs): their modules name them with
``lazy_import`` and the import happens at the first attribute read. This is
the standard library's ``importlib.util.LazyLoader`` recipe.
"""
from __future__ import annotations

import importlib.util
import sys
import types


def lazy_import(name: str) -> types.ModuleType:
    """The module ``name``, executed at its first attribute access (at once
    when it is imported already)."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
