"""What the trace records of each port call: arguments and results as plain data.

One describer per port method. Fields are what the invariant checkers read
(``ds.save`` carries key, expected revision, resulting revision, version and
payload) and what the digest covers. Results are described, never stored by
reference, so a later mutation cannot rewrite history.
"""
from __future__ import annotations

from typing import Any


def _ds_load(args: tuple, kwargs: dict, record: Any) -> dict:
    if record is None:
        return {"key": args[0], "found": False}
    return {"key": args[0], "found": True, "revision": record.revision,
            "version": record.contract_version, "payload": record.payload}


def _ds_save(args: tuple, kwargs: dict, record: Any) -> dict:
    key, write, expected = _save_args(args, kwargs)
    fields = {"key": key, "expected": expected, "version": write.contract_version, "payload": write.payload}
    if record is not None:
        fields["revision"] = record.revision
    return fields


def _save_args(args: tuple, kwargs: dict) -> tuple:
    key = args[0] if args else kwargs["key"]
    write = args[1] if len(args) > 1 else kwargs["write"]
    expected = args[2] if len(args) > 2 else kwargs["expected_revision"]
    return key, write, expected


def _ds_clear(args: tuple, kwargs: dict, result: Any) -> dict:
    return {"key": args[0] if args else kwargs["key"]}


DURABLE_STATE_DESCRIBERS = {"load": _ds_load, "save": _ds_save, "clear": _ds_clear}


def _start(args: tuple, kwargs: dict, outcome: Any) -> dict:
    fields = {"run": args[0], "schedule": kwargs.get("schedule_id"), "occurrence_ms": kwargs.get("occurrence_ms"),
              "flow_version": kwargs.get("flow_version"), "input": kwargs.get("input")}
    if outcome is not None:
        fields["created"] = not outcome.replayed
        fields["retired"] = outcome.record is None
    return fields


def _append(args: tuple, kwargs: dict, step: Any) -> dict:
    run_id, seq, step_id, kind, output = args
    return {"run": run_id, "seq": seq, "step": step_id, "step_kind": kind, "output": output}


def _append_batch(args: tuple, kwargs: dict, records: Any) -> dict:
    run_id, first_seq, steps = args
    return {"run": run_id, "first_seq": first_seq, "steps": tuple(steps)}


def _load_steps(args: tuple, kwargs: dict, steps: Any) -> dict:
    fields: dict[str, Any] = {"run": args[0]}
    if steps is not None:
        fields["steps"] = len(steps)
    return fields


def _run_only(args: tuple, kwargs: dict, result: Any) -> dict:
    return {"run": args[0]}


def _finish(args: tuple, kwargs: dict, record: Any) -> dict:
    fields = {"run": args[0], "status": kwargs.get("status"), "output": kwargs.get("output"),
              "first_seq": kwargs.get("first_seq"), "steps": tuple(kwargs.get("steps", ()))}
    if record is not None:
        fields["final_status"] = record.status
    return fields


def _live(args: tuple, kwargs: dict, records: Any) -> dict:
    fields: dict[str, Any] = {"schedule": args[0]}
    if records is not None:
        fields["live"] = tuple(r.run_id for r in records)
    return fields


def _high_water(args: tuple, kwargs: dict, value: Any) -> dict:
    return {"schedule": args[0], "high_water_ms": value}


def _purge(args: tuple, kwargs: dict, count: Any) -> dict:
    return {"before_ms": args[0], "purged": count}


KERNEL_DESCRIBERS = {
    "start_execution": _start,
    "append_step": _append,
    "append_steps": _append_batch,
    "load_steps": _load_steps,
    "load_execution": _run_only,
    "park_execution": _run_only,
    "finish_execution": _finish,
    "live_executions": _live,
    "schedule_high_water_ms": _high_water,
    "purge_finished": _purge,
}


# -- submission ledger --------------------------------------------------------

def _token_fields(token: Any) -> dict:
    return {"submission": token.submission_id, "owner": token.owner_id, "epoch": token.epoch}


def _admit(args: tuple, kwargs: dict, result: Any) -> dict:
    conversation_id, principal_id, key, request, now_ms = args
    fields: dict[str, Any] = {"conversation": conversation_id, "principal": principal_id, "key": key}
    if result is not None:
        fields.update(submission=result.submission_id, queue_seq=result.queue_seq, replayed=result.replayed)
    return fields


def _submission_arg(args: tuple, kwargs: dict, result: Any) -> dict:
    return {"submission": args[0]}


def _claim(args: tuple, kwargs: dict, claim: Any) -> dict:
    conversation_id, owner_id, lease_ms, now_ms = args
    fields: dict[str, Any] = {"conversation": conversation_id, "owner": owner_id}
    if claim is not None:
        fields.update(submission=claim.submission_id, epoch=claim.epoch, lease_expires_ms=claim.lease_expires_ms)
    return fields


def _token_only(args: tuple, kwargs: dict, result: Any) -> dict:
    return _token_fields(args[0])


def _reserve(args: tuple, kwargs: dict, reserved: Any) -> dict:
    fields = _token_fields(args[0])
    fields["record"] = args[1]
    if reserved is not None:
        fields["digest"] = reserved.record_digest
    return fields


def _finalize(args: tuple, kwargs: dict, settlement: Any) -> dict:
    fields: dict[str, Any] = {"submission": args[0]}
    if settlement is not None:
        fields.update(outcome=settlement.outcome, digest=settlement.record_digest,
                      settled_at_ms=settlement.settled_at_ms)
    return fields


def _scan(args: tuple, kwargs: dict, records: Any) -> dict:
    return {} if records is None else {"nonterminal": tuple(r.submission_id for r in records)}


def _by_key(args: tuple, kwargs: dict, record: Any) -> dict:
    fields: dict[str, Any] = {"conversation": args[0], "principal": args[1], "key": args[2]}
    if record is not None:
        fields.update(submission=record.submission_id, outcome=record.outcome, ready=record.ready,
                      input_applied=record.input_applied)
    return fields


def _purge_conversation(args: tuple, kwargs: dict, count: Any) -> dict:
    return {"conversation": args[0], "purged": count}


LEDGER_DESCRIBERS = {
    "get_by_idempotency_key": _by_key,
    "purge_conversation": _purge_conversation,
    "admit": _admit,
    "mark_ready": _submission_arg,
    "claim": _claim,
    "renew_ownership": _token_only,
    "release_ownership": _token_only,
    "mark_input_applied": _token_only,
    "request_abort": _submission_arg,
    "reserve_settlement": _reserve,
    "finalize_settlement": _finalize,
    "get": _submission_arg,
    "scan_nonterminal": _scan,
}


# -- conversation log ---------------------------------------------------------

def _materialize(args: tuple, kwargs: dict, result: Any) -> dict:
    conversation_id, producer_id, epoch = args
    return {"conversation": conversation_id, "producer": producer_id, "epoch": epoch}


def _log_append(args: tuple, kwargs: dict, result: Any) -> dict:
    request = args[0]
    fields: dict[str, Any] = {
        "conversation": request.conversation_id, "batch": request.batch_id, "producer": request.producer_id,
        "epoch": request.epoch, "expected_tail_seq": request.expected_tail_seq,
        "record_ids": tuple(r.record_id for r in request.records),
        "envelopes": tuple(r.to_json() for r in request.records),
    }
    if result is not None:
        fields.update(first_seq=result.first_seq, last_seq=result.last_seq, tail_digest=result.tail_digest,
                      replayed=result.replayed)
    return fields


def _inspect_tail(args: tuple, kwargs: dict, tail: Any) -> dict:
    fields: dict[str, Any] = {"conversation": args[0]}
    if tail is not None:
        fields.update(tail_seq=tail.tail_seq, tail_digest=tail.tail_digest, epoch=tail.epoch)
    return fields


def _log_read(args: tuple, kwargs: dict, records: Any) -> dict:
    conversation_id, after_seq, limit = args
    fields: dict[str, Any] = {"conversation": conversation_id, "after_seq": after_seq, "limit": limit}
    if records is not None:
        fields["seqs"] = tuple(r.seq for r in records)
    return fields


def _lookup_batch(args: tuple, kwargs: dict, batch: Any) -> dict:
    fields: dict[str, Any] = {"conversation": args[0], "batch": args[1]}
    if batch is not None:
        fields.update(first_seq=batch.first_seq, last_seq=batch.last_seq)
    return fields


def _delete_conversation(args: tuple, kwargs: dict, deleted: Any) -> dict:
    return {"conversation": args[0], "deleted": deleted}


def _digest_at(args: tuple, kwargs: dict, found: Any) -> dict:
    return {"conversation": args[0], "seq": args[1], "digest": found}


LOG_DESCRIBERS = {
    "delete_conversation": _delete_conversation,
    "materialize": _materialize,
    "append": _log_append,
    "inspect_tail": _inspect_tail,
    "read": _log_read,
    "lookup_batch": _lookup_batch,
    "digest_at": _digest_at,
}


# -- checkpoints (persistence §8) ----------------------------------------------

def _checkpoint_save(args: tuple, kwargs: dict, result: Any) -> dict:
    checkpoint = args[0] if args else kwargs["checkpoint"]
    return {"conversation": checkpoint.conversation_id, "covered_seq": checkpoint.covered_seq,
            "tail_digest": checkpoint.tail_digest, "snapshot": checkpoint.snapshot}


def _checkpoint_load(args: tuple, kwargs: dict, checkpoint: Any) -> dict:
    fields: dict[str, Any] = {"conversation": args[0], "at_or_before_seq": args[1]}
    if checkpoint is not None:
        fields.update(covered_seq=checkpoint.covered_seq, tail_digest=checkpoint.tail_digest)
    return fields


CHECKPOINT_DESCRIBERS = {"save": _checkpoint_save, "load_latest": _checkpoint_load}


# -- schedule cursors and the run archive ---------------------------------------

def _cursor(args: tuple, kwargs: dict, cursor: Any) -> dict:
    fields: dict[str, Any] = {"schedule": args[0]}
    if cursor is not None:
        fields.update(high_water_ms=cursor.high_water_ms, archived_through_ms=cursor.archived_through_ms,
                      archived_runs=cursor.archived_runs)
    return fields


def _advance(args: tuple, kwargs: dict, result: Any) -> dict:
    return {"schedule": args[0], "occurrence_ms": args[1]}


def _retire(args: tuple, kwargs: dict, retired: Any) -> dict:
    return {"schedule": args[0], "occurrence_ms": args[1], "run": args[2], "summary": args[3],
            "hold": kwargs.get("hold", False), "retired": retired}


def _release(args: tuple, kwargs: dict, released: Any) -> dict:
    return {"schedule": args[0], "run": args[1], "summary": args[2], "released": released}


SCHEDULE_DESCRIBERS = {"cursor": _cursor, "advance": _advance, "retire": _retire, "release": _release}
