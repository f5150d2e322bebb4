"""A deterministic coverage-guided search over a scenario's inputs (``loomsim explore``).

An input is a scenario seed, knob pins (each inside its ``Knob``'s legal
range), a duration and, optionally, a pinned fault script (its run takes
its faults, and scheduling deviations, from the script alone). The search
starts from seed-only inputs and mutates corpus entries: a fresh seed, one
knob moved to another legal value, the duration doubled (capped at
``DURATION_FACTOR_CAP`` times the base), or the entry's recorded script
(what its run fired) edited: a fault added, dropped, shifted in time or
moved to another hit of its site, two entries' scripts spliced at a time,
a scheduling deviation added, dropped or shifted, or one stream family
(its scheduling, its workers' choices, ...) re-keyed from an instant on
(``rekey``: a ``Branch`` that names the family; the run is ``run --fork-at
T --branch K --branch-streams F``).

A run's feedback is a set of feature names ``<family>:<detail>`` read from
its result and its world: fault kinds fired, faults per port site, failpoints
fired, ``sometimes`` properties reached, invariants that made checks, trace
event kinds and shapes, and what the face's observers add (ledger state
transitions, model branch arcs). An input whose feedback adds a feature
joins the corpus; the entry to mutate is drawn weighting each by the sum of
1/count of its features (rare feedback first).

Fresh inputs are a sweep's seeds, in a sweep's order from the search's own
seed (``explore --seed 0`` runs seeds 0, 1, 2, ... as ``sweep --seeds 0:N``
does): the first batch is all fresh, and each later batch begins with the
next ``FRESH_PER_BATCH`` fresh seeds (half of it). So a search of N runs
runs the seeds a sweep of its first N/2 or more inputs would run (every one
of them at N <= ``BATCH``), and spends the rest of its runs on mutations of
what reached new behaviour; a fresh seed is never a random one, whose
failures a sweep could not have found. The face runs a fresh seed as a
sweep's run of it (``explore --duration`` defaults to the scenario's sweep
duration): same seed, same run, same verdict.

Inputs go in batches of ``BATCH``: a batch is chosen from the corpus as it
stands, run (by the face's ``execute``, in processes or not), then folded in
input order, so the search does not depend on how many processes ran it.
Every choice comes from a child of the named stream ``explore`` (of
``sim.rng.Streams`` seeded by the search's own seed), by input index and
choice name: the same seed and number of runs give the same corpus and
findings on every machine. Nothing here reads a clock (``cpu_clock`` is the
face's).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import attrs

from sim.interleave import Deviation
from sim.rng import KEPT_AT_BRANCH, Stream, Streams
from sim.runner import BRANCH_EVENT, RunResult, run
from sim.scenario import Branch, ScenarioOptions
from sim.world import FaultEvent

SEED_BOUND = 2 ** 32  # fresh scenario seeds are drawn below this
DURATION_FACTOR_CAP = 4  # a mutated duration is at most this many times the base duration
BATCH = 8  # inputs chosen per batch from the corpus as it stands (never depends on --jobs)
# Fresh sweep-order seeds at the start of each batch after the first: half of
# it, so a search of N runs has run at least the sweep's first N/2 seeds (all
# N when N <= BATCH) and spends the other half on mutations.
FRESH_PER_BATCH = BATCH // 2
SCRIPT_EVENTS_MAX = 64  # entries a pinned fault script holds at most (a longer base is cut, by time)
HIT_MOVE_MAX = 8  # a fault moved to another hit of its site moves by at most this many hits
SHIFT_DIVISOR = 4  # a shifted entry moves by at most duration / SHIFT_DIVISOR
RAREST_SHOWN = 20
PICK_TRIES = 8  # draws for a value other than the current one, at most
# The timed kinds fire at their time (``faults.kinds.TIMED_FAULT_KINDS``; sim/
# may not import faults/): a hit means nothing to them. Kept in step by a test.
TIMED_KINDS = frozenset({"node-kill", "duplicate-wake", "node-pause", "clock-jump", "clock-jump-beyond", "partition",
                         "latent-sector-error", "lost-tail", "torn-write", "misdirected-write"})
REKEY_KEY_BOUND = 2 ** 16  # a re-keyed family's branch key is drawn below this
REKEY_STEP_MS = 1_000  # a re-key instant is a whole second
SCRIPT_MUTATIONS = ("script-add", "script-drop", "script-shift", "script-move-hit", "script-splice",
                    "schedule-add", "schedule-drop", "schedule-shift")


@attrs.frozen
class Input:
    """One explored input: what a ``loomsim run`` command line pins."""

    seed: int
    knobs: tuple[tuple[str, int], ...] = ()
    duration_ms: int = 0
    # A pinned fault script (``FaultEvent``s and ``Deviation``s), or None: faults drawn from the seed.
    fault_script: tuple[Any, ...] | None = None
    # One stream family re-keyed from an instant on (``Branch`` with ``streams``), or None.
    branch: Branch | None = None

    def as_json(self) -> dict[str, Any]:
        out = {"seed": self.seed, "knobs": dict(self.knobs), "duration_ms": self.duration_ms,
               "script_entries": None if self.fault_script is None else len(self.fault_script)}
        if self.branch is not None:
            out["branch"] = self.branch.as_json()
        return out

    def options(self, store: str) -> ScenarioOptions:
        return ScenarioOptions(seed=self.seed, duration_ms=self.duration_ms, store=store, swarm=True,
                               knobs=dict(self.knobs), fault_script=self.fault_script, branch=self.branch)


@attrs.frozen
class Entry:
    """A corpus entry: the input, every feature its run reached, the ones it
    added, the script its run fired (``RunResult.fault_script``), how it was
    made (``mutation``, and the index of the entry it was mutated from)."""

    input: Input
    features: frozenset[str]
    added: tuple[str, ...]
    script: tuple[Any, ...] = ()
    mutation: str = "fresh"
    parent: int | None = None
    file: str | None = None
    run: int = 0  # the index of the run that found it
    families: tuple[str, ...] = ()  # the stream families its run drew from (what ``rekey`` may re-key)

    def as_json(self) -> dict[str, Any]:
        return {"run": self.run, **self.input.as_json(), "mutation": self.mutation, "parent": self.parent,
                "added": list(self.added), "file": self.file}


@attrs.frozen
class Candidate:
    """An input chosen for a batch, with how it was made."""

    input: Input
    mutation: str
    parent: int | None = None


@attrs.frozen
class Observed:
    """What one run gave the search (picklable: ``--jobs`` sends it between processes)."""

    features: frozenset[str]
    status: str
    passed: bool
    violations: tuple[str, ...]
    script: tuple[Any, ...]
    cpu_s: float = 0.0
    result: RunResult | None = None  # kept for a failing run only (its repro file)
    trace_digest: str = ""
    families: tuple[str, ...] = ()  # the stream families the run drew from (``Streams.families``)


@attrs.define
class Finding:
    input: Input
    status: str
    violations: tuple[str, ...]
    repro_command: str
    repro_file: str | None


class Observer(Protocol):
    """A feedback source for one run: ``attach`` sees the wired world
    (``run(on_world=...)``), ``features`` is read after the run, ``close``
    always runs (it must leave nothing switched on)."""

    def attach(self, world: Any) -> None: ...

    def features(self) -> Iterable[str]: ...

    def close(self) -> None: ...


@attrs.define
class Outcome:
    runs: int = 0
    batches: int = 0
    corpus: list[Entry] = attrs.field(factory=list)
    counts: dict[str, int] = attrs.field(factory=dict)  # feature -> runs that reached it
    findings: list[Finding] = attrs.field(factory=list)
    timeline: list[dict[str, int]] = attrs.field(factory=list)
    cpu_s_after_run: list[float] = attrs.field(factory=list)
    fresh: int = 0  # fresh inputs made so far: the next one is the search seed + this
    # What each move (``fresh``, ``replay``, a mutation's name) gave: [runs, corpus entries, features added].
    moves: dict[str, list[int]] = attrs.field(factory=dict)

    def as_json(self, universes: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
        universes = universes or {}
        families: dict[str, dict[str, Any]] = {}
        for name in sorted(self.counts):
            family = name.split(":", 1)[0]
            families.setdefault(family, {"reached": 0, "universe": None})["reached"] += 1
        for family, members in sorted(universes.items()):
            families.setdefault(family, {"reached": 0, "universe": None})["universe"] = len(members)
        never = [m for family in sorted(universes) for m in universes[family] if m not in self.counts]
        rarest = sorted(self.counts.items(), key=lambda item: (item[1], item[0]))[:RAREST_SHOWN]
        return {"runs": self.runs, "batch": BATCH, "corpus_size": len(self.corpus),
                "corpus": [e.as_json() for e in self.corpus],
                "features": dict(sorted(self.counts.items())),
                "families": dict(sorted(families.items())),
                "timeline": list(self.timeline),
                "never_taken": never,
                "rarest": [[name, count] for name, count in rarest],
                "moves": {name: {"runs": runs, "entries": entries, "added": added}
                          for name, (runs, entries, added) in sorted(self.moves.items())},
                "failures": [{**f.input.as_json(), "status": f.status, "violations": list(f.violations),
                              "repro_command": f.repro_command, "repro_file": f.repro_file}
                             for f in self.findings]}


# --- feedback -------------------------------------------------------------------------


def features(result: RunResult, world: Any = None, fault_states: Mapping[int, str] | None = None) -> frozenset[str]:
    """The feedback of one run, as feature names. With its ``world`` (read
    after the run: ``run(on_world=...)``), also the trace event kinds and
    shapes, and faults per port site (``port:<site>/<kind>``, or
    ``port:<site>/<kind>/<state>`` where ``fault_states`` names the state of
    what the fault hit, by its index in ``world.fault_events``)."""
    found: set[str] = set()
    for kind, count in (result.faults or {}).items():
        if count:
            found.add(f"fault:{kind}")
    coverage = result.coverage or {}
    failpoints = coverage.get("failpoints") or {}
    for name, info in failpoints.items():
        if isinstance(info, Mapping) and info.get("fired"):
            found.add(f"failpoint:{name}")
    for name, reached in (coverage.get("sometimes") or {}).items():
        if reached:
            found.add(f"sometimes:{name}")
    for name, checks in (result.invariants or {}).items():
        if checks:
            found.add(f"invariant:{name}")
    if world is None:
        for port, kinds in (coverage.get("ports") or {}).items():
            for kind, count in kinds.items():
                if count:
                    found.add(f"port:{port}/{kind}")
        return frozenset(found)
    trace = world.trace
    # The fork of a ``rekey`` input is how the input was made, not what its run reached.
    found.update(f"event:{kind}" for kind in trace.counts if kind != BRANCH_EVENT)
    # The trace keeps each (kind, field names) shape it hashed (bounded by the event types).
    found.update(f"shape:{kind}/{','.join(sorted(names))}" for kind, names in trace._shapes if kind != BRANCH_EVENT)
    hits = world.site_hits() if world.site_hits is not None else {}
    states = fault_states or {}
    for index, event in enumerate(world.fault_events):
        site = event.site
        if "." not in site or site in failpoints or site not in hits:
            continue  # a port call is a site the plan counted hits of, minus failpoints (as ``coverage``)
        state = states.get(index)
        found.add(f"port:{site}/{event.kind}" + (f"/{state}" if state is not None else ""))
    return frozenset(found)


def run_input(scenario: Any, item: Input, store: str,
              observers: Callable[[], Sequence[Observer]] = lambda: (),
              cpu_clock: Callable[[], float] | None = None, at_fork: Callable[[], int] | None = None) -> Observed:
    """Run ``item`` with the feedback ``observers`` make (fresh ones per run)
    attached; ``cpu_clock`` (the face's) only measures the run's CPU time.
    ``at_fork`` (a branch input: the runner's, ``sim.runner.run``) may fork
    the process at the branch's instant and returns the key this process
    lives: the answer is then that branch's (``Observed.cpu_s`` is this
    process's CPU since the fork; the face adds the prefix's share)."""
    started_s = cpu_clock() if cpu_clock else 0.0
    made = list(observers())
    seen: list[Any] = []

    def on_world(world: Any) -> None:
        seen.append(world)
        world.streams.record_families()  # what a ``rekey`` mutation of this input may re-key
        for observer in made:
            observer.attach(world)

    try:
        def forked() -> int:
            nonlocal started_s
            assert at_fork is not None
            key = at_fork()
            started_s = cpu_clock() if cpu_clock else 0.0  # a forked child's CPU clock starts again
            return key

        result = run(scenario, item.options(store), on_world=on_world, at_fork=forked if at_fork else None)
        extra: set[str] = set()
        states: dict[int, str] = {}
        for observer in made:
            extra.update(observer.features())
            states.update(getattr(observer, "fault_states", lambda: {})())
    finally:
        for observer in made:
            observer.close()
    reached = features(result, seen[0] if seen else None, states) | extra
    return Observed(reached, result.status, result.passed, tuple(v.invariant for v in result.violations),
                    tuple(result.fault_script), round((cpu_clock() - started_s) if cpu_clock else 0.0, 6),
                    None if result.passed else result, result.trace_digest,
                    seen[0].streams.families() if seen else ())


# --- choosing inputs -----------------------------------------------------------------


def _weighted_pick(stream: Stream, corpus: Sequence[Entry], counts: Mapping[str, int]) -> int:
    weights = [sum(1.0 / counts[f] for f in sorted(e.features)) or 1e-9 for e in corpus]
    point = stream.unit() * sum(weights)
    for index, weight in enumerate(weights):
        point -= weight
        if point < 0:
            return index
    return len(corpus) - 1


def mutate(stream: Stream, base: Input, knobs: Iterable[Any], max_duration_ms: int) -> Input:
    """One mutation of ``base``: a fresh seed, a knob moved, or the duration doubled."""
    return _mutate_input(stream, base, list(knobs), max_duration_ms)[0]


def _mutate_input(stream: Stream, base: Input, knobs: list[Any], max_duration_ms: int) -> tuple[Input, str]:
    moves = ["seed"]
    if knobs:
        moves.append("knob")
    if base.duration_ms * 2 <= max_duration_ms:
        moves.append("duration")
    move = stream.child("move").choice(moves)
    if move == "seed":
        return attrs.evolve(base, seed=stream.child("seed").below(SEED_BOUND)), move
    if move == "duration":
        return attrs.evolve(base, duration_ms=base.duration_ms * 2), move
    pick = stream.child("knob")
    knob = pick.choice(knobs)
    pins = dict(base.knobs)
    legal = list(knob.values) if knob.values else None
    current = pins.get(knob.name)
    value = current
    for _ in range(PICK_TRIES):  # another legal value than the current pin, if there is one
        value = pick.choice(legal) if legal else pick.between(knob.minimum, knob.maximum)
        if value != current:
            break
    pins[knob.name] = value
    return attrs.evolve(base, knobs=tuple(sorted(pins.items()))), move


def _bounded(events: Iterable[Any]) -> tuple[Any, ...]:
    """A script in time order (stable), at most ``SCRIPT_EVENTS_MAX`` entries (the earliest)."""
    ordered = sorted(events, key=lambda e: e.time_ms)
    return tuple(ordered[:SCRIPT_EVENTS_MAX])


def _unhit(event: FaultEvent, time_ms: int) -> FaultEvent:
    """``event`` at ``time_ms``: a point fault loses its hit, so it fires at
    the first hit of its site at or after that time (``faults.script``);
    a timed one fires at its time."""
    return attrs.evolve(event, time_ms=time_ms, hit=None if event.kind not in TIMED_KINDS else event.hit)


def _free_hits(script: Sequence[Any]) -> set[tuple[str, int]]:
    return {(e.site, e.hit) for e in script
            if isinstance(e, FaultEvent) and e.hit is not None and e.kind not in TIMED_KINDS}


def _shifted_time(stream: Stream, time_ms: int, duration_ms: int) -> int:
    reach = max(1, duration_ms // SHIFT_DIVISOR)
    return min(max(0, time_ms + stream.between(-reach, reach)), max(0, duration_ms - 1))


def script_mutations(script: Sequence[Any]) -> list[str]:
    """The script mutations that apply to ``script`` (a splice needs another entry: the caller's)."""
    faults = [e for e in script if isinstance(e, FaultEvent)]
    deviations = [e for e in script if isinstance(e, Deviation)]
    moves = []
    if faults:
        moves += ["script-add", "script-drop", "script-shift"]
        if any(e.hit is not None and e.kind not in TIMED_KINDS for e in faults):
            moves.append("script-move-hit")
    if deviations:
        moves += ["schedule-add", "schedule-drop", "schedule-shift"]
    return moves


def mutate_script(stream: Stream, move: str, script: Sequence[Any], duration_ms: int,
                  kinds_at: Mapping[str, Sequence[str]], other: Sequence[Any] = ()) -> tuple[Any, ...]:
    """``script`` after ``move`` (one of ``SCRIPT_MUTATIONS``). ``kinds_at``:
    site -> the fault kinds seen there in the corpus (an added fault may take
    one); ``other``: the second script of a splice."""
    script = list(_bounded(script))
    faults = [i for i, e in enumerate(script) if isinstance(e, FaultEvent)]
    deviations = [i for i, e in enumerate(script) if isinstance(e, Deviation)]
    if move == "script-splice":
        cut_ms = stream.child("cut").below(max(1, duration_ms))
        head = [e for e in script if e.time_ms < cut_ms]
        taken = _free_hits(head)
        tail = [e for e in other if e.time_ms >= cut_ms and not (
            isinstance(e, FaultEvent) and e.hit is not None and e.kind not in TIMED_KINDS and (e.site, e.hit) in taken)]
        return _bounded([*head, *tail])
    if move in ("script-add", "script-drop", "script-shift", "script-move-hit"):
        pool = faults
    else:
        pool = deviations
    assert pool, (move, len(script))
    if move == "script-move-hit":
        pool = [i for i in pool if script[i].hit is not None and script[i].kind not in TIMED_KINDS]
    index = stream.child("which").choice(pool)
    event = script[index]
    if move in ("script-drop", "schedule-drop"):
        del script[index]
        return _bounded(script)
    if move == "script-move-hit":
        taken = _free_hits(script)
        pick = stream.child("hit")
        hit = event.hit
        for _ in range(PICK_TRIES):
            hit = max(1, event.hit + pick.between(-HIT_MOVE_MAX, HIT_MOVE_MAX))
            if (event.site, hit) not in taken:
                break
        else:
            return _bounded(script)  # no free hit nearby: unchanged
        script[index] = attrs.evolve(event, hit=hit)
        return _bounded(script)
    time_ms = _shifted_time(stream.child("time"), event.time_ms, duration_ms)
    if move == "schedule-shift":
        script[index] = attrs.evolve(event, time_ms=time_ms, step=None)
    elif move == "schedule-add":
        script.append(attrs.evolve(event, time_ms=time_ms, step=None))
    elif move == "script-shift":
        script[index] = _unhit(event, time_ms)
    else:  # script-add: a copy moved in time, maybe of another kind seen at its site
        kinds = sorted(set(kinds_at.get(event.site, ())) - TIMED_KINDS) if event.kind not in TIMED_KINDS else []
        kind = stream.child("kind").choice(kinds) if kinds else event.kind
        script.append(attrs.evolve(_unhit(event, time_ms), kind=kind))
    return _bounded(script)


def rekeyable(families: Sequence[str]) -> list[str]:
    """The families a branch may re-key (never the run's configuration or machines)."""
    return [family for family in families if family not in KEPT_AT_BRANCH]


def rekey(stream: Stream, base: Input, families: Sequence[str]) -> Input:
    """``base`` with one stream family re-keyed from an instant of its run
    on (a ``Branch`` with ``streams``): the same seed, knobs and script,
    another future for that family alone (its scheduling, its workers'
    choices, its faults' draws). It replaces a re-key ``base`` had."""
    family = stream.child("family").choice(rekeyable(families))
    steps = max(1, base.duration_ms // REKEY_STEP_MS)
    fork_at_ms = stream.child("at").below(steps) * REKEY_STEP_MS
    key = stream.child("key").below(REKEY_KEY_BOUND)
    return attrs.evolve(base, branch=Branch(fork_at_ms, key, (family,)))


def _kinds_at(corpus: Sequence[Entry]) -> dict[str, list[str]]:
    found: dict[str, set[str]] = {}
    for entry in corpus:
        for event in entry.script:
            if isinstance(event, FaultEvent):
                found.setdefault(event.site, set()).add(event.kind)
    return {site: sorted(kinds) for site, kinds in sorted(found.items())}


def choose(stream: Stream, outcome: Outcome, knobs: list[Any], max_duration_ms: int,
           kinds_at: Mapping[str, Sequence[str]]) -> Candidate:
    """One mutated input, from the corpus as it stands (``stream``: this input's own)."""
    corpus = outcome.corpus
    parent = _weighted_pick(stream.child("pick"), corpus, outcome.counts)
    base = corpus[parent]
    moves = ["input", *script_mutations(base.script)]
    scripted = [i for i, e in enumerate(corpus) if e.script and i != parent]
    if base.script and scripted:
        moves.append("script-splice")
    if rekeyable(base.families):
        moves.append("rekey")
    move = stream.child("mutation").choice(moves)
    if move == "rekey":
        return Candidate(rekey(stream.child("rekey"), base.input, base.families), move, parent)
    if move == "input":
        item, name = _mutate_input(stream.child("input"), base.input, knobs, max_duration_ms)
        return Candidate(item, name, parent)
    other = corpus[stream.child("other").choice(scripted)].script if move == "script-splice" else ()
    script = mutate_script(stream.child(move), move, base.script, base.input.duration_ms, kinds_at, other)
    return Candidate(attrs.evolve(base.input, fault_script=script), move, parent)


# --- the search ------------------------------------------------------------------------


def _serial(scenario: Any, store: str, observers: Callable[[], Sequence[Observer]],
            cpu_clock: Callable[[], float] | None) -> Callable[[Sequence[Input]], list[Observed]]:
    return lambda items: [run_input(scenario, item, store, observers, cpu_clock) for item in items]


def explore(scenario: Any, *, runs: int, seed: int, duration_ms: int, store: str = "memory",
            replay: Iterable[Input] = (),
            on_failure: Callable[[Input, ScenarioOptions, RunResult], tuple[str, str | None]] | None = None,
            on_entry: Callable[[Entry], str | None] | None = None,
            observers: Callable[[], Sequence[Observer]] = lambda: (),
            execute: Callable[[Sequence[Input]], list[Observed]] | None = None,
            cpu_clock: Callable[[], float] | None = None,
            stop: Callable[[Outcome], bool] | None = None, into: Outcome | None = None,
            fresh_only: bool = False, fork_at_ms: int | None = None, branches: int = 0) -> Outcome:
    """Run the ``replay`` inputs (an earlier corpus), then ``runs`` explored
    inputs of ``scenario``, ``BATCH`` at a time. ``on_failure`` reports a
    failing run and returns its repro command and file; ``on_entry`` sees each
    new corpus entry and returns the file it was saved in (or None);
    ``execute`` runs a batch (default: here, one after the other); ``stop``,
    asked after each batch, ends the search early (a budget spent);
    ``into``: the outcome to fill (the caller keeps what finished if a batch
    is interrupted); ``fresh_only``: no mutation, every input a fresh seed
    (what a sweep of as many runs reaches: the baseline a search is measured
    against); ``fork_at_ms`` and ``branches``: fresh inputs are the
    ``branches`` branches of each seed forked at ``fork_at_ms`` (``fresh_input``)."""
    assert (fork_at_ms is None) == (branches == 0), (fork_at_ms, branches)
    assert fork_at_ms is None or 0 < fork_at_ms < duration_ms, (fork_at_ms, duration_ms)
    root = Streams(seed)["explore"]
    space = scenario.swarm_space
    knobs = list(space.knobs) if space is not None else []
    max_duration_ms = duration_ms * DURATION_FACTOR_CAP
    execute = execute or _serial(scenario, store, observers, cpu_clock)
    outcome = into if into is not None else Outcome()
    seen: set[str] = set()
    queue = [Candidate(item, "replay") for item in replay]
    total = len(queue) + runs
    index = 0
    cpu_total_s = 0.0
    while index < total:
        size = min(BATCH, total - index)
        batch: list[Candidate] = []
        kinds_at = _kinds_at(outcome.corpus)
        for offset in range(size):
            position = index + offset
            if queue:
                batch.append(queue.pop(0))
                continue
            stream = root.child(f"input-{position}")
            if fresh_only or not outcome.corpus or offset < FRESH_PER_BATCH:
                batch.append(Candidate(fresh_input(seed, outcome.fresh, duration_ms, fork_at_ms, branches), "fresh"))
                outcome.fresh += 1
            else:
                batch.append(choose(stream, outcome, knobs, max_duration_ms, kinds_at))
        observed = execute([c.input for c in batch])
        assert len(observed) == len(batch), (len(observed), len(batch))
        for candidate, seen_run in zip(batch, observed):
            _fold(outcome, seen, candidate, seen_run, store, on_failure, on_entry)
            cpu_total_s += seen_run.cpu_s
            outcome.cpu_s_after_run.append(round(cpu_total_s, 3))
        index += size
        outcome.batches += 1
        if stop is not None and index < total and stop(outcome):
            break
    return outcome


def fresh_input(seed: int, fresh: int, duration_ms: int, fork_at_ms: int | None = None, branches: int = 0) -> Input:
    """The search's ``fresh``-th fresh input: the sweep's seed ``seed +
    fresh``; or, with ``branches`` (``explore --fork-at T --branches K``),
    branch ``fresh % K`` of seed ``seed + fresh // K`` forked at T: the run
    ``loomsim run --fork-at T --branch k`` makes, whose K futures of one seed
    share its prefix (the face runs that prefix once and forks it)."""
    if fork_at_ms is None:
        return Input(seed=(seed + fresh) % SEED_BOUND, duration_ms=duration_ms)
    return Input(seed=(seed + fresh // branches) % SEED_BOUND, duration_ms=duration_ms,
                 branch=Branch(fork_at_ms, fresh % branches))


def prefix_of(item: Input) -> Input | None:
    """What a branch input shares with every other branch of the same run
    (the input with its branch key zeroed: the prefix never reads the key),
    or None for an input that is not a branch."""
    if item.branch is None:
        return None
    return attrs.evolve(item, branch=attrs.evolve(item.branch, key=0))


def _fold(outcome: Outcome, seen: set[str], candidate: Candidate, observed: Observed, store: str,
          on_failure: Callable[..., tuple[str, str | None]] | None,
          on_entry: Callable[[Entry], str | None] | None) -> None:
    chosen = candidate.input
    outcome.runs += 1
    move = outcome.moves.setdefault(candidate.mutation, [0, 0, 0])
    move[0] += 1
    reached = observed.features
    for name in reached:
        outcome.counts[name] = outcome.counts.get(name, 0) + 1
    if not observed.passed:
        assert observed.result is not None
        command, path = on_failure(chosen, chosen.options(store), observed.result) if on_failure else ("", None)
        outcome.findings.append(Finding(chosen, observed.status, observed.violations, command, path))
    else:
        added = tuple(sorted(reached - seen))
        if added:
            move[1] += 1
            move[2] += len(added)
            seen |= reached
            entry = Entry(chosen, reached, added, observed.script, candidate.mutation, candidate.parent,
                          run=outcome.runs - 1, families=observed.families)
            if on_entry is not None:
                entry = attrs.evolve(entry, file=on_entry(entry))
            outcome.corpus.append(entry)
    outcome.timeline.append({"run": outcome.runs - 1, "features": len(outcome.counts),
                             "corpus": len(outcome.corpus)})

