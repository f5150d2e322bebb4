"""Fault scripts as data: what ``--faults FILE`` reads and repro files carry.

A script is a JSON list of fired faults (``sim.world.FaultEvent``), or an
object holding one under ``"fault_script"`` (a repro file) or ``"faults"``.
Each entry::

    {"time_ms": 259200000, "node": "worker-1", "site": "ledger.reserve_settlement",
     "kind": "ack-lost", "hit": 812, "restart_after_ms": 5000}

- ``time_ms``: simulated time (ms since the start); ``node``: a node name or
  label (``worker-1`` or ``worker-1#3``; ``*`` in a point fault without a
  hit: whichever node makes the call); ``site``: a port method, a
  failpoint name, ``process`` (kills, pauses), ``alarm.<scheduleId>``
  (duplicate wakes) or ``partition/<mode>/<store>+<store>`` (partitions:
  ``faults.partitions``); ``kind``: a fault kind (``faults.kinds``).
- ``hit``: the site's hit index at which it fires. Optional for point
  faults in a hand-written script: without it the fault fires at the first
  hit of its site at or after ``time_ms`` ("at day 3, crash worker-1 after
  ``ledger.reserve_settlement`` commits").
- ``restart_after_ms`` (crashes, kills): how long the process stays down;
  ``duration_ms`` (pauses, partitions): how long it is frozen, or cut off.

Entries of kind ``schedule`` are scheduling deviations (``sim.interleave``):
at ``time_ms`` (and ``step``, the resumption index within that instant)
the task ``node``/``task`` ran before the FIFO-first task. They share the
list with the faults so one script replays both.

A malformed script is a ``ScriptError`` naming the entry and the field.
"""
from __future__ import annotations

import json
from typing import Any

from faults.kinds import ALL_FAULT_KINDS, NODE_PAUSE, PARTITION, TIMED_FAULT_KINDS
from sim.interleave import SCRIPT_KIND as SCHEDULE_KIND
from sim.interleave import Deviation
from sim.world import FaultEvent

SCRIPT_ENTRIES_MAX = 1_000_000
_FIELDS = ("time_ms", "node", "site", "kind", "hit", "restart_after_ms", "duration_ms")
_REQUIRED = ("time_ms", "node", "site", "kind")


class ScriptError(ValueError):
    """A fault script that cannot be run; the message names the bad entry."""

    name = "ScriptError"


def event_to_json(event: Any) -> dict[str, Any]:
    if isinstance(event, Deviation):
        return event.to_json()
    return _fault_to_json(event)


def _fault_to_json(event: FaultEvent) -> dict[str, Any]:
    value: dict[str, Any] = {"time_ms": event.time_ms, "node": event.node, "site": event.site, "kind": event.kind,
                             "hit": event.hit}
    if event.restart_after_ms is not None:
        value["restart_after_ms"] = event.restart_after_ms
    if event.duration_ms is not None:
        value["duration_ms"] = event.duration_ms
    return value


def script_to_json(events: tuple[FaultEvent, ...] | list[FaultEvent]) -> list[dict[str, Any]]:
    return [event_to_json(e) for e in events]


def _int_field(entry: dict, name: str, where: str, *, optional: bool) -> int | None:
    value = entry.get(name)
    if value is None:
        if optional:
            return None
        raise ScriptError(f"{where}: missing {name!r}")
    if type(value) is not int or value < 0:
        raise ScriptError(f"{where}: {name!r} must be a non-negative integer, got {value!r:.40}")
    return value


def parse_entry(entry: Any, index: int) -> FaultEvent | Deviation:
    where = f"fault script entry {index}"
    if not isinstance(entry, dict):
        raise ScriptError(f"{where}: expected an object, got {type(entry).__name__}")
    if entry.get("kind") == SCHEDULE_KIND:
        try:
            return Deviation.from_json(entry, where)
        except ValueError as error:
            raise ScriptError(str(error)) from None
    unknown = sorted(set(entry) - set(_FIELDS))
    if unknown:
        raise ScriptError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; "
                          f"known: {', '.join(_FIELDS)}")
    for name in ("node", "site", "kind"):
        if name not in entry:
            raise ScriptError(f"{where}: missing {name!r}")
        if type(entry[name]) is not str or not entry[name]:
            raise ScriptError(f"{where}: {name!r} must be a non-empty string, got {entry[name]!r:.40}")
    kind = entry["kind"]
    if kind not in ALL_FAULT_KINDS:
        raise ScriptError(f"{where}: unknown fault kind {kind!r}; known: {', '.join(ALL_FAULT_KINDS)}")
    time_ms = _int_field(entry, "time_ms", where, optional=False)
    hit = _int_field(entry, "hit", where, optional=True)
    if hit is not None and hit < 1 and kind not in TIMED_FAULT_KINDS:
        raise ScriptError(f"{where}: 'hit' counts from 1, got {hit}")
    restart = _int_field(entry, "restart_after_ms", where, optional=True)
    duration = _int_field(entry, "duration_ms", where, optional=True)
    if kind in (NODE_PAUSE, PARTITION) and duration is None:
        raise ScriptError(f"{where}: a {kind} needs 'duration_ms'")
    assert time_ms is not None
    return FaultEvent(time_ms, entry["node"], entry["site"], kind, hit, restart, duration)


def parse_script(value: Any) -> tuple[FaultEvent, ...]:
    """Validate a decoded script (list, or object with ``fault_script``/``faults``)."""
    if isinstance(value, dict):
        for key in ("fault_script", "faults"):
            if key in value:
                value = value[key]
                break
        else:
            raise ScriptError("a fault script is a list of faults, or an object with a 'fault_script' "
                              "or 'faults' list")
    if not isinstance(value, list):
        raise ScriptError(f"a fault script is a list of faults, got {type(value).__name__}")
    if len(value) > SCRIPT_ENTRIES_MAX:
        raise ScriptError(f"a fault script holds at most {SCRIPT_ENTRIES_MAX} faults, got {len(value)}")
    events = tuple(parse_entry(entry, index) for index, entry in enumerate(value))
    seen: set[tuple[str, int]] = set()
    for index, event in enumerate(events):
        if isinstance(event, Deviation) or event.hit is None or event.kind in TIMED_FAULT_KINDS:
            continue
        if (event.site, event.hit) in seen:
            raise ScriptError(f"fault script entry {index}: a second fault at hit {event.hit} of {event.site!r}")
        seen.add((event.site, event.hit))
    return events


def load_script(path: str) -> tuple[FaultEvent, ...]:
    """Read and validate a script file; every problem is a one-line ``ScriptError``."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        raise ScriptError(f"cannot read fault script {path!r}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ScriptError(f"fault script {path!r} is not UTF-8 text") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ScriptError(f"fault script {path!r} is not JSON: {error.msg} at line {error.lineno} "
                          f"column {error.colno}") from None
    return parse_script(value)
