"""The report of an explore search: ``loomsim explore ... --json`` rendered for a reader.

``markdown(summary)`` (a CI job summary) and ``html(summary)`` (one
self-contained page) render a ``loomsim-explore/2`` summary; ``render(summary,
path)`` writes one of them, chosen by the path's suffix (``.md``,
``.html``), as a new file (a taken name gets ``-2``, ``-3``, ...: an
earlier report is never overwritten). From the command line:
``python -m reports.explore SUMMARY.json REPORT.html``.

What they show, in this order:

- the verdict, first: ``FAILED (exit 1)`` when the search found a failure
  (what ``loomsim explore`` exits with), else ``PASS (exit 0): no
  failures``, with the scenario, the search's seed, runs, corpus size,
  features reached and failures;
- each failure with its invariants and the command (and repro file) that
  reproduces it;
- the feedback reached over the search: features (y) after each run over
  the cumulative CPU seconds the runs took (``measured.cpu_s_after_run``;
  without it, over the run index). The HTML draws it as an inline SVG line;
  the Markdown, which links and embeds nothing, gives a table of the curve
  at a few points;
- the corpus by what each entry added: its mutation, the entry it was
  mutated from, how many features it added and the first few;
- each feature family: reached, of its universe where it has one;
- the rarest features reached, and the state-table transitions never taken.

The summary's ``measured`` is what one machine took (everything else is
the search's, the same on every machine); the report says which parts are
measured. The same summary renders to the same bytes. Like every report,
this reads only the dict it is given (and ``sim``'s never-overwrite naming).
"""
from __future__ import annotations

import json
import math
import sys
from typing import Any, Mapping, Sequence

from reports.html import CSS, _e, _table
from reports.markdown import cell, code
from reports.verdict import short
from sim.artifacts import write_new
from sim.clock import format_span_ms

EXPLORE_FORMAT = "loomsim-explore/2"
EXIT_PASS, EXIT_FAILED = 0, 1  # ``loomsim explore``'s: a failure found is exit 1
ADDED_SHOWN = 5          # of an entry's added features, in its row
CURVE_ROWS_MAX = 11      # the Markdown table of the curve
CORPUS_ROWS_MAX = 500    # corpus entries in a table; the JSON has them all
NEVER_TAKEN_MD_MAX = 200
NEVER_TAKEN_HTML_MAX = 2_000
FEATURES_HTML_MAX = 5_000  # the HTML's full list of features reached (in a <details>)
GROWTH_MARKS_MAX = 500   # circles where the corpus grew

# The plot's geometry (pixels of the viewBox).
PLOT_WIDTH, PLOT_HEIGHT = 900, 320
PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM = 64, 20, 16, 44
TICKS_MAX = 6
LINE_COLOUR, GROWTH_COLOUR = "#1f5fbf", "#2e8b57"


class ExploreReportError(ValueError):
    """A body that is not an explore summary, or a path of no known report kind (one line)."""


def check(summary: Any) -> Mapping[str, Any]:
    """``summary`` if it is a ``loomsim-explore/2`` body, else ``ExploreReportError``."""
    fmt = summary.get("format") if isinstance(summary, Mapping) else None
    if fmt != EXPLORE_FORMAT:
        raise ExploreReportError(f"not an explore summary: format {fmt!r} (expected {EXPLORE_FORMAT}, "
                                 "from loomsim explore ... --json)")
    return summary


# -- what both formats read -----------------------------------------------------------------


def exit_code(summary: Mapping[str, Any]) -> int:
    """What ``loomsim explore`` exited with for this summary: 1 if it found a failure."""
    return EXIT_FAILED if summary.get("failures") else EXIT_PASS


def _plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def verdict(summary: Mapping[str, Any]) -> str:
    """One line, the first of both reports: how the search ended (the exit code), then what it covered."""
    found = summary.get("failures") or ()
    what = (f"{summary.get('scenario')}, search seed {summary.get('seed')}: {_plural(int(summary.get('runs') or 0), 'run')}, "
            f"corpus {_plural(int(summary.get('corpus_size') or 0), 'entry', 'entries')}, "
            f"{_plural(len(summary.get('features') or {}), 'feature')} reached")
    if found:
        return f"FAILED (exit {EXIT_FAILED}): {_plural(len(found), 'failure')} found — {what}"
    return f"PASS (exit {EXIT_PASS}): no failures — {what}"


def _knobs(knobs: Any) -> str:
    return " ".join(f"{k}={v}" for k, v in (knobs or {}).items()) or "-"


def _seed(item: Mapping[str, Any]) -> str:
    """An input's seed, and its branch when it has one ("7, branch 3 at 1m";
    a re-keyed family is named: "7, scheduling re-keyed (3) at 1m")."""
    branch = item.get("branch")
    if not isinstance(branch, Mapping):
        return str(item.get("seed"))
    streams = ",".join(str(s) for s in branch.get("streams") or ())
    what = f"{streams} re-keyed ({branch.get('key')})" if streams else f"branch {branch.get('key')}"
    return f"{item.get('seed')}, {what} at {_span(branch.get('fork_at_ms'))}"


def _search_shape(summary: Mapping[str, Any]) -> str:
    """How fresh inputs were made: "fresh seeds only", "K branches a seed at T", or ""."""
    branches = summary.get("branches")
    if isinstance(branches, Mapping):
        return f"{branches.get('per_seed')} branches of each seed at {_span(branches.get('fork_at_ms'))}"
    return "fresh seeds only, no mutation" if summary.get("fresh_only") else ""


def _moves(summary: Mapping[str, Any]) -> list[tuple[str, int, int, int, str]]:
    """Each move of the search (``fresh``, a mutation) with its runs, the
    corpus entries and features it added, and features added a run: what
    the search's scheduling has to go on."""
    moves = summary.get("moves")
    if not isinstance(moves, Mapping):
        return []
    rows = []
    for name, move in sorted(moves.items()):
        move = move if isinstance(move, Mapping) else {}
        runs, entries, added = (int(move.get(k) or 0) for k in ("runs", "entries", "added"))
        rows.append((str(name), runs, entries, added, f"{added / runs:.1f}" if runs else "-"))
    return rows


def _span(duration_ms: Any) -> str:
    return format_span_ms(duration_ms) if isinstance(duration_ms, int) and duration_ms >= 0 else str(duration_ms)


def curve(summary: Mapping[str, Any]) -> tuple[list[tuple[float, int, int, int]], bool]:
    """The feedback curve: ``(x, run, features, corpus)`` after each run, and
    whether x is measured CPU seconds (``measured.cpu_s_after_run``, when it
    has one value per run) or else the run index."""
    timeline = [t for t in summary.get("timeline") or () if isinstance(t, Mapping)]
    measured = summary.get("measured") if isinstance(summary.get("measured"), Mapping) else {}
    cpu = measured.get("cpu_s_after_run") if measured else None
    timed = isinstance(cpu, list) and len(cpu) == len(timeline) and len(timeline) > 0 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in cpu)
    points = []
    for index, step in enumerate(timeline):
        run = int(step.get("run", index))
        x = float(cpu[index]) if timed else float(run)
        points.append((x, run, int(step.get("features") or 0), int(step.get("corpus") or 0)))
    return points, timed


def _curve_rows(points: Sequence[tuple[float, int, int, int]]) -> list[tuple[float, int, int, int]]:
    """At most ``CURVE_ROWS_MAX`` points, evenly spread, the first and last always."""
    if len(points) <= CURVE_ROWS_MAX:
        return list(points)
    last = len(points) - 1
    picks = sorted({round(i * last / (CURVE_ROWS_MAX - 1)) for i in range(CURVE_ROWS_MAX)})
    return [points[i] for i in picks]


def _added(entry: Mapping[str, Any]) -> tuple[list[str], int]:
    added = [str(a) for a in entry.get("added") or ()]
    return added[:ADDED_SHOWN], max(0, len(added) - ADDED_SHOWN)


def _parent(entry: Mapping[str, Any]) -> str:
    parent = entry.get("parent")
    return f"#{parent}" if isinstance(parent, int) else "-"


def _seconds(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _share(reached: Any, universe: Any) -> str:
    if isinstance(universe, int) and universe > 0 and isinstance(reached, int):
        return f"{100 * reached / universe:.0f}%"
    return ""


# -- Markdown -------------------------------------------------------------------------------


def _cc(text: Any) -> str:
    """A code span inside a table cell (pipes escaped)."""
    return code(short(text, 200)).replace("|", "\\|")


def markdown(summary: Mapping[str, Any]) -> str:
    """The Markdown report (no links, no images: the curve is a table)."""
    summary = check(summary)
    found = list(summary.get("failures") or ())
    icon = "❌" if found else "✅"
    lines = [f"# {icon} loomsim explore {verdict(summary)}", ""]
    measured = summary.get("measured") if isinstance(summary.get("measured"), Mapping) else None
    took = ""
    if measured and measured.get("cpu_s") is not None:
        took = (f"; this machine took {_seconds(measured.get('cpu_s'))} CPU-s "
                f"({_seconds(measured.get('wall_s'))} s wall, measured)")
    lines.append(f"{cell(summary.get('scenario'))} on {cell(summary.get('store'))}, search seed {summary.get('seed')}: "
                 f"{summary.get('runs')} runs in batches of {summary.get('batch')}, corpus of "
                 f"{summary.get('corpus_size')}, {_plural(len(summary.get('features') or {}), 'feature')} reached, "
                 f"{_plural(len(found), 'failure')}{took}")
    if _search_shape(summary):
        lines.append(f"(fresh inputs: {_search_shape(summary)})")
    if found:
        lines += ["", "## Failures", ""]
        for failure in found[:CORPUS_ROWS_MAX]:
            violations = ", ".join(str(v) for v in failure.get("violations") or ()) or "-"
            lines.append(f"- **{cell(failure.get('status'))}** seed {cell(_seed(failure))} "
                         f"(knobs {cell(_knobs(failure.get('knobs')))}, {_span(failure.get('duration_ms'))}): "
                         f"{code(short(violations, 300))}")
            if failure.get("repro_command"):
                lines.append(f"  - reproduce: {code(failure['repro_command'])}")
            if failure.get("repro_file"):
                lines.append(f"  - repro file: {code(failure['repro_file'])}")
        if len(found) > CORPUS_ROWS_MAX:
            lines.append(f"- … and {len(found) - CORPUS_ROWS_MAX} more (see the summary's JSON)")
    points, timed = curve(summary)
    lines += ["", "## Feedback over the search", ""]
    if not points:
        lines.append("No runs: nothing reached.")
    else:
        axis = "CPU s (measured)" if timed else "after run"
        lines += [f"Features reached after each run, {'over the CPU seconds the runs took' if timed else 'by run'} "
                  f"(at {len(_curve_rows(points))} of {len(points)} points):", "",
                  f"| {axis} | run | features | corpus |" if timed else "| after run | features | corpus |",
                  "| ---: | ---: | ---: | ---: |" if timed else "| ---: | ---: | ---: |"]
        for x, run, features, size in _curve_rows(points):
            lines.append(f"| {x:.1f} | {run} | {features} | {size} |" if timed else f"| {run} | {features} | {size} |")
    lines += ["", "## Corpus: what each entry added", ""]
    entries = list(summary.get("corpus") or ())
    if not entries:
        lines.append("The corpus is empty: no run added a feature (or every run failed).")
    else:
        lines += ["| entry | run | mutation | parent | seed | knobs | duration | script | added | first added |",
                  "| --- | ---: | --- | --- | ---: | --- | --- | ---: | ---: | --- |"]
        for index, entry in enumerate(entries[:CORPUS_ROWS_MAX]):
            shown, more = _added(entry)
            first = ", ".join(_cc(a) for a in shown) + (f" … (+{more} more)" if more else "")
            script = entry.get("script_entries")
            lines.append(f"| #{index} | {entry.get('run')} | {cell(entry.get('mutation'))} | {_parent(entry)} | "
                         f"{cell(_seed(entry))} | {cell(_knobs(entry.get('knobs')))} | {_span(entry.get('duration_ms'))} "
                         f"| {'-' if script is None else script} | {len(entry.get('added') or ())} | {first} |")
        if len(entries) > CORPUS_ROWS_MAX:
            lines.append(f"\n… and {len(entries) - CORPUS_ROWS_MAX} more entries (see the summary's JSON)")
    moves = _moves(summary)
    if moves:
        lines += ["", "## What each move gave", "",
                  "| move | runs | corpus entries | features added | added a run |", "| --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {cell(name)} | {runs} | {entries} | {added} | {rate} |" for name, runs, entries, added, rate in moves]
    families = summary.get("families") or {}
    lines += ["", "## Feature families", ""]
    if families:
        lines += ["| family | reached | universe | share |", "| --- | ---: | ---: | ---: |"]
        for name, fam in families.items():
            fam = fam if isinstance(fam, Mapping) else {}
            universe = fam.get("universe")
            lines.append(f"| {cell(name)} | {fam.get('reached')} | {'open' if universe is None else universe} | "
                         f"{_share(fam.get('reached'), universe)} |")
    else:
        lines.append("None reached.")
    rarest = list(summary.get("rarest") or ())
    lines += ["", "## Rarest features reached", ""]
    if rarest:
        lines += ["| feature | runs reaching it |", "| --- | ---: |"]
        lines += [f"| {_cc(name)} | {count} |" for name, count in rarest]
    else:
        lines.append("None.")
    never = list(summary.get("never_taken") or ())
    lines += ["", f"## Transitions never taken ({len(never)})", ""]
    lines += [f"- {code(short(name, 200))}" for name in never[:NEVER_TAKEN_MD_MAX]] or [
        "None: every transition of the state tables was taken."]
    if len(never) > NEVER_TAKEN_MD_MAX:
        lines.append(f"- … and {len(never) - NEVER_TAKEN_MD_MAX} more (see the summary's JSON)")
    return "\n".join(lines) + "\n"


# -- the plot -------------------------------------------------------------------------------


def _f(value: float) -> str:
    return f"{value:.1f}"


def nice_ticks(top: float) -> list[float]:
    """Round ticks from 0 to at least ``top`` (1, 2 or 5 times a power of ten apart), at most ``TICKS_MAX``."""
    top = max(top, 1e-9)
    magnitude = 10 ** math.floor(math.log10(top / TICKS_MAX)) if top > 0 else 1
    for factor in (1, 2, 5, 10, 20, 50):
        step = factor * magnitude
        if math.ceil(top / step) <= TICKS_MAX - 1:
            break
    count = max(1, math.ceil(top / step - 1e-9))
    return [round(i * step, 10) for i in range(count + 1)]


def _label(value: float) -> str:
    return f"{value:g}"


def feedback_svg(summary: Mapping[str, Any]) -> str:
    """The curve (``curve``) as an inline SVG: one polyline (class
    ``features``) with a point per run, circles where the corpus grew."""
    points, timed = curve(summary)
    if not points:
        return '<p class="note">No runs: nothing to draw.</p>'
    width, height = PLOT_WIDTH - PLOT_LEFT - PLOT_RIGHT, PLOT_HEIGHT - PLOT_TOP - PLOT_BOTTOM
    x_ticks = nice_ticks(max(p[0] for p in points) or 1.0)
    y_ticks = nice_ticks(float(max(max(p[2] for p in points), 1)))
    x_top, y_top = x_ticks[-1], y_ticks[-1]

    def px(x: float) -> float:
        return PLOT_LEFT + width * x / x_top

    def py(y: float) -> float:
        return PLOT_TOP + height * (1 - y / y_top)

    x_name = "cumulative CPU seconds (measured on this machine)" if timed else "run"
    out = [f'<svg class="feedback-svg" viewBox="0 0 {PLOT_WIDTH} {PLOT_HEIGHT}" width="100%" role="img" '
           f'aria-label="features reached over {_e(x_name)}" font-size="11">',
           f'<rect x="{PLOT_LEFT}" y="{PLOT_TOP}" width="{width}" height="{height}" fill="#f6f7f9"/>']
    for tick in y_ticks:
        y = py(tick)
        out.append(f'<line x1="{PLOT_LEFT}" y1="{_f(y)}" x2="{PLOT_LEFT + width}" y2="{_f(y)}" stroke="#d5d8dd" '
                   f'stroke-width="0.6"/>')
        out.append(f'<text x="{PLOT_LEFT - 6}" y="{_f(y + 4)}" text-anchor="end" fill="#333">{_label(tick)}</text>')
    for tick in x_ticks:
        x = px(tick)
        out.append(f'<line x1="{_f(x)}" y1="{PLOT_TOP}" x2="{_f(x)}" y2="{PLOT_TOP + height + 4}" stroke="#d5d8dd" '
                   f'stroke-width="0.6"/>')
        out.append(f'<text x="{_f(x)}" y="{PLOT_TOP + height + 17}" text-anchor="middle" fill="#333">'
                   f'{_label(tick)}</text>')
    out.append(f'<text x="{PLOT_LEFT + width / 2:.1f}" y="{PLOT_HEIGHT - 6}" text-anchor="middle" fill="#555">'
               f'{_e(x_name)}</text>')
    out.append(f'<text x="14" y="{PLOT_TOP + height / 2:.1f}" text-anchor="middle" fill="#555" '
               f'transform="rotate(-90 14 {PLOT_TOP + height / 2:.1f})">features reached</text>')
    joined = " ".join(f"{_f(px(x))},{_f(py(f))}" for x, _, f, _ in points)
    out.append(f'<polyline class="features" points="{joined}" fill="none" stroke="{LINE_COLOUR}" '
               f'stroke-width="2" stroke-linejoin="round"/>')
    grew, before = [], 0
    for x, run, features, size in points:
        if size > before:
            grew.append((x, run, features, size))
        before = size
    out.append('<g class="corpus-grew">')
    for x, run, features, size in grew[:GROWTH_MARKS_MAX]:
        at = f"{x:.1f} CPU-s, " if timed else ""
        out.append(f'<circle cx="{_f(px(x))}" cy="{_f(py(features))}" r="3" fill="{GROWTH_COLOUR}">'
                   f'<title>run {run}: {at}{features} features, corpus {size}</title></circle>')
    out.append("</g></svg>")
    return "\n".join(out)


# -- HTML -----------------------------------------------------------------------------------

EXTRA_CSS = """
.feedback-box { border: 1px solid #e3e6eb; border-radius: 6px; padding: 6px; }
ul.never { columns: 2; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
"""


def _codes(names: Sequence[str]) -> str:
    return ", ".join(f"<code>{_e(n)}</code>" for n in names)


def html(summary: Mapping[str, Any]) -> str:
    """The HTML report: one self-contained page, the curve inline as SVG."""
    summary = check(summary)
    found = list(summary.get("failures") or ())
    parts = [f'<h1 class="{"fail" if found else "pass"}">{_e(verdict(summary))}</h1>']
    measured = summary.get("measured") if isinstance(summary.get("measured"), Mapping) else None
    meta = [("scenario", summary.get("scenario")), ("search seed", summary.get("seed")),
            ("store", summary.get("store")), ("runs", summary.get("runs")), ("batch", summary.get("batch")),
            ("corpus", summary.get("corpus_size")), ("features reached", len(summary.get("features") or {})),
            ("failures", len(found)), ("fresh inputs", _search_shape(summary) or None)]
    if measured:
        meta += [("CPU (measured)", f"{_seconds(measured.get('cpu_s'))} s"),
                 ("wall (measured)", f"{_seconds(measured.get('wall_s'))} s")]
    parts.append('<p class="meta">' + "".join(f"<span>{_e(k)}: <b>{_e(v)}</b></span>" for k, v in meta
                                              if v is not None) + "</p>")
    if found:
        parts.append(f"<h2>Failures ({len(found)})</h2>")
        for failure in found[:CORPUS_ROWS_MAX]:
            violations = ", ".join(str(v) for v in failure.get("violations") or ()) or "-"
            parts.append('<div class="failure">'
                         f"<p><b>{_e(failure.get('status'))}: {_e(short(violations, 400))}</b> (seed "
                         f"{_e(_seed(failure))}, knobs {_e(_knobs(failure.get('knobs')))}, "
                         f"{_e(_span(failure.get('duration_ms')))})</p>"
                         + (f'<p>reproduce:</p><pre class="repro"><code>{_e(failure["repro_command"])}</code></pre>'
                            if failure.get("repro_command") else "")
                         + (f"<p>repro file: <code>{_e(failure['repro_file'])}</code></p>"
                            if failure.get("repro_file") else "")
                         + "</div>")
        if len(found) > CORPUS_ROWS_MAX:
            parts.append(f'<p class="note">… and {len(found) - CORPUS_ROWS_MAX} more in the summary\'s JSON.</p>')
    points, timed = curve(summary)
    parts.append("<h2>Feedback over the search</h2>")
    parts.append('<p class="note">' + ("Features reached after each run, over the cumulative CPU seconds the runs "
                                       "took on the machine that searched (a measurement: another machine draws "
                                       "another x axis, the same curve's shape)."
                                       if timed else "Features reached after each run, by run.")
                 + " Green dots: runs whose input joined the corpus.</p>")
    parts.append('<div class="feedback-box">' + feedback_svg(summary) + "</div>")
    entries = list(summary.get("corpus") or ())
    parts.append(f"<h2>Corpus: what each entry added ({len(entries)})</h2>")
    if not entries:
        parts.append('<p class="note">The corpus is empty: no run added a feature (or every run failed).</p>')
    else:
        rows = []
        for index, entry in enumerate(entries[:CORPUS_ROWS_MAX]):
            shown, more = _added(entry)
            first = _codes(shown) + (f" … and {more} more" if more else "")
            script = entry.get("script_entries")
            rows.append((f"#{index}", _e(entry.get("run")), _e(entry.get("mutation")), _e(_parent(entry)),
                         _e(_seed(entry)), _e(_knobs(entry.get("knobs"))), _e(_span(entry.get("duration_ms"))),
                         "-" if script is None else _e(script), _e(len(entry.get("added") or ())), first,
                         f"<code>{_e(entry['file'])}</code>" if entry.get("file") else ""))
        parts.append(_table(("entry", "run", "mutation", "parent", "seed", "knobs", "duration", "script",
                             "added", "first added", "file"), rows, cls="corpus", num=(1, 4, 7, 8)))
        if len(entries) > CORPUS_ROWS_MAX:
            parts.append(f'<p class="note">… and {len(entries) - CORPUS_ROWS_MAX} more in the summary\'s JSON.</p>')
    moves = _moves(summary)
    if moves:
        parts.append("<h2>What each move gave</h2>")
        parts.append(_table(("move", "runs", "corpus entries", "features added", "added a run"),
                            ((_e(n), _e(r), _e(e), _e(a), _e(rate)) for n, r, e, a, rate in moves), cls="moves",
                            num=(1, 2, 3, 4)))
    parts.append('<div class="grid"><div>')
    families = summary.get("families") or {}
    parts.append("<h2>Feature families</h2>")
    fam_rows = []
    for name, fam in families.items():
        fam = fam if isinstance(fam, Mapping) else {}
        universe = fam.get("universe")
        reached = fam.get("reached")
        fam_rows.append((_e(name), _e(reached) if universe is None else f"{_e(reached)}/{_e(universe)}",
                         "open" if universe is None else _e(universe), _e(_share(reached, universe))))
    parts.append(_table(("family", "reached", "universe", "share"), fam_rows, cls="families", num=(1, 2, 3))
                 if fam_rows else '<p class="note">None reached.</p>')
    parts.append("</div><div>")
    rarest = list(summary.get("rarest") or ())
    parts.append("<h2>Rarest features reached</h2>")
    parts.append(_table(("feature", "runs reaching it"), ((f"<code>{_e(n)}</code>", _e(c)) for n, c in rarest),
                        cls="rarest", num=(1,)) if rarest else '<p class="note">None.</p>')
    parts.append("</div></div>")
    never = list(summary.get("never_taken") or ())
    parts.append(f"<h2>Transitions never taken ({len(never)})</h2>")
    if never:
        parts.append('<ul class="never">' + "".join(f"<li>{_e(n)}</li>" for n in never[:NEVER_TAKEN_HTML_MAX])
                     + "</ul>")
        if len(never) > NEVER_TAKEN_HTML_MAX:
            parts.append(f'<p class="note">… and {len(never) - NEVER_TAKEN_HTML_MAX} more in the summary\'s '
                         "JSON.</p>")
    else:
        parts.append('<p class="note">None: every transition of the state tables was taken.</p>')
    features = summary.get("features") or {}
    if features:
        listed = sorted(features.items())[:FEATURES_HTML_MAX]
        parts.append(f"<h2>Every feature reached ({len(features)})</h2><details><summary>by name, with the runs "
                     "reaching each</summary>" + _table(("feature", "runs"), ((f"<code>{_e(n)}</code>", _e(c))
                                                                           for n, c in listed),
                                                       cls="features", num=(1,)) + "</details>")
    title = f"loomsim explore {'FAILED' if found else 'PASS'}: {summary.get('scenario')} seed {summary.get('seed')}"
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"/>'
            '<meta name="viewport" content="width=device-width, initial-scale=1"/>'
            f"<title>{_e(title)}</title><style>{CSS}{EXTRA_CSS}</style></head>\n<body><main>\n"
            + "\n".join(parts) + "\n</main></body></html>\n")


# -- writing --------------------------------------------------------------------------------

RENDERERS = {".md": markdown, ".html": html}


def render(summary: Mapping[str, Any], path: str) -> str:
    """Write the report of ``summary`` to ``path`` as a new file (a taken
    name: the next free one, ``-2``, ...), Markdown or HTML by its suffix;
    return the path written. ``ExploreReportError`` (a ``ValueError``) for
    another suffix or a body that is not an explore summary, before any
    file is made; ``OSError`` if it cannot be written."""
    suffix = next((s for s in RENDERERS if path.lower().endswith(s)), None)
    if suffix is None:
        raise ExploreReportError(f"explore report {path!r}: expected a name ending in .md or .html")
    text = RENDERERS[suffix](summary)
    return write_new(path, lambda _name: text)


def main(argv: Sequence[str]) -> int:
    """``python -m reports.explore SUMMARY.json REPORT.(md|html)``."""
    if len(argv) != 2:
        print("loomsim: error: expected two arguments: python -m reports.explore SUMMARY.json REPORT.md|REPORT.html",
              file=sys.stderr)
        return 2
    try:
        with open(argv[0], encoding="utf-8") as handle:
            summary = json.load(handle)
    except OSError as error:
        print(f"loomsim: error: cannot read {argv[0]}: {error.strerror or error}", file=sys.stderr)
        return 2
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        print(f"loomsim: error: {argv[0]} is not JSON: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    try:
        check(summary)
    except ExploreReportError as error:
        print(f"loomsim: error: {argv[0]}: {error}", file=sys.stderr)
        return 2
    try:
        written = render(summary, argv[1])
    except (OSError, ValueError) as error:  # ExploreReportError is a ValueError
        reason = f"cannot write {argv[1]}: {error.strerror}" if isinstance(error, OSError) and error.strerror else error
        print(f"loomsim: error: {' '.join(str(reason).split())}", file=sys.stderr)
        return 2
    print(f"report: {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
