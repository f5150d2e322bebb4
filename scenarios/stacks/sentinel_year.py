"""sentinel-year: sentinels waking every 5 minutes for a year, on the whole system,
under crashes, kills, outages, duplicate alarms, operator edits and deploys; with
the ``pager`` switch, high readings page the on-call (a non-idempotent effect) and
an on-call operator resolves the runs parked in doubt."""
from __future__ import annotations

from faults.disk import disk_faults

import attrs

from faults.beyond import beyond_enabled
from faults.clocks import clock_knobs, clock_workloads
from faults.kinds import CLOCK_JUMP, CLOCK_SKEW
from model.claimcheck import INLINE_CAP_BYTES_DEFAULT
from model.sqlite_db import BUSY_TIMEOUT_MS_DEFAULT as BUSY_MS
from scenarios.workloads import sentinel_app as app
from scenarios.api import (ACK_LOST, BOUNDARY_DELAY, CRASH_BEFORE_CALL, DAY, DUPLICATE_WAKE, FAILPOINT_CRASH, HOUR,
                           LATENCY, MINUTE, NODE_KILL, REPLY_LOST, SECOND, SENTINEL_CRASH_POINTS, TRANSIENT_ERROR,
                           WRITE_CONTENTION, Deploys, DuplicateAlarms, Knob, NodeKills, OperatorEdits,
                           Param, PortFaults, RetentionPolicy, Run, Schedule, Sentinels, Stack, SwarmSpace, System,
                           fault_intensity_knob, scenario)
from scenarios import api as inv
from scenarios.invariants.clock_tolerance import clock_checks
from scenarios.api import PARTITION, Partitions
from faults.chaos import InDoubtResolver
from scenarios.invariants.at_most_once_effect import AtMostOnceEffect

# Per-hit rates: ~20 port calls a wake make a few hundred crashes of each kind a year.
RATES = {CRASH_BEFORE_CALL: 2e-5, ACK_LOST: 2e-5, FAILPOINT_CRASH: 1e-4, TRANSIENT_ERROR: 2e-5,
         WRITE_CONTENTION: 1e-5, LATENCY: 1e-5, REPLY_LOST: 2e-5,
         BOUNDARY_DELAY: 1e-5}
RESTART_MS = (1 * SECOND, 60 * SECOND)
# The projector pins a finding's evidence a few times a week: at the base
# rates a sweep would never see that call fail (or its process die there).
# The pager is called on about one wake in 48: boosted too, so that a sweep
# parks runs in doubt (K9) and the on-call operator resolves them.
RARE_SITES = ("pins.pin", "pager.page")
RARE_SITE_BOOST = 2_000
# Findings live 3 days, so a week's sweep sees runs held by their pins
# released again; one run in 16 is scrubbed before it is archived.
RETENTION = RetentionPolicy(run_ttl_ms=DAY, blob_ttl_ms=2 * DAY, finding_ttl_ms=3 * DAY, verify_every=16)
# Runs retention deletes are audited first (the end-of-run audit would
# never read them): each that went through recovery, and 1 in this many of
# the others (the audit of one run costs about what its wake costs).
RETIRE_AUDIT_EVERY = 16
OPERATOR_EDITS = "operator-edits"
PAGER = "pager"  # high readings page the on-call: the flow's non-idempotent effect
# How often the on-call operator looks for runs parked in doubt.
ON_CALL_EVERY_MS = 15 * MINUTE
SWARM = SwarmSpace(
    fault_kinds=(CRASH_BEFORE_CALL, ACK_LOST, FAILPOINT_CRASH, NODE_KILL, DUPLICATE_WAKE, TRANSIENT_ERROR,
                 WRITE_CONTENTION, LATENCY, REPLY_LOST, BOUNDARY_DELAY,
                 CLOCK_SKEW, CLOCK_JUMP, PARTITION),
    failpoints=SENTINEL_CRASH_POINTS, failpoint_rate=RATES[FAILPOINT_CRASH], workload=(OPERATOR_EDITS, PAGER),
    knobs=(Knob("lease_ms", 30 * SECOND, 10 * SECOND, 120 * SECOND, "run claim lease"),
           Knob("inline_cap_bytes", INLINE_CAP_BYTES_DEFAULT, 4_096, 65_536, "claim-check inline cap"),
           Knob("busy_timeout_ms", BUSY_MS, 100, 10_000, "SQLite busy timeout"), fault_intensity_knob(),
           # Drawn last: no other choice of a seed moves. 1: every run
           # retention deletes is audited first; n: those that went through
           # recovery and one in n of the others (scenarios.system).
           Knob("retire_audit_every", RETIRE_AUDIT_EVERY, 1, 64, "audit 1 in n calm runs before retention "
                "deletes them (every recovered run always)", values=(1, RETIRE_AUDIT_EVERY, RETIRE_AUDIT_EVERY, 4)),
           # Drawn last: the largest clock offset and drift a node draws under clock-skew.
           # With the stores' own clock: the wake oracle judges a start at the
           # driver's own reading (``store.now``), not the store's.
           *clock_knobs()))
# A deploy lands inside a wake, just after its save: one deploy in two finds
# the worker already down, crashed at that save by one of these (its write
# committed or not, its step record lost), and the restarted worker resumes
# the run on the new code.
DOWN_ACROSS_DEPLOY = (("durable_state.save.after_store_write", FAILPOINT_CRASH), ("ds.save", ACK_LOST),
                      ("ds.save", CRASH_BEFORE_CALL))
# The stores (and the pager) the fleet's worker talks to, which a partition may cut it from.
FLEET_STORES = ("ledger", "log", "ds", "kernel", "schedules", "content", "pins", "findings", "pager")
SOMETIMES = ("adopted_saves", "save_conflicts", "wakes_skipped", "claim_checked_payloads", "findings",
             "blobs_reclaimed", "runs_held_by_pins", "broken_deploys_caught", "runs_migrated_on_resume",
             "runs_failed_migration_missing", "worker_crashes", "transient_retries", "runs_parked_in_doubt",
             "deploys_while_down")


@scenario("sentinel-year", "sentinels waking every 5 minutes for a year on the whole system: ledger, log, "
          "claim-check, findings, pins, retention, contract evolution", duration="365d", sweep="7d", swarm=SWARM,
          sometimes=SOMETIMES, params=(Param("sentinels", 1, "number of sentinel schedules", 1, 1_000),
                                       Param("every_ms", 5 * MINUTE, "wake cadence (ms)", 1_000, DAY),
                                       Param("validate_inputs", 1, "input-schema validation at start (0: off)", 0, 1)))
def sentinel_year(run: Run) -> Stack:
    d = run.opts.duration_ms
    cap = run.knob("inline_cap_bytes")
    every_ms = run.param("every_ms")
    fleet = Sentinels([Schedule(f"sentinel-{i}", every_ms, end_ms=d) for i in range(run.param("sentinels"))],
                      lease_ms=run.knob("lease_ms"), inline_cap_bytes=cap, project_every_ms=HOUR,
                      # Where stores may break their promises, retention scrubs a run's log first.
                      retention=attrs.evolve(RETENTION, verify_before_archive=beyond_enabled(run.opts)),
                      validate_inputs=bool(run.param("validate_inputs")), paging=run.does(PAGER))
    edits = OperatorEdits(fleet.state_keys, duration_ms=d, per_year=12, moment=fleet.edit_moment,
                          edit=lambda payload: {**payload, "total": 0}, enabled=run.does(OPERATOR_EDITS))
    operator = edits.is_operator  # its writes are out of band: no build's
    on_call = InDoubtResolver(fleet.schedule_ids, every_ms=ON_CALL_EVERY_MS, lease_ms=run.knob("lease_ms"),
                              delivered=fleet.page_delivered, redrive=fleet.page_again, enabled=fleet.paging)
    return Stack(
        system=System(file_name="sentinel-year.db", restart_ms=RESTART_MS,
                      audit_deletes=run.knob("retire_audit_every")),
        workloads=[
            fleet,
            edits,
            NodeKills([fleet], every_ms=(6 * HOUR, 6 * DAY), restart_ms=RESTART_MS,
                      outage_one_in=6, outage_ms=(10 * MINUTE, 45 * MINUTE)),
            DuplicateAlarms(fleet.schedule_ids, fleet.deliver_again, every_ms=(2 * HOUR, 3 * DAY)),
            Deploys(fleet.deploy_timeline, fleet.on_deploy, nodes=[fleet], duration_ms=d, restart_ms=RESTART_MS,
                    across=DOWN_ACROSS_DEPLOY, lead_ms=app.STATS_LATENCY_MS[1] + 1),
            on_call,
            *clock_workloads(),
            # The fleet's worker cut from some of its stores while its wakes go on.
            Partitions([fleet], stores=FLEET_STORES, every_ms=(2 * HOUR, DAY),
                       cut_ms=((SECOND, run.knob("lease_ms") // 2), (run.knob("lease_ms"), 4 * run.knob("lease_ms")))),
            *disk_faults(run, restart_ms=RESTART_MS),  # SQLite beyond the contract: the file's own faults
        ],
        faults=PortFaults(run.rates(RATES), failpoints=SENTINEL_CRASH_POINTS, periods_ms=(every_ms,),
                          boosted_sites=RARE_SITES, boost=RARE_SITE_BOOST),
        checks=[inv.BrokenDeploys(app.build_reads, out_of_band=operator),  # first: a broken build's load is its finding
                inv.CasLinear(), inv.AdoptOwnWrite(),
                inv.ReplayDeterminism(fleet.replay_flow_for, fleet.replay_store_calls,
                                      transforms_for=fleet.transforms_for),
                inv.ContractSafety(fleet.deployed_contracts, out_of_band=operator,
                                   every_contract_for_key=fleet.every_contract),
                inv.ClaimCheckInvariant({"stats": app.stats_digest}, cap_bytes=cap),
                inv.PinsSurvive(blob_ttl_ms=RETENTION.blob_ttl_ms), inv.BoundedRun(records_max=16),
                inv.ExactlyOnceSettlement(), inv.ClaimFencesLog(), inv.FindingsProjection(finding_ttl_ms=RETENTION.finding_ttl_ms),
                AtMostOnceEffect(fleet.pager, operator_node=lambda: on_call.operator_node),
                inv.Liveness(), inv.ReferenceModel(),
                *([inv.ColdReopen()] if run.opts.store == "sqlite" else []), *clock_checks(run)],
        heal_ms_max=DAY, settle_ms=HOUR)
