"""Workloads, and a scenario as a stack of them.

A ``Workload`` is one concern of a simulated history: an application (a
fleet of sentinels, a submission client, a pool of workers) or a piece of
chaos (node kills, pauses, duplicate alarms, operator edits, deploys). It
has FoundationDB's four methods:

- ``setup(world)``: create its nodes (processes) and subscriptions; the
  stores are open, nothing has run yet;
- ``start(world)``: begin its activity (timers, harness loops, timed faults);
- ``check(view)``: after the run, read the stores through the system's audit
  view and report what it finds through its checkers;
- ``metrics()``: what it did, as plain numbers (a scenario's stats).

A ``Stack`` is what a scenario's build function returns: the system (its
stores and ports), the workloads in order, the port faults, the checks, and
how long the run heals and settles. The runner owns the phases (setup ->
run with faults -> heal -> settle -> check -> metrics) and computes the one
``heal_at_ms`` every fault source obeys. The engine knows the system and the
faults only by the protocols of ``sim.seams``: it imports nothing above ``sim``.
"""
from __future__ import annotations

from typing import Any, Sequence

import attrs

from sim.invariants import Checker
from sim.seams import AuditViewSeam, FaultsSeam, SystemSeam
from sim.world import World


class Workload:
    """Subclass and override what the concern needs; every method is optional."""

    name: str = ""

    def setup(self, world: World) -> None:
        """Create nodes and subscriptions. Stores are open; nothing has run."""

    def start(self, world: World) -> None:
        """Begin: spawn loops, schedule timers, drive timed faults (``world.plan``)."""

    def check(self, view: AuditViewSeam) -> None:
        """After the run: read the stores through ``view`` (an ``AuditView``)."""

    def metrics(self) -> dict[str, Any]:
        """What it did (plain data); merged into the run's stats."""
        return {}


@attrs.define
class Stack:
    system: SystemSeam
    workloads: Sequence[Workload]
    faults: FaultsSeam
    checks: Sequence[Checker] = ()
    # Faults stop at duration - min(heal_ms_max, duration // 10): the last
    # stretch shows the system heals. Then the run settles this long.
    heal_ms_max: int = 0
    settle_ms: int = 0

    def __attrs_post_init__(self) -> None:
        assert self.heal_ms_max >= 0 and self.settle_ms >= 0, (self.heal_ms_max, self.settle_ms)
        names = [w.name for w in self.workloads if w.name]
        assert len(names) == len(set(names)), f"workloads named twice: {names}"

    def heal_at_ms(self, duration_ms: int) -> int:
        assert duration_ms > 0
        return duration_ms - min(self.heal_ms_max, duration_ms // 10)
