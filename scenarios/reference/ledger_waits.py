"""The reference ledger's rules for the waits of a running submission
(``scenarios.reference.ledger``): tool calls whose outcome is unknown and
their resolutions, suspensions on approvals and children, approval
decisions, hosts joining followers, and subagent children reserved,
attached and released. Written from the contract, apart from the model."""
from __future__ import annotations

from typing import Any

from model.ledger.records import (ApprovalDecision, ChildReservation, Claim, JoinBatch, JoinMarked, JoiningFollower,
                                  Suspension, UnknownMarked, UnknownResolution)
from scenarios.reference.jcs import canonical, digest_text, read_back
from scenarios.reference.ledger_rows import (DECISIONS, JOIN_LIMIT_MAX, RESOLUTIONS, _MISSING, _Conversation, _Mismatch,
                                             _Row, _is_int)


class LedgerWaits:
    """The reference ledger's rules for unknown outcomes, suspensions, approvals, joins and
    children: a mixin of ``ReferenceLedger``, whose state and comparisons it uses."""

    def _mark_unknown(self, call: Any, a: dict) -> _Conversation | None:
        token, call_id = a["token"], a["tool_call_id"]
        if not isinstance(token, Claim) or type(call_id) is not str:
            self._want_argument_error(call, "the token must be a Claim, tool_call_id a str")
            return None
        row = self._rows.get(token.submission_id)
        if self._settled_conflict(call, row):
            return self._conversations[row.conversation_id]
        if (row is not None and row.owner_id is None and row.epoch == token.epoch and row.unknown is not None
                and call_id in row.unknown and row.unknown[call_id] is None):
            # The token that marked it (its ownership ended with the mark): a replay.
            conversation = self._conversations[row.conversation_id]
            self._want_value(call, UnknownMarked(row.submission_id, call_id, True), conversation)
            return conversation
        if not self._fenced(call, row, token):
            return None if row is None else self._conversations[row.conversation_id]
        conversation = self._conversations[row.conversation_id]
        if row.settled_at_ms is not None or row.reserved_digest is not None or not row.input_applied:
            state = ("settled" if row.settled_at_ms is not None else
                     "terminalizing" if row.reserved_digest is not None else "running")
            self._want_error(call, "TransitionRefused", {"submission_id": row.submission_id, "state": state,
                                                         "operation": "mark_unknown"}, conversation)
            return conversation
        existing = (row.unknown or {}).get(call_id, _MISSING)
        if existing is not _MISSING and existing is not None:
            self._want_error(call, "ResolutionConflict", {"submission_id": row.submission_id, "tool_call_id": call_id,
                             "existing": existing["resolution"], "attempted": "unknown"}, conversation)
            return conversation
        if existing is None:
            self._want_value(call, UnknownMarked(row.submission_id, call_id, True), conversation)
            return conversation
        self._want_value(call, UnknownMarked(row.submission_id, call_id, False), conversation)
        if row.unknown is None:
            row.unknown = {}
        row.unknown[call_id] = None
        row.owner_id = row.lease_expires_ms = None  # ownership ends: nothing may replay the call
        row.changed()
        return conversation

    def _resolve_unknown(self, call: Any, a: dict) -> _Conversation | None:
        sid, call_id, resolution, resolver, result, now_ms = (
            a["submission_id"], a["tool_call_id"], a["resolution"], a["resolver"], a["result"], a["now_ms"])
        if not (type(sid) is str and type(call_id) is str and type(resolver) is str and _is_int(now_ms)):
            self._want_argument_error(call, "ids and the resolver must be str, now_ms an int")
            return None
        if resolution not in RESOLUTIONS or (resolution != "CompletedWithResult") != (result is None):
            self._want_argument_error(call, "a known resolution, with a result exactly for CompletedWithResult")
            return None
        result_text = None
        if resolution == "CompletedWithResult":
            try:
                result_text = canonical(result)
            except ValueError as exc:
                self._want_argument_error(call, f"the result is not JSON: {exc}")
                return None
        row = self._rows.get(sid)
        if row is None:
            self._want_error(call, "UnknownSubmission", {"submission_id": sid}, None)
            return None
        conversation = self._conversations[row.conversation_id]
        if self._settled_conflict(call, row):  # L15
            return conversation
        if row.unknown is None or call_id not in row.unknown:
            self._want_error(call, "UnknownToolCall", {"submission_id": sid, "tool_call_id": call_id}, conversation)
            return conversation
        existing = row.unknown[call_id]
        if existing is not None:
            same = existing["resolution"] == resolution and (
                result_text is None or canonical(existing["result"]) == result_text)
            if not same:
                self._want_error(call, "ResolutionConflict", {"submission_id": sid, "tool_call_id": call_id,
                                 "existing": existing["resolution"], "attempted": resolution}, conversation)
                return conversation
            self._want_value(call, UnknownResolution(sid, call_id, resolution, existing["resolver"],
                                                     existing["resolvedAtMs"], existing.get("result"), True,
                                                     row.open_unknown()), conversation)
            return conversation
        entry = {"resolution": resolution, "resolver": resolver, "resolvedAtMs": now_ms}
        if result_text is not None:
            entry["result"] = read_back(result_text)
        row.unknown[call_id] = entry
        self._want_value(call, UnknownResolution(sid, call_id, resolution, resolver, now_ms, entry.get("result"),
                                                 False, row.open_unknown()), conversation)
        row.changed()
        return conversation

    def _suspend(self, call: Any, a: dict) -> _Conversation | None:
        token, calls, kids = a["token"], a["tool_call_ids"], a["child_call_ids"]
        if not isinstance(token, Claim) or not isinstance(calls, (tuple, list)) or not isinstance(
                kids, (tuple, list)) or not (calls or kids) or any(type(c) is not str for c in (*calls, *kids)):
            self._want_argument_error(call, "the token must be a Claim, tool_call_ids and child_call_ids "
                                            "sequences of str, not both empty")
            return None
        wanted = tuple(dict.fromkeys(calls))
        wanted_kids = tuple(dict.fromkeys(kids))
        row = self._rows.get(token.submission_id)
        if self._settled_conflict(call, row):
            return self._conversations[row.conversation_id]
        approvals = {} if row is None or row.approvals is None else row.approvals
        if (row is not None and row.owner_id is None and row.epoch == token.epoch
                and all(c in approvals for c in wanted)
                and all(c in row.children and row.children[c][4] for c in wanted_kids)):
            conversation = self._conversations[row.conversation_id]  # the suspending token again: a replay
            pending = tuple(c for c in wanted if approvals[c] is None)
            kids_pending = tuple(c for c in wanted_kids if row.children[c][3] is None)
            self._want_value(call, Suspension(row.submission_id, pending, not pending and not kids_pending, True,
                                              kids_pending), conversation)
            return conversation
        if not self._fenced(call, row, token):
            return None if row is None else self._conversations[row.conversation_id]
        conversation = self._conversations[row.conversation_id]
        refused = ("settled" if row.settled_at_ms is not None else "terminalizing" if row.reserved_digest is not None
                   else "unknown" if row.open_unknown() else "running" if not row.input_applied else None)
        if refused is not None:
            self._want_error(call, "TransitionRefused", {"submission_id": row.submission_id, "state": refused,
                                                         "operation": "suspend"}, conversation)
            return conversation
        unknown = next((c for c in wanted_kids if c not in row.children), None)
        if unknown is not None:  # L12
            self._want_error(call, "UnknownChildReservation", {"submission_id": row.submission_id,
                             "tool_call_id": unknown}, conversation)
            return conversation
        pending = tuple(c for c in wanted if row.approvals is None or row.approvals.get(c) is None)
        kids_pending = tuple(c for c in wanted_kids if row.children[c][3] is None)
        self._want_value(call, Suspension(row.submission_id, pending, not pending and not kids_pending, False,
                                          kids_pending), conversation)
        if wanted and row.approvals is None:
            row.approvals = {}
        for c in wanted:
            row.approvals.setdefault(c, None)
        for c in wanted_kids:
            row.children[c][4] = True
        row.owner_id = row.lease_expires_ms = None  # suspension ends ownership
        row.changed()
        return conversation

    def _decide_approval(self, call: Any, a: dict) -> _Conversation | None:
        sid, call_id, decision, resolver, reason, now_ms = (
            a["submission_id"], a["tool_call_id"], a["decision"], a["resolver"], a["reason"], a["now_ms"])
        if not (type(sid) is str and type(call_id) is str and type(resolver) is str and type(reason) is str
                and _is_int(now_ms) and decision in DECISIONS):
            self._want_argument_error(call, "ids, resolver and reason str, now_ms an int, a known decision")
            return None
        row = self._rows.get(sid)
        if row is None:
            self._want_error(call, "UnknownSubmission", {"submission_id": sid}, None)
            return None
        conversation = self._conversations[row.conversation_id]
        if self._settled_conflict(call, row):  # L15
            return conversation
        if row.approvals is None or call_id not in row.approvals:
            self._want_error(call, "UnknownApproval", {"submission_id": sid, "tool_call_id": call_id}, conversation)
            return conversation
        existing = row.approvals[call_id]
        if existing is not None:
            if existing["decision"] != decision:
                self._want_error(call, "ApprovalConflict", {"submission_id": sid, "tool_call_id": call_id,
                                 "existing": existing["decision"], "attempted": decision}, conversation)
                return conversation
            self._want_value(call, ApprovalDecision(sid, call_id, decision, existing["resolver"], existing["reason"],
                                                    existing["decidedAtMs"], True, row.waiting()),
                             conversation)
            return conversation
        row.approvals[call_id] = {"decision": decision, "resolver": resolver, "reason": reason, "decidedAtMs": now_ms}
        self._want_value(call, ApprovalDecision(sid, call_id, decision, resolver, reason, now_ms, False,
                                                row.waiting()), conversation)
        row.changed()
        return conversation

    def _begin_join(self, call: Any, a: dict) -> _Conversation | None:
        token, limit = a["token"], a["limit"]
        if not isinstance(token, Claim) or not _is_int(limit) or not 1 <= limit <= JOIN_LIMIT_MAX:
            self._want_argument_error(call, f"the token must be a Claim, limit within 1..{JOIN_LIMIT_MAX}")
            return None
        host = self._rows.get(token.submission_id)
        if not self._fenced(call, host, token):
            return None if host is None else self._conversations[host.conversation_id]
        conversation = self._conversations[host.conversation_id]
        state = self._state(host)
        if state not in ("running", "input-applied"):
            self._want_error(call, "TransitionRefused", {"submission_id": host.submission_id, "state": state,
                                                         "operation": "begin_join"}, conversation)
            return conversation
        taken = []
        for row in list(conversation.open.values()):
            if row.queue_seq <= host.queue_seq or row.join_host == host.submission_id:
                continue
            if len(host.followers) + len(taken) >= limit or self._state(row) != "ready" or row.abort_author is not None:
                break  # a gap (an aborting one too: L17): never skipped
            taken.append(row)
        # L17: the answer is what this call took, each with its queue
        # position and input; what an earlier call took is not repeated.
        answer = tuple(JoiningFollower(r.submission_id, r.queue_seq, read_back(r.input_text)) for r in taken)
        self._want_value(call, JoinBatch(host.submission_id, answer, not taken), conversation)
        for row in taken:
            row.join_host = host.submission_id
            row.changed()
        host.followers.extend(r.submission_id for r in taken)
        host.changed()
        return conversation

    def _mark_joined(self, call: Any, a: dict) -> _Conversation | None:
        token, sid, record_id, seq = a["token"], a["submission_id"], a["record_id"], a["seq"]
        if not (isinstance(token, Claim) and type(sid) is str and type(record_id) is str and _is_int(seq)
                and seq >= 1):
            self._want_argument_error(call, "a Claim, ids str, seq a positive int")
            return None
        host = self._rows.get(token.submission_id)
        if not self._fenced(call, host, token):
            return None if host is None else self._conversations[host.conversation_id]
        conversation = self._conversations[host.conversation_id]
        follower = self._rows.get(sid)
        if follower is None:
            self._want_error(call, "UnknownSubmission", {"submission_id": sid}, conversation)
            return conversation
        state = self._state(follower)
        if (follower.join_host != host.submission_id or state not in ("joining", "joined")
                or (follower.joined_at is not None and follower.joined_at != (record_id, seq))):
            self._want_error(call, "TransitionRefused", {"submission_id": sid, "state": state,
                                                         "operation": "mark_joined"}, conversation)
            return conversation
        replayed = follower.joined_at is not None
        self._want_value(call, JoinMarked(sid, host.submission_id, record_id, seq, replayed), conversation)
        if not replayed:
            follower.joined_at = (record_id, seq)
            follower.changed()
        return conversation

    def _revert_join(self, call: Any, a: dict) -> _Conversation | None:
        token, sid = a["token"], a["submission_id"]
        if not (isinstance(token, Claim) and type(sid) is str):
            self._want_argument_error(call, "a Claim and a str")
            return None
        host = self._rows.get(token.submission_id)
        if not self._fenced(call, host, token):
            return None if host is None else self._conversations[host.conversation_id]
        conversation = self._conversations[host.conversation_id]
        follower = self._rows.get(sid)
        if follower is None:
            self._want_error(call, "UnknownSubmission", {"submission_id": sid}, conversation)
            return conversation
        state = self._state(follower)
        if follower.join_host is None and state == "ready":
            self._want_value(call, None, conversation)  # reverted already
            return conversation
        if follower.join_host == host.submission_id and state == "joined":
            self._want_value(call, None, conversation)  # L17: joined stays joined, nothing changes
            return conversation
        if follower.join_host != host.submission_id or state != "joining":
            self._want_error(call, "TransitionRefused", {"submission_id": sid, "state": state,
                                                         "operation": "revert_join"}, conversation)
            return conversation
        self._want_value(call, None, conversation)
        follower.join_host = None
        follower.changed()
        host.followers.remove(sid)
        host.changed()
        return conversation

    def _child_answer(self, row: _Row, call_id: str, replayed: bool, entry: list | None = None) -> ChildReservation:
        """The answer about ``row``'s reservation at ``call_id`` once the
        call applied: ``entry``, its entry then (default: as it is)."""
        alloc, child, acct, at, awaited = row.children[call_id] if entry is None else entry
        waiting = row.waiting()
        if entry is not None and awaited and at is not None and row.children[call_id][3] is None:
            waiting -= 1  # this release is of an awaited child: one thing less
        return ChildReservation(row.submission_id, call_id, read_back(alloc), digest_text(alloc), child,
                                None if acct is None else read_back(acct), at, replayed, awaited, waiting)

    def _owned_running(self, call: Any, token: Any, operation: str) -> tuple[_Row | None, _Conversation | None]:
        """The parent row if ``token`` owns it and it runs (its input applied
        or not yet: the running owner reserves); else the refusal is checked
        and (None, its conversation) returned."""
        row = self._rows.get(token.submission_id)
        if not self._fenced(call, row, token):
            return None, None if row is None else self._conversations[row.conversation_id]
        conversation = self._conversations[row.conversation_id]
        state = self._state(row)
        if state not in ("running", "input-applied"):
            self._want_error(call, "TransitionRefused", {"submission_id": row.submission_id, "state": state,
                                                         "operation": operation}, conversation)
            return None, conversation
        return row, conversation

    def _reserve_child(self, call: Any, a: dict) -> _Conversation | None:
        token, call_id, allocation = a["token"], a["tool_call_id"], a["allocation"]
        if not (isinstance(token, Claim) and type(call_id) is str):
            self._want_argument_error(call, "a Claim and a str tool_call_id")
            return None
        try:
            text = canonical(allocation)
        except ValueError as exc:
            self._want_argument_error(call, f"the allocation is not JSON: {exc}")
            return None
        # L14: an existing reservation is answered before the token is
        # checked (an identical replay creates nothing); only a new one is fenced.
        row = self._rows.get(token.submission_id)
        existing = None if row is None else row.children.get(call_id)
        if existing is not None:
            conversation = self._conversations[row.conversation_id]
            if existing[0] != text:
                self._want_error(call, "ChildReservationConflict", {"submission_id": row.submission_id,
                                 "tool_call_id": call_id, "what": "allocation"}, conversation)
                return conversation
            self._want_value(call, self._child_answer(row, call_id, True), conversation)
            return conversation
        row, conversation = self._owned_running(call, token, "reserve_child")
        if row is None:
            return conversation
        row.children[call_id] = [text, None, None, None, False]
        try:
            self._want_value(call, self._child_answer(row, call_id, False), conversation)
        except _Mismatch:
            del row.children[call_id]  # a diverging answer changes nothing in the model
            raise
        row.changed()
        return conversation

    def _attach_child(self, call: Any, a: dict) -> _Conversation | None:
        token, call_id, child = a["token"], a["tool_call_id"], a["child_submission_id"]
        if not (isinstance(token, Claim) and type(call_id) is str and type(child) is str):
            self._want_argument_error(call, "a Claim, str ids")
            return None
        row = self._rows.get(token.submission_id)
        existing = None if row is None else row.children.get(call_id)
        if existing is not None and existing[1] is not None:  # L14: an attached child, before the token
            conversation = self._conversations[row.conversation_id]
            if existing[1] != child:
                self._want_error(call, "ChildReservationConflict", {"submission_id": row.submission_id,
                                 "tool_call_id": call_id, "what": "child"}, conversation)
                return conversation
            self._want_value(call, self._child_answer(row, call_id, True), conversation)
            return conversation
        row, conversation = self._owned_running(call, token, "attach_child")
        if row is None:
            return conversation
        existing = row.children.get(call_id)
        if existing is None:
            self._want_error(call, "UnknownChildReservation", {"submission_id": row.submission_id,
                             "tool_call_id": call_id}, conversation)
            return conversation
        self._want_value(call, self._child_answer(row, call_id, False, [existing[0], child, *existing[2:]]),
                         conversation)
        existing[1] = child
        row.changed()
        return conversation

    def _release_child(self, call: Any, a: dict) -> _Conversation | None:
        sid, call_id, accounting, now_ms = a["submission_id"], a["tool_call_id"], a["accounting"], a["now_ms"]
        if not (type(sid) is str and type(call_id) is str and _is_int(now_ms)):
            self._want_argument_error(call, "str ids, now_ms an int")
            return None
        try:
            text = canonical(accounting)
        except ValueError as exc:
            self._want_argument_error(call, f"the accounting is not JSON: {exc}")
            return None
        row = self._rows.get(sid)
        if row is None:
            self._want_error(call, "UnknownSubmission", {"submission_id": sid}, None)
            return None
        conversation = self._conversations[row.conversation_id]
        existing = row.children.get(call_id)
        if existing is None:
            self._want_error(call, "UnknownChildReservation", {"submission_id": sid, "tool_call_id": call_id},
                             conversation)
            return conversation
        if existing[3] is not None:
            if existing[2] != text:
                self._want_error(call, "ChildReservationConflict", {"submission_id": sid, "tool_call_id": call_id,
                                 "what": "accounting"}, conversation)
                return conversation
            self._want_value(call, self._child_answer(row, call_id, True), conversation)
            return conversation
        self._want_value(call, self._child_answer(row, call_id, False, [*existing[:2], text, now_ms, existing[4]]),
                         conversation)
        existing[2], existing[3] = text, now_ms
        row.changed()
        return conversation
