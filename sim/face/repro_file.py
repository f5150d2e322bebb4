"""The repro file (``loomsim-repro/1``) and the command lines that reproduce a run.

A failing run writes ``loomsim-repro-<scenario>-<seed>.json``::

    {"format": "loomsim-repro/1",
     "config": {...},              # the run's configuration (RunResult.config; with
                                   # "mutant" [and "mutants_module"] for a planted bug)
     "scenario_modules": [...],    # the --scenarios modules the run loaded
     "command": "loomsim run ...", # the command that reproduces it
     "trace_digest": "...",
     "violations": [{"name", "message", "simulated_ms"}, ...],
     "fault_script": [...],        # faults and scheduling deviations (faults.script)
     "excerpt": [...],             # the related trace events
     ...}                          # extras: shrunk_from, a corpus entry's regression note

``repro_argv`` turns a repro file back into the ``loomsim`` command line it
stands for (its modules, seed, duration, store, parameters and swarm
choices, with the file itself as ``--faults``); ``repro_command`` is the
printable command of a run. A file that is missing, not JSON, not this
format or malformed is a ``ReproFileError``: one line.
"""
from __future__ import annotations

import json
import os
import shlex
from typing import Any, Callable, Iterable

from faults.script import script_to_json
from sim.artifacts import FREE_NAMES_MAX, create_exclusive, free_path, write_new  # noqa: F401 (re-exported)
from sim.clock import format_duration_ms
from sim.face import discovery
from sim.scenario import ScenarioOptions
from sim.trace import event_json

FORMAT = "loomsim-repro/1"


class ReproFileError(Exception):
    """An unusable repro file (the CLI reports it as a usage error)."""


def param_flag(name: str) -> str:
    """The command-line flag of a scenario parameter: ``sentinels`` -> ``--sentinels``."""
    return "--" + name.replace("_", "-")


def repro_filename(scenario: str, seed: int) -> str:
    return f"loomsim-repro-{scenario}-{seed}.json"


def shrunk_filename(scenario: str, seed: int) -> str:
    return f"loomsim-shrunk-{scenario}-{seed}.json"


def replay_command(path: str) -> str:
    """The command that replays the repro file at ``path``."""
    return f"loomsim repro {shlex.quote(path)}"


def scenarios_argv(modules: Iterable[str]) -> list[str]:
    """The global ``--scenarios`` options for ``modules`` (they go before the command)."""
    argv: list[str] = []
    for module in discovery.unique(modules):
        argv += ["--scenarios", module]
    return argv


def is_repro_file(path: str) -> bool:
    """Whether ``path`` holds a repro file (``run --faults`` then adopts its
    configuration) rather than a hand-written script; unreadable: False
    (the script loader says why)."""
    try:
        read_repro(path)
    except ReproFileError:
        return False
    return True


def write_repro(result: Any, command: str | Callable[[str], str], directory: str, *, path: str | None = None,
                extra: dict[str, Any] | None = None, scenario_modules: Iterable[str] = ()) -> str:
    """Write the failure ``result`` (a ``RunResult``) as a new repro file in
    ``directory`` (or at ``path``), at the next free name if that one is
    taken; return its path. ``command`` is the file's replay command, or
    the function that makes it from the name the file gets (a command that
    names the file itself, such as ``loomsim repro FILE``, must name the
    file written, not the one found taken). Raises ``OSError``."""
    path = path or os.path.join(directory, repro_filename(result.scenario, result.seed))
    body = {
        "format": FORMAT,
        "config": result.config,
        "scenario_modules": list(discovery.unique(scenario_modules)),
        "command": command,
        "trace_digest": result.trace_digest,
        "violations": [{"name": v.invariant, "message": v.message, "simulated_ms": v.time_ms}
                       for v in result.violations],
        "fault_script": script_to_json(result.fault_script),
        "excerpt": [json.loads(event_json(e)) for e in result.excerpt],
        **(extra or {}),
    }

    def render(name: str) -> str:
        named = body if isinstance(command, str) else {**body, "command": command(name)}
        return json.dumps(named, ensure_ascii=False, indent=1)

    return write_new(path, render)


def read_repro(path: str) -> dict[str, Any]:
    """The body of the repro file at ``path``, its format checked."""
    try:
        with open(path, encoding="utf-8") as handle:
            body = json.load(handle)
    except OSError as error:
        raise ReproFileError(f"cannot read repro file {path!r}: {error.strerror or error}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ReproFileError(f"repro file {path!r} is not JSON: {error}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ReproFileError(f"{path!r} is not a loomsim repro file (format {FORMAT})")
    return body


def recorded_modules(body: dict[str, Any], path: str = "") -> tuple[str, ...]:
    """The ``--scenarios`` modules a repro file records (none in files from
    before they were recorded)."""
    modules = body.get("scenario_modules", [])
    if not isinstance(modules, list) or not all(isinstance(m, str) and m for m in modules):
        raise ReproFileError(f"repro file {path!r} has a malformed scenario_modules: expected a list of module names")
    return tuple(modules)


def repro_argv(path: str, *, json_output: bool, scenario_modules: Iterable[str] = ()) -> list[str]:
    """The ``loomsim`` command line the repro file at ``path`` stands for:
    ``--scenarios`` for ``scenario_modules`` and the file's modules, then
    ``run`` with its seed, duration, store, parameters and swarm choices,
    and its fault script (faults and scheduling deviations) as ``--faults``.

    Loads the file's scenario modules (its scenario's swarm space decides
    the workload flags). Raises ``ReproFileError`` or
    ``discovery.ScenarioModuleError``."""
    from scenarios import registry

    body = read_repro(path)
    recorded = recorded_modules(body, path)
    modules = discovery.unique((*scenario_modules, *discovery.load(recorded, source=f"named by repro file {path!r}")))
    config = body.get("config")
    try:
        name, seed, duration, store = config["scenario"], config["seed"], config["duration"], config["store"]
        params = dict(config.get("params", {}))
        swarm = config.get("swarm")
        scenario = registry.get(name)
        argv = [*scenarios_argv(modules), "run", name, "--seed", str(int(seed)), "--duration", str(duration),
                "--store", str(store), "--faults", path, "--repro-dir", os.path.dirname(os.path.abspath(path))]
        for key, value in sorted(params.items()):
            argv += [param_flag(key), str(int(value))]
        if config.get("beyond_contract"):
            argv.append("--beyond-contract")
        if config.get("mutant"):  # a run with a planted bug (``loomsim run --mutant``) replays with it
            argv += ["--mutant", str(config["mutant"])]
            if config.get("mutants_module"):
                argv += ["--mutants", str(config["mutants_module"])]
        for kind, rate in sorted(config.get("rates", {}).items()):
            argv += ["--rate", f"{kind}={float(rate)!r}"]
        if isinstance(swarm, dict):
            if not swarm.get("swarm"):
                argv.append("--no-swarm")
            for knob, value in sorted(swarm.get("knobs", {}).items()):
                argv += ["--knob", f"{knob}={int(value)}"]
            space = scenario.swarm_space
            if space is not None and swarm.get("swarm"):
                on = set(swarm.get("workload", []))
                enable = [w for w in space.workload if w in on]
                disable = [w for w in space.workload if w not in on]
                if enable:
                    argv += ["--faults-enable", ",".join(enable)]
                if disable:
                    argv += ["--faults-disable", ",".join(disable)]
    except registry.UnknownScenario as error:
        raise ReproFileError(f"repro file {path!r}: {error}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ReproFileError(f"repro file {path!r} has a malformed config: {error!r}") from None
    return argv + (["--json"] if json_output else [])


def repro_command(name: str, opts: ScenarioOptions, *, explicit_duration: bool = True,
                  faults_path: str | None = None, scenario_modules: Iterable[str] = (),
                  mutant: str | None = None, mutants_module: str | None = None) -> str:
    """The printable ``loomsim`` command that reruns ``name`` with ``opts``
    (and the planted bug ``mutant``, from ``mutants_module`` if a user's)."""
    parts = ["loomsim", *scenarios_argv(scenario_modules), "run", name, "--seed", str(opts.seed),
             "--duration", format_duration_ms(opts.duration_ms)]
    if mutant:
        parts += ["--mutant", mutant] + (["--mutants", mutants_module] if mutants_module else [])
    if faults_path:
        parts += ["--faults", faults_path]
    if not opts.swarm:
        parts += ["--no-swarm"]
    if opts.beyond_contract:
        parts += ["--beyond-contract"]
    if opts.schedule != "fifo" and not faults_path:
        parts += ["--schedule", opts.schedule]
    if opts.faults_enable:
        parts += ["--faults-enable", ",".join(opts.faults_enable)]
    if opts.faults_disable:
        parts += ["--faults-disable", ",".join(opts.faults_disable)]
    for knob, value in sorted(opts.knobs.items()):
        parts += ["--knob", f"{knob}={value}"]
    for kind, rate in sorted((opts.rates or {}).items()):
        parts += ["--rate", f"{kind}={rate!r}"]
    if opts.db_path:
        parts += ["--db", opts.db_path]
        if opts.store not in ("memory", "sqlite"):
            parts += ["--store", opts.store]  # a user's adapter given a database path
    elif opts.store != "memory":
        parts += ["--store", opts.store]
    for key, value in sorted(opts.params.items()):
        parts += [param_flag(key), str(value)]
    return shlex.join(parts)
