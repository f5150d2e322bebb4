"""The kernel adversary: clients of the durable-execution kernel itself
(``model.kernel.kernel``: flows, steps, replay, migrations, input schemas),
at the edges of its contract, racing, under faults.

Why: the sentinels run the kernel only through their own flows on the
ledger (``model.runs.LedgerRuns``), and the ports adversary drives the
kernel's *execution store* directly, never the kernel. What a kernel must
refuse — a flow that asks for other steps on replay, a run resumed on a
version with no transform to it, a migration marker that does not parse or
does not connect, an input its version's schema rejects, a misconfigured
kernel — was never asked of it. ``KernelAdversary`` runs ``nodes`` processes
(``kernel-1`` ...) that build kernels over their node's crashy traced
execution-store port (``System.ports_for``: every port fault applies, and
the kernel's failpoint between an effect and its record), with choices drawn
from the ``workload`` stream's per-process forks:

- a run's life on flow version 1, 2 or 3 (``Kernel.start``), stopped at a
  drawn step (a deploy), resumed on another version through the transform
  of that pair (sometimes through two deploys, a chain), or first on a build
  missing that transform (``MigrationMissing``, nothing written); every step
  value a flow folds is checked against its version's shape, so a transform
  not applied, applied twice or in the wrong order fails the run loudly;
- a non-idempotent step whose call timed out (its intent recorded, no
  completion), resumed on another version: parked ``EFFECT_INDOUBT`` past
  the migration marker, resolved by an operator, then finished;
- input schemas: inputs rejected (the run settles FAILED with
  ``InputValidationError`` as its output, the flow never called), a version
  with no validator, a validator that returns a non-str (``TypeError``, the
  run left live for a fixed build), an input rejected only by the version a
  run was migrated to, flows that fail with built-in errors;
- a non-deterministic flow variant (its step ids change between attempts)
  and a log holding a step of another kind under the requested id: replay
  must refuse both (``ReplayDivergence``), in the kernel and in ``replay()``;
- migration markers a foreign writer damaged or that do not connect
  (``ValueError``) and a build that dropped an old transform
  (``MigrationMissing`` on resume and in ``replay()``);
- kernels built wrong (middleware without ``on_output``, bad transform or
  schema keys, uncallable transforms and validators): ``TypeError``;
- ``replay()`` of every finished run: the same output (or the same error),
  no event of any kind in between (no store call, no effect);
- ``Kernel.start`` of a finished run (its record, nothing run) and of an
  occurrence below its schedule's mark (``retired``).

Beside the episodes both processes race once a ``race_ms`` tick on one
shared run id: both start it, both drive it; the log must hold each step
once and the run one output. A new incarnation first settles the live runs
its predecessor left (and the race's). This workload's checker is
``kernel-expectations``; the ``reference-model`` oracle judges every store
call the kernels make.
"""
from __future__ import annotations

import pickle
from typing import Any, Callable

from faults.describe import KERNEL_DESCRIBERS
from model.kernel.kernel import (RETIRED, Kernel, RunOutcome, effective_version, error_output, is_app_event,
                                 replay)
from model.kernel.records import (COMPLETED, EFFECT_INDOUBT, EVENT_EMITTED, EXECUTION_MIGRATED, FAILED, PARKED,
                                  RUNNING, STEP_COMPLETED, STEP_STARTED, TERMINAL_STATUSES)
from model.retry import error_name, is_retryable
from scenarios.adversaries.client import RETRIES_MAX, RETRY_WAIT_MS, ClientProcess, Expectations, Outcome, attempt
from sim.node import Node, NodeDeadError
from sim.workload import Workload
from sim.world import World

VERSIONS = (1, 2, 3)
STEPS = 4  # s0 .. s3; plus one app event after s1
# The step ids a completed run's log holds, in order (migration markers aside).
STEP_IDS = ("s0", "s1", "emit:note", "s2", "s3")
# Steps durable when the effect of step k was stopped: s1 and s3 write (the
# records before them are flushed first), s2 does not (s1's record waits).
DURABLE_AT = {0: 0, 1: 1, 2: 1, 3: 4}
RACE_SCHEDULE = "kadv-race"
# What a racer's kernel meets when its peer got there first (a step at the
# same seq, the run finished): read the run again and go on from there.
RACE_ERRORS = ("StepSequenceConflict", "ExecutionNotRunning")
POISONS = {"KeyError": KeyError, "AttributeError": AttributeError, "ZeroDivisionError": ZeroDivisionError}
# What a foreign writer leaves as a migration marker's output: none parses.
CORRUPT_MARKERS = (None, {"from": "1", "to": 2}, {"from": 1}, [1, 2], {"from": True, "to": 2}, {"to": 3},
                   {"from": 1, "to": None}, "1->2")
# Answers of a buggy validator that do not mean "accepted" and are not a reason.
NOT_A_REASON = (False, 0, ["n"], {"why": "n"}, b"n")

EDGES = (
    "started_fresh", "start_replayed_running", "start_replayed_finished", "start_retired", "completed",
    "migrated", "migrated_chain", "migrated_unmarked", "migration_missing_refused", "indoubt_parked",
    "indoubt_past_marker", "indoubt_resolved", "indoubt_replay_refused", "parked_resume_stays_parked", "input_rejected",
    "input_rejected_after_migration", "input_unvalidated_version", "validator_not_a_reason",
    "flow_builtin_failed", "divergence_refused", "divergence_kind_refused", "divergence_replay_refused",
    "replay_incomplete", "corrupt_marker_refused", "disconnected_marker_refused", "dropped_transform_refused",
    "dropped_transform_replay_refused", "replayed_pure", "replayed_error_pure", "misuse_refused",
    "built_clean", "operator_failed", "race_started", "race_joined", "race_conflict_retried",
    "race_finished_by_peer", "recovered_live", "retried_injected",
)
EDGE_STATS = tuple(f"kadv_{name}" for name in EDGES)
SOMETIMES = EDGE_STATS


# --- errors the flows and effects raise on purpose ---------------------------------------


class Interrupted(Exception):
    """The process was stopped for a deploy in the middle of an effect (planned)."""

    name = "Interrupted"
    retryable = True


class ToolTimeout(Exception):
    """A non-idempotent tool call timed out: it may or may not have happened (planned)."""

    name = "ToolTimeout"
    retryable = True


PLANNED = (Interrupted, ToolTimeout)


class FlowShapeError(Exception):
    """A flow folded a step value its version does not produce (a migration went wrong)."""

    name = "FlowShapeError"


class TransformShapeError(Exception):
    """A transform was handed a value of a version other than its own ``from``."""

    name = "TransformShapeError"


# --- the flow family: versions, their values, transforms, schemas -------------------------


def value_of(version: int, x: Any) -> dict:
    """What step effects record under ``version`` for the quantity ``x``."""
    if version == 1:
        return {"x": x}
    if version == 2:
        return {"x": x, "unit": "ms"}
    return {"y": 2 * x, "unit": "ms"}


def effect_value(version: int, n: Any, i: int) -> dict:
    return value_of(version, n + i)


def _shape_ok(version: int, value: Any) -> bool:
    if type(value) is not dict:
        return False
    if version == 1:
        return sorted(value) == ["x"] and type(value["x"]) is int
    if version == 2:
        return sorted(value) == ["unit", "x"] and type(value["x"]) is int and value["unit"] == "ms"
    return (sorted(value) == ["unit", "y"] and type(value["y"]) is int and value["y"] % 2 == 0
            and value["unit"] == "ms")


def _make_transform(a: int, b: int) -> Callable[[str, Any], Any]:
    def transform(step_id: str, output: Any) -> Any:
        if step_id.startswith("emit:"):
            return output  # an app event is no version's state
        if not _shape_ok(a, output):
            raise TransformShapeError(f"transform {a}->{b} got {step_id}={output!r:.80}, not a version {a} value")
        return value_of(b, output["y"] // 2 if a == 3 else output["x"])

    return transform


TRANSFORMS = {(a, b): _make_transform(a, b) for a in VERSIONS for b in VERSIONS if a != b}


def _input_validator(version: int) -> Callable[[Any], "str | None"]:
    def validate(payload: Any) -> str | None:
        if type(payload) is not dict or "n" not in payload:
            return "input must be an object with n"
        n = payload["n"]
        if type(n) is not int:
            return f"n must be an int, got {type(n).__name__}"
        if version >= 2 and n < 0:
            return f"n must not be negative under version {version}"
        if version >= 3 and n > 30:
            return f"n must be at most 30 under version {version}"
        return None

    return validate


VALIDATORS = {v: _input_validator(v) for v in VERSIONS}


def _buggy_validator(answer: Any, version: int) -> Callable[[Any], Any]:
    good = VALIDATORS[version]

    def validate(payload: Any) -> Any:
        return None if good(payload) is None else answer

    return validate


def expected_output(version: int, payload: dict) -> dict:
    n = payload["n"]
    return {"version": version, "sum": sum(n + i for i in range(STEPS)), "tag": payload["tag"]}


class Tally:
    """An effect middleware that passes every output through, counting."""

    def __init__(self) -> None:
        self.seen = 0

    async def on_output(self, tool: str | None, step_id: str, output: Any) -> Any:
        self.seen += 1
        return output


class _NoHook:
    on_output = "not callable"


class KernelExpectations(Expectations):
    """``kernel-expectations``: what a client of the kernel sees (outcomes,
    typed refusals, logs, pure replays). Reads no events."""

    name = "kernel-expectations"


class KernelAdversary(Workload):
    """``nodes`` processes running the episodes, ``think_ms`` apart, and
    racing each other every ``race_ms`` on one shared run, until the heal
    instant."""

    name = "adversary-kernel"

    def __init__(self, *, nodes: int = 2, think_ms: tuple[int, int] = (5_000, 40_000),
                 race_ms: int = 180_000) -> None:
        assert 1 <= nodes <= 8 and 0 < think_ms[0] <= think_ms[1] and race_ms >= 1_000, (nodes, think_ms, race_ms)
        self.names = tuple(f"kernel-{i + 1}" for i in range(nodes))
        self.think_ms = think_ms
        self.race_ms = race_ms
        self.checker = KernelExpectations()
        self.edges: dict[str, int] = dict.fromkeys(EDGES, 0)
        self.episodes = 0
        self.kernel_calls = 0

    def setup(self, world: World) -> None:
        self.world = world
        world.trace.subscribe([f"kernel.{method}" for method in KERNEL_DESCRIBERS], self._count_call)
        for name in self.names:
            world.add_node(name, self._start, role="client")

    def _start(self, node: Node) -> None:
        process = _Process(self, self.world, node)
        self.world.runtime.spawn_on(node, "kernel-adversary", process.main())
        self.world.runtime.spawn_on(node, "kernel-racer", process.racer())

    def _count_call(self, event: tuple) -> None:
        if event.node.startswith("kernel-"):
            self.kernel_calls += 1

    def edge(self, name: str) -> None:
        self.edges[name] += 1

    def metrics(self) -> dict[str, Any]:
        stats: dict[str, Any] = {"kadv_episodes": self.episodes, "kadv_store_calls": self.kernel_calls}
        stats.update({f"kadv_{name}": count for name, count in self.edges.items()})
        return stats


class _Process(ClientProcess):
    """One incarnation of one node: its port, its stream, fresh names."""

    def __init__(self, workload: KernelAdversary, world: World, node: Node) -> None:
        super().__init__(workload, world, node, "workload/adversary-kernel")
        self.store = self.ports.kernel
        self.schedule_id = f"kadv/{node.name}"
        self._occurrence_ms = 0
        # Planned stops: run id -> the step whose effect raises (once).
        self.interrupts: dict[str, int] = {}
        self.timeouts: dict[str, bool] = {}  # run ids whose s1 (non-idempotent) times out once
        self.attempts: dict[str, int] = {}  # flow invocations per run id
        self.effects = 0  # effect calls (a pure replay makes none)

    # -- plumbing -------------------------------------------------------------------

    def occurrence(self) -> tuple[str, int]:
        """A fresh run id of this node's schedule, above every earlier one."""
        self._serial += 1
        occurrence_ms = self._occurrence_ms = max(self.now() * 1_000, self._occurrence_ms + 1)
        return f"{self.schedule_id}@{occurrence_ms}", occurrence_ms

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Outcome:
        fn = getattr(self.store, method)
        return await attempt(lambda: fn(*args, **kwargs), self.runtime.sleep_ms,
                             lambda: self.rng.between(*RETRY_WAIT_MS))

    async def load(self, run_id: str) -> tuple[Any, tuple]:
        """(record, steps) of ``run_id``; (None, ()) if a read failed (expectation raised)."""
        record = await self.call("load_execution", run_id)
        steps = await self.call("load_steps", run_id)
        if not self.expect(record.ok and steps.ok, f"reading {run_id!r}: {record.show()} / {steps.show()}", run_id):
            return None, ()
        return record.value, steps.value

    async def append(self, run_id: str, seq: int, step_id: str, kind: str, output: Any) -> bool:
        """An operator's (or a foreign writer's) step; a lost reply's retry sees its own write."""
        out = await self.call("append_step", run_id, seq, step_id, kind, output)
        if out.ok or (out.named("StepSequenceConflict") and out.lost and out.error.actual_next_seq == seq + 1):
            return True
        return self.expect(False, f"append_step({run_id!r}, {seq}, {step_id!r}) failed: {out.show()}", run_id)

    async def operator_fail(self, run_id: str, error: BaseException) -> None:
        """An operator settles a run no build can continue: FAILED with the refusal."""
        out = await self.call("finish_execution", run_id, status=FAILED, output=error_output(error),
                              finished_at_ms=self.now())
        ok = (out.ok and out.value.status == FAILED) or out.named("FinishConflict", "UnknownExecution")
        if self.expect(ok, f"operator finish of {run_id!r}: {out.show()}", run_id):
            self.w.edge("operator_failed")

    def build(self, version: int, *, transforms: Any = None, schemas: Any = None) -> Kernel:
        """A deployed build of ``version``: every transform unless told."""
        middleware = (Tally(),) if self.rng.below(2) else ()
        return Kernel(self.runtime, self.store, failpoints=self.ports.failpoints, middleware=middleware,
                      transforms=TRANSFORMS if transforms is None else transforms, input_schemas=schemas)

    # -- flows ------------------------------------------------------------------------

    def flow(self, version: int, *, nondeterministic: bool = False, seen: list | None = None) -> Callable:
        """The flow of ``version``; ``seen`` gets ``ctx.replaying`` before each step."""

        async def run_flow(ctx: Any, payload: Any) -> Any:
            run_id = ctx.run_id
            tries = self.attempts[run_id] = self.attempts.get(run_id, 0) + 1
            n = payload["n"]
            total = 0
            for i in range(STEPS):
                if i == 2 and payload.get("poison") in POISONS:
                    raise POISONS[payload["poison"]]("poisoned input")
                step_id = f"s{i}" if not nondeterministic or tries == 1 else f"s{i}~{tries}"
                intent = i == 1 and payload.get("intent") is True
                if seen is not None:
                    seen.append(ctx.replaying)
                value = await ctx.execute(step_id, self.effect(run_id, version, n, i), idempotent=not intent,
                                          writes=i != 2)
                if value != effect_value(version, n, i):
                    raise FlowShapeError(f"{run_id}: step {step_id} folded {value!r:.80} under version {version}")
                total += value["y"] // 2 if version == 3 else value["x"]
                if i == 1:
                    await ctx.emit("note", {"n": n})
            await ctx.flush()  # a barrier: the app event and s2 go down with s3 ...
            await ctx.flush()  # ... and a second one has nothing to write
            return {"version": version, "sum": total, "tag": payload["tag"]}

        return run_flow

    def effect(self, run_id: str, version: int, n: Any, i: int) -> Callable:
        async def run_effect() -> Any:
            self.effects += 1
            if run_id.startswith(RACE_SCHEDULE):
                await self.runtime.sleep_ms(self.rng.below(30))  # the racers' steps interleave
            if self.interrupts.get(run_id) == i:
                del self.interrupts[run_id]
                raise Interrupted(f"{run_id}: stopped in s{i} for a deploy")
            if i == 1 and self.timeouts.pop(run_id, False):
                raise ToolTimeout(f"{run_id}: s1 timed out")
            return effect_value(version, n, i)

        return run_effect

    # -- driving a run ---------------------------------------------------------------------

    async def start(self, kernel: Kernel, run_id: str, flow: Callable, version: int, payload: Any, *,
                    occurrence_ms: int | None = None, schedule_id: str | None = None,
                    race: bool = False) -> tuple[RunOutcome | None, BaseException | None]:
        """``Kernel.start``; an injected retryable error is retried with the same
        call (a replayed start answers ``running``: the run is then driven on)."""
        schedule_id = self.schedule_id if schedule_id is None else schedule_id
        for tries in range(1, RETRIES_MAX + 1):
            calls = self.attempts.get(run_id, 0)
            try:
                out = await kernel.start(run_id, flow=flow, flow_version=version, input=payload,
                                         schedule_id=schedule_id, occurrence_ms=occurrence_ms)
            except NodeDeadError:
                raise
            except PLANNED as error:
                return None, error
            except Exception as error:  # noqa: BLE001 - classified: retried, or the answer
                if race and error_name(error) in RACE_ERRORS:
                    self.w.edge("race_conflict_retried")
                    return await self.drive(kernel, run_id, flow, version, race=True)
                if not is_retryable(error):
                    return None, error
                self.w.edge("retried_injected")
                await self.runtime.sleep_ms(self.rng.between(*RETRY_WAIT_MS))
                continue
            if out.status in (RUNNING, PARKED) and out.steps_executed == 0 and out.output is None:
                # A replayed start: nothing ran (it is the run's record).
                self.expect(out.steps_replayed == 0 and self.attempts.get(run_id, 0) == calls,
                            f"replayed start of {run_id!r} ran something: {out!r:.200}", run_id)
                self.w.edge("race_joined" if race and tries == 1 else "start_replayed_running")
                if out.status == RUNNING:
                    return await self.drive(kernel, run_id, flow, version, race=race)
                return out, None
            if race and out.status in TERMINAL_STATUSES and self.attempts.get(run_id, 0) == calls:
                self.w.edge("race_finished_by_peer")
            if tries == 1 and out.status == COMPLETED and not race and self.attempts.get(run_id, 0) > calls:
                # A fresh start ran every step once, folded none.
                self.expect(out.steps_replayed == 0 and out.steps_executed == len(STEP_IDS),
                            f"fresh start of {run_id!r}: {out.steps_replayed} replayed, {out.steps_executed} "
                            f"executed, expected 0 and {len(STEP_IDS)}", run_id)
                self.w.edge("started_fresh")
            return out, None
        raise AssertionError(f"{RETRIES_MAX} retryable failures in a row")

    async def drive(self, kernel: Kernel, run_id: str, flow: Callable, version: int, *,
                    race: bool = False) -> tuple[RunOutcome | None, BaseException | None]:
        """Resume ``run_id`` through ``kernel`` until it settles, parks, stops
        as planned or is refused; injected retryable errors (and, in a race, a
        peer's step at the same seq) are waited out and the run read again."""
        conflicts = 0
        for _ in range(RETRIES_MAX):
            got = await self.call("load_execution", run_id)
            if not got.ok or got.value is None:
                return None, got.error if got.error is not None else LookupError(f"{run_id} is gone")
            record = got.value
            if record.status in TERMINAL_STATUSES:
                if race:
                    self.w.edge("race_finished_by_peer")
                return RunOutcome(run_id, record.status, record.output, 0, 0), None
            try:
                return await kernel.run(record, flow, flow_version=version), None
            except NodeDeadError:
                raise
            except PLANNED as error:
                return None, error
            except Exception as error:  # noqa: BLE001 - classified: retried, or the answer
                if is_retryable(error):
                    self.w.edge("retried_injected")
                elif race and error_name(error) in RACE_ERRORS and conflicts < 50:
                    conflicts += 1
                    self.w.edge("race_conflict_retried")
                else:
                    return None, error
            await self.runtime.sleep_ms(self.rng.between(*RETRY_WAIT_MS))
        raise AssertionError(f"{RETRIES_MAX} retryable failures in a row")

    def markers(self, log: tuple) -> list[tuple[Any, Any]]:
        return [(s.output.get("from"), s.output.get("to")) if type(s.output) is dict else (None, None)
                for s in log if s.kind == EXECUTION_MIGRATED]

    async def check_done(self, run_id: str, out: RunOutcome | None, error: BaseException | None, version: int,
                         payload: dict, *, path: list[int] | None = None) -> tuple | None:
        """A run that must have completed on ``version`` with its expected
        output, each step recorded once, the deploys in ``path`` marked in
        order; then a pure replay must give the same. Returns (record, log)."""
        want = expected_output(version, payload)
        if not self.expect(error is None and out is not None and out.status == COMPLETED and out.output == want,
                           f"{run_id!r} on version {version}: expected completed with {want!r}, got "
                           f"{error_name(error) + ': ' + str(error)[:200] if error is not None else repr(out)[:300]}",
                           run_id):
            return None
        record, log = await self.load(run_id)
        if record is None:
            return None
        self.expect(record.status == COMPLETED and record.output == want,
                    f"{run_id!r} record {record.status}/{record.output!r:.100}, expected completed/{want!r}", run_id)
        ids = [s.step_id for s in log if s.kind != EXECUTION_MIGRATED and s.kind != EFFECT_INDOUBT
               and s.kind != STEP_STARTED]
        self.expect(ids == list(STEP_IDS), f"{run_id!r} log steps {ids}, expected each of {list(STEP_IDS)} once",
                    run_id)
        self.expect(all(s.seq == i + 1 for i, s in enumerate(log)), f"{run_id!r} log seqs not 1..n", run_id)
        events = sum(1 for s in log if is_app_event(s))
        self.expect(events == 1, f"{run_id!r} holds {events} app events, the flow emitted one", run_id)
        if path is not None:
            hops = list(zip(path, path[1:]))
            self.expect(self.markers(log) == hops, f"{run_id!r} migration markers {self.markers(log)}, "
                                                   f"the deploys were {hops}", run_id)
            self.edge_if(len(hops) == 1, "migrated")
            self.edge_if(len(hops) > 1, "migrated_chain")
        await self.replay_same(record, log, version)
        self.w.edge("completed")
        return record, log

    async def replay_same(self, record: Any, log: tuple, version: int) -> None:
        """``replay()`` of a finished run: its output (or its error), touching nothing."""
        events, effects = self.world.trace.events, self.effects
        seen: list = []
        flow = self.flow(version, seen=seen)
        try:
            got, error = await replay(record, log, flow, transforms=TRANSFORMS), None
        except Exception as exc:  # noqa: BLE001 - judged below
            got, error = None, exc
        quiet = self.world.trace.events == events and self.effects == effects
        # Every step a pure replay reaches is recorded: the context says it is replaying.
        self.expect(all(seen) and len(seen) == (STEPS if record.status == COMPLETED else 2),
                    f"replay of {record.run_id!r}: ctx.replaying was {seen} before its steps", record.run_id)
        self.expect(quiet, f"replay of {record.run_id!r} made {self.world.trace.events - events} events, "
                           f"{self.effects - effects} effect calls", record.run_id)
        if record.status == COMPLETED:
            if self.expect(error is None and got == record.output,
                           f"replay of {record.run_id!r}: {got!r:.100} / {error!r:.160}, recorded "
                           f"{record.output!r:.100}", record.run_id):
                self.w.edge("replayed_pure")
        elif type(record.output) is dict and record.output.get("errorTag") in POISONS:
            ok = error is not None and error_output(error) == record.output
            if self.expect(ok, f"replay of failed {record.run_id!r}: {error!r:.160}, recorded {record.output!r:.160}",
                           record.run_id):
                self.w.edge("replayed_error_pure")
        last_marker = max((s.seq for s in log if s.kind == EXECUTION_MIGRATED), default=0)
        if any(s.kind == STEP_COMPLETED and s.seq < last_marker for s in log):
            # Something folded before a marker: without the transforms it cannot fold.
            try:
                await replay(record, log, flow)
                bare = None
            except Exception as exc:  # noqa: BLE001 - judged below
                bare = exc
            if self.expect(error_name(bare) == "MigrationMissing" if bare is not None else False,
                           f"replay of migrated {record.run_id!r} without transforms: {bare!r:.200}", record.run_id):
                self.w.edge("dropped_transform_replay_refused")

    # -- the process ------------------------------------------------------------------

    async def main(self) -> None:
        await self.recover()
        episodes = [self.life, self.life, self.intent, self.inputs, self.divergence, self.bad_markers, self.misuse]
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

    async def recover(self) -> None:
        """Settle what an earlier incarnation (or a racer) left live."""
        for schedule_id in (self.schedule_id, RACE_SCHEDULE):
            live = await self.call("live_executions", schedule_id)
            if not self.expect(live.ok, f"live_executions({schedule_id!r}): {live.show()}", schedule_id):
                return
            for record in live.value:
                await self.settle(record.run_id, race=schedule_id == RACE_SCHEDULE)
                self.w.edge("recovered_live")

    async def settle(self, run_id: str, *, race: bool = False) -> None:
        """Finish a live run on the version its log says, with a full build:
        an in-doubt step is resolved, a run no build can continue failed."""
        for _ in range(3):
            record, log = await self.load(run_id)
            if record is None or record.status in TERMINAL_STATUSES:
                return
            payload = record.input
            try:
                version = effective_version(record, log)
            except ValueError as error:
                await self.operator_fail(run_id, error)
                return
            if version not in VERSIONS or type(payload) is not dict or "n" not in payload:
                await self.operator_fail(run_id, ValueError(f"{run_id}: not a run this client can continue"))
                return
            if record.status == PARKED and not await self.resolve(run_id, log, version, payload):
                return
            out, error = await self.drive(self.build(version, schemas=VALIDATORS), run_id, self.flow(version), version,
                                          race=race)
            if error is not None and not isinstance(error, PLANNED):
                await self.operator_fail(run_id, error)
                return
            if out is not None and out.status in TERMINAL_STATUSES:
                return

    async def resolve(self, run_id: str, log: tuple, version: int, payload: dict) -> bool:
        """An operator resolves the step in doubt: it did happen (its value, in
        the shape of the version the run is on now)."""
        doubt = [s for s in log if s.kind == EFFECT_INDOUBT and not any(
            later.step_id == s.step_id and later.kind == STEP_COMPLETED for later in log[s.seq:])]
        if not doubt:
            return True  # resolved already (the resolver died before it resumed the run)
        if not self.expect(len(doubt) == 1, f"parked {run_id!r} has {len(doubt)} steps in doubt: "
                                            f"{[(s.step_id, s.kind) for s in log[-4:]]}", run_id):
            return False
        step_id = doubt[0].step_id
        return await self.append(run_id, len(log) + 1, step_id, STEP_COMPLETED,
                                 effect_value(version, payload["n"], int(step_id[1:])))

    def payload(self, **extra: Any) -> dict:
        return {"n": self.rng.between(0, 30), "tag": self.uid("t"), **extra}

    def other_version(self, version: int) -> int:
        others = [v for v in VERSIONS if v != version]
        return others[self.rng.below(len(others))]

    # -- episodes ------------------------------------------------------------------------

    async def life(self) -> None:
        """Start on a version, maybe stop for a deploy (or two), resume on the new one."""
        a = VERSIONS[self.rng.below(3)]
        run_id, occurrence_ms = self.occurrence()
        payload = self.payload()
        stop = self.rng.below(5)  # 4: run straight through
        if stop < 4:
            self.interrupts[run_id] = stop
        out, error = await self.start(self.build(a), run_id, self.flow(a), a, payload, occurrence_ms=occurrence_ms)
        path = [a]
        if isinstance(error, Interrupted):
            record, log = await self.load(run_id)
            if record is None:
                return
            self.expect(record.status == RUNNING and len(log) == DURABLE_AT[stop],
                        f"{run_id!r} stopped in s{stop}: {record.status} with {len(log)} steps, expected running "
                        f"with {DURABLE_AT[stop]}", run_id)
            b = self.other_version(a)
            if len(log) > 0 and self.rng.below(3) == 0:
                # A build that does not know how to move this run: refused, nothing written.
                partial = {k: t for k, t in TRANSFORMS.items() if k != (a, b)}
                out, error = await self.drive(self.build(b, transforms=partial), run_id, self.flow(b), b)
                ok = (error_name(error) == "MigrationMissing" and error.from_version == a and error.to_version == b
                      if error is not None else False)
                if ok:
                    # A refusal crosses a process boundary whole (a sweep worker pickles failures).
                    copy = pickle.loads(pickle.dumps(error))
                    ok = self.expect((type(copy), str(copy), copy.run_id, copy.from_version, copy.to_version)
                                     == (type(error), str(error), run_id, a, b),
                                     f"MigrationMissing of {run_id!r} unpickled as {copy!r:.200}", run_id)
                self.expect(ok, f"{run_id!r} resumed on {b} with no ({a}, {b}) transform: "
                                f"{error!r:.200} / {out!r:.200}", run_id)
                after, again = await self.load(run_id)
                if self.expect(after is not None and after.status == RUNNING and again == log,
                               f"{run_id!r} changed under a refused migration: {after!r:.120}, {len(again)} steps",
                               run_id):
                    self.edge_if(ok, "migration_missing_refused")
            elif len(log) == 0 and self.rng.below(2) == 0:
                # Nothing recorded yet: no transform needed, the run is only marked.
                out, error = await self.drive(self.build(b, transforms={}), run_id, self.flow(b), b)
                if self.expect(error is None and out is not None and out.status == COMPLETED,
                               f"{run_id!r} with an empty log resumed on {b} without transforms: "
                               f"{error!r:.200} / {out!r:.200}", run_id):
                    self.w.edge("migrated_unmarked")
                await self.check_done(run_id, out, error, b, payload, path=[a, b])
                return
            chain = self.rng.below(3) == 0
            if chain:
                self.interrupts[run_id] = 3  # s3 is never durable at a stop: it runs again under b
            out, error = await self.drive(self.build(b), run_id, self.flow(b), b)
            path.append(b)
            if chain and isinstance(error, Interrupted):
                c = self.other_version(b)
                if len(log) > 0 and self.rng.below(2) == 0:
                    # A build of b that dropped the transform it migrated with (something folds through it).
                    dropped = {k: t for k, t in TRANSFORMS.items() if k != (a, b)}
                    stale, refused = await self.drive(self.build(b, transforms=dropped), run_id, self.flow(b), b)
                    ok = (error_name(refused) == "MigrationMissing" and refused.from_version == a
                          and refused.to_version == b if refused is not None else False)
                    if self.expect(ok, f"{run_id!r} migrated {a}->{b} resumed by a build without that "
                                       f"transform: {refused!r:.200} / {stale!r:.200}", run_id):
                        self.w.edge("dropped_transform_refused")
                out, error = await self.drive(self.build(c), run_id, self.flow(c), c)
                path.append(c)
        elif error is not None:
            self.expect(False, f"start of {run_id!r} on {a}: {error_name(error)}: {str(error)[:200]}", run_id)
            return
        done = await self.check_done(run_id, out, error, path[-1], payload, path=path)
        if done is None:
            return
        record = done[0]
        calls = self.attempts.get(run_id, 0)
        if self.rng.below(2) == 0:
            # Starting a finished run again (even as another version, with another input) runs nothing.
            again, error = await self.start(self.build(self.other_version(a)), run_id, self.flow(a), a,
                                            {"n": -1, "tag": "other"}, occurrence_ms=occurrence_ms)
            ok = error is None and again is not None and self.attempts.get(run_id, 0) == calls and (
                (again.status, again.output, again.steps_replayed, again.steps_executed)
                in ((record.status, record.output, 0, 0), (RETIRED, None, 0, 0)))
            if self.expect(ok, f"start of finished {run_id!r}: {again!r:.200} / {error!r:.160}", run_id):
                self.w.edge("start_replayed_finished")
        if self.rng.below(2) == 0:
            # An occurrence below the schedule's mark: retired, nothing run.
            late = f"{self.schedule_id}@{occurrence_ms - 1}"
            gone, error = await self.start(self.build(a), late, self.flow(a), a, payload,
                                           occurrence_ms=occurrence_ms - 1)
            ok = (error is None and gone == RunOutcome(late, RETIRED, None, 0, 0) and late not in self.attempts)
            if self.expect(ok, f"start of {late!r} below the mark: {gone!r:.200} / {error!r:.160}", late):
                self.w.edge("start_retired")

    async def intent(self) -> None:
        """A non-idempotent step times out (intent, no completion); the run is
        resumed (sometimes on another version), parks in doubt, an operator
        resolves it, it finishes."""
        a = VERSIONS[self.rng.below(3)]
        run_id, occurrence_ms = self.occurrence()
        payload = self.payload(intent=True)
        self.timeouts[run_id] = True
        out, error = await self.start(self.build(a), run_id, self.flow(a), a, payload, occurrence_ms=occurrence_ms)
        self.timeouts.pop(run_id, None)
        # An injected retry after the intent's commit parks it before the planned timeout.
        parked_first = error is None and out is not None and out.status == PARKED
        self.expect(isinstance(error, ToolTimeout) or parked_first,
                    f"{run_id!r}: s1 timed out, expected the run left live or parked: {error!r:.160} / {out!r:.160}",
                    run_id)
        b = self.other_version(a) if self.rng.below(2) == 0 else a
        out, error = await self.drive(self.build(b), run_id, self.flow(b), b)
        record, log = await self.load(run_id)
        if record is None:
            return
        doubt = [s for s in log if s.kind == EFFECT_INDOUBT]
        started = [s for s in log if s.kind == STEP_STARTED]
        ok = (error is None and out is not None and out.status == PARKED and record.status == PARKED
              and [s.step_id for s in doubt] == ["s1"] and [s.step_id for s in started] == ["s1"]
              and started[0].seq < doubt[0].seq and not any(s.step_id == "s1" and s.kind == STEP_COMPLETED
                                                            for s in log))
        if not self.expect(ok, f"{run_id!r} in doubt resumed on {b}: {error!r:.160} / {out!r:.120}; log "
                               f"{[(s.seq, s.step_id, s.kind) for s in log]}", run_id):
            return
        self.w.edge("indoubt_parked")
        events = self.world.trace.events
        try:
            await replay(record, log, self.flow(b), transforms=TRANSFORMS)
            pure = None
        except Exception as exc:  # noqa: BLE001 - judged below
            pure = exc
        ok = (error_name(pure) == "EffectInDoubt" and pure.step_id == "s1" and self.world.trace.events == events
              if pure is not None else False)
        if self.expect(ok, f"pure replay of parked {run_id!r}: {pure!r:.200}", run_id):
            self.w.edge("indoubt_replay_refused")
        if b != a:
            marker = [s.seq for s in log if s.kind == EXECUTION_MIGRATED]
            where = ([doubt[0].seq + 1], started[0].seq + 1) if parked_first else ([doubt[0].seq - 1],
                                                                                  started[0].seq + 2)
            if self.expect(marker == where[0] and doubt[0].seq == where[1],
                           f"{run_id!r}: intent at {started[0].seq}, marker at {marker}, in doubt at {doubt[0].seq}",
                           run_id) and not parked_first:
                self.w.edge("indoubt_past_marker")
        if self.rng.below(2) == 0:
            out, error = await self.drive(self.build(b), run_id, self.flow(b), b)
            _, again = await self.load(run_id)
            if self.expect(error is None and out is not None and out.status == PARKED and again == log,
                           f"parked {run_id!r} resumed again: {error!r:.160} / {out!r:.120}, "
                           f"{len(again)} steps (had {len(log)})", run_id):
                self.w.edge("parked_resume_stays_parked")
        if not await self.resolve(run_id, log, b, payload):
            return
        self.w.edge("indoubt_resolved")
        out, error = await self.drive(self.build(b), run_id, self.flow(b), b)
        await self.check_done(run_id, out, error, b, payload, path=[a, b] if b != a else [a])

    async def inputs(self) -> None:
        """Input schemas: rejections settle FAILED, a version without a
        validator runs anything, a validator answering a non-str is refused,
        a migration validates against the new version."""
        a = VERSIONS[self.rng.below(3)]
        covered = [v for v in VERSIONS if self.rng.below(3) != 0]
        schemas = {v: VALIDATORS[v] for v in covered}
        kind = self.rng.below(4)
        if kind == 0:
            n: Any = -1 - self.rng.below(5) if self.rng.below(2) else 31 + self.rng.below(5)
        elif kind == 1:
            n = ("7", None, [7])[self.rng.below(3)]
        else:
            n = self.rng.between(0, 30)
        payload = {"n": n, "tag": self.uid("t")}
        if kind == 3:
            payload["poison"] = sorted(POISONS)[self.rng.below(len(POISONS))]
        run_id, occurrence_ms = self.occurrence()
        buggy = a in schemas and self.rng.below(4) == 0
        answer = NOT_A_REASON[self.rng.below(len(NOT_A_REASON))]
        wired = dict(schemas)
        if buggy:
            wired[a] = _buggy_validator(answer, a)
        reason = VALIDATORS[a](payload) if a in schemas else None
        out, error = await self.start(self.build(a, schemas=wired), run_id, self.flow(a), a, payload,
                                      occurrence_ms=occurrence_ms)
        if buggy and reason is not None:
            ok = type(error) is TypeError and run_id not in self.attempts
            record, log = await self.load(run_id)
            if not self.expect(ok and record is not None and record.status == RUNNING and log == (),
                               f"{run_id!r}: a validator answered {answer!r}: {error!r:.200} / {out!r:.160}, "
                               f"record {record!r:.120}", run_id):
                return
            self.w.edge("validator_not_a_reason")
            out, error = await self.drive(self.build(a, schemas=schemas), run_id, self.flow(a), a)
        await self.check_input_outcome(run_id, out, error, a, payload, reason, validated=a in schemas)
        if kind == 0 and n < 0 and a == 1 and reason is None:
            # Accepted by version 1; stopped before anything was recorded and
            # deployed as version 2, whose schema refuses it: validated there.
            run_id, occurrence_ms = self.occurrence()
            self.interrupts[run_id] = 0
            out, error = await self.start(self.build(1, schemas={1: VALIDATORS[1]}), run_id, self.flow(1), 1, payload,
                                          occurrence_ms=occurrence_ms)
            if not self.expect(isinstance(error, Interrupted), f"{run_id!r} stop in s0: {error!r:.160} / {out!r:.160}",
                               run_id):
                return
            calls = self.attempts.get(run_id, 0)
            out, error = await self.drive(self.build(2, transforms={}, schemas={2: VALIDATORS[2]}), run_id,
                                          self.flow(2), 2)
            if await self.check_input_outcome(run_id, out, error, 2, payload, VALIDATORS[2](payload), markers=1,
                                              calls=calls):
                self.w.edge("input_rejected_after_migration")

    async def check_input_outcome(self, run_id: str, out: RunOutcome | None, error: BaseException | None,
                                  version: int, payload: dict, reason: str | None, *, markers: int = 0,
                                  calls: int = 0, validated: bool = True) -> bool:
        if reason is not None:
            ok = (error is None and out is not None and out.status == FAILED and type(out.output) is dict
                  and sorted(out.output) == ["errorTag", "message"]
                  and out.output["errorTag"] == "InputValidationError"
                  and out.output["message"].startswith(f"{run_id}: ")
                  and f"flow version {version}" in out.output["message"]
                  and out.output["message"].endswith(reason) and out.steps_executed == 0 and out.steps_replayed == 0
                  and self.attempts.get(run_id, 0) == calls)
            if not self.expect(ok, f"{run_id!r} input {payload!r:.80} rejected by version {version} ({reason}): "
                                   f"{error!r:.160} / {out!r:.200}", run_id):
                return False
            record, log = await self.load(run_id)
            if record is None:
                return False
            ok = (record.status == FAILED and record.output == out.output and len(log) == markers
                  and all(s.kind == EXECUTION_MIGRATED for s in log))
            if not self.expect(ok, f"rejected {run_id!r}: record {record!r:.160}, {len(log)} steps", run_id):
                return False
            try:
                await replay(record, log, self.flow(version), transforms=TRANSFORMS)
                pure = None
            except Exception as exc:  # noqa: BLE001 - judged below
                pure = exc
            # Replay knows no schema: the flow asks for its first step, which was never recorded.
            if self.expect(error_name(pure) == "ReplayIncomplete" if pure is not None else False,
                           f"replay of rejected {run_id!r}: {pure!r:.160}", run_id):
                self.w.edge("replay_incomplete")
            self.w.edge("input_rejected")
            return True
        n = payload["n"]
        if type(n) is not int or "poison" in payload:
            tag = payload.get("poison", "TypeError") if type(n) is int else "TypeError"
            ok = (error is None and out is not None and out.status == FAILED and type(out.output) is dict
                  and out.output.get("errorTag") == tag)
            if self.expect(ok, f"{run_id!r} with input {payload!r:.80}: expected failed with {tag}, got "
                               f"{error!r:.160} / {out!r:.200}", run_id):
                self.w.edge("flow_builtin_failed")
                if tag in POISONS:
                    record, log = await self.load(run_id)
                    if record is not None:
                        await self.replay_same(record, log, version)
            return ok
        self.edge_if(not validated, "input_unvalidated_version")
        return await self.check_done(run_id, out, error, version, payload) is not None

    async def divergence(self) -> None:
        """A flow whose step ids change between attempts, and a log holding a
        step of another kind under the id the flow asks for: both refused."""
        a = VERSIONS[self.rng.below(3)]
        run_id, occurrence_ms = self.occurrence()
        payload = self.payload()
        foreign = self.rng.below(2) == 0
        stop = (1, 3)[self.rng.below(2)] if not foreign else 1 + self.rng.below(3)
        self.interrupts[run_id] = stop
        flow = self.flow(a, nondeterministic=not foreign)
        out, error = await self.start(self.build(a), run_id, flow, a, payload, occurrence_ms=occurrence_ms)
        self.interrupts.pop(run_id, None)
        if error is not None and not isinstance(error, PLANNED) and error_name(error) != "ReplayDivergence":
            self.expect(False, f"{run_id!r} first attempt: {error_name(error)}: {str(error)[:200]}", run_id)
            return
        if out is not None:
            # Nothing was durable when an injected retry ran it again: it completed under new ids.
            return
        record, log = await self.load(run_id)
        if record is None or not log:
            return
        if foreign:
            # Someone else's step under the id the flow asks for next.
            kind = (EVENT_EMITTED, EFFECT_INDOUBT)[self.rng.below(2)]
            next_id = STEP_IDS[len(log)] if len(log) < len(STEP_IDS) else "s3"
            if not await self.append(run_id, len(log) + 1, next_id, kind, {"by": "foreign"}):
                return
            record, log = await self.load(run_id)
            if record is None:
                return
            wanted = (len(log), f"{kind}:{next_id}", next_id)
        else:
            wanted = None
        if error is None or isinstance(error, PLANNED):
            out, error = await self.drive(self.build(a), run_id, flow, a)
        ok = error_name(error) == "ReplayDivergence" if error is not None else False
        if ok:
            got = (error.seq, error.recorded, error.requested)
            ok = error.run_id == run_id and (got == wanted if wanted is not None else (
                error.seq == 1 and error.recorded.startswith("s0") and error.requested.startswith("s0")
                and error.recorded != error.requested))
        self.expect(ok, f"{run_id!r} {'foreign step' if foreign else 'non-deterministic flow'} on replay: "
                        f"{error!r:.200} / {out!r:.160}, expected divergence {wanted}", run_id)
        after, again = await self.load(run_id)
        if not self.expect(after is not None and after.status == RUNNING and again == log,
                           f"{run_id!r} changed under a refused replay: {after!r:.120}, {len(again)} steps", run_id):
            return
        if ok:
            self.w.edge("divergence_kind_refused" if foreign else "divergence_refused")
        events = self.world.trace.events
        try:
            await replay(record, log, flow, transforms=TRANSFORMS)
            pure = None
        except Exception as exc:  # noqa: BLE001 - judged below
            pure = exc
        if self.expect(error_name(pure) == "ReplayDivergence" if pure is not None else False,
                       f"pure replay of {run_id!r}: {pure!r:.200}", run_id):
            self.w.edge("divergence_replay_refused")
        if not foreign and log[0].step_id == "s0":
            # The deterministic flow folds what was recorded, then needs a step that was not.
            try:
                await replay(record, log, self.flow(a), transforms=TRANSFORMS)
                pure = None
            except Exception as exc:  # noqa: BLE001 - judged below
                pure = exc
            ok = (error_name(pure) == "ReplayIncomplete" and pure.step_id == STEP_IDS[len(log)]
                  if pure is not None else False)
            if self.expect(ok, f"replay of {run_id!r} ({len(log)} steps) with the fixed flow: {pure!r:.200}",
                           run_id):
                self.w.edge("replay_incomplete")
        self.expect(self.world.trace.events == events, f"replays of {run_id!r} made events", run_id)
        if not foreign and log[0].step_id == "s0" and self.rng.below(2) == 0:
            # The fixed build continues it.
            out, error = await self.drive(self.build(a), run_id, self.flow(a), a)
            await self.check_done(run_id, out, error, a, payload)
            return
        await self.operator_fail(run_id, error if error is not None else ValueError(f"{run_id}: divergent"))

    async def bad_markers(self) -> None:
        """Migration markers a foreign writer damaged or that do not connect:
        refused (ValueError), nothing written, in the kernel and in replay()."""
        a = VERSIONS[self.rng.below(3)]
        run_id, occurrence_ms = self.occurrence()
        payload = self.payload()
        self.interrupts[run_id] = self.rng.below(4)
        out, error = await self.start(self.build(a), run_id, self.flow(a), a, payload, occurrence_ms=occurrence_ms)
        if not isinstance(error, Interrupted):
            self.expect(error is None, f"{run_id!r} first attempt: {error!r:.200}", run_id)
            return
        record, log = await self.load(run_id)
        if record is None:
            return
        corrupt = self.rng.below(2) == 0
        if corrupt:
            output: Any = CORRUPT_MARKERS[self.rng.below(len(CORRUPT_MARKERS))]
        else:
            wrong = [v for v in (1, 2, 3, 7) if v != a]
            output = {"from": wrong[self.rng.below(len(wrong))], "to": VERSIONS[self.rng.below(3)]}
        if not await self.append(run_id, len(log) + 1, "migrate:?", EXECUTION_MIGRATED, output):
            return
        record, log = await self.load(run_id)
        if record is None:
            return
        b = VERSIONS[self.rng.below(3)]
        out, error = await self.drive(self.build(b), run_id, self.flow(b), b)
        needle = "corrupt" if corrupt else "is from version"
        ok = type(error) is ValueError and needle in str(error)
        self.expect(ok, f"{run_id!r} with marker {output!r:.80} resumed on {b}: {error!r:.200} / {out!r:.160}",
                    run_id)
        after, again = await self.load(run_id)
        ok = self.expect(ok and after is not None and after.status == RUNNING and again == log,
                         f"{run_id!r} changed under a refused marker: {after!r:.120}, {len(again)} steps", run_id)
        try:
            await replay(record, log, self.flow(b), transforms=TRANSFORMS)
            pure = None
        except Exception as exc:  # noqa: BLE001 - judged below
            pure = exc
        ok = self.expect(type(pure) is ValueError and needle in str(pure),
                         f"replay of {run_id!r} with marker {output!r:.80}: {pure!r:.200}", run_id) and ok
        self.edge_if(ok, "corrupt_marker_refused" if corrupt else "disconnected_marker_refused")
        await self.operator_fail(run_id, error if error is not None else ValueError("marker"))

    async def misuse(self) -> None:
        """Kernels built wrong: refused with TypeError at construction."""

        t12 = TRANSFORMS[(1, 2)]
        cases = (
            ("middleware object()", dict(middleware=(object(),))),
            ("middleware whose on_output is a str", dict(middleware=(Tally(), _NoHook()))),
            ("transform key (1, 1)", dict(transforms={(1, 1): t12})),
            ("transform key (1, 2, 3)", dict(transforms={(1, 2, 3): t12})),
            ("transform key '1->2'", dict(transforms={"1->2": t12})),
            ("transform key (True, 2)", dict(transforms={(True, 2): t12})),
            ("transform key (1, '2')", dict(transforms={(1, "2"): t12})),
            ("transform None", dict(transforms={(1, 2): None})),
            ("transform 't'", dict(transforms={(1, 2): "t"})),
            ("schema key '1'", dict(input_schemas={"1": VALIDATORS[1]})),
            ("schema key True", dict(input_schemas={True: VALIDATORS[1]})),
            ("schema None", dict(input_schemas={1: None})),
            ("schema 'n >= 0'", dict(input_schemas={2: "n >= 0"})),
        )
        for _ in range(2 + self.rng.below(3)):
            what, case = cases[self.rng.below(len(cases))]
            try:
                Kernel(self.runtime, self.store, **case)
                error = None
            except Exception as exc:  # noqa: BLE001 - judged below
                error = exc
            got = error_name(error) if error is not None else "built"
            if self.expect(type(error) is TypeError, f"a kernel built with {what}: {got}"):
                self.w.edge("misuse_refused")
        t23 = TRANSFORMS[(2, 3)]
        kernel = Kernel(self.runtime, self.store, middleware=(Tally(),), transforms={(2, 3): t23},
                        input_schemas={3: VALIDATORS[3]})
        if self.expect(dict(kernel.transforms) == {(2, 3): t23} and dict(kernel.input_schemas) == {3: VALIDATORS[3]},
                       "a kernel built right holds what it was given"):
            self.w.edge("built_clean")

    # -- the race (``ClientProcess.racer``): both processes on one run, at the same instant ----------

    async def race(self, tick: int) -> None:
        run_id = f"{RACE_SCHEDULE}@{tick}"
        version = VERSIONS[tick % 3]
        payload = {"n": tick % 31, "tag": "race"}
        out, error = await self.start(self.build(version), run_id, self.flow(version), version, payload,
                                      schedule_id=RACE_SCHEDULE, occurrence_ms=tick, race=True)
        if out is not None and out.status == RETIRED:
            return  # a peer finished it and a purge took it before this process came
        self.w.edge("race_started")
        await self.check_done(run_id, out, error, version, payload)
