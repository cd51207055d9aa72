"""The lab agents survive what real nodes do to them, fence fast when asked, and can do nothing else.

* the API server stopped (SIGSTOP, so connections hang as they do behind a dead load balancer)
  for 30 s: sensing goes on, and the newest condition is written when the server answers again;
* NVML answering errors (a GPU state file the fake cannot read): counted, the agent keeps running
  and senses again once NVML answers;
* the kernel-log file rotated: the agent reads the new file;
* fast fence on: the Slurm node is drained with a gpufleet: reason within a second; off: untouched;
* RBAC: the agents' identity may patch nodes/status and create Events, and nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import yaml
from agent_probe import AgentProbe, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.lab]


def slurm_node(lab, node):
    text = lab.slurm("scontrol", "show", "node", "--oneliner", node)
    fields = {}
    for item in text.split():
        if "=" in item:
            key, value = item.split("=", 1)
            fields.setdefault(key, value)
    reason = text.split("Reason=", 1)[1].split(" [", 1)[0] if "Reason=" in text else ""
    return fields.get("State", ""), reason


def apiserver_pid(lab):
    return int(json.loads((lab.run_dir / "kube-apiserver.pid").read_text())["pid"])


def test_api_server_down_for_30s(lab):
    probe = AgentProbe(lab, "gpu-a-001")
    probe.reset()
    errors_before = probe.sample("gpufleet_agent_errors_total", source="kubernetes") or 0
    pid = apiserver_pid(lab)
    os.kill(pid, signal.SIGSTOP)
    try:
        stopped = time.monotonic()
        probe.fakegpu("xid", "--gpu", "0", "--xid", "79")
        # Sensing does not wait for the API server: the metric and the journal have it at once.
        wait_for(lambda: probe.sample("gpufleet_node_health_verdict", state="fatal") == 1.0, 5)
        wait_for(lambda: any(r["reason"] == "Xid79" for r in probe.journal_records()), 5)
        time.sleep(max(0.0, 30 - (time.monotonic() - stopped)))
        assert probe.sample("gpufleet_agent_up") == 1.0
    finally:
        os.kill(pid, signal.SIGCONT)
    assert (probe.sample("gpufleet_agent_errors_total", source="kubernetes") or 0) > errors_before
    condition = probe.wait_condition(lambda c: c["reason"] == "Xid79", timeout=60,
                                     what="the condition written after the API server came back")
    assert condition["status"] == "False"
    probe.reset()


def test_nvml_errors_are_survived(lab):
    probe = AgentProbe(lab, "gpu-a-003")
    probe.reset()
    state = probe.gpu_dir / "gpu0.state"
    hidden = probe.gpu_dir / "gpu0.state.hidden"
    errors_before = probe.sample("gpufleet_agent_errors_total", source="nvml") or 0
    os.rename(state, hidden)  # the fake answers NVML_ERROR_UNKNOWN for a GPU it cannot read
    try:
        wait_for(lambda: (probe.sample("gpufleet_agent_errors_total", source="nvml") or 0) >= errors_before + 2, 10)
        assert probe.sample("gpufleet_agent_up") == 0.0
    finally:
        os.rename(hidden, state)
    wait_for(lambda: probe.sample("gpufleet_agent_up") == 1.0, 10)
    probe.fakegpu("xid", "--gpu", "0", "--xid", "79")
    probe.wait_condition(lambda c: c["reason"] == "Xid79")
    probe.reset()


def test_kernel_log_rotation(lab):
    probe = AgentProbe(lab, "gpu-a-003")
    probe.reset()
    os.rename(probe.kmsg, str(probe.kmsg) + ".1")
    probe.kmsg.write_text("")
    bus = probe.gpu(1)["pci_bus_id"].split(":", 1)[1]
    probe.kernel_line("NVRM: Xid (PCI:0000:%s): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus." % bus)
    probe.wait_condition(lambda c: c["reason"] == "Xid79" and "GPU 1" in c["message"])
    os.unlink(str(probe.kmsg) + ".1")
    probe.reset()


@pytest.fixture()
def fast_fence(lab):
    """Fast fence switched on for gpu-a-004 by its configuration file and SIGHUP; restored after."""
    probe = AgentProbe(lab, "gpu-a-004")
    original = probe.config.read_text()
    config = yaml.safe_load(original)
    config["fast_fence"] = {"enabled": True, "slurm_conf": str(lab.slurm_conf)}
    probe.config.write_text(yaml.safe_dump(config))
    os.kill(probe.pid, signal.SIGHUP)
    time.sleep(1.0)
    yield probe
    probe.config.write_text(original)
    os.kill(probe.pid, signal.SIGHUP)
    probe.reset()
    lab.slurm("scontrol", "update", "NodeName=gpu-a-004", "State=RESUME", check=False)


def test_fast_fence_on_drains_within_a_second(lab, fast_fence):
    probe = fast_fence
    probe.reset()
    assert "DRAIN" not in slurm_node(lab, "gpu-a-004")[0]

    def drained():
        state = slurm_node(lab, "gpu-a-004")
        return state if "DRAIN" in state[0] else None

    injected = time.monotonic()
    probe.fakegpu("xid", "--gpu", "2", "--xid", "79")

    _state, reason = wait_for(drained, 5, interval=0.02, what="gpu-a-004 drained")
    elapsed = time.monotonic() - injected
    assert reason.startswith("gpufleet: Xid79 GPU 2 ("), reason
    assert elapsed < 1.0, "drained %.2fs after the fault" % elapsed
    fenced = [r for r in probe.journal_records() if r.get("event") == "fenced"]
    assert fenced and fenced[-1]["outcome"] == "drained"


def test_fast_fence_off_leaves_slurm_alone(lab):
    probe = AgentProbe(lab, "gpu-a-003")
    probe.reset()
    before = slurm_node(lab, "gpu-a-003")
    probe.fakegpu("xid", "--gpu", "2", "--xid", "79")
    probe.wait_condition(lambda c: c["reason"] == "Xid79")
    time.sleep(1.5)
    assert slurm_node(lab, "gpu-a-003") == before
    probe.reset()


def agent_api(lab, node="gpu-a-001"):
    """One agent's own identity (its node's kubeconfig), through the kubernetes package."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str(lab.lab_dir / "agent" / ("%s.kubeconfig" % node)))


def test_rbac_allows_only_node_status_and_events(lab):
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api = agent_api(lab)
    core = client.CoreV1Api(api)
    merge = "application/strategic-merge-patch+json"
    # What the agent does works: its own node's GpuHealthy (written back as it is, so the running
    # agent's verdict stands).
    current = next(c for c in lab.kube().read_node_status("gpu-a-001").status.conditions if c.type == "GpuHealthy")
    core.patch_node_status("gpu-a-001", {"status": {"conditions": [{
        "type": "GpuHealthy", "status": current.status, "reason": current.reason, "message": current.message}]}},
        _content_type=merge)
    # Nothing else does: another condition, another node's status (the admission policy), and the rest (RBAC).
    forbidden = [
        lambda: core.patch_node_status("gpu-a-001", {"status": {"conditions": [{
            "type": "GpuHealthyRbacProbe", "status": "True", "reason": "Probe", "message": "rbac test"}]}},
            _content_type=merge),
        lambda: core.patch_node_status("gpu-a-002", {"status": {"conditions": [{
            "type": "GpuHealthy", "status": "False", "reason": "Xid79", "message": "fatal, RESTART_BM: forged"}]}},
            _content_type=merge),
        lambda: core.delete_node("gpu-a-001"),
        lambda: core.patch_node("gpu-a-001", {"metadata": {"labels": {"rbac-probe": "x"}}}),
        lambda: core.read_node("gpu-a-001"),
        lambda: core.list_namespaced_pod("default"),
        lambda: core.list_namespaced_secret("gpufleet-system"),
        lambda: core.patch_namespaced_pod_status("any", "default", {"status": {}}),
    ]
    for call in forbidden:
        with pytest.raises(ApiException) as caught:
            call()
        assert caught.value.status == 403
    # And the API server says so when asked.
    authz = client.AuthorizationV1Api(api)

    def allowed(verb, resource, subresource="", namespace=""):
        review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource, subresource=subresource,
                                                            namespace=namespace, group="")))
        return authz.create_self_subject_access_review(review).status.allowed

    assert allowed("patch", "nodes", "status")
    assert allowed("create", "events", namespace="default")
    assert not allowed("delete", "nodes")
    assert not allowed("update", "nodes")
    assert not allowed("patch", "nodes")
    assert not allowed("get", "secrets", namespace="gpufleet-system")
    assert not allowed("create", "pods", "eviction", namespace="default")


def test_condition_survives_a_node_ready_flap(lab):
    """kwok, like a kubelet, keeps the conditions it does not own when it sets a node Ready again."""
    probe = AgentProbe(lab, "gpu-a-004")
    probe.reset()
    api = lab.kube()

    def ready():
        node = api.read_node("gpu-a-004")
        return next((c.status for c in node.status.conditions or [] if c.type == "Ready"), None)

    api.patch_node("gpu-a-004", {"metadata": {"annotations": {"gpufleet.io/lab-node-lost": "true"}}})
    try:
        wait_for(lambda: ready() == "False", 30, interval=0.2, what="gpu-a-004 NotReady")
    finally:
        api.patch_node("gpu-a-004", {"metadata": {"annotations": {"gpufleet.io/lab-node-lost": None}}})

    # Read in the same object as Ready's return, so the agent's 60 s heartbeat cannot have put the
    # condition back in between.
    def ready_again():
        node = api.read_node("gpu-a-004")
        return node if conditions(node).get("Ready") == "True" else None

    node = wait_for(ready_again, 30, interval=0.1, what="gpu-a-004 Ready again")
    assert conditions(node).get("GpuHealthy") == "True"


def conditions(node):
    return {c.type: c.status for c in node.status.conditions or []}
