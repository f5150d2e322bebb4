"""An agent's submission: a plan of steps that wait for the world.

A plain submission (``model.submissions``) computes each step from its
input. An agent's steps reach outside: tools (some idempotent, retried under
their key; some not, whose outcome a crash or a lost reply leaves unknown),
approvals a human gives later, subagents that run as child submissions. The
ledger holds what each waits for (persistence §3) and the log holds what the
agent did, so whoever claims the head next takes the step from there:

- **tool** (``tool`` idempotent, ``tool-once`` not): a ``tool-prepared``
  record, the call, a ``tool-settled`` record with its result. A successor
  that finds the preparation without the settlement retries an idempotent
  tool under the same key; any other it marks unknown (``mark_unknown``: the
  lane blocks, visibly, until a reconciler resolves the call). A resolution
  ``NeverHappened`` or ``SafeToRetry`` lets the next attempt call it again
  under a new call id (``{step}.{attempt}``: each call id reaches the tool at
  most once); ``CompletedWithResult`` settles the step with the result the
  reconciler found. Nothing ever calls a non-idempotent tool on a guess.
- **approval**: an ``approval-requested`` record and ``suspend`` (the
  request is the suspension's whole footprint); the resumed attempt appends
  ``approval-decided`` (the ledger's decision, verbatim) before acting on
  it: approved, the step's output names the decision; rejected, the run
  settles ``failed`` (``ApprovalRejected``) and no later step runs.
- **subagent**: ``reserve_child`` (the budget), the child admitted in its own
  conversation with its parent link, ``attach_child``, a
  ``subagent-started`` record, then ``suspend`` on the child. The child's
  settlement releases the reservation (``release_child``, the accounting
  frozen once), which wakes the parent; a worker's tending pass releases
  any settled child whose release a crash lost.

Every step keeps the submission lifecycle's rules: an abort intent is read
before every step, and a step that parks the submission (``PARKED``) ends
its owner's claim in the same ledger write that records what it waits for.
"""
from __future__ import annotations

from typing import Any, Callable

from model.failpoints import (APPROVAL_DECIDED_BEFORE_EFFECT, APPROVAL_REQUEST_APPENDED, APPROVAL_SUSPENDED,
                              CHILD_RESERVED_BEFORE_ADMIT, CHILD_SETTLED_BEFORE_WAKE, COMPACTION_APPENDED,
                              FOLLOWER_APPENDED_BEFORE_JOINED, JOIN_CLAIMED, MODEL_REQUESTED_BEFORE_FIRST_DELTA,
                              SUBAGENT_CHILD_ABORT_INTENT, SUBAGENT_JOIN_APPENDED, SUBAGENT_RELEASED,
                              SUBAGENT_REQUEST_APPENDED, SUBAGENT_START_APPENDED, SUBAGENT_SUSPENDED,
                              TOOL_PREPARED_BEFORE_SETTLED, TOOL_RESULTS_APPENDED, TURN_RESPONSE_APPENDED)
from model.ledger.records import ABORTED, COMPLETED_WITH_RESULT, REJECTED, ParentLink, UnreadableSubmission
from model.retry import error_name
from model.canonical import digest
from model.conversation.records import BatchRecord
from model.ledger.records import settlement_of
from model.ledger.rules import joined_envelope
from model.ledger.states import JOINING
from model.lifecycle import (INPUT_FAMILY, RUN_COMPLETED_FAMILY, created_batch_id, input_batch_id,
                             input_entry_of, input_record_id, run_id_for)
from model.secrets import AgentSecrets
from model.secrets.envelope import keyed_digest
from model.secrets.refs import resolve_refs, secret_ref
from model.submissions import PARKED, ProcessOutcome, SubmissionWorker, WorkFailure

# Step kinds of a plan (``request["plan"]``). ``open``/``close``: the first
# and the last request of a conversation.
MODEL, TOOL, TOOL_ONCE, APPROVAL, SUBAGENT = "model", "tool", "tool-once", "approval", "subagent"
OPEN, CLOSE = "open", "close"
STEP_KINDS: tuple[str, ...] = (MODEL, TOOL, TOOL_ONCE, APPROVAL, SUBAGENT, OPEN, CLOSE)
# What an agent writes to the log besides the lifecycle's input, step output
# and settlement records (persistence §5's families). Families with phases
# carry a ``phase`` (also the prefix of the batch id, so a successor looks
# each one up).
TOOL_CALL_FAMILY, SUBAGENT_FAMILY = "tool-call", "subagent"
TOOL_REQUESTED, TOOL_PREPARED, TOOL_SETTLED, TOOL_UNKNOWN = "requested", "prepared", "settled", "unknown"
TOOL_RESOLVED = "resolved"  # an unknown call's resolution, in the log before anything acts on it
# The resolutions as the peer's tool-call-resolved record names them.
RESOLUTION_NAMES = {"NeverHappened": "never-happened", "SafeToRetry": "safe-to-retry",
                    "CompletedWithResult": "completed-with-result"}
APPROVAL_REQUESTED, APPROVAL_DECIDED = "approval-requested", "approval-decided"
SUBAGENT_REQUESTED, SUBAGENT_STARTED, SUBAGENT_JOINED = "requested", "started", "joined"
RUN_STARTED_FAMILY = "run-started"  # batch and record identity run-start:{runId}: one start per logical run
MODEL_REQUEST_FAMILY, MODEL_DELTA_FAMILY, MODEL_COMPLETED_FAMILY = "model-request", "model-delta", "model-completed"
COMPACTION_FAMILY = "compaction"  # phases created, selected
CONVERSATION_CREATED_FAMILY, CONVERSATION_CLOSED_FAMILY = "conversation-created", "conversation-closed"
RUN_WARNING_FAMILY, RUN_FAILED_FAMILY, ABORT_REQUESTED_FAMILY = "run-warning", "run-failure", "abort-requested"
REPAIR_ANNOTATION_FAMILY = "repair-annotation"
# What a model streams: text and reasoning deltas are canonical; partial
# tool-argument deltas never are (the completed call is).
TEXT, REASONING, TOOL_ARGUMENT_DELTA, COMPLETED = "text", "reasoning", "tool-argument-delta", "completed"
# A run's duration allowance when its request names none (finite, positive).
RUN_ALLOWANCE_MS = 2 * 60 * 60 * 1000
# A compaction every this many log records: its batch is named by the bucket
# (``compaction:{tail // COMPACT_EVERY_RECORDS}``), so there is one per bucket.
COMPACT_EVERY_RECORDS = 48
AGENT_PRINCIPAL = "agent"
# The author of the abort an aborted run's open subagents get.
SUBAGENT_PARENT_ABORT = "subagent-parent-abort"
# The accounting a reservation whose child was never admitted is released
# with (its run was aborted: no child will ever settle it).
ORPHAN_ACCOUNTING = {"child": None, "outcome": None, "settledAtMs": None}
# A step's attempts at a tool: each NeverHappened/SafeToRetry resolution
# opens one more. A reconciler that says "retry" forever is a runaway.
TOOL_ATTEMPTS_MAX = 64
# How long after its preparation a tool call may still land: past it the
# tool refuses it (a reconciler waits this out before it says the call never
# happened).
TOOL_DEADLINE_MS = 30_000
# The tools an agent calls (a tool step's idempotent call is ``search``, the
# other ``send-email``): its tool set when the deployment names none.
AGENT_TOOLS = {"search": {"idempotent": True}, "send-email": {"idempotent": False}}


JOIN_LIMIT = 4  # follow-ups one run takes at a time


def joins_followers(record: Any) -> bool:
    """Does this run take the follow-ups queued behind it (``request["joins"]``)?"""
    return isinstance(record.input, dict) and record.input.get("joins") is True


def plan_of(record: Any) -> tuple[str, ...]:
    request = record.input
    plan = request.get("plan", ()) if isinstance(request, dict) else ()
    assert all(kind in STEP_KINDS for kind in plan), plan
    return tuple(plan)


def run_allowance_ms(record: Any, policy_ms: int = RUN_ALLOWANCE_MS) -> int:
    """The run's duration allowance: its request's ``maxDurationMs``, else
    the deployed policy's ``policy_ms``."""
    request = record.input
    allowance = request.get("maxDurationMs", policy_ms) if isinstance(request, dict) else policy_ms
    assert isinstance(allowance, int) and allowance > 0, allowance
    return allowance


def turn_batch_id(run_id: str, n: int) -> str:
    """The batch of run ``run_id``'s ``n``-th model turn (n from 1): the
    peer's deterministic format ``turn:{runId}:{n}``."""
    assert n >= 1, n
    return f"turn:{run_id}:{n}"


def turn_number(record: Any, index: int) -> int:
    """Step ``index``'s turn number: its place among the plan's model steps (from 1)."""
    plan = plan_of(record)
    assert plan[index] == MODEL, (plan, index)
    return plan[:index + 1].count(MODEL)


def run_start_batch_id(run_id: str) -> str:
    return f"run-start:{run_id}"


class RunStartError(Exception):
    """A run's start evidence cannot be trusted: recovery fails (the run
    settles failed with this diagnostic) rather than resetting its clock."""

    name = "RunStartError"

    def __init__(self, run_id: str, problem: str) -> None:
        super().__init__(f"run {run_id!r}: {problem}")
        self.run_id = run_id
        self.problem = problem


class RunStartMissing(RunStartError):
    name = "RunStartMissing"


class RunStartConflict(RunStartError):
    name = "RunStartConflict"


class RunDurationExceeded(RunStartError):
    name = "RunDurationExceeded"


class ApprovalRejected(Exception):
    """The approval a step waited for was rejected: the run settles
    ``failed`` with this diagnostic and the call it guarded never starts
    (nor does any later step)."""

    name = "ApprovalRejected"

    def __init__(self, tool_call_id: str, resolver: str, reason: str) -> None:
        super().__init__(f"approval of {tool_call_id!r} rejected by {resolver!r}: {reason}")
        self.tool_call_id = tool_call_id
        self.resolver = resolver
        self.reason = reason


def usage_total(outputs: list) -> dict:
    """A run's aggregate usage: the sum of its model calls' usage."""
    total = {"modelCalls": 0, "inputTokens": 0, "outputTokens": 0, "costMicros": 0}
    for output in outputs:
        usage = output.get("usage") if isinstance(output, dict) else None
        if usage is None:
            continue
        total["modelCalls"] += 1
        for field in ("inputTokens", "outputTokens", "costMicros"):
            total[field] += usage[field]
    return total


def step_call_id(submission_id: str, index: int) -> str:
    """The call id of step ``index``'s approval or subagent."""
    return f"{submission_id}/s{index}"


def tool_call_id(submission_id: str, index: int, attempt: int) -> str:
    """The call id of step ``index``'s ``attempt``-th tool call."""
    return f"{submission_id}/s{index}.{attempt}"


def child_conversation_id(conversation_id: str, queue_seq: int, index: int) -> str:
    return f"{conversation_id}.child{queue_seq}x{index}"


def child_accounting(child: Any) -> dict:
    """What a parent learns of its settled child: the same from the worker
    that settled it and from a tending pass (a release must not conflict)."""
    return {"child": child.submission_id, "outcome": child.outcome, "settledAtMs": child.settled_at_ms}


def _joined_entry(submission_id: str, call: str, child: str, outcome: str) -> tuple[str, dict]:
    """A ``subagent joined`` record: the parent's call learned its child's outcome."""
    return SUBAGENT_FAMILY, {"phase": SUBAGENT_JOINED, "submissionId": submission_id, "call": call, "child": child,
                             "outcome": outcome, "parentLink": {"submissionId": submission_id, "toolCallId": call}}


def _tool_record(phase: str, submission_id: str, call: str, **fields: Any) -> tuple[str, dict]:
    return TOOL_CALL_FAMILY, {"phase": phase, "submissionId": submission_id, "call": call, **fields}


class AgentWorker(SubmissionWorker):
    """A submission worker whose steps follow the request's plan.

    ``tools``: the process's binding of the tool service (``invoke(call_id,
    tool, args, idempotency_key, deadline_ms)`` -> result, refusing a call
    that arrives after its deadline); ``model``: its binding of the model
    provider (``stream(call_id, request)`` -> chunks: text, reasoning and
    tool-argument deltas, then ``completed`` with the call's usage);
    ``child_plan(record, index)``: the plan of the subagent step ``index`` of
    ``record`` starts.

    ``secrets`` (None: none of this): the tools and the model take their
    credentials by handle. Recorded tool arguments and model requests carry
    a reference (``{"$secret": handle}``), resolved only for the call that
    leaves the process; the prepared record carries the keyed fingerprint of
    the arguments sent; every record this worker appends has its sensitive
    fields sealed, and every sensitive field it reads back is opened."""

    def __init__(self, *args: Any, tools: Any, model: Any, model_profile: dict, child_plan: Callable[[Any, int], list],
                 tool_deadline_ms: int = TOOL_DEADLINE_MS, run_allowance_policy_ms: int = RUN_ALLOWANCE_MS,
                 tool_set: dict | None = None, secrets: AgentSecrets | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.secrets = secrets
        if secrets is not None:
            self._seal = self._seal_records
        assert tool_deadline_ms > 0, tool_deadline_ms
        self.tools = tools
        self.model = model
        self.model_profile = dict(model_profile)  # provider, model, tier: a model request's metadata
        # The active model configuration and tool set, as the recovery
        # checkpoints this process writes and uses are bound to them: a
        # checkpoint written under other ones is rebuilt from the log.
        self.tool_set = dict(AGENT_TOOLS if tool_set is None else tool_set)
        self.model_digest = digest(self.model_profile)
        self.tool_digest = digest(self.tool_set)
        self.child_plan = child_plan
        self.tool_deadline_ms = tool_deadline_ms
        assert run_allowance_policy_ms > 0, run_allowance_policy_ms
        self.run_allowance_policy_ms = run_allowance_policy_ms  # for a request that names no allowance
        self._run_deadline: tuple[str, int] | None = None  # (attempt id, the run's deadline) of the last claim

    def step_count(self, record: Any) -> int:
        if record.reserved_record is not None:
            # A predecessor reserved the record this settles with (the
            # canonical record wins): no step runs again behind it (a failed
            # run's step would fail again, after joining follow-ups).
            return 0
        return len(plan_of(record))

    async def run_step(self, conversation_id: str, claim: Any, record: Any, index: int) -> Any:
        if plan_of(record)[index] == TOOL_ONCE:
            # A call in doubt is marked unknown before anything else, a run
            # past its deadline included: a run never settles over a call
            # whose outcome nobody knows (it may still land).
            doubt = await self._tool_step(conversation_id, claim, record, index, idempotent=False, doubt_only=True)
            if doubt is not None:
                return doubt
        await self._check_run_clock(conversation_id, claim, record, index)
        self.probe.emit("agent.step", submission=record.submission_id, index=index)
        if joins_followers(record):
            await self._join_followers(conversation_id, claim, record)
        kind = plan_of(record)[index]
        if kind == MODEL:
            return await self._model_step(conversation_id, claim, record, index)
        if kind in (OPEN, CLOSE):
            return await self._conversation_step(conversation_id, claim, record, "created" if kind == OPEN else "closed")
        if kind in (TOOL, TOOL_ONCE):
            return await self._tool_step(conversation_id, claim, record, index, idempotent=kind == TOOL)
        if kind == APPROVAL:
            return await self._approval_step(conversation_id, claim, record, index)
        assert kind == SUBAGENT, kind
        return await self._subagent_step(conversation_id, claim, record, index)

    # -- the run's clock -------------------------------------------------------------

    async def _check_run_clock(self, conversation_id: str, claim: Any, record: Any, index: int) -> None:
        """Start the run (its first step) or find its start, then refuse a
        step past its duration allowance. The start is immutable: its
        envelope's createdAt is the start instant, whoever resumes the run."""
        sid = record.submission_id
        attempt = claim.attempt_id
        if self._run_deadline is None or self._run_deadline[0] != attempt:
            allowance_ms = run_allowance_ms(record, self.run_allowance_policy_ms)
            batch_id = run_start_batch_id(sid)
            found = await self.log.lookup_batch(conversation_id, batch_id)
            if found is None:
                if index > 0:
                    # Steps are recorded, their start is not: never start the clock again.
                    raise WorkFailure(RunStartMissing(sid, f"step {index} runs with no start in the log"))
                found = await self._append_once(conversation_id, claim, batch_id, [
                    (RUN_STARTED_FAMILY, {"runId": run_id_for(sid), "submissionId": sid,
                                          "maxDurationMillis": allowance_ms})])
            (start,) = await self.log.read(conversation_id, found.first_seq - 1, 1)
            payload = start.envelope.payload
            if start.envelope.family != RUN_STARTED_FAMILY or payload.get("runId") != run_id_for(sid):
                raise WorkFailure(RunStartConflict(sid, f"{batch_id} holds {start.envelope.family} "
                                                        f"of run {payload.get('runId')!r}"))
            if payload["maxDurationMillis"] != allowance_ms:
                raise WorkFailure(RunStartConflict(sid, f"started with {payload['maxDurationMillis']} ms allowed, "
                                                        f"now asked for {allowance_ms} ms"))
            started_at_ms = start.envelope.created_at_ms
            self._run_deadline = (attempt, started_at_ms + payload["maxDurationMillis"])
        deadline_ms = self._run_deadline[1]
        if self.now_ms() > deadline_ms:
            raise WorkFailure(RunDurationExceeded(sid, f"step {index} would start at {self.now_ms()} ms, "
                                                       f"after the run's deadline {deadline_ms} ms"))

    # -- model turns -------------------------------------------------------------------

    async def _model_step(self, conversation_id: str, claim: Any, record: Any, index: int) -> Any:
        """Ask the model, stream its answer, log the canonical part of it.

        ``model-request`` (what was asked: provider, model, tier) is durable
        before the stream; the turn's deltas (text, reasoning) and its
        completion (with the call's normalized usage) are one batch. A
        successor that finds the request without the turn asks again."""
        sid = record.submission_id
        call = step_call_id(sid, index)
        turn_batch = turn_batch_id(run_id_for(sid), turn_number(record, index))
        turn = await self.log.lookup_batch(conversation_id, turn_batch)
        if turn is None:
            await self._compact(conversation_id, claim)
            asked_payload = {"runId": run_id_for(sid), "call": call, **self.model_profile}
            if self.secrets is not None and self.secrets.model_credential is not None:
                asked_payload["credential"] = secret_ref(self.secrets.model_credential)
            asked = await self._append_once(conversation_id, claim, f"model-request:{call}", [
                (MODEL_REQUEST_FAMILY, asked_payload)])
            if isinstance(asked, BatchRecord):
                # An attempt asked and died before the answer was logged: ask
                # again, and say so (the first answer, if any, is lost).
                await self._append_once(conversation_id, claim, f"repair:model-request:{call}", [
                    (REPAIR_ANNOTATION_FAMILY, {"runId": run_id_for(sid), "call": call, "repair": "model-call-reissued"})])
            self.failpoints.hit(MODEL_REQUESTED_BEFORE_FIRST_DELTA)
            request: dict = {"submission": sid, "step": index}
            if self.secrets is not None and self.secrets.model_credential is not None:
                # The effect boundary: the credential's value exists only in the request sent.
                request["apiKey"] = secret_ref(self.secrets.model_credential)
                request = await resolve_refs(request, self.secrets.secret_store)
            chunks = await self.model.stream(call, request)
            records: list[tuple[str, Any]] = []
            for chunk in chunks[:-1]:
                if chunk["kind"] == TOOL_ARGUMENT_DELTA:
                    continue  # never canonical: the completed tool call is
                records.append((MODEL_DELTA_FAMILY, {"call": call, "channel": chunk["kind"], "text": chunk["text"]}))
            completed = chunks[-1]
            assert completed["kind"] == COMPLETED, completed
            text = "".join(chunk["text"] for chunk in chunks if chunk["kind"] == TEXT)
            records.append((MODEL_COMPLETED_FAMILY, {"runId": run_id_for(sid), "call": call, "text": text,
                                                     "usage": completed["usage"]}))
            turn = await self._append_once(conversation_id, claim, turn_batch, records)
            self.failpoints.hit(TURN_RESPONSE_APPENDED)
        (last,) = await self.log.read(conversation_id, turn.last_seq - 1, 1)
        payload = await self._opened(last, turn.last_seq - turn.first_seq)
        return {"call": call, "text": payload["text"], "usage": payload["usage"]}

    async def _compact(self, conversation_id: str, claim: Any) -> None:
        """A long conversation's context is compacted once per
        ``COMPACT_EVERY_RECORDS`` records: a summary covering the tail (its
        sequence and digest), created and selected in one batch."""
        tail = await self.log.inspect_tail(conversation_id)
        bucket = tail.tail_seq // COMPACT_EVERY_RECORDS
        if not bucket:
            return
        batch_id = f"compaction:{bucket}"
        if await self.log.lookup_batch(conversation_id, batch_id) is not None:
            return
        await self._append_once(conversation_id, claim, batch_id, [
            (COMPACTION_FAMILY, {"phase": "created", "compactionId": batch_id, "coversSeq": tail.tail_seq,
                                 "tailDigest": tail.tail_digest}),
            (COMPACTION_FAMILY, {"phase": "selected", "compactionId": batch_id})])
        self.failpoints.hit(COMPACTION_APPENDED)

    async def _conversation_step(self, conversation_id: str, claim: Any, record: Any, phase: str) -> Any:
        if phase == "created":
            # The conversation-created record is the log's first (written
            # before its first record): the step finds it there.
            await self._append_once(conversation_id, claim, created_batch_id(conversation_id), [
                (CONVERSATION_CREATED_FAMILY, {"conversationId": conversation_id})])
            return {"conversation": phase}
        family = CONVERSATION_CLOSED_FAMILY
        await self._append_once(conversation_id, claim, family, [
            (family, {"conversationId": conversation_id, "submissionId": record.submission_id})])
        return {"conversation": phase}

    # -- settlement ------------------------------------------------------------------

    def _fresh_record(self, aborted: bool, outputs: list, failure: dict | None) -> dict:
        """A completed run's record carries its aggregate usage."""
        record = super()._fresh_record(aborted, outputs, failure)
        if record["outcome"] == "completed":
            record["usage"] = usage_total(outputs)
        return record

    async def _terminal_records(self, claim: Any, entry: dict) -> list:
        """The settlement batch's records around the settlement ``entry``:
        the abort intent that decided an aborted outcome comes before it (the
        intent is canonical before the settlement it caused), as the run's
        completion does (the peer's order); the run's failure after it."""
        record = settlement_of(entry)
        sid = claim.submission_id
        if record["outcome"] == ABORTED:
            row = await self.ledger.get(sid)
            if row is None or row.abort_author is None:
                return [entry]
            abort = (ABORT_REQUESTED_FAMILY, {"submissionId": sid, "author": row.abort_author,
                                              "reason": row.abort_reason})
            joined = await self._abort_children(row.conversation_id, row)
            return [abort, *joined, entry]
        if record["outcome"] == "failed":
            return [entry, (RUN_FAILED_FAMILY, {"runId": run_id_for(sid), "diagnostic": record["diagnostic"]})]
        if record["outcome"] == "completed":
            # The run completed: said before its settlement (the peer's order).
            return [(RUN_COMPLETED_FAMILY, {"runId": run_id_for(sid), "submissionId": sid}), entry]
        return [entry]

    # -- joins -------------------------------------------------------------------

    async def _join_followers(self, conversation_id: str, claim: Any, record: Any) -> None:
        """Take the ready follow-ups queued behind this run (``begin_join``)
        and apply each one's input to this run's log, then mark it joined
        there: it settles with this run. A follower whose input is already
        in the log (an earlier attempt died before marking it) is marked at
        the position it has."""
        batch = await self.ledger.begin_join(claim, JOIN_LIMIT)
        if batch.followers:
            self.failpoints.hit(JOIN_CLAIMED)
        followers = list(batch.follower_ids)
        if record.joined_count:
            # The answer names only the rows this call took: those an earlier
            # attempt took (its answer possibly lost) are in the host's
            # recovery snapshot, still joining it.
            snapshot = await self.ledger.load_recovery_snapshot(conversation_id)
            held = [row.submission_id for row in snapshot.submissions
                    if row.join_host == claim.submission_id and row.state == JOINING]
            followers = [*held, *(sid for sid in followers if sid not in held)]
        for follower_id in followers:
            follower = await self.ledger.get(follower_id)
            if follower.joined_seq is not None:
                continue
            payload = input_entry_of(follower)[1]
            # Append-once: an earlier attempt may have applied it already.
            await self._append_once(conversation_id, claim, input_batch_id(follower_id),
                                    [(INPUT_FAMILY, {**payload, "hostSubmissionId": claim.submission_id})])
            self.failpoints.hit(FOLLOWER_APPENDED_BEFORE_JOINED)
            joined = await self._mark_joined(conversation_id, claim, follower_id)
            assert joined, follower_id
            self.probe.emit("submission.joined", submission=follower_id, host=claim.submission_id)

    def settlement_run_id(self, submission_id: str) -> str | None:
        """A submission's settlement names its run (``run:{sid}``)."""
        return run_id_for(submission_id)

    async def settlement_entries(self, conversation_id: str, claim: Any, record: Any,
                                 entry: dict) -> list:
        """The host's record envelope (as reserved) and one per joined
        follower (``joined_envelope``: its host's outcome, no independent
        result, its host's run; what the ledger's finalize settles it with)."""
        own = await self._terminal_records(claim, entry)
        if not joins_followers(record):
            return own
        host = await self.ledger.get(claim.submission_id)
        if not host.joined_count:
            return own
        at = own.index(entry) + 1
        before, entries, after = own[:at - 1], [entry], own[at:]
        # Its followers are open rows of its conversation (one strongly
        # consistent scan; only a host that joined any pays for it).
        for follower in await self.ledger.scan_nonterminal():
            if isinstance(follower, UnreadableSubmission) or follower.join_host != claim.submission_id:
                continue
            if follower.joined_seq is None and not await self._mark_joined(conversation_id, claim,
                                                                           follower.submission_id):
                continue  # joining, its input never applied: the host's finalize puts it back in the queue
            # A joined follower settles with its host's run (its id on the record).
            entries.append(joined_envelope(entry, follower.submission_id, follower.receipt))
        return [*before, *entries, *after]

    async def _mark_joined(self, conversation_id: str, claim: Any, follower_id: str) -> bool:
        """Mark a joining follower joined where its input sits in this run's
        log; False if it is not there (never applied). An attempt that
        applied the input and died before marking it (or was aborted since)
        must not settle without it: the follower would run a second time."""
        batch_id = input_batch_id(follower_id)
        found = await self.log.lookup_batch(conversation_id, batch_id)
        if found is None:
            return False
        await self.ledger.mark_joined(claim, follower_id, input_record_id(follower_id), found.first_seq)
        return True

    # -- sealed fields -------------------------------------------------------------

    async def _seal_records(self, conversation_id: str, batch_id: str, records: list) -> list:
        """The batch's records with their sensitive fields sealed (a reserved
        settlement envelope, a dict, goes as it is: it holds none)."""
        assert self.secrets is not None
        sealer = self.secrets.sealer
        sealed = []
        for index, entry in enumerate(records):
            if type(entry) is tuple:
                family, payload = entry
                entry = (family, await sealer.seal_payload(conversation_id, batch_id, index, family, payload))
            sealed.append(entry)
        return sealed

    async def _opened(self, record: Any, index: int) -> Any:
        """``record``'s payload with its sensitive fields opened (``index``:
        its place in its batch); as it is without secrets."""
        envelope = record.envelope
        if self.secrets is None:
            return envelope.payload
        return await self.secrets.sealer.open_payload(record.conversation_id, record.batch_id, index,
                                                      envelope.family, envelope.payload)

    async def _batch_payload(self, conversation_id: str, batch: BatchRecord) -> Any:
        """The payload of a one-record batch's record, opened."""
        (record,) = await self.log.read(conversation_id, batch.first_seq - 1, 1)
        return await self._opened(record, 0)

    # -- tools ------------------------------------------------------------------

    async def _tool_step(self, conversation_id: str, claim: Any, record: Any, index: int, *,
                         idempotent: bool, doubt_only: bool = False) -> Any:
        """The step's tool call, from where the log left it. ``doubt_only``:
        only mark a call in doubt unknown (``PARKED``); None if there is none."""
        sid = record.submission_id
        # ``record`` was read after the claim: every resolution is in it (no
        # claim grants a head with an open call).
        unknown = record.unknown_calls or {}
        for attempt in range(TOOL_ATTEMPTS_MAX):
            call = tool_call_id(sid, index, attempt)
            settled = await self._recorded_payload(conversation_id, f"tool-{TOOL_SETTLED}:{call}")
            if settled is not None:
                return None if doubt_only else settled["output"]
            if call in unknown:
                resolution = unknown[call]
                # A claim never grants a head with an open call (the abort
                # intent's cleanup excepted: it runs no step).
                assert resolution is not None, (call, record)
                if not doubt_only:
                    await self._append_once(conversation_id, claim, f"tool-{TOOL_RESOLVED}:{call}", [
                        _tool_record(TOOL_RESOLVED, sid, call, resolution=RESOLUTION_NAMES[resolution["resolution"]],
                                     author=resolution["resolver"])])
                if resolution["resolution"] == COMPLETED_WITH_RESULT:
                    if doubt_only:
                        return None
                    output = {"call": call, "result": resolution["result"], "isFailure": False, "reconciled": True}
                    await self._append_once(conversation_id, claim, f"tool-{TOOL_SETTLED}:{call}",
                                            [_tool_record(TOOL_SETTLED, sid, call, output=output)])
                    return output
                continue  # it never happened, or is safe to retry: the next attempt calls again
            prepared = await self.log.lookup_batch(conversation_id, f"tool-{TOOL_PREPARED}:{call}")
            if prepared is not None and not idempotent:
                # Its predecessor prepared it and died (or lost the reply):
                # the call may have happened. Never guess: unknown.
                return await self._unknown(conversation_id, claim, call)
            if doubt_only:
                return None
            return await self._call_tool(conversation_id, claim, record, index, call, idempotent,
                                         prepared=prepared is not None)
        raise AssertionError(f"{sid}: more than {TOOL_ATTEMPTS_MAX} attempts at step {index}")

    async def _call_tool(self, conversation_id: str, claim: Any, record: Any, index: int, call: str,
                         idempotent: bool, *, prepared: bool) -> Any:
        sid = record.submission_id
        tool = "search" if idempotent else "send-email"
        args: dict = {"submission": sid, "step": index}
        fingerprint: dict = {}
        if self.secrets is not None:
            handle = self.secrets.tool_credentials.get(tool)
            if handle is not None:
                args["credential"] = secret_ref(handle)
            if not prepared:
                # What will be sent, fingerprinted under the digest key (its
                # preimage holds the credential), so a reconciler can match
                # the tool's own record of the call.
                sent = await resolve_refs(args, self.secrets.secret_store)
                fingerprint["fingerprint"] = keyed_digest(self.secrets.digest_key, sent)
        # The call's deadline is durable before the call: past it the tool
        # refuses the call, so a reconciler that waits it out knows a call
        # still in flight (a paused owner's) can no longer land.
        deadline_ms = self.now_ms() + self.tool_deadline_ms
        if not prepared:
            # The model's request of the call, and its preparation (the
            # batch's last record: what a successor and a reconciler read).
            where = await self._append_once(conversation_id, claim, f"tool-{TOOL_PREPARED}:{call}", [
                _tool_record(TOOL_REQUESTED, sid, call, tool=tool, args=args),
                _tool_record(TOOL_PREPARED, sid, call, tool=tool, args=args, idempotent=idempotent,
                             deadlineMs=deadline_ms, **fingerprint)])
            if isinstance(where, BatchRecord) and not idempotent:
                return await self._unknown(conversation_id, claim, call)  # another's, with its own deadline
        else:
            # An idempotent call prepared by an attempt that died: again, under its key.
            await self._append_once(conversation_id, claim, f"warning:retried:{call}", [
                (RUN_WARNING_FAMILY, {"runId": run_id_for(sid), "code": "tool-retried-under-key", "call": call})])
        self.failpoints.hit(TOOL_PREPARED_BEFORE_SETTLED)
        if self.step_delay is not None:
            await self.ledger.renew_ownership(claim, self.lease_ms, self.now_ms())
            await self.step_delay(sid, index)
        try:
            if self.secrets is not None:
                # The effect boundary: the only place a credential is resolved (what is sent, never recorded).
                args = await resolve_refs(args, self.secrets.secret_store)
            result = await self.tools.invoke(call, tool, args, call if idempotent else None, deadline_ms)
        except Exception:
            if idempotent:
                raise  # a retry under the same key is safe: the caller's loop tries again
            # Did it happen? The reply is lost: nobody here can tell.
            return await self._unknown(conversation_id, claim, call)
        output = {"call": call, "result": result, "isFailure": False}
        await self._append_once(conversation_id, claim, f"tool-{TOOL_SETTLED}:{call}",
                                [_tool_record(TOOL_SETTLED, sid, call, output=output)])
        self.failpoints.hit(TOOL_RESULTS_APPENDED)
        return output

    async def _unknown(self, conversation_id: str, claim: Any, call: str) -> Any:
        """The call's outcome is unknown: the log says so, then the ledger
        blocks the lane until a reconciler resolves it."""
        await self._append_once(conversation_id, claim, f"tool-{TOOL_UNKNOWN}:{call}", [
            _tool_record(TOOL_UNKNOWN, claim.submission_id, call)])
        if await self._parked(self.ledger.mark_unknown(claim, call)) is not None:
            self.probe.emit("tool.unknown", submission=claim.submission_id, call=call)
        return PARKED

    @staticmethod
    async def _parked(write: Any) -> Any:
        """``write``'s answer (a suspend or mark_unknown of this claim), or
        None when the row settled meanwhile: the ledger answers a write to a
        settled row with ``SettlementConflict`` before it looks at the
        token (another owner settled it after this claim's lease ran out).
        The claim has ended, as with ``OwnershipLost``: nothing to park."""
        try:
            return await write
        except Exception as error:
            if error_name(error) != "SettlementConflict":
                raise
            return None

    # -- approvals ----------------------------------------------------------------

    async def _approval_step(self, conversation_id: str, claim: Any, record: Any, index: int) -> Any:
        sid = record.submission_id
        call = step_call_id(sid, index)
        decided = await self._recorded_payload(conversation_id, f"tool-{APPROVAL_DECIDED}:{call}")
        if decided is None:
            decision = (record.approvals or {}).get(call)  # as of the claim: a resumed one's decision is there
            if decision is None:
                await self._append_once(conversation_id, claim, f"tool-{APPROVAL_REQUESTED}:{call}", [
                    _tool_record(APPROVAL_REQUESTED, sid, call, tool="deploy", args={"submission": sid, "step": index})])
                self.failpoints.hit(APPROVAL_REQUEST_APPENDED)
                suspension = await self._parked(self.ledger.suspend(claim, (call,)))
                if suspension is not None:
                    self.probe.emit("approval.suspended", submission=sid, call=call, resumed=suspension.resumed)
                    self.failpoints.hit(APPROVAL_SUSPENDED)
                return PARKED  # resumed at once or not, the claim ended: the next claim goes on
            # The decision is recorded before anything acts on it.
            entry = _tool_record(APPROVAL_DECIDED, sid, call, decision=decision["decision"],
                                 resolver=decision["resolver"], reason=decision["reason"])
            await self._append_once(conversation_id, claim, f"tool-{APPROVAL_DECIDED}:{call}", [entry])
            decided = entry[1]
            self.failpoints.hit(APPROVAL_DECIDED_BEFORE_EFFECT)
        if decided["decision"] == REJECTED:
            # Rejected: the guarded call and every later step never run.
            raise WorkFailure(ApprovalRejected(call, decided["resolver"], decided["reason"]))
        return {"call": call, "approval": decided["decision"]}

    # -- subagents ------------------------------------------------------------------

    async def _subagent_step(self, conversation_id: str, claim: Any, record: Any, index: int) -> Any:
        sid = record.submission_id
        call = step_call_id(sid, index)
        entry = (record.children or {}).get(call)  # as of the claim
        if entry is not None and entry["releasedAtMs"] is not None:
            accounting = entry["accounting"]
            if entry["child"] is not None:
                # Its child settled and was released before an attempt that
                # attached it logged its start (``RepairSubagentStartLink``).
                await self._started(conversation_id, claim, sid, call, entry["child"])
            await self._append_once(conversation_id, claim, f"subagent-{SUBAGENT_JOINED}:{call}", [
                _joined_entry(sid, call, accounting["child"], accounting["outcome"])])
            self.failpoints.hit(SUBAGENT_JOIN_APPENDED)
            return {"call": call, "child": accounting["child"], "childOutcome": accounting["outcome"]}
        child_conversation = child_conversation_id(conversation_id, record.queue_seq, index)
        if entry is None:
            allocation = {"steps": len(self.child_plan(record, index)), "principal": AGENT_PRINCIPAL,
                          "conversation": child_conversation}
            await self._append_once(conversation_id, claim, f"subagent-{SUBAGENT_REQUESTED}:{call}", [
                (SUBAGENT_FAMILY, {"phase": SUBAGENT_REQUESTED, "submissionId": sid, "call": call,
                                   "allocation": allocation})])
            self.failpoints.hit(SUBAGENT_REQUEST_APPENDED)
            await self.ledger.reserve_child(claim, call, allocation)
            self.failpoints.hit(CHILD_RESERVED_BEFORE_ADMIT)
        if entry is None or entry["child"] is None:
            admission = await self.lifecycle.admit(
                child_conversation, AGENT_PRINCIPAL, call, {"n": record.input["n"], "child": call,
                                                           "plan": list(self.child_plan(record, index))},
                self.now_ms(), complete_replay=True, parent=ParentLink(sid, call))
            await self.ledger.attach_child(claim, call, admission.submission_id)
            await self._append_once(conversation_id, claim, f"subagent-{SUBAGENT_STARTED}:{call}", [
                (SUBAGENT_FAMILY, {"phase": SUBAGENT_STARTED, "submissionId": sid, "call": call,
                                   "child": admission.submission_id,
                                   "parentLink": {"submissionId": sid, "toolCallId": call}})])
            self.failpoints.hit(SUBAGENT_START_APPENDED)
        else:
            # Attached by an attempt that died before logging the start
            # (``RepairSubagentStartLink``): logged now, or found logged.
            await self._started(conversation_id, claim, sid, call, entry["child"])
        suspension = await self._parked(self.ledger.suspend(claim, (), (call,)))
        if suspension is not None:
            self.probe.emit("subagent.waiting", submission=sid, call=call, resumed=suspension.resumed)
            self.failpoints.hit(SUBAGENT_SUSPENDED)
        return PARKED

    async def _started(self, conversation_id: str, claim: Any, sid: str, call: str, child: str) -> None:
        """The ``subagent started`` record of an attached child (append-once)."""
        await self._append_once(conversation_id, claim, f"subagent-{SUBAGENT_STARTED}:{call}", [
            (SUBAGENT_FAMILY, {"phase": SUBAGENT_STARTED, "submissionId": sid, "call": call, "child": child,
                               "parentLink": {"submissionId": sid, "toolCallId": call}})])

    async def process(self, conversation_id: str, claim: Any) -> ProcessOutcome | None:
        outcome = await super().process(conversation_id, claim)
        if outcome is not None:
            record = await self.ledger.get(outcome.submission_id)
            if record.parent is not None:
                self.failpoints.hit(CHILD_SETTLED_BEFORE_WAKE)
                await self._wake_parent(record)
        return outcome

    async def _abort_children(self, conversation_id: str, parent: Any) -> list:
        """An aborted run's subagents, before its settlement record is
        appended (its settlement batch holds what this returns, before the
        settlement): a reservation whose child was never admitted is
        released (``ReleaseOrphanChildReservation``: nothing will ever
        settle it); a child admitted (attached or not: the run's attempt may
        have died between the two) and open is aborted by
        ``SUBAGENT_PARENT_ABORT``; each child gets a ``subagent joined``
        record with its outcome — ``aborted`` once its intent is durable
        (the ledger settles nothing else after it), else the one it settled
        or reserved. A settled child's reservation is released here; an open
        one's when it settles (``_wake_parent``). Idempotent: a successor
        that settles the same run does it again and writes the same."""
        sid = parent.submission_id
        joined = []
        for call, entry in sorted((parent.children or {}).items()):
            if entry["releasedAtMs"] is not None:
                accounting = entry["accounting"]
                if accounting["child"] is not None and await self.log.lookup_batch(
                        conversation_id, f"subagent-{SUBAGENT_JOINED}:{call}") is None:
                    joined.append(_joined_entry(sid, call, accounting["child"], accounting["outcome"]))
                continue
            child = None
            if entry["child"] is not None:
                child = await self.ledger.get(entry["child"])
            if child is None:
                allocation = entry["allocation"]
                child = await self.ledger.get_by_idempotency_key(allocation["conversation"], AGENT_PRINCIPAL, call)
            if child is None:
                release = await self.ledger.release_child(sid, call, ORPHAN_ACCOUNTING, self.now_ms())
                self.probe.emit("subagent.orphan_released", parent=sid, call=call, replayed=release.replayed)
                continue
            if not child.settled:
                await self._abort(child.submission_id, SUBAGENT_PARENT_ABORT)
                self.failpoints.hit(SUBAGENT_CHILD_ABORT_INTENT)
                await self.lifecycle.settle_queued_abort(child.submission_id, self.owner_id)  # a queued child
                child = await self.ledger.get(child.submission_id)
            if child.settled:
                await self.ledger.release_child(sid, call, child_accounting(child), self.now_ms())
                outcome = child.outcome
            elif child.abort_author is not None:
                outcome = ABORTED  # its intent is durable: the ledger settles it aborted, nothing else
            else:
                outcome = settlement_of(child.reserved_record)["outcome"]  # settling already: its reserved record wins
            joined.append(_joined_entry(sid, call, child.submission_id, outcome))
        return joined

    async def _abort(self, submission_id: str, author: str) -> None:
        try:
            await self.ledger.request_abort(submission_id, author, "its parent was aborted", self.now_ms())
        except Exception as error:
            if error_name(error) not in ("AbortConflict", "SettlementConflict", "JoinedToHost"):
                raise  # settling or settled already, or joined to a run: too late, which is fine

    async def _wake_parent(self, child: Any) -> None:
        """Release the parent's reservation with the settled ``child``'s
        accounting: only once the parent attached it (a child can settle
        before its parent, dying between admission and attachment, attached
        it; the parent's next attempt attaches it and a tending pass wakes it)."""
        parent = child.parent
        record = await self.ledger.get(parent.submission_id)
        entry = (record.children or {}).get(parent.tool_call_id) if record is not None else None
        if entry is None:
            return
        if entry["child"] != child.submission_id and not (entry["child"] is None and record.settled):
            return  # not attached yet (the parent's next attempt attaches it), or another child
        release = await self.ledger.release_child(parent.submission_id, parent.tool_call_id,
                                                  child_accounting(child), self.now_ms())
        self.probe.emit("subagent.released", parent=parent.submission_id, call=parent.tool_call_id,
                        child=child.submission_id, replayed=release.replayed)
        self.failpoints.hit(SUBAGENT_RELEASED)

    async def tend(self, scan: tuple) -> None:
        """Release every settled child whose release a crash lost (its
        parent would wait forever otherwise)."""
        for record in scan:
            if isinstance(record, UnreadableSubmission):
                continue
            if not record.ready and record.parent is not None:
                # Admitted, not ready: its parent's attempt died in between.
                # The parent's next attempt completes the admission; a parent
                # that settled meanwhile (aborted) never will: abort it.
                parent = await self.ledger.get(record.parent.submission_id)
                if parent is not None and parent.settled:
                    await self._abort(record.submission_id, SUBAGENT_PARENT_ABORT)
            if not record.children:
                continue
            for call, entry in sorted(record.children.items()):
                if entry["child"] is None or entry["releasedAtMs"] is not None:
                    continue
                child = await self.ledger.get(entry["child"])
                if child is not None and child.settled:
                    await self._wake_parent(child)
