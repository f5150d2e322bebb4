"""Reference model of the schedule store (``model.schedule_store``): one
cursor per schedule.

The contract, per ``schedule_id``: ``(high_water_ms, archived_through_ms,
archived_runs, archive_digest, held, pending_delete)``, empty (``None,
None, 0, 64 zeros, (), None``) until written.

- ``cursor(s)``: the cursor, the empty one for an unknown schedule.
- ``advance(s, t)``: the high-water mark becomes ``max(mark, t)``.
- ``retire(s, t, run, summary, hold=False)``: False (nothing changes) when
  ``t`` is at or below ``archived_through_ms``; otherwise True and the
  watermark becomes ``t``, and: with ``hold`` the run joins ``held`` (a pin
  keeps it; archived on release); with a summary the run is archived — the
  count grows by one, the digest becomes ``sha256(JCS({"previous": digest,
  "run": summary}))`` and the run is the pending deletion; with neither the
  occurrence never ran (skipped).
- ``release(s, run, summary)``: False unless the run is held; else it leaves
  ``held`` and is archived as above.
- Arguments first: ``schedule_id`` a non-empty str of valid Unicode and an
  occurrence an int in 0..2**63-1 (else TypeError); a run id a str of valid
  Unicode (else TypeError); ``hold`` a bool (TypeError); a held retire names
  its run and carries no summary, an archiving one names its run
  (ValueError). A summary with no JSON form fails the archiving call
  (``CanonicalEncodingError``) and changes nothing.

The digest is this package's own RFC 8785 encoder's (``jcs``), not the model's.
"""
from __future__ import annotations

from typing import Any

from scenarios.reference import History, PortReference, Refused, bound_args, judge, same, valid_text
from scenarios.reference.jcs import JcsError, digest

ZERO = "0" * 64
INT64_MAX = 2**63 - 1
EMPTY = (None, None, 0, ZERO, (), None)


def _schedule_problem(schedule_id: object) -> Refused | None:
    if type(schedule_id) is not str or not schedule_id or not valid_text(schedule_id):
        return Refused("TypeError")
    return None


def _occurrence_problem(occurrence_ms: object) -> Refused | None:
    if type(occurrence_ms) is not int or not 0 <= occurrence_ms <= INT64_MAX:
        return Refused("TypeError")
    return None


def _run_problem(run_id: object) -> Refused | None:
    if type(run_id) is not str or not valid_text(run_id):
        return Refused("TypeError")
    return None


def _cursor_view(cursor: Any) -> tuple:
    return (cursor.schedule_id, cursor.high_water_ms, cursor.archived_through_ms, cursor.archived_runs,
            cursor.archive_digest, tuple(cursor.held), cursor.pending_delete)


class ReferenceSchedules(PortReference):
    """The schedule store's contract over a dict of cursors."""

    port = "schedules"
    scope = "schedules"
    KEY_PARAM = "schedule_id"

    def __init__(self) -> None:
        self._cursors: dict[str, tuple] = {}
        self._history = History()
        self._handlers = {"cursor": self._cursor, "advance": self._advance, "retire": self._retire,
                          "release": self._release}

    def _table(self) -> dict:
        return self._cursors

    def _state(self, schedule_id: str) -> tuple:
        return self._cursors.get(schedule_id, EMPTY)

    def _cursor(self, call: Any) -> str | None:
        key = self.key_of(call)
        a = bound_args(call, ("schedule_id",), {})
        if a is None:
            return judge(call, key, Refused("TypeError"), same, self._history)
        problem = _schedule_problem(a["schedule_id"])
        if problem is not None:
            return judge(call, key, problem, same, self._history)
        return judge(call, key, (key, *self._state(key)), _cursor_view, self._history)

    def _advance(self, call: Any) -> str | None:
        key = self.key_of(call)
        a = bound_args(call, ("schedule_id", "occurrence_ms"), {})
        if a is None:
            return judge(call, key, Refused("TypeError"), same, self._history)
        problem = _schedule_problem(a["schedule_id"]) or _occurrence_problem(a["occurrence_ms"])
        if problem is not None:
            return judge(call, key, problem, same, self._history)
        message = judge(call, key, None, same, self._history)
        if message is None:
            state = self._state(key)
            occurrence_ms = a["occurrence_ms"]
            if state[0] is None or occurrence_ms > state[0]:
                self._cursors[key] = (occurrence_ms, *state[1:])
            self._history.note(key, call, (occurrence_ms,), "advanced")
        return message

    def _archive(self, state: tuple, run_id: str, summary: object) -> tuple | Refused:
        try:
            link = digest({"previous": state[3], "run": summary})
        except JcsError:
            return Refused("CanonicalEncodingError")
        return state[0], state[1], state[2] + 1, link, state[4], run_id

    def _retire(self, call: Any) -> str | None:
        key = self.key_of(call)
        a = bound_args(call, ("schedule_id", "occurrence_ms", "run_id", "summary", "hold"), {"hold": False})
        if a is None:
            return judge(call, key, Refused("TypeError"), same, self._history)
        occurrence_ms, run_id, summary, hold = a["occurrence_ms"], a["run_id"], a["summary"], a["hold"]
        problem = _schedule_problem(a["schedule_id"]) or _occurrence_problem(occurrence_ms)
        if problem is None and type(hold) is not bool:
            problem = Refused("TypeError")
        if problem is None and run_id is not None:
            problem = _run_problem(run_id)
        if problem is None and ((hold and (run_id is None or summary is not None))
                                or (summary is not None and run_id is None)):
            problem = Refused("ValueError")
        if problem is not None:
            return judge(call, key, problem, same, self._history)
        state = self._state(key)
        through = state[1]
        if through is not None and occurrence_ms <= through:
            after: Any = None
        elif hold:
            after = (state[0], occurrence_ms, state[2], state[3], (*state[4], run_id), state[5])
        elif summary is None:
            after = (state[0], occurrence_ms, *state[2:])
        else:
            archived = self._archive(state, run_id, summary)
            after = archived if isinstance(archived, Refused) else (archived[0], occurrence_ms, *archived[2:])
        if isinstance(after, Refused):
            return judge(call, key, after, same, self._history)
        message = judge(call, key, after is not None, same, self._history)
        if message is None:
            if after is not None:
                self._cursors[key] = after
            self._history.note(key, call, (occurrence_ms, run_id, "hold" if hold else "summary" if summary is not None
                                           else "skip"), after is not None)
        return message

    def _release(self, call: Any) -> str | None:
        key = self.key_of(call)
        a = bound_args(call, ("schedule_id", "run_id", "summary"), {})
        if a is None:
            return judge(call, key, Refused("TypeError"), same, self._history)
        run_id = a["run_id"]
        problem = _schedule_problem(a["schedule_id"]) or _run_problem(run_id)
        if problem is not None:
            return judge(call, key, problem, same, self._history)
        state = self._state(key)
        if run_id not in state[4]:
            after: Any = None
        else:
            kept = (state[0], state[1], state[2], state[3], tuple(r for r in state[4] if r != run_id), state[5])
            after = self._archive(kept, run_id, a["summary"])
        if isinstance(after, Refused):
            return judge(call, key, after, same, self._history)
        message = judge(call, key, after is not None, same, self._history)
        if message is None:
            if after is not None:
                self._cursors[key] = after
            self._history.note(key, call, (run_id,), after is not None)
        return message

    def audit(self, view: Any) -> list[tuple[str, str | None]]:
        """Every cursor the model holds is the store's (through the audit view's cursor read)."""
        read = getattr(view, "schedule_cursor", None)
        if read is None:
            return []
        found = []
        for schedule_id, state in self._cursors.items():
            have = _cursor_view(read(schedule_id))
            want = (schedule_id, *state)
            found.append((schedule_id, None if have == want else (
                f"schedule cursor {schedule_id!r} at the end of the run: the store holds {have!r:.300}, the "
                f"contract's reference model {want!r:.300}")))
        return found
