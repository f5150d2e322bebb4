"""Swarm testing: each seed picks its own fault mix, failpoints and knobs.

A fixed mix finds the bugs that mix finds; swarm testing (Groce et al.)
finds more by letting each seed *leave things out*: a run without kills
reaches states a kill would have cut short, a run with a long lease meets
different races than one with a short lease. So per seed, from the
``swarm`` stream (a change here reshuffles nothing else), each choice drawn
from a child stream named for what it chooses (``kind/<name>``,
``failpoint/<name>``, ``workload/<name>``, ``knob/<name>``): adding,
removing or reordering a kind, failpoint, switch or knob moves no other
choice of any seed, so saved seeds and a failure database keep their
meaning when a scenario grows:

- each fault kind the scenario can inject is enabled with probability 1/2
  (at least one stays on);
- failpoints are activated FoundationDB style: each is enabled for the whole
  run with probability 1/2, and an enabled one fires on a fraction of its
  hits: the scenario's failpoint rate times a factor drawn from
  ``FAILPOINT_RATE_FACTORS``;
- each workload switch is on with probability 3/4;
- each knob takes a value uniformly inside its legal range.

Flags pin any of it (``--faults-enable``, ``--faults-disable``,
``--knob name=value``); the run prints every choice first and the JSON
result carries them (``config.swarm``), so the seed stays the handle to the
whole run.
"""
from __future__ import annotations

import hashlib
from typing import Any, Mapping

import attrs

from faults.kinds import FAILPOINT_CRASH
from sim.rng import Stream
from sim.scenario import SetupError

# An activated failpoint fires on this multiple of the scenario's own
# failpoint rate (a fifth of it, as often, or five times as often).
FAILPOINT_RATE_FACTORS = (0.2, 1.0, 5.0)
# Swarm that cannot starve: a covering design over seeds. A fault kind (and
# a failpoint) is switched on, whatever its coin says, in every seed with
# (seed + offset) % ROTATION_SEEDS == 0, its offset derived from its name
# (``rotation_offset``): any ROTATION_SEEDS consecutive seeds enable every
# kind and every failpoint at least once. The coins are drawn as before, so
# a seed's other choices do not move.
ROTATION_SEEDS = 8


@attrs.frozen
class Knob:
    """A scenario setting a seed may vary inside ``[minimum, maximum]``."""

    name: str
    default: int
    minimum: int
    maximum: int
    help: str
    # Draw from these values (each inside the range) instead of uniformly
    # over the range: e.g. page sizes by powers of two, so small pages (the
    # ones that make short logs paginate) are as likely as large ones.
    values: tuple[int, ...] = ()

    def __attrs_post_init__(self) -> None:
        assert self.minimum <= self.default <= self.maximum, self
        assert all(self.minimum <= v <= self.maximum for v in self.values), self

    def draw(self, stream: Stream) -> int:
        if self.values:
            return stream.choice(self.values)
        return stream.between(self.minimum, self.maximum)


def fault_intensity_knob(values: tuple[int, ...] = (1, 1, 10, 100)) -> Knob:
    """The knob ``faults.plan.PortFaults`` scales a seed's point-fault
    rates by: half the seeds at the scenario's rates, the others at higher
    ones (a short sweep seed then sees the kinds its swarm enabled fire).
    A scenario whose rates are already high takes smaller ``values``: at
    too high a rate every process dies before it does anything."""
    assert values and all(1 <= v <= 1_000 for v in values), values
    return Knob("fault_intensity", 1, 1, max(values), "point-fault rate multiplier", values=values)


@attrs.frozen
class SwarmSpace:
    """What a scenario lets a seed choose: its fault kinds, failpoints,
    workload switches and knobs (each drawn by its name; the order is the
    order they are printed in)."""

    fault_kinds: tuple[str, ...]
    failpoints: tuple[str, ...] = ()
    workload: tuple[str, ...] = ()
    knobs: tuple[Knob, ...] = ()
    failpoint_rate: float = 1e-4  # the scenario's failpoint-crash rate per hit
    # Rare failpoints (few hits a seed: a parent aborted while its child
    # waits, a join): (name, multiplier) of ``failpoint_rate`` when activated,
    # so that a sweep fires each. It changes no draw.
    failpoint_boosts: tuple[tuple[str, float], ...] = ()

    def knob(self, name: str) -> Knob:
        for knob in self.knobs:
            if knob.name == name:
                return knob
        raise KeyError(name)

    def choices_for(self, world: Any, opts: Any) -> "SwarmChoices":
        """The run's choices (the runner calls this first, before the build)."""
        return choose_for(world, opts, self)


@attrs.frozen
class SwarmChoices:
    swarm: bool
    fault_kinds: tuple[str, ...]            # enabled kinds
    # Activated failpoints and their fractions; None (the full mix): every
    # failpoint at the scenario's own failpoint-crash rate.
    failpoints: tuple[tuple[str, float], ...] | None
    workload: tuple[str, ...]               # enabled workload switches
    knobs: tuple[tuple[str, int], ...]

    def enabled(self, kind: str) -> bool:
        return kind in self.fault_kinds

    def does(self, operation: str) -> bool:
        return operation in self.workload

    def knob(self, name: str) -> int:
        return dict(self.knobs)[name]

    def knob_or(self, name: str, default: int) -> int:
        """A knob the scenario may not have (the system's busy timeout)."""
        return dict(self.knobs).get(name, default)

    def site_rates(self, failpoints: tuple[str, ...], kind: str) -> dict[str, dict[str, float]]:
        """Per-failpoint rates for ``FaultPlan(site_rates=...)``: activated
        ones at their fraction, the others never (empty in the full mix)."""
        if self.failpoints is None:
            return {}
        active = dict(self.failpoints)
        return {name: {kind: active.get(name, 0.0)} for name in failpoints}

    def to_json(self) -> dict[str, Any]:
        return {"swarm": self.swarm, "fault_kinds": list(self.fault_kinds),
                "failpoints": "all" if self.failpoints is None else {n: f for n, f in self.failpoints},
                "workload": list(self.workload), "knobs": dict(self.knobs)}

    def describe(self) -> str:
        if self.failpoints is None:
            fps = "all at the scenario's rate"
        else:
            fps = ", ".join(f"{name} 1/{round(1 / fraction)}" for name, fraction in self.failpoints) or "none"
        knobs = " ".join(f"{name}={value}" for name, value in self.knobs)
        mode = "swarm" if self.swarm else "full mix"
        return (f"{mode}: faults={','.join(self.fault_kinds) or 'none'}; failpoints={fps}; "
                f"workload={','.join(self.workload) or 'none'}; {knobs}")


class SwarmError(SetupError):
    """A pinned choice that the scenario does not have, or outside its range."""

    name = "SwarmError"


def check_pins(space: SwarmSpace, *, enable: tuple[str, ...], disable: tuple[str, ...],
               knobs: Mapping[str, int]) -> None:
    choosable = space.fault_kinds + space.workload
    for name in enable + disable:
        if name not in choosable:
            raise SwarmError(f"{name!r} is not a fault kind or workload switch of this scenario; "
                             f"known: {', '.join(choosable)}")
    both = sorted(set(enable) & set(disable))
    if both:
        raise SwarmError(f"{', '.join(both)} both enabled and disabled")
    names = [k.name for k in space.knobs]
    for name, value in knobs.items():
        if name not in names:
            raise SwarmError(f"unknown knob {name!r}; this scenario's knobs: {', '.join(names) or 'none'}")
        knob = space.knob(name)
        if not knob.minimum <= value <= knob.maximum:
            raise SwarmError(f"knob {name}={value} is outside its legal range {knob.minimum}..{knob.maximum}")


def rotation_offset(name: str) -> int:
    """Where in the rotation ``name`` is switched on: from its name, not its
    position in the scenario's list (a kind added before it moves nothing)."""
    return int.from_bytes(hashlib.sha256(f"rotation/{name}".encode("utf-8")).digest()[:8], "big") % ROTATION_SEEDS


def _rotated_on(seed: int | None, name: str) -> bool:
    return seed is not None and (seed + rotation_offset(name)) % ROTATION_SEEDS == 0


def choose(space: SwarmSpace, stream: Stream, *, swarm: bool, enable: tuple[str, ...] = (),
           disable: tuple[str, ...] = (), knobs: Mapping[str, int] | None = None,
           seed: int | None = None) -> SwarmChoices:
    """The run's choices. Without ``swarm``: every kind, every failpoint (at
    the scenario's rate), every workload switch, default knobs — the
    scenario's full mix — still subject to the pins. With ``seed``, the
    rotation (``ROTATION_SEEDS``) switches some kinds and failpoints on."""
    knobs = dict(knobs or {})
    check_pins(space, enable=enable, disable=disable, knobs=knobs)
    # Draw everything, pinned or not, each from its own named stream: a pin
    # changes that choice only, and a choice added or removed moves none of
    # the others.
    kinds = []
    for kind in space.fault_kinds:
        on = stream.child(f"kind/{kind}").below(2) == 0 if swarm else True
        on = on or _rotated_on(seed, kind)
        if kind in enable or (on and kind not in disable):
            kinds.append(kind)
    if swarm and not kinds and not enable:
        free = [k for k in space.fault_kinds if k not in disable]
        if free:
            kinds.append(stream.child("kind/fallback:" + ",".join(sorted(free))).choice(sorted(free)))
    failpoints: list[tuple[str, float]] | None = [] if swarm else None
    rotated_failpoint = False
    if swarm:
        boosts = dict(space.failpoint_boosts)
        for name in space.failpoints:
            own = stream.child(f"failpoint/{name}")
            rotated = _rotated_on(seed, name)
            on = own.below(2) == 0 or rotated
            fraction = min(1.0, space.failpoint_rate * boosts.get(name, 1) * own.choice(FAILPOINT_RATE_FACTORS))
            if on:
                failpoints.append((name, fraction))
                rotated_failpoint = rotated_failpoint or rotated
    # A failpoint fires only with failpoint-crash on: the rotation that
    # switches a failpoint on switches the kind on too (else the covering
    # design would cover failpoints only on paper).
    if (rotated_failpoint and FAILPOINT_CRASH in space.fault_kinds and FAILPOINT_CRASH not in kinds
            and FAILPOINT_CRASH not in disable):
        kinds = [k for k in space.fault_kinds if k in kinds or k == FAILPOINT_CRASH]
    workload = []
    for operation in space.workload:
        on = stream.child(f"workload/{operation}").below(4) != 0 if swarm else True
        if operation in enable or (on and operation not in disable):
            workload.append(operation)
    values = []
    for knob in space.knobs:
        drawn = knob.draw(stream.child(f"knob/{knob.name}")) if swarm else knob.default
        values.append((knob.name, knobs.get(knob.name, drawn)))
    return SwarmChoices(swarm, tuple(kinds), None if failpoints is None else tuple(failpoints), tuple(workload),
                        tuple(values))


def choose_for(world: Any, opts: Any, space: SwarmSpace) -> SwarmChoices:
    """The choices of this run (from the world's ``swarm`` stream), recorded
    in the world's config so the run prints them first and the result
    carries them."""
    choices = choose(space, world.streams["swarm"], swarm=opts.swarm, enable=tuple(opts.faults_enable),
                     disable=tuple(opts.faults_disable), knobs=opts.knobs, seed=opts.seed)
    world.config_extra["swarm"] = choices.to_json()
    world.config_extra["swarm_line"] = choices.describe()
    return choices
