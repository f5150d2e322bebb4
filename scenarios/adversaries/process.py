"""The port-storm adversary's process: its plumbing, shared by the episodes
of every port (``scenarios.adversaries.adversary`` combines them).

``ProcessCore`` is one incarnation of one adversary node: its identities
(private and shared names), its calls (injected retryable errors retried
with the same arguments), its expectations, and its recovery (a new
incarnation carries its predecessors' private leftovers to settlement).
The values at the edges every episode draws from are here too."""
from __future__ import annotations

from typing import Any, Callable

import attrs

from faults.ports import STREAM_METHODS
from model.claimcheck import INLINE_CAP_BYTES_DEFAULT
from model.conversation.records import FencedAppendRequest, RecordEnvelope
from model.conversation.sqlite_store import SPILL_THRESHOLD_BYTES_DEFAULT
from model.ledger.records import Claim
from model.retry import error_name, is_retryable
from scenarios.adversaries.client import (RETRIES_MAX, UNREACHABLE, ClientProcess, Outcome, committed_unheard,
                                          retry_wait_ms)
from scenarios.adversaries.common import _drained, _is_envelope, _matches, _outcome_of, _typed, digest_of
from sim.node import Node, NodeDeadError
from sim.world import World


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


# A settlement envelope's creation time in the adversary's reservations: one
# constant, so an identical retry reserves the identical record.
SETTLEMENT_CREATED_MS = 0


#: The settlement payload's members that name it; the others are the outcome record's.
_SETTLEMENT_IDS = ("submissionId", "settlementId", "receiptId", "runId")


class ProcessCore(ClientProcess):
    """One incarnation of one adversary node: its ports, its stream, what it
    knows (only what it read from the stores since it started); the episodes
    of each port are mixins over it."""

    def __init__(self, workload: Any, world: World, node: Node) -> None:
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
                    if committed_unheard(error):
                        lost += 1
                        self.w.edge("replies_lost_retried")
                    if error_name(error) == UNREACHABLE:
                        self.w.edge("unreachable_retried")
                    self.w.retries += 1
                    await self.runtime.sleep_ms(retry_wait_ms(error, self.rng))
                    continue
                return Outcome(None, error, lost, attempt)
            if method == "admit" and type(getattr(value, "receipt", None)) is str:
                self.w.receipts[value.submission_id] = value.receipt
            leases = getattr(self.w, "leases", None)  # which processes hold a claim (partitions prefer them)
            if leases is not None and port == "ledger" and method in ("claim", "renew_ownership") and value is not None:
                leases[self.label] = getattr(value, "lease_expires_ms", 0)
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
                await self.runtime.sleep_ms(self.rng.between(5, 500) if error_name(error) != UNREACHABLE
                                            else retry_wait_ms(error, self.rng))
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
