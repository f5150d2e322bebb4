"""``broken-deploy``: a broken build is caught loudly and nothing proceeds on it.

A deploy (``deploy`` event) may ship a build that cannot read the stored
state: a future version for its code, or a missing migration. While such a
build is deployed:

- every load of existing state is rejected with the typed
  ``StateContractMismatchError`` (``ds.load.rejected``), never accepted;
- no run commits a save (``ds.save`` with a revision): no run proceeds on
  state it could not read. An out-of-band writer (an operator's tool
  editing the stored record at its own version) is not a run of the build
  and is not judged here; ``contract-safety`` checks what it wrote;
and each broken deploy must have been caught — at least one typed rejection
— before the next deploy replaces it (or by the audit).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from faults.events import Deploy, DsLoaded, DsLoadRejected, DsSave
from sim.invariants import Checker

if TYPE_CHECKING:
    from scenarios.system import AuditView


class BrokenDeploys(Checker):
    name = "broken-deploy"
    kinds = (Deploy.kind, DsLoadRejected.kind, DsLoaded.kind, DsSave.kind)

    def __init__(self, out_of_band: Callable[[str], bool] = lambda node: False) -> None:
        """``out_of_band(node label)``: a writer that is not a run of the build."""
        super().__init__()
        self._out_of_band = out_of_band
        self._broken: str | None = None  # the broken build deployed now
        self._caught_now = False
        self.broken = 0
        self.caught = 0

    def metrics(self) -> dict:
        return {"broken_deploys": self.broken, "broken_deploys_caught": self.caught}

    def on_event(self, event: tuple) -> None:
        kind = event[3]
        fields = event[4]
        if kind == Deploy.kind:
            self._close()
            if fields.get(Deploy.broken):
                self._broken = fields[Deploy.build]
                self._caught_now = False
                self.broken += 1
            return
        if self._broken is None:
            return
        if kind == DsLoadRejected.kind:
            self.checks += 1
            if not self._caught_now:
                self._caught_now = True
                self.caught += 1
        elif kind == DsLoaded.kind:
            self.checks += 1
            if fields.get(DsLoaded.found):
                self.fail(f"build {self._broken} loaded state it cannot read "
                          f"(v{fields.get(DsLoaded.stored_version)})", (fields[DsLoaded.key],))
        elif DsSave.revision in fields and not self._out_of_band(event[2]):
            self.checks += 1
            self.fail(f"a run committed a save under broken build {self._broken}", (fields[DsSave.key],))

    def _close(self) -> None:
        if self._broken is not None and not self._caught_now:
            self.checks += 1
            self.fail(f"broken build {self._broken} was deployed and replaced without a typed rejection")
        self._broken = None

    def audit(self, view: AuditView) -> None:
        self._close()
