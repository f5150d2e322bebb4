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
  it: the step's output names the decision.
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

from model.failpoints import (APPROVAL_DECIDED_BEFORE_EFFECT, CHILD_SETTLED_BEFORE_WAKE,
                              FOLLOWER_APPENDED_BEFORE_JOINED, TOOL_PREPARED_BEFORE_SETTLED)
from model.ledger.records import ABORTED, COMPLETED_WITH_RESULT, ParentLink, UnreadableSubmission
from model.retry import error_name
from model.canonical import digest
from model.conversation.records import BatchRecord
from model.ledger.rules import joined_record
from model.lifecycle import INPUT_FAMILY, input_batch_id, input_entry, settled_entry
from model.submissions import PARKED, ProcessOutcome, SubmissionWorker

# Step kinds of a plan (``request["plan"]``).
MODEL, TOOL, TOOL_ONCE, APPROVAL, SUBAGENT = "model", "tool", "tool-once", "approval", "subagent"
STEP_KINDS: tuple[str, ...] = (MODEL, TOOL, TOOL_ONCE, APPROVAL, SUBAGENT)
# What an agent writes to the log besides the lifecycle's records: the
# canonical families ``tool-call`` and ``subagent``, a ``phase`` each (also
# the prefix of the batch id, so a successor looks each one up).
TOOL_CALL_FAMILY, SUBAGENT_FAMILY = "tool-call", "subagent"
TOOL_PREPARED, TOOL_SETTLED = "prepared", "settled"
APPROVAL_REQUESTED, APPROVAL_DECIDED = "approval-requested", "approval-decided"
SUBAGENT_STARTED = "started"
AGENT_PRINCIPAL = "agent"
# A step's attempts at a tool: each NeverHappened/SafeToRetry resolution
# opens one more. A reconciler that says "retry" forever is a runaway.
TOOL_ATTEMPTS_MAX = 64
# How long after its preparation a tool call may still land: past it the
# tool refuses it (a reconciler waits this out before it says the call never
# happened).
TOOL_DEADLINE_MS = 30_000


JOIN_LIMIT = 4  # follow-ups one run takes at a time


def joins_followers(record: Any) -> bool:
    """Does this run take the follow-ups queued behind it (``request["joins"]``)?"""
    return isinstance(record.input, dict) and record.input.get("joins") is True


def plan_of(record: Any) -> tuple[str, ...]:
    request = record.input
    plan = request.get("plan", ()) if isinstance(request, dict) else ()
    assert all(kind in STEP_KINDS for kind in plan), plan
    return tuple(plan)


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


def _tool_record(phase: str, submission_id: str, call: str, **fields: Any) -> tuple[str, dict]:
    return TOOL_CALL_FAMILY, {"phase": phase, "submissionId": submission_id, "call": call, **fields}


class AgentWorker(SubmissionWorker):
    """A submission worker whose steps follow the request's plan.

    ``tools``: the process's binding of the tool service (``invoke(call_id,
    tool, args, idempotency_key, deadline_ms)`` -> result, refusing a call
    that arrives after its deadline); ``child_plan(record, index)``: the plan
    of the subagent step ``index`` of ``record`` starts."""

    def __init__(self, *args: Any, tools: Any, child_plan: Callable[[Any, int], list],
                 tool_deadline_ms: int = TOOL_DEADLINE_MS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        assert tool_deadline_ms > 0, tool_deadline_ms
        self.tools = tools
        self.child_plan = child_plan
        self.tool_deadline_ms = tool_deadline_ms

    def step_count(self, record: Any) -> int:
        return len(plan_of(record))

    async def run_step(self, conversation_id: str, claim: Any, record: Any, index: int) -> Any:
        if joins_followers(record):
            await self._join_followers(conversation_id, claim)
        kind = plan_of(record)[index]
        if kind == MODEL:
            return await super().run_step(conversation_id, claim, record, index)
        if kind in (TOOL, TOOL_ONCE):
            return await self._tool_step(conversation_id, claim, record, index, idempotent=kind == TOOL)
        if kind == APPROVAL:
            return await self._approval_step(conversation_id, claim, record, index)
        assert kind == SUBAGENT, kind
        return await self._subagent_step(conversation_id, claim, record, index)

    # -- joins -------------------------------------------------------------------

    async def _join_followers(self, conversation_id: str, claim: Any) -> None:
        """Take the ready follow-ups queued behind this run (``begin_join``)
        and apply each one's input to this run's log, then mark it joined
        there: it settles with this run. A follower whose input is already
        in the log (an earlier attempt died before marking it) is marked at
        the position it has."""
        batch = await self.ledger.begin_join(claim, JOIN_LIMIT)
        for follower_id in batch.followers:
            follower = await self.ledger.get(follower_id)
            if follower.joined_seq is not None:
                continue
            payload = input_entry(follower_id, follower.input, follower.principal_id, follower.idempotency_key,
                                  follower.queue_seq)[1]
            # Append-once: an earlier attempt may have applied it already.
            await self._append_once(conversation_id, claim, input_batch_id(follower_id),
                                    [(INPUT_FAMILY, {**payload, "hostSubmissionId": claim.submission_id})])
            self.failpoints.hit(FOLLOWER_APPENDED_BEFORE_JOINED)
            joined = await self._mark_joined(conversation_id, claim, follower_id)
            assert joined, follower_id
            self.probe.emit("submission.joined", submission=follower_id, host=claim.submission_id)

    async def settlement_entries(self, conversation_id: str, claim: Any, record: Any,
                                 entry: tuple[str, Any]) -> list:
        """The host's record and one per joined follower: its host's outcome,
        no independent result (what the ledger's finalize settles it with)."""
        if not joins_followers(record):
            return [entry]
        host = await self.ledger.get(claim.submission_id)
        if not host.joined_count:
            return [entry]
        follower_record = joined_record(entry[1]["record"])
        entries = [entry]
        # Its followers are open rows of its conversation (one strongly
        # consistent scan; only a host that joined any pays for it).
        for follower in await self.ledger.scan_nonterminal():
            if isinstance(follower, UnreadableSubmission) or follower.join_host != claim.submission_id:
                continue
            if follower.joined_seq is None and not await self._mark_joined(conversation_id, claim,
                                                                           follower.submission_id):
                continue  # joining, its input never applied: the host's finalize puts it back in the queue
            entries.append(settled_entry(follower.submission_id, digest(follower_record), follower_record))
        return entries

    async def _mark_joined(self, conversation_id: str, claim: Any, follower_id: str) -> bool:
        """Mark a joining follower joined where its input sits in this run's
        log; False if it is not there (never applied). An attempt that
        applied the input and died before marking it (or was aborted since)
        must not settle without it: the follower would run a second time."""
        batch_id = input_batch_id(follower_id)
        found = await self.log.lookup_batch(conversation_id, batch_id)
        if found is None:
            return False
        await self.ledger.mark_joined(claim, follower_id, f"{batch_id}#0", found.first_seq)
        return True

    # -- tools ------------------------------------------------------------------

    async def _tool_step(self, conversation_id: str, claim: Any, record: Any, index: int, *,
                         idempotent: bool) -> Any:
        sid = record.submission_id
        # ``record`` was read after the claim: every resolution is in it (no
        # claim grants a head with an open call).
        unknown = record.unknown_calls or {}
        for attempt in range(TOOL_ATTEMPTS_MAX):
            call = tool_call_id(sid, index, attempt)
            settled = await self._recorded_payload(conversation_id, f"tool-{TOOL_SETTLED}:{call}")
            if settled is not None:
                return settled["output"]
            if call in unknown:
                resolution = unknown[call]
                # A claim never grants a head with an open call (the abort
                # intent's cleanup excepted: it runs no step).
                assert resolution is not None, (call, record)
                if resolution["resolution"] == COMPLETED_WITH_RESULT:
                    output = {"call": call, "result": resolution["result"], "reconciled": True}
                    await self._append_once(conversation_id, claim, f"tool-{TOOL_SETTLED}:{call}",
                                            [_tool_record(TOOL_SETTLED, sid, call, output=output)])
                    return output
                continue  # it never happened, or is safe to retry: the next attempt calls again
            prepared = await self.log.lookup_batch(conversation_id, f"tool-{TOOL_PREPARED}:{call}")
            if prepared is not None and not idempotent:
                # Its predecessor prepared it and died (or lost the reply):
                # the call may have happened. Never guess: unknown.
                return await self._unknown(claim, call)
            return await self._call_tool(conversation_id, claim, record, index, call, idempotent,
                                         prepared=prepared is not None)
        raise AssertionError(f"{sid}: more than {TOOL_ATTEMPTS_MAX} attempts at step {index}")

    async def _call_tool(self, conversation_id: str, claim: Any, record: Any, index: int, call: str,
                         idempotent: bool, *, prepared: bool) -> Any:
        sid = record.submission_id
        tool = "search" if idempotent else "send-email"
        args = {"submission": sid, "step": index}
        # The call's deadline is durable before the call: past it the tool
        # refuses the call, so a reconciler that waits it out knows a call
        # still in flight (a paused owner's) can no longer land.
        deadline_ms = self.now_ms() + self.tool_deadline_ms
        if not prepared:
            where = await self._append_once(conversation_id, claim, f"tool-{TOOL_PREPARED}:{call}", [
                _tool_record(TOOL_PREPARED, sid, call, tool=tool, args=args, idempotent=idempotent,
                             deadlineMs=deadline_ms)])
            if isinstance(where, BatchRecord) and not idempotent:
                return await self._unknown(claim, call)  # another's preparation, with its own deadline
        self.failpoints.hit(TOOL_PREPARED_BEFORE_SETTLED)
        if self.step_delay is not None:
            await self.ledger.renew_ownership(claim, self.lease_ms, self.now_ms())
            await self.step_delay(sid, index)
        try:
            result = await self.tools.invoke(call, tool, args, call if idempotent else None, deadline_ms)
        except Exception:
            if idempotent:
                raise  # a retry under the same key is safe: the caller's loop tries again
            # Did it happen? The reply is lost: nobody here can tell.
            return await self._unknown(claim, call)
        output = {"call": call, "result": result}
        await self._append_once(conversation_id, claim, f"tool-{TOOL_SETTLED}:{call}",
                                [_tool_record(TOOL_SETTLED, sid, call, output=output)])
        return output

    async def _unknown(self, claim: Any, call: str) -> Any:
        await self.ledger.mark_unknown(claim, call)
        self.probe.emit("tool.unknown", submission=claim.submission_id, call=call)
        return PARKED

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
                suspension = await self.ledger.suspend(claim, (call,))
                self.probe.emit("approval.suspended", submission=sid, call=call, resumed=suspension.resumed)
                return PARKED  # resumed at once or not, the claim ended: the next claim goes on
            # The decision is recorded before anything acts on it.
            entry = _tool_record(APPROVAL_DECIDED, sid, call, decision=decision["decision"],
                                 resolver=decision["resolver"], reason=decision["reason"])
            await self._append_once(conversation_id, claim, f"tool-{APPROVAL_DECIDED}:{call}", [entry])
            decided = entry[1]
            self.failpoints.hit(APPROVAL_DECIDED_BEFORE_EFFECT)
        return {"call": call, "approval": decided["decision"]}

    # -- subagents ------------------------------------------------------------------

    async def _subagent_step(self, conversation_id: str, claim: Any, record: Any, index: int) -> Any:
        sid = record.submission_id
        call = step_call_id(sid, index)
        entry = (record.children or {}).get(call)  # as of the claim
        if entry is not None and entry["releasedAtMs"] is not None:
            accounting = entry["accounting"]
            return {"call": call, "child": accounting["child"], "childOutcome": accounting["outcome"]}
        child_conversation = child_conversation_id(conversation_id, record.queue_seq, index)
        if entry is None:
            await self.ledger.reserve_child(claim, call, {"steps": len(self.child_plan(record, index)),
                                                          "principal": AGENT_PRINCIPAL,
                                                          "conversation": child_conversation})
        if entry is None or entry["child"] is None:
            admission = await self.lifecycle.admit(
                child_conversation, AGENT_PRINCIPAL, call, {"n": record.input["n"], "child": call,
                                                           "plan": list(self.child_plan(record, index))},
                self.now_ms(), complete_replay=True, parent=ParentLink(sid, call))
            await self.ledger.attach_child(claim, call, admission.submission_id)
            await self._append_once(conversation_id, claim, f"subagent-{SUBAGENT_STARTED}:{call}", [
                (SUBAGENT_FAMILY, {"phase": SUBAGENT_STARTED, "submissionId": sid, "call": call,
                                   "child": admission.submission_id})])
        suspension = await self.ledger.suspend(claim, (), (call,))
        self.probe.emit("subagent.waiting", submission=sid, call=call, resumed=suspension.resumed)
        return PARKED

    async def process(self, conversation_id: str, claim: Any) -> ProcessOutcome | None:
        outcome = await super().process(conversation_id, claim)
        if outcome is not None:
            record = await self.ledger.get(outcome.submission_id)
            if outcome.settlement.outcome == ABORTED and record.children:
                await self._abort_children(record)
            if record.parent is not None:
                self.failpoints.hit(CHILD_SETTLED_BEFORE_WAKE)
                await self._wake_parent(record)
        return outcome

    async def _abort_children(self, parent: Any) -> None:
        """An aborted run aborts the subagents it started (attached or only
        admitted: its own attempt may have died between the two)."""
        for call, entry in sorted(parent.children.items()):
            allocation = entry["allocation"]
            child = await self.ledger.get_by_idempotency_key(allocation["conversation"], AGENT_PRINCIPAL, call)
            if child is not None and not child.settled:
                await self._abort(child.submission_id, parent.submission_id)

    async def _abort(self, submission_id: str, author: str) -> None:
        try:
            await self.ledger.request_abort(submission_id, author, "its parent was aborted", self.now_ms())
        except Exception as error:
            if error_name(error) not in ("AbortConflict", "JoinedToHost"):
                raise  # settling or settled already, or joined to a run: too late, which is fine

    async def _wake_parent(self, child: Any) -> None:
        """Release the parent's reservation with the settled ``child``'s
        accounting: only once the parent attached it (a child can settle
        before its parent, dying between admission and attachment, attached
        it; the parent's next attempt attaches it and a tending pass wakes it)."""
        parent = child.parent
        record = await self.ledger.get(parent.submission_id)
        entry = (record.children or {}).get(parent.tool_call_id) if record is not None else None
        if entry is None or entry["child"] != child.submission_id:
            return
        release = await self.ledger.release_child(parent.submission_id, parent.tool_call_id,
                                                  child_accounting(child), self.now_ms())
        self.probe.emit("subagent.released", parent=parent.submission_id, call=parent.tool_call_id,
                        child=child.submission_id, replayed=release.replayed)

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
                    await self._abort(record.submission_id, parent.submission_id)
            if not record.children:
                continue
            for call, entry in sorted(record.children.items()):
                if entry["child"] is None or entry["releasedAtMs"] is not None:
                    continue
                child = await self.ledger.get(entry["child"])
                if child is not None and child.settled:
                    await self._wake_parent(child)
