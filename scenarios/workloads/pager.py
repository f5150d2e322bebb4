"""The on-call pager: the external service a sentinel pages through.

A page is the sentinel's one *non-idempotent* effect (K9): the pager has no
idempotency key, so every call that reaches it pages a human once more. The
flow declares it so to the kernel (``idempotent=False``): an intent is
recorded before the call, and a crash between the call and its recorded
completion parks the run at ``EFFECT_INDOUBT`` for an operator instead of
paging twice.

``PagerService`` is the service itself (outside every process: it survives
their crashes) and remembers every page it received, per alert key (the run
and its step) and sender — what the on-call operator looks up before
resolving a parked run, and what the ``at-most-once-effect`` checker
counts. A worker reaches it through ``bind_pager``: a ``BoundPort``, so
the port faults of the run's one plan fire at its call (``pager.page``):
a crash before the call (nothing paged), a lost ack (paged, the process
dies), a lost reply (paged, the caller sees a retryable ``ReplyLost``), a
transient refusal or a busy answer (nothing paged), latency.
"""
from __future__ import annotations

from typing import Any

from faults.events import OPTIONAL, ProbeEvent
from faults.ports import BoundPort, PortStats
from sim.node import Node
from sim.world import World

PAGER_PORT = "pager"
# Pages per run: a run pages at most once (one step); a key past this is a
# runaway, not a workload.
PAGES_PER_KEY_MAX = 1_000


class PagerPage(ProbeEvent):
    """``pager.page``: one page sent, as its ``BoundPort`` traces it; the
    incident the pager opened, or the failed call's ``error`` and ``detail``.
    (A schema of its own, not a ``faults.describe`` port table: the pager is
    the application's service, not one of the system's stores.)"""

    kind = "pager.page"
    run: str
    step: str
    reading: int
    incident: str = OPTIONAL
    error: str = OPTIONAL
    detail: str = OPTIONAL


class KernelInDoubt(ProbeEvent):
    """``kernel.indoubt`` (model/kernel): a run parked at EFFECT_INDOUBT."""

    kind = "kernel.indoubt"
    run: str
    step: str


class OperatorResolved(ProbeEvent):
    """The on-call operator resolved a run parked in doubt (``faults.chaos.InDoubtResolver``)."""

    kind = "operator.resolved"
    run: str
    step: str
    resolution: str  # "delivered", "redriven" or "abandoned"


class PagerService:
    """The external pager. Survives every process; pages are never deduplicated."""

    def __init__(self) -> None:
        # (run id, step id) -> [(sender node name, incident), ...] in arrival order
        self._received: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self.pages = 0

    def bind(self, sender: str) -> "PagerClient":
        return PagerClient(self, sender)

    def received(self, run_id: str, step_id: str) -> tuple[tuple[str, str], ...]:
        """The pager's history for one alert key: (sender, incident) per page."""
        return tuple(self._received.get((run_id, step_id), ()))

    def keys(self) -> list[tuple[str, str]]:
        return sorted(self._received)

    def _page(self, sender: str, run_id: str, step_id: str) -> str:
        self.pages += 1
        incident = f"INC-{self.pages}"
        sent = self._received.setdefault((run_id, step_id), [])
        assert len(sent) < PAGES_PER_KEY_MAX, (run_id, step_id)
        sent.append((sender, incident))
        return incident


class PagerClient:
    """What one process talks to: the pager, with the sender's name on every page."""

    def __init__(self, service: PagerService, sender: str) -> None:
        self._service = service
        self._sender = sender

    async def page(self, run_id: str, step: str, reading: int) -> str:
        return self._service._page(self._sender, run_id, step)


def _describe_page(args: tuple, kwargs: dict, result: Any) -> dict:
    run_id, step, reading = (list(args) + [kwargs.get(k) for k in ("run_id", "step", "reading")][len(args):])
    fields = {PagerPage.run: run_id, PagerPage.step: step, PagerPage.reading: reading}
    if result is not None:
        fields[PagerPage.incident] = result
    return fields


def bind_pager(world: World, node: Node, service: PagerService, *, faults: bool = True) -> Any:
    """``service`` as ``node`` sees it: traced, and (``faults``) under the run's port faults.
    Its calls are not counted as store calls (the pager is not a store)."""
    plan = world.plan if faults else None
    restart = world.system.restart_delay_ms if faults else (lambda: 0)
    return BoundPort(world, node, PAGER_PORT, service.bind(node.name), plan, {"page": _describe_page}, PortStats(),
                     restart)
