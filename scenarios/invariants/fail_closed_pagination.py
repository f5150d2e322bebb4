"""``fail-closed-pagination``: a recovery read is one tail inspection plus
exactly ceil((T - C)/P) pages (C: the checkpoint it started from, or 0; P:
its page size, the spec's 1024 unless a smaller one is configured), and an injected short page, sequence gap or
corrupt row always ends in a typed corruption failure, never in a "complete"
history. A short or gapped page is refused at that page: the read that met it
asks for no later page of that conversation before it fails (a corrupt row
is different: only the digest chain over the whole prefix can tell, so the
read goes on to its end). And the refusal is that page's, with its reason:
the read's failure (``recovery.failed``) names the conversation, the reason
the damaged answer itself shows (``short-page``: fewer records than asked;
``gap``: one out of sequence), the record it expected and the page, all
worked out here from the seqs the damaged answer held. A read that let the
page through and failed later (its chain check, say) fails with another
reason, at no page: the page check did not do its work. (A damaged answer
whose reply was then lost never reached the reader: not judged so.)
"""
from __future__ import annotations

from faults.events import Fault, LogRead, RecoveryFailed, RecoveryRead
from faults.kinds import CORRUPT_ROW, SEQUENCE_GAP, SHORT_PAGE
from sim.invariants import Checker

PAGE_SIZE = 1024
_DAMAGED_READS = (SHORT_PAGE, SEQUENCE_GAP, CORRUPT_ROW)
# What a page's own check sees (fewer records, one out of sequence): refused at the page.
_PAGE_VISIBLE = (SHORT_PAGE, SEQUENCE_GAP)
_READ_ANSWER_SITE = "log.read.answer"
_READ_SITE = LogRead.kind  # the port site log.read, named as its event is
_CORRUPT = "HistoryCorrupted"  # the error a recovery read refuses damaged history with


class FailClosedPagination(Checker):
    name = "fail-closed-pagination"
    kinds = (Fault.kind, LogRead.kind, RecoveryRead.kind, RecoveryFailed.kind)

    def __init__(self) -> None:
        super().__init__()
        self._damaged: dict[str, int] = {}  # node -> damaged reads not yet answered by a failure
        self._answer: dict[str, str] = {}  # node -> the damage of the read answer its next log.read event shows
        # node -> (conversation, after_seq, reason, expected seq) of the
        # first short or gapped page of its current recovery read, until
        # that read ends.
        self._refused: dict[str, tuple[str, int, str | None, int | None]] = {}
        self.caught = 0
        self.refused_at_page = 0  # damaged pages refused at the page, with their own reason

    def metrics(self) -> dict:
        return {"damaged_reads_caught": self.caught, "damaged_pages_refused_with_reason": self.refused_at_page}

    def on_event(self, event: tuple) -> None:
        kind = event.kind
        node = event.node
        fields = event.fields
        if kind == Fault.kind:
            if fields[Fault.kind_] in _DAMAGED_READS:
                self._damaged[node] = self._damaged.get(node, 0) + 1
                if fields[Fault.site] == _READ_ANSWER_SITE:
                    self._answer[node] = fields[Fault.kind_]
            elif fields[Fault.site] == _READ_SITE and node in self._refused:
                # The damaged answer's reply was lost (or the process died
                # with it): the reader never saw the page, so its failure
                # is not that page's refusal.
                conversation, after_seq, _, _ = self._refused[node]
                self._refused[node] = (conversation, after_seq, None, None)
            return
        if kind == LogRead.kind:
            self._on_read(node, fields)
            return
        self.checks += 1
        refused = self._refused.pop(node, None)
        if kind == RecoveryFailed.kind:
            if self._damaged.pop(node, 0):
                self.caught += 1
            # A read that failed as corrupt; one that failed otherwise (a
            # partition, a lost reply) never had the page to judge.
            if refused is not None and refused[2] is not None and fields[RecoveryFailed.error] == _CORRUPT:
                self._judge_refusal(refused, fields)
            return
        conversation = fields[RecoveryRead.conversation]
        if self._damaged.get(node):
            self.fail(f"{conversation}: recovery accepted a history read through a damaged page", (conversation,))
            return
        tail_seq = fields[RecoveryRead.tail_seq]
        due = tail_seq - fields.get(RecoveryRead.from_checkpoint, 0)
        expected_requests = 1 + -(-due // fields.get(RecoveryRead.page_size, PAGE_SIZE))
        requests, records = fields[RecoveryRead.requests], fields[RecoveryRead.records]
        if requests != expected_requests or records != due:
            self.fail(f"{conversation}: recovery read of {due} records made {requests} requests for {records} "
                      f"records (expected {expected_requests} for {due})", (conversation,))

    def _on_read(self, node: str, fields: dict) -> None:
        conversation, after_seq = fields[LogRead.conversation], fields[LogRead.after_seq]
        damage = self._answer.pop(node, None)
        refused = self._refused.get(node)
        if refused is not None and refused[0] == conversation:
            self.checks += 1
            if after_seq > refused[1]:
                self.fail(f"{conversation}: read on after seq {after_seq} past a damaged page after seq "
                          f"{refused[1]} (the page check let it through)", (conversation,))
                del self._refused[node]
        elif damage in _PAGE_VISIBLE and refused is None and LogRead.error not in fields:
            self._refused[node] = (conversation, after_seq, *_page_refusal(after_seq, fields[LogRead.limit],
                                                                          fields[LogRead.seqs]))

    def _judge_refusal(self, refused: tuple, fields: dict) -> None:
        conversation, after_seq, reason, expected_seq = refused
        got = (fields.get(RecoveryFailed.conversation), fields.get(RecoveryFailed.reason),
               fields.get(RecoveryFailed.expected_seq), fields.get(RecoveryFailed.page))
        if got == (conversation, reason, expected_seq, after_seq):
            self.refused_at_page += 1
        else:
            self.fail(f"{conversation}: the page after seq {after_seq} was damaged ({reason}, seq {expected_seq} "
                      f"due) but the recovery read failed with {fields[RecoveryFailed.error]} naming "
                      f"{got[1] or 'no reason'} (seq {got[2]}, page {got[3]}, conversation {got[0]}): it was not "
                      "refused at that page", (conversation,))


def _page_refusal(after_seq: int, limit: int, seqs: tuple) -> tuple[str | None, int | None]:
    """Why a page's own check must refuse the answer ``seqs`` to a read of
    ``limit`` records after ``after_seq``, and the record it expected."""
    for offset, seq in enumerate(seqs[:limit]):
        if seq != after_seq + offset + 1:
            return ("gap", after_seq + offset + 1)
    if len(seqs) < limit:
        return ("short-page", after_seq + len(seqs) + 1)
    if len(seqs) > limit:
        return ("long-page", after_seq + limit + 1)
    return (None, None)
