"""The submission lifecycle's state table (model/ledger/states.py): both
adapters move only along its transitions, and the crash points are its
store crossings."""
from __future__ import annotations

import attrs
import pytest
import trio
from hypothesis import given, settings, strategies as st

from model import failpoints
from model.ledger import states
from model.ledger.memory_store import InMemorySubmissionLedger
from model.ledger.rules import SubmissionRow
from model.ledger.sqlite_store import SqliteSubmissionLedger
from model.sqlite_db import open_database
from model.ledger.states import (ABORT, ADMITTED, CLAIM, FINALIZE, INPUT_APPLIED, MARK_INPUT_APPLIED, MARK_READY,
                                 MARK_UNKNOWN, READY, RELEASE, RENEW, RESERVE, RESOLVE, RUNNING, SETTLED, TERMINALIZING,
                                 TRANSITIONS, UNKNOWN, SUSPEND, DECIDE, SUSPENDED, RESERVE_CHILD, RELEASE_CHILD,
                                 state_of)

from model.ledger.records import settlement_envelope


def _env(claim, record):
    """``record`` in ``claim``'s settlement record envelope (what the ledger reserves)."""
    return settlement_envelope(claim.submission_id, record, 0, receipt="rcpt-test")


COMPLETED = {"outcome": "completed", "result": 1}
ABORTED = {"outcome": "aborted"}


def _ledger(kind, tmp_path):
    if kind == "memory":
        return InMemorySubmissionLedger()
    return SqliteSubmissionLedger(open_database(str(tmp_path / "ledger.db")))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_submission_walks_the_table_from_admitted_to_settled(kind, tmp_path):
    ledger = _ledger(kind, tmp_path)

    async def main():
        seen = []

        async def note(sid):
            seen.append(state_of(await ledger.get(sid)))

        sid = (await ledger.admit("c", "p", "k", {"q": 1}, 0)).submission_id
        await note(sid)
        await ledger.mark_ready(sid, 0)
        await note(sid)
        claim = await ledger.claim("c", "o", 1_000, 1)
        await note(sid)
        await ledger.mark_input_applied(claim, "input:" + claim.submission_id, 1)
        await note(sid)
        await ledger.reserve_settlement(claim, _env(claim, COMPLETED))
        await note(sid)
        await ledger.finalize_settlement(sid, 2)
        await note(sid)
        return seen

    assert trio.run(main) == [ADMITTED, READY, RUNNING, INPUT_APPLIED, TERMINALIZING, SETTLED]


def test_the_crash_points_are_the_tables_store_crossings_in_lifecycle_order():
    assert failpoints.SUBMISSION_CRASH_POINTS == tuple(c.point for c in states.CROSSINGS)
    for crossing in states.CROSSINGS:
        assert crossing.operation == states.ADMIT or crossing.operation in TRANSITIONS[crossing.source]
    # Every open state reaches settled; settled is terminal (only repeats and upkeep).
    assert all(after == SETTLED for after in TRANSITIONS[SETTLED].values())
    assert CLAIM not in TRANSITIONS[ADMITTED] and ABORT not in TRANSITIONS[TERMINALIZING]
    for blocked in (UNKNOWN, SUSPENDED):
        assert states.claimable(blocked, abort_requested=True) and not states.claimable(blocked, abort_requested=False)


def test_a_malformed_table_is_refused_at_import(monkeypatch):
    monkeypatch.setitem(states.TRANSITIONS, RUNNING, {CLAIM: RUNNING})  # running can no longer settle
    with pytest.raises(AssertionError):
        states._check_table()
    monkeypatch.setitem(states.TRANSITIONS, RUNNING, {CLAIM: "paused"})  # a state the table does not know
    with pytest.raises(AssertionError):
        states._check_table()


def test_state_of_reads_only_the_rows_facts():
    row = SubmissionRow("sub-c-1", "c", "p", "k", 1, "{}", "d", "r", 0)
    assert state_of(row) == ADMITTED
    assert state_of(attrs.evolve(row, ready=True)) == READY
    assert state_of(attrs.evolve(row, ready=True, epoch=1, owner_id="o")) == RUNNING
    # A released owner leaves the row running: it ran, its input may be in the log.
    assert state_of(attrs.evolve(row, ready=True, epoch=1, owner_id=None)) == RUNNING
    # Waiting for a child's release is a suspension too.
    assert state_of(attrs.evolve(row, ready=True, epoch=1, input_applied=True, children_awaited=1)) == SUSPENDED


# Random histories: every write either is refused (nothing changes) or moves
# the submission along an edge of the table.
OPS = st.lists(st.tuples(st.sampled_from((MARK_READY, CLAIM, RENEW, RELEASE, MARK_INPUT_APPLIED, ABORT, RESERVE,
                                          FINALIZE, MARK_UNKNOWN, RESOLVE, SUSPEND, DECIDE, RESERVE_CHILD,
                                          RELEASE_CHILD)),
                         st.sampled_from(("o1", "o2")), st.sampled_from((COMPLETED, ABORTED))),
               min_size=1, max_size=14)
# Where the table names the state a write may reach but an earlier one of
# several awaited things leaves it where it was.
MAY_STAY = frozenset({(SUSPENDED, DECIDE), (SUSPENDED, RELEASE_CHILD)})
# What a suspension awaits, by the drawn record: the approval, the child, both.
AWAITS = {id(COMPLETED): (("call-2",), ("child-1",)), id(ABORTED): ((), ("child-1",))}


@settings(max_examples=60, deadline=None)
@given(ops=OPS, ready=st.booleans())
def test_every_write_of_a_random_history_is_an_edge_of_the_table(ops, ready):
    ledger = InMemorySubmissionLedger()

    async def main():
        sid = (await ledger.admit("c", "p", "k", {"q": 1}, 0)).submission_id
        if ready:
            await ledger.mark_ready(sid, 0)
        tokens = {}
        now = 10
        for operation, owner, record in ops:
            now += 700
            before = state_of(await ledger.get(sid))
            token = tokens.get(owner)
            try:
                if operation == MARK_READY:
                    await ledger.mark_ready(sid, 0)
                elif operation == CLAIM:
                    claim = await ledger.claim("c", owner, 1_000, now)
                    if claim is not None:
                        tokens[owner] = claim
                elif operation == ABORT:
                    await ledger.request_abort(sid, owner, "why", now)
                elif operation == FINALIZE:
                    await ledger.finalize_settlement(sid, now)
                elif operation == DECIDE:
                    await ledger.decide_approval(sid, "call-2", "approved" if record is COMPLETED else "rejected",
                                                 owner, "why", now)
                elif operation == RESOLVE:
                    resolution = "SafeToRetry" if record is COMPLETED else "NeverHappened"
                    await ledger.resolve_unknown(sid, "call-1", resolution, owner, None, now)
                elif operation == RELEASE_CHILD:
                    await ledger.release_child(sid, "child-1", {"tokens": 1}, now)
                elif token is None:
                    continue
                elif operation == RENEW:
                    await ledger.renew_ownership(token, 1_000, now)
                elif operation == RELEASE:
                    await ledger.release_ownership(token)
                elif operation == MARK_INPUT_APPLIED:
                    await ledger.mark_input_applied(token, "input:" + token.submission_id, 1)
                elif operation == MARK_UNKNOWN:
                    await ledger.mark_unknown(token, "call-1")
                elif operation == SUSPEND:
                    await ledger.suspend(token, *AWAITS[id(record)])
                elif operation == RESERVE_CHILD:
                    await ledger.reserve_child(token, "child-1", {"tokens": 10})
                else:
                    await ledger.reserve_settlement(token, _env(token, record))
            except Exception as error:  # refused: a typed verdict, nothing moved
                assert getattr(type(error), "name", None), error
                assert state_of(await ledger.get(sid)) == before, (operation, error)
                continue
            after = state_of(await ledger.get(sid))
            if after == before and (before, operation) in MAY_STAY:
                continue
            if after != before or operation in TRANSITIONS[before]:
                assert TRANSITIONS[before].get(operation) == after, (before, operation, after)

    trio.run(main)


# Three submissions in one lane, joins included: every state change of every
# row is an edge of the table, by an operation the call may apply to that row.
EFFECTS = {
    states.BEGIN_JOIN: (states.BEGIN_JOIN, states.JOIN),
    FINALIZE: (FINALIZE, states.SETTLE_JOINED, states.REVERT_JOIN),
}
LANE_OPS = st.lists(st.tuples(
    st.sampled_from((MARK_READY, CLAIM, MARK_INPUT_APPLIED, ABORT, RESERVE, FINALIZE, states.BEGIN_JOIN,
                     states.MARK_JOINED, states.REVERT_JOIN, RELEASE)),
    st.integers(1, 3), st.sampled_from(("o1", "o2")), st.sampled_from((COMPLETED, ABORTED))), min_size=1, max_size=16)


@settings(max_examples=60, deadline=None)
@given(ops=LANE_OPS, unready=st.integers(0, 3))
def test_every_state_change_in_a_lane_with_joins_is_an_edge_of_the_table(ops, unready):
    ledger = InMemorySubmissionLedger()

    async def main():
        sids = []
        for n in (1, 2, 3):
            sid = (await ledger.admit("c", "p", f"k{n}", {"n": n}, 0)).submission_id
            if n != unready:
                await ledger.mark_ready(sid, 0)
            sids.append(sid)
        tokens = {}
        now = 10
        for operation, n, owner, record in ops:
            now += 700
            sid = sids[n - 1]
            before = {s: state_of(await ledger.get(s)) for s in sids}
            token = tokens.get(owner)
            try:
                if operation == MARK_READY:
                    await ledger.mark_ready(sid, 0)
                elif operation == CLAIM:
                    claim = await ledger.claim("c", owner, 1_000, now)
                    if claim is not None:
                        tokens[owner] = claim
                elif operation == ABORT:
                    await ledger.request_abort(sid, owner, "why", now)
                elif operation == FINALIZE:
                    await ledger.finalize_settlement(sid, now)
                elif token is None:
                    continue
                elif operation == states.BEGIN_JOIN:
                    await ledger.begin_join(token, 2)
                elif operation == states.MARK_JOINED:
                    await ledger.mark_joined(token, sid, f"input:{sid}", n)
                elif operation == states.REVERT_JOIN:
                    await ledger.revert_join(token, sid)
                elif operation == RELEASE:
                    await ledger.release_ownership(token)
                elif operation == MARK_INPUT_APPLIED:
                    await ledger.mark_input_applied(token, "input:" + token.submission_id, 1)
                else:
                    await ledger.reserve_settlement(token, _env(token, record))
            except Exception as error:  # refused: a typed verdict, nothing moved
                assert getattr(type(error), "name", None), error
                assert {s: state_of(await ledger.get(s)) for s in sids} == before, (operation, error)
                continue
            for s in sids:
                after = state_of(await ledger.get(s))
                if after != before[s]:
                    edges = {TRANSITIONS[before[s]].get(op) for op in EFFECTS.get(operation, (operation,))}
                    assert after in edges, (s, before[s], operation, after)

    trio.run(main)
