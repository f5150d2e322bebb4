"""The port-storm adversary's episode on the content store and the
claim-check middleware: empty, cap-sized and large blobs, idempotent put and
delete, illegal refs, outputs at the inline cap."""
from __future__ import annotations

from model.claimcheck import ClaimCheck, is_claim_ref, resolve_ref
from scenarios.adversaries.common import _canonical_equal, _ref, _sized
from scenarios.adversaries.process import INLINE_CAP, LARGE_BLOB_BYTES, ProcessCore


class ContentEpisodes(ProcessCore):
    """The content store's and claim-check's episode."""

    async def content(self) -> None:
        """Empty, cap-sized and large blobs; idempotent put and delete;
        illegal refs; claim-check outputs at the inline cap."""
        marker = f"adv:{self.label}:{self._next()}:".encode()
        blobs = [("content_empty_blob", b""),
                 ("content_blob_at_cap_sizes", (marker + b"c" * INLINE_CAP)[:INLINE_CAP + self.rng.between(-1, 1)]),
                 ("content_large_blob", marker + bytes(self.rng.below(256) for _ in range(64)) * (
                     LARGE_BLOB_BYTES // 64))]
        name, data = blobs[self.rng.below(len(blobs))]
        ref = _ref(data)
        # The empty blob has one ref for every node: another may delete it
        # at any moment, so only typed answers are expected of it.
        shared = data == b""
        for _ in range(2):
            put = await self.call("content", "put", bytearray(data) if self.rng.below(2) else data)
            if not self.expect(put.ok and put.value == ref, f"content.put of {len(data)} bytes: {put.show()}, "
                                                            f"sha256 says {ref}", ref):
                return
        has = await self.call("content", "has", ref)
        got = await self.call("content", "get", ref)
        if shared:
            if self.expect(has.ok, f"content.has({ref}): {has.show()}", ref) and self.allow(
                    got, ("ContentMissing",), f"content.get({ref})", ref):
                self.expect(got.value == b"", f"the empty blob came back as {got.value!r:.40}", ref)
                self.w.edge(name)
            delete = await self.call("content", "delete", ref)
            self.expect(delete.ok, f"content.delete({ref}): {delete.show()}", ref)
        else:
            if not self.expect(has.ok and has.value is True and got.ok and got.value == data,
                               f"content has/get of {ref} ({len(data)} bytes): {has.show()} {got.show():.80}", ref):
                return
            self.w.edge(name)
            first = await self.call("content", "delete", ref)
            again = await self.call("content", "delete", ref)
            if self.expect(first.ok and first.value is (first.lost == 0) and again.ok and again.value is False,
                           f"content.delete of {ref} twice: {first.show()} {again.show()}", ref):
                self.w.edge("content_delete_idempotent")
            gone = await self.call("content", "get", ref)
            has = await self.call("content", "has", ref)
            if self.expect_rejected(gone, ("ContentMissing",), f"get of deleted {ref}", ref) and self.expect(
                    has.ok and has.value is False, f"has of deleted {ref}: {has.show()}", ref):
                self.w.edge("content_missing_after_delete")
        # (Not put(None): the trace describer measures len(data) before the store could answer.)
        illegal = [("put", ("text",), ("TypeError",)), ("put", ([1, 2],), ("TypeError",)),
                   ("get", ("sha256:nope",), ("ValueError",)), ("get", (5,), ("ValueError",)),
                   ("has", ("md5:" + "0" * 64,), ("ValueError",)), ("delete", ("",), ("ValueError",))]
        for index in self.rng_sample(len(illegal), 2):
            method, args, want = illegal[index]
            self.expect_rejected(await self.call("content", method, *args), want, f"content.{method}{args!r}", ref)
        self.w.edge("content_illegal_rejected")
        if self.w.claim_check:
            await self._claim_check()

    async def _claim_check(self) -> None:
        check = ClaimCheck(self.ports.content, self.ports.pins, now_ms=self.now, cap_bytes=INLINE_CAP)
        n = self._next()
        for size in (INLINE_CAP - 1, INLINE_CAP, INLINE_CAP + 1):
            output = _sized(size, {"by": self.label, "n": n, "edge": self.edge_payload(n)})
            step = f"{self.label}/step-{n}-{size}"
            recorded = await self.retrying("claim-check", lambda: check.on_output("adversary-tool", step, output))
            if size <= INLINE_CAP:
                if self.expect(recorded is output, f"claim-check of a {size}-byte output (cap {INLINE_CAP}) did not "
                                                   f"keep it inline: {recorded!r:.120}"):
                    self.w.edge("claimcheck_inline_at_cap")
                continue
            if not self.expect(is_claim_ref(recorded) and recorded["size"] == size,
                               f"claim-check of a {size}-byte output (cap {INLINE_CAP}) recorded {recorded!r:.160}"):
                continue
            back = await self.retrying("resolve_ref", lambda: resolve_ref(self.ports.content, recorded))
            if self.expect(_canonical_equal(back, output), f"claim-checked output {recorded['ref']} resolved to "
                                                            f"another value", recorded["ref"]):
                self.w.edge("claimcheck_ref_above_cap")
