"""Partitions: a node cut from some of its stores for a while, alive all along.

A kill stops a process; a pause freezes it. A network partition does
neither: the process goes on running (its timers fire, its tasks run, its
in-memory beliefs stay), but its calls to one or more stores do not get
through. When the partition heals it is still holding the claims, tokens
and leases it had before, some of them long lapsed: the stores must fence
it, and it must notice by itself that a lease it can no longer renew is
over before it acts on it.

``Partitions`` is a timed fault (``faults.kinds.PARTITION``) driven by the
run's one fault plan, like ``faults.chaos.NodePauses``: every ``every_ms``
it cuts one node (preferring one that holds a claim right now) from a drawn
set of its stores for a drawn interval, in a drawn mode:

- ``refuse``: every call to a cut store fails at once with
  ``StoreUnreachable`` (typed, retryable); nothing reaches the store;
- ``hang``: the call waits until the caller's timeout (``CALL_TIMEOUT_MS``)
  and then fails with ``StoreUnreachable``; a heal before the timeout lets
  the call through, late;
- ``reply-held`` (asymmetric): the call reaches the store and commits; its
  reply is held until the heal, or lost at the caller's timeout (the caller
  sees ``StoreUnreachable`` and may send the same call again: every port
  write is safe to repeat).

The heal is a scheduled event at the drawn end. A fired partition is one
``FaultEvent``: its node, its ``duration_ms``, and its mode and stores in
its site (``partition/hang/ledger+log``), so a fault script replays it at
its time and the shrinker can drop it. The fault layer
(``faults.ports.BoundPort``) asks ``World.cuts`` on every call: empty (no
partition anywhere, the usual case) that is one truthiness check.

A refused or timed-out call is traced as the port call with the error, as
an injected error is, and never shown to the port observers (it did not
reach the store); a reply-held call is traced and shown as it committed,
then a ``partition.reply-lost`` event says its caller never heard back.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from faults.chaos import busy_first, node_name, resolve_nodes
from faults.events import DETAIL, ERROR, ProbeEvent
from faults.kinds import PARTITION
from sim.node import NodeDeadError
from sim.workload import Workload
from sim.world import FaultEvent, World

REFUSE, HANG, REPLY_HELD = "refuse", "hang", "reply-held"
MODES = (REFUSE, HANG, REPLY_HELD)
# How long a caller waits for a store's answer before it gives up (a common
# client default; longer than many a lease, so a late answer can outlive one): a hung
# call, or a held reply, fails with ``StoreUnreachable`` then.
CALL_TIMEOUT_MS = 30_000
SITE_PREFIX = "partition"


class StoreUnreachable(Exception):
    """A store call that did not get through a network partition: refused
    at once, or no answer within the call's timeout (``reason``). Retryable:
    a refused or hung call did nothing; a reply lost at the timeout belongs
    to a call that committed, and the ports' writes are safe to repeat."""

    name = "StoreUnreachable"
    retryable = True

    def __init__(self, site: str, reason: str, committed: bool = False) -> None:
        super().__init__(f"{site}: store unreachable ({reason}, partition injected)")
        self.site = site
        self.reason = reason
        # The call reached the store and did its work; only its reply was
        # lost (a held reply past the timeout): what a retry meets is its replay.
        self.committed = committed

    def __reduce__(self):
        return (type(self), (self.site, self.reason, self.committed))


class PartitionReplyLost(ProbeEvent):
    """A reply-held call's caller gave up at its timeout: the call committed
    (its port event says what), its caller saw ``StoreUnreachable``."""

    kind = "partition.reply-lost"
    site: str
    held_ms: int


class PartitionHealed(ProbeEvent):
    """A partition's end: the node's calls to ``stores`` get through again."""

    kind = "partition.healed"
    mode: str
    stores: str  # the cut stores, ``+``-joined
    duration_ms: int


def partition_site(mode: str, stores: Sequence[str]) -> str:
    """The fault event's site: ``partition/<mode>/<store>+<store>``."""
    return f"{SITE_PREFIX}/{mode}/{'+'.join(stores)}"


def parse_site(site: str) -> tuple[str, tuple[str, ...]] | None:
    """``(mode, stores)`` of a partition's site; None when it is not one."""
    parts = site.split("/")
    if len(parts) != 3 or parts[0] != SITE_PREFIX or parts[1] not in MODES or not parts[2]:
        return None
    stores = tuple(parts[2].split("+"))
    if any(not store for store in stores) or len(set(stores)) != len(stores):
        return None
    return parts[1], stores


class Cut:
    """One active partition: ``node`` (a name: every incarnation of the
    process on that machine) cannot reach ``stores`` until ``heal_ms``."""

    __slots__ = ("node", "names", "stores", "mode", "start_ms", "heal_ms")

    def __init__(self, node: str, stores: tuple[str, ...], mode: str, start_ms: int, heal_ms: int) -> None:
        assert mode in MODES and stores and heal_ms > start_ms, (mode, stores, start_ms, heal_ms)
        self.node = node
        self.names = stores  # as the fault's site spells them
        self.stores = frozenset(stores)  # membership only
        self.mode = mode
        self.start_ms = start_ms
        self.heal_ms = heal_ms


def cut_of(world: World, node: Any, port: str) -> Cut | None:
    """The partition that cuts ``node`` from ``port`` now, or None."""
    cut = world.cuts.get(node.name)
    if cut is None or port not in cut.stores or world.runtime.now_ms() >= cut.heal_ms:
        return None
    return cut


async def cross(world: World, node: Any, cut: Cut, site: str, fields: Callable[[], dict]) -> Cut | None:
    """A call of ``node`` at ``site`` meets ``cut`` on its way out. Raises
    ``StoreUnreachable`` (refused, or hung to its timeout), or returns once
    it may go on: None (healed before the timeout) or the cut itself (its
    reply is to be held: ``hold_reply`` after the store answered).
    ``fields()``: the call's trace fields (a failed call adds the error)."""
    runtime = world.runtime
    if cut.mode == REPLY_HELD:
        return cut
    if cut.mode == HANG:
        now_ms = runtime.now_ms()
        await runtime.sleep_ms(min(cut.heal_ms, now_ms + CALL_TIMEOUT_MS) - now_ms)
        if not node.alive:
            raise NodeDeadError(node.label, site)
        if runtime.now_ms() >= cut.heal_ms:
            return None  # healed in time: the call goes through, late
    error = StoreUnreachable(site, "refused" if cut.mode == REFUSE else f"no answer within {CALL_TIMEOUT_MS} ms")
    world.trace.emit(node.label, site, {**fields(), ERROR: error.name, DETAIL: str(error)})
    raise error


async def hold_reply(world: World, node: Any, cut: Cut, site: str, start_ms: int) -> None:
    """The store answered a call that ``cut`` holds the reply of: wait for
    the heal, or give up at the call's timeout (``StoreUnreachable``)."""
    runtime = world.runtime
    now_ms = runtime.now_ms()
    until_ms = min(cut.heal_ms, start_ms + CALL_TIMEOUT_MS)
    if until_ms > now_ms:
        await runtime.sleep_ms(until_ms - now_ms)
    if not node.alive:
        raise NodeDeadError(node.label, site)
    if runtime.now_ms() < cut.heal_ms:
        world.trace.emit(node.label, PartitionReplyLost.kind, {PartitionReplyLost.site: site,
                                                               PartitionReplyLost.held_ms: runtime.now_ms() - start_ms})
        raise StoreUnreachable(site, f"reply held past the {CALL_TIMEOUT_MS} ms timeout", committed=True)


class Partitions(Workload):
    """Every ``every_ms``, one of ``nodes`` loses some of ``stores`` (port
    names, e.g. ``ledger``, ``log``, ``tools``) for a duration drawn from one
    of ``cut_ms`` (ranges), in a mode drawn from ``modes``. Partitions
    prefer a node that holds a claim right now (``busy``: node label ->
    anything), as pauses do; half of them cut every store of the list, the
    others a drawn subset."""

    name = "partitions"
    kind = PARTITION

    def __init__(self, nodes: Sequence[Any], *, stores: Sequence[str], every_ms: tuple[int, int],
                 cut_ms: Sequence[tuple[int, int]], modes: Sequence[str] = MODES,
                 busy: Callable[[], Any] = dict) -> None:
        assert nodes and stores and cut_ms and every_ms[0] > 0, (nodes, stores, cut_ms, every_ms)
        assert all(low > 0 for low, _ in cut_ms) and modes and set(modes) <= set(MODES), (cut_ms, modes)
        assert len(set(stores)) == len(stores) and all(s and "+" not in s and "/" not in s for s in stores), stores
        self._targets = tuple(nodes)
        self.nodes: tuple[str, ...] = ()  # resolved at setup
        self.stores = tuple(stores)
        self.every_ms = every_ms
        self.cut_ms = tuple(cut_ms)
        self.modes = tuple(modes)
        self._busy = busy
        self.by_mode = {mode: 0 for mode in MODES}

    def setup(self, world: World) -> None:
        self.nodes = resolve_nodes(self._targets)

    def start(self, world: World) -> None:
        world.plan.drive(world, self)

    def propose(self, world: World, hit: int) -> FaultEvent | None:
        chaos = self.stream(world)
        node = busy_first(world, chaos, self.nodes, self._busy())
        mode = chaos.choice(self.modes)
        if len(self.stores) == 1 or chaos.below(2) == 0:
            stores = self.stores
        else:
            stores = tuple(store for store in self.stores if chaos.below(2) == 0) or (chaos.choice(self.stores),)
        duration_ms = chaos.between(*chaos.choice(self.cut_ms))
        if not node.alive or node.name in world.cuts:
            return None
        return FaultEvent(world.runtime.now_ms(), node.label, partition_site(mode, stores), PARTITION, hit,
                          duration_ms=duration_ms)

    def apply(self, world: World, event: FaultEvent) -> bool:
        node = world.nodes.get(node_name(event.node))
        parsed = parse_site(event.site)
        if (node is None or not node.alive or parsed is None or not event.duration_ms
                or node.name not in self.nodes or node.name in world.cuts):
            return False  # another instance's target, gone, already cut, or not a partition of ours
        mode, stores = parsed
        now_ms = world.runtime.now_ms()
        cut = Cut(node.name, stores, mode, now_ms, now_ms + event.duration_ms)
        world.record_fault(node, event.site, PARTITION, event.hit or 0, duration_ms=event.duration_ms)
        world.cuts[node.name] = cut
        self.by_mode[mode] += 1
        world.at(cut.heal_ms, lambda: self._heal(world, cut), label=f"heal partition of {node.name}")
        return True

    @staticmethod
    def _heal(world: World, cut: Cut) -> None:
        if world.cuts.get(cut.node) is cut:
            del world.cuts[cut.node]
        node = world.nodes[cut.node]
        world.trace.emit(node.label, PartitionHealed.kind, {
            PartitionHealed.mode: cut.mode, PartitionHealed.stores: "+".join(cut.names),
            PartitionHealed.duration_ms: cut.heal_ms - cut.start_ms})

    def metrics(self) -> dict[str, Any]:
        return {f"partitions_{mode.replace('-', '_')}": count for mode, count in self.by_mode.items()}
