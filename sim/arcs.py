"""Branch arcs taken in one directory's code, via ``sys.monitoring`` (Python 3.12+).

``ArcMonitor(root)`` records, while it is on, each branch instruction of
code whose file lies under ``root`` (``loomsim explore`` gives it
``model/``) as the arc ``<file relative to root's parent>:<from line>-><to
line>`` it took. Each location is reported once per run: its callback
returns ``sys.monitoring.DISABLE`` after the first sight (so an arc is the
direction a branch took first in the run), and code elsewhere is disabled
at its first event. ``start`` re-enables every location
(``restart_events``); ``stop`` switches the events off and frees the tool
id, so nothing is left on after a run.

It only observes: the run reads nothing it records, so a monitored run has
the trace digest of one without. ``start`` empties the monitored modules'
memos (``_MEMOS``), which only save work, so a run's arcs do not depend on
what ran before it in the process. On Python 3.11 (no ``sys.monitoring``)
``available()`` is False and the family is simply absent.
"""
from __future__ import annotations

import os
import sys
from typing import Any

TOOL_NAME = "loomsim-explore-arcs"
# Tool ids tried in turn (0-5 exist; 1 is coverage.py's and 2 a profiler's by convention).
TOOL_IDS = (4, 3, 0, 5)


def available() -> bool:
    return hasattr(sys, "monitoring")


class ArcMonitor:
    """Arcs of code under ``root`` taken between ``start`` and ``stop``."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root) + os.sep
        self._base = os.path.dirname(os.path.dirname(self.root))  # names are relative to root's parent
        self.arcs: set[str] = set()
        self._lines: dict[Any, dict[int, int]] = {}  # code object -> instruction offset -> line
        self._tool: int | None = None

    def start(self) -> bool:
        """Switch branch events on; False (nothing recorded) if no tool id is free or no ``sys.monitoring``."""
        if not available() or self._tool is not None:
            return False
        monitoring = sys.monitoring
        for tool in TOOL_IDS:
            try:
                monitoring.use_tool_id(tool, TOOL_NAME)
            except ValueError:  # taken by another tool
                continue
            self._tool = tool
            break
        else:
            return False
        self.arcs = set()
        self._drop_memos()
        monitoring.register_callback(self._tool, monitoring.events.BRANCH, self._branch)
        monitoring.set_events(self._tool, monitoring.events.BRANCH)
        monitoring.restart_events()
        return True

    def _drop_memos(self) -> None:
        """Empty the memos of the modules under ``root`` (``_MEMOS``: what their
        code keeps between calls, e.g. ``model.canonical``'s member-order
        plans), so the arcs of a run do not depend on the runs made before
        it in this process. A memo only saves work: no digest changes."""
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None) or ""
            if path.startswith(self.root):
                for memo in getattr(module, "_MEMOS", ()):
                    memo.clear()

    def stop(self) -> frozenset[str]:
        """Switch the events off, free the tool id; the arcs recorded."""
        if self._tool is not None:
            monitoring = sys.monitoring
            monitoring.set_events(self._tool, 0)
            monitoring.register_callback(self._tool, monitoring.events.BRANCH, None)
            monitoring.free_tool_id(self._tool)
            self._tool = None
        return frozenset(self.arcs)

    def _branch(self, code: Any, offset: int, destination: int) -> Any:
        if not code.co_filename.startswith(self.root):
            return sys.monitoring.DISABLE
        lines = self._lines.get(code)
        if lines is None:
            lines = self._lines[code] = {}
            for start, end, line in code.co_lines():
                if line is not None:
                    for at in range(start, end, 2):
                        lines[at] = line
        name = os.path.relpath(code.co_filename, self._base)
        self.arcs.add(f"arc:{name}:{lines.get(offset, 0)}->{lines.get(destination, 0)}")
        return sys.monitoring.DISABLE


class ArcObserver:
    """An ``ArcMonitor`` as a ``sim.explore.Observer``: on from ``attach`` to ``features``/``close``."""

    def __init__(self, root: str) -> None:
        self._monitor = ArcMonitor(root)
        self._arcs: frozenset[str] = frozenset()

    def attach(self, world: Any) -> None:
        self._monitor.start()

    def features(self) -> frozenset[str]:
        self._arcs = self._arcs | self._monitor.stop()
        return self._arcs

    def close(self) -> None:
        self._monitor.stop()
