# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Watching the feedback loop after an injection, each step against its own deadline.

The probes read the real systems an operator would look at: Prometheus (the agent's metric),
Alertmanager's API (the alert), Slurm and Kubernetes (fence and cordon, or the node replaced),
and the protected job (Slurm's view, and train_sim's output for the step it resumed from).
The loop ends when every step is decided or its deadline has passed; it aborts early when the
remediation circuit breaker trips, because a drill must never be the cause of a storm.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any, Callable, Dict, List, Mapping, Optional

from ansible.module_utils.urls import open_url

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import scoring
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.experiments import LOOP_STEPS
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.configmap_store import ConfigMapStore

FENCED_STATES = ("DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING")
# The remediation's breaker (remediation/store.py); read here, never written.
BREAKER_CONFIGMAP = "gpufleet-remediation-breaker"


def http_json(url: str, timeout: float = 5.0) -> Any:
    try:
        return json.loads(open_url(url, timeout=timeout, method="GET").read())
    except Exception as exc:  # URLError, HTTPError, socket errors, bad JSON: one message for all
        raise GpufleetError("cannot read %s: %s" % (url, exc)) from exc


def prometheus_value(prometheus_url: str, query: str) -> Optional[float]:
    """The value of an instant query that yields one sample (sum/max); None when it yields nothing."""
    answer = http_json("%s/api/v1/query?%s" % (prometheus_url.rstrip("/"), urllib.parse.urlencode({"query": query})))
    result = (answer.get("data") or {}).get("result") or []
    return float(result[0]["value"][1]) if result else None


def firing_alerts(alertmanager_url: str, node: str) -> List[str]:
    query = urllib.parse.urlencode({"active": "true", "silenced": "false", "inhibited": "false",
                                    "filter": 'node="%s"' % node})
    alerts = http_json("%s/api/v2/alerts?%s" % (alertmanager_url.rstrip("/"), query))
    return sorted({a["labels"]["alertname"] for a in alerts if (a.get("status") or {}).get("state") == "active"})


def breaker_tripped(core_v1: Any, namespace: str) -> bool:
    state = ConfigMapStore(core_v1, namespace, BREAKER_CONFIGMAP).read_json("state", {}) or {}
    return bool(state.get("tripped"))


def detection_value(prometheus_url: str, detection: Mapping[str, Any], node: str, params: Mapping[str, Any]) -> Optional[float]:
    return prometheus_value(prometheus_url, detection["query"].format(node=node, **params))


class Probes:
    """The I/O the observation needs, bundled so the loop below stays readable."""

    def __init__(self, prometheus_url: Optional[str], alertmanager_url: Optional[str], core_v1: Any,
                 slurm: Any, namespace: str, read_text: Callable[[str], str]) -> None:
        self.prometheus_url = prometheus_url
        self.alertmanager_url = alertmanager_url
        self.core_v1 = core_v1
        self.slurm = slurm
        self.namespace = namespace
        self.read_text = read_text

    def kube_fenced(self, node: str) -> Optional[str]:
        from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import ApiException

        try:
            found = self.core_v1.read_node(node)
        except ApiException as exc:
            if getattr(exc, "status", None) == 404:
                return "node gone from Kubernetes (replaced)"
            raise
        if found.spec.unschedulable:
            return "cordoned"
        return None

    def slurm_fenced(self, node: str) -> Optional[str]:
        found = self.slurm.nodes(with_jobs=False)
        if node not in found:
            return "node gone from Slurm (replaced)"
        current = found[node]
        states = (current.state,) + tuple(current.flags)
        if any(s in FENCED_STATES for s in states):
            return "%s (%s)" % ("+".join(states), current.reason or "no reason")
        return None

    def job(self, job_id: str) -> Optional[Any]:
        return next((j for j in self.slurm.jobs() if j.job_id == str(job_id)), None) if job_id else None


def observe(request: Mapping[str, Any], probes: Probes, clock: Callable[[], float] = time.time,
            sleep: Callable[[float], None] = time.sleep) -> Dict[str, Any]:
    nodes: List[str] = list(request["nodes"])
    expect: Mapping[str, Any] = request["expectations"]
    deadlines: Mapping[str, float] = request["deadlines"]
    params: Mapping[str, Any] = request.get("params") or {}
    baseline: Mapping[str, Any] = request.get("baseline") or {}
    injected_at: float = request["injected_at"]
    job_id = request.get("protected_job")
    output = request.get("protected_output")
    decided: Dict[str, Dict[str, Any]] = {}
    events: List[Dict[str, Any]] = [{"name": "inject", "at": injected_at, "detail": "%s on %s" % (
        request.get("experiment"), ", ".join(nodes))}]
    last: Dict[str, str] = {}
    recovered: Dict[str, Any] = {}
    aborted: Optional[str] = None
    detection = expect.get("detection")
    breaker_at_start = bool(baseline.get("breaker_tripped"))

    def decide(name: str, verdict: str, expected: str, observed: str, at: Optional[float]) -> None:
        decided[name] = scoring.step(name, verdict, expected, observed, deadlines[name], at, injected_at)

    # Steps that the fault should not cause, or that nothing here can see, are decided up front.
    if detection is None:
        decide("detected", "not_observable", "no agent metric covers %s" % request.get("experiment"),
               "nothing to watch: the health agent has no metric for this fault", None)
    if not expect.get("fences"):
        decide("scheduler", "skipped", "no fence: the fault is not fatal", "not expected", None)
    if expect.get("requeues") and not job_id:
        decide("recovered", "not_observable", "the protected job resumes from its checkpoint",
               "no protected job was given (protected_job)", None)
    elif not job_id:
        decide("recovered", "skipped", "no protected job given and none needed", "not expected", None)
    alert_names = list(expect.get("alerts") or [])
    expected_alerts = ("alerts %s for %s" % (", ".join(alert_names), ", ".join(nodes))) if alert_names else \
        "any alert about %s (no rule is known to cover this fault)" % ", ".join(nodes)

    while len(decided) < len(LOOP_STEPS):
        now = clock()
        if probes.core_v1 is not None and not breaker_at_start and breaker_tripped(probes.core_v1, probes.namespace):
            aborted = "the remediation circuit breaker tripped during the drill"
            break
        if "detected" not in decided and probes.prometheus_url:
            values = [detection_value(probes.prometheus_url, detection, n, params) for n in nodes]
            last["detected"] = "%s = %s" % (detection["what"], values)
            hit = all(v is not None and (v > (baseline.get("detection", {}).get(n) or 0.0) if detection["mode"] == "rise"
                                         else v >= detection["threshold"]) for n, v in zip(nodes, values))
            if hit:
                decide("detected", "pass", detection["what"], last["detected"], now)
                events.append({"name": "detect", "at": now, "detail": last["detected"]})
        if "alerted" not in decided and probes.alertmanager_url:
            firing = {n: [a for a in firing_alerts(probes.alertmanager_url, n)
                          if a not in (baseline.get("alerts", {}).get(n) or [])] for n in nodes}
            last["alerted"] = "; ".join("%s: %s" % (n, ", ".join(a) or "none") for n, a in firing.items())
            ok = all(set(alert_names) <= set(a) for a in firing.values()) if alert_names else \
                all(firing.values())
            if ok:
                decide("alerted", "pass", expected_alerts, last["alerted"], now)
                events.append({"name": "alert", "at": now, "detail": last["alerted"]})
        if "scheduler" not in decided:
            states = {n: (probes.slurm_fenced(n), probes.kube_fenced(n) if probes.core_v1 is not None else "n/a")
                      for n in nodes}
            last["scheduler"] = "; ".join("%s: Slurm %s, Kubernetes %s" % (n, s or "not fenced", k or "schedulable")
                                          for n, (s, k) in states.items())
            if all(s and k for s, k in states.values()):
                decide("scheduler", "pass", "Slurm DRAIN/DOWN with a reason and a cordon (or the node replaced)",
                       last["scheduler"], now)
                events.append({"name": "quarantine", "at": now, "detail": last["scheduler"]})
        if "recovered" not in decided:
            job = probes.job(job_id)
            text = probes.read_text(output) if output else ""
            if expect.get("requeues"):
                recovered = scoring.recovery(text, injected_at)
                where = job.batch_host if job is not None else None
                last["recovered"] = "job %s %s on %s; %s" % (
                    job_id, job.state if job else "unknown", where or "-",
                    "resumed at step %s" % recovered.get("resumed_step") if recovered.get("resumed") else "no resume yet")
                if job is not None and job.state == "RUNNING" and where not in nodes and recovered.get("resumed"):
                    if recovered.get("interrupted_at"):
                        events.append({"name": "requeue", "at": recovered["interrupted_at"], "detail": "job %s" % job_id})
                    events.append({"name": "resume", "at": recovered["resumed_at"], "detail": "job %s on %s from step %s"
                                   % (job_id, where, recovered["resumed_step"])})
                    decide("recovered", "pass", "job %s requeued, RUNNING on a healthy node, resumed from its checkpoint"
                           % job_id, last["recovered"], recovered["resumed_at"])
            else:
                last["recovered"] = "job %s %s" % (job_id, job.state if job else "gone")
                if job is not None and job.state == "RUNNING":
                    decide("recovered", "pass", "job %s keeps running" % job_id, last["recovered"], now)
        for name in LOOP_STEPS:
            if name not in decided and now - injected_at > deadlines[name]:
                decide(name, "fail", {"detected": detection and detection["what"], "alerted": expected_alerts,
                                      "scheduler": "Slurm DRAIN/DOWN and a cordon",
                                      "recovered": "job %s resumed elsewhere" % job_id}[name] or "",
                       "deadline %ss missed; last seen: %s" % (deadlines[name], last.get(name, "nothing")), None)
        if len(decided) < len(LOOP_STEPS):
            sleep(float(request.get("poll_s") or 1.0))
    steps = [decided.get(name) or scoring.step(name, "fail", "", "not observed: %s" % (aborted or "?"),
                                               deadlines[name], None, injected_at) for name in LOOP_STEPS]
    findings = ["%s: %s" % (s["step"], s["observed"]) for s in steps if s["verdict"] in ("fail", "not_observable")]
    return {
        "steps": steps,
        "events": events,
        "metrics": scoring.metrics(steps, recovered),
        "gaps": scoring.gaps(steps, request.get("experiment") or "", expect),
        "findings": findings,
        "aborted": aborted,
        "recovery": recovered,
    }

