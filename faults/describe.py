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
