"""SQLite Submission Ledger (§9.2).

Owns only the ``ledger_*`` tables (created idempotently), so it can share a
database file and connection with the other stores. Every write is one
``write_transaction`` (``BEGIN IMMEDIATE``): the rows a rule needs are read
inside it, the rule (``rules.py``) decides, and what it returned is written
before COMMIT — so the producer epoch is allocated inside the transaction and
no other connection can slip between a check and its write. A write lock held
past the busy timeout surfaces as ``SqliteWriteContention``, with nothing
written. Methods never await: a call is atomic in the simulator.

Typed errors only (§9.2, §10, §11): every storage failure of a port method
— a write lock held past the busy timeout (``SqliteWriteContention``), any
other ``sqlite3.Error`` — is raised as ``LedgerStoreError`` with the failure
as its ``cause`` (retryable exactly when the cause is), and every row fetched
is validated (``rules.check_row``) before a rule decides: a corrupt row is
``CorruptSubmission``, a row of another schema version
``UnsupportedLedgerVersion``, with nothing written.
"""
from __future__ import annotations

import operator
import sqlite3
from contextlib import contextmanager
from typing import Iterator

from model.sqlite_db import create_schema as _create_schema, open_database, require_autocommit, write_transaction

from .records import (
    AbortIntent,
    AdmissionFence,
    AdmissionFenceState,
    AdmissionResult,
    Claim,
    ClaimHandoff,
    LedgerError,
    LedgerStoreError,
    OwnershipRenewal,
    RecoverySnapshot,
    ReservedSettlement,
    Settlement,
    SubmissionRecord,
    NonterminalSubmission,
    ApprovalDecision,
    ChildReservation,
    JoinBatch,
    JoinMarked,
    Suspension,
    UnknownMarked,
    UnknownResolution,
    InputApplied,
    ParentLink,
    Readiness,
)
from .rules import (
    SUBMISSION_FIELDS,
    ConversationRow,
    SubmissionRow,
    capabilities,
    check_row,
    decide_abort,
    decide_admit,
    decide_set_admission_fence,
    decide_claim,
    decide_claim_handoff,
    decide_finalize,
    decide_input_applied,
    decide_approval,
    decide_attach_child,
    decide_release_child,
    decide_reserve_child,
    encode_json_arg,
    decide_begin_join,
    decide_mark_joined,
    decide_revert_join,
    decide_mark_ready,
    decide_mark_unknown,
    decide_purge,
    decide_release,
    decide_renew,
    decide_reserve,
    decide_resolve,
    decide_suspend,
    encode_input,
    encode_settlement,
    recovery_snapshot,
    attached_children,
    require_str,
    require_token,
    row_to_record,
    scan_records,
    validate_abort,
    validate_admit,
    validate_set_admission_fence,
    validate_claim,
    validate_claim_handoff,
    validate_attach_child,
    validate_begin_join,
    validate_release_child,
    validate_reserve_child,
    validate_decide,
    validate_mark_joined,
    validate_revert_join,
    validate_finalize,
    validate_mark_unknown,
    validate_renew,
    validate_resolve,
    validate_suspend,
    validate_input_applied,
    validate_mark_ready,
)

_SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS ledger_conversations (
        conversation_id TEXT PRIMARY KEY NOT NULL,
        last_queue_seq INTEGER NOT NULL CHECK (last_queue_seq >= 0),
        epoch INTEGER NOT NULL CHECK (epoch >= 0),
        lane TEXT
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS ledger_submissions (
        submission_id TEXT PRIMARY KEY NOT NULL,
        conversation_id TEXT NOT NULL,
        principal_id TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        queue_seq INTEGER NOT NULL CHECK (queue_seq >= 1),
        input_json TEXT NOT NULL,
        input_digest TEXT NOT NULL,
        receipt TEXT NOT NULL,
        admitted_at_ms INTEGER NOT NULL,
        ready INTEGER NOT NULL,
        owner_id TEXT,
        epoch INTEGER,
        lease_expires_ms INTEGER,
        input_applied INTEGER NOT NULL,
        abort_author TEXT,
        abort_reason TEXT,
        abort_requested_at_ms INTEGER,
        reserved_json TEXT,
        reserved_digest TEXT,
        outcome TEXT,
        settled_at_ms INTEGER,
        unknown_json TEXT,
        unknown_open INTEGER NOT NULL CHECK (unknown_open >= 0),
        approvals_json TEXT,
        approvals_pending INTEGER NOT NULL CHECK (approvals_pending >= 0),
        join_host TEXT,
        joined_record_id TEXT,
        joined_seq INTEGER,
        joined_count INTEGER NOT NULL CHECK (joined_count >= 0),
        children_json TEXT,
        children_awaited INTEGER NOT NULL CHECK (children_awaited >= 0),
        parent_submission_id TEXT,
        parent_tool_call_id TEXT,
        ready_at_ms INTEGER,
        attempt_id TEXT,
        input_record_id TEXT,
        input_seq INTEGER,
        settlement_id TEXT,
        admission_group TEXT,
        metadata_json TEXT,
        schema_version INTEGER NOT NULL,
        UNIQUE (conversation_id, principal_id, idempotency_key),
        UNIQUE (conversation_id, queue_seq)
    ) WITHOUT ROWID""",
    # The FIFO head, the recovery snapshot and scan_nonterminal read only
    # unsettled rows; settled ones pile up behind them.
    """CREATE INDEX IF NOT EXISTS ledger_submissions_nonterminal
        ON ledger_submissions (conversation_id, queue_seq)
        WHERE settled_at_ms IS NULL""",
    # An admission group's unsettled submission (at most one), ledger-wide.
    """CREATE INDEX IF NOT EXISTS ledger_submissions_group
        ON ledger_submissions (admission_group)
        WHERE settled_at_ms IS NULL AND admission_group IS NOT NULL""",
    """CREATE TABLE IF NOT EXISTS ledger_admission_fences (
        policy_id TEXT NOT NULL,
        fence_key TEXT NOT NULL,
        revision INTEGER NOT NULL CHECK (revision >= 1),
        PRIMARY KEY (policy_id, fence_key)
    ) WITHOUT ROWID""",
)

_COLUMNS = ", ".join(SUBMISSION_FIELDS)
_SELECT_BY_ID = f"SELECT {_COLUMNS} FROM ledger_submissions WHERE submission_id = ?"
_SELECT_ALL_OF = f"SELECT {_COLUMNS} FROM ledger_submissions WHERE conversation_id = ? ORDER BY queue_seq"
_SELECT_BY_KEY = (
    f"SELECT {_COLUMNS} FROM ledger_submissions "
    "WHERE conversation_id = ? AND principal_id = ? AND idempotency_key = ?"
)
_SELECT_NONTERMINAL_OF = (
    f"SELECT {_COLUMNS} FROM ledger_submissions "
    "WHERE conversation_id = ? AND settled_at_ms IS NULL ORDER BY queue_seq"
)
_SELECT_HEAD = _SELECT_NONTERMINAL_OF + " LIMIT 1"
_SELECT_NONTERMINAL = (
    f"SELECT {_COLUMNS} FROM ledger_submissions WHERE settled_at_ms IS NULL "
    "ORDER BY conversation_id, queue_seq"
)
_SELECT_NONTERMINAL_OF_PRINCIPAL = (
    f"SELECT {_COLUMNS} FROM ledger_submissions WHERE settled_at_ms IS NULL AND principal_id = ? "
    "ORDER BY conversation_id, queue_seq"
)
_SELECT_GROUP_OPEN = (
    f"SELECT {_COLUMNS} FROM ledger_submissions WHERE admission_group = ? AND settled_at_ms IS NULL "
    "ORDER BY submission_id"
)
_SELECT_FENCE = "SELECT revision FROM ledger_admission_fences WHERE policy_id = ? AND fence_key = ?"
_UPSERT_FENCE = (
    "INSERT INTO ledger_admission_fences (policy_id, fence_key, revision) VALUES (?, ?, ?) "
    "ON CONFLICT (policy_id, fence_key) DO UPDATE SET revision = excluded.revision"
)
_SELECT_CONVERSATION = (
    "SELECT conversation_id, last_queue_seq, epoch, lane FROM ledger_conversations WHERE conversation_id = ?"
)
_UPSERT_CONVERSATION = (
    "INSERT INTO ledger_conversations (conversation_id, last_queue_seq, epoch, lane) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (conversation_id) DO UPDATE SET "
    "last_queue_seq = excluded.last_queue_seq, epoch = excluded.epoch, lane = excluded.lane"
)
_INSERT_SUBMISSION = (
    f"INSERT INTO ledger_submissions ({_COLUMNS}) VALUES ({', '.join('?' for _ in SUBMISSION_FIELDS)})"
)
# Rules return whole rows; the write replaces every mutable column.
_UPDATE_SUBMISSION = (
    "UPDATE ledger_submissions SET "
    + ", ".join(f"{name} = ?" for name in SUBMISSION_FIELDS[1:])
    + " WHERE submission_id = ?"
)

_BOOL_FIELDS = frozenset(("ready", "input_applied"))
_BOOL_INDEXES = tuple(i for i, name in enumerate(SUBMISSION_FIELDS) if name in _BOOL_FIELDS)


def _row(values: tuple | None) -> SubmissionRow | None:
    """A stored row as read (``rules.read_row`` validates it): a flag column
    holding anything but 0/1 stays as it is, so it reads back corrupt."""
    if values is None:
        return None
    values = list(values)
    for i in _BOOL_INDEXES:
        if type(values[i]) is int and values[i] in (0, 1):
            values[i] = bool(values[i])
    return SubmissionRow(*values)


def _checked(values: tuple | None) -> SubmissionRow | None:
    """A fetched row a rule will decide on: validated first (typed errors)."""
    return check_row(_row(values))


_UPDATE_CHANGED: dict[tuple[int, ...], str] = {}


def _update_changed(indexes: tuple[int, ...]) -> str:
    """``UPDATE`` of only the columns at ``indexes`` (never the key, 0)."""
    sql = _UPDATE_CHANGED.get(indexes)
    if sql is None:
        sql = _UPDATE_CHANGED[indexes] = (
            "UPDATE ledger_submissions SET "
            + ", ".join(f"{SUBMISSION_FIELDS[i]} = ?" for i in indexes)
            + " WHERE submission_id = ?"
        )
    return sql


@contextmanager
def _storage(operation: str) -> Iterator[None]:
    """Storage failures on the port as ``LedgerStoreError`` (the failure its
    ``cause``); the ledger's own typed errors pass through."""
    try:
        yield
    except LedgerError:
        raise
    except sqlite3.Error as exc:  # SqliteWriteContention is one (an OperationalError)
        raise LedgerStoreError(operation, exc) from exc


class _Writing:
    """``with _storage(operation), write_transaction(conn)``, as one context
    manager class (every ledger write runs it): the rows read in it are
    remembered for ``_update`` only while it is open."""

    __slots__ = ("_store", "_operation", "_transaction")

    def __init__(self, store: "SqliteSubmissionLedger", operation: str) -> None:
        self._store = store
        self._operation = operation
        self._transaction = write_transaction(store._conn)

    def __enter__(self) -> sqlite3.Connection:
        self._store._stored.clear()
        try:
            return self._transaction.__enter__()
        except sqlite3.Error as exc:
            raise LedgerStoreError(self._operation, exc) from exc

    def __exit__(self, exc_type, exc, traceback) -> bool:
        self._store._stored.clear()
        try:
            self._transaction.__exit__(exc_type, exc, traceback)
        except LedgerError:
            raise
        except sqlite3.Error as error:
            raise LedgerStoreError(self._operation, error) from error
        if isinstance(exc, sqlite3.Error) and not isinstance(exc, LedgerError):
            raise LedgerStoreError(self._operation, exc) from exc
        return False


_FIELD_VALUES = operator.attrgetter(*SUBMISSION_FIELDS)


def _params(row: SubmissionRow) -> list:
    values = list(_FIELD_VALUES(row))
    for i in _BOOL_INDEXES:
        values[i] = int(values[i])
    return values


def create_schema(conn: sqlite3.Connection) -> None:
    """Create the tables and indexes if missing (idempotent)."""
    _create_schema(conn, _SCHEMA)


class SqliteSubmissionLedger:
    """``SubmissionLedger`` over a connection from ``open_database``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        require_autocommit(conn, "SqliteSubmissionLedger")
        self._conn = conn
        self._owns_connection = False
        # Stored values of the rows read in the open write transaction, by id.
        self._stored: dict[str, tuple] = {}
        create_schema(conn)

    @classmethod
    def open(cls, path: str, *, busy_timeout_ms: int | None = None) -> "SqliteSubmissionLedger":
        conn = open_database(path) if busy_timeout_ms is None else open_database(path, busy_timeout_ms=busy_timeout_ms)
        store = cls(conn)
        store._owns_connection = True
        return store

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def close(self) -> None:
        if self._owns_connection:
            self._conn.close()

    # --- row access (inside the caller's transaction for writes) ----------------

    def _read(self, values: tuple | None) -> SubmissionRow | None:
        """A row read inside a write transaction, validated; its stored values
        are kept until the transaction ends so ``_update`` writes only the
        columns the rule changed."""
        row = _checked(values)
        if row is not None:
            self._stored[values[0]] = values
        return row

    def _submission(self, submission_id: str) -> SubmissionRow | None:
        return self._read(self._conn.execute(_SELECT_BY_ID, (submission_id,)).fetchone())

    def _writing(self, operation: str) -> "_Writing":
        """One ``write_transaction``, its storage failures typed (as ``_storage``)."""
        return _Writing(self, operation)

    def _conversation(self, conversation_id: str) -> ConversationRow | None:
        values = self._conn.execute(_SELECT_CONVERSATION, (conversation_id,)).fetchone()
        return None if values is None else ConversationRow(*values)

    def _write_conversation(self, row: ConversationRow) -> None:
        self._conn.execute(_UPSERT_CONVERSATION, (row.conversation_id, row.last_queue_seq, row.epoch, row.lane))

    def _update(self, row: SubmissionRow) -> None:
        """Write ``row`` over the stored one. When this transaction read the
        stored row (validated, under the write lock), only the columns whose
        value differs (type and value) are set: the stored row ends up the
        same, and an index whose columns did not change is left untouched."""
        params = _params(row)
        stored = self._stored.get(params[0])
        if stored is None:
            changed = self._conn.execute(_UPDATE_SUBMISSION, params[1:] + params[:1]).rowcount
            assert changed == 1, (row.submission_id, changed)
            return
        indexes = tuple(i for i in range(1, len(params))
                        if not (params[i] is stored[i] or (type(params[i]) is type(stored[i]) and params[i] == stored[i])))
        if indexes:
            values = [params[i] for i in indexes]
            values.append(params[0])
            changed = self._conn.execute(_update_changed(indexes), values).rowcount
            assert changed == 1, (row.submission_id, changed)
        self._stored[params[0]] = tuple(params)

    # --- writes ---------------------------------------------------------------

    async def admit(
        self, conversation_id: str, principal_id: str, idempotency_key: str, input: object, now_ms: int,
        parent: ParentLink | None = None, admission_group: str | None = None,
        admission_fence: AdmissionFence | None = None, metadata: object = None,
    ) -> AdmissionResult:
        metadata_json = validate_admit(conversation_id, principal_id, idempotency_key, now_ms, parent,
                                       admission_group, admission_fence, metadata)
        input_json, input_digest = encode_input(input)
        with self._writing("admit") as conn:
            existing = _checked(conn.execute(_SELECT_BY_KEY, (conversation_id, principal_id, idempotency_key)).fetchone())
            group_rows = () if admission_group is None else tuple(
                _checked(values) for values in conn.execute(_SELECT_GROUP_OPEN, (admission_group,)).fetchall())
            fence_revision = None
            if admission_fence is not None:
                found = conn.execute(_SELECT_FENCE, (admission_fence.policy_id, admission_fence.key)).fetchone()
                fence_revision = None if found is None else found[0]
            decision = decide_admit(
                conversation_id, principal_id, idempotency_key, input_json, input_digest, now_ms,
                self._conversation(conversation_id), existing, parent, admission_group, metadata_json,
                admission_fence, fence_revision, group_rows,
            )
            if decision.submission is not None:
                self._write_conversation(decision.conversation)
                conn.execute(_INSERT_SUBMISSION, _params(decision.submission))
        return decision.result

    async def set_admission_fence(self, policy_id: str, key: str, revision: int) -> AdmissionFenceState:
        validate_set_admission_fence(policy_id, key, revision)
        with self._writing("set_admission_fence") as conn:
            found = conn.execute(_SELECT_FENCE, (policy_id, key)).fetchone()
            state, write = decide_set_admission_fence(policy_id, key, revision, None if found is None else found[0])
            if write:
                conn.execute(_UPSERT_FENCE, (policy_id, key, revision))
        return state

    async def mark_ready(self, submission_id: str, now_ms: int) -> Readiness:
        validate_mark_ready(submission_id, now_ms)
        with self._writing("mark_ready"):
            readiness, row = decide_mark_ready(submission_id, self._submission(submission_id), now_ms)
            if row is not None:
                self._update(row)
        return readiness

    async def claim(self, conversation_id: str, owner_id: str, lease_ms: int, now_ms: int,
                    handoff: ClaimHandoff | None = None) -> Claim | None:
        validate_claim(conversation_id, owner_id, lease_ms, now_ms)
        validate_claim_handoff(handoff)
        with self._writing("claim") as conn:
            if handoff is not None:
                lane = [self._read(values) for values in conn.execute(_SELECT_NONTERMINAL_OF, (conversation_id,))]
                decision = decide_claim_handoff(self._conversation(conversation_id), lane, handoff,
                                                owner_id, lease_ms, now_ms)
            else:
                head = self._read(conn.execute(_SELECT_HEAD, (conversation_id,)).fetchone())
                decision = decide_claim(self._conversation(conversation_id), head, owner_id, lease_ms, now_ms)
            if decision.claim is not None:
                self._write_conversation(decision.conversation)
                self._update(decision.submission)
        return decision.claim

    async def renew_ownership(self, token: Claim, lease_ms: int, now_ms: int) -> OwnershipRenewal:
        validate_renew(token, lease_ms, now_ms)
        with self._writing("renew_ownership"):
            renewal, row = decide_renew(self._submission(token.submission_id), token, lease_ms, now_ms)
            if row is not None:
                self._update(row)
        return renewal

    async def release_ownership(self, token: Claim) -> None:
        require_token(token)
        with self._writing("release_ownership"):
            row = decide_release(self._submission(token.submission_id), token)
            if row is not None:
                self._update(row)

    async def mark_input_applied(self, token: Claim, record_id: str, seq: int) -> InputApplied:
        validate_input_applied(token, record_id, seq)
        with self._writing("mark_input_applied"):
            applied, row = decide_input_applied(self._submission(token.submission_id), token, record_id, seq)
            if row is not None:
                self._update(row)
        return applied

    async def request_abort(self, submission_id: str, author: str, reason: str, now_ms: int) -> AbortIntent:
        validate_abort(submission_id, author, reason, now_ms)
        with self._writing("request_abort"):
            intent, row = decide_abort(submission_id, self._submission(submission_id), author, reason, now_ms)
            if row is not None:
                self._update(row)
        return intent

    async def mark_unknown(self, token: Claim, tool_call_id: str) -> UnknownMarked:
        validate_mark_unknown(token, tool_call_id)
        with self._writing("mark_unknown"):
            marked, row = decide_mark_unknown(self._submission(token.submission_id), token, tool_call_id)
            if row is not None:
                self._update(row)
        return marked

    async def resolve_unknown(self, submission_id: str, tool_call_id: str, resolution: str, resolver: str,
                              result: object, now_ms: int) -> UnknownResolution:
        result = validate_resolve(submission_id, tool_call_id, resolution, resolver, result, now_ms)
        with self._writing("resolve_unknown"):
            resolved, row = decide_resolve(submission_id, self._submission(submission_id), tool_call_id,
                                           resolution, resolver, result, now_ms)
            if row is not None:
                self._update(row)
        return resolved

    async def suspend(self, token: Claim, tool_call_ids: tuple[str, ...],
                      child_call_ids: tuple[str, ...] = ()) -> Suspension:
        validate_suspend(token, tool_call_ids, child_call_ids)
        with self._writing("suspend"):
            suspension, row = decide_suspend(self._submission(token.submission_id), token, tuple(tool_call_ids),
                                             tuple(child_call_ids))
            if row is not None:
                self._update(row)
        return suspension

    async def decide_approval(self, submission_id: str, tool_call_id: str, decision: str, resolver: str,
                              reason: str, now_ms: int) -> ApprovalDecision:
        validate_decide(submission_id, tool_call_id, decision, resolver, reason, now_ms)
        with self._writing("decide_approval"):
            decided, row = decide_approval(submission_id, self._submission(submission_id), tool_call_id, decision,
                                           resolver, reason, now_ms)
            if row is not None:
                self._update(row)
        return decided

    def _open_rows(self, conversation_id: str) -> list:
        return [self._read(values) for values in self._conn.execute(_SELECT_NONTERMINAL_OF, (conversation_id,))]

    def _behind(self, host) -> list:
        if host is None:
            return []
        return [row for row in self._open_rows(host.conversation_id) if row.queue_seq > host.queue_seq]

    async def begin_join(self, token: Claim, limit: int) -> JoinBatch:
        validate_begin_join(token, limit)
        with self._writing("begin_join"):
            host = self._submission(token.submission_id)
            batch, host, followers = decide_begin_join(host, token, self._behind(host), limit)
            if host is not None:
                self._update(host)
            for follower in followers:
                self._update(follower)
        return batch

    async def mark_joined(self, token: Claim, submission_id: str, record_id: str, seq: int) -> JoinMarked:
        validate_mark_joined(token, submission_id, record_id, seq)
        with self._writing("mark_joined"):
            marked, row = decide_mark_joined(self._submission(token.submission_id), token, submission_id,
                                             self._submission(submission_id), record_id, seq)
            if row is not None:
                self._update(row)
        return marked

    async def revert_join(self, token: Claim, submission_id: str) -> None:
        validate_revert_join(token, submission_id)
        with self._writing("revert_join"):
            host, follower = decide_revert_join(self._submission(token.submission_id), token, submission_id,
                                                self._submission(submission_id))
            if host is not None:
                self._update(host)
                self._update(follower)

    async def reserve_child(self, token: Claim, tool_call_id: str, allocation: object) -> ChildReservation:
        validate_reserve_child(token, tool_call_id)
        allocation, allocation_digest = encode_json_arg("allocation", allocation)
        with self._writing("reserve_child"):
            reserved, row = decide_reserve_child(self._submission(token.submission_id), token, tool_call_id,
                                                 allocation, allocation_digest)
            if row is not None:
                self._update(row)
        return reserved

    async def attach_child(self, token: Claim, tool_call_id: str, child_submission_id: str) -> ChildReservation:
        validate_attach_child(token, tool_call_id, child_submission_id)
        with self._writing("attach_child"):
            attached, row = decide_attach_child(self._submission(token.submission_id), token, tool_call_id,
                                                child_submission_id)
            if row is not None:
                self._update(row)
        return attached

    async def release_child(self, submission_id: str, tool_call_id: str, accounting: object,
                            now_ms: int) -> ChildReservation:
        validate_release_child(submission_id, tool_call_id, now_ms)
        accounting, accounting_digest = encode_json_arg("accounting", accounting)
        with self._writing("release_child"):
            released, row = decide_release_child(submission_id, self._submission(submission_id), tool_call_id,
                                                 accounting, accounting_digest, now_ms)
            if row is not None:
                self._update(row)
        return released

    async def reserve_settlement(self, token: Claim, record: object) -> ReservedSettlement:
        require_token(token)
        record_json, record_digest, outcome = encode_settlement(token.submission_id, record)
        with self._writing("reserve_settlement"):
            reserved, row = decide_reserve(self._submission(token.submission_id), token, record_json, record_digest, outcome)
            if row is not None:
                self._update(row)
        return reserved

    async def finalize_settlement(self, submission_id: str, now_ms: int) -> Settlement:
        validate_finalize(submission_id, now_ms)
        with self._writing("finalize_settlement"):
            row = self._submission(submission_id)
            behind = self._open_rows(row.conversation_id) if row is not None and row.joined_count else []
            settlement, row, followers = decide_finalize(submission_id, row, now_ms, behind)
            if row is not None:
                self._update(row)
            for follower in followers:
                self._update(follower)
        return settlement

    async def purge_conversation(self, conversation_id: str) -> int:
        """Delete a fully settled conversation's rows (retention, after
        archival); returns how many submissions went. Idempotent."""
        require_str("conversation_id", conversation_id)
        with self._writing("purge_conversation") as conn:
            # Not validated: purge reads only the settled flag, and deleting
            # a settled conversation's rows must not need them readable.
            rows = [_row(values) for values in conn.execute(_SELECT_ALL_OF, (conversation_id,))]
            decide_purge(conversation_id, rows)
            conn.execute("DELETE FROM ledger_submissions WHERE conversation_id = ?", (conversation_id,))
            conn.execute("DELETE FROM ledger_conversations WHERE conversation_id = ?", (conversation_id,))
        return len(rows)

    # --- reads (single statements: each is one consistent snapshot) ------------

    async def get(self, submission_id: str) -> SubmissionRecord | None:
        require_str("submission_id", submission_id)
        with _storage("get"):
            row = _row(self._conn.execute(_SELECT_BY_ID, (submission_id,)).fetchone())
        return None if row is None else row_to_record(row)

    async def get_by_idempotency_key(
        self, conversation_id: str, principal_id: str, idempotency_key: str
    ) -> SubmissionRecord | None:
        require_str("conversation_id", conversation_id)
        require_str("principal_id", principal_id)
        require_str("idempotency_key", idempotency_key)
        with _storage("get_by_idempotency_key"):
            row = _row(self._conn.execute(_SELECT_BY_KEY, (conversation_id, principal_id, idempotency_key)).fetchone())
        return None if row is None else row_to_record(row)

    async def load_recovery_snapshot(self, conversation_id: str) -> RecoverySnapshot:
        require_str("conversation_id", conversation_id)
        conn = self._conn
        # Two statements: read them in one transaction so the epoch and the
        # rows come from the same snapshot (a deferred read transaction).
        with _storage("load_recovery_snapshot"):
            conn.execute("BEGIN")
            try:
                conversation = self._conversation(conversation_id)
                rows = [_row(values) for values in conn.execute(_SELECT_NONTERMINAL_OF, (conversation_id,))]
                children = {child: _row(conn.execute(_SELECT_BY_ID, (child,)).fetchone())
                            for row in rows for child in attached_children(row)}
            finally:
                conn.execute("COMMIT")
        return recovery_snapshot(conversation_id, conversation, rows, child_rows=children)

    async def scan_nonterminal(self, principal_id: str | None = None) -> tuple[NonterminalSubmission, ...]:
        # An undecodable row is an ``UnreadableSubmission`` in its place, not
        # a failed scan (``rules.scan_records``).
        if principal_id is not None:
            require_str("principal_id", principal_id)
        with _storage("scan_nonterminal"):
            cursor = (self._conn.execute(_SELECT_NONTERMINAL) if principal_id is None
                      else self._conn.execute(_SELECT_NONTERMINAL_OF_PRINCIPAL, (principal_id,)))
            rows = [_row(values) for values in cursor]
        return scan_records(rows)

    def capabilities(self) -> dict:
        # A plain database file: this adapter encrypts nothing it writes
        # (an encrypted volume under it is the deployment's, not declared here).
        return capabilities(durable=True, adapter="sqlite", encryption_at_rest=False)
