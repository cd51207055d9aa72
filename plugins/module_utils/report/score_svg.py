# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The resiliency score of an experiment's last drills as a small self-contained SVG line chart. Pure.

One point per scored drill, oldest on the left, on a fixed 0-100 axis (a trend must not look steep
because the axis was zoomed in), the newest drawn larger, and a dashed line at the median of the
drills before it: the yardstick ``history.score_trend`` compares the newest with. Each point has a
tooltip (drill id, result, score). The drills come from the report directory, so an id is data:
everything written is escaped.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.report.timeline_svg import esc

WIDTH, HEIGHT = 520, 170
LEFT, RIGHT, TOP, BOTTOM = 44, 500, 14, 140  # the plot area
LINE = "#1565c0"
MEDIAN = "#757575"
# A point's colour by the drill's result; anything else is grey.
RESULT_COLOURS = {"pass": "#2e7d32", "fail": "#c62828", "aborted": "#b71c1c"}


def _y(score: float) -> float:
    return BOTTOM - (BOTTOM - TOP) * max(0.0, min(100.0, score)) / 100.0


def _x(index: int, count: int) -> float:
    if count == 1:
        return (LEFT + RIGHT) / 2.0
    return LEFT + (RIGHT - LEFT) * index / (count - 1)


def render(drills: Sequence[Mapping[str, Any]], median_before: Optional[float] = None) -> str:
    """``drills``: {id, score, result}, oldest first, the scored ones only (at least one)."""
    count = len(drills)
    parts: List[str] = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" '
        'aria-label="resiliency score of the last %d drills" font-family="sans-serif" font-size="11">'
        % (WIDTH, HEIGHT, WIDTH, HEIGHT, count),
        '<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>' % (WIDTH, HEIGHT),
    ]
    for tick in (0, 25, 50, 75, 100):
        y = _y(tick)
        parts.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>' % (LEFT, y, RIGHT, y))
        parts.append('<text x="%d" y="%.1f" text-anchor="end" fill="#616161">%d</text>' % (LEFT - 6, y + 4, tick))
    if median_before is not None:
        y = _y(median_before)
        parts.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-dasharray="5,4"/>'
                     % (LEFT, y, RIGHT, y, MEDIAN))
        parts.append('<text x="%d" y="%.1f" text-anchor="end" fill="%s">median before %s</text>'
                     % (RIGHT, y - 4, MEDIAN, esc("%g" % median_before)))
    points = [(_x(index, count), _y(float(drill["score"]))) for index, drill in enumerate(drills)]
    if count > 1:
        parts.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>'
                     % (" ".join("%.1f,%.1f" % point for point in points), LINE))
    for index, drill in enumerate(drills):
        x, y = points[index]
        newest = index == count - 1
        colour = RESULT_COLOURS.get(str(drill.get("result")), "#757575")
        parts.append('<circle cx="%.1f" cy="%.1f" r="%d" fill="%s" stroke="#ffffff" stroke-width="1.5">'
                     '<title>%s</title></circle>'
                     % (x, y, 6 if newest else 4, colour,
                        esc("%s: %s, score %g" % (drill.get("id"), drill.get("result"), float(drill["score"])))))
        if newest:
            parts.append('<text x="%.1f" y="%.1f" text-anchor="end" font-weight="bold">%s</text>'
                         % (min(x, RIGHT), max(y - 10, TOP + 10), esc("%g" % float(drill["score"]))))
    parts.append('<text x="%d" y="%d" fill="#616161">oldest</text>' % (LEFT, HEIGHT - 10))
    parts.append('<text x="%d" y="%d" text-anchor="end" fill="#616161">newest: %s</text>'
                 % (RIGHT, HEIGHT - 10, esc(drills[-1].get("id"))))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
