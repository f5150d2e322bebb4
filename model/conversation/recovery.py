"""The recovery read (persistence §7, STORE-015).

Capture the strongly consistent tail T with one ``inspect_tail``, then read
exactly the prefix 1..T in ceil(T / 1024) pages of PAGE_SIZE_MAX (page i
asks for seqs i*1024+1 .. min((i+1)*1024, T), so appends racing the pass are
never read into it). Pagination is fail-closed: a page with fewer (or more)
records than asked, or a record out of sequence, is ``HistoryCorrupted`` —
never a shorter "complete" history. Each refusal names its reason and the
record it expected (``HistoryCorrupted.reason``, ``expected_seq``, and the
page, ``page_after_seq``, for a page's own check). The prefix's digest chain must then
recompute to the captured tail digest (records carry ``batch_id``, which is
all the chain needs; see ``rules``).

Nothing is cached: the caller owns the one conversation's prefix and drops
it after its recovery group.

``read_recovery_suffix`` is the same read after a checkpoint (§8): only the
records after the checkpoint's ``covered_seq``, their chain recomputed from
the checkpoint's tail digest. A log whose tail is behind the checkpoint is
``HistoryCorrupted`` too: the log never shrinks.
"""
from __future__ import annotations

import attrs

from model.canonical import ZERO_DIGEST

from .records import PAGE_SIZE_MAX, CanonicalRecord, ConversationTail, HistoryCorrupted
from .rules import recompute_chain


@attrs.frozen
class RecoveryPrefix:
    tail: ConversationTail
    records: tuple[CanonicalRecord, ...]
    #: Store calls made: 1 + ceil(tail.tail_seq / PAGE_SIZE_MAX).
    request_count: int


def recovery_page_count(tail_seq: int, page_size: int = PAGE_SIZE_MAX) -> int:
    return -(-tail_seq // page_size)


async def read_recovery_prefix(store, conversation_id: str, *, page_size: int = PAGE_SIZE_MAX) -> RecoveryPrefix:
    return await read_recovery_suffix(store, conversation_id, after_seq=0, after_digest=ZERO_DIGEST,
                                      page_size=page_size)


async def read_recovery_suffix(store, conversation_id: str, *, after_seq: int, after_digest: str,
                               page_size: int = PAGE_SIZE_MAX) -> RecoveryPrefix:
    """Records ``after_seq + 1 .. T`` of the log whose chain at ``after_seq``
    (a batch boundary) is ``after_digest``, verified like the prefix.
    ``page_size`` (at most PAGE_SIZE_MAX, the spec's page): smaller pages
    make a short log paginate, which is how a simulation exercises it."""
    assert 1 <= page_size <= PAGE_SIZE_MAX, page_size
    start_seq = after_seq
    tail = await store.inspect_tail(conversation_id)
    requests = 1
    total = tail.tail_seq
    if total < start_seq:
        raise HistoryCorrupted(conversation_id, start_seq, total,
                               f"the log's tail {total} is behind a checkpoint at {start_seq}",
                               HistoryCorrupted.BEHIND_CHECKPOINT)
    records: list[CanonicalRecord] = []
    for page in range(recovery_page_count(total - start_seq, page_size)):
        after_seq = start_seq + page * page_size
        want = min(page_size, total - after_seq)
        got = await store.read(conversation_id, after_seq, want)
        requests += 1
        for offset, record in enumerate(got[:want]):
            expected = after_seq + offset + 1
            if record.seq != expected:
                raise HistoryCorrupted(conversation_id, expected, record.seq, "non-contiguous page",
                                       HistoryCorrupted.GAP, after_seq)
        if len(got) != want:
            expected = after_seq + len(got) + 1
            raise HistoryCorrupted(
                conversation_id, expected if len(got) < want else after_seq + want + 1,
                None if len(got) < want else got[want].seq,
                f"page after seq {after_seq} returned {len(got)} records, expected {want}",
                HistoryCorrupted.SHORT_PAGE if len(got) < want else HistoryCorrupted.LONG_PAGE, after_seq,
            )
        records.extend(got)
    recomputed = recompute_chain(conversation_id, records, start_seq + 1, after_digest)
    if recomputed != tail.tail_digest:
        raise HistoryCorrupted(conversation_id, total, total, "digest chain does not recompute to the tail digest",
                               HistoryCorrupted.CHAIN_MISMATCH)
    return RecoveryPrefix(tail, tuple(records), requests)
