"""Disk faults on the real SQLite file: beyond the contract, SQLite only.

The other faults beyond the contract (``faults.beyond``) break a store's
promise through SQL; these break the disk under it. Each acts on the bytes
of the run's database file and its write-ahead log, between transactions
(a timed fault, fired by the run's one fault plan from a harness task, so no
store call is half-way through), and the stores must notice:

- ``latent-sector-error``: one page reads back as garbage. The page is one
  the last transaction wrote (a hot page: the next call on that table reads
  it), drawn among them; its latest copy is overwritten with drawn bytes, in
  the WAL frame that holds it and at its place in the database file (a
  checkpoint may already have copied it there). Readers must really read
  the disk again: every connection of the run drops its page cache
  (``PRAGMA shrink_memory``), as a restarted process would hold none.
- ``misdirected-write``: a page's content written at another page number:
  the latest copy of a drawn page of the last transaction overwritten with
  another page's, both in use.
- ``lost-tail``: the file rolled back to an earlier committed state, as
  after a power cut with a disk that acknowledged an fsync it never did. A
  harness task keeps a few snapshots of the committed database
  (``SNAPSHOT_EVERY_MS``); the fault writes a drawn earlier one back.
- ``torn-write``: the power cut tore the last transaction: the file and its
  WAL are copied as the disk holds them, the WAL's last frame cut at half
  its length or its second half overwritten with garbage, and SQLite's own
  WAL recovery opens the copy (it drops a transaction whose commit frame
  fails its checksum, and whatever that leaves is what survived).

After ``lost-tail`` and ``torn-write`` the database is written back through
SQLite's backup, so the connections the harness keeps open (a real power
cut would have killed them) see the surviving state consistently; the
server processes (the nodes of role ``worker``) die with the power and
restart after the drawn delay. After the page faults the processes keep
running: only their caches go.

What notices. A damaged page is what SQLite itself reports as "database
disk image is malformed" (``SQLITE_CORRUPT``) or "file is not a database":
every adapter's connection (``model.sqlite_db.CheckedConnection``) answers
that as the typed ``StorageCorrupted`` on every read and write path, never a
row it could not read and never "no row" in its place. Garbage that SQLite
cannot see (a row's text on an overflow page is only bytes to it) is text
that no longer decodes as the UTF-8 every adapter wrote: ``StorageCorrupted``
too; what still decodes meets the stores' own checks of the text they read
(the canonical decode, the log's chain digests, the ledger's row checks),
each a typed error of its own (``CORRUPTION_ERRORS``). The
checker ``storage-integrity`` (below) sees every store answer before any
other oracle and fails the run, naming the call and the error, at the first
typed corruption a store answers; at the end of a run nothing stopped, it
asks SQLite to check the whole file (``PRAGMA integrity_check``). A rolled
back or torn tail is a consistent older database: nothing in it is damaged,
and the oracles that follow the chains and the digests (the reference
model, ``log-chain``, ``cold-reopen``...) are what notice acknowledged
writes gone.

``latent-sector-error`` is judged stricter (``typed_detection``, the
run's ``World.beyond_judges``): the only
detection that counts is a typed corruption answer (``storage-integrity``,
or an audit refused with one): a store that hands the damaged page on as a
row (or as "no row") and leaves an oracle to notice the wrong answer has
failed, and the run says ``beyond-contract-undetected``.

Replay: the fault event records the kind, its time and its ``hit`` (its
number in the run); what it damages is drawn from a stream named by the
kind and that number (``disk/<kind>/<hit>``) over the file as it is then,
so a script replays the same damage.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import struct
from typing import Any

from faults.events import DiskDamage
from faults.kinds import DISK_FAULT_KINDS, LATENT_SECTOR_ERROR, LOST_TAIL, MISDIRECTED_WRITE, TORN_WRITE
from model.sqlite_db import StorageCorrupted
from sim.clock import MS_PER_MINUTE as MINUTE
from sim.invariants import Checker
from sim.scenario import SetupError
from sim.workload import Workload
from sim.world import FaultEvent, World

SITE = "sqlite.file"
# How often each kind fires (its first within minutes: a run's other broken
# promises are noticed within minutes too, and the first detection stops it).
EVERY_MS = (1 * MINUTE, 15 * MINUTE)
# The lost tail's snapshots of the committed database: how often, how many kept.
SNAPSHOT_EVERY_MS = 2 * MINUTE
SNAPSHOTS_KEPT = 4
# The processes that die with the power (the server's), by role.
POWER_CUT_ROLES = ("worker",)
STORAGE_INTEGRITY = "storage-integrity"
# The typed errors a store answers for text it found damaged.
CORRUPTION_ERRORS = frozenset({"StorageCorrupted", "CorruptSubmission", "UnsupportedLedgerVersion", "HistoryCorrupted",
                               "AcknowledgedWriteLost", "ContentCorrupted", "EnvelopeDamaged"})

_WAL_HEADER = 32
_FRAME_HEADER = 24


def wal_frames(wal: bytes) -> tuple[int, list[tuple[int, int, int]]]:
    """(page size, [(offset, page number, commit size), ...]) of the WAL's
    current generation up to its last commit frame: the frames whose salts
    are the header's (a reset WAL keeps older frames behind, with older
    salts). Empty when the WAL holds no committed frame."""
    if len(wal) < _WAL_HEADER:
        return 0, []
    page_size = struct.unpack_from(">I", wal, 8)[0]
    salts = wal[16:24]
    frames: list[tuple[int, int, int]] = []
    offset = _WAL_HEADER
    while offset + _FRAME_HEADER + page_size <= len(wal):
        pgno, commit = struct.unpack_from(">II", wal, offset)
        if wal[offset + 8:offset + 16] != salts:
            break
        frames.append((offset, pgno, commit))
        offset += _FRAME_HEADER + page_size
    last = max((i for i, f in enumerate(frames) if f[2] != 0), default=-1)
    return page_size, frames[:last + 1]


def last_transaction(frames: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The frames of the WAL's last committed transaction."""
    commits = [i for i, f in enumerate(frames) if f[2] != 0]
    if not commits:
        return []
    start = commits[-2] + 1 if len(commits) > 1 else 0
    return frames[start:commits[-1] + 1]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return b""


def _write_at(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


class _Pages:
    """Where each page's latest content lies: its last committed WAL frame
    and its slot in the database file (both written when damaged)."""

    def __init__(self, path: str) -> None:
        self.path = path
        wal = _read(path + "-wal")
        self.page_size, self.frames = wal_frames(wal)
        self.wal = wal
        self.file = _read(path)  # read once: a page's content is looked up many times
        if not self.page_size:
            header = self.file[:100]
            self.page_size = struct.unpack_from(">H", header, 16)[0] if len(header) == 100 else 4096
            self.page_size = 65536 if self.page_size == 1 else self.page_size
        self.file_pages = len(self.file) // self.page_size if self.page_size else 0
        self.latest = {pgno: offset for offset, pgno, _ in self.frames}

    def hot(self) -> list[int]:
        """The pages the last transaction wrote (page 1, the schema's, aside), or the file's."""
        pages = sorted({pgno for _, pgno, _ in last_transaction(self.frames) if pgno > 1})
        return pages or list(range(2, self.file_pages + 1))

    def in_use(self) -> list[int]:
        pages = sorted(pgno for pgno in self.latest if pgno > 1)
        return pages if len(pages) > 1 else list(range(2, self.file_pages + 1))

    def content(self, pgno: int) -> bytes:
        offset = self.latest.get(pgno)
        if offset is not None:
            start = offset + _FRAME_HEADER
            return self.wal[start:start + self.page_size]
        start = (pgno - 1) * self.page_size
        return self.file[start:start + self.page_size]

    def overwrite(self, pgno: int, data: bytes) -> None:
        assert len(data) == self.page_size, (len(data), self.page_size)
        offset = self.latest.get(pgno)
        if offset is not None:
            _write_at(self.path + "-wal", offset + _FRAME_HEADER, data)
        if pgno <= self.file_pages:
            _write_at(self.path, (pgno - 1) * self.page_size, data)


# The first byte of a b-tree page: interior/leaf, index/table.
_BTREE_PAGE_TYPES = (2, 5, 10, 13)


def _cells(content: bytes) -> int:
    """How many cells (rows, keys) a b-tree page holds; 0 for any other page
    (an overflow or free page). Page 1 is never drawn: no file header here."""
    if len(content) < 8 or content[0] not in _BTREE_PAGE_TYPES:
        return 0
    return struct.unpack_from(">H", content, 3)[0]


def _garbage(stream: Any, size: int) -> bytes:
    words = [stream.next_u64() for _ in range((size + 7) // 8)]
    return struct.pack(f">{len(words)}Q", *words)[:size]


def _restore(conn: sqlite3.Connection, source: sqlite3.Connection) -> None:
    """Write ``source``'s database over the run's, through SQLite (the
    connections still open see it as one commit)."""
    source.backup(conn)


class DiskFault:
    """One kind of disk fault (``kind``): a timed fault source of the plan
    (``FaultPlan.drive``), fired every ``every_ms`` until the heal instant,
    or at a script's times. A power cut (``lost-tail``, ``torn-write``)
    restarts the server's processes after ``restart_ms``."""

    def __init__(self, kind: str, owner: "DiskFaults") -> None:
        assert kind in DISK_FAULT_KINDS, kind
        self.kind = kind
        self.name = f"{owner.name}/{kind}"  # its stream's name: the instance's namespace
        self.every_ms = owner.every_ms
        self.restart_ms = owner.restart_ms
        self._owner = owner
        self._page: tuple[int, bytes] | None = None  # the page the last latent sector error garbled, and the garbage
        self._detail: dict[str, Any] = {}  # what the last firing did, for its ``disk.damage`` event
        self.fired = 0
        self.declined = 0

    def stream(self, world: World) -> Any:
        return world.streams[self.name]

    def propose(self, world: World, hit: int) -> FaultEvent | None:
        restart_ms = None
        if self.kind in (LOST_TAIL, TORN_WRITE):
            restart_ms = self.stream(world).between(*self.restart_ms)
        return FaultEvent(world.runtime.now_ms(), world.harness.label, SITE, self.kind, hit,
                          restart_after_ms=restart_ms)

    def apply(self, world: World, event: FaultEvent) -> bool:
        database = world.system.run_database()
        if database is None:
            return False
        draw = world.streams.fork(f"disk/{self.kind}/{event.hit}")
        self._page = None
        self._detail: dict[str, Any] = {}
        damaged = {LATENT_SECTOR_ERROR: self._latent_sector_error, MISDIRECTED_WRITE: self._misdirected_write,
                   LOST_TAIL: self._lost_tail, TORN_WRITE: self._torn_write}[self.kind](database, draw)
        if not damaged:
            self.declined += 1
            return False
        self.fired += 1
        fired = world.record_fault(world.harness, SITE, self.kind, event.hit or 0,
                                   restart_after_ms=event.restart_after_ms, beyond_contract=True)
        if self._page is not None:
            self._owner.pages_damaged.append((fired, *self._page))
        world.trace.emit(world.harness.label, DiskDamage.kind, {DiskDamage.kind_: self.kind, **self._detail})
        world.system.flush_page_caches()
        if event.restart_after_ms is not None:
            for node in [n for n in world.nodes.values() if n.alive and n.role in POWER_CUT_ROLES]:
                world.crash(node, restart_after_ms=event.restart_after_ms)
        return True

    # -- the damage -------------------------------------------------------------

    def _latent_sector_error(self, database: Any, draw: Any) -> bool:
        pages = _Pages(database.path)
        hot = pages.hot()
        if not hot:
            return False
        pgno = draw.choice(hot)
        garbage = _garbage(draw, pages.page_size)
        pages.overwrite(pgno, garbage)
        self._page = (pgno, garbage)
        self._detail = {DiskDamage.page: pgno}
        return True

    def _misdirected_write(self, database: Any, draw: Any) -> bool:
        # Between two pages that hold rows: an empty page written over an
        # index that the next deletes empty anyway would heal unseen.
        pages = _Pages(database.path)
        target = [p for p in pages.hot() if _cells(pages.content(p))]
        if not target:
            return False
        pgno = draw.choice(target)
        content = pages.content(pgno)
        others = [p for p in pages.in_use() if p != pgno and _cells(pages.content(p))
                  and pages.content(p) != content]
        if not others:
            return False
        # Never withdrawn as healed: a write that reads a misdirected page sees
        # a sound page, so its rewrite may carry the damage on.
        source = draw.choice(others)
        pages.overwrite(pgno, pages.content(source))
        self._detail = {DiskDamage.page: pgno, DiskDamage.from_page: source}
        return True

    def _lost_tail(self, database: Any, draw: Any) -> bool:
        current = database.conn.serialize()
        # The 100-byte header aside (its change counter moves with no change of content).
        earlier = [(at_ms, snapshot) for at_ms, snapshot in self._owner.snapshots if snapshot[100:] != current[100:]]
        if not earlier:
            return False
        at_ms, snapshot = earlier[draw.below(len(earlier))] if len(earlier) > 1 else earlier[0]
        self._detail = {DiskDamage.snapshot_ms: at_ms}
        source = sqlite3.connect(":memory:")
        try:
            # Bytes 18-19 say WAL (2); a database in memory has no WAL to
            # open: read it as a rollback-journal one (1). The backup marks
            # the run's file WAL again.
            source.deserialize(snapshot[:18] + b"\x01\x01" + snapshot[20:])
            _restore(database.conn, source)
        finally:
            source.close()
        return True

    def _torn_write(self, database: Any, draw: Any) -> bool:
        path = database.path
        wal = _read(path + "-wal")
        page_size, frames = wal_frames(wal)
        torn = last_transaction(frames)
        if not torn:
            return False
        offset = torn[-1][0]  # the commit frame: written last
        half = _FRAME_HEADER + page_size // 2
        if draw.below(2) == 0:
            image_wal = wal[:offset + half]  # cut half-way through
            how = "cut"
        else:
            end = offset + _FRAME_HEADER + page_size
            image_wal = wal[:offset + half] + _garbage(draw, end - offset - half)
            how = "overwritten"
        self._detail = {DiskDamage.frames: len(torn), DiskDamage.torn: how}
        copy = path + ".power-cut"
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(copy + suffix)
        try:
            with open(copy, "wb") as handle:
                handle.write(_read(path))
            with open(copy + "-wal", "wb") as handle:
                handle.write(image_wal)
            survivor = sqlite3.connect(copy)  # SQLite's WAL recovery decides what survived
            try:
                _restore(database.conn, survivor)
            finally:
                survivor.close()
        finally:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(copy + suffix)
        return True


class DiskFaults(Workload):
    """The disk faults of a run on SQLite beyond the contract: one timed
    source per kind in ``kinds``, the snapshots the lost tail goes back to,
    and the ``storage-integrity`` check. A power cut restarts the server's
    processes after ``restart_ms``; each kind fires every ``every_ms``."""

    name = "disk-faults"

    def __init__(self, kinds: tuple[str, ...] = DISK_FAULT_KINDS, *, restart_ms: tuple[int, int],
                 every_ms: tuple[int, int] = EVERY_MS) -> None:
        assert kinds and all(kind in DISK_FAULT_KINDS for kind in kinds), kinds
        self.kinds = tuple(kinds)
        self.restart_ms = restart_ms
        self.every_ms = every_ms
        self.integrity = StorageIntegrity()
        self.snapshots: list[tuple[int, bytes]] = []
        # (fault event, page, the garbage) of each latent sector error: judged at the audit (``_withdraw_healed``).
        self.pages_damaged: list[tuple[FaultEvent, int, bytes]] = []
        self.healed = 0
        self.sources: list[DiskFault] = []

    def checks(self) -> list[Checker]:
        return [self.integrity]

    def setup(self, world: World) -> None:
        self.sources = [DiskFault(kind, self) for kind in self.kinds]
        integrity = self.integrity
        integrity.fired = lambda: any(e.kind in DISK_FAULT_KINDS for e in world.beyond_contract)
        # First among the store observers: a typed answer is named as what it
        # is, before the reference model reports the divergence it makes.
        if integrity.on_port_call in world.port_observers:
            world.port_observers.remove(integrity.on_port_call)
        world.port_observers.insert(0, integrity.on_port_call)
        if LATENT_SECTOR_ERROR in self.kinds:
            world.beyond_judges[LATENT_SECTOR_ERROR] = typed_detection
        integrity.before_audit = lambda: self._withdraw_healed(world)

    def _withdraw_healed(self, world: World) -> None:
        """At the end of a run nothing stopped: a page a latent sector error
        damaged whose latest copy no longer holds the garbage was rewritten
        whole before anything read it (a read would have been answered
        ``StorageCorrupted``, and the run stopped; SQLite reuses a freed page
        without reading it), as a disk remaps a bad sector on its next write. That fault broke no promise
        anyone could see: it is withdrawn from the broken promises (still
        counted as fired, and as ``disk_faults_healed``), so the run is not
        judged a silent pass for it."""
        database = world.system.run_database()
        if database is None or not self.pages_damaged:
            return
        pages = _Pages(database.path)
        for event, pgno, written in self.pages_damaged:
            if pages.content(pgno) != written and event in world.beyond_contract:
                world.beyond_contract.remove(event)
                self.healed += 1

    def start(self, world: World) -> None:
        # Whatever the kinds: a script's replay keeps the harness's timers as they were.
        world.spawn_harness(f"{self.name}:snapshots", self._snapshot_loop(world))
        for source in self.sources:
            world.plan.drive(world, source)

    async def _snapshot_loop(self, world: World) -> None:
        # Bounded by the run: the harness's tasks end with it.
        while True:
            await world.runtime.sleep_ms(SNAPSHOT_EVERY_MS)
            database = world.system.run_database()
            if database is None:
                return
            self.snapshots.append((world.runtime.now_ms(), database.conn.serialize()))
            del self.snapshots[:-SNAPSHOTS_KEPT]

    def metrics(self) -> dict[str, Any]:
        return {"disk_faults": {s.kind: s.fired for s in self.sources},
                "disk_faults_declined": {s.kind: s.declined for s in self.sources},
                "disk_faults_healed": self.healed}


def typed_detection(violation: Any) -> bool:
    """Whether ``violation`` is a typed answer of a damaged store: what
    ``latent-sector-error`` counts as its detection (``World.beyond_judges``)."""
    if violation.invariant == STORAGE_INTEGRITY:
        return True
    return violation.message.startswith("audit could not read the stores back: ") and any(
        name in violation.message for name in CORRUPTION_ERRORS)


def _corruption_named(error: BaseException | None) -> str | None:
    """The typed corruption ``error`` is, or wraps (its cause, its ``cause``)."""
    for _ in range(4):  # a wrapped error is wrapped once or twice
        if error is None:
            return None
        name = getattr(type(error), "name", None) or type(error).__name__
        if isinstance(error, StorageCorrupted) or name in CORRUPTION_ERRORS:
            return name if isinstance(name, str) else type(error).__name__
        error = getattr(error, "cause", None) or error.__cause__
    return None


class StorageIntegrity(Checker):
    """``storage-integrity``: no store answers a damaged file's typed error
    unnoticed (beyond the contract, on SQLite). ``StorageCorrupted`` is
    never a store's answer in a sound run; after a disk fault, any typed
    corruption answer is the detection.
    Sees every store answer before the other oracles (so the typed answer
    is what the run names, not a divergence it causes). At the end, SQLite's
    own ``integrity_check`` of the whole file."""

    name = STORAGE_INTEGRITY
    kinds = ()

    def __init__(self) -> None:
        super().__init__()
        self.disk_kinds: set[str] = set()
        self.typed_answers = 0

    def on_port_call(self, call: Any) -> None:
        self.checks += 1
        if call.error is None:
            return
        named = _corruption_named(call.error)
        if named is None:
            return
        fired = self._world_fired()
        if named != StorageCorrupted.name and not fired:
            return  # another beyond fault's damaged row: its own oracles judge it
        self.typed_answers += 1
        self.fail(f"{call.node} {call.port}.{call.method} answered {named} at {call.time_ms} ms: "
                  f"{call.error}", (call.node,))

    def _world_fired(self) -> bool:
        return self.fired is not None and self.fired()

    fired: Any = None  # () -> whether a disk fault fired, bound by ``DiskFaults.setup``

    before_audit: Any = None  # () -> None: the disk faults' own judgement first (``DiskFaults._withdraw_healed``)

    def audit(self, view: Any) -> None:
        if self.before_audit is not None:
            self.before_audit()
        problems = view.integrity_problems()
        self.checks += 1
        if problems:
            self.fail(f"SQLite's integrity_check of the run's file: {'; '.join(problems[:3])}")

    def metrics(self) -> dict[str, Any]:
        return {"storage_corruption_answers": self.typed_answers}


def disk_faults(run: Any, *, restart_ms: tuple[int, int]) -> list[DiskFaults]:
    """The disk faults of a run: every kind on SQLite beyond the contract
    (or the kinds of a replayed script that has some), none otherwise. A script
    with a disk fault on another store is refused, one line."""
    from faults.beyond import beyond_enabled

    opts = run.opts
    scripted = sorted({e.kind for e in (opts.fault_script or ()) if getattr(e, "kind", None) in DISK_FAULT_KINDS})
    if opts.store != "sqlite":
        if scripted:
            raise SetupError(f"{', '.join(scripted)} acts on the SQLite file: this run uses --store {opts.store} "
                             "(add --store sqlite)")
        return []
    if not (beyond_enabled(opts) or scripted):
        return []
    # A script replays what it holds: the disk kinds it has, if any.
    kinds = tuple(scripted) if opts.fault_script is not None else DISK_FAULT_KINDS
    return [DiskFaults(kinds, restart_ms=restart_ms)] if kinds else []
