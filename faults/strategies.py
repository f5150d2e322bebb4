"""Hypothesis strategies for fault scripts (ARCHITECTURE §7).

For short simulated windows a fault script is a small value Hypothesis can
generate and shrink itself: ``@given(script=fault_scripts(...))`` then
``run(scenario, ScenarioOptions(..., fault_script=script))``. Long histories
use seeds and ``loomsim shrink`` (a year is far beyond Hypothesis's choice
buffer).

Entries are hand-written style (no hit index: each fires at the first hit
of its site at or after its time) and go through ``faults.script``'s
parser, so a generated script is exactly what a person could write.

Imports Hypothesis, a test-time dependency: import this module from tests,
never from the engine.
"""
from __future__ import annotations

from typing import Any, Sequence

from hypothesis import strategies as st

from faults.kinds import ACK_LOST, CRASH_BEFORE_CALL, LATENCY, TRANSIENT_ERROR, WRITE_CONTENTION
from faults.script import parse_script

# The point kinds a port call can take, and what each needs besides its site.
POINT_KINDS = (CRASH_BEFORE_CALL, ACK_LOST, TRANSIENT_ERROR, WRITE_CONTENTION, LATENCY)
RESTART_AFTER_MS = (500, 30_000)
LATENCY_MS = (200, 45_000)


def _entry(time_ms: int, node: str, site: str, kind: str, delay_ms: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"time_ms": time_ms, "node": node, "site": site, "kind": kind}
    if kind in (CRASH_BEFORE_CALL, ACK_LOST):
        entry["restart_after_ms"] = delay_ms
    elif kind == LATENCY:
        entry["duration_ms"] = delay_ms
    return entry


def fault_scripts(*, sites: Sequence[str], nodes: Sequence[str], duration_ms: int,
                  kinds: Sequence[str] = POINT_KINDS, max_entries: int = 8) -> st.SearchStrategy[tuple]:
    """Scripts of up to ``max_entries`` point faults at ``sites`` (port
    methods such as ``ledger.claim``), in ``[0, duration_ms)``. Shrinks
    towards fewer entries, earlier times and the first site, node and kind."""
    assert sites and nodes and kinds and duration_ms > 0 and max_entries >= 0
    unknown = set(kinds) - set(POINT_KINDS)
    assert not unknown, f"not point fault kinds: {sorted(unknown)}"
    entry = st.builds(
        _entry,
        time_ms=st.integers(0, duration_ms - 1),
        node=st.sampled_from(tuple(nodes)),
        site=st.sampled_from(tuple(sites)),
        kind=st.sampled_from(tuple(kinds)),
        delay_ms=st.integers(*RESTART_AFTER_MS),
    )
    return st.lists(entry, max_size=max_entries).map(
        lambda entries: parse_script(sorted(entries, key=lambda e: e["time_ms"])))
