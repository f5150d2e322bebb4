"""The sentinel application: what a database copilot's sentinel runs.

A wake is one bounded run of ``sentinel_flow``:

1. load the carry state (durable state, contract-validated);
2. read telemetry statistics — a payload drawn from the workload stream,
   now and then over the inline cap, so the claim-check middleware stores it
   and the log records ``{ref, size, digest}``; the flow branches on the
   declared digest only, never on the bytes;
3. on a high reading, fetch an EXPLAIN plan (always large, no declared
   digest: ``{ref, size}``) and emit a finding citing both refs as evidence
   (an application event with an application schema);
4. save the state with CAS;
5. on a reading at or above ``PAGE_READING_MIN`` (about one wake in 48),
   page the on-call through the external pager (``scenarios.workloads.pager``) — the
   flow's one *non-idempotent* effect, declared so to the kernel: an intent
   is recorded before the page, and a crash between the page and its record
   parks the run at ``EFFECT_INDOUBT`` for an operator (``paging``: the
   swarm's ``pager`` switch; off, the flow never pages);
6. publish a summary (a writing effect: the run's last step before
   settlement).

Three contract versions evolve during the year (v1 -> v2 -> v3), each with a
migration from its predecessor. A *build* is what a deploy ships: a flow
version, its contract chain and its flow-version transforms. Two builds are
deliberately broken: v3 without the v2 -> v3 migration, and a rollback to v1
code after state moved to v2 (a future version for that code).
"""
from __future__ import annotations

from typing import Any, Callable

import attrs

from model.canonical import canonical_json
from model.durable_state.contracts import StateContract
from model.durable_state.handle import sentinel_state

WINDOW_MAX = 8
READING_MAX = 1_000
# A reading at or above this raises a finding (about one wake in 300).
FINDING_READING_MIN = 997
STATS_LATENCY_MS = (20, 2_000)
EXPLAIN_LATENCY_MS = (50, 500)
PUBLISH_LATENCY_MS = (10, 300)
# One wake in SLOW_PUBLISH_ONE_IN publishes slowly: for 1.0x to 1.5x its
# schedule's period, so the next occurrence falls due while it still runs
# (one live occurrence is then tested by a real overlap, not only by a
# duplicate alarm).
SLOW_PUBLISH_ONE_IN = 400
SLOW_PUBLISH_PERIODS = (100, 150)  # percent of the period
# A broken build stays deployed this long before its fix lands.
BROKEN_WINDOW_MS = (3_600_000, 6 * 3_600_000)
# Statistics payloads: a sample string, usually small; one wake in
# STATS_LARGE_ONE_IN carries a large one, over the 16 KiB inline cap.
STATS_SAMPLE_BYTES = (0, 1_500)
STATS_LARGE_SAMPLE_BYTES = (16_500, 24_000)
STATS_LARGE_ONE_IN = 25
EXPLAIN_PLAN_BYTES = (17_000, 40_000)
STATS_TOOL = "telemetry.stats"
EXPLAIN_TOOL = "telemetry.explain"
PAGER_TOOL = "pager.page"
PAGE_STEP = "page"
# A reading at or above this pages the on-call (about one wake in 48): a load
# alert, far more often than a slow-query finding.
PAGE_READING_MIN = 980
PAGE_LATENCY_MS = (20, 800)
TARGET = "db-primary"


# -- contracts ---------------------------------------------------------------

def _counters_ok(payload: dict) -> bool:
    return all(type(payload[k]) is int and payload[k] >= 0 for k in ("wakes", "total", "last"))


def _shape(payload: Any, keys: tuple[str, ...]) -> bool:
    return type(payload) is dict and len(payload) == len(keys) and all(k in payload for k in keys)


def _window_ok(window: Any) -> bool:
    return type(window) is list and len(window) <= WINDOW_MAX and all(type(r) is int for r in window)


def _validate_v1(payload: Any) -> str | None:
    if not _shape(payload, ("wakes", "total", "last")):
        return "v1 state is {wakes, total, last}"
    return None if _counters_ok(payload) else "v1 fields are non-negative integers"


def _validate_v2(payload: Any) -> str | None:
    if not _shape(payload, ("wakes", "total", "last", "window")):
        return "v2 state is {wakes, total, last, window}"
    if not _counters_ok(payload):
        return "v2 counters are non-negative integers"
    return None if _window_ok(payload["window"]) else f"v2 window is a list of at most {WINDOW_MAX} readings"


def _validate_v3(payload: Any) -> str | None:
    if not _shape(payload, ("wakes", "total", "last", "window", "peak")):
        return "v3 state is {wakes, total, last, window, peak}"
    if not _counters_ok(payload) or type(payload["peak"]) is not int or payload["peak"] < 0:
        return "v3 counters are non-negative integers"
    return None if _window_ok(payload["window"]) else f"v3 window is a list of at most {WINDOW_MAX} readings"


def migrate_1_to_2(payload: dict) -> dict:
    return {**payload, "window": [payload["last"]] if payload["wakes"] else []}


def migrate_2_to_3(payload: dict) -> dict:
    return {**payload, "peak": max(payload["window"], default=payload["last"])}


MIGRATIONS: dict[int, Callable[[dict], dict]] = {1: migrate_1_to_2, 2: migrate_2_to_3}
VALIDATORS = {1: _validate_v1, 2: _validate_v2, 3: _validate_v3}


def contract_chain(schedule_id: str, version: int, *, drop_migration: int | None = None) -> dict[int, StateContract]:
    """The contracts a build of ``version`` knows: every version up to it,
    each with migrations from all older ones (``drop_migration``: a build
    that forgot the migration out of that version)."""
    contract_id, _ = sentinel_state(schedule_id)
    chain = {}
    for v in range(1, version + 1):
        migrations = {old: MIGRATIONS[old] for old in range(1, v) if old != drop_migration}
        chain[v] = StateContract(contract_id, v, VALIDATORS[v], migrations)
    return chain


def initial_state(version: int) -> dict:
    state: dict[str, Any] = {"wakes": 0, "total": 0, "last": 0}
    if version >= 2:
        state["window"] = []
    if version >= 3:
        state["peak"] = 0
    return state


def advance_state(version: int, payload: dict, reading: int) -> dict:
    state: dict[str, Any] = {"wakes": payload["wakes"] + 1, "total": payload["total"] + reading, "last": reading}
    if version >= 2:
        state["window"] = (payload["window"] + [reading])[-WINDOW_MAX:]
    if version >= 3:
        state["peak"] = max(payload["peak"], reading)
    return state


# -- builds ------------------------------------------------------------------

@attrs.frozen
class Build:
    name: str
    version: int
    broken: str | None = None  # None, "missing-migration" or "future-version"
    drop_migration: int | None = None


BUILD_V1 = Build("v1", 1)
BUILD_V2 = Build("v2", 2)
BUILD_V3 = Build("v3", 3)
BUILD_V3_NO_MIGRATION = Build("v3-no-migration", 3, broken="missing-migration", drop_migration=2)
BUILD_V1_ROLLBACK = Build("v1-rollback", 1, broken="future-version")
BUILDS = {b.name: b for b in (BUILD_V1, BUILD_V2, BUILD_V3, BUILD_V3_NO_MIGRATION, BUILD_V1_ROLLBACK)}


def build_reads(build_name: str, stored_version: int) -> bool:
    """Whether the build named ``build_name`` reads a record stored at
    ``stored_version``: not from its future, and every migration on the way
    shipped. A broken build is broken for the records it cannot read only:
    the rollback reads v1, the build without the v2 migration reads v3."""
    build = BUILDS[build_name]
    return stored_version <= build.version and build.drop_migration not in range(stored_version, build.version)


def load_transform(chain: dict[int, StateContract], from_version: int, to_version: int):
    """A flow-version migration: the recorded load result of a run started on ``from_version``,
    as the ``to_version`` code folds it (the payload migrated, the version
    moved). None when this build cannot migrate that way."""
    if to_version < from_version:
        return None
    target = chain[to_version]
    if any(v not in target.migrations for v in range(from_version, to_version)):
        return None

    def transform(step_id: str, output: Any) -> Any:
        if not step_id.endswith(".load") or output is None:
            return output
        payload = output["payload"]
        for v in range(output["contractVersion"], to_version):
            payload = target.migrations[v](payload)
        return {**output, "contractVersion": to_version, "payload": payload}

    return transform


# -- telemetry (effects drawn from the run's own workload stream) ------------

def stats_digest(payload: dict) -> dict:
    """The declared digest of ``telemetry.stats``: what the flow may branch on."""
    return {"reading": payload["reading"], "sampleBytes": len(payload["sample"])}


def _filler(seed: str, size: int) -> str:
    unit = seed * (1 + 64 // max(1, len(seed)))
    return (unit * (size // len(unit) + 1))[:size]


def stats_payload(rng: Any, run_id: str) -> dict:
    reading = rng.between(0, READING_MAX)
    large = rng.below(STATS_LARGE_ONE_IN) == 0
    size = rng.between(*(STATS_LARGE_SAMPLE_BYTES if large else STATS_SAMPLE_BYTES))
    return {"reading": reading, "sample": _filler(f"{run_id}:{reading}:", size)}


def explain_payload(rng: Any, run_id: str) -> dict:
    size = rng.between(*EXPLAIN_PLAN_BYTES)
    return {"plan": _filler(f"explain {run_id} ", size), "target": TARGET}


def reading_of(stats: Any) -> int:
    """The flow's view: the digest of a claim-checked payload, else the value."""
    return stats["digest"]["reading"] if "ref" in stats else stats["reading"]


def evidence_of(*outputs: Any) -> list[str]:
    return [o["ref"] for o in outputs if type(o) is dict and "ref" in o]


def run_input(schedule_id: str, occurrence_ms: int) -> dict:
    return {"target": TARGET, "windowMs": 300_000}


def validate_input(value: Any) -> str | None:
    """D7: the flows' declared input schema."""
    if not _shape(value, ("target", "windowMs")):
        return "input is {target, windowMs}"
    if type(value["target"]) is not str or not value["target"]:
        return "target is a non-empty string"
    if type(value["windowMs"]) is not int or value["windowMs"] <= 0:
        return "windowMs is a positive integer"
    return None


def make_flow(state: Any, version: int, effects: Any, *, paging: bool = False) -> Callable:
    """The sentinel flow of ``version``. ``effects(run_id)`` gives the effects
    of that run: ``(stats, explain, publish, page)``, ``page(reading)`` the
    page effect for a reading. ``paging``: high readings page the on-call."""

    async def sentinel_flow(ctx: Any, flow_input: Any) -> dict:
        stats_fx, explain_fx, publish_fx, page_fx = effects(ctx.run_id)
        loaded = await state.load(ctx)
        revision, payload = (0, initial_state(version)) if loaded is None else (loaded["revision"],
                                                                               loaded["payload"])
        stats = await ctx.execute("stats", stats_fx, writes=False, tool=STATS_TOOL)
        reading = reading_of(stats)
        findings = []
        if reading >= FINDING_READING_MIN:
            plan = await ctx.execute("explain", explain_fx, writes=False, tool=EXPLAIN_TOOL)
            finding = {"id": f"{ctx.run_id}/slow-query", "category": "slow-query",
                       "severity": "high" if reading == READING_MAX else "medium",
                       "confidence": min(100, reading // 10), "targets": [flow_input["target"]],
                       "evidence": evidence_of(plan, stats), "model": f"sentinel-v{version}"}
            await ctx.emit("finding", finding)
            findings.append(finding)
        output: dict[str, Any] = {}
        if paging and reading >= PAGE_READING_MIN:
            # K9: the pager has no idempotency key; never page twice on a guess.
            paged = await ctx.execute(PAGE_STEP, page_fx(reading), idempotent=False, tool=PAGER_TOOL)
            output["incident"] = paged["incident"]
        saved = await state.save(ctx, advance_state(version, payload, reading), revision)
        await ctx.execute("publish", publish_fx)
        return {"revision": saved["revision"], "wakes": payload["wakes"] + 1, "findings": findings, **output}

    return sentinel_flow


def canonical_size(value: Any) -> int:
    return len(canonical_json(value).encode("utf-8"))
