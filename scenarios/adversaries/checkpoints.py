"""The port-storm adversary's episode on the checkpoint store: checkpoints at
batch boundaries (and at 0), refused inside a batch, ahead of the tail and
at an unsupported version; loads at and before a boundary."""
from __future__ import annotations

from typing import Any

from model.canonical import ZERO_DIGEST
from model.conversation.checkpoints import Checkpoint
from model.conversation.records import PAGE_SIZE_MAX, FencedAppendRequest, RecordEnvelope
from scenarios.adversaries.common import _canonical_equal
from scenarios.adversaries.process import FLOAT_EDGES, ProcessCore


class CheckpointEpisodes(ProcessCore):
    """The checkpoint store's episode."""

    async def checkpoints(self) -> None:
        """Checkpoints at batch boundaries (and at 0), refused inside a
        batch, ahead of the tail, at an unsupported version; loads at and
        before a boundary."""
        conv = f"k-{self.node.name}-{self.label}-{self._next()}"
        producer = self.label
        mat = await self.call("log", "materialize", conv, producer, 1)
        if not self.expect_ok(mat, f"materialize({conv})", conv):
            return
        boundaries: dict[int, str] = {0: ZERO_DIGEST}
        tail = (0, ZERO_DIGEST)
        written: list[RecordEnvelope] = []
        batches: list[str] = []
        for count in (1, self.rng.between(2, 5), self.rng.between(2, 5)):
            batch_id = self.uid("batch")
            records = tuple(self.envelope(f"{conv}/r{tail[0] + i + 1}", producer, 1, {"i": i, "f": FLOAT_EDGES[i]})
                            for i in range(count))
            out = await self.call("log", "append", FencedAppendRequest(conv, batch_id, producer, 1, tail[0],
                                                                       tail[1], records))
            if not self.expect_ok(out, f"append to {conv}", conv):
                return
            tail = (out.value.last_seq, out.value.tail_digest)
            boundaries[tail[0]] = tail[1]
            written.extend(records)
            batches.extend([batch_id] * count)
        # The whole short log, read back as written (a damaged answer is read again).
        await self.read_checked(conv, 0, self.rng.between(len(written), PAGE_SIZE_MAX), written, batches)
        seqs = sorted(boundaries)

        def checkpoint(seq: int, digest: str, snapshot: Any = None, version: int = 1) -> Checkpoint:
            return Checkpoint(conv, f"sub-{conv}", seq, digest, "adversary-engine", "d" * 64, "m" * 64, "t" * 64,
                              version, self.edge_payload(seq) if snapshot is None else snapshot, self.now())

        saved: dict[int, Checkpoint] = {}
        for seq in (0, seqs[2]):
            cp = checkpoint(seq, boundaries[seq])
            if self.expect_ok(await self.call("checkpoints", "save", cp), f"checkpoint save at {seq}", conv):
                saved[seq] = cp
        if 0 in saved:
            self.w.edge("checkpoint_at_zero")
        if seqs[2] in saved:
            self.w.edge("checkpoint_at_batch_boundary")
        inside = seqs[2] - 1 if seqs[2] - 1 not in boundaries else seqs[3] - 1
        rejected = [(checkpoint(inside, boundaries[seqs[1]]), "digest-mismatch", "checkpoint_inside_batch_rejected"),
                    (checkpoint(tail[0] + 1, tail[1]), "ahead-of-tail", "checkpoint_ahead_rejected"),
                    (checkpoint(tail[0], boundaries[seqs[1]]), "digest-mismatch", None),
                    (checkpoint(seqs[1], boundaries[seqs[1]], version=2), "unsupported-version",
                     "checkpoint_bad_version_rejected")]
        for cp, kind, edge in rejected:
            out = await self.call("checkpoints", "save", cp)
            if self.expect_rejected(out, ("CheckpointRejected",), f"checkpoint save ({kind}) at {cp.covered_seq}",
                                    conv) and self.expect(out.error.kind == kind, f"rejected as {out.error.kind}, "
                                                                                  f"not {kind}", conv) and edge:
                self.w.edge(edge)
        illegal = [checkpoint(-1, ZERO_DIGEST), checkpoint(0, "XYZ"), checkpoint(0, ZERO_DIGEST, [float("inf")]),
                   Checkpoint(f"{conv}-none", "s", 0, ZERO_DIGEST, "e", "d", "m", "t", 1, {}, 0)]
        names = (("ValueError",), ("ValueError",), ("ValueError",), ("NotMaterialized",))
        for cp, want in zip(illegal, names):
            self.expect_rejected(await self.call("checkpoints", "save", cp), want,
                                 f"checkpoint save of {cp.conversation_id} at {cp.covered_seq}", conv)
        self.w.edge("checkpoint_illegal_rejected")
        if seqs[2] not in saved or 0 not in saved:
            return
        at = await self.call("checkpoints", "load_latest", conv, seqs[2])
        if self.expect(at.ok and at.value is not None and at.value.covered_seq == seqs[2]
                       and _canonical_equal(at.value.to_json(), saved[seqs[2]].to_json()),
                       f"load_latest({conv}, {seqs[2]}) at a boundary answered {at.show()}", conv):
            self.w.edge("checkpoint_load_at_boundary")
        before = await self.call("checkpoints", "load_latest", conv, seqs[2] - 1)
        if self.expect(before.ok and before.value is not None and before.value.covered_seq == 0,
                       f"load_latest({conv}, {seqs[2] - 1}) just before a boundary answered {before.show()}", conv):
            self.w.edge("checkpoint_load_before_boundary")
        replacement = checkpoint(seqs[2], boundaries[seqs[2]], {"replaced": True})
        if self.expect_ok(await self.call("checkpoints", "save", replacement), "checkpoint overwrite", conv):
            out = await self.call("checkpoints", "load_latest", conv, 2 ** 53 - 1)
            if self.expect(out.ok and out.value is not None and out.value.snapshot == {"replaced": True},
                           f"load_latest after overwriting {seqs[2]} answered {out.show()}", conv):
                self.w.edge("checkpoint_overwritten")
        none = await self.call("checkpoints", "load_latest", conv, -1)
        self.expect(none.ok and none.value is None, f"load_latest of {conv} before its first checkpoint: "
                    f"{none.show()}", conv)
        self.expect_rejected(await self.call("checkpoints", "load_latest", f"{conv}-none", 5), ("NotMaterialized",),
                             f"load_latest of {conv}-none (a conversation the log does not have)", conv)
