"""``adopt-own-write``: an adoption matches a real earlier commit, content and all.

ADR 0053 D3: a re-run save that conflicts at exactly ``expected + 1`` may adopt
the stored envelope only if it is canonically equal to what it tried to write.
The oracle keeps the last few commits of each key (revision -> payload and
committing node, straight from the store's trace events, not from the model)
and checks every save the model reports (``ds.saved``) against them:

- a plain save claims a revision: that commit exists and was made by the
  reporting process (not someone else's write taken for its own);
- an adoption claims an earlier commit: it exists and holds exactly the
  content the adopter tried to write. Adopting a commit the trace never saw,
  or different content (a genuinely concurrent writer's), is a violation:
  that writer should have got a loud conflict.
"""
from __future__ import annotations

from collections import deque

from faults.events import DsClear, DsSave, DsSaved
from model.canonical import digest
from sim.invariants import Checker

# Adoption is always at the latest revision (expected + 1 where expected was
# latest); keeping a few more tolerates interleavings without unbounded memory.
RECENT_COMMITS_PER_KEY = 8


class AdoptOwnWrite(Checker):
    name = "adopt-own-write"
    kinds = (DsSave.kind, DsSaved.kind, DsClear.kind)

    def __init__(self) -> None:
        super().__init__()
        self._recent: dict[str, deque] = {}
        self.adoptions = 0
        self.conflicts = 0

    def metrics(self) -> dict:
        return {"adopted_saves": self.adoptions, "save_conflicts": self.conflicts}

    def on_event(self, event: tuple) -> None:
        kind = event[3]
        fields = event[4]
        if kind == DsSave.kind:
            key = fields[DsSave.key]
            if DsSave.revision in fields:
                recent = self._recent.get(key)
                if recent is None:
                    recent = self._recent[key] = deque(maxlen=RECENT_COMMITS_PER_KEY)
                recent.append((fields[DsSave.revision], event[2], fields[DsSave.payload]))
            elif fields.get(DsSave.error) == "RevisionConflictError":
                self.conflicts += 1
            return
        if kind == DsClear.kind:
            self._recent.pop(fields[DsClear.key], None)
            return
        self.checks += 1
        key = fields[DsSaved.key]
        revision = fields[DsSaved.revision]
        run_id = fields[DsSaved.run]
        adopted = fields[DsSaved.adopted]
        self.adoptions += adopted
        for committed_revision, committer, payload in self._recent.get(key, ()):
            if committed_revision != revision:
                continue
            if adopted and digest(payload) != fields[DsSaved.digest]:
                self.fail(f"{key}: run {run_id} adopted r{revision} but that commit holds "
                          "different content (a concurrent writer's) — it should have conflicted", (key, run_id))
            elif not adopted and committer != event[2]:
                self.fail(f"{key}: run {run_id} on {event[2]} reports committing r{revision}, "
                          f"but {committer} made that commit", (key, run_id))
            return
        verb = "adopted" if adopted else "reports committing"
        self.fail(f"{key}: run {run_id} {verb} r{revision}, which no commit produced", (key, run_id))
