# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Scoring a drill: loop-step verdicts, the four times, steps lost, observability gaps, and the
drill document (report/document.py renders it). Pure.

A step the fault should not cause (no fence for a degraded fault) is ``skipped``; a step that
cannot be seen here (no protected job given) is ``not_observable`` and a finding; a missed
deadline is ``fail`` and a finding, never an exception.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.burn_output import UNFIT
from ansible_collections.gpufleet.resilience.plugins.module_utils.report.document import SCHEMA_ID, resiliency_score

SCHEMA = SCHEMA_ID
_LINE = re.compile(r"(?P<event>[a-z_]+) time=(?P<time>[0-9.]+)(?P<rest>.*)")
_FIELD = re.compile(r"(\w+)=(\S+)")


def train_sim_events(text: str) -> List[Dict[str, Any]]:
    """``<event> time=<t> key=value ...`` lines of train_sim's output, parsed."""
    events = []
    for line in text.splitlines():
        match = _LINE.fullmatch(line.strip())
        if match:
            fields = dict(_FIELD.findall(match["rest"]))
            events.append(dict(fields, event=match["event"], time=float(match["time"])))
    return events


def recovery(text: str, since: float) -> Dict[str, Any]:
    """From train_sim's output: when the job was interrupted and resumed after ``since``, and the
    steps of work lost (the last step done before the resume minus the step it resumed from)."""
    events = train_sim_events(text)
    resume_at = next((i for i, e in enumerate(events) if e["event"] == "resume" and e["time"] >= since), None)
    before_resume = events[:resume_at] if resume_at is not None else events
    # The job left its node when it said so (SIGTERM: "interrupted"), or, killed without a word,
    # at its last line before the resume.
    interrupted = next((e for e in before_resume if e["event"] == "interrupted" and e["time"] >= since), None)
    if interrupted is None and resume_at is not None and before_resume and before_resume[-1]["time"] >= since:
        interrupted = before_resume[-1]
    if resume_at is None:
        return {"resumed": False, "interrupted_at": interrupted and interrupted["time"]}
    before = [int(e["step"]) for e in events[:resume_at] if "step" in e and e["step"].isdigit()]
    resumed = int(events[resume_at].get("step", "0"))
    last_done = max(before) if before else 0
    return {
        "step_s": step_seconds(events[:resume_at]),
        "resumed": True,
        "resumed_at": events[resume_at]["time"],
        "resumed_step": resumed,
        "source": events[resume_at].get("source"),
        "last_step_before": last_done,
        "steps_lost": max(0, last_done - resumed),
        "interrupted_at": interrupted and interrupted["time"],
        "skipped": [e.get("file") for e in events if e["event"] in ("skip_checkpoint", "skip_partial")],
    }


def step_seconds(events: Sequence[Mapping[str, Any]]) -> Optional[float]:
    """Seconds a step of work takes: the median over consecutive ``step`` lines (None: fewer than two)."""
    steps = [(e["time"], int(e["step"])) for e in events if e["event"] == "step" and str(e.get("step", "")).isdigit()]
    rates = sorted((steps[i + 1][0] - steps[i][0]) / (steps[i + 1][1] - steps[i][1]) for i in range(len(steps) - 1)
                   if steps[i + 1][1] > steps[i][1] and steps[i + 1][0] >= steps[i][0])
    return rates[len(rates) // 2] if rates else None


def job_gpu_hours(recovered: Mapping[str, Any], recover_s: Optional[float]) -> Optional[float]:
    """What the fault cost the protected job: its GPUs from the fault until it resumed, and again for
    the steps it redoes (those done after its last checkpoint). None: not resumed, or its GPUs unknown."""
    gpus = recovered.get("gpus")
    if not recovered.get("resumed") or not gpus or recover_s is None:
        return None
    redo = (recovered.get("steps_lost") or 0) * (recovered.get("step_s") or 0.0)
    return round(gpus * (recover_s + redo) / 3600.0, 6)


def step(name: str, verdict: str, expected: str, observed: str, deadline: float, at: Optional[float],
         injected_at: float) -> Dict[str, Any]:
    return {"step": name, "verdict": verdict, "expected": expected, "observed": observed, "deadline_s": deadline,
            "at": at, "elapsed_s": None if at is None else round(at - injected_at, 3)}


def gaps(steps: Sequence[Mapping[str, Any]], experiment: str, expectations: Mapping[str, Any]) -> List[Dict[str, str]]:
    """The observability feedback loop: what to add when a fault went unseen or unalerted."""
    found = []
    by_name = {s["step"]: s for s in steps}
    detection = expectations.get("detection") or {}
    detected = by_name.get("detected", {})
    if detected.get("verdict") in ("fail", "not_observable"):
        found.append({"step": "detected", "what": "%s was not detected: %s" % (experiment, detected.get("observed")),
                      "add": ("a metric the health agent exports for it (today's query: %s)" % detection["query"])
                      if detection.get("query") and detection.get("mode") != "job_event"
                      else expectations.get("missing_alert_hint") or "a metric that shows this fault"})
    alerted = by_name.get("alerted", {})
    if alerted.get("verdict") == "fail":
        hint = expectations.get("missing_alert_hint")
        if expectations.get("alerts") and not hint:
            hint = "check the rules %s: their 'for:' and thresholds must fire within the %ss deadline" % (
                ", ".join(expectations["alerts"]), alerted.get("deadline_s"))
        found.append({"step": "alerted", "what": "no alert fired for %s: %s" % (experiment, alerted.get("observed")),
                      "add": hint or "an alert rule on the metric that detected it"})
    recovered = by_name.get("recovered", {})
    if recovered.get("verdict") == "not_observable" and expectations.get("no_recovery"):
        what = "nothing recovers from %s: %s" % (experiment, expectations["no_recovery"])
        found.append({"step": "recovered", "what": what, "add": "a remediation plan for this fault"})
    for name, what in (("scheduler", "the scheduler did not fence the node"),
                       ("recovered", "the protected job did not resume from its checkpoint")):
        if by_name.get(name, {}).get("verdict") == "fail":
            found.append({"step": name, "what": "%s: %s" % (what, by_name[name].get("observed")),
                          "add": "a remediation path for this fault: is self-healing running (ansible-rulebook, "
                                 "self_healing_enabled) and does the catalog action map to a plan that fences?"})
    return found


def metrics(steps: Sequence[Mapping[str, Any]], recovered: Mapping[str, Any]) -> Dict[str, Any]:
    by_name = {s["step"]: s for s in steps}

    def elapsed(name: str) -> Optional[float]:
        return by_name.get(name, {}).get("elapsed_s") if by_name.get(name, {}).get("verdict") == "pass" else None

    return {"time_to_detect_s": elapsed("detected"), "time_to_alert_s": elapsed("alerted"),
            "time_to_quarantine_s": elapsed("scheduler"), "time_to_recover_s": elapsed("recovered"),
            "steps_lost": recovered.get("steps_lost") if recovered.get("resumed") else None,
            "job_gpu_hours_lost": job_gpu_hours(recovered, elapsed("recovered"))}


def result(steps: Sequence[Mapping[str, Any]], phases: Sequence[Mapping[str, Any]], aborted: Optional[str]) -> str:
    if aborted:
        return "aborted"
    if any(p.get("ok") is False for p in phases):
        return "failed"
    return "failed" if any(s["verdict"] == "fail" for s in steps) else "passed"


def document(drill: Mapping[str, Any], phases: Sequence[Mapping[str, Any]], observed: Optional[Mapping[str, Any]],
             faults: Sequence[Mapping[str, Any]], finished_at: float) -> Dict[str, Any]:
    """The drill document (schema gpufleet.drill/v1) from the gate's drill, the phases run, the
    observation and the ledger's view of the faults."""
    observed = dict(observed or {})
    steps = list(observed.get("steps") or [])
    aborted = observed.get("aborted") or next(
        (p["detail"].get("abort_reason") for p in phases if (p.get("detail") or {}).get("abort_reason")), None)
    findings = list(observed.get("findings") or [])
    for phase in phases:
        if phase.get("ok") is False:
            findings.append("phase %s failed: %s" % (phase["phase"], (phase.get("detail") or {}).get("error", "")))
    # A knob this site could not apply ran as a shortfall of the drill, not as a failure: say so.
    findings += ["not injected (missing capability): %s" % text for text in drill.get("not_injected") or []]
    for fault in faults:
        burned = (fault.get("observed") or {}).get("burn") or {}
        if burned.get("verdict") in UNFIT:
            findings.append("%s on %s found the node unfit for work (%s): %s" % (
                burned.get("tool"), fault.get("node"), burned["verdict"], burned.get("why")))
        if fault.get("rollback") != "done":
            findings.append("fault %s on %s was not rolled back (%s)" % (
                fault["id"], fault.get("node"), fault.get("rollback")))
    events = sorted(observed.get("events") or [], key=lambda e: e["at"])
    for fault in faults:
        if fault.get("rolled_back_at"):
            events.append({"name": "rollback", "at": fault["rolled_back_at"], "detail": "%s on %s" % (
                fault["id"], fault.get("node"))})
    verify = next((p for p in phases if p["phase"] == "verify"), None)
    if verify and verify.get("finished_at"):
        events.append({"name": "verify", "at": verify["finished_at"],
                       "detail": "steady state again" if verify.get("ok") else "NOT back to steady state"})
    dry_run = bool(drill.get("dry_run"))
    doc = {
        "schema": SCHEMA,
        "id": drill["id"],
        "experiment": drill["experiment"],
        "family": drill["family"],
        "params": dict(drill.get("params") or {}),
        "targets": list(drill.get("targets") or []),
        "dry_run": dry_run,
        "lab": bool(drill.get("lab")),
        "simulated": list(drill.get("simulated") or []),
        "not_injected": list(drill.get("not_injected") or []),
        "started_at": drill["started_at"],
        "finished_at": finished_at,
        "result": "dry_run" if dry_run else result(steps, phases, aborted),
        "abort_reason": aborted,
        "phases": list(phases),
        "events": sorted(events, key=lambda e: e["at"]),
        "steps": steps,
        "score": None,
        "metrics": observed.get("metrics") or metrics(steps, {}),
        "gaps": list(observed.get("gaps") or []),
        "faults": list(faults),
        "findings": findings,
    }
    doc["score"] = resiliency_score(doc)
    return doc
