"""Planted bugs: for each invariant, a mutant of the model that breaks it,
and proof that the harness reports exactly that invariant.

Each mutant is a realistic one-line bug (ARCHITECTURE §6's planted-bug catalogue).
The same seeds pass without the mutant, so the detection is the mutant's
doing, not noise.
"""
from __future__ import annotations

import attrs
import pytest

import model.durable_state.memory_store as ds_memory
import model.ledger.memory_store as ledger_memory
from model.durable_state.contracts import StateContract
from model.durable_state.handle import DurableState
from model.kernel.kernel import ExecutionContext
from model.kernel.records import STEP_COMPLETED
from scenarios import registry
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions

SEEDS = range(6)


def run_sentinel(seed: int, duration: str = "7d"):
    scenario = registry.get("sentinel-year")
    return run(scenario, ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration)))


def first_caught(duration: str = "7d"):
    """Run seeds until one fails; return its result (or the last result)."""
    result = None
    for seed in SEEDS:
        result = run_sentinel(seed, duration)
        if not result.passed:
            return result
    return result


def assert_caught(result, invariant: str) -> None:
    assert result is not None and not result.passed, "the planted bug went unnoticed"
    assert result.violations[0].invariant == invariant, result.violations


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])  # the suite's budget
def test_unmutated_seeds_pass(seed):
    # Three days: past the latest instant a mutant below is caught (the third day).
    result = run_sentinel(seed, "3d")
    assert result.passed, result.violations


@pytest.mark.slow  # the suite's budget: the catalogue's ds-adopt-without-content-check is swept in CI
def test_adopt_without_content_check_is_caught(monkeypatch):
    """Adopt-own-write bug: adopt any conflict at expected+1, without comparing content.

    The operator's concurrent edit then gets silently adopted instead of
    tripping the two-writers alarm.
    """
    async def adopt_blindly(self, conflict, write, expected_revision, run_id):
        if conflict.actual != expected_revision + 1:
            return None
        stored = await self.store.load(self.key)
        from model.canonical import digest
        self.probe.emit("ds.saved", key=self.key, run=run_id, revision=stored.revision, adopted=True,
                        digest=digest(write.payload))
        return {"revision": stored.revision, "contractVersion": stored.contract_version, "adopted": True}

    monkeypatch.setattr(DurableState, "_adopt_own_write", adopt_blindly)
    assert_caught(first_caught("3d"), "adopt-own-write")


def test_skipped_migration_is_caught(monkeypatch):
    """Load forgets the migration chain: v1 state is validated as v2 and rejected."""
    def upgrade_without_migrating(self, key, stored_version, payload):
        self.check_payload(key, payload)
        return payload

    monkeypatch.setattr(StateContract, "upgrade", upgrade_without_migrating)
    assert_caught(first_caught(), "contract-safety")


def test_unvalidated_unmigrated_load_is_caught(monkeypatch):
    """Load hands back the stored payload as-is: the run proceeds on v1 state under v2."""
    monkeypatch.setattr(StateContract, "upgrade", lambda self, key, stored_version, payload: payload)
    assert_caught(first_caught(), "contract-safety")


def test_replay_rereading_the_store_is_caught(monkeypatch):
    """Replay re-runs recorded effects (re-reads the store) instead of folding."""
    original = ExecutionContext.execute

    async def execute_rereading(self, step_id, effect, **options):
        if self._cursor < len(self._log) and self._log[self._cursor].kind == STEP_COMPLETED:
            await effect()
        return await original(self, step_id, effect, **options)

    monkeypatch.setattr(ExecutionContext, "execute", execute_rereading)
    assert_caught(first_caught(), "replay-determinism")


def test_double_start_is_caught(monkeypatch):
    """Admission forgets idempotency keys: a duplicate alarm delivery admits
    the occurrence's run id a second time (a second run of the same wake)."""
    real_decide = ledger_memory.decide_admit

    def forgetful(conversation_id, principal_id, key, input_json, input_digest, now_ms, conversation, existing,
                  *rest, **kwargs):
        return real_decide(conversation_id, principal_id, key, input_json, input_digest, now_ms, conversation, None,
                           *rest, **kwargs)

    monkeypatch.setattr(ledger_memory, "decide_admit", forgetful)
    assert_caught(first_caught(), "exactly-once-wake")


def test_lost_update_is_caught(monkeypatch):
    """The store ignores the expected revision: a stale save overwrites (lost update)."""
    def blind_next_revision(key, expected_revision, actual_revision):
        return actual_revision + 1

    monkeypatch.setattr(ds_memory, "next_revision", blind_next_revision)
    assert_caught(first_caught(), "cas-linear")


def test_the_audit_replays_what_the_store_retains(monkeypatch):
    """Corrupt the store's copy of a finished run's output after the fact: the
    online checks saw the true value, the end-of-run audit reads the store
    itself and catches the mismatch."""
    from scenarios.system import System

    real_retained = System.retained_runs

    def tampered(self):
        completed = 0
        for record, log in real_retained(self):
            if record.status == "completed":
                completed += 1
                if completed == 3:
                    record = attrs.evolve(record, output={"revision": -1, "wakes": -1, "findings": []})
            yield record, log

    monkeypatch.setattr(System, "retained_runs", tampered)
    result = run_sentinel(0, "1d")
    assert_caught(result, "replay-determinism")


def test_projection_that_drops_findings_is_caught(monkeypatch, without_reference_model):
    """The projection loses findings (applies a run but skips its findings):
    rebuilt from the canonical runs, the read model does not match."""
    from model.findings import InMemoryFindingsProjection

    real_apply = InMemoryFindingsProjection.apply_run

    async def lossy_apply(self, schedule_id, occurrence_ms, run_id, findings, *, settled_at_ms):
        return await real_apply(self, schedule_id, occurrence_ms, run_id, findings[1:], settled_at_ms=settled_at_ms)

    monkeypatch.setattr(InMemoryFindingsProjection, "apply_run", lossy_apply)
    assert_caught(first_caught("3d"), "findings-projection")
