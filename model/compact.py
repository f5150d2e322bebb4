"""Compact in-memory representations for the in-memory stores.

The in-memory adapters keep what a database file would: canonical text and
plain numbers, not graphs of records. A simulated month of ``ledger-storm``
holds ~500,000 log records and ~125,000 submissions, and an attrs record per
row with a ``str`` per field (a 64-character hex digest is a 113-byte
object) made the stores grow ~30 MB per simulated day (ARCHITECTURE §8's
budget is 300 MB for 30 days, everything included).

``pack``/``unpack`` hold a text (or the bytes a damaged-row surgery left in
its place) as one ``bytes`` object, deflated against a preset dictionary of
the words canonical envelopes and ledger rows repeat (member names, record
families, outcomes). The dictionary only helps the compressor: any text
round-trips exactly, whatever it holds. zlib is deterministic for a given
input and level, and nothing compressed ever reaches the trace: a store
hands back what it decodes, so the trace digest does not depend on it.

A digest is held as its 32 raw bytes (``digest_bytes``/``digest_hex``).
"""
from __future__ import annotations

import zlib

# Words the stores' texts repeat, most frequent last (deflate finds the
# nearest match cheapest). Changing it changes no result, only sizes.
_ZDICT = (
    '"abortAuthor":"abortReason":"childCallId":"toolCallId":"diagnostic":{"errorTag":"message":'
    '"aborted","failed","cancelled","unknown","approval","decision":"children":'
    '"tool-call","subagent","run-started","run-failure","model-request","model-completed",'
    '"conversation-created","compaction","terminal-outcome",'
    '{"createdAtMs":,"deploymentId":"","epoch":,"family":"input","payload":{"idempotencyKey":"req-'
    '","input":{"n":},"principalId":"client","queueSeq":,"submissionId":"sub-conv-'
    '","producerId":"worker-1","recordId":"input:sub-conv-#0","schemaVersion":1}'
    '{"createdAtMs":,"deploymentId":"loomsim","epoch":,"family":"model-output","payload":{"output":{"echo":'
    '{"n":},"step":0},"step":1,"submissionId":"sub-conv-","producerId":"worker-1","recordId":"step:sub-conv-'
    '{"createdAtMs":,"deploymentId":"loomsim","epoch":,"family":"submission-settled","payload":{"record":'
    '{"outcome":"completed","result":{"outputs":[{"echo":{"n":},"step":0},{"echo":{"n":},"step":1}]}},'
    '"recordDigest":"","submissionId":"sub-conv-","producerId":"worker-1","recordId":"settle:sub-conv-'
).encode()
_LEVEL = 6
_WBITS = -15  # raw deflate: no header, no checksum (the stores verify digests where the contract asks)
# The first byte says what the packed value was.
_STR, _BYTES = b"s", b"b"


def pack(value: "str | bytes") -> bytes:
    """``value`` (a str, or the bytes a damaged row holds) as one compact bytes object."""
    if type(value) is str:
        tag, data = _STR, value.encode("utf-8", "surrogatepass")
    else:
        tag, data = _BYTES, bytes(value)
    compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, _WBITS, 9, zlib.Z_DEFAULT_STRATEGY, _ZDICT)
    return tag + compressor.compress(data) + compressor.flush()


def unpack(packed: bytes) -> "str | bytes":
    """What :func:`pack` was given, a fresh object equal to it."""
    decompressor = zlib.decompressobj(_WBITS, _ZDICT)
    data = decompressor.decompress(packed[1:]) + decompressor.flush()
    if packed[:1] == _STR:
        return data.decode("utf-8", "surrogatepass")
    return data


def digest_bytes(digest: str) -> "bytes | str":
    """A lowercase 64-hex digest as its 32 bytes; anything else (a store
    holds what it was given) unchanged, so :func:`digest_hex` returns it."""
    if type(digest) is str and len(digest) == 64:
        try:
            raw = bytes.fromhex(digest)
        except ValueError:
            return digest
        if raw.hex() == digest:
            return raw
    return digest


def digest_hex(held: "bytes | str") -> str:
    return held.hex() if type(held) is bytes else held
