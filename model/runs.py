"""Schedule runs on the whole system: the ledger admits, the log records.

The kernel and the schedule driver speak the execution-store protocol
(``model.kernel.store.ExecutionStore``). ``LedgerRuns`` is that protocol for
one worker process, built on the persistence system instead of a table of
its own (bounded runs, persistence §3):

- **start** = admission. The run id ``scheduleId@occurrenceMs`` is the
  conversation id *and* the idempotency key (principal: the schedule), so a
  duplicate alarm replays the receipt and never starts a second run. Then
  the schedule cursor advances, the run's own conversation log is
  materialized and the submission marked ready.
- **own** = claim under a lease, with a strictly increasing producer epoch;
  the log is taken over at that epoch and the input appended once. From
  here every write of this process is fenced: a stale owner's append is
  ``FenceRejected`` by the log, its settlement ``OwnershipLost`` by the
  ledger.
- **steps** = fenced batch appends to the run's log (one record per step).
- **finish** = settlement: reserve the exact record in the ledger, append
  it (with the last steps, one atomic batch), finalize. The canonical record
  wins: one already reserved or in the log is used over a recomputed one.

Admission and settlement are the submission lifecycle's own
(``model.lifecycle``), shared with ``model.submissions``. Every gap between
two durable steps is a named crash point, the same ones as the submission
lifecycle (``model.failpoints``). A process holds its claims and log tails
in memory only; a restart starts from the stores.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from model.canonical import ZERO_DIGEST
from model.conversation.records import (
    AcknowledgedWriteLost,
    AppendConflict,
    FencedAppendRequest,
    NotMaterialized,
)
from model.failpoints import (
    CLAIMED_BEFORE_INPUT,
    INPUT_APPENDED_BEFORE_MARKER,
    NO_FAILPOINTS,
    Failpoints,
)
from model.kernel.records import (
    COMPLETED,
    EFFECT_INDOUBT,
    FAILED,
    PARKED,
    RUNNING,
    ExecutionNotRunning,
    ExecutionRecord,
    StartOutcome,
    StepRecord,
    StepSequenceConflict,
    UnknownExecution,
)
from model.ledger.records import settlement_of
from model.lifecycle import (
    DIAGNOSTIC_MESSAGE_MAX,
    INPUT_FAMILY,
    SETTLED_FAMILY,
    SubmissionLifecycle,
    created_batch_id,
    created_entry,
    input_batch_id,
    input_entry,
    input_record_id,
    logged_record,
    record_envelope,
)
from model.retry import is_retryable
from model.probe import NULL_PROBE, Probe
from model.schedules import parse_run_id

RUN_INPUT_FAMILY = INPUT_FAMILY  # the submission lifecycle's input record: the ledger rebuilds from it
STEP_FAMILY = "tool-call"  # persistence §11 family of durable step records
# A recovery read of one run's log: runs are bounded (a handful of steps),
# so one page holds any of them; more is a runaway, not a workload.
RUN_RECORDS_MAX = 1_024
CLAIM_RETRY_MS = 1_000
# A claim waits out at most one other owner's lease at a time (runs never
# renew, and the lease knob stays within minutes): this many one-second
# waits (~2.8 hours) is a claim that never comes, not a slow one.
CLAIM_ATTEMPTS_MAX = 10_000

Sleep = Callable[[int], Awaitable[None]]


def step_batch_id(run_id: str, first_seq: int) -> str:
    return f"steps:{run_id}:{first_seq}"


def settlement_record(status: str, output: Any) -> dict:
    if status == COMPLETED:
        return {"outcome": "completed", "result": output}
    assert status == FAILED, status
    diagnostic = output if type(output) is dict else {}
    return {"outcome": "failed", "diagnostic": {
        "errorTag": str(diagnostic.get("errorTag", "Error")),
        "message": str(diagnostic.get("message", ""))[:DIAGNOSTIC_MESSAGE_MAX]}}


def _status_of(outcome: str | None) -> str:
    if outcome is None:
        return RUNNING
    return COMPLETED if outcome == "completed" else FAILED


def _output_of(record: Any) -> Any:
    if type(record) is not dict:
        return None
    return record.get("result") if record.get("outcome") == "completed" else record.get("diagnostic")


class LedgerRuns:
    """The execution-store protocol for one process, over ledger + log + cursor."""

    def __init__(self, ledger: Any, log: Any, schedules: Any, owner_id: str, *, lease_ms: int,
                 now_ms: Callable[[], int], sleep_ms: Sleep, failpoints: Failpoints = NO_FAILPOINTS,
                 probe: Probe = NULL_PROBE) -> None:
        assert lease_ms > 0 and owner_id
        self.ledger = ledger
        self.log = log
        self.schedules = schedules
        self.owner_id = owner_id
        self.lease_ms = lease_ms
        self.now_ms = now_ms
        self.sleep_ms = sleep_ms
        self.failpoints = failpoints
        self.probe = probe
        self.lifecycle = SubmissionLifecycle(ledger, log, now_ms=now_ms, owner_id=owner_id, failpoints=failpoints)
        self._claims: dict[str, Any] = {}            # run_id -> Claim this process holds
        self._tails: dict[str, tuple[int, str]] = {}  # run_id -> (tail_seq, tail_digest) as last written
        self._steps: dict[str, int] = {}              # run_id -> steps in its log
        self._settled: dict[str, Any] = {}            # run_id -> the settlement record its log holds
        # run_id -> (its execution record, the settlement reserved when this
        # process claimed it): nobody else can reserve while we hold the claim.
        # run -> (its execution, its reserved settlement record, its admission receipt)
        self._owned: dict[str, tuple[ExecutionRecord, Any, str]] = {}

    # -- start ---------------------------------------------------------------

    async def start_execution(self, run_id: str, *, schedule_id: str | None, occurrence_ms: int | None,
                              flow_version: int, input: Any, started_at_ms: int) -> StartOutcome:
        assert schedule_id is not None and occurrence_ms is not None, "runs belong to schedules"
        assert parse_run_id(run_id) == (schedule_id, occurrence_ms), run_id
        # Read every time, never cached: retention (here or in another
        # process) may have retired the occurrence since.
        cursor = await self.schedules.cursor(schedule_id)
        if cursor.archived_through_ms is not None and occurrence_ms <= cursor.archived_through_ms:
            return StartOutcome(None, True)  # retired: archived and deleted, or held by a pin
        if cursor.high_water_ms is not None and occurrence_ms <= cursor.high_water_ms and (
                await self.ledger.get_by_idempotency_key(run_id, schedule_id, run_id) is None):
            # At or below the mark and never admitted (the cursor advances
            # only after an admission): an occurrence the schedule skipped.
            # A late alarm for it must not start it now (the execution
            # store's rule, ``decide_start``: retired), beside a later live run.
            return StartOutcome(None, True)
        run_input = {"scheduleId": schedule_id, "occurrenceMs": occurrence_ms, "flowVersion": flow_version,
                     "input": input}

        async def advance_cursor(_admission: Any) -> None:
            await self.schedules.advance(schedule_id, occurrence_ms)

        try:
            # A replay stops at the receipt: a half-admitted run is completed
            # by whoever owns it next (``_ensure_owned``). A run's log is born
            # with its admission.
            admission = await self.lifecycle.admit(run_id, schedule_id, run_id, run_input, started_at_ms,
                                                   complete_replay=False, log_is_new=True,
                                                   before_ready=advance_cursor)
        except Exception as error:
            # The same occurrence admitted before on other code (an alarm
            # delivered again after a deploy): a duplicate, not a new run.
            if getattr(type(error), "name", None) != "AdmissionConflict":
                raise
            existing = await self.load_execution(run_id)
            if existing is None or (existing.schedule_id, existing.occurrence_ms, existing.input) != (
                    schedule_id, occurrence_ms, input):
                raise
            return StartOutcome(existing, True)
        if admission.replayed:
            return StartOutcome(await self.load_execution(run_id), True)
        record = ExecutionRecord(run_id, schedule_id, occurrence_ms, flow_version, input, RUNNING,
                                 started_at_ms, None, None)
        self._owned[run_id] = (record, None, admission.receipt)
        await self._own(run_id, admission.submission_id, run_input, input_applied=False, fresh=True)
        return StartOutcome(record, False)

    # -- ownership -----------------------------------------------------------

    async def _own(self, run_id: str, submission_id: str, run_input: Any, *, input_applied: bool,
                   fresh: bool) -> bool:
        """Claim the run (waiting out another owner's lease), take over its
        log at the claim's epoch and apply the input once. False when the run
        got settled meanwhile (by the owner we were waiting for)."""
        ledger = self.ledger
        attempts = 0
        while True:
            claim = await ledger.claim(run_id, self.owner_id, self.lease_ms, self.now_ms())
            if claim is not None:
                break
            current = await ledger.get(submission_id)
            if current is not None and current.outcome is not None:
                return False
            attempts += 1
            assert attempts < CLAIM_ATTEMPTS_MAX, f"{run_id}: no claim after {attempts} attempts"
            await self.sleep_ms(CLAIM_RETRY_MS)
        assert claim.submission_id == submission_id, (claim, submission_id)
        self.probe.emit("run.claimed", run=run_id, owner=self.owner_id, epoch=claim.epoch)
        try:
            return await self._take_over(run_id, submission_id, run_input, claim, input_applied=input_applied,
                                         fresh=fresh)
        except BaseException:
            # Half-owned (the takeover or the input stopped on an error):
            # forget it, so the next attempt owns it again from the stores
            # instead of taking the input as applied.
            self._forget(run_id)
            raise

    async def _take_over(self, run_id: str, submission_id: str, run_input: Any, claim: Any, *,
                         input_applied: bool, fresh: bool) -> bool:
        ledger = self.ledger
        await self.lifecycle.take_over(run_id, claim)
        self._claims[run_id] = claim
        self.failpoints.hit(CLAIMED_BEFORE_INPUT)
        if fresh:
            self._tails[run_id] = (0, ZERO_DIGEST)
        else:
            observed = await self.log.inspect_tail(run_id)
            self._tails[run_id] = (observed.tail_seq, observed.tail_digest)
        empty = self._tails[run_id][0] == 0
        if empty:
            # A run's log starts with its conversation-created record, then its input.
            await self._append(run_id, created_batch_id(run_id), [created_entry(run_id)])
            input_applied = False
        if not input_applied:
            # An empty log holds no input yet; else an earlier owner's may be there.
            found = None if empty else await self.log.lookup_batch(run_id, input_batch_id(submission_id))
            if found is None:
                appended = await self._append(run_id, input_batch_id(submission_id), [
                    input_entry(submission_id, run_input, parse_run_id(run_id)[0], run_id, 1)])
                self.failpoints.hit(INPUT_APPENDED_BEFORE_MARKER)
                input_seq = appended.first_seq
            else:
                input_seq = found.first_seq
            await ledger.mark_input_applied(claim, input_record_id(submission_id), input_seq)
        return True

    async def _ensure_owned(self, run_id: str) -> None:
        """Own the run if it is unsettled; finish a settlement its log
        already holds (crash between append and finalize) instead of
        resuming it — nothing is ever recorded after a run's settlement."""
        if run_id in self._claims:
            return
        record = await self._ledger_record(run_id)
        if record.outcome is not None:
            return  # settled: nothing to own, reads only
        if not record.ready:
            # Admission stopped before ready: finish it (idempotent steps),
            # in admission's own order: the cursor first, then ready. A
            # crash between the two then leaves a run that is still not
            # ready (finished here again); the other order could leave a
            # ready run the cursor never heard of, and nobody would advance it.
            schedule_id, occurrence_ms = parse_run_id(run_id)
            await self.schedules.advance(schedule_id, occurrence_ms)
            await self.lifecycle.make_ready(run_id, record.submission_id)
        if await self._settle_from_log(run_id, record):
            return
        self._owned[run_id] = (self._execution(run_id, record), record.reserved_record, record.receipt)
        if not await self._own(run_id, record.submission_id, record.input, input_applied=record.input_applied,
                               fresh=False):
            self._owned.pop(run_id, None)

    async def _settle_from_log(self, run_id: str, record: Any) -> bool:
        """Finalize a settlement the run's log holds already; True if it did."""
        settlement = await self.lifecycle.adopt_logged(run_id, record)
        if settlement is None:
            return False
        self.probe.emit("run.settled", run=run_id, outcome=settlement.outcome, digest=settlement.record_digest,
                        epoch=record.epoch)
        return True

    async def _ledger_record(self, run_id: str) -> Any:
        schedule_id, _ = parse_run_id(run_id)
        record = await self.ledger.get_by_idempotency_key(run_id, schedule_id, run_id)
        if record is None:
            raise UnknownExecution(run_id)
        return record

    # -- the log -------------------------------------------------------------

    async def _append(self, run_id: str, batch_id: str, records: list[tuple[str, Any]]) -> Any:
        claim = self._claims[run_id]
        if run_id not in self._tails:
            # The last append's outcome is unknown (its reply was lost):
            # the log says where its tail is now.
            observed = await self.log.inspect_tail(run_id)
            self._tails[run_id] = (observed.tail_seq, observed.tail_digest)
        tail_seq, tail_digest = self._tails[run_id]
        now_ms = self.now_ms()
        envelopes = tuple(record_envelope(batch_id, i, entry, now_ms, self.owner_id, claim.epoch)
                          for i, entry in enumerate(records))
        try:
            result = await self.log.append(FencedAppendRequest(
                conversation_id=run_id, batch_id=batch_id, producer_id=self.owner_id, epoch=claim.epoch,
                expected_tail_seq=tail_seq, expected_tail_digest=tail_digest, records=envelopes))
        except AppendConflict as conflict:
            # The expected tail is one the log itself acknowledged, and a log
            # only grows: a tail *behind* it means acknowledged records are
            # gone (beyond the store's contract). Say so, loudly and typed.
            if conflict.kind == "tail" and conflict.actual_tail_seq is not None and (
                    conflict.actual_tail_seq < tail_seq):
                raise AcknowledgedWriteLost(run_id, tail_seq, conflict.actual_tail_seq) from None
            raise
        except Exception as error:
            if is_retryable(error):
                # It may have committed all the same (a lost reply): the
                # next append of this process reads the tail again.
                del self._tails[run_id]
            raise
        self._tails[run_id] = (result.last_seq, result.tail_digest)
        return result

    async def _read_all(self, run_id: str) -> tuple:
        records = await self.log.read(run_id, 0, RUN_RECORDS_MAX)
        assert len(records) < RUN_RECORDS_MAX, f"{run_id}: runaway run log"
        return records

    @staticmethod
    def step_records(run_id: str, records: tuple) -> tuple[StepRecord, ...]:
        return tuple(StepRecord(run_id, p["seq"], p["stepId"], p["kind"], p["output"])
                     for p in (r.envelope.payload for r in records if r.envelope.family == STEP_FAMILY))

    async def load_steps(self, run_id: str) -> tuple[StepRecord, ...]:
        try:
            await self._ensure_owned(run_id)
        except UnknownExecution:
            return ()
        records = await self._read_all(run_id)
        for record in records:
            if record.envelope.family == SETTLED_FAMILY:
                self._settled[run_id] = logged_record(record.envelope)
        steps = self.step_records(run_id, records)
        self._steps[run_id] = len(steps)
        return steps

    def _step_payloads(self, run_id: str, first_seq: int, steps: tuple) -> list[tuple[str, Any]]:
        have = self._steps.get(run_id, 0)
        if first_seq != have + 1:
            raise StepSequenceConflict(run_id, first_seq, have + 1)
        return [(STEP_FAMILY, {"seq": first_seq + i, "stepId": step_id, "kind": kind, "output": output})
                for i, (step_id, kind, output) in enumerate(steps)]

    async def append_steps(self, run_id: str, first_seq: int, steps: tuple) -> tuple[StepRecord, ...]:
        await self._ensure_owned(run_id)
        if run_id not in self._claims:
            raise ExecutionNotRunning(run_id, COMPLETED)  # settled (or being settled by its owner)
        payloads = self._step_payloads(run_id, first_seq, steps)
        await self._append(run_id, step_batch_id(run_id, first_seq), payloads)
        self._steps[run_id] = first_seq - 1 + len(steps)
        return tuple(StepRecord(run_id, p["seq"], p["stepId"], p["kind"], p["output"]) for _, p in payloads)

    async def append_step(self, run_id: str, seq: int, step_id: str, kind: str, output: object) -> StepRecord:
        (record,) = await self.append_steps(run_id, seq, ((step_id, kind, output),))
        return record

    async def park_execution(self, run_id: str) -> ExecutionRecord:
        # Parked is a property of the log (an EFFECT_INDOUBT step is its
        # last): the claim lapses and the run holds its schedule's slot.
        self._forget(run_id)
        record = await self.load_execution(run_id)
        assert record is not None and record.status == PARKED, record
        return record

    # -- finish --------------------------------------------------------------

    async def finish_execution(self, run_id: str, *, status: str, output: object, finished_at_ms: int,
                               steps: tuple = (), first_seq: int | None = None) -> ExecutionRecord:
        await self._ensure_owned(run_id)
        claim = self._claims.get(run_id)
        if claim is None:  # settled before: a repeated finish reads the outcome
            final = await self.load_execution(run_id)
            assert final is not None
            return final
        execution, reserved_record, receipt = self._owned[run_id]

        def remember(record: Any) -> None:
            self._owned[run_id] = (execution, record, receipt)  # a retry in this process reuses it

        async def append_settlement(batch_id: str, entry: tuple[str, Any]) -> None:
            # The last steps and the settlement record: one atomic batch.
            batch = self._step_payloads(run_id, first_seq or self._steps.get(run_id, 0) + 1, tuple(steps))
            batch.append(entry)
            await self._append(run_id, batch_id, batch)

        # The canonical record wins: the log's (as this process read it),
        # else the one already reserved, else this one.
        terminal = await self.lifecycle.terminalize(
            claim, logged=self._settled.get(run_id), reserved=reserved_record,
            fresh=lambda: settlement_record(status, output), append=append_settlement,
            finalized_at_ms=finished_at_ms, on_reserved=remember, receipt=receipt)
        settlement = terminal.settlement
        self.probe.emit("run.settled", run=run_id, outcome=settlement.outcome, digest=settlement.record_digest,
                        epoch=claim.epoch)
        self._forget(run_id)
        return ExecutionRecord(run_id, execution.schedule_id, execution.occurrence_ms, execution.flow_version,
                               execution.input, _status_of(settlement.outcome), execution.started_at_ms,
                               settlement.settled_at_ms, _output_of(terminal.record))

    def _forget(self, run_id: str) -> None:
        self._claims.pop(run_id, None)
        self._tails.pop(run_id, None)
        self._steps.pop(run_id, None)
        self._settled.pop(run_id, None)
        self._owned.pop(run_id, None)

    # -- reads ---------------------------------------------------------------

    def _execution(self, run_id: str, record: Any, status: str | None = None) -> ExecutionRecord:
        schedule_id, occurrence_ms = parse_run_id(run_id)
        run_input = record.input
        settled = settlement_of(record.reserved_record) if record.outcome is not None else None
        return ExecutionRecord(run_id, schedule_id, occurrence_ms, run_input["flowVersion"], run_input["input"],
                               status or _status_of(record.outcome), record.admitted_at_ms, record.settled_at_ms,
                               _output_of(settled))

    async def load_execution(self, run_id: str) -> ExecutionRecord | None:
        schedule_id, _ = parse_run_id(run_id)
        record = await self.ledger.get_by_idempotency_key(run_id, schedule_id, run_id)
        if record is None:
            return None
        if record.outcome is not None:
            return self._execution(run_id, record)
        return self._execution(run_id, record, await self._live_status(run_id))

    async def _live_status(self, run_id: str) -> str:
        try:
            steps = self.step_records(run_id, await self._read_all(run_id))
        except NotMaterialized:
            return RUNNING
        return PARKED if steps and steps[-1].kind == EFFECT_INDOUBT else RUNNING

    async def live_executions(self, schedule_id: str) -> tuple[ExecutionRecord, ...]:
        live = []
        for row in await self.ledger.scan_nonterminal(principal_id=schedule_id):
            if row.principal_id != schedule_id:
                continue  # a store that ignored the filter: the reference model says so
            # A scan row carries control fields only: the run's input is the by-id read's.
            record = await self.ledger.get(row.submission_id)
            if record is None:
                continue  # purged since the scan
            if await self._settle_from_log(record.conversation_id, record):
                continue  # the recovery finished its settlement: not live
            status = await self._live_status(record.conversation_id)
            if status == PARKED:
                # A parked run is no process's to write until someone resolves
                # it: an operator claims it at a newer epoch meanwhile. This
                # process's claim (its lease long gone) is dropped, so the run
                # is owned again from the stores when it resumes.
                self._forget(record.conversation_id)
            live.append(self._execution(record.conversation_id, record, status))
        return tuple(live)

    async def schedule_high_water_ms(self, schedule_id: str) -> int | None:
        cursor = await self.schedules.cursor(schedule_id)
        high = cursor.high_water_ms
        for record in await self.live_executions(schedule_id):
            if high is None or record.occurrence_ms > high:
                high = record.occurrence_ms
        return high

