# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A drill as one self-contained HTML page. Pure.

Everything is inside the file: the CSS inline, the timeline SVG inline in ``<div id="timeline">``, no
script, font, image or link to anything else, so the page opens offline, from an artifact store or a
mail attachment. The content is the Markdown report's, from the same rows (``document``).
"""

from __future__ import annotations

import html
from typing import Any, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.report import (
    document,
    history,
    score_svg,
    timeline_svg,
)

CSS = """
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; color: #1b1b1b; margin: 2em auto;
       max-width: 1040px; padding: 0 1em; line-height: 1.4; }
h1 { font-size: 1.5em; margin-bottom: .2em; }
h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #dddddd; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .5em 0; width: 100%; }
th, td { border: 1px solid #d0d0d0; padding: .3em .5em; text-align: left; vertical-align: top; font-size: .92em; }
th { background: #f3f3f3; }
#timeline { border: 1px solid #d0d0d0; padding: 4px; overflow-x: auto; }
#timeline svg { display: block; max-width: 100%; height: auto; }
.summary { font-family: "DejaVu Sans Mono", monospace; background: #f6f6f6; padding: .5em; }
.verdict { font-weight: bold; padding: 0 .4em; border-radius: 3px; white-space: nowrap; }
.v-pass { background: #c8e6c9; color: #1b5e20; }
.v-fail { background: #ffcdd2; color: #b71c1c; }
.v-skipped { background: #eeeeee; color: #424242; }
.v-not_observable { background: #ffe0b2; color: #e65100; }
.result-passed { color: #1b5e20; } .result-failed, .result-aborted { color: #b71c1c; }
.gap-add { font-family: "DejaVu Sans Mono", monospace; }
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def table(header: Sequence[str], rows: Sequence[Sequence[str]], raw_column: int = -1) -> str:
    """Escapes every cell but ``raw_column``, which the caller built as HTML."""
    head = "".join("<th>%s</th>" % esc(cell) for cell in header)
    body = "".join(
        "<tr>%s</tr>" % "".join("<td>%s</td>" % (cell if index == raw_column else esc(cell))
                                for index, cell in enumerate(row))
        for row in rows)
    return "<table><thead><tr>%s</tr></thead><tbody>%s</tbody></table>" % (head, body)


def bullets(items: Sequence[str], empty: str) -> str:
    if not items:
        return "<p>%s</p>" % esc(empty)
    return "<ul>%s</ul>" % "".join("<li>%s</li>" % esc(item) for item in items)


def _steps(doc: Mapping[str, Any]) -> str:
    rows = [list(row) for row in document.step_rows(doc)]
    for index, step in enumerate(doc.get("steps") or []):
        rows[index][1] = '<span class="verdict v-%s">%s</span>' % (esc(step["verdict"]), esc(rows[index][1]))
    return table(document.STEP_HEADER, rows, raw_column=1)


def _gaps(doc: Mapping[str, Any]) -> str:
    gaps = document.gap_items(doc)
    if not gaps:
        return "<p>None: every fault was detected and alerted on.</p>"
    return "<ul>%s</ul>" % "".join(
        '<li><strong>%s</strong> %s. Add: <span class="gap-add">%s</span></li>' % (
            esc(step), esc(what.rstrip(".")), esc(add)) for step, what, add in gaps)


def _trend(doc: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """The score trend section: ``rows`` are history rows of the experiment's drills up to this one."""
    scored = [row for row in rows if row.get("score") is not None]
    experiment = str(doc.get("experiment") or "")
    if not scored or scored[-1].get("id") != doc.get("id"):
        return "<p>This drill has no resiliency score (a dry run, a refusal, or no loop step to score).</p>"
    if len(scored) == 1:
        return "<p>The first scored %s drill in this report directory: no trend yet.</p>" % esc(experiment)
    trend = history.score_trend(scored)
    return '<p>Score %s; the median of the %s before it here is %s (%+.1f).</p>\n<div id="score-trend">\n%s</div>' % (
        esc("%g" % trend["newest"]), esc(document.plural(len(scored) - 1, "scored drill")),
        esc("%g" % trend["median_before"]), trend["change"], score_svg.render(scored, trend["median_before"]))


def render(doc: Mapping[str, Any], trend: Optional[Sequence[Mapping[str, Any]]] = None) -> str:
    """The page; with ``trend`` (history rows of this experiment's drills up to this one, oldest
    first, this one last), also the resiliency score's trend as a picture."""
    result = str(doc.get("result") or "unknown")
    body: List[str] = [
        '<h1 class="result-%s">%s</h1>' % (esc(result), esc(document.title(doc))),
        '<p class="summary">%s</p>' % esc(document.summary(doc)),
        table(("Field", "Value"), document.facts(doc)),
        "<h2>Timeline</h2>",
        '<div id="timeline">\n%s</div>' % timeline_svg.render(doc),
        table(document.EVENT_HEADER, document.event_rows(doc)) if doc.get("events") else "<p>No events.</p>",
        "<h2>Feedback loop</h2>", _steps(doc),
        "<h2>Times</h2>", table(("Measure", "Value"), document.time_rows(doc)),
        "<h2>Findings</h2>", bullets(doc.get("findings") or [], "None."),
        '<h2 id="gaps">Observability gaps</h2>', _gaps(doc),
        "<h2>Faults and rollback</h2>",
        table(document.FAULT_HEADER, document.fault_rows(doc)) if doc.get("faults") else "<p>No fault injected.</p>",
        "<h2>Phases</h2>", table(document.PHASE_HEADER, document.phase_rows(doc)),
        "<h2>Simulated</h2>", bullets(doc.get("simulated") or [], "Nothing: every fault was real."),
    ]
    if trend is not None:
        body[4:4] = ['<h2 id="trend">Resiliency score trend</h2>', _trend(doc, trend)]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>%s</title>\n<style>%s</style>\n</head>\n<body>\n%s\n</body>\n</html>\n"
        % (esc(document.title(doc)), CSS, "\n".join(body))
    )
