"""``history-linearizable``: every durable-state key's, conversation log's
and submission's history, as its callers saw it, is linearizable (opt-in:
a stack lists it in its checks, naming the ports it judges).

Unlike ``reference-model``, which is told each call as the store committed
it, this oracle keeps what each caller saw and judges it from the outside
(``scenarios.reference.history``):

- ``ds`` (a ``RegisterModel`` per key): a ``ds.load`` is a read, a
  ``ds.save`` a compare-and-set by revision, a ``ds.clear`` a clear.
- ``log`` (a ``FencedLogModel`` per conversation): ``materialize``,
  ``append`` (its epoch, expected tail seq, batch id and records; the
  answer its first seq), ``read`` (a page), ``observe`` from the start (a
  read of everything), ``inspect_tail`` (tail seq and epoch) and
  ``delete_conversation``. A record is compared by its identity
  ``(batch_id, record_id, family, created_at_ms, producer_id, epoch)``,
  not its payload: what a record says is ``log-chain``'s to judge; which
  record sits at which seq, and who could write it, is this one's.
- ``ledger`` (a ``SubmissionLeaseModel`` per submission, and a
  ``LaneEpochModel`` per conversation for the epochs its claims grant):
  ``mark_ready`` (a submission is claimable only once ready), a granted
  ``claim`` (a claim answering None names no submission and is left out:
  a head left unclaimed is liveness's to judge), ``renew_ownership``,
  ``release_ownership``, ``reserve_settlement`` (fenced by the token),
  ``suspend`` and ``mark_unknown`` (they end ownership),
  ``finalize_settlement`` and an abort that settled at once (settled for
  good). A purged conversation's submissions start new histories (a new
  generation of their keys). Clock: a claim is judged with the ``now_ms``
  the ledger decided with — the caller's, or under the ``store_clock``
  knob the store machine's, which the port layer writes into the call's
  arguments before any observer sees it (``faults.ports``).

A call whose reply never reached its caller — the reply lost
(``reply-lost``: the caller saw ``ReplyLost``), or its process killed
before the reply (``ack-lost``) — is recorded as UNKNOWN: it may or may
not have taken effect. Those faults are traced right after the commit the
port observers see, on the same node and site, which is how the recorder
finds the call they hit. A read whose answer a fault damaged is left out
(another oracle judges damage); a write during which a fault fired is
UNKNOWN.

Times: a store call is atomic at the instant it commits, and the recorder
sees that instant only, so each operation is the point ``[commit, commit]``
in milliseconds; calls in the same millisecond are concurrent and the
search tries their orders.

Cost and memory: the history is kept until the audit (that is the point of
a history), bounded: at most ``ops_per_key_max`` operations per key (a key
past it is judged on its first ones), at most ``ops_max`` in all (past it
every new operation is left out), a step budget per key for the search and
``steps_max`` for the whole audit; a key whose search runs out, or that the
audit's budget no longer reaches, is not judged and never counts as a
check. The run's stats say how many of each (``metrics``:
``history_keys_too_costly``, ``history_ops_left_out``,
``history_ops_unknown``, ``history_search_steps``).
"""
from __future__ import annotations

import json
from typing import Any, Callable

import attrs

from faults.events import DsClear, DsLoad, DsSave, Fault
from faults.kinds import ACK_LOST, REPLY_LOST
from scenarios.reference.history import (
    BUDGET_STEPS_DEFAULT,
    UNKNOWN,
    Failed,
    FencedLogModel,
    LaneEpochModel,
    Op,
    RegisterModel,
    SubmissionLeaseModel,
    check_object,
)
from sim.invariants import Checker

OPS_PER_KEY_MAX = 4_096
# Search steps of one audit, every key together: past it the keys left are
# not judged (counted too costly), so an audit's cost is bounded whatever
# the history.
STEPS_MAX = 20_000_000
# Operations kept in all, every key together (an Op is a few hundred bytes).
OPS_MAX = 200_000
# ``observe`` reads to the tail: a read with no limit.
READ_ALL = 2 ** 53
PORTS_ALL = ("ds", "log", "ledger")
_SITES = {"load": DsLoad.kind, "save": DsSave.kind, "clear": DsClear.kind}
_LOST = (ACK_LOST, REPLY_LOST)
_LOG_METHODS = frozenset({"materialize", "append", "read", "observe", "inspect_tail", "delete_conversation"})
_LEDGER_METHODS = frozenset({"mark_ready", "claim", "renew_ownership", "release_ownership", "reserve_settlement",
                             "suspend", "mark_unknown", "finalize_settlement", "request_abort",
                             "purge_conversation"})
_LEDGER_ENDS = {"suspend": "end", "mark_unknown": "end", "release_ownership": "release",
                "reserve_settlement": "fenced"}
# A translated call: (model kind, key, op name, args, answer, is a read), a
# list of them (a claim is its submission's and its lane's), or None: not judged.
_Translated = tuple[str, str, str, tuple, object, bool]


class UnknownPort(ValueError):
    """A port this checker has no translation for."""


def _argument(call: Any, index: int, name: str, default: Any = None) -> Any:
    if index < len(call.args):
        return call.args[index]
    return call.kwargs.get(name, default)


def _value(record: Any) -> tuple:
    """A record's content as a hashable value: its version and canonical JSON."""
    return (record.contract_version, json.dumps(record.payload, sort_keys=True, separators=(",", ":")))


def _entry(batch_id: str, envelope: Any) -> tuple:
    """A log record as the log model compares it: its batch and identity."""
    return (batch_id, envelope.record_id,
            (envelope.family, envelope.created_at_ms, envelope.producer_id, envelope.epoch))


def _label(error: BaseException) -> str:
    name = getattr(type(error), "name", None)
    return name if isinstance(name, str) and name else type(error).__name__


def _conversation_of(submission_id: str) -> str:
    """The conversation a submission id names (``sub-{conversation}-{seq}``,
    the ledger's id format); the id itself if it is not one."""
    if submission_id.startswith("sub-") and "-" in submission_id[4:]:
        return submission_id[4:].rsplit("-", 1)[0]
    return submission_id


class HistoryLinearizable(Checker):
    name = "history-linearizable"
    kinds = (Fault.kind,)

    def __init__(self, ops_per_key_max: int = OPS_PER_KEY_MAX, budget_steps: int = BUDGET_STEPS_DEFAULT,
                 ports: tuple[str, ...] = ("ds",), ops_max: int = OPS_MAX, steps_max: int = STEPS_MAX) -> None:
        super().__init__()
        assert min(ops_per_key_max, budget_steps, ops_max, steps_max) > 0, (ops_per_key_max, budget_steps, ops_max,
                                                                            steps_max)
        self._steps_max = steps_max
        unknown = sorted(set(ports) - set(PORTS_ALL))
        if unknown:
            raise UnknownPort(f"history-linearizable judges {PORTS_ALL}, not {unknown}")
        self._ops_per_key_max = ops_per_key_max
        self._ops_max = ops_max
        self._budget_steps = budget_steps
        self._translate: dict[str, Callable[[Any], _Translated | list[_Translated] | None]] = {
            port: translate for port, translate in (("ds", self._ds), ("log", self._log), ("ledger", self._ledger))
            if port in ports}
        self._models: dict[str, Callable[[], Any]] = {
            RegisterModel.kind: RegisterModel, FencedLogModel.kind: FencedLogModel,
            SubmissionLeaseModel.kind: SubmissionLeaseModel, LaneEpochModel.kind: LaneEpochModel}
        # (model kind, key) -> its operations
        self._ops: dict[tuple[str, str], list[Op]] = {}
        self._kept = 0
        self._full: dict[tuple[str, str], int] = {}  # (kind, key) -> operations left out past the bound
        # (node, site) -> (its ops as ((kind, key), index), time) of the last call there: a lost reply names it next.
        self._last: dict[tuple[str, str], tuple[tuple[tuple[tuple[str, str], int], ...], int]] = {}
        self._generation: dict[str, int] = {}  # conversation -> its ledger purges so far
        self._next_id = 0
        self._too_costly = 0
        self._unknown = 0
        self._steps = 0

    # --- translations --------------------------------------------------------

    def _ds(self, call: Any) -> _Translated | None:
        if call.method not in _SITES:
            return None
        key = _argument(call, 0, "key")
        error = call.error
        if call.method == "load":
            answer = Failed(type(error).__name__) if error is not None else (
                None if call.result is None else (call.result.revision, _value(call.result)))
            return RegisterModel.kind, key, "read", (), answer, True
        if call.method == "save":
            write = _argument(call, 1, "write")
            expected = _argument(call, 2, "expected_revision")
            args = (expected, (write.contract_version, json.dumps(write.payload, sort_keys=True,
                                                                  separators=(",", ":"))))
            if error is None:
                answer = call.result.revision
            else:
                label = _label(error)
                answer = Failed(label, getattr(error, "actual", None) if label == RegisterModel.CONFLICT else None)
            return RegisterModel.kind, key, "cas", args, answer, False
        answer = Failed(type(error).__name__) if error is not None else None
        return RegisterModel.kind, key, "clear", (), answer, False

    def _log(self, call: Any) -> _Translated | None:
        method = call.method
        if method not in _LOG_METHODS:
            return None
        error = call.error
        answer: object = None
        if error is not None:
            label = _label(error)
            actual = None
            if label == "AppendConflict":
                label = f"AppendConflict:{getattr(error, 'kind', '?')}"
                actual = getattr(error, "actual_tail_seq", None)
            elif label == FencedLogModel.FENCED:
                actual = getattr(error, "actual_epoch", None)
            answer = Failed(label, actual)
        if method == "append":
            request = _argument(call, 0, "request")
            entries = tuple(_entry(request.batch_id, envelope) for envelope in request.records)
            if not entries:
                return None  # refused by its shape, not the log's state
            if error is None:
                answer = call.result.first_seq
            return (FencedLogModel.kind, request.conversation_id, "append",
                    (request.epoch, request.expected_tail_seq, request.batch_id, entries), answer, False)
        conversation = _argument(call, 0, "conversation_id")
        if method == "materialize":
            return (FencedLogModel.kind, conversation, "materialize",
                    (_argument(call, 1, "producer_id"), _argument(call, 2, "epoch")), answer, False)
        if method == "delete_conversation":
            return FencedLogModel.kind, conversation, "delete", (), answer if error else bool(call.result), False
        if method == "inspect_tail":
            if error is None:
                answer = (call.result.tail_seq, call.result.epoch)
            return FencedLogModel.kind, conversation, "tail", (), answer, True
        if method == "observe":
            if _argument(call, 1, "after_offset") is not None:
                return None  # from an opaque offset: which seq is the store's to say
            after_seq, limit = 0, READ_ALL
        else:
            after_seq, limit = _argument(call, 1, "after_seq"), _argument(call, 2, "limit")
        if error is None:
            answer = tuple(_entry(record.batch_id, record.envelope) for record in call.result)
        return FencedLogModel.kind, conversation, "read", (after_seq, limit), answer, True

    def _submission_key(self, submission_id: str) -> str:
        generation = self._generation.get(_conversation_of(submission_id), 0)
        return submission_id if not generation else f"{submission_id}@{generation}"

    def _ledger(self, call: Any) -> _Translated | list[_Translated] | None:
        method = call.method
        if method not in _LEDGER_METHODS:
            return None
        error, result = call.error, call.result
        answer: object = None
        if error is not None:
            label = _label(error)
            answer = Failed(label, getattr(error, "actual_epoch", None) if label == SubmissionLeaseModel.LOST
                            else None)
        kind = SubmissionLeaseModel.kind
        if method == "claim":
            if error is not None or result is None:
                return None  # names no submission
            conversation = _argument(call, 0, "conversation_id")
            generation = self._generation.get(conversation, 0)
            lane = conversation if not generation else f"{conversation}@{generation}"
            return [(kind, self._submission_key(result.submission_id), "claim",
                     (result.owner_id, _argument(call, 2, "lease_ms"), _argument(call, 3, "now_ms"), result.epoch),
                     result.epoch, False),
                    (LaneEpochModel.kind, lane, "claim", (result.epoch,), result.epoch, False)]
        if method == "purge_conversation":
            if error is None and call.result:
                conversation = _argument(call, 0, "conversation_id")
                self._generation[conversation] = self._generation.get(conversation, 0) + 1
            return None
        if method == "mark_ready":
            if error is not None:
                return None  # refused: nothing of ownership seen
            return kind, self._submission_key(_argument(call, 0, "submission_id")), "ready", (), None, False
        if method in ("finalize_settlement", "request_abort"):
            if error is not None:
                return None  # refused: nothing of ownership seen
            if method == "request_abort" and result.settled_at_ms is None:
                return None  # an intent only: its owner settles it later
            return kind, self._submission_key(_argument(call, 0, "submission_id")), "settle", (), None, False
        token = _argument(call, 0, "token")
        if method == "renew_ownership":
            args = (token.owner_id, token.epoch, _argument(call, 1, "lease_ms"), _argument(call, 2, "now_ms"))
            return kind, self._submission_key(token.submission_id), "renew", args, answer, False
        return (kind, self._submission_key(token.submission_id), _LEDGER_ENDS[method],
                (token.owner_id, token.epoch), answer, False)

    # --- recording -----------------------------------------------------------

    def on_port_call(self, call: Any) -> None:
        translate = self._translate.get(call.port)
        if translate is None:
            return
        translated = translate(call)
        if translated is None:
            return
        placed = []
        for kind, key, name, args, answer, is_read in (translated if isinstance(translated, list) else [translated]):
            if is_read and call.damaged:
                continue
            ops = self._ops.setdefault((kind, key), [])
            if len(ops) >= self._ops_per_key_max or self._kept >= self._ops_max:
                self._full[(kind, key)] = self._full.get((kind, key), 0) + 1
                continue
            unknown = call.damaged
            ops.append(Op(self._next_id, call.node, key, name, args, call.time_ms,
                          None if unknown else call.time_ms, UNKNOWN if unknown else answer))
            self._next_id += 1
            self._kept += 1
            placed.append(((kind, key), len(ops) - 1))
        if placed:
            self._last[(call.node, f"{call.port}.{call.method}")] = (tuple(placed), call.time_ms)

    def on_event(self, event: tuple) -> None:
        fields = event.fields
        if fields.get("kind") not in _LOST:
            return
        last = self._last.pop((event.node, fields.get("site")), None)
        if last is None or last[1] != event.time_ms:
            return  # not a judged call, or one this recorder left out
        for where, index in last[0]:
            ops = self._ops[where]
            if ops[index].answer is not UNKNOWN:
                ops[index] = attrs.evolve(ops[index], complete_ms=None, answer=UNKNOWN)
                self._unknown += 1

    def audit(self, view: Any) -> None:
        for kind, key in sorted(self._ops):
            ops = self._ops[(kind, key)]
            budget = min(self._budget_steps, self._steps_max - self._steps)
            if budget <= 0:
                self._too_costly += 1  # the audit's budget is spent: not judged
                continue
            verdict = check_object(ops, self._models[kind](), key, budget)
            left_out = self._full.get((kind, key), 0)
            self._steps += verdict.steps
            if verdict.outcome == "unknown":
                self._too_costly += 1
            elif verdict.outcome == "ok":
                self.checks += 1
            elif verdict.outcome == "violation":
                self.checks += 1
                self.fail(verdict.describe() + (f"\n(judged on its first {len(ops)} operations; "
                                                f"{left_out} more left out)" if left_out else ""), related=(key,))

    def metrics(self) -> dict[str, Any]:
        return {"history_keys_too_costly": self._too_costly, "history_ops_unknown": self._unknown,
                "history_ops_left_out": sum(self._full.values()), "history_search_steps": self._steps}
