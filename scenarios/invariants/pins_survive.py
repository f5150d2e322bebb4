"""``pins-survive``: evidence outlives retention; nothing else does forever.

After every retention pass (``retention.pass``), every ref cited by a live
finding in the projection must still resolve in the content store — the pin
predicate exempts it from reclamation however old it is and whether or not
the run that recorded it was archived. At the audit, no blob that expired
before the last pass is still held without a pin: unpinned expired blobs are
eventually reclaimed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from faults.events import RetentionPass
from sim.invariants import Checker

if TYPE_CHECKING:
    from scenarios.system import AuditView


class PinsSurvive(Checker):
    name = "pins-survive"
    kinds = (RetentionPass.kind,)

    def __init__(self, *, blob_ttl_ms: int) -> None:
        super().__init__()
        self._blob_ttl_ms = blob_ttl_ms
        self._last_pass_ms: int | None = None
        self.max_pinned = 0
        self.passes = 0

    # What the stores hold now, read through the audit view.
    def _live_evidence(self) -> list[tuple[str, str]]:
        return self.view.live_evidence()

    def _content_has(self, ref: str) -> bool:
        return self.view.content_has(ref)

    def _expired_unpinned(self, stored_before_ms: int) -> tuple[str, ...]:
        return self.view.expired_unpinned_blobs(stored_before_ms)

    def metrics(self) -> dict:
        return {"pinned_blobs": self.max_pinned}

    def on_event(self, event: tuple) -> None:
        self.passes += 1
        self._last_pass_ms = event.time_ms
        evidence = self._live_evidence()
        self.max_pinned = max(self.max_pinned, len({ref for _, ref in evidence}))
        for finding_id, ref in evidence:
            self.checks += 1
            if not self._content_has(ref):
                self.fail(f"finding {finding_id} cites {ref}, which retention reclaimed", (finding_id, ref))
                return

    def audit(self, view: AuditView) -> None:
        if self._last_pass_ms is None:
            return
        self.checks += 1
        leftover = self._expired_unpinned(max(0, self._last_pass_ms - self._blob_ttl_ms))
        if leftover:
            self.fail(f"{len(leftover)} expired unpinned blob(s) survived the last retention pass: "
                      f"{', '.join(leftover[:3])}", leftover[:3])
