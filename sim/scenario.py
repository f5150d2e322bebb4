"""What the engine needs from a scenario: a name, a build function, options.

A scenario's ``build(run)`` gets the run's options and swarm choices and
returns a ``sim.workload.Stack``: the system, its workloads, faults and
checks. Scenarios live in ``scenarios/`` (or a user's module); the engine
sees only this interface.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

STORES = ("memory", "sqlite")


class SetupError(Exception):
    """A scenario cannot start with these options (e.g. a non-empty --db).

    The face reports it as a usage error: one line, exit 2.
    """


@attrs.frozen
class Param:
    """A scenario-specific option (``--sentinels 10``)."""

    name: str
    default: int
    help: str
    minimum: int = 1
    maximum: int = 10_000


@attrs.frozen
class Branch:
    """Run to ``fork_at_ms``, then live branch ``key``'s future: the run's
    random streams are re-keyed by the key there (``sim.rng.Streams.branch``).
    The prefix never reads the key, so every branch of a seed shares it,
    event for event; a forked process and this option alone run the same.
    ``streams``: re-key only the streams of these families (``sim.rng.
    family_of``: ``scheduling``, ``faults``, ``workers``, ...) and keep the
    others' draws; empty, every family but the run's configuration and
    machines (``sim.rng.KEPT_AT_BRANCH``)."""

    fork_at_ms: int
    key: int
    streams: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        assert self.fork_at_ms >= 0, self.fork_at_ms
        assert self.key >= 0, self.key
        assert list(self.streams) == sorted(set(self.streams)), self.streams  # one spelling per set

    def as_json(self) -> dict[str, Any]:
        """The branch as explore's inputs and corpus files keep it."""
        return {"fork_at_ms": self.fork_at_ms, "key": self.key, "streams": list(self.streams)}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Branch:
        """The inverse of ``as_json`` (a body already checked: ``sim.face.corpus``)."""
        return cls(int(body["fork_at_ms"]), int(body["key"]), tuple(body.get("streams", ())))


@attrs.frozen
class ScenarioOptions:
    seed: int
    duration_ms: int
    store: str = "memory"
    db_path: str | None = None
    params: Mapping[str, int] = attrs.field(factory=dict)
    # A fault script (``sim.world.FaultEvent``s): when given, the run's faults
    # come from it alone (``--faults FILE``).
    fault_script: tuple[Any, ...] | None = None
    # Swarm testing (``faults.swarm``): let the seed choose the fault mix,
    # failpoints, workload switches and knobs; pins override single choices.
    swarm: bool = False
    faults_enable: tuple[str, ...] = ()
    faults_disable: tuple[str, ...] = ()
    knobs: Mapping[str, int] = attrs.field(factory=dict)
    # Which ready task runs next (``sim.interleave``): fifo | random | pct:D[:K].
    schedule: str = "fifo"
    # Beyond the contract (``faults.beyond``): stores may lose acknowledged
    # writes and tear batches; the run must detect it, loudly.
    beyond_contract: bool = False
    # Per-hit fault rates by kind, replacing the scenario's default mix
    # (``{"ack-lost": 1e-3}``): parameters are data, not module constants.
    rates: Mapping[str, float] | None = None
    # A hand-written script is a targeted test: an entry of it that never
    # fires (a misspelt site or node) fails the run, ``fault-script-unfired``,
    # instead of passing a test that tested nothing. A recorded script (a
    # repro file's) replays without it: after a fix, divergence is expected.
    script_must_fire: bool = False
    # Branching from a deep state (``Branch``): None, the run as it always was.
    branch: Branch | None = None

    def __attrs_post_init__(self) -> None:
        assert self.store in STORES or ":" in self.store, self.store  # or a user adapter, MODULE:FACTORY
        assert self.duration_ms > 0
        assert self.branch is None or self.branch.fork_at_ms < self.duration_ms, (self.branch, self.duration_ms)


@attrs.frozen
class Run:
    """What a scenario's build function sees: the options and the seed's
    swarm choices (``faults.swarm.SwarmChoices``; None without a swarm space)."""

    opts: ScenarioOptions
    choices: Any
    scenario: "Scenario"

    def param(self, name: str) -> int:
        if name in self.opts.params:
            return self.opts.params[name]
        return self.scenario.param_defaults()[name]

    def knob(self, name: str) -> int:
        return self.choices.knob(name)

    def does(self, switch: str) -> bool:
        return self.choices.does(switch)

    def rates(self, default: Mapping[str, float]) -> dict[str, float]:
        return dict(default if self.opts.rates is None else self.opts.rates)


@attrs.frozen
class Scenario:
    name: str
    description: str
    build: Callable[[Run], Any]  # -> sim.workload.Stack
    default_duration_ms: int
    params: tuple[Param, ...] = ()
    # What a seed may choose (``faults.swarm.SwarmSpace``), and the
    # ``sometimes`` properties the scenario expects a sweep to reach.
    swarm_space: Any = None
    sometimes: tuple[str, ...] = ()
    # How long one seed of a sweep runs (a sweep is many short histories;
    # ``default_duration_ms`` is the one long run). None: the default.
    sweep_duration_ms: int | None = None

    @property
    def sweep_ms(self) -> int:
        """A sweep's duration per seed (``loomsim sweep``, ``loomsim mutants``)."""
        return self.sweep_duration_ms or self.default_duration_ms

    def param_defaults(self) -> dict[str, int]:
        return {p.name: p.default for p in self.params}
