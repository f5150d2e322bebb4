"""agent-conversations: agents whose steps wait for the world — tools whose
outcome a crash leaves unknown, approvals, subagents — under every fault,
with aborts landing in every state of a submission."""
from __future__ import annotations

from faults.kinds import OVERTAKING_COMMIT
from model.agent import APPROVAL, MODEL, SUBAGENT, TOOL, TOOL_ONCE
from model.conversation.records import PAGE_SIZE_MAX
from model.failpoints import AGENT_CRASH_POINTS
from model.sqlite_db import BUSY_TIMEOUT_MS_DEFAULT as BUSY_MS
from scenarios import api as inv
from scenarios.agents import AgentSubmitters, AgentWorkers, Approvers, Reconciler, ToolService
from scenarios.api import (ACK_LOST, BOUNDARY_DELAY, CORRUPT_ROW, CRASH_BEFORE_CALL, FAILPOINT_CRASH, HOUR, LATENCY,
                           MINUTE, NODE_KILL, NODE_PAUSE, REPLY_LOST, SECOND, SEQUENCE_GAP, SHORT_PAGE,
                           SUBMISSION_CRASH_POINTS, TRANSIENT_ERROR, WRITE_CONTENTION, Knob, NodeKills, NodePauses,
                           Param, PortFaults, Run, Stack, SwarmSpace, System, fault_intensity_knob, scenario, work)
from scenarios.invariants import ApprovalPrecedesEffect, ChildBeforeParent, JoinedSettlesOnce, UnknownNeverReplayed

RATES = {CRASH_BEFORE_CALL: 2e-4, ACK_LOST: 2e-4, FAILPOINT_CRASH: 2e-3, SHORT_PAGE: 0.05, SEQUENCE_GAP: 0.05,
         CORRUPT_ROW: 0.05, TRANSIENT_ERROR: 2e-4, WRITE_CONTENTION: 1e-4, LATENCY: 1e-4, REPLY_LOST: 2e-4,
         BOUNDARY_DELAY: 1e-4}
OVERTAKE_RATE = 1e-3
RESTART_MS = (1 * SECOND, 30 * SECOND)
CRASH_POINTS = SUBMISSION_CRASH_POINTS + AGENT_CRASH_POINTS
ABORTS, FAILING_WORK, TOOLS, APPROVALS, SUBAGENTS, FOLLOW_UPS = (
    "client-aborts", "failing-work", "tools", "approvals", "subagents", "follow-ups")
# The calls an agent makes once per step that waits for the world are rare
# next to the lifecycle's: their port faults fire 50x as often, so that a
# short seed sees a tool's reply lost or a suspension's ack lost.
RARE_SITES = ("tools.invoke", "ledger.mark_unknown", "ledger.resolve_unknown", "ledger.suspend",
              "ledger.decide_approval", "ledger.reserve_child", "ledger.attach_child", "ledger.release_child",
              "ledger.begin_join", "ledger.mark_joined")
SWARM = SwarmSpace(
    fault_kinds=(CRASH_BEFORE_CALL, ACK_LOST, FAILPOINT_CRASH, NODE_KILL, NODE_PAUSE, SHORT_PAGE, SEQUENCE_GAP,
                 CORRUPT_ROW, TRANSIENT_ERROR, WRITE_CONTENTION, LATENCY, REPLY_LOST, BOUNDARY_DELAY),
    failpoints=CRASH_POINTS, failpoint_rate=RATES[FAILPOINT_CRASH],
    workload=(ABORTS, FAILING_WORK, TOOLS, APPROVALS, SUBAGENTS, FOLLOW_UPS),
    knobs=(Knob("lease_ms", 20 * SECOND, 5 * SECOND, 60 * SECOND, "claim lease"),
           Knob("busy_timeout_ms", BUSY_MS, 100, 10_000, "SQLite busy timeout"),
           Knob("workers", 3, 1, 8, "worker processes"),
           Knob("recovery_page_size", PAGE_SIZE_MAX, 8, PAGE_SIZE_MAX, "recovery read page (records)",
                values=(8, 16, 32, 64, 128, 256, 512, PAGE_SIZE_MAX)),
           fault_intensity_knob(values=(1, 1, 3, 10))))
SOMETIMES = ("settled", "stale_writes_fenced", "worker_crashes", "tool_unknown_resolved", "approval_resumed",
             "child_woke_parent", "join_settled", "aborted_queued", "aborted_running", "aborted_suspended", "aborted_unknown")


@scenario("agent-conversations", "agents whose steps wait for the world: unknown tool outcomes, approvals, "
          "subagents, aborts in every state", duration="1d", sweep="2h", swarm=SWARM, sometimes=SOMETIMES,
          params=(Param("conversations", 6, "number of conversations", 1, 1_000),
                  Param("conversation_lifetime_ms", HOUR, "a conversation's lifetime (ms)", MINUTE, 30 * 24 * HOUR)))
def agent_conversations(run: Run) -> Stack:
    lease_ms = run.knob("lease_ms")
    tools = ToolService()
    kinds = (MODEL, *((TOOL, TOOL_ONCE) if run.does(TOOLS) else ()), *((APPROVAL,) if run.does(APPROVALS) else ()),
             *((SUBAGENT,) if run.does(SUBAGENTS) else ()))
    workers = AgentWorkers(run.knob("workers"), tools=tools, lease_ms=lease_ms, poll_ms=2 * SECOND,
                           retry_ms=2 * SECOND, step_delay_ms=(50, 3 * SECOND),
                           work=work(fail_every=20 if run.does(FAILING_WORK) else 0),
                           recovery_page_size=run.knob("recovery_page_size"))
    return Stack(
        system=System(file_name="agent-conversations.db", restart_ms=RESTART_MS, damaged_reads=True),
        workloads=[
            workers,
            AgentSubmitters(kinds=kinds, follow_ups=run.does(FOLLOW_UPS), conversations=run.param("conversations"), every_ms=(2 * SECOND, 60 * SECOND),
                            conversation_lifetime_ms=run.param("conversation_lifetime_ms"), retry_ms=2 * SECOND,
                            abort_every=13 if run.does(ABORTS) else 0, abort_late_ms=(200, 90 * SECOND)),
            Approvers(poll_ms=3 * SECOND, delay_ms=(0, 2 * MINUTE)),
            Reconciler(tools=tools, poll_ms=5 * SECOND, delay_ms=(0, 3 * MINUTE)),
            NodeKills(workers.names, every_ms=(10 * MINUTE, 3 * HOUR), restart_ms=RESTART_MS),
            NodePauses(workers.names, every_ms=(10 * MINUTE, 2 * HOUR), busy=workers.busy,
                       pause_ms=((lease_ms + SECOND, lease_ms + 8 * SECOND), (lease_ms + SECOND, 4 * lease_ms))),
        ],
        faults=PortFaults(run.rates(RATES), failpoints=CRASH_POINTS, boosted_sites=RARE_SITES, boost=50,
                          fixed_rates={OVERTAKING_COMMIT: OVERTAKE_RATE} if run.opts.store == "sqlite" else {}),
        checks=[inv.ExactlyOnceSettlement(), inv.Fencing(), inv.ClaimFencesLog(), inv.AbortHonoured(),
                inv.LogChain(), inv.FailClosedPagination(), inv.QueueOrder(), inv.Liveness(), inv.ReferenceModel(),
                UnknownNeverReplayed(tools), ApprovalPrecedesEffect(), ChildBeforeParent(), JoinedSettlesOnce(),
                *([inv.ColdReopen()] if run.opts.store == "sqlite" else [])],
        heal_ms_max=HOUR, settle_ms=HOUR)
