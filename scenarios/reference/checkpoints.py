"""Reference model of the checkpoint store (persistence §2.4, §8, STORE-007).

A checkpoint is bound to a canonical log position and its digest. The
contract, as plain rules over ``conversation -> {covered seq: checkpoint}``
and the log reference's state:

- ``save(checkpoint)``: arguments checked first (TypeError / ValueError,
  a snapshot with no canonical JSON form is a ValueError); an unknown
  conversation is ``NotMaterialized``; then ``CheckpointRejected`` with
  kind ``unsupported-version`` (schema version other than 1),
  ``ahead-of-tail`` (covers more than the log holds) or ``digest-mismatch``
  (its tail digest is not the log's digest when the tail was its covered
  seq — a seq inside a batch never was a tail); otherwise it is kept,
  replacing one at the same covered seq;
- ``load_latest(c, at_or_before_seq)``: arguments checked first; a
  conversation the log does not have (never created, or deleted) is
  ``NotMaterialized``; else the checkpoint with the highest covered seq at
  or before the given one, as a reader of its canonical text gets it back,
  or None when there is none — but never one whose tail digest is no longer
  the log's digest at its covered seq (the log deleted and written again,
  or changed): that is ``CheckpointUnusable`` with kind
  ``digest-mismatch`` (§8: a mismatched checkpoint is never silently used).

Checkpoints are derived and disposable, but nothing in the contract deletes
them: a deleted conversation's checkpoints stay (as they do in the stores).
"""
from __future__ import annotations

import json
from typing import Any

from model.conversation.checkpoints import Checkpoint
from scenarios.reference import EXACT, History, PortReference, Refused, bind, judge
from scenarios.reference.jcs import JcsError, canonical, read_back
from scenarios.reference.log import PORT_INT_MAX, ReferenceLog

CHECKPOINT_SCHEMA_VERSION = 1
_HEX = frozenset("0123456789abcdef")
_dumps = json.JSONEncoder(**EXACT).encode


def checkpoint_json(checkpoint: Any) -> dict:
    return {"conversationId": checkpoint.conversation_id, "submissionId": checkpoint.submission_id,
            "throughSequence": checkpoint.covered_seq, "tailDigest": checkpoint.tail_digest,
            "engineVersion": checkpoint.engine_version, "agentDefinitionDigest": checkpoint.definition_digest,
            "modelDigest": checkpoint.model_digest, "toolDigest": checkpoint.tool_digest,
            "schemaVersion": checkpoint.schema_version, "state": checkpoint.snapshot,
            "createdAt": checkpoint.created_at_ms}


def _checkpoint_view(checkpoint: Any) -> str | None:
    return None if checkpoint is None else _dumps(checkpoint_json(checkpoint))


def _argument_problem(checkpoint: object) -> tuple[Refused | None, str]:
    if not isinstance(checkpoint, Checkpoint):
        return Refused("TypeError"), ""
    c = checkpoint
    for value, kind in ((c.conversation_id, str), (c.submission_id, str), (c.covered_seq, int),
                        (c.tail_digest, str)):
        if type(value) is not kind:
            return Refused("TypeError"), ""
    if len(c.tail_digest) != 64 or not set(c.tail_digest) <= _HEX:
        return Refused("ValueError"), ""
    for value, kind in ((c.engine_version, str), (c.definition_digest, str), (c.model_digest, str),
                        (c.tool_digest, str), (c.schema_version, int), (c.created_at_ms, int)):
        if type(value) is not kind:
            return Refused("TypeError"), ""
    if c.covered_seq < 0:
        return Refused("ValueError"), ""
    try:
        return None, canonical(checkpoint_json(c))
    except JcsError:
        return Refused("ValueError"), ""


class ReferenceCheckpoints(PortReference):
    """``CheckpointStorePort``'s contract, over the log reference's conversations."""

    port = "checkpoints"
    KEY_FROM = {"save": ("checkpoint", "conversation_id")}
    scope = "conversation"  # keyed like the log: a diverged log stops its checkpoints' checks too

    def __init__(self, log: ReferenceLog) -> None:
        self._log = log
        self._rows: dict[str, dict[int, str]] = {}  # conversation -> covered seq -> canonical text
        self._history = History()
        self._handlers = {"save": self._save, "load_latest": self._load_latest}

    def _table(self) -> dict:
        return self._rows

    def _save(self, call: Any) -> str | None:
        key = self.key_of(call)
        try:
            (checkpoint,) = bind(call, ("checkpoint",))
        except (TypeError, KeyError):
            return judge(call, key, Refused("TypeError"), _checkpoint_view, self._history)
        problem, text = _argument_problem(checkpoint)
        if problem is not None:
            return judge(call, key, problem, _checkpoint_view, self._history)
        cid, seq = checkpoint.conversation_id, checkpoint.covered_seq
        conversation = self._log.conversations.get(cid)
        expected: Refused | None = None
        if conversation is None:
            expected = Refused("NotMaterialized", conversation_id=cid)
        elif checkpoint.schema_version != CHECKPOINT_SCHEMA_VERSION:
            expected = Refused("CheckpointRejected", kind="unsupported-version", conversation_id=cid, covered_seq=seq)
        elif seq > conversation.tail_seq:
            expected = Refused("CheckpointRejected", kind="ahead-of-tail", conversation_id=cid, covered_seq=seq)
        elif conversation.boundaries.get(seq) != checkpoint.tail_digest:
            expected = Refused("CheckpointRejected", kind="digest-mismatch", conversation_id=cid, covered_seq=seq)
        message = judge(call, cid, expected, lambda result: result, self._history,
                        f"checkpoint of {cid!r} at seq {seq} digest {checkpoint.tail_digest[:12]}..")
        if message is None:
            if expected is None:
                self._rows.setdefault(cid, {})[seq] = text
            if cid in self._rows:
                self._history.note(cid, call, (seq,), expected.fields.get("kind", expected.name) if expected else None)
        return message

    def _load_latest(self, call: Any) -> str | None:
        key = self.key_of(call)
        try:
            cid, at_or_before_seq = bind(call, ("conversation_id", "at_or_before_seq"))
        except (TypeError, KeyError):
            return judge(call, key, Refused("TypeError"), _checkpoint_view, self._history)
        if type(cid) is not str or type(at_or_before_seq) is not int:
            return judge(call, key, Refused("TypeError"), _checkpoint_view, self._history)
        if not -PORT_INT_MAX <= at_or_before_seq <= PORT_INT_MAX:
            return judge(call, key, Refused("ValueError"), _checkpoint_view, self._history)
        rows = self._rows.get(cid, {})
        eligible = [seq for seq in rows if seq <= at_or_before_seq]  # what the call touches
        conversation = self._log.conversations.get(cid)
        expected: Any = None
        if conversation is None:
            expected = Refused("NotMaterialized", conversation_id=cid)
        elif eligible:
            value = read_back(rows[max(eligible)])
            if conversation.boundaries.get(max(eligible)) != value["tailDigest"]:
                expected = Refused("CheckpointUnusable", kind="digest-mismatch", conversation_id=cid)
            else:
                expected = _dumps(value)
        message = judge(call, cid, expected, _checkpoint_view, self._history)
        if message is None and rows:
            self._history.note(cid, call, (at_or_before_seq,), max(eligible) if eligible else None)
        return message
