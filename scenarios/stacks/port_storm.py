"""port-storm: adversarial clients on every port, at the edges of the contracts.

Two or three adversary processes (``scenarios.adversaries.adversary``) call the
durable-state store, the submission ledger, the conversation log, the
checkpoint store and the content store directly, sharing keys and
conversations so their calls race, with legal and illegal arguments at the
edges (non-ASCII keys, float and integer extremes, logs past one page,
payloads on the size caps, claims at the lease-expiry instant, identical and
conflicting retries, aborts racing settlement), under kills, pauses past the
lease, every port fault kind (``reply-lost`` included: the adversary retries
the same call, as a production client would), damaged log reads, clock skew
and steps (every client on its node's clock: its predictions are made from
the ``now_ms`` it hands each call, never from true time) and partitions that
cut an adversary node from some of the stores it calls (a refused or hung
call is retried as a transient one; a reply held past the timeout is a
committed call unheard, like ``reply-lost``). Its own
expectations fail ``adversary-expectations``; the reference model checks
every answer against an independent model. Beside it, clients of the
durable-state *handle* (``scenarios.adversaries.state_handle``) race on shared keys
under two contract versions, with a buggy writer storing state no version
accepts, claim-check blobs whose reads may be damaged below the store, and
checkpoints that outlive a rewritten log: ``adopt-own-write``,
``contract-safety`` and ``state-expectations`` judge what the handle,
claim-check and recovery answer. And clients of the kernel's execution
store, the schedule cursors, the pin index and the findings projection
(``scenarios.adversaries.ports``) drive those ports at their edges and race
on shared runs; ``ports-expectations`` and the reference model judge them.
Clients of the kernel itself (``scenarios.adversaries.kernel``) run flows of
three versions across deploys, transforms missing, input schemas, replays
that must refuse a non-deterministic flow, and misbuilt kernels:
``kernel-expectations``. On SQLite, ``cold-reopen`` reopens the file at the
end as a restarted process would.
"""
from __future__ import annotations

from faults.clocks import STORE_CLOCK_KNOB, clock_knobs, clock_workloads
from faults.disk import disk_faults

from faults.kinds import CLOCK_JUMP, CLOCK_SKEW, PARTITION, PORT_FAULT_KINDS
from model.sqlite_db import BUSY_TIMEOUT_MS_DEFAULT as BUSY_MS
from scenarios import api as inv
from scenarios.adversaries.adversary import CALL_STATS, EDGE_STATS, Adversary
from scenarios.adversaries.state_handle import SOMETIMES as STATE_SOMETIMES
from scenarios.adversaries.state_handle import StateAdversary
from scenarios.adversaries.ports import SOMETIMES as PORTS_SOMETIMES
from scenarios.adversaries.ports import PortsAdversary
from scenarios.adversaries.kernel import KernelAdversary
from scenarios.adversaries.values import SOMETIMES as VALUES_SOMETIMES
from scenarios.adversaries.values import ValuesAdversary
from scenarios.api import (ACK_LOST, CORRUPT_ROW, CRASH_BEFORE_CALL, LATENCY, MINUTE, NODE_KILL, NODE_PAUSE,
                           REPLY_LOST, SECOND, SEQUENCE_GAP, SHORT_PAGE, TRANSIENT_ERROR, WRITE_CONTENTION, Knob,
                           NodeKills, NodePauses, Param, Partitions, PortFaults, Run, Stack, SwarmSpace, System,
                           fault_intensity_knob, scenario)
from scenarios.invariants.clock_tolerance import clock_checks

# Every port fault kind there is (a kind added later fires here at the
# default rate), the damaged read answers, and these rates.
OWN_RATES = {CRASH_BEFORE_CALL: 2e-4, ACK_LOST: 2e-4, TRANSIENT_ERROR: 1e-3, WRITE_CONTENTION: 1e-3, LATENCY: 5e-4,
             REPLY_LOST: 1e-3, SHORT_PAGE: 0.03, SEQUENCE_GAP: 0.03, CORRUPT_ROW: 0.03}
RATES = {**dict.fromkeys(PORT_FAULT_KINDS, 1e-3), **OWN_RATES}
RESTART_MS = (1 * SECOND, 20 * SECOND)
RACES, LATE_ABORTS, CLAIM_CHECK = "shared-races", "late-abort-race", "claim-check"
# Called less than the others: their faults fire 4x as often. (At the top
# fault intensity, 10x, a retryable kind then fails 4% of those calls; the
# plan caps any boosted rate at 0.5, since a rate of 1 would fail every
# call forever.)
RARE_SITES = ("checkpoints.save", "checkpoints.load_latest", "log.digest_at", "log.delete_conversation",
              "log.lookup_batch", "content.delete", "content.has", "ledger.purge_conversation",
              "ledger.load_recovery_snapshot", "ledger.scan_nonterminal", "ledger.get_by_idempotency_key")
SWARM = SwarmSpace(
    fault_kinds=(*PORT_FAULT_KINDS, NODE_KILL, NODE_PAUSE, SHORT_PAGE, SEQUENCE_GAP, CORRUPT_ROW,
                 CLOCK_SKEW, CLOCK_JUMP, PARTITION),
    workload=(RACES, LATE_ABORTS, CLAIM_CHECK),
    knobs=(Knob("lease_ms", 10 * SECOND, 1 * SECOND, 30 * SECOND, "claim lease"),
           Knob("busy_timeout_ms", BUSY_MS, 100, 10_000, "SQLite busy timeout"),
           Knob("adversaries", 3, 2, 3, "adversary processes"), fault_intensity_knob(values=(1, 1, 3, 10)),
           # Drawn last: the largest clock offset and drift a node draws under clock-skew.
           # Not the stores' own clock: an adversary expects a store's times to
           # be the ones it handed it (its own node's clock).
           *(knob for knob in clock_knobs() if knob.name != STORE_CLOCK_KNOB)))
# The stores the adversary calls, which a partition may cut one of its nodes from.
ADVERSARY_STORES = ("ds", "ledger", "log", "checkpoints", "content")
# Every edge and every port method, across a sweep; plus what the faults must cause.
SOMETIMES = EDGE_STATS + CALL_STATS + ("adversary_typed_rejections", "adversary_retries", "worker_crashes",
                                       "edge_replies_lost_retried", "stale_writes_fenced") + STATE_SOMETIMES + (
                                       PORTS_SOMETIMES) + VALUES_SOMETIMES


@scenario("port-storm", "adversarial clients at the edges of every port contract, racing, under every fault",
          duration="1h", swarm=SWARM, sometimes=SOMETIMES,
          params=(Param("think_ms", 20 * SECOND, "most an adversary waits between episodes (ms)", 10, 10 * MINUTE),))
def port_storm(run: Run) -> Stack:
    lease_ms = run.knob("lease_ms")
    adversary = Adversary(nodes=run.knob("adversaries"), lease_ms=lease_ms,
                          think_ms=(max(1, run.param("think_ms") // 40), run.param("think_ms")), era_ms=30 * MINUTE,
                          races=run.does(RACES), late_aborts=run.does(LATE_ABORTS), claim_check=run.does(CLAIM_CHECK))
    # Clients of the durable-state handle, claim-check and checkpointed recovery, racing on shared keys.
    state = StateAdversary()
    # Clients of the kernel's execution store, schedule cursors, the pin index and the findings projection.
    ports = PortsAdversary(think_ms=(max(1, run.param("think_ms") // 40), run.param("think_ms")))
    # JSON values at the edges of every encoder and decoder, and blobs that are not JSON.
    values = ValuesAdversary(lease_ms=lease_ms, think_ms=(max(1, run.param("think_ms") // 40), run.param("think_ms")))
    # Clients of the kernel itself: versions, deploys, input schemas, replay.
    kernel = KernelAdversary()
    return Stack(
        system=System(file_name="port-storm.db", restart_ms=RESTART_MS, damaged_reads=True),
        workloads=[
            adversary,
            state,
            ports,
            values,
            kernel,
            NodeKills(adversary.names + state.names + ports.names + values.names + kernel.names,
                      every_ms=(10 * MINUTE, 40 * MINUTE), restart_ms=RESTART_MS),
            # Pauses past the lease: a claim held across one lapses while its owner sleeps.
            NodePauses(adversary.names, every_ms=(5 * MINUTE, 30 * MINUTE),
                       pause_ms=((lease_ms + SECOND, 2 * lease_ms), (100, lease_ms))),
            # Every node on its own clock (skew and steps within the tolerance; beyond it, --beyond-contract).
            *clock_workloads(),
            # An adversary node cut from some of its stores while it runs on (one holding a claim when
            # one does): some cuts heal inside the lease, others outlive it several times.
            Partitions(adversary.names, stores=ADVERSARY_STORES, every_ms=(5 * MINUTE, 30 * MINUTE),
                       busy=adversary.busy, cut_ms=((SECOND, max(SECOND, lease_ms // 2)), (lease_ms, 4 * lease_ms))),
            *disk_faults(run, restart_ms=RESTART_MS),  # SQLite beyond the contract: the file's own faults
        ],
        faults=PortFaults(run.rates(RATES), boosted_sites=RARE_SITES, boost=4),
        checks=[adversary.checker, inv.ReferenceModel(), inv.Fencing(), inv.LogChain(), state.checker, ports.checker,
                values.checker, kernel.checker,
                inv.AdoptOwnWrite(), inv.ContractSafety(state.contracts_for_key, damage=state.is_forger),
                *([inv.ColdReopen()] if run.opts.store == "sqlite" else []), 
                # Its clients make their occurrences up (no schedule is due by a clock here), and the
                # adversary hands some timestamps on purpose (a replay at another instant): not readings.
                *clock_checks(run, chosen=lambda call, ms: adversary.chose(call, ms) or ports.chose(call, ms),
                              occurrences=False)],
        heal_ms_max=20 * MINUTE, settle_ms=5 * MINUTE)
