"""loomsim in a project's own tests: ``from sim import testing as loomsim``.

::

    @loomsim.seeds("0:5", scenario="sentinel-year", duration="1d")
    def test_the_year_holds(loomsim_result):
        assert loomsim_result.stats["wakes"] > 0

The test runs once per seed (``seed-0`` ... ``seed-4``), ``loomsim_result``
the ``sim.runner.RunResult`` of that seed, run in the test's process. A
failing run fails the test before its body runs, with the invariant, the
trace excerpt, the repro command and the repro file (written to
``--loomsim-repro-dir``), unless ``expect_failure=True``: a test that checks
a planted bug is caught then gets the failing result to look at.

This module is only the marker (it imports nothing of loomsim's): the
pytest plugin, ``sim.face.pytest_plugin``, validates its arguments at collection
and runs the seeds.
"""
from __future__ import annotations

from typing import Any, Sequence

import pytest

MARKER = "loomsim"


def seeds(spec: str, *, scenario: str, duration: str | None = None, store: str = "memory",
          mutant: str | None = None, expect_failure: bool = False, scenario_modules: Sequence[str] = ()) -> Any:
    """A marker: run the test once per seed of ``spec`` (``"A:B"``, B
    exclusive, or one seed ``"7"``) of ``scenario`` for ``duration`` (a
    loomsim duration such as ``2h``, ``1d``; default: the scenario's) on
    ``store`` (``memory``, ``sqlite`` or a user's adapter factory
    ``MODULE:FACTORY``), with the planted bug ``mutant`` if given.
    ``scenario_modules``: modules to import for their scenarios (as
    ``loomsim --scenarios``), e.g. the one that registers ``scenario``.
    ``expect_failure``: a failing run is handed to the test instead of
    failing it."""
    return pytest.mark.loomsim(spec, scenario=scenario, duration=duration, store=store, mutant=mutant,
                               expect_failure=expect_failure, scenario_modules=tuple(scenario_modules))
