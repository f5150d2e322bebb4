"""Stacks as data: a TOML file that composes existing workloads into a scenario.

Python stays the way to write a new workload or check; composing existing
ones needs none. ``load(path)`` reads a stack file into the same kind of
``sim.scenario.Scenario`` the registry holds, whose build function makes the
``Stack``: the system, the workloads (each a kind of ``WORKLOADS`` with its
name and parameters), the port fault mix, the swarm space, the checks (by
the names the reports use, ``CHECKS``), and the heal and settle lengths.
``scenarios/README.md`` shows the format whole.

Everything is checked when the file is read, before any run: an unknown
table, key, kind or check, a wrong type, a bad duration, a reference to a
workload, knob or switch the file does not have is one ``StackFileError``
line naming the file and the place (``FILE: [workload 2] unknown key
'evry' (known: ...)``). A run's name for the stack is the path it was given
by; ``[scenario] name`` is its title (repro file names use it). A repro file
of a file stack embeds the file's text, so it replays after the file moved
or changed (``sim/face/repro_file.py``).

What a parameter cannot say as data (a deploy timeline, the keys an
operator edits, who is busy) the kind's builder takes from the workload it
names (``fleet = "sentinels"``, ``targets = "workers"``).

Three kinds are fault families: ``partitions`` (a target's processes cut
from some of the stores they call, ``CALLED_STORES``), ``clocks`` (a clock
per machine) and ``disk-faults`` (the SQLite file damaged, beyond the
contract). The swarm kinds they bring (``FAMILY_KINDS``) and the clock
knobs join the file's swarm after its own (``_with_families``), and their
oracles come with them (``clock-tolerance``; ``storage-integrity``).
"""
from __future__ import annotations

import hashlib
import re
import tomllib
from typing import Any, Callable, Mapping

import attrs

from faults import chaos
from faults.clocks import (CLOCK_DRIFT_PPM_MAX, CLOCK_FAULT_KINDS, CLOCK_OFFSET_MS_MAX, DRIFT_KNOB, OFFSET_KNOB,
                           clock_knobs, clock_workloads)
from faults.disk import disk_faults
from faults.kinds import ALL_FAULT_KINDS, CLOCK_JUMP, CLOCK_SKEW, PARTITION
from faults.partitions import MODES as PARTITION_MODES, Partitions
from faults.plan import PortFaults
from faults.swarm import Knob, SwarmSpace
from model.conversation.records import PAGE_SIZE_MAX
from model.failpoints import ABORT_CRASH_POINTS, AGENT_CRASH_POINTS, SENTINEL_CRASH_POINTS, SUBMISSION_CRASH_POINTS
from model.schedules import Schedule
from scenarios import invariants as inv
from scenarios.workloads import sentinel_app as app
from scenarios.invariants.clock_tolerance import clock_checks
from scenarios.invariants.reference_model import ReferenceModel
from scenarios.registry import StackFileError
from scenarios.workloads.sentinels import Sentinels
from scenarios.workloads.submissions import ConversationRetention, Submitters, Workers, work
from scenarios.system import System
from sim.clock import DurationError, parse_duration_ms
from sim.scenario import Run, Scenario, SetupError
from sim.workload import Stack, Workload

# Named failpoint sets (``[faults] failpoints``, ``[swarm] failpoints``).
FAILPOINT_SETS = {"sentinel": SENTINEL_CRASH_POINTS, "submission": SUBMISSION_CRASH_POINTS,
                  "abort": ABORT_CRASH_POINTS, "agent": AGENT_CRASH_POINTS}


@attrs.frozen
class FileScenario(Scenario):
    """A scenario read from a stack file: ``title`` is its ``[scenario]
    name``; ``text`` the file's text as read, ``sha256`` its digest."""

    title: str = ""
    text: str = ""
    sha256: str = ""


class _Bad(Exception):
    """A value's problem, before the place is known."""


@attrs.frozen
class _Ref:
    """A value drawn per seed: a knob's (``{knob = "lease_ms"}``), a
    workload switch's (``{switch = "paging"}``: true or false), or one of two
    values by a switch (``{switch = "failing-work", on = 20, off = 0}``)."""

    what: str  # "knob" | "switch"
    name: str
    on: Any = True
    off: Any = False


def _value(v: Any, run: Run) -> Any:
    if isinstance(v, _Ref):
        if v.what == "knob":
            return run.knob(v.name)
        return _value(v.on if run.does(v.name) else v.off, run)
    if isinstance(v, tuple):
        return tuple(_value(item, run) for item in v)
    return v


def _switched(reader: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``reader``, or a value by a switch: ``{switch = "x", on = V, off = W}``."""
    def read(v: Any) -> Any:
        if isinstance(v, dict) and "switch" in v and set(v) == {"switch", "on", "off"}:
            return _Ref("switch", text(v["switch"]), reader(v["on"]), reader(v["off"]))
        return reader(v)

    return read


# -- value readers: each returns the parsed value or raises _Bad ---------------

def _shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:39] + "…"


def _ref(v: Any, what: str) -> _Ref | None:
    if isinstance(v, dict) and set(v) == {what} and type(v[what]) is str:
        return _Ref(what, v[what])
    return None


_ZERO = re.compile(r"0+\s*(ms|s|min|m|h|d)?")


def duration(v: Any) -> Any:
    ref = _ref(v, "knob")
    if ref is not None:
        return ref
    if type(v) is not str:
        raise _Bad(f'expected a duration like "5m", got {_shown(v)}')
    if _ZERO.fullmatch(v):
        return 0  # a range may start at nothing (a delay of 0 to 2 minutes)
    try:
        return parse_duration_ms(v)
    except DurationError as error:
        raise _Bad(f"bad duration {v!r}: {error}") from None


def integer(v: Any) -> Any:
    ref = _ref(v, "knob")
    if ref is not None:
        return ref
    if type(v) is not int or v < 0:
        raise _Bad(f"expected a non-negative integer, got {_shown(v)}")
    return v


def boolean(v: Any) -> Any:
    ref = _ref(v, "switch")
    if ref is not None:
        return ref
    if type(v) is not bool:
        raise _Bad(f"expected true or false, got {_shown(v)}")
    return v


def share(v: Any) -> float:
    if type(v) not in (int, float) or not 0 <= v <= 1:
        raise _Bad(f"expected a number in [0, 1], got {_shown(v)}")
    return float(v)


def text(v: Any) -> str:
    if type(v) is not str or not v:
        raise _Bad(f"expected a text, got {_shown(v)}")
    return v


def names(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(type(n) is str and n for n in v):
        raise _Bad(f"expected a list of names, got {_shown(v)}")
    return tuple(v)


def span(v: Any) -> tuple[Any, Any]:
    """``["1s", "20s"]``: a range of durations."""
    if not isinstance(v, list) or len(v) != 2:
        raise _Bad(f'expected a range like ["1s", "20s"], got {_shown(v)}')
    low, high = duration(v[0]), duration(v[1])
    if type(low) is int and type(high) is int and low > high:
        raise _Bad(f"range {v!r} runs backwards")
    return low, high


def spans(v: Any) -> tuple[tuple[Any, Any], ...]:
    if not isinstance(v, list) or not v:
        raise _Bad(f'expected a list of ranges like [["1s", "20s"]], got {_shown(v)}')
    return tuple(span(item) for item in v)


_PAST_LEASE = re.compile(r"\s*(?:(\d+)\s*\*\s*)?lease\s*(?:/\s*(\d+)\s*)?(?:\+\s*(\S.*))?")


@attrs.frozen
class _PastLease:
    """A pause's or a cut's bound relative to its target's claim lease:
    ``"lease + 1s"``, ``"4 * lease"``, ``"lease / 2"`` (a pause that
    outlasts the lease is one whose owner is fenced when it wakes)."""

    times: int
    plus_ms: int
    per: int = 1

    def ms(self, lease_ms: int) -> int:
        return self.times * lease_ms // self.per + self.plus_ms


def pauses(v: Any, example: str = '[["lease + 1s", "4 * lease"]]') -> tuple[tuple[Any, Any], ...]:
    """Ranges of durations, each bound a duration or relative to the lease."""
    if not isinstance(v, list) or not v or not all(isinstance(r, list) and len(r) == 2 for r in v):
        raise _Bad(f"expected a list of ranges like {example}, got {_shown(v)}")

    def bound(b: Any) -> Any:
        match = _PAST_LEASE.fullmatch(b) if type(b) is str else None
        if match is None:
            return duration(b)
        if match.group(2) is not None and int(match.group(2)) == 0:
            raise _Bad(f"bad duration {b!r}: the lease divided by nothing")
        plus = duration(match.group(3)) if match.group(3) else 0
        if type(plus) is not int:
            raise _Bad(f"bad bound {b!r}")
        return _PastLease(int(match.group(1) or 1), plus, int(match.group(2) or 1))

    return tuple((bound(low), bound(high)) for low, high in v)


def cuts(v: Any) -> tuple[tuple[Any, Any], ...]:
    """A partition's lengths: ranges like ``pauses``, each more than nothing."""
    ranges = pauses(v, '[["1s", "lease / 2"], ["lease", "4 * lease"]]')
    for low, high in ranges:
        if (type(low) is int and low <= 0) or (isinstance(low, _PastLease) and low.times == 0 and low.plus_ms == 0):
            raise _Bad("a cut lasts more than 0 ms")
        if type(low) is int and type(high) is int and low > high:
            raise _Bad(f"range {[low, high]!r} runs backwards")
    return ranges


def unique_names(v: Any) -> tuple[str, ...]:
    got = names(v)
    if not got:
        raise _Bad(f"expected a list of names, got {_shown(v)}")
    for item in got:
        if got.count(item) > 1:
            raise _Bad(f"{item!r} is named twice")
    return got


def partition_modes(v: Any) -> tuple[str, ...]:
    modes = unique_names(v)
    for mode in modes:
        if mode not in PARTITION_MODES:
            raise _Bad(f"unknown mode {mode!r} (known: {', '.join(PARTITION_MODES)})")
    return modes


def clock_offset(v: Any) -> int:
    """The largest offset a node's clock draws: a fixed duration within the tolerance's share."""
    got = duration(v)
    if type(got) is not int:
        raise _Bad("a fixed duration (it bounds a knob)")
    if got > CLOCK_OFFSET_MS_MAX:
        raise _Bad(f"expected at most {CLOCK_OFFSET_MS_MAX}ms (the claimed tolerance's offset), got {_shown(v)}")
    return got


def clock_drift(v: Any) -> int:
    """The largest drift a node's clock draws (ppm), within the tolerance's share."""
    got = integer(v)
    if type(got) is not int:
        raise _Bad("a fixed number (it bounds a knob)")
    if got > CLOCK_DRIFT_PPM_MAX:
        raise _Bad(f"expected at most {CLOCK_DRIFT_PPM_MAX} (the claimed tolerance's drift), got {_shown(v)}")
    return got


def failpoint_sets(v: Any) -> tuple[str, ...]:
    sets = names([v] if type(v) is str else v)
    for name in sets:
        if name not in FAILPOINT_SETS:
            raise _Bad(f"unknown failpoint set {name!r} (known: {', '.join(FAILPOINT_SETS)})")
    return tuple(point for name in sets for point in FAILPOINT_SETS[name])


def fault_kinds(v: Any) -> tuple[str, ...]:
    kinds = names(v)
    for kind in kinds:
        if kind not in ALL_FAULT_KINDS:
            raise _Bad(f"unknown fault kind {kind!r} (known: {', '.join(ALL_FAULT_KINDS)})")
    return kinds


def rates(v: Any) -> dict[str, float]:
    if not isinstance(v, dict):
        raise _Bad(f"expected a table of fault kind = rate, got {_shown(v)}")
    fault_kinds(list(v))
    for kind, rate in v.items():
        try:
            share(rate)
        except _Bad as error:
            raise _Bad(f"{kind}: {error}") from None
    return {kind: float(rate) for kind, rate in v.items()}


def schedules(v: Any) -> tuple[tuple[str, int, int], ...]:
    """``[{id = "fast", every = "1m"}, ...]`` (``first``: optional)."""
    if not isinstance(v, list) or not v:
        raise _Bad(f'expected a list like [{{id = "fast", every = "1m"}}], got {_shown(v)}')
    out = []
    for i, item in enumerate(v, 1):
        try:
            got = _read(item, {"id": text, "every": duration, "first": duration}, required=("id", "every"))
        except _Bad as error:
            raise _Bad(f"schedule {i}: {error}") from None
        if "@" in got["id"] or not all(type(got.get(k, 0)) is int for k in ("every", "first")) or got["every"] <= 0:
            raise _Bad(f"schedule {i}: an id without '@' and fixed durations (every > 0)")
        out.append((got["id"], got["every"], got.get("first", 0)))
    if len({s[0] for s in out}) != len(out):
        raise _Bad("schedule ids must be unique")
    return tuple(out)


# Keys that name things (workloads, switches, nodes): never drawn per seed.
_NAMING = frozenset({"name", "when", "targets", "fleet", "nodes", "submitters", "workers", "schedules", "set",
                     "db_file", "serving", "following"})
# Keys whose value is fixed for the file (a knob's bound, a list of stores or modes): never drawn per seed either.
_FIXED = frozenset({"offset_max", "drift_max_ppm", "stores", "modes"})


def _read(table: Any, schema: Mapping[str, Callable[[Any], Any]], *, required: tuple[str, ...] = (),
          switched: bool = False) -> dict[str, Any]:
    """``table``'s keys through ``schema``: unknown and missing keys first.
    ``switched``: any value may be one of two by a workload switch."""
    if not isinstance(table, dict):
        raise _Bad(f"expected a table, got {_shown(table)}")
    for key in table:
        if key not in schema:
            raise _Bad(f"unknown key {key!r} (known: {', '.join(schema)})")
    for key in required:
        if key not in table:
            raise _Bad(f"missing key {key!r}")
    out = {}
    for key, value in table.items():
        try:
            out[key] = (_switched(schema[key]) if switched and key not in _NAMING | _FIXED else schema[key])(value)
        except _Bad as error:
            raise _Bad(f"{key}: {error}") from None
    return out


# -- workload kinds --------------------------------------------------------------

@attrs.frozen
class Kind:
    """A workload kind: its parameters (``schema``; ``required``), which of
    them name another workload (``refs``: parameter -> the kinds it may
    name; the default is the one workload of those kinds), and its builder
    ``build(params, by_name, run)`` (a workload, or a list of them: a fault
    family's, none when the run has none of it). ``check(params, kinds)``:
    the parameters against the workloads they name (name -> kind), once
    the references are resolved. ``one``: a stack has at most one of it."""

    schema: Mapping[str, Callable[[Any], Any]]
    build: Callable[[dict[str, Any], dict[str, Workload], Run], Any]
    required: tuple[str, ...] = ()
    refs: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    check: Callable[[dict[str, Any], dict[str, str]], None] | None = None
    one: bool = False


def _new(cls: Any, name: str, *args: Any, **kwargs: Any) -> Workload:
    """``cls(*args, **kwargs)``, the instance named ``name`` (the file's
    names are its workloads' instance names)."""
    return cls(*args, **kwargs).named(name)


def _sentinels(p: dict, by: dict, run: Run) -> Workload:
    d = run.opts.duration_ms
    kw = {key: _value(p[key], run) for key in ("lease_ms", "inline_cap_bytes", "project_every_ms", "validate_inputs",
                                               "paging") if key in p}
    return _new(Sentinels, p["name"], [Schedule(sid, every, first_ms=first, end_ms=d)
                                       for sid, every, first in p["schedules"]], **kw)


def _workers(p: dict, by: dict, run: Run) -> Workload:
    v = {key: _value(val, run) for key, val in p.items()}
    return _new(Workers, p["name"], v["count"], serving=by[p["serving"]], lease_ms=v["lease_ms"], poll_ms=v.get("poll_ms", 2_000), retry_ms=v.get("retry_ms", 2_000),
                   step_delay_ms=v.get("step_delay_ms", (50, 3_000)), work=work(fail_every=v.get("fail_every", 0)),
                   steps=v.get("steps", 2), checkpoints=v.get("checkpoints", False),
                   recovery_page_size=v.get("recovery_page_size", PAGE_SIZE_MAX))


def _submitters(p: dict, by: dict, run: Run) -> Workload:
    v = {key: _value(val, run) for key, val in p.items()}
    return _new(Submitters, p["name"], conversations=v["conversations"], every_ms=v["every_ms"],
                      conversation_lifetime_ms=v["conversation_lifetime_ms"], retry_ms=v.get("retry_ms", 2_000),
                      **{key: v[key] for key in ("abort_every", "group_share", "groups", "defer_share") if key in v})


def _retention(p: dict, by: dict, run: Run) -> Workload:
    v = {key: _value(val, run) for key, val in p.items() if key != "submitters"}
    return _new(ConversationRetention, p["name"], by[p["submitters"]], ttl_ms=v["ttl_ms"], every_ms=v["every_ms"],
                                 retry_ms=v.get("retry_ms", 2_000))


def _targets(p: dict, by: dict) -> tuple[Any, ...]:
    """Node names (``nodes``), or the workload whose processes they are (``targets``)."""
    return p["nodes"] if "nodes" in p else (by[p["targets"]],)


def _kills(p: dict, by: dict, run: Run) -> Workload:
    v = {key: _value(val, run) for key, val in p.items()}
    return _new(chaos.NodeKills, p["name"], _targets(p, by), every_ms=v["every_ms"], restart_ms=v["restart_ms"],
                           outage_one_in=v.get("outage_one_in", 0), outage_ms=v.get("outage_ms", (0, 0)))


def _pauses(p: dict, by: dict, run: Run) -> Workload:
    v = {key: _value(val, run) for key, val in p.items()}
    target = by.get(p.get("targets", ""))
    lease_ms = getattr(target, "lease_ms", 0)
    pause_ms = tuple(tuple(b.ms(lease_ms) if isinstance(b, _PastLease) else b for b in r) for r in v["pause_ms"])
    busy = getattr(target, "busy", dict)
    return _new(chaos.NodePauses, p["name"], _targets(p, by), every_ms=v["every_ms"], pause_ms=pause_ms, busy=busy)


# The stores (port names) the processes of a workload kind call: what a
# partition of its processes may cut (``tests/test_stackfile_faults.py``
# holds the workers' list to a run's port calls).
CALLED_STORES = {
    "sentinels": ("ledger", "log", "ds", "kernel", "schedules", "content", "pins", "findings", "pager"),
    "workers": ("ledger", "log", "checkpoints"),
    "agent-workers": ("ledger", "log", "checkpoints", "tools", "model"),
}


def _partition_stores(p: dict, kinds: dict[str, str]) -> None:
    target = p["targets"]
    called = CALLED_STORES[kinds[target]]
    for store in p["stores"]:
        if store not in called:
            raise _Bad(f"stores: {target} does not call {store!r} (it calls: {', '.join(called)})")


def _partitions(p: dict, by: dict, run: Run) -> Workload:
    v = {key: _value(val, run) for key, val in p.items()}
    target = by[p["targets"]]
    lease_ms = getattr(target, "lease_ms", 0)
    cut_ms = []
    for low, high in v["cut_ms"]:
        low, high = (b.ms(lease_ms) if isinstance(b, _PastLease) else b for b in (low, high))
        if low <= 0:
            raise SetupError(f"partitions {p['name']!r}: a cut of {low} ms (a cut lasts more than 0 ms)")
        cut_ms.append((low, max(low, high)))  # a bound relative to a short lease may fall under a fixed one
    modes = {"modes": p["modes"]} if "modes" in p else {}
    return _new(Partitions, p["name"], (target,), stores=p["stores"], every_ms=v["every_ms"], cut_ms=tuple(cut_ms),
                busy=getattr(target, "busy", dict), **modes)


def _clocks(p: dict, by: dict, run: Run) -> list[Workload]:
    """The family's timed steps (in the contract and beyond); its skew, knobs
    and oracle are the file's (``_with_families``, ``_builder``)."""
    return clock_workloads()


def _disk_faults(p: dict, by: dict, run: Run) -> list[Workload]:
    return disk_faults(run, restart_ms=_value(p["restart_ms"], run))


def _duplicates(p: dict, by: dict, run: Run) -> Workload:
    fleet = by[p["fleet"]]
    return _new(chaos.DuplicateAlarms, p["name"], fleet.schedule_ids, fleet.deliver_again, every_ms=_value(p["every_ms"], run))


def _edits(p: dict, by: dict, run: Run) -> Workload:
    fleet = by[p["fleet"]]
    setting = dict(p.get("set", {"total": 0}))
    return _new(chaos.OperatorEdits, p["name"], fleet.state_keys, duration_ms=run.opts.duration_ms, per_year=p.get("per_year", 12),
                               moment=fleet.edit_moment, edit=lambda payload: {**payload, **setting},
                               enabled=_value(p.get("enabled", True), run))


def _deploys(p: dict, by: dict, run: Run) -> Workload:
    fleet = by[p["fleet"]]
    on_deploy = fleet.on_deploy if isinstance(fleet, Sentinels) else fleet.deploy  # an agent's rolling restart
    return _new(chaos.Deploys, p["name"], fleet.deploy_timeline, on_deploy, nodes=(fleet,), duration_ms=run.opts.duration_ms,
                         restart_ms=_value(p["restart_ms"], run))


def _agent_workers(p: dict, by: dict, run: Run) -> Workload:
    from scenarios.workloads.agents import AgentWorkers, ModelService, ToolService

    v = {key: _value(val, run) for key, val in p.items()}
    tools = ToolService(slow_share=v.get("slow_tool_share", 0.0), slow_ms=v.get("slow_tool_ms", (0, 0)))
    return _new(AgentWorkers, p["name"], v["count"], serving=by[p["serving"]], tools=tools, model=ModelService(), lease_ms=v["lease_ms"],
                poll_ms=v.get("poll_ms", 2_000), retry_ms=v.get("retry_ms", 2_000),
                step_delay_ms=v.get("step_delay_ms", (50, 3_000)), work=work(fail_every=v.get("fail_every", 0)),
                recovery_page_size=v.get("recovery_page_size", PAGE_SIZE_MAX), checkpoints=v.get("checkpoints", False))


def _agent_submitters(p: dict, by: dict, run: Run) -> Workload:
    from model.agent import APPROVAL, MODEL, SUBAGENT, TOOL, TOOL_ONCE
    from scenarios.workloads.agents import JOINING_SHARE, AgentSubmitters

    v = {key: _value(val, run) for key, val in p.items()}
    # A plan's step kinds, each as often as its weight says.
    kinds = ((MODEL,) * v.get("model_weight", 1) + (TOOL, TOOL_ONCE) * v.get("tool_weight", 1)
             + (APPROVAL,) * v.get("approval_weight", 1) + (SUBAGENT,) * v.get("subagent_weight", 1))
    return _new(AgentSubmitters, p["name"], kinds=kinds, joining_share=v.get("joining_share", JOINING_SHARE),
                conversations=v["conversations"], every_ms=v["every_ms"],
                conversation_lifetime_ms=v["conversation_lifetime_ms"], retry_ms=v.get("retry_ms", 2_000),
                **{key: v[key] for key in ("abort_every", "abort_late_ms") if key in v})


def _operator(cls_name: str) -> Callable[[dict, dict, Run], Workload]:
    """Approvers, cancellers, the reconciler (with the tools of the agent workers it names)."""
    def build(p: dict, by: dict, run: Run) -> Workload:
        from scenarios.workloads import agents

        v = {key: _value(val, run) for key, val in p.items() if key not in ("name", "workers", "serving")}
        extra = {"tools": by[p["workers"]].tools} if "workers" in p else {}
        extra["serving"] = by[p["serving"]]
        return _new(getattr(agents, cls_name), p["name"], **extra, **v)

    return build


def _watchers(p: dict, by: dict, run: Run) -> Workload:
    from scenarios.workloads.watchers import Watchers

    v = {key: _value(val, run) for key, val in p.items() if key not in ("name", "following")}
    return _new(Watchers, p["name"], following=by[p["following"]], **v)


def _edit_values(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict) or not v:
        raise _Bad(f"expected a table of field = value, got {_shown(v)}")
    return dict(v)


def _positive(v: Any) -> Any:
    got = integer(v)
    if got == 0:
        raise _Bad("expected at least 1, got 0")
    return got


_NAME = {"name": text, "when": text}
_CHAOS_TARGETS = {"nodes": names, "targets": text}
WORKLOADS: dict[str, Kind] = {
    "sentinels": Kind({**_NAME, "schedules": schedules, "lease": duration, "inline_cap_bytes": _positive,
                       "project_every": duration, "validate_inputs": boolean, "paging": boolean},
                      _sentinels, required=("schedules",)),
    "workers": Kind({**_NAME, "serving": text, "count": _positive, "lease": duration, "poll": duration,
                     "retry": duration, "step_delay": span, "fail_every": integer, "steps": _positive,
                     "checkpoints": boolean, "recovery_page_size": _positive}, _workers, required=("count", "lease"),
                    refs={"serving": ("submitters",)}),
    "submitters": Kind({**_NAME, "conversations": _positive, "every": span, "conversation_lifetime": duration,
                        "retry": duration, "abort_every": integer, "group_share": share, "groups": _positive,
                        "defer_share": share}, _submitters, required=("conversations", "every", "conversation_lifetime")),
    "conversation-retention": Kind({**_NAME, "submitters": text, "ttl": duration, "every": duration, "retry": duration},
                                   _retention, required=("ttl", "every"), refs={"submitters": ("submitters",)}),
    "node-kills": Kind({**_NAME, **_CHAOS_TARGETS, "every": span, "restart": span, "outage_one_in": integer,
                        "outage": span}, _kills, required=("every", "restart"),
                       refs={"targets": ("sentinels", "workers", "agent-workers", "watchers")}),
    "node-pauses": Kind({**_NAME, **_CHAOS_TARGETS, "every": span, "pause": pauses}, _pauses,
                        required=("every", "pause"), refs={"targets": ("sentinels", "workers", "agent-workers")}),
    "duplicate-alarms": Kind({**_NAME, "fleet": text, "every": span}, _duplicates, required=("every",),
                             refs={"fleet": ("sentinels",)}),
    "operator-edits": Kind({**_NAME, "fleet": text, "per_year": _positive, "set": _edit_values, "enabled": boolean},
                           _edits, refs={"fleet": ("sentinels",)}),
    "deploys": Kind({**_NAME, "fleet": text, "restart": span}, _deploys, required=("restart",),
                    refs={"fleet": ("sentinels", "agent-workers")}),
    "agent-workers": Kind({**_NAME, "serving": text, "count": _positive, "lease": duration, "poll": duration, "retry": duration,
                           "step_delay": span, "fail_every": integer, "checkpoints": boolean,
                           "recovery_page_size": _positive, "slow_tool_share": share, "slow_tool": span},
                          _agent_workers, required=("count", "lease"), refs={"serving": ("agent-submitters",)}),
    "agent-submitters": Kind({**_NAME, "conversations": _positive, "every": span, "conversation_lifetime": duration,
                              "retry": duration, "abort_every": integer, "abort_late": span, "joining_share": share,
                              "model_weight": _positive, "tool_weight": integer, "approval_weight": integer,
                              "subagent_weight": integer},
                             _agent_submitters, required=("conversations", "every", "conversation_lifetime")),
    "approvers": Kind({**_NAME, "serving": text, "poll": duration, "delay": span}, _operator("Approvers"),
                      required=("poll", "delay"), refs={"serving": ("agent-submitters",)}),
    "cancellers": Kind({**_NAME, "serving": text, "poll": duration, "delay": span}, _operator("Cancellers"),
                       required=("poll", "delay"), refs={"serving": ("agent-submitters",)}),
    "reconciler": Kind({**_NAME, "serving": text, "workers": text, "poll": duration, "delay": span},
                       _operator("Reconciler"), required=("poll", "delay"),
                       refs={"workers": ("agent-workers",), "serving": ("agent-submitters",)}),
    "watchers": Kind({**_NAME, "following": text, "slots": _positive, "conversation_lifetime": duration,
                      "reconnect": duration}, _watchers, required=("slots", "conversation_lifetime", "reconnect"),
                     refs={"following": ("agent-submitters", "submitters")}),
    "partitions": Kind({**_NAME, "targets": text, "stores": unique_names, "every": span, "cut": cuts,
                        "modes": partition_modes}, _partitions, required=("stores", "every", "cut"),
                       refs={"targets": tuple(CALLED_STORES)}, check=_partition_stores),
    "clocks": Kind({"offset_max": clock_offset, "drift_max_ppm": clock_drift}, _clocks, one=True),
    "disk-faults": Kind({"restart": span}, _disk_faults, required=("restart",), one=True),
}
# The swarm's fault kinds a workload kind brings (in this order, after the file's own).
FAMILY_KINDS = {"clocks": (CLOCK_SKEW, CLOCK_JUMP), "partitions": (PARTITION,)}
# A duration parameter is passed to its constructor in ms: ``every`` -> ``every_ms``.
_DURATION_KEYS = {"lease", "poll", "retry", "step_delay", "project_every", "every", "conversation_lifetime", "ttl",
                  "restart", "outage", "pause", "slow_tool", "abort_late", "delay", "reconnect", "cut"}


def _param_name(key: str) -> str:
    return f"{key}_ms" if key in _DURATION_KEYS else key


# -- checks ---------------------------------------------------------------------

@attrs.frozen
class Check:
    """A check by its report name: its options (``schema``) and its
    constructor ``make(options, stack workloads, run)`` (None: not on this
    run's store); ``needs``: the workload kind it judges, if any."""

    make: Callable[[dict[str, Any], list[tuple[str, Workload]], Run], Any]
    schema: Mapping[str, Callable[[Any], Any]] = attrs.field(factory=dict)
    needs: str | None = None
    required: tuple[str, ...] = ()


def _plain(cls: Any) -> Check:
    return Check(lambda o, ws, run: cls())


def _judged(o: dict, ws: list[tuple[str, str, Workload]], kind: str) -> list[Any]:
    """The workloads of ``kind`` a check judges: the one its ``workload`` option names, else all."""
    return [w for name, k, w in ws if k == kind and o.get("workload", name) == name]


def _fleets(o: dict, ws: list[tuple[str, str, Workload]]) -> list[Sentinels]:
    return _judged(o, ws, "sentinels")


def _fleet(o: dict, ws: list[tuple[str, str, Workload]]) -> Sentinels:
    return _fleets(o, ws)[0]


def _operator(ws: list[tuple[str, str, Workload]]) -> Callable[[str], bool]:
    """Whether a process is an operator's (its writes are out of band): any operator-edits workload's."""
    operators = [w for _, kind, w in ws if kind == "operator-edits"]
    return lambda label: any(op.is_operator(label) for op in operators)


# The checks a workload brings for what it creates (``Workload.checks``):
# never listed in a file; the workload's kind says where they come from.
OWNED = {"exactly-once-wake": "sentinels", "fifo-one-active": "workers and agent-workers",
         "recovery-decisions": "workers and agent-workers", "unknown-never-replayed": "agent-workers",
         "approval-precedes-effect": "agent-workers", "child-before-parent": "agent-workers",
         "joined-settles-once": "agent-workers", "run-clock": "agent-workers", "canonical-events": "agent-workers",
         "progress-waits": "watchers", "effect-under-lease": "workers", "clock-tolerance": "clocks",
         "storage-integrity": "disk-faults"}
_FLEET = {"workload": text}
CHECKS: dict[str, Check] = {
    **{cls.name: _plain(cls) for cls in (inv.AbortHonoured, inv.AdoptOwnWrite, inv.CasLinear, inv.CheckpointConsistency,
                                         inv.ClaimFencesLog, inv.ExactlyOnceSettlement, inv.FailClosedPagination,
                                         inv.Fencing, inv.Liveness, inv.LogChain, ReferenceModel)},
    "cold-reopen": Check(lambda o, ws, run: inv.ColdReopen() if run.opts.store == "sqlite" else None),
    "bounded-run": Check(lambda o, ws, run: inv.BoundedRun(records_max=o["records_max"], steps_max=o.get("steps_max")),
                         {"records_max": _positive, "steps_max": _positive}, required=("records_max",)),
    "pins-survive": Check(lambda o, ws, run: inv.PinsSurvive(blob_ttl_ms=_fleet(o, ws).retention_policy.blob_ttl_ms),
                          _FLEET, needs="sentinels"),
    "findings-projection": Check(lambda o, ws, run: inv.FindingsProjection(
        finding_ttl_ms=_fleet(o, ws).retention_policy.finding_ttl_ms), _FLEET, needs="sentinels"),
    "broken-deploy": Check(lambda o, ws, run: inv.BrokenDeploys(app.build_reads, out_of_band=_operator(ws)),
                           _FLEET, needs="sentinels"),
    "claim-check": Check(lambda o, ws, run: inv.ClaimCheckInvariant(
        {"stats": app.stats_digest}, cap_bytes=_fleet(o, ws).inline_cap_bytes), _FLEET, needs="sentinels"),
    "contract-safety": Check(lambda o, ws, run: inv.ContractSafety(
        _fleet(o, ws).deployed_contracts, out_of_band=_operator(ws), every_contract_for_key=_fleet(o, ws).every_contract),
        _FLEET, needs="sentinels"),
    "replay-determinism": Check(lambda o, ws, run: inv.ReplayDeterminism(
        _fleet(o, ws).replay_flow_for, _fleet(o, ws).replay_store_calls, transforms_for=_fleet(o, ws).transforms_for),
        _FLEET, needs="sentinels"),
}


# -- the file -----------------------------------------------------------------------

_SCENARIO = {"name": text, "description": text, "duration": duration, "sweep": duration, "sometimes": names,
             "checks": lambda v: v, "heal": duration, "settle": duration}
_SYSTEM = {"restart": span, "db_file": text, "damaged_reads": boolean, "progress": boolean, "audit_deletes": integer}
_FAULTS = {"rates": rates, "failpoints": failpoint_sets, "boosted_sites": names, "boost": _positive,
           "periods": lambda v: tuple(duration(p) for p in names(v)), "sqlite_rates": rates}


def _fixed(v: Any) -> int:
    """A knob's bound: an integer, or a duration text (in ms)."""
    got = duration(v) if type(v) is str else integer(v)
    if isinstance(got, _Ref):
        raise _Bad("a knob's bounds are fixed values")
    return got


_KNOB = {"name": text, "default": _fixed, "min": _fixed, "max": _fixed, "help": text,
         "values": lambda v: tuple(_fixed(x) for x in (v if isinstance(v, list) else [None]))}
_SWARM = {"fault_kinds": fault_kinds, "failpoints": failpoint_sets, "failpoint_rate": share, "workload": names,
          "failpoint_boosts": lambda v: v, "knob": lambda v: v}
_TOP = ("scenario", "system", "workload", "faults", "swarm")


def load(path: str) -> FileScenario:
    """The stack file at ``path`` as a scenario named ``path``. Raises ``StackFileError``."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise StackFileError(f"{path}: cannot read stack file: {error.strerror or error}") from None
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise StackFileError(f"{path}: not UTF-8: {error}") from None
    return from_text(path, body)


def digest(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def from_text(name: str, body: str, *, where: str | None = None) -> FileScenario:
    """The stack file text ``body`` as a scenario named ``name`` (errors
    name ``where``, default ``name``). Raises ``StackFileError``."""
    where = where or name
    try:
        data = tomllib.loads(body)
    except tomllib.TOMLDecodeError as error:
        raise StackFileError(f"{where}: not TOML: {error}") from None
    place = ""
    try:
        for key in data:
            if key not in _TOP:
                raise _Bad(f"unknown table {key!r} (known: {', '.join(_TOP)})")
        if "scenario" not in data:
            raise _Bad("missing table [scenario]")
        place = "[scenario]"
        head = _read(data["scenario"], _SCENARIO, required=("name", "description", "duration", "checks"))
        if type(head["duration"]) is not int or type(head.get("sweep", 1)) is not int or not (
                head["duration"] > 0 and head.get("sweep", 1) > 0):
            raise _Bad("duration and sweep: fixed durations, more than zero")
        place = "[system]"
        system = _read(data.get("system", {}), _SYSTEM, required=("restart",), switched=True)
        place = "[faults]"
        faults = _read(data.get("faults", {}), _FAULTS)
        place = "[swarm]"
        swarm, space = _swarm(data.get("swarm"), faults)
        knobs = {k.name for k in space.knobs} if space is not None else set()
        switches = set(space.workload) if space is not None else set()
        place = "[system]"
        _check_refs(system, knobs, switches)
        workloads = _workloads(data.get("workload", []), knobs, switches)
        space = _with_families(space, workloads)
        place = "[scenario]"
        checks = _checks(head["checks"], workloads, switches)
        for key in ("heal", "settle"):
            if type(head.get(key, 0)) is not int:
                raise _Bad(f"{key}: a fixed duration")
    except _Bad as error:
        prefix = "" if not place or str(error).startswith("[") else place + " "
        raise StackFileError(f"{where}: {prefix}{error}") from None
    build = _builder(system, workloads, faults, checks, head.get("heal", 0), head.get("settle", 0))
    return FileScenario(name, head["description"], build, head["duration"], (), space, head.get("sometimes", ()),
                        head.get("sweep"), title=head["name"], text=body, sha256=digest(body))


def _swarm(table: Any, faults: dict) -> tuple[dict, SwarmSpace | None]:
    if table is None:
        return {}, None
    swarm = _read(table, _SWARM, required=("fault_kinds",))
    knobs = []
    items = swarm.get("knob", [])
    if not isinstance(items, list):
        raise _Bad("knob: expected [[swarm.knob]] tables")
    for i, item in enumerate(items, 1):
        try:
            k = _read(item, _KNOB, required=("name", "default", "min", "max"))
            if not k["min"] <= k["default"] <= k["max"] or not all(k["min"] <= v <= k["max"] for v in k.get("values", ())):
                raise _Bad("expected min <= default <= max and values inside the range")
        except _Bad as error:
            raise _Bad(f"knob {i}: {error}") from None
        knobs.append(Knob(k["name"], k["default"], k["min"], k["max"], k.get("help", k["name"]), values=k.get("values", ())))
    if len({k.name for k in knobs}) != len(knobs):
        raise _Bad("knob names must be unique")
    rate = swarm.get("failpoint_rate", faults.get("rates", {}).get("failpoint-crash", 1e-4))
    boosts = swarm.get("failpoint_boosts", {})
    if not isinstance(boosts, dict) or not all(type(b) in (int, float) and b >= 1 for b in boosts.values()):
        raise _Bad("failpoint_boosts: expected a table of failpoint = multiplier (at least 1)")
    for point in boosts:
        if point not in swarm.get("failpoints", ()):
            raise _Bad(f"failpoint_boosts: {point!r} is not one of the swarm's failpoints")
    return swarm, SwarmSpace(fault_kinds=swarm["fault_kinds"], failpoints=swarm.get("failpoints", ()),
                             workload=swarm.get("workload", ()), knobs=tuple(knobs), failpoint_rate=rate,
                             failpoint_boosts=tuple(boosts.items()))


def _with_families(space: SwarmSpace | None, workloads: list[tuple[str, str, dict]]) -> SwarmSpace | None:
    """The file's swarm with the fault kinds (``FAMILY_KINDS``) and knobs its
    fault workloads bring, each after the file's own (each drawn by its
    name: the file's other choices of a seed do not move)."""
    kinds = {kind for _, kind, _ in workloads}
    for i, (_, kind, params) in enumerate(workloads, 1):
        if kind == "clocks" and space is None:
            raise _Bad(f"[workload {i}] clocks: a node's skew and steps are drawn per seed by the swarm: "
                       "the file needs a [swarm] table (fault_kinds may be empty)")
    if space is None:
        return None
    knobs = space.knobs
    if "clocks" in kinds:
        params = next(params for _, kind, params in workloads if kind == "clocks")
        for knob in space.knobs:
            if knob.name in (OFFSET_KNOB, DRIFT_KNOB):
                option = "offset_max" if knob.name == OFFSET_KNOB else "drift_max_ppm"
                raise _Bad(f"[swarm] knob {knob.name} comes with the clocks workload: bound it there ({option})")
        bounds = {OFFSET_KNOB: params.get("offset_max", CLOCK_OFFSET_MS_MAX),
                  DRIFT_KNOB: params.get("drift_max_ppm", CLOCK_DRIFT_PPM_MAX)}
        # At their own bounds the knobs are the built-in scenarios' (values and all).
        # Not the stores' own clock (``store_clock``): a file's stores stay on their callers' clocks.
        knobs += tuple(attrs.evolve(knob, default=bounds[knob.name], maximum=bounds[knob.name],
                                    values=tuple(dict.fromkeys(min(v, bounds[knob.name]) for v in knob.values)))
                       for knob in clock_knobs() if knob.name in bounds)
    else:
        for kind in space.fault_kinds:
            if kind in CLOCK_FAULT_KINDS:
                raise _Bad(f'[swarm] fault_kinds: {kind} comes with a clocks workload: add one (kind = "clocks") '
                           "or leave it out")
    added = tuple(kind for family, family_kinds in FAMILY_KINDS.items() if family in kinds
                  for kind in family_kinds if kind not in space.fault_kinds)
    return attrs.evolve(space, fault_kinds=(*space.fault_kinds, *added), knobs=knobs)


def _known(names: set[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def _refs(v: Any) -> list[_Ref]:
    if isinstance(v, _Ref):
        return [v, *_refs(v.on), *_refs(v.off)]
    if isinstance(v, tuple):
        return [ref for item in v for ref in _refs(item)]
    return []


def _check_refs(values: dict, knobs: set[str], switches: set[str]) -> None:
    for key, v in values.items():
        for item in _refs(v):
            known = knobs if item.what == "knob" else switches
            if item.name not in known:
                raise _Bad(f"{key}: no {item.what} {item.name!r} in [swarm] (known: {_known(known)})")


def _workloads(items: Any, knobs: set[str], switches: set[str]) -> list[tuple[str, str, dict]]:
    """(name, kind, parameters) of each ``[[workload]]``, references checked.
    A reference may name a workload anywhere in the file (the stack's order
    is the file's; each is built after those it names)."""
    if not isinstance(items, list):
        raise _Bad("workload: expected [[workload]] tables")
    read: list[tuple[str, str, dict]] = []
    for i, item in enumerate(items, 1):
        try:
            if not isinstance(item, dict) or "kind" not in item:
                raise _Bad(f"missing key 'kind' (known kinds: {', '.join(WORKLOADS)})")
            kind = item["kind"]
            if kind not in WORKLOADS:
                raise _Bad(f"unknown kind {kind!r} (known: {', '.join(WORKLOADS)})")
            spec = WORKLOADS[kind]
            if spec.one and any(other_kind == kind for _, other_kind, _ in read):
                raise _Bad(f"a stack has one {kind} workload")
            params = _read({k: v for k, v in item.items() if k != "kind"}, spec.schema, required=spec.required,
                           switched=True)
            _check_refs(params, knobs, switches)
            if params.get("when") is not None and params["when"] not in switches:
                raise _Bad(f"when: no switch {params['when']!r} in [swarm] (known: {_known(switches)})")
            name = params.pop("name", kind)
            for other, other_kind, _ in read:
                if other == name:
                    raise _Bad(f"name {name!r} is taken by the {other_kind} workload before it (name one of them)")
            if "nodes" in params and "targets" in params:
                raise _Bad("nodes and targets: give one")
            read.append((name, kind, params))
        except _Bad as error:
            raise _Bad(f"[workload {i}] {error}") from None
    out: list[tuple[str, str, dict]] = []
    for i, (name, kind, params) in enumerate(read, 1):
        try:
            for key, kinds in WORKLOADS[kind].refs.items():
                candidates = [n for n, k, _ in read if k in kinds and n != name]
                if key not in params:
                    if key == "targets" and "nodes" in params:
                        continue
                    if len(candidates) != 1:
                        raise _Bad(f"{key}: name the workload it acts on ({', '.join(kinds)}); "
                                   f"the stack's: {', '.join(candidates) or 'none'}")
                    params[key] = candidates[0]
                elif params[key] not in candidates:
                    raise _Bad(f"{key}: no workload {params[key]!r} it can act on "
                               f"({', '.join(kinds)}; known: {', '.join(candidates) or 'none'})")
                named_when = next(p.get("when") for n, _, p in read if n == params[key])
                if named_when is not None and named_when != params.get("when"):
                    raise _Bad(f"{key}: {params[key]!r} is in the stack only when {named_when!r} is on: "
                               f"give this one when = {named_when!r} too")
            if WORKLOADS[kind].check is not None:
                WORKLOADS[kind].check(params, {n: k for n, k, _ in read})
            out.append((name, kind, {_param_name(k): v for k, v in params.items()}))
        except _Bad as error:
            raise _Bad(f"[workload {i}] {error}") from None
    _build_order(out)  # a circle of references is refused now, not at a run
    return out


def _build_order(workloads: list[tuple[str, str, dict]]) -> list[int]:
    """The workloads' indices in an order that builds each after those it names."""
    refs = {name: [params[key] for key in WORKLOADS[kind].refs if key in params] for name, kind, params in workloads}
    index = {name: i for i, (name, _, _) in enumerate(workloads)}
    order: list[int] = []
    state: dict[str, int] = {}  # 1: being built, 2: built

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise _Bad(f"workloads name each other in a circle: {' -> '.join((*path, name))}")
        state[name] = 1
        for other in refs[name]:
            visit(other, (*path, name))
        state[name] = 2
        order.append(index[name])

    for name, _, _ in workloads:
        visit(name, ())
    return order


def _checks(items: Any, workloads: list[tuple[str, str, dict]], switches: set[str]) -> list[tuple[str, dict]]:
    if not isinstance(items, list):
        raise _Bad(f"checks: expected a list of check names, got {_shown(items)}")
    out = []
    for i, item in enumerate(items, 1):
        entry = {"name": item} if type(item) is str else item
        if not isinstance(entry, dict) or type(entry.get("name")) is not str:
            raise _Bad(f"checks {i}: expected a check name or a table with a name, got {_shown(item)}")
        name = entry["name"]
        if name in OWNED:
            raise _Bad(f"checks: {name} comes with its workload ({OWNED[name]}): remove it from checks")
        if name not in CHECKS:
            raise _Bad(f"checks: unknown check {name!r} (known: {', '.join(sorted(CHECKS))})")
        check = CHECKS[name]
        try:
            options = _read({k: v for k, v in entry.items() if k != "name"}, {**check.schema, "when": text},
                            required=check.required)
            if options.get("when") is not None and options["when"] not in switches:
                raise _Bad(f"when: no switch {options['when']!r} in [swarm] (known: {_known(switches)})")
        except _Bad as error:
            raise _Bad(f"checks {name}: {error}") from None
        if check.needs is not None:
            judged = [n for n, kind, _ in workloads if kind == check.needs and options.get("workload", n) == n]
            if not judged:
                raise _Bad(f"checks {name}: judges a {check.needs} workload; the stack has none"
                           + (f" named {options['workload']!r}" if "workload" in options else ""))
        out.append((name, options))
    if len({n for n, _ in out}) != len(out):
        raise _Bad("checks: a check is named twice")
    return out


def _builder(system: dict, workloads: list[tuple[str, str, dict]], faults: dict, checks: list[tuple[str, dict]],
             heal_ms: int, settle_ms: int) -> Callable[[Run], Stack]:
    def build(run: Run) -> Stack:
        by_name: dict[str, Any] = {}
        built: dict[int, list[tuple[str, str, Workload]]] = {}
        for i in _build_order(workloads):  # each after the workloads it names
            name, kind, params = workloads[i]
            when = params.get("when")
            if when is not None and not run.does(when):
                continue
            by_name[name] = WORKLOADS[kind].build({**{k: v for k, v in params.items() if k != "when"}, "name": name},
                                                  by_name, run)
            family = by_name[name] if isinstance(by_name[name], list) else [by_name[name]]
            built[i] = [(name, kind, workload) for workload in family]
        stack = [entry for i in sorted(built) for entry in built[i]]  # the file's order
        made = [CHECKS[name].make(options, stack, run) for name, options in checks
                if options.get("when") is None or run.does(options["when"])]
        if any(kind == "clocks" for _, kind, _ in workloads):
            made += clock_checks(run)  # in a run whose nodes have clocks of their own
        return Stack(
            system=System(restart_ms=_value(system["restart"], run), file_name=system.get("db_file", "loomsim.db"),
                          damaged_reads=_value(system.get("damaged_reads", False), run),
                          progress=_value(system.get("progress", False), run),
                          audit_deletes=_value(system.get("audit_deletes", 0), run)),
            workloads=[w for _, _, w in stack],
            faults=PortFaults(run.rates(faults.get("rates", {})), failpoints=faults.get("failpoints", ()),
                              boosted_sites=faults.get("boosted_sites", ()), boost=faults.get("boost", 1),
                              periods_ms=faults.get("periods", ()),
                              fixed_rates=faults.get("sqlite_rates", {}) if run.opts.store == "sqlite" else {}),
            checks=[c for c in made if c is not None], heal_ms_max=heal_ms, settle_ms=settle_ms)

    return build

