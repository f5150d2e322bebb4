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

import hashlib
from typing import Any, Callable

import attrs

from faults.describe import (CHECKPOINT_DESCRIBERS, CONTENT_DESCRIBERS, DURABLE_STATE_DESCRIBERS, LEDGER_DESCRIBERS,
                             LOG_DESCRIBERS)
from model.canonical import ZERO_DIGEST, canonical_bytes, canonical_json
from model.claimcheck import INLINE_CAP_BYTES_DEFAULT, ClaimCheck, is_claim_ref, resolve_ref
from model.conversation.checkpoints import Checkpoint
from model.conversation.records import (BATCH_BYTES_MAX, BATCH_RECORDS_MAX, PAGE_SIZE_MAX, FencedAppendRequest,
                                        RecordEnvelope)
from model.conversation.sqlite_store import SPILL_THRESHOLD_BYTES_DEFAULT
from model.durable_state.contracts import FUTURE_VERSION, StateContract
from model.durable_state.store import INT64_MAX, DurableStateWrite, is_revision_conflict
from model.ledger.conformance import HANDOFF_SCENARIOS
from model.ledger.records import Claim, ClaimHandoff, ParentLink
from faults.ports import STREAM_METHODS
from model.retry import error_name, is_retryable
from scenarios.client import RETRIES_MAX, RETRY_WAIT_MS, ClientProcess, Expectations, Outcome
from sim.node import Node, NodeDeadError
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
    "admission_group_occupied", "admission_group_replay_first", "admission_group_conflict",  # adversary_admission
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
              "handoff_reply_lost", "observe_resumed_after_restart")
EDGE_STATS = tuple(f"edge_{name}" for name in EDGES)

# --- values at the edges ------------------------------------------------------------

FLOAT_EDGES = (1.0, -0.0, 1e21, 5e-324, 0.1)
MAX_SAFE = 2 ** 53 - 1
INT_EDGES = (MAX_SAFE, -MAX_SAFE)
# Keys that sort one way by UTF-16 code units (RFC 8785) and another by code
# points (Python's sorted): U+1F600 is a surrogate pair D83D DE00, below
# U+E000 and U+FB01 in UTF-16, above both as a code point.
# The canonical-JSON bounds the log applies to one envelope (persistence §10's
# decode caps as bounds: what is stored must read back).
ENVELOPE_DEPTH_BOUND = 64
ENVELOPE_NODES_BOUND = 1_000_001
UTF16_KEYS = ("\U0001F600", "\uFB01", "\ue000", "a", "\U00010000", "\uffff")
INLINE_CAP = INLINE_CAP_BYTES_DEFAULT
SPILL_BYTES = SPILL_THRESHOLD_BYTES_DEFAULT
PRINCIPAL = "adversary"
DEPLOYMENT = "loomsim-adversary"
# Waits for a dead owner's lease, or for the racing task, are bounded.
WAITS_MAX = 1_000
LARGE_BLOB_BYTES = 256 * 1024
# What a process knows of a private key while a write to it is in flight.
UNKNOWN: Any = type("Unknown", (), {"__repr__": lambda self: "UNKNOWN"})()


def _sized(n_bytes: int, extra: dict) -> dict:
    """A JSON object whose canonical encoding is exactly ``n_bytes`` long,
    holding ``extra`` and padding: the size lands on a cap, not near it."""
    value = {"pad": "", **extra}
    size = len(canonical_bytes(value))
    assert size <= n_bytes, (size, n_bytes)
    value["pad"] = "x" * (n_bytes - size)
    assert len(canonical_bytes(value)) == n_bytes
    return value


def _same_json(a: Any, b: Any) -> bool:
    """Equal as Python JSON values and types (1 is not 1.0, -0.0 is not
    0.0): the durable-state store hands back exactly what it was given."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return a.hex() == b.hex()
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    return a == b


def _canonical_equal(a: Any, b: Any) -> bool:
    return canonical_json(a) == canonical_json(b)


# A settlement envelope's creation time in the adversary's reservations: one
# constant, so an identical retry reserves the identical record.
SETTLEMENT_CREATED_MS = 0


def digest_of(value: Any) -> str:
    """The digest of a JSON value: sha256 of its canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def _is_envelope(value: Any) -> bool:
    return type(value) is dict and "payload" in value and "recordId" in value


def _outcome_of(record: Any) -> Any:
    """The outcome of an outcome record or of a settlement envelope (its
    payload's, the peer's flat ``SubmissionSettled`` payload)."""
    return record["payload"]["outcome"] if _is_envelope(record) else record["outcome"]


#: The settlement payload's members that name it; the others are the outcome record's.
_SETTLEMENT_IDS = ("submissionId", "settlementId", "receiptId", "runId")


def _reordered(value: Any) -> Any:
    """The same JSON value with every object's members inserted in reverse."""
    if type(value) is dict:
        return {k: _reordered(value[k]) for k in reversed(list(value))}
    if type(value) is list:
        return [_reordered(v) for v in value]
    return value


def _ref(data: bytes) -> str:
    # Computed here, not by the store's helper: the store must agree with sha256 itself.
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _typed(error: BaseException) -> bool:
    """A typed answer: the TypeError/ValueError argument validation raises,
    an error that names itself (``name``), or one of the system's own error
    classes (``model.*``). Not typed: AttributeError, KeyError,
    OverflowError, a raw sqlite3 error, a UnicodeError leaking from an encoder."""
    if isinstance(error, UnicodeError):
        return False
    if type(error) in (TypeError, ValueError):
        return True
    name = getattr(type(error), "name", None)
    if isinstance(name, str) and name:
        return True
    return type(error).__module__.startswith("model.")


def _values(value: Any) -> int:
    """How many JSON values ``value`` is: every container and scalar, itself included."""
    count, pending = 0, [value]
    while pending:
        item = pending.pop()
        count += 1
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return count


async def _drained(stream: Any) -> tuple:
    """A stream's items, all of them (a stream method called as one call)."""
    return tuple([item async for item in stream])


def _same_record(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return (a.revision, a.contract_version) == (b.revision, b.contract_version) and _same_json(a.payload, b.payload)


def _matches(error: BaseException | None, names: tuple[str, ...]) -> bool:
    if error is None:
        return False
    for name in names:
        if name == "TypeError" and isinstance(error, TypeError):
            return True
        if name == "ValueError" and isinstance(error, ValueError) and not isinstance(error, UnicodeError):
            return True
        if error_name(error) == name:
            return True
    return False


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


class _Process(ClientProcess):
    """One incarnation of one adversary node: its ports, its stream, what it
    knows (only what it read from the stores since it started)."""

    def __init__(self, workload: Adversary, world: World, node: Node) -> None:
        super().__init__(workload, world, node, "workload/adversary")
        self.lease_ms = workload.lease_ms
        self.canonical_ints = INT_EDGES
        # key -> (revision, contract_version, payload) of a private key, None
        # when absent, UNKNOWN while a write is in flight (until it answers).
        self.known: dict[str, Any] = {}
        self.private_keys = tuple(self._private_key(i) for i in range(3))
        self.max_epoch: dict[str, int] = {}  # shared conversation -> highest epoch this process saw

    # -- identities ------------------------------------------------------------------

    def _next(self) -> int:
        self._serial += 1
        return self._serial

    def private_conversation(self, what: str) -> str:
        # The node's name, not the incarnation's label, leads: the next
        # incarnation finds its predecessors' leftovers by this prefix.
        return f"p-{self.node.name}-{what}-{self.label}-{self._next()}"

    def _private_key(self, index: int) -> str:
        # Same key in every incarnation of the node (a stream of its own,
        # independent of the order of use): ASCII, U+E000..U+FFFF, astral.
        rng = self.world.streams.fork(f"workload/adversary/keys/{self.node.name}/{index}")
        chars = [chr(rng.between(0xE000, 0xFFFF)), chr(rng.between(0x10000, 0x10FFFF)), chr(rng.between(0x61, 0x7A))]
        rng.shuffle(chars)
        return f"adv:{self.node.name}:{index}:" + "".join(chars)

    def shared_conversation(self) -> str:
        era = self.runtime.now_ms() // self.w.era_ms
        return f"s-{self.rng.below(self.w.shared_slots)}-e{era}"

    # -- calls --------------------------------------------------------------------------

    async def call(self, port: str, method: str, *args: Any) -> Outcome:
        """One logical port call: injected retryable errors are retried with
        the same arguments (a ``ReplyLost`` attempt committed unheard)."""
        fn = getattr(getattr(self.ports, port), method, None)
        untraced = fn is None
        if untraced:
            # A port method the fault layer does not wrap (it has no trace
            # describer): the store itself, unfaulted, unseen by the trace.
            fn = getattr(getattr(self.world.system, port), method)
        lost = 0
        for attempt in range(1, RETRIES_MAX + 1):
            if untraced:
                self.w.count_untraced(port, method)
            try:
                value = await (_drained(fn(*args)) if method in STREAM_METHODS else fn(*args))
            except NodeDeadError:
                raise
            except Exception as error:  # noqa: BLE001 - classified below, never swallowed silently
                if is_retryable(error):
                    if error_name(error) == "ReplyLost":
                        lost += 1
                        self.w.edge("replies_lost_retried")
                    self.w.retries += 1
                    await self.runtime.sleep_ms(self.rng.between(*RETRY_WAIT_MS))
                    continue
                return Outcome(None, error, lost, attempt)
            if method == "admit" and type(getattr(value, "receipt", None)) is str:
                self.w.receipts[value.submission_id] = value.receipt
            return Outcome(value, None, lost, attempt)
        raise AssertionError(f"{port}.{method}: {RETRIES_MAX} retryable failures in a row")

    async def retrying(self, what: str, fn: Callable[[], Any]) -> Any:
        """Retry a composite idempotent step (claim-check's put + record) whole."""
        for _ in range(RETRIES_MAX):
            try:
                return await fn()
            except NodeDeadError:
                raise
            except Exception as error:  # noqa: BLE001
                if not is_retryable(error):
                    raise
                self.w.retries += 1
                await self.runtime.sleep_ms(self.rng.between(5, 500))
        raise AssertionError(f"{what}: {RETRIES_MAX} retryable failures in a row")

    async def sleep(self, low_ms: int, high_ms: int) -> None:
        await self.runtime.sleep_ms(self.rng.between(low_ms, high_ms))

    # -- expectations ------------------------------------------------------------------

    def expect_ok(self, outcome: Outcome, what: str, *related: str) -> bool:
        return self.expect(outcome.ok, f"{what} failed: {outcome.show()}", *related)

    def expect_rejected(self, outcome: Outcome, names: tuple[str, ...], what: str, *related: str) -> bool:
        """A provoked error: exactly one of ``names``, typed, nothing written."""
        ok = _matches(outcome.error, names) and _typed(outcome.error)
        if ok:
            self.w.typed_rejections += 1
        return self.expect(ok, f"{what}: expected a typed {'/'.join(names)}, got {outcome.show()}", *related)

    def allow(self, outcome: Outcome, names: tuple[str, ...], what: str, *related: str) -> bool:
        """A raced call: an answer, or one of the typed errors a race may
        cause. Anything else fails. True when it answered."""
        if outcome.ok:
            return True
        if _matches(outcome.error, names) and _typed(outcome.error):
            self.w.race_rejections += 1
            return False
        self.expect(False, f"{what}: raced call failed with {outcome.show()} (allowed: {', '.join(names)})",
                    *related)
        return False

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

    # -- recovery: the new incarnation knows only what the stores hold --------------------

    async def recover(self) -> None:
        for key in self.private_keys:
            out = await self.call("ds", "load", key)
            if self.expect_ok(out, f"ds.load({key!r})", key):
                record = out.value
                self.known[key] = None if record is None else (record.revision, record.contract_version,
                                                               record.payload)
        out = await self.call("ledger", "scan_nonterminal")
        if not self.expect_ok(out, "ledger.scan_nonterminal"):
            return
        records = out.value
        order = [(r.conversation_id, r.queue_seq) for r in records]
        self.expect(order == sorted(order), f"scan_nonterminal is not ordered by (conversation, queue_seq): "
                                            f"{order[:6]}...")
        prefix = f"p-{self.node.name}-"
        leftovers: dict[str, None] = {}
        for record in records:
            if record.conversation_id.startswith(prefix):
                leftovers[record.conversation_id] = None
        for conversation in leftovers:
            await self._settle_leftovers(conversation)

    async def _settle_leftovers(self, conversation: str) -> None:
        out = await self.call("ledger", "load_recovery_snapshot", conversation)
        if not self.expect_ok(out, f"load_recovery_snapshot({conversation})", conversation):
            return
        for ownership in out.value.submissions:
            if not await self._settle_one(conversation, ownership.submission_id):
                return
            self.w.edge("recovered_leftover_work")
        purge = await self.call("ledger", "purge_conversation", conversation)
        self.expect(purge.ok and purge.value >= 1 or purge.ok and purge.lost > 0,
                    f"purge of recovered {conversation} answered {purge.show()}", conversation)

    async def _settle_one(self, conversation: str, sid: str) -> bool:
        """Carry one private leftover to settlement with the record the
        ledger already reserved (the canonical record wins), else aborted."""
        got = await self.call("ledger", "get", sid)
        if not self.expect_ok(got, f"get({sid})", sid) or not self.expect(got.value is not None,
                                                                          f"leftover {sid} vanished", sid):
            return False
        record = got.value
        if record.outcome is not None:
            return True  # settled meanwhile (a follower, with its host)
        open_calls = [c for c, v in (record.unknown_calls or {}).items() if v is None]
        pending = [c for c, v in (record.approvals or {}).items() if v is None]
        for call_id in pending if record.reserved_digest is None and record.abort_author is None else ():
            # A predecessor suspended on approvals nobody gave: decide them (rejected) first.
            out = await self.call("ledger", "decide_approval", sid, call_id, "rejected", self.label,
                                  "recovery: nobody decided", self.now())
            if not self.expect_ok(out, f"decide_approval({sid}, {call_id}) in recovery", sid):
                return False
        awaited = [c for c, e in (record.children or {}).items() if e["awaited"] and e["releasedAtMs"] is None]
        for call_id in awaited if record.reserved_digest is None and record.abort_author is None else ():
            # A predecessor suspended on a child whose release never came: release it (nothing spent).
            out = await self.call("ledger", "release_child", sid, call_id, {"recovered": True}, self.now())
            if not self.expect_ok(out, f"release_child({sid}, {call_id}) in recovery", sid):
                return False
            self.w.edge("recovered_awaited_child")
        for call_id in open_calls if record.reserved_digest is None and record.abort_author is None else ():
            # A predecessor left a tool call unknown: nothing replays it blind; resolve it first.
            out = await self.call("ledger", "resolve_unknown", sid, call_id, "NeverHappened", self.label, None,
                                  self.now())
            if not self.expect_ok(out, f"resolve_unknown({sid}, {call_id}) in recovery", sid):
                return False
        if not record.ready and record.abort_author is None:
            # An unready head is claimable only once its abort intent exists.
            abort = await self.call("ledger", "request_abort", sid, self.label, "recovery: never made ready",
                                    self.now())
            if not self.expect_ok(abort, f"request_abort({sid})", sid):
                return False
            if record.epoch is None:
                # Never claimed: the intent settled it at once (nothing to clean up).
                got = await self.call("ledger", "get", sid)
                return self.expect(abort.value.settled_at_ms is not None and got.ok and got.value is not None
                                   and got.value.outcome == "aborted",
                                   f"abort of never-claimed {sid} answered {abort.show()}, row {got.show()}", sid)
        token = None
        for _ in range(WAITS_MAX):  # a dead incarnation's live lease blocks: wait it out
            claim = await self.call("ledger", "claim", conversation, self.label, self.lease_ms, self.now())
            if not self.expect_ok(claim, f"claim({conversation})", conversation):
                return False
            if claim.value is not None:
                token = claim.value
                break
            got = await self.call("ledger", "get", sid)
            expires_ms = got.value.lease_expires_ms if got.ok and got.value is not None else None
            await self.runtime.sleep_ms(max(1, (expires_ms or 0) - self.now()) if expires_ms else 1_000)
        if not self.expect(token is not None and token.submission_id == sid,
                           f"recovery claim of {conversation} got {token!r}, expected head {sid}", sid):
            return False
        got = await self.call("ledger", "get", sid)
        if not self.expect_ok(got, f"get({sid})", sid):
            return False
        record = got.value
        settle = record.reserved_record if record.reserved_digest is not None else {"outcome": "aborted"}
        mat = await self.call("log", "materialize", conversation, self.label, token.epoch)
        if not self.expect_ok(mat, f"materialize({conversation}, epoch {token.epoch})", conversation):
            return False
        reserved = await self.call("ledger", "reserve_settlement", token, self._settlement(token, settle))
        if not self.expect_ok(reserved, f"reserve({sid}) in recovery", sid):
            return False
        self.expect(record.reserved_digest in (None, reserved.value.record_digest),
                    f"re-reserving {sid}'s own reserved record changed its digest", sid)
        if not await self._append_settled(conversation, token, sid, reserved.value.record_digest, settle):
            return False
        final = await self.call("ledger", "finalize_settlement", sid, self.now())
        return self.expect(final.ok and final.value.outcome == _outcome_of(settle),
                           f"finalize({sid}) in recovery answered {final.show()}", sid)

    def _settlement(self, token: Any, record: Any) -> Any:
        """``record`` (an outcome record) in the settlement record envelope
        of ``token``'s submission: what a reservation holds and the log
        appends, its members beside the settlement's ids (the peer's flat
        payload; the receipt is its admission's, as this workload saw it
        answered). A reserved envelope read back (the canonical record
        wins) is passed on as it is."""
        if _is_envelope(record):
            return record
        sid = getattr(token, "submission_id", None)
        payload = {"submissionId": sid, "settlementId": f"settlement:{sid}",
                   "receiptId": self.w.receipts.get(sid, "rcpt-unseen")}
        payload.update(record if isinstance(record, dict) else {"record": record})
        return {"recordId": f"settlement:{sid}", "family": "submission-settled", "schemaVersion": 1,
                "createdAt": SETTLEMENT_CREATED_MS, "deploymentId": DEPLOYMENT, "payload": payload}

    def _payload_less(self, token: Any, member: str) -> dict:
        """A completed settlement envelope of ``token``'s submission whose
        payload lacks ``member``."""
        envelope = self._settlement(token, {"outcome": "completed"})
        return {**envelope, "payload": {k: v for k, v in envelope["payload"].items() if k != member}}

    async def _append_settled(self, conversation: str, token: Claim, sid: str, digest: str, record: Any) -> bool:
        """Append the settlement record envelope once (looked up by its batch
        id first), exactly as reserved: its digest is ``digest``."""
        batch_id = f"settle:{sid}"
        found = await self.call("log", "lookup_batch", conversation, batch_id)
        if not self.expect_ok(found, f"lookup_batch({conversation}, {batch_id})", conversation):
            return False
        if found.value is not None:
            return True
        # An append's epoch must be the log's own: the token's owner takes
        # the log over first (a no-op when it already holds it).
        mat = await self.call("log", "materialize", conversation, token.owner_id, token.epoch)
        if not self.expect_ok(mat, f"materialize({conversation}, epoch {token.epoch})", conversation):
            return False
        envelope = self._settlement(attrs.evolve(token, submission_id=sid), record)
        self.expect(digest_of(envelope) == digest, f"the envelope appended for {sid} is not the one reserved", sid)
        out = await self._append_exact(conversation, batch_id, token.owner_id, token.epoch, envelope)
        return self.expect_ok(out, f"append of {batch_id}", conversation)

    async def _append_exact(self, conversation: str, batch_id: str, producer: str, epoch: int,
                            envelope: dict) -> Outcome:
        """Append one exact record envelope (never re-stamped)."""
        tail = await self.call("log", "inspect_tail", conversation)
        if not tail.ok:
            return tail
        record = RecordEnvelope(envelope["recordId"], envelope["family"], envelope["schemaVersion"],
                                envelope["createdAt"], envelope["deploymentId"], envelope["payload"], producer,
                                epoch)
        return await self.call("log", "append", FencedAppendRequest(
            conversation, batch_id, producer, epoch, tail.value.tail_seq, tail.value.tail_digest, (record,)))

    async def _append_one(self, conversation: str, batch_id: str, producer: str, epoch: int, family: str,
                          payload: Any) -> Outcome:
        tail = await self.call("log", "inspect_tail", conversation)
        if not tail.ok:
            return tail
        envelope = RecordEnvelope(f"{batch_id}/0", family, 1, self.now(), DEPLOYMENT, payload, producer, epoch)
        return await self.call("log", "append", FencedAppendRequest(
            conversation, batch_id, producer, epoch, tail.value.tail_seq, tail.value.tail_digest, (envelope,)))

    # -- durable state ------------------------------------------------------------------

    def edge_payload(self, n: int, ints: tuple[int, ...] | None = None) -> dict:
        """Floats and integers at their edges, objects whose keys sort
        differently in UTF-16 and in code points, nested. ``ints``: the
        integer edges (default: those a canonical store reads back today)."""
        ints = self.canonical_ints if ints is None else ints
        floats = list(FLOAT_EDGES)
        self.rng.shuffle(floats)
        keys = list(UTF16_KEYS)
        self.rng.shuffle(keys)
        nested = {key: index for index, key in enumerate(keys)}
        return {"n": n, "floats": floats, "ints": list(ints), "utf16": nested,
                "deep": {keys[0]: {keys[1]: [floats[0], {keys[2]: ints[self.rng.below(len(ints))]}]}}}

    async def ds_save(self, key: str, write: DurableStateWrite, expected: int) -> Outcome:
        """A private save; after a lost reply the replay conflicts at exactly
        expected + 1 and the adversary adopts its own write (read back)."""
        self.known[key] = UNKNOWN
        out = await self.call("ds", "save", key, write, expected)
        if out.ok:
            record = out.value
            self.expect(record.revision == expected + 1 and record.contract_version == write.contract_version
                        and _same_json(record.payload, write.payload),
                        f"ds.save({key!r}, expected {expected}) returned {record!r:.200}", key)
            self.known[key] = (record.revision, record.contract_version, record.payload)
            return out
        if out.lost and is_revision_conflict(out.error) and out.error.actual == expected + 1:
            load = await self.call("ds", "load", key)
            stored = load.value if load.ok else None
            adopted = (stored is not None and stored.revision == expected + 1
                       and stored.contract_version == write.contract_version
                       and _same_json(stored.payload, write.payload))
            self.expect(adopted, f"ds.save({key!r}) retried after a lost reply: the stored {stored!r:.200} "
                                 "is not its own write", key)
            if adopted:
                self.w.edge("ds_adopted_after_reply_lost")
                self.known[key] = (stored.revision, stored.contract_version, stored.payload)
                return Outcome(stored, None, out.lost, out.attempts)
        self.expect(False, f"ds.save({key!r}, expected {expected}) on a private key failed: {out.show()}", key)
        return out

    async def ds_private(self) -> None:
        key = self.private_keys[self.rng.below(len(self.private_keys))]
        known = self.known.get(key, UNKNOWN)
        if known is UNKNOWN:
            load = await self.call("ds", "load", key)
            if not self.expect_ok(load, f"ds.load({key!r})", key):
                return
            known = None if load.value is None else (load.value.revision, load.value.contract_version,
                                                     load.value.payload)
            self.known[key] = known
        revision = 0 if known is None else known[0]
        self.w.edge("ds_mixed_unicode_key")
        payload = self.edge_payload(revision + 1, INT_EDGES)
        if self.rng.below(4) == 0:
            payload = _sized(INLINE_CAP + self.rng.between(-1, 1), payload)
            self.w.edge("ds_payload_at_cap_sizes")
        write = DurableStateWrite(self.rng.between(1, 3), payload)
        out = await self.ds_save(key, write, revision)
        if not out.ok:
            return
        load = await self.call("ds", "load", key)
        if self.expect_ok(load, f"ds.load({key!r})", key):
            back = load.value
            same = back is not None and back.revision == revision + 1 and _same_json(back.payload, payload)
            if self.expect(same, f"ds.load({key!r}) after save returned {back!r:.300}", key):
                self.w.edge("ds_float_edges_roundtrip")
                self.w.edge("ds_int_edges_roundtrip")
                self.w.edge("ds_utf16_order_keys_roundtrip")
        # The same save again: a conflict at exactly expected + 1, nothing changed.
        again = await self.call("ds", "save", key, write, revision)
        if self.expect(is_revision_conflict(again.error) and again.error.actual == revision + 1
                       and again.error.expected == revision,
                       f"identical retry of ds.save({key!r}, expected {revision}) answered {again.show()}", key):
            self.w.edge("ds_identical_retry_conflicts")
        other = DurableStateWrite(write.contract_version, {"other": True})
        clash = await self.call("ds", "save", key, other, revision)
        if self.expect(is_revision_conflict(clash.error) and clash.error.actual == revision + 1,
                       f"conflicting retry of ds.save({key!r}) answered {clash.show()}", key):
            self.w.edge("ds_conflicting_retry_conflicts")
        await self._contract_versions(key, revision + 1)
        if self.rng.below(3) == 0:
            await self._clear_and_recreate(key)

    async def _contract_versions(self, key: str, revision: int) -> None:
        """Load state two contract versions old through a v3 contract (two
        migrations), and state from the future through a v2 one."""
        v3 = StateContract("adversary.state", 3, lambda p: None if isinstance(p, dict) and "total" in p else "no total",
                           {1: lambda p: {**p, "unit": "ms"}, 2: lambda p: {"total": p["count"], "unit": p["unit"]}})
        v2 = StateContract("adversary.state", 2, lambda p: None, {1: lambda p: p})
        old = await self.ds_save(key, DurableStateWrite(1, {"count": revision}), revision)
        if not old.ok:
            return
        load = await self.call("ds", "load", key)
        if not self.expect_ok(load, f"ds.load({key!r})", key) or load.value is None:
            return
        record = load.value
        try:
            upgraded = v3.upgrade(key, record.contract_version, record.payload)
        except Exception as error:  # noqa: BLE001 - reported as an expectation
            upgraded = error
        if self.expect(record.contract_version == 1 and upgraded == {"total": revision, "unit": "ms"},
                       f"v1 state of {key!r} through a v3 contract gave {upgraded!r:.200}", key):
            self.w.edge("ds_two_versions_old_loaded")
        future = await self.ds_save(key, DurableStateWrite(3, {"total": revision, "unit": "ms"}), revision + 1)
        if not future.ok:
            return
        try:
            v2.upgrade(key, future.value.contract_version, future.value.payload)
            rejected = None
        except Exception as error:  # noqa: BLE001
            rejected = error
        if self.expect(getattr(rejected, "kind", None) == FUTURE_VERSION,
                       f"v3 state of {key!r} through a v2 contract gave {rejected!r}", key):
            self.w.edge("ds_future_version_rejected")

    async def _clear_and_recreate(self, key: str) -> None:
        known = self.known.get(key)
        old_revision = known[0] if isinstance(known, tuple) else 0
        self.known[key] = UNKNOWN
        for _ in range(2):
            out = await self.call("ds", "clear", key)
            if not self.expect(out.ok and out.value is None, f"ds.clear({key!r}) answered {out.show()}", key):
                return
        self.known[key] = None
        self.w.edge("ds_clear_idempotent")
        load = await self.call("ds", "load", key)
        if not self.expect(load.ok and load.value is None, f"ds.load({key!r}) after clear: {load.show()}", key):
            return
        if old_revision:
            stale = await self.call("ds", "save", key, DurableStateWrite(1, {"stale": True}), old_revision)
            if self.expect(is_revision_conflict(stale.error) and stale.error.actual == 0,
                           f"save at the cleared revision {old_revision} of {key!r}: {stale.show()}", key):
                self.w.edge("ds_stale_revision_after_recreate")
        out = await self.ds_save(key, DurableStateWrite(2, self.edge_payload(0, INT_EDGES)), 0)
        if out.ok:
            self.w.edge("ds_recreated_after_clear")

    async def ds_illegal(self) -> None:
        """Illegal arguments: typed errors, and the key is unchanged."""
        key = self.private_keys[self.rng.below(len(self.private_keys))]
        before = await self.call("ds", "load", key)
        if not self.expect_ok(before, f"ds.load({key!r})", key):
            return
        revision = 0 if before.value is None else before.value.revision
        cases = [
            ("load", (5,), ("TypeError",)), ("load", ("",), ("ValueError",)), ("clear", (b"k",), ("TypeError",)),
            ("save", (key, DurableStateWrite(0, {}), revision), ("ValueError",)),
            ("save", (key, DurableStateWrite(True, {}), revision), ("TypeError",)),
            ("save", (key, DurableStateWrite(INT64_MAX + 1, {}), revision), ("ValueError",)),
            ("save", (key, DurableStateWrite(1, {}), -1), ("ValueError",)),
            ("save", (key, DurableStateWrite(1, {}), True), ("TypeError",)),
            ("save", (key, DurableStateWrite(1, {}), INT64_MAX), ("ValueError",)),
            ("save", (key, DurableStateWrite(1, {"x": float("nan")}), revision), ("ValueError",)),
            ("save", (key, DurableStateWrite(1, [float("inf")]), revision), ("ValueError",)),
            ("save", (key, DurableStateWrite(1, (1, 2)), revision), ("TypeError",)),
            ("save", (key, DurableStateWrite(1, {1: "int key"}), revision), ("TypeError",)),
            ("save", (key, DurableStateWrite(1, {"b": b"bytes"}), revision), ("TypeError",)),
            ("save", ("", DurableStateWrite(1, {}), 0), ("ValueError",)),
        ]
        for index in self.rng_sample(len(cases), 4):
            method, args, names = cases[index]
            out = await self.call("ds", method, *args)
            self.expect_rejected(out, names, f"ds.{method}{args!r:.120}", key)
        after = await self.call("ds", "load", key)
        if self.expect(after.ok and _same_record(after.value, before.value),
                       f"illegal calls changed {key!r}: {before.show()} -> {after.show()}", key):
            self.w.edge("ds_illegal_rejected")

    def rng_sample(self, n: int, k: int) -> list[int]:
        indexes = list(range(n))
        self.rng.shuffle(indexes)
        return sorted(indexes[:k])

    async def ds_shared(self) -> None:
        """CAS races on keys every adversary node writes."""
        key = f"adv:shared:{self.rng.below(3)}:\ue000\U0001F600"
        for _ in range(self.rng.between(1, 4)):
            load = await self.call("ds", "load", key)
            if not self.expect_ok(load, f"ds.load({key!r})", key):
                return
            revision = 0 if load.value is None else load.value.revision
            if revision and self.rng.below(3) == 0:
                revision -= 1  # acting on what another node's write already overtook: a conflict
            elif revision and self.rng.below(5) == 0:
                out = await self.call("ds", "clear", key)
                self.expect_ok(out, f"ds.clear({key!r})", key)
                continue
            write = DurableStateWrite(1, {"by": self.label, "n": self._next(), "f": FLOAT_EDGES[self.rng.below(5)]})
            await self.sleep(0, 200)  # let another node's write land in between
            out = await self.call("ds", "save", key, write, revision)
            if out.ok:
                self.expect(out.value.revision == revision + 1 and _same_json(out.value.payload, write.payload),
                            f"shared ds.save({key!r}, {revision}) returned {out.value!r:.200}", key)
            elif is_revision_conflict(out.error):
                self.w.race_rejections += 1
                self.w.edge("ds_shared_conflict")
                self.expect(out.error.expected == revision and out.error.actual != revision,
                            f"conflict on {key!r} says expected {out.error.expected} actual {out.error.actual}, "
                            f"sent {revision}", key)
            else:
                self.expect(False, f"shared ds.save({key!r}) failed: {out.show()}", key)

    # -- the submission ledger ---------------------------------------------------------

    async def admit_ready(self, conversation: str, key: str, value: Any, parent: ParentLink | None = None) -> Any:
        """Admit (under ``parent``, if given), materialize at epoch 0, mark
        ready: the admission path."""
        link = () if parent is None else (parent,)
        out = await self.call("ledger", "admit", conversation, PRINCIPAL, key, value, self.now(), *link)
        if not self.expect(out.ok and out.value.parent == parent, f"admit({conversation}, {key}, parent={parent!r}) "
                                                                  f"answered {out.show()}", conversation):
            return None
        self.expect(out.value.replayed == (out.lost > 0),
                    f"first admit of {key} says replayed={out.value.replayed} after {out.lost} lost replies",
                    conversation)
        mat = await self.call("log", "materialize", conversation, "admission", 0)
        if not self.expect_ok(mat, f"materialize({conversation}, admission, 0)", conversation):
            return None
        now = self.now()
        ready = await self.call("ledger", "mark_ready", out.value.submission_id, now)
        if not self.expect(ready.ok and ready.value.ready_at_ms == now and (not ready.value.replayed or ready.lost),
                           f"mark_ready({out.value.submission_id}) at {now} answered {ready.show()}", conversation):
            return None
        return out.value

    async def claim_token(self, conversation: str, owner: str, epoch_before: int) -> Claim | None:
        now = self.now()
        out = await self.call("ledger", "claim", conversation, owner, self.lease_ms, now)
        if not self.expect_ok(out, f"claim({conversation}, {owner})", conversation):
            return None
        token = out.value
        self.expect(token is not None and epoch_before < token.epoch <= epoch_before + 1 + out.lost
                    and token.lease_expires_ms == now + self.lease_ms and token.owner_id == owner,
                    f"claim({conversation}, {owner}) at {now} after epoch {epoch_before} gave {token!r}",
                    conversation)
        return token

    def settlement_record(self, outcome: str, n: int) -> dict:
        if outcome == "failed":
            return {"outcome": "failed", "diagnostic": {"errorTag": "AdversaryFailure", "message": f"\ue000 #{n}"}}
        if outcome == "aborted":
            return {"outcome": "aborted", "reason": "adversary"}
        return {"outcome": "completed", "result": self.edge_payload(n)}

    async def ledger_private(self) -> None:
        """One private conversation through every ledger operation, with
        identical and conflicting retries, an abort at a drawn point, and
        illegal arguments."""
        conv = self.private_conversation("l")
        key = self.uid("key")
        value = self.edge_payload(1)
        first = await self.admit_ready(conv, key, value)
        if first is None:
            return
        sid = first.submission_id
        again = await self.call("ledger", "admit", conv, PRINCIPAL, key, value, self.now() + 1)
        if self.expect(again.ok and again.value.replayed and (again.value.submission_id, again.value.receipt,
                                                              again.value.queue_seq, again.value.input_digest) == (
                           first.submission_id, first.receipt, first.queue_seq, first.input_digest),
                       f"identical admit retry of {key} answered {again.show()}, first {first!r}", conv):
            self.w.edge("admit_identical_retry_replayed")
        # The same JSON value: members reordered, integers spelled as floats.
        shuffled = _reordered({**value, "ints": [float(x) for x in value["ints"]]})
        reordered = await self.call("ledger", "admit", conv, PRINCIPAL, key, shuffled, self.now())
        if self.expect(reordered.ok and reordered.value.replayed and reordered.value.input_digest == first.input_digest,
                       f"admit of {key} with the same input reordered answered {reordered.show()}", conv):
            self.w.edge("admit_reordered_input_replayed")
        clash = await self.call("ledger", "admit", conv, PRINCIPAL, key, {**value, "n": 2}, self.now())
        if self.expect_rejected(clash, ("AdmissionConflict",), f"admit of {key} with another input", conv):
            self.w.edge("admit_conflicting_retry_rejected")
        by_key = await self.call("ledger", "get_by_idempotency_key", conv, PRINCIPAL, key)
        self.expect(by_key.ok and by_key.value is not None and by_key.value.submission_id == sid
                    and _canonical_equal(by_key.value.input, value) and by_key.value.ready,
                    f"get_by_idempotency_key({key}) answered {by_key.show()}", conv)
        first_ready_ms = getattr(by_key.value, "ready_at_ms", None)
        for _ in range(2):
            ready = await self.call("ledger", "mark_ready", sid, self.now())
            self.expect(ready.ok and ready.value.replayed and ready.value.ready_at_ms == first_ready_ms,
                        f"mark_ready({sid}) again: {ready.show()}, first ready at {first_ready_ms}", conv)
        second = await self.admit_ready(conv, self.uid("key"), {"second": True})
        if second is None:
            return
        self.expect(second.queue_seq == first.queue_seq + 1, f"second admission got queue_seq {second.queue_seq}",
                    conv)
        purge = await self.call("ledger", "purge_conversation", conv)
        if self.expect_rejected(purge, ("PurgeRefused",), f"purge of {conv} with open work", conv):
            self.w.edge("purge_refused_open_work")
        await self._ledger_illegal(conv, sid)
        abort_at = self.rng.choice(("before-reserve", "between", "after-finalize", "never"))
        token = await self.claim_token(conv, self.label, 0)
        if token is None:
            return
        if self.expect(token.submission_id == sid, f"claim of {conv} got {token.submission_id}, FIFO head is {sid}",
                       conv):
            self.w.edge("claim_fifo_head")
        now = self.now()
        renewal = await self.call("ledger", "renew_ownership", token, max(1, self.lease_ms // 4), now)
        if now < token.lease_expires_ms:
            if self.expect(renewal.ok and renewal.value.lease_expires_ms == max(token.lease_expires_ms,
                                                                                  now + max(1, self.lease_ms // 4)),
                           f"renew of {sid} with a shorter lease at {now} answered {renewal.show()}, "
                           f"lease was {token.lease_expires_ms}", conv):
                self.w.edge("renew_never_shortens")
        elif not renewal.ok:  # lapsed and claimed by another owner since: fenced
            self.expect_rejected(renewal, ("OwnershipLost",), f"renew of {sid} after its lease lapsed", conv)
        else:  # lapsed with nobody claiming since: it renews at the same epoch (the peer's ledger does)
            self.expect(renewal.value.epoch == token.epoch
                        and renewal.value.lease_expires_ms >= now + max(1, self.lease_ms // 4),
                        f"renew of {sid} after its lease lapsed unclaimed answered {renewal.show()}", conv)
        if not await self._apply_input(conv, token, sid, key, value, first.queue_seq):
            return
        intent = None
        if abort_at == "before-reserve":
            intent = await self._abort(sid, "early")
            self.w.edge("abort_before_reserve")
        outcome = "aborted" if intent is not None else self.rng.choice(("completed", "failed"))
        record = self.settlement_record(outcome, 1)
        reserved = await self.call("ledger", "reserve_settlement", token, self._settlement(token, record))
        if not self.expect_ok(reserved, f"reserve({sid})", conv):
            return
        digest = reserved.value.record_digest
        retry = await self.call("ledger", "reserve_settlement", token, self._settlement(token, record))
        if self.expect(retry.ok and retry.value.record_digest == digest, f"identical re-reserve of {sid}: "
                                                                           f"{retry.show()}", conv):
            self.w.edge("reserve_identical_retry")
        mirrored = await self.call("ledger", "reserve_settlement", token, _reordered(self._settlement(token, record)))
        if self.expect(mirrored.ok and mirrored.value.record_digest == digest,
                       f"re-reserve of {sid} with members reordered: {mirrored.show()}", conv):
            self.w.edge("reserve_reordered_same_digest")
        different = {**record, "note": "another record, same outcome"}
        clash = await self.call("ledger", "reserve_settlement", token, self._settlement(token, different))
        if self.expect_rejected(clash, ("SettlementConflict",), f"re-reserve of {sid} with other content", conv):
            self.w.edge("reserve_conflict_same_outcome")
        if abort_at == "between":
            # Terminalizing: the reserved record wins; the abort is refused, nothing stored.
            late = await self.call("ledger", "request_abort", sid, self.label, "late", self.now())
            if self.expect(not late.ok and _matches(late.error, ("AbortConflict",)) and _typed(late.error)
                           and getattr(late.error, "settling", None) is True
                           and getattr(late.error, "outcome", None) == outcome,
                           f"abort of {sid} after its {outcome} reservation answered {late.show()}", conv):
                self.w.edge("abort_between_reserve_and_finalize")
        if not await self._append_settled(conv, token, sid, digest, record):
            return
        final = await self.call("ledger", "finalize_settlement", sid, self.now())
        expected_diagnostic = record.get("diagnostic")
        if not self.expect(final.ok and final.value.outcome == outcome and final.value.record_digest == digest
                           and final.value.diagnostic == expected_diagnostic,
                           f"finalize({sid}) answered {final.show()}, reserved {outcome} {digest}", conv):
            return
        if outcome == "failed":
            self.w.edge("finalize_failed_diagnostic")
        replay = await self.call("ledger", "finalize_settlement", sid, self.now() + 1_000)
        if self.expect(replay.ok and replay.value == attrs.evolve(final.value, replayed=True)
                       and replay.value.settlement_id is not None, f"finalize({sid}) again answered {replay.show()}, "
                                                                  f"first {final.value!r}", conv):
            self.w.edge("finalize_identical_retry")
        if abort_at == "after-finalize" or intent is not None:
            # A settled submission: SettlementConflict naming its outcome,
            # whether or not an earlier intent exists (it does not replay).
            late = await self.call("ledger", "request_abort", sid, self.label, "after the fact", self.now())
            if self.expect(not late.ok and _matches(late.error, ("SettlementConflict",)) and _typed(late.error)
                           and getattr(late.error, "existing_outcome", None) == outcome,
                           f"abort of settled {sid} answered {late.show()}, settled {outcome}", conv):
                self.w.edge("abort_after_finalize_conflict" if intent is None
                            else "abort_after_finalize_replays_intent")
        # A decision or a resolution once it settled: SettlementConflict too,
        # before the call (never named here) is looked up.
        for method, args, edge in (
                ("decide_approval", (sid, "call-late", "approved", self.label, "late", self.now()),
                 "approval_after_finalize_conflict"),
                ("resolve_unknown", (sid, "call-late", "NeverHappened", self.label, None, self.now()),
                 "resolution_after_finalize_conflict")):
            late = await self.call("ledger", method, *args)
            if self.expect(not late.ok and _matches(late.error, ("SettlementConflict",)) and _typed(late.error)
                           and getattr(late.error, "existing_outcome", None) == outcome,
                           f"{method} of settled {sid} answered {late.show()}, settled {outcome}", conv):
                self.w.edge(edge)
        for _ in range(2):
            released = await self.call("ledger", "release_ownership", token)
            if not self.expect(released.ok, f"release of {sid}: {released.show()}", conv):
                return
        self.w.edge("release_idempotent")
        # The second submission: claimed next (FIFO), settled aborted.
        token2 = await self.claim_token(conv, self.label, token.epoch)
        if token2 is None or not self.expect(token2.submission_id == second.submission_id,
                                             f"next claim of {conv} got {token2.submission_id}", conv):
            return
        await self._abort(second.submission_id, "cleanup")
        aborted = self.settlement_record("aborted", 2)
        mat = await self.call("log", "materialize", conv, self.label, token2.epoch)
        reserved2 = await self.call("ledger", "reserve_settlement", token2, self._settlement(token2, aborted))
        if not (self.expect_ok(mat, f"materialize({conv})", conv) and self.expect_ok(reserved2, "reserve", conv)):
            return
        if not await self._append_settled(conv, token2, second.submission_id, reserved2.value.record_digest,
                                          aborted):
            return
        final2 = await self.call("ledger", "finalize_settlement", second.submission_id, self.now())
        if not self.expect(final2.ok and final2.value.outcome == "aborted", f"finalize: {final2.show()}", conv):
            return
        await self._check_snapshot(conv, token2.epoch, ())
        purge = await self.call("ledger", "purge_conversation", conv)
        if self.expect(purge.ok and purge.value == (0 if purge.lost else 2), f"purge of settled {conv}: "
                                                                               f"{purge.show()}", conv):
            self.w.edge("purge_settled")
        purge = await self.call("ledger", "purge_conversation", conv)
        if self.expect(purge.ok and purge.value == 0, f"second purge of {conv}: {purge.show()}", conv):
            self.w.edge("purge_idempotent")
        gone = await self.call("ledger", "get", sid)
        self.expect(gone.ok and gone.value is None, f"get({sid}) after purge: {gone.show()}", conv)
        await self._check_snapshot(conv, 0, ())
        if self.rng.below(2) == 0:
            await self._delete_log(conv)

    async def admission_policies(self) -> None:
        """Admission groups, fences and metadata (``scenarios.adversary_admission``)."""
        from scenarios.adversary_admission import admission_policies
        await admission_policies(self)

    async def _apply_input(self, conv: str, token: Claim, sid: str, key: str, value: Any, queue_seq: int) -> bool:
        mat = await self.call("log", "materialize", conv, token.owner_id, token.epoch)
        if not self.expect_ok(mat, f"materialize({conv}, epoch {token.epoch})", conv):
            return False
        payload = {"submissionId": sid, "input": value, "principalId": PRINCIPAL, "idempotencyKey": key,
                   "queueSeq": queue_seq}
        out = await self._append_one(conv, f"input:{sid}", token.owner_id, token.epoch, "input", payload)
        if not self.expect_ok(out, f"append of input:{sid}", conv):
            return False
        at = (f"input:{sid}/0", out.value.first_seq)
        for attempt in range(2):
            applied = await self.call("ledger", "mark_input_applied", token, *at)
            if not self.expect(applied.ok and (applied.value.record_id, applied.value.seq) == at
                               and applied.value.replayed == (attempt > 0 or applied.lost > 0),
                               f"mark_input_applied({sid}, {at}): {applied.show()}", conv):
                return False
        self.w.edge("input_applied_idempotent")
        return True

    async def _abort(self, sid: str, reason: str) -> Any:
        """The first abort intent of an unsettled submission: this one. A
        queued one (ready, never claimed) is then settled as its aborter
        does, the ledger's part (``_settle_queued_abort``)."""
        out = await self.call("ledger", "request_abort", sid, self.label, reason, self.now())
        got = None if not out.ok else (out.value.submission_id, out.value.author, out.value.reason)
        self.expect(got == (sid, self.label, reason), f"request_abort({sid}, {reason}) answered {out.show()}", sid)
        if out.ok and out.value.settled_at_ms is None and not await self._settle_queued_abort(sid):
            return None
        return out.value

    async def _settle_queued_abort(self, sid: str) -> bool:
        """A queued submission's abort under the ledger's ``QueuedAbort``
        authority: any token reserves its ``aborted`` record (a replay
        replays), then it finalizes; one a claim granted is left to its
        owner. False on a wrong answer."""
        row = await self.call("ledger", "get", sid)
        if not self.expect(row.ok and row.value is not None, f"get({sid}) answered {row.show()}", sid):
            return False
        if row.value.epoch is not None or not row.value.ready or row.value.join_host is not None:
            return True
        bogus = Claim(sid, f"{self.label}/queued-abort", 0, 0)
        envelope = self._settlement(bogus, self.settlement_record("aborted", 0))
        reserved = await self.call("ledger", "reserve_settlement", bogus, envelope)
        if not self.expect(reserved.ok and reserved.value.outcome == "aborted",
                           f"queued-abort reservation of {sid} answered {reserved.show()}", sid):
            return False
        again = await self.call("ledger", "reserve_settlement", Claim(sid, "another", 7, 0), envelope)
        if not self.expect(again.ok and again.value.replayed, f"a replay of {sid}'s queued-abort reservation "
                                                              f"answered {again.show()}", sid):
            return False
        final = await self.call("ledger", "finalize_settlement", sid, self.now())
        if self.expect(final.ok and final.value.outcome == "aborted", f"finalize({sid}) answered {final.show()}",
                       sid):
            self.w.edge("queued_abort_settled")
            return True
        return False

    async def _check_snapshot(self, conv: str, epoch: int, open_ids: tuple[str, ...]) -> None:
        out = await self.call("ledger", "load_recovery_snapshot", conv)
        self.expect(out.ok and out.value.epoch == epoch and tuple(s.submission_id for s in out.value.submissions)
                    == open_ids, f"recovery snapshot of {conv} answered {out.show()}, expected epoch {epoch} "
                                 f"open {open_ids}", conv)

    async def _ledger_illegal(self, conv: str, sid: str) -> None:
        fake = Claim(sid, "nobody", 999, 1)
        cases = [
            # (Not a non-str conversation id: the System's audit view would adopt it.)
            ("admit", (conv, 5, "k", {}, 0), ("TypeError",)),
            ("admit", (conv, PRINCIPAL, "k-nan", {"x": float("nan")}, 0), ("ValueError",)),
            ("admit", (conv, PRINCIPAL, "k-big", {"x": MAX_SAFE + 1}, 0), ("ValueError",)),
            ("admit", (conv, PRINCIPAL, "k-time", {}, 1.5), ("TypeError",)),
            ("mark_ready", (f"{sid}-none", 0), ("UnknownSubmission",)),
            ("claim", (conv, self.label, 0, self.now()), ("ValueError",)),
            ("claim", (conv, self.label, True, self.now()), ("TypeError",)),
            ("renew_ownership", (fake, self.lease_ms, self.now()), ("OwnershipLost",)),
            ("renew_ownership", (fake, -5, self.now()), ("ValueError",)),
            ("reserve_settlement", (fake, self._settlement(fake, {"outcome": "completed"})), ("OwnershipLost",)),
            ("reserve_settlement", (fake, self._settlement(fake, {"outcome": "maybe"})), ("InvalidSettlement",)),
            ("reserve_settlement", (fake, self._settlement(fake, {"outcome": "failed"})), ("InvalidSettlement",)),
            ("reserve_settlement", (fake, self._settlement(fake, {"outcome": "aborted", "result": None})),
             ("InvalidSettlement",)),
            ("reserve_settlement", (fake, self._settlement(fake, {"outcome": "failed", "diagnostic": {
                "errorTag": "T", "message": "m"}, "stack": "..."})), ("InvalidSettlement",)),
            # A bare outcome record, or an envelope addressed to another submission, is no settlement.
            ("reserve_settlement", (fake, {"outcome": "completed"}), ("InvalidSettlement",)),
            ("reserve_settlement", (fake, {**self._settlement(fake, {"outcome": "completed"}),
                                           "recordId": f"settlement:{sid}-other"}), ("InvalidSettlement",)),
            # The peer's settlement payload names its settlement and receipt: without either, no settlement.
            ("reserve_settlement", (fake, self._payload_less(fake, "receiptId")), ("InvalidSettlement",)),
            ("reserve_settlement", (fake, self._payload_less(fake, "settlementId")), ("InvalidSettlement",)),
            ("finalize_settlement", (f"{sid}-none", 0), ("UnknownSubmission",)),
            ("finalize_settlement", (sid, 0), ("SettlementConflict",)),
            ("request_abort", (f"{sid}-none", "me", "why", 0), ("UnknownSubmission",)),
            ("request_abort", (sid, 7, "why", 0), ("TypeError",)),
            ("request_abort", (sid, "me", "why", 0.5), ("TypeError",)),
            ("get", (None,), ("TypeError",)),
            ("get_by_idempotency_key", (conv, PRINCIPAL, 1), ("TypeError",)),
            ("load_recovery_snapshot", (42,), ("TypeError",)),
            ("purge_conversation", (b"conv",), ("TypeError",)),
        ]
        shapes = 0
        for index in self.rng_sample(len(cases), 6):
            method, args, names = cases[index]
            out = await self.call("ledger", method, *args)
            self.expect_rejected(out, names, f"ledger.{method}{args!r:.160}", conv)
            shapes += names == ("InvalidSettlement",)
        self.w.edge("ledger_illegal_rejected")
        if shapes:
            self.w.edge("reserve_invalid_shape_rejected")
        record = await self.call("ledger", "get", sid)
        self.expect(record.ok and record.value is not None and record.value.owner_id is None
                    and record.value.abort_author is None and record.value.reserved_digest is None,
                    f"illegal calls changed {sid}: {record.show()}", conv)

    async def lease_expiry(self) -> None:
        """Claims on either side of the lease-expiry instant: one millisecond
        before it the lease still blocks, at it the next owner takes over
        and the old token is fenced everywhere."""
        conv = self.private_conversation("x")
        admission = await self.admit_ready(conv, self.uid("key"), {"lease": True})
        if admission is None:
            return
        sid = admission.submission_id
        owner_a, owner_b = f"{self.label}/a", f"{self.label}/b"
        token = await self.claim_token(conv, owner_a, 0)
        if token is None:
            return
        mat = await self.call("log", "materialize", conv, owner_a, token.epoch)
        if not self.expect_ok(mat, f"materialize({conv})", conv):
            return
        expires_ms = token.lease_expires_ms
        if self.now() < expires_ms - 1:
            await self.runtime.sleep_ms(expires_ms - 1 - self.now())
        if self.now() != expires_ms - 1:
            self.w.edge("lease_instant_missed")  # paused past it: the instant is gone
        else:
            early = await self.call("ledger", "claim", conv, owner_b, self.lease_ms, expires_ms - 1)
            if self.expect(early.ok and early.value is None,
                           f"claim of {conv} 1 ms before the lease expires answered {early.show()}", conv):
                self.w.edge("claim_blocked_before_expiry")
            await self.runtime.sleep_ms(1)
        if self.now() != expires_ms:
            self.w.edge("lease_instant_missed")
            return
        out = await self.call("ledger", "claim", conv, owner_b, self.lease_ms, expires_ms)
        taken = out.value if out.ok else None
        if not self.expect(taken is not None and taken.submission_id == sid and taken.owner_id == owner_b
                           and token.epoch < taken.epoch <= token.epoch + 1 + out.lost,
                           f"claim of {conv} at the expiry instant {expires_ms} answered {out.show()}", conv):
            return
        self.w.edge("claim_at_exact_lease_expiry")
        snap = await self.call("ledger", "load_recovery_snapshot", conv)
        if self.expect(snap.ok and [(s.submission_id, s.state, s.owner_id) for s in snap.value.submissions]
                       == [(sid, "running", owner_b)], f"snapshot of {conv} after the takeover answered "
                                                       f"{snap.show()}", conv):
            self.w.edge("snapshot_names_state")
        # The lapsed lease renewed until then; now the new owner's epoch fences it.
        renew = await self.call("ledger", "renew_ownership", token, self.lease_ms, expires_ms)
        if self.expect_rejected(renew, ("OwnershipLost",), f"renew of {sid} at its expiry instant", conv):
            self.w.edge("renew_at_expiry_lost")
        stale = [await self.call("ledger", "mark_input_applied", token, f"input:{sid}/0", 1),
                 await self.call("ledger", "reserve_settlement", token, self._settlement(token, {"outcome": "completed"})),
                 await self.call("ledger", "release_ownership", token)]
        if all(self.expect_rejected(o, ("OwnershipLost",), f"stale token of {sid}", conv) for o in stale):
            self.w.edge("stale_token_fenced")
        mat = await self.call("log", "materialize", conv, owner_b, taken.epoch)
        if not self.expect_ok(mat, f"materialize({conv}, {owner_b})", conv):
            return
        fenced = await self._append_one(conv, self.uid("batch"), owner_a, token.epoch, "run-warning", {"stale": 1})
        if self.expect_rejected(fenced, ("FenceRejected",), f"append by the superseded owner of {conv}", conv):
            self.w.edge("append_stale_epoch_fenced")
        older = await self.call("log", "materialize", conv, owner_a, token.epoch)
        self.expect_rejected(older, ("FenceRejected",), f"materialize at the superseded epoch of {conv}", conv)
        # The new owner's lease lapses with nobody claiming since: it renews
        # (same epoch, the lease from now on), as the peer's ledger does.
        if self.now() <= taken.lease_expires_ms:
            await self.runtime.sleep_ms(taken.lease_expires_ms + 1 - self.now())
        now = self.now()
        lapsed = await self.call("ledger", "renew_ownership", taken, self.lease_ms, now)
        if self.expect(lapsed.ok and lapsed.value.epoch == taken.epoch
                       and lapsed.value.lease_expires_ms >= now + self.lease_ms,
                       f"renew of {sid} after its lease lapsed unclaimed answered {lapsed.show()}", conv):
            self.w.edge("renew_after_lapse_unclaimed")
        record = self.settlement_record("completed", 3)
        reserved = await self.call("ledger", "reserve_settlement", taken, self._settlement(taken, record))
        if not self.expect_ok(reserved, f"reserve({sid})", conv):
            return
        if not await self._append_settled(conv, taken, sid, reserved.value.record_digest, record):
            return
        final = await self.call("ledger", "finalize_settlement", sid, self.now())
        if self.expect(final.ok and final.value.outcome == "completed", f"finalize({sid}): {final.show()}", conv):
            purge = await self.call("ledger", "purge_conversation", conv)
            self.expect(purge.ok, f"purge of {conv}: {purge.show()}", conv)

    async def _running_private(self, what: str, make_value: Callable[[], Any]) -> tuple[str, str, Claim] | None:
        """A private conversation's first submission (its input ``make_value()``,
        drawn after the conversation and key), admitted, claimed and its input
        applied: ``(conversation, submission, token)``, or None."""
        conv = self.private_conversation(what)
        key = self.uid("key")
        value = make_value()
        admission = await self.admit_ready(conv, key, value)
        if admission is None:
            return None
        sid = admission.submission_id
        token = await self.claim_token(conv, self.label, 0)
        if token is None or not await self._apply_input(conv, token, sid, key, value, 1):
            return None
        return conv, sid, token

    async def _settle_and_purge(self, conv: str, token: Claim, sid: str, record: Any) -> bool:
        """Take the log over at the token's epoch, settle ``sid`` with
        ``record`` (reserve, append, finalize) and purge the conversation."""
        mat = await self.call("log", "materialize", conv, self.label, token.epoch)
        reserved = await self.call("ledger", "reserve_settlement", token, self._settlement(token, record))
        if not (self.expect_ok(mat, f"materialize({conv})", conv) and self.expect_ok(reserved, "reserve", conv)):
            return False
        if not await self._append_settled(conv, token, sid, reserved.value.record_digest, record):
            return False
        final = await self.call("ledger", "finalize_settlement", sid, self.now())
        if not self.expect(final.ok and final.value.outcome == _outcome_of(record), f"finalize({sid}): {final.show()}",
                           conv):
            return False
        purge = await self.call("ledger", "purge_conversation", conv)
        return self.expect(purge.ok, f"purge of {conv}: {purge.show()}", conv)

    async def handoffs(self) -> None:
        """The peer's ``cooperativeHandoff``, one of its nine scenarios a
        time: a producer that applied the head's input and released it
        hands the lane to the next ready submission; only "ready" grants it
        (at a higher epoch); live, stale, abort, approval, gap,
        ready-prefix, unapplied and foreign grant nothing. Once the
        handed-to one settles an ordinary claim takes the deferred head
        again. Whatever is left is settled as a recovery would."""
        scenario = HANDOFF_SCENARIOS[self.rng.below(len(HANDOFF_SCENARIOS))]
        conv = self.private_conversation("h")
        first_key, first_value = self.uid("key"), {"handoff": scenario}
        first = await self.admit_ready(conv, first_key, first_value)
        if first is None:
            return
        seq = 1
        if scenario in ("gap", "ready-prefix"):
            seq += 1
            out = await self.call("ledger", "admit", conv, PRINCIPAL, self.uid("key"), {"between": 1}, self.now())
            if not self.expect_ok(out, f"admit between in {conv}", conv):
                return
            if scenario == "ready-prefix":
                ready = await self.call("ledger", "mark_ready", out.value.submission_id, self.now())
                if not self.expect_ok(ready, f"mark_ready between in {conv}", conv):
                    return
        # Every row admitted (and its log materialized) before the producer's claim.
        next_key, next_value = self.uid("key"), {"handed": True}
        nxt = await self.admit_ready(conv, next_key, next_value)
        if nxt is None:
            return
        token = await self.claim_token(conv, self.label, 0)
        if token is None:
            return
        if scenario != "unapplied" and not await self._apply_input(conv, token, first.submission_id, first_key,
                                                                   first_value, 1):
            return
        if scenario == "approval":
            out = await self.call("ledger", "suspend", token, (self.uid("call"),))
        elif scenario != "live":
            out = await self.call("ledger", "release_ownership", token)
        if scenario != "live" and not self.expect_ok(out, f"deferral of {first.submission_id}", conv):
            return
        if scenario == "abort":
            await self._abort(first.submission_id, "handoff")
        if scenario == "stale":
            between = await self.claim_token(conv, f"{self.label}/b", token.epoch)
            if between is None or not self.expect_ok(await self.call("ledger", "release_ownership", between),
                                                     f"release of {conv}", conv):
                return
        target = f"sub-{self.private_conversation('f')}-1" if scenario == "foreign" else nxt.submission_id
        handoff = ClaimHandoff(token.epoch, (first.submission_id,), target)
        owner = f"{self.label}/b"
        out = await self.call("ledger", "claim", conv, owner, self.lease_ms, self.now(), handoff)
        if not self.expect_ok(out, f"handoff claim of {conv} ({scenario})", conv):
            return
        granted = out.value
        if scenario != "ready":
            if self.expect(granted is None, f"handoff claim of {conv} in scenario {scenario} granted {granted!r}",
                           conv):
                self.w.edge(f"handoff_{scenario}_refused")
        elif granted is None and out.lost:
            self.w.edge("handoff_reply_lost")  # granted unheard: its retry finds the epoch moved on
        elif self.expect(granted is not None and granted.submission_id == nxt.submission_id
                         and granted.owner_id == owner and granted.epoch > token.epoch,
                         f"handoff claim of {conv} (ready) granted {granted!r}, expected {nxt.submission_id}", conv):
            self.w.edge("handoff_ready_granted")
            if not await self._apply_input(conv, granted, nxt.submission_id, next_key, next_value, seq + 1):
                return
            record = self._settlement(granted, self.settlement_record("completed", self._next()))
            mat = await self.call("log", "materialize", conv, owner, granted.epoch)
            reserved = await self.call("ledger", "reserve_settlement", granted, record)
            if not (self.expect_ok(mat, f"materialize({conv})", conv) and self.expect_ok(reserved, "reserve", conv)):
                return
            if not await self._append_settled(conv, granted, nxt.submission_id, reserved.value.record_digest, record):
                return
            final = await self.call("ledger", "finalize_settlement", nxt.submission_id, self.now())
            if not self.expect(final.ok and final.value.outcome == "completed",
                               f"finalize({nxt.submission_id}): {final.show()}", conv):
                return
            again = await self.claim_token(conv, self.label, granted.epoch)
            got = await self.call("ledger", "get", first.submission_id)
            if self.expect(again is not None and again.submission_id == first.submission_id and got.ok
                           and got.value is not None and got.value.receipt == first.receipt,
                           f"after the handed-to one settled, claim of {conv} gave {again!r}, row {got.show()}",
                           conv):
                self.w.edge("handoff_deferred_head_again")
        await self._settle_leftovers(conv)

    async def unknown_outcome(self) -> None:
        """A tool call whose outcome its owner cannot tell: the lane blocks
        (no claim grants it) until a resolution, idempotent, the first one
        winning, makes it claimable again, or an abort intent lets a cleanup
        owner settle it aborted (never replaying the tool)."""
        running = await self._running_private("u", lambda: {"tool": self._next()})
        if running is None:
            return
        conv, sid, token = running
        call_id = self.uid("call")
        marked = await self.call("ledger", "mark_unknown", token, call_id)
        if not self.expect(marked.ok and marked.value.tool_call_id == call_id and (
                not marked.value.replayed or marked.lost), f"mark_unknown({sid}) answered {marked.show()}", conv):
            return
        blocked = await self.call("ledger", "claim", conv, self.label, self.lease_ms, self.now())
        if not self.expect(blocked.ok and blocked.value is None, f"claim of {sid} with an unknown call answered "
                                                                  f"{blocked.show()}", conv):
            return
        self.w.edge("unknown_blocks_claim")
        resolution = self.rng.choice(("NeverHappened", "SafeToRetry", "CompletedWithResult", "abort"))
        if resolution == "abort":
            intent = await self._abort(sid, "the tool's outcome is unknown")
            if intent is None:
                return
            again = await self.call("ledger", "request_abort", sid, f"{self.label}/other", "second", self.now())
            if self.expect(again.ok and again.value.replayed and (again.value.author, again.value.reason,
                                                                  again.value.requested_at_ms)
                           == (intent.author, intent.reason, intent.requested_at_ms),
                           f"a second abort of claimed {sid} answered {again.show()}, first {intent!r}", conv):
                self.w.edge("abort_claimed_keeps_first_intent")
            cleanup = await self.claim_token(conv, self.label, token.epoch)
            if cleanup is None or not self.expect(cleanup.submission_id == sid, f"cleanup claim got {cleanup!r}",
                                                  conv):
                return
            self.w.edge("unknown_claimed_to_abort")
            token, record = cleanup, self.settlement_record("aborted", 1)
        else:
            result = {"rows": self._next()} if resolution == "CompletedWithResult" else None
            now = self.now()
            out = await self.call("ledger", "resolve_unknown", sid, call_id, resolution, self.label, result, now)
            want = (sid, call_id, resolution, self.label, now, result, 0)
            got = None if not out.ok else (out.value.submission_id, out.value.tool_call_id, out.value.resolution,
                                           out.value.resolver, out.value.resolved_at_ms, out.value.result,
                                           out.value.open_calls)
            if not self.expect(got == want and (not out.value.replayed or out.lost),
                               f"resolve_unknown({sid}, {resolution}) answered {out.show()}", conv):
                return
            again = await self.call("ledger", "resolve_unknown", sid, call_id, resolution, f"{self.label}/other",
                                    result, now + 1)
            if self.expect(again.ok and again.value.replayed and again.value.resolver == self.label
                           and again.value.resolved_at_ms == now, f"a repeat resolution answered {again.show()}",
                           conv):
                self.w.edge("unknown_resolution_replayed")
            other = "SafeToRetry" if resolution == "NeverHappened" else "NeverHappened"
            clash = await self.call("ledger", "resolve_unknown", sid, call_id, other, self.label, None, now + 2)
            if self.expect_rejected(clash, ("ResolutionConflict",), f"a contrary resolution of {sid}", conv):
                self.w.edge("unknown_resolution_conflict")
            token = await self.claim_token(conv, self.label, token.epoch)
            if token is None or not self.expect(token.submission_id == sid, f"claim after the resolution got "
                                                                            f"{token!r}", conv):
                return
            self.w.edge("unknown_resolved_claimable")
            record = self.settlement_record("completed", 1)
        await self._settle_and_purge(conv, token, sid, record)

    async def approvals(self) -> None:
        """The owner suspends on approvals: the lane blocks until the last
        decision (idempotent, the first one winning) resumes it; suspending
        again on decided calls resumes at once; an abort intent lets a
        cleanup owner settle it aborted instead."""
        running = await self._running_private("a", lambda: {"approve": self._next()})
        if running is None:
            return
        conv, sid, token = running
        calls = (self.uid("call"), self.uid("call"))
        out = await self.call("ledger", "suspend", token, calls)
        if not self.expect(out.ok and out.value.pending == calls and not out.value.resumed and (
                not out.value.replayed or out.lost), f"suspend({sid}) answered {out.show()}", conv):
            return
        blocked = await self.call("ledger", "claim", conv, self.label, self.lease_ms, self.now())
        if not self.expect(blocked.ok and blocked.value is None, f"claim of suspended {sid} answered {blocked.show()}",
                           conv):
            return
        self.w.edge("suspended_blocks_claim")
        if self.rng.below(4) == 0:
            if await self._abort(sid, "nobody answers") is None:
                return
            cleanup = await self.claim_token(conv, self.label, token.epoch)
            if cleanup is None or not self.expect(cleanup.submission_id == sid, f"cleanup claim got {cleanup!r}",
                                                  conv):
                return
            self.w.edge("suspended_claimed_to_abort")
            token, record = cleanup, self.settlement_record("aborted", 1)
        else:
            decisions = [self.rng.choice(("approved", "rejected")) for _ in calls]
            for index, (call_id, decision) in enumerate(zip(calls, decisions)):
                now = self.now()
                out = await self.call("ledger", "decide_approval", sid, call_id, decision, self.label, "looked", now)
                want = (decision, self.label, "looked", now, len(calls) - index - 1)
                got = None if not out.ok else (out.value.decision, out.value.resolver, out.value.reason,
                                               out.value.decided_at_ms, out.value.pending)
                if not self.expect(got == want and (not out.value.replayed or out.lost),
                                   f"decide_approval({sid}, {call_id}) answered {out.show()}", conv):
                    return
                if index == 0:
                    still = await self.call("ledger", "claim", conv, self.label, self.lease_ms, self.now())
                    self.expect(still.ok and still.value is None, f"claim with one approval pending answered "
                                                                  f"{still.show()}", conv)
                    again = await self.call("ledger", "decide_approval", sid, call_id, decision, f"{self.label}/2",
                                            "again", now + 1)
                    if self.expect(again.ok and again.value.replayed and again.value.resolver == self.label
                                   and again.value.decided_at_ms == now, f"a repeat decision answered {again.show()}",
                                   conv):
                        self.w.edge("approval_replayed")
                    contrary = "rejected" if decision == "approved" else "approved"
                    clash = await self.call("ledger", "decide_approval", sid, call_id, contrary, self.label, "no",
                                            now + 2)
                    if self.expect_rejected(clash, ("ApprovalConflict",), f"a contrary decision on {sid}", conv):
                        self.w.edge("approval_conflict")
                    # A recovering producer reads the decisions without a token.
                    snap = await self.call("ledger", "load_recovery_snapshot", conv)
                    mine = [s for s in snap.value.submissions if s.submission_id == sid] if snap.ok else []
                    if self.expect(len(mine) == 1 and isinstance(mine[0].approvals, dict)
                                   and (mine[0].approvals.get(call_id) or {}).get("decision") == decision
                                   and sum(v is None for v in mine[0].approvals.values()) == len(calls) - 1,
                                   f"snapshot of {conv} after deciding {call_id} answered {snap.show()}", conv):
                        self.w.edge("snapshot_shows_decisions")
            token = await self.claim_token(conv, self.label, token.epoch)
            if token is None or not self.expect(token.submission_id == sid, f"claim after the decisions got "
                                                                            f"{token!r}", conv):
                return
            self.w.edge("approval_resumed_claimable")
            again = await self.call("ledger", "suspend", token, calls)
            if not self.expect(again.ok and again.value.resumed and again.value.pending == (),
                               f"suspend on decided calls answered {again.show()}", conv):
                return
            self.w.edge("suspend_decided_resumes_at_once")
            token = await self.claim_token(conv, self.label, token.epoch)
            if token is None or not self.expect(token.submission_id == sid, f"claim after resuming got {token!r}",
                                                conv):
                return
            record = self.settlement_record("completed" if "rejected" not in decisions else "failed", 1)
        await self._settle_and_purge(conv, token, sid, record)

    async def joins(self) -> None:
        """A claimed host takes the ready submissions behind it: the prefix up
        to a gap (an unready one), past a settled (aborted) one; a follower is
        never aborted alone; joined ones settle with the host, a reverted one
        goes back to ready."""
        conv = self.private_conversation("j")
        admitted = []
        third = self.rng.choice(("ready", "unready", "aborted"))
        for i in range(4):
            key, value = self.uid("key"), {"join": self._next(), "i": i}
            if i == 2 and third == "unready":
                out = await self.call("ledger", "admit", conv, PRINCIPAL, key, value, self.now())
                if not self.expect_ok(out, f"admit({conv})", conv):
                    return
                admission = out.value
            else:
                admission = await self.admit_ready(conv, key, value)
                if admission is None:
                    return
            admitted.append((admission.submission_id, key, value))
        if third == "aborted" and await self._abort(admitted[2][0], "not needed") is None:
            return
        host_id, key, value = admitted[0]
        token = await self.claim_token(conv, self.label, 0)
        if token is None or not self.expect(token.submission_id == host_id, f"claim got {token!r}", conv):
            return
        if not await self._apply_input(conv, token, host_id, key, value, 1):
            return
        want = {"ready": (1, 2, 3), "unready": (1,), "aborted": (1, 3)}[third]
        followers = tuple(admitted[i][0] for i in want)
        # Limit 1, then 8, then again: each answers only what it took (an
        # already joining row is not answered again); after a lost reply the
        # retry took nothing.
        for limit, took in ((1, followers[:1]), (8, followers[1:]), (8, ())):
            batch = await self.call("ledger", "begin_join", token, limit)
            if not self.expect(batch.ok and (batch.value.follower_ids, batch.value.replayed) in (
                    (took, not took), *((((), True),) if batch.lost else ())),
                    f"begin_join({host_id}, {limit}) answered {batch.show()}, expected {took}", conv):
                return
        self.w.edge({"ready": "join_took_ready_prefix", "unready": "join_stopped_at_gap",
                     "aborted": "join_passed_aborted"}[third])
        refused = await self.call("ledger", "request_abort", followers[0], self.label, "alone", self.now())
        if self.expect_rejected(refused, ("JoinedToHost",), f"abort of joining {followers[0]}", conv):
            self.w.edge("joined_abort_refused")
        revert = followers[-1] if len(followers) > 1 and self.rng.below(2) else None
        for fid in followers:
            if fid == revert:
                out = await self.call("ledger", "revert_join", token, fid)
                if self.expect_ok(out, f"revert_join({fid})", conv):
                    self.w.edge("join_reverted")
                continue
            fvalue = next(v for s_, _, v in admitted if s_ == fid)
            appended = await self._append_one(conv, f"input:{fid}", self.label, token.epoch, "input",
                                              {"submissionId": fid, "input": fvalue, "joinedTo": host_id})
            if not self.expect_ok(appended, f"append of {fid}'s input", conv):
                return
            seq = appended.value.first_seq
            marked = await self.call("ledger", "mark_joined", token, fid, f"input:{fid}/0", seq)
            if not self.expect(marked.ok and marked.value.seq == seq and marked.value.host_submission_id == host_id,
                               f"mark_joined({fid}) answered {marked.show()}", conv):
                return
            self.w.edge("follower_joined")
            if fid == followers[0]:
                kept = await self.call("ledger", "revert_join", token, fid)
                row = await self.call("ledger", "get", fid)
                if self.expect(kept.ok and row.ok and (row.value.join_host, row.value.joined_seq) == (host_id, seq),
                               f"revert_join of joined {fid} answered {kept.show()}, then {row.show()}", conv):
                    self.w.edge("join_revert_of_joined_kept")
        record = self.settlement_record("completed", 1)
        reserved = await self.call("ledger", "reserve_settlement", token, self._settlement(token, record))
        if not self.expect_ok(reserved, "reserve", conv):
            return
        if not await self._append_settled(conv, token, host_id, reserved.value.record_digest, record):
            return
        final = await self.call("ledger", "finalize_settlement", host_id, self.now())
        if not self.expect(final.ok and final.value.outcome == "completed", f"finalize({host_id}): {final.show()}",
                           conv):
            return
        joined = [fid for fid in followers if fid != revert]
        rows = [await self.call("ledger", "get", fid) for fid in joined]
        if self.expect(all(r.ok and r.value.outcome == "completed" and r.value.settled_at_ms == final.value.settled_at_ms
                           and {k: v for k, v in r.value.reserved_record["payload"].items()
                                if k not in _SETTLEMENT_IDS} == {"outcome": "completed"}
                           and r.value.reserved_record["payload"]["receiptId"] == r.value.receipt
                           for r in rows),
                       f"joined followers of {host_id} after its settlement: {[r.show() for r in rows]}", conv):
            self.w.edge("joined_settled_with_host")
        # What is left (a reverted, an unready, one behind the gap) was never claimed: aborting settles it.
        for sid, _, _ in admitted[1:]:
            if sid in joined or (third == "aborted" and sid == admitted[2][0]):
                continue
            if await self._abort(sid, "cleanup") is None:
                return
        purge = await self.call("ledger", "purge_conversation", conv)
        self.expect(purge.ok, f"purge of {conv}: {purge.show()}", conv)

    async def _child_of_a_running_owner(self) -> None:
        """The running owner reserves a child budget before its input is
        applied; after a successor claims, the fenced owner's identical
        replay is answered as a replay (it creates nothing) while a new
        reservation by it is fenced; once settled, the owner's suspend and
        mark_unknown are ``SettlementConflict`` naming the outcome."""
        conv = self.private_conversation("cr")
        key, value = self.uid("key"), {"parent": self._next()}
        admission = await self.admit_ready(conv, key, value)
        if admission is None:
            return
        sid = admission.submission_id
        token = await self.claim_token(conv, self.label, 0)
        if token is None:
            return
        call_id = self.uid("call")
        allocation = {"turns": 4, "toolCalls": 8}
        first = await self.call("ledger", "reserve_child", token, call_id, allocation)
        if not self.expect(first.ok and first.value.replayed == (first.lost > 0),
                           f"reserve_child({sid}) by its running owner answered {first.show()}", conv):
            return
        self.w.edge("child_reserved_while_running")
        if not self.expect_ok(await self.call("ledger", "release_ownership", token), f"release({sid})", conv):
            return
        successor = await self.claim_token(conv, f"{self.label}/successor", token.epoch)
        if successor is None:
            return
        stale = await self.call("ledger", "reserve_child", token, call_id, _reordered(allocation))
        if self.expect(stale.ok and stale.value == attrs.evolve(first.value, replayed=True),
                       f"the fenced owner's identical reserve_child({sid}) answered {stale.show()}", conv):
            self.w.edge("child_replay_before_fence")
        fenced = await self.call("ledger", "reserve_child", token, f"{call_id}-new", allocation)
        self.expect_rejected(fenced, ("OwnershipLost",), f"a new reserve_child({sid}) by the fenced owner", conv)
        if not await self._apply_input(conv, successor, sid, key, value, 1):
            return
        record = self.settlement_record("completed", 1)
        mat = await self.call("log", "materialize", conv, successor.owner_id, successor.epoch)
        reserved = await self.call("ledger", "reserve_settlement", successor, self._settlement(successor, record))
        if not (self.expect_ok(mat, f"materialize({conv})", conv) and self.expect_ok(reserved, "reserve", conv)):
            return
        if not await self._append_settled(conv, successor, sid, reserved.value.record_digest, record):
            return
        final = await self.call("ledger", "finalize_settlement", sid, self.now())
        if not self.expect(final.ok and final.value.outcome == "completed", f"finalize({sid}): {final.show()}", conv):
            return
        late = await self.call("ledger", "suspend", successor, (f"{call_id}-ask",), ())
        if self.expect_rejected(late, ("SettlementConflict",), f"suspend of settled {sid}", conv):
            self.expect(late.error.existing_outcome == "completed", f"the conflict names {late.show()}", conv)
            self.w.edge("settled_suspend_conflict")
        purge = await self.call("ledger", "purge_conversation", conv)
        self.expect(purge.ok, f"purge of {conv}: {purge.show()}", conv)

    async def children(self) -> None:
        """A parent reserves a subagent's budget at a tool call (idempotent by
        the allocation's canonical digest), attaches the child submission, and
        the child's settlement freezes the accounting once. The parent
        suspends on its child (and, drawn, on an approval too): the lane
        blocks until the last of them — the child's release or the decision
        — wakes it; a child released before the suspension resumes it at
        once. The input marker is refused at another log position.

        The new choices come from a stream forked for this conversation, so
        the shared stream (and the other episodes' draws) is as before."""
        await self._child_of_a_running_owner()
        running = await self._running_private("c", lambda: {"parent": self._next()})
        if running is None:
            return
        conv, sid, token = running
        pick = self.world.streams.fork(f"workload/adversary/children/{conv}")
        # The input is at seq 1 of this fresh conversation: another position conflicts.
        elsewhere = pick.choice(((f"input:{sid}/0", 2), (f"input:{sid}/1", 1)))
        moved = await self.call("ledger", "mark_input_applied", token, *elsewhere)
        if self.expect_rejected(moved, ("InputMarkerConflict",), f"mark_input_applied({sid}) at {elsewhere}", conv):
            self.expect((moved.error.existing_record_id, moved.error.existing_seq) == (f"input:{sid}/0", 1),
                        f"the marker conflict of {sid} names {moved.show()}", conv)
            self.w.edge("input_marker_conflict")
        call_id = self.uid("call")
        allocation = {"tokens": 100 * (1 + self.rng.below(50)), "tools": ["search", "fetch"], "ms": 60_000}
        first = await self.call("ledger", "reserve_child", token, call_id, allocation)
        if not self.expect(first.ok and first.value.allocation == allocation and first.value.child_submission_id
                           is None, f"reserve_child({sid}) answered {first.show()}", conv):
            return
        again = await self.call("ledger", "reserve_child", token, call_id, _reordered(allocation))
        if self.expect(again.ok and again.value.replayed and again.value.allocation_digest
                       == first.value.allocation_digest, f"reserve_child again answered {again.show()}", conv):
            self.w.edge("child_reserved_key_order_irrelevant")
        clash = await self.call("ledger", "reserve_child", token, call_id, {**allocation, "tokens": 1})
        if self.expect_rejected(clash, ("ChildReservationConflict",), f"another allocation at {call_id}", conv):
            self.w.edge("child_allocation_conflict")
        child_conv = self.private_conversation("cc")
        child_key, child_value = self.uid("key"), {"child_of": sid}
        child = await self.admit_ready(child_conv, child_key, child_value, ParentLink(sid, call_id))
        if child is None:
            return
        orphan = await self.call("ledger", "admit", child_conv, PRINCIPAL, child_key, child_value, self.now(),
                                 pick.choice((None, ParentLink(sid, f"{call_id}-other"))))
        if self.expect_rejected(orphan, ("AdmissionConflict",), f"the child's admission under another parent", conv):
            self.expect(orphan.error.what == "parent", f"the conflict names {orphan.error.what!r}", conv)
            self.w.edge("admit_parent_conflict")
        attached = await self.call("ledger", "attach_child", token, call_id, child.submission_id)
        if not self.expect(attached.ok and attached.value.child_submission_id == child.submission_id,
                           f"attach_child answered {attached.show()}", conv):
            return
        self.w.edge("child_attached")
        other = await self.call("ledger", "attach_child", token, call_id, f"{child.submission_id}-other")
        if self.expect_rejected(other, ("ChildReservationConflict",), f"another child at {call_id}", conv):
            self.w.edge("child_other_conflict")
        # How the parent waits: on its child alone, on the child and an
        # approval (the decision first or last), or after the release.
        mode = pick.choice(("child", "approval-first", "release-first", "released-already"))
        asks = () if mode in ("child", "released-already") else (f"ask-{call_id}",)
        if pick.below(4) == 0:
            unknown = await self.call("ledger", "suspend", token, asks, (call_id, f"{call_id}-none"))
            if self.expect_rejected(unknown, ("UnknownChildReservation",), f"suspend({sid}) on a call with no child",
                                    conv):
                self.w.edge("child_suspend_unknown_call")
        accounting = {"tokens": self.rng.below(allocation["tokens"]), "calls": 1 + self.rng.below(3)}
        if mode == "released-already":
            if await self._abort(child.submission_id, "a short child") is None:
                return
            if not await self._release_child(conv, sid, call_id, accounting, awaited=False, pending=0):
                return
        suspended = await self.call("ledger", "suspend", token, asks, (call_id,))
        waiting = () if mode == "released-already" else (call_id,)
        if not self.expect(suspended.ok and suspended.value.pending == asks
                           and suspended.value.children_pending == waiting
                           and suspended.value.resumed == (not waiting) and (not suspended.value.replayed
                                                                             or suspended.lost),
                           f"suspend({sid}) on {asks} and child {call_id} answered {suspended.show()}", conv):
            return
        if mode == "released-already":
            self.w.edge("child_released_before_suspend_resumes")
        else:
            blocked = await self.call("ledger", "claim", conv, self.label, self.lease_ms, self.now())
            if not self.expect(blocked.ok and blocked.value is None,
                               f"claim of {sid} awaiting its child answered {blocked.show()}", conv):
                return
            snap = await self.call("ledger", "load_recovery_snapshot", conv)
            if self.expect(snap.ok and len(snap.value.submissions) == 1
                           and snap.value.submissions[0].children_awaited == 1
                           and snap.value.submissions[0].children == ((call_id, child.submission_id, False),),
                           f"snapshot of {conv} awaiting its child answered {snap.show()}", conv):
                self.w.edge("child_suspended_blocks_claim")
            if mode == "approval-first" and not await self._decide_one(conv, sid, asks[0], pending=1):
                return
            # The child runs and settles (aborted here: it was never claimed), then its accounting is frozen.
            if await self._abort(child.submission_id, "a short child") is None:
                return
            last = mode != "release-first"
            if not await self._release_child(conv, sid, call_id, accounting, awaited=True, pending=0 if last else 1):
                return
            if mode == "release-first":
                still = await self.call("ledger", "claim", conv, self.label, self.lease_ms, self.now())
                if not self.expect(still.ok and still.value is None,
                                   f"claim of {sid} with its approval pending answered {still.show()}", conv):
                    return
                snap = await self.call("ledger", "load_recovery_snapshot", conv)
                mine = [s for s in snap.value.submissions if s.submission_id == sid] if snap.ok else []
                if self.expect(len(mine) == 1 and mine[0].children_pending == ()
                               and mine[0].approvals == {call: None for call in asks}
                               and mine[0].state == "suspended"
                               and mine[0].child_states == ((call_id, child.submission_id, "settled", "aborted"),),
                               f"snapshot of {conv} with its child released answered {snap.show()}", conv):
                    self.w.edge("snapshot_child_released_approval_open")
                if not await self._decide_one(conv, sid, asks[0], pending=0):
                    return
        token = await self.claim_token(conv, self.label, token.epoch)
        if token is None or not self.expect(token.submission_id == sid, f"claim of {sid} after its child's release "
                                                                        f"got {token!r}", conv):
            return
        if mode != "released-already":
            self.w.edge("child_release_woke_parent" if mode != "release-first" else "child_decision_woke_parent")
        now = self.now()
        replay = await self.call("ledger", "release_child", sid, call_id, _reordered(accounting), now + 5)
        if self.expect(replay.ok and replay.value.replayed and replay.value.pending == 0,
                       f"release_child again answered {replay.show()}", conv):
            self.w.edge("child_released_once")
        clash = await self.call("ledger", "release_child", sid, call_id, {**accounting, "calls": 99}, now + 6)
        if self.expect_rejected(clash, ("ChildReservationConflict",), f"another accounting at {call_id}", conv):
            self.w.edge("child_accounting_conflict")
        record = self.settlement_record("completed", 1)
        reserved = await self.call("ledger", "reserve_settlement", token, self._settlement(token, record))
        if not self.expect_ok(reserved, "reserve", conv):
            return
        if not await self._append_settled(conv, token, sid, reserved.value.record_digest, record):
            return
        final = await self.call("ledger", "finalize_settlement", sid, self.now())
        if self.expect(final.ok and final.value.outcome == "completed", f"finalize({sid}): {final.show()}", conv):
            for c in (conv, child_conv):
                purge = await self.call("ledger", "purge_conversation", c)
                self.expect(purge.ok, f"purge of {c}: {purge.show()}", c)

    async def _release_child(self, conv: str, sid: str, call_id: str, accounting: dict, *, awaited: bool,
                             pending: int) -> bool:
        """The child settled: freeze its accounting once; the parent then
        awaits ``pending`` things (0 with ``awaited``: this release woke it)."""
        now = self.now()
        released = await self.call("ledger", "release_child", sid, call_id, accounting, now)
        return self.expect(released.ok and released.value.accounting == accounting
                           and released.value.released_at_ms == now and released.value.awaited == awaited
                           and released.value.pending == pending and (not released.value.replayed or released.lost),
                           f"release_child({sid}, {call_id}) answered {released.show()}, expected awaited={awaited} "
                           f"pending={pending}", conv)

    async def _decide_one(self, conv: str, sid: str, call_id: str, *, pending: int) -> bool:
        """Approve ``call_id``: the parent then awaits ``pending`` things."""
        decided = await self.call("ledger", "decide_approval", sid, call_id, "approved", self.label, "fine",
                                  self.now())
        return self.expect(decided.ok and decided.value.pending == pending,
                           f"decide_approval({sid}, {call_id}) answered {decided.show()}, expected pending={pending}",
                           conv)

    async def late_abort_race(self) -> None:
        """A second task of this process asks to abort while the first
        settles: whichever lands first, the ledger's final row must agree
        with both answers."""
        conv = self.private_conversation("r")
        key = self.uid("key")
        admission = await self.admit_ready(conv, key, {"race": True})
        if admission is None:
            return
        sid = admission.submission_id
        token = await self.claim_token(conv, self.label, 0)
        if token is None or not await self._apply_input(conv, token, sid, key, {"race": True}, 1):
            return
        author = f"{self.label}/racer"
        answer: list[Outcome] = []
        steps: list[str] = []

        async def racer() -> None:
            await self.sleep(0, 400)
            out = await self.call("ledger", "request_abort", sid, author, "racing", self.now())
            steps.append("abort")
            answer.append(out)

        self.runtime.spawn_on(self.node, "adversary:racer", racer())
        record = self.settlement_record("completed", 4)
        await self.sleep(0, 200)
        reserved = await self.call("ledger", "reserve_settlement", token, self._settlement(token, record))
        steps.append("reserved")
        if not reserved.ok and _matches(reserved.error, ("AbortRequested",)) and _typed(reserved.error):
            # The intent landed first: it is the authority, settle aborted.
            steps[-1] = "reserve refused (abort requested)"
            record = self.settlement_record("aborted", 4)
            reserved = await self.call("ledger", "reserve_settlement", token, self._settlement(token, record))
            steps.append("reserved aborted")
        if not self.expect_ok(reserved, f"reserve({sid})", conv):
            return
        await self.sleep(0, 200)
        if not await self._append_settled(conv, token, sid, reserved.value.record_digest, record):
            return
        await self.sleep(0, 200)
        final = await self.call("ledger", "finalize_settlement", sid, self.now())
        steps.append("finalized")
        if not self.expect(final.ok and final.value.outcome == _outcome_of(record),
                           f"finalize({sid}) racing an abort: {final.show()}", conv):
            return
        for _ in range(WAITS_MAX):  # the racer answers within its retries; the node's death ends both
            if answer:
                break
            await self.runtime.sleep_ms(50)
        if not answer:
            return
        # Which landed first is not known here (a lost reply retried after the
        # other call would reorder the answers): the row must agree with both.
        out = answer[0]
        if out.ok:
            ok = (out.value.author, out.value.reason) == (author, "racing")
        else:
            ok = _matches(out.error, ("AbortConflict", "SettlementConflict")) and _typed(out.error)
        got = await self.call("ledger", "get", sid)
        row = got.value if got.ok else None
        # An intent stored means an aborted outcome; a refused abort, the completed one. A
        # SettlementConflict on an aborted row: an attempt whose reply was lost stored the
        # intent, and its retry met the row settled (a settled row answers every write so).
        stored = out.ok or (row is not None and row.outcome == "aborted" and out.error is not None
                            and _matches(out.error, ("SettlementConflict",))
                            and getattr(out.error, "existing_outcome", None) == "aborted")
        ok = ok and row is not None and row.outcome == ("aborted" if stored else "completed") and (
            row.abort_author == (author if stored else None))
        if self.expect(ok, f"abort racing {sid}'s settlement answered {out.show()} ({' -> '.join(steps)}); "
                           f"the row holds outcome {getattr(row, 'outcome', None)} abort by "
                           f"{getattr(row, 'abort_author', None)}", conv):
            self.w.edge("abort_raced_settlement")

    async def ledger_shared(self) -> None:
        """All adversary nodes admit to, claim, settle, abort and purge the
        same conversations: only typed, monotonic answers are expected."""
        conv = self.shared_conversation()
        n = self._next()
        out = await self.call("ledger", "admit", conv, PRINCIPAL, f"{self.label}-{n}", {"n": n, "by": self.label},
                              self.now())
        if not self.expect_ok(out, f"shared admit({conv})", conv):
            return
        mat = await self.call("log", "materialize", conv, "admission", 0)
        self.allow(mat, ("FenceRejected",), f"materialize({conv}, admission, 0)", conv)
        if self.rng.below(10):  # now and then an admission never made ready: an unknown head
            ready = await self.call("ledger", "mark_ready", out.value.submission_id, self.now())
            self.expect_ok(ready, "mark_ready", conv)
        seen = self.max_epoch.get(conv, 0)
        claim = await self.call("ledger", "claim", conv, self.label, self.lease_ms, self.now())
        if not self.expect_ok(claim, f"shared claim({conv})", conv):
            return
        token = claim.value
        if token is None:
            await self._maybe_abort_head(conv)
            return
        self.expect(token.epoch > seen, f"claim of {conv} got epoch {token.epoch}, already saw {seen}", conv)
        self.max_epoch[conv] = token.epoch
        self.w.edge("shared_claimed")
        if self.rng.below(4) == 0:
            await self.sleep(self.lease_ms // 2, self.lease_ms * 2)  # stall: the lease may lapse and be taken
        await self._settle_shared(conv, token)
        if self.rng.below(3) == 0:
            await self._maybe_abort_head(conv)
        era = self.now() // self.w.era_ms
        if era >= 2 and self.rng.below(4) == 0:
            # Two eras back: no admission can still be on its way there (a
            # purged conversation id is never used again).
            old = f"{conv.rsplit('-e', 1)[0]}-e{era - 2}"
            purge = await self.call("ledger", "purge_conversation", old)
            self.allow(purge, ("PurgeRefused",), f"purge of {old}", old)

    async def _settle_shared(self, conv: str, token: Claim) -> None:
        sid = token.submission_id
        races = ("OwnershipLost", "FenceRejected", "AppendConflict", "AbortRequested")
        got = await self.call("ledger", "get", sid)
        if not self.expect(got.ok and got.value is not None, f"get({sid}) of a claimed head: {got.show()}", conv):
            return
        row = got.value
        mat = await self.call("log", "materialize", conv, self.label, token.epoch)
        if not self.allow(mat, races, f"materialize({conv}, {token.epoch})", conv):
            return
        found = await self.call("log", "lookup_batch", conv, f"input:{sid}")
        if not self.expect_ok(found, "lookup_batch", conv):
            return
        if found.value is None:
            payload = {"submissionId": sid, "input": row.input, "principalId": row.principal_id,
                       "idempotencyKey": row.idempotency_key, "queueSeq": row.queue_seq}
            out = await self._append_one(conv, f"input:{sid}", self.label, token.epoch, "input", payload)
            if not self.allow(out, races, f"append of input:{sid}", conv):
                return
            first_seq = out.value.first_seq
        else:
            first_seq = found.value.first_seq
        applied = await self.call("ledger", "mark_input_applied", token, f"input:{sid}/0", first_seq)
        if not self.allow(applied, races, f"mark_input_applied({sid})", conv):
            return
        if row.reserved_digest is not None:
            record = row.reserved_record  # the canonical record wins
        elif row.abort_author is not None:
            record = self.settlement_record("aborted", row.queue_seq)
        else:
            record = self.settlement_record(self.rng.choice(("completed", "failed")), row.queue_seq)
        reserved = await self.call("ledger", "reserve_settlement", token, self._settlement(token, record))
        if not self.allow(reserved, races, f"reserve({sid})", conv):
            return
        batch = await self.call("log", "lookup_batch", conv, f"settle:{sid}")
        if not self.expect_ok(batch, "lookup_batch", conv):
            return
        if batch.value is None:
            out = await self._append_exact(conv, f"settle:{sid}", self.label, token.epoch,
                                           self._settlement(token, record))
            if not self.allow(out, races, f"append of settle:{sid}", conv):
                return
        final = await self.call("ledger", "finalize_settlement", sid, self.now())
        if self.expect(final.ok and final.value.outcome == _outcome_of(record)
                       and final.value.record_digest == reserved.value.record_digest,
                       f"finalize({sid}) of a reserved {_outcome_of(record)} answered {final.show()}", conv):
            self.w.edge("shared_settled")
        released = await self.call("ledger", "release_ownership", token)
        self.allow(released, ("OwnershipLost",), f"release({sid})", conv)

    async def _maybe_abort_head(self, conv: str) -> None:
        """A late abort of a random open submission, racing its settlement;
        an unready head gets the intent that makes it claimable."""
        snap = await self.call("ledger", "load_recovery_snapshot", conv)
        if not self.expect_ok(snap, f"load_recovery_snapshot({conv})", conv):
            return
        self.expect(snap.value.epoch >= self.max_epoch.get(conv, 0),
                    f"snapshot of {conv} says epoch {snap.value.epoch}, already saw {self.max_epoch.get(conv)}", conv)
        self.max_epoch[conv] = max(self.max_epoch.get(conv, 0), snap.value.epoch)
        open_work = snap.value.submissions
        if not open_work:
            return
        head = open_work[0]
        target = head if not head.ready and not head.abort_requested else self.rng.choice(open_work)
        out = await self.call("ledger", "request_abort", target.submission_id, self.label, "late", self.now())
        if self.allow(out, ("AbortConflict", "SettlementConflict", "UnknownSubmission"),
                      f"late abort of {target.submission_id}", conv):
            if target is head and not head.ready:
                self.w.edge("unready_head_aborted")

    # -- the conversation log -----------------------------------------------------------

    def envelope(self, record_id: str, producer: str, epoch: int, payload: Any, family: str = "model-output",
                 created_ms: int | None = None) -> RecordEnvelope:
        return RecordEnvelope(record_id, family, 1, self.now() if created_ms is None else created_ms, DEPLOYMENT,
                              payload, producer, epoch)

    async def read_checked(self, conv: str, after: int, limit: int, written: list[RecordEnvelope],
                           batches: list[str]) -> tuple | None:
        """A read whose answer must be exactly what was written; an answer a
        read fault may have damaged is read again (fail closed, never trusted)."""
        want_seqs = list(range(after + 1, min(after + limit, len(written)) + 1))
        for _ in range(8):
            fired = self.world.faults_fired
            out = await self.call("log", "read", conv, after, limit)
            if not self.expect_ok(out, f"log.read({conv}, {after}, {limit})", conv):
                return None
            records = out.value
            # Envelopes compare as values (a read decodes 1.0 back as 1, -0.0 as 0: equal numbers).
            good = [r.seq for r in records] == want_seqs and all(
                r.conversation_id == conv and r.batch_id == batches[r.seq - 1] and r.envelope == written[r.seq - 1]
                for r in records)
            if good:
                return records
            if self.world.faults_fired == fired:
                self.expect(False, f"log.read({conv}, after {after}, limit {limit}) answered seqs "
                                   f"{[r.seq for r in records][:4]}..{[r.seq for r in records][-3:]} "
                                   f"({len(records)}), wrote {len(written)}: expected {len(want_seqs)} "
                                   f"from {after + 1}, as written", conv)
                return None
            self.w.edge("damaged_reads_reread")
        return None

    async def long_log(self) -> None:
        """A log past one page, read on the default page, at and across page
        boundaries; every append conflict; digests at and inside batches;
        payloads on the SQLite spill threshold; deletion."""
        conv = f"g-{self.node.name}-{self.label}-{self._next()}"
        producer = self.label
        mat = await self.call("log", "materialize", conv, producer, 1)
        if not self.expect_ok(mat, f"materialize({conv})", conv):
            return
        written: list[RecordEnvelope] = []
        batches: list[str] = []
        boundaries: dict[int, str] = {0: ZERO_DIGEST}
        infos: list[tuple[str, int, int, str]] = []  # (batch id, first seq, last seq, tail digest)
        tail = (0, ZERO_DIGEST)
        # A node's first long log opens with a full batch (the record cap exactly).
        first = BATCH_RECORDS_MAX if self.w.long_logs.get(self.node.name) == 1 and self.node.incarnation == 1 else (
            self.rng.choice((BATCH_RECORDS_MAX, BATCH_RECORDS_MAX - 1, 200, 150)))
        # Batches of at most the record cap until the log is past one page,
        # then one of records at the spill sizes.
        over_page = PAGE_SIZE_MAX + self.rng.between(1, 40)
        sizes = [first]
        while sum(sizes) < over_page:
            sizes.append(min(BATCH_RECORDS_MAX, over_page - sum(sizes)))
        spill = len(sizes)
        sizes.append(3)
        for index, count in enumerate(sizes):
            batch_id = self.uid("batch")
            records = []
            for _ in range(count):
                n = len(written) + len(records) + 1
                payload = {"n": n} if index != spill else _sized(SPILL_BYTES + len(records) - 1, {"n": n, "k": "\ue000"})
                records.append(self.envelope(f"{conv}/r{n}", producer, 1, payload))
            request = FencedAppendRequest(conv, batch_id, producer, 1, tail[0], tail[1], tuple(records))
            out = await self.call("log", "append", request)
            if not self.expect(out.ok and out.value.first_seq == tail[0] + 1 and out.value.last_seq == tail[0] + count
                               and out.value.replayed == (out.lost > 0),
                               f"append of {count} records to {conv} at {tail[0]}: {out.show()}", conv):
                return
            written.extend(records)
            batches.extend([batch_id] * count)
            infos.append((batch_id, out.value.first_seq, out.value.last_seq, out.value.tail_digest))
            tail = (out.value.last_seq, out.value.tail_digest)
            boundaries[tail[0]] = tail[1]
            if count == BATCH_RECORDS_MAX:
                self.w.edge("batch_at_record_cap")
            if index == spill:
                self.w.edge("log_payload_at_spill_sizes")
                again = await self.call("log", "append", request)
                if self.expect(again.ok and again.value.replayed and (again.value.first_seq, again.value.last_seq,
                                                                      again.value.tail_digest) == (
                                   out.value.first_seq, out.value.last_seq, out.value.tail_digest),
                               f"identical append retry of {batch_id}: {again.show()}", conv):
                    self.w.edge("append_identical_retry_replayed")
                moved = FencedAppendRequest(conv, batch_id, producer, 1, tail[0], tail[1], request.records)
                clash = await self.call("log", "append", moved)
                if self.expect_rejected(clash, ("AppendConflict",), f"append of {batch_id} from another tail", conv):
                    if self.expect(clash.error.kind == "batch-digest", f"conflict kind {clash.error.kind}", conv):
                        self.w.edge("append_replay_other_tail_conflict")
                changed = FencedAppendRequest(conv, batch_id, producer, 1, tail[0], tail[1],
                                              (self.envelope(f"{conv}/other", producer, 1, {"other": 1}),))
                clash = await self.call("log", "append", changed)
                if self.expect_rejected(clash, ("AppendConflict",), f"append of {batch_id} with other content", conv):
                    self.expect(clash.error.kind == "batch-digest", f"conflict kind {clash.error.kind}", conv)
                    self.w.edge("append_batch_digest_conflict")
        self.w.edge("log_over_1024_records")
        await self._append_conflicts(conv, producer, tail, written)
        total = len(written)
        full = await self.read_checked(conv, 0, PAGE_SIZE_MAX, written, batches)
        if full is not None and len(full) == PAGE_SIZE_MAX:
            self.w.edge("read_full_default_page")
        rest = await self.read_checked(conv, PAGE_SIZE_MAX, PAGE_SIZE_MAX, written, batches)
        if rest is not None and len(rest) == total - PAGE_SIZE_MAX:
            self.w.edge("read_at_page_boundary")
        back = self.rng.between(1, 3)
        across = await self.read_checked(conv, PAGE_SIZE_MAX - back, back + self.rng.between(1, 4), written, batches)
        if across is not None:
            self.w.edge("read_across_page_boundary")
        for _ in range(2):
            after = self.rng.between(0, total)
            await self.read_checked(conv, after, self.rng.between(1, PAGE_SIZE_MAX), written, batches)
        past = [await self.call("log", "read", conv, total, PAGE_SIZE_MAX),
                await self.call("log", "read", conv, total + self.rng.between(1, 5000), 1)]
        if self.expect(all(o.ok and o.value == () for o in past), f"reads at and past the tail of {conv}: "
                                                                   f"{[o.show() for o in past]}", conv):
            self.w.edge("read_past_tail_empty")
        await self._observe_long(conv, written)
        illegal = [((conv, 0, 0), ("ReadLimitOutOfRange",)), ((conv, 0, PAGE_SIZE_MAX + 1), ("ReadLimitOutOfRange",)),
                   ((conv, -1, 5), ("ValueError",)), ((conv, 0, True), ("TypeError",)),
                   ((conv, 1.0, 5), ("TypeError",)), ((f"{conv}-none", 0, 5), ("NotMaterialized",))]
        for index in self.rng_sample(len(illegal), 3):
            args, names = illegal[index]
            self.expect_rejected(await self.call("log", "read", *args), names, f"log.read{args!r}", conv)
        self.w.edge("read_illegal_rejected")
        await self._digests(conv, boundaries, total, infos[self.rng.below(len(infos))])
        tail_now = await self.call("log", "inspect_tail", conv)
        self.expect(tail_now.ok and (tail_now.value.tail_seq, tail_now.value.tail_digest, tail_now.value.epoch)
                    == (*tail, 1), f"inspect_tail({conv}) answered {tail_now.show()}, the last append left {tail}",
                    conv)
        await self._takeover(conv, producer, tail)
        if self.rng.below(2) == 0:
            await self._delete_log(conv)

    async def _takeover(self, conv: str, producer: str, tail: tuple[int, str]) -> None:
        """An append's epoch must be exactly the log's: a higher epoch is
        fenced until it materializes (the takeover), then appends; the old
        producer is fenced from then on (another producer may append at the
        current epoch: an administrative append, not a takeover)."""
        successor = f"{producer}/next"
        last = await self.call("log", "inspect_tail", conv)
        if not self.expect_ok(last, f"inspect_tail({conv})", conv):
            return
        own = FencedAppendRequest(conv, self.uid("batch"), producer, 1, last.value.tail_seq, last.value.tail_digest,
                                  (self.envelope(f"{conv}/own-last", producer, 1, {"last": True}),))
        if not self.expect_ok(await self.call("log", "append", own), f"append of {own.batch_id} to {conv}", conv):
            return
        tail = (last.value.tail_seq + 1, tail[1])
        early = await self._append_one(conv, self.uid("batch"), successor, 2, "run-warning", {"early": True})
        if self.expect_rejected(early, ("FenceRejected",), f"append at epoch 2 by {successor} to {conv} before "
                                                           f"it took over", conv):
            self.w.edge("append_higher_epoch_fenced")
        taken = await self.call("log", "materialize", conv, successor, 2)
        if not self.expect(taken.ok, f"materialize {conv} at epoch 2 by {successor}: {taken.show()}", conv):
            return
        out = await self._append_one(conv, self.uid("batch"), successor, 2, "run-warning", {"takeover": True})
        if not self.expect(out.ok and out.value.first_seq == tail[0] + 1, f"append at epoch 2 by {successor} to "
                                                                         f"{conv}: {out.show()}", conv):
            return
        tail_now = await self.call("log", "inspect_tail", conv)
        if self.expect(tail_now.ok and tail_now.value.epoch == 2 and tail_now.value.tail_seq == tail[0] + 1,
                       f"inspect_tail({conv}) after a takeover: {tail_now.show()}", conv):
            self.w.edge("append_epoch_takeover")
        # The fence comes before a known batch id: the old owner's exact retry
        # of its committed batch is FenceRejected, not a replay.
        if self.expect_rejected(await self.call("log", "append", own), ("FenceRejected",),
                                f"the fenced owner's retry of its committed {own.batch_id} on {conv}", conv):
            self.w.edge("append_fenced_retry_refused")
        for who, epoch in ((producer, 1), (f"{producer}/rival", 1), (successor, 1), (successor, 3)):
            fenced = await self._append_one(conv, self.uid("batch"), who, epoch, "run-warning", {"late": who})
            if self.expect_rejected(fenced, ("FenceRejected",), f"append by {who} at epoch {epoch} after the "
                                                                 f"takeover of {conv}", conv):
                self.w.edge("append_stale_epoch_fenced")

    async def _append_conflicts(self, conv: str, producer: str, tail: tuple[int, str],
                                written: list[RecordEnvelope]) -> None:
        """Every way an append conflicts or is fenced, none of which may write."""
        reused = FencedAppendRequest(conv, self.uid("batch"), producer, 1, tail[0], tail[1],
                                     (self.envelope(written[self.rng.below(len(written))].record_id, producer, 1, {}),))
        twice = self.envelope(f"{conv}/twice", producer, 1, {})
        duplicated = FencedAppendRequest(conv, self.uid("batch"), producer, 1, tail[0], tail[1], (twice, twice))
        for request in (reused, duplicated):
            out = await self.call("log", "append", request)
            if self.expect_rejected(out, ("AppendConflict",), f"append reusing a record id in {conv}", conv):
                self.expect(out.error.kind == "record-identity", f"conflict kind {out.error.kind}", conv)
        self.w.edge("append_record_identity_conflict")
        # The tail is checked before record identity.
        stale_reuse = FencedAppendRequest(conv, self.uid("batch"), producer, 1, tail[0] - 1, tail[1], reused.records)
        out = await self.call("log", "append", stale_reuse)
        if self.expect_rejected(out, ("AppendConflict",), f"append reusing a record id at a stale tail of {conv}",
                                conv):
            if self.expect(out.error.kind == "tail", f"conflict kind {out.error.kind}, not tail", conv):
                self.w.edge("append_tail_before_identity")
        stale_seq = self.rng.between(0, tail[0] - 1)
        stale = FencedAppendRequest(conv, self.uid("batch"), producer, 1, stale_seq, ZERO_DIGEST,
                                    (self.envelope(f"{conv}/stale", producer, 1, {}),))
        out = await self.call("log", "append", stale)
        if self.expect_rejected(out, ("AppendConflict",), f"append at stale tail {stale_seq} of {conv}", conv):
            error = out.error
            if self.expect(error.kind == "tail" and (error.actual_tail_seq, error.actual_tail_digest) == tail,
                           f"tail conflict on {conv} carries {error.kind} {error.actual_tail_seq} "
                           f"{error.actual_tail_digest}, tail is {tail}", conv):
                self.w.edge("append_tail_conflict")
        over = tuple(self.envelope(f"{conv}/over{i}", producer, 1, i) for i in range(BATCH_RECORDS_MAX + 1))
        empty_and_over = [(FencedAppendRequest(conv, self.uid("batch"), producer, 1, tail[0], tail[1], over),
                           ("BatchTooLarge",)),
                          (FencedAppendRequest(conv, self.uid("batch"), producer, 1, tail[0], tail[1], ()),
                           ("ValueError",))]
        for request, names in empty_and_over:
            self.expect_rejected(await self.call("log", "append", request), names,
                                 f"append of {len(request.records)} records", conv)
        self.w.edge("batch_over_record_cap_rejected")
        if not self.w.byte_cap_probed:
            self.w.byte_cap_probed = True  # once a run: the encoder and the trace hash 8 MiB
            big = self.envelope(f"{conv}/big", producer, 1, "x" * BATCH_BYTES_MAX)
            out = await self.call("log", "append", FencedAppendRequest(conv, self.uid("batch"), producer, 1,
                                                                       tail[0], tail[1], (big,)))
            if self.expect_rejected(out, ("ValueError",), f"append of a batch over {BATCH_BYTES_MAX} bytes", conv):
                self.w.edge("batch_over_byte_cap_rejected")
        await self._bounds(conv, producer, tail)
        bad = [self.envelope(f"{conv}/v2", producer, 1, {}), self.envelope(f"{conv}/fam", producer, 1, {}),
               self.envelope(f"{conv}/who", "someone-else", 1, {}), self.envelope(f"{conv}/nan", producer, 1,
                                                                                 [float("nan")])]
        bad[0] = RecordEnvelope(bad[0].record_id, "input", 2, 0, DEPLOYMENT, {}, producer, 1)
        bad[1] = RecordEnvelope(bad[1].record_id, "no-such-family", 1, 0, DEPLOYMENT, {}, producer, 1)
        names = (("UnsupportedSchemaVersion",), ("UnsupportedSchemaVersion",), ("ValueError",), ("ValueError",))
        for envelope, want in zip(bad, names):
            out = await self.call("log", "append", FencedAppendRequest(conv, self.uid("batch"), producer, 1, tail[0],
                                                                       tail[1], (envelope,)))
            self.expect_rejected(out, want, f"append of a malformed record ({envelope.record_id})", conv)
        lower = FencedAppendRequest(conv, self.uid("batch"), producer, 0, tail[0], tail[1],
                                    (self.envelope(f"{conv}/e0", producer, 0, {}),))
        self.expect_rejected(await self.call("log", "append", lower), ("ValueError",), "append at epoch 0", conv)
        after = await self.call("log", "inspect_tail", conv)
        self.expect(after.ok and (after.value.tail_seq, after.value.tail_digest) == tail,
                    f"rejected appends moved the tail of {conv}: {after.show()}, was {tail}", conv)

    async def _bounds(self, conv: str, producer: str, tail: tuple[int, str]) -> None:
        """The canonical-JSON bounds the log applies to an envelope (depth 64,
        1,000,001 values, the envelope itself counted): one over each is the
        typed ``CanonicalJsonBoundsError`` naming the traversal bound, and
        writes nothing (the caller checks the tail after); once a run, an
        envelope of exactly 1,000,001 values is stored (then its own log is
        deleted)."""
        depth = ENVELOPE_DEPTH_BOUND
        nested: Any = 0
        for _ in range(depth):  # the envelope is the first container: its payload at depth 64 is the 65th
            nested = [nested]
        probes = [("depth", self.envelope(f"{conv}/deep", producer, 1, nested))]
        if not self.w.nodes_bound_probed:
            self.w.nodes_bound_probed = True  # once a run: a million values to encode, check and trace
            base = _values(self.envelope(f"{conv}/wide", producer, 1, []).to_json())
            probes.append(("nodes", self.envelope(f"{conv}/wide", producer, 1, [0] * (ENVELOPE_NODES_BOUND - base + 1))))
        for bound, envelope in probes:
            out = await self.call("log", "append", FencedAppendRequest(conv, self.uid("batch"), producer, 1, *tail,
                                                                       (envelope,)))
            if self.expect_rejected(out, ("CanonicalJsonBoundsError",), f"append of an envelope over the {bound} "
                                                                         f"bound", conv) and self.expect(
                    (out.error.kind, out.error.bound) == ("traversal", bound),
                    f"the bounds error names {out.error.kind} {out.error.bound}, not traversal {bound}", conv):
                self.w.edge(f"envelope_over_{bound}_bound_rejected")
        if len(probes) == 2:
            at = f"{conv}-at-bound"
            if not self.expect_ok(await self.call("log", "materialize", at, producer, 1), f"materialize({at})", at):
                return
            envelope = self.envelope(f"{at}/wide", producer, 1, [0] * (ENVELOPE_NODES_BOUND - base))
            out = await self.call("log", "append", FencedAppendRequest(at, self.uid("batch"), producer, 1, 0,
                                                                       ZERO_DIGEST, (envelope,)))
            if self.expect(out.ok and out.value.last_seq == 1, f"append of an envelope of exactly "
                                                               f"{ENVELOPE_NODES_BOUND} values: {out.show()}", at):
                self.w.edge("envelope_at_nodes_bound_stored")
            self.expect_ok(await self.call("log", "delete_conversation", at), f"delete of {at}", at)

    async def _digests(self, conv: str, boundaries: dict[int, str], total: int,
                       info: tuple[str, int, int, str]) -> None:
        for seq, digest in boundaries.items():
            out = await self.call("log", "digest_at", conv, seq)
            self.expect(out.ok and out.value == digest, f"digest_at({conv}, {seq}) at a batch boundary answered "
                                                        f"{out.show()}, the append said {digest}", conv)
        self.w.edge("digest_at_batch_boundary")
        inside = [seq for seq in (1, PAGE_SIZE_MAX // 2, total - 1, total - 2) if seq not in boundaries and 0 < seq]
        for seq in inside[:2]:
            out = await self.call("log", "digest_at", conv, seq)
            if self.expect(out.ok and out.value is None, f"digest_at({conv}, {seq}) inside a batch: {out.show()}",
                           conv):
                self.w.edge("digest_at_inside_batch")
        for seq in (total + 1, total + self.rng.between(2, 10_000), -1):
            out = await self.call("log", "digest_at", conv, seq)
            self.expect(out.ok and out.value is None, f"digest_at({conv}, {seq}) beyond the tail: {out.show()}",
                        conv)
        self.w.edge("digest_at_beyond_tail")
        missing = await self.call("log", "lookup_batch", conv, "no-such-batch")
        self.expect(missing.ok and missing.value is None, f"lookup_batch of a missing batch: {missing.show()}", conv)
        batch_id, first_seq, last_seq, digest = info
        found = await self.call("log", "lookup_batch", conv, batch_id)
        batch = found.value if found.ok else None
        if self.expect(batch is not None and (batch.batch_id, batch.first_seq, batch.last_seq, batch.tail_digest,
                                              batch.epoch) == (batch_id, first_seq, last_seq, digest, 1)
                       and batch.previous_tail_digest == boundaries[first_seq - 1],
                       f"lookup_batch({conv}, {batch_id}) answered {found.show()}, the append said "
                       f"{first_seq}..{last_seq} {digest}", conv):
            self.w.edge("lookup_batch_checked")

    async def _delete_log(self, conv: str) -> None:
        first = await self.call("log", "delete_conversation", conv)
        if not self.expect(first.ok and first.value is (first.lost == 0),
                           f"delete_conversation({conv}) answered {first.show()}", conv):
            return
        again = await self.call("log", "delete_conversation", conv)
        if self.expect(again.ok and again.value is False, f"second delete_conversation({conv}): {again.show()}",
                       conv):
            self.w.edge("conversation_deleted")
        reads = [await self.call("log", "read", conv, 0, 1), await self.call("log", "inspect_tail", conv),
                 await self.call("log", "digest_at", conv, 0)]
        batch = await self.call("log", "lookup_batch", conv, "anything")
        if all(self.expect_rejected(o, ("NotMaterialized",), f"read of deleted {conv}", conv) for o in reads) and (
                self.expect(batch.ok and batch.value is None, f"lookup_batch in deleted {conv}: {batch.show()}",
                            conv)):
            self.w.edge("deleted_conversation_unreadable")

    async def observed(self, conv: str, after: str | None, want: list[tuple[int, str]], what: str) -> tuple | None:
        """``observe(conv, after)``, whose answer must be exactly ``want``
        (seq, record id), in order, each record with an offset (a str)."""
        out = await self.call("log", "observe", conv, after)
        if not self.expect_ok(out, what, conv):
            return None
        got = [(r.seq, r.envelope.record_id) for r in out.value]
        if not self.expect(got == want and all(type(r.offset) is str for r in out.value),
                           f"{what} answered {got[:4]}..{got[-2:]} ({len(got)}), expected {want[:4]}..{want[-2:]} "
                           f"({len(want)}), each with an offset", conv):
            return None
        return out.value

    async def observe_log(self) -> None:
        """Observation (``observe``): from the start, from a record's offset
        (exactly the records after it), from the tail's (nothing), again
        after an append (resumed), a malformed and another conversation's
        offset refused typed, an unknown conversation; then the offset is
        stored for the next incarnation to resume from."""
        conv = f"o-{self.node.name}-{self.label}-{self._next()}"
        producer = self.label
        if not self.expect_ok(await self.call("log", "materialize", conv, producer, 1), f"materialize({conv})", conv):
            return
        written: list[tuple[int, str]] = []
        tail = (0, ZERO_DIGEST)
        for _ in range(self.rng.between(2, 4)):
            records = tuple(self.envelope(f"{conv}/r{len(written) + i + 1}", producer, 1, {"n": len(written) + i})
                            for i in range(self.rng.between(1, 5)))
            out = await self.call("log", "append", FencedAppendRequest(conv, self.uid("batch"), producer, 1, *tail,
                                                                       records))
            if not self.expect(out.ok, f"append to {conv}: {out.show()}", conv):
                return
            written += [(tail[0] + i + 1, r.record_id) for i, r in enumerate(records)]
            tail = (out.value.last_seq, out.value.tail_digest)
        everything = await self.observed(conv, None, written, f"observe({conv}) from the start")
        if everything is None:
            return
        self.w.edge("observe_from_start")
        index = self.rng.below(len(written))
        offset = everything[index].offset
        if await self.observed(conv, offset, written[index + 1:],
                               f"observe({conv}) after record {index + 1}") is not None:
            self.w.edge("observe_from_offset")
        if await self.observed(conv, everything[-1].offset, [], f"observe({conv}) after its tail") is not None:
            self.w.edge("observe_at_tail_empty")
        more = self.envelope(f"{conv}/more", producer, 1, {"more": True})
        out = await self.call("log", "append", FencedAppendRequest(conv, self.uid("batch"), producer, 1, *tail,
                                                                   (more,)))
        if self.expect(out.ok, f"append to {conv}: {out.show()}", conv):
            written.append((out.value.last_seq, more.record_id))
            if await self.observed(conv, offset, written[index + 1:],
                                   f"observe({conv}) resumed after an append") is not None:
                self.w.edge("observe_resumed_after_append")
        # Offsets this store never handed out for this conversation.
        malformed = (offset + "~", "not-an-offset", "", 7)
        junk = malformed[self.rng.below(len(malformed))]
        if self.expect_rejected(await self.call("log", "observe", conv, junk), ("MalformedOffset",),
                                f"observe({conv}, {junk!r}) from a malformed offset", conv):
            self.w.edge("observe_malformed_offset_rejected")
        other = f"{conv}-other"
        if self.expect_ok(await self.call("log", "materialize", other, producer, 1), f"materialize({other})", other):
            one = self.envelope(f"{other}/r1", producer, 1, {"other": True})
            out = await self.call("log", "append", FencedAppendRequest(other, self.uid("batch"), producer, 1, 0,
                                                                       ZERO_DIGEST, (one,)))
            theirs = await self.observed(other, None, [(1, one.record_id)], f"observe({other})") if out.ok else None
            if theirs and self.expect_rejected(await self.call("log", "observe", conv, theirs[0].offset),
                                               ("MalformedOffset",), f"observe({conv}) from {other}'s offset", conv):
                self.w.edge("observe_foreign_offset_rejected")
            self.expect_ok(await self.call("log", "delete_conversation", other), f"delete of {other}", other)
        if self.expect_rejected(await self.call("log", "observe", f"{conv}-none"), ("NotMaterialized",),
                                f"observe of {conv}-none", conv):
            self.w.edge("observe_unknown_conversation_rejected")
        self.w.saved_offsets[self.node.name] = (conv, offset, index + 1)

    async def _observe_long(self, conv: str, written: list[RecordEnvelope]) -> None:
        """A log past one page observed whole, then from an offset just
        before the page boundary (the stream pages on past it)."""
        want = [(seq, envelope.record_id) for seq, envelope in enumerate(written, 1)]
        everything = await self.observed(conv, None, want, f"observe({conv}), a log past one page")
        if everything is None:
            return
        index = PAGE_SIZE_MAX - self.rng.between(1, 3)
        if await self.observed(conv, everything[index - 1].offset, want[index:],
                               f"observe({conv}) after record {index}, across the page boundary") is not None:
            self.w.edge("observe_long_log")

    async def _resume_observation(self) -> None:
        """A new incarnation resumes its predecessor's observation from the
        stored offset: the records after it, up to the tail, in order."""
        saved = self.w.saved_offsets.pop(self.node.name, None)
        if saved is None:
            return
        conv, offset, seq = saved
        tail = await self.call("log", "inspect_tail", conv)
        if not self.expect_ok(tail, f"inspect_tail({conv})", conv):
            return
        out = await self.call("log", "observe", conv, offset)
        if not self.expect_ok(out, f"observe({conv}) resumed from a stored offset", conv):
            return
        seqs = [r.seq for r in out.value]
        if self.expect(seqs == list(range(seq + 1, tail.value.tail_seq + 1)),
                       f"observe({conv}) resumed after record {seq} answered seqs {seqs}, the tail is "
                       f"{tail.value.tail_seq}", conv):
            self.w.edge("observe_resumed_after_restart")

    async def churn(self) -> None:
        """Many small writes, each checked against the one before: a CAS
        counter on a private key and a log grown a few records at a time.
        Every write the store acknowledged must still be there at the next
        (a store that forgets one, beyond its contract, is caught here)."""
        key = self.private_keys[0]
        for _ in range(self.rng.between(5, 15)):
            known = self.known.get(key, UNKNOWN)
            if known is UNKNOWN:
                load = await self.call("ds", "load", key)
                if not self.expect_ok(load, f"ds.load({key!r})", key):
                    return
                known = None if load.value is None else (load.value.revision, load.value.contract_version,
                                                         load.value.payload)
                self.known[key] = known
            revision = 0 if known is None else known[0]
            out = await self.ds_save(key, DurableStateWrite(1, {"count": revision + 1}), revision)
            if not out.ok:
                return
        conv = f"c-{self.node.name}-{self.label}-{self._next()}"
        if not self.expect_ok(await self.call("log", "materialize", conv, self.label, 1), "materialize", conv):
            return
        written: list[RecordEnvelope] = []
        batches: list[str] = []
        tail = (0, ZERO_DIGEST)
        for _ in range(self.rng.between(10, 30)):
            batch_id = self.uid("batch")
            records = tuple(self.envelope(f"{conv}/r{len(written) + i + 1}", self.label, 1, {"i": len(written) + i})
                            for i in range(self.rng.between(1, 3)))
            out = await self.call("log", "append", FencedAppendRequest(conv, batch_id, self.label, 1, *tail,
                                                                       records))
            if not self.expect(out.ok and out.value.first_seq == tail[0] + 1, f"append of {len(records)} to {conv} "
                                                                             f"at tail {tail[0]}: {out.show()}", conv):
                return
            written.extend(records)
            batches.extend([batch_id] * len(records))
            tail = (out.value.last_seq, out.value.tail_digest)
        await self.read_checked(conv, 0, PAGE_SIZE_MAX, written, batches)
        await self._recreated_same_length(conv, tail)

    async def _recreated_same_length(self, conv: str, stale: tuple[int, str]) -> None:
        """A writer whose tail is right by its sequence number only: the log
        was deleted and re-created by another producer, regrown to the same
        length with other records. The stale writer's append names the right
        tail seq and the old history's digest, and must be refused as a
        ``tail`` conflict carrying the new tail (the digest is what tells
        the two histories apart)."""
        gone = await self.call("log", "delete_conversation", conv)
        if not self.expect(gone.ok, f"delete_conversation({conv}) answered {gone.show()}", conv):
            return
        successor = f"{self.label}/recreated"
        if not self.expect_ok(await self.call("log", "materialize", conv, successor, 1), "re-materialize", conv):
            return
        records = tuple(self.envelope(f"{conv}/again{i + 1}", successor, 1, {"again": i}) for i in range(stale[0]))
        out = await self.call("log", "append", FencedAppendRequest(conv, self.uid("batch"), successor, 1, 0,
                                                                   ZERO_DIGEST, records))
        if not self.expect(out.ok and out.value.last_seq == stale[0], f"append of {len(records)} to re-created "
                                                                     f"{conv}: {out.show()}", conv):
            return
        fresh = (out.value.last_seq, out.value.tail_digest)
        late = FencedAppendRequest(conv, self.uid("batch"), successor, 1, stale[0], stale[1],
                                   (self.envelope(f"{conv}/late", successor, 1, {"late": True}),))
        clash = await self.call("log", "append", late)
        if self.expect_rejected(clash, ("AppendConflict",), f"append at the old history's tail {stale[0]} of "
                                                            f"re-created {conv}", conv):
            error = clash.error
            if self.expect(error.kind == "tail" and (error.actual_tail_seq, error.actual_tail_digest) == fresh,
                           f"stale-digest conflict on {conv} carries {error.kind} {error.actual_tail_seq} "
                           f"{error.actual_tail_digest}, tail is {fresh}", conv):
                self.w.edge("append_stale_digest_conflict")

    # -- checkpoints -----------------------------------------------------------------------

    async def checkpoints(self) -> None:
        """Checkpoints at batch boundaries (and at 0), refused inside a
        batch, ahead of the tail, at an unsupported version; loads at and
        before a boundary."""
        conv = f"k-{self.node.name}-{self.label}-{self._next()}"
        producer = self.label
        mat = await self.call("log", "materialize", conv, producer, 1)
        if not self.expect_ok(mat, f"materialize({conv})", conv):
            return
        boundaries: dict[int, str] = {0: ZERO_DIGEST}
        tail = (0, ZERO_DIGEST)
        written: list[RecordEnvelope] = []
        batches: list[str] = []
        for count in (1, self.rng.between(2, 5), self.rng.between(2, 5)):
            batch_id = self.uid("batch")
            records = tuple(self.envelope(f"{conv}/r{tail[0] + i + 1}", producer, 1, {"i": i, "f": FLOAT_EDGES[i]})
                            for i in range(count))
            out = await self.call("log", "append", FencedAppendRequest(conv, batch_id, producer, 1, tail[0],
                                                                       tail[1], records))
            if not self.expect_ok(out, f"append to {conv}", conv):
                return
            tail = (out.value.last_seq, out.value.tail_digest)
            boundaries[tail[0]] = tail[1]
            written.extend(records)
            batches.extend([batch_id] * count)
        # The whole short log, read back as written (a damaged answer is read again).
        await self.read_checked(conv, 0, self.rng.between(len(written), PAGE_SIZE_MAX), written, batches)
        seqs = sorted(boundaries)

        def checkpoint(seq: int, digest: str, snapshot: Any = None, version: int = 1) -> Checkpoint:
            return Checkpoint(conv, f"sub-{conv}", seq, digest, "adversary-engine", "d" * 64, "m" * 64, "t" * 64,
                              version, self.edge_payload(seq) if snapshot is None else snapshot, self.now())

        saved: dict[int, Checkpoint] = {}
        for seq in (0, seqs[2]):
            cp = checkpoint(seq, boundaries[seq])
            if self.expect_ok(await self.call("checkpoints", "save", cp), f"checkpoint save at {seq}", conv):
                saved[seq] = cp
        if 0 in saved:
            self.w.edge("checkpoint_at_zero")
        if seqs[2] in saved:
            self.w.edge("checkpoint_at_batch_boundary")
        inside = seqs[2] - 1 if seqs[2] - 1 not in boundaries else seqs[3] - 1
        rejected = [(checkpoint(inside, boundaries[seqs[1]]), "digest-mismatch", "checkpoint_inside_batch_rejected"),
                    (checkpoint(tail[0] + 1, tail[1]), "ahead-of-tail", "checkpoint_ahead_rejected"),
                    (checkpoint(tail[0], boundaries[seqs[1]]), "digest-mismatch", None),
                    (checkpoint(seqs[1], boundaries[seqs[1]], version=2), "unsupported-version",
                     "checkpoint_bad_version_rejected")]
        for cp, kind, edge in rejected:
            out = await self.call("checkpoints", "save", cp)
            if self.expect_rejected(out, ("CheckpointRejected",), f"checkpoint save ({kind}) at {cp.covered_seq}",
                                    conv) and self.expect(out.error.kind == kind, f"rejected as {out.error.kind}, "
                                                                                  f"not {kind}", conv) and edge:
                self.w.edge(edge)
        illegal = [checkpoint(-1, ZERO_DIGEST), checkpoint(0, "XYZ"), checkpoint(0, ZERO_DIGEST, [float("inf")]),
                   Checkpoint(f"{conv}-none", "s", 0, ZERO_DIGEST, "e", "d", "m", "t", 1, {}, 0)]
        names = (("ValueError",), ("ValueError",), ("ValueError",), ("NotMaterialized",))
        for cp, want in zip(illegal, names):
            self.expect_rejected(await self.call("checkpoints", "save", cp), want,
                                 f"checkpoint save of {cp.conversation_id} at {cp.covered_seq}", conv)
        self.w.edge("checkpoint_illegal_rejected")
        if seqs[2] not in saved or 0 not in saved:
            return
        at = await self.call("checkpoints", "load_latest", conv, seqs[2])
        if self.expect(at.ok and at.value is not None and at.value.covered_seq == seqs[2]
                       and _canonical_equal(at.value.to_json(), saved[seqs[2]].to_json()),
                       f"load_latest({conv}, {seqs[2]}) at a boundary answered {at.show()}", conv):
            self.w.edge("checkpoint_load_at_boundary")
        before = await self.call("checkpoints", "load_latest", conv, seqs[2] - 1)
        if self.expect(before.ok and before.value is not None and before.value.covered_seq == 0,
                       f"load_latest({conv}, {seqs[2] - 1}) just before a boundary answered {before.show()}", conv):
            self.w.edge("checkpoint_load_before_boundary")
        replacement = checkpoint(seqs[2], boundaries[seqs[2]], {"replaced": True})
        if self.expect_ok(await self.call("checkpoints", "save", replacement), "checkpoint overwrite", conv):
            out = await self.call("checkpoints", "load_latest", conv, 2 ** 53 - 1)
            if self.expect(out.ok and out.value is not None and out.value.snapshot == {"replaced": True},
                           f"load_latest after overwriting {seqs[2]} answered {out.show()}", conv):
                self.w.edge("checkpoint_overwritten")
        none = await self.call("checkpoints", "load_latest", conv, -1)
        self.expect(none.ok and none.value is None, f"load_latest of {conv} before its first checkpoint: "
                    f"{none.show()}", conv)
        self.expect_rejected(await self.call("checkpoints", "load_latest", f"{conv}-none", 5), ("NotMaterialized",),
                             f"load_latest of {conv}-none (a conversation the log does not have)", conv)

    # -- the content store and claim-check -------------------------------------------------

    async def content(self) -> None:
        """Empty, cap-sized and large blobs; idempotent put and delete;
        illegal refs; claim-check outputs at the inline cap."""
        marker = f"adv:{self.label}:{self._next()}:".encode()
        blobs = [("content_empty_blob", b""),
                 ("content_blob_at_cap_sizes", (marker + b"c" * INLINE_CAP)[:INLINE_CAP + self.rng.between(-1, 1)]),
                 ("content_large_blob", marker + bytes(self.rng.below(256) for _ in range(64)) * (
                     LARGE_BLOB_BYTES // 64))]
        name, data = blobs[self.rng.below(len(blobs))]
        ref = _ref(data)
        # The empty blob has one ref for every node: another may delete it
        # at any moment, so only typed answers are expected of it.
        shared = data == b""
        for _ in range(2):
            put = await self.call("content", "put", bytearray(data) if self.rng.below(2) else data)
            if not self.expect(put.ok and put.value == ref, f"content.put of {len(data)} bytes: {put.show()}, "
                                                            f"sha256 says {ref}", ref):
                return
        has = await self.call("content", "has", ref)
        got = await self.call("content", "get", ref)
        if shared:
            if self.expect(has.ok, f"content.has({ref}): {has.show()}", ref) and self.allow(
                    got, ("ContentMissing",), f"content.get({ref})", ref):
                self.expect(got.value == b"", f"the empty blob came back as {got.value!r:.40}", ref)
                self.w.edge(name)
            delete = await self.call("content", "delete", ref)
            self.expect(delete.ok, f"content.delete({ref}): {delete.show()}", ref)
        else:
            if not self.expect(has.ok and has.value is True and got.ok and got.value == data,
                               f"content has/get of {ref} ({len(data)} bytes): {has.show()} {got.show():.80}", ref):
                return
            self.w.edge(name)
            first = await self.call("content", "delete", ref)
            again = await self.call("content", "delete", ref)
            if self.expect(first.ok and first.value is (first.lost == 0) and again.ok and again.value is False,
                           f"content.delete of {ref} twice: {first.show()} {again.show()}", ref):
                self.w.edge("content_delete_idempotent")
            gone = await self.call("content", "get", ref)
            has = await self.call("content", "has", ref)
            if self.expect_rejected(gone, ("ContentMissing",), f"get of deleted {ref}", ref) and self.expect(
                    has.ok and has.value is False, f"has of deleted {ref}: {has.show()}", ref):
                self.w.edge("content_missing_after_delete")
        # (Not put(None): the trace describer measures len(data) before the store could answer.)
        illegal = [("put", ("text",), ("TypeError",)), ("put", ([1, 2],), ("TypeError",)),
                   ("get", ("sha256:nope",), ("ValueError",)), ("get", (5,), ("ValueError",)),
                   ("has", ("md5:" + "0" * 64,), ("ValueError",)), ("delete", ("",), ("ValueError",))]
        for index in self.rng_sample(len(illegal), 2):
            method, args, want = illegal[index]
            self.expect_rejected(await self.call("content", method, *args), want, f"content.{method}{args!r}", ref)
        self.w.edge("content_illegal_rejected")
        if self.w.claim_check:
            await self._claim_check()

    async def _claim_check(self) -> None:
        check = ClaimCheck(self.ports.content, self.ports.pins, now_ms=self.now, cap_bytes=INLINE_CAP)
        n = self._next()
        for size in (INLINE_CAP - 1, INLINE_CAP, INLINE_CAP + 1):
            output = _sized(size, {"by": self.label, "n": n, "edge": self.edge_payload(n)})
            step = f"{self.label}/step-{n}-{size}"
            recorded = await self.retrying("claim-check", lambda: check.on_output("adversary-tool", step, output))
            if size <= INLINE_CAP:
                if self.expect(recorded is output, f"claim-check of a {size}-byte output (cap {INLINE_CAP}) did not "
                                                   f"keep it inline: {recorded!r:.120}"):
                    self.w.edge("claimcheck_inline_at_cap")
                continue
            if not self.expect(is_claim_ref(recorded) and recorded["size"] == size,
                               f"claim-check of a {size}-byte output (cap {INLINE_CAP}) recorded {recorded!r:.160}"):
                continue
            back = await self.retrying("resolve_ref", lambda: resolve_ref(self.ports.content, recorded))
            if self.expect(_canonical_equal(back, output), f"claim-checked output {recorded['ref']} resolved to "
                                                            f"another value", recorded["ref"]):
                self.w.edge("claimcheck_ref_above_cap")

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
                                   ("ledger", "admit", (conv, PRINCIPAL, self.uid("k"), {}, 2 ** 63))):
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
