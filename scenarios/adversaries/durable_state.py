"""The port-storm adversary's episodes on the durable-state store: private
keys at the edges (non-ASCII keys, float and integer extremes, UTF-16 key
order, payloads on the cap), identical and conflicting retries, contract
versions, clear and re-creation, illegal arguments, and shared keys raced
by every node."""
from __future__ import annotations

from model.durable_state.contracts import FUTURE_VERSION, StateContract
from model.durable_state.store import INT64_MAX, DurableStateWrite, is_revision_conflict
from scenarios.adversaries.client import Outcome
from scenarios.adversaries.common import _same_json, _same_record, _sized
from scenarios.adversaries.process import FLOAT_EDGES, INLINE_CAP, INT_EDGES, UNKNOWN, UTF16_KEYS, ProcessCore


class DurableStateEpisodes(ProcessCore):
    """The durable-state store's episodes."""

    def edge_payload(self, n: int, ints: tuple[int, ...] | None = None) -> dict:
        """Floats and integers at their edges, objects whose keys sort
        differently in UTF-16 and in code points, nested. ``ints``: the
        integer edges (default: those a canonical store reads back today)."""
        ints = self.canonical_ints if ints is None else ints
        floats = list(FLOAT_EDGES)
        self.rng.shuffle(floats)
        keys = list(UTF16_KEYS)
        self.rng.shuffle(keys)
        nested = {key: index for index, key in enumerate(keys)}
        return {"n": n, "floats": floats, "ints": list(ints), "utf16": nested,
                "deep": {keys[0]: {keys[1]: [floats[0], {keys[2]: ints[self.rng.below(len(ints))]}]}}}

    async def ds_save(self, key: str, write: DurableStateWrite, expected: int) -> Outcome:
        """A private save; after a lost reply the replay conflicts at exactly
        expected + 1 and the adversary adopts its own write (read back)."""
        self.known[key] = UNKNOWN
        out = await self.call("ds", "save", key, write, expected)
        if out.ok:
            record = out.value
            self.expect(record.revision == expected + 1 and record.contract_version == write.contract_version
                        and _same_json(record.payload, write.payload),
                        f"ds.save({key!r}, expected {expected}) returned {record!r:.200}", key)
            self.known[key] = (record.revision, record.contract_version, record.payload)
            return out
        if out.lost and is_revision_conflict(out.error) and out.error.actual == expected + 1:
            load = await self.call("ds", "load", key)
            stored = load.value if load.ok else None
            adopted = (stored is not None and stored.revision == expected + 1
                       and stored.contract_version == write.contract_version
                       and _same_json(stored.payload, write.payload))
            self.expect(adopted, f"ds.save({key!r}) retried after a lost reply: the stored {stored!r:.200} "
                                 "is not its own write", key)
            if adopted:
                self.w.edge("ds_adopted_after_reply_lost")
                self.known[key] = (stored.revision, stored.contract_version, stored.payload)
                return Outcome(stored, None, out.lost, out.attempts)
        self.expect(False, f"ds.save({key!r}, expected {expected}) on a private key failed: {out.show()}", key)
        return out

    async def ds_private(self) -> None:
        key = self.private_keys[self.rng.below(len(self.private_keys))]
        known = self.known.get(key, UNKNOWN)
        if known is UNKNOWN:
            load = await self.call("ds", "load", key)
            if not self.expect_ok(load, f"ds.load({key!r})", key):
                return
            known = None if load.value is None else (load.value.revision, load.value.contract_version,
                                                     load.value.payload)
            self.known[key] = known
        revision = 0 if known is None else known[0]
        self.w.edge("ds_mixed_unicode_key")
        payload = self.edge_payload(revision + 1, INT_EDGES)
        if self.rng.below(4) == 0:
            payload = _sized(INLINE_CAP + self.rng.between(-1, 1), payload)
            self.w.edge("ds_payload_at_cap_sizes")
        write = DurableStateWrite(self.rng.between(1, 3), payload)
        out = await self.ds_save(key, write, revision)
        if not out.ok:
            return
        load = await self.call("ds", "load", key)
        if self.expect_ok(load, f"ds.load({key!r})", key):
            back = load.value
            same = back is not None and back.revision == revision + 1 and _same_json(back.payload, payload)
            if self.expect(same, f"ds.load({key!r}) after save returned {back!r:.300}", key):
                self.w.edge("ds_float_edges_roundtrip")
                self.w.edge("ds_int_edges_roundtrip")
                self.w.edge("ds_utf16_order_keys_roundtrip")
        # The same save again: a conflict at exactly expected + 1, nothing changed.
        again = await self.call("ds", "save", key, write, revision)
        if self.expect(is_revision_conflict(again.error) and again.error.actual == revision + 1
                       and again.error.expected == revision,
                       f"identical retry of ds.save({key!r}, expected {revision}) answered {again.show()}", key):
            self.w.edge("ds_identical_retry_conflicts")
        other = DurableStateWrite(write.contract_version, {"other": True})
        clash = await self.call("ds", "save", key, other, revision)
        if self.expect(is_revision_conflict(clash.error) and clash.error.actual == revision + 1,
                       f"conflicting retry of ds.save({key!r}) answered {clash.show()}", key):
            self.w.edge("ds_conflicting_retry_conflicts")
        await self._contract_versions(key, revision + 1)
        if self.rng.below(3) == 0:
            await self._clear_and_recreate(key)

    async def _contract_versions(self, key: str, revision: int) -> None:
        """Load state two contract versions old through a v3 contract (two
        migrations), and state from the future through a v2 one."""
        v3 = StateContract("adversary.state", 3, lambda p: None if isinstance(p, dict) and "total" in p else "no total",
                           {1: lambda p: {**p, "unit": "ms"}, 2: lambda p: {"total": p["count"], "unit": p["unit"]}})
        v2 = StateContract("adversary.state", 2, lambda p: None, {1: lambda p: p})
        old = await self.ds_save(key, DurableStateWrite(1, {"count": revision}), revision)
        if not old.ok:
            return
        load = await self.call("ds", "load", key)
        if not self.expect_ok(load, f"ds.load({key!r})", key) or load.value is None:
            return
        record = load.value
        try:
            upgraded = v3.upgrade(key, record.contract_version, record.payload)
        except Exception as error:  # noqa: BLE001 - reported as an expectation
            upgraded = error
        if self.expect(record.contract_version == 1 and upgraded == {"total": revision, "unit": "ms"},
                       f"v1 state of {key!r} through a v3 contract gave {upgraded!r:.200}", key):
            self.w.edge("ds_two_versions_old_loaded")
        future = await self.ds_save(key, DurableStateWrite(3, {"total": revision, "unit": "ms"}), revision + 1)
        if not future.ok:
            return
        try:
            v2.upgrade(key, future.value.contract_version, future.value.payload)
            rejected = None
        except Exception as error:  # noqa: BLE001
            rejected = error
        if self.expect(getattr(rejected, "kind", None) == FUTURE_VERSION,
                       f"v3 state of {key!r} through a v2 contract gave {rejected!r}", key):
            self.w.edge("ds_future_version_rejected")

    async def _clear_and_recreate(self, key: str) -> None:
        known = self.known.get(key)
        old_revision = known[0] if isinstance(known, tuple) else 0
        self.known[key] = UNKNOWN
        for _ in range(2):
            out = await self.call("ds", "clear", key)
            if not self.expect(out.ok and out.value is None, f"ds.clear({key!r}) answered {out.show()}", key):
                return
        self.known[key] = None
        self.w.edge("ds_clear_idempotent")
        load = await self.call("ds", "load", key)
        if not self.expect(load.ok and load.value is None, f"ds.load({key!r}) after clear: {load.show()}", key):
            return
        if old_revision:
            stale = await self.call("ds", "save", key, DurableStateWrite(1, {"stale": True}), old_revision)
            if self.expect(is_revision_conflict(stale.error) and stale.error.actual == 0,
                           f"save at the cleared revision {old_revision} of {key!r}: {stale.show()}", key):
                self.w.edge("ds_stale_revision_after_recreate")
        out = await self.ds_save(key, DurableStateWrite(2, self.edge_payload(0, INT_EDGES)), 0)
        if out.ok:
            self.w.edge("ds_recreated_after_clear")

    async def ds_illegal(self) -> None:
        """Illegal arguments: typed errors, and the key is unchanged."""
        key = self.private_keys[self.rng.below(len(self.private_keys))]
        before = await self.call("ds", "load", key)
        if not self.expect_ok(before, f"ds.load({key!r})", key):
            return
        revision = 0 if before.value is None else before.value.revision
        cases = [
            ("load", (5,), ("TypeError",)), ("load", ("",), ("ValueError",)), ("clear", (b"k",), ("TypeError",)),
            ("save", (key, DurableStateWrite(0, {}), revision), ("ValueError",)),
            ("save", (key, DurableStateWrite(True, {}), revision), ("TypeError",)),
            ("save", (key, DurableStateWrite(INT64_MAX + 1, {}), revision), ("ValueError",)),
            ("save", (key, DurableStateWrite(1, {}), -1), ("ValueError",)),
            ("save", (key, DurableStateWrite(1, {}), True), ("TypeError",)),
            ("save", (key, DurableStateWrite(1, {}), INT64_MAX), ("ValueError",)),
            ("save", (key, DurableStateWrite(1, {"x": float("nan")}), revision), ("ValueError",)),
            ("save", (key, DurableStateWrite(1, [float("inf")]), revision), ("ValueError",)),
            ("save", (key, DurableStateWrite(1, (1, 2)), revision), ("TypeError",)),
            ("save", (key, DurableStateWrite(1, {1: "int key"}), revision), ("TypeError",)),
            ("save", (key, DurableStateWrite(1, {"b": b"bytes"}), revision), ("TypeError",)),
            ("save", ("", DurableStateWrite(1, {}), 0), ("ValueError",)),
        ]
        for index in self.rng_sample(len(cases), 4):
            method, args, names = cases[index]
            out = await self.call("ds", method, *args)
            self.expect_rejected(out, names, f"ds.{method}{args!r:.120}", key)
        after = await self.call("ds", "load", key)
        if self.expect(after.ok and _same_record(after.value, before.value),
                       f"illegal calls changed {key!r}: {before.show()} -> {after.show()}", key):
            self.w.edge("ds_illegal_rejected")

    def rng_sample(self, n: int, k: int) -> list[int]:
        indexes = list(range(n))
        self.rng.shuffle(indexes)
        return sorted(indexes[:k])

    async def ds_shared(self) -> None:
        """CAS races on keys every adversary node writes."""
        key = f"adv:shared:{self.rng.below(3)}:\ue000\U0001F600"
        for _ in range(self.rng.between(1, 4)):
            load = await self.call("ds", "load", key)
            if not self.expect_ok(load, f"ds.load({key!r})", key):
                return
            revision = 0 if load.value is None else load.value.revision
            if revision and self.rng.below(3) == 0:
                revision -= 1  # acting on what another node's write already overtook: a conflict
            elif revision and self.rng.below(5) == 0:
                out = await self.call("ds", "clear", key)
                self.expect_ok(out, f"ds.clear({key!r})", key)
                continue
            write = DurableStateWrite(1, {"by": self.label, "n": self._next(), "f": FLOAT_EDGES[self.rng.below(5)]})
            await self.sleep(0, 200)  # let another node's write land in between
            out = await self.call("ds", "save", key, write, revision)
            if out.ok:
                self.expect(out.value.revision == revision + 1 and _same_json(out.value.payload, write.payload),
                            f"shared ds.save({key!r}, {revision}) returned {out.value!r:.200}", key)
            elif is_revision_conflict(out.error):
                self.w.race_rejections += 1
                self.w.edge("ds_shared_conflict")
                self.expect(out.error.expected == revision and out.error.actual != revision,
                            f"conflict on {key!r} says expected {out.error.expected} actual {out.error.actual}, "
                            f"sent {revision}", key)
            else:
                self.expect(False, f"shared ds.save({key!r}) failed: {out.show()}", key)
