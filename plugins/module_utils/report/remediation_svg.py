# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""One remediation as a self-contained SVG picture, drawn from its audit record. Pure.

The drill reports' timeline style (report/timeline_svg.py: the same axis, fonts and colours):
t=0 is the start of the remediation. Under the axis, two lanes say what the node was in Slurm and in
Kubernetes at each moment (in service, DRAIN, DOWN, cordoned and tainted, drained, replaced, back in
service), derived from the phases that were done; below them one bar per phase of the plan, from
its start to its end, coloured by its outcome (done, skipped, failed); and one line per job the
remediation signalled, with its fate. A title says the node, the plan and the result.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.report.document import number
from ansible_collections.gpufleet.resilience.plugins.module_utils.report.timeline_svg import (
    LABELS_X,
    LEFT,
    WIDTH,
    Scale,
    axis,
    esc,
    text,
)

LANE_H = 22
BAR_ROW_H = 22
# outcome -> (fill, outline)
OUTCOME_COLOURS = {
    "done": ("#c8e6c9", "#2e7d32"), "skipped": ("#eeeeee", "#757575"), "failed": ("#ffcdd2", "#c62828"),
}
# What a phase, once done, makes of the node in each system: (lane, state, fill).
PHASE_STATES: Dict[str, Tuple[Tuple[str, str, str], ...]] = {
    "fence": (("Slurm", "DRAIN", "#ffe0b2"),),
    "down": (("Slurm", "DOWN", "#ffcdd2"),),
    "quarantine": (("Kubernetes", "cordoned, tainted", "#e1bee7"),),
    "drain": (("Kubernetes", "drained", "#d1c4e9"),),
    "replace": (("Slurm", "retired, spare in", "#cfd8dc"), ("Kubernetes", "replaced", "#cfd8dc")),
    "resume": (("Slurm", "back in service", "#c8e6c9"), ("Kubernetes", "back in service", "#c8e6c9")),
}
IN_SERVICE = ("in service", "#e3f2fd")
LANES = ("Slurm", "Kubernetes")


def outcome_of(entry: Mapping[str, Any], record: Mapping[str, Any], last: bool) -> str:
    outcome = entry.get("outcome") or {}
    if outcome.get("skipped"):
        return "skipped"
    if last and record.get("result") == "failed":
        return "failed"
    return "done"


def lanes(record: Mapping[str, Any], origin: float) -> Dict[str, List[Tuple[float, str, str]]]:
    """Per lane, (from t, state, fill) in order: in service at t=0, then each state change."""
    changes: Dict[str, List[Tuple[float, str, str]]] = {lane: [(0.0, IN_SERVICE[0], IN_SERVICE[1])] for lane in LANES}
    for entry in record.get("timeline") or []:
        end = number(entry.get("end"))
        if end is None or (entry.get("outcome") or {}).get("skipped"):
            continue
        for lane, state, fill in PHASE_STATES.get(str(entry.get("phase")), ()):
            changes[lane].append((end - origin, state, fill))
    return changes


def _lane(scale: Scale, y: float, lane: str, changes: Sequence[Tuple[float, str, str]]) -> List[str]:
    parts = ['<g class="lane lane-%s">' % esc(lane.lower()), text(8, y + 14, lane, extra=' fill="#222222"')]
    for index, (start, state, fill) in enumerate(changes):
        end = changes[index + 1][0] if index + 1 < len(changes) else scale.end
        x1, x2 = scale.x(start), scale.x(end)
        parts.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" stroke="#ffffff"><title>%s</title>'
                     '</rect>' % (x1, y, max(x2 - x1, 1.0), LANE_H - 4, fill,
                                  esc("%s: %s from %+.1f s" % (lane, state, start))))
        if x2 - x1 > len(state) * 6.0 + 6:  # the state's name where it fits; the tooltip always has it
            parts.append(text(x1 + 4, y + 13, state, size=10, extra=' fill="#333333"'))
    parts.append("</g>")
    return parts


def _phase_label(outcome: str, entry: Mapping[str, Any]) -> str:
    if outcome == "skipped":
        why = (entry.get("outcome") or {}).get("why")
        return "skipped" + (": %s" % why if why else "")
    duration = number(entry.get("duration_s"))
    return "%s%s" % (outcome, "" if duration is None else ", %.1f s" % duration)


def _phases(record: Mapping[str, Any], scale: Scale, origin: float, top: float) -> List[str]:
    timeline = record.get("timeline") or []
    parts = []
    for index, entry in enumerate(timeline):
        y = top + index * BAR_ROW_H
        phase = str(entry.get("phase"))
        outcome = outcome_of(entry, record, index == len(timeline) - 1)
        fill, ink = OUTCOME_COLOURS[outcome]
        start, end = number(entry.get("start")), number(entry.get("end"))
        parts.append('<g class="phase phase-%s outcome-%s">' % (esc(phase), esc(outcome)))
        parts.append(text(8, y + 10, phase, extra=' fill="#222222"'))
        if start is not None and end is not None:
            x1, x2 = scale.x(start - origin), scale.x(end - origin)
            parts.append('<rect x="%.1f" y="%.1f" width="%.1f" height="12" rx="2" fill="%s" stroke="%s"/>' % (
                x1, y, max(x2 - x1, 2.0), fill, ink))
        parts.append(text(LABELS_X, y + 10, _phase_label(outcome, entry)[:40], extra=' fill="%s"' % ink))
        parts.append("</g>")
    return parts


def _jobs(record: Mapping[str, Any], top: float) -> List[str]:
    jobs = record.get("jobs") or []
    if not jobs:
        return [text(8, top + 10, "Jobs: none on the node", extra=' fill="#555555"')]
    parts = [text(8, top + 10, "Jobs", extra=' font-weight="bold" fill="#222222"')]
    for index, job in enumerate(jobs):
        line = "job %s: %s, %s%s" % (
            job.get("job_id"), "signalled" if job.get("signalled") else "not signalled", job.get("fate") or "?",
            " (%s)" % job["state"] if job.get("state") else "")
        parts.append(text(LEFT, top + 10 + index * 16, line, extra=' fill="#333333" class="job"'))
    return parts


def title(record: Mapping[str, Any]) -> str:
    plan = (record.get("plan") or {}).get("name") or "?"
    duration = number(record.get("duration_s"))
    return "Remediation %s of %s: plan %s, %s%s" % (
        record.get("id"), record.get("node"), plan, record.get("result") or "unfinished",
        "" if duration is None else " in %.1f s" % duration)


def render(record: Mapping[str, Any]) -> str:
    """The picture of one audit record (remediation_record's line)."""
    origin = number(record.get("started_at")) or 0.0
    ends = [number(entry.get("end")) for entry in record.get("timeline") or []]
    last = max([end - origin for end in ends if end is not None] + [number(record.get("duration_s")) or 0.0, 1.0])
    scale = Scale(0.0, last * 1.03)
    axis_y = 70.0
    lanes_top = axis_y + 30
    phases_top = lanes_top + len(LANES) * LANE_H + 14
    timeline = record.get("timeline") or []
    jobs_top = phases_top + len(timeline) * BAR_ROW_H + 10
    height = int(jobs_top + max(len(record.get("jobs") or []), 1) * 16 + 20)
    fault = record.get("fault") or {}
    trigger = record.get("trigger") or {}
    subtitle = "t=0: %s UTC; trigger %s%s; fault %s%s" % (
        time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(origin)), trigger.get("source") or "?",
        " %s" % trigger["alert"] if trigger.get("alert") else "", fault.get("reason") or fault.get("action") or "?",
        " GPU %s" % fault["gpu_index"] if fault.get("gpu_index") is not None else "")
    stopped = record.get("stopped") or {}
    if stopped:
        subtitle += "; stopped at %s: %s" % (stopped.get("at_phase"), stopped.get("why"))
    parts = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" '
        'aria-label="%s" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">' % (
            WIDTH, height, WIDTH, height, esc(title(record))),
        "<title>%s</title>" % esc(title(record)),
        '<rect width="100%" height="100%" fill="#ffffff"/>',
        text(8, 22, title(record), size=15, extra=' font-weight="bold" fill="#111111"'),
        text(8, 40, subtitle[:160], size=11, extra=' fill="#555555"'),
    ]
    parts += axis(scale, axis_y)
    states = lanes(record, origin)
    for index, lane in enumerate(LANES):
        parts += _lane(scale, lanes_top + index * LANE_H, lane, states[lane])
    parts += _phases(record, scale, origin, phases_top)
    parts += _jobs(record, jobs_top)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
