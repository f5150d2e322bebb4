"""Submission workloads: a client admitting work at least once, and workers
that recover, claim, process and settle it under leases.

``Submitters`` is the outside world: it sends a request every ``every_ms``
to one of ``conversations`` conversation slots (a slot moves to a new
conversation every ``conversation_lifetime_ms``, so a log's length does not
grow with the run), retries an unreceipted request with the same
idempotency key until it sees a receipt, and aborts some right after
admission. A drawn share of requests (``second_principal_share``) is sent
again by a second principal (``SECOND_PRINCIPAL``) under the same
idempotency key: the ledger scopes a key by conversation *and* principal,
so each must be its own submission (the client's expectation,
``admission-per-principal``). A drawn share of requests (``defer_share``) asks its worker to
defer it once its input is applied, and comes with the next request to
the same conversation right behind it: the work the lane is handed to
(itself deferred at the same share: a chain of deferred heads). New work stops at the heal instant.

``ConversationRetention`` is the operator's retention of the conversations
the client closed: a process that deletes each one's ledger rows and log a
while after its lifetime ended, so the stores hold a few lifetimes of
conversations however long the run.

``Workers`` are the processes (``worker-1`` ...): each recovers (a
fail-closed read of every conversation with nonterminal work, from the
latest usable checkpoint when ``checkpoints`` is on) and then claims,
processes and settles submissions (``model.submissions``).
"""
from __future__ import annotations

from typing import Any, Callable

from model.ledger.records import Claim
from model.retention import retire_conversation
from model.retry import error_name, is_retryable
from model.submissions import PAGE_SIZE_MAX, SubmissionClient, SubmissionWorker, worker_loop
from scenarios.adversaries.client import Expectations
from scenarios.invariants.effect_under_lease import EffectUnderLease
from scenarios.invariants.queue_order import QueueOrder
from scenarios.invariants.recovery_decisions import RecoveryDecisions
from faults.clocks import CLOCK_DRIFT_PPM_MAX, CLOCK_JUMP_SUM_MS_MAX, CLOCK_SYNC_MS, PPM
from sim.invariants import Checker
from sim.node import Node
from sim.workload import Workload
from sim.world import World

# Every ``fail_every``-th request fails in its second step (settled as failed,
# with exactly {errorTag, message}); of every ``abort_every`` requests, one is
# aborted by the client right after admission (mostly still queued: the client
# settles it through the log at once) and one a while later (``ABORT_LATE_MS``: mostly while it runs, so
# its owner must honour the intent at its next step).
FAIL_REMAINDER = 7
ABORT_REMAINDER = 3
ABORT_LATE_REMAINDER = 11
ABORT_LATE_MS = (200, 8_000)
# Stores on their own clock (``faults.clocks``), ahead of a worker's: one
# step in ``LEASE_EDGE_ONE_IN`` lasts its worker's lease plus less than the
# store's lead (a slow tool call, drawn from its own stream): it ends where
# the lease is over as the worker measures it from when it asked, but not
# yet by the expiry the store granted, read on the worker's clock. The
# worker must stop there (``effect-under-lease`` judges it on the store's clock).
# It is aimed past the lease's end by more than the contract lets the
# worker's clock lose over it (every jump, and two clocks' drift over the
# stall), and never across a sync of the clocks (a drifted clock steps
# back): landing on the very edge would judge the clocks' rates, not the
# worker's rule.
LEASE_EDGE_ONE_IN = 32


def lease_edge_margin_ms(stall_ms: int) -> int:
    """How much of a stall of ``stall_ms`` the contract lets a worker's
    clock lose against the store's: its jumps, and both clocks' drift."""
    return CLOCK_JUMP_SUM_MS_MAX + -(-2 * CLOCK_DRIFT_PPM_MAX * stall_ms // PPM) + 1


# The client's retry queue never holds more than this (it is drained before
# anything new is sent, so it holds one request at a time in practice).
PENDING_MAX = 1_000
# The principal every request is admitted under, and the one that sends a
# drawn share of them again under the same idempotency key.
PRINCIPAL, SECOND_PRINCIPAL = "client", "client-2"
# With ``held_admissions``: a client whose look at a conversation's log found
# it not materialized is paused before its own materialize at epoch 0 (a GC
# pause between two calls) until another process has taken the conversation
# over (materialized it at a claimed epoch: a recovery pass completed the
# admission's first half, a worker claimed it), polling every
# ``HOLD_POLL_MS``, for at most ``HOLD_MS_MAX``. Its late materialize is then
# refused as stale, which admission must take for "the conversation exists".
HOLD_POLL_MS = 1_000
HOLD_MS_MAX = 10 * 60_000


class HeldMaterializeLog:
    """The client's log port, its admission materialize held (above): a
    harness-side pause of the client process between two of its calls,
    never a change of what a call does."""

    def __init__(self, log: Any, runtime: Any, workload: "Submitters") -> None:
        self._log = log
        self._runtime = runtime
        self._workload = workload
        self._looked: set[str] = set()  # conversations its last look found unmaterialized (a few at most)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    async def inspect_tail(self, conversation_id: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._log.inspect_tail(conversation_id, *args, **kwargs)
        except Exception as error:
            if error_name(error) == "NotMaterialized":
                self._looked.add(conversation_id)
            raise

    async def materialize(self, conversation_id: str, producer_id: str, epoch: int, *args: Any, **kwargs: Any) -> Any:
        if epoch == 0 and conversation_id in self._looked:
            self._looked.discard(conversation_id)
            await self._workload.hold(conversation_id, self._runtime)
        return await self._log.materialize(conversation_id, producer_id, epoch, *args, **kwargs)


class AdmissionPerPrincipal(Expectations):
    """``admission-per-principal``: the client's expectation that one
    idempotency key sent by two principals to one conversation admits two
    submissions (the key is scoped by conversation and principal), one
    check per key both sent."""

    name = "admission-per-principal"


class StaleRenewalRefused(Expectations):
    """``stale-renewal-refused``: a renewal with a token its owner gave up
    (released), made while that token's lease time still runs, is refused
    as ``OwnershipLost``: the lease's time is not ownership. One check per
    such renewal answered."""

    name = "stale-renewal-refused"


class WorkFailed(Exception):
    name = "WorkFailed"


def work(*, fail_every: int = 0) -> Callable[[Any, int, str, int], Any]:
    """What a submission's steps compute: an echo; every ``fail_every``-th
    request (0: none) fails in its second step.

    ``step(request, index, process, now_ms)``: ``Workers`` binds the process
    running the attempt and its clock. A failure's message names both, as a
    real tool's error does (which replica gave up, when): two attempts at
    the same step fail with different diagnostics. A failure is not a step
    record (nothing is logged for it), so a successor that re-runs the
    failed step computes a record that differs from the one its predecessor
    reserved: the lifecycle must settle with the reserved one."""
    assert fail_every >= 0

    def step(request: Any, index: int, process: str = "", now_ms: int = 0) -> Any:
        if fail_every and request["n"] % fail_every == FAIL_REMAINDER and index == 1:
            raise WorkFailed(f"request {request['n']} cannot be served ({process} gave up at {now_ms} ms)")
        return {"step": index, "echo": request}

    return step


_echo = work  # the default work (a parameter of Workers shadows the name)


class Submitters(Workload):
    name = "submitters"
    NODE = "client"

    def __init__(self, *, conversations: int = 8, every_ms: tuple[int, int] = (1_000, 40_000),
                 conversation_lifetime_ms: int = 3_600_000, retry_ms: int = 2_000, abort_every: int = 0,
                 abort_late_ms: tuple[int, int] = ABORT_LATE_MS, group_share: float = 0.0, groups: int = 1,
                 defer_share: float = 0.0, second_principal_share: float = 0.0, admission_holds: bool = False,
                 name: str | None = None) -> None:
        assert conversations >= 1 and every_ms[0] > 0 and conversation_lifetime_ms > 0 and retry_ms > 0
        assert 0.0 <= group_share <= 1.0 and groups >= 1
        assert 0.0 <= defer_share <= 1.0, defer_share
        assert 0.0 <= second_principal_share <= 1.0, second_principal_share
        if name is not None:
            self.named(name)
        # The share of requests that ask their worker to defer them once
        # their input is applied (``"defer": true``), each drawn from its own
        # stream (``{instance}/defer/{n}``): no other draw of a seed moves.
        self.defer_share = defer_share
        self.slots = conversations
        self.every_ms = every_ms
        self.conversation_lifetime_ms = conversation_lifetime_ms
        self.retry_ms = retry_ms
        self.abort_every = abort_every
        self.abort_late_ms = abort_late_ms
        # The outside world's unreceipted requests: (conversation, key,
        # request), and a fourth member, the principal, for a second
        # principal's (absent: ``PRINCIPAL``).
        self.pending: list[tuple] = []
        self.submitted = 0
        # Conversation -> when the client closes it (its slot moves on), in
        # order of first use; kept only for a ``ConversationRetention``,
        # which takes them off as it deletes them.
        self.closes_ms: dict[str, int] = {}
        self.track_closes = False
        # Conversation -> the client's late aborts still in flight to it (its
        # unreceipted requests are ``pending``).
        self.aborting: dict[str, int] = {}
        # A drawn share of the requests is admitted under an admission group
        # (one of ``groups`` entity keys, ledger-wide: at most one unsettled
        # submission each) with opaque metadata naming it; idempotency key ->
        # (group, metadata), for the pending ones only.
        self.group_share = group_share
        self.groups = groups
        self.policies: dict[str, tuple[str, Any]] = {}
        self.grouped = 0  # admitted under a group
        self.group_refused = 0  # refused while the group's holder was open: given up, the expected answer
        # A drawn share of requests (each from its own stream,
        # ``{instance}/second-principal/{n}``: no other draw moves) is sent
        # again by ``SECOND_PRINCIPAL`` under the same key, right behind
        # the first; (conversation, key) -> {principal: submission} until
        # both are receipted and judged (bounded by the pending requests).
        self.second_principal_share = second_principal_share
        self.second_principal_sent = 0
        self.second_principal_judged = 0
        self._receipts: dict[tuple[str, str], dict[str, str]] = {}
        self.expectations = AdmissionPerPrincipal() if second_principal_share else None
        self.admission_holds = admission_holds
        self.held = 0  # admissions held before their materialize (``HeldMaterializeLog``)
        self.held_overtaken = 0  # ... whose conversation another process took over meanwhile
        self._holding: dict[str, bool] = {}  # conversation held -> taken over yet (one at a time: one client)

    def setup(self, world: World) -> None:
        self.world = world
        world.add_node(self.node_name(self.NODE), self._start, role="client")
        if self.admission_holds:
            world.trace.subscribe(("log.materialize",), self._on_materialize)

    def _on_materialize(self, event: Any) -> None:
        fields = event.fields
        if fields["conversation"] in self._holding and fields["epoch"] >= 1:
            self._holding[fields["conversation"]] = True

    async def hold(self, conversation_id: str, runtime: Any) -> None:
        """Pause until ``conversation_id`` is taken over, or ``HOLD_MS_MAX``."""
        self.held += 1
        self._holding[conversation_id] = False
        try:
            for _ in range(HOLD_MS_MAX // HOLD_POLL_MS):
                if self._holding[conversation_id]:
                    self.held_overtaken += 1
                    return
                await runtime.sleep_ms(HOLD_POLL_MS)
        finally:
            del self._holding[conversation_id]

    def conversation_id(self, slot: int, generation: int) -> str:
        """The conversation of ``slot`` in its ``generation``, in this instance's
        namespace (``submitters/conv-3-g0``)."""
        return f"{self.name}/conv-{slot}-g{generation}"

    def serves(self, conversation_id: str) -> bool:
        """Whether ``conversation_id`` is one of this instance's (what its workers serve)."""
        return conversation_id.startswith(f"{self.name}/")

    def checks(self) -> list[Checker]:
        return [] if self.expectations is None else [self.expectations]

    def metrics(self) -> dict[str, Any]:
        found: dict[str, Any] = {"submitted": self.submitted}
        if self.group_share:
            found.update(grouped=self.grouped, group_refused=self.group_refused)
        if self.second_principal_share:
            found.update(second_principal_sent=self.second_principal_sent,
                         second_principal_judged=self.second_principal_judged)
        if self.admission_holds:
            found.update(admissions_held=self.held, admissions_held_overtaken=self.held_overtaken)
        return found

    def _start(self, node: Node) -> None:
        self.node = node
        runtime = self.world.runtime
        ports = self.world.system.ports_for(node)
        # The client's machine's clock: what it stamps its admissions with.
        self.clock = self.world.runtime_for(node)
        log = HeldMaterializeLog(ports.log, runtime, self) if self.admission_holds else ports.log
        client = SubmissionClient(ports.ledger, log, now_ms=self.clock.now_ms, failpoints=ports.failpoints,
                                  probe=self.world.probe_for(node))
        runtime.spawn_on(node, "client", self._loop(client))

    async def _loop(self, client: SubmissionClient) -> None:
        """Until the heal instant; ends early only when the process dies."""
        world = self.world
        runtime = world.runtime
        workload = self.stream(world)
        while True:  # bounded by the heal instant (below), or the process dies
            # Requests sent but never receipted: again, same idempotency key.
            try:
                while self.pending:
                    assert len(self.pending) <= PENDING_MAX, len(self.pending)
                    conversation_id, key, request, *second = self.pending[0]
                    policy = None if second else self.policies.get(key)
                    if second:
                        admission = await client.submit(conversation_id, second[0], key, request)
                    elif policy is None:
                        admission = await client.submit(conversation_id, PRINCIPAL, key, request)
                    else:
                        admission = await self._submit_grouped(client, conversation_id, key, request, *policy)
                        if admission is None:
                            continue  # refused: the group's holder is open
                    if self.abort_every and request["n"] % self.abort_every == ABORT_REMAINDER:
                        await _abort(client, admission.submission_id)
                    elif self.abort_every and request["n"] % self.abort_every == ABORT_LATE_REMAINDER:
                        sid = admission.submission_id
                        delay_ms = self.stream_for(world, f"abort/{sid}").between(*self.abort_late_ms)
                        self._hold(conversation_id, 1)
                        runtime.spawn_on(self.node, f"abort:{sid}",
                                         self._late_abort(client, conversation_id, sid, delay_ms))
                    if self.second_principal_share:
                        self._receipted(conversation_id, key, second[0] if second else PRINCIPAL, admission)
                    self.admitted(client, conversation_id, key, request, admission)
                    self.pending.pop(0)
                    if not second and self.policies.pop(key, None) is not None:  # kept until receipted
                        self.grouped += 1
            except Exception as error:
                if not is_retryable(error):
                    raise
                await runtime.sleep_ms(self.retry_ms)  # a transient failure: the request stays pending
                continue
            await runtime.sleep_ms(workload.between(*self.every_ms))
            if runtime.now_ms() >= world.heal_at_ms:
                return
            self.submitted += 1
            generation = self.clock.now_ms() // self.conversation_lifetime_ms  # the client's own clock
            conversation_id = self.conversation_id(workload.below(self.slots), generation)
            if self.track_closes and conversation_id not in self.closes_ms:
                self.closes_ms[conversation_id] = (generation + 1) * self.conversation_lifetime_ms
            request = self.request(self.submitted, conversation_id)
            while self.defer_share and self.stream_for(world, f"defer/{self.submitted}").chance(self.defer_share):
                # A request to be deferred, and the next one to the same
                # conversation sent right behind it: the work its worker
                # hands the lane to (itself deferred, at the same share).
                self._enqueue(world, conversation_id, {**request, "defer": True})
                self.submitted += 1
                request = self.request(self.submitted, conversation_id)
            self._enqueue(world, conversation_id, request)
            if (self.second_principal_share
                    and self.stream_for(world, f"second-principal/{self.submitted}").chance(self.second_principal_share)):
                # The same request from another principal, under the same
                # key: its own submission, not a replay of the first.
                self.pending.append((conversation_id, f"req-{self.submitted}", request, SECOND_PRINCIPAL))
                self._receipts[(conversation_id, f"req-{self.submitted}")] = {}
                self.second_principal_sent += 1

    def _receipted(self, conversation_id: str, key: str, principal: str, admission: Any) -> None:
        """A receipt of a key a second principal also sends: once both
        principals hold one, each must name its own submission."""
        receipts = self._receipts.get((conversation_id, key))
        if receipts is None:
            return
        receipts[principal] = admission.submission_id
        if len(receipts) < 2:
            return
        del self._receipts[(conversation_id, key)]
        self.second_principal_judged += 1
        first, second = receipts[PRINCIPAL], receipts[SECOND_PRINCIPAL]
        self.expectations.expect(
            first != second,
            f"{conversation_id}: key {key!r} admitted by {PRINCIPAL!r} as {first} and by {SECOND_PRINCIPAL!r} as "
            f"{second}: one principal's admission answered another's (a key is scoped by principal too)",
            (first, second))

    def _enqueue(self, world: Any, conversation_id: str, request: Any) -> None:
        key = f"req-{self.submitted}"
        if self.group_share:
            # Its own stream per request: no other draw moves.
            draw = self.stream_for(world, f"admission-policy/{key}")
            if draw.chance(self.group_share):
                entity = draw.below(self.groups)
                self.policies[key] = (f"{self.name}/entity-work-{entity}", {"entity": entity, "request": key})
        self.pending.append((conversation_id, key, request))

    async def _submit_grouped(self, client: SubmissionClient, conversation_id: str, key: str, request: Any,
                              group: str, metadata: Any) -> Any:
        """Submit under the request's admission group; None when the group
        refused it (``AdmissionPolicyError``, occupied: nothing written),
        and the request is given up, counted."""
        try:
            admission = await client.submit(conversation_id, "client", key, request, admission_group=group,
                                            metadata=metadata)
        except Exception as error:
            if error_name(error) != "AdmissionPolicyError" or getattr(error, "reason", None) != "occupied":
                raise
            self.group_refused += 1
            self.pending.pop(0)
            del self.policies[key]
            self._receipts.pop((conversation_id, key), None)  # nothing of the first principal's to compare
            return None
        return admission

    def _hold(self, conversation_id: str, delta: int) -> None:
        held = self.aborting.get(conversation_id, 0) + delta
        assert held >= 0, (conversation_id, held)
        if held:
            self.aborting[conversation_id] = held
        else:
            del self.aborting[conversation_id]

    def closed(self, now_ms: int, ttl_ms: int) -> list[str]:
        """The conversations closed at least ``ttl_ms`` before ``now_ms`` that
        the client no longer writes to, in order of first use."""
        done = []
        writing = {entry[0] for entry in self.pending}
        for conversation_id, closes_ms in self.closes_ms.items():
            if closes_ms + ttl_ms > now_ms:
                break  # first use order is close order: the rest closed later
            if conversation_id not in writing and conversation_id not in self.aborting:
                done.append(conversation_id)
        return done


    def admitted(self, client: SubmissionClient, conversation_id: str, key: str, request: Any,
                 admission: Any) -> None:
        """After a request's receipt (a workload that follows up overrides it)."""

    def request(self, n: int, conversation_id: str) -> Any:
        """The ``n``-th request's input, to ``conversation_id`` (a workload of
        other requests overrides it)."""
        return {"n": n}

    async def _late_abort(self, client: SubmissionClient, conversation_id: str, submission_id: str,
                          delay_ms: int) -> None:
        """Abort ``submission_id`` after ``delay_ms``, retrying what a retry
        can clear; ends when the intent is durable or the abort is refused."""
        runtime = self.world.runtime
        try:
            await runtime.sleep_ms(delay_ms)
            while True:  # bounded: a transient failure clears (faults heal), or the process dies
                try:
                    await _abort(client, submission_id)
                    return
                except Exception as error:
                    if not is_retryable(error):
                        raise
                    await runtime.sleep_ms(self.retry_ms)
        finally:
            self._hold(conversation_id, -1)


async def _abort(client: SubmissionClient, submission_id: str) -> None:
    try:
        await client.abort(submission_id, "client", "no longer needed")
    except Exception as error:
        if getattr(type(error), "name", None) not in ("AbortConflict", "SettlementConflict", "JoinedToHost"):
            raise  # already settled or settling, or joined to a run: too late to abort, which is fine


class ConversationRetention(Workload):
    """Every ``every_ms``, a process (node ``{instance}/retention``) retires each
    conversation the client closed at least ``ttl_ms`` before and no longer
    writes to (``model.retention.retire_conversation``): its ledger rows,
    then its log. One that still has open work is tried again at the next
    pass; a pass that failed on a retryable error starts over ``retry_ms``
    later (both steps are idempotent)."""

    name = "conversation-retention"
    NODE = "retention"

    def __init__(self, submitters: Submitters, *, ttl_ms: int, every_ms: int, retry_ms: int) -> None:
        assert ttl_ms > 0 and every_ms > 0 and retry_ms > 0, (ttl_ms, every_ms, retry_ms)
        self.submitters = submitters
        submitters.track_closes = True
        self.ttl_ms = ttl_ms
        self.every_ms = every_ms
        self.retry_ms = retry_ms
        self.retired = 0
        self.held_open = 0  # passes' refusals: a closed conversation with open work
        self.audited = 0  # conversations audited before they went

    def setup(self, world: World) -> None:
        self.world = world
        world.add_node(self.node_name(self.NODE), self._start, role="operator")

    def metrics(self) -> dict[str, Any]:
        return {"conversations_retired": self.retired, "retirements_held_open": self.held_open,
                "conversations_audited_before_retirement": self.audited}

    def _start(self, node: Node) -> None:
        ports = self.world.system.ports_for(node)
        self.world.runtime.spawn_on(node, "retention", self._loop(ports.ledger, ports.log, self.world.runtime_for(node)))

    async def _loop(self, ledger: Any, log: Any, runtime: Any) -> None:
        """Forever (a process of the deployment): it ends when the run does.
        ``runtime``: its node's (a conversation's age is read on its clock)."""
        submitters = self.submitters
        while True:
            await runtime.sleep_ms(self.every_ms)
            for conversation_id in submitters.closed(runtime.now_ms(), self.ttl_ms):
                self._audit(conversation_id)
                try:
                    gone = await retire_conversation(ledger, log, conversation_id)
                except Exception as error:
                    if not is_retryable(error):
                        raise
                    await runtime.sleep_ms(self.retry_ms)  # the rest wait for the next pass
                    break
                if gone:
                    del submitters.closes_ms[conversation_id]
                    self.retired += 1
                else:
                    self.held_open += 1

    def _audit(self, conversation_id: str) -> None:
        """The harness's audit of a conversation about to go (read from the
        stores, outside the simulation), while its log and rows are still
        there to read: what the end-of-run audit would have checked of it.
        Only a settled one: with open work the purge refuses, and the
        conversation waits for a later pass (and audit)."""
        world = self.world
        view = world.system.audit_view()
        if any(submission.outcome is None for submission in view.submissions(conversation_id)):
            return
        with view.scoped((conversation_id,)) as scoped:
            world.invariants.audit_retiring(scoped)
        self.audited += 1


class Workers(Workload):
    name = "workers"
    # Its steps' effects are the ``work`` it is given, judged by
    # ``effect-under-lease`` (an agent's steps are model and tool calls).
    JUDGES_EFFECTS = True

    def __init__(self, count: int, *, lease_ms: int = 30_000, poll_ms: int = 2_000, retry_ms: int = 2_000,
                 step_delay_ms: tuple[int, int] = (50, 3_000), work: Callable[[Any, int, str, int], Any] | None = None,
                 steps: int = 2, checkpoints: bool = False, recovery_page_size: int = PAGE_SIZE_MAX,
                 serving: Any = None, stale_renewals: bool = False, name: str | None = None) -> None:
        """``serving``: the client workload whose conversations these workers
        serve (its ``serves(conversation_id)``); None: every conversation in
        the ledger (a stack with one kind of work). ``stale_renewals``: a
        process that deferred a head (released it unsettled) renews with the
        token it gave up at once, while that token's lease time still runs,
        as a late renewal of a careless owner would: the ledger must refuse
        it (``OwnershipLost``), judged by ``stale-renewal-refused``."""
        assert count >= 1 and lease_ms > 0 and steps >= 1, (count, lease_ms, steps)
        if name is not None:
            self.named(name)
        self.count = count
        self.serving = serving
        self.lease_ms = lease_ms
        self.poll_ms = poll_ms
        self.retry_ms = retry_ms
        self.step_delay_ms = step_delay_ms
        self.work = work if work is not None else _echo()
        self.steps = steps
        self.checkpoints = checkpoints
        self.recovery_page_size = recovery_page_size
        self.recoveries_from_checkpoint = 0
        self.recovery_decisions: dict[str, int] = {}  # decision -> how many the recovery passes made
        self.recovery_dispositions: dict[str, int] = {}  # repaired / deferred / unknown / none -> how many
        self.owners: dict[str, str] = {}  # owner (node label) -> the submission it claimed, until settled
        self.deferrals = 0  # heads released unsettled once their input was applied (``submission.deferred``)
        self.handoffs = 0  # claims a cooperative handoff granted
        self._effects: EffectUnderLease | None = None  # set by ``own_checks``
        self.stale_renewals = stale_renewals
        self.stale_checker = StaleRenewalRefused() if stale_renewals else None
        # With ``stale_renewals``: (owner, submission, epoch) -> the lease its
        # claim granted, until it is given up or settled (bounded by the
        # claims alive); owner -> its process's (node, ports, clock).
        self._claims: dict[tuple[str, str, int], int] = {}
        self._processes: dict[str, tuple[Node, Any, Any]] = {}
        self.stale_renewals_refused = 0
        self.stale_renewals_unanswered = 0  # a retryable failure: nothing to judge
        self.lease_edge_stalls = 0  # steps aimed past the lease, into the store clock's lead
        self._store_clock = False

    def setup(self, world: World) -> None:
        self.world = world
        world.trace.subscribe(("recovery.read",), self._on_recovery)
        world.trace.subscribe(("recovery.decision",), self._on_decision)
        world.trace.subscribe(("ledger.claim", "ledger.finalize_settlement"), self._track_owners)
        world.trace.subscribe(("submission.deferred",), self._on_deferred)
        for name in self.names:
            world.add_node(name, self._start)

    @property
    def names(self) -> tuple[str, ...]:
        """Its processes: ``{instance}/worker-1`` ... (settled with the stack)."""
        return tuple(self.node_name(f"worker-{i + 1}") for i in range(self.count))

    def nodes(self) -> tuple[str, ...]:
        return self.names

    def own_checks(self) -> list[Checker]:
        """What judges the workers' own conduct: queue order (one active
        head, handoffs) and the recovery passes' decisions."""
        stale = [] if self.stale_checker is None else [self.stale_checker]
        if not self.JUDGES_EFFECTS:
            return [QueueOrder(), RecoveryDecisions(), *stale]
        self._effects = EffectUnderLease()
        return [QueueOrder(), RecoveryDecisions(), self._effects, *stale]

    def checks(self) -> list[Checker]:
        """``own_checks``, scoped to the conversations the workers serve."""
        mine = self.own_checks()
        return [checker.scoped(self.serving.name) for checker in mine] if self.serving is not None else mine

    def metrics(self) -> dict[str, Any]:
        stale = {} if not self.stale_renewals else {"stale_renewals_refused": self.stale_renewals_refused,
                                                      "stale_renewals_unanswered": self.stale_renewals_unanswered}
        edge = {"lease_edge_stalls": self.lease_edge_stalls} if self._store_clock else {}
        return {"recoveries_from_checkpoint": self.recoveries_from_checkpoint,
                "deferrals": self.deferrals, "handoffs": self.handoffs, **stale, **edge,
                # The recovery passes' decisions (``model.recovery_decisions``), by name and by disposition.
                "recovery_decisions": dict(sorted(self.recovery_decisions.items())),
                "recovery_dispositions": dict(sorted(self.recovery_dispositions.items()))}

    def busy(self) -> dict[str, str]:
        """Which processes hold a claim right now (pauses prefer them)."""
        return self.owners

    def _start(self, node: Node) -> None:
        world = self.world
        runtime = world.runtime_for(node)  # the node's own clock
        ports = world.system.ports_for(node)
        streams = world.streams
        prefix = self.name
        step_delay_ms = self.step_delay_ms
        clocks = world.clocks
        store_clock = self._store_clock = bool(getattr(clocks, "store_clock", False))
        lease_ms = self.lease_ms

        steps_here = [0]  # this process's steps so far: a retried step draws afresh

        async def step_delay(submission_id: str, index: int) -> None:
            rng = streams.fork(f"{prefix}/{submission_id}/{index}")
            delay_ms = rng.between(*step_delay_ms)
            if store_clock:
                # Its own stream (a run on its callers' clocks draws nothing
                # here), per process and step: the step retried after the
                # stall cost its claim is not aimed again by the same draw.
                steps_here[0] += 1
                aim = streams.fork(f"{prefix}/{node.label}/{steps_here[0]}/lease-edge")
                lead_ms = clocks.store_now_ms() - runtime.now_ms()
                if aim.below(LEASE_EDGE_ONE_IN) == 0:
                    margin_ms = lease_edge_margin_ms(lease_ms + lead_ms)
                    true_ms = world.runtime.now_ms()
                    stall_ms = lease_ms + margin_ms + (aim.below(lead_ms - margin_ms) if lead_ms > margin_ms else 0)
                    if lead_ms > margin_ms and true_ms // CLOCK_SYNC_MS == (true_ms + stall_ms) // CLOCK_SYNC_MS:
                        delay_ms = stall_ms
                        self.lease_edge_stalls += 1
            await runtime.sleep_ms(delay_ms)

        work = self.work

        # The effect is judged on the clock that granted the lease: the
        # worker's own, whose readings the ledger took (its caller's clock),
        # or the store machine's (stores on their own clock).
        lease_clock = clocks.store_now_ms if store_clock else runtime.now_ms

        def attempt(request: Any, index: int) -> Any:
            if self._effects is not None:
                self._effects.effect(node.label, None, lease_clock())
            return work(request, index, node.label, runtime.now_ms())

        worker = self.make_worker(node, ports, lease_ms=self.lease_ms, now_ms=runtime.now_ms,
                                  work=attempt, steps=self.steps, failpoints=ports.failpoints,
                                  probe=world.probe_for(node), step_delay=step_delay,
                                  checkpoints=ports.checkpoints if self.checkpoints else None,
                                  recovery_page_size=self.recovery_page_size,
                                  serves=self.serving.serves if self.serving is not None else None)
        runtime.spawn_on(node, "worker", worker_loop(worker, runtime, poll_ms=self.poll_ms, retry_ms=self.retry_ms))
        if self.stale_renewals:
            self._processes[node.label] = (node, ports, runtime)

    def make_worker(self, node: Node, ports: Any, **settings: Any) -> SubmissionWorker:
        """The worker a process runs (a workload of other workers overrides it)."""
        return SubmissionWorker(ports.ledger, ports.log, node.label, **settings)

    def _on_decision(self, event: tuple) -> None:
        if not self.emitted_by_me(event):
            return
        fields = event.fields
        name, disposition = fields["decision"], fields["disposition"]
        self.recovery_decisions[name] = self.recovery_decisions.get(name, 0) + 1
        self.recovery_dispositions[disposition] = self.recovery_dispositions.get(disposition, 0) + 1

    def _on_deferred(self, event: tuple) -> None:
        if self.emitted_by_me(event):
            self.deferrals += 1
            if self.stale_renewals:
                self._renew_released(event.fields)

    def _renew_released(self, fields: dict) -> None:
        """The deferring process renews with the token it just released,
        while the lease its claim granted still runs by its clock."""
        owner, submission, epoch = fields["owner"], fields["submission"], fields["epoch"]
        lease_expires_ms = self._claims.pop((owner, submission, epoch), None)
        process = self._processes.get(owner)
        if lease_expires_ms is None or process is None:
            return
        node, ports, runtime = process
        if not node.alive or runtime.now_ms() >= lease_expires_ms:
            return
        token = Claim(submission, owner, epoch, lease_expires_ms)
        self.world.runtime.spawn_on(node, f"stale-renew:{submission}#{epoch}",
                                    self._stale_renew(ports.ledger, runtime, token))

    async def _stale_renew(self, ledger: Any, runtime: Any, token: Claim) -> None:
        try:
            renewal = await ledger.renew_ownership(token, self.lease_ms, runtime.now_ms())
        except Exception as error:
            if error_name(error) == "OwnershipLost":
                self.stale_renewals_refused += 1
                self.stale_checker.expect(True, "")
                return
            if is_retryable(error):
                self.stale_renewals_unanswered += 1
                return
            self.stale_checker.expect(False, f"a renewal with {token.submission_id}'s released token (owner "
                                             f"{token.owner_id}, epoch {token.epoch}) failed with "
                                             f"{error_name(error)}: {error}; expected OwnershipLost",
                                      (token.submission_id,))
            return
        self.stale_checker.expect(False, f"a renewal with {token.submission_id}'s released token (owner "
                                         f"{token.owner_id}, epoch {token.epoch}, its lease until "
                                         f"{token.lease_expires_ms} ms) was granted: {renewal!r}; expected "
                                         f"OwnershipLost", (token.submission_id,))

    def _on_recovery(self, event: tuple) -> None:
        if event.fields.get("from_checkpoint") and self.emitted_by_me(event):
            self.recoveries_from_checkpoint += 1

    def _track_owners(self, event: tuple) -> None:
        fields = event.fields
        if "error" in fields:
            return
        if event.kind == "ledger.claim":
            if "submission" in fields and self.emitted_by_me(event):  # another instance's claims are its own
                self.owners[fields["owner"]] = fields["submission"]
                if fields.get("handoff") is not None:
                    self.handoffs += 1
                if self.stale_renewals:
                    self._claims[(fields["owner"], fields["submission"], fields["epoch"])] = fields["lease_expires_ms"]
        else:
            for owner in [o for o, sid in self.owners.items() if sid == fields["submission"]]:
                del self.owners[owner]
            if self._claims:
                for claim in [c for c in self._claims if c[1] == fields["submission"]]:
                    del self._claims[claim]
