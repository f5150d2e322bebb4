"""The nine behaviours the peer implementation's conformance cases found
wrong, each planted back by catalogue mutants the sweep catches.

Each defect was fixed with a test of its own (the conformance kits, the
agent worker's tests); this module holds the other half of the bargain:
the defect, planted back as it was, is caught by the simulation, not only
by a unit test. ``DEFECTS`` maps each to the mutants that restore it; each
must be in the catalogue with a measured ci seed (``test_mutants``'
``test_the_sweep_detects_the_mutant`` runs that seed and requires a
detection), or argued equivalent with the argument checked here.

And the user-adapter path must not cry wolf: the project's own adapters,
built by a user's factory (``tests.fixtures.peer_stores``), pass every
scenario under ``--store MODULE:FACTORY``.
"""
from __future__ import annotations

import pytest

from faults.mutant_catalogue import MUTANTS
from scenarios import registry
from sim.clock import parse_duration_ms
from sim.runner import run
from sim.scenario import ScenarioOptions

CATALOGUE = {mutant.name: mutant for mutant in MUTANTS}

# defect -> the mutants that plant it back (the peer's case names in the comments).
DEFECTS: dict[str, tuple[str, ...]] = {
    # A running owner reserves a child whether or not its input is applied (reserveChildWhileRunning).
    "child reservation refused before the input is applied": ("ledger-child-reserve-needs-input",),
    # An identical replay of a child reservation answers the replay before the fence (childReplayBeforeFence).
    "fenced replay of a child reservation is OwnershipLost": ("ledger-child-replay-after-fence",),
    # Every write to a settled row answers SettlementConflict{existingOutcome} (settledSuspendConflict and
    # the abort, resolution and approval answers on a settled row).
    "a write to a settled row is not SettlementConflict": (
        "ledger-suspend-settled-refused", "ledger-abort-settled-replays", "ledger-resolve-settled-recorded",
        "ledger-approval-settled-replays"),
    # A rejected approval settles the run failed and its guarded handler never starts.
    "a rejected approval neither fails the run nor stops the call": ("agent-approval-rejection-ignored",),
    # An aborted parent releases its orphan child reservation, joins each aborted child, and aborts them
    # under the author subagent-parent-abort.
    "an aborted parent's children": ("agent-orphan-reservation-kept", "agent-aborted-parent-no-joined",
                                     "agent-child-abort-author-parent-id"),
    # abort-requested is written before submission-settled in an aborted run's settlement batch.
    "abort-requested after the settlement record": ("agent-abort-after-settlement",),
    # A stored row with an empty receipt fails the scan typed (a LedgerError naming the operation).
    "an empty stored receipt scanned as readable": ("ledger-empty-receipt-readable",),
    # The created record first; run-completed and tool-call-resolved records; the joined follower's run id.
    "records the peer requires are missing": ("worker-created-not-first", "runs-created-not-first",
                                              "agent-no-run-completed", "agent-no-tool-resolved",
                                              "agent-follower-without-run"),
    # The 256-record batch limit, the settlement digest over the envelope, the peer's id formats.
    "batch limit, settlement digest and ids": ("log-batch-cap-1024", "log-batch-too-large-untyped",
                                               "settlement-digest-over-payload", "lifecycle-record-ids-by-place",
                                               "lifecycle-settle-batch-id-old", "agent-turn-id-per-call",
                                               "ledger-settlement-id-digest"),
}
# The one defect no run within the contract can plant back observably: only a
# broken promise (the beyond-contract row rot) stores an empty receipt, and a
# beyond-contract run is DETECTED whichever way the scan answers.
ARGUED_EQUIVALENT = {"ledger-empty-receipt-readable"}


def test_there_are_nine_defects():
    assert len(DEFECTS) == 9


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_each_defect_is_planted_back_by_a_mutant_the_sweep_detects(defect):
    for name in DEFECTS[defect]:
        assert name in CATALOGUE, f"{defect}: no catalogue mutant {name!r}"
        mutant = CATALOGUE[name]
        if name in ARGUED_EQUIVALENT:
            assert mutant.equivalent and mutant.ci_run is None, name
            continue
        assert mutant.ci_run is not None, f"{defect}: {name} has no measured ci seed (the sweep misses it)"


def test_the_empty_receipt_is_only_a_beyond_contract_state():
    """The equivalence argument of ``ledger-empty-receipt-readable``: the
    ledger mints every receipt (no call of its port takes one from the
    caller), so only the row-rot surgery, beyond the contract, empties one;
    the typed refusal itself is held on both adapters by
    ``test_ledger_typed_errors``' empty-receipt test."""
    import inspect

    from faults import beyond
    from model.ledger.port import SubmissionLedgerPort

    for name, method in vars(SubmissionLedgerPort).items():
        if callable(method) and not name.startswith("_"):
            assert "receipt" not in inspect.signature(method).parameters, name
    assert beyond.EMPTY_RECEIPT == "empty-receipt"


# A short run of each scenario (the port-storm adversary needs a few minutes to reach its edges).
USER_ADAPTER_RUNS = (("sentinel-year", "30m"), ("ledger-storm", "20m"), ("port-storm", "2m"),
                     ("agent-conversations", "20m"))


@pytest.mark.parametrize("factory", ["make", "make_sqlite"])
@pytest.mark.parametrize("scenario,duration", USER_ADAPTER_RUNS)
def test_a_peer_correct_user_adapter_passes_every_scenario(scenario, duration, factory):
    """No false alarm through the user-adapter path: the project's own
    adapters, as a user's factory builds them, pass."""
    result = run(registry.get(scenario), ScenarioOptions(seed=0, duration_ms=parse_duration_ms(duration),
                                                         store=f"tests.fixtures.peer_stores:{factory}"))
    assert result.passed, result.violations
