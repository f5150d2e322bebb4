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

from typing import Any, Callable

from sim.invariants import Checker


class BrokenDeploys(Checker):
    name = "broken-deploy"
    kinds = ("deploy", "ds.load.rejected", "ds.loaded", "ds.save")

    def __init__(self, out_of_band: Callable[[str], bool] = lambda node: False) -> None:
        """``out_of_band(node label)``: a writer that is not a run of the build."""
        super().__init__()
        self._out_of_band = out_of_band
        self._broken: str | None = None  # the broken build deployed now
        self._caught_now = False
        self.broken = 0
        self.caught = 0

    def on_event(self, event: tuple) -> None:
        kind = event[3]
        fields = event[4]
        if kind == "deploy":
            self._close()
            if fields.get("broken"):
                self._broken = fields["build"]
                self._caught_now = False
                self.broken += 1
            return
        if self._broken is None:
            return
        if kind == "ds.load.rejected":
            self.checks += 1
            if not self._caught_now:
                self._caught_now = True
                self.caught += 1
        elif kind == "ds.loaded":
            self.checks += 1
            if fields.get("found"):
                self.fail(f"build {self._broken} loaded state it cannot read (v{fields.get('stored_version')})",
                          (fields["key"],))
        elif "revision" in fields and not self._out_of_band(event[2]):
            self.checks += 1
            self.fail(f"a run committed a save under broken build {self._broken}", (fields["key"],))

    def _close(self) -> None:
        if self._broken is not None and not self._caught_now:
            self.checks += 1
            self.fail(f"broken build {self._broken} was deployed and replaced without a typed rejection")
        self._broken = None

    def audit(self, world: Any) -> None:
        self._close()
