"""``loomsim sweep ... --corpus DIR``: the explore corpus's entries run first.

A corpus (``sim.face.corpus``: what ``loomsim explore --corpus DIR`` kept,
folded across shards by ``loomsim merge --corpus``) holds the inputs that
reached new behaviour. A sweep given it runs each entry of the swept
scenario(s) before its own seeds, as the failure database's saved failures
are (``sim.face.failures``): in this process, one after the other, each as
the input it pins (its seed with the swarm on, its knob pins, its duration,
its fault script when it has one) on the sweep's ``--store`` (without one,
on the store the entry records). The sweep's other run flags (beyond the
contract, fault kinds enabled, scenario parameters) are the seeds', not the
entries': an entry replays as explore ran it. A mutant applied in this
process (the tests') runs under the entries too and is named in their
repro commands, so a replay runs the same bug.

Each entry ends one of three ways:

- ``fail``: it violates an invariant. A failure of the sweep (exit 1),
  listed first, its repro file written as ``run`` writes one (a new file,
  never over an existing one) with the command that reproduces it.
- ``pass``: it holds; counted (``corpus: 12 entries replayed, all pass``).
- ``not-applicable``: the entry cannot be replayed against this code, so
  passing would say nothing: it names a knob the scenario does not have
  (or a pin outside its range), its fault script cannot be parsed, or names
  a site or node the run never has (the rule of ``sim.face.failures``: the
  script runs with every entry judged, and only a missing site or node
  makes it stale; a recorded hit the run did not reach is a run that went
  another way), its scenario is not registered, or its stack cannot be
  built. Reported with why, never dropped, never counted as passing, and
  not a failure of the sweep. The corpus itself is never changed.

A corpus directory that cannot be read (a file in it that is not an
entry) is a usage error before anything runs.

Part of the face: it reads no clock; the runs are ordinary ``run()`` calls.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs

from sim.clock import format_calendar
from sim.face import corpus
from sim.face.options import UsageError

PASS, FAIL, NOT_APPLICABLE = "pass", "fail", "not-applicable"
UNFIRED = "fault-script-unfired"
# The runner's words for a script entry naming what the run never has
# (``sim.runner.unfired_entries``; ``sim.face.failures`` reads them the same way).
_MISSING = re.compile(r"site '[^']*' was never hit|node '[^']*' never existed")
DETAIL_CHARS_MAX = 200


@attrs.frozen
class CorpusPlan:
    """What a sweep replays: the corpus's entries of ``scenarios`` (read and
    checked when the command starts), where their repro files go, and the
    sweep's ``--store`` (None: each entry's own)."""

    directory: str
    entries: tuple[Mapping[str, Any], ...]  # in file name order
    files: tuple[str, ...]                  # each entry's file name
    store: str | None
    repro_dir: str
    scenario_modules: tuple[str, ...] = ()


@attrs.frozen
class CorpusReplay:
    """How one corpus entry fared."""

    file: str
    outcome: str  # PASS, FAIL or NOT_APPLICABLE
    detail: str
    scenario: str
    seed: int
    knobs: Mapping[str, int]
    duration_ms: int
    script_entries: int | None
    store: str
    invariant: str | None = None
    simulated_time: str | None = None
    message: str | None = None
    repro_command: str | None = None
    repro_file: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The replay in a sweep's summary (``corpus_replays``)."""
        return {"file": self.file, "outcome": self.outcome, "detail": self.detail, "scenario": self.scenario,
                "seed": self.seed, "knobs": dict(self.knobs), "duration_ms": self.duration_ms,
                "script_entries": self.script_entries, "store": self.store, "invariant": self.invariant,
                "simulated_time": self.simulated_time, "message": self.message,
                "repro_command": self.repro_command, "repro_file": self.repro_file}


def plan(directory: str | None, scenario_names: Sequence[str] | None, *, store: str | None, repro_dir: str,
         scenario_modules: Iterable[str] = ()) -> CorpusPlan | None:
    """The sweep's ``--corpus DIR`` read now (None without it): the entries
    of ``scenario_names`` (None: every entry, an all-scenario sweep). A file
    that is not an entry, or a directory that is not one, is a
    ``UsageError``."""
    if directory is None:
        return None
    only = scenario_names[0] if scenario_names is not None and len(scenario_names) == 1 else None
    try:
        bodies = corpus.read_corpus(directory, only)
    except corpus.CorpusError as error:
        raise UsageError(f"--corpus: {error}") from None
    if scenario_names is not None:
        bodies = [b for b in bodies if b["scenario"] in scenario_names]
    names = _file_names(directory, only)
    files = tuple(names.get(corpus.input_digest(b), corpus.entry_filename(b)) for b in bodies)
    return CorpusPlan(directory, tuple(bodies), files, store, repro_dir, tuple(scenario_modules))


def _file_names(directory: str, scenario: str | None) -> dict[str, str]:
    """Input digest -> the file holding it (an early corpus's files are not
    named by the digest). Every file was read and checked by ``read_corpus``
    just before: what fails to load here is skipped, never an error."""
    import json
    import os

    names: dict[str, str] = {}
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".json"))[:corpus.ENTRY_FILES_MAX]:
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                data = json.load(handle)
            body = corpus.entry_json(scenario=str(data.get("scenario", scenario or "")),
                                     store=str(data.get("store", "memory")), seed=data["seed"],
                                     knobs=data.get("knobs", {}), duration_ms=data["duration_ms"],
                                     fault_script=data.get("fault_script"), branch=data.get("branch"))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, AssertionError):
            continue
        names.setdefault(corpus.input_digest(body), name)
    return names


def replay_corpus(corpus_plan: CorpusPlan | None, scenarios: Mapping[str, Any],
                  on_replay: Callable[[CorpusReplay], None] | None = None) -> list[CorpusReplay]:
    """Replay every entry of ``corpus_plan`` (``scenarios``: name -> the
    registered scenario; an entry of another is not applicable), in file
    name order; ``on_replay(replay)`` after each (a progress line)."""
    if corpus_plan is None:
        return []
    done = []
    for body, name in zip(corpus_plan.entries, corpus_plan.files):
        outcome = replay_entry(corpus_plan, body, scenarios.get(body["scenario"]), name)
        done.append(outcome)
        if on_replay is not None:
            on_replay(outcome)
    return done


def replay_entry(corpus_plan: CorpusPlan, body: Mapping[str, Any], scenario: Any, name: str) -> CorpusReplay:
    """Run one entry in this process and classify it (the module's docstring)."""
    import sqlite3

    from faults import mutants as mx
    from faults.script import ScriptError, parse_script
    from faults.swarm import SwarmError, check_pins
    from sim.face.repro_file import repro_command
    from sim.face.run import write_repro_or_warn
    from sim.runner import run
    from sim.scenario import Branch, ScenarioOptions, SetupError

    script = body.get("fault_script")
    store = corpus_plan.store or str(body.get("store") or "memory")
    known = CorpusReplay(name, NOT_APPLICABLE, "", str(body["scenario"]), int(body["seed"]),
                         dict(body["knobs"]), int(body["duration_ms"]),
                         None if script is None else len(script), store)

    def not_applicable(why: str) -> CorpusReplay:
        return attrs.evolve(known, detail=why[:DETAIL_CHARS_MAX])

    if scenario is None:
        return not_applicable(f"its scenario {known.scenario!r} is not registered")
    space = scenario.swarm_space
    if known.knobs:
        if space is None:
            return not_applicable(f"it pins knobs ({', '.join(sorted(known.knobs))}) and {scenario.name} has none")
        try:
            check_pins(space, enable=(), disable=(), knobs=known.knobs)
        except SwarmError as error:
            return not_applicable(f"{error}")
    events = None
    if script is not None:
        try:
            events = parse_script(script)
        except ScriptError as error:
            return not_applicable(f"its fault script cannot be parsed: {error}")
    branch = body.get("branch")
    opts = ScenarioOptions(seed=known.seed, duration_ms=known.duration_ms, store=store, swarm=True,
                           knobs=dict(known.knobs), fault_script=events,
                           script_must_fire=events is not None,
                           branch=None if branch is None else Branch.from_json(branch))
    mutant = mx.current()
    try:
        result = run(scenario, opts)
    except SetupError as error:
        return not_applicable(f"its run cannot be set up: {error}")
    except sqlite3.DatabaseError as error:
        return not_applicable(f"its store cannot be opened: {error}")
    if result.passed:
        return attrs.evolve(known, outcome=PASS, detail="it passes")
    first = result.violations[0]
    if first.invariant == UNFIRED:
        missing = _MISSING.search(first.message)
        if missing:
            return not_applicable(f"its fault script cannot be applied: {missing.group(0)}")
        return attrs.evolve(known, outcome=PASS,
                            detail="it passes (the run took another path: recorded faults not reached)")
    if mutant is not None:  # as ``run`` records it: the repro file and command run the same bug
        result.config["mutant"] = mutant.name

    def command(path: str | None = None) -> str:
        return repro_command(scenario.name, opts, explicit_duration=True, faults_path=path,
                             scenario_modules=corpus_plan.scenario_modules,
                             mutant=None if mutant is None else mutant.name)

    # A scripted entry is reproduced by its repro file (which holds the script); a plain one by its command.
    written = write_repro_or_warn(result, command if events is not None else command(), corpus_plan.repro_dir,
                                  scenario_modules=corpus_plan.scenario_modules)
    shown = command(written) if events is not None and written is not None else command()
    return attrs.evolve(known, outcome=FAIL, detail=f"{first.invariant}: {first.message[:160]}",
                        invariant=first.invariant, simulated_time=format_calendar(first.time_ms),
                        message=first.message, repro_command=shown, repro_file=written)


def progress_line(replay: CorpusReplay) -> str:
    """The line a sweep prints as each entry is replayed."""
    return f"[corpus] {replay.file}: {replay.outcome.upper().replace('-', ' ')}: {replay.detail[:160]}"


def failing(replays: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in replays if r.get("outcome") == FAIL]


def render(replays: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """The sweep summary's section (None: the sweep had no ``--corpus``):
    ``corpus: N entries replayed, all pass``, or the counts and a line
    for each entry that failed (first) or does not apply."""
    if replays is None:
        return []
    count = {o: sum(1 for r in replays if r["outcome"] == o) for o in (FAIL, PASS, NOT_APPLICABLE)}
    many = f"{len(replays)} entr{'y' if len(replays) == 1 else 'ies'} replayed"
    if count[PASS] == len(replays):
        return [f"corpus: {many}, all pass" if replays else "corpus: no entries of the swept scenarios"]
    lines = [f"corpus: {many}: {count[FAIL]} fail, {count[PASS]} pass, {count[NOT_APPLICABLE]} not applicable"]
    for r in replays:
        if r["outcome"] == FAIL:
            lines.append(f"  FAIL {r['scenario']} seed {r['seed']} (corpus entry {r['file']}): {r['invariant']} at "
                         f"{r['simulated_time']}: {str(r['message'])[:120]}")
            lines.append(f"    reproduce: {r['repro_command']}"
                         + (f"  (repro file {r['repro_file']})" if r.get("repro_file") else ""))
    for r in replays:
        if r["outcome"] == NOT_APPLICABLE:
            lines.append(f"  NOT APPLICABLE {r['scenario']} seed {r['seed']} (corpus entry {r['file']}): "
                         f"{r['detail']}")
    return lines
