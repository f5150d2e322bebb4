"""The port-storm adversary's episodes on the conversation log: logs past
one page read at and across page boundaries, digests inside and at batch
boundaries, fenced appends and every conflict they can meet (tail, batch
digest, record identity, epochs), batches on the record and byte caps,
envelopes on the canonical-JSON bounds, deletion, and observation resumed
from stored offsets."""
from __future__ import annotations

from typing import Any

from model.canonical import ZERO_DIGEST
from model.conversation.records import (BATCH_BYTES_MAX, BATCH_RECORDS_MAX, PAGE_SIZE_MAX, FencedAppendRequest,
                                        RecordEnvelope)
from model.durable_state.store import DurableStateWrite
from scenarios.adversaries.common import _sized, _values
from scenarios.adversaries.process import (DEPLOYMENT, ENVELOPE_DEPTH_BOUND, ENVELOPE_NODES_BOUND, SPILL_BYTES, UNKNOWN,
                                           ProcessCore)


class LogEpisodes(ProcessCore):
    """The conversation log's episodes."""

    def envelope(self, record_id: str, producer: str, epoch: int, payload: Any, family: str = "model-output",
                 created_ms: int | None = None) -> RecordEnvelope:
        return RecordEnvelope(record_id, family, 1, self.now() if created_ms is None else created_ms, DEPLOYMENT,
                              payload, producer, epoch)

    async def read_checked(self, conv: str, after: int, limit: int, written: list[RecordEnvelope],
                           batches: list[str]) -> tuple | None:
        """A read whose answer must be exactly what was written; an answer a
        read fault may have damaged is read again (fail closed, never trusted)."""
        want_seqs = list(range(after + 1, min(after + limit, len(written)) + 1))
        for _ in range(8):
            fired = self.world.faults_fired
            out = await self.call("log", "read", conv, after, limit)
            if not self.expect_ok(out, f"log.read({conv}, {after}, {limit})", conv):
                return None
            records = out.value
            # Envelopes compare as values (a read decodes 1.0 back as 1, -0.0 as 0: equal numbers).
            good = [r.seq for r in records] == want_seqs and all(
                r.conversation_id == conv and r.batch_id == batches[r.seq - 1] and r.envelope == written[r.seq - 1]
                for r in records)
            if good:
                return records
            if self.world.faults_fired == fired:
                self.expect(False, f"log.read({conv}, after {after}, limit {limit}) answered seqs "
                                   f"{[r.seq for r in records][:4]}..{[r.seq for r in records][-3:]} "
                                   f"({len(records)}), wrote {len(written)}: expected {len(want_seqs)} "
                                   f"from {after + 1}, as written", conv)
                return None
            self.w.edge("damaged_reads_reread")
        return None

    async def long_log(self) -> None:
        """A log past one page, read on the default page, at and across page
        boundaries; every append conflict; digests at and inside batches;
        payloads on the SQLite spill threshold; deletion."""
        conv = f"g-{self.node.name}-{self.label}-{self._next()}"
        producer = self.label
        mat = await self.call("log", "materialize", conv, producer, 1)
        if not self.expect_ok(mat, f"materialize({conv})", conv):
            return
        written: list[RecordEnvelope] = []
        batches: list[str] = []
        boundaries: dict[int, str] = {0: ZERO_DIGEST}
        infos: list[tuple[str, int, int, str]] = []  # (batch id, first seq, last seq, tail digest)
        tail = (0, ZERO_DIGEST)
        # A node's first long log opens with a full batch (the record cap exactly).
        first = BATCH_RECORDS_MAX if self.w.long_logs.get(self.node.name) == 1 and self.node.incarnation == 1 else (
            self.rng.choice((BATCH_RECORDS_MAX, BATCH_RECORDS_MAX - 1, 200, 150)))
        # Batches of at most the record cap until the log is past one page,
        # then one of records at the spill sizes.
        over_page = PAGE_SIZE_MAX + self.rng.between(1, 40)
        sizes = [first]
        while sum(sizes) < over_page:
            sizes.append(min(BATCH_RECORDS_MAX, over_page - sum(sizes)))
        spill = len(sizes)
        sizes.append(3)
        for index, count in enumerate(sizes):
            batch_id = self.uid("batch")
            records = []
            for _ in range(count):
                n = len(written) + len(records) + 1
                payload = {"n": n} if index != spill else _sized(SPILL_BYTES + len(records) - 1, {"n": n, "k": "\ue000"})
                records.append(self.envelope(f"{conv}/r{n}", producer, 1, payload))
            request = FencedAppendRequest(conv, batch_id, producer, 1, tail[0], tail[1], tuple(records))
            out = await self.call("log", "append", request)
            if not self.expect(out.ok and out.value.first_seq == tail[0] + 1 and out.value.last_seq == tail[0] + count
                               and out.value.replayed == (out.lost > 0),
                               f"append of {count} records to {conv} at {tail[0]}: {out.show()}", conv):
                return
            written.extend(records)
            batches.extend([batch_id] * count)
            infos.append((batch_id, out.value.first_seq, out.value.last_seq, out.value.tail_digest))
            tail = (out.value.last_seq, out.value.tail_digest)
            boundaries[tail[0]] = tail[1]
            if count == BATCH_RECORDS_MAX:
                self.w.edge("batch_at_record_cap")
            if index == spill:
                self.w.edge("log_payload_at_spill_sizes")
                again = await self.call("log", "append", request)
                if self.expect(again.ok and again.value.replayed and (again.value.first_seq, again.value.last_seq,
                                                                      again.value.tail_digest) == (
                                   out.value.first_seq, out.value.last_seq, out.value.tail_digest),
                               f"identical append retry of {batch_id}: {again.show()}", conv):
                    self.w.edge("append_identical_retry_replayed")
                moved = FencedAppendRequest(conv, batch_id, producer, 1, tail[0], tail[1], request.records)
                clash = await self.call("log", "append", moved)
                if self.expect_rejected(clash, ("AppendConflict",), f"append of {batch_id} from another tail", conv):
                    if self.expect(clash.error.kind == "batch-digest", f"conflict kind {clash.error.kind}", conv):
                        self.w.edge("append_replay_other_tail_conflict")
                changed = FencedAppendRequest(conv, batch_id, producer, 1, tail[0], tail[1],
                                              (self.envelope(f"{conv}/other", producer, 1, {"other": 1}),))
                clash = await self.call("log", "append", changed)
                if self.expect_rejected(clash, ("AppendConflict",), f"append of {batch_id} with other content", conv):
                    self.expect(clash.error.kind == "batch-digest", f"conflict kind {clash.error.kind}", conv)
                    self.w.edge("append_batch_digest_conflict")
        self.w.edge("log_over_1024_records")
        await self._append_conflicts(conv, producer, tail, written)
        total = len(written)
        full = await self.read_checked(conv, 0, PAGE_SIZE_MAX, written, batches)
        if full is not None and len(full) == PAGE_SIZE_MAX:
            self.w.edge("read_full_default_page")
        rest = await self.read_checked(conv, PAGE_SIZE_MAX, PAGE_SIZE_MAX, written, batches)
        if rest is not None and len(rest) == total - PAGE_SIZE_MAX:
            self.w.edge("read_at_page_boundary")
        back = self.rng.between(1, 3)
        across = await self.read_checked(conv, PAGE_SIZE_MAX - back, back + self.rng.between(1, 4), written, batches)
        if across is not None:
            self.w.edge("read_across_page_boundary")
        for _ in range(2):
            after = self.rng.between(0, total)
            await self.read_checked(conv, after, self.rng.between(1, PAGE_SIZE_MAX), written, batches)
        past = [await self.call("log", "read", conv, total, PAGE_SIZE_MAX),
                await self.call("log", "read", conv, total + self.rng.between(1, 5000), 1)]
        if self.expect(all(o.ok and o.value == () for o in past), f"reads at and past the tail of {conv}: "
                                                                   f"{[o.show() for o in past]}", conv):
            self.w.edge("read_past_tail_empty")
        await self._observe_long(conv, written)
        illegal = [((conv, 0, 0), ("ReadLimitOutOfRange",)), ((conv, 0, PAGE_SIZE_MAX + 1), ("ReadLimitOutOfRange",)),
                   ((conv, -1, 5), ("ValueError",)), ((conv, 0, True), ("TypeError",)),
                   ((conv, 1.0, 5), ("TypeError",)), ((f"{conv}-none", 0, 5), ("NotMaterialized",))]
        for index in self.rng_sample(len(illegal), 3):
            args, names = illegal[index]
            self.expect_rejected(await self.call("log", "read", *args), names, f"log.read{args!r}", conv)
        self.w.edge("read_illegal_rejected")
        await self._digests(conv, boundaries, total, infos[self.rng.below(len(infos))])
        tail_now = await self.call("log", "inspect_tail", conv)
        self.expect(tail_now.ok and (tail_now.value.tail_seq, tail_now.value.tail_digest, tail_now.value.epoch)
                    == (*tail, 1), f"inspect_tail({conv}) answered {tail_now.show()}, the last append left {tail}",
                    conv)
        await self._takeover(conv, producer, tail)
        if self.rng.below(2) == 0:
            await self._delete_log(conv)

    async def _takeover(self, conv: str, producer: str, tail: tuple[int, str]) -> None:
        """An append's epoch must be exactly the log's: a higher epoch is
        fenced until it materializes (the takeover), then appends; the old
        producer is fenced from then on (another producer may append at the
        current epoch: an administrative append, not a takeover)."""
        successor = f"{producer}/next"
        last = await self.call("log", "inspect_tail", conv)
        if not self.expect_ok(last, f"inspect_tail({conv})", conv):
            return
        own = FencedAppendRequest(conv, self.uid("batch"), producer, 1, last.value.tail_seq, last.value.tail_digest,
                                  (self.envelope(f"{conv}/own-last", producer, 1, {"last": True}),))
        if not self.expect_ok(await self.call("log", "append", own), f"append of {own.batch_id} to {conv}", conv):
            return
        tail = (last.value.tail_seq + 1, tail[1])
        early = await self._append_one(conv, self.uid("batch"), successor, 2, "run-warning", {"early": True})
        if self.expect_rejected(early, ("FenceRejected",), f"append at epoch 2 by {successor} to {conv} before "
                                                           f"it took over", conv):
            self.w.edge("append_higher_epoch_fenced")
        taken = await self.call("log", "materialize", conv, successor, 2)
        if not self.expect(taken.ok, f"materialize {conv} at epoch 2 by {successor}: {taken.show()}", conv):
            return
        out = await self._append_one(conv, self.uid("batch"), successor, 2, "run-warning", {"takeover": True})
        if not self.expect(out.ok and out.value.first_seq == tail[0] + 1, f"append at epoch 2 by {successor} to "
                                                                         f"{conv}: {out.show()}", conv):
            return
        tail_now = await self.call("log", "inspect_tail", conv)
        if self.expect(tail_now.ok and tail_now.value.epoch == 2 and tail_now.value.tail_seq == tail[0] + 1,
                       f"inspect_tail({conv}) after a takeover: {tail_now.show()}", conv):
            self.w.edge("append_epoch_takeover")
        # The fence comes before a known batch id: the old owner's exact retry
        # of its committed batch is FenceRejected, not a replay.
        if self.expect_rejected(await self.call("log", "append", own), ("FenceRejected",),
                                f"the fenced owner's retry of its committed {own.batch_id} on {conv}", conv):
            self.w.edge("append_fenced_retry_refused")
        for who, epoch in ((producer, 1), (f"{producer}/rival", 1), (successor, 1), (successor, 3)):
            fenced = await self._append_one(conv, self.uid("batch"), who, epoch, "run-warning", {"late": who})
            if self.expect_rejected(fenced, ("FenceRejected",), f"append by {who} at epoch {epoch} after the "
                                                                 f"takeover of {conv}", conv):
                self.w.edge("append_stale_epoch_fenced")

    async def _append_conflicts(self, conv: str, producer: str, tail: tuple[int, str],
                                written: list[RecordEnvelope]) -> None:
        """Every way an append conflicts or is fenced, none of which may write."""
        reused = FencedAppendRequest(conv, self.uid("batch"), producer, 1, tail[0], tail[1],
                                     (self.envelope(written[self.rng.below(len(written))].record_id, producer, 1, {}),))
        twice = self.envelope(f"{conv}/twice", producer, 1, {})
        duplicated = FencedAppendRequest(conv, self.uid("batch"), producer, 1, tail[0], tail[1], (twice, twice))
        for request in (reused, duplicated):
            out = await self.call("log", "append", request)
            if self.expect_rejected(out, ("AppendConflict",), f"append reusing a record id in {conv}", conv):
                self.expect(out.error.kind == "record-identity", f"conflict kind {out.error.kind}", conv)
        self.w.edge("append_record_identity_conflict")
        # The tail is checked before record identity.
        stale_reuse = FencedAppendRequest(conv, self.uid("batch"), producer, 1, tail[0] - 1, tail[1], reused.records)
        out = await self.call("log", "append", stale_reuse)
        if self.expect_rejected(out, ("AppendConflict",), f"append reusing a record id at a stale tail of {conv}",
                                conv):
            if self.expect(out.error.kind == "tail", f"conflict kind {out.error.kind}, not tail", conv):
                self.w.edge("append_tail_before_identity")
        stale_seq = self.rng.between(0, tail[0] - 1)
        stale = FencedAppendRequest(conv, self.uid("batch"), producer, 1, stale_seq, ZERO_DIGEST,
                                    (self.envelope(f"{conv}/stale", producer, 1, {}),))
        out = await self.call("log", "append", stale)
        if self.expect_rejected(out, ("AppendConflict",), f"append at stale tail {stale_seq} of {conv}", conv):
            error = out.error
            if self.expect(error.kind == "tail" and (error.actual_tail_seq, error.actual_tail_digest) == tail,
                           f"tail conflict on {conv} carries {error.kind} {error.actual_tail_seq} "
                           f"{error.actual_tail_digest}, tail is {tail}", conv):
                self.w.edge("append_tail_conflict")
        over = tuple(self.envelope(f"{conv}/over{i}", producer, 1, i) for i in range(BATCH_RECORDS_MAX + 1))
        empty_and_over = [(FencedAppendRequest(conv, self.uid("batch"), producer, 1, tail[0], tail[1], over),
                           ("BatchTooLarge",)),
                          (FencedAppendRequest(conv, self.uid("batch"), producer, 1, tail[0], tail[1], ()),
                           ("ValueError",))]
        for request, names in empty_and_over:
            self.expect_rejected(await self.call("log", "append", request), names,
                                 f"append of {len(request.records)} records", conv)
        self.w.edge("batch_over_record_cap_rejected")
        if not self.w.byte_cap_probed:
            self.w.byte_cap_probed = True  # once a run: the encoder and the trace hash 8 MiB
            big = self.envelope(f"{conv}/big", producer, 1, "x" * BATCH_BYTES_MAX)
            out = await self.call("log", "append", FencedAppendRequest(conv, self.uid("batch"), producer, 1,
                                                                       tail[0], tail[1], (big,)))
            if self.expect_rejected(out, ("ValueError",), f"append of a batch over {BATCH_BYTES_MAX} bytes", conv):
                self.w.edge("batch_over_byte_cap_rejected")
        await self._bounds(conv, producer, tail)
        bad = [self.envelope(f"{conv}/v2", producer, 1, {}), self.envelope(f"{conv}/fam", producer, 1, {}),
               self.envelope(f"{conv}/who", "someone-else", 1, {}), self.envelope(f"{conv}/nan", producer, 1,
                                                                                 [float("nan")])]
        bad[0] = RecordEnvelope(bad[0].record_id, "input", 2, 0, DEPLOYMENT, {}, producer, 1)
        bad[1] = RecordEnvelope(bad[1].record_id, "no-such-family", 1, 0, DEPLOYMENT, {}, producer, 1)
        names = (("UnsupportedSchemaVersion",), ("UnsupportedSchemaVersion",), ("ValueError",), ("ValueError",))
        for envelope, want in zip(bad, names):
            out = await self.call("log", "append", FencedAppendRequest(conv, self.uid("batch"), producer, 1, tail[0],
                                                                       tail[1], (envelope,)))
            self.expect_rejected(out, want, f"append of a malformed record ({envelope.record_id})", conv)
        lower = FencedAppendRequest(conv, self.uid("batch"), producer, 0, tail[0], tail[1],
                                    (self.envelope(f"{conv}/e0", producer, 0, {}),))
        self.expect_rejected(await self.call("log", "append", lower), ("ValueError",), "append at epoch 0", conv)
        after = await self.call("log", "inspect_tail", conv)
        self.expect(after.ok and (after.value.tail_seq, after.value.tail_digest) == tail,
                    f"rejected appends moved the tail of {conv}: {after.show()}, was {tail}", conv)

    async def _bounds(self, conv: str, producer: str, tail: tuple[int, str]) -> None:
        """The canonical-JSON bounds the log applies to an envelope (depth 64,
        1,000,001 values, the envelope itself counted): one over each is the
        typed ``CanonicalJsonBoundsError`` naming the traversal bound, and
        writes nothing (the caller checks the tail after); once a run, an
        envelope of exactly 1,000,001 values is stored (then its own log is
        deleted)."""
        depth = ENVELOPE_DEPTH_BOUND
        nested: Any = 0
        for _ in range(depth):  # the envelope is the first container: its payload at depth 64 is the 65th
            nested = [nested]
        probes = [("depth", self.envelope(f"{conv}/deep", producer, 1, nested))]
        if not self.w.nodes_bound_probed:
            self.w.nodes_bound_probed = True  # once a run: a million values to encode, check and trace
            base = _values(self.envelope(f"{conv}/wide", producer, 1, []).to_json())
            probes.append(("nodes", self.envelope(f"{conv}/wide", producer, 1, [0] * (ENVELOPE_NODES_BOUND - base + 1))))
        for bound, envelope in probes:
            out = await self.call("log", "append", FencedAppendRequest(conv, self.uid("batch"), producer, 1, *tail,
                                                                       (envelope,)))
            if self.expect_rejected(out, ("CanonicalJsonBoundsError",), f"append of an envelope over the {bound} "
                                                                         f"bound", conv) and self.expect(
                    (out.error.kind, out.error.bound) == ("traversal", bound),
                    f"the bounds error names {out.error.kind} {out.error.bound}, not traversal {bound}", conv):
                self.w.edge(f"envelope_over_{bound}_bound_rejected")
        if len(probes) == 2:
            at = f"{conv}-at-bound"
            if not self.expect_ok(await self.call("log", "materialize", at, producer, 1), f"materialize({at})", at):
                return
            envelope = self.envelope(f"{at}/wide", producer, 1, [0] * (ENVELOPE_NODES_BOUND - base))
            out = await self.call("log", "append", FencedAppendRequest(at, self.uid("batch"), producer, 1, 0,
                                                                       ZERO_DIGEST, (envelope,)))
            if self.expect(out.ok and out.value.last_seq == 1, f"append of an envelope of exactly "
                                                               f"{ENVELOPE_NODES_BOUND} values: {out.show()}", at):
                self.w.edge("envelope_at_nodes_bound_stored")
            self.expect_ok(await self.call("log", "delete_conversation", at), f"delete of {at}", at)

    async def _digests(self, conv: str, boundaries: dict[int, str], total: int,
                       info: tuple[str, int, int, str]) -> None:
        for seq, digest in boundaries.items():
            out = await self.call("log", "digest_at", conv, seq)
            self.expect(out.ok and out.value == digest, f"digest_at({conv}, {seq}) at a batch boundary answered "
                                                        f"{out.show()}, the append said {digest}", conv)
        self.w.edge("digest_at_batch_boundary")
        inside = [seq for seq in (1, PAGE_SIZE_MAX // 2, total - 1, total - 2) if seq not in boundaries and 0 < seq]
        for seq in inside[:2]:
            out = await self.call("log", "digest_at", conv, seq)
            if self.expect(out.ok and out.value is None, f"digest_at({conv}, {seq}) inside a batch: {out.show()}",
                           conv):
                self.w.edge("digest_at_inside_batch")
        for seq in (total + 1, total + self.rng.between(2, 10_000), -1):
            out = await self.call("log", "digest_at", conv, seq)
            self.expect(out.ok and out.value is None, f"digest_at({conv}, {seq}) beyond the tail: {out.show()}",
                        conv)
        self.w.edge("digest_at_beyond_tail")
        missing = await self.call("log", "lookup_batch", conv, "no-such-batch")
        self.expect(missing.ok and missing.value is None, f"lookup_batch of a missing batch: {missing.show()}", conv)
        batch_id, first_seq, last_seq, digest = info
        found = await self.call("log", "lookup_batch", conv, batch_id)
        batch = found.value if found.ok else None
        if self.expect(batch is not None and (batch.batch_id, batch.first_seq, batch.last_seq, batch.tail_digest,
                                              batch.epoch) == (batch_id, first_seq, last_seq, digest, 1)
                       and batch.previous_tail_digest == boundaries[first_seq - 1],
                       f"lookup_batch({conv}, {batch_id}) answered {found.show()}, the append said "
                       f"{first_seq}..{last_seq} {digest}", conv):
            self.w.edge("lookup_batch_checked")

    async def _delete_log(self, conv: str) -> None:
        first = await self.call("log", "delete_conversation", conv)
        if not self.expect(first.ok and first.value is (first.lost == 0),
                           f"delete_conversation({conv}) answered {first.show()}", conv):
            return
        again = await self.call("log", "delete_conversation", conv)
        if self.expect(again.ok and again.value is False, f"second delete_conversation({conv}): {again.show()}",
                       conv):
            self.w.edge("conversation_deleted")
        reads = [await self.call("log", "read", conv, 0, 1), await self.call("log", "inspect_tail", conv),
                 await self.call("log", "digest_at", conv, 0)]
        batch = await self.call("log", "lookup_batch", conv, "anything")
        if all(self.expect_rejected(o, ("NotMaterialized",), f"read of deleted {conv}", conv) for o in reads) and (
                self.expect(batch.ok and batch.value is None, f"lookup_batch in deleted {conv}: {batch.show()}",
                            conv)):
            self.w.edge("deleted_conversation_unreadable")

    async def observed(self, conv: str, after: str | None, want: list[tuple[int, str]], what: str) -> tuple | None:
        """``observe(conv, after)``, whose answer must be exactly ``want``
        (seq, record id), in order, each record with an offset (a str)."""
        out = await self.call("log", "observe", conv, after)
        if not self.expect_ok(out, what, conv):
            return None
        got = [(r.seq, r.envelope.record_id) for r in out.value]
        if not self.expect(got == want and all(type(r.offset) is str for r in out.value),
                           f"{what} answered {got[:4]}..{got[-2:]} ({len(got)}), expected {want[:4]}..{want[-2:]} "
                           f"({len(want)}), each with an offset", conv):
            return None
        return out.value

    async def observe_log(self) -> None:
        """Observation (``observe``): from the start, from a record's offset
        (exactly the records after it), from the tail's (nothing), again
        after an append (resumed), a malformed and another conversation's
        offset refused typed, an unknown conversation; then the offset is
        stored for the next incarnation to resume from."""
        conv = f"o-{self.node.name}-{self.label}-{self._next()}"
        producer = self.label
        if not self.expect_ok(await self.call("log", "materialize", conv, producer, 1), f"materialize({conv})", conv):
            return
        written: list[tuple[int, str]] = []
        tail = (0, ZERO_DIGEST)
        for _ in range(self.rng.between(2, 4)):
            records = tuple(self.envelope(f"{conv}/r{len(written) + i + 1}", producer, 1, {"n": len(written) + i})
                            for i in range(self.rng.between(1, 5)))
            out = await self.call("log", "append", FencedAppendRequest(conv, self.uid("batch"), producer, 1, *tail,
                                                                       records))
            if not self.expect(out.ok, f"append to {conv}: {out.show()}", conv):
                return
            written += [(tail[0] + i + 1, r.record_id) for i, r in enumerate(records)]
            tail = (out.value.last_seq, out.value.tail_digest)
        everything = await self.observed(conv, None, written, f"observe({conv}) from the start")
        if everything is None:
            return
        self.w.edge("observe_from_start")
        index = self.rng.below(len(written))
        offset = everything[index].offset
        if await self.observed(conv, offset, written[index + 1:],
                               f"observe({conv}) after record {index + 1}") is not None:
            self.w.edge("observe_from_offset")
        if await self.observed(conv, everything[-1].offset, [], f"observe({conv}) after its tail") is not None:
            self.w.edge("observe_at_tail_empty")
        more = self.envelope(f"{conv}/more", producer, 1, {"more": True})
        out = await self.call("log", "append", FencedAppendRequest(conv, self.uid("batch"), producer, 1, *tail,
                                                                   (more,)))
        if self.expect(out.ok, f"append to {conv}: {out.show()}", conv):
            written.append((out.value.last_seq, more.record_id))
            if await self.observed(conv, offset, written[index + 1:],
                                   f"observe({conv}) resumed after an append") is not None:
                self.w.edge("observe_resumed_after_append")
        # Offsets this store never handed out for this conversation.
        malformed = (offset + "~", "not-an-offset", "", 7)
        junk = malformed[self.rng.below(len(malformed))]
        if self.expect_rejected(await self.call("log", "observe", conv, junk), ("MalformedOffset",),
                                f"observe({conv}, {junk!r}) from a malformed offset", conv):
            self.w.edge("observe_malformed_offset_rejected")
        other = f"{conv}-other"
        if self.expect_ok(await self.call("log", "materialize", other, producer, 1), f"materialize({other})", other):
            one = self.envelope(f"{other}/r1", producer, 1, {"other": True})
            out = await self.call("log", "append", FencedAppendRequest(other, self.uid("batch"), producer, 1, 0,
                                                                       ZERO_DIGEST, (one,)))
            theirs = await self.observed(other, None, [(1, one.record_id)], f"observe({other})") if out.ok else None
            if theirs and self.expect_rejected(await self.call("log", "observe", conv, theirs[0].offset),
                                               ("MalformedOffset",), f"observe({conv}) from {other}'s offset", conv):
                self.w.edge("observe_foreign_offset_rejected")
            self.expect_ok(await self.call("log", "delete_conversation", other), f"delete of {other}", other)
        if self.expect_rejected(await self.call("log", "observe", f"{conv}-none"), ("NotMaterialized",),
                                f"observe of {conv}-none", conv):
            self.w.edge("observe_unknown_conversation_rejected")
        self.w.saved_offsets[self.node.name] = (conv, offset, index + 1)

    async def _observe_long(self, conv: str, written: list[RecordEnvelope]) -> None:
        """A log past one page observed whole, then from an offset just
        before the page boundary (the stream pages on past it)."""
        want = [(seq, envelope.record_id) for seq, envelope in enumerate(written, 1)]
        everything = await self.observed(conv, None, want, f"observe({conv}), a log past one page")
        if everything is None:
            return
        index = PAGE_SIZE_MAX - self.rng.between(1, 3)
        if await self.observed(conv, everything[index - 1].offset, want[index:],
                               f"observe({conv}) after record {index}, across the page boundary") is not None:
            self.w.edge("observe_long_log")

    async def _resume_observation(self) -> None:
        """A new incarnation resumes its predecessor's observation from the
        stored offset: the records after it, up to the tail, in order."""
        saved = self.w.saved_offsets.pop(self.node.name, None)
        if saved is None:
            return
        conv, offset, seq = saved
        tail = await self.call("log", "inspect_tail", conv)
        if not self.expect_ok(tail, f"inspect_tail({conv})", conv):
            return
        out = await self.call("log", "observe", conv, offset)
        if not self.expect_ok(out, f"observe({conv}) resumed from a stored offset", conv):
            return
        seqs = [r.seq for r in out.value]
        if self.expect(seqs == list(range(seq + 1, tail.value.tail_seq + 1)),
                       f"observe({conv}) resumed after record {seq} answered seqs {seqs}, the tail is "
                       f"{tail.value.tail_seq}", conv):
            self.w.edge("observe_resumed_after_restart")

    async def churn(self) -> None:
        """Many small writes, each checked against the one before: a CAS
        counter on a private key and a log grown a few records at a time.
        Every write the store acknowledged must still be there at the next
        (a store that forgets one, beyond its contract, is caught here)."""
        key = self.private_keys[0]
        for _ in range(self.rng.between(5, 15)):
            known = self.known.get(key, UNKNOWN)
            if known is UNKNOWN:
                load = await self.call("ds", "load", key)
                if not self.expect_ok(load, f"ds.load({key!r})", key):
                    return
                known = None if load.value is None else (load.value.revision, load.value.contract_version,
                                                         load.value.payload)
                self.known[key] = known
            revision = 0 if known is None else known[0]
            out = await self.ds_save(key, DurableStateWrite(1, {"count": revision + 1}), revision)
            if not out.ok:
                return
        conv = f"c-{self.node.name}-{self.label}-{self._next()}"
        if not self.expect_ok(await self.call("log", "materialize", conv, self.label, 1), "materialize", conv):
            return
        written: list[RecordEnvelope] = []
        batches: list[str] = []
        tail = (0, ZERO_DIGEST)
        for _ in range(self.rng.between(10, 30)):
            batch_id = self.uid("batch")
            records = tuple(self.envelope(f"{conv}/r{len(written) + i + 1}", self.label, 1, {"i": len(written) + i})
                            for i in range(self.rng.between(1, 3)))
            out = await self.call("log", "append", FencedAppendRequest(conv, batch_id, self.label, 1, *tail,
                                                                       records))
            if not self.expect(out.ok and out.value.first_seq == tail[0] + 1, f"append of {len(records)} to {conv} "
                                                                             f"at tail {tail[0]}: {out.show()}", conv):
                return
            written.extend(records)
            batches.extend([batch_id] * len(records))
            tail = (out.value.last_seq, out.value.tail_digest)
        await self.read_checked(conv, 0, PAGE_SIZE_MAX, written, batches)
        await self._recreated_same_length(conv, tail)

    async def _recreated_same_length(self, conv: str, stale: tuple[int, str]) -> None:
        """A writer whose tail is right by its sequence number only: the log
        was deleted and re-created by another producer, regrown to the same
        length with other records. The stale writer's append names the right
        tail seq and the old history's digest, and must be refused as a
        ``tail`` conflict carrying the new tail (the digest is what tells
        the two histories apart)."""
        gone = await self.call("log", "delete_conversation", conv)
        if not self.expect(gone.ok, f"delete_conversation({conv}) answered {gone.show()}", conv):
            return
        successor = f"{self.label}/recreated"
        if not self.expect_ok(await self.call("log", "materialize", conv, successor, 1), "re-materialize", conv):
            return
        records = tuple(self.envelope(f"{conv}/again{i + 1}", successor, 1, {"again": i}) for i in range(stale[0]))
        out = await self.call("log", "append", FencedAppendRequest(conv, self.uid("batch"), successor, 1, 0,
                                                                   ZERO_DIGEST, records))
        if not self.expect(out.ok and out.value.last_seq == stale[0], f"append of {len(records)} to re-created "
                                                                     f"{conv}: {out.show()}", conv):
            return
        fresh = (out.value.last_seq, out.value.tail_digest)
        late = FencedAppendRequest(conv, self.uid("batch"), successor, 1, stale[0], stale[1],
                                   (self.envelope(f"{conv}/late", successor, 1, {"late": True}),))
        clash = await self.call("log", "append", late)
        if self.expect_rejected(clash, ("AppendConflict",), f"append at the old history's tail {stale[0]} of "
                                                            f"re-created {conv}", conv):
            error = clash.error
            if self.expect(error.kind == "tail" and (error.actual_tail_seq, error.actual_tail_digest) == fresh,
                           f"stale-digest conflict on {conv} carries {error.kind} {error.actual_tail_seq} "
                           f"{error.actual_tail_digest}, tail is {fresh}", conv):
                self.w.edge("append_stale_digest_conflict")
