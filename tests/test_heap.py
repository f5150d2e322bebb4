"""sim.heap: a long run sets aside what full collections found alive, and a
run never leaves the process's heap frozen."""
from __future__ import annotations

import gc

from scenarios import registry
from sim import runner
from sim.heap import LongRunHeap
from sim.scenario import ScenarioOptions


def test_settle_freezes_only_after_a_full_collection_and_the_exit_hands_everything_back():
    assert gc.get_freeze_count() == 0
    kept = [[i] for i in range(1000)]  # tracked objects that outlive the block
    with LongRunHeap() as heap:
        gc.collect(0)
        heap.settle()
        assert heap.freezes == 0 and gc.get_freeze_count() == 0, "a young collection is no reason to freeze"
        gc.collect()
        heap.settle()
        assert heap.freezes == 1 and gc.get_freeze_count() >= len(kept)
        heap.settle()
        assert heap.freezes == 1, "one freeze a full collection"
    assert gc.get_freeze_count() == 0
    del kept


def test_a_run_that_meets_full_collections_freezes_and_unfreezes_with_the_same_digest(monkeypatch):
    scenario = registry.get("sentinel-year")
    opts = ScenarioOptions(seed=1, duration_ms=6 * 3_600_000, swarm=True)
    plain = runner.run(scenario, opts)
    counts: list[int] = []
    real_settle = LongRunHeap.settle

    def settle(self: LongRunHeap) -> None:
        gc.collect()  # a full collection before every slice's boundary
        real_settle(self)
        counts.append(gc.get_freeze_count())

    monkeypatch.setattr(LongRunHeap, "settle", settle)
    frozen = runner.run(scenario, opts)
    assert max(counts) > 0, "the run never froze its heap"
    assert gc.get_freeze_count() == 0, "the run left the heap frozen"
    assert frozen.trace_digest == plain.trace_digest
