"""``loomsim describe SCENARIO``: what a scenario is made of, without running it.

Its parameters (flags, ranges, defaults), the fault kinds, failpoints,
workload switches and knobs its seeds' swarm chooses from (the part ``loomsim
list --faults`` prints too: ``swarm_lines``; a knob drawn from a weighted
list shows each value once and the weights; a scenario without a swarm
space, a user's ``Stack`` of ``PortFaults`` and ``NodeKills`` say, shows
the kinds its own stack fires: ``stack_fault_kinds``), its fault sites, its
invariants with the one-line doc of each, its ``sometimes`` properties and
its default and sweep durations; ``--json`` too.

Invariants and sites come from the scenario's own build function, called the
way the runner calls it but never run: once per store (memory, SQLite) with
the full mix (every fault kind, failpoint and workload switch on, default
knobs), and once with every workload switch off. A checker built in only
some of those is listed with when it is there (``only on sqlite``, ``with a
workload switch``). The runner's own verdicts (``no-uncaught-errors``,
``fault-script-unfired``, ``beyond-contract-undetected``) are listed apart:
they are violations the runner records, not checkers that count checks.

Fault sites are not declared in one list; they are derived: every method of
every port the built-in ``System`` binds to a process (its describer
tables, ``scenarios.system.DESCRIBERS``, and those of the stores it opens
only when asked, such as the keyring; a site is ``port.method``, and
every such call draws from the plan: the port fault kinds, without
``write-contention`` on reads), the damaged read answers (``log.read.answer``)
when the system damages reads, SQLite's overtaking commit on SQLite when the
scenario rates it, the ports a workload binds itself (its
``port_sites()``: the key service's and the secret store's), the scenario's
boosted sites (its rarely called ones, ``pager.page`` among them) and its
failpoints. Which of them a seed reaches
is in a run's coverage (``faults_by_port``, ``failpoints``).

Part of the face: no clock, nothing runs.
"""
from __future__ import annotations

import inspect
import json
from typing import Any, Mapping, Sequence

from sim.clock import format_duration_ms
from sim.face.options import UsageError, wrap_names
from sim.face.repro_file import param_flag

FORMAT = "loomsim-describe/1"
STORES = ("memory", "sqlite")


def add_parser(sub: Any) -> Any:
    """``loomsim describe``'s arguments."""
    p = sub.add_parser("describe", help="a scenario's parameters, faults, sites, knobs, invariants, "
                                        "sometimes-properties and durations")
    p.add_argument("scenario", help="scenario name (see `loomsim list`)")
    p.add_argument("--json", action="store_true", help="print the description as one JSON object")
    return p


def command(args: Any) -> int:
    """``loomsim describe SCENARIO``."""
    from scenarios import registry

    try:
        scenario = registry.get(args.scenario)
    except registry.UnknownScenario as error:
        raise UsageError(str(error)) from None
    body = describe(scenario)
    print(json.dumps(body, ensure_ascii=False) if args.json else render(body))
    return 0


def swarm_lines(scenario: Any) -> list[str]:
    """What a seed's swarm chooses from, its parameters and ``sometimes``
    properties: the per-scenario lines of ``loomsim list --faults``."""
    lines = []
    space = scenario.swarm_space
    if space is None:
        lines.append("  no swarm: the scenario's own fault mix, all of it in every seed")
        stacks = [_build(scenario, "memory", workload_on=True)]
        for label, names in (("fault kinds", stack_fault_kinds(stacks)),
                             ("failpoints (failpoint-crash sites)", stack_failpoints(stacks))):
            lines.append(f"  {label}: {wrap_names(names, '    ', head=f'  {label}: ') or 'none'}")
    else:
        for label, names in (("fault kinds", space.fault_kinds),
                             ("failpoints (failpoint-crash sites)", space.failpoints),
                             ("workload switches", space.workload)):
            lines.append(f"  {label}: {wrap_names(names, '    ', head=f'  {label}: ') or 'none'}")
        for knob in space.knobs:
            values = f", {knob_values_text(*weighted_values(knob.values))}" if knob.values else ""
            lines.append(f"  knob {knob.name}={knob.default} (range {knob.minimum}..{knob.maximum}{values}): "
                         f"{knob.help}")
    for spec in scenario.params:
        lines.append(f"  {param_flag(spec.name)} N ({spec.minimum}..{spec.maximum}): {spec.help}")
    if scenario.sometimes:
        lines.append(f"  sometimes-properties: {', '.join(scenario.sometimes)}")
    return lines


def weighted_values(values: Sequence[int]) -> tuple[list[int], list[int]]:
    """A knob's draw list (a value listed twice is drawn twice as often)
    as its distinct values, in their order, and each one's weight."""
    distinct = list(dict.fromkeys(values))
    return distinct, [values.count(value) for value in distinct]


def knob_values_text(values: Sequence[int], weights: Sequence[int]) -> str:
    """``values 1, 10, 100 drawn 2:1:1``; without ``drawn`` when all are equally likely."""
    drawn = f" drawn {':'.join(map(str, weights))}" if len(set(weights)) > 1 else ""
    return f"values {', '.join(map(str, values))}{drawn}"


def stack_fault_kinds(stacks: Sequence[Any]) -> list[str]:
    """The fault kinds the built ``stacks`` can fire, in ``ALL_FAULT_KINDS``
    order: their port faults' rates above zero (fixed ones too), their
    chaos workloads' kinds (``NodeKills``: node-kill, ...), the read
    answers and notifications their system damages. What a scenario
    without a swarm space fires: its own mix, all of it in every seed."""
    from faults.kinds import ALL_FAULT_KINDS
    from faults.notifications import KINDS as NOTIFY_KINDS
    from faults.reads import READ_FAULT_KINDS

    used: set[str] = set()
    for stack in stacks:
        for rates in (getattr(stack.faults, "rates", None), getattr(stack.faults, "fixed_rates", None)):
            used.update(kind for kind, rate in (rates or {}).items() if rate > 0)
        used.update(kind for kind in (getattr(w, "kind", None) for w in stack.workloads) if kind)
        if getattr(stack.system, "damaged_reads", False):
            used.update(READ_FAULT_KINDS)
        if getattr(stack.system, "progress", False):
            used.update(NOTIFY_KINDS)
    return [kind for kind in ALL_FAULT_KINDS if kind in used] + sorted(used - set(ALL_FAULT_KINDS))


def stack_failpoints(stacks: Sequence[Any]) -> list[str]:
    """The failpoints the built ``stacks`` crash at (their port faults'
    ``failpoints``, when they rate ``failpoint-crash``), each once."""
    from faults.kinds import FAILPOINT_CRASH

    return list(dict.fromkeys(site for stack in stacks if FAILPOINT_CRASH in stack_fault_kinds([stack])
                              for site in getattr(stack.faults, "failpoints", ())))


def _build(scenario: Any, store: str, *, workload_on: bool) -> Any:
    """The scenario's stack as the runner builds it (never opened, never run)."""
    from sim.scenario import Run, ScenarioOptions
    from sim.world import World

    space = scenario.swarm_space
    switches = tuple(space.workload) if space is not None else ()
    opts = ScenarioOptions(seed=0, duration_ms=scenario.sweep_ms, store=store, swarm=False,
                           faults_disable=() if workload_on else switches)
    world = World(0)
    choices = space.choices_for(world, opts) if space is not None else None
    return scenario.build(Run(opts, choices, scenario))


def checker_doc(checker: Any) -> str:
    """A checker's one-line doc: its class's first docstring paragraph, else
    its module's (an invariant module starts ``\\`\\`name\\`\\`: what it says``)."""
    for doc in (type(checker).__doc__, inspect.getmodule(type(checker)).__doc__):
        paragraph = " ".join((inspect.cleandoc(doc or "").split("\n\n") or [""])[0].split())
        if paragraph:
            prefix = f"``{type(checker).name}``: "
            return paragraph[len(prefix):] if paragraph.startswith(prefix) else paragraph
    return ""


def _invariants(scenario: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    builds = {(store, on): _build(scenario, store, workload_on=on) for store in STORES for on in (True, False)}
    found: dict[str, dict[str, Any]] = {}
    from sim.redact import NO_SECRET_IN_VERDICT
    from sim.workload import Workload, owned_checks

    for (store, on), stack in builds.items():
        # The stack's own checks, then those its workloads bring (named as a run names them).
        for checker in [*stack.checks, *owned_checks(stack.workloads)]:
            entry = found.setdefault(checker.name, {"name": checker.name, "doc": checker_doc(checker),
                                                    "stores": [], "with_switches": False, "without_switches": False})
            if store not in entry["stores"]:
                entry["stores"].append(store)
            entry["with_switches" if on else "without_switches"] = True
        # A workload that declares secrets brings the runner's scan of the verdict.
        if any(type(workload).secret_values is not Workload.secret_values for workload in stack.workloads):
            entry = found.setdefault(NO_SECRET_IN_VERDICT, {
                "name": NO_SECRET_IN_VERDICT, "stores": [], "with_switches": False, "without_switches": False,
                "doc": "no secret a workload declares is in anything the run's result carries (reports, repro "
                       "file, failure database): each one found is redacted, and the run fails"})
            if store not in entry["stores"]:
                entry["stores"].append(store)
            entry["with_switches" if on else "without_switches"] = True
    invariants = []
    for entry in found.values():
        when = []
        if len(entry["stores"]) < len(STORES):
            when.append(f"only on {' and '.join(entry['stores'])}")
        if not entry["without_switches"]:
            when.append("with a workload switch")
        invariants.append({"name": entry["name"], "doc": entry["doc"], "when": ", ".join(when) or "always"})
    return invariants, [builds[(store, True)] for store in STORES]


def runner_verdicts() -> list[dict[str, str]]:
    """The violations the runner itself records (no checker counts them)."""
    from sim.runner import UNDETECTED, UNFIRED

    return [{"name": "no-uncaught-errors", "doc": "a simulated task raised an error nothing handled"},
            {"name": UNFIRED, "doc": "an entry of a hand-written fault script never fired"},
            {"name": UNDETECTED, "doc": "beyond the contract: a broken promise that no invariant noticed"}]


def fault_sites(scenario: Any, stacks: list[Any]) -> list[dict[str, Any]]:
    """Every site a plan can fault (see the module doc for how they are derived)."""
    from faults.kinds import OVERTAKING_COMMIT, PORT_FAULT_KINDS, WRITE_CONTENTION
    from faults.ports import READ_METHODS
    from faults.reads import READ_FAULT_KINDS
    from faults.notifications import KINDS as NOTIFY_KINDS, SITE as NOTIFY_SITE
    from faults.sqlite_overtake import SITE as OVERTAKE_SITE
    from scenarios.system import DESCRIBERS, OPTIONAL_DESCRIBERS, System

    sites: dict[str, dict[str, Any]] = {}

    def add(name: str, kinds: Any, what: str) -> None:
        entry = sites.setdefault(name, {"site": name, "kinds": [], "what": what, "boosted": False})
        entry["kinds"] += [k for k in kinds if k not in entry["kinds"]]

    for stack in stacks:
        if not isinstance(stack.system, System):
            continue
        tables = dict(DESCRIBERS)
        if getattr(stack.system, "with_keyring", False):
            tables["keyring"] = OPTIONAL_DESCRIBERS["keyring"]
        for port, table in tables.items():
            for method in table:
                add(f"{port}.{method}", [k for k in PORT_FAULT_KINDS
                                         if not (method in READ_METHODS and k == WRITE_CONTENTION)], "port call")
        if getattr(stack.system, "damaged_reads", False):
            add("log.read.answer", READ_FAULT_KINDS, "read answer")
        if OVERTAKING_COMMIT in (getattr(stack.faults, "fixed_rates", None) or {}):
            add(OVERTAKE_SITE, [OVERTAKING_COMMIT], "sqlite read in a transaction (on sqlite)")
        if getattr(stack.system, "progress", False):
            add(NOTIFY_SITE, list(NOTIFY_KINDS), "progress notification after an append")
    for stack in stacks:
        # The ports a workload binds itself (a key service, a secret store):
        # their sites, as it names them.
        for workload in stack.workloads:
            for name in getattr(workload, "port_sites", tuple)():
                method = name.partition(".")[2]
                add(name, [k for k in PORT_FAULT_KINDS if not (method in READ_METHODS and k == WRITE_CONTENTION)],
                    "port call")
    for stack in stacks:
        for name in getattr(stack.faults, "boosted_sites", ()):
            method = name.partition(".")[2]
            add(name, [] if name in sites else [k for k in PORT_FAULT_KINDS
                                                 if not (method in READ_METHODS and k == WRITE_CONTENTION)],
                "port call")
            sites[name]["boosted"] = True
    for stack in stacks:
        # Clock jumps, at the node whose clock steps (``faults.clocks``).
        for workload in stack.workloads:
            if getattr(workload, "name", "").startswith("clock-jumps"):
                from faults.clocks import CLOCK_SITES

                for name in CLOCK_SITES:
                    add(name, [workload.kind], "a node's clock stepped")
    space = scenario.swarm_space
    from faults.kinds import FAILPOINT_CRASH

    for name in (space.failpoints if space is not None else stack_failpoints(stacks)):
        add(name, [FAILPOINT_CRASH], "failpoint")
    return list(sites.values())


def beyond_kinds(scenario: Any) -> list[dict[str, Any]]:
    """The kinds a run beyond the contract adds (``--beyond-contract``), by
    where they strike: the port writes' surgeries (``faults.beyond``) on any
    built-in store, and on SQLite the disk faults on the file
    (``faults.disk``), when the scenario's SQLite stack has them."""
    from faults.beyond import DURABLE_STATE_KINDS, LEDGER_KINDS, LOG_KINDS
    from faults.disk import SITE as DISK_SITE
    from faults.kinds import DISK_FAULT_KINDS
    from sim.scenario import Run, ScenarioOptions
    from sim.world import World

    found = []
    for port, table in (("log", LOG_KINDS), ("ds", DURABLE_STATE_KINDS), ("ledger", LEDGER_KINDS)):
        for method, kinds in table.items():
            found.append({"site": f"{port}.{method}", "kinds": list(kinds), "stores": ["memory", "sqlite"]})
    space = scenario.swarm_space
    opts = ScenarioOptions(seed=0, duration_ms=scenario.sweep_ms, store="sqlite", swarm=False, beyond_contract=True)
    world = World(0)
    stack = scenario.build(Run(opts, space.choices_for(world, opts) if space is not None else None, scenario))
    disk = [w for w in stack.workloads if any(kind in DISK_FAULT_KINDS for kind in getattr(w, "kinds", ()))]
    if disk:
        found.append({"site": DISK_SITE, "kinds": [kind for w in disk for kind in w.kinds], "stores": ["sqlite"],
                      "checks": [checker.name for w in disk for checker in w.checks()]})
    return found


def describe(scenario: Any) -> dict[str, Any]:
    """The scenario's description as plain data (what ``--json`` prints)."""
    space = scenario.swarm_space
    invariants, stacks = _invariants(scenario)
    return {
        "format": FORMAT,
        "scenario": scenario.name,
        "description": scenario.description,
        "default_duration": format_duration_ms(scenario.default_duration_ms),
        "sweep_duration": format_duration_ms(scenario.sweep_ms),
        "params": [{"name": p.name, "flag": param_flag(p.name), "default": p.default, "minimum": p.minimum,
                    "maximum": p.maximum, "help": p.help} for p in scenario.params],
        "swarm": space is not None,
        # Without a swarm space: what the scenario's own stack fires (every seed, all of it).
        "fault_kinds": list(space.fault_kinds) if space is not None else stack_fault_kinds(stacks),
        "failpoints": list(space.failpoints) if space is not None else stack_failpoints(stacks),
        "workload_switches": list(space.workload) if space is not None else [],
        "knobs": [_knob(k) for k in (space.knobs if space is not None else ())],
        "fault_sites": fault_sites(scenario, stacks),
        # What skew the system claims to tolerate (a scenario with node clocks).
        "clock_tolerance": clock_tolerance(scenario, stacks),
        "beyond_contract": beyond_kinds(scenario),
        "invariants": invariants,
        "runner_verdicts": runner_verdicts(),
        "sometimes": list(scenario.sometimes),
    }


def clock_tolerance(scenario: Any, stacks: Sequence[Any]) -> str | None:
    """The claimed clock tolerance of a scenario whose nodes have clocks of
    their own (clock skew or jumps among its kinds); None otherwise."""
    from faults.clocks import tolerance_line
    from faults.kinds import CLOCK_JUMP, CLOCK_SKEW

    space = scenario.swarm_space
    kinds = space.fault_kinds if space is not None else stack_fault_kinds(stacks)
    return tolerance_line() if CLOCK_SKEW in kinds or CLOCK_JUMP in kinds else None


def _knob(knob: Any) -> dict[str, Any]:
    """A knob as plain data: ``values`` each once, ``weights`` how many times each is drawn."""
    values, weights = weighted_values(knob.values)
    return {"name": knob.name, "default": knob.default, "minimum": knob.minimum, "maximum": knob.maximum,
            "values": values, "weights": weights, "help": knob.help}


def render(body: Mapping[str, Any]) -> str:
    lines = [f"{body['scenario']}: {body['description']}",
             f"  durations: default {body['default_duration']}, a sweep's seed {body['sweep_duration']}"]
    lines.append("  parameters:" if body["params"] else "  parameters: none")
    for p in body["params"]:
        lines.append(f"    {p['flag']} N (range {p['minimum']}..{p['maximum']}, default {p['default']}): {p['help']}")
    if not body["swarm"]:
        lines.append("  no swarm: the scenario's own fault mix, all of it in every seed")
    for label, key in (("fault kinds", "fault_kinds"), ("failpoints", "failpoints"),
                       ("workload switches", "workload_switches")):
        lines.append(f"  {label}: {wrap_names(body[key], '    ', head=f'  {label}: ') or 'none'}")
    lines.append("  knobs:" if body["knobs"] else "  knobs: none")
    for k in body["knobs"]:
        values = f", {knob_values_text(k['values'], k['weights'])}" if k["values"] else ""
        lines.append(f"    {k['name']} (range {k['minimum']}..{k['maximum']}, default {k['default']}{values}): "
                     f"{k['help']}")
    lines.append(f"  fault sites ({len(body['fault_sites'])}; derived from the port tables, boosted sites "
                 "and failpoints):")
    for site in body["fault_sites"]:
        boosted = ", boosted" if site["boosted"] else ""
        lines.append(f"    {site['site']} ({site['what']}{boosted}): {', '.join(site['kinds'])}")
    if body.get("clock_tolerance"):
        lines.append(f"  clock tolerance: {body['clock_tolerance']}")
    beyond = body.get("beyond_contract") or []
    lines.append(f"  beyond the contract (--beyond-contract; {len(beyond)} sites):" if beyond
                 else "  beyond the contract: none")
    for entry in beyond:
        where = "" if len(entry["stores"]) > 1 else f", on {entry['stores'][0]} only"
        checks = f" (checked by {', '.join(entry['checks'])})" if entry.get("checks") else ""
        lines.append(f"    {entry['site']}{where}: {', '.join(entry['kinds'])}{checks}")
    lines.append(f"  invariants ({len(body['invariants'])}):")
    for inv in body["invariants"]:
        when = "" if inv["when"] == "always" else f" [{inv['when']}]"
        lines.append(f"    {inv['name']}{when}: {inv['doc'] or '(no doc)'}")
    lines.append("  the runner's own verdicts: " + ", ".join(v["name"] for v in body["runner_verdicts"]))
    lines.append(f"  sometimes-properties: {wrap_names(body['sometimes'], '    ', head='  sometimes-properties: ') or 'none'}")
    return "\n".join(lines)
