"""What every adversarial client shares: one logical call's outcome, its
retry loop, and the checker its expectations go to.

A client (``scenarios.adversaries``: the port-storm adversary, ``state_handle``, ``ports``, ``kernel``)
calls ports as a production client would: an injected retryable error
(a transient error, contention, a lost reply) is waited out and the same
call sent again; any other error is the answer. What it then expects of
the answer goes, one check each, to an :class:`Expectations` checker.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from model.retry import error_name, is_retryable
from sim.invariants import Checker
from sim.node import NodeDeadError

# Retryable failures in a row before a client gives up: far more than any
# fault rate leaves (the plan caps a boosted rate at 0.5).
RETRIES_MAX = 200
RETRY_WAIT_MS = (5, 500)
# A store the caller cannot reach (a network partition: ``StoreUnreachable``)
# is waited for longer between tries, as a client backs off a dead link: the
# retries then outlast the longest cut (several leases).
UNREACHABLE_WAIT_MS = (1_000, 5_000)
UNREACHABLE = "StoreUnreachable"


def committed_unheard(error: BaseException) -> bool:
    """A retryable failure of a call that reached its store and did its
    work, only its answer never came back: an injected ``ReplyLost``, or a
    partition's reply held past the caller's timeout (``committed``). A
    refused or hung call did nothing."""
    name = error_name(error)
    return name == "ReplyLost" or name == UNREACHABLE and getattr(error, "committed", False) is True


def retry_wait_ms(error: BaseException, rng: Any) -> int:
    """How long a client waits before it sends a retryable call again."""
    return rng.between(*(UNREACHABLE_WAIT_MS if error_name(error) == UNREACHABLE else RETRY_WAIT_MS))


class Outcome:
    """One logical call: its answer or typed error, how many attempts
    committed unheard (``lost``: a ``ReplyLost`` was retried) and how many
    attempts it took."""

    __slots__ = ("value", "error", "lost", "attempts")

    def __init__(self, value: Any, error: BaseException | None, lost: int, attempts: int = 1) -> None:
        self.value = value
        self.error = error
        self.lost = lost
        self.attempts = attempts

    @property
    def ok(self) -> bool:
        return self.error is None

    def named(self, *names: str) -> bool:
        """Whether it failed with one of these typed errors."""
        return self.error is not None and error_name(self.error) in names

    def show(self) -> str:
        """One line for a message (cheap: messages are built for every check)."""
        if self.error is not None:
            return f"{error_name(self.error)}: {str(self.error)[:300]}"
        value = self.value
        if type(value) is tuple and len(value) > 2:
            return f"({len(value)} items: {value[0]!r:.150}, ...)"
        return f"{value!r:.300}"


async def attempt(fn: Callable[[], Awaitable[Any]], sleep_ms: Callable[[int], Awaitable[None]],
                  wait_ms: Callable[[], int]) -> Outcome:
    """Call ``fn`` until it answers or fails with a non-retryable error;
    between retryable failures, sleep ``wait_ms()``. A dead node's call
    propagates (the process is gone)."""
    lost = 0
    for tries in range(1, RETRIES_MAX + 1):
        try:
            return Outcome(await fn(), None, lost, tries)
        except NodeDeadError:
            raise
        except Exception as error:  # noqa: BLE001 - classified: retried, or the answer
            if not is_retryable(error):
                return Outcome(None, error, lost, tries)
            if committed_unheard(error):
                lost += 1
            await sleep_ms(wait_ms())
    raise AssertionError(f"{RETRIES_MAX} retryable failures in a row")


class Expectations(Checker):
    """A client's own expectations: it reads no trace events, the client
    tells it, one check per expectation. Subclasses set ``name``."""

    def expect(self, ok: bool, message: str, related: tuple[str, ...] = ()) -> bool:
        self.checks += 1
        if not ok:
            self.fail(" ".join(message.split()), related)
        return ok


class ClientProcess:
    """One incarnation of one client node: its ports, its own stream, fresh
    names, and the plumbing every client shares (``workload`` has a
    ``checker`` (an :class:`Expectations`) and an ``edge(name)`` counter)."""

    def __init__(self, workload: Any, world: Any, node: Any, stream: str) -> None:
        self.w = workload
        self.world = world
        self.node = node
        self.label = node.label
        self.runtime = world.runtime_for(node)  # its machine's clock (the true clock without clock faults)
        self.ports = world.system.ports_for(node)
        self.rng = world.streams.fork(f"{stream}/{node.label}")
        self._serial = 0

    def uid(self, what: str) -> str:
        self._serial += 1
        return f"{what}-{self.label}-{self._serial}"

    def now(self) -> int:
        return self.runtime.now_ms()

    async def sleep_to(self, target_ms: int) -> None:
        """Sleep until this node's clock reads ``target_ms`` (an instant the
        process predicts on its own clock, e.g. a lease's expiry). Sleeps
        are true durations: a drifting clock is approached in steps, the
        last ones a millisecond each, so the instant is met, not jumped
        over (a step forward of the clock itself may still jump it)."""
        left_ms = target_ms - self.now()
        if self.world.clocks is None:  # the true clock: one sleep lands on it
            if left_ms > 0:
                await self.runtime.sleep_ms(left_ms)
            return
        while left_ms > 0:
            await self.runtime.sleep_ms(max(1, left_ms - left_ms // 2_000 - 1))
            left_ms = target_ms - self.now()

    def chosen_ms(self, port: str, method: str, value: int) -> int:
        """``value``, a timestamp this process hands ``port.method`` on
        purpose (a replay at another time, an integer past SQLite's), not a
        reading of its clock: the clock-tolerance oracle leaves it out."""
        chosen = getattr(self.w, "chosen", None)
        if chosen is not None:
            chosen.add((self.label, port, method, value))
        return value

    def expect(self, ok: bool, message: str, *related: str) -> bool:
        return self.w.checker.expect(ok, f"{self.label}: {message}", related)

    def edge_if(self, ok: bool, name: str) -> bool:
        if ok:
            self.w.edge(name)
        return ok

    async def racer(self) -> None:
        """Every ``race_ms`` (the workload's) all processes call ``race(tick)``
        within 25 ms of one another, until the heal instant (or death)."""
        race_ms = self.w.race_ms
        heal_at_ms = self.world.heal_at_ms
        while True:
            tick = self.now() // race_ms + 1
            await self.runtime.sleep_ms(tick * race_ms - self.now() + self.rng.below(25))
            if self.now() >= heal_at_ms:
                return
            await self.race(tick)

    async def race(self, tick: int) -> None:
        raise NotImplementedError
