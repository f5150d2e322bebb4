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
from typing import Any

from model.canonical import digest
from sim.invariants import Checker

# Adoption is always at the latest revision (expected + 1 where expected was
# latest); keeping a few more tolerates interleavings without unbounded memory.
RECENT_COMMITS_PER_KEY = 8


class AdoptOwnWrite(Checker):
    name = "adopt-own-write"
    kinds = ("ds.save", "ds.saved", "ds.clear")

    def __init__(self) -> None:
        super().__init__()
        self._recent: dict[str, deque] = {}
        self.adoptions = 0
        self.conflicts = 0

    def on_event(self, event: tuple) -> None:
        kind = event[3]
        fields = event[4]
        key = fields["key"]
        if kind == "ds.save":
            if "revision" in fields:
                recent = self._recent.get(key)
                if recent is None:
                    recent = self._recent[key] = deque(maxlen=RECENT_COMMITS_PER_KEY)
                recent.append((fields["revision"], event[2], fields["payload"]))
            elif fields.get("error") == "RevisionConflictError":
                self.conflicts += 1
            return
        if kind == "ds.clear":
            self._recent.pop(key, None)
            return
        self.checks += 1
        revision = fields["revision"]
        run_id = fields["run"]
        adopted = fields["adopted"]
        self.adoptions += adopted
        for committed_revision, committer, payload in self._recent.get(key, ()):
            if committed_revision != revision:
                continue
            if adopted and digest(payload) != fields["digest"]:
                self.fail(f"{key}: run {run_id} adopted r{revision} but that commit holds "
                          "different content (a concurrent writer's) — it should have conflicted", (key, run_id))
            elif not adopted and committer != event[2]:
                self.fail(f"{key}: run {run_id} on {event[2]} reports committing r{revision}, "
                          f"but {committer} made that commit", (key, run_id))
            return
        verb = "adopted" if adopted else "reports committing"
        self.fail(f"{key}: run {run_id} {verb} r{revision}, which no commit produced", (key, run_id))
