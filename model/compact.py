"""Compact in-memory representations for the in-memory stores.

The in-memory adapters keep what a database file would: canonical text and
plain numbers, not graphs of records. A simulated month of ``ledger-storm``
holds ~500,000 log records and ~125,000 submissions, and an attrs record per
row with a ``str`` per field (a 64-character hex digest is a 113-byte
object) made the stores grow ~30 MB per simulated day (ARCHITECTURE §8's
budget is 300 MB for 30 days, everything included).

``pack``/``unpack`` hold a text (or the bytes a damaged-row surgery left in
its place) as one ``bytes`` object: its UTF-8 bytes after a tag byte. Not
compressed: a deflated record is about a third of the size, but a
compressor set up per record (with a preset dictionary) made a 30-day
sentinel-year run take ~20% more CPU, for ~15% less of ledger-storm's
memory (where the reference model's copies weigh as much as the stores).
Nothing packed ever reaches the trace: a store hands back what it decodes.

A digest is held as its 32 raw bytes (``digest_bytes``/``digest_hex``).
"""
from __future__ import annotations

# The first byte says what the packed value was.
_STR, _BYTES = b"s", b"b"


def pack(value: "str | bytes") -> bytes:
    """``value`` (a str, or the bytes a damaged row holds) as one compact bytes object."""
    if type(value) is str:
        return _STR + value.encode("utf-8", "surrogatepass")
    return _BYTES + bytes(value)


def unpack(packed: bytes) -> "str | bytes":
    """What :func:`pack` was given, a fresh object equal to it."""
    if packed[:1] == _STR:
        return packed[1:].decode("utf-8", "surrogatepass")
    return packed[1:]


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
