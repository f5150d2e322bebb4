"""Run one scenario with one seed: build the stack, run its phases -> ``RunResult``."""
from __future__ import annotations

import platform
from typing import Any, Callable, Sequence, TextIO

import attrs

from sim.clock import format_calendar, format_duration_ms
from sim.heap import LongRunHeap
from sim.interleave import Deviation, FifoPolicy, ScriptedPolicy, parse_schedule
from sim.invariants import Violation
from sim.redact import NO_SECRET_IN_VERDICT, Redactor, collect_secret_values
from sim.runtime import TaskFailed
from sim.scenario import Branch, Run, Scenario, ScenarioOptions
from sim.timeline import BEYOND_FAULT_KINDS, Timeline
from sim.trace import Event
from sim.workload import Stack, Workload, owned_checks
from sim.world import World

PASS = "pass"
FAIL = "fail"
# Beyond the contract: a store broke a promise and the run noticed, loudly.
DETECTED = "detected"
UNDETECTED = "beyond-contract-undetected"
# The harness failed: a checker (or another subscriber) raised reading an
# event. Neither a pass nor a finding about the system: exit 3.
ERROR = "error"
# A hand-written script entry that never fired (``ScenarioOptions.script_must_fire``).
UNFIRED = "fault-script-unfired"
UNFIRED_SHOWN = 5  # entries a fault-script-unfired message names
LOOMSIM_VERSION = "0.1.0"
# With a progress observer the run goes in this many slices of simulated
# time, the observer told ``(now_ms, end_ms)`` after each: slicing changes
# nothing simulated (``Runtime.run`` leaves the clock where one call would).
PROGRESS_SLICES = 1000
# The trace event at a branch's fork instant (``ScenarioOptions.branch``).
BRANCH_EVENT = "run.branch"


@attrs.frozen
class RunResult:
    scenario: str
    seed: int
    store: str
    status: str
    trace_digest: str
    simulated_ms: int
    wall_s: float
    events: int
    faults: dict[str, int]
    invariants: dict[str, int]
    violations: tuple[Violation, ...]
    # The workloads' and the system's metrics (``Workload.metrics``).
    stats: dict[str, Any]
    config: dict[str, Any]
    excerpt: tuple[Event, ...] = ()
    fault_script: tuple[Any, ...] = ()
    coverage: dict[str, Any] = attrs.field(factory=dict)

    # Beyond the contract: the broken promises (fault events) and, when
    # detected, the violation that noticed the first of them.
    beyond_contract: tuple[Any, ...] = ()
    # ``sim.timeline.Timeline.to_dict``: bounded per-bin counts and marks of the run.
    timeline: dict[str, Any] = attrs.field(factory=dict)
    # CPU seconds of the end-of-run audit (``cpu_clock``; 0 without one): it
    # reads back all the stores hold, so it grows with what a run retains,
    # not with its wakes, and ``loomsim bench`` sets it apart.
    audit_cpu_s: float = 0.0

    @property
    def passed(self) -> bool:
        """No failure: every invariant held, or (beyond the contract) the
        broken promises were detected."""
        return self.status in (PASS, DETECTED)


def _script_deviations(opts: ScenarioOptions) -> tuple[Deviation, ...]:
    return tuple(e for e in (opts.fault_script or ()) if isinstance(e, Deviation))


def schedule_policy(opts: ScenarioOptions) -> Any:
    """The run's scheduling policy: a script's deviations if it has any
    (replayed exactly, FIFO elsewhere), else ``opts.schedule``."""
    deviations = _script_deviations(opts)
    if deviations:
        return ScriptedPolicy(deviations)
    policy = parse_schedule(opts.schedule)
    return None if isinstance(policy, FifoPolicy) else policy


def run_config(scenario: Scenario, opts: ScenarioOptions) -> dict[str, Any]:
    return {
        "scenario": scenario.name,
        "seed": opts.seed,
        "duration": format_duration_ms(opts.duration_ms),
        "store": opts.store,
        "params": dict(sorted(opts.params.items())),
        "faults": "probabilistic" if opts.fault_script is None else f"script ({len(opts.fault_script)} entries)",
        "schedule": opts.schedule if not _script_deviations(opts) else f"scripted ({len(_script_deviations(opts))})",
        **({"beyond_contract": True} if opts.beyond_contract else {}),
        **({"rates": dict(sorted(opts.rates.items()))} if opts.rates is not None else {}),
        **({"script_must_fire": True} if opts.script_must_fire and opts.fault_script is not None else {}),
        **({"branch": branch_config(opts.branch)} if opts.branch is not None else {}),
        "loomsim": LOOMSIM_VERSION,
        "python": platform.python_version(),
    }


def branch_config(branch: Branch) -> dict[str, Any]:
    """A branch as a run's config (and so its repro file) records it."""
    config = {"fork_at": format_duration_ms(branch.fork_at_ms), "fork_at_ms": branch.fork_at_ms, "key": branch.key}
    if branch.streams:
        config["streams"] = list(branch.streams)
    return config


def run(scenario: Scenario, opts: ScenarioOptions, *, trace_stream: TextIO | None = None,
        wall_clock: Callable[[], float] | None = None, cpu_clock: Callable[[], float] | None = None,
        on_start: Callable[[dict[str, Any]], None] | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        on_world: Callable[[World], None] | None = None,
        at_fork: Callable[[], int] | None = None) -> RunResult:
    """Run ``scenario``; the runner owns the phases. ``wall_clock`` and
    ``cpu_clock`` (the face passes ``time.perf_counter`` and
    ``time.process_time``) only measure; nothing simulated reads them.
    ``on_progress(now_ms, end_ms)``, if given, is called
    ``PROGRESS_SLICES`` times along the way; it only observes.

    With ``opts.branch``: the run goes to its fork instant, re-keys its
    streams by the branch key (``branch_at``) and goes on to its end.
    ``at_fork`` (the face's forking sweep, ``sim.face.branches``), if
    given, is called at the fork instant and returns the key this process
    lives (``opts.branch.key`` is then not read); it may fork the process.

    setup -> run with faults -> heal (faults stop at ``world.heal_at_ms``,
    computed here once) -> settle -> check (the audit, every checker's and
    every workload's) -> metrics.
    """
    started_s = wall_clock() if wall_clock else 0.0
    audit_cpu_s = 0.0
    secrets: dict[str, str] = {}
    world = World(opts.seed, trace_stream=trace_stream, schedule=schedule_policy(opts))
    if opts.branch is not None:
        world.streams.track()  # before any draw: the fork re-keys every stream alive then
    timeline = Timeline()  # observes only: subscribed before anything emits, it emits nothing
    timeline.subscribe(world.trace)
    space = scenario.swarm_space
    choices = space.choices_for(world, opts) if space is not None else None
    stack: Stack = scenario.build(Run(opts, choices, scenario))
    world.heal_at_ms = stack.heal_at_ms(opts.duration_ms)
    end_ms = opts.duration_ms + stack.settle_ms
    system = world.system = stack.system
    system.open(world, opts, choices)
    try:
        for workload in stack.workloads:
            requirements = tuple(workload.requires())
            if requirements:
                system.require(workload.name, requirements)
        # The one fault plan of the run: drawn from the seed, or a script.
        world.plan = stack.faults.plan_for(world, opts, choices)
        world.invariants.view = system.audit_view()
        # The stack's own checks, then those its workloads bring for what
        # they create (a check named twice: one line naming it).
        checks = [*stack.checks, *owned_checks(stack.workloads)]
        world.check(*checks)
        # A checker with ``on_port_call`` sees every store call as it
        # commits (``faults.ports.PortCall``): the reference-model oracle.
        world.port_observers.extend(c.on_port_call for c in checks if hasattr(c, "on_port_call"))
        if on_world is not None:
            on_world(world)
        for workload in stack.workloads:
            workload.setup(world)
        for workload in stack.workloads:
            workload.start(world)
        config = run_config(scenario, opts)
        config.update({k: v for k, v in world.config_extra.items() if k != "swarm_line"})
        if on_start is not None:
            on_start(world.config_extra)
        progress = on_progress
        try:
            if opts.branch is not None:
                _run_to(world, opts.branch.fork_at_ms, progress, end_ms)
                key = at_fork() if at_fork is not None else opts.branch.key
                config["branch"] = branch_config(attrs.evolve(opts.branch, key=key))
                branch_at(world, key, opts.branch.streams)
            _run_to(world, end_ms, progress, end_ms)
        except TaskFailed as failure:
            if world.trace.subscriber_failure is None:
                world.invariants._record(Violation(
                    "no-uncaught-errors", f"{failure}", failure.time_ms, (failure.task_name,), world.trace.events))
        if not world.invariants.violations and world.trace.subscriber_failure is None:
            audit_started_s = cpu_clock() if cpu_clock else 0.0
            view = system.audit_view()
            world.invariants.audit(view)
            for workload in stack.workloads:
                workload.check(view)
            audit_cpu_s = (cpu_clock() - audit_started_s) if cpu_clock else 0.0
        stats = system.metrics()
        stats.update(world.invariants.metrics())
        stats.update(workload_stats(stack.workloads, damaged=bool(world.beyond_contract)))
        # Counted work (never in the trace): what the system reports it
        # encoded, hashed and decoded, and what the trace digest hashed.
        stats["work"] = {**stats.get("work", {}), "trace_hashed_bytes": world.trace.hashed_bytes}
        # The values the workloads handed out as secrets: read now, while
        # their stores are open; judged once the result is whole (below).
        secrets = collect_secret_values(stack.workloads)
    finally:
        world.shutdown()
        system.close()
    status = beyond_status(world)
    # Only a green run is judged so: one that failed (or detected) stopped at
    # its violation, before its later entries' time.
    unfired = unfired_entries(world, opts) if status == PASS else ()
    if unfired:
        status = FAIL
    violations = tuple(world.invariants.violations)
    harness_failure = world.trace.subscriber_failure
    if harness_failure is not None:
        # Blamed on the checker that raised, never on the task whose event it read.
        status = ERROR
        violations = (Violation(harness_failure.owner_name, f"checker error: {harness_failure}",
                                world.runtime.now_ms(), (), harness_failure.event_seq),)
    first = violations[0] if violations else None
    excerpt = tuple(world.trace.related(first.related)) if first else ()
    result = RunResult(
        scenario=scenario.name,
        seed=opts.seed,
        store=opts.store,
        status=status,
        trace_digest=world.trace.digest,
        simulated_ms=world.runtime.now_ms(),
        wall_s=round((wall_clock() - started_s) if wall_clock else 0.0, 3),
        events=world.trace.events,
        faults=dict(sorted(world.fault_counts.items())),
        invariants=world.invariants.check_counts(),
        violations=violations,
        stats=stats,
        config=config,
        excerpt=excerpt,
        # The entries that never fired stay in it: its replay fails the same way.
        fault_script=tuple(sorted((*world.fault_events, *world.runtime.deviations, *unfired),
                                  key=lambda e: e.time_ms)),
        coverage=coverage(scenario, world, stats),
        beyond_contract=tuple(world.beyond_contract[:BEYOND_SHOWN]),
        timeline=timeline.to_dict(world.runtime.now_ms(), heal_ms=world.heal_at_ms, duration_ms=opts.duration_ms),
        audit_cpu_s=round(audit_cpu_s, 3),
    )
    return without_secrets(result, secrets, world.runtime.now_ms(), world.trace.events) if secrets else result


BEYOND_SHOWN = 20


def without_secrets(result: RunResult, secrets: dict[str, str], time_ms: int, event_seq: int) -> RunResult:
    """``result`` with every declared secret value replaced by ``[secret:
    LABEL]`` in all it carries (``sim.redact``); where one was found, the
    run fails with ``no-secret-in-verdict`` naming where (a harness error
    stays an error). Its status and trace digest are never rewritten."""
    redactor = Redactor(secrets)
    changes = {field.name: redactor.walk(getattr(result, field.name), field.name)
               for field in attrs.fields(RunResult) if field.name not in ("status", "trace_digest")}
    changes["invariants"] = {**changes["invariants"], NO_SECRET_IN_VERDICT: 1}
    if redactor.found:
        changes["violations"] = (*changes["violations"],
                                 Violation(NO_SECRET_IN_VERDICT, redactor.summary(), time_ms, (), event_seq))
        changes["status"] = FAIL if result.status in (PASS, DETECTED) else result.status
    return attrs.evolve(result, **{k: v for k, v in changes.items() if v is not getattr(result, k)})


def workload_stats(workloads: Sequence[Workload], *, damaged: bool = False) -> dict[str, Any]:
    """The workloads' metrics: each instance's under ``workloads`` by its
    name, and merged at the top (what ``sometimes`` properties read): a
    number two instances both report is their sum (``_merged``). A store
    broken beyond the contract (``damaged``) may refuse a workload's count
    of its rows: that workload's figures are then one line saying why."""
    merged: dict[str, Any] = {}
    by_instance: dict[str, Any] = {}
    for workload in workloads:
        try:
            own = workload.metrics()
        except Exception as error:  # noqa: BLE001 - only where a store was broken on purpose
            if not damaged:
                raise
            own = {"metrics_unreadable": f"{getattr(type(error), 'name', type(error).__name__)}: {error}"}
        by_instance[workload.name] = own
        merged = _merged(merged, own)
    merged["workloads"] = by_instance
    return merged


def _merged(first: Any, second: Any) -> Any:
    """Two instances' figures as one: numbers added, tallies (dicts) merged
    key by key; anything else, the first's."""
    if type(first) is int and type(second) is int:
        return first + second
    if isinstance(first, dict) and isinstance(second, dict):
        out = dict(first)
        for key, value in second.items():
            out[key] = _merged(out[key], value) if key in out else value
        return out
    return first


def branch_at(world: World, key: int, families: tuple[str, ...] = ()) -> None:
    """The fork instant of branch ``key``: the run's streams re-keyed
    (``sim.rng.Streams.branch``) and the branch traced, so its digest
    parts from its prefix's here. A run stopped before it (a violation in
    the prefix) does neither: every branch of it is that prefix."""
    if world.runtime.stop_requested:
        return
    # How many streams it re-keyed is not traced: the weak set may still
    # hold dead ones the collector has not reached, and a replay from a
    # script makes fewer fault streams; neither changes a draw.
    world.streams.branch(key, families)
    if families:
        world.emit(BRANCH_EVENT, key=key, streams=",".join(families))
    else:
        world.emit(BRANCH_EVENT, key=key)


def _run_to(world: World, t_ms: int, progress: Callable[[int, int], None] | None, end_ms: int) -> None:
    with LongRunHeap() as heap:
        _run_observed(world, t_ms, progress, end_ms, heap)


def _run_observed(world: World, until_ms: int, progress: Callable[[int, int], None] | None, end_ms: int | None = None,
                  heap: LongRunHeap | None = None) -> None:
    """``world.run_until(until_ms)`` in ``PROGRESS_SLICES`` slices of the run
    (``end_ms``: the run's end, default ``until_ms``), ``progress(now_ms,
    end_ms)`` told after each, if given; between slices, ``heap`` (``sim.heap``)
    sets aside what a full collection has found alive. Slicing changes nothing
    simulated: ``run_until`` stops between events."""
    end_ms = until_ms if end_ms is None else end_ms
    start_ms = world.runtime.now_ms()
    slice_ms = max(1, (end_ms - start_ms) // PROGRESS_SLICES)
    t_ms = start_ms
    while t_ms < until_ms and not world.runtime.stop_requested:
        t_ms = min(until_ms, t_ms + slice_ms)
        world.run_until(t_ms)
        if heap is not None:
            heap.settle()
        if progress is not None:
            progress(world.runtime.now_ms(), end_ms)


def beyond_status(world: World) -> str:
    """PASS or FAIL, or beyond the contract: DETECTED when a violation came
    at or after the first broken promise, FAIL (``beyond-contract-undetected``
    recorded) when nothing noticed. A violation *before* the first broken
    promise is a failure of the system within its contract: FAIL."""
    violations = world.invariants.violations
    broken = world.beyond_contract
    if not broken:
        return FAIL if violations else PASS
    first = broken[0]
    if violations:
        if violations[0].time_ms < first.time_ms:
            return FAIL
        return DETECTED if _judged_detection(world, violations[0]) else FAIL
    world.invariants._record(Violation(
        UNDETECTED,
        f"the store broke {len(broken)} promise(s) beyond its contract (first: {first.kind} at {first.site} "
        f"hit {first.hit} on {first.node}) and nothing noticed: a silent pass",
        world.runtime.now_ms(), (first.site,), world.trace.events))
    return FAIL


def _judged_detection(world: World, violation: Violation) -> bool:
    """Whether ``violation`` counts as the detection of the broken promises
    before it. A kind with a judge (``world.beyond_judges``) accepts only
    what its judge accepts (a latent sector error: the store's typed
    answer, never an oracle noticing the wrong row it handed on), unless a
    promise of a kind without one broke before it too. A rejected one
    records ``beyond-contract-undetected``, saying what noticed instead."""
    judges = world.beyond_judges
    before = [e for e in world.beyond_contract if e.time_ms <= violation.time_ms]
    if not judges or not before or any(e.kind not in judges for e in before):
        return True
    if any(judges[e.kind](violation) for e in before):
        return True
    first = before[0]
    world.invariants._record(Violation(
        UNDETECTED,
        f"the store broke a promise beyond its contract ({first.kind} at {first.time_ms} ms) and no store answered "
        f"it typed: {violation.invariant} noticed a wrong answer instead",
        violation.time_ms, (first.site,), world.trace.events))
    return False


def unfired_entries(world: World, opts: ScenarioOptions) -> tuple[Any, ...]:
    """A hand-written script's entries that never fired in a green run; with
    any, records ``fault-script-unfired`` naming each (and the run's nearest
    sites and nodes, for a typo): a targeted test that tested nothing must
    not pass. Nothing unless ``opts.script_must_fire``."""
    script = opts.fault_script
    if not opts.script_must_fire or not script:
        return ()
    missed = dict(world.plan.unfired() if world.plan is not None else ())
    chooser = world.runtime.chooser
    lost = {id(d) for d in (chooser.unapplied() if hasattr(chooser, "unapplied") else ())}
    missed.update((index, e) for index, e in enumerate(script) if isinstance(e, Deviation) and id(e) in lost)
    if not missed:
        return ()
    import difflib

    hits = world.site_hits() if world.site_hits is not None else {}
    sites = sorted({*hits, *(e.site for e in world.fault_events)})
    nodes = sorted(world.nodes)
    described = []
    for index, entry in sorted(missed.items())[:UNFIRED_SHOWN]:
        if isinstance(entry, Deviation):
            described.append(f"entry {index} (schedule at {format_calendar(entry.time_ms)}: {entry.summary()}): "
                             "never applied")
            continue
        why = []
        name = entry.node.split("#", 1)[0]
        if name != "*" and name not in world.nodes:
            near = difflib.get_close_matches(name, nodes, n=2)
            why.append(f"node {entry.node!r} never existed" + (f" (nearest: {', '.join(near)})" if near else ""))
        if entry.site not in sites and not entry.site.startswith("alarm.") and entry.site != "process":
            near = difflib.get_close_matches(entry.site, sites, n=2)
            why.append(f"site {entry.site!r} was never hit" + (f" (nearest: {', '.join(near)})" if near else ""))
        if entry.time_ms >= world.runtime.now_ms():
            why.append("its time is past the run's end")
        described.append(f"entry {index} ({entry.kind} at {entry.site} on {entry.node}, {format_calendar(entry.time_ms)}): "
                         + ("; ".join(why) or "never fired"))
    more = f"; and {len(missed) - UNFIRED_SHOWN} more" if len(missed) > UNFIRED_SHOWN else ""
    world.invariants._record(Violation(
        UNFIRED, f"{len(missed)} of {len(script)} script entries never fired: " + "; ".join(described) + more,
        world.runtime.now_ms(), (), world.trace.events))
    return tuple(entry for _, entry in sorted(missed.items()))


def coverage(scenario: Scenario, world: World, stats: dict[str, Any]) -> dict[str, Any]:
    """How often each fault kind and each failpoint fired (and was reached),
    and which ``sometimes`` properties held: a green run that never fired a
    kind, or never reached a rare case, is a coverage gap, not a pass."""
    space = scenario.swarm_space
    # Without a swarm space: the kinds the run's plan armed (``plan.armed``).
    armed = tuple(world.plan.armed) if world.plan is not None else ()
    kind_names = tuple(space.fault_kinds) if space is not None else armed
    failpoint_names = tuple(space.failpoints) if space is not None else ()
    fired_at: dict[str, int] = {}
    by_port: dict[str, dict[str, int]] = {}
    hits = world.site_hits() if world.site_hits is not None else {}
    for event in world.fault_events:
        site = event.site
        fired_at[site] = fired_at.get(site, 0) + 1
        port, dot, _ = site.partition(".")
        # A port call is a site the plan drew hits for (timed faults such
        # as a duplicate alarm are never drawn per hit), minus failpoints.
        if dot and site not in failpoint_names and site in hits:
            kinds = by_port.setdefault(port, {})
            kinds[event.kind] = kinds.get(event.kind, 0) + 1
    failpoints = {name: {"hits": hits.get(name, 0), "fired": fired_at.get(name, 0)} for name in failpoint_names}
    kinds = {kind: world.fault_counts.get(kind, 0) for kind in kind_names}
    sometimes = {}
    for name in scenario.sometimes:
        value = stats.get(name, 0)
        sometimes[name] = (sum(value.values()) if isinstance(value, dict) else value) > 0
    # Beyond the contract (opt-in, never a swarm choice): how often each kind
    # the run armed broke a promise (only in a run that armed one).
    beyond = {kind: world.fault_counts.get(kind, 0) for kind in BEYOND_FAULT_KINDS if kind in armed}
    return {
        "fault_kinds": kinds,
        **({"beyond_contract": beyond} if beyond else {}),
        # What the run's plan could fire (enabled and given a rate): a kind
        # armed and never fired is a gap; one not armed was switched off.
        "armed": list(armed),
        # Which kinds fired at which port (``ledger``, ``log``, ``checkpoints``, ...).
        "ports": {port: dict(sorted(counts.items())) for port, counts in sorted(by_port.items())},
        "failpoints": failpoints,
        "never_fired": [k for k, n in kinds.items() if n == 0] + [f for f, c in failpoints.items() if c["fired"] == 0],
        "sometimes": sometimes,
    }
