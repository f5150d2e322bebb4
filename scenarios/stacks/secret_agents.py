"""secret-agents: agents whose tools and model take secrets by handle, whose
sensitive record fields are sealed, while the key-encryption key rotates
under kills and port faults."""
from __future__ import annotations

from faults.disk import disk_faults

from model.agent import MODEL, TOOL, TOOL_ONCE
from model.failpoints import (MODEL_REQUESTED_BEFORE_FIRST_DELTA, TOOL_PREPARED_BEFORE_SETTLED, TOOL_RESULTS_APPENDED,
                              TURN_RESPONSE_APPENDED)
from model.secrets.rotation import ROTATION_CRASH_POINTS
from faults.clocks import clock_workloads
from scenarios import api as inv
from scenarios.invariants.clock_tolerance import clock_checks
from scenarios.api import (CORRUPT_ROW, FAILPOINT_CRASH, HOUR, MINUTE, SECOND, SEQUENCE_GAP, SHORT_PAGE,
                           SUBMISSION_CRASH_POINTS, NodeKills, NodePauses, Param, PortFaults, Run, Stack, SwarmSpace,
                           System, scenario)
from scenarios.invariants.secrets import SealedFieldOpener
from scenarios.stacks.ledger_storm import FAULT_KINDS as LEDGER_FAULT_KINDS, KNOBS, RATES, RESTART_MS
from scenarios.stacks.ledger_storm import WORKER_STORES, partition_ms
from scenarios.api import Partitions
from scenarios.workloads.agents import AgentSubmitters, AgentWorkers, ModelService, Reconciler, ToolService
from scenarios.workloads.secrets import MODEL_CREDENTIAL, TOOL_CREDENTIALS, Secrets

# The agent's crash points a plan of model turns and tools passes, and the
# rotation's: the new key current, a page re-wrapped, the pass done before
# the old key is retired.
AGENT_POINTS = (TOOL_PREPARED_BEFORE_SETTLED, TOOL_RESULTS_APPENDED, MODEL_REQUESTED_BEFORE_FIRST_DELTA,
                TURN_RESPONSE_APPENDED)
CRASH_POINTS = SUBMISSION_CRASH_POINTS + AGENT_POINTS + ROTATION_CRASH_POINTS
# A rotation passes its failpoints a few times an hour: activated, they fire
# this many times as often, so that a sweep kills rotations half way.
ROTATION_POINTS_BOOST = 200
# The calls made once a step or once a rotation are rare next to the
# lifecycle's: their port faults fire 50x as often (a tool's reply lost, a
# re-wrap's ack lost, a retirement lost).
RARE_SITES = ("tools.invoke", "model.stream", "ledger.mark_unknown", "ledger.resolve_unknown", "secrets.resolve",
              "keys.generate_data_key", "keys.rotate", "keys.retire", "keys.wrap", "keyring.put_if_absent",
              "keyring.rewrap", "keyring.scan", "keyring.get_rotation", "keyring.save_rotation")
TOOLS = "tools"
# ledger-storm's kinds but the damaged read answers (this system's reads are
# not damaged: its point is the keys, not the recovery read).
FAULT_KINDS = tuple(kind for kind in LEDGER_FAULT_KINDS if kind not in (SHORT_PAGE, SEQUENCE_GAP, CORRUPT_ROW))
COMMON, RARE = 4, 1
SLOW_TOOL_SHARE, SLOW_TOOL_MS = 0.05, (1 * SECOND, 90 * SECOND)
SWARM = SwarmSpace(fault_kinds=FAULT_KINDS, failpoints=CRASH_POINTS, failpoint_rate=RATES[FAILPOINT_CRASH],
                   failpoint_boosts=tuple((point, ROTATION_POINTS_BOOST) for point in ROTATION_CRASH_POINTS),
                   workload=(TOOLS,), knobs=KNOBS)
SOMETIMES = ("settled", "worker_crashes", "tool_unknown_resolved", "key_rotations_done", "key_rotations_resumed",
             "data_keys_rewrapped", "keys_retired", "secret_versions", "sealed_fields_opened",
             "secret_fingerprints_checked", "transcripts_read", "sealed_reads_across_rotation")


class ToolAgentWorkers(AgentWorkers):
    """Agent workers whose plans hold model turns and tools only: the checks
    of approvals, subagents and joined follow-ups, which such plans never
    reach (they would count no check in any seed), are left out."""

    UNREACHED = ("approval-precedes-effect", "child-before-parent", "joined-settles-once")

    def own_checks(self) -> list:
        return [checker for checker in super().own_checks() if checker.name not in self.UNREACHED]


@scenario("secret-agents", "agents that use secrets by handle and seal their records' sensitive fields, while "
          "the key-encryption key rotates under kills", duration="1d", sweep="1h", swarm=SWARM, sometimes=SOMETIMES,
          params=(Param("conversations", 4, "number of conversations", 1, 1_000),
                  Param("conversation_lifetime_ms", HOUR, "a conversation's lifetime (ms)", MINUTE, 30 * 24 * HOUR)))
def secret_agents(run: Run) -> Stack:
    lease_ms = run.knob("lease_ms")
    # Rotations come every 20 minutes to an hour: a sweep seed of an hour (and its
    # settle) sees a few, some killed half way.
    secrets = Secrets(rotate_every_ms=(20 * MINUTE, HOUR), secret_every_ms=(HOUR, 4 * HOUR))
    tools = ToolService(slow_share=SLOW_TOOL_SHARE, slow_ms=SLOW_TOOL_MS, secret_store=secrets.store,
                        credentials=TOOL_CREDENTIALS)
    kinds = (MODEL,) * COMMON + (TOOL, TOOL_ONCE) * (COMMON if run.does(TOOLS) else RARE)
    submitters = AgentSubmitters(
        kinds=kinds, joining_share=0.0, conversations=run.param("conversations"), every_ms=(2 * SECOND, 60 * SECOND),
        conversation_lifetime_ms=run.param("conversation_lifetime_ms"), retry_ms=2 * SECOND)
    model = ModelService(secret_store=secrets.store, credential=MODEL_CREDENTIAL)
    workers = ToolAgentWorkers(run.knob("workers"), serving=submitters, tools=tools, model=model, lease_ms=lease_ms,
                               poll_ms=2 * SECOND, retry_ms=2 * SECOND, step_delay_ms=(50, 3 * SECOND),
                               recovery_page_size=run.knob("recovery_page_size"), secrets=secrets.agent_secrets,
                               open_sealed=SealedFieldOpener(secrets))
    return Stack(
        system=System(file_name="secret-agents.db", restart_ms=RESTART_MS, keyring=True),
        workloads=[
            secrets,
            workers,
            submitters,
            Reconciler(tools=tools, poll_ms=5 * SECOND, delay_ms=(0, MINUTE), serving=submitters),
            # A kill takes an agent or the key rotator (mid-rotation, sometimes).
            NodeKills([workers, secrets], every_ms=(5 * MINUTE, HOUR), restart_ms=RESTART_MS),
            NodePauses([workers], every_ms=(10 * MINUTE, 2 * HOUR), busy=workers.busy,
                       pause_ms=((lease_ms + SECOND, lease_ms + 8 * SECOND),)),
            *clock_workloads(),
            # An agent cut from its stores, its keyring, its secrets, its tools or its model.
            Partitions([workers], stores=(*WORKER_STORES, "keyring", "secrets", "keys", "tools", "model"),
                       every_ms=(10 * MINUTE, 2 * HOUR), busy=workers.busy, cut_ms=partition_ms(lease_ms)),
            *disk_faults(run, restart_ms=RESTART_MS),  # SQLite beyond the contract: the file's own faults
        ],
        faults=PortFaults(run.rates(RATES), failpoints=CRASH_POINTS, boosted_sites=RARE_SITES, boost=50),
        checks=[inv.ExactlyOnceSettlement(), inv.Fencing(), inv.ClaimFencesLog(), inv.LogChain(),
                inv.FailClosedPagination(), inv.Liveness(), inv.ReferenceModel(),
                *([inv.ColdReopen()] if run.opts.store == "sqlite" else []), *clock_checks(run)],
        heal_ms_max=HOUR, settle_ms=HOUR)
