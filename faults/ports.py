"""Crashy, traced ports: a model store as one node sees it.

``bind_port`` wraps a store for one node. Every call:

1. is refused if the node is dead (``NodeDeadError``) — a crashed process
   touches nothing, not even from a ``finally`` block; meets the node's
   partition if one cuts it from this port (``faults.partitions``: refused,
   hung to its timeout, or let through with its reply held);
2. counts a hit of its site (``ds.save``, ``kernel.append_step``, ...) and may
   crash the node *before* the call (``crash-before-call``);
3. runs against the real store (atomic: store calls never suspend);
4. is traced with what went in and what came out — the trace digest covers
   what the system saw, not just what the scheduler did;
5. is shown, as it committed, to the run's port observers (a ``PortCall``:
   the reference-model oracle checks every answer against its own model);
6. may crash the node *after* the commit, before the reply reaches the
   caller (``ack-lost``), or lose the reply while the caller lives on: it
   sees ``ReplyLost`` (retryable) and sends the same call again
   (``reply-lost``, the commonest case in production);
   a call may also be held until it lands on a lease expiry or a period
   boundary (``boundary-delay``, ``faults.timing``);
7. beyond the contract (opt-in: a ``surgery`` from ``faults.beyond``), may
   break the store's promise about the write it just acknowledged
   (``lost-write``, ``torn-batch``).
"""
from __future__ import annotations

import inspect
import weakref
from typing import Any, Callable, Mapping

import attrs

from faults.events import COVERED_FIELDS, DETAIL, ERROR, StoreNow
from faults.kinds import (
    ACK_LOST,
    BEYOND_CONTRACT_KINDS,
    BOUNDARY_DELAY,
    CRASH_BEFORE_CALL,
    FAILPOINT_CRASH,
    LATENCY,
    PORT_FAULT_KINDS,
    REPLY_LOST,
    TRANSIENT_ERROR,
    WRITE_CONTENTION,
)
from faults import partitions, sqlite_lock
from model.conversation.records import ConversationStoreError
from model.failpoints import FailpointFired
from model.ledger.records import LedgerStoreError
from model.retry import is_retryable
from model.sqlite_db import SqliteWriteContention

# Port methods that only read: a busy SQLite writer never refuses them (WAL).
READ_METHODS = frozenset({
    "load", "get", "get_by_idempotency_key", "read", "inspect_tail", "lookup_batch", "scan_nonterminal",
    "load_recovery_snapshot", "digest_at", "cursor", "checkpoint", "live_findings", "live_for_run", "has",
    "is_pinned", "pinned_refs", "holders", "expired_unpinned", "blob", "load_steps", "load_execution",
    "live_executions", "schedule_high_water_ms", "load_latest", "observe",
    # the keyring's reads; the key service's and the secret store's
    "scan", "get_rotation", "current", "state", "resolve", "version"})

# Port methods that stream (an async generator, ``ConversationLogPort.observe``):
# the fault layer drains the stream as one call (the stores never suspend
# inside it, so it is atomic as every other call is), traces and judges the
# whole answer, then hands its items out one by one. A fault hits the
# observation whole: a lost reply loses all of it, and the caller observes
# again from where it stood.
STREAM_METHODS = frozenset({"observe"})


# What a SQLite adapter's refused write says under ``faults.sqlite_lock``'s
# held lock (it sets the call's busy timeout to 0): SQLite's own message.
HELD_LOCK_BUSY_TIMEOUT_MS = 0
HELD_LOCK_DETAIL = "database is locked"
# The conversation adapters (log, content, checkpoints) wrap the contention
# in ``ConversationStoreError(f"write contention during {what}")``: ``what`` per write.
CONVERSATION_WRITES = {("log", "materialize"): "materialize", ("log", "append"): "append",
                       ("log", "delete_conversation"): "delete conversation", ("content", "put"): "content put",
                       ("content", "delete"): "content delete", ("checkpoints", "save"): "checkpoint save"}


def injected_contention(port: str, method: str, site: str) -> Exception:
    """What a store not on SQLite raises for an injected ``write-contention``:
    exactly what the SQLite adapter of the port raises for the lock
    ``faults.sqlite_lock`` holds (same type, same text), so a memory run's
    trace is the SQLite run's. The ledger wraps it in its typed
    ``LedgerStoreError``, the conversation adapters in
    ``ConversationStoreError`` (``cause``: the contention, retryable); the
    other ports raise it bare. ``tests/test_sqlite_lock.py`` holds each equal
    to the real refusal."""
    contention = SqliteWriteContention(HELD_LOCK_BUSY_TIMEOUT_MS, HELD_LOCK_DETAIL)
    if port == "ledger":
        return LedgerStoreError(method, contention)
    what = CONVERSATION_WRITES.get((port, method))
    if what is not None:
        return ConversationStoreError(f"write contention during {what}", cause=contention)
    return contention


# An injected latency: long enough, now and then, to outlive a lease.
LATENCY_MS = (200, 45_000)


class TransientStoreError(Exception):
    """An injected transient failure of a store call: nothing happened, try again."""

    name = "TransientStoreError"
    retryable = True

    def __init__(self, site: str) -> None:
        super().__init__(f"{site}: transient store error (injected)")
        self.site = site

    def __reduce__(self):
        return (type(self), (self.site,))

class ReplyLost(Exception):
    """An injected lost reply: the call reached the store and may have
    committed (it did, in the simulation), but the caller never heard back.
    Retryable: production clients send the same call again on a timeout, and
    every write of the ports is safe to repeat exactly (an idempotency key,
    an exact-retry replay, adopt-own-write)."""

    name = "ReplyLost"
    retryable = True

    def __init__(self, site: str) -> None:
        super().__init__(f"{site}: reply lost after the call committed (injected)")
        self.site = site

    def __reduce__(self):
        return (type(self), (self.site,))


@attrs.frozen
class PortCall:
    """One call that reached a store, as it committed: what went in, what
    came out (``result``, or the typed ``error`` it raised). ``damaged``: a
    read-answer fault altered the answer on its way (the store's own answer
    was another). A reply lost afterwards (ack-lost, reply-lost) does not
    change what the store committed."""

    time_ms: int
    node: str
    port: str
    method: str
    args: tuple
    kwargs: dict
    result: Any
    error: BaseException | None
    damaged: bool = False


_FAILPOINT_KINDS = (FAILPOINT_CRASH,)
from sim.node import Node, NodeCrashed, NodeDeadError
from sim.seams import PlanSeam
from sim.world import World

# ``faults.describe``: the call's arguments and result -> the event's fields
# (a ``faults.events.PortEvent``); a failed call's event adds ERROR and DETAIL.
Describe = Callable[[tuple, dict, Any], dict]


def _describe_default(args: tuple, kwargs: dict, result: Any) -> dict:
    return {"args": args, "kwargs": kwargs, "result": result}


class PortStats:
    """Calls per port across all nodes: replay-determinism reads it."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0


class BoundPort:
    """``target``'s methods as seen from ``node``, with faults and tracing."""

    def __init__(self, world: World, node: Node, port: str, target: Any, plan: PlanSeam | None,
                 describers: Mapping[str, Describe], stats: PortStats, restart_after: Callable[[], int],
                 surgery: Any = None) -> None:
        """``surgery`` (``faults.beyond``): the store's promises this port may
        break, beyond the contract; None (the default) keeps them."""
        self._target = target
        for kind, (fields, by) in COVERED_FIELDS.items():
            world.trace.cover(kind, fields, by)
        latency = world.streams["latency"]
        for method, describe in describers.items():
            kinds = PORT_FAULT_KINDS if method not in READ_METHODS else tuple(
                k for k in PORT_FAULT_KINDS if k != WRITE_CONTENTION)
            if surgery is not None:
                kinds += surgery.kinds.get(method, ())
            fn = getattr(target, method)
            if method in STREAM_METHODS:
                fn = _drained(fn)
            wrapped = self._wrap(world, node, f"{port}.{method}", fn, describe, plan, stats, restart_after, kinds,
                                 latency, surgery, target)
            setattr(self, method, _streamed(wrapped) if method in STREAM_METHODS else wrapped)

    @staticmethod
    def _wrap(world: World, node: Node, site: str, fn: Callable, describe: Describe,
              plan: PlanSeam | None, stats: PortStats, restart_after: Callable[[], int],
              kinds: tuple[str, ...], latency: Any, surgery: Any, store: Any = None):
        port, method = site.split(".", 1)
        trace = world.trace
        observers = world.port_observers
        now_ms = world.runtime.now_ms
        label = node.label
        note_call = world.runtime.note_call
        inside, after = f"in {site}", f"after {site}"
        # ``faults.partitions``: node name -> its partition now; only a
        # faulted port meets one (an operator's out-of-band port never does).
        cuts = world.cuts if plan is not None else {}
        # Stores on their own clock (``faults.clocks``, store-clock mode):
        # where this method takes its caller's time, found once; None (off,
        # or a method without one) costs a call one check.
        clocks = world.clocks
        at = now_parameter(fn) if clocks is not None and getattr(clocks, "store_clock", False) else None
        store_now_ms = clocks.store_now_ms if at is not None else None

        async def call(*args: Any, **kwargs: Any) -> Any:
            if not node.alive:
                raise NodeDeadError(label, site)
            held = None
            if cuts:  # a partition somewhere: is this call cut?
                cut = partitions.cut_of(world, node, port)
                if cut is not None:
                    start_ms = now_ms()
                    held = await partitions.cross(world, node, cut, site, lambda: describe(args, kwargs, None))
            stats.calls += 1
            note_call(inside)
            fault = lock = None
            if plan is not None:
                hit, fault = plan.draw(site, kinds)
                if fault == LATENCY:
                    delay_ms = plan.duration_ms(site, hit, lambda: latency.between(*LATENCY_MS))
                    world.record_fault(node, site, LATENCY, hit, duration_ms=delay_ms)
                    await world.runtime.sleep_ms(delay_ms)
                    if not node.alive:
                        raise NodeDeadError(label, site)
                elif fault == BOUNDARY_DELAY:
                    boundaries = world.boundaries
                    delay_ms = plan.duration_ms(site, hit, lambda: boundaries.delay_ms(now_ms()) if (
                        boundaries is not None) else None)
                    if delay_ms is None:
                        plan.declined(site, hit)  # no boundary within reach: not held
                    else:
                        world.record_fault(node, site, BOUNDARY_DELAY, hit, duration_ms=delay_ms)
                        await world.runtime.sleep_ms(delay_ms)
                        if not node.alive:
                            raise NodeDeadError(label, site)
                elif fault == TRANSIENT_ERROR:
                    world.record_fault(node, site, TRANSIENT_ERROR, hit)
                    error = TransientStoreError(site)
                    trace.emit(label, site, {**describe(args, kwargs, None), ERROR: error.name, DETAIL: str(error)})
                    raise error
                elif fault == WRITE_CONTENTION:
                    world.record_fault(node, site, WRITE_CONTENTION, hit)
                    # On SQLite another connection really takes the lock
                    # (``faults.sqlite_lock``); elsewhere the error is injected.
                    lock = sqlite_lock.hold(store)
                    if lock is None:
                        contention = injected_contention(port, method, site)
                        name = getattr(type(contention), "name", None)
                        trace.emit(label, site, {**describe(args, kwargs, None),
                                                 ERROR: name if isinstance(name, str) and name
                                                 else type(contention).__name__,
                                                 DETAIL: str(contention)})
                        raise contention
                elif fault == CRASH_BEFORE_CALL:
                    delay_ms = plan.restart_delay_ms(site, hit, restart_after)
                    world.record_fault(node, site, CRASH_BEFORE_CALL, hit, restart_after_ms=delay_ms)
                    world.crash(node, restart_after_ms=delay_ms)
            read = None
            if at is not None:
                # The store reads its own clock as the call reaches it: what
                # the store, the trace and the observers see from here on.
                # The caller's own reading is traced beside it (``store.now``).
                caller_ms = time_passed(at, args, kwargs)
                if caller_ms is not None:
                    read = {"site": site, "caller_ms": caller_ms, "store_ms": store_now_ms()}
                    args, kwargs = with_store_time(at, args, kwargs, read["store_ms"])
            token = surgery.before(method, args, kwargs) if fault in BEYOND_CONTRACT_KINDS else None
            fired_before = world.faults_fired
            try:
                if lock is None:
                    result = await fn(*args, **kwargs)
                else:
                    try:
                        result = await fn(*args, **kwargs)
                    finally:
                        lock.release()
            except Exception as error:
                note_call(after)
                fields = describe(args, kwargs, None)
                name = getattr(type(error), "name", None)
                fields[ERROR] = name if isinstance(name, str) and name else type(error).__name__
                fields[DETAIL] = str(error)
                if read is not None:
                    trace.emit(label, StoreNow.kind, read)
                trace.emit(label, site, fields)
                # Refused at the held lock: nothing committed, as with the
                # injected error (which never reaches the store's observers).
                # The ledger's observers still see it: the refusal's type is
                # part of its contract (a ``LedgerStoreError``, §9.2), and the
                # references judge nothing else of a retryable error.
                refused = lock is not None and is_retryable(error) and port != "ledger"
                if observers and not refused and not isinstance(error, NodeDeadError):
                    seen = PortCall(now_ms(), label, port, method, args, kwargs, None, error,
                                    world.faults_fired != fired_before)
                    observe = None
                    try:
                        for observe in observers:
                            observe(seen)
                    except Exception as failure:
                        raise trace.subscriber_failed(observe, trace.events, site, failure) from failure
                if held is not None:
                    await partitions.hold_reply(world, node, held, site, start_ms)
                raise
            note_call(after)
            if read is not None:
                trace.emit(label, StoreNow.kind, read)
            trace.emit(label, site, describe(args, kwargs, result))
            if observers:
                seen = PortCall(now_ms(), label, port, method, args, kwargs, result, None,
                                world.faults_fired != fired_before)
                observe = None
                try:
                    for observe in observers:
                        observe(seen)
                except Exception as failure:
                    raise trace.subscriber_failed(observe, trace.events, site, failure) from failure
            if fault in BEYOND_CONTRACT_KINDS:
                if surgery.apply(fault, method, args, kwargs, result, token):
                    world.record_fault(node, site, fault, hit, beyond_contract=True)
                else:
                    plan.declined(site, hit)
            if fault == ACK_LOST:
                delay_ms = plan.restart_delay_ms(site, hit, restart_after)
                world.record_fault(node, site, ACK_LOST, hit, restart_after_ms=delay_ms)
                world.crash(node, restart_after_ms=delay_ms)
            elif fault == REPLY_LOST:
                world.record_fault(node, site, REPLY_LOST, hit)
                raise ReplyLost(site)
            if held is not None:
                await partitions.hold_reply(world, node, held, site, start_ms)
            return result

        call.__name__ = site
        return call


# A store method's answer, by its function: ports are bound afresh at every
# restart (hundreds a simulated day), and ``inspect.signature`` was an eighth
# of a sentinel wake's cost. Weak: a mutant's patched classes may go.
_NOW_PARAMETER_OF_METHOD: weakref.WeakKeyDictionary[Callable, tuple[int | None, str] | None] = (
    weakref.WeakKeyDictionary())


def now_parameter(fn: Callable) -> tuple[int | None, str] | None:
    """Where ``fn`` takes its caller's time (``faults.clocks.NOW_PARAMETER``):
    (its position, or None if keyword-only; its name), or None. A bound
    method's answer is its function's, found once."""
    function = getattr(fn, "__func__", None)
    if function is None or not inspect.ismethod(fn):
        return _now_parameter(fn)
    try:
        return _NOW_PARAMETER_OF_METHOD[function]
    except KeyError:
        found = _NOW_PARAMETER_OF_METHOD[function] = _now_parameter(fn)
        return found


def _now_parameter(fn: Callable) -> tuple[int | None, str] | None:
    from faults.clocks import NOW_PARAMETER

    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    for index, parameter in enumerate(parameters):
        if parameter.name == NOW_PARAMETER:
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
                return None, parameter.name
            if parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
                return index, parameter.name
    return None


def time_passed(at: tuple[int | None, str], args: tuple, kwargs: dict) -> int | None:
    """The time the caller passed (by position or by name), or None."""
    index, name = at
    if index is not None and index < len(args):
        return args[index]
    return kwargs.get(name)


def with_store_time(at: tuple[int | None, str], args: tuple, kwargs: dict, now_ms: int) -> tuple[tuple, dict]:
    """The call's arguments with its time replaced by ``now_ms`` (where the
    caller passed it: by position or by name)."""
    index, name = at
    if index is not None and index < len(args):
        return (*args[:index], now_ms, *args[index + 1:]), kwargs
    if name in kwargs:
        return args, {**kwargs, name: now_ms}
    return args, kwargs


def _drained(stream: Callable) -> Callable:
    """A streaming method as a call answering every item, in a tuple."""
    async def drain(*args: Any, **kwargs: Any) -> tuple:
        return tuple([item async for item in stream(*args, **kwargs)])

    return drain


def _streamed(call: Callable) -> Callable:
    """The wrapped call as the stream the port promises (an async generator)."""
    async def stream(*args: Any, **kwargs: Any) -> Any:
        for item in await call(*args, **kwargs):
            yield item

    stream.__name__ = call.__name__
    return stream


class SimFailpoints:
    """``model.failpoints.Failpoints`` for one node: may crash it at a named
    point. A failpoint only ever kills here; the death's cause
    (``NodeCrashed.__cause__``) is ``FailpointFired`` naming the location,
    as the fault event's site does."""

    __slots__ = ("_world", "_node", "_plan", "_restart_after")

    def __init__(self, world: World, node: Node, plan: PlanSeam | None, restart_after: Callable[[], int]) -> None:
        self._world = world
        self._node = node
        self._plan = plan
        self._restart_after = restart_after

    def hit(self, name: str) -> None:
        plan = self._plan
        if plan is None:
            return
        hit, fault = plan.draw(name, _FAILPOINT_KINDS)
        if fault is not None:
            delay_ms = plan.restart_delay_ms(name, hit, self._restart_after)
            self._world.record_fault(self._node, name, fault, hit, restart_after_ms=delay_ms)
            try:
                self._world.crash(self._node, restart_after_ms=delay_ms)
            except NodeCrashed as crashed:
                raise crashed from FailpointFired(name)
