"""The state adversary: clients of the durable-state *handle*, the claim-check
middleware and checkpointed recovery, racing under faults.

Why: the application workloads use the durable-state handle
(``model.durable_state.handle``) only in its happy path (one sentinel, one
writer per key), and the port adversary (``scenarios.adversaries.adversary``) calls the
store directly. The handle's own rules — adopt-own-write (a save that
conflicts at *exactly* ``expected + 1`` with a canonically equal envelope
at the same contract version is its own earlier write; anything else stays
a loud conflict) and load's migrate-then-validate — were never driven
where they matter: a reply lost after the commit, a concurrent writer
saving an equal payload under another revision or another contract
version, ``true`` racing ``1``, state a buggy writer stored unvalidated.

``StateAdversary`` runs ``nodes`` processes (``state-1`` ...). Each
incarnation runs one build — contract v1 or v2 of ``adv-state.state`` (v2
widens the ``mode`` enum; the migration is the identity), a rolling deploy
frozen at a random point — and every process wakes on the same clock ticks
and works the same shared key, so their saves race: load through the
handle, pick a new ``{mode, last}`` (``last`` a JSON scalar from
``true, false, 1, 0, 1.0, null``: ``true`` and ``1`` are different JSON,
``1`` and ``1.0`` the same number), now and then wait ticks before saving
(a stale writer), save through the handle at the loaded revision. An
injected retryable error (``ReplyLost`` after the commit included) is
retried with the same arguments, as a production client would. A forger
(``state-forger``, out of band) now and then stores a payload the contract
refuses, under the stored version, as a buggy writer that skipped
validation would: the next load must refuse it; a reader that got the
typed refusal repairs the key (fresh state, by CAS over the refused one).

Now and then a process instead

- claim-checks an output over the inline cap, reads the pin index
  directly (the blob must be recorded, with its size and the time it was
  stored) and resolves the ref through a content port whose reads may be
  damaged below the store (``faults.content_reads``: the store's own
  verification must refuse them, typed);
- writes a short log, checkpoints its tail, deletes the log and writes it
  again differently (a log restored from another backup, the checkpoint
  store not), and asks ``usable_checkpoint`` what a recovery may use: never
  the old checkpoint, whose position no longer has its digest; nor one
  another build saved (another engine version or definition digest); nor
  (``faults.content_reads.DamagedCheckpoints``) a stored row damaged below
  the store — a digest that no longer matches, a torn body, a newer
  schema, a field of the wrong type: ``CheckpointUnusable`` of its kind.
  After each refusal it recovers from what it was given (the whole log):
  the state must be the rebuild's. Asked before any checkpoint exists, the
  answer is none; a look-alike checkpoint is refused (TypeError). The
  recovery's carry state goes through the handle on a key of its own: a
  payload the contract refuses is refused before the store is touched, and
  the handle's clear removes it.

The forger checks each forgery is refused by every build's handle (a
non-object stored under v1: v2's migration fails, typed), and one time in
``RESPELL_ONE_IN`` forges nothing: it respells a row's stored text with
whitespace (a foreign writer, ``faults.content_reads.respell_state``),
which must change no record and no load.

The oracles: ``adopt-own-write`` and ``contract-safety`` judge every
handle answer from the trace (put them in the stack, with
``contracts_for_key`` and ``is_forger``); the ``reference-model`` judges
every store answer; ``state-expectations`` (this workload's checker) holds
what only the client can see: a conflict the handle raised although the
store held its own envelope at exactly ``expected + 1`` (it should have
adopted), the pin index's record of a claim-checked blob, a resolved
payload, the checkpoint a recovery is given.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

from faults.clocks import CLOCK_SKEW_MS_MAX
from faults.content_reads import DamagedBlobs, DamagedCheckpoints, respell_state
from faults.describe import CHECKPOINT_DESCRIBERS, CONTENT_DESCRIBERS
from faults.ports import BoundPort
from model.canonical import ZERO_DIGEST
from model.claimcheck import ClaimCheck, is_claim_ref, resolve_ref
from model.conversation.checkpoints import Checkpoint, usable_checkpoint
from model.conversation.records import FencedAppendRequest, RecordEnvelope
from model.conversation.recovery import read_recovery_suffix
from model.durable_state.contracts import (FUTURE_VERSION, MIGRATION_FAILED, VALIDATION_FAILED, StateContract)
from model.durable_state.handle import DurableState, SentinelState
from model.durable_state.store import DurableStateWrite, is_revision_conflict
from model.retry import error_name
from scenarios.reference import exact_json
from scenarios.reference.jcs import JcsError, canonical
from scenarios.adversaries.client import RETRY_WAIT_MS, Expectations, Outcome, attempt
from sim.node import Node
from sim.workload import Workload
from sim.world import World

# --- the contract the processes share -----------------------------------------------

CONTRACT_ID = "adv-state.state"
KEY_PREFIX = "adv-state:"
MODES = {1: ("idle", "busy"), 2: ("idle", "busy", "draining")}
# ``true`` and ``1`` are different JSON values; ``1`` and ``1.0`` are one number.
READINGS = (True, False, 1, 0, 1.0, None)
_SCALARS = (bool, int, float, str, type(None))
# What a buggy writer stores: refused by every version's validator.
# Two are no object at all: v2's migration from v1 (``dict(payload)``) fails on them.
FORGED = ({"mode": "Idle", "last": 1}, {"mode": "idle"}, {"mode": "busy", "last": [1]},
          {"mode": "idle", "last": True, "since": 0}, {"mode": 1, "last": None}, ["idle", 1], "idle")
# One forgery in this many is no forgery: the stored text respelled as a
# foreign writer spells it (``faults.content_reads.respell_state``).
RESPELL_ONE_IN = 3


def _state_validator(modes: tuple[str, ...]) -> Callable[[Any], "str | None"]:
    def validate(payload: Any) -> str | None:
        if type(payload) is not dict:
            return f"state must be an object, got {type(payload).__name__}"
        if sorted(payload) != ["last", "mode"]:
            return f"state must hold exactly mode and last, got {sorted(payload)}"
        mode = payload["mode"]
        if type(mode) is not str or mode not in modes:
            return f"mode {mode!r} is not one of {', '.join(modes)}"
        if type(payload["last"]) not in _SCALARS:
            return f"last must be a JSON scalar, got {type(payload['last']).__name__}"
        return None

    return validate


def _widen(payload: Any) -> Any:
    return dict(payload)  # v2 only widens the enum: every v1 state is a v2 state


CONTRACTS: dict[int, StateContract] = {
    1: StateContract(CONTRACT_ID, 1, _state_validator(MODES[1])),
    2: StateContract(CONTRACT_ID, 2, _state_validator(MODES[2]), {1: _widen}),
}

# The world the processes observe holds still this many ticks.
OBSERVATION_TICKS = 4

# --- the other episodes ---------------------------------------------------------------

CLAIM_CAP_BYTES = 256
ENGINE = "state-adversary-recovery/1"
DEFINITION = "records/1"
MODEL = "model/1"
TOOLS = "tools/1"
# Another build's checkpoints: another engine, or the same engine running another definition,
# model configuration or tool set.
OTHER_ENGINE = "state-adversary-recovery/2"
OTHER_DEFINITION = "records/2"
OTHER_MODEL = "model/2"
OTHER_TOOLS = "tools/2"
SEQ_MAX = 2 ** 53 - 1
DEPLOYMENT = "loomsim-state-adversary"
# Good reads of a claim-checked blob (a reader that comes back to it), and
# the most reads to get them (a damaged one is read again).
READS_PER_BLOB = 3
RESOLVES_MAX = 12

STATS = ("state_saves", "state_adopted", "state_conflicts", "state_stale_saves", "state_replies_lost",
         "state_future_version_refused", "state_forged", "state_forged_refused", "state_repaired",
         "state_version_traps", "state_bool_int_traps", "state_stale_equal_traps", "claimcheck_indexed",
         "content_damaged_refused", "checkpoint_stale_refused", "checkpoint_used", "checkpoint_mismatch_refused",
         "checkpoint_damaged_refused", "checkpoint_recovered", "state_respelled", "state_invalid_save_refused",
         "state_cleared", "state_forged_refused_by_every_build", "checkpoint_none", "checkpoint_lookalike_refused")
# Reached in every sweep (``sometimes``); the traps are where a planted bug in
# the handle shows (an equal payload under another version, true against 1,
# an equal payload at another revision). A damaged blob read needs a seed
# whose swarm enables corrupt-row.
SOMETIMES = ("state_adopted", "state_conflicts", "state_forged_refused", "state_version_traps",
             "state_bool_int_traps", "state_stale_equal_traps", "claimcheck_indexed", "content_damaged_refused",
             "checkpoint_stale_refused", "checkpoint_used", "checkpoint_mismatch_refused", "checkpoint_recovered",
             "state_respelled", "state_invalid_save_refused", "state_cleared", "checkpoint_damaged_refused",
             "checkpoint_none", "checkpoint_lookalike_refused")


def _jcs(value: Any) -> str:
    try:
        return canonical(value)
    except JcsError:
        return "exact:" + exact_json(value)


def contracts_for_key(key: str) -> Mapping[int, StateContract]:
    """Every contract version of the adversary's keys; none for other keys."""
    return CONTRACTS if key.startswith(KEY_PREFIX) else {}


class StateExpectations(Expectations):
    """``state-expectations``: what only a client of the handle can see (it
    reads no trace events: the processes tell it, one check each)."""

    name = "state-expectations"


class _Direct:
    """The handle's step context outside a flow: each effect runs now (a
    client of the handle that is not a kernel run records nothing)."""

    __slots__ = ("run_id",)

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    async def execute(self, step_id: str, effect: Callable[[], Any], *, idempotent: bool, writes: bool = True) -> Any:
        return await effect()


class StateAdversary(Workload):
    """``nodes`` handle clients on shared keys (``slots`` of them per
    ``era_ms``, one per ``tick_ms`` tick in turn), a forger every
    ``forge_every_ms``, and a claim-check or checkpoint episode one tick in
    ``episode_one_in``."""

    name = "adversary-state"
    FORGER = "state-forger"

    def __init__(self, *, nodes: int = 3, tick_ms: int = 4_000, era_ms: int = 20_000, slots: int = 1,
                 forge_every_ms: tuple[int, int] = (60_000, 240_000), episode_one_in: int = 12) -> None:
        assert 2 <= nodes <= 8 and 10 <= tick_ms < era_ms and 1 <= slots <= 8, (nodes, tick_ms, era_ms, slots)
        assert 0 < forge_every_ms[0] <= forge_every_ms[1] and episode_one_in >= 2
        self.names = tuple(f"state-{i + 1}" for i in range(nodes))
        self.tick_ms = tick_ms
        self.era_ms = era_ms
        self.slots = slots
        self.forge_every_ms = forge_every_ms
        self.episode_one_in = episode_one_in
        self.checker = StateExpectations()
        self.stats: dict[str, int] = dict.fromkeys(STATS, 0)

    @classmethod
    def is_forger(cls, node_label: str) -> bool:
        return node_label.split("#", 1)[0] == cls.FORGER

    contracts_for_key = staticmethod(contracts_for_key)

    def count(self, stat: str, n: int = 1) -> None:
        self.stats[stat] += n

    def key_at(self, now_ms: int) -> str:
        """The shared key of the tick at ``now_ms`` (every process works the same one)."""
        tick = now_ms // self.tick_ms
        return f"{KEY_PREFIX}{tick % self.slots}:e{now_ms // self.era_ms}"

    # -- phases ----------------------------------------------------------------------

    def setup(self, world: World) -> None:
        self.world = world
        for name in self.names:
            world.add_node(name, self._start, role="client")
        self.forger = world.add_node(self.FORGER, lambda node: None, role="operator")

    def _start(self, node: Node) -> None:
        process = _Process(self, self.world, node)
        self.world.runtime.spawn_on(node, "state-adversary", process.main())

    def start(self, world: World) -> None:
        ds = world.system.ports_for(self.forger, faults=False).ds
        rng = world.streams.fork("workload/adversary-state/forger")
        world.runtime.spawn_on(self.forger, "forger", self._forge(world, ds, rng))

    async def _forge(self, world: World, ds: Any, rng: Any) -> None:
        """A buggy writer: stores what no contract version accepts, under the stored version."""
        runtime = world.runtime
        while True:  # bounded by the heal instant
            await runtime.sleep_ms(rng.between(*self.forge_every_ms))
            if runtime.now_ms() >= world.heal_at_ms:
                return
            key = self.key_at(runtime.now_ms() + rng.below(self.tick_ms * self.slots))
            record = await ds.load(key)
            if record is None:
                continue
            if rng.below(RESPELL_ONE_IN) == 0:
                await self._respell(world, ds, key, record)
                continue
            try:
                await ds.save(key, DurableStateWrite(record.contract_version, FORGED[rng.below(len(FORGED))]),
                              record.revision)
            except Exception as error:  # noqa: BLE001 - a raced forgery is just not made
                if not is_revision_conflict(error):
                    raise
                continue
            self.count("state_forged")
            await self._refused_by_every_build(world, ds, key, record)

    async def _refused_by_every_build(self, world: World, ds: Any, key: str, record: Any) -> None:
        """The forgery just stored at ``record.revision + 1`` (under
        ``record.contract_version``): a load through every build's handle
        refuses it, typed (a newer one's version: future-version; else
        validation-failed, or migration-failed where the migration cannot
        take it). Unless someone repaired it meanwhile."""
        probe = world.probe_for(self.forger)
        refused = 0
        for version, contract in CONTRACTS.items():
            handle = DurableState(contract, key, ds, probe=probe)
            try:
                loaded = await handle.load(_Direct(f"{self.FORGER}/check"))
                error: BaseException | None = None
            except Exception as raised:  # noqa: BLE001 - judged below
                loaded, error = None, raised
            if loaded is not None and loaded["revision"] != record.revision + 1:
                return  # repaired (or written) meanwhile
            kind = getattr(error, "kind", None)
            want = (FUTURE_VERSION,) if record.contract_version > version else (VALIDATION_FAILED, MIGRATION_FAILED)
            refused += self.checker.expect(
                error_name(error) == "StateContractMismatchError" and kind in want,
                f"{self.FORGER}: forged {key!r} r{record.revision + 1} (v{record.contract_version}); a load by the "
                f"v{version} build answered {loaded!r:.160} / {error!r:.160}: it must refuse it ({' or '.join(want)})",
                (key,))
        if refused == len(CONTRACTS):
            self.count("state_forged_refused_by_every_build")

    async def _respell(self, world: World, ds: Any, key: str, record: Any) -> None:
        """A foreign writer: the same value under ``key``, its stored text
        spelled with whitespace around it. Nothing any reader sees may change:
        the store's own view of every row, and a load of ``key``."""
        store = world.system.unwrapped_store(self.forger, "ds")
        before = store.snapshot()
        if not respell_state(store, key):
            return
        after = store.snapshot()
        self.count("state_respelled")
        same = len(store) == len(before) and [(k, r.contract_version, r.revision, _jcs(r.payload))
                                              for k, r in after.items()] == [
            (k, r.contract_version, r.revision, _jcs(r.payload)) for k, r in before.items()]
        self.checker.expect(same, f"{self.FORGER}: respelling the stored text of {key!r} with whitespace changed "
                                  "the store's records", (key,))
        again = await ds.load(key)
        if again is not None and again.revision != record.revision:
            return  # written meanwhile (a load is a port call: another process may run first)
        self.checker.expect(again is not None and again.contract_version == record.contract_version
                            and _jcs(again.payload) == _jcs(record.payload),
                            f"{self.FORGER}: {key!r} held r{record.revision} v{record.contract_version} "
                            f"{_jcs(record.payload):.120}; its text respelled with whitespace, a load answered "
                            f"{again!r:.200}", (key,))

    def metrics(self) -> dict[str, Any]:
        return dict(self.stats)


class _Process:
    """One incarnation of one client: its build, its ports, its stream."""

    def __init__(self, workload: StateAdversary, world: World, node: Node) -> None:
        self.w = workload
        self.world = world
        self.node = node
        self.label = node.label
        self.runtime = world.runtime_for(node)  # its machine's clock (the true clock without clock faults)
        self.rng = world.streams.fork(f"workload/adversary-state/{node.label}")
        # The build this process runs, and how it spells a reading: redrawn
        # each era (a rolling deploy, rolled back and forward again; the
        # process holds nothing else).
        self.build = 1 + self.rng.below(2)
        self.era = -1
        # How its build spells a reading of one: a flag, an int, a float.
        self.style = self.rng.below(3)
        system = world.system
        self.ports = system.ports_for(node)
        self.probe = world.probe_for(node)
        # The content port of this process reads through damaged-blob faults
        # (below the store's own verification). The adapter is this
        # incarnation's own (its connection, on SQLite).
        raw = system.unwrapped_store(node, "content")
        self.content = BoundPort(world, node, "content", DamagedBlobs(raw, world, node, world.plan), world.plan,
                                 CONTENT_DESCRIBERS, system.port_stats, system.restart_delay_ms)
        # Its checkpoint reads likewise: a row damaged below the store's own decoding.
        self.checkpoint_reads = DamagedCheckpoints(system.unwrapped_store(node, "checkpoints"), world, node, world.plan)
        self.checkpoints = BoundPort(world, node, "checkpoints", self.checkpoint_reads, world.plan,
                                     CHECKPOINT_DESCRIBERS, system.port_stats, system.restart_delay_ms)
        self._serial = 0

    def _next(self) -> int:
        self._serial += 1
        return self._serial

    def now(self) -> int:
        return self.runtime.now_ms()

    def expect(self, ok: bool, message: str, *related: str) -> bool:
        return self.w.checker.expect(ok, f"{self.label} (v{self.build}): {message}", related)

    async def attempt(self, fn: Callable[[], Any]) -> Outcome:
        """One logical call: injected retryable errors retried, same arguments."""
        return await attempt(fn, self.runtime.sleep_ms, lambda: self.rng.between(*RETRY_WAIT_MS))

    async def main(self) -> None:
        heal_at_ms = self.world.heal_at_ms
        tick_ms = self.w.tick_ms
        while True:  # bounded by the heal instant, or the process dies
            # Every process wakes on the same ticks: their saves race.
            wake_ms = (self.now() // tick_ms + 1) * tick_ms + self.rng.below(20)
            await self.runtime.sleep_ms(wake_ms - self.now())
            if self.now() >= heal_at_ms:
                return
            era = self.now() // self.w.era_ms
            if era != self.era:
                self.era = era
                self.build = 1 + self.rng.below(2)
                self.style = self.rng.below(3)
            roll = self.rng.below(self.w.episode_one_in)
            if roll == 0:
                await self.claim_check()
            elif roll == 1:
                await self.checkpoint_after_restore()
            else:
                await self.state_round(self.w.key_at(self.now()))

    # -- durable state through the handle ----------------------------------------------

    def observed(self) -> tuple[str, int | None]:
        """What every process sees of the world now: one (mode, reading)
        per phase of ``OBSERVATION_TICKS`` ticks (a stream of its own per
        phase: the same for every process, whatever each has drawn)."""
        phase = self.now() // (self.w.tick_ms * OBSERVATION_TICKS)
        rng = self.world.streams.fork(f"workload/adversary-state/observed/{phase}")
        return MODES[1][rng.below(2)], (0, 1, None)[rng.below(3)]

    def new_payload(self) -> dict:
        """Mostly what the process observed, the reading spelled its way
        (``true``, ``1`` or ``1.0``): racing writers often write equal
        payloads (another build's, or the same number spelled another way);
        now and then something of its own."""
        if self.rng.below(4) == 0:
            modes = MODES[self.build]
            return {"mode": modes[self.rng.below(len(modes))], "last": READINGS[self.rng.below(len(READINGS))]}
        mode, reading = self.observed()
        return {"mode": mode, "last": None if reading is None else (bool(reading), reading, float(reading))[self.style]}

    async def state_round(self, key: str) -> None:
        """Read, modify, write through the handle; after a conflict, now and
        then read again and retry at once (a client's conflict loop)."""
        for _ in range(1 + self.rng.below(2)):
            if not await self._read_modify_write(key):
                return

    async def _read_modify_write(self, key: str) -> bool:
        """One load and save; True when it ended in a conflict."""
        handle = DurableState(CONTRACTS[self.build], key, self.ports.ds, probe=self.probe)
        ctx = _Direct(f"{self.label}/{self._next()}")
        loaded = await self.attempt(lambda: handle.load(ctx))
        if not loaded.ok:
            await self._refused(handle, ctx, key, loaded)
            return False
        expected = 0 if loaded.value is None else loaded.value["revision"]
        payload = self.new_payload()
        stale = self.rng.below(5) == 0
        if stale:
            self.w.count("state_stale_saves")
            await self.runtime.sleep_ms(self.rng.between(2 * self.w.tick_ms, 4 * self.w.tick_ms))
        else:
            await self.runtime.sleep_ms(self.rng.below(40))
        fired = self.world.faults_fired
        saved = await self.attempt(lambda: handle.save(ctx, payload, expected))
        self.w.count("state_replies_lost", saved.lost)
        if saved.ok:
            self.w.count("state_saves")
            if saved.value["adopted"]:
                self.w.count("state_adopted")
            self.expect(saved.value["revision"] == expected + 1 and saved.value["contractVersion"] == self.build,
                        f"save of {key!r} at r{expected} answered {saved.show()}", key)
            return False
        if not is_revision_conflict(saved.error):
            self.expect(False, f"save of {key!r} at r{expected} failed: {saved.show()}", key)
            return False
        self.w.count("state_conflicts")
        await self._after_conflict(key, expected, payload, saved.error, fired)
        return True

    async def _after_conflict(self, key: str, expected: int, payload: dict, conflict: Any, fired: int) -> None:
        """What the store holds after a conflict the handle raised: if it is
        this save's envelope at exactly ``expected + 1``, the handle should
        have adopted it. (Judged only when no fault fired since the save
        began: then nothing ran between the handle's reads and this one.)"""
        out = await self.attempt(lambda: self.ports.ds.load(key))
        record = out.value
        if not out.ok or record is None:
            return
        same_content = _jcs(record.payload) == _jcs(payload)
        if record.revision == expected + 1:
            if record.contract_version != self.build and same_content:
                self.w.count("state_version_traps")
            elif record.contract_version == self.build and not same_content and record.payload == payload:
                self.w.count("state_bool_int_traps")  # equal in Python (True == 1), not as JSON
            elif record.contract_version == self.build and same_content and self.world.faults_fired == fired:
                self.expect(False, f"save of {key!r} at r{expected} raised {error_name(conflict)} (actual "
                                   f"r{getattr(conflict, 'actual', '?')}), but the store holds this very envelope "
                                   f"(v{self.build}, {_jcs(payload)}) at exactly r{expected + 1}: adopt-own-write "
                                   "should have adopted it", key)
        elif record.revision > expected + 1 and record.contract_version == self.build and same_content:
            self.w.count("state_stale_equal_traps")

    async def _refused(self, handle: DurableState, ctx: Any, key: str, loaded: Outcome) -> None:
        kind = getattr(loaded.error, "kind", None)
        if error_name(loaded.error) != "StateContractMismatchError":
            self.expect(False, f"load of {key!r} failed: {loaded.show()}", key)
        elif kind == FUTURE_VERSION:
            self.w.count("state_future_version_refused")  # a newer build's state: leave it be
        elif kind in (VALIDATION_FAILED, MIGRATION_FAILED):
            if loaded.error.stored_version == self.build:
                self.w.count("state_forged_refused")
            # The repair: fresh state written over the refused one, by CAS at
            # its revision (not a clear: a stale writer that loaded the key
            # before a clear could land on the re-created revision 1 — the
            # store's ABA — over state of a newer build).
            raw = await self.attempt(lambda: self.ports.ds.load(key))
            if not self.expect(raw.ok, f"load of {key!r} for its repair failed: {raw.show()}", key):
                return
            if raw.value is None:
                return
            fresh = self.new_payload()
            repaired = await self.attempt(lambda: handle.save(ctx, fresh, raw.value.revision))
            if repaired.ok:
                self.w.count("state_repaired")
            elif not is_revision_conflict(repaired.error):  # a conflict: someone else wrote (or repaired) first
                self.expect(False, f"repair of {key!r} at r{raw.value.revision} failed: {repaired.show()}", key)
        else:
            self.expect(False, f"load of {key!r} refused as {kind}: every version has a path", key)

    # -- claim-check, the pin index, damaged blob reads -----------------------------------

    async def claim_check(self) -> None:
        check = ClaimCheck(self.content, self.ports.pins, now_ms=self.now, cap_bytes=CLAIM_CAP_BYTES)
        n = self._next()
        output = {"by": self.label, "n": n, "reading": READINGS[n % len(READINGS)],
                  "pad": "s" * self.rng.between(CLAIM_CAP_BYTES, 4 * CLAIM_CAP_BYTES)}
        started_ms = self.now()
        recorded = await self.attempt(lambda: check.on_output("state-tool", f"{self.label}/step-{n}", output))
        if not self.expect(recorded.ok and is_claim_ref(recorded.value),
                           f"claim-check of a large output recorded {recorded.show()}"):
            return
        value = recorded.value
        ref = value["ref"]
        blob = await self.attempt(lambda: self.ports.pins.blob(ref))
        # Stamped by this node's clock between the two readings; a clock the
        # contract tolerates (within 1 s of true time) may read up to twice
        # that less later than earlier (a sync, a step back): that far, no further.
        slack_ms = 0 if self.world.clocks is None else CLOCK_SKEW_MS_MAX
        if self.expect(blob.ok and blob.value is not None and blob.value.size_bytes == value["size"]
                       and started_ms - slack_ms <= blob.value.stored_at_ms <= self.now() + slack_ms,
                       f"the pin index holds {blob.show()} for claim-checked {ref} ({value['size']} bytes, stored "
                       f"between {started_ms} and {self.now()} ms): retention works from that record", ref):
            self.w.count("claimcheck_indexed")
        reads = 0
        for _ in range(RESOLVES_MAX):  # a few good reads, each damaged one read again
            fired = self.world.faults_fired
            back = await self.attempt(lambda: resolve_ref(self.content, value))
            if back.ok:
                if not self.expect(_jcs(back.value) == _jcs(output), f"{ref} resolved to another value", ref):
                    break
                reads += 1
                if reads == READS_PER_BLOB:
                    break
                continue
            damaged = self.world.faults_fired != fired
            if not self.expect(damaged and error_name(back.error) == "ContentCorrupted"
                               and getattr(back.error, "ref", None) == ref,
                               f"resolve of {ref} failed: {back.show()} (damaged read: {damaged}); only a damaged "
                               "read may fail, as ContentCorrupted", ref):
                break
            self.w.count("content_damaged_refused")
        # Done with it: the blob and its index row go (memory stays bounded).
        await self.attempt(lambda: self.content.delete(ref))
        await self.attempt(lambda: self.ports.pins.forget(ref))

    # -- a checkpoint that outlived its log ------------------------------------------------

    async def _append_batches(self, conv: str, sizes: tuple[int, ...], tag: str) -> dict[int, str] | None:
        """Append batches of ``sizes`` records; the boundaries written, or None."""
        producer = self.label
        tail = (0, ZERO_DIGEST)
        boundaries = {0: ZERO_DIGEST}
        for size in sizes:
            batch = f"{conv}/{tag}-{self._next()}"
            records = tuple(RecordEnvelope(f"{batch}/r{i}", "model-output", 1, self.now(), DEPLOYMENT,
                                           {"tag": tag, "i": i, "reading": READINGS[i % len(READINGS)]}, producer, 1)
                            for i in range(size))
            request = FencedAppendRequest(conv, batch, producer, 1, tail[0], tail[1], records)
            out = await self.attempt(lambda: self.ports.log.append(request))
            if not self.expect(out.ok, f"append to {conv}: {out.show()}", conv):
                return None
            tail = (out.value.last_seq, out.value.tail_digest)
            boundaries[tail[0]] = tail[1]
        return boundaries

    async def _usable(self, conv: str, at_or_before_seq: int = SEQ_MAX) -> tuple[Outcome, tuple[str, str] | None]:
        """What ``usable_checkpoint`` gives a recovery, and the damage (how,
        the refusal it calls for) when the stored row it read was damaged
        below the store: then it must be refused, typed, with that kind."""
        damaged = self.checkpoint_reads.damaged
        decision = await self.attempt(lambda: usable_checkpoint(self.checkpoints, self.ports.log, conv,
                                                                at_or_before_seq, engine_version=ENGINE,
                                                                definition_digest=DEFINITION, model_digest=MODEL,
                                                                tool_digest=TOOLS))
        damage = self.checkpoint_reads.last_damage if self.checkpoint_reads.damaged != damaged else None
        if damage is not None and self.expect(
                not decision.ok and error_name(decision.error) == "CheckpointUnusable"
                and getattr(decision.error, "kind", None) == damage[1],
                f"the latest checkpoint of {conv} was read damaged below the store ({damage[0]}), and a recovery "
                f"was given {_given(decision)}: a damaged checkpoint must be refused as CheckpointUnusable"
                f"({damage[1]}), never used", conv):
            self.w.count("checkpoint_damaged_refused")
        return decision, damage

    async def _recover(self, conv: str, decision: Outcome, damage: tuple[str, str] | None, records: int) -> None:
        """Recover ``conv`` from what the recovery was given (a checkpoint and
        the records after it, or the whole log): the state it reaches must be
        the one a rebuild from the log reaches (``records`` records). (Run
        after a refusal: a damaged row, another build's checkpoint.)"""
        if not decision.ok and damage is None:
            return  # already judged
        given = decision.value.checkpoint if decision.ok else None
        start = (0, ZERO_DIGEST) if given is None else (given.covered_seq, given.tail_digest)
        for _ in range(RESOLVES_MAX):  # a read damaged above the store is caught and read again
            fired = self.world.faults_fired
            out = await self.attempt(lambda: read_recovery_suffix(self.ports.log, conv, after_seq=start[0],
                                                                  after_digest=start[1]))
            if out.ok:
                break
            if not self.expect(self.world.faults_fired != fired and error_name(out.error) == "HistoryCorrupted",
                               f"recovery read of {conv} after seq {start[0]} failed: {out.show()}", conv):
                return
        else:
            return
        snapshot = None if given is None else given.snapshot
        base = 0 if given is None else snapshot.get("records") if isinstance(snapshot, dict) else None
        state = None if base is None else base + len(out.value.records)
        if self.expect(state == records,
                       f"recovery of {conv} from {_given(decision)} reached {state!r} records (snapshot "
                       f"{snapshot!r:.80} + {len(out.value.records)} read after seq {start[0]}); a rebuild from the "
                       f"log reaches {records}", conv):
            self.w.count("checkpoint_recovered")

    async def checkpoint_after_restore(self) -> None:
        conv = f"ck-{self.node.name}-{self.label}-{self._next()}"
        producer = self.label
        sizes = tuple(1 + self.rng.below(3) for _ in range(2 + self.rng.below(2)))
        if not self.expect((await self.attempt(lambda: self.ports.log.materialize(conv, producer, 1))).ok,
                           f"materialize({conv})", conv):
            return
        boundaries = await self._append_batches(conv, sizes, "first")
        if boundaries is None:
            return
        covered = max(boundaries)
        none, damage = await self._usable(conv)
        if self.expect(none.ok and none.value.checkpoint is None and none.value.reason == "none",
                       f"usable checkpoint of {conv} before any was saved: {_given(none)}", conv):
            self.w.count("checkpoint_none")
        checkpoint = Checkpoint(conv, f"sub-{conv}", covered, boundaries[covered], ENGINE, DEFINITION, MODEL, TOOLS,
                                1, {"records": covered}, self.now())
        lookalike = LookalikeCheckpoint(*attrs.astuple(checkpoint, recurse=False))
        refused = await self.attempt(lambda: self.checkpoints.save(lookalike))
        if self.expect(refused.named("TypeError"), f"save of a look-alike checkpoint of {conv}: {refused.show()}",
                       conv):
            self.w.count("checkpoint_lookalike_refused")
        saved = await self.attempt(lambda: self.checkpoints.save(checkpoint))
        if not self.expect(saved.ok, f"checkpoint of {conv} at {covered}: {saved.show()}", conv):
            return
        first, damage = await self._usable(conv)
        if damage is None and self.expect(first.ok and first.value.checkpoint is not None
                                          and first.value.checkpoint.covered_seq == covered,
                                          f"usable checkpoint of {conv} right after saving one at {covered}: "
                                          f"{first.show()}", conv):
            self.w.count("checkpoint_used")
        if damage is not None:
            await self._recover(conv, first, damage, covered)
        await self.carry_state(conv, covered)
        # The log is restored from another backup (the checkpoints are not):
        # the same id, a different history — shorter, as long, or longer.
        if not self.expect((await self.attempt(lambda: self.ports.log.delete_conversation(conv))).ok,
                           f"delete_conversation({conv})", conv):
            return
        if not self.expect((await self.attempt(lambda: self.ports.log.materialize(conv, producer, 1))).ok,
                           f"materialize({conv}) again", conv):
            return
        shape = self.rng.below(3)
        again = (sizes[:-1] if shape == 0 else sizes if shape == 1 else sizes + (1,)) or (1,)
        rewritten = await self._append_batches(conv, again, "second")
        if rewritten is not None:
            decision, damage = await self._usable(conv)
            if damage is None and self.expect(
                    decision.ok and decision.value.checkpoint is None and decision.value.reason == "digest-mismatch",
                    f"after {conv} was rewritten (its digest at {covered} now {rewritten.get(covered, 'none')!s:.12}, "
                    f"the checkpoint's {boundaries[covered]:.12}), a recovery was given {_given(decision)}: a "
                    "checkpoint whose position no longer has its digest must not be used", conv):
                self.w.count("checkpoint_stale_refused")
            if damage is not None:
                await self._recover(conv, decision, damage, max(rewritten))
            await self._another_build(conv, rewritten, len(again))
        await self.attempt(lambda: self.ports.log.delete_conversation(conv))

    async def _another_build(self, conv: str, boundaries: dict[int, str], batches: int) -> None:
        """A checkpoint another build saved at the log's tail (another
        engine, or this engine under another definition, model
        configuration or tool set; its snapshot in that build's format):
        valid for the log, never for this build."""
        tail = max(boundaries)
        reason = ("engine-version", "definition-digest", "model-digest", "tool-digest")[self._serial % 4]
        engine = OTHER_ENGINE if reason == "engine-version" else ENGINE
        definition = OTHER_DEFINITION if reason == "definition-digest" else DEFINITION
        model = OTHER_MODEL if reason == "model-digest" else MODEL
        tools = OTHER_TOOLS if reason == "tool-digest" else TOOLS
        checkpoint = Checkpoint(conv, f"sub-{conv}", tail, boundaries[tail], engine, definition, model, tools, 1,
                                {"batches": batches}, self.now())
        saved = await self.attempt(lambda: self.checkpoints.save(checkpoint))
        built = f"{engine} under {definition} / {model} / {tools}"
        if not self.expect(saved.ok, f"checkpoint of {conv} at {tail} by {built}: {saved.show()}", conv):
            return
        decision, damage = await self._usable(conv, tail)
        if damage is None and self.expect(
                decision.ok and decision.value.checkpoint is None and decision.value.reason == reason,
                f"the latest checkpoint of {conv} was saved by {built}, and a recovery by "
                f"{ENGINE} under {DEFINITION} / {MODEL} / {TOOLS} was given {_given(decision)}: it must be refused ({reason})", conv):
            self.w.count("checkpoint_mismatch_refused")
        await self._recover(conv, decision, damage, tail)

    # -- carry state of a recovered conversation, through the handle --------------------

    async def carry_state(self, conv: str, records: int) -> None:
        """The recovery's carry state on a key of its own: a save the
        contract refuses is refused before the store is touched; the state is
        saved, then cleared with its conversation."""
        key = f"{KEY_PREFIX}carry:{conv}"
        contract = CONTRACTS[self.build]
        handle = DurableState(contract, key, self.ports.ds, probe=self.probe)
        ctx = _Direct(f"{self.label}/{self._next()}")
        bad = await self.attempt(lambda: handle.save(ctx, {"mode": "busy", "last": [records]}, 0))
        if self.expect(not bad.ok and error_name(bad.error) == "StateContractMismatchError"
                       and getattr(bad.error, "kind", None) == VALIDATION_FAILED,
                       f"save of {key!r} with a list as its reading answered {bad.show()}: the contract refuses it "
                       "(validation-failed)", key):
            self.w.count("state_invalid_save_refused")
        saved = await self.attempt(lambda: handle.save(ctx, {"mode": "idle", "last": records}, 0))
        if not self.expect(saved.ok and saved.value["revision"] == 1, f"save of {key!r} at r0: {saved.show()}", key):
            return
        cleared = await self.attempt(lambda: handle.clear(ctx))
        gone = await self.attempt(lambda: handle.load(ctx))
        if self.expect(cleared.ok and gone.ok and gone.value is None,
                       f"clear of {key!r} answered {cleared.show()}, a load after it {gone.show()}", key):
            self.w.count("state_cleared")
        # A sentinel's state is named after its schedule (its schedule-scoped key): this
        # contract is a sentinel's of schedule ``adv-state`` only.
        named = SentinelState("adv-state", contract, self.ports.ds).key == "sentinel:adv-state"
        try:
            SentinelState("adv-carry", contract, self.ports.ds)
            refused = False
        except ValueError:
            refused = True
        self.expect(named and refused, f"SentinelState naming: adv-state's key right: {named}, a contract named "
                                       f"{CONTRACT_ID!r} refused for schedule adv-carry: {refused}")


@attrs.frozen
class LookalikeCheckpoint:
    """A checkpoint's attributes (what the trace describes), not its type."""

    conversation_id: str
    submission_id: str
    covered_seq: int
    tail_digest: str
    engine_version: str
    definition_digest: str
    model_digest: str
    tool_digest: str
    schema_version: int
    snapshot: object
    created_at_ms: int

    def to_json(self) -> dict:
        return Checkpoint(*attrs.astuple(self, recurse=False)).to_json()


def _given(decision: Outcome) -> str:
    if not decision.ok:
        return decision.show()
    given = decision.value.checkpoint
    if given is None:
        return f"no checkpoint (reason {decision.value.reason})"
    return f"the checkpoint at {given.covered_seq} ({given.tail_digest:.12}, {given.engine_version})"
