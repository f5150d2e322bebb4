"""ledger-storm: clean seeds pass on both stores; each of its invariants
catches a planted bug (a realistic one-line mistake in the model)."""
from __future__ import annotations

import itertools

import pytest

import model.conversation.memory_store as log_memory
import model.conversation.recovery as recovery
import model.ledger.memory_store as ledger_memory
import model.lifecycle as lifecycle
import model.submissions as submissions
from model.conversation.recovery import RecoveryPrefix
from model.conversation.rules import chain_digest
from scenarios import registry
from scenarios.stacks import ledger_storm
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions

SEEDS = range(4)


def storm(seed: int, duration: str = "6h", store: str = "memory"):
    return run(registry.get("ledger-storm"),
               ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration), store=store))


def first_caught(duration: str = "6h", seeds=SEEDS):
    result = None
    for seed in seeds:
        result = storm(seed, duration)
        if not result.passed:
            return result
    return result


def assert_caught(result, *invariants: str) -> None:
    """The planted bug failed a run, first by one of ``invariants``."""
    assert result is not None and not result.passed, "the planted bug went unnoticed"
    assert result.violations[0].invariant in invariants, result.violations


# A seed that shows every kind (a damaged page among them) on each store in
# 2h: SQLite runs also meet overtaking commits (faults/sqlite_overtake.py).
@pytest.mark.parametrize("store, seed", [("memory", 4), ("sqlite", 4)])
def test_clean_storm_passes_and_is_not_quiet(store, seed):
    result = storm(seed, "2h", store)
    assert result.passed, result.violations
    # Every request settles but those their admission group refused (given up).
    assert result.stats["settled"] == result.stats["submitted"] - result.stats["group_refused"] > 100
    # Workers deferred heads and handed their lanes over (deferred requests).
    assert result.stats["deferrals"] >= result.stats["handoffs"] > 0
    assert result.faults.get("failpoint-crash", 0) > 0 and result.faults.get("node-pause", 0) > 0
    assert result.faults.get("short-page", 0) + result.faults.get("sequence-gap", 0) > 0
    assert all(count > 0 for count in result.invariants.values()), result.invariants


def test_memory_and_sqlite_storms_are_the_same_history():
    """Under the same pinned fault rates (pinned rates leave out the
    overtaking commits only SQLite can meet)."""
    def pinned(store: str):
        return run(registry.get("ledger-storm"), ScenarioOptions(
            seed=2, duration_ms=parse_duration_ms("1h"), store=store, rates=dict(ledger_storm.RATES)))

    memory = pinned("memory")
    assert memory.passed and memory.trace_digest == pinned("sqlite").trace_digest


def test_second_settlement_record_is_caught(monkeypatch):
    """The settlement batch id is per attempt, not per submission: a new owner
    cannot find the earlier owner's record and appends a second one. A
    recovery pass that meets the reserved row first decides to append the
    record the log already holds (recovery-decisions reads the log by family,
    not by batch id), else the second record is caught."""
    attempt = itertools.count()
    monkeypatch.setattr(lifecycle, "settle_batch_id", lambda sid: f"settle:{sid}:{next(attempt)}")
    assert_caught(first_caught(), "recovery-decisions", "exactly-once-settlement")


def test_stale_token_accepted_is_caught(stale_tokens_accepted):
    """The ledger checks only the owner, not the epoch: an owner that stalled
    past its lease wakes up and reserves with its superseded token."""
    assert_caught(first_caught("1d"), "fencing")


def test_broken_digest_chain_is_caught(monkeypatch):
    """The chain link forgets the previous tail digest."""
    import model.conversation.rules as rules

    monkeypatch.setattr(rules, "chain_digest",
                        lambda previous, batch_digest, first_seq: chain_digest("0" * 64, batch_digest, first_seq))
    assert_caught(first_caught("1h"), "log-chain")


def test_fail_open_pagination_is_caught(monkeypatch):
    """The recovery read takes a short page for the end of history."""
    async def fail_open(store, conversation_id):
        tail = await store.inspect_tail(conversation_id)
        records, requests, after = [], 1, 0
        while after < tail.tail_seq:
            want = min(1024, tail.tail_seq - after)
            page = await store.read(conversation_id, after, want)
            requests += 1
            records.extend(page)
            if len(page) < want:
                break  # "no more records"
            after += want
        return RecoveryPrefix(tail, tuple(records), requests)

    monkeypatch.setattr(recovery, "read_recovery_prefix", fail_open)
    # Seed 4 at 2h: a damaged page met early (seeds 0-3 pass at 2h: they need a day).
    assert_caught(first_caught("2h", seeds=(4,)), "fail-closed-pagination")


def test_claim_out_of_fifo_order_is_caught(monkeypatch, without_reference_model):
    """Claim picks the newest ready submission instead of the queue head."""
    real = ledger_memory.InMemorySubmissionLedger._nonterminal

    def newest_first(self, conversation_id):
        return list(reversed(real(self, conversation_id)))

    monkeypatch.setattr(ledger_memory.InMemorySubmissionLedger, "_nonterminal", newest_first)
    assert_caught(first_caught(), "fifo-one-active")


def test_lease_that_never_expires_is_caught(monkeypatch, without_reference_model):
    """Claims ignore lease expiry: a crashed owner's submission is never taken
    over, so work stops for good (liveness, checked after the faults stop)."""
    from model.ledger.rules import NO_CLAIM

    real = ledger_memory.decide_claim

    def sticky(conversation, head, owner_id, lease_ms, now_ms):
        if head is not None and head.owner_id is not None and head.owner_id != owner_id:
            return NO_CLAIM
        return real(conversation, head, owner_id, lease_ms, now_ms)

    monkeypatch.setattr(ledger_memory, "decide_claim", sticky)
    result = first_caught("30m")  # liveness is checked after the faults stop: a short run shows it
    assert result is not None and not result.passed, "the planted bug went unnoticed"
    # An owner that died between its settlement's append and its finalize
    # (terminalize:after-canonical-append) is never succeeded either: the
    # rebuild from the log (exactly-once) may see that stuck row first.
    assert "liveness" in {v.invariant for v in result.violations}, result.violations


def test_log_that_cannot_rebuild_the_ledger_is_caught(monkeypatch):
    """The input record forgets the idempotency key: the log is no longer
    enough to rebuild the ledger, which the settlement audit checks."""
    real = submissions.SubmissionWorker._append_once

    async def forgetful(self, conversation_id, claim, batch_id, records):
        records = [(entry[0], {k: v for k, v in entry[1].items() if k != "idempotencyKey"})
                   if type(entry) is tuple and entry[0] == "input" else entry for entry in records]
        return await real(self, conversation_id, claim, batch_id, records)

    monkeypatch.setattr(submissions.SubmissionWorker, "_append_once", forgetful)
    result = storm(0, "1h")
    assert_caught(result, "exactly-once-settlement")
    assert "rebuilding the ledger" in result.violations[0].message


def test_failed_and_aborted_settlements_have_their_exact_shapes():
    result = storm(3, "1h")
    assert result.passed, result.violations
    outcomes = result.stats["outcomes"]
    assert outcomes.get("failed", 0) > 0 and outcomes.get("aborted", 0) > 0 and outcomes.get("completed", 0) > 0


def test_the_client_admits_a_share_under_entity_groups_and_gives_up_what_its_group_refuses():
    """A drawn share of the client's requests carries an admission group and
    metadata; one refused while its group's holder is open is the expected
    answer (given up, counted), never a client crash; the end-of-run audit
    rebuilds the ledger from the log, groups and metadata included."""
    result = storm(0, "1h")
    assert result.passed, result.violations
    stats = result.stats
    assert stats["grouped"] > 0 and stats["group_refused"] >= 1, stats
    assert stats["grouped"] + stats["group_refused"] < stats["submitted"]
