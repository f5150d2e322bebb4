"""Typed trace events: the describers write them, the invariants read them,
and every event a real run traces conforms to its type."""
from __future__ import annotations

import ast
import collections
import io
import json
from pathlib import Path

import pytest

import faults.events as events
import scenarios.invariants
from faults.describe import DESCRIBERS_BY_PORT
from faults.events import (
    DETAIL,
    ERROR,
    OPTIONAL,
    RESULT,
    DsLoad,
    Fault,
    LogAppend,
    PortEvent,
    ProbeEvent,
    TraceEvent,
    event_type,
    port_events,
    probe_events,
)
from scenarios import registry
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions


# -- the types themselves --------------------------------------------------------

def test_a_field_attribute_is_the_field_name():
    assert LogAppend.kind == "log.append"
    assert (LogAppend.conversation, LogAppend.epoch, LogAppend.first_seq) == ("conversation", "epoch", "first_seq")
    assert LogAppend.fields[:2] == ("conversation", "batch")
    assert LogAppend.result_fields == ("first_seq", "last_seq", "tail_digest", "batch_digest", "replayed")
    assert (LogAppend.error, LogAppend.detail) == (ERROR, DETAIL)
    assert Fault.kind == "fault" and Fault.kind_ == "kind" and Fault.fields == ("site", "kind", "hit")


def test_build_and_add_result_take_exactly_the_declared_fields_in_order():
    fields = DsLoad.build(found=True, key="k")
    assert list(fields) == ["key", "found"]
    assert list(DsLoad.add_result(fields, payload={}, version=2, revision=1)) == list(DsLoad.fields + DsLoad.result_fields)
    assert DsLoad.build(payload={}, version=2, revision=1, found=True, key="k") == fields  # one call, same dict
    assert list(DsLoad.build(payload={}, version=2, revision=1, found=True, key="k")) == list(fields)
    with pytest.raises(TypeError):
        DsLoad.build(key="k")  # missing
    with pytest.raises(TypeError):
        DsLoad.build(key="k", found=True, revision=1)  # the result group is all or nothing
    with pytest.raises(TypeError):
        DsLoad.add_result({}, revision=1, version=2)  # the result group is all or nothing
    with pytest.raises(TypeError):
        DsLoad.add_result({}, revision=1, version=2, payload=3, epoch=4)  # undeclared
    with pytest.raises(TypeError):
        DsLoad()  # a schema, not an object per event


def test_check_accepts_exactly_the_shapes_of_a_port_event():
    assert DsLoad.check({"key": "k", "found": False}) is None
    assert DsLoad.check({"key": "k", "found": True, "revision": 1, "version": 1, "payload": None}) is None
    assert DsLoad.check({"key": "k", "found": False, ERROR: "X", DETAIL: "x"}) is None
    assert DsLoad.check({"found": False, "key": "k"}) is not None  # order is part of the digest
    assert DsLoad.check({"key": "k", "found": True, "revision": 1}) is not None  # half a result
    assert DsLoad.check({"key": "k", "found": True, "revision": 1, "version": 1, "payload": None,
                         ERROR: "X", DETAIL: "x"}) is not None


def test_declarations_are_checked_when_the_type_is_defined():
    with pytest.raises(TypeError, match="already"):
        class Again(PortEvent):  # noqa: F841
            kind = "log.append"
            conversation: str
    with pytest.raises(TypeError, match="shadow"):
        class Shadow(PortEvent):  # noqa: F841
            kind = "test.shadow"
            build: str
    with pytest.raises(TypeError, match="after"):
        class Order(PortEvent):  # noqa: F841
            kind = "test.order"
            a: int = RESULT
            b: int
    with pytest.raises(TypeError, match="default"):
        class Optional(PortEvent):  # noqa: F841
            kind = "test.optional"
            a: int = OPTIONAL
    assert event_type("test.shadow") is None and event_type("test.order") is None


def test_every_describer_traces_a_port_event_type():
    kinds = {d.event.kind for table in DESCRIBERS_BY_PORT.values() for d in table.values()}
    assert kinds == set(port_events())


# -- the invariants read through the types ---------------------------------------

def _invariant_modules():
    return sorted(Path(scenarios.invariants.__file__).parent.glob("*.py"))


@pytest.mark.parametrize("path", _invariant_modules(), ids=lambda p: p.stem)
def test_invariants_read_only_names_their_event_types_declare(path):
    """Every ``EventType.name`` in a checker is a field (or kind/error/detail)
    of that type — also on branches a short run does not reach — and no
    checker spells a typed kind as a string literal."""
    tree = ast.parse(path.read_text())
    imported: dict[str, type[TraceEvent]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "faults.events":
            for alias in node.names:
                value = getattr(events, alias.name)
                if isinstance(value, type) and issubclass(value, TraceEvent):
                    imported[alias.asname or alias.name] = value
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported:
            event = imported[node.value.id]
            readable = {"kind", *event.__dict__.get("__annotations__", {})}
            if issubclass(event, PortEvent):
                readable |= {"error", "detail"}
            if node.attr not in readable:
                problems.append(f"line {node.lineno}: {event.__name__} has no field {node.attr!r}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and event_type(node.value) is not None:
            problems.append(f"line {node.lineno}: kind {node.value!r} spelled as a string")
    assert not problems, problems


def test_checker_kinds_are_typed_event_kinds():
    checkers = [getattr(scenarios.invariants, name) for name in scenarios.invariants.__all__]
    from scenarios.invariants.checkpoints import CheckpointConsistency
    for checker in checkers + [CheckpointConsistency]:
        for kind in checker.kinds:
            assert event_type(kind) is not None, (checker.__name__, kind)


# -- real runs: every traced event conforms to its type -----------------------------

def traced(name: str, duration: str, **options) -> list[dict]:
    stream = io.StringIO()
    result = run(registry.get(name), ScenarioOptions(seed=2, duration_ms=parse_duration_ms(duration), **options),
                 trace_stream=stream)
    assert result.passed, result.violations
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def nonconforming(trace: list[dict]) -> tuple[list[str], collections.Counter]:
    """What in ``trace`` breaks its type, and how many events of each shape were checked."""
    ports = {kind.split(".", 1)[0] for kind in port_events()}
    seen_ports = {event["kind"].split(".", 1)[0] for event in trace if event["kind"] in port_events()}
    problems: list[str] = []
    shapes: collections.Counter = collections.Counter()
    for event in trace:
        kind, fields = event["kind"], event["fields"]
        schema = event_type(kind)
        if schema is None:
            if kind.split(".", 1)[0] in seen_ports:  # a bound port's prefix: must be a known kind
                problems.append(f"#{event['seq']} {kind}: no event type")
            continue
        problem = schema.check(fields)
        if problem is not None:
            problems.append(f"#{event['seq']} {problem}")
        elif issubclass(schema, PortEvent):
            shapes["error" if ERROR in fields else "result" if schema.result_fields and
                   schema.result_fields[0] in fields else "call"] += 1
        else:
            shapes["probe"] += 1
    assert seen_ports <= ports
    return problems, shapes


@pytest.fixture(scope="module")
def sentinel_trace():
    return traced("sentinel-year", "2d")


@pytest.fixture(scope="module")
def storm_trace():
    return traced("ledger-storm", "2h")


def test_sentinel_year_events_conform(sentinel_trace):
    problems, shapes = nonconforming(sentinel_trace)
    assert not problems, problems[:10]
    kinds = {e["kind"] for e in sentinel_trace}
    assert {"ds.save", "ledger.admit", "log.append", "schedules.cursor", "content.put", "pins.pin",
            "findings.apply_run", "ds.loaded", "ds.saved", "deploy", "retention.pass"} <= kinds
    assert shapes["result"] and shapes["call"] and shapes["probe"], shapes


def test_ledger_storm_events_conform(storm_trace):
    problems, shapes = nonconforming(storm_trace)
    assert not problems, problems[:10]
    kinds = {e["kind"] for e in storm_trace}
    assert {"ledger.claim", "log.append", "checkpoints.save", "recovery.read", "fault"} <= kinds
    assert shapes["error"] > 0, shapes  # failed calls are traced as declared too


def test_port_and_probe_types_cover_what_the_runs_trace(sentinel_trace, storm_trace):
    """Which typed kinds the two short runs exercised (informative: a kind
    never traced is checked only by its describer's import-time binding)."""
    traced_kinds = {e["kind"] for e in sentinel_trace + storm_trace}
    typed = set(port_events()) | set(probe_events())
    assert len(traced_kinds & typed) >= 40, sorted(typed - traced_kinds)
    assert all(issubclass(t, ProbeEvent) for t in probe_events().values())
