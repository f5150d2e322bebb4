"""The System: the durable stores of one run, the ports each node sees, and
the one audit view every invariant reads.

``System()`` opens the stores once, when the run opens it, as the run's
``--store`` says:

- ``memory``: the in-memory adapters;
- ``sqlite``: the SQLite adapters on one real database file (WAL,
  ``BEGIN IMMEDIATE``), a temporary one or ``--db PATH``;
- ``MODULE:FACTORY``: a user's adapters. ``FACTORY()`` returns a mapping
  with any subset of ``ledger`` (a submission ledger), ``log`` (a
  conversation store) and ``ds`` (a durable-state store); every other store
  is in memory, each checked against its protocol first
  (``scenarios.user_stores``). They run under the full fault mix like ours.

``ports_for(node)`` wraps every store for one process: crashy, traced,
refusing calls once the node is dead (``faults.ports.BoundPort``), plus the
node's failpoints. ``audit_view()`` is the ``AuditView`` below: reads of the
stores themselves, never of the model's in-memory bookkeeping, for the
end-of-run audit.
"""
from __future__ import annotations

import contextlib
import sqlite3
from typing import Any, Iterable, Iterator, Protocol

import attrs

from faults.beyond import beyond_enabled, beyond_surgeries
from faults.describe import (
    CHECKPOINT_DESCRIBERS,
    CONTENT_DESCRIBERS,
    DURABLE_STATE_DESCRIBERS,
    FINDINGS_DESCRIBERS,
    KERNEL_DESCRIBERS,
    KEYRING_DESCRIBERS,
    LEDGER_DESCRIBERS,
    LOG_DESCRIBERS,
    PIN_DESCRIBERS,
    SCHEDULE_DESCRIBERS,
)
from faults.notifications import NotifierPort
from faults.ports import BoundPort, PortStats, SimFailpoints
from faults.reads import DamagedReads
from faults.sqlite_overtake import open_node_database
from model.canonical import WORK
from model.conversation.checkpoints import InMemoryCheckpointStore, SqliteCheckpointStore
from model.conversation.content_store import InMemoryContentStore, SqliteContentStore
from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.records import NotMaterialized
from model.conversation.sqlite_store import SqliteConversationStore
from model.durable_state.memory_store import InMemoryDurableStateStore
from model.durable_state.sqlite_store import SqliteDurableStateStore
from model.findings import InMemoryFindingsProjection, SqliteFindingsProjection
from model.kernel.memory_store import InMemoryExecutionStore
from model.kernel.records import ExecutionRecord
from model.kernel.sqlite_store import SqliteExecutionStore
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.pins import InMemoryPinIndex, SqlitePinIndex
from model.progress import NotifyingLog, ProgressNotifier
from model.repair import rebuild_ledger
from model.runs import LedgerRuns
from model.schedule_store import InMemoryScheduleStore, SqliteScheduleStore
from model.secrets.keyring import InMemoryKeyringStore, SqliteKeyringStore
from model.sqlite_db import BUSY_TIMEOUT_MS_DEFAULT
from scenarios.storage import RunDatabase, run_sync
from scenarios.user_stores import load_store_factory
from sim.scenario import SetupError
from sim.node import Node
from sim.seams import AuditViewSeam
from sim.world import World

# A read of the audit: one page of a log (the spec's page size).
AUDIT_PAGE_SIZE = 1_024
# The audit reads a log of at most this many pages (a run's log is bounded).
AUDIT_PAGES_MAX = 100_000
# What each port's trace records of its calls.
DESCRIBERS = {"ds": DURABLE_STATE_DESCRIBERS, "ledger": LEDGER_DESCRIBERS, "log": LOG_DESCRIBERS,
              "schedules": SCHEDULE_DESCRIBERS, "content": CONTENT_DESCRIBERS, "pins": PIN_DESCRIBERS,
              "findings": FINDINGS_DESCRIBERS, "checkpoints": CHECKPOINT_DESCRIBERS, "kernel": KERNEL_DESCRIBERS}
# The stores only a System that asks for them opens (``System(keyring=True)``).
OPTIONAL_DESCRIBERS = {"keyring": KEYRING_DESCRIBERS}


class AuditView(AuditViewSeam, Protocol):
    """What every invariant's end-of-run audit reads: the stores, directly."""

    def conversation_ids(self) -> tuple[str, ...]: ...
    def scoped(self, conversation_ids: Iterable[str]) -> Any: ...
    def log_records(self, conversation_id: str) -> tuple: ...
    def log_tail(self, conversation_id: str) -> Any: ...
    def submissions(self, conversation_id: str) -> tuple: ...
    def nonterminal_submissions(self) -> list[str]: ...
    def rebuild_mismatches(self) -> list[str]: ...
    def durable_state_snapshot(self, key: str) -> Any: ...
    def live_runs(self, schedule_id: str) -> tuple[str, ...]: ...
    def schedule_high_water_ms(self, schedule_id: str) -> int | None: ...
    def retained_runs(self) -> Iterator[tuple[ExecutionRecord, tuple]]: ...
    def content_bytes(self, ref: str) -> bytes | None: ...
    def content_has(self, ref: str) -> bool: ...
    def live_evidence(self) -> list[tuple[str, str]]: ...
    def expired_unpinned_blobs(self, stored_before_ms: int) -> tuple[str, ...]: ...
    def live_findings(self) -> Any: ...
    def findings_checkpoint(self, schedule_id: str) -> int | None: ...
    def latest_checkpoint(self, conversation_id: str) -> Any: ...
    def held_runs(self, schedule_id: str) -> tuple[str, ...]: ...
    def keyring_rows(self) -> tuple: ...
    def integrity_problems(self) -> tuple[str, ...]: ...


@attrs.frozen
class NodePorts:
    """Every store as one node sees it, and the node's failpoints."""

    ds: Any
    ledger: Any
    log: Any
    schedules: Any
    content: Any
    pins: Any
    findings: Any
    checkpoints: Any
    failpoints: Any
    # The kernel's execution store (``model.kernel.store``): the sentinels run
    # on ``LedgerRuns``; the ports adversary drives this port directly.
    kernel: Any = None
    # The progress notifier as this node sees it (``faults.notifications``);
    # None unless the System has one (``System(progress=True)``).
    progress: Any = None
    # The keyring of wrapped data keys (``model.secrets.keyring``); None
    # unless the System has one (``System(keyring=True)``).
    keyring: Any = None


def _sqlite_stores(conn: Any, *, keyring: bool = False) -> dict[str, Any]:
    """Every store of a run as SQLite adapters on ``conn`` (the keyring if asked)."""
    log = SqliteConversationStore(conn)
    stores = {"ds": SqliteDurableStateStore(conn), "ledger": SqliteSubmissionLedger(conn), "log": log,
              "schedules": SqliteScheduleStore(conn), "content": SqliteContentStore(conn),
              "pins": SqlitePinIndex(conn), "findings": SqliteFindingsProjection(conn),
              "checkpoints": SqliteCheckpointStore(log), "kernel": SqliteExecutionStore(conn)}
    if keyring:
        stores["keyring"] = SqliteKeyringStore(conn)
    return stores


# What a workload may require of the durable stores (``Workload.requires``)
# -> the capability a store declares for it (``System.require``).
REQUIREMENTS = {"encryption-at-rest": "encryption_at_rest"}

# The calls that delete a conversation's records, by port: whichever of them
# reaches its store first while the log is there is preceded by the audit.
_DELETING = {"ledger": "purge_conversation", "log": "delete_conversation"}


class AuditedDeletes:
    """A store whose deleting method (``log.delete_conversation``,
    ``ledger.purge_conversation``) first calls ``before(id)``: the harness's
    audit of what is about to go. Every other attribute is the store's own.
    Inside the fault layer: a call the fault plan refused before the store
    saw it is not audited, one that reaches the store is."""

    def __init__(self, store: Any, method: str, before: Any) -> None:
        self._store = store
        deleting = getattr(store, method)

        async def audited(conversation_id: Any, *args: Any, **kwargs: Any) -> Any:
            if type(conversation_id) is str:
                before(conversation_id)
            return await deleting(conversation_id, *args, **kwargs)

        setattr(self, method, audited)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class System:
    """The stores of one run (memory | sqlite | MODULE:FACTORY, from the
    run's options), their ports per node, and the audit view."""

    def __init__(self, *, restart_ms: tuple[int, int], file_name: str = "loomsim.db",
                 damaged_reads: bool = False, progress: bool = False, audit_deletes: int = 0,
                 keyring: bool = False) -> None:
        """``restart_ms``: how long a process crashed at a port stays down
        (drawn per crash). ``file_name``: of a temporary SQLite database.
        ``damaged_reads``: log read answers may come back
        short, gapped or corrupt (the recovery read must fail closed).
        ``progress``: the deployment has a progress notifier (STORE-014):
        every node's log port announces its committed appends to it
        (``model.progress.NotifyingLog``), through the fault site
        ``progress.notify``; off, the ports are exactly the stores'.
        ``audit_deletes`` (n >= 1; 0: off): before a process's
        ``ledger.purge_conversation`` or ``log.delete_conversation`` reaches
        the store while the conversation's log is there, the harness runs
        every checker's ``audit_retiring`` over that conversation
        (``_audit_before_delete``), so what the model's own retention deletes
        is not gone unread by the end-of-run audit: every conversation whose
        history went through recovery (a refused or replayed call, a
        takeover), and one in ``n`` of the others (1: all). Only where
        deletes come from retention of settled work (a delete of a
        conversation in flight would be audited in flight).
        ``keyring``: the run has a keyring of wrapped data keys
        (``model.secrets.keyring``: in memory, or its own table in the run's
        SQLite file; in memory beside a user's adapters), bound per node as
        ``NodePorts.keyring``; off, no node has one."""
        assert type(audit_deletes) is int and audit_deletes >= 0, audit_deletes
        assert 0 <= restart_ms[0] <= restart_ms[1], restart_ms
        self._work_before: dict[str, int] | None = None
        self.file_name = file_name
        self.restart_ms = restart_ms
        self.damaged_reads = damaged_reads
        self.progress = progress
        self.audit_deletes = audit_deletes
        self.with_keyring = keyring
        self.keyring: Any = None
        self.audited_before_delete = 0  # conversations the harness audited as a process deleted them
        # Conversations whose history went through recovery: always audited
        # before they are deleted (forgotten when they are, or purged).
        self._recovered: set[str] = set()
        self._calm_deletes = 0  # deletions of conversations that did not go through recovery
        self._audit_work: dict[str, int] = {}  # WORK done by those audits (model.canonical.WorkCounts)
        self.notifier: ProgressNotifier | None = None
        self.port_stats = PortStats()
        self._database: RunDatabase | None = None
        self._world: World | None = None
        # What the audit enumerates, observed from committed port calls (the
        # stores have no "list everything" operation): conversations in
        # order of first sight, their submissions, until retention purges.
        self._conversations: dict[str, list[str]] = {}
        self._scope: tuple[str, ...] | None = None  # ``scoped``: the conversations an audit reads
        # SQLite: each process (node incarnation) has a connection of its
        # own to the run's file, as in production: what one commits another
        # sees only through the file (a read outside a transaction, a commit
        # left open, a cache an adapter keeps are all exposed). The audit
        # reads through the system's own connection.
        self._connections: dict[str, tuple[Any, int, dict[str, Any]]] = {}
        self._busy_timeout_ms = BUSY_TIMEOUT_MS_DEFAULT
        self._store_option = "memory"
        self._user_stores: dict[str, Any] = {}

    # -- phases ------------------------------------------------------------

    def open(self, world: World, opts: Any, choices: Any) -> None:
        self._work_before = WORK.snapshot()  # counted work of this run (``metrics``)
        self._world = world
        busy_timeout_ms = choices.knob_or("busy_timeout_ms", BUSY_TIMEOUT_MS_DEFAULT) if choices else (
            BUSY_TIMEOUT_MS_DEFAULT)
        user = {} if opts.store in ("memory", "sqlite") else load_store_factory(opts.store)
        self._store_option, self._user_stores = opts.store, dict(user)
        if opts.store == "sqlite":
            self._database = RunDatabase(opts.db_path, file_name=self.file_name, busy_timeout_ms=busy_timeout_ms)
            self._busy_timeout_ms = busy_timeout_ms
            for name, store in _sqlite_stores(self._database.conn, keyring=self.with_keyring).items():
                setattr(self, name, store)
        else:
            self.ds = user.get("ds") or InMemoryDurableStateStore()
            self.ledger = user.get("ledger") or InMemorySubmissionLedger()
            self.log = user.get("log") or InMemoryConversationStore()
            self.schedules = InMemoryScheduleStore()
            self.content = InMemoryContentStore()
            self.pins = InMemoryPinIndex()
            self.findings = InMemoryFindingsProjection()
            self.checkpoints = InMemoryCheckpointStore(self.log)
            self.kernel = InMemoryExecutionStore()
            self.keyring = InMemoryKeyringStore() if self.with_keyring else None
        # In memory, like the deployment's notification service: it outlives processes, not the run.
        self.notifier = ProgressNotifier(world.runtime) if self.progress else None
        # Beyond the contract: the log, durable state and ledger may break their promises.
        self.surgeries = beyond_surgeries(self, world.streams) if beyond_enabled(opts) else {}
        world.trace.subscribe(("ledger.admit", "log.materialize", "ledger.purge_conversation"), self._observe)
        if self.audit_deletes > 0:
            world.trace.subscribe(("log.append", "ledger.claim"), self._observe_recovery)

    def require(self, workload: str, requirements: tuple[str, ...]) -> None:
        """Refuse the run (``SetupError``, one line) when a durable store of
        it does not declare what ``workload`` requires (``REQUIREMENTS``:
        ``encryption-at-rest`` -> its capabilities' ``encryption_at_rest``
        True). Judged on the durable stores only: on SQLite the adapters of
        the run's file (they declare one thing: the ledger's capabilities
        say it), on ``MODULE:FACTORY`` every store the user's factory gave
        (one without ``capabilities()`` declares nothing). In memory nothing
        is judged: those stores are the simulation's own, never a
        deployment's, and hold nothing at rest."""
        for requirement in requirements:
            key = REQUIREMENTS.get(requirement)
            if key is None:
                raise SetupError(f"workload {workload!r} requires {requirement!r}, which no store declares "
                                 f"(known: {', '.join(sorted(REQUIREMENTS))})")
            if self._store_option == "sqlite":
                judged = {"sqlite": self.ledger}
            else:
                judged = dict(sorted(self._user_stores.items()))
            for name, store in judged.items():
                declared = getattr(store, "capabilities", None)
                try:
                    capabilities = declared() if callable(declared) else None
                except Exception as error:  # noqa: BLE001 - a user's adapter: any failure is a usage error
                    raise SetupError(f"workload {workload!r} requires {requirement}: the {name!r} store's "
                                     f"capabilities() failed: {type(error).__name__}: {error}") from None
                value = capabilities.get(key) if isinstance(capabilities, dict) else None
                if value is not True:
                    said = (f"{key}={value!r}" if isinstance(capabilities, dict) and key in capabilities
                            else f"no {key}" if isinstance(capabilities, dict) else "no capabilities()")
                    raise SetupError(f"workload {workload!r} requires {requirement}, which the {name!r} store "
                                     f"({type(store).__name__}) does not declare ({said})")

    def close(self) -> None:
        for conn, _, _ in self._connections.values():
            conn.close()
        self._connections.clear()
        if self._database is not None:
            self._database.close()
            self._database = None

    def metrics(self) -> dict[str, Any]:
        counters = self._world.counters if self._world else {}
        work = WORK.since(self._work_before) if self._work_before is not None else {}
        audit_work = self._audit_work
        if audit_work:
            work = {name: count - audit_work.get(name, 0) for name, count in work.items()}
        figures = {"store_calls": self.port_stats.calls, "worker_crashes": counters.get("node.crashes", 0), "work": work}
        # The findings store's own figures (every fleet's projector writes it).
        try:
            counts = self.findings.counts()
        except sqlite3.DatabaseError as error:  # StorageCorrupted: a disk fault damaged the file (``faults.disk``)
            figures["findings_unreadable"] = f"{getattr(type(error), 'name', type(error).__name__)}: {error}"
        else:
            figures.update(findings=counts["opened"], findings_live=counts["live"], findings_closed=counts["closed"])
        if self.audit_deletes > 0:
            figures["conversations_audited_before_delete"] = self.audited_before_delete
            figures["audit_work"] = dict(audit_work)
        return figures

    # -- ports ---------------------------------------------------------------

    def restart_delay_ms(self) -> int:
        assert self._world is not None
        return self._world.streams["restarts"].between(*self.restart_ms)

    def ports_for(self, node: Node, *, faults: bool = True) -> NodePorts:
        """The stores as ``node`` sees them. ``faults`` False: the harness's
        own out-of-band writer (an operator): traced, never faulted, not
        counted as the system's store calls."""
        world = self._world
        assert world is not None, "the system is not open"
        plan = world.plan if faults else None
        stats = self.port_stats if faults else PortStats()
        restart = self.restart_delay_ms if faults else (lambda: 0)

        stores = self._stores_of(node)

        def port(name: str) -> BoundPort:
            surgery = self.surgeries.get(name) if faults else None
            target = stores[name]
            if name == "log" and faults and self.damaged_reads:
                target = DamagedReads(target, world, node, plan)
            if name in _DELETING and self.audit_deletes > 0:
                target = AuditedDeletes(target, _DELETING[name], self._audit_before_delete)
            describers = DESCRIBERS[name] if name in DESCRIBERS else OPTIONAL_DESCRIBERS[name]
            return BoundPort(world, node, name, target, plan, describers, stats, restart, surgery=surgery)

        log = port("log")
        progress = None
        if self.notifier is not None:
            # Where notifications come from: the appending process, after its
            # append returned (committed, the reply received), at the port
            # every appender goes through, so no model call site can forget
            # one or send one early. A crash in between (an ack lost) loses it.
            progress = NotifierPort(self.notifier, world, node, plan)
            log = NotifyingLog(log, progress)
        return NodePorts(ds=port("ds"), ledger=port("ledger"), log=log, schedules=port("schedules"),
                         content=port("content"), pins=port("pins"), findings=port("findings"),
                         checkpoints=port("checkpoints"), failpoints=SimFailpoints(world, node, plan, restart),
                         kernel=port("kernel"), progress=progress,
                         keyring=port("keyring") if self.with_keyring else None)

    def notifier_port(self, node: Node, *, transit_ms: Any = None) -> NotifierPort:
        """The notifier as a waiter on ``node`` reaches it: ``transit_ms()``
        is a registration's round trip (None: instant)."""
        world = self._world
        assert world is not None and self.notifier is not None, "the system has no progress notifier"
        return NotifierPort(self.notifier, world, node, world.plan, transit_ms)

    def unwrapped_store(self, node: Node, port: str) -> Any:
        """The store ``node``'s process talks to at ``port``, without the
        fault layer: for a fault that must act inside the store's own call
        (``faults.content_reads``), never for a workload's calls."""
        return self._stores_of(node)[port]

    def _stores_of(self, node: Node) -> dict[str, Any]:
        """The stores ``node``'s process talks to: the shared in-memory ones,
        or (SQLite) the adapters on this incarnation's own connection; a
        restarted process opens a new one (the old one closes: what it left
        uncommitted is rolled back, as when a process dies)."""
        if self._database is None:
            stores = {name: getattr(self, name) for name in DESCRIBERS}
            if self.with_keyring:
                stores["keyring"] = self.keyring
            return stores
        held = self._connections.get(node.name)
        if held is not None and held[1] == node.incarnation:
            return held[2]
        if held is not None:
            held[0].close()
        # ``faults.sqlite_overtake``: the model's own connection, or (the plan
        # arms overtaking-commit) one whose transactions another writer may overtake.
        conn = open_node_database(self._database.path, busy_timeout_ms=self._busy_timeout_ms, world=self._world,
                                  node=node)
        stores = _sqlite_stores(conn, keyring=self.with_keyring)
        self._connections[node.name] = (conn, node.incarnation, stores)
        return stores

    def _audit_before_delete(self, conversation_id: str) -> None:
        """Every checker's ``audit_retiring`` over ``conversation_id``, read
        from the stores just before a process purges its ledger rows or
        deletes its log: what they hold then is what the end-of-run audit
        would have read. Not when the log is gone already or the view no
        longer knows the conversation (its ledger rows were purged): the
        first of the two calls was audited."""
        world = self._world
        assert world is not None, "the system is not open"
        if conversation_id not in self._conversations or self.log_tail(conversation_id) is None:
            return
        if conversation_id not in self._recovered:
            # A calm run: one in ``audit_deletes``, counted in order of deletion.
            self._calm_deletes += 1
            if (self._calm_deletes - 1) % self.audit_deletes != 0:
                return
        self._recovered.discard(conversation_id)
        # The audit's own encodings and digests are the harness's work, not
        # the wake's: counted apart (``metrics``: ``work`` without them,
        # ``audit_work`` beside it).
        before = WORK.snapshot()
        with self.scoped((conversation_id,)) as view:
            world.invariants.audit_retiring(view)
        for name, count in WORK.since(before).items():
            self._audit_work[name] = self._audit_work.get(name, 0) + count
        self.audited_before_delete += 1

    def _observe_recovery(self, event: tuple) -> None:
        """A conversation whose append or claim was refused, replayed or a
        takeover (epoch above 1) went through recovery: ``_recovered``."""
        fields = event.fields
        conversation = fields.get("conversation")
        if type(conversation) is not str:
            return
        epoch = fields.get("epoch")
        if "error" in fields or fields.get("replayed") or (type(epoch) is int and epoch > 1):
            self._recovered.add(conversation)

    def _observe(self, event: tuple) -> None:
        kind, fields = event.kind, event.fields
        conversation = fields.get("conversation")
        if conversation is None or not isinstance(conversation, str):
            return
        if kind == "ledger.purge_conversation":
            if "error" not in fields:
                self._conversations.pop(conversation, None)
                self._recovered.discard(conversation)
            return
        if "error" in fields:
            return  # refused: nothing was created
        submissions = self._conversations.setdefault(conversation, [])
        submission = fields.get("submission")
        if kind == "ledger.admit" and submission is not None and submission not in submissions:
            submissions.append(submission)

    # -- the audit view (reads the stores, never a node's memory) --------------

    def audit_view(self) -> "System":
        return self

    def cold_stores(self) -> dict[str, Any] | None:
        """The run's SQLite file opened afresh, as a restarted process opens
        it: each adapter through its own ``open`` on a connection of its own
        (the log verifying every chain on open). ``None`` in memory. The
        caller closes each (``scenarios.invariants.cold_reopen``)."""
        if self._database is None:
            return None
        path = self._database.path
        opened: dict[str, Any] = {}
        try:
            opened["log"] = SqliteConversationStore.open(path, verify_on_open=True)
            opened["ds"] = SqliteDurableStateStore.open(path)
            opened["ledger"] = SqliteSubmissionLedger.open(path)
            opened["kernel"] = SqliteExecutionStore.open(path)
            opened["pins"] = SqlitePinIndex.open(path)
            opened["findings"] = SqliteFindingsProjection.open(path)
        except BaseException:
            for store in opened.values():
                store.close()
            raise
        return opened

    def run_database(self) -> RunDatabase | None:
        """The run's SQLite file (its path and the System's own connection);
        None in memory. What a disk fault (``faults.disk``) acts on."""
        return self._database

    def flush_page_caches(self) -> None:
        """Every connection to the run's file drops the pages it cached, so
        its next read reads the disk (``faults.disk``: what a damaged page
        holds now is what a reader meets)."""
        if self._database is None:
            return
        for conn in [self._database.conn, *(held[0] for held in self._connections.values())]:
            with contextlib.suppress(sqlite3.ProgrammingError):  # a dead process's, closed
                conn.execute("PRAGMA shrink_memory")

    def integrity_problems(self) -> tuple[str, ...]:
        """SQLite's own check of the run's whole file (``PRAGMA
        integrity_check``): what it finds wrong, () when sound or in memory."""
        if self._database is None:
            return ()
        try:
            rows = self._database.conn.execute("PRAGMA integrity_check").fetchall()
        except sqlite3.DatabaseError as error:  # StorageCorrupted: the check itself met a damaged page
            return (f"{getattr(type(error), 'name', type(error).__name__)}: {error}",)
        found = tuple(str(row[0]) for row in rows)
        return () if found == ("ok",) else found

    def database_bytes(self) -> tuple[bytes, ...]:
        """The run's SQLite file as stored: the database's bytes and its
        write-ahead log's (if any); () in memory. What a reader of the disk
        sees, for a check of what the adapters declare about it."""
        if self._database is None:
            return ()
        found = []
        for path in (self._database.path, self._database.path + "-wal"):
            with contextlib.suppress(FileNotFoundError):
                with open(path, "rb") as handle:
                    found.append(handle.read())
        return tuple(found)

    def conversation_ids(self) -> tuple[str, ...]:
        if self._scope is not None:
            return self._scope
        return tuple(self._conversations)

    @contextlib.contextmanager
    def scoped(self, conversation_ids: Iterable[str]) -> Iterator["System"]:
        """This view with ``conversation_ids()`` narrowed to those given
        (that it knows): what an audit of conversations about to be retired
        reads. Everything else reads the whole store as before."""
        assert self._scope is None, "audit scopes do not nest"
        self._scope = tuple(c for c in conversation_ids if c in self._conversations)
        try:
            yield self
        finally:
            self._scope = None

    def log_records(self, conversation_id: str) -> tuple:
        records: list = []
        for _ in range(AUDIT_PAGES_MAX):
            try:
                page = run_sync(self.log.read(conversation_id, len(records), AUDIT_PAGE_SIZE))
            except NotMaterialized:
                return ()
            records.extend(page)
            if len(page) < AUDIT_PAGE_SIZE:
                return tuple(records)
        raise AssertionError(f"{conversation_id}: a log of over {AUDIT_PAGES_MAX} pages")

    def log_tail(self, conversation_id: str) -> Any:
        try:
            return run_sync(self.log.inspect_tail(conversation_id))
        except NotMaterialized:
            return None

    def submissions(self, conversation_id: str) -> tuple:
        found = (run_sync(self.ledger.get(s)) for s in self._conversations.get(conversation_id, ()))
        return tuple(record for record in found if record is not None)

    def nonterminal_submissions(self) -> list[str]:
        return [r.submission_id for r in run_sync(self.ledger.scan_nonterminal())]

    def rebuild_mismatches(self) -> list[str]:
        """Rebuild a fresh ledger from the logs; the submissions it disagrees on."""
        rebuilt = InMemorySubmissionLedger()
        end_ms = self._world.runtime.now_ms() if self._world else 0
        logged = [c for c in self.conversation_ids() if self.log_tail(c) is not None]
        run_sync(rebuild_ledger(self.log, rebuilt, logged, end_ms))
        mismatches = []
        for conversation_id in self.conversation_ids():
            for original in self.submissions(conversation_id):
                copy = run_sync(rebuilt.get(original.submission_id))
                if copy is None:
                    if original.input_applied:
                        mismatches.append(original.submission_id)
                    continue
                # Unsettled work may hold a reservation the log has not seen
                # yet; only what the log settled is canonical. A submission
                # settled by its abort intent alone (never ready) has no
                # record in the log: its record envelope is the ledger's,
                # created when the intent settled it, a time no log holds.
                # (Never claimed: a queued abort's record is in the log, but
                # the row does not say which of the two it was, since a
                # retried admission marks a settled row ready.)
                settled = original.outcome is not None and not (
                    original.epoch is None and original.abort_author is not None)
                if (copy.queue_seq, copy.outcome, copy.reserved_digest if settled else None) != (
                        original.queue_seq, original.outcome, original.reserved_digest if settled else None):
                    mismatches.append(original.submission_id)
                elif (copy.principal_id, copy.idempotency_key) == (original.principal_id, original.idempotency_key) \
                        and (copy.input_digest, copy.parent, copy.admission_group, copy.metadata) != (
                        original.input_digest, original.parent, original.admission_group, original.metadata):
                    # Rebuilt from its input record (not a placeholder): the
                    # same admission, parent link, group and metadata.
                    mismatches.append(original.submission_id)
        return mismatches

    def durable_state_snapshot(self, key: str) -> Any:
        return run_sync(self.ds.load(key))

    def _reader(self) -> LedgerRuns:
        world = self._world
        assert world is not None
        return LedgerRuns(self.ledger, self.log, self.schedules, "auditor", lease_ms=1,
                          now_ms=world.runtime.now_ms, sleep_ms=world.runtime.sleep_ms)

    def live_runs(self, schedule_id: str) -> tuple[str, ...]:
        return tuple(r.run_id for r in run_sync(self._reader().live_executions(schedule_id)))

    def schedule_high_water_ms(self, schedule_id: str) -> int | None:
        return run_sync(self._reader().schedule_high_water_ms(schedule_id))

    def held_runs(self, schedule_id: str) -> tuple[str, ...]:
        return tuple(run_sync(self.schedules.cursor(schedule_id)).held)

    def retained_runs(self) -> Iterator[tuple[ExecutionRecord, tuple]]:
        """(record, steps) of every settled run retention has not deleted yet."""
        reader = self._reader()
        for run_id in self.conversation_ids():
            record = run_sync(reader.load_execution(run_id))
            if record is None or record.status not in ("completed", "failed"):
                continue
            yield record, reader.step_records(run_id, self.log_records(run_id))

    def content_bytes(self, ref: str) -> bytes | None:
        try:
            return run_sync(self.content.get(ref))
        except Exception:  # noqa: BLE001 - missing or corrupt: the oracle reports it
            return None

    def content_has(self, ref: str) -> bool:
        return run_sync(self.content.has(ref))

    def live_findings(self) -> Any:
        return run_sync(self.findings.live_findings())

    def live_evidence(self) -> list[tuple[str, str]]:
        return [(f.finding_id, ref) for f in self.live_findings() for ref in f.evidence]

    def expired_unpinned_blobs(self, stored_before_ms: int) -> tuple[str, ...]:
        return run_sync(self.pins.expired_unpinned(stored_before_ms, 1_000))

    def findings_checkpoint(self, schedule_id: str) -> int | None:
        return run_sync(self.findings.checkpoint(schedule_id))

    def latest_checkpoint(self, conversation_id: str) -> Any:
        try:
            return run_sync(self.checkpoints.load_latest(conversation_id, 2 ** 53 - 1))
        except NotMaterialized:
            return None  # not in the log (admitted only, or deleted): no checkpoint is ever used

    # Read by the reference models' end-of-run audits (``scenarios.reference``).

    def kernel_execution(self, run_id: str) -> tuple[Any, tuple]:
        """(record or None, steps) of one run in the kernel's execution store."""
        return run_sync(self.kernel.load_execution(run_id)), run_sync(self.kernel.load_steps(run_id))

    def schedule_cursor(self, schedule_id: str) -> Any:
        return run_sync(self.schedules.cursor(schedule_id))

    def keyring_rows(self) -> tuple:
        """Every row of the keyring (``DataKey``), by data key id: () without one."""
        return () if self.keyring is None else self.keyring.rows()

    def pin_holders(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Every pinned ref with its holders, by ref."""
        return tuple((ref, run_sync(self.pins.holders(ref))) for ref in run_sync(self.pins.pinned_refs()))
