"""``model.compact``: what the in-memory stores hold comes back exactly."""
from __future__ import annotations

from hypothesis import given, strategies as st

from model.compact import digest_bytes, digest_hex, pack, unpack


@given(st.one_of(st.text(st.characters(codec=None)), st.binary()))
def test_a_packed_text_or_bytes_comes_back_equal_and_of_its_type(value):
    held = pack(value)
    assert type(held) is bytes
    back = unpack(held)
    assert back == value and type(back) is type(value)


def test_a_hex_digest_is_held_as_32_bytes_and_anything_else_as_given():
    digest = "ab" * 32
    assert digest_bytes(digest) == bytes.fromhex(digest) and digest_hex(digest_bytes(digest)) == digest
    for other in ("AB" * 32, "zz" * 32, "ab" * 31, "stl-" + "0" * 60):
        assert digest_bytes(other) == other and digest_hex(digest_bytes(other)) == other
