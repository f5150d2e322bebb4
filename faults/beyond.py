"""Beyond the contract: a store that breaks its promises (opt-in).

Every other fault kind stays inside what the stores promise to survive.
These do not: they model a disk that acknowledged an fsync it never did, a
failover to a replica that lagged, a write torn by a power cut. The system
is not expected to survive them; it is expected to *notice*: a typed error
of its own (the recovery read's digest chain raises ``HistoryCorrupted``) or
a violated invariant that follows the chains (``log-chain``, ``cas-linear``,
``exactly-once-settlement``, ...). A run in which one fired and nothing
noticed is a silent pass, which the runner reports as the violation
``beyond-contract-undetected``.

- ``lost-write``: right after a write committed (and before its reply), the
  store forgets it. At ``log.append`` the whole batch goes (records, batch
  row, tail back to the tail before it); at ``ds.save`` the key's row goes
  back to what it held before the save.
- ``torn-batch``: at ``log.append`` of two or more records, the write tears:
  the first half of the batch's records is stored whole, each record of the
  second half only as the first half of its bytes, while the tail (and the
  batch row) cover all of it.
- ``row-rot``: right after a write committed, the stored text of one row
  (the saved payload at ``ds.save``, the batch's last record at
  ``log.append``) is replaced by a damaged document, a store's rots taking
  the entries of ``ROTS`` in turn (a member named twice, ``NaN``, an integer
  past 2^53, nesting past any cap, half the text, and on SQLite bytes that
  are not UTF-8), and past each cap a ledger reader passes to ``decode``
  (too many members, a string or a key too long, too many bytes as text and
  as a blob, a bare top-level string where an object is expected): what a
  reader of foreign or damaged text must refuse, never hand back as a value.
  At ``ledger.reserve_settlement`` the stored reservation rots: another
  valid record of the same outcome (its digest no longer matches: finalize
  refuses it), a row schema version the store does not support, or one of
  ``ROTS`` as its text. Where a store's cycle starts is drawn from the seed
  and the rotted row's name (``beyond_surgeries``): the first detection
  stops a run, so a sweep starting every run at entry 0 would meet only it.

A surgery works on the store's own representation (the in-memory dicts, or
SQL on the SQLite file: a real database file really losing rows), never
through the store's API, which would refuse to break its promises. The
disk under the SQLite file breaks too, beyond the contract: ``faults.disk``
(latent sector errors, misdirected writes, lost tails, torn writes).
"""
from __future__ import annotations

from typing import Any, Callable

import attrs

from faults.kinds import LOST_WRITE, ROW_ROT, TORN_BATCH
from model.canonical import CanonicalDecodeError, canonical_json, decode
from model.sqlite_db import write_transaction

# The methods each port's surgery can break, and how.
LOG_KINDS = {"append": (LOST_WRITE, TORN_BATCH, ROW_ROT)}
DURABLE_STATE_KINDS = {"save": (LOST_WRITE, ROW_ROT)}
LEDGER_KINDS = {"reserve_settlement": (ROW_ROT,)}

# The caps a ledger reader passes to ``decode`` (its defaults): the rots
# below go one past each, so the ledger must refuse them by the cap itself.
# The log's caps are wider (``ENVELOPE_DECODE_CAPS``): it decodes them and
# refuses them as envelopes; durable state has none and reads another value.
_CAPS = dict(decode.__kwdefaults__)

# The damaged documents of ``row-rot``, in the order a store's rots take
# them: (name, the damaged text from the stored one, SQLite only).
ROTS: tuple[tuple[str, Any, bool], ...] = (
    ("member-twice", lambda text: '{"loomsim":1,"loomsim":2}', False),
    ("non-finite", lambda text: '{"loomsim":NaN}', False),
    ("unsafe-integer", lambda text: '{"loomsim":9007199254740993}', False),
    ("too-deep", lambda text: "[" * 200 + "]" * 200, False),
    ("half", lambda text: text[: len(text) // 2], False),
    ("not-utf8", lambda text: b"\xff\xfe" + text.encode("utf-8"), True),
    # A bare top-level string (its brackets all inside it) where an object is expected.
    ("bare-string", lambda text: '"' + "[" * (_CAPS["max_depth"] + 1) + '"', False),
    ("too-many-items", lambda text: '{"loomsim":[' + ",".join("0" * (_CAPS["max_items"] + 1)) + "]}", False),
    ("long-string", lambda text: '{"loomsim":"' + "x" * (_CAPS["max_string_length"] + 1) + '","n":0}', False),
    ("long-key", lambda text: '{"' + "k" * (_CAPS["max_string_length"] + 1) + '":0}', False),
    # Fewer characters than max_bytes, more UTF-8 bytes (two each).
    ("too-many-bytes", lambda text: '{"loomsim":"' + "\u00e9" * (_CAPS["max_bytes"] // 2 + 1) + '"}', False),
    ("blob-too-big", lambda text: b'{"loomsim":"' + b"x" * _CAPS["max_bytes"] + b'"}', True),
)


def _no_offset(row: str) -> int:
    return 0


class _Rotter:
    """The n-th rot of a store, of the row named ``row``: the
    (offset(row) + n)-th applicable entry of ``extra + ROTS``, cycling."""

    def __init__(self, sqlite: bool, offset: Callable[[str], int] = _no_offset, extra: tuple = ()) -> None:
        self._rots = extra + tuple(rot for rot in ROTS if sqlite or not rot[2])
        self._offset = offset
        self._count = 0

    def next(self, row: str) -> tuple[str, Any, bool]:
        entry = self._rots[(self._offset(row) + self._count) % len(self._rots)]
        self._count += 1
        return entry

    def rot(self, row: str, text: str) -> "str | bytes":
        return self.next(row)[1](text)


class LogSurgery:
    """Breaks a conversation log's promise right after an append committed."""

    kinds = LOG_KINDS

    def __init__(self, store: Any, offset: Callable[[str], int] = _no_offset) -> None:
        self._store = store
        self._sqlite = hasattr(store, "connection")
        self._rotter = _Rotter(self._sqlite, offset)

    def before(self, method: str, args: tuple, kwargs: dict) -> Any:
        return None

    def apply(self, kind: str, method: str, args: tuple, kwargs: dict, result: Any, token: Any) -> bool:
        """Break the committed append; False when there is nothing to break
        (a replayed batch committed nothing; a one-record batch cannot tear)."""
        request = args[0] if args else kwargs["request"]
        if result.replayed:
            return False
        count = result.last_seq - result.first_seq + 1
        if kind == ROW_ROT:
            self._rot_record(request, result.last_seq)
            return True
        if kind == TORN_BATCH:
            if count < 2:
                return False
            self._tear_records(request, result.first_seq + count // 2)
            return True
        assert kind == LOST_WRITE, kind
        self._drop_records(request, result.first_seq)
        self._rewind_tail(request, result)
        return True

    def _tear_records(self, request: Any, from_seq: int) -> None:
        """Cut each of the batch's records from ``from_seq`` on to the first
        half of its bytes, as a write torn by a power cut leaves them."""
        cid = request.conversation_id
        if self._sqlite:
            with write_transaction(self._store.connection):
                self._store.connection.execute(
                    "UPDATE conv_records SET envelope_json = substr(envelope_json, 1, length(envelope_json) / 2) "
                    "WHERE conversation_id = ? AND seq >= ?", (cid, from_seq))
            return
        store = self._store
        for seq in range(from_seq, store.surgery_row_count(cid) + 1):
            batch_id, text = store.surgery_row(cid, seq)
            store.surgery_set_row(cid, seq, batch_id, text[: len(text) // 2])

    def _rot_record(self, request: Any, seq: int) -> None:
        """Damage the stored text of record ``seq``."""
        cid = request.conversation_id
        if self._sqlite:
            conn = self._store.connection
            with write_transaction(conn):
                (text,) = conn.execute("SELECT envelope_json FROM conv_records WHERE conversation_id = ? AND seq = ?",
                                       (cid, seq)).fetchone()
                conn.execute("UPDATE conv_records SET envelope_json = ? WHERE conversation_id = ? AND seq = ?",
                             (self._rotter.rot(cid, text), cid, seq))
            return
        batch_id, text = self._store.surgery_row(cid, seq)
        self._store.surgery_set_row(cid, seq, batch_id, self._rotter.rot(cid, text))

    def _drop_records(self, request: Any, from_seq: int) -> None:
        """Forget the batch's records from ``from_seq`` on."""
        cid = request.conversation_id
        if self._sqlite:
            with write_transaction(self._store.connection):
                self._store.connection.execute(
                    "DELETE FROM conv_records WHERE conversation_id = ? AND seq >= ?", (cid, from_seq))
            return
        count = self._store.surgery_row_count(cid)
        dropped = count - (from_seq - 1)
        assert 0 < dropped <= len(request.records), (cid, from_seq, count)
        self._store.surgery_drop_rows(cid, from_seq,
                                      [r.record_id for r in request.records[len(request.records) - dropped:]])

    def _rewind_tail(self, request: Any, result: Any) -> None:
        """Forget the batch itself: its row, its boundary, the tail it made."""
        cid = request.conversation_id
        if self._sqlite:
            conn = self._store.connection
            with write_transaction(conn):
                previous = conn.execute("SELECT previous_tail_digest FROM conv_batches WHERE conversation_id = ? "
                                        "AND batch_id = ?", (cid, request.batch_id)).fetchone()[0]
                conn.execute("DELETE FROM conv_batches WHERE conversation_id = ? AND batch_id = ?",
                             (cid, request.batch_id))
                conn.execute("UPDATE conv_conversations SET tail_seq = ?, tail_digest = ? WHERE conversation_id = ?",
                             (result.first_seq - 1, previous, cid))
            return
        self._store.surgery_forget_batch(cid, request.batch_id)


class DurableStateSurgery:
    """Rolls a durable-state key back to its row before a committed save."""

    kinds = DURABLE_STATE_KINDS

    def __init__(self, store: Any, offset: Callable[[str], int] = _no_offset) -> None:
        self._store = store
        self._sqlite = hasattr(store, "_conn")
        self._rotter = _Rotter(self._sqlite, offset)

    def _key(self, args: tuple, kwargs: dict) -> str:
        return args[0] if args else kwargs["key"]

    def before(self, method: str, args: tuple, kwargs: dict) -> Any:
        key = self._key(args, kwargs)
        if self._sqlite:
            return self._store._conn.execute(
                "SELECT contract_version, revision, payload FROM durable_state WHERE key = ?", (key,)).fetchone()
        return self._store._rows.get(key)

    def apply(self, kind: str, method: str, args: tuple, kwargs: dict, result: Any, token: Any) -> bool:
        key = self._key(args, kwargs)
        if kind == ROW_ROT:
            self._rot(key)
            return True
        assert kind == LOST_WRITE, kind
        if self._sqlite:
            conn = self._store._conn
            with write_transaction(conn):
                if token is None:
                    conn.execute("DELETE FROM durable_state WHERE key = ?", (key,))
                else:
                    conn.execute("UPDATE durable_state SET contract_version = ?, revision = ?, payload = ? "
                                 "WHERE key = ?", (*token, key))
            return True
        if token is None:
            self._store._rows.pop(key, None)
        else:
            self._store._rows[key] = token
        return True


    def _rot(self, key: str) -> None:
        """Damage the stored payload text of ``key`` (just saved)."""
        if self._sqlite:
            conn = self._store._conn
            with write_transaction(conn):
                (text,) = conn.execute("SELECT payload FROM durable_state WHERE key = ?", (key,)).fetchone()
                conn.execute("UPDATE durable_state SET payload = ? WHERE key = ?", (self._rotter.rot(key, text), key))
            return
        version, revision, text = self._store._rows[key]
        self._store._rows[key] = (version, revision, self._rotter.rot(key, text))


# The ledger's own rots of a stored reservation, ahead of ``ROTS`` (its text).
OTHER_RECORD = "other-record"
SCHEMA_VERSION_ROT = "schema-version"
EMPTY_RECEIPT = "empty-receipt"  # the row's receipt column emptied: every scan must refuse it typed
LEDGER_ROTS: tuple[tuple[str, Any, bool], ...] = ((OTHER_RECORD, None, False), (SCHEMA_VERSION_ROT, None, False),
                                                  (EMPTY_RECEIPT, None, False))


class LedgerSurgery:
    """Rots a submission's stored reservation right after it committed.

    Another valid record of the same outcome is what only the reserved
    digest can tell apart (finalize must refuse it: ``InvalidSettlement``);
    a schema version the store does not support, what every read of the
    row must refuse; an empty receipt, what every read and scan must refuse
    typed (``CorruptSubmission`` naming the operation); damaged text
    (``ROTS``), what its decode must refuse."""

    kinds = LEDGER_KINDS

    def __init__(self, store: Any, offset: Callable[[str], int] = _no_offset) -> None:
        capabilities = store.capabilities()
        self._store = store
        self._sqlite = capabilities["adapter"] == "sqlite"
        self._unsupported_version = capabilities["schema_version"] + 1
        self._rotter = _Rotter(self._sqlite, offset, LEDGER_ROTS)

    def before(self, method: str, args: tuple, kwargs: dict) -> Any:
        return None

    def apply(self, kind: str, method: str, args: tuple, kwargs: dict, result: Any, token: Any) -> bool:
        """Rot the reservation ``result`` names; False when its stored text
        is already damaged (an earlier rot, a retried reserve) and so cannot
        become another record."""
        assert kind == ROW_ROT, kind
        submission_id = result.submission_id
        text, version = self._stored(submission_id)
        name, damage, _ = self._rotter.next(submission_id)
        if name == SCHEMA_VERSION_ROT:
            self._write(submission_id, text, self._unsupported_version)
            return True
        if name == EMPTY_RECEIPT:
            self._empty_receipt(submission_id)
            return True
        if name == OTHER_RECORD:
            try:
                record = decode(text)
            except (CanonicalDecodeError, TypeError):
                return False
            if not isinstance(record, dict) or not isinstance(record.get("payload"), dict):
                return False
            # The same envelope, outcome (and diagnostic), its outcome record
            # one member more: a record finalize would settle alike, but not
            # the one that was reserved.
            payload = record["payload"]
            rotted = {**record, "payload": {**payload, "loomsimRot": True}}
            self._write(submission_id, canonical_json(rotted), version)
            return True
        self._write(submission_id, damage(text), version)
        return True

    def _empty_receipt(self, submission_id: str) -> None:
        if self._sqlite:
            conn = self._store.connection
            with write_transaction(conn):
                conn.execute("UPDATE ledger_submissions SET receipt = '' WHERE submission_id = ?", (submission_id,))
            return
        store = self._store
        store.surgery_put(attrs.evolve(store._row(submission_id), receipt=""))

    def _stored(self, submission_id: str) -> tuple[Any, int]:
        if self._sqlite:
            return self._store.connection.execute(
                "SELECT reserved_json, schema_version FROM ledger_submissions WHERE submission_id = ?",
                (submission_id,)).fetchone()
        row = self._store._row(submission_id)
        return row.reserved_json, row.schema_version

    def _write(self, submission_id: str, text: Any, version: int) -> None:
        if self._sqlite:
            conn = self._store.connection
            with write_transaction(conn):
                conn.execute("UPDATE ledger_submissions SET reserved_json = ?, schema_version = ? "
                             "WHERE submission_id = ?", (text, version, submission_id))
            return
        store = self._store
        store.surgery_put(attrs.evolve(store._row(submission_id), reserved_json=text, schema_version=version))


def beyond_surgeries(system: Any, streams: Any) -> dict[str, Any]:
    """The surgeries of a run beyond the contract, by port. Where a store's
    rots start is drawn from the seed and the rotted row's name (a fork of
    ``streams``, so no other stream moves): the first detection stops a
    run, so starting every run at entry 0 would have a sweep meet only the
    first rot, and the seed alone would give every scenario the same one."""
    def offset(port: str) -> Callable[[str], int]:
        return lambda row: streams.fork(f"beyond/row-rot/{port}/{row}").next_u64()

    surgeries: dict[str, Any] = {"log": LogSurgery(system.log, offset("log")),
                                 "ds": DurableStateSurgery(system.ds, offset("ds"))}
    if system.ledger.capabilities().get("adapter") in ("memory", "sqlite"):
        surgeries["ledger"] = LedgerSurgery(system.ledger, offset("ledger"))
    return surgeries


# Per-hit rate of each kind at the sites that have it, under ``--beyond-contract``.
# High enough that a short sweep seed of a scenario that appends rarely
# still breaks a promise or two (a beyond seed where nothing fired tests nothing).
BEYOND_RATES = {LOST_WRITE: 1e-2, TORN_BATCH: 1e-2, ROW_ROT: 1e-2}


def beyond_enabled(opts: Any) -> bool:
    """Whether this run's stores may break their promises: the opt-in flag,
    or a fault script that has such a fault."""
    script = opts.fault_script or ()
    return opts.beyond_contract or any(getattr(e, "kind", None) in BEYOND_RATES for e in script)


def beyond_rates(opts: Any) -> dict[str, float]:
    """The rates to add to a probabilistic plan (none without the flag)."""
    return dict(BEYOND_RATES) if opts.beyond_contract else {}
