"""The scenario author's face: everything a scenario needs, from one module.

    from scenarios.api import DAY, HOUR, NodeKills, PortFaults, Schedule, Sentinels, Stack, System, scenario

A scenario is a build function registered with ``@scenario``: it gets the
run (options, swarm choices) and returns a ``Stack`` of workloads over one
``System``, with its port faults and checks. ``scenarios/README.md`` walks
through one; ``examples/`` holds small ones to copy from.
"""
from faults.chaos import Deploys, DuplicateAlarms, NodeKills, NodePauses, OperatorEdits
from faults.kinds import (ACK_LOST, BOUNDARY_DELAY, CORRUPT_ROW, CRASH_BEFORE_CALL, DUPLICATE_WAKE, FAILPOINT_CRASH,
                          LATENCY, NODE_KILL, NODE_PAUSE, REPLY_LOST, SEQUENCE_GAP, SHORT_PAGE, TRANSIENT_ERROR,
                          WRITE_CONTENTION)
from faults.kinds import PARTITION
from faults.partitions import Partitions
from faults.plan import PortFaults
from faults.swarm import Knob, SwarmSpace, fault_intensity_knob
from model.durable_state.store import DurableStateWrite
from model.failpoints import SENTINEL_CRASH_POINTS, SUBMISSION_CRASH_POINTS
from model.retention import RetentionPolicy
from model.schedules import Schedule
from scenarios.invariants import (AbortHonoured, AdoptOwnWrite, BoundedRun, BrokenDeploys, CasLinear, CheckpointConsistency,
                                  ClaimCheckInvariant, ClaimFencesLog, ColdReopen, ContractSafety, ExactlyOnceSettlement, ExactlyOnceWake,
                                  FailClosedPagination, Fencing, FindingsProjection, Liveness, LogChain, PinsSurvive,
                                  QueueOrder, ReplayDeterminism)
from scenarios.invariants.recovery_decisions import RecoveryDecisions
from scenarios.invariants.reference_model import ReferenceModel
from model.agent import APPROVAL, MODEL, SUBAGENT, TOOL, TOOL_ONCE
from scenarios.workloads.agents import AgentSubmitters, AgentWorkers, Approvers, Cancellers, ModelService, Reconciler, ToolService
from scenarios.registry import scenario
from scenarios.workloads.sentinels import WORKER_NODE, Sentinels
from scenarios.workloads.submissions import ConversationRetention, Submitters, Workers, work
from scenarios.system import AuditView, NodePorts, System
from sim.clock import MS_PER_DAY as DAY, MS_PER_HOUR as HOUR, MS_PER_MINUTE as MINUTE, MS_PER_SECOND as SECOND
from sim.invariants import Checker
from sim.scenario import Param, Run
from sim.workload import Stack, Workload

__all__ = [
    # composing a scenario
    "scenario", "Run", "Param", "Stack", "Workload", "System", "NodePorts", "AuditView", "PortFaults",
    "SwarmSpace", "Knob", "fault_intensity_knob", "Checker", "SECOND", "MINUTE", "HOUR", "DAY",
    # application workloads
    "Sentinels", "WORKER_NODE", "Schedule", "RetentionPolicy", "Submitters", "Workers", "ConversationRetention", "work", "DurableStateWrite",
    "AgentSubmitters", "AgentWorkers", "Approvers", "Cancellers", "Reconciler", "ToolService", "ModelService",
    "MODEL", "TOOL", "TOOL_ONCE", "APPROVAL", "SUBAGENT",
    # chaos workloads
    "NodeKills", "NodePauses", "DuplicateAlarms", "OperatorEdits", "Deploys",
    "Partitions",
    # fault kinds and failpoints
    "CRASH_BEFORE_CALL", "ACK_LOST", "FAILPOINT_CRASH", "NODE_KILL", "NODE_PAUSE", "DUPLICATE_WAKE", "SHORT_PAGE",
    "SEQUENCE_GAP", "CORRUPT_ROW", "TRANSIENT_ERROR", "WRITE_CONTENTION", "LATENCY", "REPLY_LOST", "BOUNDARY_DELAY",
    "PARTITION",
    "SENTINEL_CRASH_POINTS",
    "SUBMISSION_CRASH_POINTS",
    # checks
    "AbortHonoured", "AdoptOwnWrite", "BoundedRun", "BrokenDeploys", "CasLinear", "CheckpointConsistency",
    "ClaimCheckInvariant", "ClaimFencesLog", "ColdReopen",
    "ContractSafety", "ExactlyOnceSettlement", "ExactlyOnceWake", "FailClosedPagination", "Fencing",
    "FindingsProjection", "Liveness", "LogChain", "PinsSurvive", "QueueOrder", "RecoveryDecisions", "ReferenceModel", "ReplayDeterminism",
]
