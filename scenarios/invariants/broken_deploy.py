"""``broken-deploy``: a broken build is caught loudly and nothing proceeds on it.

A deploy (``deploy`` event) may ship a build that cannot read some stored
state: a version from its future, or one whose migration it lacks. Whether
a build can read a record depends on the record, not on the build alone: a
rollback build reads the state its own version wrote (no process ever ran
the newer build, or the newer build's runs never saved), and is broken only
for the state it cannot read. ``readable(build, stored version)`` says which
(the build's declaration: its version and the migrations it ships). While
a build is deployed:

- a load of state it cannot read is rejected with the typed
  ``StateContractMismatchError`` (``ds.load.rejected``), never accepted;
- no run commits a save over state the build cannot read (``ds.save`` with
  a revision, the stored record's version read from the store's trace): no
  run proceeds on state it could not read. An out-of-band writer (an
  operator's tool editing the stored record at its own version) is not a
  run of the build and is not judged here; ``contract-safety`` checks what
  it wrote.

A broken build that met no unreadable state (nothing was alive to load
while it was deployed, or the state was at a version it reads) owes no
rejection: ``broken_deploys_caught`` counts the ones that met one.

A deploy lands inside a wake, so the restarted worker resumes that run on
the new code. The system's own writers never disagree at one contract
version: a run's save conflicts only with an out-of-band writer's commit,
or with a commit of the system's own at *another* contract version. The
latter is a run whose save committed on the old code and whose step record
was lost with the process (a crash between the store write and the
record), re-run on a build of another version after a deploy: the durable-state save
adopts an own write only when the stored envelope equals the attempt at the
current contract version, so the re-run conflicts loudly, as specified (the
run fails typed; the state holds the old code's committed write, which the
next wake migrates). A conflict with the system's own commit of other
content at the same version is a run that re-ran its save with other
content on the same code, or a second live writer: a violation. The commits
are read from the store's trace (revision, committer, version, payload by
the reference encoder), the last few per key.
"""
from __future__ import annotations

from typing import Callable

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


class BrokenDeploys(Checker):
    name = "broken-deploy"
    kinds = (Deploy.kind, DsLoadRejected.kind, DsLoaded.kind, DsSave.kind, DsClear.kind)

    def __init__(self, readable: Callable[[str, int], bool],
                 out_of_band: Callable[[str], bool] = lambda node: False) -> None:
        """``readable(build name, stored version)``: whether that build reads
        a record stored at that contract version. ``out_of_band(node
        label)``: a writer that is not a run of the build."""
        super().__init__()
        self._readable = readable
        self._out_of_band = out_of_band
        self._broken: str | None = None  # the broken build deployed now
        self._caught_now = False
        self.broken = 0
        self.caught = 0
        self._stored: dict[str, int] = {}  # key -> the contract version of its latest commit
        self._recent: dict[str, deque] = {}  # key -> (revision, committer, version, payload text), the last few

    def metrics(self) -> dict:
        return {"broken_deploys": self.broken, "broken_deploys_caught": self.caught}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        if kind == DsSave.kind:
            self._on_save(event.node, fields)
        elif kind == DsClear.kind:
            self._on_clear(event.node, fields[DsClear.key])
        elif kind == Deploy.kind:
            self._broken = fields[Deploy.build] if fields.get(Deploy.broken) else None
            self._caught_now = False
            self.broken += self._broken is not None
        elif self._broken is None:
            return
        elif kind == DsLoadRejected.kind:
            self.checks += 1
            if not self._caught_now and not self._readable(self._broken, fields[DsLoadRejected.stored_version]):
                self._caught_now = True
                self.caught += 1
        elif kind == DsLoaded.kind and fields.get(DsLoaded.found):
            self.checks += 1
            stored_version = fields.get(DsLoaded.stored_version)
            if not self._readable(self._broken, stored_version):
                self.fail(f"build {self._broken} loaded state it cannot read (v{stored_version})",
                          (fields[DsLoaded.key],))

    def _proceeds(self, node: str, key: str) -> str | None:
        """A run writing ``key`` now proceeds on state its broken build cannot
        read: that state's version (None when it may)."""
        stored_version = self._stored.get(key)
        if self._broken is None or stored_version is None or self._out_of_band(node):
            return None
        self.checks += 1
        return None if self._readable(self._broken, stored_version) else stored_version

    def _on_clear(self, node: str, key: str) -> None:
        unread = self._proceeds(node, key)
        if unread is not None:
            self.fail(f"a run cleared state it cannot read (v{unread}) under broken build {self._broken}", (key,))
        self._recent.pop(key, None)
        self._stored.pop(key, None)

    def _on_save(self, node: str, fields: dict) -> None:
        key = fields[DsSave.key]
        if DsSave.revision in fields:
            unread = self._proceeds(node, key)
            if unread is not None:
                self.fail(f"a run committed a save under broken build {self._broken} over state it cannot "
                          f"read (v{unread})", (key,))
            self._stored[key] = fields[DsSave.version]
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
            if version == fields[DsSave.version] and text != _json_text(fields[DsSave.payload]):
                self.fail(f"{key}: a save on {node} conflicts with r{revision}, committed by the system's own "
                          f"{committer} at the same contract version (v{version}) with other content: a run "
                          "re-ran its own save with other content on the same code, or two live writers", (key,))
            return
