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

A deploy lands inside a wake, so the restarted worker resumes that run on
the new code. Whatever the build, the system's own writers never disagree:
a run's save conflicts only with an out-of-band writer's commit, never with
a commit of the system's own processes holding other content. Such a
conflict is the run's own earlier save re-run on new code because its step
record was not durable before the next writing effect (ADR 0053 D3: a write
is recorded before anything else writes), or a second live writer. The
commits are read from the store's trace (revision, committer, version,
payload by the reference encoder), the last few per key.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from collections import deque

from faults.events import Deploy, DsClear, DsLoaded, DsLoadRejected, DsSave
from scenarios.reference import exact_json
from scenarios.reference.jcs import JcsError, canonical
from sim.invariants import Checker

# A conflict is at the latest revision (expected + 1 where expected was the
# latest); a few more tolerate interleavings without unbounded memory.
RECENT_COMMITS_PER_KEY = 8


def _json_text(value: object) -> str:
    try:
        return canonical(value)
    except JcsError:
        return "exact:" + exact_json(value)

if TYPE_CHECKING:
    from scenarios.system import AuditView


class BrokenDeploys(Checker):
    name = "broken-deploy"
    kinds = (Deploy.kind, DsLoadRejected.kind, DsLoaded.kind, DsSave.kind, DsClear.kind)

    def __init__(self, out_of_band: Callable[[str], bool] = lambda node: False) -> None:
        """``out_of_band(node label)``: a writer that is not a run of the build."""
        super().__init__()
        self._out_of_band = out_of_band
        self._broken: str | None = None  # the broken build deployed now
        self._caught_now = False
        self.broken = 0
        self.caught = 0
        self._recent: dict[str, deque] = {}  # key -> (revision, committer, version, payload text), the last few

    def metrics(self) -> dict:
        return {"broken_deploys": self.broken, "broken_deploys_caught": self.caught}

    def on_event(self, event: tuple) -> None:
        kind = event[3]
        fields = event[4]
        if kind == DsSave.kind:
            self._on_save(event[2], fields)
        elif kind == DsClear.kind:
            self._recent.pop(fields[DsClear.key], None)
            return
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

    def _on_save(self, node: str, fields: dict) -> None:
        key = fields[DsSave.key]
        if DsSave.revision in fields:
            recent = self._recent.get(key)
            if recent is None:
                recent = self._recent[key] = deque(maxlen=RECENT_COMMITS_PER_KEY)
            recent.append((fields[DsSave.revision], node, fields[DsSave.version], _json_text(fields[DsSave.payload])))
            return
        if fields.get(DsSave.error) != "RevisionConflictError" or self._out_of_band(node):
            return
        conflicting = fields[DsSave.expected] + 1
        for revision, committer, version, text in self._recent.get(key, ()):
            if revision != conflicting or self._out_of_band(committer):
                continue
            self.checks += 1
            if (version, text) != (fields[DsSave.version], _json_text(fields[DsSave.payload])):
                self.fail(f"{key}: a save on {node} conflicts with r{revision}, committed by the system's own "
                          f"{committer} with other content (v{version}): a run re-ran its own save on new code "
                          "(its step record was not durable), or two live writers", (key,))
            return

    def _close(self) -> None:
        if self._broken is not None and not self._caught_now:
            self.checks += 1
            self.fail(f"broken build {self._broken} was deployed and replaced without a typed rejection")
        self._broken = None

    def audit(self, view: AuditView) -> None:
        self._close()
