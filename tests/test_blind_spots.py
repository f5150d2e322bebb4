"""What the default sweep must exercise so that a bug of each of these
classes is caught by a scenario run, not only by a unit test:

- a second principal: in some of ledger-storm's seeds (the knob
  ``second_principal``) one request in N is sent a second time, by another
  principal, under the same idempotency key; each must be its own submission;
- a renewal from a token whose ownership ended: in some of ledger-storm's
  seeds (the knob ``stale_renewals``) a worker that deferred a head renews
  with the token it just released, while its lease time still runs; the
  ledger must refuse it (``OwnershipLost``);
- ``contract-safety`` judges a load's step output as the run recorded it
  (what a replay folds), not only the model's report of the load;
- a client paused between its look at a fresh conversation's log and its
  own materialize (the knob ``held_admissions``) while a recovering worker
  completes the admission and claims: its late materialize at epoch 0 is
  refused as stale, and admission must take that for "it exists".

A run with the new knobs off is the run it was before they existed
(same trace digest, computed on the commit before them).
"""
from __future__ import annotations

import pytest

from faults import mutants as mx
from faults.mutant_catalogue import MUTANTS
from scenarios import registry
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions

CATALOGUE = {m.name: m for m in MUTANTS}
SECOND_PRINCIPAL = "second_principal"

# Swarm on, memory store, every new knob off: the digests of the commit
# before them.
BEFORE = {
    ("ledger-storm", 1, "30m"): "7527b223dd7d3b29d5516979565d15d8cbac495ee0a27ac33ea28f74ce3ceb58",
    ("ledger-storm", 6, "1h"): "1ca6ccc6432dddbace3ebfd90d7a532ed13b6532d37ca23dd9ac39ead4469545",
    ("sentinel-year", 0, "1d"): "b53ce5800425dd0a61d10e985f034d61abcc40e36d4a4756a101d6ac4f546571",
}
# The knobs each scenario gained, off (for the digests above); the stores on
# their callers' clocks, as they all were then (seeds 1 and 6 now draw the
# stores' own clock).
STALE_RENEWALS = "stale_renewals"
NEW_KNOBS_OFF = {"ledger-storm": {SECOND_PRINCIPAL: 0, STALE_RENEWALS: 0, "store_clock": 0, "held_admissions": 0}}


@pytest.fixture(autouse=True)
def _clean():
    mx.revert()
    yield
    mx.revert()


def _run(name: str, seed: int, duration: str, **options):
    return run(registry.get(name), ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration),
                                                   store="memory", swarm=True, **options))


@pytest.mark.parametrize("key", sorted(BEFORE), ids=lambda key: "-".join(map(str, key)))
def test_a_run_with_the_new_knobs_off_keeps_its_digest(key):
    name, seed, duration = key
    result = _run(name, seed, duration, knobs=NEW_KNOBS_OFF.get(name, {}))
    assert result.passed, result.violations
    assert result.trace_digest == BEFORE[key]


# -- a second principal ------------------------------------------------------------------


def test_second_principal_is_a_knob_some_sweep_seeds_draw_on():
    from faults.swarm import choose
    from sim.rng import Streams

    space = registry.get("ledger-storm").swarm_space
    assert space.knob(SECOND_PRINCIPAL).default == 0  # without the swarm: off, the runs as they were
    drawn = [dict(choose(space, Streams(seed)["swarm"], swarm=True, seed=seed).knobs)[SECOND_PRINCIPAL]
             for seed in range(40)]
    assert 3 <= sum(1 for n in drawn if n) <= 20, drawn


def test_a_second_principal_reuses_keys_and_gets_its_own_submissions():
    result = _run("ledger-storm", 1, "30m", knobs={SECOND_PRINCIPAL: 8})
    assert result.passed, result.violations
    stats = result.stats
    assert stats["second_principal_sent"] >= 3, stats
    # Each was judged: its submission is not the first principal's.
    assert result.invariants["admission-per-principal"] == stats["second_principal_judged"] >= 3


def test_an_idempotency_key_scoped_by_conversation_only_is_caught():
    mutant = CATALOGUE["ledger-admit-key-ignores-principal"]
    clean = _run("ledger-storm", mutant.ci_seed, mutant.ci_duration)
    assert clean.passed, clean.violations
    with mx.applied(mutant):
        result = _run("ledger-storm", mutant.ci_seed, mutant.ci_duration)
    assert not result.passed
    names = {v.invariant for v in result.violations}
    assert names & {"admission-per-principal", "reference-model"}, names


# -- a renewal from a token whose ownership ended ------------------------------------------


def test_stale_renewals_is_a_knob_some_sweep_seeds_draw_on():
    from faults.swarm import choose
    from sim.rng import Streams

    space = registry.get("ledger-storm").swarm_space
    assert space.knob(STALE_RENEWALS).default == 0
    drawn = [dict(choose(space, Streams(seed)["swarm"], swarm=True, seed=seed).knobs)[STALE_RENEWALS]
             for seed in range(40)]
    assert 3 <= sum(1 for n in drawn if n) <= 20, drawn


def test_a_worker_renews_with_a_released_token_and_is_refused():
    result = _run("ledger-storm", 1, "30m", knobs={STALE_RENEWALS: 1})
    assert result.passed, result.violations
    assert result.stats["stale_renewals_refused"] >= 3, result.stats
    assert result.invariants["stale-renewal-refused"] >= result.stats["stale_renewals_refused"]


def test_a_renewal_that_trusts_the_tokens_lease_is_caught():
    mutant = CATALOGUE["ledger-renew-trusts-token-lease"]
    clean = _run("ledger-storm", mutant.ci_seed, mutant.ci_duration)
    assert clean.passed, clean.violations
    with mx.applied(mutant):
        result = _run("ledger-storm", mutant.ci_seed, mutant.ci_duration)
    assert not result.passed
    names = {v.invariant for v in result.violations}
    assert names & {"stale-renewal-refused", "reference-model"}, names


# -- contract-safety reads the recorded step output ------------------------------------------


def test_contract_safety_judges_every_recorded_load():
    result = _run("sentinel-year", 0, "1d")
    assert result.passed, result.violations
    assert result.stats["recorded_loads_checked"] >= 100, result.stats
    assert result.stats["migrations_applied"] >= 1


def test_a_migration_missing_from_the_record_is_caught():
    mutant = CATALOGUE["ds-load-records-unmigrated"]
    clean = _run("sentinel-year", mutant.ci_seed, mutant.ci_duration)
    assert clean.passed, clean.violations
    with mx.applied(mutant):
        result = _run("sentinel-year", mutant.ci_seed, mutant.ci_duration)
    assert [v.invariant for v in result.violations] == ["contract-safety"]
    assert "recorded" in result.violations[0].message


def test_a_recorded_load_that_differs_from_the_contract_fails_contract_safety():
    from model.durable_state.contracts import StateContract
    from scenarios.invariants.contract_safety import ContractSafety
    from sim.trace import Trace

    contract = StateContract("s.state", 2, lambda p: None if "b" in p else "no b", {1: lambda p: {"b": p["a"]}})
    trace = Trace(lambda: 0)
    violations = []
    checker = ContractSafety(lambda key: {2: contract} if key == "k" else {})
    checker.attach(trace, lambda: 0, violations.append)
    trace.emit("n", "ds.load", {"key": "k", "found": True, "revision": 3, "version": 1, "payload": {"a": 1}})
    trace.emit("n", "ds.loaded", {"key": "k", "found": True, "current": 2, "stored_version": 1, "revision": 3,
                                  "payload": {"b": 1}, "migrated": True})
    assert violations == []
    step = {"seq": 1, "stepId": "s.state.load", "kind": "STEP_COMPLETED",
            "output": {"revision": 3, "contractVersion": 2, "payload": {"a": 1}}}
    trace.emit("n", "log.append", {"conversation": "c", "envelopes": ({"family": "tool-call", "payload": step},)})
    assert [v.invariant for v in violations] == ["contract-safety"]


# -- recovery refusals name their reason ----------------------------------------------------


@pytest.mark.parametrize("fault, reason, expected_seq", [
    ({"drop_seq": 8}, "short-page", 8),  # the last page, one short: seq 8 was due
    ({"skip_seq": 6}, "gap", 6),         # a record missing in the middle of the page
])
def test_a_damaged_page_is_refused_with_its_reason_at_that_page(fault, reason, expected_seq):
    from model.conversation.records import HistoryCorrupted
    from model.conversation.recovery import read_recovery_prefix
    from tests.test_conversation_log import CountingStore, _filled, run as run_log

    async def main():
        store = CountingStore(await _filled(8), **fault)
        with pytest.raises(HistoryCorrupted) as caught:
            await read_recovery_prefix(store, "c1", page_size=4)
        return caught.value

    refused = run_log(main)
    assert (refused.reason, refused.expected_seq, refused.page_after_seq) == (reason, expected_seq, 4)


def test_a_chain_that_does_not_recompute_is_refused_as_such():
    from model.conversation.records import HistoryCorrupted
    from model.conversation.recovery import read_recovery_prefix
    from tests.test_conversation_log import WrongDigestChain, _filled, run as run_log

    async def main():
        store = await _filled(1500, WrongDigestChain())
        with pytest.raises(HistoryCorrupted) as caught:
            await read_recovery_prefix(store, "c1")
        return caught.value

    assert run_log(main).reason == "chain-mismatch"


def test_fail_closed_pagination_requires_the_refusal_of_the_damaged_page():
    from scenarios.invariants.fail_closed_pagination import FailClosedPagination
    from sim.trace import Trace

    def judged(failure):
        trace = Trace(lambda: 0)
        violations = []
        FailClosedPagination().attach(trace, lambda: 0, violations.append)
        trace.emit("w", "fault", {"kind": "short-page", "site": "log.read.answer"})
        trace.emit("w", "log.read", {"conversation": "c", "after_seq": 4, "limit": 4, "seqs": (5, 6, 7)})
        trace.emit("w", "recovery.failed", {"owner": "w", "error": "HistoryCorrupted", **failure})
        return [v.invariant for v in violations]

    assert judged({"conversation": "c", "reason": "short-page", "expected_seq": 8, "page": 4}) == []
    assert judged({"conversation": "c", "reason": "chain-mismatch", "expected_seq": 8, "page": 8}) == [
        "fail-closed-pagination"]
    assert judged({}) == ["fail-closed-pagination"]


def test_a_recovery_reader_that_accepts_a_short_last_page_is_caught():
    mutant = CATALOGUE["log-short-last-page-accepted"]
    clean = _run(mutant.ci_scenario or mutant.scenarios[0], mutant.ci_seed, mutant.ci_duration)
    assert clean.passed, clean.violations
    with mx.applied(mutant):
        result = _run(mutant.ci_scenario or mutant.scenarios[0], mutant.ci_seed, mutant.ci_duration)
    assert "fail-closed-pagination" in {v.invariant for v in result.violations}


def test_a_damaged_answer_whose_reply_was_lost_is_not_judged_as_the_pages_refusal():
    from scenarios.invariants.fail_closed_pagination import FailClosedPagination
    from sim.trace import Trace

    trace = Trace(lambda: 0)
    violations = []
    FailClosedPagination().attach(trace, lambda: 0, violations.append)
    trace.emit("w", "fault", {"kind": "sequence-gap", "site": "log.read.answer"})
    trace.emit("w", "log.read", {"conversation": "c", "after_seq": 72, "limit": 8, "seqs": (73, 74, 75, 76, 78, 79, 80)})
    trace.emit("w", "fault", {"kind": "reply-lost", "site": "log.read"})
    trace.emit("w", "recovery.failed", {"owner": "w", "error": "ReplyLost"})
    assert violations == []


# -- a client paused before its admission's materialize -------------------------------------

ADMISSION_HOLDS = "held_admissions"


def test_admission_holds_is_a_knob_some_sweep_seeds_draw_on():
    knob = registry.get("ledger-storm").swarm_space.knob(ADMISSION_HOLDS)
    assert knob.default == 0 and 1 in knob.values and knob.values.count(0) > knob.values.count(1)


def test_a_held_admission_is_overtaken_and_the_stale_materialize_is_taken_for_existence():
    mutant = CATALOGUE["admission-materialize-stale-fails"]
    assert mutant.ci_scenario == "ledger-storm"
    clean = _run("ledger-storm", mutant.ci_seed, mutant.ci_duration)
    assert clean.passed, clean.violations
    assert clean.stats["admissions_held_overtaken"] >= 1, clean.stats
    with mx.applied(mutant):
        result = _run("ledger-storm", mutant.ci_seed, mutant.ci_duration)
    assert [v.invariant for v in result.violations] == ["no-uncaught-errors"]
    assert "FenceRejected" in result.violations[0].message
