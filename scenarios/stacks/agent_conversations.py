"""agent-conversations: agents whose steps wait for the world — tools whose
outcome a crash leaves unknown, approvals, subagents — under every fault,
with aborts landing in every state of a submission."""
from __future__ import annotations

from faults.disk import disk_faults

from faults.kinds import DROPPED_NOTIFICATION, OVERTAKING_COMMIT
from model.agent import APPROVAL, MODEL, SUBAGENT, TOOL, TOOL_ONCE
from model.failpoints import (ABORT_CRASH_POINTS, ABORT_INTENT_STORED, AGENT_CRASH_POINTS, COMPACTION_APPENDED, FOLLOWER_APPENDED_BEFORE_JOINED,
                              SUBAGENT_CHILD_ABORT_INTENT)
from faults.clocks import clock_workloads
from scenarios import api as inv
from scenarios.invariants.clock_tolerance import clock_checks
from scenarios.workloads.agents import (JOINING_SHARE, AgentSubmitters, AgentWorkers, Approvers, Cancellers, ModelService,
                              Reconciler, ToolService)
from scenarios.api import (FAILPOINT_CRASH, HOUR, MINUTE, SECOND, SUBMISSION_CRASH_POINTS, Deploys, NodeKills,
                           NodePauses, Param, Partitions, PortFaults, Run, Stack, SwarmSpace, System, scenario, work)
from scenarios.stacks.ledger_storm import FAULT_KINDS as LEDGER_FAULT_KINDS, KNOBS, OVERTAKE_RATE, RESTART_MS
from scenarios.stacks.ledger_storm import WORKER_STORES, partition_ms
from scenarios.stacks.ledger_storm import RATES as LEDGER_RATES
from scenarios.workloads.watchers import WatcherKills, Watchers

CRASH_POINTS = SUBMISSION_CRASH_POINTS + AGENT_CRASH_POINTS + ABORT_CRASH_POINTS
# ledger-storm's kinds and rates (its own stay as they are: its traces do not
# move), and progress notifications dropped on their way (a drop is rare
# harm: any later notification of the conversation, or the reconnect, finds
# the record).
FAULT_KINDS = (*LEDGER_FAULT_KINDS, DROPPED_NOTIFICATION)
RATES = {**LEDGER_RATES, DROPPED_NOTIFICATION: 0.1}
# Watchers' sessions are evicted (and rebuilt) after this long: minutes, the
# only timed wake of a progress wait.
WATCH_RECONNECT_MS = 2 * MINUTE
# Tool calls slow on their way (a congested network, a paused sender): some
# land after their owner's lease ran out, some after their deadline (refused).
SLOW_TOOL_SHARE, SLOW_TOOL_MS = 0.05, (1 * SECOND, 90 * SECOND)
# Aborts are not a switch here: they land in every seed, in every state a
# run can be in (the scenario's point, and the abort-requested family).
FAILING_WORK, TOOLS, APPROVALS, SUBAGENTS, FOLLOW_UPS, CHECKPOINTS = (
    "failing-work", "tools", "approvals", "subagents", "follow-ups", "recovery-checkpoints")
ABORT_EVERY = 13  # one request in this many is aborted (at once or late)
# A step kind's weight in a plan: every kind appears in every seed, rare where
# the swarm switched it off (so each seed writes every event family).
COMMON, RARE = 10, 1
# The calls an agent makes once per step that waits for the world are rare
# next to the lifecycle's: their port faults fire 50x as often, so that a
# short seed sees a tool's reply lost or a suspension's ack lost.
RARE_SITES = ("tools.invoke", "model.stream", "ledger.mark_unknown", "ledger.resolve_unknown", "ledger.suspend",
              "ledger.decide_approval", "ledger.reserve_child", "ledger.attach_child", "ledger.release_child",
              "ledger.begin_join", "ledger.mark_joined")
# Crash points a seed passes a few times only (a parent aborted while its
# child waits, a follow-up's input joined, a compaction): activated, they
# fire this many times as often, so that a sweep fires each (a joining
# host passes join:after-claim at each step: it needs no boost).
RARE_POINTS_BOOST = 25
RARE_POINTS = (COMPACTION_APPENDED, FOLLOWER_APPENDED_BEFORE_JOINED, SUBAGENT_CHILD_ABORT_INTENT, ABORT_INTENT_STORED)
SWARM = SwarmSpace(fault_kinds=FAULT_KINDS, failpoints=CRASH_POINTS, failpoint_rate=RATES[FAILPOINT_CRASH],
                   failpoint_boosts=tuple((point, RARE_POINTS_BOOST) for point in RARE_POINTS),
                   workload=(FAILING_WORK, TOOLS, APPROVALS, SUBAGENTS, FOLLOW_UPS, CHECKPOINTS),
                   knobs=KNOBS)
SOMETIMES = ("settled", "stale_writes_fenced", "worker_crashes", "tool_unknown_resolved", "approval_resumed",
             "approval_rejected_failed",
             "child_woke_parent", "join_settled", "aborted_queued", "aborted_running", "aborted_suspended", "aborted_unknown",
             "tool_calls_refused_late", "run_duration_exceeded", "compactions_selected", "recoveries_from_checkpoint",
             "checkpoints_rejected_rebuilt", "run_start_conflicts", "progress_wait_woken",
             "progress_wait_reconnected_after_drop", "doubt_marked_past_deadline")


@scenario("agent-conversations", "agents whose steps wait for the world: unknown tool outcomes, approvals, "
          "subagents, aborts in every state", duration="1d", sweep="2h", swarm=SWARM, sometimes=SOMETIMES,
          params=(Param("conversations", 6, "number of conversations", 1, 1_000),
                  Param("conversation_lifetime_ms", HOUR, "a conversation's lifetime (ms)", MINUTE, 30 * 24 * HOUR)))
def agent_conversations(run: Run) -> Stack:
    lease_ms = run.knob("lease_ms")
    tools = ToolService(slow_share=SLOW_TOOL_SHARE, slow_ms=SLOW_TOOL_MS)
    # Every step kind in every seed; the swarm makes a kind common or rare.
    kinds = ((MODEL,) * COMMON + (TOOL, TOOL_ONCE) * (COMMON if run.does(TOOLS) else RARE)
             + (APPROVAL,) * (COMMON if run.does(APPROVALS) else RARE)
             + (SUBAGENT,) * (COMMON if run.does(SUBAGENTS) else RARE))
    submitters = AgentSubmitters(
        kinds=kinds, joining_share=JOINING_SHARE * (1 if run.does(FOLLOW_UPS) else RARE / COMMON),
        conversations=run.param("conversations"), every_ms=(2 * SECOND, 60 * SECOND),
        conversation_lifetime_ms=run.param("conversation_lifetime_ms"), retry_ms=2 * SECOND,
        abort_every=ABORT_EVERY, abort_late_ms=(200, 90 * SECOND))
    workers = AgentWorkers(run.knob("workers"), serving=submitters, tools=tools, model=ModelService(), lease_ms=lease_ms, poll_ms=2 * SECOND,
                           retry_ms=2 * SECOND, step_delay_ms=(50, 3 * SECOND),
                           work=work(fail_every=20 if run.does(FAILING_WORK) else 0),
                           recovery_page_size=run.knob("recovery_page_size"), checkpoints=run.does(CHECKPOINTS))
    watchers = Watchers(following=submitters, slots=run.param("conversations"), conversation_lifetime_ms=run.param("conversation_lifetime_ms"),
                        reconnect_ms=WATCH_RECONNECT_MS)
    return Stack(
        system=System(file_name="agent-conversations.db", restart_ms=RESTART_MS, damaged_reads=True, progress=True),
        workloads=[
            workers,
            submitters,
            Approvers(poll_ms=3 * SECOND, delay_ms=(0, 2 * MINUTE), serving=submitters),
            Reconciler(tools=tools, poll_ms=5 * SECOND, delay_ms=(0, MINUTE), serving=submitters),
            Cancellers(poll_ms=2 * SECOND, delay_ms=(2 * SECOND, 4 * SECOND), serving=submitters),
            Deploys(workers.deploy_timeline, workers.deploy, nodes=[workers], duration_ms=run.opts.duration_ms,
                    restart_ms=RESTART_MS),
            watchers,
            NodeKills([workers], every_ms=(10 * MINUTE, 3 * HOUR), restart_ms=RESTART_MS),
            NodePauses([workers], every_ms=(10 * MINUTE, 2 * HOUR), busy=workers.busy,
                       pause_ms=((lease_ms + SECOND, lease_ms + 8 * SECOND), (lease_ms + SECOND, 4 * lease_ms))),
            # An agent cut from its stores, its tools or its model while it runs on.
            Partitions([workers], stores=(*WORKER_STORES, "tools", "model"), every_ms=(10 * MINUTE, 2 * HOUR),
                       busy=workers.busy, cut_ms=partition_ms(lease_ms)),
            # A reloaded page: the watcher follows again from 0.
            WatcherKills([watchers], every_ms=(10 * MINUTE, HOUR), restart_ms=RESTART_MS),
            *clock_workloads(),
            *disk_faults(run, restart_ms=RESTART_MS),  # SQLite beyond the contract: the file's own faults
        ],
        faults=PortFaults(run.rates(RATES), failpoints=CRASH_POINTS, boosted_sites=RARE_SITES, boost=50,
                          fixed_rates={OVERTAKING_COMMIT: OVERTAKE_RATE} if run.opts.store == "sqlite" else {}),
        checks=[inv.ExactlyOnceSettlement(), inv.Fencing(), inv.ClaimFencesLog(), inv.AbortHonoured(),
                inv.LogChain(), inv.FailClosedPagination(), inv.Liveness(), inv.ReferenceModel(),
                *([inv.CheckpointConsistency()] if run.does(CHECKPOINTS) else []),
                *([inv.ColdReopen()] if run.opts.store == "sqlite" else []), *clock_checks(run)],
        heal_ms_max=HOUR, settle_ms=HOUR)
