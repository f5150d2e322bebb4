"""The ports adversary: clients of the kernel's execution store, the schedule
store, the pin index and the findings projection, at the edges of their
contracts, racing, under faults.

Why: the sentinels run the kernel on the ledger (``model.runs.LedgerRuns``),
so no workload ever called the execution store port
(``model.kernel.store.ExecutionStore``); and they call the schedule store,
the pin index and the findings projection only the way retention and the
projector do, so the error paths (an illegal argument, an unknown run, a
finished run, a retired occurrence, a size mismatch, an invalid finding,
``unpin``) were never reached. ``PortsAdversary`` runs ``nodes`` processes
(``ports-1`` ...) that call those four ports directly, through each node's
crashy traced ports (``System.ports_for``: the full fault mix applies, and
on SQLite each incarnation has its own connection), with legal and illegal
arguments drawn from the ``workload`` stream's per-process forks:

- the kernel: a run's whole life (start, identical and conflicting start
  retries, steps one by one and in batches, gaps, duplicates, an empty
  batch as a probe, park, finish with and without steps, finishing twice
  with the same, a reordered-equal and a different result, appending to or
  parking a finished run), duplicate starts at and below the schedule's
  high-water mark, purges (the mark survives them; a purged unscheduled run
  starts afresh), unknown runs, and one illegal argument at a time;
- schedule cursors: advance (never lowers), retire skipped / archived /
  held occurrences (idempotent), release, summaries at the JSON number and
  key-order edges (the archive digest is RFC 8785's), a summary with no
  JSON form, illegal arguments;
- the pin index: blob rows (the later time wins, another size is refused),
  pins and unpins (idempotent, several holders, non-ASCII holders sorted, a
  holder at the length cap), expiry listings (limit 0), forget;
- the findings projection: runs applied once and in order, live ids
  skipped, checkpoints, closing expired findings and re-opening a closed id,
  the schema's edges accepted and every way out of it refused.

Beside the episodes, every process races the others once a ``race_ms``
tick on shared names: the same run started, stepped and finished by all;
the same occurrence retired, the same pin pinned, the same run's findings
applied.

The ``reference-model`` oracle judges every answer exactly against its
independent models (``scenarios.reference.kernel``, ``.schedules``,
``.pins``, ``.findings``). This workload's own checker,
``ports-expectations``, holds what a client sees: every error is typed
(never a UnicodeError, an OverflowError or an AssertionError), an illegal
argument is refused as TypeError/ValueError, and a few facts of the
lifecycle that hold whatever raced (a purged run is gone, a run id retired
stays retired). An injected retryable error (``ReplyLost`` after the commit
included) is retried with the same arguments; a crash ends the process and
its next incarnation starts on fresh names.
"""
from __future__ import annotations

from typing import Any

from faults.describe import FINDINGS_DESCRIBERS, KERNEL_DESCRIBERS, PIN_DESCRIBERS, SCHEDULE_DESCRIBERS
from model.kernel.records import (EFFECT_INDOUBT, EVENT_EMITTED, EXECUTION_MIGRATED, STEP_COMPLETED, STEP_KINDS,
                                  STEP_STARTED)
from model.retry import error_name
from scenarios.adversaries.client import RETRY_WAIT_MS, ClientProcess, Expectations, Outcome, attempt
from scenarios.adversaries.common import _ref, _reordered, _typed
from sim.node import Node
from sim.workload import Workload
from sim.world import World

PORTS = {"kernel": tuple(KERNEL_DESCRIBERS), "schedules": tuple(SCHEDULE_DESCRIBERS), "pins": tuple(PIN_DESCRIBERS),
         "findings": tuple(FINDINGS_DESCRIBERS)}
CALL_STATS = tuple(f"calls_{port}_{method}" for port, methods in PORTS.items() for method in methods)

EDGES = (
    # kernel
    "kernel_started", "kernel_start_replayed", "kernel_start_conflicting_replayed", "kernel_append_duplicate_refused",
    "kernel_append_gap_refused", "kernel_batch_appended", "kernel_empty_batch_probe", "kernel_empty_batch_stale",
    "kernel_parked", "kernel_park_idempotent", "kernel_append_to_parked", "kernel_finished",
    "kernel_finished_with_steps", "kernel_finish_repeat", "kernel_finish_reordered_repeat",
    "kernel_finish_conflict_output", "kernel_finish_conflict_status", "kernel_finish_repeat_missing_steps",
    "kernel_finish_stale_seq_refused", "kernel_append_to_finished_refused", "kernel_park_finished_refused",
    "kernel_unknown_run_refused", "kernel_start_below_mark_retired", "kernel_start_at_mark_retired",
    "kernel_purged", "kernel_retired_after_purge", "kernel_mark_survives_purge",
    "kernel_unscheduled_restarts_after_purge", "kernel_live_ordered", "kernel_values_roundtrip",
    "kernel_illegal_rejected", "kernel_shared_start_replayed", "kernel_shared_finish_conflict",
    # schedule store
    "schedules_empty_cursor", "schedules_advance_never_lowers", "schedules_retire_skipped",
    "schedules_retire_idempotent", "schedules_archived", "schedules_held", "schedules_released",
    "schedules_release_idempotent", "schedules_summary_unencodable", "schedules_illegal_rejected",
    "schedules_shared_retire_raced",
    # pin index
    "pins_blob_recorded", "pins_stored_at_keeps_latest", "pins_size_mismatch_rejected", "pins_pin_idempotent",
    "pins_holders_sorted", "pins_pinned_not_expired", "pins_unpin_idempotent", "pins_unpinned_last_holder",
    "pins_expired_listed", "pins_expired_limit_zero", "pins_forget_idempotent", "pins_pin_without_blob",
    "pins_holder_at_max_length", "pins_illegal_rejected", "pins_shared_pin_raced",
    # findings projection
    "findings_opened", "findings_reapply_noop", "findings_late_run_dropped", "findings_live_id_skipped",
    "findings_checkpoint_advanced", "findings_live_for_run", "findings_closed", "findings_reopened_after_close",
    "findings_schema_edges_accepted", "findings_invalid_rejected", "findings_duplicate_id_rejected",
    "findings_illegal_rejected", "findings_shared_apply_raced",
)
EDGE_STATS = tuple(f"edge_{name}" for name in EDGES)
# What a port-storm sweep must see somewhere (``sometimes``).
SOMETIMES = EDGE_STATS + CALL_STATS + ("ports_typed_rejections",)

INT64_MAX = 2**63 - 1
SAFE_MAX = 2**53 - 1
# A purge by any process takes runs finished this long ago: an episode's own
# finished runs outlive it (a purge episode finishes its runs in the past).
PURGE_AGE_MS = 10 * 60_000
HOLDER_MAX = 1_024
# Keys whose UTF-16 order differs from their code-point order, and numbers
# at the edges of JSON's (RFC 8785) spelling.
ODD_KEYS = ("\U0001F600", "\uFB01", "\ue000", "a", "\u00e9")
NUMBERS = (1.0, -0.0, 1e21, 1e-7, 5e-324, 0.1, 2**53 - 1, -(2**53 - 1), 123456789.125)
CATEGORIES = ("slow-query", "lock-wait", "bloat")
SEVERITIES = ("low", "medium", "high")


class PortsExpectations(Expectations):
    """``ports-expectations``: what a client of the four ports sees (typed
    errors, refused illegal arguments, purged runs gone). Reads no events."""

    name = "ports-expectations"


class PortsAdversary(Workload):
    """``nodes`` processes running the episodes below, ``think_ms`` apart,
    and racing each other every ``race_ms`` on shared names, until the heal
    instant."""

    name = "adversary-ports"

    def __init__(self, *, nodes: int = 2, think_ms: tuple[int, int] = (500, 20_000), race_ms: int = 90_000) -> None:
        assert 1 <= nodes <= 8 and 0 < think_ms[0] <= think_ms[1] and race_ms >= 1_000, (nodes, think_ms, race_ms)
        self.names = tuple(f"ports-{i + 1}" for i in range(nodes))
        self.think_ms = think_ms
        self.race_ms = race_ms
        self.checker = PortsExpectations()
        self.edges: dict[str, int] = dict.fromkeys(EDGES, 0)
        self.calls: dict[str, int] = dict.fromkeys(CALL_STATS, 0)
        self.typed_rejections = 0
        self.receipts: dict[str, str] = {}  # submission -> its admission's receipt (a settlement names it)
        self.episodes = 0
        # The timestamps handed a store on purpose (``ClientProcess.chosen_ms``), not read from a clock.
        self.chosen: set[tuple[str, str, str, int]] = set()

    def chose(self, call: Any, value: Any) -> bool:
        """Whether ``value``, a timestamp ``call`` carried, was chosen on purpose."""
        return (call.node, call.port, call.method, value) in self.chosen

    def setup(self, world: World) -> None:
        self.world = world
        world.trace.subscribe([f"{port}.{method}" for port, methods in PORTS.items() for method in methods],
                              self._count_call)
        for name in self.names:
            world.add_node(name, self._start, role="client")

    def _start(self, node: Node) -> None:
        process = _Process(self, self.world, node)
        self.world.runtime.spawn_on(node, "ports-adversary", process.main())
        self.world.runtime.spawn_on(node, "ports-racer", process.racer())

    def _count_call(self, event: tuple) -> None:
        if event.node.startswith("ports-"):
            stat = "calls_" + event.kind.replace(".", "_", 1)
            self.calls[stat] = self.calls.get(stat, 0) + 1

    def edge(self, name: str) -> None:
        self.edges[name] += 1

    def metrics(self) -> dict[str, Any]:
        stats: dict[str, Any] = {"ports_typed_rejections": self.typed_rejections, "ports_episodes": self.episodes}
        stats.update({f"edge_{name}": count for name, count in self.edges.items()})
        stats.update(self.calls)
        # What the stores hold at the end (their own counts, read directly).
        system = self.world.system
        stats.update({f"ports_held_{store}_{what}": n for store in ("kernel", "pins")
                      for what, n in getattr(system, store).counts().items()})
        return stats


class _Process(ClientProcess):
    """One incarnation of one node: its ports, its stream, fresh names."""

    def __init__(self, workload: PortsAdversary, world: World, node: Node) -> None:
        super().__init__(workload, world, node, "workload/adversary-ports")

    # -- plumbing -------------------------------------------------------------------

    async def call(self, port: str, method: str, *args: Any, **kwargs: Any) -> Outcome:
        """One logical call: injected retryable errors retried, same arguments."""
        fn = getattr(getattr(self.ports, port), method)
        out = await attempt(lambda: fn(*args, **kwargs), self.runtime.sleep_ms, lambda: self.rng.between(*RETRY_WAIT_MS))
        if out.error is not None:
            self.expect(_typed(out.error), f"{port}.{method} raised an untyped {out.show()}")
        return out

    def rejected(self, out: Outcome, names: tuple[str, ...], what: str, edge: str) -> bool:
        """A provoked error: one of ``names``."""
        ok = out.error is not None and error_name(out.error) in names and _typed(out.error)
        if ok:
            self.w.typed_rejections += 1
            self.w.edge(edge)
        return self.expect(ok, f"{what}: expected {'/'.join(names)}, got {out.show()}")

    def value(self) -> Any:
        """A JSON value at the edges: numbers, odd member names, nesting, a tuple."""
        keys = list(ODD_KEYS)
        self.rng.shuffle(keys)
        numbers = list(NUMBERS)
        self.rng.shuffle(numbers)
        pick = self.rng.below(5)
        if pick == 0:
            return None
        if pick == 1:
            return numbers[0]
        if pick == 2:
            return [numbers[0], (numbers[1], True), {keys[0]: None}]
        return {keys[0]: numbers[0], keys[1]: [numbers[1], {keys[2]: numbers[2]}], "big": 2**70, "t": (1, 2),
                keys[3]: "\u00e9\U0001F600", "min": -(2**63)}

    # -- the process ------------------------------------------------------------------

    async def main(self) -> None:
        episodes = [self.kernel_life, self.kernel_life, self.kernel_marks, self.kernel_illegal, self.schedules,
                    self.schedules_illegal, self.pins, self.pins_illegal, self.findings, self.findings_illegal]
        heal_at_ms = self.world.heal_at_ms
        while self.now() < heal_at_ms:  # bounded by the heal instant, or the process dies
            order = list(episodes)
            self.rng.shuffle(order)
            for episode in order:
                await self.runtime.sleep_ms(self.rng.between(*self.w.think_ms))
                if self.now() >= heal_at_ms:
                    return
                self.w.episodes += 1
                await episode()

    # -- kernel: one run's life ------------------------------------------------------------

    async def steps_held(self, run_id: str) -> int | None:
        out = await self.call("kernel", "load_steps", run_id)
        if not self.expect(out.ok, f"load_steps({run_id!r}): {out.show()}", run_id):
            return None
        return len(out.value)

    async def append(self, run_id: str, seq: int, kind: str, output: Any) -> int | None:
        """Append step ``seq``; the log's length after it (a lost reply's retry
        answers a conflict one past it: its own write)."""
        out = await self.call("kernel", "append_step", run_id, seq, f"step-{seq}", kind, output)
        if out.ok:
            return seq
        if out.named("StepSequenceConflict") and out.lost and out.error.actual_next_seq == seq + 1:
            return seq
        self.expect(False, f"append_step({run_id!r}, {seq}) failed: {out.show()}", run_id)
        return None

    async def kernel_life(self) -> None:
        run_id = self.uid("k")
        scheduled = self.rng.below(3) != 0
        schedule_id = f"ks-{self.label}" if scheduled else None
        occurrence_ms = self.now() * 4 + self._serial if scheduled else (None if self.rng.below(2) else self.now())
        payload = self.value()
        start = dict(schedule_id=schedule_id, occurrence_ms=occurrence_ms, flow_version=1 + self.rng.below(3),
                     input=payload, started_at_ms=self.now())
        out = await self.call("kernel", "start_execution", run_id, **start)
        if not self.expect(out.ok and out.value.record is not None, f"start of {run_id!r}: {out.show()}", run_id):
            return
        self.edge_if(not out.value.replayed, "kernel_started")
        first = out.value.record
        again = await self.call("kernel", "start_execution", run_id, **start)
        self.edge_if(again.ok and again.value.replayed and again.value.record == first, "kernel_start_replayed")
        other = dict(start, flow_version=start["flow_version"] + 1, input={"other": True},
                     started_at_ms=self.chosen_ms("kernel", "start_execution", 0))
        clash = await self.call("kernel", "start_execution", run_id, **other)
        self.edge_if(clash.ok and clash.value.replayed and clash.value.record == first,
                     "kernel_start_conflicting_replayed")
        self.edge_if(clash.ok and clash.value.record is not None and clash.value.record.input == first.input,
                     "kernel_values_roundtrip")
        n = await self.append(run_id, 1, STEP_STARTED, self.value())
        if n is None:
            return
        dup = await self.call("kernel", "append_step", run_id, n, "dup", STEP_COMPLETED, None)
        self.edge_if(dup.named("StepSequenceConflict") and dup.error.actual_next_seq == n + 1,
                     "kernel_append_duplicate_refused")
        gap = await self.call("kernel", "append_step", run_id, n + 2 + self.rng.below(3), "gap", STEP_COMPLETED, 1)
        self.edge_if(gap.named("StepSequenceConflict"), "kernel_append_gap_refused")
        batch = tuple((f"b{i}", STEP_KINDS[(i + self.rng.below(len(STEP_KINDS))) % len(STEP_KINDS)], self.value())
                      for i in range(1 + self.rng.below(3)))
        appended = await self.call("kernel", "append_steps", run_id, n + 1, batch)
        if appended.ok or (appended.named("StepSequenceConflict") and appended.lost):
            self.edge_if(appended.ok, "kernel_batch_appended")
            n += len(batch)
        else:
            self.expect(False, f"append_steps({run_id!r}, {n + 1}) failed: {appended.show()}", run_id)
            return
        probe = await self.call("kernel", "append_steps", run_id, n + 1, ())
        self.edge_if(probe.ok and probe.value == (), "kernel_empty_batch_probe")
        stale = await self.call("kernel", "append_steps", run_id, n, [])
        self.edge_if(stale.named("StepSequenceConflict"), "kernel_empty_batch_stale")
        if self.rng.below(2) == 0:
            parked = await self.call("kernel", "park_execution", run_id)
            self.edge_if(parked.ok and parked.value.status == "parked", "kernel_parked")
            twice = await self.call("kernel", "park_execution", run_id)
            self.edge_if(twice.ok and twice.value.status == "parked", "kernel_park_idempotent")
            resolved = await self.append(run_id, n + 1, STEP_COMPLETED, {"resolved_by": "operator"})
            if resolved is None:
                return
            n = resolved
            self.w.edge("kernel_append_to_parked")
        if scheduled:
            live = await self.call("kernel", "live_executions", schedule_id)
            self.edge_if(live.ok and run_id in [r.run_id for r in live.value], "kernel_live_ordered")
            await self.call("kernel", "schedule_high_water_ms", schedule_id)
        result = {"done": [1, 2.5], "odd": self.value()}
        status = "completed" if self.rng.below(3) else "failed"
        with_steps = self.rng.below(2) == 0
        tail = ((f"t{n + 1}", EVENT_EMITTED, {"finding": n}), (f"t{n + 2}", STEP_COMPLETED, None)) if with_steps else ()
        finish = dict(status=status, output=result, finished_at_ms=self.now())
        if with_steps:
            finish.update(steps=tail, first_seq=n + 1)
            early = await self.call("kernel", "finish_execution", run_id, status=status, output=result,
                                    finished_at_ms=self.now(), steps=tail, first_seq=n)
            self.edge_if(early.named("StepSequenceConflict"), "kernel_finish_stale_seq_refused")
        done = await self.call("kernel", "finish_execution", run_id, **finish)
        if not self.expect(done.ok and done.value.status == status, f"finish of {run_id!r}: {done.show()}", run_id):
            return
        self.w.edge("kernel_finished_with_steps" if with_steps else "kernel_finished")
        n += len(tail)
        record = done.value
        repeat = await self.call("kernel", "finish_execution", run_id, **dict(finish, finished_at_ms=self.now() + 7))
        self.edge_if(repeat.ok and repeat.value == record, "kernel_finish_repeat")
        reordered = await self.call("kernel", "finish_execution", run_id, status=status, output=_reordered(result),
                                    finished_at_ms=self.now())
        self.edge_if(reordered.ok and reordered.value == record, "kernel_finish_reordered_repeat")
        changed = dict(result, done=[1, 2.5, 0])
        conflict = await self.call("kernel", "finish_execution", run_id, status=status, output=changed,
                                   finished_at_ms=self.now())
        self.edge_if(conflict.named("FinishConflict"), "kernel_finish_conflict_output")
        flipped = "failed" if status == "completed" else "completed"
        conflict = await self.call("kernel", "finish_execution", run_id, status=flipped, output=result,
                                   finished_at_ms=self.now())
        self.edge_if(conflict.named("FinishConflict"), "kernel_finish_conflict_status")
        implied = await self.call("kernel", "finish_execution", run_id, status=status, output=result,
                                  finished_at_ms=self.now(), steps=(("x", STEP_COMPLETED, None),), first_seq=n + 1)
        self.edge_if(implied.named("FinishConflict"), "kernel_finish_repeat_missing_steps")
        late = await self.call("kernel", "append_step", run_id, n + 1, "late", STEP_COMPLETED, None)
        self.edge_if(late.named("ExecutionNotRunning"), "kernel_append_to_finished_refused")
        park = await self.call("kernel", "park_execution", run_id)
        self.edge_if(park.named("ExecutionNotRunning"), "kernel_park_finished_refused")
        await self.call("kernel", "load_execution", run_id)
        held = await self.steps_held(run_id)
        self.expect(held is None or held == n, f"{run_id!r} holds {held} steps, the adversary appended {n}", run_id)
        ghost = self.uid("ghost")
        unknown = (await self.call("kernel", "append_step", ghost, 1, "s", STEP_COMPLETED, None),
                   await self.call("kernel", "park_execution", ghost),
                   await self.call("kernel", "finish_execution", ghost, status="completed", output=None,
                                   finished_at_ms=self.now()),
                   await self.call("kernel", "finish_execution", ghost, status="failed", output=None,
                                   finished_at_ms=self.now(), steps=(("s", STEP_COMPLETED, None),), first_seq=1))
        self.edge_if(all(o.named("UnknownExecution") for o in unknown), "kernel_unknown_run_refused")
        await self.call("kernel", "load_execution", ghost)
        await self.call("kernel", "load_steps", ghost)

    # -- kernel: marks and purges ---------------------------------------------------------

    async def kernel_marks(self) -> None:
        schedule_id = self.uid("km")
        base = 1_000 + self.rng.below(1_000)
        top = base + 5
        runs = (f"{schedule_id}@{base}", f"{schedule_id}@{top}")
        start = dict(schedule_id=schedule_id, occurrence_ms=top, flow_version=1, input=None, started_at_ms=self.now())
        # Two live occurrences, started out of order.
        for run_id, occurrence_ms in ((runs[1], top), (runs[0], base)):
            if occurrence_ms == base:
                # Below the mark now: retired, not created. (A schedule's
                # runs start in occurrence order; this one came late.)
                late = await self.call("kernel", "start_execution", run_id, **dict(start, occurrence_ms=base))
                self.edge_if(late.ok and late.value.record is None and late.value.replayed,
                             "kernel_start_below_mark_retired")
                continue
            out = await self.call("kernel", "start_execution", run_id, **start)
            if not self.expect(out.ok and out.value.record is not None, f"start of {run_id!r}: {out.show()}", run_id):
                return
        other = f"{schedule_id}@{top}-b"
        # Another run of the schedule past the mark; both are live.
        second = await self.call("kernel", "start_execution", other, **dict(start, occurrence_ms=top + 1))
        live = await self.call("kernel", "live_executions", schedule_id)
        self.edge_if(second.ok and live.ok and [r.run_id for r in live.value] == [runs[1], other],
                     "kernel_live_ordered")
        at = await self.call("kernel", "start_execution", f"{schedule_id}@{top}-dup", **dict(start, occurrence_ms=top))
        self.edge_if(at.ok and at.value.record is None, "kernel_start_at_mark_retired")
        run_id = runs[1]
        # Finished in the past: any process's next purge takes them.
        for finished in (run_id, other):
            done = await self.call("kernel", "finish_execution", finished, status="completed", output={"n": base},
                                   finished_at_ms=-1 - self.rng.below(1_000))
            # (A retry after a lost reply may find the run purged already by another process.)
            if not self.expect(done.ok or done.lost and done.named("UnknownExecution"),
                               f"finish of {finished!r}: {done.show()}", finished):
                return
        adhoc = self.uid("ku")
        made = await self.call("kernel", "start_execution", adhoc, schedule_id=None, occurrence_ms=None,
                               flow_version=1, input=[1], started_at_ms=self.now())
        if made.ok:
            await self.call("kernel", "finish_execution", adhoc, status="failed", output="gone", finished_at_ms=-5)
        purge = await self.call("kernel", "purge_finished", max(0, self.now() - PURGE_AGE_MS))
        self.expect(purge.ok, f"purge_finished: {purge.show()}")
        gone = await self.call("kernel", "load_execution", run_id)
        if self.expect(gone.ok and gone.value is None, f"{run_id!r} finished at -1 ms survived a purge: {gone.show()}",
                       run_id):
            self.w.edge("kernel_purged")
        again = await self.call("kernel", "start_execution", run_id, **start)
        if self.expect(again.ok and again.value.record is None and again.value.replayed,
                       f"start of purged {run_id!r} at its schedule's mark answered {again.show()}: it is retired",
                       run_id):
            self.w.edge("kernel_retired_after_purge")
        mark = await self.call("kernel", "schedule_high_water_ms", schedule_id)
        self.edge_if(mark.ok and mark.value == top + 1, "kernel_mark_survives_purge")
        if made.ok:
            fresh = await self.call("kernel", "start_execution", adhoc, schedule_id=None, occurrence_ms=None,
                                    flow_version=2, input=[2], started_at_ms=self.now())
            self.edge_if(fresh.ok and fresh.value.record is not None and fresh.value.record.flow_version == 2,
                         "kernel_unscheduled_restarts_after_purge")
            await self.call("kernel", "finish_execution", adhoc, status="completed", output=None, finished_at_ms=-5)
        await self.call("kernel", "purge_finished", -(2**63))
        await self.call("kernel", "live_executions", schedule_id)

    async def kernel_illegal(self) -> None:
        run_id = self.uid("ki")
        out = await self.call("kernel", "start_execution", run_id, schedule_id=None, occurrence_ms=None,
                              flow_version=1, input={}, started_at_ms=self.now())
        if not self.expect(out.ok, f"start of {run_id!r}: {out.show()}", run_id):
            return
        ok = dict(schedule_id=None, occurrence_ms=None, flow_version=1, input=None, started_at_ms=0)
        finish = dict(status="completed", output=None, finished_at_ms=0)
        lone = "x\ud800"
        cases = (
            ("TypeError", "start_execution", (5,), ok),
            ("ValueError", "start_execution", (lone,), ok),
            ("TypeError", "start_execution", (self.uid("ki"),), dict(ok, schedule_id="s")),
            ("TypeError", "start_execution", (self.uid("ki"),), dict(ok, schedule_id="s", occurrence_ms=True)),
            ("ValueError", "start_execution", (self.uid("ki"),), dict(ok, schedule_id=lone, occurrence_ms=1)),
            ("TypeError", "start_execution", (self.uid("ki"),), dict(ok, flow_version=1.0)),
            ("ValueError", "start_execution", (self.uid("ki"),), dict(ok, started_at_ms=INT64_MAX + 1)),
            ("ValueError", "start_execution", (self.uid("ki"),), dict(ok, input={"x": float("nan")})),
            ("ValueError", "start_execution", (self.uid("ki"),), dict(ok, input=[float("-inf")])),
            ("TypeError", "start_execution", (self.uid("ki"),), dict(ok, input={"x": {1, 2}})),
            ("ValueError", "start_execution", (self.uid("ki"),), dict(ok, input={lone: 1})),
            ("ValueError", "start_execution", (self.uid("ki"),), dict(ok, input=["ok", lone])),
            ("ValueError", "append_step", (run_id, 1, "s", "NOPE", None), {}),
            ("TypeError", "append_step", (run_id, "1", "s", STEP_COMPLETED, None), {}),
            ("TypeError", "append_step", (run_id, 1, None, STEP_COMPLETED, None), {}),
            ("ValueError", "append_step", (run_id, 1, "s", STEP_COMPLETED, float("nan")), {}),
            ("ValueError", "append_step", (run_id, 2**64, "s", STEP_COMPLETED, None), {}),
            ("ValueError", "append_step", (run_id, 1, lone, STEP_COMPLETED, None), {}),
            ("TypeError", "append_steps", (run_id, 1, {"s": 1}), {}),
            ("TypeError", "append_steps", (run_id, 1, (("s", STEP_COMPLETED),)), {}),
            ("ValueError", "append_steps", (run_id, 1, (("s", "NOPE", None),)), {}),
            ("TypeError", "append_steps", (run_id, None, ()), {}),
            ("TypeError", "append_steps", (run_id, 1, (("s", 7, None),)), {}),
            ("ValueError", "finish_execution", (run_id,), dict(finish, status="running")),
            ("ValueError", "finish_execution", (run_id,), dict(finish, status="parked")),
            ("TypeError", "finish_execution", (run_id,), dict(finish, finished_at_ms="0")),
            ("TypeError", "finish_execution", (run_id,), dict(finish, steps=(("s", STEP_COMPLETED, 1),))),
            ("TypeError", "finish_execution", (run_id,), dict(finish, steps=(("s", STEP_COMPLETED, 1),), first_seq="1")),
            ("TypeError", "finish_execution", (run_id,), dict(finish, first_seq=1.5)),
            ("ValueError", "finish_execution", (run_id,), dict(finish, output=float("inf"))),
            ("TypeError", "purge_finished", ("0",), {}),
            ("ValueError", "purge_finished", (INT64_MAX + 1,), {}),
            ("TypeError", "live_executions", (None,), {}),
            ("ValueError", "live_executions", (lone,), {}),
            ("TypeError", "schedule_high_water_ms", (b"s",), {}),
            ("TypeError", "load_steps", (None,), {}),
            ("TypeError", "load_execution", (1,), {}),
            ("TypeError", "park_execution", (None,), {}),
        )
        for _ in range(3 + self.rng.below(4)):
            name, method, args, kwargs = cases[self.rng.below(len(cases))]
            got = await self.call("kernel", method, *args, **kwargs)
            self.rejected(got, (name,), f"kernel.{method}{args!r:.80} {kwargs!r:.120}", "kernel_illegal_rejected")
        # Nothing changed: the run is still running, with no steps.
        after = await self.call("kernel", "load_execution", run_id)
        self.expect(after.ok and after.value is not None and after.value.status == "running",
                    f"{run_id!r} after refused calls: {after.show()}", run_id)
        await self.call("kernel", "finish_execution", run_id, status="failed", output=None, finished_at_ms=-3)

    # -- schedule cursors ----------------------------------------------------------------------

    def summary(self) -> dict:
        keys = list(ODD_KEYS)
        self.rng.shuffle(keys)
        numbers = list(NUMBERS)
        self.rng.shuffle(numbers)
        return {"runId": self.uid("summary"), keys[0]: numbers[0], keys[1]: [numbers[1], numbers[2]],
                keys[2]: {keys[3]: numbers[3], "s": "\u00e9\U0001F600\n\""}, "ok": True}

    async def schedules(self) -> None:
        schedule_id = self.uid("sch") + "-\u00e9"
        empty = await self.call("schedules", "cursor", schedule_id)
        self.edge_if(empty.ok and empty.value.high_water_ms is None and empty.value.archived_runs == 0,
                     "schedules_empty_cursor")
        await self.call("schedules", "advance", schedule_id, 5_000)
        await self.call("schedules", "advance", schedule_id, 3_000)
        after = await self.call("schedules", "cursor", schedule_id)
        self.edge_if(after.ok and after.value.high_water_ms == 5_000, "schedules_advance_never_lowers")
        skipped = await self.call("schedules", "retire", schedule_id, 1_000, None, None)
        self.edge_if(skipped.ok and (skipped.value or skipped.lost), "schedules_retire_skipped")
        again = await self.call("schedules", "retire", schedule_id, 1_000, None, None)
        lower = await self.call("schedules", "retire", schedule_id, 500, f"{schedule_id}@500", self.summary())
        self.edge_if(again.ok and again.value is False and lower.ok and lower.value is False,
                     "schedules_retire_idempotent")
        archived = await self.call("schedules", "retire", schedule_id, 2_000, f"{schedule_id}@2000", self.summary())
        self.edge_if(archived.ok and (archived.value or archived.lost), "schedules_archived")
        held_run = f"{schedule_id}@3000"
        held = await self.call("schedules", "retire", schedule_id, 3_000, held_run, None, hold=True)
        cursor = await self.call("schedules", "cursor", schedule_id)
        self.edge_if(held.ok and cursor.ok and held_run in cursor.value.held, "schedules_held")
        bad = await self.call("schedules", "retire", schedule_id, 4_000, f"{schedule_id}@4000",
                              {"x": float("nan")})
        self.edge_if(bad.error is not None and error_name(bad.error) == "CanonicalEncodingError",
                     "schedules_summary_unencodable")
        released = await self.call("schedules", "release", schedule_id, held_run, self.summary())
        self.edge_if(released.ok and (released.value or released.lost), "schedules_released")
        twice = await self.call("schedules", "release", schedule_id, held_run, self.summary())
        self.edge_if(twice.ok and twice.value is False, "schedules_release_idempotent")
        await self.call("schedules", "cursor", schedule_id)

    async def schedules_illegal(self) -> None:
        schedule_id = self.uid("schi")
        lone = "s\udfff"
        cases = (
            ("TypeError", "cursor", ("",), {}),
            ("TypeError", "cursor", (5,), {}),
            ("TypeError", "cursor", (lone,), {}),
            ("TypeError", "advance", (schedule_id, -1), {}),
            ("TypeError", "advance", (schedule_id, True), {}),
            ("TypeError", "advance", (schedule_id, INT64_MAX + 1), {}),
            ("TypeError", "advance", (schedule_id, 1.0), {}),
            ("TypeError", "retire", (schedule_id, 1, "r", None), {"hold": 1}),
            ("ValueError", "retire", (schedule_id, 1, "r", {"a": 1}), {"hold": True}),
            ("ValueError", "retire", (schedule_id, 1, None, None), {"hold": True}),
            ("ValueError", "retire", (schedule_id, 1, None, {"a": 1}), {}),
            ("TypeError", "retire", (schedule_id, 1, 5, None), {}),
            ("TypeError", "retire", (schedule_id, 1, lone, None), {}),
            ("TypeError", "release", (schedule_id, None, {}), {}),
            ("TypeError", "release", ("", "r", {}), {}),
        )
        for _ in range(3 + self.rng.below(3)):
            name, method, args, kwargs = cases[self.rng.below(len(cases))]
            got = await self.call("schedules", method, *args, **kwargs)
            self.rejected(got, (name,), f"schedules.{method}{args!r:.100} {kwargs!r:.40}", "schedules_illegal_rejected")
        after = await self.call("schedules", "cursor", schedule_id)
        self.expect(after.ok and after.value.high_water_ms is None and after.value.archived_through_ms is None,
                    f"cursor of {schedule_id!r} after refused calls: {after.show()}", schedule_id)

    # -- the pin index ---------------------------------------------------------------------------

    async def pins(self) -> None:
        ref = _ref(self.uid("blob"))
        size = self.rng.between(0, 10_000)
        stored_ms = self.now()
        first = await self.call("pins", "record_blob", ref, size, stored_at_ms=stored_ms)
        self.edge_if(first.ok, "pins_blob_recorded")
        await self.call("pins", "record_blob", ref, size, stored_at_ms=stored_ms + 10)
        await self.call("pins", "record_blob", ref, size, stored_at_ms=max(0, stored_ms - 10))
        row = await self.call("pins", "blob", ref)
        self.edge_if(row.ok and row.value is not None and row.value.stored_at_ms == stored_ms + 10,
                     "pins_stored_at_keeps_latest")
        mismatch = await self.call("pins", "record_blob", ref, size + 1, stored_at_ms=stored_ms)
        self.edge_if(mismatch.named("BlobSizeMismatch"), "pins_size_mismatch_rejected")
        holders = [f"h-{self.label}-z", f"h-{self.label}-\u00e9", f"h-{self.label}-\U0001F600", f"h-{self.label}-A"]
        self.rng.shuffle(holders)
        holders = holders[:2 + self.rng.below(3)]
        for holder in holders:
            await self.call("pins", "pin", ref, holder)
        repeat = await self.call("pins", "pin", ref, holders[0])
        self.edge_if(repeat.ok and repeat.value is False, "pins_pin_idempotent")
        listed = await self.call("pins", "holders", ref)
        self.edge_if(listed.ok and listed.value == tuple(sorted(holders)), "pins_holders_sorted")
        await self.call("pins", "is_pinned", ref)
        expired = await self.call("pins", "expired_unpinned", stored_ms + 11, 1_000)
        self.edge_if(expired.ok and ref not in expired.value, "pins_pinned_not_expired")
        for holder in holders:
            await self.call("pins", "unpin", ref, holder)
        again = await self.call("pins", "unpin", ref, holders[0])
        self.edge_if(again.ok and again.value is False, "pins_unpin_idempotent")
        pinned = await self.call("pins", "is_pinned", ref)
        self.edge_if(pinned.ok and pinned.value is False, "pins_unpinned_last_holder")
        expired = await self.call("pins", "expired_unpinned", stored_ms + 11, 1_000)
        self.edge_if(expired.ok and ref in expired.value, "pins_expired_listed")
        none = await self.call("pins", "expired_unpinned", stored_ms + 11, 0)
        self.edge_if(none.ok and none.value == (), "pins_expired_limit_zero")
        await self.call("pins", "forget", ref)
        forgot = await self.call("pins", "forget", ref)
        self.edge_if(forgot.ok and forgot.value is False, "pins_forget_idempotent")
        await self.call("pins", "blob", ref)
        # A pin before (or without) its blob row, a holder at the length cap.
        orphan = _ref(self.uid("orphan"))
        holder = (f"cap-{self.label}-" + "\u00e9" * HOLDER_MAX)[:HOLDER_MAX]
        pin = await self.call("pins", "pin", orphan, holder)
        self.edge_if(pin.ok, "pins_pin_without_blob")
        capped = await self.call("pins", "holders", orphan)
        self.edge_if(capped.ok and capped.value == (holder,), "pins_holder_at_max_length")
        await self.call("pins", "pinned_refs")
        await self.call("pins", "unpin", orphan, holder)

    async def pins_illegal(self) -> None:
        ref = _ref(self.uid("blob"))
        cases = (
            ("ValueError", "record_blob", (ref.upper(), 1), {"stored_at_ms": 0}),
            ("ValueError", "record_blob", (ref[:-1], 1), {"stored_at_ms": 0}),
            ("ValueError", "record_blob", (ref, -1), {"stored_at_ms": 0}),
            ("ValueError", "record_blob", (ref, True), {"stored_at_ms": 0}),
            ("ValueError", "record_blob", (ref, INT64_MAX + 1), {"stored_at_ms": 0}),
            ("ValueError", "record_blob", (ref, 1), {"stored_at_ms": "0"}),
            ("ValueError", "pin", (ref, ""), {}),
            ("ValueError", "pin", (ref, None), {}),
            ("ValueError", "pin", (ref, "h" * (HOLDER_MAX + 1)), {}),
            ("ValueError", "pin", (ref, "h\ud800"), {}),
            ("ValueError", "unpin", (None, "h"), {}),
            ("ValueError", "unpin", (ref, "h\udc00x"), {}),
            ("ValueError", "is_pinned", (5,), {}),
            ("ValueError", "holders", ("sha256:xyz",), {}),
            ("ValueError", "blob", (b"sha256:",), {}),
            ("ValueError", "forget", ("",), {}),
            ("ValueError", "expired_unpinned", (-1, 1), {}),
            ("ValueError", "expired_unpinned", (0, -1), {}),
            ("ValueError", "expired_unpinned", (0, INT64_MAX + 1), {}),
            ("ValueError", "expired_unpinned", (INT64_MAX + 1, 1), {}),
        )
        for _ in range(3 + self.rng.below(3)):
            name, method, args, kwargs = cases[self.rng.below(len(cases))]
            got = await self.call("pins", method, *args, **kwargs)
            self.rejected(got, (name,), f"pins.{method}{args!r:.100}", "pins_illegal_rejected")
        after = await self.call("pins", "blob", ref)
        self.expect(after.ok and after.value is None, f"blob {ref} after refused calls: {after.show()}", ref)

    # -- the findings projection ------------------------------------------------------------------

    def finding(self, finding_id: str, **changes: Any) -> dict:
        evidence = [_ref(f"{finding_id}/{i}") for i in range(self.rng.below(3))]
        value = {"id": finding_id, "category": CATEGORIES[self.rng.below(3)], "severity": SEVERITIES[self.rng.below(3)],
                 "confidence": self.rng.between(0, 100), "targets": [f"table-{self.rng.below(9)}"],
                 "evidence": evidence, "model": "adversary-model"}
        value.update(changes)
        return value

    async def findings(self) -> None:
        schedule_id = self.uid("fs")
        run_id = f"{schedule_id}@1000"
        now = self.now()
        f1, f2 = self.finding(self.uid("f") + "-\u00e9"), self.finding(self.uid("f"))
        opened = await self.call("findings", "apply_run", schedule_id, 1_000, run_id, [f1, f2], settled_at_ms=now)
        self.edge_if(opened.ok and (opened.value == 2 or opened.lost), "findings_opened")
        noop = await self.call("findings", "apply_run", schedule_id, 1_000, run_id, [f1, f2], settled_at_ms=now)
        self.edge_if(noop.ok and noop.value == 0, "findings_reapply_noop")
        late = await self.call("findings", "apply_run", schedule_id, 500, f"{schedule_id}@500",
                               [self.finding(self.uid("f"))], settled_at_ms=now)
        self.edge_if(late.ok and late.value == 0, "findings_late_run_dropped")
        f3 = self.finding(self.uid("f"))
        skipped = await self.call("findings", "apply_run", schedule_id, 2_000, f"{schedule_id}@2000", (f1, f3),
                                  settled_at_ms=now + 1)
        self.edge_if(skipped.ok and skipped.value == 1, "findings_live_id_skipped")
        await self.call("findings", "advance_checkpoint", schedule_id, 1_500)
        await self.call("findings", "advance_checkpoint", schedule_id, 3_000)
        checkpoint = await self.call("findings", "checkpoint", schedule_id)
        self.edge_if(checkpoint.ok and checkpoint.value == 3_000, "findings_checkpoint_advanced")
        mine = await self.call("findings", "live_for_run", run_id)
        self.edge_if(mine.ok and sorted(f.finding_id for f in mine.value) == sorted((f1["id"], f2["id"])),
                     "findings_live_for_run")
        edges = [self.finding(self.uid("fe"), confidence=0, targets=[f"t{i}" for i in range(8)],
                              evidence=[_ref(f"e{i}") for i in range(8)]),
                 self.finding(self.uid("fe"), confidence=100, evidence=[], targets=["\U0001F600"])]
        accepted = await self.call("findings", "apply_run", schedule_id, 4_000, f"{schedule_id}@4000", edges,
                                   settled_at_ms=now + 2)
        self.edge_if(accepted.ok and (accepted.value == 2 or accepted.lost), "findings_schema_edges_accepted")
        # Closed and re-opened: a finding opened at 0 ms is closed by a close before 1 ms.
        old = self.finding(self.uid("fo"))
        await self.call("findings", "apply_run", schedule_id, 5_000, f"{schedule_id}@5000", [old], settled_at_ms=0)
        closed = await self.call("findings", "close_expired", 1, now_ms=now, limit=1_000)
        self.edge_if(closed.ok and old["id"] in [f.finding_id for f in closed.value], "findings_closed")
        again = await self.call("findings", "apply_run", schedule_id, 6_000, f"{schedule_id}@6000", [old],
                                settled_at_ms=now)
        self.edge_if(again.ok and (again.value == 1 or again.lost), "findings_reopened_after_close")
        # Leftovers of earlier episodes (everyone's) close as they age.
        await self.call("findings", "close_expired", max(0, now - PURGE_AGE_MS), now_ms=now,
                        limit=self.rng.between(0, 50))
        await self.call("findings", "live_findings")

    async def findings_illegal(self) -> None:
        schedule_id = self.uid("fsi")
        fid = self.uid("fi")
        bad_findings = (
            [{k: v for k, v in self.finding(fid).items() if k != "model"}],
            [dict(self.finding(fid), extra=1)],
            [self.finding(fid, id="")],
            [self.finding(fid, id="f\ud800")],
            [self.finding(fid, category="Bloat")],
            [self.finding(fid, severity=1)],
            [self.finding(fid, confidence=True)],
            [self.finding(fid, confidence=101)],
            [self.finding(fid, confidence=-1)],
            [self.finding(fid, confidence=50.0)],
            [self.finding(fid, targets=[])],
            [self.finding(fid, targets=[f"t{i}" for i in range(9)])],
            [self.finding(fid, targets=[""])],
            [self.finding(fid, targets=("t",))],
            [self.finding(fid, evidence=[_ref("x").upper()])],
            [self.finding(fid, evidence=[_ref(f"x{i}") for i in range(9)])],
            [self.finding(fid, evidence="sha256:")],
            [self.finding(fid, model="")],
            ["not a finding"],
            {"id": fid},
        )
        for _ in range(2 + self.rng.below(3)):
            findings = bad_findings[self.rng.below(len(bad_findings))]
            got = await self.call("findings", "apply_run", schedule_id, 1, f"{schedule_id}@1", findings,
                                  settled_at_ms=self.now())
            self.rejected(got, ("InvalidFinding",), f"apply_run with {findings!r:.160}", "findings_invalid_rejected")
        twice = self.finding(fid)
        dup = await self.call("findings", "apply_run", schedule_id, 1, f"{schedule_id}@1", [twice, dict(twice)],
                              settled_at_ms=self.now())
        self.rejected(dup, ("InvalidFinding",), "apply_run with one id twice", "findings_duplicate_id_rejected")
        cases = (
            ("apply_run", ("", 1, "r", []), {"settled_at_ms": 0}),
            ("apply_run", (schedule_id, -1, "r", []), {"settled_at_ms": 0}),
            ("apply_run", (schedule_id, SAFE_MAX + 1, "r", []), {"settled_at_ms": 0}),
            ("apply_run", (schedule_id, True, "r", []), {"settled_at_ms": 0}),
            ("apply_run", (schedule_id, 1, "r\ud800", []), {"settled_at_ms": 0}),
            ("apply_run", (schedule_id, 1, "r", []), {"settled_at_ms": "0"}),
            ("checkpoint", ("",), {}),
            ("checkpoint", ("s\udfff",), {}),
            ("advance_checkpoint", (schedule_id, -1), {}),
            ("advance_checkpoint", (None, 1), {}),
            ("close_expired", (-1,), {"now_ms": 0, "limit": 1}),
            ("close_expired", (0,), {"now_ms": 0, "limit": -1}),
            ("close_expired", (0,), {"now_ms": 0, "limit": INT64_MAX + 1}),
            ("close_expired", (0,), {"now_ms": 1.5, "limit": 1}),
            ("live_for_run", ("",), {}),
        )
        for _ in range(2 + self.rng.below(3)):
            method, args, kwargs = cases[self.rng.below(len(cases))]
            got = await self.call("findings", method, *args, **kwargs)
            self.rejected(got, ("ValueError",), f"findings.{method}{args!r:.100}", "findings_illegal_rejected")
        after = await self.call("findings", "checkpoint", schedule_id)
        self.expect(after.ok and after.value is None, f"checkpoint of {schedule_id!r} after refused runs: "
                                                      f"{after.show()}", schedule_id)

    # -- the race (``ClientProcess.racer``): every process on the same names, at the same instants ----

    async def race(self, tick: int) -> None:
        run_id = f"race@{tick}"
        out = await self.call("kernel", "start_execution", run_id, schedule_id="race", occurrence_ms=tick,
                              flow_version=1, input={"tick": tick}, started_at_ms=self.now())
        if out.ok and out.value.record is not None and out.value.replayed:
            self.w.edge("kernel_shared_start_replayed")
        if out.ok and out.value.record is not None:
            # Each step a few milliseconds apart: the racers interleave.
            await self.runtime.sleep_ms(self.rng.below(40))
            held = await self.steps_held(run_id)
            if held is not None:
                await self.runtime.sleep_ms(self.rng.below(40))
                await self.call("kernel", "append_step", run_id, held + 1, self.label, STEP_COMPLETED, self.label)
            await self.runtime.sleep_ms(self.rng.below(40))
            done = await self.call("kernel", "finish_execution", run_id, status="completed",
                                   output={"by": self.label}, finished_at_ms=self.now())
            self.edge_if(done.named("FinishConflict"), "kernel_shared_finish_conflict")
        retired = await self.call("schedules", "retire", "race", tick, run_id, {"tick": tick})
        self.edge_if(retired.ok and retired.value is False and not retired.lost, "schedules_shared_retire_raced")
        ref = _ref(f"race/{tick}")
        pin = await self.call("pins", "pin", ref, "race-holder")
        self.edge_if(pin.ok and pin.value is False and not pin.lost, "pins_shared_pin_raced")
        finding = {"id": f"race-{tick}", "category": "bloat", "severity": "low", "confidence": 1, "targets": ["t"],
                   "evidence": [ref], "model": "racer"}
        applied = await self.call("findings", "apply_run", "race", tick, run_id, [finding], settled_at_ms=self.now())
        self.edge_if(applied.ok and applied.value == 0 and not applied.lost, "findings_shared_apply_raced")
        # Yesterday's shared names go: the pin, then (any process's purge) the run.
        await self.call("pins", "unpin", _ref(f"race/{tick - 2}"), "race-holder")
