"""Every fault kind the harness injects, at a rate far above the defaults,
on both scenarios: the system survives it (every invariant holds) and the
kind really fired. Transient errors and write contention are typed and
retryable; latency outlives leases now and then, so fencing gets to work.

These runs found two real bugs before this file existed: a run whose
takeover stopped on a transient error was taken as owned with its input
applied (its log then had no input record), and a stale owner whose step
batch id already held its successor's batch crashed on the AppendConflict
instead of abandoning the submission.
"""
from __future__ import annotations

import pytest

from faults.kinds import (
    ACK_LOST,
    CORRUPT_ROW,
    CRASH_BEFORE_CALL,
    FAILPOINT_CRASH,
    LATENCY,
    NODE_KILL,
    NODE_PAUSE,
    SEQUENCE_GAP,
    SHORT_PAGE,
    TRANSIENT_ERROR,
    WRITE_CONTENTION,
)
from scenarios import registry
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions

POINT_KINDS_HIGH = {CRASH_BEFORE_CALL: 1e-3, ACK_LOST: 1e-3, FAILPOINT_CRASH: 2e-3, TRANSIENT_ERROR: 3e-3,
                    WRITE_CONTENTION: 2e-3, LATENCY: 2e-3}


# The suite's budget: three kinds in CI (the others with -m slow; all six
# run together in test_all_kinds_together_at_high_rates_on_both_scenarios).
SENTINEL_CI_KINDS = (CRASH_BEFORE_CALL, FAILPOINT_CRASH, TRANSIENT_ERROR)


@pytest.mark.parametrize("kind", [k if k in SENTINEL_CI_KINDS else pytest.param(k, marks=pytest.mark.slow)
                                  for k in sorted(POINT_KINDS_HIGH)])
def test_sentinel_survives_each_point_fault_kind_alone(kind):
    opts = ScenarioOptions(seed=2, duration_ms=parse_duration_ms("36h"), faults_disable=(NODE_KILL,),
                           rates={kind: POINT_KINDS_HIGH[kind]})
    result = run(registry.get("sentinel-year"), opts)
    assert result.passed, result.violations
    assert result.faults.get(kind, 0) >= 5, result.faults


@pytest.mark.parametrize("kind", [k if k not in SENTINEL_CI_KINDS else pytest.param(k, marks=pytest.mark.slow)
                                  for k in sorted(POINT_KINDS_HIGH)])  # the other three kinds in CI
def test_ledger_storm_survives_each_point_fault_kind_alone(kind):
    opts = ScenarioOptions(seed=3, duration_ms=parse_duration_ms("1h"), faults_disable=(NODE_KILL, NODE_PAUSE),
                           rates={kind: POINT_KINDS_HIGH[kind]})
    result = run(registry.get("ledger-storm"), opts)
    assert result.passed, result.violations
    assert result.faults.get(kind, 0) >= 1, result.faults


@pytest.mark.parametrize("kind", [SHORT_PAGE, SEQUENCE_GAP, CORRUPT_ROW])
def test_ledger_storm_fails_closed_on_each_damaged_read_kind(kind):
    """Damaged answers happen on recovery reads, which follow restarts (here:
    crashes before calls): a few seeds, each must pass (a typed
    HistoryCorrupted, retried), and the damage must fire and be caught."""
    fired = 0
    for seed in range(6):
        result = run(registry.get("ledger-storm"), ScenarioOptions(
            seed=seed, duration_ms=parse_duration_ms("3h"), rates={kind: 0.5, CRASH_BEFORE_CALL: 2e-4}))
        assert result.passed, (seed, result.violations)
        fired += result.faults.get(kind, 0)
        if fired and result.stats["damaged_reads_caught"]:
            return
    raise AssertionError(f"{kind} never fired in 6 seeds")


def test_all_kinds_together_at_high_rates_on_both_scenarios():
    rates = {"sentinel-year": dict(POINT_KINDS_HIGH),
             "ledger-storm": dict(POINT_KINDS_HIGH, **{SHORT_PAGE: 0.1, SEQUENCE_GAP: 0.1})}
    for name, duration, seeds in (("sentinel-year", "1d", range(1)), ("ledger-storm", "1h", range(2))):
        for seed in seeds:
            result = run(registry.get(name), ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration),
                                                             rates=rates[name]))
            assert result.passed, (name, seed, result.violations)
            assert {TRANSIENT_ERROR, WRITE_CONTENTION, LATENCY} <= set(result.faults), (name, seed, result.faults)


def test_transient_errors_are_retried_not_settled_as_failures():
    """A transient error inside a wake's effect is nobody's verdict on the
    run: the driver waits it out and resumes, so no run fails of it."""
    opts = ScenarioOptions(seed=5, duration_ms=parse_duration_ms("1d"), faults_disable=(NODE_KILL,),
                           rates={TRANSIENT_ERROR: 3e-3})
    result = run(registry.get("sentinel-year"), opts)
    assert result.passed, result.violations
    assert result.stats["transient_retries"] > 0
    # Runs fail only where the contract says so (the broken deploy), never
    # with the injected error's tag.
    # (An operator abandoning a page that never arrived fails its run too.)
    assert result.stats["runs_failed"] <= result.stats["contract_rejections"] + result.stats[
        "runs_failed_migration_missing"] + result.stats["indoubt_abandoned"]


def test_a_recovery_read_that_skips_the_digest_chain_is_caught_by_a_corrupt_row(monkeypatch):
    """Planted bug: the recovery read checks pagination but not the digest
    chain. Short pages and gaps are still caught; an altered row is not — and
    fail-closed-pagination reports the history it accepted."""
    import model.conversation.recovery as recovery

    async def chainless(store, conversation_id):
        tail = await store.inspect_tail(conversation_id)
        records = list(await store.read(conversation_id, 0, tail.tail_seq)) if tail.tail_seq else []
        if len(records) != tail.tail_seq or any(r.seq != i + 1 for i, r in enumerate(records)):
            raise recovery.HistoryCorrupted(conversation_id, len(records) + 1, None, "short")
        return recovery.RecoveryPrefix(tail, tuple(records), 1 + recovery.recovery_page_count(tail.tail_seq))

    monkeypatch.setattr(recovery, "read_recovery_prefix", chainless)
    for seed in range(6):
        result = run(registry.get("ledger-storm"), ScenarioOptions(seed=seed, duration_ms=parse_duration_ms("6h"),
                                                                   rates={CORRUPT_ROW: 0.5, CRASH_BEFORE_CALL: 2e-4}))
        if not result.passed:
            assert result.violations[0].invariant == "fail-closed-pagination", result.violations
            return
    raise AssertionError("the planted bug went unnoticed")
