"""``ConversationLogPort.observe`` under the fault layer, the trace and the
reference log: the stream is traced and judged as one call, each answer
record's offset resumes exactly after it, malformed and foreign offsets are
refused typed."""
from __future__ import annotations

import attrs
import pytest

from faults.describe import LOG_DESCRIBERS
from faults.events import LogObserve
from faults.ports import BoundPort, PortCall, PortStats
from model.canonical import ZERO_DIGEST
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.records import FencedAppendRequest, MalformedOffset, RecordEnvelope
from scenarios.reference.log import ReferenceLog
from scenarios.storage import run_sync
from sim.world import World


def _request(cid: str, batch: str, tail: tuple[int, str], ids: list[str]) -> FencedAppendRequest:
    records = tuple(RecordEnvelope(i, "model-output", 1, 0, "d", {"id": i}, "p1", 1) for i in ids)
    return FencedAppendRequest(cid, batch, "p1", 1, tail[0], tail[1], records)


def _drain(stream) -> tuple:
    async def go():
        return tuple([r async for r in stream])
    return run_sync(go())


class _Observed:
    """Calls a memory store and shows each call to a ReferenceLog, an
    observation drained whole (as the fault layer drains it)."""

    def __init__(self) -> None:
        self.store = InMemoryConversationStore()
        self.reference = ReferenceLog()
        self.time_ms = 0

    def call(self, method: str, *args, **kwargs) -> PortCall:
        self.time_ms += 1
        try:
            if method == "observe":
                result, error = _drain(self.store.observe(*args, **kwargs)), None
            else:
                result, error = run_sync(getattr(self.store, method)(*args, **kwargs)), None
        except Exception as raised:  # noqa: BLE001 - the store's answer
            result, error = None, raised
        return PortCall(self.time_ms, "node-1", "log", method, args, kwargs, result, error)

    def agrees(self, method: str, *args, **kwargs):
        seen = self.call(method, *args, **kwargs)
        message = self.reference.observe(seen)
        assert message is None, message
        return seen.result if seen.error is None else seen.error

    def wrong(self, method: str, *args, answer=None, error=None, **kwargs) -> str:
        seen = attrs.evolve(self.call(method, *args, **kwargs), result=answer, error=error)
        message = self.reference.observe(seen)
        assert message is not None, "the wrong answer was accepted"
        assert "log.observe(" in message or "log.read(" in message
        return message


def _four_records(d: _Observed, cid: str = "c1") -> list:
    d.agrees("materialize", cid, "p1", 1)
    a = d.agrees("append", _request(cid, "b1", (0, ZERO_DIGEST), ["r1"]))
    b = d.agrees("append", _request(cid, "b2", (1, a.tail_digest), ["r2", "r3"]))
    d.agrees("append", _request(cid, "b3", (3, b.tail_digest), ["r4"]))
    return list(d.agrees("read", cid, 0, 10))


def test_observe_has_a_describer_and_an_event():
    assert "observe" in LOG_DESCRIBERS
    describe = LOG_DESCRIBERS["observe"]
    assert describe(("c1",), {}, ()) == {"conversation": "c1", "from_offset": False, "seqs": ()}
    assert LogObserve.kind == "log.observe"


def test_the_reference_log_judges_observations_by_the_offsets_reads_handed_out():
    d = _Observed()
    records = _four_records(d)
    assert [r.seq for r in d.agrees("observe", "c1")] == [1, 2, 3, 4]
    assert [r.seq for r in d.agrees("observe", "c1", records[1].offset)] == [3, 4]
    assert [r.seq for r in d.agrees("observe", "c1", after_offset=records[3].offset)] == []
    _four_records(d, "c2")
    other = d.agrees("read", "c2", 0, 1)[0].offset
    assert isinstance(d.agrees("observe", "c1", other), MalformedOffset)  # another conversation's
    for junk in ("not-an-offset", records[0].offset + "x", 7):
        assert isinstance(d.agrees("observe", "c1", junk), MalformedOffset)
    assert d.agrees("observe", "nope").__class__.__name__ == "NotMaterialized"
    # An offset handed out before a deletion still names its seq in the recreated log.
    assert d.agrees("delete_conversation", "c1") is True
    assert d.agrees("observe", "c1", records[1].offset).__class__.__name__ == "NotMaterialized"
    d.agrees("materialize", "c1", "p1", 1)
    d.agrees("append", _request("c1", "b1", (0, ZERO_DIGEST), ["r1", "r2", "r3"]))
    assert [r.seq for r in d.agrees("observe", "c1", records[1].offset)] == [3]


def test_the_reference_log_rejects_wrong_observations():
    d = _Observed()
    records = _four_records(d)
    everything = _drain(d.store.observe("c1"))
    # Resuming at the offset instead of after it; skipping the record after it.
    d.wrong("observe", "c1", records[1].offset, answer=everything[1:])
    d.wrong("observe", "c1", records[1].offset, answer=everything[3:])
    d.wrong("observe", "c1", answer=everything[:3])  # short of the tail
    # A malformed or foreign offset accepted.
    d.wrong("observe", "c1", "not-an-offset", answer=everything)
    _four_records(d, "c2")
    foreign = _drain(d.store.observe("c2"))[0].offset
    d.wrong("observe", "c1", foreign, answer=everything[1:])
    # A known offset refused.
    d.wrong("observe", "c1", records[0].offset, error=MalformedOffset("c1", records[0].offset))
    # A record answered without an offset, or with another record's.
    d.wrong("observe", "c1", answer=tuple(attrs.evolve(r, offset=None) for r in everything))
    d.wrong("read", "c1", 0, 2, answer=(everything[0], attrs.evolve(everything[1], offset=everything[0].offset)))


def test_the_fault_layer_traces_and_judges_an_observation_as_one_call():
    world = World(3)
    store = InMemoryConversationStore()
    seen: list[PortCall] = []
    world.port_observers.append(seen.append)
    events: list[tuple] = []
    world.trace.subscribe(("log.observe",), events.append)
    got: dict[str, object] = {}

    def start(node) -> None:
        port = BoundPort(world, node, "log", store, None, LOG_DESCRIBERS, PortStats(), lambda: 0)

        async def client() -> None:
            await port.materialize("c1", "p1", 1)
            await port.append(_request("c1", "b1", (0, ZERO_DIGEST), ["r1", "r2", "r3"]))
            first = [r async for r in port.observe("c1")]
            got["all"] = [r.seq for r in first]
            got["after"] = [r.seq async for r in port.observe("c1", first[0].offset)]
            try:
                async for _ in port.observe("c1", "junk"):
                    pass
            except MalformedOffset as error:
                got["error"] = error

        world.runtime.spawn_on(node, "client", client())

    world.add_node("n", start)
    world.run_until(1_000)
    assert got["all"] == [1, 2, 3] and got["after"] == [2, 3] and isinstance(got["error"], MalformedOffset)
    observes = [c for c in seen if c.method == "observe"]
    assert [c.result and [r.seq for r in c.result] for c in observes[:2]] == [[1, 2, 3], [2, 3]]
    assert isinstance(observes[2].error, MalformedOffset)
    assert len(events) == 3
    reference = ReferenceLog()
    assert [reference.observe(c) for c in seen if c.method != "read"] == [None] * (len(seen))


# SQLite's observe is held by the conformance kit on both adapters; its
# port-storm run (the suite's budget) is the slow twin.
@pytest.mark.parametrize("store", ["memory", pytest.param("sqlite", marks=pytest.mark.slow)])
def test_port_storm_observes_logs_and_the_reference_judges_them(store):
    from scenarios import registry
    from sim.clock import parse_duration_ms
    from sim.runner import run
    from sim.scenario import ScenarioOptions

    result = run(registry.get("port-storm"), ScenarioOptions(seed=0, duration_ms=parse_duration_ms("3m"),
                                                             store=store))
    assert result.passed, result.violations
    assert result.stats["calls_log_observe"] > 0
    for edge in ("observe_from_start", "observe_from_offset", "observe_malformed_offset_rejected",
                 "observe_foreign_offset_rejected", "envelope_over_depth_bound_rejected",
                 "envelope_over_nodes_bound_rejected", "envelope_at_nodes_bound_stored"):
        assert result.stats[f"edge_{edge}"] > 0, edge
    # The library's collection and text bounds (no store applies them), judged against the reference's.
    assert result.stats["values_canonical_bounds_judged"] > 0
