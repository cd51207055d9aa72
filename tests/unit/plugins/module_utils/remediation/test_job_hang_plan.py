# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 20, part 4: a stalled job (the GpuJobStalled alert) gets plan JOB_HANG, which requeues that
job alone and does nothing to the node; a node with too many stalled jobs is held."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import gpu_condition
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import escalation, plans
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.fault import (
    JOB_HANG,
    JOB_STALLED_REASON,
    fault_from_trigger,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.store import Policy, RemediationStore

DAY = 86400.0
FIELD = "remediation_trigger_encoded.labels.job_id"


def stalled(job_id: Any = "42", node: str = "gpu-a-001") -> Dict[str, Any]:
    """The trigger the rulebook sends for a GpuJobStalled alert (remediation/trigger.py decode's shape)."""
    labels = {"alertname": "GpuJobStalled", "component": "gpufleet", "node": node, "pool": "gpu-a"}
    if job_id is not None:
        labels["job_id"] = job_id
    return {"source": "alertmanager", "alert": "GpuJobStalled", "fingerprint": "f1", "starts_at": None,
            "received_at": None, "labels": labels,
            "annotations": {"summary": "Job %s on %s stopped making progress" % (job_id, node)}}


# -- the fault ----------------------------------------------------------------------------------------
def test_a_stalled_jobs_alert_is_a_job_hang_fault_about_that_job():
    fault = fault_from_trigger(stalled("42"))
    expected = (JOB_HANG, JOB_STALLED_REASON, "degraded", ("42",))
    assert (fault.action, fault.reason, fault.verdict, fault.job_ids) == expected
    assert fault.message == "Job 42 on gpu-a-001 stopped making progress"
    assert fault.as_dict()["job_ids"] == ["42"]
    assert fault_from_trigger(stalled("1234_5")).job_ids == ("1234_5",)


def test_a_stalled_jobs_fault_begins_when_its_alert_began_firing():
    """Its cost counts from the alert's startsAt (Alertmanager's nine fraction digits), not from when the
    remediation started; a startsAt that is missing, unreadable or not believable is not used."""
    now = datetime(2026, 12, 7, 3, 0, 30, tzinfo=timezone.utc).timestamp()
    fired = dict(stalled(), starts_at="2026-12-07T03:00:01.123456789Z")
    assert fault_from_trigger(fired, now=now).since == pytest.approx(now - 28.876544, abs=1e-6)
    for starts_at in (None, "", "yesterday", "1970-01-01T00:00:00Z", "2026-12-09T03:00:00Z"):
        assert fault_from_trigger(dict(stalled(), starts_at=starts_at), now=now).since is None, starts_at
    # Within the clock skew allowed, a start a little ahead of this clock is now.
    ahead = dict(stalled(), starts_at="2026-12-07T03:01:00Z")
    assert fault_from_trigger(ahead, now=now).since == now


@pytest.mark.parametrize("trigger", [
    None,
    dict(stalled(), alert="GpuNodeFatal"),
    {"source": "node_condition", "alert": None, "condition": {"type": "GpuHealthy", "status": "False"}},
])
def test_other_triggers_are_no_job_hang(trigger):
    assert fault_from_trigger(trigger) is None


@pytest.mark.parametrize("job_id", [None, "", "42; rm -rf /", "{{ lookup('pipe', 'id') }}", "-1", "42,43", 42])
def test_a_job_id_label_that_is_no_slurm_job_id_is_refused_naming_the_label(job_id):
    with pytest.raises(FieldError) as error:
        fault_from_trigger(stalled(job_id))
    assert error.value.field == FIELD


# -- the plan -----------------------------------------------------------------------------------------
def test_the_job_hang_plan_requeues_the_job_and_does_nothing_to_the_node():
    plan = plans.plan_for(JOB_HANG)
    assert plan.phases == ("notify", "jobs", "record")
    assert not plan.acts and not plan.needs_slot
    assert "requeue" in plan.intent


def test_a_site_may_fence_the_node_of_a_stalled_job_and_then_it_takes_a_slot():
    plan = plans.plan_for(JOB_HANG, {"JOB_HANG": ["fence", "notify", "jobs", "record"]})
    assert plan.acts and plan.needs_slot


# -- escalation ---------------------------------------------------------------------------------------
def hang(entry_id: str, at: float, action: str = JOB_HANG) -> Dict[str, Any]:
    return {"id": entry_id, "at": at, "reason": JOB_STALLED_REASON, "action": action}


def test_more_stalled_jobs_than_max_job_hangs_on_a_node_hold_it():
    policy = escalation.EscalationPolicy(max_job_hangs=2, window_days=7)
    assert not escalation.decide([], DAY, JOB_STALLED_REASON, policy).hold
    assert not escalation.decide([hang("a", 0)], DAY, JOB_STALLED_REASON, policy).hold
    decision = escalation.decide([hang("a", 0), hang("b", DAY / 2)], DAY, JOB_STALLED_REASON, policy)
    assert decision.hold and "3 stalled jobs" in decision.why and decision.recent == 2
    # Out of the window, they no longer count.
    assert not escalation.decide([hang("a", 0), hang("b", DAY / 2)], 9 * DAY, JOB_STALLED_REASON, policy).hold


def test_stalled_jobs_and_node_remediations_count_apart():
    policy = escalation.EscalationPolicy(max_remediations=1, max_job_hangs=5)
    # Two earlier hangs: no node remediation was done, so an XID's remediation is not held.
    assert not escalation.decide([hang("a", 0), hang("b", 1)], DAY, "Xid48", policy).hold
    # Earlier node remediations do not hold a stalled job's node.
    resets = [{"id": "r%d" % n, "at": n, "reason": "Xid48", "action": "RESET_GPU"} for n in range(3)]
    assert not escalation.decide(resets, DAY, JOB_STALLED_REASON, policy).hold


def test_max_job_hangs_is_checked():
    with pytest.raises(FieldError) as error:
        escalation.EscalationPolicy.from_dict({"max_job_hangs": 0})
    assert error.value.field == "remediation_escalation.max_job_hangs"
    assert escalation.EscalationPolicy.from_dict({"max_job_hangs": 4}).max_job_hangs == 4


# -- the store: which plan a run gets --------------------------------------------------------------
class FakeCoreV1:
    """The Kubernetes calls RemediationStore makes, on one pool of Nodes held in memory."""

    def __init__(self, nodes: Dict[str, Optional[Dict[str, Any]]]) -> None:
        self.nodes = nodes
        self.api_client = SimpleNamespace(sanitize_for_serialization=lambda found: found)
        self.patches: List[str] = []

    def read_node(self, name: str) -> Dict[str, Any]:
        return self.nodes[name]

    def list_node(self, label_selector: str = "") -> Any:
        return SimpleNamespace(items=list(self.nodes))

    def patch_node(self, name: str, body: Any, **_kwargs: Any) -> None:
        self.patches.append(name)


def node(condition: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    healthy = {"type": "GpuHealthy", "status": "True", "reason": "Healthy", "message": "all GPUs healthy"}
    return {"metadata": {"name": "gpu-a-001", "labels": {"gpufleet.io/pool": "gpu-a"}},
            "status": {"conditions": [condition or healthy]}}


def xid79_condition() -> Dict[str, Any]:
    return dict(gpu_condition.encode(gpu_condition.NodeFault(
        "fatal", "RESTART_BM", "Xid79", "GPU 3: XID 79 GPU has fallen off the bus -> RESTART_BM", xids=(79,),
        gpu_index=3)), type="GpuHealthy", lastTransitionTime="2026-12-06T02:30:00Z")


def start(store: RemediationStore, now: float, job_id: str = "42") -> Dict[str, Any]:
    started = store.start("gpu-a-001", stalled(job_id), now, me={"pid": 1, "host": "test", "at": now})
    if not started.get("skip"):
        # Finished, as the playbook's record phase leaves it, so that the next alert starts anew.
        store.progress_store("gpu-a-001").update(
            lambda data: ({key: value.replace('"finished_at": null', '"finished_at": %s' % now)
                          .replace('"result": null', '"result": "remediated"') for key, value in data.items()}, None))
    return started


def test_a_healthy_node_with_a_stalled_job_gets_job_hang_for_that_job(configmaps):
    store = RemediationStore(FakeCoreV1({"gpu-a-001": node()}), Policy(), write=True)
    started = start(store, 1000.0)
    assert started["plan"]["name"] == JOB_HANG and started["fault"]["job_ids"] == ["42"]
    assert "breaker" not in started["decisions"] or started["decisions"]["breaker"] is None


def test_an_unhealthy_node_is_remediated_for_its_condition_not_the_stalled_job(configmaps):
    store = RemediationStore(FakeCoreV1({"gpu-a-001": node(xid79_condition())}), Policy(), write=True)
    started = start(store, 1000.0)
    assert started["plan"]["name"] == "RESTART_BM" and started["fault"]["job_ids"] == []


def test_the_third_stalled_job_on_a_node_holds_it(configmaps):
    store = RemediationStore(FakeCoreV1({"gpu-a-001": node()}),
                             Policy(escalation=escalation.EscalationPolicy(max_job_hangs=2)), write=True)
    assert start(store, 1000.0, "41")["plan"]["name"] == JOB_HANG
    assert start(store, 2000.0, "42")["plan"]["name"] == JOB_HANG
    third = start(store, 3000.0, "43")
    assert third["plan"]["name"] == "HOLD" and "3 stalled jobs" in third["plan"]["why"]
    assert third["fault"]["job_ids"] == ["43"]


def test_a_bad_job_id_claims_nothing(configmaps):
    store = RemediationStore(FakeCoreV1({"gpu-a-001": node()}), Policy(), write=True)
    with pytest.raises(FieldError) as error:
        store.start("gpu-a-001", stalled("$(id)"), 1000.0, me={"pid": 1, "host": "test", "at": 1000.0})
    assert error.value.field == FIELD
    assert store.read_progress("gpu-a-001") is None
