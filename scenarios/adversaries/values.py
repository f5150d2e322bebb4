"""The values adversary: JSON values at the edges of every encoder and decoder.

Why: the store adversary (``scenarios.adversaries.adversary``) sends the values a
careful client sends, so the corners of canonical JSON (``model.canonical``)
and of each port's argument checks stayed unreached: lone surrogates and a
surrogate pair spelled as two code points, negative floats and floats in
every exponent layout, subclasses of str/int/float/dict/list/tuple (encoded
as their base values), member names that are not strings or are the same
UTF-16 string, cycles and nesting past the interpreter's stack, and on the
way back integers past 2**53 spelled as doubles, blobs that are not JSON at
all (a member twice, ``NaN``, an unsafe integer, an overflowing exponent,
bytes that are not UTF-8, nesting past the cap, half a document).

``ValuesAdversary`` runs ``nodes`` processes (``values-1`` ...), each an
incarnation of the store adversary's process (its call/retry loop, its
expectations, its recovery of private leftovers) with five episodes of its
own, through the node's crashy traced ports (every answer judged by the
``reference-model`` oracle: a typed error must be the contract's):

- ``ledger_values``: an admission whose input holds every legal edge,
  retried with the same value rebuilt from subclasses (a replay: the same
  digest), read back; each illegal input refused; the token paths (a
  look-alike token, a record that is no object or has no JSON form, an
  unknown submission, a released token); then settled completed with the
  edge values as its result, appended to the log, finalized; a second
  submission aborted by two authors (the second request returns the first
  intent) and settled aborted; then the conversation is purged;
- ``log_values``: a fence held by another producer, an illegal epoch, a
  batch of edge payloads read back, and each illegal request refused (a
  look-alike request or record, records in a list, a non-str batch id, a
  negative tail, nesting past the decode cap, names equal in UTF-16);
- ``claimcheck_values``: blobs put as they are and resolved through
  claim-check references (each refused as ``ClaimMismatch``), a size that
  lies, a value that is no reference, a declared digest over the inline
  cap, and the claim verifier (``verify_claim``) refusing each mismatch;
- ``ds_values``: a payload with lone surrogates and float edges read back
  exactly; a key with a lone surrogate, a look-alike write and a payload
  whose NaN sits after nested containers refused; and, through the payload
  check every backend shares (``encode_payload``: no port call can carry
  them), a cycle and (one seed in ``DS_DEEP_ONE_IN``) nesting past the
  payload depth cap refused as ValueError naming where;
- ``bounds_values``: ``canonical_json`` with each of its optional bounds
  (depth, nodes, collection length, UTF-16 text units) at and one past the
  bound, judged against the reference encoder's own walk. No store applies
  the collection or text bound (the log bounds an envelope's depth and
  values), so this library call is where a sweep reaches them.

What the trace cannot hold stays out of the traced arguments (the trace
marshals each call's arguments: no subclass instances, cycles or nesting
past marshal's depth there): such values go only where the trace records no
payload (an admission's input).
"""
from __future__ import annotations

from typing import Any

import attrs

from model.canonical import ZERO_DIGEST, CanonicalJsonBounds, CanonicalJsonBoundsError, canonical_bytes, canonical_json
from model.claimcheck import ClaimCheck, resolve_ref, verify_claim
from model.conversation.records import FencedAppendRequest
from model.durable_state.store import DurableStateWrite, encode_payload
from model.ledger.records import Claim
from model.retry import error_name, is_retryable
from scenarios.adversaries.adversary import AdversaryExpectations, _Process
from scenarios.adversaries.client import RETRIES_MAX, RETRY_WAIT_MS, Outcome
from scenarios.adversaries.common import _ref, _sized
from scenarios.adversaries.process import INLINE_CAP, PRINCIPAL
from scenarios.reference.jcs import bounds_kind
from sim.node import Node, NodeDeadError
from sim.workload import Workload
from sim.world import World

EDGES = ("admit_edges_replayed", "admit_illegal_rejected", "token_paths_refused", "settled_edges",
         "abort_keeps_first_intent",
         "log_edges_read_back", "log_illegal_rejected", "claim_blobs_refused", "claim_verifier_refused",
         "claim_digest_too_large", "ds_edges_roundtrip", "ds_illegal_rejected", "ds_unencodable_refused",
         "canonical_bounds_judged")
SOMETIMES = tuple(f"values_{name}" for name in EDGES)

# --- the values -----------------------------------------------------------------------------


class _Str(str):
    pass


class _Int(int):
    pass


class _Float(float):
    pass


class _Dict(dict):
    pass


class _List(list):
    pass


class _Tuple(tuple):
    pass


# Floats in each of ECMAScript's layouts, signed: shortest digits padded
# with zeros (1e16, 1.5e20), a plain fraction repr writes in exponent form
# (1.5e-05), exponent form with several digits (-1.5e-07), huge and tiny;
# and ordinary fractions, plain in both (1.5, -123.456, 0.1 + 0.2 with its 17 digits).
FLOAT_EDGES = (-1.5e-7, -2.5e-8, -1e300, 1e16, 1.5e20, 1.5e-5, -1.2345e-5, -7.0e22, 2.0 ** 60, 1.5, -123.456,
               0.1 + 0.2)
# A surrogate pair held as two code points is the character it spells; a
# reversed pair and a lone half stay lone (escaped as \\udxxx).
LONE = ("\ud800", "a\udfffb", "\udc00\ud800")
PAIR = "\ud83d\ude00"


def legal_value(n: int, pair: bool = True) -> dict:
    """Every legal edge in one JSON object (plain types only). ``pair``: a
    surrogate pair held as two code points too (it reads back joined, the
    same JSON string, another Python str)."""
    return {"n": n, "lone": list(LONE), **({"pair": PAIR} if pair else {}), "floats": list(FLOAT_EDGES),
            "names": {"\ud800": 1, "\U0001F600": 2, "\ufb01": 3, "z": 4},
            # More brackets than the envelope decode cap (64), nested only twice.
            "wide": [[] for _ in range(70)]}


def subclassed(value: Any) -> Any:
    """The same JSON value built from subclasses of the JSON types."""
    if type(value) is dict:
        return _Dict({_Str(k): subclassed(v) for k, v in value.items()})
    if type(value) is list:
        items = [subclassed(v) for v in value]
        return _Tuple(items) if len(items) % 2 else _List(items)
    if type(value) is str:
        return _Str(value)
    if type(value) is int:
        return _Int(value)
    if type(value) is float:
        return _Float(value)
    return value


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def cycle() -> list:
    """A list that holds itself."""
    value: list = []
    value.append(value)
    return value


# Past the durable-state payload check's depth cap (``_PAYLOAD_DEPTH_MAX``).
DS_DEPTH_PAST_CAP = 10_001
DS_DEEP_ONE_IN = 4


def illegal_inputs() -> list[tuple[str, Any]]:
    """Inputs with no canonical JSON form (each a ValueError or TypeError).

    Not a cycle, nor nesting past the interpreter's stack: the encoders
    refuse them through a RecursionError, and a RecursionError switches off
    ``sys.settrace`` (the sweep's ``--model-coverage`` tracer) for the rest
    of the run. ``tests/test_adversary_values.py`` refuses them instead."""
    return [("int name", {1: "x"}), ("mixed names", {1: "x", "a": 2}),
            ("names equal in UTF-16", {PAIR: 1, "\U0001F600": 2}), ("a set", {"s": {1, 2}})]


# --- look-alikes: the attributes the trace describes, not the type ----------------------------


@attrs.frozen
class LookalikeClaim:
    submission_id: str
    owner_id: str
    epoch: int
    lease_expires_ms: int


@attrs.frozen
class LookalikeWrite:
    contract_version: int
    payload: Any


@attrs.frozen
class LookalikeRecord:
    record_id: str
    envelope: dict

    def to_json(self) -> dict:
        return dict(self.envelope)


@attrs.frozen
class LookalikeRequest:
    conversation_id: str
    batch_id: str
    producer_id: str
    epoch: int
    expected_tail_seq: int
    expected_tail_digest: str
    records: tuple


# Blobs that are not canonical JSON documents (the name, the bytes around a marker).
def crafted_blobs(marker: str) -> list[tuple[str, bytes]]:
    m = canonical_json(marker).encode()
    return [("member twice", b'{"a":1,"a":2,"m":' + m + b"}"), ("NaN", b'{"a":NaN,"m":' + m + b"}"),
            ("unsafe integer", b'{"a":9007199254740993,"m":' + m + b"}"),
            ("overflow", b'{"a":1e999,"m":' + m + b"}"), ("not UTF-8", b'\xff\xfe{"m":' + m + b"}"),
            ("too deep", b'{"a":' + b"[" * 600 + b"]" * 600 + b',"m":' + m + b"}"),
            ("half", b'{"m":' + m + b',"a":[1,')]


class ValuesExpectations(AdversaryExpectations):
    name = "values-expectations"


class ValuesAdversary(Workload):
    """``nodes`` processes (``values-1`` ...) running the episodes above in a
    shuffled round, ``think_ms`` apart, until the heal instant; then each
    settles its private leftovers."""

    name = "values"

    def __init__(self, *, nodes: int = 1, lease_ms: int, think_ms: tuple[int, int]) -> None:
        assert 1 <= nodes <= 4 and lease_ms >= 10 and 0 < think_ms[0] <= think_ms[1], (nodes, lease_ms, think_ms)
        self.names = tuple(f"values-{i + 1}" for i in range(nodes))
        self.lease_ms = lease_ms
        self.think_ms = think_ms
        self.checker = ValuesExpectations()
        self.edges: dict[str, int] = dict.fromkeys(EDGES, 0)
        # What the store adversary's process counts (its recovery counts its edges too).
        self.calls: dict[str, int] = {}
        self.typed_rejections = 0
        self.receipts: dict[str, str] = {}  # submission -> its admission's receipt (a settlement names it)
        self.race_rejections = 0
        self.retries = 0
        self.episodes = 0
        self.long_logs: dict[str, int] = {}
        # The payload nested past the durable-state cap: checked once, in one
        # run in DS_DEEP_ONE_IN (the check walks 10k levels, building each
        # level's path: a quarter of a second): seeds 2, 6, 10, ..., so any
        # DS_DEEP_ONE_IN consecutive seeds check it.
        self.deep_checked = False

    def setup(self, world: World) -> None:
        self.world = world
        self.deep_checked = world.seed % DS_DEEP_ONE_IN != 2
        for name in self.names:
            world.add_node(name, self._start, role="client")

    def _start(self, node: Node) -> None:
        self.world.runtime.spawn_on(node, "values", _ValuesProcess(self, self.world, node).main())

    def metrics(self) -> dict[str, Any]:
        stats: dict[str, Any] = {"values_typed_rejections": self.typed_rejections, "values_episodes": self.episodes}
        stats.update({f"values_{name}": count for name, count in self.edges.items()})
        return stats

    def count_untraced(self, port: str, method: str) -> None:
        pass

    def edge(self, name: str, n: int = 1) -> None:
        if name in self.edges:
            self.edges[name] += n  # the store adversary's own edges (its recovery's) are not counted here


class _ValuesProcess(_Process):
    """One incarnation of one values node: the store adversary's process
    (calls, retries, expectations, leftovers) with these episodes."""

    w: Any

    async def main(self) -> None:
        await self.recover()
        episodes = [self.ledger_values, self.log_values, self.claimcheck_values, self.ds_values, self.bounds_values]
        heal_at_ms = self.world.heal_at_ms
        while self.now() < heal_at_ms:
            order = list(episodes)
            self.rng.shuffle(order)
            for episode in order:
                await self.sleep(*self.w.think_ms)
                if self.now() >= heal_at_ms:
                    break
                self.w.episodes += 1
                await episode()
        await self.recover()

    def rejected(self, outcome: Outcome, names: tuple[str, ...], what: str, *related: str) -> bool:
        return self.expect_rejected(outcome, names, what, *related)

    # -- canonical-JSON bounds (the library's: no store applies collection or text bounds) ------

    async def bounds_values(self) -> None:
        """``canonical_json(value, bounds)`` at and one past each bound
        (depth, nodes, collection length, text units — astral characters
        are two UTF-16 units), judged against the reference encoder's own
        bounds walk (``scenarios.reference.jcs.bounds_kind``): the same
        kind refused (``CanonicalJsonBoundsError``, its message naming it),
        or the same text as without bounds. Library-only: the log bounds
        an envelope's depth and values, nothing applies the other two."""
        rng = self.rng
        width = rng.between(1, 6)
        units = rng.between(2, 9)
        astral = "\U0001F600" * (units // 2) + "a" * (units % 2)  # ``units`` UTF-16 units, fewer code points
        values: list[Any] = [
            list(range(width)), {f"k{i}": i for i in range(width)}, astral, {astral: [astral]},
            [[0] * width, {"t": astral}], _nested(rng.between(1, 5)),
            [astral] * width,
        ]
        judged = 0
        for value in values:
            for depth, nodes, collection, text in ((None, None, width, units), (None, None, width - 1, units),
                                                   (None, None, width, units - 1), (rng.between(0, 5), None, None,
                                                                                    None),
                                                   (None, rng.between(1, 12), None, None)):
                bounds = CanonicalJsonBounds(depth=depth, nodes=nodes, collection_length=collection, text_units=text)
                want = bounds_kind(value, depth=depth, nodes=nodes, collection=collection, text=text)
                try:
                    got, detail = canonical_json(value, bounds), None
                except CanonicalJsonBoundsError as error:
                    got, detail = error.kind, str(error)
                except Exception as error:  # noqa: BLE001 - any other answer is a finding
                    got, detail = f"{type(error).__name__}: {error}", None
                if want is None:
                    ok = got == canonical_json(value)
                else:
                    ok = got == want and detail is not None and want in detail
                judged += self.expect(ok, f"canonical_json({value!r:.80}, {bounds!r}) answered {got!r:.80}, "
                                          f"the reference's bounds: {want or 'within'}")
        if judged == len(values) * 5:
            self.w.edge("canonical_bounds_judged")

    # -- the ledger ----------------------------------------------------------------------------

    async def ledger_values(self) -> None:
        conv = self.private_conversation("v")
        n = self._next()
        key = self.uid("key")
        value = legal_value(n)
        first = await self.admit_ready(conv, key, value)
        if first is None:
            return
        sid = first.submission_id
        twin = await self.call("ledger", "admit", conv, PRINCIPAL, key, subclassed(value), self.now())
        by_key = await self.call("ledger", "get_by_idempotency_key", conv, PRINCIPAL, key)
        if self.expect(twin.ok and twin.value.replayed and twin.value.input_digest == first.input_digest,
                       f"admit of {key} with its input rebuilt from subclasses answered {twin.show()}", conv) and (
                self.expect(by_key.ok and by_key.value is not None
                            and canonical_json(by_key.value.input) == canonical_json(value),
                            f"get_by_idempotency_key({key}) answered {by_key.show()}", conv)):
            self.w.edge("admit_edges_replayed")
        second = await self.admit_ready(conv, self.uid("key"), {"second": True})
        if second is None:
            return
        refused = 0
        for what, bad in illegal_inputs():
            out = await self.call("ledger", "admit", conv, PRINCIPAL, self.uid("bad"), bad, self.now())
            refused += self.rejected(out, ("TypeError", "ValueError"), f"admit of an input with {what}", conv)
        if refused == len(illegal_inputs()):
            self.w.edge("admit_illegal_rejected")
        token = await self.claim_token(conv, self.label, 0)
        if token is None or not self.expect(token.submission_id == sid, f"claim of {conv} got {token!r}", conv):
            return
        record = {"outcome": "completed", "result": value}
        cases = [
            ((LookalikeClaim(sid, token.owner_id, token.epoch, token.lease_expires_ms), self._settlement(token, record)),
             ("TypeError",)),
            ((token, self._settlement(token, ["completed"])), ("InvalidSettlement",)),
            ((token, self._settlement(token, {"outcome": "completed", "result": {"x": float("nan")}})),
             ("InvalidSettlement",)),
            ((token, self._settlement(token, {"outcome": "completed", "result": {1: "x", "a": 2}})),
             ("InvalidSettlement",)),
            ((Claim(f"{sid}-none", token.owner_id, token.epoch, token.lease_expires_ms),
              self._settlement(Claim(f"{sid}-none", token.owner_id, token.epoch, token.lease_expires_ms), record)),
             ("UnknownSubmission",)),
        ]
        refused = 0
        for args, names in cases:
            out = await self.call("ledger", "reserve_settlement", *args)
            refused += self.rejected(out, names, f"reserve_settlement{args!r:.100}", conv)
        released = await self.call("ledger", "release_ownership", token)
        if not self.expect_ok(released, f"release of {sid}", conv):
            return
        stale = await self.call("ledger", "reserve_settlement", token, self._settlement(token, record))
        refused += self.rejected(stale, ("OwnershipLost",), f"reserve of {sid} with a released token", conv)
        if refused == len(cases) + 1:
            self.w.edge("token_paths_refused")
        token = await self.claim_token(conv, self.label, token.epoch)
        if token is None:
            return
        mat = await self.call("log", "materialize", conv, self.label, token.epoch)
        reserved = await self.call("ledger", "reserve_settlement", token, self._settlement(token, record))
        if not (self.expect_ok(mat, f"materialize({conv})", conv) and self.expect_ok(reserved, "reserve", conv)):
            return
        if not await self._append_settled(conv, token, sid, reserved.value.record_digest, record):
            return
        final = await self.call("ledger", "finalize_settlement", sid, self.now())
        if not self.expect(final.ok and final.value.outcome == "completed", f"finalize({sid}): {final.show()}",
                           conv):
            return
        if not await self._abort_twice(conv, second.submission_id, token.epoch):
            return
        purge = await self.call("ledger", "purge_conversation", conv)
        if self.expect(purge.ok, f"purge of settled {conv}: {purge.show()}", conv):
            self.w.edge("settled_edges")
            self.expect_ok(await self.call("log", "delete_conversation", conv), f"delete of {conv}", conv)

    async def _abort_twice(self, conv: str, sid: str, epoch: int) -> bool:
        """A second submission, aborted by two authors: the second request
        returns the first intent; then it is settled aborted (queued: under
        the ledger's QueuedAbort authority, after which a third abort is
        ``SettlementConflict``)."""
        out = await self.call("ledger", "request_abort", sid, self.label, "first", self.now())
        first = out.value if out.ok else None
        self.expect(first is not None and (first.submission_id, first.author, first.reason) == (sid, self.label, "first"),
                    f"request_abort({sid}, first) answered {out.show()}", sid)
        again = await self.call("ledger", "request_abort", sid, f"{self.label}/other", "second", self.now())
        # (The first may be a replay itself: its reply lost, the retry answered by the intent it made.)
        if not self.expect(first is not None and again.ok and again.value.replayed
                           and attrs.evolve(again.value, replayed=False) == attrs.evolve(first, replayed=False),
                           f"a second abort of {sid} by another author answered {again.show()}, first {first!r}", conv):
            return False
        self.w.edge("abort_keeps_first_intent")
        if first.settled_at_ms is not None:
            # Never claimed: the intent settled it at once; nothing is left to claim.
            got = await self.call("ledger", "get", sid)
            return self.expect(got.ok and got.value is not None and got.value.outcome == "aborted"
                               and got.value.settled_at_ms == first.settled_at_ms,
                               f"{sid} aborted before any claim reads back as {got.show()}", conv)
        row = await self.call("ledger", "get", sid)
        if row.ok and row.value is not None and row.value.epoch is None:
            if not await self._settle_queued_abort(sid):
                return False
            late = await self.call("ledger", "request_abort", sid, self.label, "third", self.now())
            return self.expect(not late.ok and getattr(late.error, "existing_outcome", None) == "aborted",
                               f"an abort of {sid} once its queued abort settled answered {late.show()}", conv)
        token = await self.claim_token(conv, self.label, epoch)
        if token is None or not self.expect(token.submission_id == sid, f"claim of {conv} got {token!r}", conv):
            return False
        record = self.settlement_record("aborted", 2)
        mat = await self.call("log", "materialize", conv, self.label, token.epoch)
        reserved = await self.call("ledger", "reserve_settlement", token, self._settlement(token, record))
        if not (self.expect_ok(mat, f"materialize({conv})", conv) and self.expect_ok(reserved, "reserve", conv)):
            return False
        if not await self._append_settled(conv, token, sid, reserved.value.record_digest, record):
            return False
        final = await self.call("ledger", "finalize_settlement", sid, self.now())
        return self.expect(final.ok and final.value.outcome == "aborted", f"finalize({sid}): {final.show()}", conv)

    # -- the conversation log ------------------------------------------------------------------

    async def log_values(self) -> None:
        conv = f"v-{self.node.name}-{self.label}-{self._next()}"
        producer = self.label
        if not self.expect_ok(await self.call("log", "materialize", conv, producer, 1), "materialize", conv):
            return
        refused = self.rejected(await self.call("log", "materialize", conv, "another-producer", 1),
                                ("FenceRejected",), f"materialize of {conv} at an epoch another holds", conv)
        refused += self.rejected(await self.call("log", "materialize", conv, producer, -1), ("ValueError",),
                                 f"materialize of {conv} at epoch -1", conv)
        n = self._next()
        records = tuple(self.envelope(f"{conv}/{n}/{i}", producer, 1, legal_value(n + i, pair=False)) for i in range(2))
        out = await self.call("log", "append", FencedAppendRequest(conv, f"b{n}", producer, 1, 0, ZERO_DIGEST,
                                                                   records))
        if self.expect_ok(out, f"append of edge payloads to {conv}", conv) and (
                await self.read_checked(conv, 0, 10, list(records), [f"b{n}"] * 2)) is not None:
            self.w.edge("log_edges_read_back")
        tail = (2, out.value.tail_digest) if out.ok else (0, ZERO_DIGEST)
        good = self.envelope(f"{conv}/x", producer, 1, {"x": 1})

        def request(batch_id: Any = "bad", records: Any = (good,), tail_seq: int = tail[0]) -> FencedAppendRequest:
            return FencedAppendRequest(conv, batch_id, producer, 1, tail_seq, tail[1], records)

        deep = self.envelope(f"{conv}/deep", producer, 1, _nested(70))
        twins = self.envelope(f"{conv}/twins", producer, 1, {PAIR: 1, "\U0001F600": 2})
        cases = [
            (LookalikeRequest(conv, "bad", producer, 1, tail[0], tail[1], (good,)), ("TypeError",)),
            (request(records=[good]), ("TypeError",)),
            (request(records=(LookalikeRecord(good.record_id, good.to_json()),)), ("TypeError",)),
            (request(batch_id=5), ("TypeError",)),
            (request(tail_seq=-1), ("ValueError",)),
            (request(records=(deep,)), ("ValueError",)),
            (request(records=(twins,)), ("ValueError",)),
        ]
        for bad, names in cases:
            refused += self.rejected(await self.call("log", "append", bad), names, f"log.append({bad!r:.100})", conv)
        never = f"{conv}-never"  # a conversation nobody materialized
        refused += self.rejected(await self.call("log", "append", FencedAppendRequest(
            never, "b", producer, 1, 0, ZERO_DIGEST, (self.envelope(f"{never}/0", producer, 1, {}),))),
            ("NotMaterialized",), f"append to {never}", never)
        if refused == len(cases) + 3:
            self.w.edge("log_illegal_rejected")
        self.expect_ok(await self.call("log", "delete_conversation", conv), f"delete of {conv}", conv)

    # -- the content store and claim-check -----------------------------------------------------

    async def resolve(self, value: Any) -> Outcome:
        """``resolve_ref`` through the node's content port; retryable errors
        and blobs damaged below the store (``ContentCorrupted``) read again."""
        for attempt in range(1, RETRIES_MAX + 1):
            try:
                return Outcome(await resolve_ref(self.ports.content, value), None, 0, attempt)
            except NodeDeadError:
                raise
            except Exception as error:  # noqa: BLE001 - classified: read again, or the answer
                if not (is_retryable(error) or error_name(error) == "ContentCorrupted"):
                    return Outcome(None, error, 0, attempt)
                self.w.retries += 1
                await self.runtime.sleep_ms(self.rng.between(*RETRY_WAIT_MS))
        raise AssertionError(f"resolve_ref: {RETRIES_MAX} failures in a row")

    async def claimcheck_values(self) -> None:
        marker = f"{self.label}/{self._next()}"
        refused = 0
        blobs = crafted_blobs(marker)
        for what, data in blobs:
            put = await self.call("content", "put", data)
            if not self.expect(put.ok and put.value == _ref(data), f"content.put of {what}: {put.show()}"):
                return
            ref = {"ref": put.value, "size": len(data)}
            out = await self.resolve(ref)
            refused += self.rejected(out, ("ClaimMismatch",), f"resolve_ref of a blob with {what}", put.value)
            reason = verify_claim(data, {**ref, "digest": 1}, lambda payload: 1)
            self.expect(reason is not None and "does not decode" in reason,
                        f"verify_claim of a blob with {what} and a digest said {reason!r}", put.value)
            self.expect_ok(await self.call("content", "delete", put.value), f"content.delete({put.value})")
        # A canonical double past 2**53 in integer form reads back as that double.
        data = canonical_bytes({"big": 2.0 ** 60, "m": marker})
        put = await self.call("content", "put", data)
        if not self.expect(put.ok and put.value == _ref(data), f"content.put: {put.show()}"):
            return
        ref = {"ref": put.value, "size": len(data)}
        back = await self.resolve(ref)
        self.expect(back.ok and back.value == {"big": 2.0 ** 60, "m": marker} and type(back.value["big"]) is float,
                    f"resolve_ref of {put.value} answered {back.show()}", put.value)
        refused += self.rejected(await self.resolve({**ref, "size": len(data) + 1}), ("ClaimMismatch",),
                                 "resolve_ref with a size that lies", put.value)
        refused += self.rejected(await self.resolve({"ref": put.value}), ("NotAClaimRef",),
                                 "resolve_ref of a value that is no reference", put.value)
        if refused == len(blobs) + 2:
            self.w.edge("claim_blobs_refused")
        # The verifier: every mismatch is named, a match is None.
        other = data[:-2] + b'x"}' if data.endswith(b'"}') else data
        verdicts = [
            (verify_claim(data.decode(), ref, None), "data must be bytes"),
            (verify_claim(data, {"ref": 1}, None), "not a claim-check reference"),
            (verify_claim(data, {**ref, "size": len(data) + 1}, None), "size mismatch"),
            (verify_claim(other[:len(data)], ref, None), "ref mismatch"),
            (verify_claim(data, ref, lambda payload: 1), "digest missing"),
            (verify_claim(data, {**ref, "digest": 1}, None), "unexpected digest"),
            (verify_claim(data, {**ref, "digest": 1}, lambda payload: payload["nope"]), "digest function raised"),
            (verify_claim(data, {**ref, "digest": float("nan")}, lambda payload: 1), "digest is not a JSON value"),
            (verify_claim(data, {**ref, "digest": 2}, lambda payload: 1), "digest mismatch"),
            (verify_claim(data, {**ref, "digest": marker}, lambda payload: payload["m"]), None),
        ]
        named = 0
        for reason, want in verdicts:
            ok = reason is None if want is None else reason is not None and reason.startswith(want)
            named += self.expect(ok, f"verify_claim said {reason!r}, expected {want!r}", put.value)
        if named == len(verdicts):
            self.w.edge("claim_verifier_refused")
        self.expect_ok(await self.call("content", "delete", put.value), f"content.delete({put.value})")
        # A declared digest that does not fit inline: refused, nothing stored.
        check = ClaimCheck(self.ports.content, self.ports.pins, now_ms=self.now, cap_bytes=INLINE_CAP,
                           digests={"values-tool": lambda payload: {"all": payload}})
        output = _sized(INLINE_CAP + 1, {"m": marker})
        try:
            recorded = await check.on_output("values-tool", f"{marker}/step", output)
            error: BaseException | None = None
        except NodeDeadError:
            raise
        except Exception as raised:  # noqa: BLE001 - judged below
            recorded, error = None, raised
        if self.expect(error is not None and error_name(error) == "ClaimDigestTooLarge" and
                       check.digests.keys() == {"values-tool"},
                       f"claim-check of a digest over the cap answered {recorded!r:.80} / {error!r:.120}"):
            self.w.edge("claim_digest_too_large")

    # -- durable state ---------------------------------------------------------------------------

    async def ds_values(self) -> None:
        key = f"val:{self.node.name}:{self.rng.below(2)}"
        load = await self.call("ds", "load", key)
        if not self.expect_ok(load, f"ds.load({key!r})", key):
            return
        revision = 0 if load.value is None else load.value.revision
        # (Not a surrogate pair held as two code points: JSON text cannot hand that str back unchanged,
        # and the store refuses it where the reference model accepts it -- an open question of the contract.)
        payload = {"lone": list(LONE), "floats": list(FLOAT_EDGES), "n": self._next()}
        save = await self.call("ds", "save", key, DurableStateWrite(1, payload), revision)
        if save.ok or not (save.lost and getattr(save.error, "actual", None) == revision + 1):
            if not self.expect_ok(save, f"ds.save({key!r}) of lone surrogates", key):
                return
        back = await self.call("ds", "load", key)
        if self.expect(back.ok and back.value is not None and back.value.payload == payload
                       and back.value.revision == revision + 1,
                       f"ds.load({key!r}) after a save of lone surrogates answered {back.show()}", key):
            self.w.edge("ds_edges_roundtrip")
        cases = [
            (("val:\ud800", DurableStateWrite(1, {}), 0), ("ValueError",)),
            ((key, LookalikeWrite(1, {}), revision + 1), ("TypeError",)),
            ((key, DurableStateWrite(1, {"a": [1.5, "s", None, True, {"b": 2}], "z": float("nan")}), revision + 1),
             ("ValueError",)),
        ]
        refused = 0
        for args, names in cases:
            refused += self.rejected(await self.call("ds", "save", *args), names, f"ds.save{args!r:.100}", key)
        if refused == len(cases):
            self.w.edge("ds_illegal_rejected")
        self.expect_ok(await self.call("ds", "clear", key), f"ds.clear({key!r})", key)
        # What no port call can carry (the trace marshals a save's payload):
        # a cycle, and nesting past the payload cap, refused by the payload
        # check every backend shares (``encode_payload``) as a ValueError
        # naming where.
        unencodable = [("a cycle", cycle(), "$[0] is circular")]
        if not self.w.deep_checked:
            self.w.deep_checked = True
            unencodable.append(("nesting past the cap", _nested(DS_DEPTH_PAST_CAP), "is nested too deeply"))
        named = 0
        for what, value, want in unencodable:
            try:
                encode_payload(value)
                error: BaseException | None = None
            except Exception as raised:  # noqa: BLE001 - judged below
                error = raised
            named += self.expect(type(error) is ValueError and str(error).endswith(want),
                                 f"encode_payload of {what} raised {error!r:.200}: the payload check must refuse it "
                                 f"as a ValueError ending {want!r}", key)
        if named == len(unencodable):
            self.w.edge("ds_unencodable_refused")
