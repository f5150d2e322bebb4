"""Retention with a pin seam.

A daily pass, per schedule, in occurrence order:

1. finish the deletion an earlier pass promised (``pending_delete``: the
   pass crashed between archiving a run and deleting it);
2. archive and delete held runs whose pins are gone;
3. retire each settled run older than the TTL: if the pin predicate holds
   it (a live finding cites it), it is *held* — kept, remembered by the
   schedule cursor — else its summary is chained into the archive, then its
   log and ledger rows are deleted. The pass stops at the first run with
   open work, and never passes the findings projection's checkpoint (a run
   not projected yet might pin something);
4. close findings past their TTL, drop pins whose holder is no longer a
   live finding, and reclaim expired blobs nobody pins.

The pin predicate is evaluated before every archive, delete and reclaim:
what a live finding cites survives. The pin index is keyed by ref, not by
run, so evidence outlives the run that recorded it.

``retention_forever`` is the process that runs the pass: daily, at midnight.
"""
from __future__ import annotations

from typing import Any, Iterable

import attrs

from model.conversation.records import HistoryCorrupted
from model.canonical import digest
from model.lifecycle import logged_record
from model.conversation.recovery import read_recovery_prefix
from model.retry import is_retryable
from model.runtime import Runtime
from model.schedules import Schedule, run_id_for
from model.pins import reclaim_expired_blobs

RETIRE_PER_PASS_MAX = 100_000
RETENTION_EVERY_MS = 24 * 60 * 60 * 1_000  # daily, at midnight (of the runtime's clock)
# A pass that failed on a retryable error starts over this much later.
RETENTION_RETRY_MS = 60 * 1_000


@attrs.frozen
class RetentionPolicy:
    run_ttl_ms: int
    blob_ttl_ms: int
    finding_ttl_ms: int
    # Scrub before archiving: read each run's log back through its digest
    # chain and match its settlement to the ledger's, so the archive commits
    # to a verified history. Costs a full read of every run (~25% of a
    # simulated wake); worth it wherever the store may lose or tear writes.
    verify_before_archive: bool = False
    # A sampled scrub where the store keeps its promises: verify every n-th
    # occurrence of a schedule (0: none beyond ``verify_before_archive``), so
    # the scrub's own code runs at 1/n of its cost.
    verify_every: int = 0

    def __attrs_post_init__(self) -> None:
        assert self.run_ttl_ms > 0 and self.blob_ttl_ms > 0 and self.finding_ttl_ms > 0
        assert type(self.verify_every) is int and self.verify_every >= 0, self.verify_every

    def verifies(self, schedule: Schedule, occurrence_ms: int) -> bool:
        """Whether the run of ``occurrence_ms`` is verified before it is archived."""
        if self.verify_before_archive:
            return True
        every = self.verify_every
        return every > 0 and (occurrence_ms - schedule.first_ms) // schedule.every_ms % every == 0


@attrs.define
class RetentionReport:
    archived: int = 0
    held: int = 0
    released: int = 0
    skipped: int = 0
    findings_closed: int = 0
    unpinned: int = 0
    reclaimed: int = 0


async def run_summary(ledger: Any, log: Any, run_id: str, record: Any, *, verify: bool = False) -> dict:
    """What the archive keeps of a run: identity, outcome digest and the tail
    digest of its log (the chain's commitment to every record).

    ``verify``: the archive commits to a *verified* history, not a trusted
    one: the log is read back with the fail-closed recovery read (its digest
    chain must recompute to the tail), and its settlement must be the one
    the ledger settled. Anything else is ``HistoryCorrupted``, raised before
    the run's rows are deleted and the evidence with them."""
    if not verify:
        tail = await log.inspect_tail(run_id)
        return {"runId": run_id, "outcome": record.outcome, "settlementDigest": record.reserved_digest,
                "tailSeq": tail.tail_seq, "tailDigest": tail.tail_digest}
    prefix = await read_recovery_prefix(log, run_id)
    tail = prefix.tail
    # A settlement's digest is its record envelope's (without the producer's
    # identity and epoch, which the append adds).
    settled = [digest(logged_record(r.envelope)) for r in prefix.records if r.envelope.family == "submission-settled"]
    if record.outcome is not None and (not settled or settled[-1] != record.reserved_digest):
        raise HistoryCorrupted(run_id, tail.tail_seq + 1, None,
                               f"the ledger settled this run ({record.reserved_digest}) but its log holds "
                               "no such settlement")
    return {"runId": run_id, "outcome": record.outcome, "settlementDigest": record.reserved_digest,
            "tailSeq": tail.tail_seq, "tailDigest": tail.tail_digest}


class Retention:
    """The retention pass of one process, over its (crashy) ports."""

    def __init__(self, *, ledger: Any, log: Any, schedules: Any, findings: Any, pins: Any, content: Any,
                 policy: RetentionPolicy, probe: Any) -> None:
        self.ledger = ledger
        self.log = log
        self.schedules = schedules
        self.findings = findings
        self.pins = pins
        self.content = content
        self.policy = policy
        self.probe = probe

    async def _pinned(self, run_id: str) -> bool:
        return bool(await self.findings.live_for_run(run_id))

    async def _delete(self, run_id: str) -> None:
        # The ledger first, as ``retire_conversation`` does: a pass cut
        # between the two leaves a log no ledger row points at (nothing
        # reads it: the ledger is how a run is found), where the other order
        # left a settled run whose log is gone to every reader until the next
        # pass finishes the promised deletion (``pending_delete``).
        await self.ledger.purge_conversation(run_id)
        await self.log.delete_conversation(run_id)

    async def run_pass(self, schedules: Iterable[Schedule], now_ms: int) -> RetentionReport:
        report = RetentionReport()
        policy = self.policy
        for schedule in schedules:
            await self._retire_schedule(schedule, now_ms - policy.run_ttl_ms, report)
        closed = await self.findings.close_expired(max(0, now_ms - policy.finding_ttl_ms), now_ms=now_ms,
                                                   limit=100_000)
        report.findings_closed = len(closed)
        live_ids = {f.finding_id for f in await self.findings.live_findings()}
        for ref in await self.pins.pinned_refs():
            for holder in await self.pins.holders(ref):
                if holder not in live_ids:
                    await self.pins.unpin(ref, holder)
                    report.unpinned += 1
        reclaimed = await reclaim_expired_blobs(self.pins, self.content,
                                                stored_before_ms=max(0, now_ms - policy.blob_ttl_ms))
        report.reclaimed = len(reclaimed)
        self.probe.emit("retention.pass", archived=report.archived, held=report.held, released=report.released,
                        skipped=report.skipped, findings_closed=report.findings_closed,
                        unpinned=report.unpinned, reclaimed=report.reclaimed)
        return report

    async def _retire_schedule(self, schedule: Schedule, before_ms: int, report: RetentionReport) -> None:
        schedule_id = schedule.schedule_id
        store = self.schedules
        cursor = await store.cursor(schedule_id)
        if cursor.pending_delete is not None:
            await self._delete(cursor.pending_delete)
        for run_id in cursor.held:
            if await self._pinned(run_id):
                continue
            record = await self._record(run_id)
            if await store.release(schedule_id, run_id, await run_summary(self.ledger, self.log, run_id, record,
                                                                      verify=self.policy.verify_before_archive)):
                await self._delete(run_id)
                report.released += 1
        if cursor.high_water_ms is None:
            return
        projected_ms = await self.findings.checkpoint(schedule_id)
        if projected_ms is None:
            return
        limit_ms = min(before_ms - 1, cursor.high_water_ms, projected_ms)
        occurrence_ms = schedule.first_ms if cursor.archived_through_ms is None else (
            cursor.archived_through_ms + schedule.every_ms)
        for _ in range(RETIRE_PER_PASS_MAX):
            if occurrence_ms > limit_ms:
                return
            run_id = run_id_for(schedule_id, occurrence_ms)
            record = await self.ledger.get_by_idempotency_key(run_id, schedule_id, run_id)
            if record is None:
                await store.retire(schedule_id, occurrence_ms, None, None)  # never ran (skipped)
                report.skipped += 1
            elif record.outcome is None:
                return  # open work: nothing behind it is retired before it
            elif await self._pinned(run_id):
                await store.retire(schedule_id, occurrence_ms, run_id, None, hold=True)
                report.held += 1
            else:
                summary = await run_summary(self.ledger, self.log, run_id, record,
                                            verify=self.policy.verifies(schedule, occurrence_ms))
                await store.retire(schedule_id, occurrence_ms, run_id, summary)
                await self._delete(run_id)
                report.archived += 1
            occurrence_ms += schedule.every_ms

    async def _record(self, run_id: str) -> Any:
        from model.schedules import parse_run_id

        schedule_id, _ = parse_run_id(run_id)
        record = await self.ledger.get_by_idempotency_key(run_id, schedule_id, run_id)
        assert record is not None and record.outcome is not None, run_id
        return record


async def retire_conversation(ledger: Any, log: Any, conversation_id: str) -> bool:
    """Retention of a conversation its client closed: its ledger rows, then
    its log. True when it is gone whole; False while open work holds it.

    The ledger goes first because its purge is the check: it refuses
    (``PurgeRefused``) while any submission is open, so open work and the
    log it is recorded in are never deleted. A process that dies between
    the two leaves a log no ledger row points at (no recovery reads it: it
    has no open work); the next pass deletes it. Both calls are idempotent,
    so a pass that failed anywhere is simply run again."""
    try:
        await ledger.purge_conversation(conversation_id)
    except Exception as error:
        if getattr(type(error), "name", None) == "PurgeRefused":
            return False
        raise
    await log.delete_conversation(conversation_id)
    return True


async def retention_forever(retention: Retention, schedules: Iterable[Schedule], runtime: Runtime) -> None:
    """The retention process: ``retention.run_pass`` daily at midnight.

    ``schedules``: in a fixed order (the order of the store calls). A
    retryable failure (``model.retry``) waits ``RETENTION_RETRY_MS`` and
    starts the pass over (a pass is idempotent: what it finished stays
    finished); anything else is raised: the process fails loudly."""
    schedules = tuple(schedules)
    # The retention process's forever loop: it never ends by itself; it ends
    # when its node is killed (every turn sleeps until the next midnight).
    while True:
        next_midnight_ms = (runtime.now_ms() // RETENTION_EVERY_MS + 1) * RETENTION_EVERY_MS
        await runtime.sleep_until_ms(next_midnight_ms)
        # Not bounded by a count: it ends when a pass completes. Each attempt
        # waits a minute; how many a store's transient failures take is the
        # store's (a fault rate, until the faults heal), not a bug here.
        while True:
            try:
                await retention.run_pass(list(schedules), runtime.now_ms())
                break
            except Exception as error:
                if not is_retryable(error):
                    raise
                await runtime.sleep_ms(RETENTION_RETRY_MS)  # a transient failure: the pass starts over
