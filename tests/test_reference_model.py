"""The reference-model oracle: its own RFC 8785 encoder, the port models, and
the checker in whole runs.

- ``scenarios.reference.jcs`` against vectors written out from RFC 8785 and
  against ``model.canonical`` on random values (they must agree);
- each reference model agrees with the real in-memory store call by call,
  and rejects a wrong answer with a message naming the call;
- ``sentinel-year`` and ``ledger-storm`` pass with the checker in the stack,
  and fail on ``reference-model`` when a store answers wrongly.
"""
from __future__ import annotations

import hashlib
import struct

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import model.canonical as model_canonical
from faults.ports import PortCall
from model.conversation.checkpoints import Checkpoint, InMemoryCheckpointStore
from model.conversation.content_store import InMemoryContentStore
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.records import (
    AppendResult,
    ConversationStoreError,
    FencedAppendRequest,
    RecordEnvelope,
)
from model.durable_state.memory_store import InMemoryDurableStateStore
from model.durable_state.store import DurableStateRecord, DurableStateWrite
from scenarios import registry
from scenarios.invariants.reference_model import ReferenceModel
from scenarios.reference import jcs, references
from scenarios.reference.checkpoints import ReferenceCheckpoints
from scenarios.reference.content import ReferenceContent
from scenarios.reference.durable_state import ReferenceDurableState
from scenarios.reference.log import ReferenceLog, batch_digest, chain_step
from scenarios.storage import run_sync
from sim.clock import parse_duration_ms
from sim.invariants import InvariantSet
from sim.runner import run
from sim.scenario import ScenarioOptions
from sim.trace import Trace

ZERO = "0" * 64


# --- the encoder ----------------------------------------------------------------

# RFC 8785 Appendix B: IEEE-754 bit patterns and their canonical spelling.
RFC_NUMBERS = [
    ("0000000000000000", "0"), ("8000000000000000", "0"), ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"), ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"), ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"), ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"), ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"), ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"), ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"), ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"), ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"), ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"), ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize("bits, text", RFC_NUMBERS)
def test_jcs_numbers_are_the_rfc_appendix_b_spellings(bits, text):
    assert jcs.canonical(struct.unpack(">d", bytes.fromhex(bits))[0]) == text


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_jcs_refuses_nan_and_infinity(bits):
    with pytest.raises(jcs.JcsError):
        jcs.canonical([struct.unpack(">d", bytes.fromhex(bits))[0]])


def test_jcs_rfc_section_3_2_2_example():
    value = {"numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
             "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/", "literals": [None, True, False]}
    assert jcs.canonical(value) == ('{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,'
                                    '1e-27],"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}')


def test_jcs_sorts_names_by_utf16_code_units_rfc_section_3_2_3():
    value = {"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
             "1": "One", "\U0001f600": "Emoji: Grinning Face", "\u0080": "Control",
             "\u00f6": "Latin Small Letter O With Diaeresis"}
    assert jcs.canonical(value) == (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",'
        '"\u20ac":"Euro Sign","\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}')


def test_jcs_strings_escape_only_what_the_rfc_says():
    assert jcs.canonical("\x00\x1f\x7f\b\t\n\f\r") == '"\\u0000\\u001f\x7f\\b\\t\\n\\f\\r"'
    assert jcs.canonical("é\u2028") == '"é\u2028"'  # non-ASCII raw
    assert jcs.canonical("a\ud800b") == '"a\\ud800b"'  # a lone surrogate, escaped lowercase
    assert jcs.canonical("\ud83d\ude00") == '"\U0001f600"'  # a pair held as two code points is the character


@pytest.mark.parametrize("value", [2**53, -(2**53), {1: "x"}, {"a": {1, 2}}, b"raw", object(),
                                   {"\U0001f600": 1, "\ud83d\ude00": 2}])
def test_jcs_refuses_what_has_no_canonical_form(value):
    with pytest.raises(jcs.JcsError):
        jcs.canonical(value)


def test_jcs_digest_is_lowercase_hex_sha256_of_utf8():
    assert jcs.digest({"b": "é", "a": 1}) == hashlib.sha256('{"a":1,"b":"é"}'.encode()).hexdigest()
    assert jcs.ZERO_DIGEST == model_canonical.ZERO_DIGEST


def test_read_back_is_what_a_reader_of_canonical_text_gets():
    assert type(jcs.read_back(jcs.canonical(5.0))) is int  # 5.0 is written 5
    assert jcs.read_back(jcs.canonical(2.0**60)) == 2.0**60 and type(jcs.read_back(jcs.canonical(2.0**60))) is float


def test_spelled_out_log_digests_are_the_structures_digests():
    envelopes = [{"recordId": "r1", "payload": {"x": [1, 2.5, "é"]}}, {"recordId": "r2", "payload": None}]
    texts = [jcs.canonical(e) for e in envelopes]
    request = FencedAppendRequest("c\u00e9", "b1", "p1", 3, 0, ZERO, ())
    one = "1" * 64
    assert chain_step(ZERO, one, 7) == jcs.digest({"batchDigest": one, "firstSeq": 7, "previousTailDigest": ZERO})
    assert batch_digest(request, texts) == jcs.digest(
        {"batchId": "b1", "conversationId": "c\u00e9", "epoch": 3, "producerId": "p1", "records": envelopes})


_TEXT = st.text(st.characters(codec=None), max_size=12)  # surrogates included
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(_TEXT, children, max_size=5),
    max_leaves=25)


@settings(max_examples=200, deadline=None)
@given(_JSON)
def test_jcs_agrees_with_model_canonical(value):
    try:
        theirs = model_canonical.canonical_json(value)
    except model_canonical.CanonicalEncodingError:
        theirs = None
    try:
        ours = jcs.canonical(value)
    except jcs.JcsError:
        ours = None
    assert ours == theirs, value
    if ours is not None:
        assert jcs.digest(value) == model_canonical.digest(value)


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**60), 2**60))
def test_jcs_numbers_agree_with_model_canonical(number):
    try:
        theirs = model_canonical.canonical_json(number)
    except model_canonical.CanonicalEncodingError:
        theirs = None
    try:
        ours = jcs.canonical(number)
    except jcs.JcsError:
        ours = None
    assert ours == theirs


# --- the port models, call by call ----------------------------------------------------


class Driver:
    """Calls a real in-memory store and shows each call to a reference, as
    the fault layer shows it to the oracle."""

    def __init__(self, port: str, store, reference) -> None:
        self.port, self.store, self.reference = port, store, reference
        self.time_ms = 0

    def call(self, method: str, *args, **kwargs) -> PortCall:
        self.time_ms += 1
        try:
            result, error = run_sync(getattr(self.store, method)(*args, **kwargs)), None
        except Exception as raised:  # noqa: BLE001 - shown as the store's answer
            result, error = None, raised
        return PortCall(self.time_ms, "node-1", self.port, method, args, kwargs, result, error)

    def agrees(self, method: str, *args, **kwargs):
        """Call, show it, require agreement; the store's answer."""
        seen = self.call(method, *args, **kwargs)
        message = self.reference.observe(seen)
        assert message is None, message
        return seen.result if seen.error is None else seen.error

    def wrong(self, method: str, *args, answer=None, error=None, **kwargs) -> str:
        """Call, but show the reference a wrong answer: its message."""
        seen = attrs.evolve(self.call(method, *args, **kwargs), result=answer, error=error)
        message = self.reference.observe(seen)
        assert message is not None, "the wrong answer was accepted"
        assert f"{self.port}.{method}(" in message and "node-1" in message
        return message


def ds_driver() -> Driver:
    return Driver("ds", InMemoryDurableStateStore(), ReferenceDurableState())


def test_durable_state_reference_agrees_with_the_store():
    d = ds_driver()
    assert d.agrees("load", "k") is None
    d.agrees("save", "k", DurableStateWrite(1, {"n": 1}), 0)
    d.agrees("save", "k", DurableStateWrite(2, {"n": 2.0, "l": [True, None]}), expected_revision=1)
    conflict = d.agrees("save", "k", DurableStateWrite(2, {"n": 3}), 1)
    assert (conflict.expected, conflict.actual) == (1, 2)
    d.agrees("save", "other", DurableStateWrite(1, "x"), 5)  # conflict on an absent key: actual 0
    assert d.agrees("load", "k").revision == 2
    d.agrees("clear", "k")
    d.agrees("clear", "k")
    d.agrees("save", "k", DurableStateWrite(1, []), 0)
    for bad in (("", DurableStateWrite(1, {}), 0), ("k", DurableStateWrite(0, {}), 1),
                ("k", DurableStateWrite(1, {"t": (1, 2)}), 1), ("k", DurableStateWrite(1, float("nan")), 1),
                ("k", {"payload": 1}, 1), ("k", DurableStateWrite(1, {}), True)):
        assert isinstance(d.agrees("save", *bad), (TypeError, ValueError))
    assert d.agrees("load", "k").payload == []


def test_durable_state_reference_rejects_wrong_answers():
    d = ds_driver()
    d.agrees("save", "k", DurableStateWrite(1, {"n": 1}), 0)
    d.agrees("save", "k", DurableStateWrite(1, {"n": 2}), 1)
    message = d.wrong("load", "k", answer=DurableStateRecord(1, 1, {"n": 1}))  # the previous revision
    assert "(1, 1," in message and "(1, 2," in message and "last calls on 'k'" in message
    d = ds_driver()
    d.agrees("save", "k", DurableStateWrite(1, {"n": 1}), 0)
    d.wrong("load", "k", answer=DurableStateRecord(1, 1, {"n": 1.0}))  # 1 and 1.0 are different JSON
    d.wrong("save", "k", DurableStateWrite(1, {}), 0, error=RuntimeError("boom"))
    write = DurableStateWrite(1, {"n": 2})
    d.wrong("save", "k", write, 1, answer=DurableStateRecord(1, 2, write.payload))  # hands back the caller's object
    d = ds_driver()
    d.agrees("save", "k", DurableStateWrite(1, {"n": 1}), 0)
    from model.durable_state.store import RevisionConflictError
    d.wrong("save", "k", DurableStateWrite(1, {}), 5, error=RevisionConflictError("k", 5, 2))  # actual is 1


def test_a_retryable_store_error_is_allowed_and_changes_nothing():
    reference = ReferenceDurableState()
    contention = ConversationStoreError("busy", cause=type("SqliteWriteContention", (Exception,), {})())
    assert contention.retryable
    refused = PortCall(1, "n", "ds", "save", ("k", DurableStateWrite(1, {}), 0), {}, None, contention)
    assert reference.observe(refused) is None
    absent = PortCall(2, "n", "ds", "load", ("k",), {}, None, None)
    assert reference.observe(absent) is None  # still absent


def envelope(record_id: str, producer: str = "p1", epoch: int = 1, payload: object = None) -> RecordEnvelope:
    return RecordEnvelope(record_id, "input", 1, 1_000, "dep", {"text": record_id} if payload is None else payload,
                          producer, epoch)


def request(cid, batch, tail_seq, tail_digest, ids, producer="p1", epoch=1, payload=None) -> FencedAppendRequest:
    return FencedAppendRequest(cid, batch, producer, epoch, tail_seq, tail_digest,
                               tuple(envelope(i, producer, epoch, payload) for i in ids))


def log_driver() -> Driver:
    return Driver("log", InMemoryConversationStore(), ReferenceLog())


def test_log_reference_agrees_with_the_store():
    d = log_driver()
    assert d.agrees("inspect_tail", "c1").__class__.__name__ == "NotMaterialized"
    d.agrees("materialize", "c1", "admission", 0)
    d.agrees("materialize", "c1", "p1", 1)
    d.agrees("materialize", "c1", "p1", 1)
    d.agrees("materialize", "c1", "p0", 0)  # FenceRejected
    d.agrees("materialize", "c1", "p9", 1)  # FenceRejected: same epoch, other producer
    first = d.agrees("append", request("c1", "b1", 0, ZERO, ["r1", "r2"], payload={"f": 5.0, "s": "\ud800"}))
    assert d.agrees("append", request("c1", "b1", 0, ZERO, ["r1", "r2"], payload={"f": 5.0, "s": "\ud800"})).replayed
    d.agrees("append", request("c1", "b1", 0, ZERO, ["zz"]))  # batch-digest conflict
    d.agrees("append", request("c1", "b2", 0, ZERO, ["r3"]))  # tail conflict
    d.agrees("append", request("c1", "b2", 2, first.tail_digest, ["r3", "r3"]))  # record-identity in the batch
    d.agrees("append", request("c1", "b2", 2, first.tail_digest, ["r1"]))  # record-identity across batches
    second = d.agrees("append", request("c1", "b2", 2, first.tail_digest, ["r3", "r4", "r5"]))
    d.agrees("materialize", "c1", "p2", 2)
    d.agrees("append", request("c1", "b3", 5, second.tail_digest, ["r6"]))  # fenced: epoch 1 < 2
    d.agrees("append", request("c1", "b3", 5, second.tail_digest, ["r6"], producer="p3", epoch=4))  # fenced: 4 > 2
    d.agrees("append", request("c1", "b1", 0, ZERO, ["r1", "r2"], payload={"f": 5.0, "s": "\ud800"}))  # fenced replay
    d.agrees("materialize", "c1", "p3", 4)
    third = d.agrees("append", request("c1", "b3", 5, second.tail_digest, ["r6"], producer="p3", epoch=4))
    d.agrees("append", request("c1", "b3", 0, ZERO, ["r6"], producer="p3", epoch=4))  # batch-digest: other tail
    d.agrees("append", request("c1", "b4", 0, ZERO, ["r6"], producer="p3", epoch=4))  # tail before record identity
    d.agrees("append", request("c1", "b5", 6, third.tail_digest, [f"o{i}" for i in range(257)],
                               producer="p3", epoch=4))  # BatchTooLarge
    d.agrees("append", request("c1", "b9", 0, ZERO, ["x"], epoch=0))  # ValueError: epoch 0
    d.agrees("append", request("nope", "b1", 0, ZERO, ["x"]))  # NotMaterialized
    assert d.agrees("inspect_tail", "c1").epoch == 4
    for after, limit in ((0, 1024), (1, 2), (5, 3), (6, 1), (9, 4)):
        d.agrees("read", "c1", after, limit)
    d.agrees("read", "c1", 0, 0)  # ReadLimitOutOfRange
    d.agrees("read", "c1", 0, 1025)  # ReadLimitOutOfRange
    d.agrees("read", "c1", after_seq=2, limit=2)
    for seq in (0, 1, 2, 3, 5, 6, 7, -1):
        d.agrees("digest_at", "c1", seq)
    assert d.agrees("digest_at", "c1", 6) == third.tail_digest
    for batch in ("b1", "b2", "b3", "b9"):
        d.agrees("lookup_batch", "c1", batch)
    d.agrees("lookup_batch", "nope", "b1")
    assert d.agrees("delete_conversation", "c1") is True
    assert d.agrees("delete_conversation", "c1") is False
    d.agrees("read", "c1", 0, 10)  # NotMaterialized
    d.agrees("materialize", "c1", "p1", 1)  # a new, empty log
    d.agrees("append", request("c1", "b1", 0, ZERO, ["r1"]))


def test_log_reference_rejects_wrong_answers():
    d = log_driver()
    d.agrees("materialize", "c1", "p1", 1)
    result = d.agrees("append", request("c1", "b1", 0, ZERO, ["r1", "r2", "r3"]))
    message = d.wrong("read", "c1", 0, 10, answer=run_sync(d.store.read("c1", 0, 10))[::2])  # skips seq 2
    assert "#2" in message and "append(" in message  # the recent append is in the history
    d.wrong("inspect_tail", "c1", answer=attrs.evolve(run_sync(d.store.inspect_tail("c1")), tail_digest=ZERO))
    d.wrong("append", request("c1", "b2", 3, result.tail_digest, ["r4"]),
            answer=AppendResult(4, 4, result.tail_digest, ZERO, False))  # the tail did not move on
    d.wrong("lookup_batch", "c1", "b1", answer=None)
    d.wrong("digest_at", "c1", 2, answer=ZERO)  # inside a batch: None
    # A store whose digest chain is not the contract's.
    d = log_driver()
    d.agrees("materialize", "c1", "p1", 1)
    seen = d.call("append", request("c1", "b1", 0, ZERO, ["r1"]))
    forged = attrs.evolve(seen, result=attrs.evolve(seen.result, tail_digest=hashlib.sha256(b"x").hexdigest()))
    assert "append(" in d.reference.observe(forged)


def test_a_damaged_read_is_not_compared():
    d = log_driver()
    d.agrees("materialize", "c1", "p1", 1)
    d.agrees("append", request("c1", "b1", 0, ZERO, ["r1", "r2"]))
    seen = d.call("read", "c1", 0, 10)
    assert d.reference.observe(attrs.evolve(seen, result=seen.result[:1], damaged=True)) is None


def test_checkpoint_reference_agrees_with_the_store_and_rejects_wrong_answers():
    log = ReferenceLog()
    store = InMemoryConversationStore()
    d_log = Driver("log", store, log)
    d = Driver("checkpoints", InMemoryCheckpointStore(store), ReferenceCheckpoints(log))

    def checkpoint(seq, digest, version=1, snapshot=None):
        return Checkpoint("c1", "s1", seq, digest, "e1", "d1", "m1", "t1", version, snapshot or {"at": seq, "f": 2.0}, 7)

    d.agrees("save", checkpoint(0, ZERO))  # NotMaterialized
    d_log.agrees("materialize", "c1", "p1", 1)
    one = d_log.agrees("append", request("c1", "b1", 0, ZERO, ["r1", "r2"]))
    d.agrees("save", checkpoint(0, ZERO))
    d.agrees("save", checkpoint(2, one.tail_digest))
    d.agrees("save", checkpoint(2, one.tail_digest, snapshot={"again": True}))  # replaces
    for bad in (checkpoint(3, one.tail_digest), checkpoint(1, one.tail_digest), checkpoint(2, ZERO),
                checkpoint(2, one.tail_digest, version=2), checkpoint(2, "xyz")):
        assert d.agrees("save", bad) is not None  # rejected, as the store does
    for at in (0, 1, 2, 9, -1):
        d.agrees("load_latest", "c1", at)
    d.agrees("load_latest", "other", 9)
    latest = run_sync(d.store.load_latest("c1", 9))
    d.wrong("load_latest", "c1", 9, answer=attrs.evolve(latest, snapshot={"again": 1}))
    d.wrong("load_latest", "c1", 1, answer=None)
    # The model configuration and tool set digests are part of the answer, and typed arguments.
    d.wrong("load_latest", "c1", 9, answer=attrs.evolve(latest, model_digest="mX"))
    d.wrong("load_latest", "c1", 9, answer=attrs.evolve(latest, tool_digest="tX"))
    for bad in (attrs.evolve(checkpoint(2, one.tail_digest), model_digest=5),
                attrs.evolve(checkpoint(2, one.tail_digest), tool_digest=None)):
        assert d.agrees("save", bad) is not None  # TypeError, as the store says


def test_content_reference_agrees_with_the_store_and_rejects_wrong_answers():
    d = Driver("content", InMemoryContentStore(), ReferenceContent())
    ref = d.agrees("put", b"blob")
    assert ref == "sha256:" + hashlib.sha256(b"blob").hexdigest()
    d.agrees("put", b"blob")
    d.agrees("put", "not bytes")  # TypeError
    assert d.agrees("get", ref) == b"blob"
    assert d.agrees("has", ref) is True
    d.agrees("get", "sha256:" + "0" * 64)  # ContentMissing
    d.agrees("has", "nope")  # ValueError
    d.wrong("get", ref, answer=b"blob!")
    d.wrong("has", "sha256:" + "1" * 64, answer=True)
    assert d.agrees("delete", ref) is True
    assert d.agrees("delete", ref) is False
    d.wrong("get", ref, answer=b"blob")  # deleted: ContentMissing


# --- the checker -------------------------------------------------------------------------


def attached_checker() -> tuple[ReferenceModel, InvariantSet]:
    invariants = InvariantSet(Trace(lambda: 0), lambda: 0, on_violation=lambda violation: None)
    checker = ReferenceModel()
    invariants.add(checker)
    return checker, invariants


def test_checker_fails_once_per_diverged_key_and_keeps_checking_the_others():
    checker, invariants = attached_checker()
    store = InMemoryDurableStateStore()
    d = Driver("ds", store, None)
    for key in ("a", "b", "c"):
        checker.on_port_call(d.call("save", key, DurableStateWrite(1, {"key": key}), 0))
    wrong = attrs.evolve(d.call("load", "a"), result=DurableStateRecord(1, 7, {"key": "a"}))
    checker.on_port_call(wrong)
    checker.on_port_call(wrong)  # the key diverged: no longer checked
    checker.on_port_call(d.call("load", "a"))
    checker.on_port_call(attrs.evolve(d.call("load", "b"), result=None))  # another key: still checked
    checker.on_port_call(d.call("load", "c"))
    assert [v.related for v in invariants.violations] == [("a",), ("b",)]
    assert all(v.invariant == "reference-model" for v in invariants.violations)
    assert checker.checks == 6 and checker.metrics() == {"reference_calls_checked": 6}
    assert set(references()) >= {"ds", "ledger", "log", "checkpoints", "content"}


# --- whole runs --------------------------------------------------------------------------


def run_for(name: str, duration: str, seed: int = 0):
    return run(registry.get(name), ScenarioOptions(seed=seed, duration_ms=parse_duration_ms(duration)))


@pytest.mark.parametrize("name, duration", [("sentinel-year", "1d"), ("ledger-storm", "30m")])
def test_clean_runs_pass_with_the_reference_model(name, duration):
    result = run_for(name, duration)
    assert result.passed, result.violations
    assert result.invariants["reference-model"] > 1_000


def test_a_durable_state_load_answering_the_previous_revision_is_caught(monkeypatch):
    real = InMemoryDurableStateStore.load

    async def stale_load(self, key):
        record = await real(self, key)
        if record is not None and record.revision > 1:
            return DurableStateRecord(record.contract_version, record.revision - 1, record.payload)
        return record

    monkeypatch.setattr(InMemoryDurableStateStore, "load", stale_load)
    result = run_for("sentinel-year", "1d")
    caught = [v for v in result.violations if v.invariant == "reference-model"]
    assert caught and "ds.load(" in caught[0].message, result.violations


def test_a_log_read_skipping_a_record_is_caught(monkeypatch):
    real = InMemoryConversationStore.read

    async def skipping_read(self, conversation_id, after_seq, limit):
        records = await real(self, conversation_id, after_seq, limit)
        return records[:1] + records[2:] if len(records) >= 3 else records

    monkeypatch.setattr(InMemoryConversationStore, "read", skipping_read)
    result = run_for("ledger-storm", "30m", seed=1)  # a seed whose workers recover a long enough log in 30m
    caught = [v for v in result.violations if v.invariant == "reference-model"]
    assert caught and "log.read(" in caught[0].message, result.violations
