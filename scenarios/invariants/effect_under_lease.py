"""``effect-under-lease``: a worker does a step's effect only while the
lease of the claim it works under is live, on the clock that granted it:
its own when the ledger decides on its caller's clock, the store
machine's when the stores keep their own (``faults.clocks``: a lease is
the store's promise, read on the store's clock, whatever the worker's
clock says).

Fencing keeps a stale owner's *writes* out of the stores; it cannot take
back what a step did outside them (a call to a model, a tool, a payment).
So the owner itself must stop acting on an ownership whose lease is over:
a process cut from the ledger by a partition (its renew refused, hung, or
answered long after it was sent) or frozen by a pause must not wake up and
carry on as if it still held the lane.

The oracle keeps, per worker process, the lease of the last claim or
renewal the ledger granted it (as the stores answered, seen at the port:
``faults.ports.PortCall``, never the worker's own bookkeeping), and the
workers' harness reports each step's effect as it happens (``effect``: the
process, and the instant read on the lease's clock). An effect at or after
the expiry of its process's lease is a violation. One entry per process
name (a restarted process's first claim replaces its predecessor's): memory
flat in simulated time.
"""
from __future__ import annotations

from typing import Any

from sim.invariants import Checker


def _process(label: str) -> str:
    """``workers/worker-1#3`` -> ``workers/worker-1``."""
    return label.split("#", 1)[0]


class EffectUnderLease(Checker):
    name = "effect-under-lease"
    kinds = ()

    def __init__(self) -> None:
        super().__init__()
        # process name -> (label, submission, epoch, lease expiry) of its latest grant
        self._leases: dict[str, tuple[str, str, int, int]] = {}
        self.past_lease = 0

    def on_port_call(self, call: Any) -> None:
        if call.port != "ledger" or call.error is not None or call.result is None:
            return
        if call.method not in ("claim", "renew_ownership"):
            return
        granted = call.result
        self._leases[_process(call.node)] = (call.node, granted.submission_id, granted.epoch,
                                             granted.lease_expires_ms)

    def effect(self, owner: str, submission: str | None, now_ms: int) -> None:
        """``owner`` (a process label) does a step's effect at ``now_ms`` on
        the clock its lease was granted on, for ``submission`` (None: the
        worker did not say)."""
        lease = self._leases.get(_process(owner))
        if lease is None or lease[0] != owner:
            self.fail(f"{owner} did a step's effect at {now_ms} ms holding no claim the ledger granted it")
            return
        label, sid, epoch, expires_ms = lease
        if submission is not None and sid != submission:
            self.fail(f"{owner} did a step's effect for {submission} at {now_ms} ms while its latest claim was "
                      f"{sid} (epoch {epoch})", related=(submission, sid))
            return
        self.checks += 1
        if now_ms >= expires_ms:
            self.past_lease += 1
            self.fail(f"{owner} did a step's effect for {sid} (epoch {epoch}) at {now_ms} ms, its lease over "
                      f"since {expires_ms} ms: it acted on an ownership it could no longer count on",
                      related=(sid,))

    def metrics(self) -> dict[str, Any]:
        return {"effects_under_lease": self.checks}
