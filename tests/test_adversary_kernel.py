"""The kernel adversary (``scenarios.adversaries.kernel``): clients of the
durable-execution kernel itself under port faults reach every edge and run
clean on both stores; a kernel that forgets a refusal (replay divergence,
missing migration, input schemas, constructor checks, replayed starts) is
named by ``kernel-expectations``."""
from __future__ import annotations

import pytest

import model.kernel.kernel as kernel_module
from scenarios import api as inv
from scenarios.adversaries.kernel import EDGES, KernelAdversary
from scenarios.api import (CRASH_BEFORE_CALL, MINUTE, REPLY_LOST, SECOND, TRANSIENT_ERROR, WRITE_CONTENTION,
                           NodeKills, PortFaults, Stack, System)
from sim.runner import run
from sim.scenario import Scenario, ScenarioOptions

RATES = {CRASH_BEFORE_CALL: 2e-3, REPLY_LOST: 1e-2, TRANSIENT_ERROR: 5e-3, WRITE_CONTENTION: 5e-3}


def _build(run_):
    kernel = KernelAdversary(think_ms=(200, 3_000), race_ms=30_000)
    return Stack(system=System(file_name="kernel-adversary.db", restart_ms=(1 * SECOND, 5 * SECOND)),
                 workloads=[kernel, NodeKills(kernel.names, every_ms=(5 * MINUTE, 10 * MINUTE),
                                              restart_ms=(1 * SECOND, 5 * SECOND))],
                 faults=PortFaults(run_.rates(RATES)),
                 checks=[kernel.checker, inv.ReferenceModel()],
                 heal_ms_max=5 * MINUTE, settle_ms=2 * MINUTE)


KERNEL_ONLY = Scenario("kernel-only", "the kernel adversary alone, under port faults", _build, 20 * MINUTE)


def storm(seed: int = 1, store: str = "memory", minutes: int = 15):
    return run(KERNEL_ONLY, ScenarioOptions(seed=seed, duration_ms=minutes * MINUTE, store=store))


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_the_kernel_clients_run_clean_and_reach_every_edge(store):
    result = storm(store=store)
    assert result.passed, result.violations[:3]
    missed = [name for name in EDGES if result.stats[f"kadv_{name}"] == 0]
    # A few need a fault or a kill at one exact call (a peer's finish, a crash mid-run).
    assert len(missed) <= 3, missed
    assert result.invariants["kernel-expectations"] > 300 and result.invariants["reference-model"] > 300


def _fold_ignoring_ids(original):
    async def fold(self, step_id):
        step = self._log[self._cursor]
        if step.step_id != step_id and step.kind == kernel_module.STEP_COMPLETED:
            self._cursor += 1
            self.replayed += 1
            return step.output
        return await original(self, step_id)
    return fold


def _validate_nothing(self, record, version):
    return None


def _view_without_transforms(record, log, transforms):
    return tuple(step for step in log if step.kind != kernel_module.EXECUTION_MIGRATED)


PLANTED = {
    "replay-ignores-step-ids": ("ExecutionContext", "_fold",
                                _fold_ignoring_ids(kernel_module.ExecutionContext._fold)),
    "input-schemas-ignored": ("Kernel", "_validate_input", _validate_nothing),
    "migration-skips-transforms": (None, "migrated_view", _view_without_transforms),
}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_a_kernel_that_forgets_a_refusal_is_named(monkeypatch, bug):
    owner, attr, planted = PLANTED[bug]
    target = kernel_module if owner is None else getattr(kernel_module, owner)
    monkeypatch.setattr(target, attr, planted)
    result = storm(seed=2, minutes=10)
    assert not result.passed
    assert result.violations[0].invariant == "kernel-expectations", result.violations[:2]


def test_unchecked_constructor_arguments_are_named(monkeypatch):
    original = kernel_module.Kernel.__init__

    def lax_init(self, runtime, store, **kwargs):
        original(self, runtime, store)
        self.middleware = tuple(kwargs.get("middleware", ()))

    monkeypatch.setattr(kernel_module.Kernel, "__init__", lax_init)
    result = storm(seed=5, minutes=10)
    assert not result.passed and result.violations[0].invariant == "kernel-expectations"
    assert "a kernel built with" in result.violations[0].message, result.violations[0].message
