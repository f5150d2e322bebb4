"""What every store adapter can hold, refused alike by all of them.

A SQLite INTEGER is 64 bits, signed; SQLite stores text as UTF-8, which a
Python ``str`` holding a lone surrogate has no form in (the adapter would
fail mid-call, untyped). Each port checks its arguments against these
before anything changes, so the in-memory adapter refuses exactly what the
SQLite one cannot store.
"""
from __future__ import annotations

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def is_valid_unicode(text: str) -> bool:
    """False for a ``str`` holding a lone surrogate (no UTF-8 form)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
