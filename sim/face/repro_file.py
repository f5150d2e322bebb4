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
     "stack_file": {"path", "sha256", "text"},  # a stack file's run: the file as it ran
     ...}                          # extras: shrunk_from, a corpus entry's regression note

``repro_argv`` turns a repro file back into the ``loomsim`` command line it
stands for (its modules, seed, duration, store, parameters and swarm
choices, with the file itself as ``--faults``); ``repro_command`` is the
printable command of a run. The run of a stack file (``loomsim run
FILE.toml``, ``scenarios.stackfile``) embeds the file's text and its
sha256 (``stack_file``): the replay runs the embedded stack, so it
reproduces after the file moved or changed (saying so in one line when the
file at the path differs). A file that is missing, not JSON, not this
format or malformed is a ``ReproFileError``: one line. A hand-edited file
is checked field by field (``check_config``: ``FILE: seed must be a
non-negative integer, got 1.5``); config fields the replay does not read
(``python``, what a scenario records) are left alone.

After a replay, ``replay_check`` compares it with the recording: a
failure that did not recur (not a pass: ``loomsim repro`` exits 1 and
says so), a trace digest that differs; ``version_warning`` tells a file
written by another loomsim version (``config.loomsim``).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import sys
from typing import Any, Callable, Iterable, Iterator

import attrs

from faults.script import script_to_json
from sim.artifacts import FREE_NAMES_MAX, create_exclusive, free_path, write_new  # noqa: F401 (re-exported)
from model.bounds import INT64_MAX
from sim.clock import DurationError, format_duration_ms, parse_duration_ms
from sim.face import discovery
from sim.scenario import ScenarioOptions
from sim.trace import event_json

FORMAT = "loomsim-repro/1"
NOT_REPRODUCED = "not-reproduced"  # ``repro --json``'s status when the recorded failure did not recur
_STORE = re.compile(r"memory|sqlite|[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_NAME = re.compile(r"[A-Za-z0-9][\w.-]*")


class ReproFileError(Exception):
    """An unusable repro file (the CLI reports it as a usage error)."""


def param_flag(name: str) -> str:
    """The command-line flag of a scenario parameter: ``sentinels`` -> ``--sentinels``."""
    return "--" + name.replace("_", "-")


def _file_part(scenario: str) -> str:
    """A scenario's name in a file name: a stack file's title (its name is
    a path), else the name."""
    from scenarios import registry

    loaded = registry.loaded_file(scenario)
    title = getattr(loaded, "title", "") or scenario
    return re.sub(r"[^\w.-]", "_", title)


def _branch_part(branch: int | None) -> str:
    return "" if branch is None else f"-branch{branch}"


def repro_filename(scenario: str, seed: int, branch: int | None = None) -> str:
    return f"loomsim-repro-{_file_part(scenario)}-{seed}{_branch_part(branch)}.json"


def shrunk_filename(scenario: str, seed: int, branch: int | None = None) -> str:
    return f"loomsim-shrunk-{_file_part(scenario)}-{seed}{_branch_part(branch)}.json"


def branch_key(config: Any) -> int | None:
    """The branch key a run's config records (None: a run without a branch)."""
    branch = config.get("branch") if isinstance(config, dict) else None
    return branch.get("key") if isinstance(branch, dict) else None


def embedded_stack(scenario: str) -> dict[str, Any] | None:
    """What a repro file embeds of the stack file ``scenario`` names (None:
    a registered scenario)."""
    from scenarios import registry

    loaded = registry.loaded_file(scenario)
    if loaded is None:
        return None
    return {"path": scenario, "sha256": loaded.sha256, "text": loaded.text}


def adopt_embedded(body: dict[str, Any], path: str) -> tuple[bool, Any]:
    """Put the stack file the repro file ``body`` (at ``path``) embeds under
    its name in this process (the replay's: for the rest of it), so the
    replay runs it whatever the file at its path holds now, and say so in
    one line when that file differs or is gone. Return whether it adopted
    (not when that copy is adopted already), and the entry it replaced (for
    ``registry.restore``). Raises ``ReproFileError``."""
    from scenarios import registry
    from scenarios.stackfile import digest

    stack = body.get("stack_file")
    if stack is None:
        return False, None
    config = body.get("config") if isinstance(body.get("config"), dict) else {}
    if (not isinstance(stack, dict) or type(stack.get("text")) is not str or type(stack.get("path")) is not str
            or stack["path"] != config.get("scenario")):
        raise ReproFileError(f"{path}: stack_file must be an object with the scenario's path and the file's text")
    if stack.get("sha256") != digest(stack["text"]):
        raise ReproFileError(f"{path}: stack_file's text does not match its sha256 (edited by hand?)")
    if registry.adopted_file(stack["path"]) == stack["sha256"]:
        return False, None
    try:
        previous = registry.adopt(stack["path"], stack["text"], where=f"{path} (embedded {stack['path']})")
    except registry.StackFileError as error:
        raise ReproFileError(str(error)) from None
    try:
        with open(stack["path"], "rb") as handle:
            now = hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        now = None
    if now != stack["sha256"]:
        what = "is gone" if now is None else f"changed since {path} was written"
        print(f"loomsim: note: {stack['path']} {what}: running the copy embedded in {path}", file=sys.stderr)
    return True, previous


@contextlib.contextmanager
def replaying_embedded(path: str) -> Iterator[None]:
    """For an in-process replay of the repro file at ``path`` (the failure
    database's): its embedded stack file runs, and what this process held
    under that name before is back afterwards (a long-lived process, the
    sweep's or the pytest plugin's, goes on with the file as it is). A file that cannot be read,
    or a malformed embedded stack, changes nothing (the replay reports it)."""
    from scenarios import registry

    try:
        body = read_repro(path)
        adopted, previous = adopt_embedded(body, path)
    except ReproFileError:
        adopted = False
    try:
        yield
    finally:
        if adopted:
            registry.restore(body["stack_file"]["path"], previous)


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
    path = path or os.path.join(directory, repro_filename(result.scenario, result.seed, branch_key(result.config)))
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
    stack = embedded_stack(result.scenario)
    if stack is not None:
        body["stack_file"] = stack

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
    check_config(config, path)
    adopt_embedded(body, path)
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
        branch = config.get("branch")
        if branch is not None:  # a branch's failure replays its prefix, then the branch
            argv += ["--fork-at", format_duration_ms(int(branch["fork_at_ms"])), "--branch", str(int(branch["key"]))]
            if branch.get("streams"):
                argv += ["--branch-streams", ",".join(branch["streams"])]
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


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:59] + "…"


def _is_int(value: Any) -> bool:
    return type(value) is int


def check_config(config: Any, path: str) -> None:
    """Every field of a repro file's ``config`` that a replay reads, by type
    and range. Raises ``ReproFileError``: ``FILE: FIELD must be ..., got V``."""
    def fail(field: str, must: str, value: Any) -> ReproFileError:
        return ReproFileError(f"{path}: {field} must be {must}, got {_shown(value)}")

    if not isinstance(config, dict):
        raise fail("config", "an object", config)
    for field in ("scenario", "seed", "duration", "store"):
        if field not in config:
            raise ReproFileError(f"{path}: config has no {field}")
    if type(config["scenario"]) is not str or not config["scenario"]:
        raise fail("scenario", "a scenario name", config["scenario"])
    seed = config["seed"]
    if not _is_int(seed) or seed < 0:
        raise fail("seed", "a non-negative integer", seed)
    if seed > INT64_MAX:
        raise fail("seed", "at most 2**63-1", seed)
    duration = config["duration"]
    if type(duration) is not str:
        raise fail("duration", 'a duration text (e.g. "1h")', duration)
    try:
        parse_duration_ms(duration)
    except DurationError as error:
        raise ReproFileError(f"{path}: duration {_shown(duration)}: {error}") from None
    if type(config["store"]) is not str or not _STORE.fullmatch(config["store"]):
        raise fail("store", "memory, sqlite or MODULE:FACTORY", config["store"])
    _check_mapping(config.get("params", {}), "params", lambda v: _is_int(v) and v >= 0,
                   "a non-negative integer", fail)
    _check_mapping(config.get("rates", {}), "rates", lambda v: type(v) in (int, float) and 0 <= v <= 1,
                   "a probability in [0, 1]", fail)
    for field in ("beyond_contract", "script_must_fire"):
        if field in config and type(config[field]) is not bool:
            raise fail(field, "true or false", config[field])
    for field in ("mutant", "mutants_module"):
        if config.get(field) is not None and (type(config[field]) is not str or not _NAME.fullmatch(config[field])):
            raise fail(field, "a mutant name" if field == "mutant" else "a module name", config[field])
    branch = config.get("branch")
    if branch is not None:
        if not isinstance(branch, dict):
            raise fail("branch", 'an object {"fork_at_ms": T, "key": K}', branch)
        for field in ("fork_at_ms", "key"):
            if not _is_int(branch.get(field)) or branch[field] < 0:
                raise fail(f"branch.{field}", "a non-negative integer", branch.get(field))
        if branch["fork_at_ms"] >= parse_duration_ms(duration):
            raise fail("branch.fork_at_ms", f"before the run's end ({duration})", branch["fork_at_ms"])
        families = branch.get("streams", [])
        if (not isinstance(families, list) or not all(type(f) is str and _NAME.fullmatch(f) for f in families)
                or families != sorted(set(families))):
            raise fail("branch.streams", "a sorted list of stream family names", families)
    if "loomsim" in config and type(config["loomsim"]) is not str:
        raise fail("loomsim", "a version text", config["loomsim"])
    swarm = config.get("swarm")
    if swarm is None:
        return
    if not isinstance(swarm, dict):
        raise fail("swarm", "an object", swarm)
    if "swarm" in swarm and type(swarm["swarm"]) is not bool:
        raise fail("swarm.swarm", "true or false", swarm["swarm"])
    _check_mapping(swarm.get("knobs", {}), "swarm.knobs", _is_int, "an integer", fail)
    workload = swarm.get("workload", [])
    if not isinstance(workload, list) or not all(type(w) is str for w in workload):
        raise fail("swarm.workload", "a list of names", workload)


def _check_mapping(value: Any, field: str, ok: Any, must: str, fail: Any) -> None:
    if not isinstance(value, dict):
        raise fail(field, "an object", value)
    for key, item in value.items():
        if not ok(item):
            raise fail(f"{field}.{key}", must, item)


def version_warning(body: dict[str, Any], path: str, current: str) -> str | None:
    """The warning for a file written by another loomsim version than
    ``current`` (or by one that did not record its version); None if same."""
    config = body.get("config")
    recorded = config.get("loomsim") if isinstance(config, dict) else None
    if recorded == current:
        return None
    if recorded is None:
        return f"{path} records no loomsim version (this is {current}): the replay may differ"
    return f"{path} was written by loomsim {recorded}, this is {current}: the replay may differ"


@attrs.frozen
class ReplayCheck:
    """A replay against its recording: whether the recorded failure (the
    first violation's invariant) recurred, and the two trace digests."""

    path: str
    recorded_invariant: str | None
    replayed_invariant: str | None
    recorded_digest: str | None
    replayed_digest: str

    @property
    def reproduced(self) -> bool:
        return self.recorded_invariant is None or self.recorded_invariant == self.replayed_invariant

    @property
    def diverged(self) -> bool:
        return self.recorded_digest is not None and self.recorded_digest != self.replayed_digest

    def lines(self) -> list[str]:
        """What a replay prints after its result (nothing when it went as recorded)."""
        lines = []
        if self.diverged:
            lines.append(f"the replay diverged from the recorded run: trace digest {self.replayed_digest}, "
                         f"recorded {self.recorded_digest}")
        if not self.reproduced:  # last: the verdict
            now = ("this replay held every invariant" if self.replayed_invariant is None
                   else f"this replay failed {self.replayed_invariant} instead")
            lines.append(f"NOT REPRODUCED: the recorded failure did not reproduce: {self.path} records "
                         f"{self.recorded_invariant}; {now}")
        return lines

    def as_json(self) -> dict[str, Any]:
        return {"reproduced": self.reproduced, "recorded_invariant": self.recorded_invariant,
                "diverged": self.diverged, "recorded_trace_digest": self.recorded_digest}


def replay_check(body: dict[str, Any], path: str, result: Any) -> ReplayCheck:
    """Compare the replay ``result`` (a ``RunResult``) with the repro file's ``body``."""
    violations = body.get("violations")
    first = violations[0] if isinstance(violations, list) and violations and isinstance(violations[0], dict) else {}
    recorded = first.get("name") if type(first.get("name")) is str else None
    digest = body.get("trace_digest") if type(body.get("trace_digest")) is str else None
    replayed = result.violations[0].invariant if result.violations else None
    return ReplayCheck(path, recorded, replayed, digest, result.trace_digest)


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
    if opts.branch is not None:
        parts += ["--fork-at", format_duration_ms(opts.branch.fork_at_ms), "--branch", str(opts.branch.key)]
        if opts.branch.streams:
            parts += ["--branch-streams", ",".join(opts.branch.streams)]
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
