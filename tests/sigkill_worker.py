"""Worker process for the SIGKILL test (tests/test_sigkill.py).

Run as ``python tests/sigkill_worker.py DBPATH N_CONVERSATIONS SEED [OP:N]``. Opens
ONE SQLite file holding both the Submission Ledger and the conversation log
(both adapters on one ``open_database`` connection) and processes submissions
forever, round-robin over ``N_CONVERSATIONS`` conversations, following the
cross-store protocol of persistence §3:

    admit -> materialize -> mark ready -> claim -> (take over the log at the
    claim's epoch) -> append input -> mark input applied -> append steps ->
    reserve settlement -> append the exact settlement record -> finalize

After each finalize it prints ``settled <submission_id>`` and flushes, so the
parent knows how far it got. The parent kills it with SIGKILL at some point.
With the optional ``OP:N`` it instead stops right after operation ``OP`` of
submission ``N`` committed, prints ``paused OP <submission_id>`` and sleeps
until killed, so the parent can kill it at a named crash point.

No wall clock and no randomness: ``now_ms`` is a counter, the batch shapes
are a function of (SEED, n). The helpers below (ids, inputs, settlement
records) are shared with the test, which imports this file as a module to
finish the interrupted work deterministically.
"""
from __future__ import annotations

import sys
import time

from model.conversation.records import FencedAppendRequest, NotMaterialized, RecordEnvelope
from model.conversation.sqlite_store import SqliteConversationStore
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.sqlite_db import open_database
from model.ledger.records import settlement_envelope


OWNER = "worker"
#: The producer that materializes a conversation at admission, at epoch 0
#: (the convention of model/submissions.py): any claimed owner, at an epoch
#: >= 1 from the ledger, takes the log over from it.
ADMISSION_PRODUCER = "admission"
PRINCIPAL = "p1"
DEPLOYMENT = "sigkill"
LEASE_MS = 10**9  # "long": the counter clock never gets near it
BIG_TEXT_BYTES = 20_000  # > 16 KiB: the payload spills to the content store
STEP_FAMILIES = ("run-started", "model-request", "model-output", "tool-call", "run-warning")


def run(coro):
    """Drive a store coroutine: the SQLite adapters never await."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("store call awaited; the SQLite adapters are expected not to")


def conversation_for(n: int, n_conversations: int) -> str:
    return f"c{n % n_conversations}"


def input_for(n: int) -> dict:
    return {"n": n, "text": f"question {n}"}


def input_record_id(submission_id: str) -> str:
    return f"{submission_id}:input"


def input_batch_id(submission_id: str) -> str:
    return f"{submission_id}:input"


def settle_record_id(submission_id: str) -> str:
    return f"settlement:{submission_id}"


def settle_batch_id(submission_id: str) -> str:
    return f"{submission_id}:settle"


def step_batch_sizes(seed: int, n: int) -> list[int]:
    """1..3 batches of 1..50 records each."""
    return [1 + ((seed * 7 + n * 13 + j * 29) % 50) for j in range(1 + (n + seed) % 3)]


def settlement_record(submission_id: str, n: int, seed: int) -> dict:
    """The exact canonical SubmissionSettled record of submission ``n``."""
    return {
        "outcome": "completed",
        "result": {"submissionId": submission_id, "n": n, "steps": sum(step_batch_sizes(seed, n))},
    }


def envelope(record_id: str, family: str, payload: object, now_ms: int, epoch: int, owner: str = OWNER) -> RecordEnvelope:
    return RecordEnvelope(record_id, family, 1, now_ms, DEPLOYMENT, payload, owner, epoch)


def append(log, conversation_id: str, batch_id: str, owner: str, epoch: int, records: list):
    """A fenced append composed from inspect_tail (§6)."""
    tail = run(log.inspect_tail(conversation_id))
    return run(log.append(FencedAppendRequest(
        conversation_id, batch_id, owner, epoch, tail.tail_seq, tail.tail_digest, tuple(records),
    )))


class Worker:
    def __init__(self, path: str, n_conversations: int, seed: int, pause: tuple[str, int] | None = None) -> None:
        self.conn = open_database(path)
        self.ledger = SqliteSubmissionLedger(self.conn)
        self.log = SqliteConversationStore(self.conn)
        self.n_conversations = n_conversations
        self.seed = seed
        self.clock = 0
        self.pause = pause

    def checkpoint(self, op: str, n: int, sid: str) -> None:
        """With a pause spec ``OP:N``, stop for good right after ``op`` of
        submission ``n`` committed (a named crash point): announce it and
        sleep until killed."""
        if self.pause == (op, n):
            sys.stdout.write(f"paused {op} {sid}\n")
            sys.stdout.flush()
            while True:
                time.sleep(3600)

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def process(self, n: int) -> str:
        ledger, log = self.ledger, self.log
        cid = conversation_for(n, self.n_conversations)
        admitted = run(ledger.admit(cid, PRINCIPAL, f"k{n}", input_for(n), self.tick()))
        sid = admitted.submission_id
        self.checkpoint("admitted", n, sid)
        # admit ledger row -> materialize the conversation -> mark ready.
        try:
            run(log.inspect_tail(cid))
        except NotMaterialized:
            run(log.materialize(cid, ADMISSION_PRODUCER, 0))
        self.checkpoint("materialized", n, sid)
        run(ledger.mark_ready(sid, 0))
        self.checkpoint("ready", n, sid)
        claim = run(ledger.claim(cid, OWNER, LEASE_MS, self.tick()))
        assert claim is not None and claim.submission_id == sid, (claim, sid)
        self.checkpoint("claimed", n, sid)
        epoch = claim.epoch
        run(log.materialize(cid, OWNER, epoch))  # take over the log at the claim's epoch
        appended = append(log, cid, input_batch_id(sid), OWNER, epoch, [
            envelope(input_record_id(sid), "input", {"submissionId": sid, "input": input_for(n)}, self.tick(), epoch),
        ])
        self.checkpoint("input-appended", n, sid)
        run(ledger.mark_input_applied(claim, input_record_id(sid), appended.first_seq))
        self.checkpoint("input-applied", n, sid)
        for j, size in enumerate(step_batch_sizes(self.seed, n)):
            records = []
            for i in range(size):
                big = (n + j + i) % 17 == 0
                text = ("x" * BIG_TEXT_BYTES + f"{n}.{j}.{i}") if big else f"step {n}.{j}.{i}"
                family = STEP_FAMILIES[(j + i) % len(STEP_FAMILIES)]
                records.append(envelope(
                    f"{sid}:s{j}:{i}", family, {"submissionId": sid, "step": j, "i": i, "text": text},
                    self.tick(), epoch,
                ))
            append(log, cid, f"{sid}:s{j}", OWNER, epoch, records)
        # reserve settlement -> append exact canonical record -> finalize ledger.
        record = settlement_record(sid, n, self.seed)
        settled = settlement_envelope(sid, record, self.tick(), receipt=admitted.receipt, deployment_id=DEPLOYMENT)
        run(ledger.reserve_settlement(claim, settled))
        self.checkpoint("reserved", n, sid)
        append(log, cid, settle_batch_id(sid), OWNER, epoch, [  # exactly the reserved record
            RecordEnvelope(settled["recordId"], settled["family"], settled["schemaVersion"], settled["createdAt"],
                           settled["deploymentId"], settled["payload"], OWNER, epoch),
        ])
        self.checkpoint("settle-appended", n, sid)
        run(ledger.finalize_settlement(sid, self.tick()))
        self.checkpoint("finalized", n, sid)
        return sid


def main(argv: list[str]) -> int:
    path, n_conversations, seed = argv[1], int(argv[2]), int(argv[3])
    pause = None
    if len(argv) > 4:  # optional PAUSE_OP:PAUSE_N (see Worker.checkpoint)
        op, _, at = argv[4].partition(":")
        pause = (op, int(at))
    worker = Worker(path, n_conversations, seed, pause)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    n = 0
    while True:
        sid = worker.process(n)
        sys.stdout.write(f"settled {sid}\n")
        sys.stdout.flush()
        n += 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
