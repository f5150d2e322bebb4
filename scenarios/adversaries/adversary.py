"""The adversary: a client that drives every port operation to its edges.

Why: the application workloads (sentinels, submitters, workers) call the
ports the way the model's own code does, so they never reach the corners of
the contracts: non-ASCII keys, float and integer extremes, objects whose keys
sort differently in UTF-16 than in code points, ``clear`` and re-creation,
logs past one page, payloads on a size cap, claims at the lease-expiry
instant, identical and conflicting retries, aborts racing settlement,
purges, digests inside batches, checkpoints at batch boundaries. A bug
planted on one of those lines stays invisible to them. ``Adversary`` calls
the durable-state store, the submission ledger, the conversation log, the
checkpoint store and the content store directly, through each node's crashy
traced ports (``System.ports_for``: the full fault mix applies), with legal
and illegal arguments drawn from the ``workload`` stream's per-process forks.

Two namespaces:

- **private** (conversations ``<p|g|k|c|b>-<node>-...``, keys
  ``adv:<node>:...``): one process of one node writes them (``p-``: the
  ledger's; the others: logs of their own), so the adversary knows exactly
  what each answer must be and fails ``adversary-expectations`` when the
  store says otherwise (an illegal argument must be a typed error and change
  nothing; an exact retry replays; what it wrote it reads back; a claim at
  the instant the lease expires succeeds, one millisecond before it does
  not);
- **shared** (``s-<slot>-e<era>`` conversations, ``adv:shared:...`` keys):
  every adversary node races on them; only typed-ness and monotonic facts
  (claim epochs only grow, a settlement keeps its reserved outcome) are
  expected here. The ``reference-model`` oracle checks every answer exactly.

Faults: an injected retryable error (``model.retry.is_retryable``: transient,
write contention, ``ReplyLost``) is retried with the *same* arguments. After
a ``ReplyLost`` the call committed unheard, so the answer the retry gets is
the replay's (an idempotent replay, or a revision conflict at exactly
``expected + 1`` that the adversary adopts after reading its own write
back). A crash kills the process; its next incarnation knows only what the
stores hold: it re-reads its private keys and carries any unsettled private
submission to settlement (claiming it once the dead owner's lease lapses)
before it goes on. Damaged read answers (short page, gap, corrupt row) are
read again, as a recovery read would.

Every provoked error that came back typed is counted
(``adversary_typed_rejections``); every edge reached is counted
(``edge_<name>``); every port method called is counted from the trace
(``calls_<port>_<method>``), so a scenario can declare them all as
``sometimes`` properties. ``regression_probes`` reaches the bugs this
workload found (a negative 16-digit integer decoded as a float, integers
past SQLite's INTEGER answered with an untyped OverflowError, a
conversation's deletion taking a content blob someone else had put).
"""
from __future__ import annotations

from typing import Any

from faults.describe import (CHECKPOINT_DESCRIBERS, CONTENT_DESCRIBERS, DURABLE_STATE_DESCRIBERS, LEDGER_DESCRIBERS,
                             LOG_DESCRIBERS)
from model.canonical import ZERO_DIGEST, canonical_bytes
from model.conversation.records import FencedAppendRequest
from model.ledger.conformance import HANDOFF_SCENARIOS
from scenarios.adversaries.checkpoints import CheckpointEpisodes
from scenarios.adversaries.client import Expectations
from scenarios.adversaries.common import _same_json, _sized, _typed
from scenarios.adversaries.content import ContentEpisodes
from scenarios.adversaries.durable_state import DurableStateEpisodes
from scenarios.adversaries.ledger import LedgerEpisodes
from scenarios.adversaries.ledger_waits import LedgerWaitEpisodes
from scenarios.adversaries.log import LogEpisodes
from scenarios.adversaries.process import MAX_SAFE, PRINCIPAL, SPILL_BYTES, UNKNOWN
from sim.node import Node
from sim.workload import Workload
from sim.world import World


# --- the ports and methods it drives ------------------------------------------

# What the fault layer wraps and traces (``faults.describe``): every port method.
PORT_METHODS: dict[str, tuple[str, ...]] = {
    "ds": tuple(DURABLE_STATE_DESCRIBERS), "ledger": tuple(LEDGER_DESCRIBERS), "log": tuple(LOG_DESCRIBERS),
    "checkpoints": tuple(CHECKPOINT_DESCRIBERS), "content": tuple(CONTENT_DESCRIBERS)}
CALL_STATS = tuple(f"calls_{port}_{method}" for port, methods in PORT_METHODS.items() for method in methods)

# The ledger's durability declaration (its capabilities' ``durability``), by its ``durable``.
DURABILITY = {True: "durable-node", False: "non-durable"}

# --- the edges it counts (each a ``sometimes`` property of port-storm) ----------

EDGES = (
    # durable state
    "ds_mixed_unicode_key", "ds_float_edges_roundtrip", "ds_int_edges_roundtrip", "ds_utf16_order_keys_roundtrip",
    "ds_payload_at_cap_sizes", "ds_identical_retry_conflicts", "ds_conflicting_retry_conflicts",
    "ds_clear_idempotent", "ds_recreated_after_clear", "ds_stale_revision_after_recreate",
    "ds_two_versions_old_loaded", "ds_future_version_rejected", "ds_illegal_rejected", "ds_shared_conflict",
    # submission ledger
    "admit_identical_retry_replayed", "admit_reordered_input_replayed", "admit_conflicting_retry_rejected",
    "claim_fifo_head", "renew_never_shortens", "release_idempotent", "input_applied_idempotent",
    "reserve_identical_retry", "reserve_reordered_same_digest", "reserve_conflict_same_outcome",
    "reserve_invalid_shape_rejected", "finalize_identical_retry", "finalize_failed_diagnostic",
    "abort_before_reserve", "abort_between_reserve_and_finalize", "abort_after_finalize_conflict",
    "abort_after_finalize_replays_intent", "approval_after_finalize_conflict",
    "resolution_after_finalize_conflict", "abort_raced_settlement", "purge_refused_open_work", "purge_settled",
    "purge_idempotent", "ledger_illegal_rejected", "claim_blocked_before_expiry", "claim_at_exact_lease_expiry",
    "renew_at_expiry_lost", "renew_after_lapse_unclaimed", "stale_token_fenced", "shared_claimed", "shared_settled",
    "unknown_blocks_claim", "unknown_resolution_replayed", "unknown_resolution_conflict",
    "unknown_resolved_claimable", "unknown_claimed_to_abort", "abort_claimed_keeps_first_intent",
    "suspended_blocks_claim", "approval_replayed", "approval_conflict", "approval_resumed_claimable",
    "suspend_decided_resumes_at_once", "suspended_claimed_to_abort", "snapshot_shows_decisions",
    "snapshot_child_released_approval_open", "snapshot_names_state",
    "join_took_ready_prefix", "join_stopped_at_gap", "join_passed_aborted", "joined_abort_refused",
    "follower_joined", "join_reverted", "join_revert_of_joined_kept", "joined_settled_with_host",
    "child_reserved_key_order_irrelevant", "child_allocation_conflict", "child_attached", "child_other_conflict",
    "child_released_once", "child_accounting_conflict", "input_marker_conflict", "child_suspended_blocks_claim",
    "child_release_woke_parent", "child_decision_woke_parent", "child_released_before_suspend_resumes",
    "child_suspend_unknown_call", "admit_parent_conflict", "child_reserved_while_running",
    "child_replay_before_fence", "settled_suspend_conflict",
    *(f"handoff_{scenario}_{'granted' if scenario == 'ready' else 'refused'}" for scenario in HANDOFF_SCENARIOS),
    "handoff_deferred_head_again",
    "admission_group_occupied", "admission_group_replay_first", "admission_group_conflict",  # admission.py
    "admission_group_held_terminalizing", "admission_group_freed_at_finalize", "admission_fence_replay_after_move",
    "admission_fence_stale_refused", "admission_metadata_conflict", "admission_worker_lane_refused",
    "admission_ordinary_lane_refused", "admission_worker_message_id_refused", "admission_worker_origin_required",
    # conversation log
    "log_over_1024_records", "read_full_default_page", "read_across_page_boundary", "read_at_page_boundary",
    "read_past_tail_empty", "read_illegal_rejected", "digest_at_batch_boundary", "digest_at_inside_batch",
    "digest_at_beyond_tail", "append_identical_retry_replayed", "append_batch_digest_conflict",
    "append_record_identity_conflict", "append_tail_conflict", "append_stale_digest_conflict",
    "append_stale_epoch_fenced", "append_epoch_takeover", "append_higher_epoch_fenced",
    "append_fenced_retry_refused", "append_replay_other_tail_conflict", "append_tail_before_identity",
    "batch_at_record_cap", "batch_over_record_cap_rejected", "batch_over_byte_cap_rejected",
    "log_payload_at_spill_sizes", "lookup_batch_checked", "conversation_deleted", "deleted_conversation_unreadable",
    "observe_from_start", "observe_from_offset", "observe_at_tail_empty", "observe_resumed_after_append",
    "observe_malformed_offset_rejected", "observe_foreign_offset_rejected", "observe_unknown_conversation_rejected",
    "observe_long_log", "envelope_over_depth_bound_rejected", "envelope_over_nodes_bound_rejected",
    "envelope_at_nodes_bound_stored",
    # checkpoints
    "checkpoint_at_batch_boundary", "checkpoint_at_zero", "checkpoint_inside_batch_rejected",
    "checkpoint_ahead_rejected", "checkpoint_bad_version_rejected", "checkpoint_load_at_boundary",
    "checkpoint_load_before_boundary", "checkpoint_overwritten", "checkpoint_illegal_rejected",
    # content store and claim-check
    "content_empty_blob", "content_large_blob", "content_blob_at_cap_sizes", "content_delete_idempotent",
    "content_missing_after_delete", "content_illegal_rejected", "claimcheck_inline_at_cap",
    "claimcheck_ref_above_cap", "queued_abort_settled",
)
# Counted, but reached only when a fault lands in the right place: not
# promised by every sweep.
INCIDENTAL = ("replies_lost_retried", "ds_adopted_after_reply_lost", "damaged_reads_reread",
              "recovered_leftover_work", "unready_head_aborted", "lease_instant_missed", "recovered_awaited_child",
              "handoff_reply_lost", "observe_resumed_after_restart", "unreachable_retried")
EDGE_STATS = tuple(f"edge_{name}" for name in EDGES)


class AdversaryExpectations(Expectations):
    """``adversary-expectations``: the adversary's own obvious expectations
    (typed rejections, replays, read-backs, lease instants). It reads no
    trace events: the adversary tells it, one check per expectation."""

    name = "adversary-expectations"



class Adversary(Workload):
    """``nodes`` adversary processes (``adversary-1`` ...), each running the
    episodes below in a shuffled round, ``think_ms`` apart, until the heal
    instant; then each drains its private leftovers.

    ``lease_ms``: the claims' lease. ``shared_slots``: shared conversations
    per era (``era_ms``). ``long_logs_per_node``: logs past one page a node
    writes in a run (each costs a thousand records). ``races``: the shared
    namespace at all (off: the nodes never meet). ``late_aborts``: a second
    task aborting a submission while the first settles it. ``claim_check``:
    payloads through the claim-check middleware.
    """

    name = "adversary"

    def __init__(self, *, nodes: int, lease_ms: int, think_ms: tuple[int, int], era_ms: int, shared_slots: int = 2,
                 races: bool = True, late_aborts: bool = True, claim_check: bool = True,
                 long_logs_per_node: int = 2) -> None:
        assert 1 <= nodes <= 16 and lease_ms >= 10 and 0 < think_ms[0] <= think_ms[1], (nodes, lease_ms, think_ms)
        assert era_ms > 0 and 1 <= shared_slots <= 16, (era_ms, shared_slots)
        self.names = tuple(f"adversary-{i + 1}" for i in range(nodes))
        self.lease_ms = lease_ms
        self.think_ms = think_ms
        self.era_ms = era_ms
        self.shared_slots = shared_slots
        self.races = races
        self.late_aborts = late_aborts
        self.claim_check = claim_check
        self.long_logs_per_node = long_logs_per_node
        self.long_logs: dict[str, int] = {}  # node name -> long logs its processes started
        self.byte_cap_probed = False  # a batch over BATCH_BYTES_MAX was sent (once a run: 8 MiB)
        self.nodes_bound_probed = False  # envelopes over and at the nodes bound were sent (once a run: 2 MB each)
        # node name -> (conversation, offset, seq): where its processes' observation stood, stored
        # outside the process (as a client stores its offset) for the next incarnation to resume from.
        self.saved_offsets: dict[str, tuple[str, str, int]] = {}
        self.checker = AdversaryExpectations()
        self.edges: dict[str, int] = dict.fromkeys(EDGES + INCIDENTAL, 0)
        self.calls: dict[str, int] = {}
        self.untraced: dict[str, None] = {}  # port methods called on the store itself (no fault layer)
        # submission -> its admission's receipt (every admission answer seen): a settlement names it.
        self.receipts: dict[str, str] = {}
        self.typed_rejections = 0
        self.race_rejections = 0
        self.retries = 0
        self.episodes = 0
        self.processes: dict[str, "_Process"] = {}  # node name -> its live incarnation's process
        # (process label, port, method, timestamp): the timestamps handed a store on purpose, never
        # read from a clock (``chosen_ms``); the clock-tolerance oracle does not judge them.
        self.chosen: set[tuple[str, str, str, int]] = set()
        # process label -> the lease expiry (its clock) of the claim it took or renewed last.
        self.leases: dict[str, int] = {}

    # -- phases ------------------------------------------------------------------

    def setup(self, world: World) -> None:
        self.world = world
        kinds = [f"{port}.{method}" for port, methods in PORT_METHODS.items() for method in methods]
        world.trace.subscribe(kinds, self._count_call)
        for name in self.names:
            world.add_node(name, self._start, role="client")

    def _start(self, node: Node) -> None:
        process = _Process(self, self.world, node)
        self.processes[node.name] = process
        self.world.runtime.spawn_on(node, "adversary", process.main())

    def check(self, view: Any) -> None:
        """What each live process last knew of its private keys is what the
        store holds (a key it was writing when the run ended is skipped)."""
        for name in self.names:
            process = self.processes.get(name)
            node = self.world.nodes.get(name)
            if process is None or node is None or not node.alive or process.node is not node:
                continue
            for key, known in process.known.items():
                if known is UNKNOWN:
                    continue
                stored = view.durable_state_snapshot(key)
                same = stored is None if known is None else stored is not None and (
                    stored.revision, stored.contract_version) == known[:2] and _same_json(stored.payload, known[2])
                self.checker.expect(
                    same,
                    f"{node.label}: at the end {key!r} holds {stored!r:.200}, the adversary last knew "
                    f"{known!r:.200}", (key,))

    def metrics(self) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "adversary_typed_rejections": self.typed_rejections, "adversary_race_rejections": self.race_rejections,
            "adversary_retries": self.retries, "adversary_episodes": self.episodes}
        stats.update({f"edge_{name}": count for name, count in self.edges.items()})
        stats.update({stat: self.calls.get(stat, 0) for stat in CALL_STATS})
        stats["adversary_untraced_methods"] = ",".join(self.untraced) or "none"
        return stats

    def busy(self) -> dict[str, int]:
        """The processes holding a claim now, by their clock (a partition
        prefers them): label -> its lease's expiry."""
        held = {}
        for name in self.names:
            process = self.processes.get(name)
            node = self.world.nodes.get(name)
            if process is None or node is None or not node.alive or process.node is not node:
                continue
            expires_ms = self.leases.get(node.label)
            if expires_ms is not None and process.now() < expires_ms:
                held[node.label] = expires_ms
        return held

    def chose(self, call: Any, value: Any) -> bool:
        """Whether ``value``, a timestamp ``call`` carried, was chosen on purpose (``chosen_ms``)."""
        return (call.node, call.port, call.method, value) in self.chosen

    # -- counting ------------------------------------------------------------------

    def _count_call(self, event: tuple) -> None:
        if event.node.startswith("adversary-"):
            stat = "calls_" + event.kind.replace(".", "_", 1)
            self.calls[stat] = self.calls.get(stat, 0) + 1

    def count_untraced(self, port: str, method: str) -> None:
        stat = f"calls_{port}_{method}"
        self.calls[stat] = self.calls.get(stat, 0) + 1
        self.untraced[stat] = None

    def edge(self, name: str, n: int = 1) -> None:
        assert name in self.edges, name
        self.edges[name] += n



class _Process(DurableStateEpisodes, LedgerEpisodes, LedgerWaitEpisodes, LogEpisodes, CheckpointEpisodes,
               ContentEpisodes):
    """One incarnation of one adversary node: its ports, its stream, what it
    knows (only what it read from the stores since it started)."""

    # -- the process -------------------------------------------------------------------

    async def main(self) -> None:
        """Recover, then run episodes until the heal instant, then drain."""
        capabilities = self.world.system.ledger.capabilities()
        durable = capabilities.get("durable")
        self.expect(type(durable) is bool and capabilities.get("durability") == DURABILITY[durable],
                    f"the ledger's capabilities declare durable={durable!r} but durability="
                    f"{capabilities.get('durability')!r}")
        await self._resume_observation()
        await self.recover()
        episodes = [self.ds_private, self.ds_illegal, self.ledger_private, self.lease_expiry, self.checkpoints,
                    self.content, self.churn, self.unknown_outcome, self.approvals, self.joins, self.children,
                    self.handoffs,
                    self.admission_policies, self.observe_log]
        if self.w.races:
            episodes += [self.ds_shared, self.ledger_shared, self.ledger_shared]
        if self.w.late_aborts:
            episodes.append(self.late_abort_race)
        episodes.append(self.regression_probes)
        heal_at_ms = self.world.heal_at_ms
        while self.now() < heal_at_ms:  # bounded by the heal instant, or the process dies
            order = list(episodes)
            if self.w.long_logs.get(self.node.name, 0) < self.w.long_logs_per_node:
                # A log past one page costs a thousand records a time: a few a run.
                self.w.long_logs[self.node.name] = self.w.long_logs.get(self.node.name, 0) + 1
                order.append(self.long_log)
            self.rng.shuffle(order)
            for episode in order:
                await self.sleep(*self.w.think_ms)
                if self.now() >= heal_at_ms:
                    break
                self.w.episodes += 1
                await episode()
        # Healed: leave no private work unsettled.
        await self.recover()

    # -- probes of bugs known today (opt-in: they fail the run) ----------------------------

    async def regression_probes(self) -> None:
        """Edges that reached real bugs once (each failed on at least one
        store before its fix)."""
        conv = f"b-{self.node.name}-{self.label}-{self._next()}"
        if not self.expect_ok(await self.call("log", "materialize", conv, self.label, 1), "materialize", conv):
            return
        # 1. An integer envelope field at -(2**53 - 1) is accepted, then unreadable.
        env = self.envelope(f"{conv}/neg", self.label, 1, {"x": -MAX_SAFE}, "input", created_ms=-MAX_SAFE)
        out = await self.call("log", "append", FencedAppendRequest(conv, "neg", self.label, 1, 0, ZERO_DIGEST, (env,)))
        if out.ok:
            await self.read_checked(conv, 0, 1, [env], ["neg"])
        # 2. Arguments past SQLite's INTEGER: typed answers, not OverflowError.
        for port, method, args in (("log", "read", (conv, 2 ** 63, 1)), ("log", "digest_at", (conv, 2 ** 63)),
                                   ("checkpoints", "load_latest", (conv, 2 ** 63)),
                                   ("ledger", "admit", (conv, PRINCIPAL, self.uid("k"), {},
                                                         self.chosen_ms("ledger", "admit", 2 ** 63)))):
            got = await self.call(port, method, *args)
            self.expect(got.ok or _typed(got.error), f"{port}.{method}{args!r:.80} answered {got.show()}", conv)
        # 3. Deleting a conversation deletes a content blob someone else put.
        big = _sized(SPILL_BYTES + 100, {"shared": self.label})
        data = canonical_bytes(big)
        put = await self.call("content", "put", data)
        other = f"{conv}-spill"
        if put.ok and (await self.call("log", "materialize", other, self.label, 1)).ok:
            env = self.envelope(f"{other}/big", self.label, 1, big)
            appended = await self.call("log", "append", FencedAppendRequest(other, "big", self.label, 1, 0,
                                                                            ZERO_DIGEST, (env,)))
            if appended.ok and (await self.call("log", "delete_conversation", other)).ok:
                has = await self.call("content", "has", put.value)
                self.expect(has.ok and has.value is True, f"the blob {put.value} this process put is gone after "
                                                          f"deleting {other}, whose record held the same bytes", other)
