"""``history-linearizable``: every durable-state key's history, as its
callers saw it, is linearizable (opt-in: a stack lists it in its checks).

Unlike ``reference-model``, which is told each call as the store committed
it, this oracle keeps what each caller saw and judges it from the outside
(``scenarios.reference.history``): a ``ds.load`` is a read, a ``ds.save`` a
compare-and-set by revision, a ``ds.clear`` a clear. A call whose reply
never reached its caller — the reply lost (``reply-lost``: the caller saw
``ReplyLost``), or its process killed before the reply (``ack-lost``) — is
recorded as UNKNOWN: it may or may not have taken effect. Those faults are
traced right after the commit the port observers see, on the same node and
site, which is how the recorder finds the call they hit. A read whose
answer a read fault damaged is left out (another oracle judges damage).

Times: a store call is atomic at the instant it commits, and the recorder
sees that instant only, so each operation is the point ``[commit, commit]``
in milliseconds; calls in the same millisecond are concurrent and the
search tries their orders.

Cost and memory: the history is kept until the audit (that is the point of
a history), bounded: at most ``ops_per_key_max`` operations per key (a key
past it is judged on its first ones) and a step
budget per key for the search; a key whose search runs out is not judged
and never counts as a check. The run's stats say how many of each
(``metrics``: ``history_keys_too_costly``, ``history_ops_left_out``,
``history_ops_unknown``, ``history_search_steps``).
"""
from __future__ import annotations

import json
from typing import Any

import attrs

from faults.events import DsClear, DsLoad, DsSave, Fault
from faults.kinds import ACK_LOST, REPLY_LOST
from scenarios.reference.history import BUDGET_STEPS_DEFAULT, UNKNOWN, Failed, Op, RegisterModel, check_object
from sim.invariants import Checker

OPS_PER_KEY_MAX = 4_096
_SITES = {"load": DsLoad.kind, "save": DsSave.kind, "clear": DsClear.kind}
_LOST = (ACK_LOST, REPLY_LOST)


def _argument(call: Any, index: int, name: str) -> Any:
    return call.args[index] if index < len(call.args) else call.kwargs[name]


def _value(record: Any) -> tuple:
    """A record's content as a hashable value: its version and canonical JSON."""
    return (record.contract_version, json.dumps(record.payload, sort_keys=True, separators=(",", ":")))


class HistoryLinearizable(Checker):
    name = "history-linearizable"
    kinds = (Fault.kind,)

    def __init__(self, ops_per_key_max: int = OPS_PER_KEY_MAX, budget_steps: int = BUDGET_STEPS_DEFAULT) -> None:
        super().__init__()
        assert ops_per_key_max > 0 and budget_steps > 0, (ops_per_key_max, budget_steps)
        self._ops_per_key_max = ops_per_key_max
        self._budget_steps = budget_steps
        self._model = RegisterModel()
        self._ops: dict[str, list[Op]] = {}
        self._full: dict[str, int] = {}  # key -> operations left out past the bound
        # (node, site) -> (key, index, time) of the last call there: a lost reply names it next.
        self._last: dict[tuple[str, str], tuple[str, int, int]] = {}
        self._next_id = 0
        self._too_costly = 0
        self._unknown = 0
        self._steps = 0

    def on_port_call(self, call: Any) -> None:
        if call.port != "ds" or call.method not in _SITES:
            return
        key = _argument(call, 0, "key")
        error = call.error
        if call.method == "load":
            if call.damaged:
                return
            name, args = "read", ()
            answer = Failed(type(error).__name__) if error is not None else (
                None if call.result is None else (call.result.revision, _value(call.result)))
        elif call.method == "save":
            write = _argument(call, 1, "write")
            expected = _argument(call, 2, "expected_revision")
            name, args = "cas", (expected, (write.contract_version, json.dumps(
                write.payload, sort_keys=True, separators=(",", ":"))))
            if error is None:
                answer = call.result.revision
            else:
                label = getattr(type(error), "name", None) or type(error).__name__
                answer = Failed(label, getattr(error, "actual", None) if label == RegisterModel.CONFLICT else None)
        else:
            name, args = "clear", ()
            answer = Failed(type(error).__name__) if error is not None else None
        ops = self._ops.setdefault(key, [])
        if len(ops) >= self._ops_per_key_max:
            self._full[key] = self._full.get(key, 0) + 1
            return
        unknown = call.damaged and call.method != "load"
        op = Op(self._next_id, call.node, key, name, args, call.time_ms,
                None if unknown else call.time_ms, UNKNOWN if unknown else answer)
        self._next_id += 1
        self._last[(call.node, _SITES[call.method])] = (key, len(ops), call.time_ms)
        ops.append(op)

    def on_event(self, event: tuple) -> None:
        fields = event.fields
        if fields.get("kind") not in _LOST:
            return
        last = self._last.pop((event.node, fields.get("site")), None)
        if last is None or last[2] != event.time_ms:
            return  # not a durable-state call, or one this recorder left out
        key, index, _ = last
        ops = self._ops[key]
        ops[index] = attrs.evolve(ops[index], complete_ms=None, answer=UNKNOWN)
        self._unknown += 1

    def audit(self, view: Any) -> None:
        for key in sorted(self._ops):
            verdict = check_object(self._ops[key], self._model, key, self._budget_steps)
            left_out = self._full.get(key, 0)
            self._steps += verdict.steps
            if verdict.outcome == "unknown":
                self._too_costly += 1
            elif verdict.outcome == "ok":
                self.checks += 1
            elif verdict.outcome == "violation":
                self.checks += 1
                self.fail(verdict.describe() + (f"\n(judged on its first {len(self._ops[key])} operations; "
                                                f"{left_out} more left out)" if left_out else ""), related=(key,))

    def metrics(self) -> dict[str, Any]:
        return {"history_keys_too_costly": self._too_costly, "history_ops_unknown": self._unknown,
                "history_ops_left_out": sum(self._full.values()), "history_search_steps": self._steps}
