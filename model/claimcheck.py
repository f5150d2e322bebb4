"""Claim-check middleware over the ContentStore.

When an effect's output is larger than the inline cap, the payload goes to
the content store and the effect records ``{"ref", "size", "digest"}``
instead: the reference *is* the recorded value. Replay folds that small
value and never touches the content store; only :func:`resolve_ref`, outside
the determinism boundary, fetches the bytes back.

- The payload is stored as its canonical JSON (RFC 8785) UTF-8 bytes, so
  equal payloads get one ref however their dicts were ordered, and ``size``
  is the length of exactly those bytes.
- ``digest`` is the tool's declared digest function applied to the payload:
  the small, deterministic projection orchestration may branch on. It is
  evaluated on the payload as decoded from the stored bytes, so it is a
  function of the bytes, and an oracle re-deriving it from the blob
  (:func:`verify_claim`) computes it from the same value. Tools without a
  declared digest record ``{"ref", "size"}`` only.
- Every claim-checked blob is recorded in the pin index (``model.pins``)
  with the time it was stored, which is what blob retention works from.

This is deliberately not payload externalization: nothing resolves the
bytes back during a fold, and a reclaimed blob is invisible to replay.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Mapping

from model.canonical import (
    CanonicalDecodeError,
    CanonicalEncodingError,
    canonical_bytes,
    canonical_equal,
    canonical_json,
    decode,
    decode_own,
)
from model.conversation.content_store import content_ref
from model.pins import is_ref

__all__ = [
    "ClaimCheck",
    "ClaimCheckError",
    "ClaimDigestTooLarge",
    "ClaimMismatch",
    "INLINE_CAP_BYTES_DEFAULT",
    "NotAClaimRef",
    "is_claim_ref",
    "resolve_ref",
    "verify_claim",
]

INLINE_CAP_BYTES_DEFAULT = 16_384

# Decoding a stored payload: the byte, string and item caps are the payload's
# own size (it was written by us, and hashes to its ref); the depth cap keeps
# the recursive JSON parser well inside the interpreter's recursion limit.
_DECODE_MAX_DEPTH = 512

_KEYS_PLAIN = frozenset({"ref", "size"})
_KEYS_DIGEST = frozenset({"ref", "size", "digest"})
_NO_DIGESTS: Mapping[str, Callable[[Any], Any]] = MappingProxyType({})


class ClaimCheckError(Exception):
    """Base class of the claim-check middleware's typed errors."""

    name = "ClaimCheckError"


class NotAClaimRef(ClaimCheckError):
    """``resolve_ref`` was given a value that is not a claim-check reference."""

    name = "NotAClaimRef"

    def __init__(self, value_repr: str) -> None:
        self.value_repr = value_repr
        super().__init__(f"not a claim-check reference: {value_repr}")

    def __reduce__(self):
        return (type(self), (self.value_repr,))


class ClaimMismatch(ClaimCheckError):
    """The bytes fetched for a reference do not match what the reference records."""

    name = "ClaimMismatch"

    def __init__(self, ref: str, reason: str) -> None:
        self.ref = ref
        self.reason = reason
        super().__init__(f"claim-check reference {ref} does not match its blob: {reason}")

    def __reduce__(self):
        return (type(self), (self.ref, self.reason))


class ClaimDigestTooLarge(ClaimCheckError):
    """A tool's declared digest does not fit inline: its canonical encoding
    is larger than the inline cap, so it would defeat the claim check."""

    name = "ClaimDigestTooLarge"

    def __init__(self, tool: str, step_id: str, digest_size_bytes: int, cap_bytes: int) -> None:
        self.tool = tool
        self.step_id = step_id
        self.digest_size_bytes = digest_size_bytes
        self.cap_bytes = cap_bytes
        super().__init__(
            f"digest of tool {tool!r} (step {step_id!r}) is {digest_size_bytes} bytes, "
            f"over the inline cap of {cap_bytes} bytes"
        )

    def __reduce__(self):
        return (type(self), (self.tool, self.step_id, self.digest_size_bytes, self.cap_bytes))


def is_claim_ref(value: object) -> bool:
    """True for ``{"ref", "size"}`` or ``{"ref", "size", "digest"}`` (exactly
    those keys) with a content ref and an int size >= 0."""
    if not isinstance(value, dict):
        return False
    keys = value.keys()
    if keys != _KEYS_PLAIN and keys != _KEYS_DIGEST:
        return False
    size = value["size"]
    return is_ref(value["ref"]) and type(size) is int and size >= 0


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _decode_payload(data: bytes) -> Any:
    n = len(data)
    return decode(data, max_bytes=n, max_depth=_DECODE_MAX_DEPTH, max_string_length=n, max_items=n)


class ClaimCheck:
    """The middleware: ``on_output`` maps an effect output to what the log records.

    ``content_store`` has ``async put(bytes) -> ref``; ``index`` has
    ``async record_blob(ref, size_bytes, *, stored_at_ms)`` (``model.pins``).
    ``now_ms`` is the simulated clock. ``digests`` maps a tool name to its
    declared digest function (pure, payload -> small JSON value).
    """

    def __init__(
        self,
        content_store: Any,
        index: Any,
        *,
        now_ms: Callable[[], int],
        cap_bytes: int = INLINE_CAP_BYTES_DEFAULT,
        digests: Mapping[str, Callable[[Any], Any]] = _NO_DIGESTS,
    ) -> None:
        assert type(cap_bytes) is int and cap_bytes >= 0, cap_bytes
        assert callable(now_ms), now_ms
        for tool, fn in digests.items():
            assert type(tool) is str and callable(fn), (tool, fn)
        self._content_store = content_store
        self._index = index
        self._now_ms = now_ms
        self.cap_bytes = cap_bytes
        self._digests: Mapping[str, Callable[[Any], Any]] = MappingProxyType(dict(digests))
        self.claim_checked = 0
        self.inline = 0

    @property
    def digests(self) -> Mapping[str, Callable[[Any], Any]]:
        return self._digests

    def digest_fn(self, tool: str | None) -> Callable[[Any], Any] | None:
        """The declared digest function of ``tool`` (None when it has none)."""
        return None if tool is None else self._digests.get(tool)

    async def on_output(self, tool: str | None, step_id: str, output: Any) -> Any:
        """``output`` itself if its canonical JSON is at most ``cap_bytes``
        bytes; otherwise the claim-check reference that replaces it.

        Raises ``CanonicalEncodingError`` if ``output`` is not a JSON value,
        and ``ClaimDigestTooLarge`` if the declared digest does not fit inline
        (nothing is stored then).
        """
        assert tool is None or type(tool) is str, tool
        assert type(step_id) is str, step_id
        text = canonical_json(output)
        data = text.encode("utf-8")
        size = len(data)
        if size <= self.cap_bytes:
            self.inline += 1
            return output
        digest_fn = self.digest_fn(tool)
        if digest_fn is not None:
            # The digest function sees the payload as a reader of the stored
            # bytes will: their decode (our own text: no foreign-input checks).
            digest_value = digest_fn(decode_own(text))
            digest_size = len(canonical_bytes(digest_value))
            if digest_size > self.cap_bytes:
                raise ClaimDigestTooLarge(tool, step_id, digest_size, self.cap_bytes)  # type: ignore[arg-type]
        ref = await self._content_store.put(data)
        assert ref == content_ref(data), (ref, step_id)
        await self._index.record_blob(ref, size, stored_at_ms=self._now_ms())
        self.claim_checked += 1
        if digest_fn is None:
            return {"ref": ref, "size": size}
        return {"ref": ref, "size": size, "digest": digest_value}


async def resolve_ref(content_store: Any, value: Any) -> Any:
    """Fetch and decode a claim-checked payload.

    Outside the determinism boundary only: replay must never call this (the
    recorded reference and digest are the value). The content store verifies
    the bytes against the ref (``ContentMissing`` / ``ContentCorrupted``
    propagate); a size that disagrees with the reference is ``ClaimMismatch``.
    """
    if not is_claim_ref(value):
        raise NotAClaimRef(f"{value!r:.200}")
    ref = value["ref"]
    data = await content_store.get(ref)
    if len(data) != value["size"]:
        raise ClaimMismatch(ref, f"blob is {len(data)} bytes, reference says {value['size']}")
    try:
        return _decode_payload(data)
    except CanonicalDecodeError as exc:
        raise ClaimMismatch(ref, f"blob does not decode as JSON: {exc}") from exc


def verify_claim(data: bytes, value: dict, digest_fn: Callable[[Any], Any] | None) -> str | None:
    """The oracle's check of a reference against a blob's bytes.

    None when ``data`` has the recorded size, hashes to the recorded ref and
    (when a digest is recorded) ``digest_fn`` of the decoded payload
    canonically equals the recorded digest; otherwise a one-line reason. A
    recorded digest without a ``digest_fn``, or a ``digest_fn`` without a
    recorded digest, is a mismatch too.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return f"data must be bytes, got {type(data).__name__}"
    data = bytes(data)
    if not is_claim_ref(value):
        return f"not a claim-check reference: {value!r:.120}"
    if len(data) != value["size"]:
        return f"size mismatch: data is {len(data)} bytes, reference says {value['size']}"
    actual_ref = content_ref(data)
    if actual_ref != value["ref"]:
        return f"ref mismatch: data hashes to {actual_ref}, reference says {value['ref']}"
    has_digest = "digest" in value
    if not has_digest:
        if digest_fn is not None:
            return "digest missing: the tool declares a digest but the reference records none"
        return None
    if digest_fn is None:
        return "unexpected digest: the reference records a digest but no digest function is declared"
    try:
        payload = _decode_payload(data)
    except CanonicalDecodeError as exc:
        return _one_line(f"payload does not decode as JSON: {exc}")
    try:
        expected = digest_fn(payload)
    except Exception as exc:  # an oracle reports, it does not crash
        return _one_line(f"digest function raised {type(exc).__name__}: {exc}")
    try:
        equal = canonical_equal(expected, value["digest"])
    except CanonicalEncodingError as exc:
        return _one_line(f"digest is not a JSON value: {exc}")
    if not equal:
        return f"digest mismatch: payload digests to {expected!r:.120}, reference says {value['digest']!r:.120}"
    return None
