# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The drill's timeline as a self-contained SVG picture (1000 px wide, about 300 high). Pure.

A time axis from the injection (t=0) to the last event, one marker and label per event (inject, detect,
alert, quarantine, requeue, resume, rollback, verify), and below it one bar per loop step: the bar runs
from t=0 to the step's deadline and is coloured by the verdict, and a dark mark shows when the step was
seen. The axis ends at the last event, not at the longest deadline, so that the seconds that matter stay
readable; a deadline past the end is drawn to the axis' end with an arrow. Each step's verdict, when it
was seen and its deadline are written in a column on the right.

Plain string building: no fonts, images or scripts from elsewhere, so the picture renders offline and
inline in the HTML page. Labels are placed on rows so that close events (detect and alert, seconds
apart) do not overlap.
"""

from __future__ import annotations

import html
import math
from typing import Any, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.report import document

WIDTH = 1000
LEFT, RIGHT = 150, 740  # the axis: step titles in the left margin, step verdicts on the right
LABELS_X = 760
CHAR_W = 6.6  # a generous average advance of 11 px sans-serif, for placing labels
ROW_H = 16
BAR_ROW_H = 24
EVENT_COLOURS = {
    "inject": "#c62828", "detect": "#ef6c00", "alert": "#f9a825", "quarantine": "#6a1b9a",
    "requeue": "#1565c0", "resume": "#2e7d32", "rollback": "#455a64", "verify": "#00838f", "abort": "#b71c1c",
}
# verdict -> (bar fill, mark and outline)
VERDICT_COLOURS = {
    "pass": ("#c8e6c9", "#2e7d32"), "fail": ("#ffcdd2", "#c62828"),
    "skipped": ("#eeeeee", "#757575"), "not_observable": ("#ffe0b2", "#ef6c00"),
}


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def nice_step(span: float, most: int = 10) -> float:
    """A tick spacing of 1, 2 or 5 times a power of ten giving at most ``most`` intervals."""
    raw = max(span, 1e-9) / most
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * power >= raw:
            return factor * power
    return 10 * power


class Scale:
    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end

    def x(self, t: float) -> float:
        return LEFT + (RIGHT - LEFT) * (min(max(t, self.start), self.end) - self.start) / (self.end - self.start)


def domain(doc: Mapping[str, Any], timed: List[Tuple[float, Mapping[str, Any]]]) -> Tuple[float, float]:
    seen = [offset for offset, _event in timed]
    seen += [value for value in (document.step_elapsed(doc, step) for step in doc.get("steps") or [])
             if value is not None]
    start = min(0.0, *seen) if seen else 0.0
    end = max(seen) if seen else 0.0
    if end <= start:  # nothing happened (a dry run): show the deadlines instead
        deadlines = [document.number(step.get("deadline_s")) for step in doc.get("steps") or []]
        end = max([d for d in deadlines if d] or [60.0])
    return start, start + (end - start) * 1.03


def place_labels(marks: List[Tuple[float, str]]) -> List[Tuple[float, str, int, str]]:
    """(x, label, row, anchor) for each mark: the lowest row where the label overlaps nothing."""
    rows_end: List[float] = []
    placed = []
    for x, label in marks:
        width = len(label) * CHAR_W
        anchor, left = ("end", x - width - 3) if x + width + 3 > WIDTH - 4 else ("start", x - 3)
        right = left + width + 10
        row = next((index for index, end in enumerate(rows_end) if end <= left), len(rows_end))
        if row == len(rows_end):
            rows_end.append(right)
        rows_end[row] = right
        placed.append((x, label, row, anchor))
    return placed


def text(x: float, y: float, value: Any, size: int = 11, anchor: str = "start", extra: str = "") -> str:
    return '<text x="%.1f" y="%.1f" font-size="%d" text-anchor="%s"%s>%s</text>' % (
        x, y, size, anchor, extra, esc(value))


def _events(timed, axis_y: float, placed) -> List[str]:
    lines, labels = [], []
    for index, (offset, event) in enumerate(timed):
        x, label, row, anchor = placed[index]
        name = str(event.get("name"))
        colour = EVENT_COLOURS.get(name, "#333333")
        baseline = axis_y - 12 - row * ROW_H
        lines.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>' % (
            x, axis_y, x, baseline - 9, colour))
        # Labels after every line, with a white halo: a later event's line never crosses a label's text.
        labels.append('<g class="event event-%s"><title>%s</title>' % (esc(name), esc(
            "%s at %+.1f s: %s" % (name, offset, event.get("detail") or ""))))
        labels.append('<circle cx="%.1f" cy="%.1f" r="5" fill="%s" stroke="#ffffff" stroke-width="1.5"/>' % (
            x, axis_y, colour))
        labels.append(text(x + (3 if anchor == "start" else -3), baseline, label, anchor=anchor, extra=(
            ' fill="%s" stroke="#ffffff" stroke-width="3" paint-order="stroke"' % colour)) + "</g>")
    return lines + labels


def axis(scale: Scale, axis_y: float) -> List[str]:
    parts = ['<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333333" stroke-width="1.5"/>' % (
        LEFT, axis_y, RIGHT, axis_y)]
    step = nice_step(scale.end - scale.start, most=8)
    tick = math.ceil(scale.start / step) * step
    while tick <= scale.end + 1e-9:
        x = scale.x(tick)
        parts.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333333"/>' % (x, axis_y, x, axis_y + 5))
        parts.append(text(x, axis_y + 17, "%g s" % round(tick, 6), size=10, anchor="middle", extra=' fill="#555555"'))
        tick += step
    return parts


def _bar_label(verdict: Any, seen: Optional[float], deadline: Optional[float]) -> str:
    """'PASS at 2.1 s, deadline 30 s', 'FAIL: not seen, deadline 120 s', 'skipped, deadline 60 s'."""
    label = document.VERDICT_LABELS.get(verdict, str(verdict))
    if seen is not None:
        label += " at %s" % document.seconds(seen)
    elif verdict == "fail":
        label += ": not seen"
    return label if deadline is None else "%s, deadline %g s" % (label, deadline)


def _bars(doc: Mapping[str, Any], scale: Scale, top: float) -> List[str]:
    parts = []
    for index, step in enumerate(doc.get("steps") or []):
        y = top + index * BAR_ROW_H
        verdict = step.get("verdict")
        fill, ink = VERDICT_COLOURS.get(verdict, VERDICT_COLOURS["skipped"])
        name = str(step.get("step"))
        deadline, seen = document.number(step.get("deadline_s")), document.step_elapsed(doc, step)
        parts.append('<g class="step step-%s verdict-%s">' % (esc(name), esc(verdict)))
        parts.append(text(8, y + 10, document.STEP_TITLES.get(name, name), extra=' fill="#222222"'))
        if deadline is not None:
            parts.append('<rect x="%.1f" y="%.1f" width="%.1f" height="12" rx="2" fill="%s" stroke="%s"/>' % (
                scale.x(0.0), y, max(scale.x(deadline) - scale.x(0.0), 1.0), fill, ink))
            if deadline > scale.end:  # the deadline lies past the last event: an arrow at the axis' end
                parts.append('<path d="M%.1f %.1f l8 6 l-8 6 z" fill="%s"/>' % (RIGHT, y, ink))
        if seen is not None:
            parts.append('<rect x="%.1f" y="%.1f" width="3" height="18" fill="%s"/>' % (
                scale.x(seen) - 1.5, y - 3, ink))
        parts.append(text(LABELS_X, y + 10, _bar_label(verdict, seen, deadline), extra=' fill="%s"' % ink))
        parts.append("</g>")
    return parts


def render(doc: Mapping[str, Any]) -> str:
    timed = document.events(doc)
    scale = Scale(*domain(doc, timed))
    placed = place_labels([(scale.x(offset), "%s %+.1f s" % (event.get("name"), offset)) for offset, event in timed])
    rows = max([row for _x, _label, row, _anchor in placed] or [0]) + 1
    axis_y = 62 + rows * ROW_H + 8
    bars_top = axis_y + 36
    steps = len(doc.get("steps") or [])
    height = int(bars_top + steps * BAR_ROW_H + 22)
    injected = any(event.get("name") == "inject" for _offset, event in timed)
    subtitle = "t=0: %s at %s" % ("injection" if injected else "drill start", document.clock(document.origin(doc))) \
        if timed else "no events: nothing was injected"
    parts = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" '
        'aria-label="%s" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">' % (
            WIDTH, height, WIDTH, height, esc("Timeline of " + document.title(doc))),
        "<title>%s</title>" % esc("Timeline of " + document.title(doc)),
        '<rect width="100%" height="100%" fill="#ffffff"/>',
        text(8, 22, document.title(doc), size=15, extra=' font-weight="bold" fill="#111111"'),
        text(8, 40, "%s; bars: each loop step's deadline, marks: when it was seen" % subtitle, size=11,
             extra=' fill="#555555"'),
    ]
    parts += axis(scale, axis_y)
    parts += _events(timed, axis_y, placed)
    parts += _bars(doc, scale, bars_top)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
