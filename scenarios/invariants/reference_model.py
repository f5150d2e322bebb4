"""``reference-model``: every store call's answer is the contract's.

Each port call that reached a store (``faults.ports.PortCall``, shown to
``on_port_call`` as it committed) is judged by an independent reference
model of that port (``scenarios.reference``): plain dicts and lists and
their own RFC 8785 encoder, sharing none of the adapters' rules. Same
result, same typed error (by name), same fields, same digests; otherwise a
violation naming the call, both answers and the recent calls on that key.

The first divergence of a key fails the run and ends that key's checks
(the model no longer knows what the store holds there); other keys go on
being checked. At the audit, the model's end state (durable-state records,
log tails) is compared with the stores'. The checker holds what the stores
hold and bounded per-key histories: its memory follows the stores', not
simulated time.
"""
from __future__ import annotations

from typing import Any

from scenarios.reference import references
from sim.invariants import Checker


class ReferenceModel(Checker):
    name = "reference-model"
    kinds = ()

    def __init__(self) -> None:
        super().__init__()
        # port -> (reference, key_of, scope, forget): looked up once, not per call.
        self._references: dict[str, tuple[Any, Any, str, Any]] = {}
        for port, reference in references().items():
            self._references[port] = (reference, getattr(reference, "key_of", None),
                                      getattr(reference, "scope", port), getattr(reference, "forget", None))
        # (scope, key) of every key that diverged: membership only, never iterated.
        self._diverged: set[tuple[str, str]] = set()

    def on_port_call(self, call: Any) -> None:
        entry = self._references.get(call.port)
        if entry is None:
            return
        reference, key_of, scope, forget = entry
        key = key_of(call) if key_of is not None else call.port
        if self._diverged and (scope, key) in self._diverged:
            return
        try:
            message = reference.observe(call)
        except Exception as error:  # noqa: BLE001 - a call the model cannot judge is reported, never swallowed
            message = (f"{call.node} {call.port}.{call.method} at {call.time_ms} ms: the reference model could not "
                       f"judge the store's answer: {type(error).__name__}: {error}")
        if not call.damaged:
            self.checks += 1
        if message is not None:
            self._diverged.add((scope, key))
            if forget is not None:
                forget(key)
            self.fail(message, related=(key,))

    def audit(self, view: Any) -> None:
        for port, (reference, _, scope, _) in self._references.items():
            audit = getattr(reference, "audit", None)
            if audit is None:
                continue
            for key, message in audit(view):
                self.checks += 1
                if message is not None and (scope, key) not in self._diverged:
                    self._diverged.add((scope, key))
                    self.fail(message, related=(key,))

    def metrics(self) -> dict[str, Any]:
        return {"reference_calls_checked": self.checks}
