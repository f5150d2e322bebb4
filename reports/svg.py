"""The run's timeline as an inline SVG, in simulated calendar time.

Drawn from ``RunResult.timeline`` (``sim.timeline``: fixed bins, capped
marks), top to bottom on one time axis:

- the violation: a red line through every lane, its label in a row of its
  own above them (nothing else is written there, so it is never covered);
- marks: deploys (blue triangles, a faint line through the lanes),
  migrations (purple diamonds), missing migrations (orange), pauses (amber
  bars as long as the pause), broken promises beyond the contract (brown);
  short labels go into a few rows above the symbols, placed left to right
  where they fit, and a label that fits nowhere is left to the symbol's
  tooltip (``<title>``: the full text, no script);
- settled runs per bin as a density band (height and shade by count);
- faults per bin, stacked by kind (a fixed colour per kind, the legend
  below names them with their totals);
- crashes per bin;
- the axis, in days and hours of the simulated calendar
  (``sim.clock.format_calendar``: day 0 is 2026-01-01), ticks at a round
  step chosen for the run's length; the heal instant (faults stop) and the
  end of the duration (the settle phase begins) as dashed lines.

Everything is computed here in Python: the SVG needs no script and no font
beyond the page's own.
"""
from __future__ import annotations

from html import escape
from typing import Any, Callable, Mapping, Sequence

from sim.clock import MS_PER_DAY, MS_PER_HOUR, MS_PER_MINUTE, MS_PER_SECOND, format_calendar, format_span_ms

WIDTH = 1200
LEFT = 150  # lane labels
RIGHT = 24
PLOT_W = WIDTH - LEFT - RIGHT
HEADER_H = 22       # the violation's label
LABEL_ROW_H = 13
LABEL_ROWS = 3
SYMBOL_H = 26  # deploys in its upper half, migrations and the rest in its lower
SETTLED_H = 46
FAULTS_H = 60
CRASHES_H = 28
LANE_GAP = 8
AXIS_H = 40
FONT_PX = 11
CHAR_W = 6.2        # an estimate of a label's width per character at FONT_PX
TICKS_MAX = 13
_STEPS_MS = (MS_PER_SECOND, 5 * MS_PER_SECOND, 15 * MS_PER_SECOND, 30 * MS_PER_SECOND, MS_PER_MINUTE,
             5 * MS_PER_MINUTE, 15 * MS_PER_MINUTE, 30 * MS_PER_MINUTE, MS_PER_HOUR, 2 * MS_PER_HOUR,
             3 * MS_PER_HOUR, 6 * MS_PER_HOUR, 12 * MS_PER_HOUR, MS_PER_DAY, 2 * MS_PER_DAY, 7 * MS_PER_DAY,
             14 * MS_PER_DAY, 30 * MS_PER_DAY, 61 * MS_PER_DAY, 365 * MS_PER_DAY)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# Fault kinds get these colours in sorted order (the same kinds, the same colours in every report).
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac",
           "#86bcb6", "#d37295", "#8cd17d", "#b6992d", "#499894", "#e15759", "#79706e", "#d4a6c8", "#a0cbe8")
MARK_STYLE = {
    "deploy": ("#1f5fbf", "deploy"),
    "migration": ("#7b3fb5", "migration"),
    "migration-missing": ("#e07b00", "migration missing"),
    "pause": ("#d9a400", "pause"),
    "beyond-contract": ("#8b4513", "broken promise"),
}
VIOLATION_COLOUR = "#d00000"


def _f(value: float) -> str:
    return f"{value:.1f}"


def _a(value: Any) -> str:
    return escape(str(value), quote=True)


def tick_step_ms(end_ms: int) -> int:
    """The smallest round step that puts at most ``TICKS_MAX`` ticks on the axis."""
    for step in _STEPS_MS:
        if end_ms / step <= TICKS_MAX:
            return step
    return _STEPS_MS[-1]


def tick_labels(t_ms: int, step_ms: int) -> tuple[str, str]:
    """Two lines under a tick: ``06:00`` / ``day 2``, or ``Jan 03`` / ``day 2``."""
    text = format_calendar(t_ms)  # 2026-01-03 06:00:00.000 (day 2)
    day = text[text.index("(") + 1: -1]
    if step_ms >= MS_PER_DAY:
        return f"{_MONTHS[int(text[5:7]) - 1]} {text[8:10]}", day
    if step_ms >= MS_PER_MINUTE:
        return text[11:16], day
    return text[11:19], day


def short_time(t_ms: int) -> str:
    """``day 2 06:13:05`` (the full calendar time goes into tooltips)."""
    text = format_calendar(t_ms)
    return f"{text[text.index('(') + 1: -1]} {text[11:19]}"


class _Labels:
    """Greedy label rows: a label goes into the first row where it does
    not overlap the previous one, or nowhere."""

    def __init__(self, rows: int) -> None:
        self.ends = [-1e9] * rows

    def place(self, x: float, text: str) -> int | None:
        width = CHAR_W * len(text)
        for row, end in enumerate(self.ends):
            if x - 2 > end + 6 and x + width <= WIDTH - 2:
                self.ends[row] = x + width
                return row
        return None


def render_timeline_svg(timeline: Mapping[str, Any] | None, *, violations: Sequence[Mapping[str, Any]] = (),
                        title: str = "timeline") -> str:
    """The SVG of ``timeline`` (a ``sim.timeline`` dict); ``violations``
    (``{t_ms, invariant, message}``) override the timeline's own (a run's
    JSON has the exact ones). An empty or missing timeline: a note."""
    if not timeline or not timeline.get("bins"):
        return '<p class="note">This result has no timeline (run it again with this loomsim to get one).</p>'
    end_ms = max(1, int(timeline.get("end_ms") or 0))
    bin_ms = int(timeline["bin_ms"])
    violations = list(violations) or list(timeline.get("violations") or ())

    def x(t_ms: float) -> float:
        return LEFT + PLOT_W * min(max(t_ms, 0), end_ms) / end_ms

    top_marks = HEADER_H
    symbols_y = top_marks + LABEL_ROWS * LABEL_ROW_H
    settled_y = symbols_y + SYMBOL_H + LANE_GAP
    faults_y = settled_y + SETTLED_H + LANE_GAP
    crashes_y = faults_y + FAULTS_H + LANE_GAP
    axis_y = crashes_y + CRASHES_H + 4
    lanes_bottom = crashes_y + CRASHES_H
    fault_kinds = sorted(timeline.get("faults") or {})
    colours = {kind: PALETTE[i % len(PALETTE)] for i, kind in enumerate(fault_kinds)}
    legend_y = axis_y + AXIS_H
    legend_rows = _legend_rows(timeline, fault_kinds)
    height = legend_y + 16 * len(legend_rows) + 6

    # Inline in HTML: the parser puts <svg> in the SVG namespace itself (no xmlns: the page names no URL).
    out = [f'<svg class="timeline-svg" viewBox="0 0 {WIDTH} {height}" '
           f'width="100%" role="img" aria-label="{_a(title)}" font-size="{FONT_PX}">',
           f'<g id="timeline" class="timeline" data-end-ms="{end_ms}" data-bin-ms="{bin_ms}" '
           f'data-x0="{LEFT}" data-x1="{LEFT + PLOT_W}">']
    # Lane backgrounds and labels.
    settled = list(timeline.get("settled") or ())
    crashes = list(timeline.get("crashes") or ())
    per_bin_faults = [sum(timeline["faults"][k][i] for k in fault_kinds) for i in range(int(timeline["bins"]))]
    lanes = (("events", symbols_y - LABEL_ROWS * LABEL_ROW_H, LABEL_ROWS * LABEL_ROW_H + SYMBOL_H, None),
             ("settled", settled_y, SETTLED_H, max(settled, default=0)),
             ("faults", faults_y, FAULTS_H, max(per_bin_faults, default=0)),
             ("crashes", crashes_y, CRASHES_H, max(crashes, default=0)))
    for name, y, h, peak in lanes:
        out.append(f'<rect class="lane" x="{LEFT}" y="{y}" width="{PLOT_W}" height="{h}" fill="#f6f7f9"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y + h / 2 + 4:.1f}" text-anchor="end" fill="#333">{_a(name)}</text>')
        if peak is not None:
            out.append(f'<text x="{LEFT - 8}" y="{y + h / 2 + 16:.1f}" text-anchor="end" fill="#888" '
                       f'font-size="9">max {peak}/bin</text>')
    out.append(_axis(end_ms, axis_y, top_marks))
    # The bins.
    bins = int(timeline["bins"])
    out.append('<g class="settled">')
    out.extend(_bars(settled, bin_ms, end_ms, x, settled_y, SETTLED_H, "#2e8b57", "settled", shaded=True))
    out.append('</g><g class="faults">')
    peak = max(per_bin_faults, default=0)
    for i in range(bins):
        start_ms = i * bin_ms
        if not per_bin_faults[i] or start_ms >= end_ms:
            continue
        x0, x1 = x(start_ms), x(start_ms + bin_ms)
        base = faults_y + FAULTS_H
        for kind in fault_kinds:
            count = timeline["faults"][kind][i]
            if count:
                h = FAULTS_H * count / peak
                base -= h
                out.append(f'<rect x="{_f(x0)}" y="{_f(base)}" width="{_f(max(x1 - x0, 0.6))}" height="{_f(h)}" '
                           f'fill="{colours[kind]}"><title>{_a(_bin_title(start_ms, bin_ms, f"{kind}: {count}"))}'
                           f'</title></rect>')
    out.append('</g><g class="crashes">')
    out.extend(_bars(crashes, bin_ms, end_ms, x, crashes_y, CRASHES_H, "#444", "crashes"))
    out.append('</g>')
    taken = _violation_label_span(violations, x)
    out.append(_phases(timeline, end_ms, x, top_marks, lanes_bottom, taken))
    out.append(_marks(timeline, x, symbols_y, top_marks, lanes_bottom))
    out.append(_violations(violations, end_ms, x, lanes_bottom))
    out.append(_legend(legend_rows, legend_y, colours))
    out.append('</g></svg>')
    return "\n".join(out)


def _bin_title(start_ms: int, bin_ms: int, what: str) -> str:
    return f"{what} in {format_calendar(start_ms)} + {format_span_ms(bin_ms)}"


def _axis(end_ms: int, axis_y: float, top: float) -> str:
    step = tick_step_ms(end_ms)
    out = ['<g class="axis">',
           f'<line x1="{LEFT}" y1="{axis_y}" x2="{LEFT + PLOT_W}" y2="{axis_y}" stroke="#333"/>']
    last_day = None
    t_ms = 0
    while t_ms <= end_ms:
        x = LEFT + PLOT_W * t_ms / end_ms
        first, second = tick_labels(t_ms, step)
        anchor = "end" if x > LEFT + PLOT_W - 20 else ("start" if x < LEFT + 20 else "middle")
        out.append(f'<line x1="{_f(x)}" y1="{top}" x2="{_f(x)}" y2="{axis_y + 5}" stroke="#d5d8dd" '
                   f'stroke-width="0.6"/>')
        out.append(f'<text class="tick" x="{_f(x)}" y="{axis_y + 17}" text-anchor="{anchor}" '
                   f'fill="#333">{_a(first)}</text>')
        if second != last_day or step >= MS_PER_DAY:
            out.append(f'<text class="tick-day" x="{_f(x)}" y="{axis_y + 30}" text-anchor="{anchor}" '
                       f'fill="#666">{_a(second)}</text>')
        last_day = second
        t_ms += step
    out.append(f'<text x="{LEFT - 8}" y="{axis_y + 17}" text-anchor="end" fill="#666">simulated time</text>')
    out.append(f'<text x="{LEFT - 8}" y="{axis_y + 30}" text-anchor="end" fill="#999" font-size="9">'
               f'day 0 = 2026-01-01 UTC</text>')
    out.append('</g>')
    return "\n".join(out)


def _violation_label(v: Mapping[str, Any]) -> str:
    return f"✗ {v.get('invariant')} at {short_time(int(v.get('t_ms', 0)))}"


def _violation_label_span(violations: Sequence[Mapping[str, Any]], x: Any) -> tuple[float, float] | None:
    """Where the first violation's label sits in the header row (x from, to)."""
    if not violations:
        return None
    px = x(int(violations[0].get("t_ms", 0)))
    width = CHAR_W * 1.1 * len(_violation_label(violations[0]))  # bold
    return (px - width - 5, px) if px > LEFT + PLOT_W * 0.6 else (px, px + width + 5)


def _phases(timeline: Mapping[str, Any], end_ms: int, x: Any, top: float, bottom: float,
            taken: tuple[float, float] | None) -> str:
    """The heal and settle instants: dashed lines, labelled in the header
    row where the violation's label leaves room (else the tooltip says)."""
    out = ['<g class="phases">']
    for key, label in (("heal_ms", "faults heal"), ("duration_ms", "settle")):
        t_ms = timeline.get(key)
        if not isinstance(t_ms, int) or not 0 < t_ms < end_ms:
            continue
        px = x(t_ms)
        out.append(f'<line class="phase" data-t-ms="{t_ms}" x1="{_f(px)}" y1="{top}" x2="{_f(px)}" y2="{bottom}" '
                   f'stroke="#777" stroke-dasharray="4 3"><title>{_a(label)}: {_a(format_calendar(t_ms))}</title>'
                   f'</line>')
        anchor, dx = ("end", -3) if px > LEFT + PLOT_W - 80 else ("start", 3)
        width = CHAR_W * len(label)
        span = (px - width - 3, px) if anchor == "end" else (px, px + width + 3)
        if taken is not None and span[0] < taken[1] + 4 and taken[0] - 4 < span[1]:
            continue
        taken_here = span
        out.append(f'<text x="{_f(px + dx)}" y="15" text-anchor="{anchor}" fill="#666">{_a(label)}</text>')
        taken = taken_here if taken is None else (min(taken[0], span[0]), max(taken[1], span[1]))
    out.append('</g>')
    return "\n".join(out)


def _short_label(mark: Mapping[str, Any]) -> str | None:
    """The few words a mark is labelled with on the strip (None: tooltip only)."""
    kind = mark.get("kind")
    label = str(mark.get("label", ""))
    if kind == "deploy":
        return label.split(" (")[0] + (" ✗" if "broken" in label else "")
    if kind == "migration-missing":
        return "migration missing"
    if kind == "beyond-contract":
        return label.split(" at ")[0]
    return None


def _marks(timeline: Mapping[str, Any], x: Any, symbols_y: float, top: float, bottom: float) -> str:
    out = ['<g class="marks">']
    labels = _Labels(LABEL_ROWS)
    mid = symbols_y + SYMBOL_H - 7  # below the deploys' triangles
    if not any(m.get("kind") in MARK_STYLE for m in timeline.get("marks") or ()):
        out.append(f'<text x="{LEFT + 8}" y="{_f(mid + 4)}" fill="#999">no deploys, migrations, pauses or broken '
                   'promises in this run</text>')
    for mark in sorted(timeline.get("marks") or (), key=lambda m: m.get("t_ms", 0)):
        kind = mark.get("kind")
        if kind not in MARK_STYLE:
            continue  # crashes are drawn per bin
        colour = MARK_STYLE[kind][0]
        t_ms = int(mark.get("t_ms", 0))
        px = x(t_ms)
        tip = f'<title>{_a(mark.get("label"))} — {_a(format_calendar(t_ms))} ({_a(mark.get("node"))})</title>'
        attrs = f'class="mark mark-{_a(kind)}" data-t-ms="{t_ms}"'
        if kind == "deploy":
            out.append(f'<line x1="{_f(px)}" y1="{symbols_y}" x2="{_f(px)}" y2="{bottom}" stroke="{colour}" '
                       f'stroke-opacity="0.35"/>')
            out.append(f'<path {attrs} d="M{_f(px - 5)},{symbols_y + 1} L{_f(px + 5)},{symbols_y + 1} '
                       f'L{_f(px)},{symbols_y + 11} Z" fill="{colour}">{tip}</path>')
        elif kind == "pause":
            w = max(2.0, x(t_ms + int(mark.get("duration_ms") or 0)) - px)
            out.append(f'<rect {attrs} x="{_f(px)}" y="{_f(mid - 4)}" width="{_f(w)}" height="8" fill="{colour}">'
                       f'{tip}</rect>')
        else:
            out.append(f'<path {attrs} d="M{_f(px)},{_f(mid - 6)} L{_f(px + 5)},{_f(mid)} L{_f(px)},{_f(mid + 6)} '
                       f'L{_f(px - 5)},{_f(mid)} Z" fill="{colour}">{tip}</path>')
        text = _short_label(mark)
        if text is not None:
            row = labels.place(px - 4, text)
            if row is not None:
                y = symbols_y - (LABEL_ROWS - 1 - row) * LABEL_ROW_H - 3
                out.append(f'<text class="mark-label" x="{_f(px - 4)}" y="{y}" fill="{colour}">{_a(text)}</text>')
    out.append('</g>')
    return "\n".join(out)


def _violations(violations: Sequence[Mapping[str, Any]], end_ms: int, x: Any, bottom: float) -> str:
    out = ['<g class="violations">']
    for index, v in enumerate(violations[:1]):  # the first stopped the run; the others are in the tables
        t_ms = int(v.get("t_ms", 0))
        px = x(t_ms)
        label = _violation_label(v)
        anchor, dx = ("end", -5) if px > LEFT + PLOT_W * 0.6 else ("start", 5)
        out.append(f'<line class="violation" data-t-ms="{t_ms}" data-invariant="{_a(v.get("invariant"))}" '
                   f'x1="{_f(px)}" y1="4" x2="{_f(px)}" y2="{bottom}" stroke="{VIOLATION_COLOUR}" '
                   f'stroke-width="2"><title>{_a(v.get("invariant"))}: {_a(v.get("message"))} — '
                   f'{_a(format_calendar(t_ms))}</title></line>')
        out.append(f'<text class="violation-label" x="{_f(px + dx)}" y="15" text-anchor="{anchor}" '
                   f'fill="{VIOLATION_COLOUR}" font-weight="bold">{_a(label)}</text>')
    out.append('</g>')
    return "\n".join(out)


def _legend_rows(timeline: Mapping[str, Any], fault_kinds: Sequence[str]) -> list[list[tuple[str, str, str]]]:
    """Legend entries ``(swatch kind, colour key, text)`` in rows that fit the width."""
    entries: list[tuple[str, str, str]] = [("fault", kind, f"{kind} {sum(timeline['faults'][kind])}")
                                           for kind in fault_kinds]
    counts: dict[str, int] = {}
    for mark in timeline.get("marks") or ():
        counts[mark.get("kind")] = counts.get(mark.get("kind"), 0) + 1
    dropped = timeline.get("marks_dropped") or {}
    for kind, (_, name) in MARK_STYLE.items():
        n = counts.get(kind, 0) + dropped.get(kind, 0)
        if n:
            entries.append(("mark", kind, f"{name} {n}"))
    entries.append(("note", "", f"bins of {format_span_ms(int(timeline['bin_ms']))}"))
    rows: list[list[tuple[str, str, str]]] = [[]]
    used = LEFT
    for entry in entries:
        w = 22 + CHAR_W * len(entry[2])
        if used + w > WIDTH - RIGHT and rows[-1]:
            rows.append([])
            used = LEFT
        rows[-1].append(entry)
        used += w
    return rows


def _legend(rows: Sequence[Sequence[tuple[str, str, str]]], y0: float, colours: Mapping[str, str]) -> str:
    out = ['<g class="legend">']
    for r, row in enumerate(rows):
        y = y0 + 16 * r
        px = float(LEFT)
        for what, key, text in row:
            if what == "fault":
                out.append(f'<rect x="{_f(px)}" y="{y}" width="11" height="11" fill="{colours[key]}"/>')
            elif what == "mark":
                out.append(f'<rect x="{_f(px)}" y="{y}" width="11" height="11" rx="3" fill="{MARK_STYLE[key][0]}"/>')
            out.append(f'<text x="{_f(px + (15 if what != "note" else 0))}" y="{y + 10}" fill="#333">{_a(text)}</text>')
            px += 22 + CHAR_W * len(text)
    out.append('</g>')
    return "\n".join(out)


def _bars(counts: Sequence[int], bin_ms: int, end_ms: int, x: Callable[[int], float], lane_y: float,
          lane_h: float, fill: str, what: str, *, shaded: bool = False) -> list[str]:
    """One lane's bars: a bin's height is its count over the lane's peak
    (``shaded``: denser bins darker too); bins past the run's end are not drawn."""
    peak = max(counts, default=0)
    bars = []
    for i, count in enumerate(counts):
        start_ms = i * bin_ms
        if not count or start_ms >= end_ms:
            continue
        x0, x1 = x(start_ms), x(start_ms + bin_ms)
        h = lane_h * count / peak
        shade = f' fill-opacity="{0.35 + 0.65 * count / peak:.2f}"' if shaded else ""
        bars.append(f'<rect x="{_f(x0)}" y="{_f(lane_y + lane_h - h)}" width="{_f(max(x1 - x0, 0.6))}" '
                    f'height="{_f(h)}" fill="{fill}"{shade}>'
                    f'<title>{_a(_bin_title(start_ms, bin_ms, f"{count} {what}"))}</title></rect>')
    return bars
