"""Tests for model.canonical: RFC 8785 (JCS) canonical JSON, digests, decode."""

from __future__ import annotations

import decimal
import enum
import fractions
import hashlib
import json
import math
import re
import struct
from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.canonical import (
    MAX_SAFE_INTEGER,
    ZERO_DIGEST,
    CanonicalDecodeError,
    CanonicalEncodingError,
    canonical_bytes,
    canonical_equal,
    canonical_json,
    decode,
    digest,
)

# --------------------------------------------------------------------------
# Helpers and strategies
# --------------------------------------------------------------------------

_STRING_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def outside_strings(text: str) -> str:
    """The canonical text with every string token removed."""
    return _STRING_TOKEN.sub("", text)


def numbers_as_floats(value: object) -> object:
    """Normalize for value comparison: JSON has one number type, so compare
    every number as a double (exact for ints within +/-(2**53 - 1))."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        return {k: numbers_as_floats(v) for k, v in value.items()}
    return [numbers_as_floats(v) for v in value]


def utf16(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")


def from_bits(hex_bits: str) -> float:
    return struct.unpack(">d", bytes.fromhex(hex_bits))[0]


def ecmascript_number(x: float) -> str:
    """Independent reference for Number.prototype.toString (finite x).

    ECMA-262 Number::toString: the smallest k such that some k-digit s with
    s * 10**(n-k) == x (as a double) exists; among several such s, the one
    closest to x (ties: even).  Candidates at each precision are the
    correctly rounded k-digit value and its two neighbours, compared in exact
    rational arithmetic; the layout is then done by Decimal formatting.
    """
    if x == 0:
        return "0"
    sign, ax = ("-" if x < 0 else ""), abs(x)
    exact = fractions.Fraction(ax)
    for p in range(1, 18):
        mantissa, _, exp = f"{ax:.{p - 1}e}".partition("e")
        digits, scale = int(mantissa.replace(".", "")), int(exp) - (p - 1)
        candidates = []
        for s in (digits - 1, digits, digits + 1):
            value = fractions.Fraction(s) * fractions.Fraction(10) ** scale
            try:
                if s > 0 and float(value) == ax:
                    candidates.append((abs(value - exact), s % 2, s))
            except OverflowError:  # beyond the largest double
                pass
        if candidates:
            break
    best = min(candidates)[2]
    d = decimal.Decimal(best).scaleb(scale).normalize()
    if decimal.Decimal("1e-6") <= d < decimal.Decimal("1e21"):
        return sign + format(d, "f")
    return sign + format(d, "e")


safe_ints = st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
json_scalars = (
    st.none() | st.booleans() | safe_ints | finite_floats | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=25,
)
# Keys that stress UTF-16 ordering: ASCII, the U+E000..U+FFFF block, and the
# supplementary planes.
tricky_keys = st.text(
    alphabet=st.sampled_from(
        ["a", "b", "z", "\u00e9", "\ue000", "\ufb01", "\uffff", "\U00010000", "\U0001f600"]
    ),
    max_size=4,
)


# --------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------

# RFC 8785 Appendix B: IEEE-754 binary64 bit pattern -> canonical text.
RFC8785_APPENDIX_B = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "expected"), RFC8785_APPENDIX_B)
def test_rfc8785_appendix_b_numbers(bits: str, expected: str) -> None:
    assert canonical_json(from_bits(bits)) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "0"),
        (0.0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (-1.0, "-1"),
        (4.5, "4.5"),
        (4.50, "4.5"),
        (2e-3, "0.002"),
        (0.000001, "0.000001"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (123.456, "123.456"),
        (333333333.3333333, "333333333.3333333"),
        (333333333.33333329, "333333333.3333333"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1e30, "1e+30"),
        (1e-27, "1e-27"),
        (1e16, "10000000000000000"),
        (1e15 + 0.5, "1000000000000000.5"),
        (0.1, "0.1"),
        (-0.0001, "-0.0001"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (9007199254740992.0, "9007199254740992"),
        (295147905179352830000.0, "295147905179352830000"),
        (2.0**60, "1152921504606847000"),
    ],
)
def test_number_vectors(value: float, expected: str) -> None:
    assert canonical_json(value) == expected


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -math.nan])
def test_non_finite_numbers_rejected(bad: float) -> None:
    with pytest.raises(CanonicalEncodingError):
        canonical_json(bad)
    with pytest.raises(CanonicalEncodingError):
        canonical_json({"a": [1, {"b": bad}]})


def test_integer_range() -> None:
    assert canonical_json(MAX_SAFE_INTEGER) == "9007199254740991"
    assert canonical_json(-MAX_SAFE_INTEGER) == "-9007199254740991"
    assert MAX_SAFE_INTEGER == 2**53 - 1
    for bad in (2**53, -(2**53), 2**64, -(10**30)):
        with pytest.raises(CanonicalEncodingError, match="2\\*\\*53"):
            canonical_json(bad)
        with pytest.raises(CanonicalEncodingError):
            canonical_json([bad])
        with pytest.raises(CanonicalEncodingError):
            canonical_json({"k": bad})
    # An integral float is already a double, so any magnitude is fine.
    assert canonical_json(float(2**53)) == "9007199254740992"


def test_bool_is_not_int() -> None:
    assert canonical_json(True) == "true"
    assert canonical_json(False) == "false"
    assert canonical_json([True, 1, False, 0, None]) == "[true,1,false,0,null]"
    assert not canonical_equal(True, 1)


@given(finite_floats)
def test_float_round_trips_exactly(x: float) -> None:
    text = canonical_json(x)
    assert float(text) == x
    # Python reads integral spellings as int; as a double it is still x.
    assert float(json.loads(text)) == x
    assert decode(text) == x


@given(finite_floats)
def test_float_matches_ecmascript_reference(x: float) -> None:
    assert canonical_json(x) == ecmascript_number(x)


@pytest.mark.parametrize(("bits", "expected"), RFC8785_APPENDIX_B)
def test_reference_agrees_with_rfc(bits: str, expected: str) -> None:
    # Guard that the independent reference used above is itself right.
    assert ecmascript_number(from_bits(bits)) == expected


# --------------------------------------------------------------------------
# Strings
# --------------------------------------------------------------------------

_SHORT_ESCAPES = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


@pytest.mark.parametrize("code", range(0x20))
def test_control_characters_escaped(code: int) -> None:
    ch = chr(code)
    expected = _SHORT_ESCAPES.get(ch, "\\u%04x" % code)
    assert canonical_json(ch) == '"' + expected + '"'


def test_string_escapes() -> None:
    assert canonical_json('a"b') == '"a\\"b"'
    assert canonical_json("a\\b") == '"a\\\\b"'
    assert canonical_json("/") == '"/"'  # solidus is not escaped
    assert canonical_json("\x7f") == '"\x7f"'  # DEL is not a C0 control
    assert canonical_json("\x1f") == '"\\u001f"'  # lowercase hex
    assert canonical_json("\u2028\u2029") == '"\u2028\u2029"'
    assert canonical_json("") == '""'


def test_non_ascii_written_raw() -> None:
    text = canonical_json("€ é \U0001f600 \ufb01")
    assert text == '"€ é \U0001f600 \ufb01"'
    assert canonical_bytes("€") == b'"\xe2\x82\xac"'


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("\ud800", '"\\ud800"'),
        ("\udfff", '"\\udfff"'),
        ("\udbff", '"\\udbff"'),
        ("a\ud83dz", '"a\\ud83dz"'),
        ("€\udc00\n", '"€\\udc00\\n"'),
        ("\U0001f600\ud800", '"\U0001f600\\ud800"'),
    ],
)
def test_lone_surrogates_escaped(value: str, expected: str) -> None:
    assert canonical_json(value) == expected
    data = canonical_bytes(value)  # must not raise
    assert data == expected.encode("utf-8")
    assert json.loads(data) == value


def test_surrogate_pair_code_points_join() -> None:
    # Two code points forming a valid pair are, in UTF-16, the character.
    assert canonical_json("\ud83d\ude00") == canonical_json("\U0001f600")
    assert canonical_json("x\ud83d\ude00\ud83d") == '"x\U0001f600\\ud83d"'
    assert canonical_json({"\ud83d\ude00": 1, "\ufb01": 2}) == '{"\U0001f600":1,"\ufb01":2}'
    with pytest.raises(CanonicalEncodingError, match="same UTF-16"):
        canonical_json({"\ud83d\ude00": 1, "\U0001f600": 2})


def test_lone_surrogate_in_key() -> None:
    text = canonical_json({"\udc00": 1, "a": 2})
    assert text == '{"a":2,"\\udc00":1}'
    canonical_bytes({"\udc00": 1})


def test_rfc8785_sample_document() -> None:
    # RFC 8785 section 3.2.2 input and its canonical form (3.2.3).
    source = (
        "{\n"
        '  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],\n'
        '  "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",\n'
        '  "literals": [null, true, false]\n'
        "}"
    )
    expected = (
        '{"literals":[null,true,false],'
        '"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical_json(json.loads(source)) == expected
    assert canonical_json(decode(source)) == expected
    assert canonical_bytes(json.loads(source)) == expected.encode("utf-8")


# --------------------------------------------------------------------------
# Objects: key order
# --------------------------------------------------------------------------


def test_utf16_order_differs_from_code_point_order() -> None:
    emoji, ligature = "\U0001f600", "\ufb01"
    # Code points: U+FB01 < U+1F600.  UTF-16: 0xD83D (high surrogate) < 0xFB01.
    assert sorted([emoji, ligature]) == [ligature, emoji]
    text = canonical_json({ligature: 1, emoji: 2})
    assert text == '{"\U0001f600":2,"\ufb01":1}'
    # What a code-point sort (json.dumps(sort_keys=True)) would give instead:
    code_point = json.dumps({emoji: 2, ligature: 1}, sort_keys=True,
                            separators=(",", ":"), ensure_ascii=False)
    assert code_point == '{"\ufb01":1,"\U0001f600":2}'
    assert text != code_point
    # Same result whatever the insertion order.
    assert canonical_json({emoji: 2, ligature: 1}) == text


def test_utf16_order_e000_block() -> None:
    assert canonical_json({"\ue000": 1, "\U00010000": 2}) == '{"\U00010000":2,"\ue000":1}'
    # Difference deep inside the name, with a shared prefix.
    assert canonical_json({"k\uffff": 1, "k\U0001f600": 2, "k": 3, "ka": 4}) == (
        '{"k":3,"ka":4,"k\U0001f600":2,"k\uffff":1}'
    )


def test_rfc8785_property_sorting_sample() -> None:
    # RFC 8785 section 3.2.3 sorting example.
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    expected_order = ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    text = canonical_json(value)
    order = [k for k, _ in json.loads(text, object_pairs_hook=list)]
    assert order == expected_order
    assert sorted(value) != expected_order  # code-point order disagrees
    assert text.startswith('{"\\r":"Carriage Return","1":"One","\u0080":"Control"')


@given(st.dictionaries(tricky_keys, safe_ints, max_size=8))
def test_keys_emitted_in_utf16_order(value: dict) -> None:
    pairs = json.loads(canonical_json(value), object_pairs_hook=list)
    keys = [k for k, _ in pairs]
    assert keys == sorted(value, key=utf16)
    assert dict(pairs) == value


def test_ascii_keys_sorted() -> None:
    value = {"sum": 3456, "count": 12, "last": "reading-12", "history": [1, 2, 3, 4]}
    assert canonical_json(value) == (
        '{"count":12,"history":[1,2,3,4],"last":"reading-12","sum":3456}'
    )
    assert canonical_json({"b": 1, "a": 2, "B": 3, "": 4, "aa": 5}) == (
        '{"":4,"B":3,"a":2,"aa":5,"b":1}'
    )


@pytest.mark.parametrize(
    "bad",
    [
        {1: "a"},
        {1: "a", 2: "b"},
        {"a": 1, 2: "b"},
        {None: 1},
        {(1, 2): 1},
        {1.5: 1},
        {True: 1},
        {b"a": 1},
        {"outer": {3: 4}},
    ],
)
def test_non_str_keys_rejected(bad: dict) -> None:
    with pytest.raises(CanonicalEncodingError):
        canonical_json(bad)


# --------------------------------------------------------------------------
# Types and structure
# --------------------------------------------------------------------------


class _Color(enum.IntEnum):
    RED = 1


class _Tag(str):
    pass


class _Plain:
    pass


@pytest.mark.parametrize(
    "bad",
    [
        {1, 2},
        frozenset(),
        b"bytes",
        bytearray(b"x"),
        _Plain(),
        decimal.Decimal("1.5"),
        1 + 2j,
        object,
        range(3),
        iter([1]),
        [1, {2}],
        {"a": b"x"},
    ],
)
def test_unsupported_types_rejected(bad: object) -> None:
    with pytest.raises(CanonicalEncodingError):
        canonical_json(bad)


def test_errors_are_value_errors() -> None:
    assert issubclass(CanonicalEncodingError, ValueError)
    assert issubclass(CanonicalDecodeError, ValueError)


def test_nested_structures() -> None:
    value = {
        "z": [1, [2, [3, []]], {}],
        "a": {"y": None, "x": [True, False, "s", 1.5, -0.0]},
        "m": ({"q": 1, "p": 2},),
    }
    assert canonical_json(value) == (
        '{"a":{"x":[true,false,"s",1.5,0],"y":null},'
        '"m":[{"p":2,"q":1}],'
        '"z":[1,[2,[3,[]]],{}]}'
    )
    assert canonical_json([]) == "[]"
    assert canonical_json({}) == "{}"
    assert canonical_json(None) == "null"


def test_tuples_encode_as_arrays() -> None:
    assert canonical_json((1, "a", (None,))) == canonical_json([1, "a", [None]])


def test_subclasses_encode_as_base_values() -> None:
    assert canonical_json(_Color.RED) == "1"
    assert canonical_json({_Tag("k"): _Tag("v")}) == '{"k":"v"}'
    assert canonical_json(OrderedDict([("b", 1), ("a", 2)])) == '{"a":2,"b":1}'


def test_cycles_and_deep_nesting_rejected() -> None:
    loop: list = []
    loop.append(loop)
    with pytest.raises(CanonicalEncodingError):
        canonical_json(loop)
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(CanonicalEncodingError):
        canonical_json(deep)


def test_moderate_nesting_ok() -> None:
    deep: list = []
    for _ in range(200):
        deep = [deep]
    assert canonical_json(deep) == "[" * 201 + "]" * 201


# --------------------------------------------------------------------------
# Bytes, digest, equality
# --------------------------------------------------------------------------


def test_digest_is_sha256_of_canonical_bytes() -> None:
    value = {"batch": [{"op": "put", "k": "é"}], "previousTailDigest": ZERO_DIGEST}
    data = canonical_bytes(value)
    assert data == canonical_json(value).encode("utf-8")
    assert digest(value) == hashlib.sha256(data).hexdigest()
    assert re.fullmatch(r"[0-9a-f]{64}", digest(value))
    # sha256(b"{}") is a well-known constant.
    assert digest({}) == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"


def test_zero_digest() -> None:
    assert ZERO_DIGEST == "0" * 64
    assert len(ZERO_DIGEST) == 64


def test_canonical_equal_key_order_independent() -> None:
    a = {"x": 1, "y": {"b": [1, 2], "a": None}}
    b = {"y": {"a": None, "b": [1, 2]}, "x": 1}
    assert list(a) != list(b)
    assert canonical_equal(a, b)
    assert digest(a) == digest(b)
    assert canonical_equal({"n": 1}, {"n": 1.0})
    assert canonical_equal(0, -0.0)
    assert canonical_equal((1, 2), [1, 2])
    assert not canonical_equal({"x": 1}, {"x": 2})
    assert not canonical_equal({"b": [1, 2]}, {"b": [2, 1]})
    assert not canonical_equal("1", 1)
    with pytest.raises(CanonicalEncodingError):
        canonical_equal({1, 2}, {1, 2})


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6), st.randoms())
def test_canonical_equal_ignores_insertion_order(value: dict, rnd) -> None:
    items = list(value.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    assert canonical_equal(value, shuffled)
    assert digest(value) == digest(shuffled)


# --------------------------------------------------------------------------
# Properties over JSON-ish values
# --------------------------------------------------------------------------


@given(json_values)
def test_json_round_trip(value: object) -> None:
    text = canonical_json(value)
    # Floats compare by value (-0.0 == 0); an integral float beyond 2**53 is
    # read back by the stdlib as an int, equal to it once made a double.
    assert numbers_as_floats(json.loads(text)) == numbers_as_floats(value)
    assert decode(text) == value


@given(json_values)
def test_no_whitespace_outside_strings(value: object) -> None:
    rest = outside_strings(canonical_json(value))
    assert not re.search(r"\s", rest), rest


@given(json_values)
def test_idempotent_through_decode(value: object) -> None:
    text = canonical_json(value)
    assert canonical_json(decode(text)) == text


# Integral floats with 2**53 <= |x| < 1e21 are written as integer literals,
# which json.loads reads as ints beyond the encoder's int range; decode()
# reads them back as floats (tested above), the stdlib cannot.
_stdlib_floats = finite_floats.filter(lambda x: not 2**53 <= abs(x) < 1e21)
_stdlib_values = st.recursive(
    st.none() | st.booleans() | safe_ints | _stdlib_floats | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=25,
)


@given(_stdlib_values)
def test_idempotent_through_stdlib_json(value: object) -> None:
    text = canonical_json(value)
    assert canonical_json(json.loads(text)) == text


def test_stdlib_reads_large_integral_float_as_unsafe_int() -> None:
    text = canonical_json(2.0**60)
    assert text == "1152921504606847000"
    assert isinstance(json.loads(text), int)
    with pytest.raises(CanonicalEncodingError):
        canonical_json(json.loads(text))
    assert canonical_json(decode(text)) == text


@given(json_values)
def test_bytes_are_utf8_of_text_and_digest_stable(value: object) -> None:
    data = canonical_bytes(value)
    assert data.decode("utf-8") == canonical_json(value)
    assert digest(value) == hashlib.sha256(data).hexdigest()


# Float-free values with keys below U+E000: the stdlib encoder with sorted keys
# must agree byte for byte (an independent oracle for structure and strings).
_plain_values = st.recursive(
    st.none() | st.booleans() | safe_ints | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(
        st.text(alphabet=st.characters(max_codepoint=0xD7FF), max_size=8),
        children,
        max_size=5,
    ),
    max_leaves=25,
)


@given(_plain_values)
def test_matches_stdlib_for_float_free_bmp_values(value: object) -> None:
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(value) == expected


# --------------------------------------------------------------------------
# decode()
# --------------------------------------------------------------------------


def test_decode_basic() -> None:
    assert decode('{"a":[1,2.5,"x",null,true]}') == {"a": [1, 2.5, "x", None, True]}
    assert decode(b'{"a":1}') == {"a": 1}
    assert decode(bytearray(b"[]")) == []
    assert decode(" 7 ") == 7
    assert decode('"\\ud800"') == "\ud800"


def test_decode_max_bytes() -> None:
    text = "[" + ",".join(["1"] * 600) + "]"  # 1201 bytes
    with pytest.raises(CanonicalDecodeError, match="max_bytes"):
        decode(text, max_bytes=1000)
    with pytest.raises(CanonicalDecodeError, match="max_bytes"):
        decode(text.encode(), max_bytes=1000)
    assert decode(text, max_bytes=len(text)) == [1] * 600
    # Measured in UTF-8 bytes, not code points: 602 chars, 1202 bytes.
    wide = '"' + "é" * 600 + '"'
    with pytest.raises(CanonicalDecodeError, match="max_bytes"):
        decode(wide, max_bytes=1000)
    assert decode(wide, max_bytes=1202) == "é" * 600


def test_decode_default_max_bytes() -> None:
    big = '"' + "a" * 1_048_575 + '"'  # 1 MiB + 1
    with pytest.raises(CanonicalDecodeError, match="max_bytes"):
        decode(big)


def test_decode_max_depth() -> None:
    assert decode("[" * 64 + "]" * 64) is not None
    with pytest.raises(CanonicalDecodeError, match="max_depth"):
        decode("[" * 65 + "]" * 65)
    with pytest.raises(CanonicalDecodeError, match="max_depth"):
        decode('{"a":' * 65 + "1" + "}" * 65)
    with pytest.raises(CanonicalDecodeError, match="max_depth"):
        decode("[[[1]]]", max_depth=2)
    assert decode("[[1]]", max_depth=2) == [[1]]
    assert decode("1", max_depth=0) == 1
    # Brackets inside strings do not count, even with escaped quotes.
    tricky = '["' + "[{" * 100 + '\\"[[[", ' + '"]]]"' + "]"
    assert decode(tricky) == ["[{" * 100 + '"[[[', "]]]"]


def test_decode_hostile_nesting_never_reaches_parser() -> None:
    with pytest.raises(CanonicalDecodeError, match="max_depth"):
        decode("[" * 500_000)
    # Even with the depth cap lifted, a too-deep document is a decode error.
    with pytest.raises(CanonicalDecodeError):
        decode("[" * 200_000 + "]" * 200_000, max_depth=10**9)


def test_decode_max_string_length() -> None:
    assert decode('"' + "a" * 10 + '"', max_string_length=10) == "a" * 10
    with pytest.raises(CanonicalDecodeError, match="max_string_length"):
        decode('"' + "a" * 11 + '"', max_string_length=10)
    with pytest.raises(CanonicalDecodeError, match="max_string_length"):
        decode('{"' + "k" * 11 + '":1}', max_string_length=10)
    with pytest.raises(CanonicalDecodeError, match="max_string_length"):
        decode('[1,{"a":["' + "v" * 11 + '"]}]', max_string_length=10)
    # Length is counted after unescaping.
    assert decode('"' + "\\u0041" * 10 + '"', max_string_length=10) == "A" * 10


def test_decode_default_max_string_length() -> None:
    with pytest.raises(CanonicalDecodeError, match="max_string_length"):
        decode('"' + "a" * 262_145 + '"')
    assert len(decode('"' + "a" * 262_144 + '"')) == 262_144


def test_decode_max_items() -> None:
    assert decode("[1,2,3]", max_items=3) == [1, 2, 3]
    with pytest.raises(CanonicalDecodeError, match="max_items"):
        decode("[1,2,3,4]", max_items=3)
    with pytest.raises(CanonicalDecodeError, match="max_items"):
        decode('{"a":1,"b":2,"c":3,"d":4}', max_items=3)
    # Counted over the whole document: 2 + 1 + 1 = 4.
    with pytest.raises(CanonicalDecodeError, match="max_items"):
        decode('[[1],{"a":1}]', max_items=3)


def test_decode_default_max_items() -> None:
    with pytest.raises(CanonicalDecodeError, match="max_items"):
        decode("[" + ",".join(["0"] * 100_001) + "]")
    assert len(decode("[" + ",".join(["0"] * 100_000) + "]")) == 100_000


def test_decode_rejects_duplicate_keys() -> None:
    with pytest.raises(CanonicalDecodeError, match="duplicate"):
        decode('{"a":1,"a":2}')
    with pytest.raises(CanonicalDecodeError, match="duplicate"):
        decode('[{"x":{"b":1,"c":2,"b":1}}]')
    # Distinct after unescaping? "\u0061" is "a".
    with pytest.raises(CanonicalDecodeError, match="duplicate"):
        decode('{"a":1,"\\u0061":2}')


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "[1,NaN]", '{"a":Infinity}'])
def test_decode_rejects_non_finite_literals(literal: str) -> None:
    with pytest.raises(CanonicalDecodeError):
        decode(literal)


@pytest.mark.parametrize(
    "text",
    [
        "1e400",
        "-1e400",
        "[1" + "0" * 400 + ".0]",
        "9007199254740993",  # 2**53 + 1: a double would round it
        "-9007199254740993",
        "41240478915299461",  # not the shortest spelling of any double
        "12345678901234567890",
        "[" + "9" * 5000 + "]",
    ],
)
def test_decode_rejects_numbers_the_encoder_refuses(text: str) -> None:
    with pytest.raises(CanonicalDecodeError):
        decode(text)


def test_decode_accepts_boundary_numbers() -> None:
    assert decode("9007199254740991") == MAX_SAFE_INTEGER
    assert decode("-9007199254740991") == -MAX_SAFE_INTEGER
    assert decode("1.7976931348623157e308") == 1.7976931348623157e308
    assert decode("5e-324") == 5e-324
    assert decode("1e-400") == 0.0  # underflow is a finite double
    assert decode('["12345678901234567890"]') == ["12345678901234567890"]


@pytest.mark.parametrize(
    "value", [2.0**53, -(2.0**53), 2.0**60, 4.124047891529946e16, 295147905179352830000.0]
)
def test_decode_large_integral_doubles(value: float) -> None:
    # The encoder writes these as integer literals; decode must give the
    # double back (not refuse it, not return a different int).
    text = canonical_json(value)
    assert "." not in text and "e" not in text
    out = decode(text)
    assert type(out) is float and out == value
    assert canonical_json(decode("[" + text + "]")) == "[" + text + "]"


@pytest.mark.parametrize(
    "text",
    ["", "{", "[1,]", "{} {}", "'a'", '{"a" 1}', "\ufeff{}", '"\x01"', "tru"],
)
def test_decode_rejects_invalid_json(text: str) -> None:
    with pytest.raises(CanonicalDecodeError):
        decode(text)


def test_decode_rejects_invalid_utf8() -> None:
    with pytest.raises(CanonicalDecodeError, match="UTF-8"):
        decode(b'"\xff"')
    with pytest.raises(CanonicalDecodeError):
        decode(b"\xef\xbb\xbf{}")  # BOM


def test_decode_rejects_non_text() -> None:
    with pytest.raises(TypeError):
        decode(123)  # type: ignore[arg-type]


@settings(max_examples=50)
@given(json_values)
def test_decode_round_trips_canonical_bytes(value: object) -> None:
    data = canonical_bytes(value)
    assert canonical_bytes(decode(data)) == data


# -- json_equal: the encoding-free fast path used by oracles -----------------

from model.canonical import json_equal  # noqa: E402


@given(json_values, json_values)
def test_json_equal_agrees_with_canonical_equal(a, b):
    assert json_equal(a, b) == canonical_equal(a, b)


@given(json_values)
def test_json_equal_is_reflexive_and_order_independent(v):
    assert json_equal(v, v)
    if isinstance(v, dict):
        assert json_equal(v, dict(reversed(list(v.items()))))


def test_json_equal_distinguishes_bool_from_int_but_not_int_from_float():
    assert not json_equal(True, 1)
    assert not json_equal({"a": [1]}, {"a": [True]})
    assert json_equal({"a": 1}, {"a": 1.0})
    assert json_equal([1, 2], (1, 2))
    assert not json_equal(None, 0)
    assert not json_equal({"a": 1}, {"a": 1, "b": 2})
    assert json_equal("\ud83d\ude00", "\U0001F600") == canonical_equal("\ud83d\ude00", "\U0001F600")


# The peer implementation's digest vectors (its published test vectors, and
# values derived with its algorithm): digest = sha256 of the canonical JSON.
PEER_VECTORS = [
    ({"z": "\ud800", "value": "😀é"}, '{"value":"😀é","z":"\\ud800"}',
     "a2ae949a2f22f7fc31138231e3db19f57f017e0d8a09f7b2b049398f9346f57c"),
    ([[{"z": "last", "a": [False, None, 2.5]}], [], {"nested": [[1], {"b": 2, "a": 3}]}],
     '[[{"a":[false,null,2.5],"z":"last"}],[],{"nested":[[1],{"a":3,"b":2}]}]',
     "8f7312be37bd42bc167b496ac42e8e8289a845c133097cf7ab5c8e5f7e38f5ab"),
    ({}, "{}", "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"),
    ({"city": "Lisbon"}, '{"city":"Lisbon"}', "0ee04e560ed3acf087b2285f8dc173d1828f479e2fceb2fa1fd10abf65e3ff1e"),
    ({"\uff01": 1, "\U0001F600": 2}, '{"😀":2,"！":1}',
     "c97d01429c864fb3c08b02523a167c69017bb6860885dfc219e23f8ebb28d9e9"),
    ({"n": 1.0}, '{"n":1}', "2bfd14f43d17fc7cea24e0917a8879b4b2f880b8baeec1b9d90fbaad655e71bd"),
    ({"s": "é"}, '{"s":"é"}', "86028b41ba792eaf82aa26a45b218f6734f7f1096a86f1746c8296e088a0ccb4"),
    # 123456789012345680000 as a float: an integer beyond 2**53 - 1 is refused (I-JSON).
    ({"a": 1e21, "b": 1e-7, "c": -0.0, "d": 0.1, "e": 123456789012345680000.0},
     '{"a":1e+21,"b":1e-7,"c":0,"d":0.1,"e":123456789012345680000}',
     "67c32255d560645a0806bac4efc1c4b3865ff3d9aa0842d45dfc69807fe88e87"),
]


@pytest.mark.parametrize("value, text, expected", PEER_VECTORS)
def test_peer_digest_vectors(value, text, expected) -> None:
    from model.canonical import canonical_json, digest
    assert canonical_json(value) == text
    assert digest(value) == expected


# --- canonical-JSON bounds (the peer's CanonicalJsonBoundsError) ------------------------

from model.canonical import CanonicalJsonBounds, CanonicalJsonBoundsError, check_bounds  # noqa: E402
from scenarios.reference.jcs import bounds_kind  # noqa: E402


@pytest.mark.parametrize("value, bounds, kind, bound", [
    ([[[1]]], CanonicalJsonBounds(depth=2), "traversal", "depth"),
    ({"a": {"b": {}}}, CanonicalJsonBounds(depth=2), "traversal", "depth"),
    ([1, 2, 3], CanonicalJsonBounds(nodes=3), "traversal", "nodes"),
    ({"a": [1, 2]}, CanonicalJsonBounds(collection_length=1), "collection", "collection_length"),
    (["abc"], CanonicalJsonBounds(text_units=2), "text", "text_units"),
    ({"\U0001F600": 1}, CanonicalJsonBounds(text_units=1), "text", "text_units"),  # two UTF-16 units
])
def test_canonical_json_over_a_bound_names_it(value, bounds, kind, bound):
    with pytest.raises(CanonicalJsonBoundsError) as refused:
        canonical_json(value, bounds)
    assert (refused.value.kind, refused.value.bound) == (kind, bound)
    assert kind in str(refused.value)
    assert isinstance(refused.value, CanonicalEncodingError)
    assert bounds_kind(value, bounds.depth, bounds.nodes, bounds.collection_length, bounds.text_units) == kind


@pytest.mark.parametrize("value, bounds", [
    ([[1]], CanonicalJsonBounds(depth=2)),
    (1, CanonicalJsonBounds(depth=0, nodes=1)),
    ([1, 2], CanonicalJsonBounds(nodes=3, collection_length=2)),
    ("\U0001F600", CanonicalJsonBounds(text_units=2)),
])
def test_canonical_json_at_a_bound_encodes(value, bounds):
    assert canonical_json(value, bounds) == canonical_json(value)


def test_bounds_stop_a_cyclic_value():
    cyclic: list = []
    cyclic.append(cyclic)
    with pytest.raises(CanonicalJsonBoundsError, match="traversal"):
        check_bounds(cyclic, CanonicalJsonBounds(depth=10))


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=20)
_limit = st.none() | st.integers(0, 6)


@settings(max_examples=300, deadline=None)
@given(_json_values, _limit, _limit, _limit, _limit)
def test_bounds_agree_with_the_reference_jcs(value, depth, nodes, collection, text):
    """The model's bounds and the reference JCS's, written apart, refuse the
    same values with the same kind."""
    try:
        check_bounds(value, CanonicalJsonBounds(depth, nodes, collection, text))
        kind = None
    except CanonicalJsonBoundsError as refused:
        kind = refused.kind
    assert kind == bounds_kind(value, depth, nodes, collection, text)



def _walked_bound(value, depth, nodes):
    """The first of depth or nodes an element-by-element walk (the stack
    order ``check_bounds`` walks in) goes over, or None."""
    count, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        count += 1
        if count > nodes:
            return "nodes"
        if isinstance(item, (dict, list, tuple)):
            if level > depth:
                return "depth"
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return None


def _node_count(value):
    if isinstance(value, dict):
        return 1 + sum(map(_node_count, value.values()))
    if isinstance(value, (list, tuple)):
        return 1 + sum(map(_node_count, value))
    return 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(-5, 5), st.none(), st.booleans(), st.floats(allow_nan=False),
                          st.lists(st.integers(), max_size=3), st.text(max_size=3)), min_size=60, max_size=200),
       st.booleans(), st.integers(1, 4), st.integers(-3, 3))
def test_long_scalar_arrays_are_bounded_as_by_the_element_walk(items, scalars_only, depth, slack):
    """An array of scalars long enough to be counted at once gives the same
    first error (or none) as the walk of each element, in the model and in
    the reference encoder's own bounds check."""
    from model.canonical import CanonicalJsonBounds, CanonicalJsonBoundsError, check_bounds
    from scenarios.reference.jcs import bounds_kind

    if scalars_only:
        items = [item for item in items if not isinstance(item, (list, str))] + [0] * 70
    for value in (items, [items], {"a": items, "b": [0] * 70}, [[items, [[1]]]]):
        size = _node_count(value)
        nodes = max(1, size + slack)  # at, just under and just over the bound
        expected = _walked_bound(value, depth, nodes)
        try:
            check_bounds(value, CanonicalJsonBounds(depth=depth, nodes=nodes))
            bound = None
        except CanonicalJsonBoundsError as error:
            bound = error.bound
        assert bound == expected
        assert bounds_kind(value, depth=depth, nodes=nodes) == (None if expected is None else "traversal")


def test_the_reference_writes_a_long_integer_array_as_each_integer_and_refuses_one_out_of_range():
    from scenarios.reference.jcs import JcsError, canonical

    items = list(range(-40, 60))
    assert canonical(items) == "[" + ",".join(canonical(i) for i in items) + "]"
    assert canonical([True] + items) == "[true," + canonical(items)[1:]  # bool is not an int here
    with pytest.raises(JcsError, match="exact range"):
        canonical(items + [2 ** 53])


def test_the_model_writes_a_long_integer_array_as_each_integer_and_refuses_one_out_of_range():
    from model.canonical import CanonicalEncodingError, canonical_json

    items = list(range(-40, 60))
    assert canonical_json(items) == "[" + ",".join(canonical_json(i) for i in items) + "]"
    assert canonical_json(items + [True]) == canonical_json(items)[:-1] + ",true]"
    with pytest.raises(CanonicalEncodingError, match="outside"):
        canonical_json(items + [-(2 ** 53)])
