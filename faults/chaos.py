"""Process-level chaos: kill -9 of a node at arbitrary moments.

Store-level faults fire at port calls; these fire on a timer, so a process
can also die while it sleeps, waits or is half-way through an effect. Under
a fault script (``--faults``) the kills are replayed at their recorded times
instead (``replay_kills``).
"""
from __future__ import annotations

from typing import Callable, Iterable

from faults.kinds import NODE_KILL
from sim.rng import Stream
from sim.world import FaultEvent, World


async def kill_nodes(world: World, stream: Stream, *, every_ms: tuple[int, int], pick: Callable[[], str],
                     restart_after_ms: Callable[[], int], until_ms: int) -> None:
    """Every ``every_ms`` (uniform), kill the node ``pick()`` names, until ``until_ms``."""
    runtime = world.runtime
    kills = 0
    while True:
        await runtime.sleep_ms(stream.between(*every_ms))
        if runtime.now_ms() >= until_ms:
            return
        node = world.nodes[pick()]
        if node.alive:
            kills += 1
            delay_ms = restart_after_ms()
            world.record_fault(node, "process", NODE_KILL, kills, restart_after_ms=delay_ms)
            world.crash(node, restart_after_ms=delay_ms)


def node_name(label: str) -> str:
    """``worker-1#3`` (a node's label: name and incarnation) -> ``worker-1``."""
    return label.split("#", 1)[0]


def replay_kills(world: World, events: Iterable[FaultEvent]) -> None:
    """Schedule the script's kills: same node, same time, same downtime."""
    for event in events:
        def kill(event: FaultEvent = event) -> None:
            node = world.nodes.get(node_name(event.node))
            if node is not None and node.alive:
                world.record_fault(node, event.site, NODE_KILL, event.hit or 0,
                                   restart_after_ms=event.restart_after_ms)
                world.crash(node, restart_after_ms=event.restart_after_ms)

        world.at(event.time_ms, kill, label=f"scripted kill {event.node}")
