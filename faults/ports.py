"""Crashy, traced ports: a model store as one node sees it.

``bind_port`` wraps a store for one node. Every call:

1. is refused if the node is dead (``NodeDeadError``) — a crashed process
   touches nothing, not even from a ``finally`` block;
2. counts a hit of its site (``ds.save``, ``kernel.append_step``, ...) and may
   crash the node *before* the call (``crash-before-call``);
3. runs against the real store (atomic: store calls never suspend);
4. is traced with what went in and what came out — the trace digest covers
   what the system saw, not just what the scheduler did;
5. may crash the node *after* the commit, before the reply reaches the
   caller (``ack-lost``).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from faults.kinds import ACK_LOST, CRASH_BEFORE_CALL, FAILPOINT_CRASH, PORT_FAULT_KINDS

_FAILPOINT_KINDS = (FAILPOINT_CRASH,)
from faults.plan import FaultPlan
from sim.node import Node, NodeDeadError
from sim.world import World

Describe = Callable[[tuple, dict, Any], dict]


def _describe_default(args: tuple, kwargs: dict, result: Any) -> dict:
    return {"args": args, "kwargs": kwargs, "result": result}


class PortStats:
    """Calls per port across all nodes: replay-determinism reads it."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0


class BoundPort:
    """``target``'s methods as seen from ``node``, with faults and tracing."""

    def __init__(self, world: World, node: Node, port: str, target: Any, plan: FaultPlan | None,
                 describers: Mapping[str, Describe], stats: PortStats, restart_after: Callable[[], int]) -> None:
        self._target = target
        for method, describe in describers.items():
            setattr(self, method, self._wrap(world, node, f"{port}.{method}",
                                             getattr(target, method), describe, plan, stats, restart_after))

    @staticmethod
    def _wrap(world: World, node: Node, site: str, fn: Callable, describe: Describe,
              plan: FaultPlan | None, stats: PortStats, restart_after: Callable[[], int]):
        trace = world.trace
        label = node.label

        async def call(*args: Any, **kwargs: Any) -> Any:
            if not node.alive:
                raise NodeDeadError(label, site)
            stats.calls += 1
            fault = None
            if plan is not None:
                hit, fault = plan.draw(site, PORT_FAULT_KINDS)
                if fault == CRASH_BEFORE_CALL:
                    delay_ms = plan.restart_delay_ms(site, hit, restart_after)
                    world.record_fault(node, site, CRASH_BEFORE_CALL, hit, restart_after_ms=delay_ms)
                    world.crash(node, restart_after_ms=delay_ms)
            try:
                result = await fn(*args, **kwargs)
            except Exception as error:
                fields = describe(args, kwargs, None)
                name = getattr(type(error), "name", None)
                fields["error"] = name if isinstance(name, str) and name else type(error).__name__
                fields["detail"] = str(error)
                trace.emit(label, site, fields)
                raise
            trace.emit(label, site, describe(args, kwargs, result))
            if fault == ACK_LOST:
                delay_ms = plan.restart_delay_ms(site, hit, restart_after)
                world.record_fault(node, site, ACK_LOST, hit, restart_after_ms=delay_ms)
                world.crash(node, restart_after_ms=delay_ms)
            return result

        call.__name__ = site
        return call


class SimFailpoints:
    """``model.failpoints.Failpoints`` for one node: may crash it at a named point."""

    __slots__ = ("_world", "_node", "_plan", "_restart_after")

    def __init__(self, world: World, node: Node, plan: FaultPlan | None, restart_after: Callable[[], int]) -> None:
        self._world = world
        self._node = node
        self._plan = plan
        self._restart_after = restart_after

    def hit(self, name: str) -> None:
        plan = self._plan
        if plan is None:
            return
        hit, fault = plan.draw(name, _FAILPOINT_KINDS)
        if fault is not None:
            delay_ms = plan.restart_delay_ms(name, hit, self._restart_after)
            self._world.record_fault(self._node, name, fault, hit, restart_after_ms=delay_ms)
            self._world.crash(self._node, restart_after_ms=delay_ms)
