"""Reference model of the durable-state store: a dict.

The contract, as plain rules over ``key -> (contract_version, revision,
payload)``:

- ``load(key)``: the record, or None when absent;
- ``save(key, write, expected_revision)``: when ``expected_revision`` is the
  stored revision (0 for an absent key) the new record has revision
  ``expected_revision + 1`` and the write's contract version and payload;
  otherwise ``RevisionConflictError(key, expected, actual)`` and nothing
  changes. Any contract version (>= 1) is accepted;
- ``clear(key)``: removes the key, idempotent; afterwards a create starts at
  revision 1 again;
- payloads are JSON values with exact types (``1``, ``1.0`` and ``True``
  differ), copied both ways: ``save`` never hands back the caller's object;
- arguments are checked before anything is touched: TypeError for a wrong
  type, ValueError for a wrong value (empty key, lone surrogate, revision
  or contract version out of range, NaN/Infinity, a cycle).

A payload is held as its exact JSON text (``EXACT``): a copy nothing can
alias, compared with each answer's payload spelled the same way.
"""
from __future__ import annotations

import json
from typing import Any

from model.durable_state.store import DurableStateWrite
from scenarios.reference import EXACT, History, PortReference, Refused, bind, judge

INT64_MAX = 2**63 - 1
# Deeper payloads are refused (ValueError) by every backend.
PAYLOAD_DEPTH_MAX = 10_000
_dumps = json.JSONEncoder(**EXACT).encode


def _key_problem(key: object) -> Refused | None:
    if not isinstance(key, str):
        return Refused("TypeError")
    if not key:
        return Refused("ValueError")
    if not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            return Refused("ValueError")  # a lone surrogate is not storable text
    return None


def _count_problem(value: object, low: int, high: int) -> Refused | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return Refused("TypeError")
    if not low <= value <= high:
        return Refused("ValueError")
    return None


def _payload_problem(payload: object) -> Refused | None:
    """TypeError for what is not a JSON value (tuples, sets, bytes, non-str
    member names, objects), ValueError for NaN, Infinity and what nests too
    deeply (a cycle nests forever)."""
    stack = [(payload, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                return Refused("ValueError")
        elif value is None or isinstance(value, (str, int)):
            continue
        elif isinstance(value, (dict, list)):
            if depth >= PAYLOAD_DEPTH_MAX:
                return Refused("ValueError")
            if isinstance(value, dict):
                for name in value:
                    if not isinstance(name, str):
                        return Refused("TypeError")
                stack.extend((item, depth + 1) for item in value.values())
            else:
                stack.extend((item, depth + 1) for item in value)
        else:
            return Refused("TypeError")
    return None


def _record_view(record: Any) -> tuple | None:
    if record is None:
        return None
    return (record.contract_version, record.revision, _dumps(record.payload))


class ReferenceDurableState(PortReference):
    """``DurableStateStore``'s contract over ``key -> (version, revision, payload text)``."""

    port = "ds"
    KEY_PARAM = "key"
    scope = "ds"

    def __init__(self) -> None:
        self._rows: dict[str, tuple[int, int, str]] = {}
        self._history = History()
        self._handlers = {"load": self._load, "save": self._save, "clear": self._clear}

    def _table(self) -> dict:
        return self._rows

    def audit(self, view: Any) -> list[tuple[str, str]]:
        """Every key the model holds, against the store's record."""
        found = []
        for key, row in self._rows.items():
            record = view.durable_state_snapshot(key)
            stored = _record_view(record)
            message = None
            if stored != row:
                message = (f"at the end of the run durable-state key {key!r} holds {stored!r:.300}, the contract's "
                           f"reference model {row!r:.300}; last calls on {key!r}: {self._history.text(key)}")
            found.append((key, message))
        return found

    # --- the methods --------------------------------------------------------

    def _load(self, call: Any) -> str | None:
        try:
            (key,) = bind(call, ("key",))
        except (TypeError, KeyError):
            return judge(call, self.key_of(call), Refused("TypeError"), _record_view, self._history)
        problem = _key_problem(key)
        row = self._rows.get(key) if problem is None else None
        message = judge(call, self.key_of(call), problem or row, _record_view, self._history)
        if message is None and row is not None:
            self._history.note(key, call, (), row[1])
        return message

    def _save(self, call: Any) -> str | None:
        try:
            key, write, expected_revision = bind(call, ("key", "write", "expected_revision"))
        except (TypeError, KeyError):
            return judge(call, self.key_of(call), Refused("TypeError"), _record_view, self._history)
        problem = _key_problem(key)
        if problem is None and not isinstance(write, DurableStateWrite):
            problem = Refused("TypeError")
        if problem is None:
            problem = (_count_problem(write.contract_version, 1, INT64_MAX)
                       or _count_problem(expected_revision, 0, INT64_MAX - 1)
                       or _payload_problem(write.payload))
        brief = (expected_revision,)
        if problem is not None:
            return judge(call, self.key_of(call), problem, _record_view, self._history)
        row = self._rows.get(key)
        actual = 0 if row is None else row[1]
        if expected_revision != actual:
            message = judge(call, key, Refused("RevisionConflictError", key=key, expected=expected_revision,
                                               actual=actual), _record_view, self._history)
            if message is None and row is not None:
                self._history.note(key, call, brief, f"RevisionConflictError(actual={actual})")
            return message
        new = (write.contract_version, expected_revision + 1, _dumps(write.payload))
        payload = write.payload

        def view(record: Any) -> tuple:
            # A container handed back must be a copy, never the caller's object.
            aliased = isinstance(payload, (dict, list)) and record.payload is payload
            return (*_record_view(record), "aliases the caller's payload" if aliased else "a copy")

        message = judge(call, key, (*new, "a copy"), view, self._history)
        if message is None:
            self._rows[key] = new
            self._history.note(key, call, brief, new[1])
        return message

    def _clear(self, call: Any) -> str | None:
        try:
            (key,) = bind(call, ("key",))
        except (TypeError, KeyError):
            return judge(call, self.key_of(call), Refused("TypeError"), _record_view, self._history)
        problem = _key_problem(key)
        message = judge(call, self.key_of(call), problem, lambda result: result, self._history)
        if message is None and problem is None:
            self._rows.pop(key, None)
            self._history.drop(key)
        return message
