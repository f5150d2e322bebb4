"""Reference models of the ports: the contract, executable, written apart.

Why: the stores, the digests and the other oracles share the model's own
rules (``model/*/rules.py``, ``model/canonical.py``), so a wrong rule is
self-consistent and invisible. A reference here is a deliberately simple
model of one port's contract — plain dicts and lists, its own RFC 8785
encoder (``jcs.py``) — sharing no logic with the adapters (only the record
and error *types* the ports return, to read typed answers). The
``reference-model`` oracle (``scenarios/invariants/reference_model.py``)
shows each reference every store call as it commits
(``faults.ports.PortCall``): the reference works out what the contract says
the answer is, compares it with the store's (same result, same typed error
by name, same fields, same digests) and applies the call's effect to its
own state.

The ``Reference`` protocol: ``port`` (the PortCall port it models) and
``observe(call)`` -> None (the answer agrees) or the divergence: one
paragraph naming the call, the store's answer, the model's answer and the
last few calls on that key. Optional members the oracle uses when present:

- ``scope`` (default: ``port``): references with one scope share keys
  (the log and its checkpoints are both keyed by conversation);
- ``key_of(call)``: the key a call touches (default: the port itself);
- ``forget(key)``: drop a diverged key's state (no longer checked);
- ``audit(view)``: ``[(key, message or None), ...]``, one entry per key
  compared — the end state against the stores, read through the system's
  ``AuditView`` (None: that key agrees).

Rules every reference follows: a call whose answer a read fault damaged
(``call.damaged``) is applied but not compared; a store error that says
``retryable`` (a real write contention) is an answer the contract allows
and means nothing happened; where the contract leaves a value to the store,
the reference adopts it on first sight and checks every later use.
Memory: a reference holds what the stores hold, no more; per-key histories
are bounded deques, dropped when the key is.
"""
from __future__ import annotations

import json
from collections import deque
from typing import Any, Callable, Protocol, runtime_checkable

__all__ = ["EXACT", "HISTORY_MAX", "MISSING", "Reference", "Refused", "History", "bind", "divergence",
           "error_name", "exact_json", "judge", "references", "retryable", "show"]

#: How many recent calls on a key a divergence message shows.
HISTORY_MAX = 8
#: How much of one value a message shows.
SHOW_CHARS_MAX = 240


@runtime_checkable
class Reference(Protocol):
    port: str

    def observe(self, call: Any) -> str | None:
        """None when the store's answer is the contract's; else the divergence."""
        ...


def references() -> dict[str, Reference]:
    """A fresh reference per port name (one run's worth of state)."""
    # Imported here: the references import this module's shared pieces.
    from scenarios.reference.checkpoints import ReferenceCheckpoints
    from scenarios.reference.content import ReferenceContent
    from scenarios.reference.durable_state import ReferenceDurableState
    from scenarios.reference.ledger import ReferenceLedger
    from scenarios.reference.log import ReferenceLog

    log = ReferenceLog()
    found: list[Reference] = [ReferenceDurableState(), ReferenceLedger(), log, ReferenceCheckpoints(log),
                              ReferenceContent()]
    # The kernel's execution store, schedule cursors, the pin index, the findings projection.
    from scenarios.reference.findings import ReferenceFindings
    from scenarios.reference.kernel import ReferenceKernel
    from scenarios.reference.pins import ReferencePins
    from scenarios.reference.schedules import ReferenceSchedules

    found += [ReferenceKernel(), ReferenceSchedules(), ReferencePins(), ReferenceFindings()]
    return {reference.port: reference for reference in found}


# --- shared pieces ----------------------------------------------------------------


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


#: A field an answer does not have.
MISSING: Any = _Missing()

#: ``json.dumps`` arguments that spell a JSON value exactly: types kept
#: (``1``, ``1.0`` and ``true`` differ), member order irrelevant, every
#: string escaped to ASCII (lone surrogates included).
EXACT = dict(sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def exact_json(value: object) -> str:
    """A JSON value as text two equal values (with equal types) share."""
    return json.dumps(value, **EXACT)


def error_name(error: BaseException) -> str:
    """A typed error's name: its class's ``name``, else the class name."""
    name = getattr(type(error), "name", None)
    return name if isinstance(name, str) and name else type(error).__name__


class Refused:
    """The typed error the contract says a call raises: its name and the
    structured fields that must match (``kind``, ``actual``, ...)."""

    __slots__ = ("name", "fields")

    def __init__(self, name: str, **fields: Any) -> None:
        self.name = name
        self.fields = fields

    def matches(self, error: BaseException) -> bool:
        if error_name(error) != self.name:
            return False
        return all(getattr(error, field, MISSING) == value for field, value in self.fields.items())

    def __repr__(self) -> str:
        inside = ", ".join(f"{field}={value!r}" for field, value in self.fields.items())
        return f"raises {self.name}({inside})"


def bind(call: Any, names: tuple[str, ...]) -> tuple:
    """The call's arguments in ``names`` order (positional, then by keyword).
    TypeError when they do not bind (the store raised TypeError too)."""
    args = call.args
    if len(args) > len(names):
        raise TypeError("too many arguments")
    if not call.kwargs:
        if len(args) == len(names):
            return args
        raise TypeError("missing arguments")
    kwargs = call.kwargs
    return tuple(args) + tuple(kwargs[name] for name in names[len(args):])


def bound_args(call: Any, names: tuple[str, ...], defaults: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The call's arguments by name (positional, then keyword, then
    ``defaults``); None when they do not bind (the store raised TypeError)."""
    if len(call.args) > len(names):
        return None
    bound = dict(zip(names, call.args))
    for name, value in call.kwargs.items():
        if name in bound or name not in names:
            return None
        bound[name] = value
    for name, value in (defaults or {}).items():
        bound.setdefault(name, value)
    return bound if len(bound) == len(names) else None


def valid_text(text: str) -> bool:
    """Whether a str has a UTF-8 form (no lone surrogate): the only text a
    store can keep, so the only text the contracts accept."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def same(value: object) -> object:
    """The answer as it is (a ``view`` for ``judge`` of plain values)."""
    return value


def show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHOW_CHARS_MAX else text[:SHOW_CHARS_MAX] + f"... ({len(text)} chars)"


class History:
    """The last HISTORY_MAX calls on each key, as small tuples (formatted
    only for a divergence message)."""

    __slots__ = ("_recent",)

    def __init__(self) -> None:
        self._recent: dict[str, deque] = {}

    def note(self, key: str, call: Any, brief: object, outcome: object) -> None:
        recent = self._recent.get(key)
        if recent is None:
            recent = self._recent[key] = deque(maxlen=HISTORY_MAX)
        recent.append((call.time_ms, call.node, call.method, brief, outcome))

    def drop(self, key: str) -> None:
        self._recent.pop(key, None)

    def text(self, key: str) -> str:
        recent = self._recent.get(key)
        if not recent:
            return "none"
        return "; ".join(f"[{time_ms} ms {node} {method}{show(brief)} -> {show(outcome)}]"
                         for time_ms, node, method, brief, outcome in recent)


def _store_answer(call: Any, view: Callable[[Any], Any]) -> Any:
    if call.error is not None:
        return call.error
    try:
        return view(call.result)
    except Exception as error:  # noqa: BLE001 - an answer of the wrong shape is a divergence, shown
        return _Unreadable(call.result, error)


class _Unreadable:
    """A store answer the contract's shape does not fit."""

    __slots__ = ("result", "error")

    def __init__(self, result: Any, error: BaseException) -> None:
        self.result = result
        self.error = error

    def __repr__(self) -> str:
        return f"{show(self.result)} (not the contract's shape: {type(self.error).__name__}: {self.error})"


def _answer_text(answer: Any) -> str:
    if isinstance(answer, BaseException):
        fields = ", ".join(f"{field}={value!r}" for field, value in getattr(answer, "__dict__", {}).items()
                           if not field.startswith("_") and field != "cause")
        if not fields and str(answer):  # an untyped error: its message is all there is to show
            fields = show(str(answer))
        if len(fields) > SHOW_CHARS_MAX:
            fields = fields[:SHOW_CHARS_MAX] + "..."
        return f"raises {error_name(answer)}({fields})"
    return f"returns {show(answer)}"


def judge(call: Any, key: str, expected: Any, view: Callable[[Any], Any], history: History,
          args_text: str | None = None) -> str | None:
    """Compare the store's answer with the contract's ``expected`` answer
    (a ``Refused``, or what ``view(result)`` must equal). None when they
    agree; else the divergence message."""
    if call.damaged:
        return None
    error = call.error
    if isinstance(expected, Refused):
        if error is not None and expected.matches(error):
            return None
    elif error is None:
        answer = _store_answer(call, view)
        if not isinstance(answer, _Unreadable) and answer == expected:
            return None
    store = _store_answer(call, view)
    model = repr(expected) if isinstance(expected, Refused) else f"returns {show(expected)}"
    return divergence(call, key, _answer_text(store), model, history, args_text)


def divergence(call: Any, key: str, store: str, model: str, history: History, args_text: str | None = None) -> str:
    """One paragraph: the call, both answers, the recent calls on the key."""
    if args_text is None:
        shown = [show(a) for a in call.args] + [f"{k}={show(v)}" for k, v in call.kwargs.items()]
        args_text = ", ".join(shown)
    return (f"{call.node} {call.port}.{call.method}({args_text}) at {call.time_ms} ms: the store {store}, "
            f"the contract's reference model {model}; last calls on {key!r}: {history.text(key)}")


def retryable(error: BaseException | None) -> bool:
    """A store error that says nothing happened (a real write contention)."""
    return error is not None and getattr(error, "retryable", False) is True


class PortReference:
    """What the port references share: a call's key (its first argument, or
    an attribute of the object a ``KEY_FROM`` method takes), dispatch by
    method (a retryable store error: nothing happened, nothing to judge),
    and forgetting a diverged key. A subclass sets ``_handlers``,
    ``_history`` and ``_table`` (the dict of what the model holds by key)."""

    KEY_PARAM = "conversation_id"
    KEY_FROM: dict[str, tuple[str, str]] = {}  # method -> (argument, its attribute holding the key)
    _handlers: dict[str, Callable[[Any], "str | None"]]
    _history: History

    def _table(self) -> dict:
        raise NotImplementedError

    def key_of(self, call: Any) -> str:
        source = self.KEY_FROM.get(call.method)
        if source is not None:
            holder = call.args[0] if call.args else call.kwargs.get(source[0])
            key = getattr(holder, source[1], None)
        else:
            key = call.args[0] if call.args else call.kwargs.get(self.KEY_PARAM)
        return key if isinstance(key, str) else repr(key)

    def forget(self, key: str) -> None:
        self._table().pop(key, None)
        self._history.drop(key)

    def observe(self, call: Any) -> "str | None":
        handler = self._handlers.get(call.method)
        if handler is None or retryable(call.error):
            return None  # a retryable store error: nothing happened
        return handler(call)
