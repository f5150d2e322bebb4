"""Virtual time: integer milliseconds, duration parsing, calendar rendering.

Time is an ``int`` of milliseconds since the simulation epoch. Floats are
never used for time: a float of seconds loses millisecond resolution past
2**24 s (~194 days), well inside a 12-month history.

Calendar rendering is done by hand (days-to-civil) rather than through
``datetime`` so that nothing in the simulated path can reach the wall clock.
"""
from __future__ import annotations

import re

from sim.numbers import DIGITS

MS_PER_SECOND = 1_000
MS_PER_MINUTE = 60 * MS_PER_SECOND
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR

# The simulated epoch: t=0 renders as this civil date (UTC). Fixed, so a
# report's calendar times are the same on every machine.
EPOCH_YEAR, EPOCH_MONTH, EPOCH_DAY = 2026, 1, 1

_UNIT_MS = {
    "ms": 1,
    "s": MS_PER_SECOND,
    "m": MS_PER_MINUTE,
    "min": MS_PER_MINUTE,
    "h": MS_PER_HOUR,
    "d": MS_PER_DAY,
    "w": 7 * MS_PER_DAY,
    # A simulated month is 365/12 days rounded to whole minutes would be
    # surprising; ``12mo`` must equal ``365d`` exactly (the sentinel year),
    # so a month is 365d/12 = 30.41666d = 2_628_000_000 ms, which is exact.
    "mo": 365 * MS_PER_DAY // 12,
    "y": 365 * MS_PER_DAY,
}
# Counts in ASCII digits (``sim.numbers``: one rule for every number typed), ASCII spaces.
_TERM = rf"({DIGITS})\s*(ms|s|min|mo|m|h|d|w|y)"
_DURATION_RE = re.compile(r"^\s*" + _TERM + r"(?:\s+" + _TERM + r")*\s*$", re.ASCII)
_TERM_RE = re.compile(_TERM, re.ASCII)

# Upper bound on any duration we accept: 100 simulated years.
DURATION_MS_MAX = 100 * 365 * MS_PER_DAY


class DurationError(ValueError):
    """A duration string that does not parse. The message is one clear line."""


def parse_duration_ms(text: str) -> int:
    """Parse ``90s``, ``5m``, ``36h``, ``30d``, ``12mo``, ``1y``, ``250ms``.

    A bare integer is rejected on purpose: ``--duration 30`` is ambiguous.
    """
    if not isinstance(text, str):
        raise DurationError(f"duration must be a string like '30d', got {text!r}")
    terms = _TERM_RE.findall(text) if _DURATION_RE.match(text) else []
    sizes = [_UNIT_MS[unit] for _, unit in terms]
    # Several terms (what ``format_duration_ms`` prints: ``3d 22h 55m``) go
    # from the largest unit down, each unit once, so one text has one reading.
    if not terms or any(a <= b for a, b in zip(sizes, sizes[1:])):
        raise DurationError(
            f"invalid duration {text!r}: expected a whole number and a unit "
            "(ms, s, m, h, d, w, mo, y), e.g. 90s, 5m, 36h, 30d, 12mo, or several from the largest down, "
            "e.g. 3d 22h 55m"
        )
    value_ms = sum(int(count) * _UNIT_MS[unit] for count, unit in terms)
    if value_ms <= 0:
        raise DurationError(f"invalid duration {text!r}: must be greater than zero")
    if value_ms > DURATION_MS_MAX:
        raise DurationError(f"invalid duration {text!r}: longer than 100 years")
    return value_ms


def format_duration_ms(duration_ms: int) -> str:
    """Exact rendering in calendar units, largest first: 300000 -> '5m',
    341700000 -> '3d 22h 55m' (not '5695m': a reader places it at once);
    ``parse_duration_ms`` reads it back."""
    assert duration_ms >= 0
    parts = []
    rest_ms = duration_ms
    for unit, size in (("d", MS_PER_DAY), ("h", MS_PER_HOUR), ("m", MS_PER_MINUTE), ("s", MS_PER_SECOND)):
        if rest_ms >= size:
            parts.append(f"{rest_ms // size}{unit}")
            rest_ms %= size
    if rest_ms or not parts:
        parts.append(f"{rest_ms}ms")
    return " ".join(parts)


def format_span_ms(duration_ms: int) -> str:
    """Human rendering of a span: ``365d 1h``, ``2h 30m``, ``1.875s``."""
    assert duration_ms >= 0
    parts = []
    rest_ms = duration_ms
    for unit, size in (("d", MS_PER_DAY), ("h", MS_PER_HOUR), ("m", MS_PER_MINUTE)):
        if rest_ms >= size:
            parts.append(f"{rest_ms // size}{unit}")
            rest_ms %= size
    if rest_ms or not parts:
        parts.append(f"{rest_ms // MS_PER_SECOND}s" if rest_ms % MS_PER_SECOND == 0 else f"{rest_ms / 1000:g}s")
    return " ".join(parts)


def _civil_from_days(days: int) -> tuple[int, int, int]:
    # Howard Hinnant's days_from_civil inverse, on the proleptic Gregorian
    # calendar, shifted so day 0 is 1970-01-01.
    days += 719_468
    era = (days if days >= 0 else days - 146_096) // 146_097
    doe = days - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    year = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return (year + (month <= 2), month, day)


def _days_from_civil(year: int, month: int, day: int) -> int:
    year -= month <= 2
    era = (year if year >= 0 else year - 399) // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


_EPOCH_DAYS = _days_from_civil(EPOCH_YEAR, EPOCH_MONTH, EPOCH_DAY)


def format_calendar(t_ms: int) -> str:
    """Simulated time as a calendar timestamp: ``2026-03-14 09:26:53.589``.

    Also shows the elapsed day so a reader of a year-long run can place it.
    """
    days, rem_ms = divmod(t_ms, MS_PER_DAY)
    year, month, day = _civil_from_days(_EPOCH_DAYS + days)
    hours, rem_ms = divmod(rem_ms, MS_PER_HOUR)
    minutes, rem_ms = divmod(rem_ms, MS_PER_MINUTE)
    seconds, millis = divmod(rem_ms, MS_PER_SECOND)
    return f"{year:04d}-{month:02d}-{day:02d} {hours:02d}:{minutes:02d}:{seconds:02d}.{millis:03d} (day {days})"
