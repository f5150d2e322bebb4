"""Process-level chaos: kill -9 of a node at arbitrary moments.

Store-level faults fire at port calls; these fire on a timer, so a process
can also die while it sleeps, waits or is half-way through an effect.
"""
from __future__ import annotations

from typing import Callable

from faults.kinds import NODE_KILL
from sim.rng import Stream
from sim.world import World


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
            world.record_fault(node, "process", NODE_KILL, kills)
            world.crash(node, restart_after_ms=restart_after_ms())
