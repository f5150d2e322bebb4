"""Secrets, sealed fields and key rotation (model/secrets/), without a simulation.

The simulated cipher round-trips and a flipped byte is ``EnvelopeDamaged``;
a rotation makes new seals use the new key-encryption key while old rows
still open; a rotation killed after a page resumes, re-wraps every row and
retires the old key; a retired or unknown key fails typed; the keyring's
memory and SQLite adapters answer one script of calls alike.
"""
from __future__ import annotations

import pytest

from model.canonical import canonical_json
from model.secrets.cipher import open_bytes, seal_bytes, unwrap_key, wrap_key
from model.secrets.envelope import SENSITIVE_FIELDS, Sealer, keyed_digest, sensitive_fields
from model.secrets.errors import (
    EnvelopeDamaged,
    KeyRetired,
    RewrapConflict,
    RotationRefused,
    SecretNotFound,
    UnknownKey,
)
from model.secrets.keyring import DataKey, InMemoryKeyringStore, SqliteKeyringStore
from model.secrets.keys import SimulatedKeyService
from model.secrets.refs import is_secret_ref, refs_in, resolve_refs, secret_ref
from model.secrets.rotation import ROTATION_AFTER_PAGE, ROTATION_BEFORE_RETIRE, rotate_keys
from model.secrets.store import InMemorySecretStore
from model.sqlite_db import open_database


def drive(coro):
    """Run model code whose ports never suspend."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("a call suspended")


def flip(hex_text: str, at: int = 0) -> str:
    raw = bytearray(bytes.fromhex(hex_text))
    raw[at] ^= 0x01
    return raw.hex()


def keyring(kind: str, tmp_path):
    if kind == "memory":
        return InMemoryKeyringStore()
    return SqliteKeyringStore(open_database(str(tmp_path / "run.db")))


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


# -- the cipher -----------------------------------------------------------------

def test_the_cipher_round_trips_and_a_flipped_byte_is_damaged():
    key, nonce, aad = b"k" * 32, b"n" * 16, b"conversation\nbatch"
    plaintext = b"x" * 70  # three keystream blocks
    ciphertext, tag = seal_bytes(key, nonce, aad, plaintext)
    assert ciphertext != plaintext and len(ciphertext) == len(plaintext) and len(tag) == 16
    assert open_bytes(key, nonce, aad, ciphertext, tag) == plaintext
    damaged = bytearray(ciphertext)
    damaged[40] ^= 0x80
    with pytest.raises(EnvelopeDamaged):
        open_bytes(key, nonce, aad, bytes(damaged), tag)
    with pytest.raises(EnvelopeDamaged):
        open_bytes(key, nonce, aad + b"!", ciphertext, tag)
    with pytest.raises(EnvelopeDamaged):
        open_bytes(b"K" * 32, nonce, aad, ciphertext, tag)
    wrapped = wrap_key(key, "kek-1", b"d" * 32)
    assert unwrap_key(key, "kek-1", wrapped) == b"d" * 32
    with pytest.raises(EnvelopeDamaged):
        unwrap_key(key, "kek-1", flip(wrapped, 20))
    with pytest.raises(EnvelopeDamaged):
        unwrap_key(key, "kek-2", wrapped)


def test_a_sealed_field_opens_and_a_flipped_byte_or_a_moved_envelope_is_damaged():
    keys, ring = SimulatedKeyService(b"root", Clock()), InMemoryKeyringStore()
    sealer = Sealer(keys, ring)
    payload = {"phase": "settled", "toolCallId": "t1", "output": {"answer": "s3cr3t"}}
    sealed = drive(sealer.seal_payload("c1", "b1", 2, "tool-call", payload))
    assert sealed["toolCallId"] == "t1" and "s3cr3t" not in canonical_json(sealed)
    assert sealed["output"]["dataKeyId"] == "dek/c1/kek-1" and sealed["output"]["$sealed"] == "sim-hmac-sha256-v1"
    assert drive(Sealer(keys, ring).open_payload("c1", "b1", 2, "tool-call", sealed)) == payload
    damaged = {**sealed, "output": {**sealed["output"], "ciphertext": flip(sealed["output"]["ciphertext"])}}
    with pytest.raises(EnvelopeDamaged):
        drive(Sealer(keys, ring).open_payload("c1", "b1", 2, "tool-call", damaged))
    with pytest.raises(EnvelopeDamaged):  # another record's place
        drive(Sealer(keys, ring).open_payload("c1", "b1", 3, "tool-call", sealed))
    with pytest.raises(EnvelopeDamaged, match="not sealed"):
        drive(sealer.open_payload("c1", "b1", 2, "tool-call", payload))
    plain = {"phase": "started", "output": "x"}
    assert drive(sealer.seal_payload("c1", "b1", 0, "tool-call", plain)) is plain


def test_the_schema_names_the_sensitive_fields():
    assert sensitive_fields("tool-call", {"phase": "prepared"}) == ("args",)
    assert sensitive_fields("model-delta", {"text": "x"}) == ("text",)
    assert sensitive_fields("tool-call", {"phase": "unknown"}) == ()
    assert sensitive_fields("step-output", {}) == ()
    assert ("tool-call", "settled") in SENSITIVE_FIELDS


def test_refs_resolve_only_where_asked_and_keyed_digests_hide_the_preimage():
    store = InMemorySecretStore({"search-api-key": ["v1"], "email-pin": ["1234"]})
    assert store.put("search-api-key", "v2") == 2 and drive(store.version("search-api-key")) == 2
    args = {"q": "x", "credential": secret_ref("search-api-key"), "more": [secret_ref("email-pin")]}
    assert is_secret_ref(args["credential"]) and not is_secret_ref({"$secret": "a", "b": 1})
    assert refs_in(args) == ("email-pin", "search-api-key")
    resolved = drive(resolve_refs(args, store))
    assert resolved == {"q": "x", "credential": "v2", "more": ["1234"]}
    assert args["credential"] == {"$secret": "search-api-key"}
    with pytest.raises(SecretNotFound):
        drive(store.resolve("nope"))
    one, other = keyed_digest(b"d1", resolved), keyed_digest(b"d2", resolved)
    assert one.startswith("hmac-sha256:") and one != other and "1234" not in one


# -- keys and rotation ------------------------------------------------------------

def test_rotation_makes_new_seals_use_the_new_key_while_old_rows_still_open():
    clock = Clock()
    keys, ring = SimulatedKeyService(b"root", clock), InMemoryKeyringStore()
    sealer = Sealer(keys, ring)
    before = drive(sealer.seal_payload("c1", "b1", 0, "model-delta", {"text": "old"}))
    assert drive(keys.rotate("kek-2")) == "kek-2" and drive(keys.rotate("kek-2")) == "kek-2"
    after = drive(sealer.seal_payload("c1", "b2", 0, "model-delta", {"text": "new"}))
    assert before["text"]["dataKeyId"] == "dek/c1/kek-1" and after["text"]["dataKeyId"] == "dek/c1/kek-2"
    assert drive(ring.get("dek/c1/kek-2")).key_id == "kek-2"
    fresh = Sealer(keys, ring)
    assert drive(fresh.open_payload("c1", "b1", 0, "model-delta", before)) == {"text": "old"}
    assert drive(fresh.open_payload("c1", "b2", 0, "model-delta", after)) == {"text": "new"}


def test_unwrap_under_a_retired_or_unknown_key_fails_typed():
    clock = Clock()
    keys = SimulatedKeyService(b"root", clock)
    plaintext, wrapped = drive(keys.generate_data_key("kek-1"))
    assert drive(keys.unwrap("kek-1", wrapped)) == plaintext and len(plaintext) == 32
    with pytest.raises(UnknownKey):
        drive(keys.unwrap("kek-9", wrapped))
    with pytest.raises(RotationRefused):
        drive(keys.retire("kek-1"))
    drive(keys.rotate("kek-2"))
    clock.ms = 1234
    drive(keys.retire("kek-1"))
    drive(keys.retire("kek-1"))
    assert keys.retired_at_ms == {"kek-1": 1234} and drive(keys.state("kek-1")) == "retired"
    for call in (keys.unwrap("kek-1", wrapped), keys.wrap("kek-1", plaintext), keys.generate_data_key("kek-1")):
        with pytest.raises(KeyRetired):
            drive(call)
    with pytest.raises(RotationRefused):
        drive(keys.rotate("kek-1"))
    with pytest.raises(UnknownKey):
        drive(keys.state("kek-7"))
    assert KeyRetired("kek-1").retryable is False and "\n" not in str(RewrapConflict("d", "a", "b"))


class Killed(Exception):
    pass


class KillAt:
    def __init__(self, name: str, times: int = 1) -> None:
        self.name, self.times, self.seen = name, times, []

    def hit(self, name: str) -> None:
        self.seen.append(name)
        if name == self.name and self.times > 0:
            self.times -= 1
            raise Killed(name)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("kill_at", [ROTATION_AFTER_PAGE, ROTATION_BEFORE_RETIRE])
def test_a_rotation_killed_after_a_page_resumes_rewraps_every_row_and_retires_the_old_key(kind, kill_at, tmp_path):
    clock = Clock()
    keys, ring = SimulatedKeyService(b"root", clock), keyring(kind, tmp_path)
    sealer = Sealer(keys, ring)
    sealed = {f"c{n:02d}": drive(sealer.seal_payload(f"c{n:02d}", "b", 0, "model-delta", {"text": f"t{n}"}))
              for n in range(7)}
    points = KillAt(kill_at)
    with pytest.raises(Killed):
        drive(rotate_keys(keys, ring, "rotation-1", "kek-2", page=3, failpoints=points))
    assert drive(keys.current()) == "kek-2" and drive(keys.state("kek-1")) == "active"
    clock.ms = 99
    record = drive(rotate_keys(keys, ring, "rotation-1", "kek-2", page=3, failpoints=points))
    assert record["done"] is True and record["fromKeyId"] == "kek-1" and record["toKeyId"] == "kek-2"
    assert drive(keys.state("kek-1")) == "retired" and keys.retired_at_ms == {"kek-1": 99}
    rows = drive(ring.scan("", 100))
    assert len(rows) == 7 and {row.key_id for row in rows} == {"kek-2"}
    fresh = Sealer(keys, ring)
    for conversation, payload in sealed.items():
        assert drive(fresh.open_payload(conversation, "b", 0, "model-delta", payload))["text"].startswith("t")
    again = drive(rotate_keys(keys, ring, "rotation-1", "kek-2", page=3))
    assert again == record


class DiesAtRewrap:
    """A keyring whose process dies at its ``n``-th re-wrap (before the store sees it)."""

    def __init__(self, ring, n: int) -> None:
        self._ring, self._n = ring, n

    def __getattr__(self, name):
        return getattr(self._ring, name)

    async def rewrap(self, *args):
        self._n -= 1
        if self._n == 0:
            raise Killed("rewrap")
        return await self._ring.rewrap(*args)


@pytest.mark.parametrize("dies_at", [1, 2, 4, 5, 7])
def test_a_rotation_killed_inside_a_page_leaves_no_row_behind(dies_at):
    keys, ring = SimulatedKeyService(b"root", Clock()), InMemoryKeyringStore()
    for n in range(7):
        drive(Sealer(keys, ring).seal_payload(f"c{n}", "b", 0, "model-delta", {"text": "t"}))
    with pytest.raises(Killed):
        drive(rotate_keys(keys, DiesAtRewrap(ring, dies_at), "rotation-1", "kek-2", page=3))
    drive(rotate_keys(keys, ring, "rotation-1", "kek-2", page=3))
    assert [row.key_id for row in drive(ring.scan("", 100))] == ["kek-2"] * 7
    assert drive(keys.state("kek-1")) == "retired"


class RotatesOnPut:
    """A keyring whose ``put_if_absent`` lands while a rotation makes ``kek-2`` current."""

    def __init__(self, ring, keys) -> None:
        self._ring, self._keys = ring, keys

    def __getattr__(self, name):
        return getattr(self._ring, name)

    async def put_if_absent(self, row):
        stored = await self._ring.put_if_absent(row)
        if await self._keys.current() == "kek-1":
            await self._keys.rotate("kek-2")
        return stored


def test_a_data_key_stored_while_a_rotation_began_is_left_unused():
    """A rotation that began between reading the current key and storing the
    new data key's row may have scanned past the row: it is left unused and
    the new key's data key seals the record instead."""
    keys, ring = SimulatedKeyService(b"root", Clock()), InMemoryKeyringStore()
    sealed = drive(Sealer(keys, RotatesOnPut(ring, keys)).seal_payload("c1", "b", 0, "model-delta", {"text": "t"}))
    assert sealed["text"]["dataKeyId"] == "dek/c1/kek-2"
    assert [row.dek_id for row in drive(ring.scan("", 10))] == ["dek/c1/kek-1", "dek/c1/kek-2"]
    assert drive(Sealer(keys, ring).open_payload("c1", "b", 0, "model-delta", sealed)) == {"text": "t"}


def test_a_row_left_under_a_retired_key_fails_typed_on_open():
    keys, ring = SimulatedKeyService(b"root", Clock()), InMemoryKeyringStore()
    sealed = drive(Sealer(keys, ring).seal_payload("c1", "b", 0, "model-delta", {"text": "t"}))
    drive(keys.rotate("kek-2"))
    drive(keys.retire("kek-1"))  # nothing re-wrapped
    with pytest.raises(KeyRetired):
        drive(Sealer(keys, ring).open_payload("c1", "b", 0, "model-delta", sealed))
    drive(ring.rewrap("dek/c1/kek-1", "kek-1", "kek-9", "00" * 40))
    with pytest.raises(UnknownKey):
        drive(Sealer(keys, ring).open_payload("c1", "b", 0, "model-delta", sealed))



class _RotatesAfterGet:
    """The keyring, where a whole rotation (re-wrap, retire) runs right after
    the first read of a row: the reader holds the row under a retired key."""

    def __init__(self, ring, keys) -> None:
        self._ring, self._keys, self._done = ring, keys, False

    def __getattr__(self, method):
        return getattr(self._ring, method)

    async def get(self, dek_id):
        row = await self._ring.get(dek_id)
        if not self._done:
            self._done = True
            await rotate_keys(self._keys, self._ring, "rotation-1", "kek-2")
        return row


def test_a_rotation_between_reading_a_data_key_and_unwrapping_it_is_read_again():
    """A reader (a transcript, a recovery) reads a row, a rotation re-wraps
    it and retires the old key, then the reader unwraps: the old key is
    retired, so the row is read again and opened under the new key; only a
    row still under a retired key fails."""
    keys, ring = SimulatedKeyService(b"root", Clock()), InMemoryKeyringStore()
    sealed = drive(Sealer(keys, ring).seal_payload("c1", "b", 0, "model-delta", {"text": "t"}))
    reader = Sealer(keys, _RotatesAfterGet(ring, keys))
    assert drive(reader.open_payload("c1", "b", 0, "model-delta", sealed)) == {"text": "t"}
    assert drive(keys.state("kek-1")) == "retired" and drive(ring.get("dek/c1/kek-1")).key_id == "kek-2"


# -- the keyring's two adapters -----------------------------------------------------

def script(ring) -> list:
    """One script of calls; every answer (or typed error) in order."""
    answers = []

    def call(coro):
        try:
            answers.append(drive(coro))
        except Exception as error:  # noqa: BLE001 - the typed error is the answer
            answers.append((type(error).__name__, str(error)))

    a = DataKey("dek/c1/kek-1", "kek-1", "aa")
    call(ring.put_if_absent(a))
    call(ring.put_if_absent(DataKey("dek/c1/kek-1", "kek-1", "bb")))  # the racer loses: the first row wins
    call(ring.get("dek/c1/kek-1"))
    call(ring.get("dek/none"))
    for n in range(2, 6):
        call(ring.put_if_absent(DataKey(f"dek/c{n}/kek-1", "kek-1", f"w{n}")))
    call(ring.rewrap("dek/c1/kek-1", "kek-1", "kek-2", "cc"))
    call(ring.rewrap("dek/c1/kek-1", "kek-1", "kek-2", "dd"))  # a repeat: as it is
    call(ring.rewrap("dek/c1/kek-1", "kek-3", "kek-4", "ee"))  # under another key: conflict
    call(ring.rewrap("dek/none", "kek-1", "kek-2", "ff"))
    call(ring.scan("", 2))
    call(ring.scan("dek/c2/kek-1", 2))
    call(ring.scan("dek/c4/kek-1", 2))
    call(ring.scan("dek/c5/kek-1", 2))
    call(ring.scan("", 0))
    call(ring.get_rotation("rotation-1"))
    call(ring.save_rotation({"rotationId": "rotation-1", "fromKeyId": "kek-1", "toKeyId": "kek-2", "cursor": "",
                             "done": False}))
    call(ring.save_rotation({"rotationId": "rotation-1", "fromKeyId": "kek-1", "toKeyId": "kek-2",
                             "cursor": "dek/c2/kek-1", "done": True}))
    call(ring.get_rotation("rotation-1"))
    call(ring.save_rotation({"rotationId": "rotation-2"}))
    answers.append(ring.rows())
    return answers


def test_the_keyring_adapters_answer_one_script_alike(tmp_path):
    memory, sqlite = script(InMemoryKeyringStore()), script(keyring("sqlite", tmp_path))
    assert memory == sqlite
    assert memory[1] == DataKey("dek/c1/kek-1", "kek-1", "aa")
    assert memory[8] == DataKey("dek/c1/kek-1", "kek-2", "cc") and memory[9] == memory[8]
    assert memory[10][0] == "RewrapConflict" and memory[11][0] == "RewrapConflict"
    assert [row.dek_id for row in memory[12]] == ["dek/c1/kek-1", "dek/c2/kek-1"]
    assert [row.dek_id for row in memory[13]] == ["dek/c3/kek-1", "dek/c4/kek-1"]
    assert [row.dek_id for row in memory[14]] == ["dek/c5/kek-1"] and memory[15] == ()
    assert memory[16][0] == "TypeError" and memory[17] is None
    assert memory[20]["done"] is True and memory[20]["cursor"] == "dek/c2/kek-1"


def test_the_sqlite_keyring_keeps_its_rows_across_a_reopen_with_their_schema_version(tmp_path):
    path = str(tmp_path / "run.db")
    ring = SqliteKeyringStore(open_database(path))
    drive(ring.put_if_absent(DataKey("dek/c1/kek-1", "kek-1", "aa")))
    reopened = SqliteKeyringStore(open_database(path))
    assert drive(reopened.get("dek/c1/kek-1")) == DataKey("dek/c1/kek-1", "kek-1", "aa")
    conn = open_database(path)
    assert conn.execute("SELECT schema_version FROM keyring_data_keys").fetchall() == [(1,)]
    conn.execute("UPDATE keyring_data_keys SET schema_version = 2")
    with pytest.raises(EnvelopeDamaged, match="schema version"):
        drive(reopened.get("dek/c1/kek-1"))
