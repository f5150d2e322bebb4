"""Reading a conversation back: every record, its sealed fields opened.

What an application does when it shows or replays a conversation's
history: pages through the log from the start and opens each sensitive
field with the data key it was sealed under, however many rotations ago
(the keyring row of that data key is wrapped under whichever key-encryption
key is live now). A field that cannot be opened — its data key gone, its
key retired, its ciphertext damaged — fails the read, typed
(``EnvelopeDamaged``, ``KeyRetired``, ``UnknownKey``), never silently.
"""
from __future__ import annotations

from typing import Any

from model.secrets.envelope import is_sealed, sensitive_fields

TRANSCRIPT_PAGE = 64  # records a read asks for at a time
TRANSCRIPT_PAGES_MAX = 10_000  # a conversation's log is bounded; more pages is a runaway


async def open_transcript(log: Any, sealer: Any, conversation_id: str, *, page: int = TRANSCRIPT_PAGE) -> list:
    """Every record of ``conversation_id`` as ``(seq, family, payload)``,
    the payload's sealed fields opened. A record's place in its batch (part
    of its fields' associated data) is its seq less its batch's first."""
    assert page >= 1
    opened: list = []
    first_seqs: dict[str, int] = {}  # batch id -> its first seq (bounded by the conversation's batches)
    after = 0
    for _ in range(TRANSCRIPT_PAGES_MAX):
        records = await log.read(conversation_id, after, page)
        for record in records:
            envelope = record.envelope
            payload = envelope.payload
            if any(is_sealed(payload.get(field)) for field in sensitive_fields(envelope.family, payload)):
                first = first_seqs.get(record.batch_id)
                if first is None:
                    batch = await log.lookup_batch(conversation_id, record.batch_id)
                    first = first_seqs[record.batch_id] = batch.first_seq
                payload = await sealer.open_payload(conversation_id, record.batch_id, record.seq - first,
                                                    envelope.family, payload)
            opened.append((record.seq, envelope.family, payload))
        if len(records) < page:
            return opened
        after = records[-1].seq
    raise AssertionError(f"{conversation_id}: more than {TRANSCRIPT_PAGES_MAX} pages")
