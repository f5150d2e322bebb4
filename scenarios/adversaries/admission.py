"""The port-storm adversary's admission-policy episode (``scenarios.adversaries.adversary``).

One node's private admission group and admission fence, through every rule
the ledger keeps for them (``model.ledger.rules``: admission policies): an
original admitted into the group under the fence, with opaque metadata;
its exact replay; a successor in another conversation refused while the
group is occupied (``occupied``), still refused while the original is
terminalizing, and admitted once it is finalized; the original under
another group or metadata (``AdmissionConflict``); the fence moved
forward, after which the original's exact replay at the old revision still
replays and a fresh key there is refused (``stale-revision``), nothing
written. Its edges are in ``scenarios.adversaries.adversary.EDGES``. Names are the node's own (never raced), so every answer is exact.
A crash mid-episode leaves ordinary private leftovers: the next
incarnation's recovery settles them, which frees the group.
"""
from __future__ import annotations

from typing import Any

from model.ledger.records import AdmissionFence

from scenarios.adversaries.common import _matches, _typed
from scenarios.adversaries.process import PRINCIPAL

async def admission_policies(p: Any) -> None:
    """``p``: the adversary process (``scenarios.adversaries.adversary._Process``)."""
    conv, other = p.private_conversation("g"), p.private_conversation("g")
    group, policy, fence_key = p.uid("group"), f"policy-{p.node.name}", p.uid("fence")
    key, successor_key = p.uid("key"), p.uid("key")
    value, metadata = {"original": True}, {"kind": "WorkerUpdate", "update": {"sequence": 1, "value": "\ue000"}}
    fenced = await p.call("ledger", "set_admission_fence", policy, fence_key, 1)
    if not p.expect(fenced.ok and fenced.value.revision == 1 and fenced.value.replayed == (fenced.lost > 0),
                    f"set_admission_fence({policy}, {fence_key}, 1) answered {fenced.show()}", conv):
        return
    at_1 = AdmissionFence(policy, fence_key, 1)

    async def admit(conversation: str, k: str, v: Any, **policies: Any):
        return await p.call("ledger", "admit", conversation, PRINCIPAL, k, v, p.now(), None,
                            policies.get("group"), policies.get("fence"), policies.get("metadata"))

    first = await admit(conv, key, value, group=group, fence=at_1, metadata=metadata)
    if not p.expect(first.ok and first.value.replayed == (first.lost > 0) and first.value.admission_group == group
                    and first.value.metadata == metadata, f"admit of {key} into group {group} answered {first.show()}",
                    conv):
        return
    sid = first.value.submission_id
    again = await admit(conv, key, value, group=group, fence=at_1, metadata=metadata)
    p.edge_if(p.expect(again.ok and again.value.replayed and again.value.submission_id == sid,
                       f"exact replay of {key}, its group occupied by itself, answered {again.show()}", conv),
              "admission_group_replay_first")
    if await _occupied(p, admit, other, successor_key, group, "while the original is open"):
        p.w.edge("admission_group_occupied")
    clash = await admit(conv, key, value, group=p.uid("group"), fence=at_1, metadata=metadata)
    p.edge_if(p.expect_rejected(clash, ("AdmissionConflict",), f"admit of {key} under another group", conv)
              and getattr(clash.error, "what", None) == "admission_group", "admission_group_conflict")
    clash = await admit(conv, key, value, group=group, fence=at_1)
    p.edge_if(p.expect_rejected(clash, ("AdmissionConflict",), f"admit of {key} without its metadata", conv)
              and getattr(clash.error, "what", None) == "metadata", "admission_metadata_conflict")
    moved = await p.call("ledger", "set_admission_fence", policy, fence_key, 2)
    if not p.expect(moved.ok and moved.value.revision == 2, f"fence moved to 2: {moved.show()}", conv):
        return
    replay = await admit(conv, key, value, group=group, fence=at_1, metadata=metadata)
    p.edge_if(p.expect(replay.ok and replay.value.replayed and replay.value.submission_id == sid,
                       f"exact replay of {key} at the fence's old revision answered {replay.show()}", conv),
              "admission_fence_replay_after_move")
    stale = await admit(other, p.uid("key"), {"stale": True}, fence=at_1)
    if p.expect_rejected(stale, ("AdmissionPolicyError",), f"a fresh admission at fence revision 1 (now 2)", other):
        p.edge_if(p.expect((stale.error.reason, stale.error.code) == ("refused", "stale-revision"),
                           f"a stale fence answered {stale.show()}", other), "admission_fence_stale_refused")
    # The original through settlement: the group is held until its finalize.
    mat = await p.call("log", "materialize", conv, "admission", 0)
    ready = await p.call("ledger", "mark_ready", sid, p.now())
    if not (p.expect_ok(mat, f"materialize({conv})", conv) and p.expect_ok(ready, f"mark_ready({sid})", conv)):
        return
    token = await p.claim_token(conv, p.label, 0)
    if token is None or not await p._apply_input(conv, token, sid, key, value, first.value.queue_seq):
        return
    record = p._settlement(token, p.settlement_record("completed", 7))
    mat = await p.call("log", "materialize", conv, p.label, token.epoch)
    reserved = await p.call("ledger", "reserve_settlement", token, record)
    if not (p.expect_ok(mat, f"materialize({conv})", conv) and p.expect_ok(reserved, f"reserve({sid})", conv)):
        return
    if await _occupied(p, admit, other, successor_key, group, "while the original is terminalizing"):
        p.w.edge("admission_group_held_terminalizing")
    if not await p._append_settled(conv, token, sid, reserved.value.record_digest, record):
        return
    final = await p.call("ledger", "finalize_settlement", sid, p.now())
    if not p.expect(final.ok and final.value.outcome == "completed", f"finalize({sid}): {final.show()}", conv):
        return
    successor = await admit(other, successor_key, {"successor": True}, group=group,
                            fence=AdmissionFence(policy, fence_key, 2))
    if not p.expect(successor.ok and successor.value.replayed == (successor.lost > 0),
                    f"admit of {successor_key} once the original settled answered {successor.show()}", other):
        return
    p.w.edge("admission_group_freed_at_finalize")
    await _lanes(p, admit, conv)
    purge = await p.call("ledger", "purge_conversation", conv)
    p.expect(purge.ok, f"purge of {conv}: {purge.show()}", conv)
    # The successor, never made ready: its abort settles it at once and frees the group.
    abort = await p.call("ledger", "request_abort", successor.value.submission_id, p.label, "done", p.now())
    if p.expect(abort.ok and abort.value.settled_at_ms is not None, f"abort of the unready successor: {abort.show()}",
                other):
        # Settled by that intent before it was ever ready: a repeat replays it.
        again = await p.call("ledger", "request_abort", successor.value.submission_id, f"{p.label}/other", "again",
                             p.now())
        p.expect(again.ok and again.value.replayed and (again.value.author, again.value.settled_at_ms) == (
            abort.value.author, abort.value.settled_at_ms), f"a repeat abort of the unready successor answered "
                                                            f"{again.show()}, first {abort.show()}", other)
        purge = await p.call("ledger", "purge_conversation", other)
        p.expect(purge.ok, f"purge of {other}: {purge.show()}", other)


async def _occupied(p: Any, admit, conversation: str, key: str, group: str, when: str) -> bool:
    out = await admit(conversation, key, {"successor": True}, group=group)
    return p.expect(not out.ok and _matches(out.error, ("AdmissionPolicyError",)) and _typed(out.error)
                    and (out.error.reason, out.error.code) == ("occupied", "group-occupied"),
                    f"a successor in group {group} {when} answered {out.show()}", conversation)


async def _lanes(p: Any, admit, ordinary: str) -> None:
    """A worker lane of one origin: a second worker admission of that origin
    joins it; ordinary work or another origin there is refused, and so is a
    worker admission whose messageId is not its key, and a worker admission
    on ``ordinary`` (a lane holding ordinary work); so is, on a fresh lane,
    a worker admission whose origin has no expiry. Its
    submissions, never made ready, are aborted (settled at once) and the
    lane purged."""
    lane, origin = p.private_conversation("w"), {"worker": p.node.name, "expiresAtMillis": p.now() + 60_000}

    def worker(key: str, n: int, **changes: Any) -> dict:
        return {"kind": "WorkerAdmission", "messageId": key, "parameters": {"n": n}, "origin": origin, **changes}

    fresh, key = p.private_conversation("w"), p.uid("msg")
    out = await admit(fresh, key, {"task": 0}, metadata={"kind": "WorkerAdmission", "messageId": key,
                                                         "parameters": {"n": 0}, "origin": {"worker": p.node.name}})
    if p.expect_rejected(out, ("AdmissionPolicyError",), f"worker admission with no origin expiry on {fresh}", fresh):
        p.edge_if(p.expect(out.error.code == "worker-origin", f"refusal on {fresh}: {out.show()}", fresh),
                  "admission_worker_origin_required")
    admitted = []
    for n in (1, 2):
        key = p.uid("msg")
        out = await admit(lane, key, {"task": n}, metadata=worker(key, n))
        if not p.expect(out.ok and out.value.metadata == worker(key, n),
                        f"worker admission {key} on {lane} answered {out.show()}", lane):
            return
        admitted.append(out.value.submission_id)
    for metadata, code in ((None, "worker-lane"), (worker("m", 3, origin={"worker": "elsewhere"}), "worker-origin")):
        out = await admit(lane, p.uid("msg"), {"task": 3}, metadata=metadata)
        if p.expect_rejected(out, ("AdmissionPolicyError",), f"admission asking {code} refused on {lane}", lane):
            p.edge_if(p.expect(out.error.code == code, f"refusal on {lane}: {out.show()}", lane),
                      "admission_worker_lane_refused")
    out = await admit(lane, p.uid("msg"), {"task": 5}, metadata=worker("not-its-key", 5))
    if p.expect_rejected(out, ("AdmissionPolicyError",), f"worker admission whose messageId is not its key", lane):
        p.edge_if(p.expect(out.error.code == "worker-message-id", f"refusal on {lane}: {out.show()}", lane),
                  "admission_worker_message_id_refused")
    out = await admit(ordinary, p.uid("msg"), {"task": 4}, metadata=worker("m", 4))
    if p.expect_rejected(out, ("AdmissionPolicyError",), f"worker admission on ordinary {ordinary}", ordinary):
        p.edge_if(p.expect(out.error.code == "ordinary-lane", f"refusal on {ordinary}: {out.show()}", ordinary),
                  "admission_ordinary_lane_refused")
    for sid in admitted:
        abort = await p.call("ledger", "request_abort", sid, p.label, "done", p.now())
        if not p.expect(abort.ok and abort.value.settled_at_ms is not None, f"abort of {sid}: {abort.show()}", lane):
            return
    purge = await p.call("ledger", "purge_conversation", lane)
    p.expect(purge.ok, f"purge of {lane}: {purge.show()}", lane)
