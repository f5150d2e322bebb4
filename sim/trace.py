"""The trace: every event of a run, folded into one rolling sha256.

An event is an ``Event``, a named tuple ``(seq, time_ms, node, kind,
fields)`` read by field name (``event.kind``, ``event.fields``); ``fields``
is a dict of plain data in the order the emitter wrote it. Each event feeds
the ``marshal`` encoding (format version 2: no object references, so the
bytes depend only on the values, never on identity or refcounts) of
``(time step, node, shape, values)`` into the rolling digest: an event's seq
is its place in that input, its time enters as the step from the previous
event's, ``values`` are the fields' values in order and ``shape`` numbers the
event's kind with the tuple of its field names (the first event of a shape
carries them as well: a kind and its names are hashed once, not per event).
A field another field's digest stands for (``Trace.cover``: a committed
append's envelopes, covered by its batch digest) is left out of the hash,
never out of the event. Dicts marshal in insertion order and sets are never
allowed in fields, so the bytes are independent of ``PYTHONHASHSEED``. marshal is ~4x
cheaper than ``repr`` here, and an event is hashed on the hot path. A field
marshal cannot encode (a record object) is a ``TypeError``: describe it as
plain data. The marshal format is stable within a Python version; the run's
configuration records the Python version next to the digest.

The digest covers what the system did and saw — store calls with digests of
their arguments and results, recorded steps, faults, scheduling deviations —
not only the scheduler's own events.

Memory is bounded: only the last ``ring_size`` events stay in memory (for
failure excerpts); ``stream_to`` writes every event as one JSON line.
"""
from __future__ import annotations

import hashlib
import json
import marshal
from collections import deque
from typing import Any, Callable, Iterable, NamedTuple, TextIO


class Event(NamedTuple):
    """One trace event. A tuple still (the ring, the JSON line and the
    digest's input are as they were); read it by name."""

    seq: int
    time_ms: int
    node: str
    kind: str
    fields: dict[str, Any]


# ``Event(...)`` without the generated ``__new__``'s Python frame: an event
# is built on the hot path.
_new_tuple = tuple.__new__

RING_SIZE_DEFAULT = 4_096
# Version 2 predates marshal's back-references (version 3), which would make
# the bytes depend on object identity. Pinned: the digest format is a promise.
_MARSHAL_VERSION = 2


class SubscriberFailed(Exception):
    """A subscriber (a checker, a workload's counter) raised while reading an
    event: a defect of the harness, not of the system under test. It names
    the subscriber's owner and the event it was reading."""

    name = "SubscriberFailed"

    def __init__(self, callback: Any, event_seq: int, event_kind: str, error: BaseException) -> None:
        owner = getattr(callback, "__self__", None)
        self.owner = owner
        self.owner_name = str(getattr(owner, "name", "") or type(owner).__name__) if owner is not None else (
            getattr(callback, "__qualname__", "?"))
        self.event_seq = event_seq
        self.event_kind = event_kind
        self.error = error
        super().__init__(f"{self.owner_name} raised {type(error).__name__}: {error} reading event "
                         f"#{self.event_seq} ({self.event_kind})")


class Trace:
    __slots__ = ("_clock", "_digest", "_ring", "_stream", "_subscribers", "_wildcard", "_covers", "_kept", "_shapes",
                 "_then_ms",
                 "events",
                 "counts", "hashed_bytes", "subscriber_failure")

    def __init__(self, clock: Callable[[], int], *, ring_size: int = RING_SIZE_DEFAULT,
                 stream_to: TextIO | None = None) -> None:
        assert ring_size >= 16
        self._clock = clock
        self._digest = hashlib.sha256()
        self._ring: deque[Event] = deque(maxlen=ring_size)
        self._stream = stream_to
        self._subscribers: dict[str, list[Callable[[Event], None]]] = {}
        self._wildcard: list[Callable[[Event], None]] = []
        self._covers: dict[str, tuple[frozenset[str], str]] = {}
        self._kept: dict[tuple, tuple[str, ...]] = {}  # (kind, names) of a covered event -> the names hashed
        self._shapes: dict[tuple, int] = {}  # (kind, names) -> number: bounded by the event types' field sets
        self._then_ms = 0  # the previous event's time
        self.events = 0
        self.counts: dict[str, int] = {}
        self.hashed_bytes = 0  # what the rolling digest has taken in (a counted figure of its work)
        self.subscriber_failure: SubscriberFailed | None = None  # the first subscriber that raised

    def subscribe(self, kinds: Iterable[str] | None, callback: Callable[[Event], None]) -> None:
        """Call ``callback(event)`` for each event of ``kinds`` (None: every event)."""
        if kinds is None:
            self._wildcard.append(callback)
            return
        for kind in kinds:
            self._subscribers.setdefault(kind, []).append(callback)

    def cover(self, kind: str, fields: tuple[str, ...], by: str) -> None:
        """Events of ``kind`` that carry field ``by`` (a digest of what
        ``fields`` hold, computed by the system) are hashed without
        ``fields``: the digest stands for them. Subscribers and the JSON
        stream still get every field; an event without ``by`` is hashed
        whole."""
        assert by not in fields and fields, (fields, by)
        known = self._covers.setdefault(kind, (frozenset(fields), by))
        assert known == (frozenset(fields), by), (kind, known, fields, by)

    def emit(self, node: str, kind: str, fields: dict[str, Any]) -> Event:
        self.events += 1
        now_ms = self._clock()
        event = _new_tuple(Event, (self.events, now_ms, node, kind, fields))
        cover = self._covers.get(kind) if self._covers else None
        if cover is not None and cover[1] in fields:
            # The names hashed for this kind and these fields, worked out
            # once per (kind, field names) (bounded by the event types).
            every = (kind, tuple(fields))
            names = self._kept.get(every)
            if names is None:
                skip = cover[0]
                names = self._kept[every] = tuple(k for k in every[1] if k not in skip)
            values = tuple([fields[k] for k in names])
        else:
            names = tuple(fields)
            values = tuple(fields.values())
        # An event's kind and field names (its shape) are hashed once per
        # shape: the first event of a shape hashes them with the shape's
        # number, later ones the number alone. Numbers are given in order of
        # first appearance, so they depend on the run's history only.
        key = (kind, names)
        shape = self._shapes.get(key)
        if shape is None:
            shape = len(self._shapes)
            self._shapes[key] = shape
            shape = (shape, kind, names)
        try:
            # An event's number is its place in the digest's input, and its
            # time is hashed as the step from the previous event's (a small
            # int, where months of milliseconds would marshal as a long).
            data = marshal.dumps((now_ms - self._then_ms, node, shape, values), _MARSHAL_VERSION)
        except ValueError:
            # A record object, a set...: its bytes could depend on identity
            # or hash order. Refuse rather than digest something unstable.
            raise TypeError(f"trace event {kind!r} has a field that is not plain data: "
                            f"{sorted(k for k, v in fields.items() if not _plain(v))}") from None
        self._then_ms = now_ms
        self._digest.update(data)
        self.hashed_bytes += len(data)
        self._ring.append(event)
        counts = self.counts
        counts[kind] = counts.get(kind, 0) + 1
        if self._stream is not None:
            self._stream.write(event_json(event))
            self._stream.write("\n")
        callbacks = self._subscribers.get(kind)
        callback = None
        try:  # free unless a subscriber raises
            if callbacks is not None:
                for callback in callbacks:
                    callback(event)
            for callback in self._wildcard:
                callback(event)
        except Exception as error:
            raise self.subscriber_failed(callback, self.events, kind, error) from error
        return event

    def subscriber_failed(self, callback: Any, event_seq: int, event_kind: str,
                          error: BaseException) -> "SubscriberFailed":
        """The error to raise for a subscriber (or a port observer) that
        raised reading event ``event_seq``; the run's first is kept."""
        if isinstance(error, SubscriberFailed):
            return error  # raised by a nested emit: already named
        failed = SubscriberFailed(callback, event_seq, event_kind, error)
        if self.subscriber_failure is None:
            self.subscriber_failure = failed
        return failed

    @property
    def digest(self) -> str:
        return self._digest.copy().hexdigest()

    def recent(self) -> list[Event]:
        return list(self._ring)

    def related(self, needles: Iterable[str], limit: int = 40) -> list[Event]:
        """The most recent ring events that mention any of ``needles``.

        Faults and process starts/crashes are always included: they are the
        usual cause of what happened to the key or run that failed.
        """
        wanted = tuple(n for n in needles if n)
        if not wanted:
            return list(self._ring)[-limit:]
        picked = [e for e in self._ring if e.kind in _CONTEXT_KINDS or _mentions(e, wanted)]
        return picked[-limit:]


_CONTEXT_KINDS = frozenset({"fault", "node.crash", "node.start", "deploy", "violation"})


def _mentions(event: Event, needles: tuple[str, ...]) -> bool:
    """A field value (or an element of a tuple/list field) equals a needle.

    Exact, not substring: ``sentinel:sentinel-1`` must not pull in the
    events of ``sentinel-10``.
    """
    for value in event.fields.values():
        if type(value) is str:
            if value in needles:
                return True
        elif type(value) in (tuple, list):
            for item in value:
                if type(item) is str and item in needles:
                    return True
    return False


def _plain(value: Any) -> bool:
    try:
        marshal.dumps(value, _MARSHAL_VERSION)
    except ValueError:
        return False
    return True


def field_text(value: Any, limit: int = 80) -> str:
    """A field's value as one line of JSON, cut to ``limit`` characters (an
    ellipsis last): how a failure's excerpt of trace events shows it."""
    text = json.dumps(value, ensure_ascii=False, default=repr, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def event_json(event: Event) -> str:
    seq, time_ms, node, kind, fields = event
    # Fields are nested, never spliced in: a field named ``kind`` or ``seq``
    # (a fault's kind, a step's seq) must not overwrite the envelope.
    return json.dumps({"seq": seq, "t_ms": time_ms, "node": node, "kind": kind, "fields": _jsonable(fields)},
                      ensure_ascii=False, separators=(",", ":"), default=repr)


def _jsonable(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in fields.items()}


class NodeProbe:
    """``model.probe.Probe`` for one node: model events go to the trace."""

    __slots__ = ("_trace", "_node")

    def __init__(self, trace: Trace, node_label: str) -> None:
        self._trace = trace
        self._node = node_label

    def emit(self, kind: str, **fields: Any) -> None:
        self._trace.emit(self._node, kind, fields)
