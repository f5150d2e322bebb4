"""The port-storm adversary's episodes on the ledger's waits and handoffs:
cooperative handoffs, tool calls whose outcome is unknown and their
resolutions, approvals, hosts joining followers, and subagent children
(reservations, attachment, release) waking their suspended parents."""
from __future__ import annotations

import attrs

from model.ledger.conformance import HANDOFF_SCENARIOS
from model.ledger.records import ClaimHandoff, ParentLink
from scenarios.adversaries.common import _reordered
from scenarios.adversaries.process import PRINCIPAL, _SETTLEMENT_IDS, ProcessCore


class LedgerWaitEpisodes(ProcessCore):
    """The ledger's waits and handoffs."""

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
