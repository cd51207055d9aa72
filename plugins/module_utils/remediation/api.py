# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The calls the remediation modules make: each module's ``main`` is argument parsing plus one of these."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import (
    check_name,
    check_node_name,
    check_node_names,
    check_text,
    optional_number,
    optional_text,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import core_v1_for, kube_timeouts
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.node_status import create_node_event, event_body
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import cost, neighbours, notify
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import progress as progress_rules
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import record as records
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.breaker import BreakerPolicy
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.escalation import EscalationPolicy
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.plans import check_overrides
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.quarantine_first import act_first
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.store import Policy, RemediationStore

BREAKER_ALERT = "GpuRemediationBreakerTripped"


# A remediation id: new_id's "r-<stamp>-<node>-<digest>", or an operator's own.
REMEDIATION_ID = r"[A-Za-z0-9][A-Za-z0-9._-]{0,299}"


def check_inputs(params: Mapping[str, Any]) -> None:
    """Every option the remediation modules share, through the strict layer, before any API call.

    An empty or odd node name must never reach the API server: "" reads as the list of all nodes."""
    if "node" in params:
        check_node_name(params["node"], "node")
    if params.get("nodes"):
        check_node_names(params["nodes"], "nodes")
    if params.get("remediation_id") is not None:
        check_name(params["remediation_id"], "remediation_id", REMEDIATION_ID, "a remediation id (letters, digits, "
                   "'.', '_', '-'), such as r-20261130T101500-gpu-a-003-1f2e3d")
    kube_timeouts(params)
    for name in ("lease", "alert_lasts", "timeout"):
        optional_number(params.get(name), name, above=0)
    for name in ("namespace", "pool_selector", "event_reason", "stop", "phase",
                 "alertmanager_url", "webhook_url", "kubeconfig", "context", "audit_log"):
        optional_text(params.get(name), name)
    for name in ("text", "error"):  # message bodies, sent as JSON: a failed task's message has newlines
        if params.get(name) is not None:
            check_text(params[name], name, lines=True)


def policy_from(params: Mapping[str, Any]) -> Policy:
    check_inputs(params)
    return Policy(
        namespace=params.get("namespace") or "gpufleet-system",
        pool_selector=params.get("pool_selector") or "gpufleet.io/pool",
        plans=check_overrides(params.get("plans")),
        breaker=BreakerPolicy.from_dict(params.get("breaker")),
        escalation=EscalationPolicy.from_dict(params.get("escalation")),
        lease_s=1800.0 if params.get("lease") is None else float(params["lease"]),
        neighbours=neighbours.parse(params.get("neighbours")),
    )


def store_from(params: Mapping[str, Any], check_mode: bool) -> RemediationStore:
    policy = policy_from(params)  # bad settings fail before any API call
    api = core_v1_for(params)
    return RemediationStore(api, policy, write=not check_mode)


def breaker_alert(node: str, why: str, now: float, resolved: bool = False) -> Dict[str, Any]:
    return notify.alert(
        BREAKER_ALERT,
        {"breaker": "remediation"},
        "The GPU remediation circuit breaker is open: automatic remediation has stopped",
        "%s Remediation of %s was refused. Look at the fleet, then run playbooks/remediation-reset.yml." % (why, node),
        now,
        resolved=resolved,
    )


def start(params: Mapping[str, Any], check_mode: bool, now: Optional[float] = None,
          slurm_client: Optional[Callable[[], Any]] = None) -> Dict[str, Any]:
    """remediation_start: claim, plan, escalation, breaker; with ``fence``, the fence and
    quarantine that head the plan too (quarantine first), before anyone is told."""
    now = time.time() if now is None else now
    store = store_from(params, check_mode)
    client = slurm_client() if params.get("fence") is not None and slurm_client is not None else None
    if client is not None:
        # Before anything is written: slurmctld answers and knows the node (FUTURE included: a
        # node a crashed run already retired). Unknown, it fails naming the node, and no claim is
        # made. (store_from has checked the name already.)
        client.nodes([params["node"]], future=True, with_jobs=False)
    result = store.start(params["node"], dict(params.get("trigger") or {}), now, params.get("fault"))
    result["changed"] = bool(not result.get("skip") and not check_mode)
    result["first"] = {}
    if client is not None and not result.get("skip"):
        try:
            result = act_first(params, result, check_mode, client, store.core_v1)
        except GpufleetError as exc:
            # The claim is made: the failure names the remediation, so that the playbook records it
            # there and its next try resumes it.
            exc.remediation_id = result["id"]
            raise
    result["warnings"] = []
    if params.get("notify") is not None and not result.get("skip") and (result.get("pending") or [])[:1] == ["notify"]:
        result = tell_first(params, result, check_mode, now)
    breaker = (result.get("decisions") or {}).get("breaker")
    result["alerts"] = []
    if breaker and not breaker["granted"] and params.get("alertmanager_url") and not check_mode:
        alert = breaker_alert(params["node"], breaker["why"], now)
        notify.post_alerts(params["alertmanager_url"], [alert])
        result["alerts"].append(alert["labels"]["alertname"])
    return result


_KUBE_PARAMS = ("namespace", "kubeconfig", "context", "kube_connect_timeout", "kube_read_timeout")


def tell_first(params: Mapping[str, Any], started: Dict[str, Any], check_mode: bool, now: float) -> Dict[str, Any]:
    """The notify phase right after the fence and quarantine, in the run that did them (one module
    run fewer before the jobs are signalled): what remediation_record state=notified does, recorded
    as the phase's outcome. A webhook or Event that fails is a warning, as it is there."""
    tell = params["notify"]
    # Now, not the run's start: the fence and quarantine before it were stamped when they ended, and
    # a phase's duration is the time since the one before it.
    now = max(now, time.time())
    kube = {key: params.get(key) for key in _KUBE_PARAMS if params.get(key) is not None}
    told = record(dict(kube, state="notified", node=params["node"], remediation_id=started["id"],
                       webhook_url=tell.get("webhook_url"), event=tell.get("event", True),
                       timeout=tell.get("timeout") or 10.0), check_mode, now)
    outcome = {"message": told["text"], "warnings": told["warnings"]}
    progress = dict(kube, remediation_id=started["id"], phase="notify")
    recorded = record_phase(dict(progress, node=params["node"], outcome=outcome), check_mode, now)
    started["pending"] = list(recorded["pending"]) if recorded and not check_mode else started["pending"][1:]
    started["first"]["notify"] = {"changed": bool(told["changed"])}
    started["warnings"].extend(told["warnings"])
    return started


def record_phase(params: Mapping[str, Any], check_mode: bool, now: Optional[float] = None) -> Dict[str, Any]:
    now = time.time() if now is None else now
    store = store_from(params, check_mode)
    node, remediation_id, phase = params["node"], params["remediation_id"], params.get("phase")

    def change(current: Dict[str, Any]) -> Dict[str, Any]:
        updated = current
        if params.get("intent") is not None:
            updated = progress_rules.add_intent(updated, phase, params["intent"])
        elif phase:
            updated = progress_rules.mark_phase(updated, phase, params.get("outcome") or {}, now, params.get("stop"))
        if params.get("result"):
            updated = progress_rules.finish(updated, params["result"], now, params.get("error"))
        return updated

    before = store.read_progress(node) or {}
    after = store.update(node, remediation_id, now, change)
    return {
        "changed": after != before and not check_mode,
        "progress": after,
        "pending": progress_rules.pending(after) if after.get("plan") else [],
        "summary": progress_rules.summary(after) if after.get("plan") else "",
    }


def reset_breaker(params: Mapping[str, Any], check_mode: bool, now: Optional[float] = None) -> Dict[str, Any]:
    now = time.time() if now is None else now
    store = store_from(params, check_mode)
    answer = store.reset_breaker(bool(params.get("clear_slots")))
    cleared = []
    if params.get("clear_history"):
        cleared = store.clear_history(params.get("nodes") or None)
    alerts = []
    if params.get("alertmanager_url") and not check_mode and answer["before"].get("tripped"):
        notify.post_alerts(
            params["alertmanager_url"], [breaker_alert("(reset)", "Reset by a human.", now, resolved=True)]
        )
        alerts.append(BREAKER_ALERT)
    return {
        "changed": bool(answer["changed"] or cleared),
        "breaker": answer["after"],
        "before": answer["before"],
        "history_cleared": cleared,
        "alerts_resolved": alerts,
        "refused_gone": answer.get("refused_gone", []),
    }


def read_breaker(params: Mapping[str, Any]) -> Dict[str, Any]:
    store = store_from(params, True)
    state = store.breaker_state()
    return {"changed": False, "breaker": state.as_data()}


def slurm_view(slurm_client: Optional[Callable[[], Any]], node: str, job_ids: Any, node_gpus: Optional[int],
               warnings: list) -> Tuple[Optional[int], Dict[str, Dict[str, Any]]]:
    """What the cost needs of Slurm now: the moved jobs' state and start, and the node's GPUs unless
    the fence recorded them (``node_gpus``). A replaced node is gone from Slurm: its GPUs stay
    unknown. Slurm out of reach is a warning: the record is written all the same, its cost naming
    what is unknown."""
    wanted = {str(job_id) for job_id in job_ids}
    if slurm_client is None or (node_gpus is not None and not wanted):
        return node_gpus, {}
    try:
        client = slurm_client()
        jobs = {job.job_id: {"state": job.state, "start_time": job.start_time}
                for job in (client.jobs() if wanted else []) if job.job_id in wanted}
    except GpufleetError as exc:
        warnings.append("the cost is partial: Slurm did not answer (%s)" % exc)
        return node_gpus, {}
    if node_gpus is None:
        # A node gone from Slurm (replaced) answers no more: its GPUs stay unknown, and the cost says so.
        with contextlib.suppress(GpufleetError, KeyError):
            node_gpus = client.nodes([node], with_jobs=False)[node].gpus
    return node_gpus, jobs


def record(params: Mapping[str, Any], check_mode: bool, now: Optional[float] = None,
           slurm_client: Optional[Callable[[], Any]] = None) -> Dict[str, Any]:
    """remediation_record: notify at the start, alert for a hold, or write the audit record at the end.

    ``slurm_client`` (a factory) is asked, at the end, for what the incident's cost needs."""
    now = time.time() if now is None else now
    state, node, remediation_id = params["state"], params["node"], params["remediation_id"]
    store = store_from(params, check_mode)
    progress = store.read_progress(node) or {}
    if check_mode and progress.get("id") != remediation_id:
        return {
            "changed": True,
            "text": "(check mode) would %s remediation %s of %s" % (state, remediation_id, node),
            "warnings": [],
        }
    if progress.get("id") != remediation_id:
        raise FieldError(
            "remediation_id", "node %s has remediation %s, not %s" % (node, progress.get("id"), remediation_id)
        )
    result: Dict[str, Any] = {"changed": False, "warnings": []}
    if state == "notified":
        text = params.get("text") or records.start_text(node, remediation_id, progress["fault"], progress["plan"])
        event_type, reason = "Warning", params.get("event_reason") or "GpuRemediationStarted"
    elif state == "alerted":
        text = params.get("text") or "GPU node %s is held for a human: %s" % (
            node,
            progress["plan"].get("why") or progress["plan"].get("intent"),
        )
        event_type, reason = "Warning", params.get("event_reason") or "GpuRemediationHeld"
    else:
        # The audit line is written first, then the progress is marked finished with the same
        # result: a crash in between writes no second line (the log is checked for it).
        def close(current: Dict[str, Any]) -> Dict[str, Any]:
            if current.get("finished_at"):
                return current
            if "record" in progress_rules.plan_of(current).phases:
                current = progress_rules.mark_phase(current, "record", {}, now)
            return progress_rules.finish(current, "auto", now)

        audit = records.audit_record(close(progress))
        fenced_gpus = next((step["outcome"].get("gpus") for step in audit["timeline"] if step["phase"] == "fence"),
                           None)
        node_gpus, jobs_now = slurm_view(slurm_client, node, [job.get("job_id") for job in audit["jobs"]],
                                         fenced_gpus, result["warnings"])
        audit["cost"] = cost.incident_cost(audit, node_gpus, jobs_now, now)
        result["record"] = audit
        text = params.get("text") or records.end_text(audit)
        event_type = "Normal" if audit.get("result") == "succeeded" and not audit.get("stopped") else "Warning"
        reason = params.get("event_reason") or "GpuRemediationFinished"
        if not check_mode:
            if params.get("audit_log"):
                result["changed"] = records.append_record(params["audit_log"], audit, result["warnings"])
            if not progress.get("finished_at"):
                store.update(node, remediation_id, now, close)
                result["changed"] = True
    result["text"] = text
    if check_mode:
        result["changed"] = True
        return result
    if params.get("event", True):
        try:
            api = store.core_v1
            create_node_event(api, event_body(node, reason, text, event_type, "gpufleet-remediation", now))
            result["changed"] = True
        except GpufleetError as exc:  # the record and the webhook still go out
            result["warnings"].append("no Kubernetes Event: %s" % exc)
    if state == "alerted" and params.get("alertmanager_url"):
        alert = notify.alert(
            "GpuRemediationHeld",
            {"node": node, "remediation_id": remediation_id},
            "GPU node %s is held for a human" % node,
            text,
            now,
            lasts_s=float(params.get("alert_lasts") or 86400),
        )
        notify.post_alerts(params["alertmanager_url"], [alert])
        result["changed"] = True
    if params.get("webhook_url"):
        payload = notify.slack_payload(
            text, {"node": node, "remediation": remediation_id, "plan": progress["plan"].get("name")}
        )
        try:
            notify.post_json(params["webhook_url"], payload, float(params.get("timeout") or 10))
            result["changed"] = True
        except notify.NotifyError as exc:
            result["warnings"].append("the webhook was not told: %s" % exc)
    return result
