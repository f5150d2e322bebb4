"""A reference model of the Submission Ledger port, checked call by call.

Why: the other oracles judge the system with the system's own understanding
of the ledger, so a wrong ledger rule is self-consistent and invisible to
them. This is a second, deliberately plain reading of the contract
(persistence §3, §9, §10 and the shared conformance checks) in dicts and
lists. It shares no code with the adapters or their rules: it only borrows
the record and error *types* of ``model.ledger.records`` to build the typed
answer the contract requires, and its digests come from the references' own
RFC 8785 encoder (``scenarios.reference.jcs``). The ``reference-model``
oracle shows ``observe`` every ledger call a run makes as it committed
(``faults.ports.PortCall``); the model applies it and says whether the
store's answer is the one the contract allows. ``key_of`` names the
conversation a call touches, ``forget`` stops checking a diverged one, and
``audit`` compares the end state with the store's rows.

Values the contract leaves to the store are adopted on first sight and
checked on every later use: the minted submission id and receipt (unique
among the rows held, the same on every exact retry and read), the
``queue_seq`` (1 for a conversation's first admission, strictly increasing
after it, gaps allowed: the contract promises order, not density), and the
producer epoch (strictly increasing per conversation, its step left open).

Points the contract is silent on, where the model follows what both
adapters (memory, SQLite) do — each named where it is used:

- the lease boundary: a lease is live while ``now_ms < lease_expires_ms``;
  at exactly its expiry instant it has lapsed (L1);
- the same owner may claim again while its own lease is live, at a new
  epoch (L2);
- renew, release, the input marker and reserve are fenced by owner + epoch
  only, not by the clock: a lapsed lease nobody claimed since renews (L3);
- finalize leaves the ownership columns as they are, so a settled row's
  token still renews, releases and re-reserves its own record (L4);
- which error wins when several apply: reserve checks the record's shape
  before the submission exists; tokens are checked epoch first (L5);
- purge forgets the conversation entirely: its queue_seq, its epoch and so
  its submission ids start again from scratch (L6);
- abort of an unsettled submission with an earlier intent, or of one that
  intent settled before any claim, returns that first intent (author,
  reason, time), ``replayed`` (L7);
- abort while the owner has reserved a non-aborted record is
  ``AbortConflict`` too, ``settling`` (the reservation wins); abort of a
  submission admitted but never ready settles it ``aborted`` in the same
  call, its record ``{"outcome": "aborted"}`` in a settlement envelope
  created at the intent's time (L8); a ready one keeps the intent (L17);
- L17, the queued abort: a row with an abort intent, never claimed and not
  joining, reserves an ``aborted`` record under any token (the
  ``QueuedAbort`` authority; anything else is fenced as usual), and a host
  never joins a ready row with an abort intent (a gap);
- a settlement record is a record envelope (``recordId``
  ``settlement:{submission}``, family ``submission-settled``, version 1,
  ``createdAt``, ``deploymentId``, payload the peer implementation's flat
  ``SubmissionSettled`` payload: ``submissionId``, ``settlementId``
  ``settlement:{submission}``, ``receiptId`` a non-empty string, ``runId``
  a string if present, and the outcome record's members beside them) and
  its digest is the whole envelope's (as the peer implementation digests
  it); a joined follower's is its host's envelope re-addressed to it, with
  its own receipt, the host's outcome and no result; a queued abort's names
  the admission's receipt and no run (L16);
- reserve of a non-aborted record once an abort intent exists is
  ``AbortRequested`` (L9);
- the ids the contract fixes are checked exactly: a claim's attempt id is
  ``{submission}#a{epoch}``, a settlement id ``settlement:{submission}``
  (L10);
- a parent link is part of an admission's identity: another link (or one
  where there was none, or none where there was one) under the same key
  and input is ``AdmissionConflict`` naming ``what="parent"``; another
  input is named first (``what="input"``) (L11);
- a suspension names approvals and/or child calls; a child call with no
  reservation is ``UnknownChildReservation`` with nothing written; the
  submission waits while an approval is undecided or an awaited child
  unreleased, and the answers' ``pending`` count both (L12);
- a joined follower settled by its host has its input where it joined the
  host's log; a held rebuild placeholder never had one (L13);
- the running owner reserves child budgets and attaches children whether
  or not its input is applied; an existing reservation (an attached child)
  is answered before the token is checked, so an identical replay by a
  fenced owner replays and another allocation (child) conflicts; only a
  new reservation or attachment is fenced (L14);
- ``suspend``, ``mark_unknown``, ``request_abort``, ``decide_approval`` and
  ``resolve_unknown`` of a settled submission are ``SettlementConflict``
  naming its ``existing_outcome``, before any replay, token or call check
  (an intent replays only where it settled a never-ready one, L7); a
  reserve conflict names the reserved outcome (L15);
- admission policies (L16): the admission group and the opaque metadata
  (canonical) are part of an admission's identity, named after the input
  and the parent; an exact replay is answered before any policy; a fresh
  admission whose fence ``(policy, key)`` the ledger does not hold is
  ``AdmissionPolicyError`` ``unavailable``/``no-fence``, one whose fence
  stands at a newer (older) revision is ``refused``/``stale-revision``
  (``unknown-revision``), and then one into a group (ledger-wide) holding
  an unsettled submission, terminalizing included, is
  ``occupied``/``group-occupied``; nothing is written. A fence moves
  forward only (``set_admission_fence``: the same revision replays, an
  older one is ``refused``/``revision-regressed``). Last, a conversation's
  first admission fixes its lane until a purge: a worker admission
  (metadata ``kind`` ``"WorkerAdmission"``) the worker lane of its
  ``origin``, any other an ordinary one; a fresh admission asking for
  another is ``refused``: ``ordinary-lane`` (a worker admission where
  ordinary work was), ``worker-lane`` (ordinary work on a worker lane),
  ``worker-origin`` (another origin, or none);
- ``begin_join`` answers only the rows it took, each with its queue
  position and input (the peer's ``claimJoining``); reverting a joined
  follower is a no-op, it stays joined (the peer's ``revertJoining``) (L17).
- a scan row carries a record's control fields only, no input and no
  admission metadata (the peer's ``scanNonterminal``); ``get`` carries
  them (L18).
- a fresh worker admission (after the lane check) needs an ``origin``
  object with an integer ``expiresAtMillis`` (``worker-origin``, a fresh
  lane too) and its idempotency key as ``messageId``
  (``worker-message-id``), both ``refused`` (L19).

A call whose answer diverges changes nothing in the model (it cannot know
what the store wrote), so later messages may be consequences of the first.

Memory: one small row per submission the ledger holds, one entry per
conversation it knows, a bounded deque of recent calls per conversation;
``purge_conversation`` drops all of a conversation's entries.
"""
from __future__ import annotations

from typing import Any

import attrs

from model.ledger.records import (AbortIntent, AdmissionFence, AdmissionFenceState, AdmissionResult, Claim,
                                  ClaimHandoff, InputApplied, OwnershipRenewal, ParentLink, Readiness, RecoverySnapshot,
                                  ReservedSettlement, Settlement)
from scenarios.reference import error_name, retryable
from scenarios.reference.jcs import canonical, digest_text, read_back
from scenarios.reference.ledger_rows import (BY_SUBMISSION, BY_TOKEN, OUTCOMES, PARAMS, READS, STORE_ERROR,
                                             _ENVELOPE_MEMBERS, _MISSING, _SETTLED, _Conversation, _Mismatch, _Row,
                                             _answer_text, _bind, _brief, _call_text, _is_int, _outcome_of,
                                             _outcome_record, _settled_envelope, _settlement_id, _short)
from scenarios.reference.ledger_waits import LedgerWaits


class ReferenceLedger(LedgerWaits):
    """An independent executable model of the Submission Ledger contract.

    ``observe(call)`` applies one committed ledger call and returns None if
    the store answered as the contract says, else a one-paragraph message.
    """

    port = "ledger"

    def __init__(self) -> None:
        self._conversations: dict[str, _Conversation] = {}
        self._rows: dict[str, _Row] = {}
        self._by_key: dict[tuple[str, str, str], _Row] = {}
        self._receipts: dict[str, str] = {}  # receipt -> submission id, for uniqueness
        # L16: each admission group's rows admitted into it (its open one, if any, among them), and each
        # admission fence's revision by (policy, key).
        self._groups: dict[str, list[_Row]] = {}
        self._fences: dict[tuple[str, str], int] = {}
        # The conversations with unsettled work: a scan costs the open work,
        # not the whole (indefinitely retained) history.
        self._open: dict[str, _Conversation] = {}
        self._forgotten: set[str] = set()  # diverged conversations (``forget``)
        self.calls_checked = 0
        self.divergences = 0
        # The port's methods (every name ``_bind`` knows), bound once.
        self._methods = {method: getattr(self, "_" + method) for method in PARAMS}

    # -- the face ------------------------------------------------------------

    def observe(self, call: Any) -> str | None:
        assert call.port == self.port, call.port
        self.calls_checked += 1
        bound = _bind(call)
        if bound is None:
            return self._diverged(call, {}, None, f"a call the port does not have (ledger.{call.method} "
                                  f"with args {_short(call.args)} kwargs {_short(call.kwargs)})")
        if call.error is not None and call.method not in READS and retryable(call.error):
            # A real write contention (persistence §9.2): refused, nothing
            # written; on the port it is the ledger's typed storage error
            # carrying the contention as its cause, never the bare one.
            if error_name(call.error) == STORE_ERROR and retryable(getattr(call.error, "cause", None)):
                return None
            return self._diverged(call, bound, self._conversations.get(self.key_of(call)),
                                  f"a refused write (a busy write lock) is {STORE_ERROR}(cause=the contention, "
                                  f"retryable), nothing written")
        conversation = None
        try:
            conversation = self._methods[call.method](call, bound)
        except _Mismatch as mismatch:
            if call.damaged:
                # A read fault altered the answer on its way: not the store's
                # own, so not compared (the ledger's reads are never damaged
                # today; a damaged write would leave the model unchanged).
                return None
            return self._diverged(call, bound, getattr(mismatch, "conversation", None), str(mismatch))
        if conversation is not None and call.method != "purge_conversation":
            conversation.history.append(_brief(call))
        return None

    def key_of(self, call: Any) -> str:
        """The conversation a call touches (the oracle stops checking a key
        at its first divergence); the port itself for a scan, or for a
        submission the model does not hold."""
        method = call.method
        if call.args:
            first = call.args[0]
        else:
            bound = _bind(call)
            first = next(iter(bound.values()), None) if bound else None
        if method in BY_TOKEN:
            row = self._rows.get(getattr(first, "submission_id", None))
            return self.port if row is None else row.conversation_id
        if method in BY_SUBMISSION:
            row = self._rows.get(first) if type(first) is str else None
            return self.port if row is None else row.conversation_id
        if method in ("scan_nonterminal", "capabilities", "set_admission_fence") or type(first) is not str:
            return self.port
        return first

    def forget(self, key: str) -> None:
        """A diverged conversation: no longer checked. Its rows stay (so
        ``key_of`` keeps mapping its submissions to it), out of scans."""
        self._forgotten.add(key)  # membership only, never iterated
        conversation = self._conversations.get(key)
        if conversation is not None:
            conversation.history.clear()

    def audit(self, view: Any) -> list[tuple[str, str | None]]:
        """The end state: each conversation's submissions as the store holds
        them (``AuditView.submissions``) against the model's rows."""
        submissions = getattr(view, "submissions", None)
        if submissions is None:
            return []
        found = []
        for cid in sorted(self._conversations):
            if cid in self._forgotten:
                continue
            try:
                held = {record.submission_id: record for record in submissions(cid)}
            except Exception as error:  # noqa: BLE001 - an unreadable end state is a finding, not a crash
                found.append((cid, f"reference ledger: at the audit, the store's submissions of {cid!r} could "
                                   f"not be read: {error_name(error)}: {error}"))
                continue
            message = None
            for sid, row in self._conversations[cid].rows.items():
                record = held.pop(sid, None)
                if not row.matches(record):
                    message = (f"reference ledger: at the audit, the store holds {_short(record, 400)} for {sid}; "
                               f"the contract says {_short(row.record(), 400)}")
                    break
            if message is None and held:
                message = (f"reference ledger: at the audit, conversation {cid!r} holds submissions no admission "
                           f"made: {sorted(held)}")
            found.append((cid, message))
        return found

    # -- comparing answers -----------------------------------------------------

    def _diverged(self, call: Any, bound: dict, conversation: _Conversation | None, why: str) -> str:
        self.divergences += 1
        recent = ""
        if conversation is not None and conversation.history:
            recent = " Recent calls on this conversation (oldest first): " + "; ".join(
                f"[{time_ms} ms {node} {method}({', '.join(map(repr, args))}) -> {answer!r}]"
                for time_ms, node, method, args, answer in conversation.history) + "."
        return (f"reference ledger: {_call_text(call, bound)}: the store answered {_answer_text(call)}; "
                f"the contract says {why}.{recent}")

    @staticmethod
    def _fail(conversation: _Conversation | None, why: str) -> _Mismatch:
        mismatch = _Mismatch(why)
        mismatch.conversation = conversation  # type: ignore[attr-defined]
        return mismatch

    def _want_value(self, call: Any, expected: Any, conversation: _Conversation | None) -> None:
        if call.error is not None:
            raise self._fail(conversation, f"{_short(expected, 300)}")
        if call.result != expected or type(call.result) is not type(expected):
            raise self._fail(conversation, f"{_short(expected, 300)}")

    def _want_record(self, call: Any, row: _Row | None, conversation: _Conversation | None) -> None:
        if row is None:
            self._want_value(call, None, conversation)
        elif call.error is not None or not row.matches(call.result):
            raise self._fail(conversation, _short(row.record(), 600))

    def _want_error(self, call: Any, name: str, fields: dict, conversation: _Conversation | None) -> None:
        wanted = f"{name}({', '.join(f'{k}={v!r}' for k, v in fields.items())})"
        error = call.error
        if error is None or error_name(error) != name:
            raise self._fail(conversation, wanted)
        for field, value in fields.items():
            if getattr(error, field, _MISSING) != value:
                raise self._fail(conversation, f"{wanted} (the error's {field} is "
                                               f"{getattr(error, field, '<missing>')!r})")

    def _want_argument_error(self, call: Any, why: str) -> None:
        # The contract types only the ledger's own errors; a malformed
        # argument is refused with a plain TypeError/ValueError (or one of
        # their subclasses, e.g. a canonical-encoding error), nothing written.
        if not isinstance(call.error, (TypeError, ValueError)):
            raise self._fail(None, f"a refusal of the arguments ({why}), nothing written")

    def _no_error(self, call: Any, conversation: _Conversation | None, expected: str) -> None:
        if call.error is not None:
            raise self._fail(conversation, expected)

    def _token_row(self, call: Any, token: Any) -> _Row | None:
        if not isinstance(token, Claim):
            self._want_argument_error(call, "the token is not a Claim")
            return None
        return self._rows.get(token.submission_id)

    def _settled_conflict(self, call: Any, row: _Row | None) -> bool:
        """L15: any write on a settled row (suspend, mark_unknown, an abort,
        a decision, a resolution) is ``SettlementConflict`` naming its
        outcome, whatever else is asked."""
        if row is None or row.settled_at_ms is None:
            return False
        self._want_error(call, "SettlementConflict", {"submission_id": row.submission_id, "existing_digest": None,
                                                      "existing_outcome": row.outcome},
                         self._conversations[row.conversation_id])
        return True

    def _fenced(self, call: Any, row: _Row | None, token: Claim, now_ms: int | None = None) -> bool:
        """True if ``token`` still owns ``row``; else checks the store refused
        with the error the contract names and returns False."""
        if row is None:
            self._want_error(call, "UnknownSubmission", {"submission_id": token.submission_id}, None)
            return False
        conversation = self._conversations[row.conversation_id]
        # L5: a token is a (submission, owner, epoch) triple, valid while the
        # row still carries that owner and epoch. L3: no call takes the clock
        # (``now_ms`` is unused here), since until a rival actually claims (a
        # higher epoch) the lapsed owner's writes are the only ones possible.
        if row.epoch != token.epoch or row.owner_id != token.owner_id or (
                now_ms is not None and not row.lease_live(now_ms)):
            self._want_error(call, "OwnershipLost",
                             {"submission_id": row.submission_id, "actual_epoch": row.epoch}, conversation)
            return False
        return True

    # -- writes ----------------------------------------------------------------

    def _admit(self, call: Any, a: dict) -> _Conversation | None:
        cid, pid, key, now_ms = a["conversation_id"], a["principal_id"], a["idempotency_key"], a["now_ms"]
        parent, group, fence = a["parent"], a["admission_group"], a["admission_fence"]
        if not (type(cid) is str and type(pid) is str and type(key) is str and _is_int(now_ms)):
            self._want_argument_error(call, "ids must be str, now_ms an int")
            return None
        if parent is not None and not (type(parent) is ParentLink and type(parent.submission_id) is str
                                       and type(parent.tool_call_id) is str):
            self._want_argument_error(call, "parent must be None or a ParentLink of two str")
            return None
        if group is not None and type(group) is not str:
            self._want_argument_error(call, "admission_group must be None or a str")
            return None
        if fence is not None and not (type(fence) is AdmissionFence and type(fence.policy_id) is str
                                      and type(fence.key) is str and _is_int(fence.revision)
                                      and fence.revision >= 1):
            self._want_argument_error(call, "admission_fence must be None or an AdmissionFence (str, str, int >= 1)")
            return None
        try:
            metadata_text = None if a["metadata"] is None else canonical(a["metadata"])
        except ValueError as exc:
            self._want_argument_error(call, f"the metadata is not JSON: {exc}")
            return None
        try:
            text = canonical(a["input"])
        except ValueError as exc:
            self._want_argument_error(call, f"the input is not JSON: {exc}")
            return None
        input_digest = digest_text(text)
        existing = self._by_key.get((cid, pid, key))
        conversation = self._conversations.get(cid)
        if existing is not None:
            # L16: the replay is resolved before any admission policy, and the group and the metadata are
            # part of the identity, after the input and the parent.
            if existing.input_digest != input_digest:
                what = "input"
            elif existing.parent != parent:  # L11
                what = "parent"
            elif existing.group != group:
                what = "admission_group"
            elif existing.metadata_text != metadata_text:
                what = "metadata"
            else:
                what = None
            if what == "input":
                self._want_error(call, "AdmissionConflict", {
                    "conversation_id": cid, "principal_id": pid, "idempotency_key": key,
                    "existing_digest": existing.input_digest, "attempted_digest": input_digest, "what": "input"},
                    conversation)
            elif what is not None:
                self._want_error(call, "AdmissionConflict", {
                    "conversation_id": cid, "principal_id": pid, "idempotency_key": key,
                    "existing_digest": input_digest, "attempted_digest": input_digest, "what": what},
                    conversation)
            else:  # an exact retry replays the original admission
                self._want_value(call, AdmissionResult(
                    existing.submission_id, existing.receipt, existing.queue_seq, True, input_digest,
                    existing.parent, existing.group,
                    None if existing.metadata_text is None else read_back(existing.metadata_text)), conversation)
            return conversation
        # L16: a fresh admission's policies, the fence first, then the group.
        refusal = None
        if fence is not None:
            standing = self._fences.get((fence.policy_id, fence.key))
            if standing is None:
                refusal = ("unavailable", "no-fence")
            elif fence.revision < standing:
                refusal = ("refused", "stale-revision")
            elif fence.revision > standing:
                refusal = ("refused", "unknown-revision")
        if refusal is None and group is not None:
            held = [row for row in self._groups.get(group, ()) if row.settled_at_ms is None]
            self._groups[group] = held
            if any(row.conversation_id in self._forgotten for row in held):
                # A diverged conversation's row: whether it still holds the group is no longer known.
                if call.error is not None and error_name(call.error) == "AdmissionPolicyError":
                    return conversation
            elif held:
                refusal = ("occupied", "group-occupied")
        # L16: the lane kind its first admission fixed.
        metadata = None if metadata_text is None else read_back(metadata_text)
        wants = (canonical(metadata.get("origin")),) if (
            isinstance(metadata, dict) and metadata.get("kind") == "WorkerAdmission") else (None,)
        if refusal is None and conversation is not None and conversation.lane is not None \
                and conversation.lane != wants:
            refusal = ("refused", "ordinary-lane" if conversation.lane == (None,) else
                       "worker-lane" if wants == (None,) else "worker-origin")
        if refusal is None and wants != (None,):
            # L19: a worker admission's origin carries an integer expiry, and
            # its messageId is its idempotency key.
            origin = metadata.get("origin")
            if not (isinstance(origin, dict) and _is_int(origin.get("expiresAtMillis"))):
                refusal = ("refused", "worker-origin")
            elif metadata.get("messageId") != key:
                refusal = ("refused", "worker-message-id")
        if refusal is not None:
            self._want_error(call, "AdmissionPolicyError", {"reason": refusal[0], "code": refusal[1]}, conversation)
            return conversation
        # A fresh admission: the store mints the id, the receipt and the seq.
        fresh = "a fresh admission (replayed=False) with a new submission id, a new receipt, the input's digest " \
                f"{input_digest} and a queue_seq above {0 if conversation is None else conversation.last_queue_seq}"
        self._no_error(call, conversation, fresh)
        result = call.result
        if not isinstance(result, AdmissionResult):
            raise self._fail(conversation, fresh)
        sid, receipt, seq = result.submission_id, result.receipt, result.queue_seq
        problems = []
        if result.replayed is not False:
            problems.append("replayed must be False")
        if result.parent != parent or type(result.parent) is not type(parent):
            problems.append(f"parent must be {parent!r}")
        if result.admission_group != group:
            problems.append(f"admission_group must be {group!r}")
        if (None if result.metadata is None else canonical(result.metadata)) != metadata_text:
            problems.append(f"metadata must be {metadata_text}")
        if result.input_digest != input_digest:
            problems.append(f"input_digest must be {input_digest}")
        if type(sid) is not str or not sid or sid in self._rows:
            problems.append(f"submission id {sid!r} must be new (ids held: unique)")
        if type(receipt) is not str or not receipt or receipt in self._receipts:
            problems.append(f"receipt {receipt!r} must be new")
        last = 0 if conversation is None else conversation.last_queue_seq
        if not _is_int(seq) or seq <= last or (last == 0 and seq != 1):
            problems.append(f"queue_seq {seq!r} must be {'1 (the first)' if last == 0 else f'above {last}'}")
        if problems:
            raise self._fail(conversation, fresh + " (" + "; ".join(problems) + ")")
        if conversation is None:
            conversation = self._conversations[cid] = _Conversation()
        if conversation.lane is None:
            conversation.lane = wants
        # The store's digest string, now known equal to ours: one copy of it in memory.
        row = _Row(sid, cid, pid, key, seq, text, result.input_digest, receipt, now_ms)
        row.parent = parent
        row.group = group
        row.metadata_text = metadata_text
        if group is not None:
            self._groups.setdefault(group, []).append(row)
        conversation.last_queue_seq = seq
        conversation.rows[sid] = row
        conversation.open[sid] = row
        self._open[cid] = conversation
        self._rows[sid] = row
        self._by_key[(cid, pid, key)] = row
        self._receipts[receipt] = sid
        return conversation

    def _set_admission_fence(self, call: Any, a: dict) -> None:
        policy, key, revision = a["policy_id"], a["key"], a["revision"]
        if not (type(policy) is str and type(key) is str and _is_int(revision) and revision >= 1):
            self._want_argument_error(call, "policy_id and key must be str, revision an int >= 1")
            return None
        standing = self._fences.get((policy, key))
        if standing is not None and revision < standing:  # L16: a fence only moves forward
            self._want_error(call, "AdmissionPolicyError", {"reason": "refused", "code": "revision-regressed"}, None)
            return None
        self._want_value(call, AdmissionFenceState(policy, key, revision, standing == revision), None)
        self._fences[(policy, key)] = revision
        return None

    def _mark_ready(self, call: Any, a: dict) -> _Conversation | None:
        sid, now_ms = a["submission_id"], a["now_ms"]
        if type(sid) is not str or not _is_int(now_ms):
            self._want_argument_error(call, "submission_id must be a str, now_ms an int")
            return None
        row = self._rows.get(sid)
        if row is None:
            self._want_error(call, "UnknownSubmission", {"submission_id": sid}, None)
            return None
        conversation = self._conversations[row.conversation_id]
        if row.ready:  # idempotent: the first time it became ready
            self._want_value(call, Readiness(sid, row.ready_at_ms, True), conversation)
            return conversation
        self._want_value(call, Readiness(sid, now_ms, False), conversation)
        row.ready, row.ready_at_ms = True, now_ms
        row.changed()
        return conversation

    def _claim(self, call: Any, a: dict) -> _Conversation | None:
        cid, owner, lease_ms, now_ms = a["conversation_id"], a["owner_id"], a["lease_ms"], a["now_ms"]
        if not (type(cid) is str and type(owner) is str and _is_int(lease_ms) and _is_int(now_ms) and lease_ms > 0):
            self._want_argument_error(call, "ids must be str, lease_ms a positive int, now_ms an int")
            return None
        conversation = self._conversations.get(cid)
        if a["handoff"] is not None:
            return self._claim_handoff(call, conversation, a["handoff"], owner, lease_ms, now_ms)
        head = None
        if conversation is not None and conversation.open:
            head = next(iter(conversation.open.values()))  # FIFO: only the lowest unsettled seq
        claimable = head is not None and (
            # An unready head (its receipt never out) is never claimed: its
            # abort intent settles it. A head with an open unknown tool call
            # is claimable only once its durable abort intent exists
            # (persistence §3), for aborted settlement.
            head.ready and ((head.open_unknown() == 0 and head.waiting() == 0)
                            or head.reserved_digest is not None or head.abort_author is not None)
            # L1 and L2: another owner's live lease blocks the claim; the same
            # owner may claim again, fencing its own previous token.
            and (head.owner_id is None or head.owner_id == owner or not head.lease_live(now_ms)))
        if not claimable:
            why = "no submission" if head is None else (
                f"head {head.submission_id} is not ready" if not head.ready else
                f"head {head.submission_id} is unknown or suspended, without an abort intent"
                if (head.open_unknown() or head.waiting()) and head.reserved_digest is None
                and head.abort_author is None
                else f"head {head.submission_id} is leased to {head.owner_id} until {head.lease_expires_ms} ms")
            if call.error is not None or call.result is not None:
                raise self._fail(conversation, f"None ({why})")
            return conversation
        assert conversation is not None and head is not None
        wanted = (f"a claim of the FIFO head {head.submission_id} for {owner} at an epoch above "
                  f"{conversation.epoch}, lease until {now_ms + lease_ms} ms")
        self._no_error(call, conversation, wanted)
        claim = call.result
        if not (isinstance(claim, Claim) and claim.submission_id == head.submission_id
                and claim.owner_id == owner and _is_int(claim.epoch) and claim.epoch > conversation.epoch
                and claim.lease_expires_ms == now_ms + lease_ms
                and claim.attempt_id == f"{head.submission_id}#a{claim.epoch}"):  # L10
            raise self._fail(conversation, wanted + f", attempt id {head.submission_id}#a<epoch>")
        conversation.epoch = claim.epoch  # adopted: monotonic, its step is the store's
        head.owner_id, head.epoch, head.lease_expires_ms = owner, claim.epoch, now_ms + lease_ms
        head.attempt_id = claim.attempt_id
        head.changed()
        return conversation

    def _claim_handoff(self, call: Any, conversation: _Conversation | None, handoff: Any, owner: str,
                       lease_ms: int, now_ms: int) -> _Conversation | None:
        """The peer's cooperativeHandoff: the lane goes to the named
        submission only if the producer that claimed at the handoff's epoch
        deferred exactly the open rows ahead of it (each applied, released,
        not aborted, suspended, unknown, reserved or hosting) and no claim
        came since; else nothing is granted."""
        if not (isinstance(handoff, ClaimHandoff) and _is_int(handoff.producer_epoch)
                and type(handoff.deferred_submission_ids) is tuple
                and all(type(d) is str for d in handoff.deferred_submission_ids)
                and type(handoff.submission_id) is str):
            self._want_argument_error(call, "handoff must be a ClaimHandoff(int, tuple of str, str)")
            return None
        why = None
        rows = list(conversation.open.values()) if conversation is not None else []
        position = next((i for i, r in enumerate(rows) if r.submission_id == handoff.submission_id), None)
        if conversation is None or conversation.epoch != handoff.producer_epoch:
            why = "another claim came after the producer's epoch"
        elif position is None:
            why = f"{handoff.submission_id} is no open submission of this conversation"
        elif not handoff.deferred_submission_ids or tuple(
                r.submission_id for r in rows[:position]) != handoff.deferred_submission_ids:
            why = "the deferred ids are not exactly the open rows ahead of it (a gap or another ready row)"
        else:
            deferred, wanted_row = rows[:position], rows[position]
            for r in deferred:
                hosting = any(f in conversation.open and conversation.open[f].join_host == r.submission_id
                              for f in r.followers)
                if not (r.ready and r.input_applied and r.owner_id is None and r.abort_author is None
                        and r.open_unknown() == 0 and r.waiting() == 0 and r.reserved_digest is None
                        and r.join_host is None and not hosting):
                    why = f"{r.submission_id} was not deferred (applied, released, not aborted or waiting)"
                    break
            if why is None and deferred[-1].epoch != handoff.producer_epoch:
                why = f"the last deferred one was not claimed at epoch {handoff.producer_epoch}"
            if why is None and not (wanted_row.ready and wanted_row.epoch is None and wanted_row.owner_id is None
                                    and wanted_row.abort_author is None and wanted_row.join_host is None):
                why = f"{wanted_row.submission_id} is not ready and unclaimed"
        if why is not None:
            if call.error is not None or call.result is not None:
                raise self._fail(conversation, f"None ({why})")
            return conversation
        assert conversation is not None and position is not None
        row = rows[position]
        wanted = (f"a handoff claim of {row.submission_id} for {owner} at an epoch above {conversation.epoch}, "
                  f"lease until {now_ms + lease_ms} ms, attempt id {row.submission_id}#a<epoch>")
        self._no_error(call, conversation, wanted)
        claim = call.result
        if not (isinstance(claim, Claim) and claim.submission_id == row.submission_id and claim.owner_id == owner
                and _is_int(claim.epoch) and claim.epoch > conversation.epoch
                and claim.lease_expires_ms == now_ms + lease_ms
                and claim.attempt_id == f"{row.submission_id}#a{claim.epoch}"):
            raise self._fail(conversation, wanted)
        conversation.epoch = claim.epoch
        row.owner_id, row.epoch, row.lease_expires_ms = owner, claim.epoch, now_ms + lease_ms
        row.attempt_id = claim.attempt_id
        row.changed()
        return conversation

    def _renew_ownership(self, call: Any, a: dict) -> _Conversation | None:
        token, lease_ms, now_ms = a["token"], a["lease_ms"], a["now_ms"]
        if not (_is_int(lease_ms) and _is_int(now_ms) and lease_ms > 0):
            self._want_argument_error(call, "lease_ms must be a positive int, now_ms an int")
            return None
        row = self._token_row(call, token)
        if not isinstance(token, Claim) or not self._fenced(call, row, token):
            return None if row is None else self._conversations[row.conversation_id]
        conversation = self._conversations[row.conversation_id]
        lease_expires_ms = max(row.lease_expires_ms, now_ms + lease_ms)  # a renewal never shortens the lease
        self._want_value(call, OwnershipRenewal(row.submission_id, row.owner_id, row.epoch, lease_expires_ms),
                         conversation)
        row.lease_expires_ms = lease_expires_ms
        row.changed()
        return conversation

    def _release_ownership(self, call: Any, a: dict) -> _Conversation | None:
        token = a["token"]
        row = self._token_row(call, token)
        if not isinstance(token, Claim):
            return None
        if row is not None and row.owner_id is None and row.epoch == token.epoch:
            # Released already by this very token: an idempotent no-op.
            conversation = self._conversations[row.conversation_id]
            self._want_value(call, None, conversation)
            return conversation
        if not self._fenced(call, row, token):
            return None if row is None else self._conversations[row.conversation_id]
        conversation = self._conversations[row.conversation_id]
        self._want_value(call, None, conversation)
        row.owner_id = None
        row.lease_expires_ms = None  # the epoch stays: a later claim must still exceed it
        row.changed()
        return conversation

    def _mark_input_applied(self, call: Any, a: dict) -> _Conversation | None:
        token, record_id, seq = a["token"], a["record_id"], a["seq"]
        if not isinstance(token, Claim) or type(record_id) is not str or not _is_int(seq) or seq < 1:
            self._want_argument_error(call, "a Claim, a str record id, a seq >= 1")
            return None
        row = self._rows.get(token.submission_id)
        if not self._fenced(call, row, token):
            return None if row is None else self._conversations[row.conversation_id]
        conversation = self._conversations[row.conversation_id]
        if row.input_applied:
            if row.input_at != (record_id, seq):
                where = (None, None) if row.input_at is None else row.input_at
                self._want_error(call, "InputMarkerConflict", {
                    "submission_id": row.submission_id, "existing_record_id": where[0], "existing_seq": where[1],
                    "attempted_record_id": record_id, "attempted_seq": seq}, conversation)
            else:
                self._want_value(call, InputApplied(row.submission_id, record_id, seq, True), conversation)
            return conversation
        self._want_value(call, InputApplied(row.submission_id, record_id, seq, False), conversation)
        row.input_applied = True
        row.input_at = (record_id, seq)
        row.changed()
        return conversation

    def _request_abort(self, call: Any, a: dict) -> _Conversation | None:
        sid, author, reason, now_ms = a["submission_id"], a["author"], a["reason"], a["now_ms"]
        if not (type(sid) is str and type(author) is str and type(reason) is str and _is_int(now_ms)):
            self._want_argument_error(call, "submission_id, author and reason must be str, now_ms an int")
            return None
        row = self._rows.get(sid)
        if row is None:
            self._want_error(call, "UnknownSubmission", {"submission_id": sid}, None)
            return None
        conversation = self._conversations[row.conversation_id]
        # L15, but a submission its own intent settled before any claim (L8)
        # replays that intent.
        never_ran = row.epoch is None and row.abort_author is not None and not row.ready
        if not never_ran and self._settled_conflict(call, row):
            return conversation
        if row.abort_author is None and row.join_host is not None and row.settled_at_ms is None:
            # A follower settles only through its host.
            self._want_error(call, "JoinedToHost", {"submission_id": sid, "host_submission_id": row.join_host},
                             conversation)
            return conversation
        if row.abort_author is not None:  # L7: the first intent
            self._want_value(call, AbortIntent(sid, row.abort_author, row.abort_reason, row.abort_at_ms, True,
                                               row.settled_at_ms if never_ran else None), conversation)
        elif row.reserved_digest is not None:
            self._want_error(call, "AbortConflict", {"submission_id": sid, "settling": True,
                                                     "outcome": _outcome_of(read_back(row.reserved_text))},
                             conversation)  # L8
        elif row.epoch is None and not row.ready:  # L8: never ready, settled by the intent alone
            self._want_value(call, AbortIntent(sid, author, reason, now_ms, False, now_ms), conversation)
            row.abort_author, row.abort_reason, row.abort_at_ms = author, reason, now_ms
            row.reserved_digest = digest_text(canonical(_settled_envelope(sid, {"outcome": "aborted"}, now_ms,
                                                                          "loomsim", None, row.receipt)))
            row.outcome, row.settled_at_ms = "aborted", now_ms
            row.settlement_id = _settlement_id(sid, row.reserved_digest)
            row.input_text = row.reserved_text = None
            row.changed()
            del conversation.open[sid]
            if not conversation.open:
                del self._open[row.conversation_id]
        else:
            self._want_value(call, AbortIntent(sid, author, reason, now_ms), conversation)
            row.abort_author, row.abort_reason, row.abort_at_ms = author, reason, now_ms
            row.changed()
        return conversation

    def _reserve_settlement(self, call: Any, a: dict) -> _Conversation | None:
        token, record = a["token"], a["record"]
        if not isinstance(token, Claim):
            self._want_argument_error(call, "the token is not a Claim")
            return None
        row = self._rows.get(token.submission_id)
        conversation = None if row is None else self._conversations[row.conversation_id]
        # L5: a malformed record is refused before anything else is looked at.
        problem = _settlement_problem(token.submission_id, record)
        text = None
        if problem is None:
            try:
                text = canonical(record)
            except ValueError as exc:
                problem = f"not canonical JSON: {exc}"
        if problem is not None:
            self._want_error(call, "InvalidSettlement", {"submission_id": token.submission_id}, conversation)
            return conversation
        # L17: QueuedAbort. An aborted record of a row with an abort intent
        # that no claim ever granted (nor a host took) needs no ownership.
        queued_abort = (row is not None and row.epoch is None and row.abort_author is not None
                        and row.join_host is None and _outcome_of(record) == "aborted")
        if not queued_abort and not self._fenced(call, row, token):
            return conversation
        record_digest = digest_text(text)
        if row.reserved_digest is None and row.abort_author is not None and _outcome_of(record) != "aborted":
            self._want_error(call, "AbortRequested", {"submission_id": row.submission_id,
                             "author": row.abort_author, "attempted_outcome": _outcome_of(record)}, conversation)
            return conversation  # L9
        if row.reserved_digest is not None and row.reserved_digest != record_digest:
            reserved_outcome = row.outcome if row.outcome is not None else _outcome_of(read_back(row.reserved_text))
            self._want_error(call, "SettlementConflict", {"submission_id": row.submission_id,
                             "existing_digest": row.reserved_digest, "attempted_digest": record_digest,
                             "existing_outcome": reserved_outcome}, conversation)
            return conversation
        self._want_value(call, ReservedSettlement(row.submission_id, record_digest, row.reserved_digest is not None,
                                                  _settlement_id(row.submission_id, record_digest),
                                                  _outcome_of(read_back(text))), conversation)
        if row.reserved_digest is None:
            row.reserved_text, row.reserved_digest = text, call.result.record_digest  # equal: the store's copy
            row.changed()
        return conversation

    def _finalize_settlement(self, call: Any, a: dict) -> _Conversation | None:
        sid, now_ms = a["submission_id"], a["now_ms"]
        if not (type(sid) is str and _is_int(now_ms)):
            self._want_argument_error(call, "submission_id must be a str, now_ms an int")
            return None
        row = self._rows.get(sid)
        if row is None:
            self._want_error(call, "UnknownSubmission", {"submission_id": sid}, None)
            return None
        conversation = self._conversations[row.conversation_id]
        if row.join_host is not None and row.settled_at_ms is None:
            self._want_error(call, "JoinedToHost", {"submission_id": sid, "host_submission_id": row.join_host},
                             conversation)
            return conversation
        if row.reserved_digest is None:
            self._want_error(call, "SettlementConflict",
                             {"submission_id": sid, "existing_digest": None, "attempted_digest": None}, conversation)
            return conversation
        if row.settled_at_ms is not None:  # idempotent: the first finalize's answer, again
            self._want_value(call, Settlement(sid, row.outcome, row.reserved_digest, row.settled_at_ms,
                                              row.diagnostic, row.settlement_id, True, row.receipt), conversation)
            return conversation
        envelope = read_back(row.reserved_text)
        record = _outcome_record(envelope)
        outcome = OUTCOMES[OUTCOMES.index(record["outcome"])]  # the constant: one string for every row
        # §10: the failed diagnostic is projected from the exact reserved
        # record, so a replayed finalize returns the same value.
        diagnostic = record["diagnostic"] if outcome == "failed" else None
        settlement_id = _settlement_id(sid, row.reserved_digest)
        self._want_value(call, Settlement(sid, outcome, row.reserved_digest, now_ms, diagnostic, settlement_id,
                                          receipt=row.receipt), conversation)
        row.outcome, row.settled_at_ms, row.diagnostic = outcome, now_ms, diagnostic  # L4: ownership stays
        row.settlement_id = settlement_id
        row.input_text = row.reserved_text = None
        row.changed()
        del conversation.open[sid]
        # Its joined followers settle with it (its outcome, no independent
        # result); its joining ones go back to ready.
        follower_record = {"outcome": outcome} if diagnostic is None else {"outcome": outcome, "diagnostic": diagnostic}
        for follower_id in row.followers:
            follower = self._rows[follower_id]
            if follower.joined_at is None:
                follower.join_host = None
            else:
                follower.reserved_digest = digest_text(canonical(_settled_envelope(
                    follower_id, follower_record, envelope["createdAt"], envelope["deploymentId"],
                    envelope["payload"].get("runId"), follower.receipt)))  # L16
                follower.outcome, follower.settled_at_ms, follower.diagnostic = outcome, now_ms, diagnostic
                follower.settlement_id = _settlement_id(follower_id, follower.reserved_digest)
                follower.input_applied = True
                follower.input_at = follower.joined_at  # L13
                follower.input_text = None
                del conversation.open[follower_id]
            follower.changed()
        row.followers = []
        row.changed()
        if not conversation.open:
            del self._open[row.conversation_id]
        return conversation

    @staticmethod
    def _state(row: _Row) -> str:
        """The lifecycle state a row is in, read plainly from its facts."""
        if row.settled_at_ms is not None:
            return "settled"
        if row.join_host is not None:
            return "joining" if row.joined_at is None else "joined"
        if row.reserved_digest is not None:
            return "terminalizing"
        if row.open_unknown():
            return "unknown"
        if row.waiting():
            return "suspended"
        if row.input_applied:
            return "input-applied"
        if row.epoch is not None:
            return "running"
        return "ready" if row.ready else "admitted"

    def _purge_conversation(self, call: Any, a: dict) -> _Conversation | None:
        cid = a["conversation_id"]
        if type(cid) is not str:
            self._want_argument_error(call, "conversation_id must be a str")
            return None
        conversation = self._conversations.get(cid)
        if conversation is None:
            self._want_value(call, 0, None)  # idempotent: nothing (left) to purge
            return None
        if conversation.open:
            # Only settled history is ever deleted (retention).
            self._want_error(call, "PurgeRefused",
                             {"conversation_id": cid, "open_submissions": len(conversation.open)}, conversation)
            conversation.history.append(_brief(call))
            return conversation
        self._want_value(call, len(conversation.rows), conversation)
        # L6: the conversation is forgotten entirely, counters and all.
        for sid, row in conversation.rows.items():
            del self._rows[sid]
            del self._by_key[(row.conversation_id, row.principal_id, row.idempotency_key)]
            del self._receipts[row.receipt]
        del self._conversations[cid]
        return None

    # -- reads -------------------------------------------------------------------

    def _get(self, call: Any, a: dict) -> _Conversation | None:
        sid = a["submission_id"]
        if type(sid) is not str:
            self._want_argument_error(call, "submission_id must be a str")
            return None
        row = self._rows.get(sid)
        conversation = None if row is None else self._conversations[row.conversation_id]
        self._want_record(call, row, conversation)
        return conversation

    def _get_by_idempotency_key(self, call: Any, a: dict) -> _Conversation | None:
        cid, pid, key = a["conversation_id"], a["principal_id"], a["idempotency_key"]
        if not (type(cid) is str and type(pid) is str and type(key) is str):
            self._want_argument_error(call, "ids must be str")
            return None
        row = self._by_key.get((cid, pid, key))
        conversation = self._conversations.get(cid)
        self._want_record(call, row, conversation)
        return conversation

    def _load_recovery_snapshot(self, call: Any, a: dict) -> _Conversation | None:
        cid = a["conversation_id"]
        if type(cid) is not str:
            self._want_argument_error(call, "conversation_id must be a str")
            return None
        conversation = self._conversations.get(cid)
        if conversation is None:
            expected = RecoverySnapshot(cid, 0, ())
        else:
            expected = RecoverySnapshot(cid, conversation.epoch, tuple(
                attrs.evolve(r.ownership(), state=self._state(r), child_states=self._child_states(r))
                for r in conversation.open.values()))
        self._want_value(call, expected, conversation)
        return conversation

    def _child_states(self, row: _Row) -> tuple:
        """Each attached child: (call, child, its state, its outcome), by call;
        a child the ledger no longer holds (purged) has neither."""
        found = []
        for call, (_alloc, child, _acct, _at, _awaited) in sorted(row.children.items()):
            if child is None:
                continue
            held = self._rows.get(child)
            found.append((call, child, None if held is None else self._state(held),
                          None if held is None else held.outcome))
        return tuple(found)

    def _scan_nonterminal(self, call: Any, a: dict) -> None:
        # Ordered by (conversation_id, queue_seq): code-point order of the ids,
        # which is also the byte order of their UTF-8 (SQLite's BINARY).
        forgotten = self._forgotten
        principal = a.get("principal_id")
        if principal is not None and type(principal) is not str:
            self._want_argument_error(call, "principal_id is not a str")
            return None
        expected = tuple(row.scan_row() for cid in sorted(self._open) if cid not in forgotten
                         for row in self._open[cid].open.values()
                         if principal is None or row.principal_id == principal)
        if forgotten and call.error is None and isinstance(call.result, tuple):
            # A diverged conversation's rows are no longer known: leave them out.
            call = attrs.evolve(call, result=tuple(
                r for r in call.result if getattr(r, "conversation_id", None) not in forgotten))
        self._want_value(call, expected, None)
        return None

    def _capabilities(self, call: Any, a: dict) -> None:
        caps = call.result
        if call.error is not None or not isinstance(caps, dict) or not isinstance(caps.get("durable"), bool) or (
                caps.get("atomic_admission"), caps.get("fencing")) != (True, "epoch") or caps.get(
                "durability") != ("durable-node" if caps["durable"] else "non-durable") or not isinstance(
                caps.get("encryption_at_rest"), bool):
            raise self._fail(None, "a dict declaring durable (a bool), its durability ('durable-node' or "
                                   "'non-durable'), atomic_admission=True, fencing='epoch' and "
                                   "encryption_at_rest (a bool)")
        return None


def _settlement_problem(sid: str, envelope: object) -> str | None:
    """Why ``envelope`` is not ``sid``'s settlement record envelope (L16)
    with a SubmissionSettled shape (persistence §10), or None."""
    if not isinstance(envelope, dict) or sorted(envelope) != list(_ENVELOPE_MEMBERS):
        return "not a record envelope"
    if (envelope["recordId"] != "settlement:" + sid or envelope["family"] != _SETTLED
            or envelope["schemaVersion"] != 1 or not _is_int(envelope["createdAt"])
            or type(envelope["deploymentId"]) is not str):
        return "not this submission's settlement envelope"
    payload = envelope["payload"]
    if not isinstance(payload, dict) or payload.get("submissionId") != sid:
        return "payload is not a JSON object naming this submission"
    if payload.get("settlementId") != "settlement:" + sid:
        return "settlementId is not settlement:{submission}"
    receipt = payload.get("receiptId")
    if type(receipt) is not str or receipt == "":
        return "receiptId is not a non-empty string"
    if "runId" in payload and type(payload["runId"]) is not str:
        return "runId is not a string"
    record = _outcome_record(envelope)
    outcome = record.get("outcome")
    if outcome not in OUTCOMES:
        return f"outcome {outcome!r}"
    if outcome == "failed":
        diagnostic = record.get("diagnostic")
        # Exactly the bounded {errorTag, message} diagnostic, nothing beside it.
        if not (isinstance(diagnostic, dict) and len(diagnostic) == 2 and "errorTag" in diagnostic
                and "message" in diagnostic
                and type(diagnostic["errorTag"]) is str and type(diagnostic["message"]) is str):
            return "a failed record needs exactly {errorTag, message} strings"
        if "result" in record or "cause" in record or "stack" in record:
            return "a failed record carries no result, cause or stack"
    elif outcome == "aborted" and "result" in record:
        return "an aborted record carries no result"  # not even null
    return None
