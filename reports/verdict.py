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

import signal
from typing import Any, Mapping, NamedTuple

from sim.clock import format_calendar, format_span_ms
from sim.runner import DETECTED, FAIL, PASS

# The ``format`` names of the bodies (``sim.face.cli.RESULT_FORMAT`` and
# ``sim.face.sweep.SWEEP_FORMAT``, spelled here so as not to import the face).
RESULT_FORMAT = "loomsim-result/1"
SWEEP_FORMAT = "loomsim-sweep/1"
# A sweep seed whose child printed no result (``sim.face.sweep.outcome``).
ERROR = "error"
# A sweep stopped by SIGINT or SIGTERM (its body's ``interrupted``: the signal's name).
INTERRUPTED = "interrupted"
# A seed beyond the contract in which no broken promise fired: it tested
# nothing (``sim.face.sweep.outcome``; neither a failure nor a pass).
NOT_EXERCISED = "not-exercised"
# A saved failure of the failure database that still fails (``sim.face.failures``).
STILL_FAILS = "still-fails"
# A corpus entry replayed first by ``sweep --corpus`` (``sim.face.corpus_replay``): how it ended.
CORPUS_FAIL, CORPUS_NOT_APPLICABLE = "fail", "not-applicable"
# The exit codes a body's verdict means (the README's table; 2, a usage
# error, never has a body): 1 a failure, 3 a seed that could not run or a
# missing shard, 128 + the signal for an interrupted sweep.
EXIT_PASS, EXIT_VIOLATION, EXIT_ERROR = 0, 1, 3
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


class Verdict(NamedTuple):
    """How a body ended (``status``) and the exit code of the process that
    made it: what every report shows first and the process returns."""

    status: str
    exit_code: int


def decide(body: Mapping[str, Any]) -> Verdict:
    """The verdict of a run's or a sweep's body: the one decision the
    process's exit code and every report read, so they cannot disagree.

    A run: ``pass`` and ``detected`` exit 0; ``error`` (a checker raised:
    the harness failed) 3; anything else is ``fail``, 1.
    A sweep, from its whole body: stopped by a signal, ``interrupted``
    (128 + the signal); else a failing seed, a saved failure that still
    fails, a corpus entry replayed first that fails, or
    (``require_coverage``) a coverage gap: ``fail``, 1; else a
    seed that could not run or a shard missing from a merge: ``error``, 3
    (a failure outranks it); else ``pass``, 0."""
    if kind_of(body) == "run":
        status = body.get("status")
        if status == ERROR:  # the harness failed (a checker raised): no verdict on the system
            return Verdict(ERROR, EXIT_ERROR)
        return Verdict(status, EXIT_PASS) if status in (PASS, DETECTED) else Verdict(FAIL, EXIT_VIOLATION)
    return decide_sweep(body)


def decide_sweep(body: Mapping[str, Any]) -> Verdict:
    """``decide`` for a sweep's summary (its format not checked: a summary
    being built)."""
    if body.get("interrupted"):
        signum = signal.Signals.__members__.get(str(body["interrupted"]))
        return Verdict(INTERRUPTED, EXIT_ERROR if signum is None else 128 + signum.value)
    if (body.get("failed") or still_failing(body) or corpus_failing(body)
            or (body.get("require_coverage") and body.get("coverage_gaps"))):
        return Verdict(FAIL, EXIT_VIOLATION)
    if body.get("errors") or missing_shards(body):
        return Verdict(ERROR, EXIT_ERROR)
    return Verdict(PASS, EXIT_PASS)


def still_failing(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A sweep's saved failures (``saved_failures``) that still fail."""
    return [r for r in body.get("saved_failures") or () if r.get("outcome") == STILL_FAILS]


def corpus_failing(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A sweep's corpus entries (``corpus_replays``) that failed."""
    return [r for r in body.get("corpus_replays") or () if r.get("outcome") == CORPUS_FAIL]


def missing_shards(body: Mapping[str, Any]) -> list[int]:
    """A merged sweep's shards that were not given (their seeds did not run)."""
    return list((body.get("shards") or {}).get("missing") or ())


def status_of(body: Mapping[str, Any]) -> str:
    """The body's outcome (``decide``'s): ``pass``, ``detected``, ``fail``,
    ``error`` (a sweep with a seed that could not run and none failing) or
    ``interrupted``."""
    return decide(body).status


def short(text: Any, limit: int = MESSAGE_CHARS_MAX) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def calendar(t_ms: Any) -> str:
    """Simulated time as a calendar timestamp, or the text given (``the end``)."""
    return format_calendar(t_ms) if isinstance(t_ms, int) else str(t_ms)


def verdict(body: Mapping[str, Any]) -> str:
    """One line, the first of every report: how it ended, the exit code,
    and why."""
    status, code = decide(body)
    word = f"{status.upper()} (exit {code})"
    if kind_of(body) == "run":
        who = f"{body.get('scenario')} seed {body.get('seed')}"
        span = format_span_ms(body["simulated_ms"]) if isinstance(body.get("simulated_ms"), int) else "?"
        first = (body.get("violations") or [None])[0]
        if status == PASS:
            return (f"{word}: {who}: every invariant held ({span} simulated, {body.get('store')} store)"
                    + not_exercised_note(body))
        if first is None:
            return f"{word}: {who}: status {body.get('status')}"
        if status == ERROR:  # the harness failed: a checker raised
            return f"{word}: {who}: checker {first.get('name')} raised at {calendar(first.get('simulated_ms'))}"
        how = "caught the broken promise" if status == DETECTED else "violated"
        return f"{word}: {who}: {first.get('name')} {how} at {calendar(first.get('simulated_ms'))}"
    scenarios = list((body.get("scenarios") or {}))
    what = scenarios[0] if len(scenarios) == 1 else f"{len(scenarios)} scenarios"
    counts = (f"{body.get('ran', 0)} of {body.get('seeds', 0)} seeds ran, {body.get('passed', 0)} passed, "
              f"{body.get('failed', 0)} failed, {body.get('errors', 0)} errors")
    if body.get("beyond_seeds"):
        counts += f", {body.get('detected', 0)} of {body.get('beyond_seeds')} beyond the contract detected"
        if body.get("not_exercised"):
            counts += f", {body['not_exercised']} of {body['beyond_seeds']} beyond the contract not exercised"
    still = len(still_failing(body))
    if still:
        counts += f", {still} saved failure{' still fails' if still == 1 else 's still fail'}"
    replays = body.get("corpus_replays")
    if replays:
        bad = len(corpus_failing(body))
        stale = sum(1 for r in replays if r.get("outcome") == CORPUS_NOT_APPLICABLE)
        counts += (f", {len(replays)} corpus entr{'y' if len(replays) == 1 else 'ies'} replayed: {bad} failed"
                   + (f", {stale} not applicable" if stale else ""))
    gaps = len(body.get("coverage_gaps") or ())
    line = f"{word}: sweep of {what}: {counts}; {gaps} coverage gap{'s' if gaps != 1 else ''}"
    if missing_shards(body):
        line += f"; shards {', '.join(map(str, missing_shards(body)))} missing"
    if status == INTERRUPTED:
        line += f"; interrupted by {body['interrupted']}: only the seeds that finished"
    return line


def beyond_not_exercised(body: Mapping[str, Any]) -> bool:
    """A run's body (``loomsim run --json``, a sweep's child result): run
    beyond the contract, it passed and no store broke a promise: it tested
    nothing. (A broken promise ends a run DETECTED or FAIL, never PASS.)"""
    return (bool((body.get("config") or {}).get("beyond_contract")) and body.get("status") == PASS
            and not body.get("beyond_contract"))


def not_exercised_note(body: Mapping[str, Any]) -> str:
    """What a run's PASS line adds when it tested nothing beyond the
    contract (``beyond_not_exercised``); else nothing."""
    return f"; beyond the contract NOT EXERCISED: {not_exercised_why(body)}" if beyond_not_exercised(body) else ""


def not_exercised_why(body: Mapping[str, Any]) -> str:
    """Why such a run (``beyond_not_exercised``) tested nothing."""
    duration = (body.get("config") or {}).get("duration") or "the duration"
    return f"no broken promise fired within {duration} (nothing to detect: lengthen --duration)"


def failures(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each failure as ``{scenario, seed, invariant, simulated_time, message,
    repro_command, repro_file}``: a run's violations (the first is the
    failure, the others follow it), a sweep's failing seeds."""
    if kind_of(body) == "sweep":
        return [*(corpus_failure(r) for r in corpus_failing(body)), *(dict(f) for f in body.get("failing") or ()),
                *(saved_failure(r) for r in still_failing(body))]
    if status_of(body) == PASS:
        return []
    return [{"scenario": body.get("scenario"), "seed": body.get("seed"), "invariant": v.get("name"),
             "simulated_time": v.get("simulated_time") or calendar(v.get("simulated_ms")),
             "simulated_ms": v.get("simulated_ms"), "message": v.get("message", ""),
             "repro_command": body.get("repro_command"), "repro_file": body.get("repro_file")}
            for v in body.get("violations") or ()]


def saved_failure(replay: Mapping[str, Any]) -> dict[str, Any]:
    """A saved failure that still fails (a sweep's ``saved_failures``
    entry) as a failure: its file (``saved``) is the repro file."""
    return {"scenario": replay.get("scenario"), "seed": replay.get("seed"), "invariant": replay.get("invariant"),
            "simulated_time": replay.get("simulated_time") or "its replay",
            "message": f"saved failure {replay.get('file')} still fails: "
                       f"{replay.get('message') or replay.get('detail')}",
            "repro_command": replay.get("repro_command"), "repro_file": replay.get("path"),
            "saved": replay.get("file")}


def corpus_failure(replay: Mapping[str, Any]) -> dict[str, Any]:
    """A corpus entry that failed (a sweep's ``corpus_replays`` entry) as a failure."""
    return {"scenario": replay.get("scenario"), "seed": replay.get("seed"), "invariant": replay.get("invariant"),
            "simulated_time": replay.get("simulated_time") or "its replay",
            "message": f"corpus entry {replay.get('file')} fails: {replay.get('message') or replay.get('detail')}",
            "repro_command": replay.get("repro_command"), "repro_file": replay.get("repro_file")}


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
