"""The trace: rolling digest, bounded ring, related-event excerpts, JSON lines, subscribers."""
from __future__ import annotations

import ast
import io
import json
import os

import pytest

from sim.trace import Event, NodeProbe, Trace, event_json

BASE = [
    (0, "worker-1", "ds.load", {"key": "sentinel:a", "found": False}),
    (5, "worker-1", "ds.save", {"key": "sentinel:a", "expected": 0, "revision": 1, "payload": {"n": 1}}),
    (9, "harness", "fault", {"site": "ds.save", "kind": "ack-lost", "hit": 3}),
]


def _digest(events) -> str:
    now = [0]
    trace = Trace(lambda: now[0])
    for t_ms, node, kind, fields in events:
        now[0] = t_ms
        trace.emit(node, kind, fields)
    return trace.digest


def _variant(index: int, **change):
    events = [list(e) for e in BASE]
    for name, value in change.items():
        events[index][("t_ms", "node", "kind", "fields").index(name)] = value
    return [tuple(e) for e in events]


def test_identical_sequences_give_identical_digests():
    assert _digest(BASE) == _digest(list(BASE)) == _digest([(t, n, k, dict(f)) for t, n, k, f in BASE])
    assert len(_digest(BASE)) == 64
    int(_digest(BASE), 16)


@pytest.mark.parametrize("variant", [
    _variant(1, t_ms=6),
    _variant(1, node="worker-1#2"),
    _variant(1, kind="ds.clear"),
    _variant(1, fields={"key": "sentinel:b", "expected": 0, "revision": 1, "payload": {"n": 1}}),
    _variant(1, fields={"key": "sentinel:a", "expected": 0, "revision": 2, "payload": {"n": 1}}),
    _variant(1, fields={"key": "sentinel:a", "expected": 0, "revision": 1, "payload": {"n": 2}}),
    _variant(1, fields={"key": "sentinel:a", "expected": 0, "revision": "1", "payload": {"n": 1}}),
    _variant(1, fields={"key": "sentinel:a", "expected": 0, "revision": 1.0, "payload": {"n": 1}}),
    _variant(1, fields={"key": "sentinel:a", "expected": False, "revision": 1, "payload": {"n": 1}}),
    _variant(1, fields={"key": "sentinel:a", "expected": 0, "revision": 1, "payload": {"m": 1}}),
    _variant(1, fields={"key": "sentinel:a", "expected": 0, "revision": 1, "payload": {"n": 1}, "x": None}),
    _variant(1, fields={"key": "sentinel:a", "expected": 0, "revision": 1}),
    _variant(1, fields={"expected": 0, "key": "sentinel:a", "revision": 1, "payload": {"n": 1}}),  # order
    _variant(2, fields={"site": "ds.save", "kind": "ack-lost", "hit": 4}),
    _variant(0, fields={"key": "sentinel:a", "found": None}),
    _variant(0, fields={"key": "sentinel:a", "found": False, "payload": (1, 2)}),
    BASE[:2],  # an event fewer
    BASE + [BASE[0]],  # an event more
    [BASE[1], BASE[0], BASE[2]],  # reordered
], ids=lambda v: None)
def test_any_change_changes_the_digest(variant):
    assert _digest(variant) != _digest(BASE)


def test_tuple_and_list_fields_are_distinguished():
    assert _digest([(0, "n", "k", {"v": (1, 2)})]) != _digest([(0, "n", "k", {"v": [1, 2]})])


def test_digest_is_a_running_value_and_reading_it_does_not_disturb_it():
    now = [0]
    trace = Trace(lambda: now[0])
    seen = []
    for t_ms, node, kind, fields in BASE:
        now[0] = t_ms
        trace.emit(node, kind, fields)
        seen.append(trace.digest)
        assert trace.digest == seen[-1]
    assert len(set(seen)) == 3
    assert seen[-1] == _digest(BASE)


def test_digest_does_not_depend_on_ring_size_or_streaming():
    now = [0]
    small = Trace(lambda: now[0], ring_size=16)
    streamed = Trace(lambda: now[0], stream_to=io.StringIO())
    for t_ms, node, kind, fields in BASE * 10:
        now[0] = t_ms
        small.emit(node, kind, fields)
        streamed.emit(node, kind, fields)
    assert small.digest == streamed.digest


def test_ring_buffer_is_bounded_and_keeps_the_latest():
    ring_size = 32
    trace = Trace(lambda: 0, ring_size=ring_size)
    for i in range(10 * ring_size):
        trace.emit("n", "tick", {"i": i})
    recent = trace.recent()
    assert len(recent) == ring_size
    assert [e.seq for e in recent] == list(range(9 * ring_size + 1, 10 * ring_size + 1))
    assert recent[-1].fields == {"i": 10 * ring_size - 1}
    assert trace.events == 10 * ring_size
    assert trace.counts == {"tick": 10 * ring_size}


def test_emit_returns_the_event_tuple():
    now = [1234]
    trace = Trace(lambda: now[0])
    fields = {"a": 1}
    event = trace.emit("node-x", "kind.y", fields)
    assert event == (1, 1234, "node-x", "kind.y", {"a": 1})
    assert trace.emit("node-x", "kind.y", {}).seq == 2


def test_an_event_is_read_by_field_name_and_stays_a_tuple():
    now = [1234]
    trace = Trace(lambda: now[0])
    seen = []
    trace.subscribe(["kind.y"], seen.append)
    event = trace.emit("node-x", "kind.y", {"a": 1})
    assert (event.seq, event.time_ms, event.node, event.kind, event.fields) == (1, 1234, "node-x", "kind.y", {"a": 1})
    assert isinstance(event, tuple) and type(event) is Event and tuple(event) == (1, 1234, "node-x", "kind.y", {"a": 1})
    assert seen == [event] and seen[0].kind == "kind.y" and trace.recent()[0].fields == {"a": 1}
    assert json.loads(event_json(event)) == {"seq": 1, "t_ms": 1234, "node": "node-x", "kind": "kind.y",
                                             "fields": {"a": 1}}


def test_the_digest_of_a_known_trace_is_pinned():
    # The digest's input is a promise (a saved seed's digest keeps its
    # meaning): the events' shape in memory must not reach it.
    assert _digest(BASE) == "12b7adeb0a1fbcf6c8c92a5311191051b6144df32bdee342e6555a696fd2b8ce"


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where trace events are read (the trace module itself excepted).
EVENT_READERS = ("sim", "faults", "scenarios", "reports")
EVENT_NAMES = ("event", "ev")


def positional_event_reads(source: str) -> list[tuple[int, str]]:
    """``event[3]``-style reads of a trace event: a subscript by an int of a
    name ``event`` or ``ev``, or of a parameter annotated ``Event``."""
    tree = ast.parse(source)
    annotated = {a.arg for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                 for a in (*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs)
                 if a.annotation is not None and "Event" == ast.unparse(a.annotation).strip("'\"")}
    names = set(EVENT_NAMES) | annotated
    return [(n.lineno, ast.unparse(n)) for n in ast.walk(tree)
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in names
            and isinstance(n.slice, (ast.Constant, ast.UnaryOp)) and isinstance(ast.literal_eval(n.slice), int)]


def test_the_scan_finds_a_positional_read():
    source = "def f(event, other, e: Event):\n    return event[3], other[3], e[-1], event['k'], ev[4]\n"
    assert [text for _, text in positional_event_reads(source)] == ["event[3]", "e[-1]", "ev[4]"]


def test_no_trace_event_is_read_by_position_outside_the_trace_module():
    found = []
    for folder in EVENT_READERS:
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in sorted(files):
                path = os.path.join(directory, name)
                rel = os.path.relpath(path, ROOT)
                if not name.endswith(".py") or rel == os.path.join("sim", "trace.py"):
                    continue
                with open(path, encoding="utf-8") as f:
                    found.extend(f"{rel}:{line}: {text}" for line, text in positional_event_reads(f.read()))
    assert not found, found


def test_related_finds_events_mentioning_a_needle():
    trace = Trace(lambda: 0, ring_size=64)
    trace.emit("w", "ds.save", {"key": "sentinel:sentinel-0", "revision": 1})
    trace.emit("w", "ds.save", {"key": "sentinel:sentinel-1", "revision": 1})
    trace.emit("w", "kernel.start_execution", {"run": "sentinel-1@300000"})
    trace.emit("w", "ds.load", {"key": "sentinel:sentinel-0", "nested": {"why": ["x"]}})
    trace.emit("w", "other", {"note": "nested mention: run-77"})
    trace.emit("w", "kernel.live_executions", {"schedule": "sentinel-1", "live": ("sentinel-1@300000",)})
    trace.emit("w", "ds.save", {"key": "sentinel:sentinel-10", "revision": 1})

    found = trace.related(["sentinel:sentinel-0"])
    assert [e.seq for e in found] == [1, 4]
    # Exact values (and elements of tuple fields), never substrings: the
    # excerpt of sentinel-1 must not pull in sentinel-10 or free text.
    assert [e.seq for e in trace.related(["sentinel-1@300000", "run-77"])] == [3, 6]
    assert [e.seq for e in trace.related(["sentinel:sentinel-1"])] == [2]
    assert trace.related(["no-such-thing"]) == []
    assert [e.seq for e in trace.related(["sentinel:sentinel-0", "sentinel-1@300000"], limit=2)] == [4, 6]


def test_related_without_needles_is_the_tail_of_the_ring():
    trace = Trace(lambda: 0, ring_size=16)
    for i in range(100):
        trace.emit("n", "tick", {"i": i})
    assert [e.seq for e in trace.related([], limit=5)] == [96, 97, 98, 99, 100]
    assert [e.seq for e in trace.related(["", ""], limit=3)] == [98, 99, 100]


def test_related_only_sees_the_ring():
    trace = Trace(lambda: 0, ring_size=16)
    trace.emit("n", "old", {"key": "needle"})
    for i in range(50):
        trace.emit("n", "tick", {"i": i})
    assert trace.related(["needle"]) == []


def test_streaming_writes_one_json_object_per_line():
    now = [0]
    sink = io.StringIO()
    trace = Trace(lambda: now[0], stream_to=sink)
    now[0] = 17
    trace.emit("worker-1", "ds.save", {"key": "k", "expected": 0, "revision": 1, "payload": {"n": [1, 2]}})
    now[0] = 99
    trace.emit("worker-1#2", "kernel.live_executions", {"schedule": "s", "live": ("s@0", "s@300000")})
    trace.emit("harness", "note", {"text": "héllo ✓", "none": None, "flag": True})

    lines = sink.getvalue().splitlines()
    assert len(lines) == trace.events == 3
    objects = [json.loads(line) for line in lines]
    assert objects[0] == {"seq": 1, "t_ms": 17, "node": "worker-1", "kind": "ds.save",
                          "fields": {"key": "k", "expected": 0, "revision": 1, "payload": {"n": [1, 2]}}}
    assert objects[1] == {"seq": 2, "t_ms": 99, "node": "worker-1#2", "kind": "kernel.live_executions",
                          "fields": {"schedule": "s", "live": ["s@0", "s@300000"]}}
    third = objects[2]["fields"]
    assert third["text"] == "héllo ✓" and third["none"] is None and third["flag"] is True
    assert "héllo ✓" in lines[2]  # written raw, not \u-escaped
    assert list(objects[0]) == ["seq", "t_ms", "node", "kind", "fields"]
    assert list(objects[0]["fields"]) == ["key", "expected", "revision", "payload"]  # emit order kept


def test_event_json_of_unusual_values_does_not_raise():
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    line = event_json((1, 0, "n", "k", {"obj": Opaque(), "blob": b"\x00\x01"}))
    parsed = json.loads(line)
    assert parsed["fields"]["obj"] == "<opaque>"
    assert parsed["fields"]["blob"] == repr(b"\x00\x01")


def test_fields_never_overwrite_the_envelope_in_json_lines():
    # Regression: fields used to be spliced into the envelope, so a fault's
    # {"kind": "ack-lost"} (World.record_fault) or a step's {"seq": n}
    # (faults/describe.py) overwrote the event's own kind and seq.
    sink = io.StringIO()
    trace = Trace(lambda: 5, stream_to=sink)
    trace.emit("worker-1", "fault", {"site": "ds.save", "kind": "ack-lost", "hit": 1})
    trace.emit("worker-1", "kernel.append_step", {"run": "r", "seq": 0, "node": "x", "t_ms": -1})
    first, second = (json.loads(line) for line in sink.getvalue().splitlines())
    assert (first["seq"], first["kind"]) == (1, "fault")
    assert first["fields"]["kind"] == "ack-lost"
    assert (second["seq"], second["t_ms"], second["node"], second["kind"]) == (2, 5, "worker-1", "kernel.append_step")
    assert second["fields"] == {"run": "r", "seq": 0, "node": "x", "t_ms": -1}


def test_subscribers_get_only_their_kinds():
    trace = Trace(lambda: 0)
    got: dict[str, list] = {"saves": [], "loads_and_clears": [], "all": [], "saves_again": []}
    trace.subscribe(["ds.save"], got["saves"].append)
    trace.subscribe(("ds.load", "ds.clear"), got["loads_and_clears"].append)
    trace.subscribe(None, got["all"].append)
    trace.subscribe(["ds.save"], got["saves_again"].append)

    for kind in ("ds.load", "ds.save", "fault", "ds.clear", "ds.save", "ds.saved"):
        trace.emit("w", kind, {"kind_was": kind})

    assert [e.kind for e in got["saves"]] == ["ds.save", "ds.save"]
    assert [e.seq for e in got["saves"]] == [2, 5]
    assert got["saves_again"] == got["saves"]
    assert [e.kind for e in got["loads_and_clears"]] == ["ds.load", "ds.clear"]
    assert [e.seq for e in got["all"]] == [1, 2, 3, 4, 5, 6]


def test_subscribers_see_events_in_emit_order_with_registration_order():
    trace = Trace(lambda: 0)
    calls = []
    trace.subscribe(["k"], lambda e: calls.append(("first", e.seq)))
    trace.subscribe(None, lambda e: calls.append(("wildcard", e.seq)))
    trace.subscribe(["k"], lambda e: calls.append(("second", e.seq)))
    trace.emit("n", "k", {})
    trace.emit("n", "k", {})
    assert calls == [("first", 1), ("second", 1), ("wildcard", 1), ("first", 2), ("second", 2), ("wildcard", 2)]


def test_node_probe_emits_with_the_node_label():
    trace = Trace(lambda: 3)
    NodeProbe(trace, "worker-1#4").emit("ds.loaded", key="k", found=True)
    assert trace.recent() == [(1, 3, "worker-1#4", "ds.loaded", {"key": "k", "found": True})]


def test_ring_size_has_a_floor():
    with pytest.raises(AssertionError):
        Trace(lambda: 0, ring_size=4)
