"""Canonical JSON (RFC 8785 / JCS profile) and sha256 digests.

Digests are taken over the bytes produced here -- for example the log
digest chain elsewhere in loomsim links batches as
``sha256(canonical({"batch": ..., "previousTailDigest": ...}))``
(:data:`ZERO_DIGEST` is the all-zero placeholder digest), and
compare-and-set uses :func:`canonical_equal` to recognise its own earlier
write.  Two runs, two processes or a non-Python peer holding equal JSON
values must therefore produce byte-identical text, independent of dict
insertion order.  We follow the JSON Canonicalization Scheme (JCS, RFC 8785):

* **No whitespace**; separators are exactly ``,`` and ``:``.
* **Object members are sorted by the UTF-16 code units of their names**, not
  by Unicode code point.  JCS is defined in terms of ECMAScript, whose
  strings are UTF-16, so a conforming JavaScript/Java/.NET implementation
  compares code units.  Python's default ``sorted()`` compares code points,
  and the two orders disagree when one name has a supplementary-plane
  character (U+10000 and up, encoded as a surrogate pair starting 0xD800..
  0xDBFF) where the other has a character in U+E000..U+FFFF: e.g. "\\U0001F600"
  sorts *before* "\\uFB01" in UTF-16 order but after it in code-point order.
  We sort by ``name.encode("utf-16-be", "surrogatepass")`` whenever a name
  is not pure ASCII (for ASCII names both orders coincide).
* **Strings** are written as ECMAScript ``JSON.stringify`` writes them:
  ``\\"``, ``\\\\``, ``\\b``, ``\\f``, ``\\n``, ``\\r``, ``\\t``; other
  control characters below U+0020 as lowercase ``\\u00xx``; everything else,
  including non-ASCII, raw (UTF-8 once encoded).  A lone surrogate
  (U+D800..U+DFFF appearing on its own in a Python ``str``) is written as a
  lowercase ``\\udxxx`` escape, as well-formed ``JSON.stringify`` does, so
  :func:`canonical_bytes` never fails to encode.  A high+low surrogate pair
  held as two code points is, as in UTF-16, the supplementary character it
  spells, and is written as that character.
* **Numbers** are written as ECMAScript ``Number.prototype.toString`` writes
  the IEEE-754 double: shortest round-trip digits (taken from ``repr``),
  laid out plainly for 1e-6 <= |x| < 1e21 and in exponent form (``1e+21``,
  ``1.5e-7``) otherwise; ``-0.0`` is written ``0`` and ``1.0`` is ``1``.
  Integral floats beyond 2**53 keep only their shortest digits, padded with
  zeros: ``2.0**60`` is written ``1152921504606847000``.

Deliberate restrictions (I-JSON, RFC 7493), all raising
:class:`CanonicalEncodingError`:

* NaN and +/-Infinity (no JSON spelling);
* ``int`` values with ``abs(v) > 2**53 - 1`` (``MAX_SAFE_INTEGER``): a
  JavaScript peer would silently round them, so two distinct Python values
  could share one digest.  Integral *floats* are fine at any magnitude,
  since they are already doubles;
* dict keys that are not ``str`` (no silent ``1`` -> ``"1"`` coercion), or
  two keys that are the same UTF-16 string (a surrogate pair spelled as two
  code points next to the joined character);
* any other type (``set``, ``bytes``, ``Decimal``, arbitrary objects, ...);
* nesting deep enough to exhaust the interpreter stack, or cycles.

Subclasses of ``str``/``int``/``float``/``dict``/``list``/``tuple`` (e.g.
``IntEnum``, ``OrderedDict``) are accepted and encoded as their base value;
tuples encode as arrays.

:func:`decode` is the inverse for untrusted input: a strict parser with size,
depth, string-length and item-count caps that refuses duplicate member
names, NaN/Infinity literals, numbers that overflow a double and integers
that a double would silently round.

This module depends only on the standard library and is deterministic.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from itertools import accumulate

__all__ = [
    "CanonicalDecodeError",
    "CanonicalJsonBounds",
    "CanonicalJsonBoundsError",
    "CanonicalEncodingError",
    "MAX_SAFE_INTEGER",
    "ZERO_DIGEST",
    "canonical_bytes",
    "canonical_equal",
    "canonical_json",
    "decode",
    "digest",
]

#: Largest integer a JavaScript ``Number`` represents exactly (2**53 - 1).
MAX_SAFE_INTEGER = 2**53 - 1

#: Digest used where "no previous digest" must still be a 64-hex string.
ZERO_DIGEST = "0" * 64


class CanonicalEncodingError(ValueError):
    """The value has no canonical JSON form (see the module docstring)."""


class CanonicalDecodeError(ValueError):
    """The text is not acceptable JSON, or exceeds one of the decode caps."""


class CanonicalJsonBounds:
    """Optional size bounds on a value to encode (each None: unbounded).

    - ``depth``: containers nested on one path (the outermost array or
      object is depth 1; a scalar alone is depth 0);
    - ``nodes``: values visited, every container and scalar, the root
      included (object member names are not values);
    - ``collection_length``: elements of one array or members of one object;
    - ``text_units``: UTF-16 code units of one string or member name (a
      character above U+FFFF is two).
    """

    __slots__ = ("depth", "nodes", "collection_length", "text_units")

    def __init__(self, depth: int | None = None, nodes: int | None = None, collection_length: int | None = None,
                 text_units: int | None = None) -> None:
        self.depth = depth
        self.nodes = nodes
        self.collection_length = collection_length
        self.text_units = text_units

    def __repr__(self) -> str:
        return (f"CanonicalJsonBounds(depth={self.depth}, nodes={self.nodes}, "
                f"collection_length={self.collection_length}, text_units={self.text_units})")


class CanonicalJsonBoundsError(CanonicalEncodingError):
    """A value over one of its :class:`CanonicalJsonBounds`. ``kind`` is
    ``traversal`` (depth or nodes), ``collection`` (collection_length) or
    ``text`` (text_units), and the message names it; ``bound`` names the
    bound, ``limit`` its value. When several bounds are exceeded the first
    of depth, nodes, collection_length, text_units is reported."""

    KINDS = {"depth": "traversal", "nodes": "traversal", "collection_length": "collection", "text_units": "text"}

    def __init__(self, bound: str, limit: int) -> None:
        self.bound = bound
        self.kind = self.KINDS[bound]
        self.limit = limit
        super().__init__(f"canonical JSON {self.kind} bound exceeded: {bound} over {limit}")

    def __reduce__(self):
        return (type(self), (self.bound, self.limit))


def _utf16_units(text: str) -> int:
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


# Exact types that are leaves of the walk and carry no text: an array of only
# these (and longer than ``_SCALARS_AT_ONCE``) is counted without walking it.
_SCALAR_TYPES = frozenset({int, float, bool, type(None)})
_SCALARS_AT_ONCE = 64
_INT_ONLY = {int}


def check_bounds(value: object, bounds: CanonicalJsonBounds) -> None:
    """Raise :class:`CanonicalJsonBoundsError` when ``value`` is over one of
    ``bounds``. Iterative (no recursion), and it stops at the first
    container past the depth bound or the first node past the nodes bound,
    so a cyclic or absurdly deep value is refused, not walked."""
    max_depth, max_nodes = bounds.depth, bounds.nodes
    max_length, max_units = bounds.collection_length, bounds.text_units
    longest = units = 0
    nodes = 0
    stack: list = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        nodes += 1
        if max_nodes is not None and nodes > max_nodes:
            raise CanonicalJsonBoundsError("nodes", max_nodes)
        if isinstance(item, str):
            if max_units is not None:
                units = max(units, _utf16_units(item))
            continue
        if isinstance(item, dict):
            children = item.values()
            if max_units is not None:
                for name in item:
                    if isinstance(name, str):
                        units = max(units, _utf16_units(name))
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if max_depth is not None and depth > max_depth:
            raise CanonicalJsonBoundsError("depth", max_depth)
        longest = max(longest, len(item))
        if children is item and len(item) > _SCALARS_AT_ONCE and _SCALAR_TYPES.issuperset(map(type, item)):
            # An array of numbers, booleans and nulls (a million zeros): its
            # elements push nothing, so the walk would pop them next, one
            # after the other. Counted at once, with the same first error.
            nodes += len(item)
            if max_nodes is not None and nodes > max_nodes:
                raise CanonicalJsonBoundsError("nodes", max_nodes)
            continue
        for child in children:
            push((child, depth + 1))
    if max_length is not None and longest > max_length:
        raise CanonicalJsonBoundsError("collection_length", max_length)
    if max_units is not None and units > max_units:
        raise CanonicalJsonBoundsError("text_units", max_units)


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------

# C-accelerated string escaper with ``ensure_ascii=False`` semantics: escapes
# '"', '\\', \b \f \n \r \t and other C0 controls as lowercase \u00xx, and
# leaves every other character (including lone surrogates) as is.
_encode_basestring = json.encoder.encode_basestring
_SURROGATE = re.compile("[\ud800-\udfff]")
_float_repr = float.__repr__
_isfinite = math.isfinite
_NEG_SAFE = -MAX_SAFE_INTEGER


def _escape_surrogate(match: re.Match[str]) -> str:
    return "\\u%04x" % ord(match.group())


def _encode_str(s: str) -> str:
    if _SURROGATE.search(s) is None:
        return _encode_basestring(s)
    # A Python str may hold a surrogate *pair* as two code points; to an
    # ECMAScript (UTF-16) reader that is the supplementary character itself,
    # so join such pairs first, then escape whatever surrogates remain lone.
    s = s.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")
    out = _encode_basestring(s)
    if _SURROGATE.search(s) is not None:
        # The basestring escaper never touches surrogates, so each one left
        # in ``out`` is one of the lone surrogates of ``s``.
        out = _SURROGATE.sub(_escape_surrogate, out)
    return out


def _utf16_key(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")


def _encode_float(x: float) -> str:
    if not _isfinite(x):
        raise CanonicalEncodingError(f"non-finite number {x!r} has no JSON form")
    r = _float_repr(x)
    if "e" not in r:
        # repr uses plain notation for 1e-4 <= |x| < 1e16, a subset of the
        # ECMAScript plain range, with identical (shortest) digits.
        if r.endswith(".0"):
            r = r[:-2]
            if r == "-0":
                return "0"
        return r
    mantissa, _, exp = r.partition("e")
    sign = ""
    if mantissa[0] == "-":
        sign = "-"
        mantissa = mantissa[1:]
    # repr's exponent form is d[.ddd]e<+->NN with a nonzero leading digit.
    digits = mantissa.replace(".", "").rstrip("0")
    k = len(digits)
    n = int(exp) + 1  # value = 0.<digits> * 10**n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    e = n - 1
    exp_text = ("e+" if e >= 0 else "e-") + str(abs(e))
    if k == 1:
        return sign + digits + exp_text
    return sign + digits[0] + "." + digits[1:] + exp_text


def _encode_int(v: int) -> str:
    # ``v`` is an exact int here (subclasses are converted by the caller).
    if _NEG_SAFE <= v <= MAX_SAFE_INTEGER:
        return repr(v)
    raise CanonicalEncodingError(
        f"integer {v} is outside +/-(2**53 - 1) and cannot be represented "
        "exactly by an I-JSON number"
    )


# An object's member names recur (a record's, a row's): for names that are
# all exact ASCII str, their order and spelling (``"name":``) are worked out
# once per tuple of names, in the dict's own order, and kept up to a bound.
_PLANS: dict[tuple, tuple] = {}
_PLANS_MAX = 4096
# The module's memos: a mutant that patches this module empties them
# (``faults.mutants``), so a plan the clean code made never masks it.
_MEMOS = (_PLANS,)


def _encode_dict(d: dict) -> str:
    if not d:
        return "{}"
    plan = _PLANS.get(tuple(d)) if type(d) is dict else None
    if plan is None:
        return _encode_dict_planning(d)
    parts = []
    append = parts.append
    for k, prefix in plan:
        v = d[k]
        t = type(v)
        if t is int and _NEG_SAFE <= v <= MAX_SAFE_INTEGER:
            append(prefix + repr(v))
        elif t is str and v.isascii():
            append(prefix + _encode_basestring(v))
        else:
            append(prefix + _encode(v))
    return "{" + ",".join(parts) + "}"


def _encode_dict_planning(d: dict) -> str:
    """``_encode_dict`` the long way, keeping the plan of a dict whose names
    are all exact ASCII str."""
    try:
        keys = sorted(d)
    except TypeError:
        raise CanonicalEncodingError(
            "object keys must all be str, got "
            + ", ".join(sorted({type(k).__name__ for k in d}))
        ) from None
    parts = []
    append = parts.append
    ascii_only = True
    for k in keys:
        v = d[k]
        # Inline fast paths for the common scalar members (saves a call).
        t = type(v)
        if t is int and _NEG_SAFE <= v <= MAX_SAFE_INTEGER:
            vs = repr(v)
        elif t is str and v.isascii():
            vs = _encode_basestring(v)
        else:
            vs = _encode(v)
        if type(k) is not str:
            if not isinstance(k, str):
                raise CanonicalEncodingError(
                    f"object keys must be str, got {type(k).__name__}: {k!r}"
                )
            k = str.__str__(k)
        if k.isascii():
            append(_encode_basestring(k) + ":" + vs)
        else:
            ascii_only = False
            append(_encode_str(k) + ":" + vs)
    if not ascii_only:
        # Code-point order (what sorted() gave) and UTF-16 order can differ
        # only for non-ASCII names; re-sort the encoded members by name.
        units = [_utf16_key(str.__str__(k)) for k in keys]
        order = sorted(range(len(keys)), key=units.__getitem__)
        for a, b in zip(order, order[1:]):
            if units[a] == units[b]:
                # Only possible when one name spells a surrogate pair as two
                # code points and the other as the joined character.
                raise CanonicalEncodingError(
                    f"object keys {keys[a]!r} and {keys[b]!r} are the same "
                    "UTF-16 string"
                )
        parts = [parts[i] for i in order]
    elif type(d) is dict and len(_PLANS) < _PLANS_MAX and all(type(k) is str for k in keys):
        _PLANS[tuple(d)] = tuple((k, _encode_basestring(k) + ":") for k in keys)
    return "{" + ",".join(parts) + "}"


def _encode_array(value: list | tuple) -> str:
    if not value:
        return "[]"
    if len(value) > _SCALARS_AT_ONCE and set(map(type, value)) == _INT_ONLY:
        # Exact ints alone (a million zeros): each its repr, once all are in range.
        if _NEG_SAFE <= min(value) and max(value) <= MAX_SAFE_INTEGER:
            return "[" + ",".join(map(int.__repr__, value)) + "]"
    return (
        "["
        + ",".join(
            [
                repr(v)
                if type(v) is int and _NEG_SAFE <= v <= MAX_SAFE_INTEGER
                else _encode(v)
                for v in value
            ]
        )
        + "]"
    )


def _encode(value: object) -> str:
    t = type(value)
    if t is str:
        if value.isascii():
            return _encode_basestring(value)
        return _encode_str(value)
    if t is int:
        return _encode_int(value)
    if t is dict:
        return _encode_dict(value)
    if t is list or t is tuple:
        return _encode_array(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if t is float:
        return _encode_float(value)
    # Subclasses of the supported types, checked after the exact-type paths.
    if isinstance(value, str):
        return _encode_str(str.__str__(value))
    if isinstance(value, int):
        return _encode_int(int(value))
    if isinstance(value, float):
        return _encode_float(float(value))
    if isinstance(value, dict):
        return _encode_dict(value)
    if isinstance(value, (list, tuple)):
        return _encode_array(value)
    raise CanonicalEncodingError(
        f"type {t.__module__}.{t.__qualname__} is not JSON-encodable"
    )


class WorkCounts:
    """What this process has encoded, hashed and decoded so far: counted
    figures of the work a run does (``loomsim bench`` divides them by its
    wakes), independent of the machine's speed. Plain counters; nothing
    reads them to decide anything.

    ``encodings`` counts values encoded whole (:func:`canonical_json`);
    ``scalars`` counts the strings and integers quoted by :func:`scalar` to
    splice into a digest's preimage around texts already encoded (a batch
    id, a sequence number): counted apart, so neither hides the other."""

    __slots__ = ("encodings", "encoded_chars", "scalars", "digests", "hashed_bytes", "decodes", "decoded_chars")

    def __init__(self) -> None:
        self.encodings = self.encoded_chars = self.scalars = self.digests = self.hashed_bytes = 0
        self.decodes = self.decoded_chars = 0

    def snapshot(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}

    def since(self, before: dict[str, int]) -> dict[str, int]:
        return {name: getattr(self, name) - before[name] for name in self.__slots__}


WORK = WorkCounts()


def canonical_json(value: object, bounds: CanonicalJsonBounds | None = None) -> str:
    """Return the canonical (RFC 8785) JSON text for ``value``.

    Accepts None, bool, int (|v| <= 2**53 - 1), finite float, str,
    list/tuple and dict with str keys, nested arbitrarily (within the
    interpreter's recursion limit).  Raises :class:`CanonicalEncodingError`
    otherwise, and :class:`CanonicalJsonBoundsError` (one of them) for a
    value over ``bounds`` (checked first, when given).
    """
    if bounds is not None:
        check_bounds(value, bounds)
    try:
        text = _encode(value)
    except RecursionError:
        raise CanonicalEncodingError(
            "value is nested too deeply (or contains a reference cycle)"
        ) from None
    WORK.encodings += 1
    WORK.encoded_chars += len(text)
    return text


def scalar(value: "str | int") -> str:
    """The canonical text of a str or an exact int (within the I-JSON
    range), for composing a digest's preimage from parts already encoded
    (:func:`compose_object`)."""
    WORK.scalars += 1
    t = type(value)
    if t is str:
        return _encode_basestring(value) if value.isascii() else _encode_str(value)
    if t is int:
        return _encode_int(value)
    raise CanonicalEncodingError(f"scalar() takes a str or an int, got {t.__name__}")


def canonical_bytes(value: object) -> bytes:
    """``canonical_json(value)`` encoded as UTF-8 (never fails: surrogates
    are escaped)."""
    return canonical_json(value).encode("utf-8")


def digest(value: object) -> str:
    """Lowercase hex sha256 of :func:`canonical_bytes`."""
    return digest_text(canonical_json(value))


def digest_text(text: str) -> str:
    """:func:`digest` of a value whose canonical text is already at hand."""
    data = text.encode("utf-8")
    WORK.digests += 1
    WORK.hashed_bytes += len(data)
    return hashlib.sha256(data).hexdigest()


def compose_object(members: "list[tuple[str, str]]") -> str:
    """The canonical text of an object whose member values are already
    canonical texts (``[(name, value_text), ...]``, names ASCII and given in
    sorted order) — so a digest over a structure that embeds large encoded
    parts need not encode them again."""
    for (a, _), (b, _) in zip(members, members[1:]):
        assert a.isascii() and a < b, (a, b)
    return "{" + ",".join(f'"{name}":{text}' for name, text in members) + "}"


def canonical_equal(a: object, b: object) -> bool:
    """True when ``a`` and ``b`` have the same canonical JSON text.

    Independent of dict insertion order; ``1 == 1.0`` and ``-0.0 == 0``
    compare equal (they canonicalize identically), ``True`` and ``1`` do not.
    Raises :class:`CanonicalEncodingError` if either side is not encodable.
    """
    return canonical_json(a) == canonical_json(b)


# --------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------

# One JSON string token; possessive and with an optional closing quote so an
# unterminated string can never cause backtracking (the parser rejects it).
_STRING_TOKEN = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_DELTA = {"[": 1, "{": 1, "]": -1, "}": -1}
# Any run of 16+ digits (a possible unsafe integer or an over-long mantissa)
# or an exponent with 3+ digits (a possible overflow to infinity).  Matching
# inside strings merely selects the slower, checked number hooks.
_RISKY_NUMBER = re.compile(r"[0-9]{16}|[eE][-+]?[0-9]{3}")


def _reject_constant(name: str) -> object:
    raise CanonicalDecodeError(f"non-finite number literal {name} is not allowed")


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise CanonicalDecodeError(f"duplicate object key {key!r}")
            seen.add(key)
    return result


def _checked_int(text: str) -> int | float:
    if len(text) <= 16 + (text[0] == "-"):  # at most 16 digits (2**53 - 1 has 16), signed or not
        v = int(text)
        if -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
            return v
    # Outside the safe range an integer literal is only acceptable as the
    # canonical spelling of a double (the encoder writes e.g. the float
    # 2.0**60 as 1152921504606847000); anything else would be silently
    # rounded, so two different texts could decode to one value.
    f = float(text)
    if _isfinite(f) and _encode_float(f) == text:
        return f
    shown = text if len(text) <= 40 else text[:40] + "..."
    raise CanonicalDecodeError(
        f"integer {shown} is outside +/-(2**53 - 1) and is not the canonical "
        "spelling of an IEEE-754 double"
    )


def _checked_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise CanonicalDecodeError(
            f"number {text[:40]}{'...' if len(text) > 40 else ''} overflows "
            "an IEEE-754 double"
        )
    return v


_plain_decoder = json.JSONDecoder(
    object_pairs_hook=_no_duplicates, parse_constant=_reject_constant
)
_checked_decoder = json.JSONDecoder(
    object_pairs_hook=_no_duplicates,
    parse_constant=_reject_constant,
    parse_int=_checked_int,
    parse_float=_checked_float,
)


def _nesting_depth(text: str) -> int:
    brackets = _NOT_BRACKET.sub("", _STRING_TOKEN.sub("", text))
    if not brackets:
        return 0
    return max(accumulate(map(_BRACKET_DELTA.__getitem__, brackets)))


def _check_result(
    value: object, max_string_length: int | None, max_items: int | None
) -> None:
    items = 0
    stack = [value]
    pop = stack.pop
    extend = stack.extend
    while stack:
        v = pop()
        t = type(v)
        if t is str:
            if max_string_length is not None and len(v) > max_string_length:
                raise CanonicalDecodeError(
                    f"string of length {len(v)} exceeds max_string_length="
                    f"{max_string_length}"
                )
        elif t is list:
            items += len(v)
            extend(v)
        elif t is dict:
            items += len(v)
            if max_string_length is not None:
                for k in v:
                    if len(k) > max_string_length:
                        raise CanonicalDecodeError(
                            f"object key of length {len(k)} exceeds "
                            f"max_string_length={max_string_length}"
                        )
            extend(v.values())
        else:
            continue
        if max_items is not None and items > max_items:
            raise CanonicalDecodeError(
                f"document has more than max_items={max_items} array "
                "elements/object members"
            )


def decode(
    text: str | bytes,
    *,
    max_bytes: int = 1_048_576,
    max_depth: int = 64,
    max_string_length: int = 262_144,
    max_items: int = 100_000,
) -> object:
    """Parse one JSON document strictly, enforcing resource caps.

    * ``max_bytes``: UTF-8 size of the document, checked before parsing.
    * ``max_depth``: maximum container nesting (``[]`` is depth 1,
      ``[[1]]`` depth 2, a bare scalar 0), checked before parsing by a
      bracket scan that skips string contents, so hostile nesting never
      reaches the recursive parser.
    * ``max_string_length``: maximum length (in code points, after unescaping)
      of any string value or object key.
    * ``max_items``: maximum total number of array elements plus object
      members, summed over the whole document.

    Bytes must be UTF-8 (no BOM).  Rejects duplicate object keys,
    ``NaN``/``Infinity`` literals and numbers that overflow a double.  An
    integer literal outside +/-(2**53 - 1) is accepted only when it is
    exactly the canonical spelling of a double (as :func:`canonical_json`
    writes large integral floats, e.g. ``1152921504606847000`` for
    ``2.0**60``) and is then returned as that ``float``; any other such
    literal is rejected, since it would be silently rounded.  So
    ``decode(canonical_json(v))`` always succeeds (within the caps) and
    re-encodes to the same text.  Lone surrogate escapes decode to lone
    surrogates, which the encoder escapes again.  Every rejected document
    raises :class:`CanonicalDecodeError` (a cap violation's message names
    the cap); a non-text argument raises ``TypeError``.
    """
    WORK.decodes += 1
    WORK.decoded_chars += len(text)
    if isinstance(text, (bytes, bytearray, memoryview)):
        size = len(text)
        if size > max_bytes:
            raise CanonicalDecodeError(
                f"document of {size} bytes exceeds max_bytes={max_bytes}"
            )
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CanonicalDecodeError(f"document is not valid UTF-8: {exc}") from None
    elif isinstance(text, str):
        n = len(text)
        if n > max_bytes or (
            n * 4 > max_bytes
            and len(text.encode("utf-8", "surrogatepass")) > max_bytes
        ):
            raise CanonicalDecodeError(
                f"document exceeds max_bytes={max_bytes} (UTF-8)"
            )
    else:
        raise TypeError(f"decode() expects str or bytes, got {type(text).__name__}")

    n = len(text)
    # Each container needs an opening bracket, so fewer brackets than the cap
    # (counting those inside strings too) proves the depth bound cheaply.
    if text.count("[") + text.count("{") > max_depth:
        depth = _nesting_depth(text)
        if depth > max_depth:
            raise CanonicalDecodeError(
                f"nesting depth {depth} exceeds max_depth={max_depth}"
            )

    decoder = _checked_decoder if _RISKY_NUMBER.search(text) else _plain_decoder
    try:
        value = decoder.decode(text)
    except CanonicalDecodeError:
        raise
    except RecursionError:
        raise CanonicalDecodeError("document is nested too deeply to parse") from None
    except ValueError as exc:  # json.JSONDecodeError, int-digit limit, ...
        raise CanonicalDecodeError(f"invalid JSON: {exc}") from None

    # A decoded string is never longer than the text, and every element or
    # member costs at least one character, so small documents skip the walk.
    check_strings = n > max_string_length
    check_items = n > max_items
    if check_strings or check_items:
        _check_result(
            value,
            max_string_length if check_strings else None,
            max_items if check_items else None,
        )
    return value


_own_decoder = json.JSONDecoder()


def decode_own(text: str) -> object:
    """Decode a text this process encoded with :func:`canonical_json` and
    kept in memory (a store's own write): fresh objects, without the caps
    and checks :func:`decode` applies to foreign input, which this text
    cannot break (no duplicate names, no NaN, within the caps it was
    checked against when written). A large integral float spelled as an
    integer (``1152921504606847000``) still decodes as :func:`decode` reads
    it, through the strict path."""
    if _RISKY_NUMBER.search(text):
        return decode(text, max_bytes=len(text) * 4 + 16, max_depth=1 << 20, max_string_length=len(text) + 1,
                      max_items=len(text) + 1)
    WORK.decodes += 1
    WORK.decoded_chars += len(text)
    return _own_decoder.decode(text)


def json_equal(a: object, b: object) -> bool:
    """``canonical_equal`` without encoding: for hot-path oracles.

    Compares JSON values structurally: dict key order is ignored, ``1`` equals
    ``1.0`` (both print as ``1``), but ``True`` never equals ``1`` and tuples
    equal lists (both are arrays). It agrees with :func:`canonical_equal` for
    every value whose strings hold no surrogate code points; those rare values
    (which canonical JSON may join into one character) are compared exactly
    by falling back to :func:`canonical_equal`.
    """
    if a is b:
        return True
    ta = type(a)
    tb = type(b)
    if ta is dict:
        if tb is not dict or len(a) != len(b):  # type: ignore[arg-type]
            return False
        for key, value in a.items():  # type: ignore[union-attr]
            if key not in b or not json_equal(value, b[key]):  # type: ignore[operator,index]
                return False
        return True
    if ta is list or ta is tuple:
        if (tb is not list and tb is not tuple) or len(a) != len(b):  # type: ignore[arg-type]
            return False
        return all(json_equal(x, y) for x, y in zip(a, b))  # type: ignore[call-overload]
    if ta is str:
        if tb is not str:
            return False
        if a == b:
            return True
        if _SURROGATE.search(a) or _SURROGATE.search(b):  # type: ignore[arg-type]
            return canonical_equal(a, b)
        return False
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if a is None or b is None:
        return a is b
    if ta in (int, float) and tb in (int, float):
        return a == b
    return canonical_equal(a, b)
