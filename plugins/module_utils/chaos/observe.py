# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Watching the feedback loop after an injection, each step against its own deadline.

The probes read the real systems an operator would look at: Prometheus (the agent's metric),
Alertmanager's API (the alert), Slurm and Kubernetes (fence and cordon, or the node replaced),
and the protected job (Slurm's view, and train_sim's output for the step it resumed from).
The loop ends when every step is decided or its deadline has passed; it aborts early when the
remediation circuit breaker trips, because a drill must never be the cause of a storm, and when one
of the drill's brakes (abort conditions, brakes.py) is breached.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any, Callable, Dict, List, Mapping, Optional

from ansible.module_utils.urls import open_url

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import brakes, scoring
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.experiments import LOOP_STEPS
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.configmap_store import ConfigMapStore
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.remediation_objects import (
    BREAKER_NAME,
    PROGRESS_KEY,
    progress_name,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.rfc3339 import epoch_seconds

# The resolution of a detection time (a range query's step, seconds).
RANGE_STEP = "0.1"
FENCED_STATES = ("DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING")


# Seconds each Prometheus/Alertmanager read may take: it bounds the connection and every read (a server
# that accepts and never answers fails the probe after it, naming the URL). The watch loop's own
# deadlines are far longer, so a hung Prometheus costs one probe, not the drill.
HTTP_TIMEOUT = 5.0


def http_json(url: str, timeout: Optional[float] = None) -> Any:
    try:
        answer = open_url(url, timeout=HTTP_TIMEOUT if timeout is None else timeout, method="GET")
        with answer:
            return json.loads(answer.read())
    except Exception as exc:  # URLError, HTTPError, socket errors, bad JSON: one message for all
        raise GpufleetError("cannot read %s: %s" % (url, exc)) from exc


def prometheus_value(prometheus_url: str, query: str) -> Optional[float]:
    """The value of an instant query that yields one sample (sum/max); None when it yields nothing."""
    answer = http_json("%s/api/v1/query?%s" % (prometheus_url.rstrip("/"), urllib.parse.urlencode({"query": query})))
    result = (answer.get("data") or {}).get("result") or []
    return float(result[0]["value"][1]) if result else None


def first_above(prometheus_url: str, query: str, since: float, until: float, level: float,
                strict: bool) -> Optional[float]:
    """When the query's value first went above (or reached) ``level`` in [since, until], from a
    range query: the drill's poll interval and Ansible's start-up do not count towards the time."""
    answer = http_json("%s/api/v1/query_range?%s" % (prometheus_url.rstrip("/"), urllib.parse.urlencode(
        {"query": query, "start": "%.3f" % since, "end": "%.3f" % until, "step": RANGE_STEP})))
    for series in (answer.get("data") or {}).get("result") or []:
        for stamp, value in series.get("values") or []:
            if float(value) > level if strict else float(value) >= level:
                return float(stamp)
    return None


def alert_starts(alertmanager_url: str, node: str) -> Dict[str, float]:
    """Alert name -> its startsAt (epoch seconds), for the active alerts about ``node``."""
    query = urllib.parse.urlencode({"active": "true", "silenced": "false", "inhibited": "false",
                                    "filter": 'node="%s"' % node})
    alerts = http_json("%s/api/v2/alerts?%s" % (alertmanager_url.rstrip("/"), query))
    found: Dict[str, float] = {}
    for alert in alerts:
        if (alert.get("status") or {}).get("state") != "active":
            continue
        started = _epoch(alert.get("startsAt"))
        name = alert["labels"]["alertname"]
        found[name] = min(found.get(name, started), started)
    return found


def firing_alerts(alertmanager_url: str, node: str) -> List[str]:
    return sorted(alert_starts(alertmanager_url, node))


def _epoch(stamp: Optional[str]) -> float:
    """Alertmanager's RFC 3339 time in epoch seconds; now when unreadable."""
    found = epoch_seconds(stamp)
    return time.time() if found is None else found


def breaker_state(core_v1: Any, namespace: str) -> Dict[str, Any]:
    """The remediation's breaker as remediation/breaker.py stores it (slots, tripped, tripped_at,
    refused): read here, never written."""
    return ConfigMapStore(core_v1, namespace, BREAKER_NAME).read_json("state", {}) or {}


def remediation_progress(core_v1: Any, namespace: str, node: str) -> Dict[str, Any]:
    """The node's latest remediation as remediation/store.py records its progress (plan and its why,
    started_at, result): read here, never written; empty when there is none."""
    return ConfigMapStore(core_v1, namespace, progress_name(node)).read_json(PROGRESS_KEY, {}) or {}


def breaker_tripped(core_v1: Any, namespace: str) -> bool:
    return bool(breaker_state(core_v1, namespace).get("tripped"))


def detection_value(prometheus_url: str, detection: Mapping[str, Any], node: str,
                    params: Mapping[str, Any]) -> Optional[float]:
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
        states = (current.state, *current.flags)
        if any(s in FENCED_STATES for s in states):
            return "%s (%s)" % ("+".join(states), current.reason or "no reason")
        return None

    def prometheus_value(self, query: str) -> Optional[float]:
        return prometheus_value(str(self.prometheus_url), query)

    def breaker(self) -> Dict[str, Any]:
        return breaker_state(self.core_v1, self.namespace) if self.core_v1 is not None else {}

    def remediation(self, node: str) -> Dict[str, Any]:
        return remediation_progress(self.core_v1, self.namespace, node) if self.core_v1 is not None else {}

    def job(self, job_id: str) -> Optional[Any]:
        return next((j for j in self.slurm.jobs() if j.job_id == str(job_id)), None) if job_id else None


class LoopWatch:
    """One observation: each ``look_*`` checks one loop step once and decides it when seen."""

    def __init__(self, request: Mapping[str, Any], probes: Probes) -> None:
        self.request = request
        self.probes = probes
        self.nodes: List[str] = list(request["nodes"])
        self.expect: Mapping[str, Any] = request["expectations"]
        self.deadlines: Mapping[str, float] = request["deadlines"]
        self.params: Mapping[str, Any] = request.get("params") or {}
        self.baseline: Mapping[str, Any] = request.get("baseline") or {}
        self.injected_at: float = request["injected_at"]
        self.job_id = request.get("protected_job")
        self.detection = self.expect.get("detection")
        self.alert_names = list(self.expect.get("alerts") or [])
        self.decided: Dict[str, Dict[str, Any]] = {}
        self.braking: Dict[str, float] = {}  # brake name -> when its breach began
        self.last: Dict[str, str] = {}
        self.recovered: Dict[str, Any] = {}
        self.events: List[Dict[str, Any]] = [{"name": "inject", "at": self.injected_at, "detail": "%s on %s" % (
            request.get("experiment"), ", ".join(self.nodes))}]
        self.expected = {
            "detected": self.detection["what"] if self.detection else "",
            "alerted": ("alerts %s for %s" % (", ".join(self.alert_names), ", ".join(self.nodes)))
            if self.alert_names else "any alert about %s (no rule is known to cover this fault)" % ", ".join(
                self.nodes),
            "scheduler": "the remediation's breaker trips at its cap: the targets under it quarantined (Slurm "
                         "DRAIN/DOWN and a cordon, or replaced), the rest refused and only fenced in Slurm"
            if self.expect.get("breaker") else
            "escalation holds each target for a human: a remediation with plan HOLD, Slurm DRAIN/DOWN and a cordon, "
            "no second cure" if self.expect.get("escalation") else
            "Slurm DRAIN/DOWN with a reason and a cordon (or the node replaced)",
            "recovered": "job %s requeued, RUNNING on a healthy node, resumed from its checkpoint" % self.job_id
            if self.expect.get("requeues") else "job %s keeps running" % self.job_id,
        }

    def decide(self, name: str, verdict: str, observed: str, at: Optional[float], expected: str = "") -> None:
        self.decided[name] = scoring.step(name, verdict, expected or self.expected[name], observed,
                                          self.deadlines[name], at, self.injected_at)

    def event(self, name: str, at: float, detail: str) -> None:
        self.events.append({"name": name, "at": at, "detail": detail})

    def decide_up_front(self) -> None:
        """Steps the fault should not cause, or that nothing here can see."""
        if self.detection is None:
            self.decide("detected", "not_observable", "nothing to watch: the health agent has no metric for this "
                        "fault", None, "no agent metric covers %s" % self.request.get("experiment"))
        elif self.detection["mode"] == "job_event" and not self.request.get("protected_output"):
            self.decide("detected", "not_observable", "no protected job output was given (protected_output)", None)
        if not self.expect.get("fences"):
            self.decide("scheduler", "skipped", "not expected", None, "no fence: the fault is not fatal")
        if self.expect.get("no_recovery"):
            self.decide("recovered", "not_observable", self.expect["no_recovery"], None,
                        "job %s makes progress again" % self.job_id)
        elif self.expect.get("requeues") and not self.job_id:
            self.decide("recovered", "not_observable", "no protected job was given (protected_job)", None)
        elif not self.job_id:
            self.decide("recovered", "skipped", "not expected", None, "no protected job given and none needed")

    def look_detected(self, now: float) -> None:
        if self.detection["mode"] == "job_event":
            self.look_job_event(now)
            return
        if not self.probes.prometheus_url:
            return
        detection = self.detection
        values = {n: detection_value(self.probes.prometheus_url, detection, n, self.params) for n in self.nodes}
        self.last["detected"] = "%s = %s" % (detection["what"], list(values.values()))
        rise = detection["mode"] == "rise"

        def seen(node: str, value: Optional[float]) -> bool:
            if value is None:
                return False
            return value > (self.baseline.get("detection", {}).get(node) or 0.0) if rise else \
                value >= detection["threshold"]

        if not all(seen(n, v) for n, v in values.items()):
            return
        at = now
        if len(self.nodes) == 1:
            node = self.nodes[0]
            level = (self.baseline.get("detection", {}).get(node) or 0.0) if rise else detection["threshold"]
            exact = first_above(self.probes.prometheus_url, detection["query"].format(node=node, **self.params),
                                self.injected_at, now, level, rise)
            at = exact if exact is not None and self.injected_at <= exact <= now else now
        self.decide("detected", "pass", self.last["detected"], at)
        self.event("detect", at, self.last["detected"])

    def look_job_event(self, now: float) -> None:
        """The protected job's own report of the fault (train_sim's output), e.g. a failed save."""
        output = self.request.get("protected_output")
        events = scoring.train_sim_events(self.probes.read_text(output) if output else "")
        found = [e for e in events if e["event"] == self.detection["query"] and e["time"] >= self.injected_at]
        self.last["detected"] = "%d %s line(s) in %s" % (len(found), self.detection["query"], output or "(no output)")
        if found:
            detail = "%s step=%s reason=%s" % (found[0]["event"], found[0].get("step"), found[0].get("reason"))
            self.decide("detected", "pass", detail, found[0]["time"])
            self.event("detect", found[0]["time"], detail)

    def look_alerted(self, now: float) -> None:
        if not self.probes.alertmanager_url:
            return
        starts = {}
        for node in self.nodes:
            before = self.baseline.get("alerts", {}).get(node) or []
            found = alert_starts(self.probes.alertmanager_url, node)
            starts[node] = {a: t for a, t in found.items() if a not in before}
        self.last["alerted"] = "; ".join("%s: %s" % (n, ", ".join(sorted(a)) or "none") for n, a in starts.items())
        if self.alert_names:
            ok = all(set(self.alert_names) <= set(found) for found in starts.values())
        else:
            ok = all(starts.values())
        if not ok:
            return
        # The alert's own startsAt: when Prometheus fired it, not when this loop looked.
        wanted = [t for found in starts.values() for name, t in found.items()
                  if not self.alert_names or name in self.alert_names]
        at = max(wanted) if wanted and all(self.injected_at - 1 <= t <= now for t in wanted) else now
        self.decide("alerted", "pass", self.last["alerted"], at)
        self.event("alert", at, self.last["alerted"])

    def look_scheduler(self, now: float) -> None:
        if self.expect.get("breaker"):
            self.look_breaker(now)
            return
        if self.expect.get("escalation"):
            self.look_escalation(now)
            return
        states = {}
        for node in self.nodes:
            kube = self.probes.kube_fenced(node) if self.probes.core_v1 is not None else "n/a"
            states[node] = (self.probes.slurm_fenced(node), kube)
        self.last["scheduler"] = "; ".join("%s: Slurm %s, Kubernetes %s" % (n, s or "not fenced", k or "schedulable")
                                           for n, (s, k) in states.items())
        if all(s and k for s, k in states.values()):
            self.decide("scheduler", "pass", self.last["scheduler"], now)
            self.event("quarantine", now, self.last["scheduler"])

    def look_breaker(self, now: float) -> None:
        """A storm drill (expectation ``breaker``): the breaker is the rail under test. It must trip;
        the targets it let through are quarantined like any fatal node, and the ones it refused are
        fenced in Slurm only (no new work on a dead GPU) and never cordoned. A refused node that is
        cordoned breaches the rail: the step fails at once."""
        state = self.probes.breaker()
        refused = sorted({str(e.get("node")) for e in state.get("refused") or []} & set(self.nodes))
        acted = [n for n in self.nodes if n not in refused]
        fences = {n: (self.probes.slurm_fenced(n), self.probes.kube_fenced(n)) for n in self.nodes}

        def described(nodes: List[str]) -> str:
            shown = ["%s (Slurm %s, Kubernetes %s)" % (n, fences[n][0] or "not fenced", fences[n][1] or "schedulable")
                     for n in nodes]
            return ", ".join(shown) or "none"

        self.last["scheduler"] = "breaker %s; let through: %s; refused: %s" % (
            "tripped" if state.get("tripped") else "closed", described(acted), described(refused))
        breached = [n for n in refused if fences[n][1]]
        if breached:
            self.decide("scheduler", "fail", "refused by the breaker yet taken out of Kubernetes: %s; %s" % (
                ", ".join(breached), self.last["scheduler"]), now)
            return
        if not (state.get("tripped") and refused and acted):
            return
        if all(fences[n][0] and fences[n][1] for n in acted) and all(fences[n][0] for n in refused):
            tripped_at = state.get("tripped_at")
            at = float(tripped_at) if isinstance(tripped_at, (int, float)) and self.injected_at <= tripped_at <= now \
                else now
            self.event("breaker", at, "tripped: %s" % (state.get("tripped_why") or "at its cap"))
            self.event("quarantine", now, self.last["scheduler"])
            self.decide("scheduler", "pass", self.last["scheduler"], now)

    def look_escalation(self, now: float) -> None:
        """A repeat drill (expectation ``escalation``): a remediation already cured the target of this
        fault, so this time escalation must hold it for a human: a remediation started after the
        injection with plan HOLD, the node fenced in Slurm and cordoned. One that chose any other plan
        (a second reset, or the breaker's refusal) fails the step at once."""
        runs = {n: self.probes.remediation(n) for n in self.nodes}
        # A run from before the injection is the cure (or an older one): not this fault's.
        runs = {n: run for n, run in runs.items() if float(run.get("started_at") or 0) >= self.injected_at}
        waiting = [n for n in self.nodes if n not in runs]
        plans = {n: (run.get("plan") or {}).get("name") for n, run in runs.items()}
        self.last["scheduler"] = "; ".join(
            "%s: no remediation since the injection" % n if n in waiting else "%s: remediation %s, plan %s%s" % (
                n, runs[n].get("id"), plans[n],
                " (%s)" % runs[n]["plan"]["why"] if (runs[n].get("plan") or {}).get("why") else "")
            for n in self.nodes)
        other = [n for n, plan in plans.items() if plan and plan != "HOLD"]
        if other:
            self.decide("scheduler", "fail", "not held: %s. Escalation holds a node whose fault came back after a "
                        "cure of the same fault within its window: was the target cured of it first (gpu_xid with "
                        "the same xid and gpu, with the loop on)?" % self.last["scheduler"], now)
            return
        if waiting or not all(self.probes.slurm_fenced(n) and self.probes.kube_fenced(n) for n in self.nodes):
            return
        for node in self.nodes:
            self.event("escalation", float(runs[node].get("started_at") or now),
                       "%s held: %s" % (node, runs[node]["plan"].get("why") or "escalated"))
        self.event("quarantine", now, self.last["scheduler"])
        self.decide("scheduler", "pass", self.last["scheduler"], now)

    def look_recovered(self, now: float) -> None:
        job = self.probes.job(self.job_id)
        state = job.state if job is not None else "not in the queue"
        if not self.expect.get("requeues"):
            self.last["recovered"] = "job %s %s" % (self.job_id, state)
            if job is not None and job.state == "RUNNING":
                self.decide("recovered", "pass", self.last["recovered"], now)
            return
        output = self.request.get("protected_output")
        self.recovered = scoring.recovery(self.probes.read_text(output) if output else "", self.injected_at)
        self.recovered["gpus"] = job.gpus if job is not None else None
        where = job.batch_host if job is not None else None
        resumed = self.recovered.get("resumed")
        self.last["recovered"] = "job %s %s on %s; %s" % (
            self.job_id, state, where or "-",
            "resumed at step %s" % self.recovered.get("resumed_step") if resumed else "no resume yet")
        # After a fence the job must run elsewhere; a checkpoint kill may bring it back to the same node.
        moved = where not in self.nodes or not self.expect.get("fences")
        if job is None or job.state != "RUNNING" or not moved or not resumed:
            return
        if self.recovered.get("interrupted_at"):
            self.event("requeue", self.recovered["interrupted_at"], "job %s" % self.job_id)
        self.event("resume", self.recovered["resumed_at"], "job %s on %s from step %s" % (
            self.job_id, where, self.recovered["resumed_step"]))
        self.decide("recovered", "pass", self.last["recovered"], self.recovered["resumed_at"])

    def miss_deadlines(self, now: float) -> None:
        for name in LOOP_STEPS:
            if name not in self.decided and now - self.injected_at > self.deadlines[name]:
                self.decide(name, "fail", "deadline %ss missed; last seen: %s" % (
                    self.deadlines[name], self.last.get(name, "nothing")), None)


def progress_line(watch: "LoopWatch", now: float) -> str:
    """Where a watch is: 'at 62 s: detected at 2.1 s, alerted at 4.3 s; waiting for scheduler (deadline
    120 s; last seen: ...), recovered (deadline 600 s)'."""
    done = []
    for name in LOOP_STEPS:
        step = watch.decided.get(name)
        if step is not None:
            seen = "at %.1f s" % (step["at"] - watch.injected_at) if step.get("at") is not None else step["verdict"]
            done.append("%s %s" % (name, seen))
    waiting = []
    for name in LOOP_STEPS:
        if name not in watch.decided:
            last = "; last seen: %s" % watch.last[name][:80] if watch.last.get(name) else ""
            waiting.append("%s (deadline %s s%s)" % (name, watch.deadlines[name], last))
    rest = "; waiting for " + ", ".join(waiting) if waiting else ""
    return "at %.0f s: %s%s" % (now - watch.injected_at, ", ".join(done) or "nothing decided yet", rest)


# What a watch carries from one slice to the next (observe's `carry`): all of its state.
CARRIED = ("decided", "last", "recovered", "events", "braking")


def observe(request: Mapping[str, Any], probes: Probes, clock: Callable[[], float] = time.time,
            sleep: Callable[[float], None] = time.sleep, carry: Optional[Mapping[str, Any]] = None,
            until: Optional[float] = None) -> Dict[str, Any]:
    """Watch until every step is decided (or the breaker trips). With ``until`` (a clock time) the
    watch stops there if it is not done, and returns ``done: False``, a ``progress`` line and the
    ``carry`` to give the next call, which goes on where this one stopped: so a long watch can say
    where it is as it goes."""
    watch = LoopWatch(request, probes)
    if carry:
        for name in CARRIED:
            setattr(watch, name, carry[name])
    else:
        watch.decide_up_front()
    aborted: Optional[str] = None
    breaker_at_start = bool(watch.baseline.get("breaker_tripped"))
    looks = {"detected": watch.look_detected, "alerted": watch.look_alerted, "scheduler": watch.look_scheduler,
             "recovered": watch.look_recovered}
    braking: List[brakes.Brake] = list(request.get("brakes") or [])
    while len(watch.decided) < len(LOOP_STEPS):
        now = clock()
        # A storm drill (expectation ``breaker``) watches the trip as its scheduler step; any other aborts on it.
        if probes.core_v1 is not None and not breaker_at_start and not watch.expect.get("breaker") \
                and breaker_tripped(probes.core_v1, probes.namespace):
            aborted = "the remediation circuit breaker tripped during the drill"
            break
        if braking and probes.prometheus_url:
            aborted = brakes.breached(braking, watch.nodes, probes.prometheus_value, watch.braking, now)
            if aborted:
                watch.event("abort", now, aborted)
                break
        for name in LOOP_STEPS:
            if name not in watch.decided:
                looks[name](now)
        watch.miss_deadlines(now)
        if len(watch.decided) < len(LOOP_STEPS):
            if until is not None and clock() >= until:
                return {"done": False, "progress": progress_line(watch, clock()),
                        "carry": {name: getattr(watch, name) for name in CARRIED}}
            sleep(float(request.get("poll_s") or 1.0))
    steps = [watch.decided.get(name) or scoring.step(name, "fail", watch.expected[name], "not observed: %s" % aborted,
                                                     watch.deadlines[name], None, watch.injected_at)
             for name in LOOP_STEPS]
    return {
        "done": True,
        "progress": progress_line(watch, clock()),
        "steps": steps,
        "events": watch.events,
        "metrics": scoring.metrics(steps, watch.recovered),
        "gaps": scoring.gaps(steps, request.get("experiment") or "", watch.expect),
        "findings": ["%s: %s" % (s["step"], s["observed"]) for s in steps
                     if s["verdict"] in ("fail", "not_observable")],
        "aborted": aborted,
        "recovery": watch.recovered,
    }
