"""The Markdown report: what a CI job summary (``$GITHUB_STEP_SUMMARY``) shows.

The first line is the verdict (a reader of a list of job summaries sees
nothing else), then a table (a sweep's seeds, or a run's invariant check
counts), the failures each with its invariant, simulated time, message and
the command that reproduces it, and the coverage gaps. Tables are capped: a
job summary has a size limit and a 1,000-seed sweep must still fit.
"""
from __future__ import annotations

from typing import Any, Mapping

from reports.verdict import ERROR, coverage_gaps, failures, kind_of, short, status_of, verdict
from sim.clock import format_span_ms
from sim.runner import DETECTED, PASS

ROWS_MAX = 200  # table rows; the rest is counted in a line under the table
ICONS = {PASS: "✅", DETECTED: "✅"}


def cell(value: Any, limit: int = 160) -> str:
    """A table cell: one line, pipes escaped."""
    text = short(value, limit).replace("\\", "\\\\").replace("|", "\\|")
    return " ".join(text.split())


def code(text: Any) -> str:
    """An inline code span that survives backticks inside ``text``."""
    text = " ".join(str(text).split())
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def render_markdown(body: Mapping[str, Any]) -> str:
    status = status_of(body)
    lines = [f"# {ICONS.get(status, '❌')} loomsim {verdict(body)}", ""]
    if kind_of(body) == "run":
        lines += _run_head(body)
    else:
        lines += _sweep_table(body)
    found = failures(body)
    if found:
        heading = {DETECTED: "## Detections", ERROR: "## Harness errors (a checker raised)"}.get(status, "## Failures")
        lines += ["", heading, ""]
        shown_commands = set()
        for failure in found[:ROWS_MAX]:
            who = f"{failure.get('scenario')} seed {failure.get('seed')}"
            lines.append(f"- **{cell(failure.get('invariant'))}** ({who}) at {code(failure.get('simulated_time'))}: "
                         f"{cell(failure.get('message'), 400)}")
            if failure.get("repro_command") in shown_commands:  # a run's later violations: the same command
                continue
            shown_commands.add(failure.get("repro_command"))
            if failure.get("repro_command"):
                lines.append(f"  - reproduce: {code(failure['repro_command'])}")
            if failure.get("repro_file"):
                lines.append(f"  - repro file: {code(failure['repro_file'])}")
        if len(found) > ROWS_MAX:
            lines.append(f"- … and {len(found) - ROWS_MAX} more (see loomsim-report.json)")
    errors = body.get("error_runs") or ()
    if errors:
        lines += ["", "## Seeds that could not run", ""]
        lines += [f"- {cell(e.get('scenario'))} seed {e.get('seed')}: {cell(e.get('error'), 300)}"
                  for e in errors[:ROWS_MAX]]
    gaps = coverage_gaps(body)
    lines += ["", "## Coverage gaps", ""]
    if kind_of(body) == "run" and status != PASS and gaps:
        lines += ["The run stopped at its violation: its end-of-run checks never ran.", ""]
    lines += [f"- {cell(g, 300)}" for g in gaps[:ROWS_MAX]] or ["None: every enabled fault kind and failpoint fired, "
                                                                "every sometimes-property was reached."]
    return "\n".join(lines) + "\n"


def _run_head(body: Mapping[str, Any]) -> list[str]:
    span = format_span_ms(body["simulated_ms"]) if isinstance(body.get("simulated_ms"), int) else "?"
    wakes = f", {body['wakes']} wakes" if body.get("wakes") is not None else ""
    lines = [f"{cell(body.get('scenario'))} seed {body.get('seed')} on {cell(body.get('store'))}: {span} simulated "
             f"in {body.get('wall_s')}s wall{wakes}, {body.get('events')} events; trace digest "
             f"{code(body.get('trace_digest'))}", ""]
    faults = ", ".join(f"{k}={v}" for k, v in (body.get("faults") or {}).items()) or "none"
    lines += [f"Faults fired: {faults}", "", "| invariant | checks |", "| --- | ---: |"]
    checks = list((body.get("invariants") or {}).items())
    for name, count in checks[:ROWS_MAX]:
        lines.append(f"| {cell(name)} | {count}{' ⚠️' if count == 0 else ''} |")
    if len(checks) > ROWS_MAX:
        lines.append(f"\n… and {len(checks) - ROWS_MAX} more invariants")
    return lines


def _sweep_table(body: Mapping[str, Any]) -> list[str]:
    wall = body.get("wall_s")
    lines = [f"{body.get('ran', 0)} seeds in {wall}s wall ({body.get('jobs')} jobs)"
             + (" — the time budget stopped it early" if body.get("budget_stopped") else ""), "",
             "| scenario | seed | store | status | digest | first violation | reproduce |",
             "| --- | ---: | --- | --- | --- | --- | --- |"]
    runs = list(body.get("runs") or ())
    for record in runs[:ROWS_MAX]:
        first = record.get("first_violation") or {}
        violation = f"{first.get('invariant')} at {first.get('simulated_time')}" if first else ""
        if record.get("error"):
            violation = short(record["error"], 160)
        digest = (record.get("trace_digest") or "")[:12]
        repro = code(record["repro_command"]) if record.get("status") not in (PASS, None) and \
            record.get("repro_command") else ""
        lines.append(f"| {cell(record.get('scenario'))} | {record.get('seed')} | {cell(record.get('store'))} | "
                     f"{cell(record.get('status'))} | {code(digest) if digest else ''} | {cell(violation)} | "
                     f"{repro.replace('|', chr(92) + '|')} |")
    if len(runs) > ROWS_MAX:
        lines.append(f"\n… and {len(runs) - ROWS_MAX} more seeds (see loomsim-report.json)")
    decisions = body.get("recovery_decisions") or {}
    if decisions:
        dispositions = body.get("recovery_dispositions") or {}
        lines += ["", "Recovery decisions over every seed "
                  f"({', '.join(f'{cell(k)}={v}' for k, v in dispositions.items())}):", "",
                  "| decision | count |", "| --- | ---: |"]
        lines += [f"| {cell(name)} | {count} |" for name, count in decisions.items()]
    return lines
