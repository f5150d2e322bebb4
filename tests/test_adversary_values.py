"""The values adversary (``scenarios.adversaries.values``): its values are
what it says they are, and a short storm runs clean and reaches each of its
edges."""
from __future__ import annotations

import sys

import pytest

from model.canonical import CanonicalDecodeError, canonical_json, decode
from scenarios import registry
from scenarios.adversaries.values import (EDGES, FLOAT_EDGES, _nested, crafted_blobs, illegal_inputs, legal_value,
                                        subclassed)
from scenarios.reference import jcs
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions


def test_the_legal_values_encode_alike_in_both_encoders_and_from_subclasses():
    value = legal_value(7)
    text = canonical_json(value)
    assert jcs.canonical(value) == text
    assert canonical_json(subclassed(value)) == text and jcs.canonical(subclassed(value)) == text
    assert canonical_json(decode(text)) == text
    # Each float layout, signed: padded digits, exponent forms, a fraction repr spells with an exponent.
    assert [canonical_json(f) for f in FLOAT_EDGES[:6]] == ["-1.5e-7", "-2.5e-8", "-1e+300", "10000000000000000",
                                                           "150000000000000000000", "0.000015"]


def recursive_inputs() -> list:
    loop: list = []
    loop.append(loop)
    return [loop, _nested(5_000)]


@pytest.mark.parametrize("index", range(len(illegal_inputs()) + 2))
def test_each_illegal_input_is_refused_by_both_encoders(index):
    bad = (illegal_inputs() + [(None, v) for v in recursive_inputs()])[index][1]
    tracer = sys.gettrace()  # a RecursionError switches off a settrace tracer (a coverage run's)
    try:
        with pytest.raises((TypeError, ValueError)):
            canonical_json(bad)
        with pytest.raises((TypeError, ValueError)):
            jcs.canonical(bad)
    finally:
        sys.settrace(tracer)


@pytest.mark.parametrize("name,data", crafted_blobs("m"))
def test_each_crafted_blob_is_refused_by_the_decoder(name, data):
    with pytest.raises(CanonicalDecodeError):
        decode(data, max_bytes=len(data), max_depth=512, max_string_length=len(data), max_items=len(data))


def test_the_storm_runs_clean_and_reaches_every_values_edge():
    result = run(registry.get("port-storm"), ScenarioOptions(seed=1, duration_ms=parse_duration_ms("4m")))
    assert result.passed, result.violations[:3]
    assert [name for name in EDGES if result.stats[f"values_{name}"] == 0] == []
    assert result.invariants["values-expectations"] > 50
