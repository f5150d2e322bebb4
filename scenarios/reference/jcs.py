"""A plain RFC 8785 (JSON Canonicalization Scheme) encoder, written from the RFC.

Why a second encoder: the system's digests, the log's digest chain and the
oracles that check them would otherwise all share ``model/canonical.py``,
so a bug in it would be self-consistent and invisible. This one is written
apart, from the RFC's text, and favours being obviously right over being
fast (it runs only where the reference model must reproduce a digest a store
reports). A test compares the two on random values.

What RFC 8785 says, and how it is done here:

- **Literals** ``null``, ``true``, ``false``; no whitespace anywhere.
- **Strings** (§3.2.2.2): as ECMAScript's ``JSON.stringify`` writes them.
  Only ``"`` and ``\\`` and the C0 controls are escaped; the controls that
  have a short form use it (``\\b \\t \\n \\f \\r``), the others
  ``\\u00xx`` with lowercase hex. Everything else is written raw, non-ASCII
  included. A string is a sequence of UTF-16 code units: a surrogate pair
  (two Python code points, or one supplementary character) is that
  character; a lone surrogate is written ``\\udxxx`` (well-formed
  ``JSON.stringify``), so the UTF-8 bytes always exist.
- **Numbers** (§3.2.2.3): IEEE-754 doubles written by ECMAScript's
  ``Number.prototype.toString``: the shortest digits that round-trip (what
  Python's ``repr`` gives), laid out plainly when the decimal exponent ``n``
  is in -6 < n <= 21 and as ``d.ddde±x`` otherwise; ``-0`` is ``0``. NaN
  and Infinity have no JSON form and are refused. A Python ``int`` must be
  one a double holds exactly within I-JSON's safe range (|v| <= 2**53 - 1);
  others are refused rather than silently rounded.
- **Objects** (§3.2.3): members sorted by the UTF-16 code units of their
  names (not by code point: the two differ when a name holds a character
  above U+FFFF); names must be strings; two names that are the same UTF-16
  string are refused.
- **Arrays** keep their order. Python tuples are arrays too.

Subclasses of str/int/float/dict/list are written as their base value
(``bool`` is checked before ``int``). Anything else is refused with
:class:`JcsError`. :class:`Raw` wraps text that is already canonical JSON,
so a digest over a structure holding large encoded parts need not encode
them twice.
"""
from __future__ import annotations

import hashlib
import json
import math
import re

__all__ = ["MAX_SAFE_INTEGER", "ZERO_DIGEST", "JcsError", "Raw", "canonical", "digest", "digest_text",
           "read_back"]

#: I-JSON's largest exactly representable integer (2**53 - 1).
MAX_SAFE_INTEGER = 2**53 - 1
#: The digest the log's chain starts from: 64 zeros (the model's spelling).
ZERO_DIGEST = "0" * 64


class JcsError(ValueError):
    """The value has no RFC 8785 form."""


class Raw:
    """Text that is already canonical JSON, written as is."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        assert type(text) is str and text, "Raw holds canonical JSON text"
        self.text = text


# --- strings ------------------------------------------------------------------

# The characters RFC 8785 escapes, plus surrogates (a pair is joined first).
_NEEDS_CARE = re.compile("[\x00-\x1f\"\\\\\ud800-\udfff]")
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _escape(match: re.Match) -> str:
    char = match.group()
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    # Another C0 control, or a lone surrogate: \u with four lowercase hex digits.
    return "\\u%04x" % ord(char)


def _utf16_units(text: str) -> bytes:
    return text.encode("utf-16-be", "surrogatepass")


def _string(text: str) -> str:
    if _NEEDS_CARE.search(text) is None:
        return '"' + text + '"'
    if not text.isascii():
        # As UTF-16 code units: a high+low pair held as two code points is
        # the supplementary character it spells; what stays a surrogate is lone.
        text = _utf16_units(text).decode("utf-16-be", "surrogatepass")
    return '"' + _NEEDS_CARE.sub(_escape, text) + '"'


# --- numbers ------------------------------------------------------------------


def _number(value: float) -> str:
    """ECMAScript Number::toString (ECMA-262 §6.1.6.1.20) of a finite double."""
    if not math.isfinite(value):
        raise JcsError(f"{value!r} has no JSON form (RFC 8785 §3.2.2.3)")
    if value == 0:
        return "0"  # +0 and -0 alike
    if value < 0:
        return "-" + _number(-value)
    # repr gives the shortest digits that round-trip: "123.0", "1e-07",
    # "1.5e+300", "0.001". Read them as value = 0.<digits> x 10**n.
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    all_digits = whole + fraction
    digits = all_digits.lstrip("0")
    leading_zeros = len(all_digits) - len(digits)
    digits = digits.rstrip("0")
    n = len(whole) + int(exponent or "0") - leading_zeros
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = n - 1
    sign = "+" if e >= 0 else "-"
    if k == 1:
        return digits + "e" + sign + str(abs(e))
    return digits[0] + "." + digits[1:] + "e" + sign + str(abs(e))


def _integer(value: int) -> str:
    if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return str(value)
    raise JcsError(f"integer {value} is beyond I-JSON's exact range +/-(2**53 - 1)")


# --- values -------------------------------------------------------------------


def _object(members: dict) -> str:
    if not members:
        return "{}"
    pieces: list[str] = []
    _write_object(members, pieces)
    return "".join(pieces)


def _write_object(members: dict, pieces: list[str]) -> None:
    """Append a non-empty object's text to ``pieces``: nested objects are
    written into the same list, joined once at the outermost."""
    # The hot path of every digest. The member names' order and spelling
    # depend on the names alone: worked out once per tuple of names (in the
    # dict's own order) and kept, up to a bound, so the map cannot grow with
    # the run. A dict subclass, or names that are refused, take the plain path.
    plan = _PLANS.get(tuple(members)) if type(members) is dict else None
    if plan is None:
        plan = _plan(members)
    # Plain scalar members are written inline rather than through _value
    # (a call per member). ``prefix`` is ``{"name":`` for the first member,
    # ``,"name":`` for the others; ``quoted`` is the prefix and the string's
    # opening quote.
    append = pieces.append
    search = _NEEDS_CARE.search
    for name, prefix, quoted in plan:
        item = members[name]
        kind = type(item)
        if kind is str and search(item) is None:
            append(quoted)
            append(item)
            append('"')
        elif kind is int and -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
            append(prefix + str(item))
        elif kind is dict and item:
            append(prefix)
            _write_object(item, pieces)
        else:
            append(prefix + _value(item))
    append("}")


def _plan(members: dict) -> tuple:
    """``((name, prefix, quoted), ...)`` in RFC 8785 member order (§3.2.3)
    (see ``_write_object``);
    JcsError for a name that is not a string or two names that are the
    same UTF-16 string."""
    try:
        joined = "".join(members)
    except TypeError:
        culprit = next(name for name in members if not isinstance(name, str))
        raise JcsError(f"object member names must be strings, got {type(culprit).__name__} {culprit!r:.40}") from None
    if joined.isascii():
        # ASCII names: code-point order is UTF-16 order. Names are unique.
        ordered = sorted(members)
    else:
        ordered = sorted(members, key=_utf16_units)
        for a, b in zip(ordered, ordered[1:]):
            if _utf16_units(a) == _utf16_units(b):
                raise JcsError(f"object member names {a!r} and {b!r} are the same UTF-16 string")
    spelled = [_string(name) + ":" for name in ordered]
    plan = tuple((name, ("," if index else "{") + text, ("," if index else "{") + text + '"')
                 for index, (name, text) in enumerate(zip(ordered, spelled)))
    if type(members) is dict and len(_PLANS) < _PLANS_MAX and all(type(name) is str for name in ordered):
        _PLANS[tuple(members)] = plan
    return plan


# Member names recur (every envelope has the same eight, in the same order):
# a tuple of names -> its plan, up to a bound.
_PLANS: dict[tuple, tuple] = {}
_PLANS_MAX = 4096
_MEMOS = (_PLANS,)  # emptied by a mutant that patches this module (faults.mutants)


def _array(items: list | tuple) -> str:
    if len(items) > _INTEGERS_AT_ONCE and set(map(type, items)) == {int}:
        # Integers only (a million zeros): each is its decimal digits, once
        # all of them are known to be inside the exact range.
        if -MAX_SAFE_INTEGER <= min(items) and max(items) <= MAX_SAFE_INTEGER:
            return "[" + ",".join(map(str, items)) + "]"
    return "[" + ",".join(map(_value, items)) + "]"


_INTEGERS_AT_ONCE = 64  # an array longer than this, of exact ints alone, is written in one pass


def _literal(value: bool | None) -> str:
    return "null" if value is None else ("true" if value else "false")


def _raw(value: Raw) -> str:
    return value.text


# Exact types first (the hot path: one dict lookup); subclasses below.
_ENCODERS = {str: _string, int: _integer, dict: _object, list: _array, tuple: _array, float: _number,
             bool: _literal, type(None): _literal, Raw: _raw}


def _value(value: object) -> str:
    encode = _ENCODERS.get(type(value))
    if encode is not None:
        return encode(value)
    if isinstance(value, bool):
        return _literal(bool(value))
    if isinstance(value, str):
        return _string(str.__str__(value))
    if isinstance(value, int):
        return _integer(int(value))
    if isinstance(value, float):
        return _number(float(value))
    if isinstance(value, dict):
        return _object(value)
    if isinstance(value, (list, tuple)):
        return _array(value)
    raise JcsError(f"{type(value).__qualname__} is not a JSON value")


def canonical(value: object) -> str:
    """The RFC 8785 text of ``value``; :class:`JcsError` when it has none."""
    try:
        return _value(value)
    except RecursionError:
        raise JcsError("value is nested too deeply (or holds a cycle)") from None


def digest_text(text: str) -> str:
    """sha256 of the text's UTF-8 bytes, lowercase hex (the model's digest spelling)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def digest(value: object) -> str:
    """sha256 (lowercase hex) of ``value``'s RFC 8785 UTF-8 bytes."""
    return digest_text(canonical(value))


# --- what a reader of canonical text gets back ------------------------------------


def _read_integer(text: str) -> int | float:
    # Canonical text writes a double beyond the safe range (2.0**60) in
    # integer form; a reader holding doubles reads it back as that double.
    value = int(text)
    return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else float(text)


_READER = json.JSONDecoder(parse_int=_read_integer)


def read_back(text: str) -> object:
    """The JSON value a reader gets from canonical ``text`` (the value a store
    that keeps canonical text hands back: ``5.0`` is read as ``5``)."""
    return _READER.decode(text)


# --- size bounds (the peer's optional canonical-JSON bounds) -------------------------
#
# depth: containers nested on one path (outermost = 1); nodes: every value,
# containers and scalars, the root among them (member names are not values);
# collection: the elements or members of one container; text: the UTF-16
# code units of one string or member name. Over a bound, the kind reported
# is, by precedence, "traversal" (depth or nodes), then "collection", then
# "text".


def bounds_kind(value: object, depth: int | None = None, nodes: int | None = None,
                collection: int | None = None, text: int | None = None) -> str | None:
    """The kind of the bound ``value`` is over, or None when within all."""
    deepest = count = widest = longest = 0
    pending = [(value, 1)]
    while pending:
        item, level = pending.pop()
        count += 1
        if nodes is not None and count > nodes:
            return "traversal"
        if isinstance(item, str):
            longest = max(longest, len(_utf16_units(item)) // 2)
        elif isinstance(item, (dict, list, tuple)):
            deepest = max(deepest, level)
            if depth is not None and deepest > depth:
                return "traversal"
            widest = max(widest, len(item))
            if isinstance(item, dict):
                longest = max([longest] + [len(_utf16_units(name)) // 2 for name in item if isinstance(name, str)])
                pending.extend((child, level + 1) for child in item.values())
            elif not any(issubclass(kind, (str, dict, list, tuple)) for kind in set(map(type, item))):
                count += len(item)  # leaves without text: nothing to look at but how many
                if nodes is not None and count > nodes:
                    return "traversal"
            else:
                pending.extend((child, level + 1) for child in item)
    if collection is not None and widest > collection:
        return "collection"
    if text is not None and longest > text:
        return "text"
    return None
