"""The HTML report: one self-contained file to open after a run or a sweep.

Inline CSS and inline SVG only: no script, no font, no image, no link to
anything (a CI artifact is opened offline, from an archive, years later).
The markup is kept well-formed XML (every element closed, every attribute
quoted, only XML's own entities), so a test or a tool can read it back with
``xml.etree`` as well as with an HTML parser.

A run: the verdict; for a failure the invariant, simulated time, message and
the command that reproduces it; the timeline (``reports.svg``); invariant
check counts; fault and failpoint coverage (fired, never fired though
enabled, switched off by the seed's swarm); the related trace events of the
failure. A sweep: the verdict and totals, the failures, the timeline and
related events of the first failing seed, the seeds, the coverage of each
scenario and the gaps.
"""
from __future__ import annotations

import json
from html import escape
from typing import Any, Iterable, Mapping, Sequence

from reports.svg import render_timeline_svg
from reports.verdict import (calendar, coverage_gaps, failures, first_failing_run, kind_of, short, status_of,
                             still_failing, verdict)
from sim.clock import format_span_ms
from sim.runner import DETECTED, PASS

ROWS_MAX = 1_000  # seeds in the table; the JSON has them all
FIELDS_CHARS_MAX = 240

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
       color: #1d2330; margin: 0; background: #fff; }
main { max-width: 1240px; margin: 0 auto; padding: 18px 24px 48px; }
h1 { font-size: 22px; margin: 0 0 6px; padding: 12px 16px; border-radius: 6px; }
h1.pass { background: #e6f4ea; color: #14532d; border: 1px solid #9bd3ae; }
h1.fail { background: #fde8e8; color: #7f1d1d; border: 1px solid #f3a5a5; }
h1.error { background: #fff4e0; color: #7a4b00; border: 1px solid #f0c987; }
h2 { font-size: 17px; margin: 26px 0 8px; border-bottom: 1px solid #e3e6eb; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta { color: #4a5263; margin: 4px 0 0; display: flex; flex-wrap: wrap; column-gap: 18px; }
.meta span { white-space: nowrap; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
pre { background: #f4f5f7; border: 1px solid #e3e6eb; border-radius: 4px; padding: 8px 10px; overflow-x: auto;
      white-space: pre-wrap; word-break: break-all; margin: 6px 0; }
.failure { border-left: 4px solid #d00000; background: #fff7f7; padding: 8px 14px; margin: 12px 0; }
.failure .message { white-space: pre-wrap; }
table { border-collapse: collapse; margin: 6px 0 10px; max-width: 100%; }
table.excerpt, table.seeds { width: 100%; table-layout: fixed; }
table.excerpt th:nth-child(1) { width: 12em; } table.excerpt th:nth-child(2) { width: 4.5em; }
table.excerpt th:nth-child(3) { width: 8em; } table.excerpt th:nth-child(4) { width: 13em; }
table.seeds th:nth-child(1) { width: 9em; } table.seeds th:nth-child(2) { width: 4em; }
table.seeds th:nth-child(3) { width: 9em; } table.seeds th:nth-child(4) { width: 8em; }
table.seeds th:nth-child(5) { width: 8.5em; } table.seeds td { word-break: break-word; }
th, td { border: 1px solid #e3e6eb; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f5f7; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.zero td, td.gap { color: #a16207; background: #fffbeb; }
tr.bad td { background: #fff1f1; }
.status-pass { color: #15803d; font-weight: 600; }
.status-fail { color: #b91c1c; font-weight: 600; }
.status-detected { color: #1d4ed8; font-weight: 600; }
.status-error { color: #a16207; font-weight: 600; }
.grid { display: flex; flex-wrap: wrap; gap: 28px; }
.grid > div { flex: 1 1 360px; min-width: 320px; }
.excerpt td { font-size: 12px; }
.excerpt td:last-child { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; word-break: break-all; }
.excerpt tr.violation td { background: #fde8e8; font-weight: 600; }
.excerpt tr.fault td { background: #fff8e6; }
.timeline-box { border: 1px solid #e3e6eb; border-radius: 6px; padding: 6px; overflow-x: auto; }
.note { color: #6b7280; }
ul.gaps li { color: #7a4b00; }
details summary { cursor: pointer; color: #374151; }
"""


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _table(head: Sequence[str], rows: Iterable[Sequence[Any]], *, cls: str = "", num: Sequence[int] = (),
           row_cls: Any = None) -> str:
    """``rows`` of already-escaped cells."""
    out = [f'<table class="{cls}"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for row in rows:
        rc = row_cls(row) if row_cls else ""
        out.append(f'<tr class="{rc}">' + "".join(
            f'<td class="num">{c}</td>' if i in num else f"<td>{c}</td>" for i, c in enumerate(row)) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _status(status: Any) -> str:
    return f'<span class="status-{_e(status)}">{_e(status)}</span>'


def render_html(body: Mapping[str, Any]) -> str:
    status = status_of(body)
    cls = "pass" if status in (PASS, DETECTED) else ("error" if status == "error" else "fail")
    parts = [f'<h1 class="{cls}">{_e(verdict(body))}</h1>']
    parts += _run_parts(body) if kind_of(body) == "run" else _sweep_parts(body)
    title = f"loomsim {status.upper()}: " + (f"{body.get('scenario')} seed {body.get('seed')}"
                                             if kind_of(body) == "run" else "sweep")
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"/>'
            '<meta name="viewport" content="width=device-width, initial-scale=1"/>'
            f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body><main>\n"
            + "\n".join(parts) + "\n</main></body></html>\n")


# -- a run ------------------------------------------------------------------------------


def _run_parts(body: Mapping[str, Any]) -> list[str]:
    config = body.get("config") or {}
    span = format_span_ms(body["simulated_ms"]) if isinstance(body.get("simulated_ms"), int) else "?"
    meta = [("scenario", body.get("scenario")), ("seed", body.get("seed")), ("store", body.get("store")),
            ("duration", config.get("duration")), ("simulated", span), ("wall", f"{body.get('wall_s')}s"),
            ("events", body.get("events")), ("wakes", body.get("wakes")), ("mutant", body.get("mutant")),
            ("loomsim", config.get("loomsim"))]
    parts = ['<p class="meta">' + "".join(f"<span>{_e(k)}: <b>{_e(v)}</b></span>" for k, v in meta if v is not None)
             + "</p>",
             f'<p class="meta">trace digest: <code>{_e(body.get("trace_digest"))}</code></p>']
    parts += _failure_boxes(failures(body), detected=status_of(body) == DETECTED)
    parts.append("<h2>Timeline</h2>")
    planned = config.get("duration")
    if status_of(body) != PASS and planned:
        parts.append(f'<p class="note">The run stopped at its violation after {_e(span)} of its {_e(planned)}: '
                     "the time axis ends there.</p>")
    violations = [{"t_ms": v.get("simulated_ms"), "invariant": v.get("name"), "message": v.get("message")}
                  for v in body.get("violations") or () if isinstance(v.get("simulated_ms"), int)]
    parts.append('<div class="timeline-box">' + render_timeline_svg(body.get("timeline"), violations=violations,
                                                                    title=f"timeline of seed {body.get('seed')}")
                 + "</div>")
    if body.get("excerpt"):
        parts.append("<h2>Related trace events</h2>")
        parts.append('<p class="note">The trace events touching the failure\'s key, submission or run, with the '
                     "faults and process starts and crashes around them (the repro file has the same).</p>")
        parts.append(_excerpt(body["excerpt"]))
    checks = body.get("invariants") or {}
    cov = body.get("coverage") or {}
    parts.append('<h2>Invariants and coverage</h2><div class="grid"><div>')
    parts.append("<h3>Invariant checks</h3>")
    parts.append(_table(("invariant", "checks"), ((_e(k), _e(v)) for k, v in checks.items()), cls="invariants",
                        num=(1,), row_cls=lambda r: "zero" if r[1] == "0" else ""))
    parts.append("</div><div>")
    parts += _run_coverage(body, cov)
    parts.append("</div></div>")
    gaps = coverage_gaps(body)
    parts.append("<h2>Coverage gaps</h2>")
    if status_of(body) != PASS and gaps:
        parts.append('<p class="note">The run stopped at its violation: the checks of its end (the audit) never '
                     "ran, and what it had not reached by then shows here.</p>")
    parts.append(_gap_list(gaps))
    parts.append("<h2>Configuration</h2><details><summary>the run's configuration (swarm choices, knobs, "
                 "parameters)</summary><pre>" + _e(json.dumps(config, indent=1, ensure_ascii=False)) + "</pre></details>")
    return parts


def _failure_boxes(found: Sequence[Mapping[str, Any]], *, detected: bool = False) -> list[str]:
    if not found:
        return []
    many = len(found) > 1 and len({(f.get("scenario"), f.get("seed")) for f in found}) > 1
    parts = [f"<h2>{'Detection' if detected else 'Failure'}{f's ({len(found)})' if many else ''}</h2>"]
    first = found[0]
    parts.append('<div class="failure">'
                 f'<p><b>invariant {_e(first.get("invariant"))}</b> at <b>{_e(first.get("simulated_time"))}</b>'
                 + (f' ({_e(first.get("scenario"))} seed {_e(first.get("seed"))})' if first.get("scenario") else "")
                 + f'</p><p class="message">{_e(first.get("message"))}</p>'
                 + (f'<p>reproduce:</p><pre class="repro"><code>{_e(first["repro_command"])}</code></pre>'
                    if first.get("repro_command") else "")
                 + (f'<p>repro file: <code>{_e(first["repro_file"])}</code></p>' if first.get("repro_file") else "")
                 + "</div>")
    for more in found[1:20]:
        who = f' ({_e(more.get("scenario"))} seed {_e(more.get("seed"))})' if many else ""
        parts.append(f'<p>also{who}: <b>{_e(more.get("invariant"))}</b> at {_e(more.get("simulated_time"))}: '
                     f'{_e(short(more.get("message"), 300))}</p>')
    if len(found) > 20:
        parts.append(f'<p class="note">… and {len(found) - 20} more: see the seeds below.</p>')
    return parts


def _run_coverage(body: Mapping[str, Any], cov: Mapping[str, Any]) -> list[str]:
    never_on = set(cov.get("never_fired_enabled") or ())
    off = set(cov.get("switched_off") or ())

    def state(name: str, fired: int) -> str:
        if fired:
            return "fired"
        if name in never_on:
            return '<span class="status-error">never fired (enabled)</span>'
        if name in off:
            return "switched off"
        return "never fired"

    kinds = cov.get("fault_kinds") or body.get("faults") or {}
    parts = ["<h3>Fault kinds</h3>",
             _table(("fault kind", "fired", ""), ((_e(k), _e(n), state(k, n)) for k, n in kinds.items()),
                    cls="fault-kinds", num=(1,))]
    failpoints = cov.get("failpoints") or {}
    if failpoints:
        parts.append("<h3>Failpoints</h3>")
        parts.append(_table(("failpoint", "reached", "fired", ""),
                            ((_e(k), _e(fp.get("hits")), _e(fp.get("fired")), state(k, fp.get("fired", 0)))
                             for k, fp in failpoints.items()), cls="failpoints", num=(1, 2)))
    sometimes = cov.get("sometimes") or {}
    if sometimes:
        parts.append("<h3>Sometimes-properties</h3>")
        parts.append(_table(("property", "reached"), ((_e(k), "yes" if v else '<span class="status-error">no</span>')
                                                      for k, v in sometimes.items()), cls="sometimes"))
    ports = cov.get("ports") or {}
    if ports:
        parts.append("<h3>Faults by port</h3>")
        parts.append(_table(("port", "faults"), ((_e(p), _e(", ".join(f"{k}={n}" for k, n in c.items())))
                                                 for p, c in ports.items()), cls="ports"))
    return parts


def _excerpt(events: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for event in events:
        fields = json.dumps(event.get("fields", {}), ensure_ascii=False, separators=(",", ":"), default=repr)
        shown = fields if len(fields) <= FIELDS_CHARS_MAX else fields[: FIELDS_CHARS_MAX - 1] + "…"
        rows.append((_e(calendar(event.get("t_ms"))), _e(event.get("seq")), _e(event.get("node")),
                     _e(event.get("kind")), f'<span title="{_e(fields)}">{_e(shown)}</span>'))

    def row_cls(row: Sequence[str]) -> str:
        return {"violation": "violation", "fault": "fault"}.get(row[3], "")

    return _table(("simulated time", "seq", "node", "kind", "fields"), rows, cls="excerpt", num=(1,),
                  row_cls=row_cls)


def _gap_list(gaps: Sequence[str]) -> str:
    if not gaps:
        return '<p class="note">None: every enabled fault kind and failpoint fired, every sometimes-property was ' \
               "reached, every invariant checked.</p>"
    return '<ul class="gaps">' + "".join(f"<li>{_e(g)}</li>" for g in gaps) + "</ul>"


# -- a sweep ----------------------------------------------------------------------------


def _sweep_parts(body: Mapping[str, Any]) -> list[str]:
    meta = [("seeds", body.get("seeds")), ("ran", body.get("ran")), ("passed", body.get("passed")),
            ("failed", body.get("failed")), ("errors", body.get("errors")),
            ("beyond the contract", f"{body.get('detected')} of {body.get('beyond_seeds')} detected"
             + (f", {body['not_exercised']} not exercised" if body.get("not_exercised") else "")
             if body.get("beyond_seeds") else None),
            ("saved failures still failing", len(still_failing(body)) or None),
            ("corpus entries replayed", _corpus_counts(body.get("corpus_replays"))),
            ("wall", f"{body.get('wall_s')}s"), ("jobs", body.get("jobs"))]
    parts = ['<p class="meta">' + "".join(f"<span>{_e(k)}: <b>{_e(v)}</b></span>" for k, v in meta if v is not None)
             + "</p>"]
    if body.get("budget_stopped"):
        parts.append(f'<p class="note">The time budget ({_e(body.get("time_budget_s"))}s) stopped the sweep '
                     f'starting seeds at {_e(body.get("budget_stopped_at_s"))}s.</p>')
    parts += _failure_boxes(failures(body))
    first = first_failing_run(body)
    if first is not None:
        parts.append(f"<h2>Timeline of the first failing seed ({_e(first.get('scenario'))} seed "
                     f"{_e(first.get('seed'))})</h2>")
        parts.append('<div class="timeline-box">' + render_timeline_svg(
            first.get("timeline"), title=f"timeline of {first.get('scenario')} seed {first.get('seed')}") + "</div>")
        if first.get("excerpt"):
            parts.append("<h3>Related trace events</h3>")
            parts.append(_excerpt(first["excerpt"]))
    errors = body.get("error_runs") or ()
    if errors:
        parts.append("<h2>Seeds that could not run</h2>")
        parts.append(_table(("scenario", "seed", "error"), ((_e(e.get("scenario")), _e(e.get("seed")),
                                                             _e(e.get("error"))) for e in errors)))
    parts.append("<h2>Seeds</h2>")
    runs = list(body.get("runs") or ())
    rows = []
    for record in runs[:ROWS_MAX]:
        fv = record.get("first_violation") or {}
        violation = f"{fv.get('invariant')} at {fv.get('simulated_time')}" if fv else (record.get("error") or "")
        digest = record.get("trace_digest") or ""
        repro = (f'<code>{_e(record["repro_command"])}</code>'
                 if record.get("repro_command") and record.get("status") != PASS else "")
        rows.append((_e(record.get("scenario")), _e(record.get("seed")), _e(record.get("store")),
                     _status(record.get("status")) + (" (beyond)" if record.get("beyond") else ""),
                     f'<code title="{_e(digest)}">{_e(digest[:12])}</code>', _e(short(violation, 200)), repro))
    parts.append(_table(("scenario", "seed", "store", "status", "digest", "first violation", "reproduce"), rows,
                        cls="seeds", num=(1,), row_cls=lambda r: "bad" if "status-fail" in r[3] else ""))
    if len(runs) > ROWS_MAX:
        parts.append(f'<p class="note">… and {len(runs) - ROWS_MAX} more seeds in loomsim-report.json.</p>')
    for name, s in (body.get("scenarios") or {}).items():
        parts += _scenario_coverage(name, s)
    parts.append("<h2>Coverage gaps</h2>")
    parts.append(_gap_list(coverage_gaps(body)))
    return parts


def _corpus_counts(replays: Any) -> str | None:
    """``sweep --corpus``: how its entries ended (None without a corpus)."""
    if not replays:
        return None
    counts: dict[str, int] = {}
    for replay in replays:
        counts[str(replay.get("outcome"))] = counts.get(str(replay.get("outcome")), 0) + 1
    return f"{len(replays)} (" + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + ")"


def _scenario_coverage(name: str, s: Mapping[str, Any]) -> list[str]:
    ran = (s.get("ran") or 0) - (s.get("errors") or 0)
    never_on = set(s.get("never_fired_enabled") or ())
    off = set(s.get("switched_off") or ())

    def state(key: str, fired: int) -> str:
        if fired:
            return "fired"
        if key in never_on:
            return '<span class="status-error">never fired (enabled)</span>'
        return "switched off" if key in off else "never fired"

    parts = [f"<h2>Coverage: {_e(name)}</h2>",
             f'<p class="meta">{_e(s.get("ran"))} seeds ran: {_e(s.get("passed"))} passed, {_e(s.get("failed"))} '
             f'failed, {_e(s.get("errors"))} errors</p><div class="grid"><div>']
    kinds_on = s.get("fault_kinds_enabled") or {}
    parts.append("<h3>Fault kinds</h3>")
    parts.append(_table(("fault kind", "fired", "enabled in", ""),
                        ((_e(k), _e(n), f"{_e(kinds_on.get(k, 0))}/{ran}", state(k, n))
                         for k, n in (s.get("fault_kinds_fired") or {}).items()), cls="fault-kinds", num=(1,)))
    fps_on = s.get("failpoints_enabled") or {}
    if s.get("failpoints_fired"):
        parts.append("<h3>Failpoints</h3>")
        parts.append(_table(("failpoint", "fired", "enabled in", ""),
                            ((_e(k), _e(n), f"{_e(fps_on.get(k, 0))}/{ran}", state(k, n))
                             for k, n in s["failpoints_fired"].items()), cls="failpoints", num=(1,)))
    parts.append("</div><div>")
    parts.append("<h3>Invariant checks (all seeds)</h3>")
    parts.append(_table(("invariant", "checks"), ((_e(k), _e(v)) for k, v in (s.get("invariant_checks") or {}).items()),
                        cls="invariants", num=(1,), row_cls=lambda r: "zero" if r[1] == "0" else ""))
    sometimes = s.get("sometimes_reached") or {}
    if sometimes:
        parts.append("<h3>Sometimes-properties (seeds reaching each)</h3>")
        parts.append(_table(("property", "seeds"), ((_e(k), _e(v)) for k, v in sometimes.items()), cls="sometimes",
                            num=(1,), row_cls=lambda r: "zero" if r[1] == "0" else ""))
    parts.append("</div></div>")
    return parts
