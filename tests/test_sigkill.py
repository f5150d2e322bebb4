"""A real process kill (issue acceptance, persistence §3, §6, §9.2).

A subprocess worker (tests/sigkill_worker.py) writes the Submission Ledger
and the conversation log into ONE SQLite file, submission after submission.
We SIGKILL it mid-run at a seeded moment, reopen the file with fresh
adapters and check that:

- the file is intact (``PRAGMA integrity_check``) and every conversation's
  recovery read returns exactly ``tail_seq`` gap-free records whose digest
  chain recomputes to the stored tail digest (``verify_on_open`` too);
- every batch is whole: each batch id's records are contiguous, match its
  batch row, and number exactly what the worker wrote in one append;
- the ledger agrees with the log: a finalized submission has exactly one
  settlement record in its log, whose digest is the reserved digest; nothing
  is finalized without a reservation; an input marker implies the input
  record; at most one claimed-and-unsettled submission per conversation;
  settled submissions are a FIFO prefix; log epochs never decrease;
  ``scan_nonterminal`` shows at most the one in-flight submission; and
  everything the worker reported settled is durably settled.

The last operation may or may not have committed, never half. Then we
finish the interrupted work like a restarted worker (claim anew at a higher
epoch, re-use an already-appended settlement record — the canonical record
wins) and check that everything is settled exactly once.

Real time is used only to pick the kill moment; every wait that decides
correctness is on the worker's own output (or its exit).
"""
from __future__ import annotations

import importlib.util
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import attrs
import pytest

from model.canonical import digest
from model.conversation.recovery import read_recovery_prefix
from model.conversation.records import FenceRejected, NotMaterialized
from model.conversation.sqlite_store import SqliteConversationStore
from model.ledger.records import Claim, OwnershipLost
from model.ledger.rules import submission_id_for
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.sqlite_db import open_database
from model.ledger.records import settlement_envelope, settlement_of


ROOT = Path(__file__).resolve().parent.parent
WORKER_PATH = Path(__file__).resolve().parent / "sigkill_worker.py"

_spec = importlib.util.spec_from_file_location("sigkill_worker", WORKER_PATH)
W = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(W)
run = W.run

N_CONVERSATIONS = 3
STARTUP_TIMEOUT_S = 30.0
RECOVERY_NOW_MS = 10**12  # far past every lease the worker took
RECOVERY_OWNER = "worker-2"  # the restarted worker: another owner, a new epoch
RECOVERY_LEASE_MS = 60_000


# --- running and killing the worker ---------------------------------------------


def _kill_worker(
    tmp_path: Path, seed: int, settle_at_least: int, delay_s: float, pause: str | None = None
) -> tuple[Path, list[str]]:
    """Start the worker, wait (event-driven) for ``settle_at_least`` settled
    lines, sleep ``delay_s``, SIGKILL it. With ``pause`` (``OP:N``) wait
    instead for the worker to announce it stopped at that crash point.
    Returns the db path and every submission id the worker reported settled."""
    db = tmp_path / "sigkill.db"
    stderr_path = tmp_path / "worker.stderr"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER_PATH), str(db), str(N_CONVERSATIONS), str(seed)]
            + ([pause] if pause else []),
            stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=str(ROOT),
        )
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for raw in proc.stdout:
            lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    reported: list[str] = []
    killed = False
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        paused = False
        while (not paused) if pause else len(reported) < settle_at_least:
            remaining = deadline - time.monotonic()
            try:
                line = lines.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                pytest.fail(
                    f"worker settled only {len(reported)} of {settle_at_least} submissions within "
                    f"{STARTUP_TIMEOUT_S} s; stderr:\n{stderr_path.read_text()}"
                )
            if line is None:
                proc.wait(timeout=10)
                pytest.fail(
                    f"worker exited early (rc {proc.returncode}) after {len(reported)} settlements; "
                    f"stderr:\n{stderr_path.read_text()}"
                )
            if line.startswith("settled "):
                reported.append(line.split(" ", 1)[1])
            paused = line.startswith("paused ")
        if delay_s > 0:
            time.sleep(delay_s)  # only picks the moment; never decides correctness
        os.kill(proc.pid, signal.SIGKILL)
        killed = True
        proc.wait(timeout=10)
    finally:
        if not killed and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    reader.join(timeout=10)
    assert not reader.is_alive(), "worker stdout did not reach EOF after the kill"
    assert proc.returncode == -signal.SIGKILL, (
        f"worker was not killed by SIGKILL (rc {proc.returncode}); stderr:\n{stderr_path.read_text()}"
    )
    while True:  # lines written between our last read and the kill
        line = lines.get_nowait()
        if line is None:
            break
        if line.startswith("settled "):
            reported.append(line.split(" ", 1)[1])
    return db, reported


def _reopen(db: Path):
    conn = open_database(str(db))
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    ledger = SqliteSubmissionLedger(conn)
    log = SqliteConversationStore(conn, verify_on_open=True)  # recomputes every chain
    return conn, ledger, log


# --- the invariants ---------------------------------------------------------------


def _stage(rec, log_input: bool, log_settle: bool, materialized: bool) -> str:
    """Which operation the kill landed after (for diagnostics)."""
    if rec.settled:
        return "finalized (not yet reported)"
    if log_settle:
        return "settlement appended, not finalized"
    if rec.reserved_digest is not None:
        return "reserved, settlement not appended"
    if rec.input_applied:
        return "input applied (steps in progress)"
    if log_input:
        return "input appended, marker not set"
    if rec.owner_id is not None:
        return "claimed, input not appended"
    if rec.ready:
        return "ready, not claimed"
    if materialized:
        return "admitted and materialized, not ready"
    return "admitted, not materialized"


def check_invariants(conn, ledger, log, seed: int, reported: list[str]) -> dict:
    """Everything the file must satisfy after a kill (or after recovery).
    Returns {"nonterminal": [...], "stages": [...], "submissions": n}."""
    assert log.verify_all() == conn.execute("SELECT count(*) FROM conv_conversations").fetchone()[0]
    ledger_conversations = dict(
        conn.execute("SELECT conversation_id, last_queue_seq FROM ledger_conversations").fetchall()
    )
    ledger_epochs = dict(conn.execute("SELECT conversation_id, epoch FROM ledger_conversations").fetchall())
    log_conversations = {row[0] for row in conn.execute("SELECT conversation_id FROM conv_conversations")}
    assert log_conversations <= set(ledger_conversations), "a log conversation without any admission"

    total_records = 0
    total_batches = 0
    stages = []
    unsettled_all = []
    settled_ids = set()
    for cid, last_queue_seq in sorted(ledger_conversations.items()):
        materialized = cid in log_conversations
        records = ()
        if materialized:
            prefix = run(read_recovery_prefix(log, cid))  # chain recomputes to the tail digest
            records = prefix.records
            assert len(records) == prefix.tail.tail_seq
            assert [r.seq for r in records] == list(range(1, prefix.tail.tail_seq + 1))
            assert prefix.tail.epoch <= ledger_epochs[cid]
        total_records += len(records)

        # Epochs never decrease along the log, all come from ledger claims.
        epochs = [r.envelope.epoch for r in records]
        assert epochs == sorted(epochs), f"{cid}: epochs decrease along the log"
        assert all(1 <= e <= ledger_epochs[cid] for e in epochs), (cid, set(epochs), ledger_epochs[cid])
        assert all(r.envelope.producer_id in (W.OWNER, RECOVERY_OWNER) for r in records)

        # Every batch is whole: contiguous, matches its batch row, and holds
        # exactly the records the worker put into that one append.
        by_batch: dict[str, list] = defaultdict(list)
        for r in records:
            by_batch[r.batch_id].append(r)
        for bid, batch in by_batch.items():
            seqs = [r.seq for r in batch]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"{cid}/{bid}: batch not contiguous"
            row = run(log.lookup_batch(cid, bid))
            assert row is not None, f"{cid}/{bid}: records without a batch row"
            assert (row.first_seq, row.last_seq) == (seqs[0], seqs[-1]), (bid, row, seqs)
            assert {r.envelope.epoch for r in batch} == {row.epoch}
            sid, _, kind = bid.rpartition(":")
            n = ledger_input_n(ledger, sid)
            if kind in ("input", "settle"):
                expected = 1
            else:
                assert kind[:1] == "s" and kind[1:].isdigit(), bid
                expected = W.step_batch_sizes(seed, n)[int(kind[1:])]
            assert len(batch) == expected, f"{cid}/{bid}: half a batch ({len(batch)} of {expected} records)"
        total_batches += len(by_batch)

        inputs: dict[str, list] = defaultdict(list)
        settles: dict[str, list] = defaultdict(list)
        for r in records:
            if r.envelope.family == "input":
                inputs[r.envelope.payload["submissionId"]].append(r)
            elif r.envelope.family == "submission-settled":
                settles[r.envelope.payload["submissionId"]].append(r)

        seen_unsettled = False
        claimed_unsettled = []
        for queue_seq in range(1, last_queue_seq + 1):
            sid = submission_id_for(cid, queue_seq)
            rec = run(ledger.get(sid))
            assert rec is not None and rec.queue_seq == queue_seq
            n = rec.input["n"]
            assert rec.idempotency_key == f"k{n}" and W.conversation_for(n, N_CONVERSATIONS) == cid
            assert len(inputs[sid]) <= 1 and len(settles[sid]) <= 1, sid
            if rec.input_applied:
                assert len(inputs[sid]) == 1, f"{sid}: input marker without the canonical input record"
                assert inputs[sid][0].envelope.payload == {"submissionId": sid, "input": rec.input}
            if rec.reserved_digest is not None:
                assert rec.input_applied, f"{sid}: reserved before its input was applied"
                assert digest(rec.reserved_record) == rec.reserved_digest
            if settles[sid]:
                assert rec.reserved_digest is not None, f"{sid}: settlement record appended without a reservation"
                logged = {k: v for k, v in settles[sid][0].envelope.to_json().items() if k not in ("producerId", "epoch")}
                assert digest(logged) == rec.reserved_digest, sid  # the exact reserved record
            if rec.settled:
                assert not seen_unsettled, f"{sid}: settled behind an unsettled submission (FIFO)"
                assert rec.reserved_digest is not None, f"{sid}: finalized without its reservation"
                assert len(settles[sid]) == 1, f"{sid}: finalized with {len(settles[sid])} settlement records"
                assert {k: v for k, v in settles[sid][0].envelope.to_json().items()
                        if k not in ("producerId", "epoch")} == rec.reserved_record
                assert settlement_of(rec.reserved_record) == W.settlement_record(sid, n, seed)
                assert rec.outcome == "completed"
                settled_ids.add(sid)
            else:
                seen_unsettled = True
                unsettled_all.append(sid)
                if rec.owner_id is not None:
                    claimed_unsettled.append(sid)
                stages.append(_stage(rec, bool(inputs[sid]), bool(settles[sid]), materialized))
        assert len(claimed_unsettled) <= 1, f"{cid}: several claimed unsettled submissions {claimed_unsettled}"

    counts = log.counts()
    assert counts["records"] == total_records, "records outside every conversation's prefix"
    assert counts["batches"] == total_batches, "a batch row whose records are missing"

    # The worker runs one submission at a time: at most one is in flight,
    # and it is the last one admitted.
    nonterminal = run(ledger.scan_nonterminal())
    assert sorted(r.submission_id for r in nonterminal) == sorted(unsettled_all)
    assert len(nonterminal) <= 1, [r.submission_id for r in nonterminal]
    if nonterminal:
        last_n = max(run(ledger.get(s)).input["n"] for s in settled_ids | set(unsettled_all))
        assert run(ledger.get(nonterminal[0].submission_id)).input["n"] == last_n
    # What the worker reported settled is durably settled (a commit survives
    # a process crash); at most one more (finalized, not yet reported).
    assert set(reported) <= settled_ids
    assert len(settled_ids) - len(reported) in (0, 1)
    return {"nonterminal": list(nonterminal), "stages": stages, "submissions": len(settled_ids) + len(unsettled_all)}


def ledger_input_n(ledger, sid: str) -> int:
    rec = run(ledger.get(sid))
    assert rec is not None, f"log batch for unknown submission {sid}"
    return rec.input["n"]


# --- recovery -----------------------------------------------------------------------


def recover(ledger, log, seed: int, rec) -> None:
    """Finish an interrupted submission as a restarted worker would (a scan
    row carries control fields only: its input is read by id)."""
    rec = run(ledger.get(rec.submission_id))
    sid, cid, n = rec.submission_id, rec.conversation_id, rec.input["n"]
    # admission: materialize -> mark ready (both idempotent).
    try:
        run(log.inspect_tail(cid))
    except NotMaterialized:
        run(log.materialize(cid, W.ADMISSION_PRODUCER, 0))
    run(ledger.mark_ready(sid, 0))
    before = run(read_recovery_prefix(log, cid))
    claim = run(ledger.claim(cid, RECOVERY_OWNER, RECOVERY_LEASE_MS, RECOVERY_NOW_MS))
    assert claim is not None and claim.submission_id == sid, (claim, sid)
    assert all(claim.epoch > r.envelope.epoch for r in before.records), "recovery epoch not above the log's"
    assert claim.epoch > before.tail.epoch
    epoch = claim.epoch
    run(log.materialize(cid, RECOVERY_OWNER, epoch))
    if rec.epoch is not None:
        # The killed incarnation's token is fenced now, in both stores
        # (the log was just taken over at the new epoch).
        stale = Claim(sid, rec.owner_id or W.OWNER, rec.epoch, rec.lease_expires_ms or 1)
        with pytest.raises(OwnershipLost):
            run(ledger.mark_input_applied(stale, W.input_record_id(sid), 1))
        with pytest.raises(FenceRejected):
            W.append(log, cid, f"{sid}:stale", W.OWNER, rec.epoch, [
                W.envelope(f"{sid}:stale", "run-warning", {}, 1, rec.epoch),
            ])
    now = RECOVERY_NOW_MS + 1
    if run(log.lookup_batch(cid, W.input_batch_id(sid))) is None:
        W.append(log, cid, W.input_batch_id(sid), RECOVERY_OWNER, epoch, [
            W.envelope(W.input_record_id(sid), "input", {"submissionId": sid, "input": rec.input}, now, epoch,
                       RECOVERY_OWNER),
        ])
    batch = run(log.lookup_batch(cid, W.input_batch_id(sid)))
    # The canonical input (where it sits in the log) wins over the cached marker.
    run(ledger.mark_input_applied(claim, W.input_record_id(sid), batch.first_seq))
    settle_batch = run(log.lookup_batch(cid, W.settle_batch_id(sid)))
    if settle_batch is not None:
        # Killed between append and finalize: the canonical record wins.
        (stored,) = run(log.read(cid, settle_batch.first_seq - 1, 1))
        assert stored.envelope.record_id == W.settle_record_id(sid)
        record = {k: v for k, v in stored.envelope.to_json().items() if k not in ("producerId", "epoch")}
        run(ledger.reserve_settlement(claim, record))  # already reserved: same digest
    else:
        record = rec.reserved_record or settlement_envelope(sid, W.settlement_record(sid, n, seed), now,
                                                            receipt=rec.receipt, deployment_id=W.DEPLOYMENT)
        run(ledger.reserve_settlement(claim, record))
        W.append(log, cid, W.settle_batch_id(sid), RECOVERY_OWNER, epoch, [  # exactly the reserved record
            W.envelope(record["recordId"], "submission-settled", record["payload"], record["createdAt"], epoch,
                       RECOVERY_OWNER),
        ])
    settlement = run(ledger.finalize_settlement(sid, now + 1))
    assert settlement.record_digest == digest(record) and settlement.outcome == "completed"
    # Idempotent: a replayed finalize returns the same settlement.
    assert run(ledger.finalize_settlement(sid, now + 99)) == attrs.evolve(settlement, replayed=True)
    # An at-least-once client retrying the admission gets the same submission.
    again = run(ledger.admit(cid, W.PRINCIPAL, f"k{n}", W.input_for(n), now + 2))
    assert again.replayed and again.submission_id == sid


# --- the test -------------------------------------------------------------------------

# (seed, settled submissions to wait for, base kill delay in ms); the seeded
# jitter moves the kill across different operations of one submission.
CASES = [(11, 3, 0.0), (22, 6, 4.0), (33, 9, 9.0)]


@pytest.mark.parametrize("seed,settle_at_least,base_delay_ms", CASES, ids=["kill-0ms", "kill-4ms", "kill-9ms"])
def test_sigkill_mid_run_leaves_whole_operations(tmp_path, seed, settle_at_least, base_delay_ms):
    delay_s = (base_delay_ms + random.Random(seed).uniform(0.0, 5.0)) / 1000.0
    db, reported = _kill_worker(tmp_path, seed, settle_at_least, delay_s)
    assert len(reported) >= settle_at_least

    conn, ledger, log = _reopen(db)
    try:
        after_kill = check_invariants(conn, ledger, log, seed, reported)
        print(f"seed {seed}: killed after {len(reported)} reported settlements, "
              f"{delay_s * 1000:.1f} ms; in flight: {after_kill['stages'] or ['nothing']}")

        for rec in after_kill["nonterminal"]:
            recover(ledger, log, seed, rec)

        after_recovery = check_invariants(conn, ledger, log, seed, reported)
        assert after_recovery["nonterminal"] == []
        assert after_recovery["submissions"] == after_kill["submissions"]
        assert run(ledger.scan_nonterminal()) == ()
    finally:
        conn.close()

    # A second reopen (another fresh process view) sees the same settled state.
    conn, ledger, log = _reopen(db)
    try:
        again = check_invariants(conn, ledger, log, seed, reported)
        assert again["nonterminal"] == [] and again["submissions"] == after_kill["submissions"]
    finally:
        conn.close()


# Named crash points: the worker stops right after OP of submission N
# committed and is killed there, so every recovery branch runs every time
# (N picks a first or a later submission of its conversation).
CRASH_POINTS = [
    ("admitted", 1, "admitted, not materialized"),
    ("admitted", 4, "admitted and materialized, not ready"),
    ("materialized", 2, "admitted and materialized, not ready"),
    ("ready", 5, "ready, not claimed"),
    ("claimed", 3, "claimed, input not appended"),
    ("input-appended", 7, "input appended, marker not set"),
    ("input-applied", 6, "input applied (steps in progress)"),
    ("reserved", 8, "reserved, settlement not appended"),
    ("settle-appended", 9, "settlement appended, not finalized"),
    ("finalized", 10, None),
]


@pytest.mark.parametrize(
    "op,at,stage", CRASH_POINTS, ids=[f"{op}-{at}" for op, at, _ in CRASH_POINTS]
)
def test_sigkill_at_crash_point(tmp_path, op, at, stage):
    seed = 44
    db, reported = _kill_worker(tmp_path, seed, 0, 0.0, pause=f"{op}:{at}")
    assert len(reported) == at
    conn, ledger, log = _reopen(db)
    try:
        after_kill = check_invariants(conn, ledger, log, seed, reported)
        assert after_kill["stages"] == ([stage] if stage else [])
        assert after_kill["submissions"] == at + 1
        for rec in after_kill["nonterminal"]:
            recover(ledger, log, seed, rec)
        after_recovery = check_invariants(conn, ledger, log, seed, reported)
        assert after_recovery["nonterminal"] == [] and after_recovery["submissions"] == at + 1
    finally:
        conn.close()
