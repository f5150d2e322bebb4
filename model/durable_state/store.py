"""The durable-state store SPI: a dumb keyed compare-and-set store.

A store maps a key to one record ``(contract_version, revision, payload)``.
It knows nothing about contracts, schemas or migrations — those live in the
layer above — so any contract version is accepted and the same row can serve
any contract version. The rules every backend follows:

- ``load(key)`` returns the record, or ``None`` when the key is absent.
- Revisions start at 1 and increase by exactly one per successful ``save``.
- ``save(key, write, expected_revision=0)`` creates the key; it conflicts when
  the key exists (``actual`` = its revision).
- ``save(key, write, expected_revision=n)`` with ``n > 0`` succeeds only when
  the stored revision is ``n``; the new record has revision ``n + 1``.
- Any mismatch raises :class:`RevisionConflictError` carrying ``key``,
  ``expected`` and ``actual`` (``0`` when the key is absent) and changes
  nothing.
- ``clear(key)`` removes the key and is idempotent; afterwards a save with
  ``expected_revision=0`` creates revision 1 again.
- Payloads are JSON values, copied both ways: mutating a payload after saving
  it, or a payload returned by ``load``/``save``, never changes the store.
- Arguments are validated before the store is touched (``TypeError`` for a
  wrong type, ``ValueError`` for a wrong value).

Conflicts are recognised by *name* (:func:`is_revision_conflict`), not by
class, so a third-party backend may raise its own ``RevisionConflictError``.

The helpers :func:`check_key`, :func:`check_save_arguments` and
:func:`encode_payload` / :func:`decode_payload` are public so that every
backend (ours and a user's) validates and encodes identically; the in-memory
and SQLite backends store the very same JSON text for the same payload.
"""
from __future__ import annotations

import json
from typing import Protocol, runtime_checkable

import attrs

from model.bounds import INT64_MAX

__all__ = [
    "INT64_MAX",
    "DurableStateRecord",
    "DurableStateStore",
    "DurableStateWrite",
    "RevisionConflictError",
    "check_key",
    "check_save_arguments",
    "decode_payload",
    "encode_payload",
    "is_revision_conflict",
    "next_revision",
]

# Revisions and contract versions are stored as SQLite INTEGER (signed 64-bit,
# ``model.bounds``); bounding them here keeps every backend's accepted range identical.


@attrs.frozen
class DurableStateRecord:
    """What a store holds under one key. ``payload`` is a JSON value."""

    contract_version: int
    revision: int
    payload: object


@attrs.frozen
class DurableStateWrite:
    """What ``save`` writes: the envelope without its revision."""

    contract_version: int
    payload: object


class RevisionConflictError(Exception):
    """A save whose ``expected_revision`` did not match the stored revision.

    ``actual`` is the stored revision at the time of the save, ``0`` when the
    key was absent. The store is unchanged by the rejected save.
    """

    # Conformance matches conflicts by this name, not by class,
    # so third-party backends need not import this module.
    name = "RevisionConflictError"

    def __init__(self, key: str, expected: int, actual: int) -> None:
        assert isinstance(key, str), key
        assert isinstance(expected, int) and expected >= 0, expected
        assert isinstance(actual, int) and actual >= 0, actual
        # A conflict is by definition a mismatch; equal revisions here would
        # mean a backend rejected a save it should have accepted.
        assert expected != actual, (key, expected, actual)
        self.key = key
        self.expected = expected
        self.actual = actual
        if actual == 0:
            found = "the key is absent"
        else:
            found = f"the stored revision is {actual}"
        if expected == 0:
            wanted = "expected to create it (expected_revision=0)"
        else:
            wanted = f"expected revision {expected}"
        super().__init__(f"revision conflict on durable-state key {key!r}: {wanted}, but {found}")

    def __reduce__(self):  # keep it picklable across worker processes
        return (type(self), (self.key, self.expected, self.actual))


def is_revision_conflict(exc: BaseException) -> bool:
    """True when ``exc`` is a revision conflict from any backend (matched by name)."""
    cls = type(exc)
    return getattr(cls, "name", None) == "RevisionConflictError" or cls.__name__ == "RevisionConflictError"


def next_revision(key: str, expected_revision: int, actual_revision: int) -> int:
    """The CAS rule: the revision a save creates, or the conflict it raises.

    ``actual_revision`` is the stored revision, ``0`` when the key is absent.
    """
    if expected_revision != actual_revision:
        raise RevisionConflictError(key, expected_revision, actual_revision)
    return actual_revision + 1


@runtime_checkable
class DurableStateStore(Protocol):
    """The SPI. Structural: a backend need not inherit from anything.

    See the module docstring for the rules; ``model.durable_state.conformance``
    checks them against any backend.
    """

    async def load(self, key: str) -> DurableStateRecord | None:
        """The record under ``key``, or ``None`` when absent."""

    async def save(self, key: str, write: DurableStateWrite, expected_revision: int) -> DurableStateRecord:
        """Compare-and-set: write when the stored revision is ``expected_revision``."""

    async def clear(self, key: str) -> None:
        """Remove ``key``. Idempotent."""


# --- argument validation -----------------------------------------------------


def check_key(key: object) -> None:
    """Raise unless ``key`` is a non-empty str that is valid Unicode."""
    if not isinstance(key, str):
        raise TypeError(f"durable-state key must be a str, got {type(key).__name__}")
    if not key:
        raise ValueError("durable-state key must be a non-empty str")
    # A lone surrogate cannot be stored as UTF-8 (SQLite would fail mid-call);
    # reject it up front in every backend so they all accept the same keys.
    if not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"durable-state key must be valid Unicode (no lone surrogates), got {key!r}") from None


def _check_count(what: str, value: object, minimum: int, maximum: int) -> None:
    # bool is an int subclass; True as a revision is always a caller bug.
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{what} must be in [{minimum}, {maximum}], got {value}")


def check_save_arguments(key: object, write: object, expected_revision: object) -> None:
    """Validate ``save``'s arguments (not the payload: see :func:`encode_payload`)."""
    check_key(key)
    if not isinstance(write, DurableStateWrite):
        raise TypeError(f"write must be a DurableStateWrite, got {type(write).__name__}")
    _check_count("contract_version", write.contract_version, 1, INT64_MAX)
    # The new record gets expected_revision + 1, which must still fit.
    _check_count("expected_revision", expected_revision, 0, INT64_MAX - 1)


# --- payload encoding -----------------------------------------------------------
#
# One encoding for every backend: compact, sorted keys, raw UTF-8, NaN and
# Infinity rejected. This is the hot path of every save and load (a year-long
# sentinel run makes ~200k of them), so it calls the C accelerators directly:
# JSONEncoder.encode rebuilds a C encoder on every call and JSONDecoder.decode
# runs two regex matches for whitespace we never write — together about half
# the cost of encoding a small payload. Without the accelerators (another
# Python implementation) the plain json API is used; the output is identical.
#
# The C encoder is built without a cycle-marker dict (markers=None): a marker
# dict left dirty by a failed encode could misreport a later payload as
# circular. A cycle then surfaces as RecursionError, which encode_payload
# turns into a ValueError naming the path.


def _reject_non_json(value: object) -> object:
    raise TypeError(type(value).__name__)


_ENCODER_ARGS = dict(allow_nan=False, separators=(",", ":"), sort_keys=True)
_DECODER = json.JSONDecoder()
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_c_encode_basestring = getattr(json.encoder, "c_encode_basestring", None)
_c_encode_basestring_ascii = getattr(json.encoder, "c_encode_basestring_ascii", None)

if _c_make_encoder is not None and _c_encode_basestring is not None and _c_encode_basestring_ascii is not None:
    # positional: markers, default, encoder, indent, key_separator,
    # item_separator, sort_keys, skipkeys, allow_nan
    _c_utf8 = _c_make_encoder(None, _reject_non_json, _c_encode_basestring, None, ":", ",", True, False, False)
    _c_ascii = _c_make_encoder(None, _reject_non_json, _c_encode_basestring_ascii, None, ":", ",", True, False, False)

    def _encode_utf8(payload: object) -> str:
        return "".join(_c_utf8(payload, 0))

    def _encode_ascii(payload: object) -> str:
        return "".join(_c_ascii(payload, 0))

    _scan_once = _DECODER.scan_once

    def _decode(text: str) -> object:
        try:
            value, end = _scan_once(text, 0)
        except StopIteration:
            end = -1
        if end != len(text):
            # Not text we wrote (leading/trailing whitespace, or corrupt):
            # the full decoder accepts the former and explains the latter.
            return _DECODER.decode(text)
        return value

else:  # pragma: no cover - CPython always has the accelerators
    _encode_utf8 = json.JSONEncoder(ensure_ascii=False, **_ENCODER_ARGS).encode
    _encode_ascii = json.JSONEncoder(ensure_ascii=True, **_ENCODER_ARGS).encode
    _decode = _DECODER.decode


def encode_payload(payload: object) -> tuple[str, object]:
    """Validate a JSON value and encode it.

    Returns ``(text, copy)``: the JSON text to store and a fresh deep copy of
    the payload decoded from that text (what a store hands back to its caller,
    sharing nothing with ``payload`` or with the store).

    Raises ``TypeError`` for anything that does not round-trip through JSON
    unchanged (sets, bytes, tuples, non-str dict keys, arbitrary objects) and
    ``ValueError`` for NaN, Infinity and circular structures.
    """
    try:
        text = _encode_utf8(payload)
    except (TypeError, ValueError, RecursionError) as exc:
        raise _payload_error(payload, exc) from None
    # ensure_ascii=False writes lone surrogates raw; they are valid JSON
    # (escaped) but not valid UTF-8, so such payloads are stored escaped.
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = _encode_ascii(payload)
    copy = _decode(text)
    # JSON quietly turns tuples into lists and int keys into str keys; a
    # store must hand back exactly what it was given, so equality is the
    # check (a C-level comparison, cheap next to the encoding itself).
    if copy != payload:
        raise _payload_error(payload, None)
    return text, copy


def decode_payload(text: str) -> object:
    """Decode stored JSON text into a fresh JSON value."""
    return _decode(text)


_JSON_SCALARS = (str, int, float, bool, type(None))
_PAYLOAD_DEPTH_MAX = 10_000


def _payload_error(payload: object, cause: BaseException | None) -> Exception:
    """A TypeError/ValueError naming the first offending path. Error path only."""
    found = _find_non_json(payload)
    if found is None:
        kind = TypeError if cause is None or isinstance(cause, TypeError) else ValueError
        path, problem = "$", f"does not round-trip through JSON unchanged ({cause or 'decoded value differs'})"
    else:
        path, problem, kind = found
    return kind(f"durable-state payload is not a JSON value: {path} {problem}")


def _find_non_json(payload: object) -> tuple[str, str, type[Exception]] | None:
    # Iterative, bounded walk; `active` holds ids of containers on the current
    # path only for cycle detection (never for ordering).
    stack: list[tuple[str, object, bool]] = [("$", payload, False)]
    active: set[int] = set()
    steps = 0
    while stack:
        steps += 1
        if steps > 10_000_000:
            return ("$", "is too large to check", ValueError)
        path, value, leaving = stack.pop()
        if leaving:
            active.discard(id(value))
            continue
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                return (path, f"is {value!r} (NaN and Infinity are not JSON)", ValueError)
            continue
        if isinstance(value, _JSON_SCALARS):
            continue
        if isinstance(value, (dict, list)):
            if id(value) in active:
                return (path, "is circular", ValueError)
            if len(active) >= _PAYLOAD_DEPTH_MAX:
                return (path, "is nested too deeply", ValueError)
            active.add(id(value))
            stack.append((path, value, True))
            if isinstance(value, dict):
                children = []
                for k, v in value.items():
                    if not isinstance(k, str):
                        return (path, f"has a non-str key {k!r} ({type(k).__name__})", TypeError)
                    children.append((f"{path}[{k!r}]", v, False))
            else:
                children = [(f"{path}[{i}]", v, False) for i, v in enumerate(value)]
            stack.extend(reversed(children))
            continue
        return (path, f"has type {type(value).__name__}", TypeError)
    return None
