"""Stand-ins more than one test file needs (fixtures live in conftest.py)."""
from __future__ import annotations


class Stop(BaseException):
    """Ends a forever loop from its runtime (a node killed)."""


class FakeRuntime:
    """``model.runtime.Runtime`` for one task: sleeping advances the clock;
    the ``sleeps_max``-th sleep stops the task; ``on_sleep`` runs after each
    other sleep."""

    def __init__(self, ms: int = 0, sleeps_max: int = 10) -> None:
        self.ms = ms
        self.sleeps_max = sleeps_max
        self.slept: list[tuple[str, int]] = []
        self.on_sleep = None

    def now_ms(self) -> int:
        return self.ms

    def _sleep(self, kind: str, value: int, until_ms: int) -> None:
        self.slept.append((kind, value))
        if len(self.slept) >= self.sleeps_max:
            raise Stop(kind)
        self.ms = max(self.ms, until_ms)
        if self.on_sleep is not None:
            self.on_sleep()

    async def sleep_ms(self, duration_ms: int) -> None:
        self._sleep("sleep_ms", duration_ms, self.ms + duration_ms)

    async def sleep_until_ms(self, deadline_ms: int) -> None:
        self._sleep("sleep_until_ms", deadline_ms, deadline_ms)


class Crash(BaseException):
    """The process dies here: nothing after this point runs."""


class CrashAt:
    """Failpoints that kill the process at the first hit of ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.fired = False

    def hit(self, name: str) -> None:
        if name == self.name and not self.fired:
            self.fired = True
            raise Crash(name)


class Flaky(Exception):
    """A retryable failure (``model.retry``)."""

    retryable = True


class Stores:
    """A submission ledger and a conversation log on one backend: ``memory``,
    or ``sqlite`` (one real file ``tmp_path/db_name``, both stores on its
    connection, ``conn``: close it after the test); ``ms``: a test clock."""

    def __init__(self, kind: str, tmp_path, db_name: str = "stores.db") -> None:
        from model.conversation.memory_store import InMemoryConversationStore
        from model.conversation.sqlite_store import SqliteConversationStore
        from model.ledger.memory_store import InMemorySubmissionLedger
        from model.ledger.sqlite_store import SqliteSubmissionLedger
        from model.sqlite_db import open_database

        assert kind in ("memory", "sqlite"), kind
        self.conn = None
        if kind == "memory":
            self.ledger, self.log = InMemorySubmissionLedger(), InMemoryConversationStore()
        else:
            self.conn = open_database(str(tmp_path / db_name))
            self.ledger, self.log = SqliteSubmissionLedger(self.conn), SqliteConversationStore(self.conn)
        self.ms = 1_000

    def now(self) -> int:
        """A clock that ticks a millisecond at every reading (no two calls at one instant)."""
        self.ms += 1
        return self.ms

    def records(self, conversation_id: str) -> list:
        from scenarios.storage import run_sync

        return list(run_sync(self.log.read(conversation_id, 0, 1_000)))

    def ids(self, conversation_id: str) -> list[str]:
        return [r.envelope.record_id for r in self.records(conversation_id)]

