"""The oracles: one invariant per module, each with a stable name (ARCHITECTURE §6)."""
from scenarios.invariants.aborts import AbortHonoured
from scenarios.invariants.adopt_own_write import AdoptOwnWrite
from scenarios.invariants.approvals import ApprovalPrecedesEffect
from scenarios.invariants.at_most_once_effect import AtMostOnceEffect
from scenarios.invariants.bounded_run import BoundedRun
from scenarios.invariants.broken_deploy import BrokenDeploys
from scenarios.invariants.cas_linear import CasLinear
from scenarios.invariants.checkpoints import CheckpointConsistency
from scenarios.invariants.claim_check import ClaimCheckInvariant
from scenarios.invariants.claim_fences_log import ClaimFencesLog
from scenarios.invariants.cold_reopen import ColdReopen
from scenarios.invariants.contract_safety import ContractSafety
from scenarios.invariants.exactly_once_settlement import ExactlyOnceSettlement
from scenarios.invariants.exactly_once_wake import ExactlyOnceWake
from scenarios.invariants.fail_closed_pagination import FailClosedPagination
from scenarios.invariants.fencing import Fencing
from scenarios.invariants.history_linearizable import HistoryLinearizable
from scenarios.invariants.joins import JoinedSettlesOnce
from scenarios.invariants.runs import CanonicalEvents, RunClock
from scenarios.invariants.secrets import CredentialsAccepted, NoSecretLeak, SealedUnderLiveKey
from scenarios.invariants.findings_projection import FindingsProjection
from scenarios.invariants.liveness import Liveness
from scenarios.invariants.log_chain import LogChain
from scenarios.invariants.pins_survive import PinsSurvive
from scenarios.invariants.progress_waits import ProgressWaits
from scenarios.invariants.queue_order import QueueOrder
from scenarios.invariants.recovery_decisions import RecoveryDecisions
from scenarios.invariants.reference_model import ReferenceModel
from scenarios.invariants.replay_determinism import ReplayDeterminism
from scenarios.invariants.subagents import ChildBeforeParent
from scenarios.invariants.unknown_outcomes import UnknownNeverReplayed

__all__ = ["AbortHonoured", "AdoptOwnWrite", "ApprovalPrecedesEffect", "CanonicalEvents", "RunClock", "ChildBeforeParent", "JoinedSettlesOnce", "UnknownNeverReplayed", "AtMostOnceEffect", "BoundedRun", "BrokenDeploys", "CasLinear", "CheckpointConsistency", "ClaimCheckInvariant", "ClaimFencesLog", "ColdReopen", "CredentialsAccepted", "ContractSafety", "ExactlyOnceSettlement", "ExactlyOnceWake",
           "FailClosedPagination", "Fencing", "HistoryLinearizable", "FindingsProjection", "Liveness", "LogChain", "NoSecretLeak", "PinsSurvive", "ProgressWaits", "QueueOrder", "RecoveryDecisions", "ReferenceModel",
           "ReplayDeterminism", "SealedUnderLiveKey"]
