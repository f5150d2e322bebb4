"""A history on disk (``loomsim-history/1``): what a process records of its
store calls (``HistoryWriter``) and ``loomsim check-history`` judges.

JSON Lines. The first line is the header, ``{"format": "loomsim-history/1",
"source": "live" | "simulated", ...}`` (any other fields describe the run).
Then, in the order they happened in the writing process, an invocation

    {"invoke": ID, "process": P, "model": KIND, "key": K, "op": NAME, "args": [...], "at_ms": T}

written (and flushed) *before* the call, and its completion

    {"complete": ID, "at_ms": T, "answer": A}

written after it. An invocation with no completion — the process was killed
mid-call, or its caller never saw the reply — is an ``UNKNOWN`` operation,
as Jepsen's indeterminate ``:info`` operations: it may or may not have taken
effect, at any instant after its invocation. Writing the invocation first is
what makes a SIGKILL leave a usable history: a killed process's file ends
with whole lines, and at most its last line is cut (a cut last line is
dropped when read: that write never finished).

``KIND`` names a sequential model of ``scenarios.reference.history``
(``durable-state``, ``conversation-log``, ``submission-lease``). An answer
is JSON with arrays for the models' tuples; a typed error the caller saw is
``{"failed": NAME, "actual": N | null}``. Several files (one per process)
are one history: op ids are renumbered in file order, and the objects are
(kind, key) pairs.
"""
from __future__ import annotations

import json
import os
from typing import Any, Iterable, Sequence, TextIO

from scenarios.reference.history import UNKNOWN, Failed, LeaseModel, LogModel, Op, RegisterModel, SequentialModel

FORMAT = "loomsim-history/1"
SOURCES = ("live", "simulated")
MODELS: dict[str, type] = {RegisterModel.kind: RegisterModel, LogModel.kind: LogModel,
                           LeaseModel.kind: LeaseModel}
# Each model's operations and their arguments, as data: a file's operation
# is checked against it before any model sees it. "int" an integer, "str" a
# string, "entries" a non-empty array, "any" any JSON value.
SIGNATURES: dict[str, dict[str, tuple[str, ...]]] = {
    RegisterModel.kind: {"read": (), "cas": ("int", "any"), "clear": ()},
    LogModel.kind: {"read": ("int", "int"), "tail": (), "append": ("int", "entries")},
    LeaseModel.kind: {"claim": ("str", "int", "int"), "renew": ("str", "int", "int", "int"),
                      "release": ("str", "int"), "settle": ("str", "int")},
}
LINE_CHARS_MAX = 1 << 20  # one operation's line, at most (a longer one is refused, not read)
OPS_MAX = 5_000_000  # operations a check reads, at most, over every file
FILES_MAX = 1_024
_INVOKE_FIELDS = frozenset({"invoke", "process", "model", "key", "op", "args", "at_ms"})
_COMPLETE_FIELDS = frozenset({"complete", "at_ms", "answer"})


class HistoryFileError(ValueError):
    """A history file that cannot be read as one: its path, line and why, in one line."""

    name = "HistoryFileError"


def encode_answer(answer: object) -> object:
    if isinstance(answer, Failed):
        return {"failed": answer.error, "actual": answer.actual}
    return _to_json(answer)


def _to_json(value: object) -> object:
    if isinstance(value, (tuple, list)):
        return [_to_json(v) for v in value]
    return value


def _from_json(value: object) -> object:
    if isinstance(value, list):
        return tuple(_from_json(v) for v in value)
    return value


class HistoryWriter:
    """Appends one process's history to ``handle`` (a text file of its own),
    each line flushed as written: ``invoke`` before the call, ``complete``
    after it. Op ids count from 0 in this file."""

    def __init__(self, handle: TextIO, *, source: str, fsync: bool = False, **header: Any) -> None:
        assert source in SOURCES, source
        self._handle = handle
        self._fsync = fsync
        self._next_id = 0
        self._write({"format": FORMAT, "source": source, **header})

    def invoke(self, process: str, model: str, key: str, op: str, args: Sequence[Any], at_ms: int) -> int:
        assert model in MODELS, model
        op_id = self._next_id
        self._next_id += 1
        self._write({"invoke": op_id, "process": process, "model": model, "key": key, "op": op,
                     "args": _to_json(list(args)), "at_ms": at_ms})
        return op_id

    def complete(self, op_id: int, at_ms: int, answer: object) -> None:
        assert answer is not UNKNOWN, "an unknown answer is a missing completion"
        self._write({"complete": op_id, "at_ms": at_ms, "answer": encode_answer(answer)})

    def _write(self, body: dict[str, Any]) -> None:
        self._handle.write(json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n")
        self._handle.flush()
        if self._fsync:
            os.fsync(self._handle.fileno())


def write_history(handle: TextIO, ops: Iterable[Op], models: dict[str, str], *, source: str,
                  **header: Any) -> None:
    """A finished history (``models``: key -> model kind) as a file: each
    operation's invocation, then (unless UNKNOWN) its completion, in
    invocation order."""
    writer = HistoryWriter(handle, source=source, **header)
    for op in sorted(ops, key=lambda o: (o.invoke_ms, o.op_id)):
        op_id = writer.invoke(op.process, models[op.key], op.key, op.name, op.args, op.invoke_ms)
        if op.answer is not UNKNOWN:
            assert op.complete_ms is not None
            writer.complete(op_id, op.complete_ms, op.answer)


def _answer(value: object, where: str) -> object:
    if isinstance(value, dict):
        if set(value) != {"failed", "actual"} or not isinstance(value["failed"], str) or not (
                value["actual"] is None or _is_int(value["actual"])):
            raise HistoryFileError(f"{where}: an answer object must be {{\"failed\": NAME, \"actual\": N or null}}")
        return Failed(value["failed"], value["actual"])
    return _from_json(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_histories(paths: Sequence[str]) -> tuple[list[Op], dict[str, SequentialModel], list[dict[str, Any]]]:
    """Every file's operations as one history (object key ``"<kind> <key>"``),
    the model of each object, and the files' headers. ``HistoryFileError``
    names the first thing wrong."""
    if not paths:
        raise HistoryFileError("no history file given")
    if len(paths) > FILES_MAX:
        raise HistoryFileError(f"{len(paths)} history files: at most {FILES_MAX}")
    ops: list[Op] = []
    models: dict[str, SequentialModel] = {}
    instances: dict[str, SequentialModel] = {}
    headers = []
    for path in paths:
        headers.append(_read_one(path, ops, models, instances))
    return ops, models, headers


def _read_one(path: str, ops: list[Op], models: dict[str, SequentialModel],
              instances: dict[str, SequentialModel]) -> dict[str, Any]:
    try:
        handle = open(path, encoding="utf-8")
    except OSError as error:
        raise HistoryFileError(f"{path}: cannot read: {error.strerror or error}") from None
    pending: dict[int, dict[str, Any]] = {}
    done: set[int] = set()
    header: dict[str, Any] | None = None
    with handle:
        try:
            lines = list(_lines(handle, path))
        except UnicodeDecodeError:
            raise HistoryFileError(f"{path}: not UTF-8 text: not a history file") from None
    for number, (text, last) in enumerate(lines, start=1):
        where = f"{path}:{number}"
        try:
            body = json.loads(text)
        except ValueError:
            if last and number > 1 and not text.endswith("\n"):
                break  # the last write of a killed process, cut: it never happened
            raise HistoryFileError(f"{where}: not a JSON line") from None
        if not isinstance(body, dict):
            raise HistoryFileError(f"{where}: expected a JSON object")
        if header is None:
            if body.get("format") != FORMAT:
                raise HistoryFileError(f"{where}: not a {FORMAT} file (its first line names format "
                                       f"{body.get('format')!r})")
            if body.get("source") not in SOURCES:
                raise HistoryFileError(f"{where}: source must be one of {', '.join(SOURCES)}")
            header = body
            continue
        if "invoke" in body:
            if set(body) != _INVOKE_FIELDS:
                raise HistoryFileError(f"{where}: an invocation has exactly the fields {sorted(_INVOKE_FIELDS)}")
            op_id = body["invoke"]
            if not _is_int(op_id) or op_id in pending or op_id in done:
                raise HistoryFileError(f"{where}: invocation id {op_id!r} is not a new integer")
            if body["model"] not in MODELS:
                raise HistoryFileError(f"{where}: unknown model {body['model']!r} (expected one of "
                                       f"{', '.join(MODELS)})")
            for field in ("process", "key", "op"):
                if not isinstance(body[field], str):
                    raise HistoryFileError(f"{where}: {field} must be a string")
            if not isinstance(body["args"], list) or not _is_int(body["at_ms"]):
                raise HistoryFileError(f"{where}: args must be an array and at_ms an integer")
            _check_signature(body, where)
            pending[op_id] = body
        elif "complete" in body:
            if set(body) != _COMPLETE_FIELDS:
                raise HistoryFileError(f"{where}: a completion has exactly the fields {sorted(_COMPLETE_FIELDS)}")
            op_id = body["complete"]
            invoked = pending.pop(op_id, None) if _is_int(op_id) else None
            if invoked is None:
                raise HistoryFileError(f"{where}: completion of {op_id!r}, which is not an invocation awaiting one")
            if not _is_int(body["at_ms"]) or body["at_ms"] < invoked["at_ms"]:
                raise HistoryFileError(f"{where}: completion of {op_id} at {body['at_ms']!r} ms, before its "
                                       f"invocation at {invoked['at_ms']} ms")
            _add(ops, models, instances, invoked, body["at_ms"], _answer(body["answer"], where), where)
            done.add(op_id)
        else:
            raise HistoryFileError(f"{where}: a line is an invocation or a completion")
    if header is None:
        raise HistoryFileError(f"{path}: empty: not a {FORMAT} file")
    for invoked in pending.values():  # never answered: UNKNOWN
        _add(ops, models, instances, invoked, None, UNKNOWN, path)
    return header


def _check_signature(body: dict[str, Any], where: str) -> None:
    operations = SIGNATURES[body["model"]]
    signature = operations.get(body["op"])
    if signature is None:
        raise HistoryFileError(f"{where}: {body['model']} has no operation {body['op']!r} (expected one of "
                               f"{', '.join(operations)})")
    args = body["args"]
    wrong = len(args) != len(signature) or any(
        (kind == "int" and not _is_int(arg)) or (kind == "str" and not isinstance(arg, str))
        or (kind == "entries" and not (isinstance(arg, list) and arg)) for kind, arg in zip(signature, args))
    if wrong:
        raise HistoryFileError(f"{where}: {body['model']} {body['op']} takes ({', '.join(signature)}), "
                               f"got {json.dumps(args)[:200]}")


def _lines(handle: TextIO, path: str) -> Iterable[tuple[str, bool]]:
    previous = None
    while True:
        text = handle.readline(LINE_CHARS_MAX + 1)
        if len(text) > LINE_CHARS_MAX:
            raise HistoryFileError(f"{path}: a line longer than {LINE_CHARS_MAX} characters")
        if previous is not None:
            yield previous, not text
        if not text:
            return
        previous = text


def _add(ops: list[Op], models: dict[str, SequentialModel], instances: dict[str, SequentialModel],
         invoked: dict[str, Any], complete_ms: int | None, answer: object, where: str) -> None:
    if len(ops) >= OPS_MAX:
        raise HistoryFileError(f"{where}: more than {OPS_MAX} operations")
    kind = invoked["model"]
    model = instances.get(kind)
    if model is None:
        model = instances[kind] = MODELS[kind]()
    key = f"{kind} {invoked['key']}"
    models[key] = model
    ops.append(Op(len(ops), invoked["process"], key, invoked["op"], _from_json(invoked["args"]),  # type: ignore[arg-type]
                  invoked["at_ms"], complete_ms, answer))
