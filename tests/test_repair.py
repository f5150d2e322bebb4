"""A ledger rebuilt from the log (``model.repair``) keeps what an admission
was, not only where it sits: its parent link, its admission group, its
metadata and so its conversation's lane kind."""
from __future__ import annotations

import pytest

from model.conversation.memory_store import InMemoryConversationStore
from model.conversation.sqlite_store import SqliteConversationStore
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.records import AdmissionPolicyError, ParentLink
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.lifecycle import SubmissionLifecycle
from model.repair import rebuild_ledger
from model.sqlite_db import open_database
from model.submissions import SubmissionWorker
from scenarios.storage import run_sync as drive
from tests.fakes import Crash

ORIGIN = {"workerId": "w1", "expiresAtMillis": 60_000}


def _worker(key: str, n: int) -> dict:
    return {"kind": "WorkerAdmission", "messageId": key, "parameters": {"n": n}, "sourceSubmissionId": "sub-src-1",
            "origin": ORIGIN}


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000

    def __call__(self) -> int:
        return self.ms


def _stores(kind: str, tmp_path, name: str):
    if kind == "memory":
        return InMemorySubmissionLedger(), InMemoryConversationStore()
    conn = open_database(str(tmp_path / f"{name}.db"))
    return SqliteSubmissionLedger(conn), SqliteConversationStore(conn)


def _work(request, index):
    if request.get("open"):
        raise Crash("the owner dies with its input applied: the submission stays open")
    return {"echo": request, "step": index}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_rebuild_keeps_groups_metadata_parent_links_and_lanes(kind, tmp_path):
    ledger, log = _stores(kind, tmp_path, "original")
    clock = Clock()
    lifecycle = SubmissionLifecycle(ledger, log, now_ms=clock)

    def admit(conversation_id, key, value, **identity):
        admission = drive(ledger.admit(conversation_id, "alice", key, value, clock(), identity.get("parent"),
                                       identity.get("group"), None, identity.get("metadata")))
        if not identity.get("unready"):
            drive(lifecycle.make_ready(conversation_id, admission.submission_id))
        return admission.submission_id

    def settle(conversation_id):
        worker = SubmissionWorker(ledger, log, "worker", lease_ms=30_000, now_ms=clock, work=_work)
        try:
            while drive(worker.process_next(conversation_id)) is not None:
                pass
        except Crash:
            pass

    # A group member settled in "a", then one admitted in "b" and left open
    # (its input applied): the rebuild meets "b" first.
    admit("a", "k1", {"n": 1}, group="entity", metadata={"kind": "WorkerUpdate", "update": {"sequence": 1}})
    settle("a")
    open_id = admit("b", "k1", {"n": 2, "open": True}, group="entity")
    settle("b")
    # A worker lane whose first position its abort settled before it ran (a
    # gap the rebuild holds), then two worker admissions of its origin.
    gap = admit("w", "m0", {"n": 0}, metadata=_worker("m0", 0), unready=True)
    drive(ledger.request_abort(gap, "ops", "not needed", clock()))
    admit("w", "m1", {"n": 1}, metadata=_worker("m1", 1))
    admit("w", "m2", {"n": 2}, metadata=_worker("m2", 2))
    settle("w")
    # A child with its parent link.
    admit("c", "child", {"n": 3}, parent=ParentLink("sub-p-1", "call-1"))
    settle("c")
    assert drive(ledger.get(open_id)).input_applied and drive(ledger.get(open_id)).outcome is None

    rebuilt, _ = _stores(kind, tmp_path, "rebuilt")
    conversations = ("b", "a", "w", "c")
    drive(rebuild_ledger(log, rebuilt, conversations, now_ms=10**9))
    compared = 0
    for conversation_id in conversations:
        for n in range(1, 4):
            original = drive(ledger.get(f"sub-{conversation_id}-{n}"))
            if original is None or original.submission_id == gap:
                continue
            copy = drive(rebuilt.get(original.submission_id))
            assert (copy.parent, copy.admission_group, copy.metadata, copy.input_digest, copy.receipt) == (
                original.parent, original.admission_group, original.metadata, original.input_digest,
                original.receipt), original.submission_id
            compared += 1
    assert compared == 5
    assert [(s.submission_id, s.admission_group) for s in drive(rebuilt.load_recovery_snapshot("b")).submissions] \
        == [(open_id, "entity")]
    # The lane kinds hold in the rebuilt ledger as in the original.
    for store in (ledger, rebuilt):
        with pytest.raises(AdmissionPolicyError) as refused:
            drive(store.admit("w", "alice", "ordinary", {"n": 9}, clock()))
        assert refused.value.code == "worker-lane"
        with pytest.raises(AdmissionPolicyError) as occupied:
            drive(store.admit("d", "alice", "k1", {"n": 9}, clock(), None, "entity"))
        assert occupied.value.reason == "occupied"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_rebuild_of_one_conversation_holding_several_members_of_a_group(kind, tmp_path):
    """Two members of one admission group in one conversation, the first
    settled before the second was admitted (and an ungrouped one between):
    the rebuild admits the second only after replaying the first's
    settlement, as it originally happened, rather than being refused its
    own history (``AdmissionPolicyError``, occupied)."""
    ledger, log = _stores(kind, tmp_path, "original")
    clock = Clock()
    lifecycle = SubmissionLifecycle(ledger, log, now_ms=clock)
    worker = SubmissionWorker(ledger, log, "worker", lease_ms=30_000, now_ms=clock, work=_work)
    for key, group in (("k1", "entity"), ("k2", None), ("k3", "entity")):
        admission = drive(ledger.admit("a", "alice", key, {"key": key}, clock(), None, group, None,
                                       None if group is None else {"entity": key}))
        drive(lifecycle.make_ready("a", admission.submission_id))
        while drive(worker.process_next("a")) is not None:
            pass
    open_id = drive(ledger.admit("a", "alice", "k4", {"open": True}, clock(), None, "entity")).submission_id
    drive(lifecycle.make_ready("a", open_id))
    with pytest.raises(Crash):
        drive(worker.process_next("a"))

    rebuilt, _ = _stores(kind, tmp_path, "rebuilt")
    drive(rebuild_ledger(log, rebuilt, ("a",), now_ms=10**9))
    for n in range(1, 5):
        original, copy = drive(ledger.get(f"sub-a-{n}")), drive(rebuilt.get(f"sub-a-{n}"))
        assert (copy.admission_group, copy.metadata, copy.outcome, copy.reserved_digest) == (
            original.admission_group, original.metadata, original.outcome, original.reserved_digest), n
    with pytest.raises(AdmissionPolicyError) as occupied:  # the open member holds its group in the copy too
        drive(rebuilt.admit("d", "alice", "k1", {"n": 9}, clock(), None, "entity"))
    assert occupied.value.reason == "occupied"
