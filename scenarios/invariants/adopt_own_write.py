"""``adopt-own-write``: an adoption matches a real earlier commit, content and all.

ADR 0053 D3: a re-run save that conflicts at exactly ``expected + 1`` may adopt
the stored envelope only if it is canonically equal to what it tried to write.
The oracle keeps the last few commits of each key (revision -> payload and
version, straight from the store's trace events, not from the model) and
checks every ``ds.adopted`` against them. An adoption of a commit the trace
never saw, or of different content (a genuinely concurrent writer), is a
violation: that writer should have got a loud conflict.
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
    kinds = ("ds.save", "ds.adopted", "ds.clear")

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
                recent.append((fields["revision"], fields["version"], fields["payload"]))
            elif fields.get("error") == "RevisionConflictError":
                self.conflicts += 1
            return
        if kind == "ds.clear":
            self._recent.pop(key, None)
            return
        self.checks += 1
        self.adoptions += 1
        revision = fields["revision"]
        for committed_revision, _version, payload in self._recent.get(key, ()):
            if committed_revision == revision:
                if digest(payload) != fields["digest"]:
                    self.fail(f"{key}: run {fields['run']} adopted r{revision} but that commit holds "
                              "different content (a concurrent writer's) — it should have conflicted",
                              (key, fields["run"]))
                return
        self.fail(f"{key}: run {fields['run']} adopted r{revision}, which no commit produced", (key, fields["run"]))
