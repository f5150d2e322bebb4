"""loomsim's pytest plugin (entry point ``pytest11``: ``loomsim = "sim.face.pytest_plugin"``).

Seeds as test items::

    pytest --loomsim-seeds 0:20 [--loomsim-scenario NAME ...] [--loomsim-duration 1d]
           [--loomsim-store memory|sqlite|MODULE:FACTORY] [--loomsim-mutant NAME]
           [--loomsim-scenarios MODULE ...] [--loomsim-repro-dir DIR]
           [--loomsim-failure-db DIR|none] [--loomsim-only]

adds one item per (scenario, seed), ``loomsim::sentinel-year::seed-7``
(default: every registered scenario, each at its sweep duration, as a
``loomsim sweep`` seed), run in the test process by ``sim.runner.run`` with
the options ``loomsim run`` would build (``sim.face.failures.run_in_process``
parses a ``run`` command line with the CLI's own parser). A failing item
says the invariant and simulated time, its message, the related trace
events, the repro command and the repro file (written to
``--loomsim-repro-dir``, never over another), and saves the failure in the
failure database (``sim.face.failures``). The saved failures of the selected
scenarios run first, as ``loomsim::saved::<file>`` items: one that still
fails fails; one fixed (removed from the database) or no longer applying
(moved to ``stale/``) passes and is listed in the terminal summary.

Which items: with ``--loomsim-seeds`` and no test paths on the command line
(in this repository ``testpaths`` would otherwise add the project's tests),
or with ``--loomsim-only``, only the loomsim items are collected (no test
file is even imported); with test paths given, both. ``-k``, ``-x`` and
``--lf`` work on the items as on any other.

A project's own tests use the marker of ``sim.testing``
(``@loomsim.seeds("0:5", scenario="sentinel-year", duration="1d")`` and the
``loomsim_result`` fixture): one item per seed, a failing run failing the
item before its body runs unless ``expect_failure=True``. Marker seeds are
the test's own, run every time: they write repro files but are not saved to
the database.

What the CLI accepts, the plugin accepts, through the CLI's own code: a
user's store adapter (``--loomsim-store MODULE:FACTORY``, the marker's
``store=``), checked before any seed runs (``scenarios.user_stores``), and
a user's scenario modules (``--loomsim-scenarios MODULE``, repeatable, the
ini option ``loomsim_scenarios``, the marker's ``scenario_modules=``),
loaded by ``sim.face.discovery`` and passed on as ``--scenarios`` to every
run, so its repro command and file name them.

Without ``--loomsim-seeds`` and without the marker the plugin adds options
and the marker's name and nothing else: it imports nothing of loomsim's
until it is asked to run something.
"""
from __future__ import annotations

import os
from typing import Any

import pytest

from sim.testing import MARKER

EXCERPT_LINES = 12  # the related trace events a failure shows (the repro file has them all)
_STATE = pytest.StashKey["_Session"]()
_MARKER_FAILURE = pytest.StashKey[str]()


class LoomsimFailure(Exception):
    """A failing run: its message is the whole report (no traceback)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("loomsim", "loomsim deterministic simulation seeds")
    group.addoption("--loomsim-seeds", default=None, metavar="A:B",
                    help="run seeds A (inclusive) to B (exclusive) of each scenario as test items")
    group.addoption("--loomsim-scenario", action="append", default=[], metavar="NAME",
                    help="only this scenario (repeatable; default: every registered scenario)")
    group.addoption("--loomsim-duration", default=None, metavar="DURATION",
                    help="simulated duration of each seed: 2h, 1d, 30d (default: the scenario's sweep duration)")
    group.addoption("--loomsim-store", default="memory", metavar="STORE",
                    help="store backend of the seeds: memory (default), sqlite, or MODULE:FACTORY (a store "
                         "adapter factory, as loomsim run --store)")
    group.addoption("--loomsim-scenarios", action="append", default=[], metavar="MODULE",
                    help="import MODULE to register its scenarios (repeatable; as loomsim --scenarios)")
    parser.addini("loomsim_scenarios", type="linelist", default=[],
                  help="modules to import for their scenarios (as --loomsim-scenarios)")
    group.addoption("--loomsim-mutant", default=None, metavar="NAME",
                    help="run the seeds (and the saved failures) with the planted bug NAME")
    group.addoption("--loomsim-repro-dir", default=".", metavar="DIR",
                    help="where a failing seed writes its repro file (default: the current directory)")
    group.addoption("--loomsim-failure-db", default=None, metavar="DIR",
                    help="the failure database (default $LOOMSIM_FAILURE_DB or .loomsim; none: off)")
    group.addoption("--loomsim-only", action="store_true",
                    help="collect only the loomsim items, even with test paths given")


class _Session:
    """What ``--loomsim-*`` asked for, validated, and what the saved
    failures' replays found (for the terminal summary)."""

    def __init__(self, config: pytest.Config) -> None:
        option = config.option
        self.seeds = _parse_seeds(option.loomsim_seeds)
        self.modules = _load_scenario_modules([*config.getini("loomsim_scenarios"), *option.loomsim_scenarios])
        self.scenarios = _scenario_names(option.loomsim_scenario)
        self.duration = option.loomsim_duration
        if self.duration is not None:
            _check_duration(self.duration)
        self.store = _check_store(option.loomsim_store)
        self.mutant = option.loomsim_mutant
        if self.mutant is not None:
            _check_mutant(self.mutant)
        self.repro_dir = option.loomsim_repro_dir
        if not os.path.isdir(self.repro_dir):
            raise pytest.UsageError(f"--loomsim-repro-dir {self.repro_dir!r} is not a directory")
        from sim.face import failures

        self.db = failures.open_db(option.loomsim_failure_db)
        no_paths = config.args_source != pytest.Config.ArgsSource.ARGS
        self.only = option.loomsim_only or no_paths
        self.replays: list[Any] = []

    def run_argv(self, scenario: str, seed: int) -> list[str]:
        argv = [*_scenarios_argv(self.modules), "run", scenario, "--seed", str(seed), "--store", self.store,
                "--repro-dir", self.repro_dir]
        duration = self.duration or _sweep_duration(scenario)
        if duration:
            argv += ["--duration", duration]
        if self.mutant:
            argv += ["--mutant", self.mutant]
        return argv


# -- validation: the CLI's own parsers, one line each ------------------------------------


def _usage(flag: str, error: Exception) -> pytest.UsageError:
    return pytest.UsageError(f"{flag}: {error}")


def _parse_seeds(text: str) -> range:
    import argparse

    from sim.face.options import parse_seed_range

    try:
        return parse_seed_range(text)
    except argparse.ArgumentTypeError as error:
        raise _usage("--loomsim-seeds", error) from None


def _check_duration(text: str, flag: str = "--loomsim-duration") -> int:
    import argparse

    from sim.face.options import parse_duration

    try:
        return parse_duration(text)
    except argparse.ArgumentTypeError as error:
        raise _usage(flag, error) from None


def _load_scenario_modules(modules: Any, flag: str = "--loomsim-scenarios") -> tuple[str, ...]:
    """Load the built-in scenarios, the ``loomsim.scenarios`` entry points
    and ``modules`` (``sim.face.discovery``, as ``loomsim --scenarios``)."""
    from sim.face import discovery

    if isinstance(modules, str) or not all(isinstance(m, str) and m for m in modules):
        raise pytest.UsageError(f"{flag}: expected a list of module names, got {modules!r}")
    try:
        return discovery.load(modules)
    except discovery.ScenarioModuleError as error:
        raise pytest.UsageError(str(error) if error.source else f"{flag}: {error}") from None


def _scenarios_argv(modules: tuple[str, ...]) -> list[str]:
    from sim.face.repro_file import scenarios_argv

    return scenarios_argv(modules)


def _check_store(store: Any, flag: str = "--loomsim-store") -> str:
    """``store`` as ``loomsim run --store`` takes it; a user's adapter
    (MODULE:FACTORY) loaded and each port checked now, before any seed."""
    import argparse

    from sim.face import discovery
    from sim.face.options import NAMED_STORES, parse_store
    from sim.scenario import SetupError

    try:
        store = parse_store(str(store))
    except argparse.ArgumentTypeError as error:
        raise _usage(flag, error) from None
    if store not in NAMED_STORES:
        from scenarios.user_stores import load_store_factory

        discovery.ensure_cwd_importable()  # as the run will: the adapter's module, from the user's checkout
        try:
            load_store_factory(store)
        except SetupError as error:
            raise _usage(flag, error) from None
    return store


def _scenario_names(names: list[str], flag: str = "--loomsim-scenario") -> list[str]:
    from scenarios import registry

    _load_scenario_modules(())  # the ``loomsim.scenarios`` entry points
    if not names:
        return [s.name for s in registry.all_scenarios()]
    for name in names:
        try:
            registry.get(name)
        except registry.UnknownScenario as error:
            raise _usage(flag, error) from None
    return list(dict.fromkeys(names))


def _check_mutant(name: str, flag: str = "--loomsim-mutant") -> None:
    from faults.mutants import MutantError
    from sim.face.mutants import known_mutants

    try:
        known = known_mutants(None)
    except MutantError as error:
        raise _usage(flag, error) from None
    if name not in known:
        raise pytest.UsageError(f"{flag}: unknown mutant {name!r} (see loomsim mutants --list)")


def _sweep_duration(scenario: str) -> str | None:
    from scenarios import registry
    from sim.clock import format_duration_ms

    sweep_ms = getattr(registry.get(scenario), "sweep_ms", None)
    return format_duration_ms(sweep_ms) if sweep_ms else None


# -- hooks -------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(seeds, scenario, duration=None, store='memory', mutant=None, expect_failure=False, "
                   "scenario_modules=()): "
                   "run the test once per loomsim seed (use sim.testing.seeds); the loomsim_result fixture is "
                   "the seed's RunResult")
    if config.option.loomsim_seeds is not None:
        config.stash[_STATE] = _Session(config)


def _state(config: pytest.Config) -> _Session | None:
    return config.stash.get(_STATE, None)


def pytest_ignore_collect(collection_path: Any, config: pytest.Config) -> bool | None:
    state = _state(config)
    return True if state is not None and state.only else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    """Put the loomsim items first (saved failures, then the seeds), before
    ``-k``, ``--lf`` and the rest select from the items."""
    state = _state(config)
    if state is None:
        return
    root = LoomsimCollector.from_parent(session, name="loomsim", nodeid="loomsim")
    # As the session collects a file: each collector reported, each item counted ("collected N items").
    items[:0] = list(session.genitems(root))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = _state(config)
    if state is None or not state.replays:
        return
    from sim.face import failures

    terminalreporter.section("loomsim saved failures")
    for line in failures.render([r.to_json() for r in state.replays]):
        terminalreporter.write_line(line)


# -- the items ---------------------------------------------------------------------------


class LoomsimCollector(pytest.Collector):
    """``loomsim``: a collector per scenario, and ``saved`` first if the
    database holds failures of the selected scenarios."""

    def collect(self) -> list[Any]:
        state = _state(self.config)
        assert state is not None
        children: list[Any] = []
        saved = state.db.select(state.scenarios, (state.store,)) if state.db is not None else []
        if saved:
            children.append(SavedCollector.from_parent(self, name="saved", paths=saved))
        children.extend(ScenarioCollector.from_parent(self, name=name) for name in state.scenarios)
        return children


class SavedCollector(pytest.Collector):
    def __init__(self, *, paths: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.paths = paths

    def collect(self) -> list[Any]:
        return [SavedItem.from_parent(self, name=os.path.splitext(os.path.basename(p))[0], saved_path=p)
                for p in self.paths]


class ScenarioCollector(pytest.Collector):
    def collect(self) -> list[Any]:
        state = _state(self.config)
        assert state is not None
        return [SeedItem.from_parent(self, name=f"seed-{seed}", seed=seed) for seed in state.seeds]


class _LoomsimItem(pytest.Item):
    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, LoomsimFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, self.nodeid


class SeedItem(_LoomsimItem):
    """One seed of one scenario, run in this process."""

    def __init__(self, *, seed: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seed = seed
        self.scenario = self.parent.name

    def runtest(self) -> None:
        from sim.face import failures

        state = _state(self.config)
        assert state is not None
        done = _run_seed(state.run_argv(self.scenario, self.seed))
        if done.result.passed:
            return
        repro_path = _write_repro(done, state.repro_dir)
        saved = None
        if repro_path is not None and state.db is not None:
            try:
                saved = state.db.save(repro_path)
            except OSError as error:
                saved = f"(not saved: {error.strerror or error})"
        raise LoomsimFailure(failure_message(done, repro_path, saved=saved))


class SavedItem(_LoomsimItem):
    """A saved failure, replayed against the current code (``failures.replay``)."""

    def __init__(self, *, saved_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.saved_path = saved_path

    def runtest(self) -> None:
        from sim.face import failures

        state = _state(self.config)
        assert state is not None and state.db is not None
        outcome = failures.settle(state.db, failures.replay(self.saved_path, mutant=state.mutant))
        state.replays.append(outcome)
        if outcome.outcome != failures.STILL_FAILS:
            return
        assert outcome.run is not None
        raise LoomsimFailure(f"saved failure {outcome.name} still fails: {outcome.detail}\n"
                             + failure_message(outcome.run, outcome.path, command=outcome.repro_command))


def _run_seed(argv: list[str]) -> Any:
    from sim.face import failures
    from sim.face.options import UsageError

    try:
        return failures.run_in_process(argv)
    except UsageError as error:
        raise LoomsimFailure(f"loomsim: error: {error}") from None


def _write_repro(done: Any, directory: str) -> str | None:
    from sim.face.repro_file import write_repro

    try:
        return write_repro(done.result, done.command, directory, scenario_modules=done.args.scenarios)
    except OSError:
        return None


def failure_message(done: Any, repro_path: str | None, *, saved: str | None = None,
                    command: str | None = None) -> str:
    """A failing run as a test failure: the invariant and simulated time,
    its message, the related trace events (the last ``EXCERPT_LINES``), the
    repro command and the repro file."""
    from sim.clock import format_calendar
    from sim.trace import field_text

    result = done.result
    first = result.violations[0]
    lines = [f"loomsim {result.scenario} seed {result.seed}: invariant {first.invariant} violated at "
             f"{format_calendar(first.time_ms)}", f"  {first.message}"]
    if result.excerpt:
        lines.append("related trace events:")
        for seq, t_ms, node, kind, fields in result.excerpt[-EXCERPT_LINES:]:
            detail = " ".join(f"{k}={field_text(v)}" for k, v in fields.items())
            lines.append(f"  {format_calendar(t_ms)}  #{seq:<8} {node:<12} {kind:<28} {detail}")
    for extra in result.violations[1:3]:
        lines.append(f"also: {extra.invariant} at {format_calendar(extra.time_ms)}: {extra.message[:200]}")
    lines.append(f"reproduce: {command or done.command}")
    lines.append(f"repro file: {repro_path or '(could not be written)'}")
    if saved:
        lines.append(f"saved failure: {saved}")
    return "\n".join(lines)


# -- the marker (sim.testing.seeds) ------------------------------------------------------


def _marker_spec(marker: Any) -> dict[str, Any]:
    """The marker's arguments, validated (a one-line error each)."""
    if len(marker.args) != 1:
        raise pytest.UsageError("@loomsim.seeds takes one seed range, e.g. @loomsim.seeds('0:5', scenario=...)")
    kwargs = dict(marker.kwargs)
    modules = _load_scenario_modules(kwargs.get("scenario_modules") or (), "@loomsim.seeds scenario_modules")
    spec = {"seeds": _parse_seeds_for(marker.args[0]), "modules": modules,
            "scenario": _scenario_names([kwargs.get("scenario") or ""], "@loomsim.seeds scenario")[0],
            "duration": kwargs.get("duration"), "store": _check_store(kwargs.get("store", "memory"),
                                                                      "@loomsim.seeds store"),
            "mutant": kwargs.get("mutant"), "expect_failure": bool(kwargs.get("expect_failure", False))}
    if spec["duration"] is not None:
        _check_duration(str(spec["duration"]), "@loomsim.seeds duration")
    if spec["mutant"] is not None:
        _check_mutant(spec["mutant"], "@loomsim.seeds mutant")
    return spec


def _parse_seeds_for(text: Any) -> range:
    import argparse

    from sim.face.options import parse_seed_range

    try:
        return parse_seed_range(str(text))
    except argparse.ArgumentTypeError as error:
        raise _usage("@loomsim.seeds", error) from None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    if "loomsim_result" not in metafunc.fixturenames:
        pytest.fail(f"{metafunc.definition.name}: a @loomsim.seeds test takes the loomsim_result fixture",
                    pytrace=False)
    try:
        spec = _marker_spec(marker)
    except pytest.UsageError as error:
        pytest.fail(f"{metafunc.definition.name}: {error}", pytrace=False)
    seeds = list(spec["seeds"])
    metafunc.parametrize("loomsim_result", seeds, indirect=True, ids=[f"seed-{s}" for s in seeds])


@pytest.fixture
def loomsim_result(request: pytest.FixtureRequest) -> Any:
    """The ``RunResult`` of this item's seed (``@loomsim.seeds``)."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None or not hasattr(request, "param"):
        pytest.fail("loomsim_result is the result of a @loomsim.seeds seed: mark the test with "
                    "sim.testing.seeds(...)", pytrace=False)
    spec = _marker_spec(marker)
    scenario, seed = spec["scenario"], request.param
    repro_dir = request.config.option.loomsim_repro_dir
    argv = [*_scenarios_argv(spec["modules"]), "run", scenario, "--seed", str(seed), "--store", spec["store"],
            "--repro-dir", repro_dir]
    duration = spec["duration"] or _sweep_duration(scenario)
    if duration:
        argv += ["--duration", str(duration)]
    if spec["mutant"]:
        argv += ["--mutant", spec["mutant"]]
    try:
        done = _run_seed(argv)
    except LoomsimFailure as error:
        pytest.fail(str(error), pytrace=False)
    if not done.result.passed and not spec["expect_failure"]:
        # Failed in the call phase (``pytest_runtest_call``), before the body: a failure, not a setup error.
        request.node.stash[_MARKER_FAILURE] = failure_message(done, _write_repro(done, repro_dir))
    return done.result


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    message = item.stash.get(_MARKER_FAILURE, None)
    if message is not None:
        pytest.fail(message, pytrace=False)
