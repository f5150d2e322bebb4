"""The history checker on the conversation log and the submission ledger.

Ground truth: hand-made histories, as the port observers see them
(``faults.ports.PortCall`` with the ports' own records and typed errors),
that the checker must flag — a stale append acknowledged, a lost update,
a renewal by a token whose ownership ended, a claim of a live lease by
another owner, a claim of a settled submission — and their correct
counterparts, which it must pass. The models alone are checked on the same
cases, the log model's interned entries against a plain list, and the
search on the new models against a brute force over every order real time
allows (random small histories: about 60% of the lease ones and 20% of the
log ones linearizable, measured).
"""
from __future__ import annotations

import pytest

from faults.ports import PortCall
from model.conversation.records import (
    AppendConflict,
    AppendResult,
    CanonicalRecord,
    ConversationTail,
    FenceRejected,
    FencedAppendRequest,
    NotMaterialized,
    RecordEnvelope,
)
from model.ledger.records import AbortIntent, Claim, OwnershipLost, OwnershipRenewal, Readiness
from scenarios.invariants.history_linearizable import HistoryLinearizable, UnknownPort, _conversation_of
from scenarios.reference.history import UNKNOWN, FencedLogModel, Failed, Op, SubmissionLeaseModel, check_object
from sim.trace import Event

DIGEST = "0" * 64
CONV = "c1"
SUB = "sub-c1-1"
LEASE_MS = 20_000


# --- the calls, as the port layer shows them ------------------------------------------


def _envelope(record_id: str, producer: str = "w1", epoch: int = 1) -> RecordEnvelope:
    return RecordEnvelope(record_id, "step", 1, 0, "d", {"n": record_id}, producer, epoch)


def materialize(t: int, producer: str, epoch: int, error=None, node: str = "w#1") -> PortCall:
    return PortCall(t, node, "log", "materialize", (CONV, producer, epoch), {}, None, error)


def append(t: int, epoch: int, expected: int, batch: str, record_ids, *, first=None, error=None,
           node: str = "w#1", damaged: bool = False) -> PortCall:
    records = tuple(_envelope(r, epoch=epoch) for r in record_ids)
    request = FencedAppendRequest(CONV, batch, "w1", epoch, expected, DIGEST, records)
    result = None if error is not None else AppendResult(first, first + len(records) - 1, DIGEST, DIGEST, False)
    return PortCall(t, node, "log", "append", (request,), {}, result, error, damaged)


def read(t: int, after: int, limit: int, batches, *, epoch: int = 1, node: str = "r#1", damaged=False) -> PortCall:
    """``batches``: (batch id, record id) per record, from seq after+1."""
    records = tuple(CanonicalRecord(CONV, after + i, batch, _envelope(record_id, epoch=epoch))
                    for i, (batch, record_id) in enumerate(batches, start=1))
    return PortCall(t, node, "log", "read", (CONV, after, limit), {}, records, None, damaged)


def tail(t: int, seq: int, epoch: int, node: str = "r#1") -> PortCall:
    return PortCall(t, node, "log", "inspect_tail", (CONV,), {}, ConversationTail(seq, DIGEST, epoch), None)


def claim(t: int, owner: str, epoch: int, now_ms: int | None = None, node: str | None = None,
          sub: str = SUB) -> PortCall:
    now_ms = t if now_ms is None else now_ms
    token = Claim(sub, owner, epoch, now_ms + LEASE_MS)
    return PortCall(t, node or f"{owner}#1", "ledger", "claim", (CONV, owner, LEASE_MS, now_ms), {}, token, None)


def no_claim(t: int, owner: str) -> PortCall:
    return PortCall(t, f"{owner}#1", "ledger", "claim", (CONV, owner, LEASE_MS, t), {}, None, None)


def _token(owner: str, epoch: int) -> Claim:
    return Claim(SUB, owner, epoch, 0)


def renew(t: int, owner: str, epoch: int, *, lost_at: int | None = None) -> PortCall:
    error = None if lost_at is None else OwnershipLost(SUB, lost_at)
    result = None if error else OwnershipRenewal(SUB, owner, epoch, t + LEASE_MS)
    return PortCall(t, f"{owner}#1", "ledger", "renew_ownership", (_token(owner, epoch), LEASE_MS, t), {},
                    result, error)


def release(t: int, owner: str, epoch: int, *, lost_at: int | None = None) -> PortCall:
    error = None if lost_at is None else OwnershipLost(SUB, lost_at)
    return PortCall(t, f"{owner}#1", "ledger", "release_ownership", (_token(owner, epoch),), {}, None, error)


def reserve(t: int, owner: str, epoch: int, *, lost_at: int | None = None) -> PortCall:
    error = None if lost_at is None else OwnershipLost(SUB, lost_at)
    return PortCall(t, f"{owner}#1", "ledger", "reserve_settlement", (_token(owner, epoch), {}), {}, object(),
                    error)


def finalize(t: int) -> PortCall:
    return PortCall(t, "w#1", "ledger", "finalize_settlement", (SUB, t), {}, object(), None)


def purge(t: int) -> PortCall:
    return PortCall(t, "retention#1", "ledger", "purge_conversation", (CONV,), {}, 1, None)


def lost(t: int, site: str, node: str = "w#1") -> Event:
    return Event(0, t, node, "fault", {"site": site, "kind": "reply-lost", "hit": 1})


def mark_ready(t: int, sub: str = SUB) -> PortCall:
    return PortCall(t, "client#1", "ledger", "mark_ready", (sub, t), {}, Readiness(sub, t), None)


def judge(calls, ports=("log", "ledger"), ready=(SUB, "sub-c1-2")) -> list[str]:
    """The checker's failures on ``calls``, after ``ready``'s submissions
    were marked ready at 0 (a claim needs it)."""
    checker = HistoryLinearizable(ports=ports)
    failures = []
    checker._sink = failures.append  # the audit's verdicts, without a run
    for call in [*(mark_ready(0, sub) for sub in ready), *calls]:
        if isinstance(call, Event):
            checker.on_event(call)
        else:
            checker.on_port_call(call)
    checker.audit(None)
    assert checker.checks >= 1 or not calls, "something was judged"
    return [f.message for f in failures]


def fresh_log(t: int = 0) -> list:
    return [materialize(t, "w1", 1), append(t + 1, 1, 0, "b1", ["r1"], first=1)]


# --- the log --------------------------------------------------------------------------


def test_a_correct_log_history_passes():
    calls = [*fresh_log(),
             append(2, 1, 1, "b2", ["r2", "r3"], first=2),
             # a stale expected tail is refused, naming the tail
             append(3, 1, 1, "b3", ["r4"], error=AppendConflict(CONV, "tail", "b3", actual_tail_seq=3)),
             read(4, 0, 2, [("b1", "r1"), ("b2", "r2")]),
             read(4, 1, 8, [("b2", "r2"), ("b2", "r3")]),
             tail(5, 3, 1),
             # a retry of a batch already in: its first seq again
             append(6, 1, 1, "b2", ["r2", "r3"], first=2),
             materialize(7, "w2", 2),
             append(8, 1, 3, "b9", ["r9"], error=FenceRejected(CONV, 1, 2), node="w1#2"),
             append(9, 2, 3, "b4", ["r4"], first=4, node="w2#1"),
             tail(10, 4, 2)]
    assert judge(calls) == []


def test_a_stale_append_acknowledged_is_flagged():
    # after w2 took the conversation over at epoch 2, w1's epoch-1 append is acknowledged
    calls = [*fresh_log(), materialize(2, "w2", 2), append(3, 1, 1, "b2", ["r2"], first=2)]
    [message] = judge(calls)
    assert "conversation-log 'c1' is not linearizable" in message and "c1.append(1, 1, 'b2'" in message
    # the same append fenced is correct
    assert judge([*fresh_log(), materialize(2, "w2", 2),
                  append(3, 1, 1, "b2", ["r2"], error=FenceRejected(CONV, 1, 2))]) == []


def test_an_append_at_a_stale_tail_acknowledged_is_flagged():
    calls = [*fresh_log(), append(2, 1, 0, "b2", ["r2"], first=1)]
    assert len(judge(calls)) == 1


def test_a_lost_update_is_flagged():
    # two batches both acknowledged at seq 2 from the same tail: one of them was overwritten
    calls = [*fresh_log(), append(2, 1, 1, "b2", ["r2"], first=2), append(3, 1, 1, "b3", ["r3"], first=2)]
    assert len(judge(calls)) == 1
    # an acknowledged append that a later read does not show
    calls = [*fresh_log(), append(2, 1, 1, "b2", ["r2"], first=2), read(3, 1, 8, [])]
    [message] = judge(calls)
    assert "c1.read(1, 8)" in message


def test_a_lost_reply_leaves_an_append_unknown_either_way():
    # the reply of b2 was lost: a read may show it or not, and its retry replays
    took = [*fresh_log(), append(2, 1, 1, "b2", ["r2"], first=2), lost(2, "log.append"),
            read(3, 1, 8, [("b2", "r2")]), append(4, 1, 1, "b2", ["r2"], first=2)]
    did_not = [*fresh_log(), append(2, 1, 1, "b2", ["r2"], first=2), lost(2, "log.append"), read(3, 1, 8, [])]
    assert judge(took) == [] and judge(did_not) == []
    # without the lost reply the second history is a lost update
    assert len(judge([c for c in did_not if not isinstance(c, Event)])) == 1


def test_a_damaged_read_is_left_out_and_a_damaged_write_is_unknown():
    wrong = read(3, 0, 8, [("bX", "rX")], damaged=True)
    assert judge([*fresh_log(), wrong]) == []
    assert len(judge([*fresh_log(), read(3, 0, 8, [("bX", "rX")])])) == 1
    maybe = append(2, 1, 1, "b2", ["r2"], first=2, damaged=True)
    assert judge([*fresh_log(), maybe, read(3, 1, 8, [])]) == []


def test_a_record_id_used_twice_must_be_refused():
    dup = append(2, 1, 1, "b2", ["r1"], first=2)
    assert len(judge([*fresh_log(), dup])) == 1
    refused = append(2, 1, 1, "b2", ["r1"], error=AppendConflict(CONV, "record-identity", "b2", record_id="r1"))
    assert judge([*fresh_log(), refused]) == []


def test_a_missing_conversation_and_a_deleted_one():
    none_yet = PortCall(0, "r#1", "log", "inspect_tail", (CONV,), {}, None, NotMaterialized(CONV))
    assert judge([none_yet, *fresh_log(1)]) == []
    deleted = PortCall(5, "retention#1", "log", "delete_conversation", (CONV,), {}, True, None)
    gone = PortCall(6, "r#1", "log", "read", (CONV, 0, 8), {}, None, NotMaterialized(CONV))
    assert judge([*fresh_log(), deleted, gone]) == []
    # but a deleted log that still answers its records is flagged
    assert len(judge([*fresh_log(), deleted, read(6, 0, 8, [("b1", "r1")])])) == 1


def test_the_interned_log_answers_as_a_plain_list():
    model = FencedLogModel()
    node, entries = 0, []
    for i in range(200):
        entry = (f"b{i // 3}", f"r{i}", i)
        node = model._extend(node, entry)
        entries.append(entry)
        for after in range(0, len(entries) + 2, 5):
            for limit in (1, 3, 64, 1_000):
                assert model.entries(node, after, limit) == tuple(entries[after:after + limit])
    # a branch shares its prefix: the other branch's entries are not in it
    branch = model._extend(model._ancestor(node, 10), ("x", "y", 0))
    assert model.entries(branch, 9, 5) == (entries[9], ("x", "y", 0))
    assert model._holds(node, model._ancestor(node, 10)) and not model._holds(node, branch)


# --- the ledger -----------------------------------------------------------------------


def test_a_correct_lease_history_passes():
    calls = [no_claim(0, "w1"),
             claim(1, "w1", 1), renew(5_000, "w1", 1), reserve(6_000, "w1", 1),
             # the lease lapsed (renewed to 25_000): another owner may claim, at a later lane epoch
             claim(30_000, "w2", 4),
             renew(31_000, "w1", 1, lost_at=4), release(31_000, "w1", 1, lost_at=4),
             release(32_000, "w2", 4), release(32_001, "w2", 4),  # the repeat is a no-op
             renew(32_002, "w2", 4, lost_at=4),
             # released: anyone may claim at once
             claim(33_000, "w3", 5), reserve(34_000, "w3", 5), finalize(35_000)]
    assert judge(calls) == []


def test_a_claim_of_a_live_lease_by_another_owner_is_flagged():
    calls = [claim(1_000, "w1", 1), claim(2_000, "w2", 2)]
    [message] = judge(calls)
    assert "submission-lease 'sub-c1-1' is not linearizable" in message and "claim('w2'" in message
    # the same owner may claim again while its lease is live
    assert judge([claim(1_000, "w1", 1), claim(2_000, "w1", 2)]) == []
    # and a later epoch than the current one is required: the submission's and its lane's
    lane, lease = judge([claim(1_000, "w1", 3), claim(1_000 + LEASE_MS, "w2", 2)])  # by kind, then key
    assert "submission-lease 'sub-c1-1'" in lease and "lane-epoch 'c1'" in lane


def test_a_lane_grants_each_epoch_once_whichever_submission_it_claims():
    # the next submission of the lane at a later epoch: correct
    assert judge([claim(1_000, "w1", 1), claim(2_000, "w2", 2, sub="sub-c1-2")]) == []
    # the lane's epoch 1 granted twice (epochs counted per submission): the log's fence cannot tell them apart
    [message] = judge([claim(1_000, "w1", 1), claim(2_000, "w2", 1, sub="sub-c1-2")])
    assert "lane-epoch 'c1' is not linearizable" in message
    # a purged conversation's lane starts again
    assert judge([claim(1_000, "w1", 1), reserve(2_000, "w1", 1), finalize(3_000), purge(4_000),
                  mark_ready(4_500, "sub-c1-2"), claim(5_000, "w2", 1, sub="sub-c1-2")]) == []


def test_a_renewal_by_a_token_whose_ownership_ended_is_flagged():
    released = [claim(1_000, "w1", 1), release(2_000, "w1", 1), renew(3_000, "w1", 1)]
    assert len(judge(released)) == 1
    taken_over = [claim(1_000, "w1", 1), claim(1_000 + LEASE_MS, "w2", 2), renew(1_000 + LEASE_MS + 1, "w1", 1)]
    assert len(judge(taken_over)) == 1
    # refused, both are correct; a lapsed lease nobody claimed still renews (the contract's rule)
    assert judge([claim(1_000, "w1", 1), release(2_000, "w1", 1), renew(3_000, "w1", 1, lost_at=1)]) == []
    assert judge([claim(1_000, "w1", 1), renew(1_000 + 5 * LEASE_MS, "w1", 1)]) == []
    # a current token refused is flagged too
    assert len(judge([claim(1_000, "w1", 1), renew(2_000, "w1", 1, lost_at=1)])) == 1


def test_a_reservation_by_a_fenced_token_is_flagged():
    calls = [claim(1_000, "w1", 1), claim(1_000 + LEASE_MS, "w2", 2), reserve(1_000 + LEASE_MS + 1, "w1", 1)]
    assert len(judge(calls)) == 1


def test_a_settled_submission_is_never_claimed_again():
    assert len(judge([claim(1_000, "w1", 1), reserve(2_000, "w1", 1), finalize(3_000),
                      claim(4_000 + LEASE_MS, "w2", 2)])) == 1
    # an abort that settled it at once settles it too
    settled = AbortIntent(SUB, "client", "stop", 1_000, False, 1_000)
    abort = PortCall(1_000, "client#1", "ledger", "request_abort", (SUB, "client", "stop", 1_000), {}, settled, None)
    assert len(judge([abort, claim(2_000, "w1", 1)])) == 1
    # a purge ends the submission's history: a new one of the same id starts afresh
    assert judge([claim(1_000, "w1", 1), reserve(2_000, "w1", 1), finalize(3_000), purge(4_000),
                  mark_ready(4_500), claim(5_000, "w2", 1)]) == []


def test_a_submission_is_claimed_only_once_ready():
    assert len(judge([claim(1_000, "w1", 1)], ready=())) == 1
    assert judge([mark_ready(500), claim(1_000, "w1", 1)], ready=()) == []
    # a readiness whose reply was lost may have taken effect: the claim shows it did
    assert judge([mark_ready(500), lost(500, "ledger.mark_ready", node="client#1"), claim(1_000, "w1", 1)],
                 ready=()) == []


def test_a_claim_is_judged_on_the_clock_the_ledger_used():
    # store-clock mode writes the store's reading into the call's now_ms:
    # at the store's 22_000 w1's lease (to 21_000) had lapsed, whatever the caller's clock said
    assert judge([claim(1_000, "w1", 1), claim(2_000, "w2", 2, now_ms=22_000)]) == []
    assert len(judge([claim(1_000, "w1", 1), claim(2_000, "w2", 2, now_ms=20_999)])) == 1


def test_a_claim_whose_reply_was_lost_may_or_may_not_have_taken_effect():
    seen = [claim(1_000, "w1", 1), claim(2_000, "w2", 2)]
    assert len(judge(seen)) == 1  # w1's live lease was claimed over
    # w1 never saw its answer: had the claim not taken effect, w2's is fine
    assert judge([seen[0], lost(1_000, "ledger.claim", node="w1#1"), seen[1]]) == []
    # a lost reply on another node names nothing
    assert len(judge([seen[0], lost(1_000, "ledger.claim", node="w9#1"), seen[1]])) == 1


# --- the models alone, and the recorder's edges -------------------------------------------


def _op(i, name, args, answer, t=None):
    t = i if t is None else t
    return Op(i, "p", "k", name, tuple(args), t, None if answer is UNKNOWN else t, answer)


def test_the_lease_model_alone():
    lease = SubmissionLeaseModel()
    ok = [_op(-1, "ready", (), None), _op(0, "claim", ("a", 10, 0, None), 1), _op(1, "renew", ("a", 1, 10, 5), None),
          _op(2, "end", ("a", 1), None), _op(3, "claim", ("b", 10, 6, None), 7)]
    assert check_object(ok, lease, "k").outcome == "ok"
    assert check_object(ok[1:], lease, "k").outcome == "violation"  # never ready
    # renewal never shortens: a claim at 9 by another owner is before the lease's expiry 10
    short = [_op(-1, "ready", (), None), _op(0, "claim", ("a", 10, 0, None), 1),
             _op(1, "renew", ("a", 1, 1, 5), None), _op(2, "claim", ("b", 10, 9, None), 2)]
    assert check_object(short, lease, "k").outcome == "violation"
    with pytest.raises(ValueError):
        lease.step(lease.init(), _op(0, "steal", (), None))


def test_the_recorder_refuses_a_port_it_cannot_translate_and_keeps_its_bounds():
    with pytest.raises(UnknownPort):
        HistoryLinearizable(ports=("ds", "kernel"))
    checker = HistoryLinearizable(ports=("ledger",), ops_per_key_max=3)
    failures = []
    checker._sink = failures.append
    # the key is judged on its first three: w2's claim over w1's live lease is left out
    for call in [mark_ready(0), claim(1_000, "w1", 1), renew(2_000, "w1", 1), claim(3_000, "w2", 2)]:
        checker.on_port_call(call)
    checker.audit(None)
    assert failures == [] and checker.metrics()["history_ops_left_out"] == 1
    capped = HistoryLinearizable(ports=("ledger",), ops_max=1)
    capped.on_port_call(claim(1_000, "w1", 1))  # its submission's op kept, its lane's left out
    capped.on_port_call(claim(1_000, "w1", 1))  # both left out
    assert capped.metrics()["history_ops_left_out"] == 3
    # past the audit's step budget a key is not judged: too costly, never a verdict
    spent = HistoryLinearizable(ports=("ledger",), steps_max=1)
    spent._sink = failures.append
    for call in [claim(1_000, "w1", 1), claim(2_000, "w2", 2)]:  # a violation, had it been judged
        spent.on_port_call(call)
    spent.audit(None)
    assert failures == [] and spent.checks == 0 and spent.metrics()["history_keys_too_costly"] == 2  # lane, lease
    # the default judges durable state only: ledger and log calls are not recorded
    default = HistoryLinearizable()
    default.on_port_call(claim(1_000, "w1", 1))
    assert default._ops == {}


def test_a_submission_id_names_its_conversation():
    assert _conversation_of("sub-submitters/conv-2-g4-13") == "submitters/conv-2-g4"
    assert _conversation_of("other") == "other"


# --- the search against a brute force, on random small histories of the new models ------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _brute_force(history: list[Op], model) -> bool:
    """Every order real time allows, each unknown operation in it or left
    out, run against the model: True when one fits."""
    needed = sum(1 for o in history if o.answer is not UNKNOWN)

    def precedes(a: Op, b: Op) -> bool:
        return a.complete_ms is not None and a.complete_ms < b.invoke_ms

    def extend(done: frozenset, skipped: frozenset, state) -> bool:
        if sum(1 for o in history if o.op_id in done and o.answer is not UNKNOWN) == needed:
            return True
        for o in history:
            if o.op_id in done or o.op_id in skipped or any(
                    precedes(p, o) and p.op_id not in done and p.op_id not in skipped for p in history):
                continue
            after = model.step(state, o)
            if after is not None and extend(done | {o.op_id}, skipped, after):
                return True
            if o.answer is UNKNOWN and extend(done, skipped | {o.op_id}, state):
                return True
        return False

    return extend(frozenset(), frozenset(), model.init())


@st.composite
def _timed(draw, make_op):
    count = draw(st.integers(1, 5))
    ops = []
    for i in range(count):
        invoke = draw(st.integers(0, 6))
        name, args, answer = draw(make_op)
        if answer is not UNKNOWN and draw(st.integers(0, 5)) == 0:
            answer = UNKNOWN
        complete = None if answer is UNKNOWN else invoke + draw(st.integers(0, 3))
        ops.append(Op(i, f"p{i}", "k", name, args, invoke, complete, answer))
    return ops


_OWNERS = st.sampled_from(("a", "b"))
_LEASE_OP = st.one_of(
    st.tuples(st.just("ready"), st.just(()), st.just(None)),
    st.tuples(st.just("settle"), st.just(()), st.just(None)),
    st.builds(lambda owner, now, epoch, answer: ("claim", (owner, 3, now, epoch), answer),
              _OWNERS, st.integers(0, 6), st.integers(1, 3), st.integers(1, 3)),
    st.builds(lambda name, owner, epoch, lost: (name, (owner, epoch) + ((3, 2) if name == "renew" else ()),
                                                Failed("OwnershipLost") if lost else None),
              st.sampled_from(("renew", "release", "end", "fenced")), _OWNERS, st.integers(0, 3), st.booleans()),
)


@settings(max_examples=300, deadline=None)
@given(_timed(_LEASE_OP))
def test_the_search_agrees_with_a_brute_force_on_leases(history):
    model = SubmissionLeaseModel()
    assert (check_object(history, model, "k").outcome == "ok") == _brute_force(history, model)


_LOG_OP = st.one_of(
    st.builds(lambda producer, epoch, fenced: ("materialize", (producer, epoch),
                                               Failed("FenceRejected") if fenced else None),
              _OWNERS, st.integers(0, 2), st.booleans()),
    st.builds(lambda epoch, expected, batch, first: ("append", (epoch, expected, batch, ((batch, f"r-{batch}", 0),)),
                                                      first),
              st.integers(0, 2), st.integers(0, 2), st.sampled_from(("b1", "b2", "b3")),
              st.one_of(st.integers(1, 3), st.just(Failed("AppendConflict:tail")),
                        st.just(Failed("FenceRejected")), st.just(Failed("AppendConflict:batch-digest")))),
    st.builds(lambda after, batches: ("read", (after, 8), tuple((b, f"r-{b}", 0) for b in batches)),
              st.integers(0, 2), st.lists(st.sampled_from(("b1", "b2", "b3")), max_size=2)),
    st.builds(lambda seq, epoch: ("tail", (), (seq, epoch)), st.integers(0, 2), st.integers(0, 2)),
)


@settings(max_examples=300, deadline=None)
@given(_timed(_LOG_OP))
def test_the_search_agrees_with_a_brute_force_on_logs(history):
    model = FencedLogModel()
    assert (check_object(history, model, "k").outcome == "ok") == _brute_force(history, model)
