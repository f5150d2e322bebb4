"""The oracles: one invariant per module, each with a stable name (DESIGN §6)."""
from scenarios.invariants.adopt_own_write import AdoptOwnWrite
from scenarios.invariants.cas_linear import CasLinear
from scenarios.invariants.contract_safety import ContractSafety
from scenarios.invariants.exactly_once_wake import ExactlyOnceWake
from scenarios.invariants.replay_determinism import ReplayDeterminism

__all__ = ["AdoptOwnWrite", "CasLinear", "ContractSafety", "ExactlyOnceWake", "ReplayDeterminism"]
