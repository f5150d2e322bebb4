"""Reading a result body: what kind it is, how it ended, what to show first.

Every report format starts from the same JSON dicts the CLI prints: a run's
``loomsim-result/1`` (``loomsim run --json``) or a sweep's
``loomsim-sweep/1`` (``loomsim sweep --json``, ``loomsim merge``). The
formats differ only in rendering; the reading of a body (its verdict, its
failures, its coverage gaps) is done once, here, so the Markdown, the JUnit
XML and the HTML never disagree about what happened.

Only ``sim``'s result constants are imported: a report can be rendered from
a saved JSON file by anything that has the package, without the scenarios.
"""
from __future__ import annotations

from typing import Any, Mapping

from sim.clock import format_calendar, format_span_ms
from sim.runner import DETECTED, FAIL, PASS

# The ``format`` names of the bodies (``sim.face.cli.RESULT_FORMAT`` and
# ``sim.face.sweep.SWEEP_FORMAT``, spelled here so as not to import the face).
RESULT_FORMAT = "loomsim-result/1"
SWEEP_FORMAT = "loomsim-sweep/1"
# A sweep seed whose child printed no result (``sim.face.sweep.outcome``).
ERROR = "error"
MESSAGE_CHARS_MAX = 400  # a violation message in a table; the full text is in the JSON


class ReportBodyError(ValueError):
    """A body that is neither a run's nor a sweep's result."""


def kind_of(body: Mapping[str, Any]) -> str:
    """``"run"`` or ``"sweep"``; anything else is a ``ReportBodyError``."""
    fmt = body.get("format") if isinstance(body, Mapping) else None
    if fmt == RESULT_FORMAT:
        return "run"
    if fmt == SWEEP_FORMAT:
        return "sweep"
    raise ReportBodyError(f"not a loomsim result: format {fmt!r} (expected {RESULT_FORMAT} or {SWEEP_FORMAT})")


def status_of(body: Mapping[str, Any]) -> str:
    """The body's outcome: ``pass``, ``detected``, ``fail`` or (a sweep
    with a seed that could not run and none failing) ``error``."""
    if kind_of(body) == "run":
        status = body.get("status")
        return status if status in (PASS, DETECTED) else FAIL
    if body.get("failed"):
        return FAIL
    if body.get("errors"):
        return ERROR
    return PASS


def short(text: Any, limit: int = MESSAGE_CHARS_MAX) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def calendar(t_ms: Any) -> str:
    """Simulated time as a calendar timestamp, or the text given (``the end``)."""
    return format_calendar(t_ms) if isinstance(t_ms, int) else str(t_ms)


def verdict(body: Mapping[str, Any]) -> str:
    """One line, the first of every report: how it ended and why."""
    status = status_of(body)
    word = status.upper()
    if kind_of(body) == "run":
        who = f"{body.get('scenario')} seed {body.get('seed')}"
        span = format_span_ms(body["simulated_ms"]) if isinstance(body.get("simulated_ms"), int) else "?"
        first = (body.get("violations") or [None])[0]
        if status == PASS:
            return f"{word}: {who}: every invariant held ({span} simulated, {body.get('store')} store)"
        if first is None:
            return f"{word}: {who}: status {body.get('status')}"
        how = "caught the broken promise" if status == DETECTED else "violated"
        return f"{word}: {who}: {first.get('name')} {how} at {calendar(first.get('simulated_ms'))}"
    scenarios = list((body.get("scenarios") or {}))
    what = scenarios[0] if len(scenarios) == 1 else f"{len(scenarios)} scenarios"
    counts = (f"{body.get('ran', 0)} of {body.get('seeds', 0)} seeds ran, {body.get('passed', 0)} passed, "
              f"{body.get('failed', 0)} failed, {body.get('errors', 0)} errors")
    if body.get("beyond_seeds"):
        counts += f", {body.get('detected', 0)} of {body.get('beyond_seeds')} beyond the contract detected"
    gaps = len(body.get("coverage_gaps") or ())
    return f"{word}: sweep of {what}: {counts}; {gaps} coverage gap{'s' if gaps != 1 else ''}"


def failures(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each failure as ``{scenario, seed, invariant, simulated_time, message,
    repro_command, repro_file}``: a run's violations (the first is the
    failure, the others follow it), a sweep's failing seeds."""
    if kind_of(body) == "sweep":
        return [dict(f) for f in body.get("failing") or ()]
    if status_of(body) == PASS:
        return []
    return [{"scenario": body.get("scenario"), "seed": body.get("seed"), "invariant": v.get("name"),
             "simulated_time": v.get("simulated_time") or calendar(v.get("simulated_ms")),
             "simulated_ms": v.get("simulated_ms"), "message": v.get("message", ""),
             "repro_command": body.get("repro_command"), "repro_file": body.get("repro_file")}
            for v in body.get("violations") or ()]


def coverage_gaps(body: Mapping[str, Any]) -> list[str]:
    """The coverage gaps, one line each: a sweep's (``coverage_gaps``); a
    run's enabled kinds and failpoints that never fired, its ``sometimes``
    properties not reached and its invariants with 0 checks."""
    if kind_of(body) == "sweep":
        return [f"{g.get('scenario')}: {g.get('what')} {g.get('name')}: {g.get('detail')}"
                for g in body.get("coverage_gaps") or ()]
    cov = body.get("coverage") or {}
    gaps = [f"never fired (enabled): {name}" for name in cov.get("never_fired_enabled") or ()]
    gaps += [f"sometimes-property not reached: {name}" for name, held in (cov.get("sometimes") or {}).items()
             if not held]
    gaps += [f"invariant with 0 checks: {name}" for name, n in (body.get("invariants") or {}).items() if n == 0]
    return gaps


def first_failing_run(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A sweep's first failing seed record (``runs``), the one whose
    timeline a report draws; None if no seed failed."""
    for record in body.get("runs") or ():
        if record.get("status") == FAIL:
            return record
    return None
