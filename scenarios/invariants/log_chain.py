"""``log-chain``: logs are gap-free, batches atomic, record ids unique, and the
tail digest recomputes from the chain.

The oracle has its own copy of the chain construction (not the store's):
``sha256(canonical({"batchDigest", "firstSeq", "previousTailDigest"}))``
from 64 zeros, the batch digest being ``sha256(canonical({"batchId",
"conversationId", "epoch", "producerId", "records"}))``. Online, every
committed append must start right after the previous tail, cover exactly
its records and link its batch digest into the digest the oracle computes
(whether the batch digest is the digest of the request's records is the
reference model's check, on every append). Audit: read every log back from
the store, recompute every batch digest from the stored records and the
whole chain from them; record ids must be unique.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from faults.events import LogAppend, LogDeleteConversation
from model.canonical import ZERO_DIGEST, digest
from sim.invariants import Checker

if TYPE_CHECKING:
    from scenarios.system import AuditView


def oracle_chain_step(previous: str, batch_digest: str, first_seq: int) -> str:
    return digest({"batchDigest": batch_digest, "firstSeq": first_seq, "previousTailDigest": previous})


def oracle_batch_digest(conversation_id: str, batch_id: str, envelopes: list) -> str:
    head = envelopes[0]
    return digest({"batchId": batch_id, "conversationId": conversation_id, "epoch": head.get("epoch"),
                   "producerId": head.get("producerId"), "records": envelopes})


class LogChain(Checker):
    name = "log-chain"
    kinds = (LogAppend.kind, LogDeleteConversation.kind)

    def __init__(self) -> None:
        super().__init__()
        self._tail: dict[str, tuple[int, str]] = {}  # conversation -> (tail seq, tail digest)

    def on_event(self, event: tuple) -> None:
        fields = event.fields
        if LogAppend.error in fields or fields.get(LogAppend.replayed):
            return
        if event.kind == LogDeleteConversation.kind:
            if fields.get(LogDeleteConversation.deleted):
                # Deleted whole: a conversation created again under its id starts from seq 1 and zeros.
                self._tail.pop(fields[LogDeleteConversation.conversation], None)
            return
        self.checks += 1
        conversation = fields[LogAppend.conversation]
        batch = fields[LogAppend.batch]
        envelopes = fields[LogAppend.envelopes]
        first_seq, last_seq = fields[LogAppend.first_seq], fields[LogAppend.last_seq]
        tail_seq, tail_digest = self._tail.get(conversation, (0, ZERO_DIGEST))
        count = len(envelopes)
        if first_seq != tail_seq + 1:
            self.fail(f"{conversation}: batch {batch} starts at {first_seq}, tail was {tail_seq}", (conversation,))
        elif last_seq - first_seq + 1 != count:
            self.fail(f"{conversation}: batch {batch} of {count} records covers {first_seq}..{last_seq}",
                      (conversation,))
        else:
            expected = oracle_chain_step(tail_digest, fields[LogAppend.batch_digest], first_seq)
            if expected != fields[LogAppend.tail_digest]:
                self.fail(f"{conversation}: tail digest after batch {batch} does not recompute", (conversation,))
        self._tail[conversation] = (last_seq, fields[LogAppend.tail_digest])

    def audit(self, view: AuditView) -> None:
        for conversation_id in view.conversation_ids():
            self.checks += 1
            records = view.log_records(conversation_id)
            tail = view.log_tail(conversation_id)
            seen: set[str] = set()
            chain = ZERO_DIGEST
            batch: list = []
            batch_id = None
            batch_first = 1
            for expected_seq, record in enumerate(records, 1):
                if record.seq != expected_seq:
                    self.fail(f"{conversation_id}: gap at {expected_seq}", (conversation_id,))
                    return
                if record.envelope.record_id in seen:
                    self.fail(f"{conversation_id}: record id {record.envelope.record_id} reused", (conversation_id,))
                    return
                seen.add(record.envelope.record_id)
                if record.batch_id != batch_id:
                    if batch:
                        chain = oracle_chain_step(chain, oracle_batch_digest(conversation_id, batch_id, batch),
                                                  batch_first)
                    batch_id, batch_first, batch = record.batch_id, record.seq, []
                batch.append(record.envelope.to_json())
            if batch:
                chain = oracle_chain_step(chain, oracle_batch_digest(conversation_id, batch_id, batch), batch_first)
            if tail is not None and (len(records), chain) != (tail.tail_seq, tail.tail_digest):
                self.fail(f"{conversation_id}: the chain over {len(records)} records does not recompute "
                          "to the stored tail", (conversation_id,))

    # Conversation by conversation: what retention deletes is audited first.
    audit_retiring = audit

