"""Disk faults on the real SQLite file (``faults.disk``), beyond the contract.

- Each kind really changes the file (its bytes, and what SQLite reads back),
  between transactions, and a damaged page reads as ``StorageCorrupted``,
  typed, on every read path.
- A run with each kind ends DETECTED, typed where it must be (a latent
  sector error: the store's own ``StorageCorrupted``, named by
  ``storage-integrity``), never with a traceback.
- Memory runs are not offered them, and a script that asks is one line.
- A script replays a disk fault (a run where they are off keeps its digest: tests/test_digests_kept.py).
"""
from __future__ import annotations

import json
import os
import sqlite3
import types

import pytest

from faults.disk import (DiskFault, DiskFaults, STORAGE_INTEGRITY, last_transaction, wal_frames)
from faults.kinds import (ALL_FAULT_KINDS, BEYOND_CONTRACT_KINDS, DISK_FAULT_KINDS, LATENT_SECTOR_ERROR, LOST_TAIL,
                          MISDIRECTED_WRITE, TIMED_FAULT_KINDS, TORN_WRITE)
from model.sqlite_db import StorageCorrupted, corruption_of, open_database
from scenarios import registry
from sim.clock import parse_duration_ms
from sim.face.cli import main as cli_main
from sim.rng import Streams
from sim.runner import DETECTED, FAIL, UNDETECTED, run
from sim.scenario import ScenarioOptions
from sim.world import FaultEvent

ROWS = 400


# -- the damage, on a real file ------------------------------------------------------------


def _database(tmp_path, rows: int = ROWS):
    """A WAL database with ``rows`` rows written in transactions of ten."""
    path = str(tmp_path / "disk.db")
    conn = open_database(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    for start in range(0, rows, 10):
        conn.execute("BEGIN IMMEDIATE")
        for i in range(start, start + 10):
            conn.execute("INSERT INTO t VALUES (?, ?)", (i, f"row {i} " + "x" * 60))
        conn.execute("COMMIT")
    return types.SimpleNamespace(path=path, conn=conn)


def _source(kind: str, snapshots=()):
    owner = types.SimpleNamespace(name="disk-faults", every_ms=(1, 2), restart_ms=(1, 2), snapshots=list(snapshots))
    return DiskFault(kind, owner)


def _damage(kind: str, database, snapshots=()) -> bool:
    method = {LATENT_SECTOR_ERROR: "_latent_sector_error", MISDIRECTED_WRITE: "_misdirected_write",
              LOST_TAIL: "_lost_tail", TORN_WRITE: "_torn_write"}[kind]
    return getattr(_source(kind, snapshots), method)(database, Streams(7).fork(f"test/{kind}"))


def _on_disk(path: str) -> bytes:
    found = b""
    for name in (path, path + "-wal"):
        with open(name, "rb") as handle:
            found += handle.read()
    return found


def _scan(conn) -> list:
    conn.execute("PRAGMA shrink_memory")  # what a reader that cached nothing reads
    return [row for row in conn.execute("SELECT id, v FROM t ORDER BY id")]


def test_the_wal_is_read_as_sqlite_wrote_it(tmp_path):
    database = _database(tmp_path, rows=30)
    with open(database.path + "-wal", "rb") as handle:
        page_size, frames = wal_frames(handle.read())
    assert page_size == database.conn.execute("PRAGMA page_size").fetchone()[0]
    assert frames and frames[-1][2] != 0  # ends with a commit frame
    last = last_transaction(frames)
    assert last and last[-1] == frames[-1] and all(f[2] == 0 for f in last[:-1])


def test_a_latent_sector_error_garbles_a_page_and_every_read_path_says_storage_corrupted(tmp_path):
    database = _database(tmp_path)
    before = _on_disk(database.path)
    assert _damage(LATENT_SECTOR_ERROR, database)
    assert _on_disk(database.path) != before
    conn = database.conn
    conn.execute("PRAGMA shrink_memory")
    failures = []
    for read in (lambda: conn.execute("SELECT v FROM t WHERE id = ?", (ROWS - 1,)).fetchone(),
                 lambda: conn.execute("SELECT id FROM t").fetchall(),
                 lambda: [row for row in conn.execute("SELECT id FROM t")],
                 lambda: conn.execute("SELECT count(*) FROM t").fetchone(),
                 lambda: conn.execute("SELECT id FROM t").fetchmany(ROWS),
                 # a write reads the pages it changes (the log's records go in with executemany)
                 lambda: conn.executemany("INSERT INTO t VALUES (?, ?)", [(ROWS + i, "new") for i in range(50)]),
                 lambda: conn.cursor().executemany("UPDATE t SET v = ? WHERE id = ?", [("x", i) for i in range(ROWS)])):
        with pytest.raises(StorageCorrupted) as caught:
            read()
        failures.append(caught.value)
    for error in failures:
        assert error.name == "StorageCorrupted" and error.retryable is False
        assert isinstance(error.__cause__, sqlite3.DatabaseError) and "malformed" in str(error)


def test_garbage_sqlite_cannot_see_inside_a_rows_text_is_storage_corrupted_too(tmp_path):
    """The last overflow page of a long row holds nothing but the row's
    bytes: SQLite reads garbage there as the text. The adapter never wrote
    text that is not UTF-8, so reading some is the damage, typed."""
    from faults.disk import _Pages, _garbage

    path = str(tmp_path / "long.db")
    conn = open_database(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    conn.execute("INSERT INTO t VALUES (1, ?)", ("a" * 20_000,))
    pages = _Pages(path)
    last_overflow = pages.hot()[-1]
    pages.overwrite(last_overflow, _garbage(Streams(3).fork("test"), pages.page_size))
    conn.execute("PRAGMA shrink_memory")
    with pytest.raises(StorageCorrupted) as caught:
        conn.execute("SELECT v FROM t WHERE id = 1").fetchone()
    assert "UTF-8" in str(caught.value)


def test_a_garbled_page_rewritten_before_any_read_is_withdrawn_as_healed(tmp_path):
    """A page a latent sector error garbled that a write replaced whole
    (SQLite reuses a freed page without reading it) broke no promise anyone
    could see: the audit withdraws it; one still garbled stays broken."""
    from faults.disk import _Pages

    database = _database(tmp_path)
    owner = DiskFaults(restart_ms=(1, 2))
    source = DiskFault(LATENT_SECTOR_ERROR, owner)
    world = types.SimpleNamespace(system=types.SimpleNamespace(run_database=lambda: database), beyond_contract=[])
    for hit in (1, 2):
        if hit == 2:  # the last transaction writes another table's pages
            database.conn.execute("CREATE TABLE t2 (id INTEGER PRIMARY KEY)")
            database.conn.execute("INSERT INTO t2 VALUES (1)")
        assert source._latent_sector_error(database, Streams(hit).fork("test"))
        event = FaultEvent(hit, "harness", "sqlite.file", LATENT_SECTOR_ERROR, hit, None, None)
        world.beyond_contract.append(event)
        owner.pages_damaged.append((event, *source._page))
    (first, healed_page, _), (second, garbled_page, _) = owner.pages_damaged
    assert healed_page != garbled_page
    pages = _Pages(database.path)
    pages.overwrite(healed_page, bytes(pages.page_size))  # a whole-page write of another content
    owner._withdraw_healed(world)
    assert owner.healed == 1 and world.beyond_contract == [second]


def test_sqlite_own_errors_that_are_not_damage_stay_as_they_are(tmp_path):
    conn = open_database(str(tmp_path / "plain.db"))
    with pytest.raises(sqlite3.OperationalError) as caught:
        conn.execute("SELECT * FROM no_such_table")
    assert not isinstance(caught.value, StorageCorrupted)
    assert corruption_of(caught.value) is None
    conn.execute("CREATE TABLE u (k INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO u VALUES (1)")
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO u VALUES (1)")


def test_a_misdirected_write_puts_one_page_at_another_and_sqlite_sees_the_file_damaged(tmp_path):
    database = _database(tmp_path)
    before = _on_disk(database.path)
    assert _damage(MISDIRECTED_WRITE, database)
    assert _on_disk(database.path) != before
    database.conn.execute("PRAGMA shrink_memory")
    try:
        found = [r[0] for r in database.conn.execute("PRAGMA integrity_check").fetchall()]
    except StorageCorrupted:
        found = ["StorageCorrupted"]
    assert found != ["ok"], found


def test_a_lost_tail_rolls_the_file_back_to_an_earlier_commit(tmp_path):
    database = _database(tmp_path, rows=100)
    snapshot = database.conn.serialize()
    for i in range(100, 150):
        database.conn.execute("INSERT INTO t VALUES (?, ?)", (i, "later"))
    assert _damage(LOST_TAIL, database, snapshots=[(0, snapshot)])
    rows = _scan(database.conn)
    assert [r[0] for r in rows] == list(range(100))  # a consistent earlier state: nothing damaged
    assert database.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert database.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # Nothing changed since the only snapshot: nothing to lose, it does not fire.
    assert not _damage(LOST_TAIL, database, snapshots=[(0, database.conn.serialize())])


def test_a_torn_write_loses_the_last_transaction_only(tmp_path):
    database = _database(tmp_path, rows=100)
    database.conn.execute("BEGIN IMMEDIATE")
    database.conn.execute("INSERT INTO t VALUES (?, ?)", (999, "the last transaction"))
    database.conn.execute("COMMIT")
    assert _damage(TORN_WRITE, database)
    assert [r[0] for r in _scan(database.conn)] == list(range(100))
    assert not any(name.endswith(".power-cut") or ".power-cut-" in name for name in os.listdir(tmp_path))


# -- runs: each kind ends DETECTED ------------------------------------------------------------


def _scripted(kind: str, seed: int, *, at: str = "5m", duration: str = "8m"):
    restart_ms = 5_000 if kind in (LOST_TAIL, TORN_WRITE) else None
    script = (FaultEvent(parse_duration_ms(at), "harness", "sqlite.file", kind, 1, restart_ms, None),)
    return run(registry.get("ledger-storm"), ScenarioOptions(
        seed=seed, duration_ms=parse_duration_ms(duration), store="sqlite", swarm=True, fault_script=script))


@pytest.mark.parametrize("kind", DISK_FAULT_KINDS)
def test_each_disk_fault_fires_once_and_the_run_ends_detected(kind):
    result = _scripted(kind, 1)
    assert result.faults.get(kind) == 1
    assert [e.kind for e in result.beyond_contract] == [kind]
    assert result.status == DETECTED, [(v.invariant, v.message[:200]) for v in result.violations]
    first = result.violations[0]
    if kind == LATENT_SECTOR_ERROR:
        assert first.invariant == STORAGE_INTEGRITY and "StorageCorrupted" in first.message
    assert "Traceback" not in first.message


@pytest.mark.parametrize("kind, fields", [(LATENT_SECTOR_ERROR, {"page"}), (MISDIRECTED_WRITE, {"page", "from_page"}),
                                          (LOST_TAIL, {"snapshot_ms"}), (TORN_WRITE, {"frames", "torn"})])
def test_the_trace_says_what_each_disk_fault_did(kind, fields):
    import io

    from faults.events import DiskDamage

    restart_ms = 5_000 if kind in (LOST_TAIL, TORN_WRITE) else None
    script = (FaultEvent(parse_duration_ms("5m"), "harness", "sqlite.file", kind, 1, restart_ms, None),)
    stream = io.StringIO()
    run(registry.get("ledger-storm"), ScenarioOptions(seed=1, duration_ms=parse_duration_ms("6m"), store="sqlite",
                                                      swarm=True, fault_script=script), trace_stream=stream)
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    (damage,) = [e for e in events if e["kind"] == DiskDamage.kind]
    assert DiskDamage.check(damage["fields"]) is None
    assert damage["fields"]["kind"] == kind and set(damage["fields"]) - {"kind"} == fields
    fault = next(e for e in events if e["kind"] == "fault" and e["fields"]["kind"] == kind)
    assert fault["seq"] < damage["seq"] and fault["fields"]["site"] == "sqlite.file"


def test_a_power_cut_restarts_the_servers_processes():
    result = _scripted(TORN_WRITE, 2)
    fired = next(e for e in result.fault_script if getattr(e, "kind", None) == TORN_WRITE)
    assert fired.restart_after_ms == 5_000
    assert result.stats["worker_crashes"] >= 1


def test_a_run_beyond_the_contract_on_sqlite_draws_the_disk_kinds_and_names_its_detection(capsys, tmp_path):
    code = cli_main(["run", "ledger-storm", "--seed", "47", "--store", "sqlite", "--beyond-contract",
                     "--duration", "5m", "--no-progress", "--repro-dir", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    body = json.loads(captured.out)
    assert code == 0 and body["status"] == DETECTED
    assert body["faults"].get(LATENT_SECTOR_ERROR) == 1
    assert body["violations"][0]["name"] == STORAGE_INTEGRITY and "StorageCorrupted" in body["violations"][0]["message"]


def test_a_script_replays_the_disk_fault():
    options = dict(seed=47, duration_ms=parse_duration_ms("5m"), store="sqlite", swarm=True, beyond_contract=True)
    first = run(registry.get("ledger-storm"), ScenarioOptions(**options))
    assert LATENT_SECTOR_ERROR in [e.kind for e in first.beyond_contract]
    again = run(registry.get("ledger-storm"), ScenarioOptions(**options, fault_script=first.fault_script))
    assert (again.status, again.trace_digest) == (first.status, first.trace_digest)
    assert again.faults.get(LATENT_SECTOR_ERROR) == 1


# -- where they are offered ----------------------------------------------------------------


def test_a_sweep_told_no_store_runs_every_second_beyond_seed_on_sqlite():
    from sim.face.sweep import SweepOptions

    opts = SweepOptions(seeds=range(64), sqlite_every=4)
    beyond = [seed for seed in range(64) if opts.beyond(seed)]
    assert [seed for seed in beyond if opts.store(seed) == "sqlite"] == [15, 31, 47, 63]
    assert [seed for seed in beyond if opts.store(seed) == "memory"] == [7, 23, 39, 55]


def test_the_kinds_are_timed_beyond_the_contract_and_listed():
    for kind in DISK_FAULT_KINDS:
        assert kind in ALL_FAULT_KINDS and kind in TIMED_FAULT_KINDS and kind in BEYOND_CONTRACT_KINDS


def test_memory_runs_are_not_offered_them_and_a_script_that_asks_is_one_line(tmp_path, capsys):
    from sim.face.describe import describe
    from sim.scenario import Run
    from sim.world import World

    scenario = registry.get("ledger-storm")

    def built(store: str):
        opts = ScenarioOptions(seed=1, duration_ms=parse_duration_ms("10m"), store=store, beyond_contract=True,
                               swarm=False)
        return scenario.build(Run(opts, scenario.swarm_space.choices_for(World(1), opts), scenario))

    assert not any(isinstance(w, DiskFaults) for w in built("memory").workloads)
    assert [w.kinds for w in built("sqlite").workloads if isinstance(w, DiskFaults)] == [DISK_FAULT_KINDS]
    beyond = {e["site"]: e for e in describe(scenario)["beyond_contract"]}
    assert beyond["sqlite.file"]["kinds"] == list(DISK_FAULT_KINDS) and beyond["sqlite.file"]["stores"] == ["sqlite"]
    assert beyond["sqlite.file"]["checks"] == [STORAGE_INTEGRITY]
    script = tmp_path / "disk.json"
    script.write_text(json.dumps([{"time_ms": 60_000, "node": "harness", "site": "sqlite.file",
                                   "kind": LATENT_SECTOR_ERROR, "hit": 1}]))
    code = cli_main(["run", "ledger-storm", "--seed", "1", "--duration", "10m", "--store", "memory",
                     "--faults", str(script), "--no-progress", "--repro-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("loomsim: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert "latent-sector-error acts on the SQLite file" in err and "--store sqlite" in err


def test_a_script_without_disk_kinds_brings_none():
    from sim.scenario import Run
    from sim.world import World

    scenario = registry.get("ledger-storm")
    script = (FaultEvent(60_000, "workers/worker-1", "log.append", "lost-write", 1, None, None),)
    opts = ScenarioOptions(seed=1, duration_ms=parse_duration_ms("10m"), store="sqlite", swarm=False,
                           fault_script=script)
    stack = scenario.build(Run(opts, scenario.swarm_space.choices_for(World(1), opts), scenario))
    assert not any(isinstance(w, DiskFaults) for w in stack.workloads)


