"""port-storm: the adversary reaches every port method and its edges, runs
clean and deterministic, and catches planted bugs only its edges reach (a
log read past one page, a clear of a non-ASCII key, a claim at the instant a
lease expires) — bugs the application workloads never meet."""
from __future__ import annotations

import pytest

import model.ledger.memory_store as ledger_memory
import model.ledger.rules as ledger_rules
from model.conversation.memory_store import InMemoryConversationStore
from model.durable_state.memory_store import InMemoryDurableStateStore
from scenarios import registry
from scenarios.adversaries.adversary import CALL_STATS, EDGES
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions


def storm(seed: int, duration: str, store: str = "memory", **options):
    return run(registry.get("port-storm"),
               ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), store=store, **options))


def caught(result, *needles: str) -> str:
    """The first violation: the adversary's or the reference model's, naming
    the call the planted bug answered wrongly."""
    assert not result.passed, "the planted bug went unnoticed"
    first = result.violations[0]
    assert first.invariant in ("adversary-expectations", "reference-model"), result.violations
    assert all(needle in first.message for needle in needles), first.message
    return first.message


def test_a_storm_runs_clean_and_reaches_every_method_and_most_edges():
    result = storm(0, "10m")  # 156 of 162 edges, every method, ~500 typed rejections
    assert result.passed, result.violations[:3]
    stats = result.stats
    assert [stat for stat in CALL_STATS if stats[stat] == 0] == []
    reached = [name for name in EDGES if stats[f"edge_{name}"] > 0]
    assert len(reached) >= 0.9 * len(EDGES), sorted(set(EDGES) - set(reached))
    assert stats["adversary_typed_rejections"] > 100 and stats["adversary_retries"] > 0
    assert result.invariants["adversary-expectations"] > 1_000 and result.invariants["reference-model"] > 1_000
    assert result.faults.get("reply-lost", 0) > 0 and stats["worker_crashes"] > 0


@pytest.mark.slow  # the suite's budget: sentinel-year and ledger-storm hold memory == SQLite digests in CI
def test_same_seed_same_history_on_both_stores():
    # Write contention is the one store-specific kind (on SQLite a real lock
    # that a call which writes nothing never meets; in memory an injected
    # error): without it, both stores give one history.
    first = storm(3, "10m", faults_disable=("write-contention",))
    assert first.passed, first.violations[:3]
    assert storm(3, "10m", faults_disable=("write-contention",)).trace_digest == first.trace_digest
    assert storm(3, "10m", store="sqlite", faults_disable=("write-contention",)).trace_digest == first.trace_digest


def test_a_read_that_drops_the_record_past_the_first_page_is_caught(monkeypatch):
    """A page boundary off by one: the 1,025th record vanishes from any read
    that covers it. Only a log longer than one page shows it."""
    read = InMemoryConversationStore.read

    async def read_dropping(self, conversation_id, after_seq, limit):
        return tuple(r for r in await read(self, conversation_id, after_seq, limit) if r.seq != 1_025)

    monkeypatch.setattr(InMemoryConversationStore, "read", read_dropping)
    caught(storm(0, "15m"), "log.read")


def test_a_clear_that_misses_non_ascii_keys_is_caught(monkeypatch):
    """clear() looks the key up mangled (non-ASCII dropped): the row, and its
    old revision, survive. Sentinel keys are ASCII; only the adversary's reach it."""

    async def clear_mangled(self, key):
        self._rows.pop(key.encode("ascii", "ignore").decode(), None)

    monkeypatch.setattr(InMemoryDurableStateStore, "clear", clear_mangled)
    caught(storm(1, "30m"), "ds.")


def test_a_lease_still_live_at_its_expiry_instant_is_caught(monkeypatch):
    """The claim rule blocks at lease_expires_ms == now (>= for >): the lease
    lives one millisecond too long. Only a claim at the exact instant shows it."""
    decide_claim = ledger_rules.decide_claim

    def blocking_at_expiry(conversation, head, owner_id, lease_ms, now_ms):
        if head is not None and head.owner_id not in (None, owner_id) and head.lease_expires_ms == now_ms:
            return ledger_rules.NO_CLAIM
        return decide_claim(conversation, head, owner_id, lease_ms, now_ms)

    monkeypatch.setattr(ledger_memory, "decide_claim", blocking_at_expiry)
    caught(storm(0, "15m"), "claim")
