# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The drill document (``gpufleet.drill/v1``): its JSON schema, the checks a module makes, and readers. Pure.

``DRILL_SCHEMA`` is the full contract (tests and CI validate documents against it with a JSON-schema
library). ``check`` is deliberately small: a module cannot count on a schema library being installed,
so it refuses only what would break a report or a file name, and names the field. Everything else is
read leniently (a missing section renders as "none"), so that a report of a half-finished or refused
drill still comes out.

The readers below (times relative to the injection, labels, the one-line summary) are shared by every
format, so that the JSON, JUnit, Markdown, HTML and SVG of one drill never disagree.
"""

from __future__ import annotations

import datetime
import json
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

SCHEMA_ID = "gpufleet.drill/v1"
RESULTS = ("passed", "failed", "aborted", "refused", "dry_run")
PHASES = ("gate", "steady", "baseline", "inject", "observe", "rollback", "verify", "report")
EVENTS = ("inject", "detect", "alert", "quarantine", "requeue", "resume", "abort", "rollback", "verify")
STEPS = ("detected", "alerted", "scheduler", "recovered")
VERDICTS = ("pass", "fail", "skipped", "not_observable")
ROLLBACKS = ("done", "failed", "pending")
# The id becomes part of file names (drill-<id>.json): no separators, no dot-dot, no leading dot.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"

STEP_TITLES = {
    "detected": "detected?",
    "alerted": "alerted?",
    "scheduler": "scheduler responded?",
    "recovered": "job recovered?",
}
VERDICT_LABELS = {"pass": "PASS", "fail": "FAIL", "skipped": "skipped", "not_observable": "not observable"}
# The four loop times and the label a reader sees, in the loop's order.
TIMES = (
    ("time_to_detect_s", "detect"),
    ("time_to_alert_s", "alert"),
    ("time_to_quarantine_s", "quarantine"),
    ("time_to_recover_s", "recover"),
)

_NUMBER = {"type": "number"}
_NUMBER_OR_NULL = {"type": ["number", "null"]}
_TEXT = {"type": "string"}
_TEXTS = {"type": "array", "items": _TEXT}

DRILL_SCHEMA: Dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "title": "gpufleet chaos drill",
    "type": "object",
    "required": ["schema", "id", "experiment", "result", "steps"],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "id": {"type": "string", "pattern": ID_PATTERN},
        "experiment": {"type": "string", "minLength": 1},
        "family": _TEXT,
        "params": {"type": "object"},
        "targets": _TEXTS,
        "dry_run": {"type": "boolean"},
        "lab": {"type": "boolean"},
        "simulated": _TEXTS,
        "not_injected": _TEXTS,
        "started_at": _NUMBER,
        "finished_at": _NUMBER_OR_NULL,
        "result": {"enum": list(RESULTS)},
        "abort_reason": {"type": ["string", "null"]},
        "score": _NUMBER_OR_NULL,
        "phases": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["phase", "ok"],
                "properties": {
                    "phase": {"enum": list(PHASES)},
                    "started_at": _NUMBER_OR_NULL,
                    "finished_at": _NUMBER_OR_NULL,
                    "ok": {"type": ["boolean", "null"]},
                    "detail": {"type": "object"},
                },
            },
        },
        "events": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "at"],
                "properties": {"name": {"enum": list(EVENTS)}, "at": _NUMBER, "detail": _TEXT},
            },
        },
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["step", "verdict"],
                "properties": {
                    "step": {"enum": list(STEPS)},
                    "verdict": {"enum": list(VERDICTS)},
                    "expected": _TEXT,
                    "observed": _TEXT,
                    "deadline_s": _NUMBER_OR_NULL,
                    "at": _NUMBER_OR_NULL,
                    "elapsed_s": _NUMBER_OR_NULL,
                },
            },
        },
        "metrics": {
            "type": "object",
            "properties": {
                "time_to_detect_s": _NUMBER_OR_NULL,
                "time_to_alert_s": _NUMBER_OR_NULL,
                "time_to_quarantine_s": _NUMBER_OR_NULL,
                "time_to_recover_s": _NUMBER_OR_NULL,
                "steps_lost": {"type": ["integer", "null"], "minimum": 0},
                "job_gpu_hours_lost": {"type": ["number", "null"], "minimum": 0},
            },
        },
        "gaps": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["step", "what", "add"],
                "properties": {"step": _TEXT, "what": _TEXT, "add": _TEXT},
            },
        },
        "faults": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "node", "rollback"],
                "properties": {
                    "id": _TEXT,
                    "node": _TEXT,
                    "backend": _TEXT,
                    "injected_at": _NUMBER_OR_NULL,
                    "rolled_back_at": _NUMBER_OR_NULL,
                    "rollback": {"enum": list(ROLLBACKS)},
                    "actions": _TEXTS,
                    "observed": {"type": "object"},
                },
            },
        },
        "findings": _TEXTS,
    },
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_list(doc: Mapping[str, Any], name: str, required: bool = False) -> List[Any]:
    value = doc.get(name)
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise FieldError(name, "must be a list" if value is not None else "is required")
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise FieldError("%s[%d]" % (name, index), "must be a mapping")
    return value


def check(doc: Any) -> Dict[str, Any]:
    """Refuse what would break a report or its file names; return the document."""
    if not isinstance(doc, dict):
        raise FieldError("drill", "must be a mapping (the drill document)")
    if doc.get("schema", SCHEMA_ID) != SCHEMA_ID:
        raise FieldError("schema", "is %r; this collection reads %s" % (doc.get("schema"), SCHEMA_ID))
    for name in ("id", "experiment"):
        if not isinstance(doc.get(name), str) or not doc[name]:
            raise FieldError(name, "is required (a non-empty string)")
    if not re.match(ID_PATTERN, doc["id"]):
        raise FieldError("id", "%r cannot be part of a file name (letters, digits, . _ -)" % doc["id"])
    if doc.get("result") is not None and doc["result"] not in RESULTS:
        raise FieldError("result", "is %r; expected one of %s" % (doc["result"], ", ".join(RESULTS)))
    for index, step in enumerate(_check_list(doc, "steps", required=True)):
        if not isinstance(step.get("step"), str) or not step["step"]:
            raise FieldError("steps[%d].step" % index, "is required")
        if step.get("verdict") not in VERDICTS:
            raise FieldError("steps[%d].verdict" % index,
                             "is %r; expected one of %s" % (step.get("verdict"), ", ".join(VERDICTS)))
    for index, event in enumerate(_check_list(doc, "events")):
        if not isinstance(event.get("name"), str) or not _is_number(event.get("at")):
            raise FieldError("events[%d]" % index, "needs a name and a numeric 'at' (epoch seconds)")
    for name in ("phases", "gaps", "faults"):
        _check_list(doc, name)
    for name in ("targets", "simulated", "not_injected", "findings"):
        value = doc.get(name)
        if value is not None and not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
            raise FieldError(name, "must be a list of strings")
    for name in ("params", "metrics"):
        if doc.get(name) is not None and not isinstance(doc[name], dict):
            raise FieldError(name, "must be a mapping")
    return doc


# -- readers shared by every format --------------------------------------------------------------------
def number(value: Any) -> Optional[float]:
    return float(value) if _is_number(value) else None


def seconds(value: Any) -> str:
    """A duration as a reader wants it: '2.1 s', or 'n/a' when it was not measured."""
    value = number(value)
    return "n/a" if value is None else "%.1f s" % value


def clock(epoch: Any) -> str:
    """An epoch time as UTC text; deterministic (no local time zone), so reports are reproducible."""
    value = number(epoch)
    if value is None:
        return "n/a"
    moment = datetime.datetime.fromtimestamp(value, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def origin(doc: Mapping[str, Any]) -> Optional[float]:
    """t=0 of the drill: the injection, else the start (a dry run or a refused drill injects nothing)."""
    for event in doc.get("events") or []:
        if event.get("name") == "inject" and number(event.get("at")) is not None:
            return float(event["at"])
    starts = [number(doc.get("started_at"))] + [number(e.get("at")) for e in doc.get("events") or []]
    starts = [value for value in starts if value is not None]
    return min(starts) if starts else None


def events(doc: Mapping[str, Any]) -> List[Tuple[float, Dict[str, Any]]]:
    """(seconds since t=0, event), in time order."""
    zero = origin(doc)
    if zero is None:
        return []
    timed = [(float(event["at"]) - zero, event) for event in doc.get("events") or []
             if number(event.get("at")) is not None]
    return sorted(timed, key=lambda pair: pair[0])


def step_elapsed(doc: Mapping[str, Any], step: Mapping[str, Any]) -> Optional[float]:
    """When the step was seen, in seconds after t=0 (its own elapsed_s, else derived from its 'at')."""
    elapsed = number(step.get("elapsed_s"))
    if elapsed is not None:
        return elapsed
    at, zero = number(step.get("at")), origin(doc)
    return None if at is None or zero is None else at - zero


def duration(doc: Mapping[str, Any]) -> Optional[float]:
    start, end = number(doc.get("started_at")), number(doc.get("finished_at"))
    return None if start is None or end is None else end - start


def metrics(doc: Mapping[str, Any]) -> Dict[str, Any]:
    return dict(doc.get("metrics") or {})


# The resiliency score: each loop step's share of 100, in the order an operator cares about them
# (the job's recovery most, then seeing the fault and taking the node out, then paging a human).
SCORE_WEIGHTS = {"detected": 25.0, "alerted": 20.0, "scheduler": 25.0, "recovered": 30.0}


def resiliency_score(doc: Mapping[str, Any]) -> Optional[float]:
    """0-100 from the loop steps: a step that passed earns its weight, less up to half of it for the
    time it took (half at its deadline: late but done beats missed); a failed one earns nothing. Steps
    not expected (skipped) or not observable do not count either way. None for a dry run, a refusal or
    a drill with no step to score; an aborted drill scores what it saw before the abort."""
    if doc.get("dry_run") or doc.get("result") in ("refused", "dry_run"):
        return None
    earned = possible = 0.0
    for step in doc.get("steps") or []:
        weight = SCORE_WEIGHTS.get(str(step.get("step")))
        if weight is None or step.get("verdict") not in ("pass", "fail"):
            continue
        possible += weight
        if step["verdict"] == "pass":
            elapsed, deadline = number(step.get("elapsed_s")), number(step.get("deadline_s"))
            late = min(1.0, max(0.0, elapsed / deadline)) if elapsed is not None and deadline else 0.0
            earned += weight * (1.0 - 0.5 * late)
    return round(100.0 * earned / possible, 1) if possible else None


def targets(doc: Mapping[str, Any]) -> str:
    return ", ".join(str(target) for target in doc.get("targets") or []) or "no target"


def params_text(doc: Mapping[str, Any]) -> str:
    params = doc.get("params") or {}
    return ", ".join("%s=%s" % (key, params[key] if isinstance(params[key], str) else json.dumps(params[key]))
                     for key in sorted(params)) or "none"


def failed_phases(doc: Mapping[str, Any]) -> List[Dict[str, Any]]:
    return [phase for phase in doc.get("phases") or [] if phase.get("ok") is False]


def plural(count: int, word: str) -> str:
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def summary(doc: Mapping[str, Any]) -> str:
    """The one line a playbook prints: who, what, the verdict, the four loop times, the gaps."""
    figures = metrics(doc)
    times = " ".join("%s %s" % (label, seconds(figures.get(key)).replace(" s", "s")) for key, label in TIMES)
    return "drill %s %s on %s: %s; %s; %s" % (
        doc.get("id"), doc.get("experiment"), targets(doc), doc.get("result") or "unknown", times,
        plural(len(doc.get("gaps") or []), "gap"),
    )


# -- the report's sections as plain text rows: Markdown and HTML render the same rows ----------------
def facts(doc: Mapping[str, Any]) -> List[Tuple[str, str]]:
    rows = [
        ("Drill", str(doc.get("id"))),
        ("Experiment", "%s (%s)" % (doc.get("experiment"), doc.get("family") or "no family")),
        ("Targets", targets(doc)),
        ("Parameters", params_text(doc)),
        ("Result", str(doc.get("result") or "unknown")),
        ("Resiliency score", _score_text(doc)),
        ("Started", clock(doc.get("started_at"))),
        ("Duration", seconds(duration(doc))),
        ("Where", "lab" if doc.get("lab") else "real site"),
        ("Dry run", "yes: nothing was injected" if doc.get("dry_run") else "no"),
    ]
    if doc.get("abort_reason"):
        rows.append(("Abort reason", str(doc["abort_reason"])))
    return rows


def _score_text(doc: Mapping[str, Any]) -> str:
    score = number(doc.get("score")) if doc.get("score") is not None else resiliency_score(doc)
    return "n/a" if score is None else "%.1f of 100" % score


STEP_HEADER = ("Step", "Verdict", "Seen after", "Deadline", "Expected", "Observed")


def step_rows(doc: Mapping[str, Any]) -> List[Tuple[str, ...]]:
    return [
        (STEP_TITLES.get(str(step.get("step")), str(step.get("step"))), VERDICT_LABELS[step["verdict"]],
         seconds(step_elapsed(doc, step)), seconds(step.get("deadline_s")),
         str(step.get("expected") or "-"), str(step.get("observed") or "-"))
        for step in doc.get("steps") or []
    ]


def time_rows(doc: Mapping[str, Any]) -> List[Tuple[str, str]]:
    figures = metrics(doc)
    rows = [("Time to %s" % label, seconds(figures.get(key))) for key, label in TIMES]
    lost = figures.get("steps_lost")
    rows.append(("Steps of work lost", "n/a" if lost is None else str(lost)))
    hours = figures.get("job_gpu_hours_lost")
    rows.append(("GPU-hours the protected job lost", "n/a" if hours is None else "%.4f" % hours))
    return rows


EVENT_HEADER = ("t", "Event", "Detail")


def event_rows(doc: Mapping[str, Any]) -> List[Tuple[str, str, str]]:
    return [("%+.1f s" % offset, str(event.get("name")), str(event.get("detail") or ""))
            for offset, event in events(doc)]


FAULT_HEADER = ("Fault", "Node", "Backend", "Injected", "Rolled back", "Rollback", "Actions")


def fault_rows(doc: Mapping[str, Any]) -> List[Tuple[str, ...]]:
    return [
        (str(fault.get("id")), str(fault.get("node")), str(fault.get("backend") or "-"),
         clock(fault.get("injected_at")), clock(fault.get("rolled_back_at")), str(fault.get("rollback")),
         "; ".join(list(fault.get("actions") or []) + observed_texts(fault.get("observed"))) or "-")
        for fault in doc.get("faults") or []
    ]


def observed_texts(observed: Any) -> List[str]:
    """What a family measured while its fault was on (the network family: eBPF counts, throughput,
    drops), as short texts for the faults table."""
    if not isinstance(observed, dict):
        return []
    texts = []
    for key, value in sorted(observed.items()):
        if key == "not_injected":
            continue  # the document's own not_injected list says it
        if isinstance(value, dict):
            value = ", ".join("%s=%s" % item for item in sorted(value.items()))
        texts.append("observed %s: %s" % (key, value))
    return texts


PHASE_HEADER = ("Phase", "OK", "Took")


def phase_rows(doc: Mapping[str, Any]) -> List[Tuple[str, str, str]]:
    rows = []
    for phase in doc.get("phases") or []:
        start, end = number(phase.get("started_at")), number(phase.get("finished_at"))
        ok = {True: "yes", False: "FAILED"}.get(phase.get("ok"), "not run")
        rows.append((str(phase.get("phase")), ok, seconds(None if start is None or end is None else end - start)))
    return rows


def gap_items(doc: Mapping[str, Any]) -> List[Tuple[str, str, str]]:
    """(step, what was missing, what to add) per gap."""
    return [(STEP_TITLES.get(str(gap.get("step")), str(gap.get("step"))), str(gap.get("what") or ""),
             str(gap.get("add") or "")) for gap in doc.get("gaps") or []]


def title(doc: Mapping[str, Any]) -> str:
    return "Drill %s: %s on %s, %s" % (doc.get("id"), doc.get("experiment"), targets(doc),
                                       str(doc.get("result") or "unknown").upper())
