"""Numbers a user types: one rule for every flag, ASCII digits only.

``int()`` and ``float()`` read any Unicode decimal digit (``'٣'``,
``'３'``) yet refuse ``'²'``, and take ``'1_000'``, ``' 3 '``, ``'+3'``,
``'nan'`` and ``'inf'`` too: a seed or a duration that looks alike in two
terminals could run in one and be refused in the other. Every number of a
command line (seeds, seed ranges, durations' counts, counts, knobs, rates,
shards, jobs, budgets, scenario parameters) is read here, by one grammar:
an optional ``-`` and ASCII digits, a decimal also with a fraction and an
exponent. Range checks stay with each flag.
"""
from __future__ import annotations

import re

# ASCII digits: what ``sim.clock`` reads a duration's counts with as well.
DIGITS = r"[0-9]+"
_WHOLE = re.compile(rf"-?{DIGITS}")
_DECIMAL = re.compile(rf"-?(?:{DIGITS}(?:\.[0-9]*)?|\.{DIGITS})(?:[eE][-+]?{DIGITS})?")


class NumberError(ValueError):
    """Text that is not a number in ASCII digits; the message is one line."""


def parse_whole(text: str) -> int:
    """``'17'``, ``'-4'`` -> int; anything else (other digits, ``_``,
    spaces, a sign ``+``, a fraction) raises ``NumberError``."""
    if not isinstance(text, str) or not _WHOLE.fullmatch(text):
        raise NumberError(f"{text!r} is not a whole number in ASCII digits (0-9)")
    try:
        return int(text, 10)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        raise NumberError(f"{text[:20]!r}... has too many digits") from None


def parse_decimal(text: str) -> float:
    """``'0.5'``, ``'.5'``, ``'1e-3'``, ``'600'`` -> float; anything else
    (other digits, ``nan``, ``inf``, ``_``, spaces) raises ``NumberError``."""
    if not isinstance(text, str) or not _DECIMAL.fullmatch(text):
        raise NumberError(f"{text!r} is not a decimal number in ASCII digits (0-9)")
    return float(text)
