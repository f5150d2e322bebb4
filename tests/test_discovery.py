"""Scenario discovery (``sim.face.discovery``): ``loomsim --scenarios MODULE``
and the ``loomsim.scenarios`` entry points register a user's scenarios, for
``run``, ``list``, ``sweep`` (child processes), ``repro`` and ``shrink``
(from the modules a repro file records); a module that cannot be loaded is
one line and exit 2. Also: the engine never imports the face."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sim.face import repro_file
from sim.face.cli import build_parser
from sim.face.options import UsageError, leading_scenario_modules

REPO_ROOT = Path(__file__).resolve().parents[1]
MODULE = "userscen.ticks"

# A user's scenario module, kept tiny: a ticker once a simulated minute; on
# odd seeds a planted check fails at tick --fail-tick (default 5).
TICKS = '''
from scenarios.api import Checker, Param, PortFaults, Stack, System, Workload, scenario


class TickCheck(Checker):
    name = "tick-planted"
    kinds = ("tick",)

    def __init__(self, fail_at):
        super().__init__()
        self.fail_at = fail_at

    def on_event(self, event):
        self.checks += 1
        if event.fields["n"] == self.fail_at:
            self.fail(f"planted failure at tick {self.fail_at}")


class Ticks(Workload):
    def __init__(self):
        self.ticks = 0

    def start(self, world):
        async def ticker():
            while True:
                await world.runtime.sleep_ms(60_000)
                self.ticks += 1
                world.emit("tick", n=self.ticks)

        world.spawn_harness("ticker", ticker())

    def metrics(self):
        return {"ticks": self.ticks}


@scenario("tiny-ticks", "a ticker once a minute; odd seeds fail at a tick", duration="1h",
          params=(Param("fail_tick", 5, "the tick odd seeds fail at"),))
def build(run):
    fail_at = run.param("fail_tick") if run.opts.seed % 2 else 0
    return Stack(system=System(restart_ms=(0, 0)), workloads=[Ticks()], faults=PortFaults({}),
                 checks=[TickCheck(fail_at)])
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's checkout: ``userscen/ticks.py`` (the cwd of every run)."""
    return _project(tmp_path)


def _project(tmp_path: Path) -> Path:
    package = tmp_path / "userscen"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ticks.py").write_text(TICKS)
    # A user's store adapter (``--store userscen.stores:make_store``).
    (package / "stores.py").write_text(
        "from model.durable_state.memory_store import InMemoryDurableStateStore\n\n\n"
        "def make_store():\n    return {'ds': InMemoryDurableStateStore()}\n")
    return tmp_path


def _loomsim(args: list[str], cwd: Path, *, pythonpath: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join((str(REPO_ROOT), *pythonpath, *filter(None, [env.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "sim", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-1000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("loomsim: error: "), proc.stderr
    return lines[0]


# -- run, list --------------------------------------------------------------------


def test_list_shows_the_user_scenarios_too(project):
    proc = _loomsim(["--scenarios", MODULE, "list"], project)
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert {"tiny-ticks", "sentinel-year", "ledger-storm"} <= set(names)
    assert "tiny-ticks" not in _loomsim(["list"], project).stdout


def test_run_works_with_scenarios(project):
    proc = _loomsim(["--scenarios", MODULE, "run", "tiny-ticks", "--seed", "2", "--json"], project)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["scenario"], result["status"], result["stats"]["ticks"]) == ("tiny-ticks", "pass", 60)
    assert result["invariants"] == {"tick-planted": 60}
    assert "wakes" not in result  # only a scenario that counts wakes has them
    assert result["repro_command"].startswith(f"loomsim --scenarios {MODULE} run tiny-ticks --seed 2 ")
    human = _loomsim(["--scenarios", MODULE, "run", "tiny-ticks", "--seed", "2", "--duration", "10m"], project)
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[0] == "loomsim tiny-ticks  seed=2  duration=10m  store=memory  fail_tick=5"
    assert re.fullmatch(r"simulated 10m in [0-9.]+s wall: [0-9]+ events", lines[1]), lines[1]  # no wakes


def test_without_the_module_the_scenario_is_unknown(project):
    line = _one_error_line(_loomsim(["run", "tiny-ticks", "--seed", "1"], project))
    assert "unknown scenario 'tiny-ticks'" in line


def test_a_user_scenarios_parameter_is_a_flag(project):
    proc = _loomsim(["--scenarios", MODULE, "run", "tiny-ticks", "--seed", "1", "--fail-tick", "7", "--json",
                     "--repro-dir", str(project)], project)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["violations"][0]["message"] == "planted failure at tick 7"
    line = _one_error_line(_loomsim(["--scenarios", MODULE, "run", "sentinel-year", "--seed", "1",
                                     "--fail-tick", "7"], project))
    assert "--fail-tick does not apply to scenario 'sentinel-year'" in line


# -- sweep: child processes load the same modules -------------------------------------


def test_sweep_loads_the_modules_in_its_child_processes(project):
    repros = project / "repros"
    repros.mkdir()
    proc = _loomsim(["--scenarios", MODULE, "sweep", "tiny-ticks", "--seeds", "0:4", "--jobs", "2", "--json",
                     "--store", "userscen.stores:make_store", "--repro-dir", str(repros)], project)
    assert proc.returncode == 1, proc.stderr  # the odd seeds fail, on purpose
    summary = json.loads(proc.stdout)
    assert (summary["seeds"], summary["passed"], summary["failed"], summary["errors"]) == (4, 2, 2, 0), summary
    assert [f["seed"] for f in summary["failing"]] == [1, 3]
    for fail in summary["failing"]:
        assert fail["repro_command"].startswith(f"loomsim --scenarios {MODULE} run tiny-ticks --seed {fail['seed']} ")
        assert "--store userscen.stores:make_store" in fail["repro_command"]  # passed on unchanged
        body = json.loads(Path(fail["repro_file"]).read_text(encoding="utf-8"))
        assert body["scenario_modules"] == [MODULE]
        assert body["config"]["store"] == "userscen.stores:make_store"


# -- repro files: the modules recorded, repro and shrink load them ----------------------


@pytest.fixture(scope="module")
def repro_project(tmp_path_factory) -> Path:
    """A checkout of its own for the tests that read the one failing run's
    repro file (none of them changes the file or the checkout's modules)."""
    return _project(tmp_path_factory.mktemp("repro-project"))


@pytest.fixture(scope="module")
def failing_repro(repro_project) -> Path:
    project = repro_project
    proc = _loomsim(["--scenarios", MODULE, "run", "tiny-ticks", "--seed", "3", "--duration", "30m",
                     "--repro-dir", str(project)], project)
    assert proc.returncode == 1, proc.stderr
    path = project / "loomsim-repro-tiny-ticks-3.json"
    assert f"reproduce: loomsim --scenarios {MODULE} run tiny-ticks --seed 3 --duration 30m" in proc.stdout
    return path


def test_the_repro_file_records_the_modules_and_repro_replays_it(failing_repro, repro_project):
    project = repro_project
    body = json.loads(failing_repro.read_text(encoding="utf-8"))
    assert body["format"] == "loomsim-repro/1"
    assert body["scenario_modules"] == [MODULE]
    assert body["command"].startswith(f"loomsim --scenarios {MODULE} run tiny-ticks --seed 3 ")
    proc = _loomsim(["repro", str(failing_repro), "--json"], project)  # no --scenarios: the file names them
    assert proc.returncode == 1, proc.stderr
    replayed = json.loads(proc.stdout)
    assert replayed["trace_digest"] == body["trace_digest"]
    assert replayed["violations"][0]["message"] == "planted failure at tick 5"
    assert replayed["repro_command"].startswith(f"loomsim --scenarios {MODULE} run tiny-ticks --seed 3 ")


def test_shrink_loads_the_modules_and_the_shrunk_file_records_them(failing_repro, repro_project):
    project = repro_project
    out = project / "small.json"
    proc = _loomsim(["shrink", str(failing_repro), "--out", str(out)], project)
    assert proc.returncode == 1, proc.stderr  # the shrunk run fails, as its report says
    body = json.loads(out.read_text(encoding="utf-8"))
    assert body["scenario_modules"] == [MODULE]
    assert body["config"]["duration"] == "5m"  # fails at tick 5, at 5m: the shortest run that shows it
    again = _loomsim(["repro", str(out), "--json"], project)
    assert again.returncode == 1 and json.loads(again.stdout)["trace_digest"] == body["trace_digest"]


def test_a_repro_file_whose_module_is_gone_is_one_line(failing_repro, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # a directory the module is not importable from
    line = _one_error_line(_loomsim(["repro", str(failing_repro)], elsewhere))
    assert line.startswith(f"loomsim: error: cannot load scenario module '{MODULE}' (named by repro file ")
    assert "No module named 'userscen'" in line


def test_a_malformed_scenario_modules_field_is_one_line(failing_repro, repro_project):
    body = json.loads(failing_repro.read_text(encoding="utf-8"))
    body["scenario_modules"] = "userscen.ticks"
    malformed = repro_project / "malformed-repro.json"  # the shared file stays as it was
    malformed.write_text(json.dumps(body))
    line = _one_error_line(_loomsim(["repro", str(malformed)], repro_project))
    assert "malformed scenario_modules" in line


# -- modules that cannot be loaded ---------------------------------------------------


def test_a_module_that_cannot_be_imported_is_one_line_and_exit_2(project):
    line = _one_error_line(_loomsim(["--scenarios", "no_such_module", "run", "tiny-ticks", "--seed", "1"], project))
    assert line == "loomsim: error: cannot load scenario module 'no_such_module': No module named 'no_such_module'"
    line = _one_error_line(_loomsim(["--scenarios", "userscen/ticks.py", "list"], project))
    assert line.startswith("loomsim: error: cannot load scenario module 'userscen/ticks.py': ")
    assert "not a file path" in line


@pytest.mark.parametrize("source, reason", [
    ("raise RuntimeError('boom')\n", "RuntimeError: boom"),
    ("def broken(:\n", "SyntaxError: "),
    ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
    ("import no_such_dependency\n", "No module named 'no_such_dependency'"),
    ("from scenarios.registry import scenario\n\n@scenario('sentinel-year', 'a clash', duration='1d')\n"
     "def build(world, opts):\n    pass\n", "registered twice"),
])
def test_a_module_that_raises_at_import_is_one_line_and_exit_2(project, source, reason):
    (project / "userscen" / "broken.py").write_text(source)
    line = _one_error_line(_loomsim(["--scenarios", "userscen.broken", "list"], project))
    assert line.startswith("loomsim: error: cannot load scenario module 'userscen.broken': ")
    assert reason in line


@pytest.mark.parametrize("args, mention", [
    (["run", "tiny-ticks", "--seed", "1", "--scenarios", MODULE], "global option"),
    (["--scenarios"], "expected one argument"),
    (["--scen", MODULE, "list"], "unrecognized option '--scen' before the command"),  # read before parsing
])
def test_misplaced_or_incomplete_scenarios_is_one_line(project, args, mention):
    assert mention in _one_error_line(_loomsim(args, project))


# -- entry points -------------------------------------------------------------------


def _plugin(site: Path, value: str) -> None:
    """An installed distribution with a ``loomsim.scenarios`` entry point."""
    info = site / "tinyplug-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[loomsim.scenarios]\nticks = {value}\n")


def test_entry_points_register_scenarios_without_the_flag(project, tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    _plugin(site, MODULE)
    proc = _loomsim(["list"], project, pythonpath=(str(site), str(project)))
    assert proc.returncode == 0, proc.stderr
    assert "tiny-ticks" in proc.stdout
    ran = _loomsim(["run", "tiny-ticks", "--seed", "2", "--duration", "10m", "--json"], project,
                   pythonpath=(str(site), str(project)))
    assert ran.returncode == 0 and json.loads(ran.stdout)["status"] == "pass"


def test_a_broken_entry_point_is_one_line(project, tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    _plugin(site, "tinyplug_missing")
    line = _one_error_line(_loomsim(["list"], project, pythonpath=(str(site),)))
    assert line == ("loomsim: error: cannot load scenario module 'tinyplug_missing' (entry point 'ticks' of "
                    "loomsim.scenarios): No module named 'tinyplug_missing'")


# -- --store ------------------------------------------------------------------------


def test_store_accepts_memory_sqlite_or_a_factory():
    parser = build_parser()
    for store in ("memory", "sqlite", "mystores:make", "my_pkg.stores_v2:Factory"):
        assert parser.parse_args(["run", "sentinel-year", "--seed", "1", "--store", store]).store == store
    for bad in ("mongo", "mystores", "mystores:", ":make", "my-pkg:make", "a:b:c", "1mod:make", "mod:make()"):
        with pytest.raises(UsageError, match="expected memory, sqlite or MODULE:FACTORY"):
            parser.parse_args(["run", "sentinel-year", "--seed", "1", "--store", bad])


# -- the argv split and the repro-file module ------------------------------------------


def test_leading_scenario_modules_reads_only_the_global_options():
    assert leading_scenario_modules(["--scenarios", "a", "--scenarios=b", "run", "x", "--seed", "1"]) == ["a", "b"]
    assert leading_scenario_modules(["-h"]) == []
    assert leading_scenario_modules(["run", "x", "--knob", "a=1"]) == []
    with pytest.raises(UsageError, match="global option"):
        leading_scenario_modules(["run", "x", "--scenarios=a"])


def test_read_repro_refuses_what_is_not_a_repro_file(tmp_path):
    with pytest.raises(repro_file.ReproFileError, match="cannot read repro file"):
        repro_file.read_repro(str(tmp_path / "missing.json"))
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"hello": "world"}')
    with pytest.raises(repro_file.ReproFileError, match="not a loomsim repro file"):
        repro_file.read_repro(str(foreign))
    assert repro_file.recorded_modules({"format": repro_file.FORMAT}) == ()  # files from before modules were recorded


# -- the engine never imports the face ---------------------------------------------------


FACE_ONLY = ("sim.face", "scenarios", "reports")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_engine_imports_neither_the_face_nor_scenarios_nor_reports():
    # ``sim/__main__.py`` is ``python -m sim``: the face's entry, not the engine.
    engine = [p for p in (REPO_ROOT / "sim").rglob("*.py")
              if "face" not in p.relative_to(REPO_ROOT / "sim").parts and p.name != "__main__.py"]
    assert engine and (REPO_ROOT / "sim" / "face" / "cli.py").exists()
    assert not [p for p in ("cli.py", "sweep.py", "bench.py") if (REPO_ROOT / "sim" / p).exists()]  # no shims
    for path in engine:
        bad = sorted(n for n in _imports(path) if any(n == f or n.startswith(f + ".") for f in FACE_ONLY))
        assert not bad, f"{path.relative_to(REPO_ROOT)} imports {bad}"
