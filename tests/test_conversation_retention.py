"""Retention of closed conversations (``model.retention.retire_conversation``,
``scenarios.workloads.submissions.ConversationRetention``): open work is never
deleted, a half-done retirement finishes on the next try, and ledger-storm's
stores stay a few lifetimes deep however long it runs, with every
conversation audited before it goes."""
from __future__ import annotations

import pytest

import model.submissions as model_submissions
import scenarios.workloads.submissions as submissions_workload
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.records import NotMaterialized
from model.ledger.memory_store import InMemorySubmissionLedger
from model.retention import retire_conversation
from scenarios import registry
from scenarios.storage import run_sync
from sim.clock import parse_duration_ms
from sim.invariants import InvariantSet
from sim.runner import run
from sim.scenario import ScenarioOptions


def stores_with(conversation_id: str, *, open_work: bool):
    ledger, log = InMemorySubmissionLedger(), InMemoryConversationStore()
    settled = run_sync(ledger.admit(conversation_id, "client", "k1", {"n": 1}, 10))
    run_sync(ledger.request_abort(settled.submission_id, "client", "not needed", 11))  # never claimed: settles
    if open_work:
        run_sync(ledger.admit(conversation_id, "client", "k2", {"n": 2}, 12))
    run_sync(log.materialize(conversation_id, "worker-1", 1))
    return ledger, log


def test_a_settled_conversation_goes_whole():
    ledger, log = stores_with("c1", open_work=False)
    assert run_sync(retire_conversation(ledger, log, "c1")) is True
    assert run_sync(ledger.get_by_idempotency_key("c1", "client", "k1")) is None
    with pytest.raises(NotMaterialized):
        run_sync(log.inspect_tail("c1"))
    assert run_sync(retire_conversation(ledger, log, "c1")) is True  # idempotent


def test_open_work_holds_the_conversation_and_its_log():
    ledger, log = stores_with("c1", open_work=True)
    assert run_sync(retire_conversation(ledger, log, "c1")) is False
    assert run_sync(ledger.get_by_idempotency_key("c1", "client", "k2")) is not None
    assert run_sync(log.inspect_tail("c1")).tail_seq == 0


def test_a_retirement_cut_between_ledger_and_log_finishes_next_time():
    ledger, log = stores_with("c1", open_work=False)
    run_sync(ledger.purge_conversation("c1"))  # the process died right after the ledger's half
    assert run_sync(log.inspect_tail("c1")).tail_seq == 0
    assert run_sync(retire_conversation(ledger, log, "c1")) is True
    with pytest.raises(NotMaterialized):
        run_sync(log.inspect_tail("c1"))


def storm(seed: int, duration: str, *, swarm: bool = False, **knobs: int):
    return run(registry.get("ledger-storm"),
               ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), swarm=swarm, knobs=knobs))


def test_ledger_storm_keeps_only_recent_conversations(monkeypatch):
    """Over 10 hours of 8 slots moving to a new conversation every hour,
    retention deletes all but the last couple of generations, and audits
    each one before it goes."""
    kept: list[int] = []
    real = submissions_workload.ConversationRetention._audit

    def audit(self, conversation_id):
        real(self, conversation_id)
        kept.append(len(self.submitters.closes_ms))

    monkeypatch.setattr(submissions_workload.ConversationRetention, "_audit", audit)
    result = storm(1, "10h", retention_ttl_ms=3_600_000)
    assert result.passed, result.violations
    stats = result.stats
    # Generations 0..7 close by 8 h and are deleted an hour later; the run settles for another hour.
    assert stats["conversations_retired"] >= 8 * 8
    assert stats["conversations_audited_before_retirement"] >= stats["conversations_retired"]
    assert max(kept) <= 8 * 3, max(kept)  # never more than ~3 generations known at once


def test_open_work_is_held_back_not_deleted():
    """A one-second TTL meets conversations whose last submissions are still
    running (seed 1's swarm draws a backlog: 15 purges held): the purge
    refuses, and a later pass retires them settled (five generations of 8
    conversations by 5 hours)."""
    result = storm(1, "5h", swarm=True, retention_ttl_ms=1_000)
    assert result.passed, result.violations
    assert result.stats["retirements_held_open"] > 0
    assert result.stats["conversations_retired"] >= 8 * 5


def forget_keys_in_the_first_generation(monkeypatch):
    """A planted bug in the first hour only: the input record forgets the
    idempotency key, so those logs no longer rebuild the ledger. Retention
    deletes them an hour before the run ends."""
    real = model_submissions.SubmissionWorker._append_once

    async def forgetful(self, conversation_id, claim, batch_id, records):
        if conversation_id.endswith("-g0"):
            records = [(entry[0], {k: v for k, v in entry[1].items() if k != "idempotencyKey"})
                       if type(entry) is tuple and entry[0] == "input" else entry for entry in records]
        return await real(self, conversation_id, claim, batch_id, records)

    monkeypatch.setattr(model_submissions.SubmissionWorker, "_append_once", forgetful)


def test_a_retired_conversation_is_audited_before_it_goes(monkeypatch):
    forget_keys_in_the_first_generation(monkeypatch)
    result = storm(1, "3h", retention_ttl_ms=3_600_000)
    assert not result.passed
    first = result.violations[0]
    assert first.invariant == "exactly-once-settlement" and "rebuilding the ledger" in first.message, first
    assert first.time_ms < parse_duration_ms("3h"), first  # at its retirement, not at the run's end


def test_without_the_retirement_audit_the_first_hour_would_go_unchecked(monkeypatch):
    """The same bug, the retirement audit switched off: the end-of-run audit
    reads only what is left, and the run passes. This is what the audit of
    retiring conversations is for."""
    forget_keys_in_the_first_generation(monkeypatch)
    monkeypatch.setattr(InvariantSet, "audit_retiring", lambda self, view: None)
    result = storm(1, "3h", retention_ttl_ms=3_600_000)
    assert result.passed, result.violations


def test_a_ttl_of_zero_keeps_every_record(monkeypatch):
    """``retention_ttl_ms=0``: no retention process at all (STORE-012's
    development stage), so nothing is purged or deleted and every
    conversation is left for the end-of-run audit."""
    deleted = []
    real = submissions_workload.retire_conversation

    async def recording(ledger, log, conversation_id):
        deleted.append(conversation_id)
        return await real(ledger, log, conversation_id)

    monkeypatch.setattr(submissions_workload, "retire_conversation", recording)
    kept = storm(1, "2h", retention_ttl_ms=0)
    assert kept.passed, kept.violations
    assert "conversations_retired" not in kept.stats and deleted == []
    retained = storm(1, "2h", retention_ttl_ms=60_000)
    assert retained.passed and retained.stats["conversations_retired"] == len(deleted) > 0
