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

import re
from typing import Any, Mapping, Sequence

import attrs

from sim.invariants import Checker
from sim.scenario import SetupError
from sim.seams import AuditViewSeam, FaultsSeam, SystemSeam
from sim.world import World


class StackError(SetupError):
    """A stack that cannot be built as written (two workloads claiming one
    name, two claiming one schedule...): one line naming both; the face
    reports it as a usage error (exit 2), like any ``SetupError``."""

    name = "StackError"


# A workload instance's name: what its namespace reads as in node names,
# streams, stats and check names.
INSTANCE_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


class Workload:
    """Subclass and override what the concern needs; every method is optional.

    The class's ``name`` says what kind of workload it is (``sentinels``,
    ``node-kills``); an instance's ``name`` is its own: given with
    ``named(...)`` (or a constructor's ``name=``), otherwise its kind's, numbered by the
    stack when the kind occurs twice (``node-kills``, ``node-kills-2``).
    Everything an instance creates is namespaced by its name: its nodes
    (``node_name``), its random streams (``stream`` / ``stream_for``), its
    stats (the run's ``stats["workloads"][name]``) and the checks it brings
    (``checks``). Names are settled when the stack is built, before
    ``setup``: derive what is namespaced then, never in ``__init__``.
    """

    name: str = ""

    def named(self, name: str) -> "Workload":
        """This instance, under ``name`` (chainable: ``NodeKills(...).named("projector-kills")``)."""
        if not isinstance(name, str) or INSTANCE_NAME_RE.fullmatch(name) is None:
            raise StackError(f"workload name {name!r}: lowercase letters, digits and '-', 1 to 63 characters")
        self.name = name
        self._named_explicitly = True
        return self

    @property
    def kind_name(self) -> str:
        return type(self).name or type(self).__name__.lower()

    def node_name(self, local: str) -> str:
        """The node this instance calls ``local`` (``sentinels/worker-1``)."""
        assert self.name, "a workload's names are settled by its stack"
        return f"{self.name}/{local}"

    def emitted_by_me(self, event: Any) -> bool:
        """Whether a trace event came from one of this instance's nodes (a
        counter subscribed to a kind every instance emits counts its own)."""
        return event.node.startswith(f"{self.name}/")

    def stream_for(self, world: Any, key: str) -> Any:
        """The stream of one named choice of this instance (``{name}/{key}``):
        it depends on the seed, this instance's name and ``key`` only."""
        return world.streams.fork(f"{self.name}/{key}")

    def stream(self, world: Any) -> Any:
        """This instance's own sequential stream (``world.streams[name]``)."""
        return world.streams[self.name]

    def claims(self) -> dict[str, tuple[str, ...]]:
        """The ids this instance takes in the shared stores that it does not
        namespace itself (a fleet's schedule ids are its user's), by what
        they are: the stack refuses two instances claiming one."""
        return {}

    def checks(self) -> Sequence[Checker]:
        """The checks that judge what this instance creates (its namespace):
        the runner adds them beside the stack's own. A check an instance
        brings is named ``check[instance]`` unless the instance carries its
        kind's name."""
        return ()

    def setup(self, world: World) -> None:
        """Create nodes and subscriptions. Stores are open; nothing has run."""

    def start(self, world: World) -> None:
        """Begin: spawn loops, schedule timers, drive timed faults (``world.plan``)."""

    def check(self, view: AuditViewSeam) -> None:
        """After the run: read the stores through ``view`` (an ``AuditView``)."""

    def metrics(self) -> dict[str, Any]:
        """What it did (plain data); merged into the run's stats."""
        return {}

    def secret_values(self) -> Mapping[str, str]:
        """The secret values this instance handed out, by a label that names
        without revealing (``"search-api-key v2"`` -> the value): every
        version, read at the end of the run. None may reach the run's
        result: the runner replaces any it finds there by ``[secret: LABEL]``
        and fails the run (``no-secret-in-verdict``, ``sim.redact``)."""
        return {}

    def requires(self) -> tuple[str, ...]:
        """What this instance requires of the run's durable stores
        (``"encryption-at-rest"``): a system whose stores do not declare it
        refuses the run before it starts (``SystemSeam.require``)."""
        return ()


def settle_names(workloads: Sequence[Workload]) -> None:
    """Give every workload its instance name: the names given explicitly
    first (one given twice: ``StackError`` naming both), then each other
    instance its kind, numbered from the second of a kind on."""
    taken: dict[str, Workload] = {}
    for workload in workloads:
        if getattr(workload, "_named_explicitly", False):
            other = taken.get(workload.name)
            if other is not None:
                kinds = (f"both {workload.kind_name}" if other.kind_name == workload.kind_name
                         else f"a {other.kind_name} and a {workload.kind_name}")
                raise StackError(f"two workloads named {workload.name!r} ({kinds}); give one of them another name")
            taken[workload.name] = workload
    for workload in workloads:
        if getattr(workload, "_named_explicitly", False):
            continue
        base = workload.kind_name
        name, n = base, 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        workload.name = name  # an instance attribute: the class keeps its kind's name
        taken[name] = workload
    claimed: dict[tuple[str, str], Workload] = {}
    for workload in workloads:
        for what, ids in sorted(workload.claims().items()):
            for one in ids:
                other = claimed.setdefault((what, one), workload)
                if other is not workload:
                    raise StackError(f"workloads {other.name!r} and {workload.name!r} both use {what} {one!r}")


def owned_checks(workloads: Sequence[Workload]) -> list[Checker]:
    """The checks the workloads bring. Each is named for its instance
    (``fifo-one-active[requests]``) when the instance has a name of its own
    or another instance brings a check of the same name; otherwise it keeps
    its plain name (a stack with one fleet reports ``exactly-once-wake``)."""
    brought = [(workload, checker) for workload in workloads for checker in workload.checks()]
    counts: dict[str, int] = {}
    for _, checker in brought:
        counts[checker.name] = counts.get(checker.name, 0) + 1
    for workload, checker in brought:
        if workload.name != workload.kind_name or counts[checker.name] > 1:
            checker.name = f"{checker.name}[{workload.name}]"
    return [checker for _, checker in brought]


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
        settle_names(self.workloads)

    def heal_at_ms(self, duration_ms: int) -> int:
        assert duration_ms > 0
        return duration_ms - min(self.heal_ms_max, duration_ms // 10)
