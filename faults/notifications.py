"""Progress notifications as one process sees them: traced, faulted, mortal.

``NotifierPort`` is the run's one ``model.progress.ProgressNotifier`` (the
System's, in memory: it outlives processes) as seen from ``node``:

- ``notify`` (called by ``model.progress.NotifyingLog`` after an append
  returned) counts a hit of the site ``progress.notify`` in the run's fault
  plan and may drop the notification (``dropped-notification``: recorded,
  scriptable, counted like every fault); a dead process notifies nothing;
- ``register`` takes a round trip (``transit_ms``, from a stream of the
  node's own) before the registration is installed, and refuses a dead
  process; the registration it returns traces its park, resume and close.

The trace events (``faults.events.Progress*``) are written here, by the
harness, at the instants things happen in the notifier: the
``progress-waits`` oracle reads them, never the waiter's own account.
"""
from __future__ import annotations

from typing import Any, Callable

from faults.events import ProgressClose, ProgressNotify, ProgressPark, ProgressRegister, ProgressResume
from faults.kinds import DROPPED_NOTIFICATION
from sim.node import Node, NodeDeadError
from sim.seams import PlanSeam
from sim.world import World

SITE = "progress.notify"
KINDS = (DROPPED_NOTIFICATION,)


class TracedRegistration:
    """A ``model.progress.Registration`` whose park, resume and close are traced."""

    __slots__ = ("_inner", "_trace", "_label")

    def __init__(self, inner: Any, world: World, node: Node) -> None:
        self._inner = inner
        self._trace = world.trace
        self._label = node.label

    @property
    def registration_id(self) -> int:
        return self._inner.registration_id

    @property
    def conversation_id(self) -> str:
        return self._inner.conversation_id

    @property
    def notified_seq(self) -> int:
        return self._inner.notified_seq

    async def park_until_ms(self, deadline_ms: int) -> bool:
        inner = self._inner
        self._trace.emit(self._label, ProgressPark.kind, {
            ProgressPark.registration: inner.registration_id, ProgressPark.conversation: inner.conversation_id,
            ProgressPark.deadline_ms: deadline_ms})
        woken = await inner.park_until_ms(deadline_ms)
        self._trace.emit(self._label, ProgressResume.kind, {
            ProgressResume.registration: inner.registration_id, ProgressResume.conversation: inner.conversation_id,
            ProgressResume.woken: woken})
        return woken

    def rearm(self) -> None:
        self._inner.rearm()

    def close(self) -> None:
        inner = self._inner
        self._trace.emit(self._label, ProgressClose.kind, {
            ProgressClose.registration: inner.registration_id, ProgressClose.conversation: inner.conversation_id})
        inner.close()


class NotifierPort:
    """The run's notifier as ``node`` sees it."""

    def __init__(self, hub: Any, world: World, node: Node, plan: PlanSeam | None,
                 transit_ms: Callable[[], int] | None = None) -> None:
        """``transit_ms``: a registration's round trip (None: instant)."""
        self._hub = hub
        self._world = world
        self._node = node
        self._plan = plan
        self._transit_ms = transit_ms

    def notify(self, conversation_id: str, seq: int) -> int:
        node = self._node
        if not node.alive:
            return 0
        world = self._world
        plan = self._plan
        if plan is not None:
            hit, fault = plan.draw(SITE, KINDS)
            if fault is not None:
                world.record_fault(node, SITE, fault, hit)
                world.trace.emit(node.label, ProgressNotify.kind, {
                    ProgressNotify.conversation: conversation_id, ProgressNotify.seq: seq, ProgressNotify.woken: 0,
                    ProgressNotify.dropped: True})
                return 0
        woken = self._hub.notify(conversation_id, seq)
        world.trace.emit(node.label, ProgressNotify.kind, {
            ProgressNotify.conversation: conversation_id, ProgressNotify.seq: seq, ProgressNotify.woken: woken,
            ProgressNotify.dropped: False})
        return woken

    async def register(self, conversation_id: str) -> TracedRegistration:
        node = self._node
        if not node.alive:
            raise NodeDeadError(node.label, "progress.register")
        if self._transit_ms is not None:
            delay_ms = self._transit_ms()
            if delay_ms:
                await self._world.runtime.sleep_ms(delay_ms)
                if not node.alive:
                    raise NodeDeadError(node.label, "progress.register")
        inner = await self._hub.register(conversation_id)
        self._world.trace.emit(node.label, ProgressRegister.kind, {
            ProgressRegister.registration: inner.registration_id, ProgressRegister.conversation: conversation_id})
        return TracedRegistration(inner, self._world, node)
