"""The port-storm adversary's episodes on the submission ledger: admission
and its replays, claims under leases (at the lease-expiry instant and one
millisecond before), settlement reserve/finalize with identical and
conflicting retries, aborts before, during and after settlement, purges,
illegal arguments, admission policies (``scenarios.adversaries.admission``),
and the shared conversations every node races on."""
from __future__ import annotations

from typing import Any, Callable

import attrs

from model.ledger.records import Claim, ParentLink
from scenarios.adversaries.admission import admission_policies
from scenarios.adversaries.client import Outcome
from scenarios.adversaries.common import _canonical_equal, _matches, _outcome_of, _reordered, _typed
from scenarios.adversaries.process import MAX_SAFE, PRINCIPAL, WAITS_MAX, ProcessCore


class LedgerEpisodes(ProcessCore):
    """The submission ledger's episodes."""

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
        again = await self.call("ledger", "admit", conv, PRINCIPAL, key, value,
                              self.chosen_ms("ledger", "admit", self.now() + 1))
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
        replay = await self.call("ledger", "finalize_settlement", sid,
                               self.chosen_ms("ledger", "finalize_settlement", self.now() + 1_000))
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
        """Admission groups, fences and metadata (``scenarios.adversaries.admission``)."""
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
        await self.sleep_to(expires_ms - 1)  # on this node's clock, which the ledger decides by
        if self.now() != expires_ms - 1:
            self.w.edge("lease_instant_missed")  # paused past it: the instant is gone
        else:
            early = await self.call("ledger", "claim", conv, owner_b, self.lease_ms, expires_ms - 1)
            if self.expect(early.ok and early.value is None,
                           f"claim of {conv} 1 ms before the lease expires answered {early.show()}", conv):
                self.w.edge("claim_blocked_before_expiry")
            if self.world.clocks is None:
                await self.runtime.sleep_ms(1)
            else:
                await self.sleep_to(expires_ms)
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
        await self.sleep_to(taken.lease_expires_ms + 1)
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
