"""What every adversary shares: the one copy of each helper they judge
answers with (a typed refusal, an expected error by name, JSON sameness,
member order reversed, a content ref, a value sized onto a cap)."""
from __future__ import annotations

import hashlib
from typing import Any

from model.canonical import canonical_bytes, canonical_json
from model.retry import error_name


def _sized(n_bytes: int, extra: dict) -> dict:
    """A JSON object whose canonical encoding is exactly ``n_bytes`` long,
    holding ``extra`` and padding: the size lands on a cap, not near it."""
    value = {"pad": "", **extra}
    size = len(canonical_bytes(value))
    assert size <= n_bytes, (size, n_bytes)
    value["pad"] = "x" * (n_bytes - size)
    assert len(canonical_bytes(value)) == n_bytes
    return value



def _same_json(a: Any, b: Any) -> bool:
    """Equal as Python JSON values and types (1 is not 1.0, -0.0 is not
    0.0): the durable-state store hands back exactly what it was given."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return a.hex() == b.hex()
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    return a == b



def _canonical_equal(a: Any, b: Any) -> bool:
    return canonical_json(a) == canonical_json(b)



def digest_of(value: Any) -> str:
    """The digest of a JSON value: sha256 of its canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def _is_envelope(value: Any) -> bool:
    return type(value) is dict and "payload" in value and "recordId" in value


def _outcome_of(record: Any) -> Any:
    """The outcome of an outcome record or of a settlement envelope (its
    payload's, the peer's flat ``SubmissionSettled`` payload)."""
    return record["payload"]["outcome"] if _is_envelope(record) else record["outcome"]



def _reordered(value: Any) -> Any:
    """The same JSON value with every object's members inserted in reverse."""
    if type(value) is dict:
        return {k: _reordered(value[k]) for k in reversed(list(value))}
    if type(value) is list:
        return [_reordered(v) for v in value]
    return value



def _ref(data: bytes | str) -> str:
    """The content ref of ``data`` (text as its UTF-8 bytes), computed here,
    not by the store's helper: the store must agree with sha256 itself."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _typed(error: BaseException) -> bool:
    """A typed answer: the TypeError/ValueError argument validation raises,
    an error that names itself (``name``), or one of the system's own error
    classes (``model.*``). Never typed, whatever its class or name: a
    UnicodeError leaking from an encoder, an OverflowError, an AssertionError
    (a model assertion that fired is a bug, not a refusal); nor an
    AttributeError, a KeyError or a raw sqlite3 error."""
    if isinstance(error, (UnicodeError, AssertionError, OverflowError)):
        return False
    if type(error) in (TypeError, ValueError):
        return True
    name = getattr(type(error), "name", None)
    if isinstance(name, str) and name:
        return True
    return type(error).__module__.startswith("model.")


def _values(value: Any) -> int:
    """How many JSON values ``value`` is: every container and scalar, itself included."""
    count, pending = 0, [value]
    while pending:
        item = pending.pop()
        count += 1
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return count


async def _drained(stream: Any) -> tuple:
    """A stream's items, all of them (a stream method called as one call)."""
    return tuple([item async for item in stream])


def _same_record(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return (a.revision, a.contract_version) == (b.revision, b.contract_version) and _same_json(a.payload, b.payload)


def _matches(error: BaseException | None, names: tuple[str, ...]) -> bool:
    if error is None:
        return False
    for name in names:
        if name == "TypeError" and isinstance(error, TypeError):
            return True
        if name == "ValueError" and isinstance(error, ValueError) and not isinstance(error, UnicodeError):
            return True
        if error_name(error) == name:
            return True
    return False
