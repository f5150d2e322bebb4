"""Agent workloads: submissions whose steps wait for the world.

``AgentSubmitters`` sends requests that carry a plan (``model.agent``):
model steps, tools (idempotent or not), approvals, subagents.
``AgentWorkers`` runs ``AgentWorker`` processes. The world they wait for:

- ``ToolService``: the external tools (outside every process: they survive
  crashes), reached through a ``BoundPort`` so the run's port faults fire at
  ``tools.invoke``: a crash before the call (nothing happened), a lost ack
  (it happened, the caller died), a lost reply (it happened, the caller
  cannot tell). It remembers every call that reached it: what the reconciler
  looks up and what ``unknown-never-replayed`` counts. An idempotent tool
  deduplicates by its key; any other acts on every call.
- ``Approvers``: a human deciding pending approvals (mostly approved) a while
  after the agent asked.
- ``Cancellers``: an operator cancelling a run whose subagent budget is
  reserved with no child started (its owner died in between).
- ``Reconciler``: an operator resolving tool calls whose outcome is unknown,
  from the tool's own history: ``CompletedWithResult`` with what the tool
  did, else, once the call's deadline (in its ``tool-prepared`` record) has
  passed and the tool refuses it, ``NeverHappened`` or ``SafeToRetry``. A
  call delayed on its way (a paused owner's) lands before its deadline or
  never.

The approver and the reconciler work until the run ends (through the settle
window): without them a suspended or unknown lane never settles.
"""
from __future__ import annotations

from typing import Any

from faults.events import OPTIONAL, ProbeEvent, ToolInvoke
from faults.ports import BoundPort, PortStats
from model.agent import (AGENT_TOOLS, APPROVAL, CLOSE, COMPLETED, MODEL, OPEN, REASONING, SUBAGENT, TEXT, TOOL,
                         TOOL_ARGUMENT_DELTA, TOOL_ONCE, TOOL_PREPARED, AgentWorker, plan_of)
from model.ledger.records import COMPLETED_WITH_RESULT, NEVER_HAPPENED, SAFE_TO_RETRY, UnreadableSubmission
from model.canonical import digest
from model.clocks import MAX_CLOCK_OFFSET_MS
from model.retry import error_name, is_retryable
from model.secrets.errors import CredentialRejected
from model.secrets.refs import secret_ref
from scenarios.workloads.submissions import Submitters, Workers
from sim.node import Node
from sim.workload import Workload
from sim.world import World

TOOLS_PORT, MODEL_PORT = "tools", "model"
MODEL_PROFILE = {"provider": "simulated", "model": "sim-large", "tier": "standard"}
# A request's maxDurationMs: a quarter of the runs get two minutes, which an
# approval or a subagent can outlast.
# Requests that name no allowance run under the deployed policy, which each
# new agent definition changes: a run started under one and resumed
# under the next fails (RunStartConflict) rather than start its clock again.
POLICY_ALLOWANCE_SHARE = 0.25
ALLOWANCE_POLICIES_MS = (30 * 60 * 1000, 45 * 60 * 1000)
CONFIG_DEPLOY_EVERY_MS = (20 * 60 * 1000, 2 * 60 * 60 * 1000)  # a new agent configuration, rolled out
# What one deploy changes, drawn from the deploy's own stream
# (``workload/agent-deploy/<generation>``): the agent's definition (its
# allowance policy with it), its model configuration, or its tool set.
DEPLOY_CHANGES = ("definition", "model", "tools")
CONFIG_DEPLOYS_MAX = 10_000
RUN_ALLOWANCES_MS = (2 * 60 * 1000, 15 * 60 * 1000, 60 * 60 * 1000, 60 * 60 * 1000)
# Requests that must be answered within seconds (a chat reply with a
# deadline) and send an email on the way: a share of the plans with a
# non-idempotent tool (and no wait for a person or a subagent) get a tight
# allowance, so a kill or a lost reply at
# the call leaves it in doubt right before the run's deadline and the
# successor that takes the run past it must still mark the call unknown
# before it fails the run. Drawn per request from a stream of its own.
TIGHT_ALLOWANCE_SHARE, TIGHT_ALLOWANCES_MS = 0.25, (5 * 1000, 30 * 1000)
# Calls one tool call id may receive: an idempotent one is retried under its
# key, a few times at most; more is a runaway, not a workload.
ARRIVALS_PER_CALL_MAX = 1_000
PLAN_STEPS = (1, 4)  # steps per plan
APPROVED_SHARE = 0.8
JOINING_SHARE = 0.3  # requests that take the follow-ups sent while they run (when common)
FOLLOW_UPS = (1, 3)  # follow-ups per such request


class ToolDeadlineExceeded(Exception):
    """The call arrived after its deadline: refused, no effect. Retryable
    (an idempotent call tries again under its key with a new deadline)."""

    retryable = True

    def __init__(self, call_id: str, deadline_ms: int, arrived_ms: int) -> None:
        super().__init__(f"{call_id!r} arrived at {arrived_ms} ms, after its deadline {deadline_ms} ms")
        self.call_id = call_id
        self.deadline_ms = deadline_ms
        self.arrived_ms = arrived_ms


def check_credential(service: str, secret_store: Any, handle: str, received: Any) -> None:
    """A service's check of the credential a call carried: the secret's
    current value, or the one it just replaced (a rotation's overlap: a
    caller resolved it a moment before the new version). Anything else,
    or none: ``CredentialRejected``."""
    versions = secret_store.versions_of(handle)
    if type(received) is not str or received not in versions[-2:]:
        raise CredentialRejected(service, handle)


class ToolService:
    """The external tools. Survive every process; only an idempotency key
    deduplicates a call; a call that arrives after its deadline is refused
    (as a payment API refuses an expired request).

    ``secret_store`` and ``credentials`` (tool -> secret handle): the tools
    take a credential (``args["credential"]``), check it against the secret
    store (``check_credential``; the refusals are counted in
    ``credentials_rejected``) and echo the arguments with a reference in its
    place, never the value. Without them, arguments are echoed as sent."""

    def __init__(self, *, slow_share: float = 0.0, slow_ms: tuple[int, int] = (0, 0), secret_store: Any = None,
                 credentials: dict[str, str] | None = None) -> None:
        assert 0.0 <= slow_share <= 1.0 and 0 <= slow_ms[0] <= slow_ms[1], (slow_share, slow_ms)
        assert (secret_store is None) == (credentials is None), "a secret store and the tools' credentials, or neither"
        self.secret_store = secret_store
        self.credentials = dict(credentials or {})
        self.credentials_rejected = 0
        self.slow_share = slow_share  # calls that take ``slow_ms`` on their way to the tool
        self.slow_ms = slow_ms
        self._arrivals: dict[str, int] = {}  # call id -> calls that reached the service
        self._sent: dict[str, int] = {}  # call id -> calls sent (arrived, refused, or still on the way)
        self._effects: dict[str, Any] = {}  # call id -> the result of the effect it had
        self._by_key: dict[str, str] = {}  # idempotency key -> the call id whose effect it was
        self.effects = 0
        self.refused_late = 0
        self.slow_calls = 0

    def bind(self, sender: str, world: World) -> "ToolClient":
        return ToolClient(self, sender, world)

    def transit_ms(self, world: World, call_id: str) -> int:
        """How long this sending of ``call_id`` takes to reach the tool (from
        a stream of its own: the same whatever else the run drew)."""
        sent = self._sent.get(call_id, 0) + 1
        self._sent[call_id] = sent
        if not self.slow_share:
            return 0
        rng = world.streams.fork(f"workload/tool-transit/{call_id}/{sent}")
        if not rng.chance(self.slow_share):
            return 0
        self.slow_calls += 1
        return rng.between(*self.slow_ms)

    def effect(self, call_id: str) -> Any:
        """What the call did (its result), or None: it never reached the tool."""
        return self._effects.get(call_id)

    def arrivals(self, call_id: str) -> int:
        return self._arrivals.get(call_id, 0)

    def calls(self) -> list[str]:
        return sorted(self._arrivals)

    def _invoke(self, sender: str, call_id: str, tool: str, args: Any, key: str | None, deadline_ms: int | None,
                now_ms: int) -> Any:
        if deadline_ms is not None and now_ms > deadline_ms:
            self.refused_late += 1
            raise ToolDeadlineExceeded(call_id, deadline_ms, now_ms)
        handle = self.credentials.get(tool)
        if handle is not None:
            try:
                check_credential(f"tool {tool}", self.secret_store, handle,
                                 args.get("credential") if isinstance(args, dict) else None)
            except CredentialRejected:
                self.credentials_rejected += 1
                raise
            args = {**args, "credential": secret_ref(handle)}  # echoed by reference, never the value
        arrivals = self._arrivals.get(call_id, 0) + 1
        assert arrivals <= ARRIVALS_PER_CALL_MAX, call_id
        self._arrivals[call_id] = arrivals
        if key is not None and key in self._by_key:
            return self._effects[self._by_key[key]]
        self.effects += 1
        # Each effect's result is its own (a serial number): an effect done
        # twice answers differently, as a sent e-mail's message id would.
        result = {"tool": tool, "effect": self.effects, "by": sender, "args": args}
        self._effects.setdefault(call_id, result)
        if key is not None:
            self._by_key[key] = call_id
        return result


class ToolClient:
    """One process's way to the tools: a call may be slow on its way (it
    lands late, or, past its deadline, is refused); a crash of the sender
    while it is on the way loses it."""

    def __init__(self, service: ToolService, sender: str, world: World) -> None:
        self._service = service
        self._sender = sender
        self._world = world

    async def invoke(self, call_id: str, tool: str, args: Any, idempotency_key: str | None,
                     deadline_ms: int | None = None) -> Any:
        runtime = self._world.runtime
        transit_ms = self._service.transit_ms(self._world, call_id)
        if transit_ms:
            await runtime.sleep_ms(transit_ms)
        return self._service._invoke(self._sender, call_id, tool, args, idempotency_key, deadline_ms,
                                     runtime.now_ms())


def _describe_invoke(args: tuple, kwargs: dict, result: Any) -> dict:
    names = ("call_id", "tool", "args", "idempotency_key", "deadline_ms")
    call, tool, _, key, deadline_ms = (list(args) + [kwargs.get(k) for k in names][len(args):])
    fields = {ToolInvoke.call: call, ToolInvoke.tool: tool, ToolInvoke.key: key}
    if deadline_ms is not None:
        fields[ToolInvoke.deadline_ms] = deadline_ms
    if result is not None:
        fields[ToolInvoke.result] = result
    return fields


def bind_tools(world: World, node: Node, service: ToolService) -> Any:
    """``service`` as ``node`` sees it: traced, under the run's port faults
    (not counted as store calls: the tools are not a store)."""
    return BoundPort(world, node, TOOLS_PORT, service.bind(node.name, world), world.plan, {"invoke": _describe_invoke},
                     PortStats(), world.system.restart_delay_ms)


class ModelStream(ProbeEvent):
    """``model.stream``: one call to the model provider, as its ``BoundPort`` traces it."""

    kind = "model.stream"
    call: str
    chunks: int = OPTIONAL
    error: str = OPTIONAL
    detail: str = OPTIONAL


class ModelService:
    """The model provider (outside every process). Each call streams
    reasoning and text deltas, partial tool-argument deltas, then a
    completion with the call's usage; drawn from a stream of its own per call
    and sending, so a retried call may answer differently (as a model does).

    ``secret_store`` and ``credential`` (a secret handle): each request
    carries the provider's key (``request["apiKey"]``), checked as the tools
    check theirs (``check_credential``; refusals in ``credentials_rejected``)."""

    def __init__(self, *, secret_store: Any = None, credential: str | None = None) -> None:
        assert (secret_store is None) == (credential is None), "a secret store and the model's credential, or neither"
        self._sent: dict[str, int] = {}  # call id -> times asked (bounded by the call's retries)
        self.calls = 0
        self.secret_store = secret_store
        self.credential = credential
        self.credentials_rejected = 0

    def check(self, request: Any) -> None:
        if self.credential is None:
            return
        try:
            check_credential("model", self.secret_store, self.credential,
                             request.get("apiKey") if isinstance(request, dict) else None)
        except CredentialRejected:
            self.credentials_rejected += 1
            raise

    def bind(self, world: World) -> "ModelClient":
        return ModelClient(self, world)

    def answer(self, world: World, call_id: str) -> list[dict]:
        sent = self._sent.get(call_id, 0) + 1
        assert sent <= ARRIVALS_PER_CALL_MAX, call_id
        self._sent[call_id] = sent
        self.calls += 1
        rng = world.streams.fork(f"workload/model/{call_id}/{sent}")
        chunks = [{"kind": REASONING, "text": f"thinking {i}"} for i in range(rng.between(0, 2))]
        for i in range(rng.between(1, 3)):
            chunks.append({"kind": TEXT, "text": f"part {i} of {call_id}. "})
            if rng.chance(0.3):
                chunks.append({"kind": TOOL_ARGUMENT_DELTA, "text": '{"query": "par'})
        input_tokens, output_tokens = rng.between(100, 4_000), rng.between(10, 800)
        chunks.append({"kind": COMPLETED, "usage": {**MODEL_PROFILE, "inputTokens": input_tokens,
                                                    "outputTokens": output_tokens,
                                                    "costMicros": 3 * input_tokens + 15 * output_tokens}})
        return chunks


class ModelClient:
    def __init__(self, service: ModelService, world: World) -> None:
        self._service = service
        self._world = world

    async def stream(self, call_id: str, request: Any) -> list[dict]:
        self._service.check(request)
        return self._service.answer(self._world, call_id)


def _describe_stream(args: tuple, kwargs: dict, result: Any) -> dict:
    call = args[0] if args else kwargs["call_id"]
    fields = {ModelStream.call: call}
    if result is not None:
        fields[ModelStream.chunks] = len(result)
    return fields


def bind_model(world: World, node: Node, service: ModelService) -> Any:
    """The model provider as ``node`` sees it: traced, under the run's port faults."""
    return BoundPort(world, node, MODEL_PORT, service.bind(world), world.plan, {"stream": _describe_stream},
                     PortStats(), world.system.restart_delay_ms)


class AgentSubmitters(Submitters):
    """Requests with plans drawn from ``kinds``; ``joining_share`` of them
    take follow-ups sent while they run."""

    name = "agent-submitters"

    def __init__(self, *, kinds: tuple[str, ...] = (MODEL, TOOL, TOOL_ONCE), joining_share: float = JOINING_SHARE,
                 **settings: Any) -> None:
        super().__init__(**settings)
        # ``kinds``: the step kinds a plan draws from, each as often as it is listed.
        assert MODEL in kinds and set(kinds) <= {MODEL, TOOL, TOOL_ONCE, APPROVAL, SUBAGENT}, kinds
        self.kinds = kinds
        assert 0.0 <= joining_share <= 1.0, joining_share
        self.joining_share = joining_share
        self._open: dict[str, str] = {}  # slot -> its open conversation (bounded by the slots)

    def request(self, n: int, conversation_id: str) -> Any:
        rng = self.stream_for(self.world, f"plan/{n}")
        plan = [rng.choice(self.kinds) for _ in range(rng.between(*PLAN_STEPS))]
        request = {"n": n, "plan": plan}
        if not rng.chance(POLICY_ALLOWANCE_SHARE):
            request["maxDurationMs"] = rng.choice(RUN_ALLOWANCES_MS)
        if rng.chance(self.joining_share):
            request["joins"] = True
        tight = self.stream_for(self.world, f"tight-allowance/{n}")
        if TOOL_ONCE in plan and not {APPROVAL, SUBAGENT} & set(plan) and tight.chance(TIGHT_ALLOWANCE_SHARE):
            request["maxDurationMs"] = tight.between(*TIGHT_ALLOWANCES_MS)
        # A conversation's first request opens it; the slot's previous one is
        # closed by a last request (a conversation lives one generation).
        slot = conversation_id.rpartition("-g")[0]
        previous = self._open.get(slot)
        if previous != conversation_id:
            if previous is not None:
                self.pending.append((previous, f"close-{previous}", {"n": n, "closes": True, "plan": [CLOSE]}))
            self._open[slot] = conversation_id
            request["plan"] = [OPEN, *plan]
        return request

    def admitted(self, client: Any, conversation_id: str, key: str, request: Any, admission: Any) -> None:
        """A request that takes follow-ups gets some, sent right after it (the
        outside world's queue: they survive the client's crashes): those
        still queued when it runs join it, the others run alone."""
        if not request.get("joins") or "followUp" in request:
            return
        rng = self.stream_for(self.world, f"follow-ups/{key}")
        for i in range(1, rng.between(*FOLLOW_UPS) + 1):
            # Steering input redirects the run it joins; a follow-up may run alone.
            self.pending.append((conversation_id, f"{key}/follow-up-{i}",
                                 {"n": request["n"], "followUp": i, "steering": rng.chance(0.5), "plan": [MODEL]}))


def child_plan(record: Any, index: int) -> list[str]:
    """A subagent's plan: a model step, and a tool for every other parent."""
    return [MODEL, TOOL] if record.input["n"] % 2 else [MODEL]


class AgentWorkers(Workers):
    """Agent worker processes. The agent's configuration (its definition,
    its model profile, its tool set) is deployed in generations
    (``deploy``: a rolling restart), each changing one of the three; a
    process runs the generation deployed when it started, and its recovery
    checkpoints are bound to all three: a checkpoint written under another
    definition, model configuration or tool set is rejected and the history
    read again from the log."""

    JUDGES_EFFECTS = False  # its steps are model and tool calls: judged by the agents' own checks

    name = "agent-workers"

    def __init__(self, count: int, *, tools: ToolService | None = None, model: ModelService | None = None,
                 secrets: Any = None, open_sealed: Any = None, **settings: Any) -> None:
        """``secrets(node, ports)`` -> the ``AgentSecrets`` of a worker
        process on ``node`` (its bindings of the key service, the keyring and
        the secret store); None: the workers use no secrets."""
        super().__init__(count, **settings)
        self.tools = tools if tools is not None else ToolService()
        self.model = model if model is not None else ModelService()
        self.secrets = secrets
        self.open_sealed = open_sealed  # how the oracles open a sealed field (None: nothing is sealed)
        self.config_generation = 0
        self.revisions = {change: 0 for change in DEPLOY_CHANGES}  # how often each was changed
        self.checkpoints_rejected = 0
        self.checkpoints_rejected_config = 0  # of those: another model configuration or tool set

    def own_checks(self) -> list[Any]:
        """The workers' checks, and what judges an agent's steps: unknown
        tool outcomes never replayed, approval before effect, child before
        parent, a joined follower settled once, the run clock, canonical events."""
        # Imported here: the unknown-outcome check reads this module's tool service.
        from scenarios.invariants import (ApprovalPrecedesEffect, CanonicalEvents, ChildBeforeParent,
                                          JoinedSettlesOnce, RunClock, UnknownNeverReplayed)
        return [*super().own_checks(), UnknownNeverReplayed(self.tools, opener=self.open_sealed),
                ApprovalPrecedesEffect(), ChildBeforeParent(), JoinedSettlesOnce(), RunClock(), CanonicalEvents(opener=self.open_sealed)]

    def definition_digest(self) -> str:
        """The deployed definition's identity (what checkpoints are bound to, with the model and tools)."""
        return "agent-definition/" + digest({"revision": self.revisions["definition"],
                                             "allowancePolicyMs": self.allowance_policy_ms()})[:16]

    def allowance_policy_ms(self) -> int:
        return ALLOWANCE_POLICIES_MS[self.revisions["definition"] % 2]

    def model_profile(self) -> dict:
        revision = self.revisions["model"]
        return MODEL_PROFILE if revision == 0 else {**MODEL_PROFILE, "model": f"sim-large-r{revision}"}

    def tool_set(self) -> dict:
        return {name: {**tool, "revision": self.revisions["tools"]} for name, tool in AGENT_TOOLS.items()}

    def deploy_timeline(self, chaos: Any, duration_ms: int) -> list[tuple[int, int]]:
        """A new configuration every CONFIG_DEPLOY_EVERY_MS (uniform), drawn at start."""
        timeline, at_ms, generation = [], 0, 0
        while len(timeline) < CONFIG_DEPLOYS_MAX:
            at_ms += chaos.between(*CONFIG_DEPLOY_EVERY_MS)
            if at_ms >= duration_ms:
                break
            generation += 1
            timeline.append((at_ms, generation))
        return timeline

    def deploy(self, generation: int) -> dict:
        self.config_generation = generation
        change = self.stream_for(self.world, f"agent-deploy/{generation}").choice(DEPLOY_CHANGES)
        self.revisions[change] += 1
        return {"build": f"agent-config-{generation}", "change": change, "definition": self.definition_digest()}

    def _on_recovery(self, event: tuple) -> None:
        super()._on_recovery(event)
        rejected = event.fields.get("rejected")
        if rejected:
            self.checkpoints_rejected += 1
        if rejected in ("model-digest", "tool-digest"):
            self.checkpoints_rejected_config += 1

    def metrics(self) -> dict[str, Any]:
        return {**super().metrics(), "tool_calls_slow": self.tools.slow_calls,
                "tool_calls_refused_late": self.tools.refused_late,
                "checkpoints_rejected_rebuilt": self.checkpoints_rejected,
                "checkpoints_rejected_model_or_tools": self.checkpoints_rejected_config,
                **({} if self.secrets is None else {
                    "credentials_rejected": self.tools.credentials_rejected + self.model.credentials_rejected})}

    def make_worker(self, node: Node, ports: Any, **settings: Any) -> AgentWorker:
        return AgentWorker(ports.ledger, ports.log, node.label, tools=bind_tools(self.world, node, self.tools),
                           model=bind_model(self.world, node, self.model), model_profile=self.model_profile(),
                           tool_set=self.tool_set(), child_plan=child_plan, definition_digest=self.definition_digest(),
                           run_allowance_policy_ms=self.allowance_policy_ms(),
                           **({} if self.secrets is None else {"secrets": self.secrets(node, ports)}), **settings)


class _Operator(Workload):
    """A person at a console: scans the open work every ``poll_ms`` and acts
    on what has waited for its delay (drawn per item). Works until the run
    ends; a crash restarts the console, which scans again."""

    name = "operator"
    NODE = "operator"

    def __init__(self, *, poll_ms: int = 5_000, delay_ms: tuple[int, int] = (0, 60_000), serving: Any = None) -> None:
        """``serving``: the client workload whose conversations this console
        tends (its ``serves(conversation_id)``); None: every one."""
        assert poll_ms > 0 and 0 <= delay_ms[0] <= delay_ms[1], (poll_ms, delay_ms)
        self.serving = serving
        self.poll_ms = poll_ms
        self.delay_ms = delay_ms
        self.acted = 0
        self._first_seen: dict[str, int] = {}  # item -> when this console first saw it waiting

    def setup(self, world: World) -> None:
        self.world = world
        world.add_node(self.node_name(self.NODE), self._start, role="client")

    def _start(self, node: Node) -> None:
        self.node = node
        self.ports = self.world.system.ports_for(node)
        # The console's own machine's clock: what it writes as "now".
        self.clock = self.world.runtime_for(node)
        self.world.runtime.spawn_on(node, self.NODE, self._loop(self.ports.ledger))

    async def _loop(self, ledger: Any) -> None:
        runtime = self.clock
        while True:  # the console's loop: it ends when its process dies
            try:
                waiting: list[str] = []
                for record in await ledger.scan_nonterminal():
                    if isinstance(record, UnreadableSubmission):
                        continue
                    if self.serving is not None and not self.serving.serves(record.conversation_id):
                        continue  # another application's work
                    for item in self.waiting(record):
                        waiting.append(item[1])
                        first = self._first_seen.setdefault(item[1], runtime.now_ms())
                        delay_ms = self.stream_for(self.world, item[1]).between(*self.delay_ms)
                        if runtime.now_ms() >= first + delay_ms and await self._act(ledger, record, *item):
                            self.acted += 1
                # Forget what no longer waits (bounded by the open work).
                self._first_seen = {item: ms for item, ms in self._first_seen.items() if item in waiting}
            except Exception as error:
                if not is_retryable(error, reread=True):
                    raise
                self.world.probe_for(self.node).emit(f"{type(self).name}.retry", error=error_name(error))
            await runtime.sleep_ms(self.poll_ms)

    async def _act(self, ledger: Any, record: Any, submission_id: str, item: str) -> bool:
        """``act``; a submission that settled since the scan (the ledger
        answers ``SettlementConflict``), or whose owner reserved its
        settlement meanwhile (an abort's ``AbortConflict``), needs nothing
        any more."""
        try:
            return await self.act(ledger, record, submission_id, item)
        except Exception as error:
            if error_name(error) not in ("SettlementConflict", "AbortConflict"):
                raise
            return False

    def waiting(self, record: Any) -> list[tuple[str, str]]:
        """``(submission, item)`` pairs this operator acts on."""
        raise NotImplementedError

    async def act(self, ledger: Any, record: Any, submission_id: str, item: str) -> bool:
        """Act on ``item`` if it is time: whether it did."""
        raise NotImplementedError


class Approvers(_Operator):
    """Decides every pending approval, approved ``APPROVED_SHARE`` of the time."""

    name = "approvers"
    NODE = "approver"

    def metrics(self) -> dict[str, Any]:
        return {"approvals_decided": self.acted}

    def waiting(self, record: Any) -> list[tuple[str, str]]:
        approvals = record.approvals or {}
        return [(record.submission_id, call) for call, decision in sorted(approvals.items()) if decision is None]

    async def act(self, ledger: Any, record: Any, submission_id: str, call: str) -> bool:
        rng = self.stream_for(self.world, f"decision/{call}")
        decision = "approved" if rng.chance(APPROVED_SHARE) else "rejected"
        await ledger.decide_approval(submission_id, call, decision, "approver",
                                     "looks right" if decision == "approved" else "not now", self.clock.now_ms())
        return True


class Cancellers(_Operator):
    """Cancels a run that looks stuck: a subagent budget reserved and no
    child started after the console's delay (its owner died between the
    two; a live owner admits the child at once). Its abort reaches the run
    before a successor does, so the run settles aborted with a reservation
    whose child was never admitted."""

    name = "cancellers"
    NODE = "canceller"
    AUTHOR = "operator"

    def metrics(self) -> dict[str, Any]:
        return {"stuck_runs_cancelled": self.acted}

    def waiting(self, record: Any) -> list[tuple[str, str]]:
        if record.abort_author is not None or record.outcome is not None:
            return []
        stuck = [call for call, entry in sorted((record.children or {}).items())
                 if entry["child"] is None and entry["releasedAtMs"] is None]
        return [(record.submission_id, call) for call in stuck[:1]]

    async def act(self, ledger: Any, record: Any, submission_id: str, call: str) -> bool:
        await ledger.request_abort(submission_id, self.AUTHOR, f"stuck: no child started at {call}",
                                   self.clock.now_ms())
        return True


class Reconciler(_Operator):
    """Resolves unknown tool calls from the tool service's own history."""

    name = "reconciler"
    NODE = "reconciler"

    def __init__(self, *, tools: ToolService, **settings: Any) -> None:
        super().__init__(**settings)
        self.tools = tools

    def metrics(self) -> dict[str, Any]:
        return {"unknown_resolved": self.acted}

    def waiting(self, record: Any) -> list[tuple[str, str]]:
        calls = record.unknown_calls or {}
        return [(record.submission_id, call) for call, resolution in sorted(calls.items()) if resolution is None]

    async def act(self, ledger: Any, record: Any, submission_id: str, call: str) -> bool:
        now_ms = self.clock.now_ms()
        effect = self.tools.effect(call)
        if effect is not None:
            await ledger.resolve_unknown(submission_id, call, COMPLETED_WITH_RESULT, "reconciler", effect, now_ms)
            return True
        # No effect yet; a call still in flight may land until its deadline,
        # which the agent made durable with the call's preparation.
        prepared = await self.ports.log.lookup_batch(record.conversation_id, f"tool-{TOOL_PREPARED}:{call}")
        if prepared is None:
            return False  # the log does not show it yet (a short read): look again later
        (entry,) = await self.ports.log.read(record.conversation_id, prepared.last_seq - 1, 1)
        deadline_ms = entry.envelope.payload.get("deadlineMs")
        # The deadline is on the agent's clock and the tool refuses by its
        # own: waited out on this clock, it is waited out everywhere only
        # once past it by the offset two clocks may have (``model.clocks``).
        if deadline_ms is not None and now_ms <= deadline_ms + MAX_CLOCK_OFFSET_MS:
            return False
        rng = self.stream_for(self.world, f"resolution/{call}")
        resolution = NEVER_HAPPENED if rng.chance(0.5) else SAFE_TO_RETRY
        await ledger.resolve_unknown(submission_id, call, resolution, "reconciler", None, now_ms)
        return True


__all__ = ["AgentSubmitters", "AgentWorkers", "Approvers", "Cancellers", "ModelService", "ModelStream", "Reconciler",
           "ToolDeadlineExceeded", "ToolService", "ToolInvoke", "bind_model", "bind_tools", "plan_of"]
