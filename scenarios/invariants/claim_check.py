"""``claim-check``: what a run log records is never an over-cap payload, and
every ref it records is the stored bytes.

Online, from the log's commits (``log.append``): each step output whose
canonical encoding exceeds the inline cap is a violation (the middleware
should have claim-checked it); each claim-checked output ``{ref, size[,
digest]}`` is verified against the content store at that moment — the blob
exists, hashes to its ref, has the recorded size, and its declared digest
recomputes to the recorded one (``{ref, size}`` only when the tool declares
no digest). Replay resolves nothing: no node ever reads a blob back while
running a flow (``content.get`` events), so orchestration can only have
branched on the recorded digest.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from faults.events import ContentGet, LogAppend
from model.canonical import canonical_json
from model.claimcheck import is_claim_ref, verify_claim
from sim.invariants import Checker

from model.runs import STEP_FAMILY  # noqa: E402


class ClaimCheckInvariant(Checker):
    name = "claim-check"
    kinds = (LogAppend.kind, ContentGet.kind)

    def __init__(self, digests: Mapping[str, Callable[[Any], Any]], *, cap_bytes: int) -> None:
        """``digests``: step id -> the digest function its tool declares."""
        super().__init__()
        self._digests = dict(digests)
        self._cap_bytes = cap_bytes
        self.claim_checked = 0

    def _content_now(self, ref: str) -> bytes | None:
        return self.view.content_bytes(ref)

    def metrics(self) -> dict:
        return {"claim_checked_payloads": self.claim_checked}

    def on_event(self, event: tuple) -> None:
        fields = event.fields
        if event.kind == ContentGet.kind:
            self.checks += 1
            ref = fields[ContentGet.ref]
            self.fail(f"{event.node} resolved {ref}: flows branch on the recorded digest, never on the bytes", (ref,))
            return
        if LogAppend.error in fields or fields.get(LogAppend.replayed):
            return
        run_id = fields[LogAppend.conversation]
        for envelope, size in zip(fields[LogAppend.envelopes], fields[LogAppend.sizes]):
            if envelope["family"] != STEP_FAMILY:
                continue
            payload = envelope["payload"]
            output = payload["output"]
            if type(output) is dict and "ref" in output:
                self._check_ref(run_id, payload["stepId"], output)
            elif size is not None and size <= self._cap_bytes:
                # The whole envelope's canonical text (whose digest the
                # reference model checks on every append) is within the
                # cap, so the output inside it is: no need to encode it.
                continue
            elif len(canonical_json(output).encode("utf-8")) > self._cap_bytes:
                self.checks += 1
                self.fail(f"{run_id}: step {payload['stepId']!r} recorded an inline output over the "
                          f"{self._cap_bytes}-byte cap", (run_id,))

    def _check_ref(self, run_id: str, step_id: str, value: dict) -> None:
        self.checks += 1
        if not is_claim_ref(value):
            self.fail(f"{run_id}: step {step_id!r} recorded a malformed claim ref {sorted(value)}", (run_id,))
            return
        self.claim_checked += 1
        data = self._content_now(value["ref"])
        if data is None:
            self.fail(f"{run_id}: step {step_id!r} recorded {value['ref']}, which the content store does not "
                      "hold (intact)", (run_id, value["ref"]))
            return
        problem = verify_claim(data, value, self._digests.get(step_id))
        if problem is not None:
            self.fail(f"{run_id}: step {step_id!r}: {problem}", (run_id, value["ref"]))
