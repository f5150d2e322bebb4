"""``adopt-own-write``: an adoption matches a real earlier commit, content and all.

A re-run save that conflicts at exactly ``expected + 1`` may adopt
the stored envelope only if it is canonically equal to what it tried to write.
The oracle keeps the last few commits of each key (revision -> payload and
committing node, straight from the store's trace events, not from the model)
and checks every save the model reports (``ds.saved``) against them:

- a plain save claims a revision: that commit exists and was made by the
  reporting process (not someone else's write taken for its own);
- an adoption claims an earlier commit: it exists and holds exactly the
  content the adopter tried to write. Adopting a commit the trace never saw,
  or different content (a genuinely concurrent writer's), is a violation:
  that writer should have got a loud conflict;
- and it is the commit the adopter's own conflicting save could have made:
  at exactly that save's ``expected + 1`` (not at whatever revision the
  store holds now), under the contract version that save wrote, with a
  payload canonically equal to it — by the reference RFC 8785 encoder
  (``scenarios.reference.jcs``), not the model's: ``true`` is not ``1``.
  The adopter's save is the conflict the same process saw last
  (``ds.save`` with ``RevisionConflictError``: key, expected revision,
  version and payload as sent).
"""
from __future__ import annotations

from collections import deque

from faults.events import DsClear, DsSave, DsSaved
from model.canonical import digest
from scenarios.reference import exact_json
from scenarios.reference.jcs import JcsError, canonical
from sim.invariants import Checker

# Adoption is always at the latest revision (expected + 1 where expected was
# latest); keeping a few more tolerates interleavings without unbounded memory.
RECENT_COMMITS_PER_KEY = 8


def _node_name(label: str) -> str:
    return label.split("#", 1)[0]


def _json_text(value: object) -> str:
    """The reference's canonical text; a value it has no RFC 8785 form for
    (an integer past 2**53) compares by its exact JSON."""
    try:
        return canonical(value)
    except JcsError:
        return "exact:" + exact_json(value)


class AdoptOwnWrite(Checker):
    name = "adopt-own-write"
    kinds = (DsSave.kind, DsSaved.kind, DsClear.kind)

    def __init__(self) -> None:
        super().__init__()
        self._recent: dict[str, deque] = {}
        # node name -> (label, key, expected, version, payload) of its last
        # save that conflicted: what an adoption by that process (that very
        # incarnation) must match. One entry per node, however often it restarts.
        self._conflicted: dict[str, tuple] = {}
        self.adoptions = 0
        self.conflicts = 0

    def metrics(self) -> dict:
        return {"adopted_saves": self.adoptions, "save_conflicts": self.conflicts}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        fields = event.fields
        if kind == DsSave.kind:
            key = fields[DsSave.key]
            if DsSave.revision in fields:
                recent = self._recent.get(key)
                if recent is None:
                    recent = self._recent[key] = deque(maxlen=RECENT_COMMITS_PER_KEY)
                recent.append((fields[DsSave.revision], event.node, fields[DsSave.payload], fields[DsSave.version]))
            elif fields.get(DsSave.error) == "RevisionConflictError":
                self.conflicts += 1
                self._conflicted[_node_name(event.node)] = (event.node, key, fields[DsSave.expected],
                                                          fields[DsSave.version], fields[DsSave.payload])
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
        attempt = self._conflicted.pop(_node_name(event.node), None)
        if attempt is not None and attempt[0] != event.node:
            attempt = None  # an earlier incarnation's: this process never sent it
        for committed_revision, committer, payload, version in self._recent.get(key, ()):
            if committed_revision != revision:
                continue
            if adopted:
                if self._check_attempt(key, run_id, revision, payload, version, attempt) and (
                        digest(payload) != fields[DsSaved.digest]):
                    self.fail(f"{key}: run {run_id} adopted r{revision} but that commit holds "
                              "different content (a concurrent writer's) — it should have conflicted", (key, run_id))
            elif committer != event.node:
                self.fail(f"{key}: run {run_id} on {event.node} reports committing r{revision}, "
                          f"but {committer} made that commit", (key, run_id))
            return
        verb = "adopted" if adopted else "reports committing"
        self.fail(f"{key}: run {run_id} {verb} r{revision}, which no commit produced", (key, run_id))

    def _check_attempt(self, key: str, run_id: str, revision: int, payload: object, version: int,
                       attempt: tuple | None) -> bool:
        """The adopted commit against the save that conflicted; True when it is that save's."""
        if attempt is None or attempt[1] != key:
            self.fail(f"{key}: run {run_id} adopted r{revision} without a save of its own conflicting on "
                      f"{key!r} first", (key, run_id))
            return False
        _, _, expected, written_version, written = attempt
        if revision != expected + 1:
            self.fail(f"{key}: run {run_id} adopted r{revision}, but its save expected r{expected}: only a "
                      f"commit at exactly r{expected + 1} can be its own earlier write", (key, run_id))
        elif version != written_version:
            self.fail(f"{key}: run {run_id} adopted r{revision}, written under contract v{version}, as its own "
                      f"v{written_version} write — it should have conflicted", (key, run_id))
        elif _json_text(payload) != _json_text(written):
            self.fail(f"{key}: run {run_id} adopted r{revision} holding {_json_text(payload):.120} as its own "
                      f"write of {_json_text(written):.120} — not the same JSON; it should have conflicted",
                      (key, run_id))
        else:
            return True
        return False
