"""What the trace records of each port call: arguments and results as plain data.

One describer per port method, each bound to the method's signature and
building its event through the event's type (``faults.events``):

- ``@describes(SubmissionLedgerPort.claim, LedgerClaim)`` checks, at import,
  that the describer takes exactly the port method's parameters (names,
  kinds, defaults) after the call's result, so Python binds each call's
  arguments by name, as the port itself does — no hand-indexing
  ``args[2]``, and a port-signature change is a ``TypeError`` at import
  here rather than a wrong field in the trace;
- ``LedgerClaim.build(...)`` takes the fields by name — the call's, and
  the result group when the call returned something (``.add_result(...)``
  appends that group to a dict already built) — and returns the plain dict
  the trace hashes, in the type's order; a missing, extra or renamed field
  is a ``TypeError`` in the describer.

The signatures come from the port Protocols (``model.ledger.port``,
``model.conversation.port``, ``model.durable_state.store``,
``model.kernel.store``) or, for ports without one, from the in-memory
adapter (the SQLite adapter's parity is ``tests/test_ports.py``'s).

Fields are what the invariant checkers read (``ds.save`` carries key,
expected revision, resulting revision, version and payload) and what the
digest covers. Results are described, never stored by reference, so a later
mutation cannot rewrite history. A call that raised is described with result
None (``faults.ports`` then adds ``error`` and ``detail``).

``BoundPort`` still calls a describer as ``describe(args, kwargs, result)``.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

from faults.events import (
    ABSENT,
    CheckpointLoadLatest,
    CheckpointSave,
    ContentDelete,
    ContentGet,
    ContentHas,
    ContentPut,
    DsClear,
    DsLoad,
    DsSave,
    FindingsAdvanceCheckpoint,
    FindingsApplyRun,
    FindingsCheckpoint,
    FindingsCloseExpired,
    FindingsLive,
    FindingsLiveForRun,
    KeyringGet,
    KeyringGetRotation,
    KeyringPutIfAbsent,
    KeyringRewrap,
    KeyringSaveRotation,
    KeyringScan,
    KernelAppendStep,
    KernelAppendSteps,
    KernelFinish,
    KernelHighWater,
    KernelLiveExecutions,
    KernelLoadExecution,
    KernelLoadSteps,
    KernelParkExecution,
    KernelPurgeFinished,
    KernelStart,
    LedgerAdmit,
    LedgerClaim,
    LedgerFinalizeSettlement,
    LedgerGet,
    LedgerGetByIdempotencyKey,
    LedgerMarkInputApplied,
    LedgerMarkReady,
    LedgerPurgeConversation,
    LedgerReleaseOwnership,
    LedgerRenewOwnership,
    LedgerRequestAbort,
    LedgerReserveSettlement,
    LedgerMarkUnknown,
    LedgerResolveUnknown,
    LedgerSuspend,
    LedgerDecideApproval,
    LedgerBeginJoin,
    LedgerReserveChild,
    LedgerAttachChild,
    LedgerReleaseChild,
    LedgerSetAdmissionFence,
    LedgerMarkJoined,
    LedgerRevertJoin,
    LedgerScanNonterminal,
    LedgerLoadRecoverySnapshot,
    LogAppend,
    LogDeleteConversation,
    LogDigestAt,
    LogInspectTail,
    LogLookupBatch,
    LogMaterialize,
    LogObserve,
    LogRead,
    PinBlob,
    PinExpiredUnpinned,
    PinForget,
    PinHolders,
    PinIsPinned,
    PinPin,
    PinPinnedRefs,
    PinRecordBlob,
    PinUnpin,
    PortEvent,
    SchedulesAdvance,
    SchedulesCursor,
    SchedulesRelease,
    SchedulesRetire,
)
from model.conversation.port import CheckpointStorePort, ContentStorePort, ConversationLogPort
from model.durable_state.store import DurableStateStore
from model.findings import InMemoryFindingsProjection
from model.kernel.memory_store import InMemoryExecutionStore
from model.kernel.store import ExecutionStore
from model.ledger.port import SubmissionLedgerPort
from model.pins import InMemoryPinIndex
from model.schedule_store import InMemoryScheduleStore
from model.secrets.keyring import InMemoryKeyringStore

Describe = Callable[[tuple, dict, Any], dict]


def _parameters(fn: Callable) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def port_parameters(method: Callable) -> list[tuple[str, Any, Any]]:
    """A port method's parameters as (name, kind, default), without ``self``."""
    params = _parameters(method)
    if not params or params[0][0] != "self":
        raise TypeError(f"{method.__qualname__} is not a method")
    return params[1:]


def describes(method: Callable, event: type[PortEvent]) -> Callable[[Callable[..., dict]], Describe]:
    """Bind a describer to ``method``'s signature and ``event``'s type.

    The describer is ``fn(result, /, <the method's own parameters>)``: the
    call's result (None when it raised or returned nothing), then exactly the
    parameters the method takes. The returned ``describe(args, kwargs,
    result)`` (what ``BoundPort`` calls) lets Python bind the arguments.
    """
    expected = port_parameters(method)

    def bind(fn: Callable[..., dict]) -> Describe:
        params = _parameters(fn)
        if not params or params[0][1] is not inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(f"describer {fn.__name__}: its first parameter is the result, positional-only")
        if params[1:] != expected:
            raise TypeError(f"describer {fn.__name__} does not take the parameters of {method.__qualname__}: "
                            f"{_show(params[1:])} != {_show(expected)}")

        describe = _binder(fn, expected)
        describe.__name__ = describe.__qualname__ = fn.__name__
        describe.__doc__ = fn.__doc__
        describe.__wrapped__ = fn  # type: ignore[attr-defined]
        describe.method = method  # type: ignore[attr-defined]
        describe.event = event  # type: ignore[attr-defined]
        return describe

    return bind


def _binder(fn: Callable[..., dict], params: list[tuple[str, Any, Any]]) -> Describe:
    """``describe(args, kwargs, result)`` calling ``fn(result, ...)``.

    Python binds the arguments (``fn`` has the port method's own parameters).
    The usual call passes every positional parameter and no keyword: that one
    is a plain call for the method's arity (``fn(result, *args, **kwargs)``,
    which CPython 3.11 does not inline, is the slowest part of a describer on
    this hot path); any other shape of call goes through ``*args, **kwargs``.
    """
    arity = sum(kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                for _, kind, _ in params)
    if arity == 0:
        def describe(args: tuple, kwargs: dict, result: Any) -> dict:
            if not args and not kwargs:
                return fn(result)
            return fn(result, *args, **kwargs)
    elif arity == 1:
        def describe(args: tuple, kwargs: dict, result: Any) -> dict:
            if not kwargs and len(args) == 1:
                return fn(result, args[0])
            return fn(result, *args, **kwargs)
    elif arity == 2:
        def describe(args: tuple, kwargs: dict, result: Any) -> dict:
            if not kwargs and len(args) == 2:
                a, b = args
                return fn(result, a, b)
            return fn(result, *args, **kwargs)
    elif arity == 3:
        def describe(args: tuple, kwargs: dict, result: Any) -> dict:
            if not kwargs and len(args) == 3:
                a, b, c = args
                return fn(result, a, b, c)
            return fn(result, *args, **kwargs)
    elif arity == 4:
        def describe(args: tuple, kwargs: dict, result: Any) -> dict:
            if not kwargs and len(args) == 4:
                a, b, c, d = args
                return fn(result, a, b, c, d)
            return fn(result, *args, **kwargs)
    else:
        def describe(args: tuple, kwargs: dict, result: Any) -> dict:
            return fn(result, *args, **kwargs)
    return describe


def _show(params: list[tuple[str, Any, Any]]) -> str:
    return "(" + ", ".join(
        f"{name}:{kind.description}" + ("" if default is inspect.Parameter.empty else f"={default!r}")
        for name, kind, default in params) + ")"


def _table(port: str, *describers: Describe) -> dict[str, Describe]:
    """A port's describers by method name; each one's event kind is ``port.method``."""
    table: dict[str, Describe] = {}
    for describe in describers:
        name = describe.method.__name__  # type: ignore[attr-defined]
        kind = describe.event.kind  # type: ignore[attr-defined]
        if kind != f"{port}.{name}" or name in table:
            raise TypeError(f"describer {describe.__name__} traces {kind!r} at {port}.{name}")
        table[name] = describe
    return table


# -- durable state ---------------------------------------------------------------

@describes(DurableStateStore.load, DsLoad)
def _ds_load(record: Any, /, key: str) -> dict:
    if record is None:
        return DsLoad.build(key=key, found=False)
    return DsLoad.build(key=key, found=True, revision=record.revision, version=record.contract_version,
                        payload=record.payload)


@describes(DurableStateStore.save, DsSave)
def _ds_save(record: Any, /, key: str, write: Any, expected_revision: int) -> dict:
    return DsSave.build(key=key, expected=expected_revision, version=write.contract_version, payload=write.payload,
                        revision=ABSENT if record is None else record.revision)


@describes(DurableStateStore.clear, DsClear)
def _ds_clear(result: Any, /, key: str) -> dict:
    return DsClear.build(key=key)


DURABLE_STATE_DESCRIBERS = _table("ds", _ds_load, _ds_save, _ds_clear)


# -- kernel execution store --------------------------------------------------------

@describes(ExecutionStore.start_execution, KernelStart)
def _start(outcome: Any, /, run_id: str, *, schedule_id: str | None, occurrence_ms: int | None, flow_version: int,
           input: object, started_at_ms: int) -> dict:
    fields = KernelStart.build(run=run_id, schedule=schedule_id, occurrence_ms=occurrence_ms,
                               flow_version=flow_version, input=input)
    if outcome is not None:
        KernelStart.add_result(fields, created=not outcome.replayed, retired=outcome.record is None)
    return fields


@describes(ExecutionStore.append_step, KernelAppendStep)
def _append(step: Any, /, run_id: str, seq: int, step_id: str, kind: str, output: object) -> dict:
    return KernelAppendStep.build(run=run_id, seq=seq, step=step_id, step_kind=kind, output=output)


@describes(ExecutionStore.append_steps, KernelAppendSteps)
def _append_batch(records: Any, /, run_id: str, first_seq: int, steps: tuple) -> dict:
    return KernelAppendSteps.build(run=run_id, first_seq=first_seq, steps=tuple(steps))


@describes(ExecutionStore.load_steps, KernelLoadSteps)
def _load_steps(steps: Any, /, run_id: str) -> dict:
    return KernelLoadSteps.build(run=run_id, steps=ABSENT if steps is None else len(steps))


@describes(ExecutionStore.load_execution, KernelLoadExecution)
def _load_execution(record: Any, /, run_id: str) -> dict:
    return KernelLoadExecution.build(run=run_id)


@describes(ExecutionStore.park_execution, KernelParkExecution)
def _park_execution(record: Any, /, run_id: str) -> dict:
    return KernelParkExecution.build(run=run_id)


@describes(ExecutionStore.finish_execution, KernelFinish)
def _finish(record: Any, /, run_id: str, *, status: str, output: object, finished_at_ms: int, steps: tuple = (),
            first_seq: int | None = None) -> dict:
    return KernelFinish.build(run=run_id, status=status, output=output, first_seq=first_seq, steps=tuple(steps),
                              final_status=ABSENT if record is None else record.status)


@describes(ExecutionStore.live_executions, KernelLiveExecutions)
def _live(records: Any, /, schedule_id: str) -> dict:
    return KernelLiveExecutions.build(
        schedule=schedule_id, live=ABSENT if records is None else tuple(r.run_id for r in records))


# Not in the ExecutionStore Protocol: the in-memory adapter is the reference.
@describes(InMemoryExecutionStore.schedule_high_water_ms, KernelHighWater)
def _high_water(value: Any, /, schedule_id: str) -> dict:
    return KernelHighWater.build(schedule=schedule_id, high_water_ms=value)


@describes(InMemoryExecutionStore.purge_finished, KernelPurgeFinished)
def _purge(count: Any, /, finished_before_ms: int) -> dict:
    return KernelPurgeFinished.build(before_ms=finished_before_ms, purged=count)


KERNEL_DESCRIBERS = _table("kernel", _start, _append, _append_batch, _load_steps, _load_execution, _park_execution,
                           _finish, _live, _high_water, _purge)


# -- submission ledger --------------------------------------------------------

@describes(SubmissionLedgerPort.admit, LedgerAdmit)
def _admit(result: Any, /, conversation_id: str, principal_id: str, idempotency_key: str, input: object,
           now_ms: int, parent: Any = None, admission_group: str | None = None, admission_fence: Any = None,
           metadata: object = None) -> dict:
    link = None if parent is None else (getattr(parent, "submission_id", repr(parent)),
                                        getattr(parent, "tool_call_id", None))
    fence = None if admission_fence is None else (getattr(admission_fence, "policy_id", repr(admission_fence)),
                                                  getattr(admission_fence, "key", None),
                                                  getattr(admission_fence, "revision", None))
    if result is None:
        return LedgerAdmit.build(conversation=conversation_id, principal=principal_id, key=idempotency_key,
                                 admitted_ms=now_ms, parent=link, group=admission_group, fence=fence,
                                 metadata=metadata)
    return LedgerAdmit.build(conversation=conversation_id, principal=principal_id, key=idempotency_key,
                             admitted_ms=now_ms, parent=link, group=admission_group, fence=fence,
                             metadata=metadata, submission=result.submission_id,
                             queue_seq=result.queue_seq, replayed=result.replayed)


@describes(SubmissionLedgerPort.set_admission_fence, LedgerSetAdmissionFence)
def _set_admission_fence(state: Any, /, policy_id: str, key: str, revision: int) -> dict:
    if state is None:
        return LedgerSetAdmissionFence.build(policy=policy_id, key=key, revision=revision)
    return LedgerSetAdmissionFence.build(policy=policy_id, key=key, revision=revision, replayed=state.replayed)


@describes(SubmissionLedgerPort.mark_ready, LedgerMarkReady)
def _mark_ready(readiness: Any, /, submission_id: str, now_ms: int) -> dict:
    if readiness is None:
        return LedgerMarkReady.build(submission=submission_id, ready_ms=now_ms)
    return LedgerMarkReady.build(submission=submission_id, ready_ms=now_ms, ready_at_ms=readiness.ready_at_ms,
                                 replayed=readiness.replayed)


@describes(SubmissionLedgerPort.claim, LedgerClaim)
def _claim(claim: Any, /, conversation_id: str, owner_id: str, lease_ms: int, now_ms: int,
           handoff: Any = None) -> dict:
    handed = None if handoff is None else (
        getattr(handoff, "producer_epoch", repr(handoff)), tuple(getattr(handoff, "deferred_submission_ids", ())),
        getattr(handoff, "submission_id", None))
    if claim is None:  # nothing claimable (or the call failed)
        return LedgerClaim.build(conversation=conversation_id, owner=owner_id, handoff=handed)
    return LedgerClaim.build(conversation=conversation_id, owner=owner_id, handoff=handed,
                             submission=claim.submission_id,
                             epoch=claim.epoch, lease_expires_ms=claim.lease_expires_ms, attempt=claim.attempt_id)


@describes(SubmissionLedgerPort.renew_ownership, LedgerRenewOwnership)
def _renew(renewal: Any, /, token: Any, lease_ms: int, now_ms: int) -> dict:
    return LedgerRenewOwnership.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch)


@describes(SubmissionLedgerPort.release_ownership, LedgerReleaseOwnership)
def _release_ownership(result: Any, /, token: Any) -> dict:
    return LedgerReleaseOwnership.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch)


@describes(SubmissionLedgerPort.mark_input_applied, LedgerMarkInputApplied)
def _input_applied(applied: Any, /, token: Any, record_id: str, seq: int) -> dict:
    if applied is None:
        return LedgerMarkInputApplied.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                            record_id=record_id, seq=seq)
    return LedgerMarkInputApplied.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                        record_id=record_id, seq=seq, replayed=applied.replayed)


@describes(SubmissionLedgerPort.request_abort, LedgerRequestAbort)
def _request_abort(intent: Any, /, submission_id: str, author: str, reason: str, now_ms: int) -> dict:
    if intent is None:
        return LedgerRequestAbort.build(submission=submission_id, author=author, requested_ms=now_ms)
    return LedgerRequestAbort.build(submission=submission_id, author=author, requested_ms=now_ms,
                                    replayed=intent.replayed, settled_at_ms=intent.settled_at_ms)


@describes(SubmissionLedgerPort.reserve_settlement, LedgerReserveSettlement)
def _reserve(reserved: Any, /, token: Any, record: object) -> dict:
    if reserved is None:
        return LedgerReserveSettlement.build(submission=token.submission_id, owner=token.owner_id,
                                             epoch=token.epoch, record=record)
    return LedgerReserveSettlement.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                         record=record, digest=reserved.record_digest, replayed=reserved.replayed)


@describes(SubmissionLedgerPort.finalize_settlement, LedgerFinalizeSettlement)
def _finalize(settlement: Any, /, submission_id: str, now_ms: int) -> dict:
    if settlement is None:
        return LedgerFinalizeSettlement.build(submission=submission_id)
    return LedgerFinalizeSettlement.build(submission=submission_id, outcome=settlement.outcome,
                                          digest=settlement.record_digest, settled_at_ms=settlement.settled_at_ms,
                                          settlement_id=settlement.settlement_id, replayed=settlement.replayed)


@describes(SubmissionLedgerPort.get, LedgerGet)
def _get(record: Any, /, submission_id: str) -> dict:
    return LedgerGet.build(submission=submission_id)


@describes(SubmissionLedgerPort.scan_nonterminal, LedgerScanNonterminal)
def _scan(records: Any, /, principal_id: str | None = None) -> dict:
    if records is None:
        return LedgerScanNonterminal.build(principal=principal_id)
    return LedgerScanNonterminal.build(principal=principal_id, nonterminal=tuple(r.submission_id for r in records))


@describes(SubmissionLedgerPort.load_recovery_snapshot, LedgerLoadRecoverySnapshot)
def _recovery_snapshot(snapshot: Any, /, conversation_id: str) -> dict:
    if snapshot is None:
        return LedgerLoadRecoverySnapshot.build(conversation=conversation_id)
    return LedgerLoadRecoverySnapshot.build(conversation=conversation_id, epoch=snapshot.epoch,
                                            open=tuple(o.submission_id for o in snapshot.submissions))


@describes(SubmissionLedgerPort.get_by_idempotency_key, LedgerGetByIdempotencyKey)
def _by_key(record: Any, /, conversation_id: str, principal_id: str, idempotency_key: str) -> dict:
    if record is None:
        return LedgerGetByIdempotencyKey.build(conversation=conversation_id, principal=principal_id,
                                               key=idempotency_key)
    return LedgerGetByIdempotencyKey.build(conversation=conversation_id, principal=principal_id, key=idempotency_key,
                                           submission=record.submission_id, outcome=record.outcome,
                                           ready=record.ready, input_applied=record.input_applied)


@describes(SubmissionLedgerPort.purge_conversation, LedgerPurgeConversation)
def _purge_conversation(count: Any, /, conversation_id: str) -> dict:
    return LedgerPurgeConversation.build(conversation=conversation_id, purged=count)


@describes(SubmissionLedgerPort.mark_unknown, LedgerMarkUnknown)
def _mark_unknown(marked: Any, /, token: Any, tool_call_id: str) -> dict:
    if marked is None:
        return LedgerMarkUnknown.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                       call=tool_call_id)
    return LedgerMarkUnknown.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                   call=tool_call_id, replayed=marked.replayed)


@describes(SubmissionLedgerPort.resolve_unknown, LedgerResolveUnknown)
def _resolve_unknown(resolved: Any, /, submission_id: str, tool_call_id: str, resolution: str, resolver: str,
                     result: object, now_ms: int) -> dict:
    if resolved is None:
        return LedgerResolveUnknown.build(submission=submission_id, call=tool_call_id, resolution=resolution)
    return LedgerResolveUnknown.build(submission=submission_id, call=tool_call_id, resolution=resolution,
                                      replayed=resolved.replayed, open_calls=resolved.open_calls)


@describes(SubmissionLedgerPort.suspend, LedgerSuspend)
def _suspend(suspension: Any, /, token: Any, tool_call_ids: tuple[str, ...],
             child_call_ids: tuple[str, ...] = ()) -> dict:
    calls = tuple(tool_call_ids) if isinstance(tool_call_ids, (tuple, list)) else (repr(tool_call_ids),)
    children = tuple(child_call_ids) if isinstance(child_call_ids, (tuple, list)) else (repr(child_call_ids),)
    if suspension is None:
        return LedgerSuspend.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                   calls=calls, children=children)
    return LedgerSuspend.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch, calls=calls,
                               children=children, pending=suspension.pending,
                               children_pending=suspension.children_pending, resumed=suspension.resumed,
                               replayed=suspension.replayed)


@describes(SubmissionLedgerPort.decide_approval, LedgerDecideApproval)
def _decide_approval(decided: Any, /, submission_id: str, tool_call_id: str, decision: str, resolver: str,
                     reason: str, now_ms: int) -> dict:
    if decided is None:
        return LedgerDecideApproval.build(submission=submission_id, call=tool_call_id, decision=decision)
    return LedgerDecideApproval.build(submission=submission_id, call=tool_call_id, decision=decision,
                                      replayed=decided.replayed, pending=decided.pending)


@describes(SubmissionLedgerPort.begin_join, LedgerBeginJoin)
def _begin_join(batch: Any, /, token: Any, limit: int) -> dict:
    if batch is None:
        return LedgerBeginJoin.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                     limit=limit)
    return LedgerBeginJoin.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                 limit=limit, followers=batch.follower_ids, replayed=batch.replayed)


@describes(SubmissionLedgerPort.mark_joined, LedgerMarkJoined)
def _mark_joined(marked: Any, /, token: Any, submission_id: str, record_id: str, seq: int) -> dict:
    if marked is None:
        return LedgerMarkJoined.build(host=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                      submission=submission_id, record_id=record_id, seq=seq)
    return LedgerMarkJoined.build(host=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                  submission=submission_id, record_id=record_id, seq=seq, replayed=marked.replayed)


@describes(SubmissionLedgerPort.revert_join, LedgerRevertJoin)
def _revert_join(result: Any, /, token: Any, submission_id: str) -> dict:
    return LedgerRevertJoin.build(host=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                  submission=submission_id)


@describes(SubmissionLedgerPort.reserve_child, LedgerReserveChild)
def _reserve_child(reserved: Any, /, token: Any, tool_call_id: str, allocation: object) -> dict:
    if reserved is None:
        return LedgerReserveChild.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                        call=tool_call_id)
    return LedgerReserveChild.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                    call=tool_call_id, allocation_digest=reserved.allocation_digest,
                                    replayed=reserved.replayed)


@describes(SubmissionLedgerPort.attach_child, LedgerAttachChild)
def _attach_child(attached: Any, /, token: Any, tool_call_id: str, child_submission_id: str) -> dict:
    if attached is None:
        return LedgerAttachChild.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                       call=tool_call_id, child=child_submission_id)
    return LedgerAttachChild.build(submission=token.submission_id, owner=token.owner_id, epoch=token.epoch,
                                   call=tool_call_id, child=child_submission_id, replayed=attached.replayed)


@describes(SubmissionLedgerPort.release_child, LedgerReleaseChild)
def _release_child(released: Any, /, submission_id: str, tool_call_id: str, accounting: object,
                   now_ms: int) -> dict:
    if released is None:
        return LedgerReleaseChild.build(submission=submission_id, call=tool_call_id)
    return LedgerReleaseChild.build(submission=submission_id, call=tool_call_id,
                                    released_at_ms=released.released_at_ms, replayed=released.replayed,
                                    awaited=released.awaited, pending=released.pending)


LEDGER_DESCRIBERS = _table(
    "ledger", _by_key, _purge_conversation, _admit, _set_admission_fence, _mark_ready, _claim, _renew, _release_ownership,
    _input_applied, _request_abort, _reserve, _finalize, _get, _scan, _mark_unknown, _resolve_unknown,
    _suspend, _decide_approval, _begin_join, _mark_joined, _revert_join, _reserve_child, _attach_child,
    _release_child, _recovery_snapshot)


# -- conversation log ---------------------------------------------------------

@describes(ConversationLogPort.materialize, LogMaterialize)
def _materialize(result: Any, /, conversation_id: str, producer_id: str, epoch: int) -> dict:
    return LogMaterialize.build(conversation=conversation_id, producer=producer_id, epoch=epoch)


@describes(ConversationLogPort.append, LogAppend)
def _log_append(result: Any, /, request: Any) -> dict:
    records = request.records
    fields = LogAppend.build(
        conversation=request.conversation_id, batch=request.batch_id, producer=request.producer_id,
        epoch=request.epoch, expected_tail_seq=request.expected_tail_seq,
        record_ids=tuple(r.record_id for r in records), envelopes=tuple(r.to_json() for r in records),
        # A refused append's sizes are None whichever store refused it: whether
        # the refusal came before or after the encoding is the store's, not
        # the trace's business (a memory store's injected contention refuses
        # before it, the SQLite lock after).
        sizes=tuple(_encoded_size(r) for r in records) if result is not None else (None,) * len(records))
    if result is not None:
        LogAppend.add_result(fields, first_seq=result.first_seq, last_seq=result.last_seq,
                             tail_digest=result.tail_digest, batch_digest=result.batch_digest,
                             replayed=result.replayed)
    return fields


def _encoded_size(envelope: Any) -> int | None:
    """The UTF-8 size of the envelope's canonical text as the append encoded
    it (None when it was never encoded: the request was refused before).
    The reference model checks that text, through the batch digest, on every
    append; an oracle reading the size reads what that check covers."""
    known = getattr(envelope, "known_text", None)
    text = known() if known is not None else None
    if type(text) is not str:
        return None
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))



@describes(ConversationLogPort.inspect_tail, LogInspectTail)
def _inspect_tail(tail: Any, /, conversation_id: str) -> dict:
    if tail is None:
        return LogInspectTail.build(conversation=conversation_id)
    return LogInspectTail.build(conversation=conversation_id, tail_seq=tail.tail_seq, tail_digest=tail.tail_digest,
                                epoch=tail.epoch)


@describes(ConversationLogPort.read, LogRead)
def _log_read(records: Any, /, conversation_id: str, after_seq: int, limit: int) -> dict:
    return LogRead.build(conversation=conversation_id, after_seq=after_seq, limit=limit,
                         seqs=ABSENT if records is None else tuple(r.seq for r in records))


@describes(ConversationLogPort.observe, LogObserve)
def _log_observe(records: Any, /, conversation_id: str, after_offset: str | None = None) -> dict:
    """``records``: the whole observation (``faults.ports`` drains the stream
    as one call)."""
    return LogObserve.build(conversation=conversation_id, from_offset=after_offset is not None,
                            seqs=ABSENT if records is None else tuple(r.seq for r in records))


@describes(ConversationLogPort.lookup_batch, LogLookupBatch)
def _lookup_batch(batch: Any, /, conversation_id: str, batch_id: str) -> dict:
    if batch is None:
        return LogLookupBatch.build(conversation=conversation_id, batch=batch_id)
    return LogLookupBatch.build(conversation=conversation_id, batch=batch_id, first_seq=batch.first_seq,
                                last_seq=batch.last_seq)


@describes(ConversationLogPort.delete_conversation, LogDeleteConversation)
def _delete_conversation(deleted: Any, /, conversation_id: str) -> dict:
    return LogDeleteConversation.build(conversation=conversation_id, deleted=deleted)


@describes(ConversationLogPort.digest_at, LogDigestAt)
def _digest_at(found: Any, /, conversation_id: str, seq: int) -> dict:
    return LogDigestAt.build(conversation=conversation_id, seq=seq, digest=found)


LOG_DESCRIBERS = _table("log", _delete_conversation, _materialize, _log_append, _inspect_tail, _log_read,
                        _log_observe, _lookup_batch, _digest_at)


# -- checkpoints (persistence §8) ----------------------------------------------

@describes(CheckpointStorePort.save, CheckpointSave)
def _checkpoint_save(result: Any, /, checkpoint: Any) -> dict:
    return CheckpointSave.build(conversation=checkpoint.conversation_id, covered_seq=checkpoint.covered_seq,
                                tail_digest=checkpoint.tail_digest, snapshot=checkpoint.snapshot)


@describes(CheckpointStorePort.load_latest, CheckpointLoadLatest)
def _checkpoint_load(checkpoint: Any, /, conversation_id: str, at_or_before_seq: int) -> dict:
    if checkpoint is None:
        return CheckpointLoadLatest.build(conversation=conversation_id, at_or_before_seq=at_or_before_seq)
    return CheckpointLoadLatest.build(conversation=conversation_id, at_or_before_seq=at_or_before_seq,
                                      covered_seq=checkpoint.covered_seq, tail_digest=checkpoint.tail_digest)


CHECKPOINT_DESCRIBERS = _table("checkpoints", _checkpoint_save, _checkpoint_load)


# -- schedule cursors and the run archive ---------------------------------------

@describes(InMemoryScheduleStore.cursor, SchedulesCursor)
def _cursor(cursor: Any, /, schedule_id: str) -> dict:
    if cursor is None:
        return SchedulesCursor.build(schedule=schedule_id)
    return SchedulesCursor.build(schedule=schedule_id, high_water_ms=cursor.high_water_ms,
                                 archived_through_ms=cursor.archived_through_ms, archived_runs=cursor.archived_runs)


@describes(InMemoryScheduleStore.advance, SchedulesAdvance)
def _advance(result: Any, /, schedule_id: str, occurrence_ms: int) -> dict:
    return SchedulesAdvance.build(schedule=schedule_id, occurrence_ms=occurrence_ms)


@describes(InMemoryScheduleStore.retire, SchedulesRetire)
def _retire(retired: Any, /, schedule_id: str, occurrence_ms: int, run_id: str | None, summary: object | None, *,
            hold: bool = False) -> dict:
    return SchedulesRetire.build(schedule=schedule_id, occurrence_ms=occurrence_ms, run=run_id, summary=summary,
                                 hold=hold, retired=retired)


@describes(InMemoryScheduleStore.release, SchedulesRelease)
def _release(released: Any, /, schedule_id: str, run_id: str, summary: object) -> dict:
    return SchedulesRelease.build(schedule=schedule_id, run=run_id, summary=summary, released=released)


SCHEDULE_DESCRIBERS = _table("schedules", _cursor, _advance, _retire, _release)


# -- content store ------------------------------------------------------------

@describes(ContentStorePort.put, ContentPut)
def _content_put(ref: Any, /, data: bytes) -> dict:
    return ContentPut.build(size=len(data), ref=ref)


@describes(ContentStorePort.get, ContentGet)
def _content_get(data: Any, /, ref: str) -> dict:
    return ContentGet.build(ref=ref)


@describes(ContentStorePort.has, ContentHas)
def _content_has(found: Any, /, ref: str) -> dict:
    return ContentHas.build(ref=ref, found=found)


@describes(ContentStorePort.delete, ContentDelete)
def _content_delete(deleted: Any, /, ref: str) -> dict:
    return ContentDelete.build(ref=ref, deleted=deleted)


CONTENT_DESCRIBERS = _table("content", _content_put, _content_get, _content_has, _content_delete)


# -- pin index ----------------------------------------------------------------

@describes(InMemoryPinIndex.record_blob, PinRecordBlob)
def _record_blob(result: Any, /, ref: str, size_bytes: int, *, stored_at_ms: int) -> dict:
    return PinRecordBlob.build(ref=ref, size=size_bytes, stored_at_ms=stored_at_ms)


@describes(InMemoryPinIndex.pin, PinPin)
def _pin(new: Any, /, ref: str, holder: str) -> dict:
    return PinPin.build(ref=ref, holder=holder, new=new)


@describes(InMemoryPinIndex.unpin, PinUnpin)
def _unpin(gone: Any, /, ref: str, holder: str) -> dict:
    return PinUnpin.build(ref=ref, holder=holder, removed=gone)


@describes(InMemoryPinIndex.is_pinned, PinIsPinned)
def _is_pinned(pinned: Any, /, ref: str) -> dict:
    return PinIsPinned.build(ref=ref, pinned=pinned)


@describes(InMemoryPinIndex.pinned_refs, PinPinnedRefs)
def _pinned_refs(refs: Any, /) -> dict:
    return PinPinnedRefs.build(refs=None if refs is None else len(refs))


@describes(InMemoryPinIndex.holders, PinHolders)
def _holders(holders: Any, /, ref: str) -> dict:
    return PinHolders.build(ref=ref, holders=holders)


@describes(InMemoryPinIndex.expired_unpinned, PinExpiredUnpinned)
def _expired_unpinned(refs: Any, /, stored_before_ms: int, limit: int) -> dict:
    return PinExpiredUnpinned.build(before_ms=stored_before_ms, refs=refs)


@describes(InMemoryPinIndex.blob, PinBlob)
def _blob(blob: Any, /, ref: str) -> dict:
    return PinBlob.build(ref=ref, found=blob is not None)


@describes(InMemoryPinIndex.forget, PinForget)
def _forget(gone: Any, /, ref: str) -> dict:
    return PinForget.build(ref=ref, forgotten=gone)


PIN_DESCRIBERS = _table("pins", _record_blob, _pin, _unpin, _is_pinned, _pinned_refs, _holders, _expired_unpinned,
                        _blob, _forget)


# -- findings projection --------------------------------------------------------

@describes(InMemoryFindingsProjection.apply_run, FindingsApplyRun)
def _apply_run(opened: Any, /, schedule_id: str, occurrence_ms: int, run_id: str, findings: list, *,
               settled_at_ms: int) -> dict:
    return FindingsApplyRun.build(schedule=schedule_id, occurrence_ms=occurrence_ms, run=run_id,
                                  findings=len(findings), opened=opened)


@describes(InMemoryFindingsProjection.checkpoint, FindingsCheckpoint)
def _findings_checkpoint(checkpoint_ms: Any, /, schedule_id: str) -> dict:
    return FindingsCheckpoint.build(schedule=schedule_id, checkpoint_ms=checkpoint_ms)


@describes(InMemoryFindingsProjection.advance_checkpoint, FindingsAdvanceCheckpoint)
def _advance_checkpoint(result: Any, /, schedule_id: str, occurrence_ms: int) -> dict:
    return FindingsAdvanceCheckpoint.build(schedule=schedule_id, occurrence_ms=occurrence_ms)


@describes(InMemoryFindingsProjection.close_expired, FindingsCloseExpired)
def _close_expired(closed: Any, /, opened_before_ms: int, *, now_ms: int, limit: int) -> dict:
    return FindingsCloseExpired.build(before_ms=opened_before_ms, closed=None if closed is None else len(closed))


@describes(InMemoryFindingsProjection.live_findings, FindingsLive)
def _live_findings(live: Any, /) -> dict:
    return FindingsLive.build(live=None if live is None else len(live))


@describes(InMemoryFindingsProjection.live_for_run, FindingsLiveForRun)
def _live_for_run(live: Any, /, run_id: str) -> dict:
    return FindingsLiveForRun.build(run=run_id, live=None if live is None else len(live))


FINDINGS_DESCRIBERS = _table("findings", _apply_run, _findings_checkpoint, _advance_checkpoint, _close_expired,
                             _live_findings, _live_for_run)


# -- the keyring of wrapped data keys -------------------------------------------------
# Data key ids, key ids and lengths: never a wrapped key's text.

def _wrapped_len(wrapped: object) -> int:
    return len(wrapped) if isinstance(wrapped, str) else -1


@describes(InMemoryKeyringStore.put_if_absent, KeyringPutIfAbsent)
def _keyring_put(stored: Any, /, row: Any) -> dict:
    return KeyringPutIfAbsent.build(dek=getattr(row, "dek_id", None), key=getattr(row, "key_id", None),
                                    wrapped_len=_wrapped_len(getattr(row, "wrapped", None)),
                                    stored_key=None if stored is None else stored.key_id,
                                    stored_own=None if stored is None else stored == row)


@describes(InMemoryKeyringStore.get, KeyringGet)
def _keyring_get(row: Any, /, dek_id: str) -> dict:
    return KeyringGet.build(dek=dek_id, found=row is not None, key=None if row is None else row.key_id)


@describes(InMemoryKeyringStore.rewrap, KeyringRewrap)
def _keyring_rewrap(row: Any, /, dek_id: str, from_key_id: str, to_key_id: str, wrapped: str) -> dict:
    return KeyringRewrap.build(dek=dek_id, from_key=from_key_id, to_key=to_key_id,
                               wrapped_len=_wrapped_len(wrapped), stored_key=None if row is None else row.key_id)


@describes(InMemoryKeyringStore.scan, KeyringScan)
def _keyring_scan(rows: Any, /, after_dek_id: str, limit: int) -> dict:
    return KeyringScan.build(after=after_dek_id, limit=limit, rows=None if rows is None else len(rows),
                             last=rows[-1].dek_id if rows else None)


@describes(InMemoryKeyringStore.get_rotation, KeyringGetRotation)
def _keyring_get_rotation(rotation: Any, /, rotation_id: str) -> dict:
    if rotation is None:
        return KeyringGetRotation.build(rotation=rotation_id, found=False, cursor=None, done=None)
    return KeyringGetRotation.build(rotation=rotation_id, found=True, cursor=rotation.get("cursor"),
                                    done=rotation.get("done"))


@describes(InMemoryKeyringStore.save_rotation, KeyringSaveRotation)
def _keyring_save_rotation(result: Any, /, rotation: dict) -> dict:
    fields = rotation if isinstance(rotation, dict) else {}
    return KeyringSaveRotation.build(rotation=fields.get("rotationId"), from_key=fields.get("fromKeyId"),
                                     to_key=fields.get("toKeyId"), cursor=fields.get("cursor"),
                                     done=fields.get("done"))


KEYRING_DESCRIBERS = _table("keyring", _keyring_put, _keyring_get, _keyring_rewrap, _keyring_scan,
                            _keyring_get_rotation, _keyring_save_rotation)


# Every table, by the port name the scenarios bind it under.
DESCRIBERS_BY_PORT: dict[str, dict[str, Describe]] = {
    "ds": DURABLE_STATE_DESCRIBERS, "kernel": KERNEL_DESCRIBERS, "ledger": LEDGER_DESCRIBERS, "log": LOG_DESCRIBERS,
    "checkpoints": CHECKPOINT_DESCRIBERS, "schedules": SCHEDULE_DESCRIBERS, "content": CONTENT_DESCRIBERS,
    "pins": PIN_DESCRIBERS, "findings": FINDINGS_DESCRIBERS, "keyring": KEYRING_DESCRIBERS,
}
