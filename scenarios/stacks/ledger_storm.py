"""ledger-storm: many conversations, several workers under leases, crashes,
pauses past the lease (the stale owner must be fenced) and damaged reads
(the recovery read must fail closed)."""
from __future__ import annotations

from faults.disk import disk_faults
from faults.clocks import clock_knobs, clock_workloads
from faults.kinds import CLOCK_JUMP, CLOCK_SKEW, OVERTAKING_COMMIT, PARTITION
from model.conversation.records import PAGE_SIZE_MAX
from model.failpoints import ABORT_CRASH_POINTS, ABORT_INTENT_STORED
from model.sqlite_db import BUSY_TIMEOUT_MS_DEFAULT as BUSY_MS
from scenarios import api as inv
from scenarios.invariants.clock_tolerance import clock_checks
from scenarios.invariants.history_linearizable import HistoryLinearizable
from scenarios.api import (ACK_LOST, BOUNDARY_DELAY, CORRUPT_ROW, CRASH_BEFORE_CALL, FAILPOINT_CRASH, HOUR, LATENCY,
                           MINUTE, NODE_KILL, NODE_PAUSE, REPLY_LOST, SECOND, SEQUENCE_GAP, SHORT_PAGE,
                           SUBMISSION_CRASH_POINTS, TRANSIENT_ERROR, WRITE_CONTENTION, ConversationRetention, Knob,
                           NodeKills, NodePauses, Param, Partitions, PortFaults, Run, Stack, Submitters, SwarmSpace, System,
                           Workers,
                           fault_intensity_knob, scenario, work)

RATES = {CRASH_BEFORE_CALL: 2e-4, ACK_LOST: 2e-4, FAILPOINT_CRASH: 2e-3, SHORT_PAGE: 0.05, SEQUENCE_GAP: 0.05,
         CORRUPT_ROW: 0.05, TRANSIENT_ERROR: 2e-4, WRITE_CONTENTION: 1e-4, LATENCY: 1e-4, REPLY_LOST: 2e-4,
         BOUNDARY_DELAY: 1e-4}
# On SQLite (outside the swarm: every seed): another writer tries to commit
# after a read inside a transaction, per read (``faults.sqlite_overtake``).
OVERTAKE_RATE = 1e-3
RESTART_MS = (1 * SECOND, 30 * SECOND)
# A share of the client's requests is admitted under one of a few entity
# admission groups (with metadata): a group holds one unsettled submission,
# so some are refused while their group's holder is open.
GROUP_SHARE, GROUPS = 0.25, 3
ABORTS, FAILING_WORK, CHECKPOINTS = "client-aborts", "failing-work", "recovery-checkpoints"
# Checkpoint calls happen only in recoveries: their port faults fire 50x as often.
RARE_SITES = ("checkpoints.save", "checkpoints.load_latest", "log.digest_at")
# The fault kinds and knobs of a scenario of submission workers (shared with
# agent-conversations).
FAULT_KINDS = (CRASH_BEFORE_CALL, ACK_LOST, FAILPOINT_CRASH, NODE_KILL, NODE_PAUSE, SHORT_PAGE, SEQUENCE_GAP,
               CORRUPT_ROW, TRANSIENT_ERROR, WRITE_CONTENTION, LATENCY, REPLY_LOST, BOUNDARY_DELAY,
               CLOCK_SKEW, CLOCK_JUMP, PARTITION)
KNOBS = (Knob("lease_ms", 20 * SECOND, 5 * SECOND, 60 * SECOND, "claim lease"),
         Knob("busy_timeout_ms", BUSY_MS, 100, 10_000, "SQLite busy timeout"),
         Knob("workers", 3, 1, 8, "worker processes"),
         # Short logs paginate only with small pages, page boundaries and all.
         Knob("recovery_page_size", PAGE_SIZE_MAX, 8, PAGE_SIZE_MAX, "recovery read page (records)",
              values=(8, 16, 32, 64, 128, 256, 512, PAGE_SIZE_MAX)),
         fault_intensity_knob(values=(1, 1, 3, 10)),
         # Retention of closed conversations: their ledger rows and log go this
         # long after the client closed them, mostly long after their
         # stragglers settled, sometimes so soon that open work holds them (the
         # purge refuses). 0: never, every record kept (STORE-012, the
         # persistence specification's development stage). Drawn last, so it
         # moves no other choice of a seed.
         Knob("retention_ttl_ms", HOUR, 0, 24 * HOUR, "delete a conversation this long after it closed (0: never)",
              values=(0, 0, SECOND, MINUTE, HOUR, HOUR, HOUR, HOUR)),
         # Drawn last: the largest clock offset and drift a node draws under clock-skew.
         *clock_knobs())
# One in this many of the client's requests is sent again by a second
# principal under the same idempotency key (0: none), each its own
# submission. A seed draws it on rarely (one seed in eight): the extra
# submissions change the whole run, so most seeds keep the run they had.
SECOND_PRINCIPAL_KNOB = Knob("second_principal", 0, 0, 64,
                             "one request in N is sent again by a second principal under its key (0: none)",
                             values=(0, 0, 0, 0, 0, 0, 0, 8))
# 1: a worker that deferred a head renews with the token it released while
# the token's lease time still runs (the ledger must refuse it). Drawn on in
# one seed in eight, as the second principal is.
STALE_RENEWALS_KNOB = Knob("stale_renewals", 0, 0, 1,
                           "a deferring worker renews with the token it released (0: never)",
                           values=(0, 0, 0, 0, 0, 0, 0, 1))
# 1: the client pauses between its look at a fresh conversation's log and its
# own materialize at epoch 0 until a recovering worker has taken the
# conversation over (``Submitters(admission_holds=...)``). One seed in eight.
HELD_ADMISSIONS_KNOB = Knob("held_admissions", 0, 0, 1,
                            "the client pauses before its admission's materialize until a worker took over (0: never)",
                            values=(0, 0, 0, 0, 0, 0, 0, 1))
# A client's abort of a queued submission passes abort:after-intent a few
# times a seed: activated, it fires this many times as often (so that a
# sweep fires it; a boost changes no draw).
ABORT_INTENT_BOOST = 25
SWARM = SwarmSpace(fault_kinds=FAULT_KINDS, failpoints=SUBMISSION_CRASH_POINTS + ABORT_CRASH_POINTS, failpoint_rate=RATES[FAILPOINT_CRASH],
                   failpoint_boosts=((ABORT_INTENT_STORED, ABORT_INTENT_BOOST),),
                   workload=(ABORTS, FAILING_WORK, CHECKPOINTS), knobs=(*KNOBS, SECOND_PRINCIPAL_KNOB, STALE_RENEWALS_KNOB, HELD_ADMISSIONS_KNOB))
SOMETIMES = ("stale_writes_fenced", "damaged_reads_caught", "worker_crashes", "settled", "recoveries_from_checkpoint",
             "aborted_queued", "aborted_running", "conversations_retired", "retirements_held_open", "handoffs")
# The ports whose histories ``history-linearizable`` judges (ledger-storm
# keeps no durable state of its own).
HISTORY_PORTS = ("log", "ledger")
# The stores a submission worker talks to, which a partition may cut it from.
WORKER_STORES = ("ledger", "log", "checkpoints")


def partition_ms(lease_ms: int) -> tuple[tuple[int, int], ...]:
    """How long a worker's partition lasts: well under its lease, or from
    one lease to several."""
    return ((SECOND, max(SECOND, lease_ms // 2)), (lease_ms, 4 * lease_ms))


# The share of requests whose worker defers them once their input is applied
# (released unsettled, the lane handed to the next ready one).
DEFER_SHARE = 1 / 8


@scenario("ledger-storm", "conversations under leases: claims, fencing, crashes, pauses, damaged reads",
          duration="1d", sweep="6h", swarm=SWARM, sometimes=SOMETIMES,
          params=(Param("conversations", 8, "number of conversations", 1, 1_000),
                  Param("conversation_lifetime_ms", HOUR, "a conversation's lifetime (ms)", MINUTE, 30 * 24 * HOUR)))
def ledger_storm(run: Run) -> Stack:
    lease_ms = run.knob("lease_ms")
    lifetime_ms = run.param("conversation_lifetime_ms")
    submitters = Submitters(conversations=run.param("conversations"), every_ms=(1 * SECOND, 40 * SECOND),
                            conversation_lifetime_ms=lifetime_ms, retry_ms=2 * SECOND,
                            abort_every=25 if run.does(ABORTS) else 0, group_share=GROUP_SHARE, groups=GROUPS,
                            defer_share=DEFER_SHARE,
                            second_principal_share=1 / run.knob("second_principal") if run.knob("second_principal") else 0.0,
                            admission_holds=bool(run.knob("held_admissions")))
    workers = Workers(run.knob("workers"), serving=submitters, lease_ms=lease_ms, poll_ms=2 * SECOND, retry_ms=2 * SECOND,
                      step_delay_ms=(50, 3 * SECOND), work=work(fail_every=20 if run.does(FAILING_WORK) else 0),
                      checkpoints=run.does(CHECKPOINTS), recovery_page_size=run.knob("recovery_page_size"),
                      stale_renewals=bool(run.knob("stale_renewals")))
    ttl_ms = run.knob("retention_ttl_ms")
    return Stack(
        system=System(file_name="ledger-storm.db", restart_ms=RESTART_MS, damaged_reads=True),
        workloads=[
            workers,
            submitters,
            # A closed conversation goes a while after it closed: the stores
            # stay a few lifetimes deep however long the run.
            *([ConversationRetention(submitters, ttl_ms=ttl_ms, every_ms=max(5 * SECOND, min(lifetime_ms, ttl_ms) // 4),
                                     retry_ms=2 * SECOND)] if ttl_ms else []),
            NodeKills([workers], every_ms=(10 * MINUTE, 3 * HOUR), restart_ms=RESTART_MS),
            # Half the pauses end just after the lease (the owner wakes while its
            # successor is mid-way: its old-epoch writes must be fenced), half later.
            NodePauses([workers], every_ms=(10 * MINUTE, 2 * HOUR), busy=workers.busy,
                       pause_ms=((lease_ms + SECOND, lease_ms + 8 * SECOND), (lease_ms + SECOND, 4 * lease_ms))),
            *clock_workloads(),
            # A worker cut from its stores while it runs on: some cuts heal
            # well inside the lease, others outlive it several times.
            Partitions([workers], stores=WORKER_STORES, every_ms=(10 * MINUTE, 2 * HOUR), busy=workers.busy,
                       cut_ms=partition_ms(lease_ms)),
            *disk_faults(run, restart_ms=RESTART_MS),  # SQLite beyond the contract: the file's own faults
        ],
        faults=PortFaults(run.rates(RATES), failpoints=SUBMISSION_CRASH_POINTS + ABORT_CRASH_POINTS, boosted_sites=RARE_SITES, boost=50,
                          fixed_rates={OVERTAKING_COMMIT: OVERTAKE_RATE} if run.opts.store == "sqlite" else {}),
        checks=[inv.ExactlyOnceSettlement(), inv.Fencing(), inv.ClaimFencesLog(), inv.AbortHonoured(),
                inv.LogChain(), inv.FailClosedPagination(),
                inv.Liveness(), inv.ReferenceModel(),
                # What the callers saw of the log and the ledger, judged from
                # outside (at the audit: it adds nothing to the trace).
                HistoryLinearizable(ports=HISTORY_PORTS),
                *([inv.ColdReopen()] if run.opts.store == "sqlite" else []),
                *([inv.CheckpointConsistency()] if run.does(CHECKPOINTS) else []), *clock_checks(run)],
        heal_ms_max=HOUR, settle_ms=HOUR)
