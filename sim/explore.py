"""A deterministic coverage-guided search over a scenario's inputs (``loomsim explore``).

An input is a scenario seed, knob pins (each inside its ``Knob``'s legal
range) and a duration. The search starts from seed-only inputs and mutates
corpus entries: a fresh seed, one knob moved to another legal value, or the
duration doubled (capped at ``max_duration_ms``). A run's feedback is a set
of feature names read from its result: fault kinds fired, (port, fault kind)
pairs fired, failpoints fired, ``sometimes`` properties reached, invariants
that made checks, trace event kinds emitted. An input whose feedback adds a feature joins the corpus;
the entry to mutate is drawn weighting each by the sum of 1/count of its
features (rare feedback first).

Every choice comes from the named stream ``explore`` of ``sim.rng.Streams``
seeded by the search's own seed: the same seed and number of runs give the
same corpus and findings on every machine.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Iterable, Mapping

import attrs

from sim.rng import Stream, Streams
from sim.runner import RunResult, run
from sim.scenario import ScenarioOptions

SEED_BOUND = 2 ** 32  # fresh scenario seeds are drawn below this
DURATION_FACTOR_CAP = 4  # a mutated duration is at most this many times the base duration


@attrs.frozen
class Input:
    """One explored input: what a ``loomsim run`` command line pins."""

    seed: int
    knobs: tuple[tuple[str, int], ...] = ()
    duration_ms: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "knobs": dict(self.knobs), "duration_ms": self.duration_ms}


@attrs.frozen
class Entry:
    """A corpus entry: the input, every feature its run reached, the ones it added."""

    input: Input
    features: frozenset[str]
    added: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {**self.input.as_json(), "added": list(self.added)}

    def digest(self) -> str:
        text = json.dumps(self.as_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@attrs.define
class Finding:
    input: Input
    status: str
    violations: tuple[str, ...]
    repro_command: str
    repro_file: str | None


@attrs.define
class Outcome:
    runs: int = 0
    corpus: list[Entry] = attrs.field(factory=list)
    counts: dict[str, int] = attrs.field(factory=dict)  # feature -> runs that reached it
    findings: list[Finding] = attrs.field(factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "corpus_size": len(self.corpus),
                "corpus": [e.as_json() for e in self.corpus],
                "features": dict(sorted(self.counts.items())),
                "failures": [{**f.input.as_json(), "status": f.status, "violations": list(f.violations),
                              "repro_command": f.repro_command, "repro_file": f.repro_file}
                             for f in self.findings]}


class EventKinds:
    """A trace sink (``run(trace_stream=...)``) that keeps the kinds of the
    events it is given (JSON lines) and nothing else; it changes no digest."""

    def __init__(self) -> None:
        self.kinds: set[str] = set()
        self._partial = ""

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            if line:
                self.kinds.add(json.loads(line)["kind"])
        return len(text)

    def flush(self) -> None:
        pass


def features(result: RunResult, event_kinds: Iterable[str] = ()) -> frozenset[str]:
    """The feedback of one run, as feature names (``event_kinds``: the
    trace event kinds it emitted, from an ``EventKinds`` sink)."""
    found: set[str] = {f"event:{kind}" for kind in event_kinds}
    for kind, count in (result.faults or {}).items():
        if count:
            found.add(f"fault:{kind}")
    coverage = result.coverage or {}
    for port, kinds in (coverage.get("ports") or {}).items():
        for kind, count in kinds.items():
            if count:
                found.add(f"port:{port}/{kind}")
    for name, info in (coverage.get("failpoints") or {}).items():
        if isinstance(info, Mapping) and info.get("fired"):
            found.add(f"failpoint:{name}")
    for name, reached in (coverage.get("sometimes") or {}).items():
        if reached:
            found.add(f"sometimes:{name}")
    for name, checks in (result.invariants or {}).items():
        if checks:
            found.add(f"invariant:{name}")
    return frozenset(found)


def _weighted_pick(stream: Stream, corpus: list[Entry], counts: Mapping[str, int]) -> Entry:
    weights = [sum(1.0 / counts[f] for f in sorted(e.features)) or 1e-9 for e in corpus]
    point = stream.unit() * sum(weights)
    for entry, weight in zip(corpus, weights):
        point -= weight
        if point < 0:
            return entry
    return corpus[-1]


def mutate(stream: Stream, base: Input, knobs: Iterable[Any], max_duration_ms: int) -> Input:
    """One mutation of ``base``: a fresh seed, a knob moved, or the duration doubled."""
    knobs = list(knobs)
    moves = ["seed"]
    if knobs:
        moves.append("knob")
    if base.duration_ms * 2 <= max_duration_ms:
        moves.append("duration")
    move = stream.choice(moves)
    if move == "seed":
        return attrs.evolve(base, seed=stream.below(SEED_BOUND))
    if move == "duration":
        return attrs.evolve(base, duration_ms=base.duration_ms * 2)
    knob = stream.choice(knobs)
    pins = dict(base.knobs)
    legal = list(knob.values) if knob.values else None
    current = pins.get(knob.name)
    for _ in range(8):  # another legal value than the current pin, if there is one
        value = stream.choice(legal) if legal else stream.between(knob.minimum, knob.maximum)
        if value != current:
            break
    pins[knob.name] = value
    return attrs.evolve(base, knobs=tuple(sorted(pins.items())))


def explore(scenario: Any, *, runs: int, seed: int, duration_ms: int, store: str = "memory",
            replay: Iterable[Input] = (),
            on_failure: Callable[[Input, ScenarioOptions, RunResult], tuple[str, str | None]] | None = None,
            on_entry: Callable[[Entry], None] | None = None) -> Outcome:
    """Run ``runs`` explored inputs of ``scenario`` (after the ``replay``
    inputs: an earlier corpus). ``on_failure`` reports a failing run and
    returns its repro command and file; ``on_entry`` sees each new corpus entry."""
    stream = Streams(seed)["explore"]
    space = scenario.swarm_space
    knobs = tuple(space.knobs) if space is not None else ()
    max_duration_ms = duration_ms * DURATION_FACTOR_CAP
    outcome = Outcome()
    seen: set[str] = set()
    queue = list(replay)
    for _ in range(len(queue) + runs):
        if queue:
            chosen = queue.pop(0)
        elif not outcome.corpus:
            chosen = Input(seed=stream.below(SEED_BOUND), duration_ms=duration_ms)
        else:
            chosen = mutate(stream, _weighted_pick(stream, outcome.corpus, outcome.counts).input, knobs,
                            max_duration_ms)
        opts = ScenarioOptions(seed=chosen.seed, duration_ms=chosen.duration_ms, store=store, swarm=True,
                               knobs=dict(chosen.knobs))
        sink = EventKinds()
        result = run(scenario, opts, trace_stream=sink)
        outcome.runs += 1
        reached = features(result, sink.kinds)
        for name in reached:
            outcome.counts[name] = outcome.counts.get(name, 0) + 1
        if not result.passed:
            command, path = on_failure(chosen, opts, result) if on_failure else ("", None)
            outcome.findings.append(Finding(chosen, result.status,
                                            tuple(v.invariant for v in result.violations), command, path))
            continue
        added = tuple(sorted(reached - seen))
        if added:
            seen |= reached
            entry = Entry(chosen, reached, added)
            outcome.corpus.append(entry)
            if on_entry is not None:
                on_entry(entry)
    return outcome
