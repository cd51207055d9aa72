# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The remediation's and the drills' identities: what they may do, asked of the real kube-apiserver,
and their real modules run through their own kubeconfigs.

The kubernetes role's lab backend issues both (client certificates of the lab CA, bound to the
ClusterRoles and Roles of roles/kubernetes/templates/rbac/). The remediation runs the module
sequence of roles/remediation (start, notify, opt-out check, cordon and taint, drain by eviction,
verify read, hold label, audit record) on a node with a pod; the drill gates, checks the steady
state and ends a drill. Both must succeed, and both identities must be refused what they do not need.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

pytestmark = [pytest.mark.integration, pytest.mark.lab]

HERE = Path(__file__).resolve().parent
NODE = "gpu-a-004"
STATE_NAMESPACE, CHAOS_NAMESPACE = "gpufleet-system", "gpufleet-chaos"

# (verb, resource, subresource, namespace): what the remediation's modules call.
REMEDIATION_MAY = [
    ("get", "nodes", "", ""), ("list", "nodes", "", ""), ("patch", "nodes", "", ""),
    ("watch", "nodes", "", ""),  # the first responder's watch
    ("list", "pods", "", ""), ("create", "pods", "eviction", "default"), ("create", "pods", "eviction", "slurm"),
    ("get", "configmaps", "", STATE_NAMESPACE), ("create", "configmaps", "", STATE_NAMESPACE),
    ("update", "configmaps", "", STATE_NAMESPACE), ("create", "events", "", "default"),
    ("list", "events", "", "default"),  # the evidence bundle: the Events about the node
    # provider lab: the spare's kwok Node comes, the failed node's goes.
    ("create", "nodes", "", ""), ("delete", "nodes", "", ""),
]
REMEDIATION_MAY_NOT = [
    ("get", "secrets", "", STATE_NAMESPACE), ("list", "secrets", "", ""), ("get", "secrets", "", "kube-system"),
    ("delete", "namespaces", "", ""), ("create", "namespaces", "", ""), ("delete", "pods", "", "default"),
    ("create", "pods", "", "default"), ("patch", "nodes", "status", ""), ("update", "nodes", "", ""),
    ("delete", "configmaps", "", STATE_NAMESPACE), ("get", "configmaps", "", "kube-system"),
    ("update", "configmaps", "", "default"), ("create", "clusterrolebindings", "", ""),
    ("escalate", "clusterroles", "", ""), ("impersonate", "users", "", ""),
    ("create", "serviceaccounts", "token", STATE_NAMESPACE), ("patch", "daemonsets", "", STATE_NAMESPACE),
    ("create", "events", "", "kube-system"), ("list", "events", "", "kube-system"),
]
DRILL_MAY = [
    ("get", "nodes", "", ""), ("list", "nodes", "", ""),
    ("get", "configmaps", "", STATE_NAMESPACE), ("list", "configmaps", "", STATE_NAMESPACE),
    ("create", "configmaps", "", STATE_NAMESPACE), ("update", "configmaps", "", STATE_NAMESPACE),
    ("create", "pods", "", CHAOS_NAMESPACE), ("delete", "pods", "", CHAOS_NAMESPACE),
]
SELF_HEALING_MAY = [("list", "nodes", "", ""), ("watch", "nodes", "", "")]
SELF_HEALING_MAY_NOT = [
    ("get", "secrets", "", STATE_NAMESPACE), ("patch", "nodes", "", ""), ("patch", "nodes", "status", ""),
    ("delete", "nodes", "", ""), ("list", "pods", "", ""), ("create", "pods", "eviction", "default"),
    ("get", "configmaps", "", STATE_NAMESPACE), ("create", "events", "", "default"),
]
DRILL_MAY_NOT = [
    ("patch", "nodes", "", ""), ("delete", "nodes", "", ""), ("patch", "nodes", "status", ""),
    ("create", "pods", "", "default"), ("create", "pods", "eviction", "default"),
    ("get", "secrets", "", STATE_NAMESPACE), ("get", "secrets", "", CHAOS_NAMESPACE),
    ("delete", "namespaces", "", ""), ("delete", "configmaps", "", STATE_NAMESPACE),
    ("create", "pods", "exec", CHAOS_NAMESPACE), ("create", "clusterrolebindings", "", ""),
]


def api_of(lab, who: str) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(lab.kubeconfig_of(who)))


def allowed(api: client.ApiClient, verb: str, resource: str, subresource: str, namespace: str) -> bool:
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource, subresource=subresource,
                                                        namespace=namespace, group="")))
    if resource in ("clusterrolebindings", "clusterroles"):
        review.spec.resource_attributes.group = "rbac.authorization.k8s.io"
    elif resource == "daemonsets":
        review.spec.resource_attributes.group = "apps"
    return client.AuthorizationV1Api(api).create_self_subject_access_review(review).status.allowed


def run_book(lab, name: str, tmp_path: Path, **variables):
    """Run one of files/*.yml; the JSON its last task writes."""
    result = tmp_path / ("%s.json" % name)
    done = lab.run(HERE / "files" / ("%s.yml" % name), dict(variables, result_file=str(result)))
    assert done.rc == 0 and done.failed == 0, done.output[-12000:]
    return json.loads(result.read_text())


@pytest.fixture(scope="module")
def admin(identity_lab):
    return client.CoreV1Api(config.new_client_from_config(config_file=str(identity_lab.kubeconfig)))


@pytest.fixture(scope="module")
def gpu_node(identity_lab, admin):
    """A kwok GPU node with a pod on it (kwok runs both), removed afterwards."""
    admin.create_node({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "labels": {"gpufleet.io/pool": "gpu-a", "type": "kwok",
                                              "gpufleet.io/chaos": "allowed"},
                     "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"},
                   "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"}},
    })
    yield NODE
    try:
        admin.delete_node(NODE)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.mark.parametrize("who", ["remediation", "drill", "self-healing"])
def test_the_lab_writes_a_private_kubeconfig_per_identity(identity_lab, who):
    kubeconfig = identity_lab.kubeconfig_of(who)
    assert kubeconfig.stat().st_mode & 0o777 == 0o600
    user = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]
    assert set(user) == {"client-certificate", "client-key"}
    info = client.AuthenticationV1Api(api_of(identity_lab, who)).create_self_subject_review({}).status.user_info
    assert info.username == "gpufleet:%s" % who
    assert "system:masters" not in (info.groups or [])


@pytest.mark.parametrize("who, may, may_not", [
    ("remediation", REMEDIATION_MAY, REMEDIATION_MAY_NOT),
    ("drill", DRILL_MAY, DRILL_MAY_NOT),
    ("self-healing", SELF_HEALING_MAY, SELF_HEALING_MAY_NOT),
])
def test_each_identity_may_do_only_what_it_needs(identity_lab, who, may, may_not):
    api = api_of(identity_lab, who)
    refused = [q for q in may if not allowed(api, *q)]
    granted = [q for q in may_not if allowed(api, *q)]
    assert not refused, "%s is refused what it needs: %s" % (who, refused)
    assert not granted, "%s is granted what it must not have: %s" % (who, granted)


def test_the_remediation_identity_is_refused_for_real(identity_lab, admin):
    core = client.CoreV1Api(api_of(identity_lab, "remediation"))
    for call in (lambda: core.list_namespaced_secret(STATE_NAMESPACE),
                 lambda: core.delete_namespace(CHAOS_NAMESPACE),
                 lambda: core.delete_collection_namespaced_pod("default")):
        with pytest.raises(ApiException) as caught:
            call()
        assert caught.value.status == 403
    assert admin.read_namespace(CHAOS_NAMESPACE).status.phase == "Active"


def test_the_remediation_modules_run_with_its_identity(identity_lab, admin, gpu_node, tmp_path):
    pod = admin.create_namespaced_pod("default", {
        "metadata": {"name": "train-identity-test"},
        "spec": {"nodeName": gpu_node, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "train", "image": "localhost/train:test"}]}})
    deadline = time.monotonic() + 60
    while admin.read_namespaced_pod(pod.metadata.name, "default").status.phase != "Running":
        assert time.monotonic() < deadline, "kwok did not run the pod"
        time.sleep(0.5)
    audit = tmp_path / "audit.jsonl"
    result = run_book(identity_lab, "remediation-modules", tmp_path, node=gpu_node,
                      kubeconfig=str(identity_lab.kubeconfig_of("remediation")), audit_log=str(audit))
    assert result["opted_out"] is False
    assert result["evicted"] == ["default/train-identity-test"] and result["blocked"] == []
    assert result["read"] == 1
    # What the API server now holds, read as admin.
    node = admin.read_node(gpu_node)
    assert node.spec.unschedulable is True
    assert any(t.key == "gpufleet.io/gpu-unhealthy" for t in node.spec.taints or [])
    assert node.metadata.labels["gpufleet.io/remediation-hold"] == "true"
    assert json.loads(node.metadata.annotations["gpufleet.io/remediation"])["id"] == result["id"]
    maps = [m.metadata.name for m in admin.list_namespaced_config_map(STATE_NAMESPACE).items]
    assert any(gpu_node in name for name in maps), maps
    reasons = {e.reason for e in admin.list_namespaced_event(
        "default", field_selector="involvedObject.name=%s" % gpu_node).items}
    assert {"GpuRemediationStarted", "GpuRemediationFinished"} <= reasons, reasons
    record = json.loads(audit.read_text().splitlines()[-1])
    assert record["id"] == result["id"]
    # Recorded by the modules that did the phases, in their own runs (their `progress` option).
    timeline = {step["phase"]: step["outcome"] for step in record["timeline"]}
    assert timeline["quarantine"] == {"changed": True}
    assert gpu_node in timeline["notify"]["message"]


def test_the_self_healing_identity_lists_and_watches_nodes(identity_lab, gpu_node):
    """What the rulebook's node_condition source does: a list, then a watch from its resourceVersion."""
    core = client.CoreV1Api(api_of(identity_lab, "self-healing"))
    listed = core.list_node()
    assert gpu_node in [n.metadata.name for n in listed.items]
    stream = watch.Watch().stream(core.list_node, resource_version=listed.metadata.resource_version,
                                  timeout_seconds=1)
    list(stream)  # a 403 would raise here
    with pytest.raises(ApiException) as caught:
        core.patch_node(gpu_node, {"metadata": {"labels": {"forged": "x"}}})
    assert caught.value.status == 403


def test_the_drill_modules_run_with_its_identity(identity_lab, admin, gpu_node, tmp_path):
    result = run_book(identity_lab, "drill-modules", tmp_path, node=gpu_node,
                      kubeconfig=str(identity_lab.kubeconfig_of("drill")), lab_dir=str(identity_lab.lab_dir))
    assert result["targets"] == [gpu_node]
    # The gate wrote the drill into the ledger ConfigMap, and the end took it out, both as the drill.
    assert result["during"] == [result["id"]]
    ledger = admin.read_namespaced_config_map("gpufleet-chaos-ledger", STATE_NAMESPACE)
    assert result["id"] not in json.loads(ledger.data.get("drills", "{}"))
