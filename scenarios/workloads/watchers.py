"""Watchers: clients that follow conversations with progress waits, as a UI
streams a conversation to its user (STORE-014, ``model.progress``).

One watcher process per conversation slot (the slots the submitters write
to: their ``conversation_id(slot, generation)``). It follows each generation of its slot
for ``follow_generations`` lifetimes from the generation's start (a user
keeps an older tab open a while), one task per conversation, each a loop
of progress waits from its cursor: a wait returns the record after the
cursor, which the watcher delivers (a ``watch.delivered`` event) before
waiting again. Nothing here polls: between records a task is parked on
its registration, woken by a notification, or reconnects after
``reconnect_ms`` (minutes).

The watchers' store calls go through the run's port faults, so they crash
and restart like every process; a restarted watcher follows from 0 (its
cursor is in memory, as a reloaded page's is): what it delivers again must
again be the log, in order. The network between a watcher and the stores
takes time both ways (``transit_ms``, per call, from the process's own
stream): a registration's round trip, and a read's reply on its way back.
That window is where a notification lands between the read and the park.
Watchers work through the settle window: at the end each one has caught up.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from faults.chaos import NodeKills
from faults.events import WatchClosed, WatchDelivered, WatchStarted
from model.progress import wait_for_progress
from model.retry import error_name, is_retryable
from sim.node import Node
from sim.workload import Workload
from sim.world import World

# Records one follow delivers: a conversation's log is bounded by its
# lifetime's work; more is a runaway, not a workload.
DELIVERED_MAX = 1_000_000
# Consecutive store errors one follow retries before it gives up (each is a
# typed, retryable failure; a process's loop otherwise ends when it dies).
ERRORS_MAX = 100_000


def fingerprint(record: Any) -> str:
    """A record's fingerprint as a watcher delivers it and the oracle
    recomputes it from the log: position, batch, id and payload (stdlib
    JSON, not the model's canonical form)."""
    envelope = record.envelope
    text = json.dumps([record.seq, record.batch_id, envelope.record_id, envelope.family, envelope.payload],
                      sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class _SlowReplies:
    """A log whose read replies take ``transit_ms()`` to come back."""

    def __init__(self, log: Any, runtime: Any, transit_ms: Any) -> None:
        self._log = log
        self._runtime = runtime
        self._transit_ms = transit_ms

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    async def read(self, conversation_id: str, after_seq: int, limit: int) -> Any:
        records = await self._log.read(conversation_id, after_seq, limit)
        delay_ms = self._transit_ms()
        if delay_ms:
            await self._runtime.sleep_ms(delay_ms)
        return records


class Watchers(Workload):
    name = "watchers"

    def __init__(self, *, following: Any, slots: int, conversation_lifetime_ms: int, reconnect_ms: int,
                 follow_generations: int = 2, transit_ms: tuple[int, int] = (0, 300), retry_ms: int = 2_000) -> None:
        """``following``: the submitters whose conversations the watchers
        follow (its ``conversation_id(slot, generation)``)."""
        assert slots >= 1 and conversation_lifetime_ms > 0 and reconnect_ms > 0 and follow_generations >= 1
        assert 0 <= transit_ms[0] <= transit_ms[1] and retry_ms > 0, (transit_ms, retry_ms)
        self.following = following
        self.slots = slots
        self.conversation_lifetime_ms = conversation_lifetime_ms
        self.reconnect_ms = reconnect_ms
        self.follow_generations = follow_generations
        self.transit_ms = transit_ms
        self.retry_ms = retry_ms
        self.waits = self.immediate = self.woken = self.false_wakes = self.reconnects = self.delivered = 0
        self.retries = self.restarts = 0

    @property
    def names(self) -> list[str]:
        """Its processes, one a slot: ``{instance}/watcher-{slot}``."""
        return [self.node_name(f"watcher-{slot}") for slot in range(self.slots)]

    def nodes(self) -> list[str]:
        return self.names

    def checks(self) -> list[Any]:
        """Progress waits, judged on the conversations they follow."""
        from scenarios.invariants.progress_waits import ProgressWaits  # it reads this module's fingerprint
        return [ProgressWaits(reconnect_ms=self.reconnect_ms).scoped(self.following.name)]

    def setup(self, world: World) -> None:
        self.world = world
        for slot, name in enumerate(self.names):
            world.add_node(name, lambda node, slot=slot: self._start(node, slot), role="client")

    def metrics(self) -> dict[str, Any]:
        return {"progress_waits": self.waits, "progress_waits_immediate": self.immediate,
                "progress_wait_woken": self.woken, "progress_false_wakes": self.false_wakes,
                "progress_reconnects": self.reconnects, "progress_records_delivered": self.delivered,
                "progress_watch_retries": self.retries, "progress_watch_restarts": self.restarts}

    def _start(self, node: Node, slot: int) -> None:
        world = self.world
        if node.incarnation > 1:
            self.restarts += 1
        rng = self.stream_for(world, f"watch-transit/{node.label}")
        low, high = self.transit_ms

        def transit_ms() -> int:
            return rng.between(low, high)

        ports = world.system.ports_for(node)
        log = _SlowReplies(ports.log, world.runtime, transit_ms)
        notifier = world.system.notifier_port(node, transit_ms=transit_ms)
        world.runtime.spawn_on(node, f"watch-slot-{slot}", self._slot(node, slot, log, notifier))

    async def _slot(self, node: Node, slot: int, log: Any, notifier: Any) -> None:
        """Opens a follow per generation of the slot (a timer per lifetime: the
        slot's next conversation starts then; no store is polled)."""
        runtime = self.world.runtime
        lifetime_ms = self.conversation_lifetime_ms
        now_generation = runtime.now_ms() // lifetime_ms
        # A restart reopens every conversation still in its follow window.
        generation = max(0, now_generation - self.follow_generations + 1)
        while True:  # one generation per lifetime; ends when the process dies
            if generation > now_generation:
                await runtime.sleep_until_ms(generation * lifetime_ms)
            until_ms = (generation + self.follow_generations) * lifetime_ms
            conversation_id = self.following.conversation_id(slot, generation)
            runtime.spawn_on(node, f"watch:{conversation_id}",
                             self._follow(node, log, notifier, conversation_id, until_ms))
            generation += 1

    async def _follow(self, node: Node, log: Any, notifier: Any, conversation_id: str, until_ms: int) -> None:
        world = self.world
        runtime = world.runtime
        probe = world.probe_for(node)
        cursor = 0
        probe.emit(WatchStarted.kind, **{WatchStarted.watcher: node.name, WatchStarted.conversation: conversation_id,
                                         WatchStarted.from_seq: cursor, WatchStarted.until_ms: until_ms})
        errors = 0
        for _ in range(DELIVERED_MAX):
            try:
                progress = await wait_for_progress(log, notifier, runtime, conversation_id, cursor,
                                                   reconnect_ms=self.reconnect_ms, until_ms=until_ms)
            except Exception as error:
                if not is_retryable(error):
                    raise
                errors += 1
                assert errors <= ERRORS_MAX, (conversation_id, errors)
                self.retries += 1
                probe.emit("watch.retry", error=error_name(error))
                await runtime.sleep_ms(self.retry_ms)
                continue
            errors = 0
            self.waits += 1
            self.immediate += progress.immediate
            self.woken += bool(progress.records) and progress.wakes > 0
            self.false_wakes += progress.false_wakes
            self.reconnects += progress.reconnects
            if not progress.records:
                probe.emit(WatchClosed.kind, **{WatchClosed.watcher: node.name,
                                                WatchClosed.conversation: conversation_id,
                                                WatchClosed.delivered_seq: cursor})
                return
            for record in progress.records:
                # Delivered as received: the oracle judges order and content.
                cursor = record.seq
                self.delivered += 1
                probe.emit(WatchDelivered.kind, **{
                    WatchDelivered.watcher: node.name, WatchDelivered.conversation: conversation_id,
                    WatchDelivered.seq: record.seq, WatchDelivered.record_id: record.envelope.record_id,
                    WatchDelivered.fingerprint: fingerprint(record)})
        raise AssertionError(f"{conversation_id}: more than {DELIVERED_MAX} records delivered")


class WatcherKills(NodeKills):
    """kill -9 of a watcher (a closed tab, a crashed browser): it restarts and
    follows again from 0."""

    name = "watcher-kills"


__all__ = ["WatcherKills", "Watchers", "fingerprint"]
