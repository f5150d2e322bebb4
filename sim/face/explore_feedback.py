"""The feedback of ``loomsim explore`` that needs the model: ledger state transitions.

``LedgerTransitions`` watches every ledger call a run makes as it commits
(a port observer, as the ``reference-model`` oracle is) and keeps a plain
model of the ledger of its own (``scenarios.reference.ledger``), so it knows
the state a submission was in *before* each call: it reads the state, then
lets its model apply the call. Each call of a lifecycle operation is one
feature ``transition:<state>/<operation>/<answer>``, the answer being
``applied`` (the store answered a value), ``none`` (it answered nothing to
do, as a claim of an unclaimable head does) or ``refused-<ErrorName>`` (a
typed refusal). A fault that hit a ledger call gets the state the call
found: ``port:<site>/<kind>/<state>`` (``fault_states``).

The universe of the family (``TRANSITION_UNIVERSE``, for ``never_taken``):
every (state, operation) pair the lifecycle table (``model.ledger.states.
TRANSITIONS``) allows, for the operations that are ledger port methods,
answered ``applied``, in the table's order. Refusals and no-ops are reached
beyond it.

It only observes: it never raises into the run (a call its model cannot
follow ends its watching for that run) and draws nothing random, so an
observed run has the trace digest of an unobserved one.
"""
from __future__ import annotations

from typing import Any, Iterable

from model.ledger.states import OPERATIONS, STATES, TRANSITIONS
from scenarios.reference.ledger import ReferenceLedger
from scenarios.reference.ledger_rows import BY_SUBMISSION, BY_TOKEN, PARAMS

PORT = "ledger"
# The lifecycle operations that are port methods (``join``, ``settle_joined`` are a host's effects on followers).
PORT_OPERATIONS = tuple(op for op in OPERATIONS if op in PARAMS)
TRANSITION_UNIVERSE = tuple(f"transition:{state}/{op}/applied" for state in STATES for op in TRANSITIONS[state]
                            if op in PARAMS)
# Faults a port records after the call committed (so after its observers saw it).
AFTER_COMMIT_KINDS = frozenset({"ack-lost", "reply-lost"})
ABSENT = "absent"  # a call naming a submission the ledger does not hold
EMPTY = "empty"  # a claim of a conversation with no open submission


def answer_class(call: Any) -> str:
    if call.error is not None:
        name = getattr(type(call.error), "name", None)
        return f"refused-{name if isinstance(name, str) and name else type(call.error).__name__}"
    return "none" if call.result is None else "applied"


class LedgerTransitions:
    """One run's ledger transitions (an ``sim.explore.Observer``)."""

    def __init__(self) -> None:
        self._model = ReferenceLedger()
        self._own = True  # False: the run's reference-model oracle's, which applies each call itself
        self._found: set[str] = set()
        self._states: dict[int, str] = {}
        self._world: Any = None
        self._next_fault = 0  # index in ``world.fault_events`` of the first not yet given a state
        self._last: tuple[str, str] | None = None  # (site, state) of the last call seen
        self._broken = False

    def attach(self, world: Any) -> None:
        """Watch the run's ledger calls. Where the run's ``reference-model``
        oracle already keeps a reference ledger, read its state just before it
        applies each call (half the cost); else keep one of our own."""
        self._world = world
        observers = world.port_observers
        for position, observe in enumerate(observers):
            references = getattr(getattr(observe, "__self__", None), "_references", None)
            shared = references.get(PORT) if isinstance(references, dict) else None
            if shared is not None and isinstance(shared[0], ReferenceLedger):
                self._model, self._own = shared[0], False
                observers.insert(position, self.on_port_call)
                return
        observers.append(self.on_port_call)

    def on_port_call(self, call: Any) -> None:
        if call.port != PORT or self._broken:
            return
        try:
            state = self._state_before(call)
            if state is not None:
                self._found.add(f"transition:{state}/{call.method}/{answer_class(call)}")
            self._fault_states(f"{PORT}.{call.method}", state)
            self._last = (f"{PORT}.{call.method}", state) if state is not None else None
            if self._own:
                self._model.observe(call)
        except Exception:  # noqa: BLE001 - feedback only: never fail the run it watches
            self._broken = True

    def _state_before(self, call: Any) -> str | None:
        method = call.method
        if method not in PORT_OPERATIONS:
            return None
        model = self._model
        first = call.args[0] if call.args else next(iter(call.kwargs.values()), None)
        if method in BY_TOKEN:
            row = model._rows.get(getattr(first, "submission_id", None))
        elif method in BY_SUBMISSION:
            row = model._rows.get(first) if type(first) is str else None
        else:  # claim: the submission it granted, or the conversation's head
            granted = getattr(call.result, "submission_id", None)
            row = model._rows.get(granted) if granted is not None else None
            if row is None:
                conversation = model._conversations.get(first) if type(first) is str else None
                if conversation is None or not conversation.open:
                    return EMPTY
                row = next(iter(conversation.open.values()))
        return ABSENT if row is None else model._state(row)

    def _fault_states(self, site: str, state: str | None) -> None:
        """Give the faults fired since the last call their state: one fired
        after the last call committed (a lost ack) the last call's, one fired
        on the way into this call this call's."""
        events = self._world.fault_events
        for index in range(self._next_fault, len(events)):
            event = events[index]
            if self._last is not None and event.kind in AFTER_COMMIT_KINDS and event.site == self._last[0]:
                self._states[index] = self._last[1]
            elif state is not None and event.site == site and event.kind not in AFTER_COMMIT_KINDS:
                self._states[index] = state
        self._next_fault = len(events)

    def features(self) -> Iterable[str]:
        if self._world is not None and not self._broken:
            self._fault_states("", None)
        return sorted(self._found)

    def fault_states(self) -> dict[int, str]:
        return dict(self._states)

    def close(self) -> None:
        self._world = None
