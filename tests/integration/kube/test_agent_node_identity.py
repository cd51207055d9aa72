# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Each health agent may write only its own Node's status: proven against the real kube-apiserver.

The identity lab (conftest.py) holds the health_agent role's RBAC and its ValidatingAdmissionPolicy,
and the per-node client certificates the role issues to the lab's agents. The agents' own client
(kube.agent_client, the code the agent runs) writes the GpuHealthy condition as the agent does. The
same policy is proven for the identities of a real site: a ServiceAccount token bound to a pod on the
node (the DaemonSet's projected token) and one bound to the Node, whose node the API server itself
puts in user.extra["authentication.kubernetes.io/node-name"].
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.agent_client import ApiStatusError, agent_api
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.node_status import (
    NodeCondition,
    patch_node_condition,
)

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NODE_A, NODE_B, SPARE = "gpu-a-001", "gpu-a-002", "gpu-a-003"
NAMESPACE, SERVICE_ACCOUNT = "gpufleet-system", "gpufleet-health-agent"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
POLICY = "gpufleet-health-agent-own-node"
HEALTHY = NodeCondition("GpuHealthy", "True", "GpusHealthy", "8 GPUs healthy")
FATAL = NodeCondition("GpuHealthy", "False", "Xid79", "fatal, RESTART_BM: GPU 3: XID 79 (forged)")


def admin_api(lab) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(lab.kubeconfig))


def token_api(lab, token: str) -> client.ApiClient:
    """A client of the lab's API server that authenticates with a bearer token."""
    admin = yaml.safe_load(lab.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    configuration = client.Configuration()
    configuration.host = cluster["server"]
    configuration.ssl_ca_cert = cluster["certificate-authority"]
    # The generated client's auth setting for a bearer token is named BearerToken.
    configuration.api_key = {"BearerToken": token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return client.ApiClient(configuration)


def condition(core: client.CoreV1Api, node: str, kind: str = "GpuHealthy") -> Optional[Dict[str, Any]]:
    for item in core.read_node(node).status.conditions or []:
        if item.type == kind:
            return {"status": item.status, "reason": item.reason, "message": item.message}
    return None


def write(api, node: str, cond: NodeCondition) -> None:
    now = time.time()
    patch_node_condition(api, node, cond, now, now)


@pytest.fixture(scope="module")
def nodes(identity_lab):
    """Two GPU nodes (kwok runs them) and the spare's, removed again afterwards."""
    core = client.CoreV1Api(admin_api(identity_lab))
    for name in (NODE_A, NODE_B):
        core.create_node({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"gpufleet.io/pool": "gpu-a", "type": "kwok"},
                         "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"},
                       "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"}},
        })
    yield core
    for name in (NODE_A, NODE_B):
        try:
            core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def test_the_role_issues_one_private_identity_per_node(identity_lab):
    for node in (NODE_A, NODE_B, SPARE):
        kubeconfig = identity_lab.kubeconfig_of(node)
        assert kubeconfig.stat().st_mode & 0o777 == 0o600
        assert (identity_lab.lab_dir / "agent" / ("%s.key" % node)).stat().st_mode & 0o777 == 0o600
        user = yaml.safe_load(kubeconfig.read_text())["users"][0]
        assert user["name"] == "gpufleet:health-agent:%s" % node
        assert set(user["user"]) == {"client-certificate", "client-key"}
    # Who the API server says each one is.
    review = client.AuthenticationV1Api(config.new_client_from_config(
        config_file=str(identity_lab.kubeconfig_of(NODE_A)))).create_self_subject_review({})
    assert review.status.user_info.username == "gpufleet:health-agent:%s" % NODE_A
    assert "gpufleet:health-agents" in review.status.user_info.groups


def test_an_agent_writes_its_own_condition(identity_lab, nodes):
    api = agent_api(str(identity_lab.kubeconfig_of(NODE_A)))
    write(api, NODE_A, HEALTHY)
    assert condition(nodes, NODE_A) == {"status": "True", "reason": "GpusHealthy", "message": "8 GPUs healthy"}
    write(api, NODE_A, FATAL)
    assert condition(nodes, NODE_A)["reason"] == "Xid79"
    # and its Events, as the agent does.
    api.create_namespaced_event("default", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "%s.identity-test" % NODE_A, "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": NODE_A}, "reason": "Xid79", "message": "identity test",
        "type": "Warning", "source": {"component": "gpufleet-agent"}})


def test_an_agent_writes_its_own_infiniband_condition_and_no_other_nodes(identity_lab, nodes):
    """The agent's second condition (docs/agent.md, "Network health"): its own node's, no one else's."""
    down = NodeCondition("InfiniBandHealthy", "False", "IbPortDown", "fatal: mlx5_1/1 down since 2026-12-06T06:00:00Z")
    write(agent_api(str(identity_lab.kubeconfig_of(NODE_A))), NODE_A, down)
    assert condition(nodes, NODE_A, "InfiniBandHealthy")["reason"] == "IbPortDown"
    with pytest.raises(Exception) as refused:
        write(agent_api(str(identity_lab.kubeconfig_of(NODE_A))), NODE_B, down)
    assert refused.value.status == 403 and "may not change the status of node %s" % NODE_B in str(refused.value)
    assert condition(nodes, NODE_B, "InfiniBandHealthy") is None


def test_an_agent_cannot_mark_another_node(identity_lab, nodes):
    write(agent_api(str(identity_lab.kubeconfig_of(NODE_B))), NODE_B, HEALTHY)
    before = nodes.read_node(NODE_B)
    with pytest.raises(Exception) as refused:
        write(agent_api(str(identity_lab.kubeconfig_of(NODE_A))), NODE_B, FATAL)
    assert refused.value.status == 403, refused.value
    assert POLICY in str(refused.value) and "may not change the status of node %s" % NODE_B in str(refused.value)
    after = nodes.read_node(NODE_B)
    assert condition(nodes, NODE_B) == {"status": "True", "reason": "GpusHealthy", "message": "8 GPUs healthy"}
    assert [c.to_dict() for c in after.status.conditions if c.type == "GpuHealthy"] == \
        [c.to_dict() for c in before.status.conditions if c.type == "GpuHealthy"]
    # Nor the spare's node, once it exists: its identity is its own.
    with pytest.raises(Exception) as refused:
        write(agent_api(str(identity_lab.kubeconfig_of(SPARE))), NODE_A, FATAL)
    assert refused.value.status == 403


def test_an_agent_may_change_only_its_gpu_condition(identity_lab, nodes):
    api = agent_api(str(identity_lab.kubeconfig_of(NODE_A)))
    for body in (
        {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Forged", "message": "x"}]}},
        {"status": {"capacity": {"nvidia.com/gpu": "0"}}},
        {"status": {"allocatable": {"nvidia.com/gpu": "0"}}},
    ):
        with pytest.raises(ApiStatusError) as refused:
            api.patch_node_status(NODE_A, body)
        assert refused.value.status == 403, (body, refused.value)
    node = nodes.read_node(NODE_A)
    assert node.status.capacity["nvidia.com/gpu"] == "8" and node.status.allocatable["nvidia.com/gpu"] == "8"
    assert all(c.reason != "Forged" for c in node.status.conditions or [])


def test_an_agent_can_do_nothing_else(identity_lab, nodes):
    agent = config.new_client_from_config(config_file=str(identity_lab.kubeconfig_of(NODE_A)))
    core = client.CoreV1Api(agent)
    forbidden = [
        lambda: core.delete_node(NODE_A),
        lambda: core.delete_node(NODE_B),
        lambda: core.patch_node(NODE_A, {"spec": {"unschedulable": True}}),
        lambda: core.patch_node(NODE_B, {"metadata": {"labels": {"forged": "x"}}}),
        lambda: core.read_node(NODE_A),
        core.list_node,
        core.list_pod_for_all_namespaces,
        lambda: core.list_namespaced_secret(NAMESPACE),
        lambda: core.read_namespaced_config_map("kube-root-ca.crt", "default"),
        lambda: core.create_namespaced_pod("default", {"metadata": {"name": "forged"},
                                                       "spec": {"containers": [{"name": "c", "image": "x"}]}}),
        lambda: core.delete_namespace(NAMESPACE),
        lambda: core.create_namespaced_event("kube-system", {"metadata": {"name": "forged"},
                                                             "involvedObject": {"kind": "Node", "name": NODE_B}}),
    ]
    for call in forbidden:
        with pytest.raises(ApiException) as refused:
            call()
        assert refused.value.status == 403
    assert nodes.read_node(NODE_A).spec.unschedulable is None
    assert "forged" not in (nodes.read_node(NODE_B).metadata.labels or {})


def request_token(lab, bound: Optional[Dict[str, str]] = None) -> str:
    """A ServiceAccount token of the agents' account from the TokenRequest API, bound or not."""
    core = client.CoreV1Api(admin_api(lab))
    spec: Dict[str, Any] = {"expirationSeconds": 600}
    if bound:
        spec["boundObjectRef"] = bound
    answer = core.create_namespaced_service_account_token(SERVICE_ACCOUNT, NAMESPACE, {"spec": spec})
    return answer.status.token


def who(api: client.ApiClient):
    return client.AuthenticationV1Api(api).create_self_subject_review({}).status.user_info


def test_a_token_that_names_no_node_is_refused(identity_lab, nodes):
    """A ServiceAccount token bound to nothing (the lab agents' shared token of earlier versions) is
    allowed by RBAC, and refused by the policy: it could be any node's."""
    api = token_api(identity_lab, request_token(identity_lab))
    assert NODE_NAME_KEY not in (who(api).extra or {})
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(api).patch_node_status(NODE_A, {"status": {"conditions": [
            {"type": "GpuHealthy", "status": "False", "reason": "Xid79", "message": "forged"}]}})
    assert refused.value.status == 403
    assert "names no node" in refused.value.body
    assert condition(nodes, NODE_A)["message"] != "forged"


def test_a_node_bound_token_names_its_node(identity_lab, nodes):
    node = nodes.read_node(NODE_A)
    bound_to = {"kind": "Node", "apiVersion": "v1", "name": NODE_A, "uid": node.metadata.uid}
    api = token_api(identity_lab, request_token(identity_lab, bound_to))
    # The API server itself derives the node from the token's claims.
    assert who(api).extra[NODE_NAME_KEY] == [NODE_A]
    write(client.CoreV1Api(api), NODE_A, HEALTHY)
    assert condition(nodes, NODE_A)["status"] == "True"
    with pytest.raises(Exception) as refused:
        write(client.CoreV1Api(api), NODE_B, FATAL)
    assert refused.value.status == 403
    assert condition(nodes, NODE_B)["status"] == "True"


def test_a_daemonset_pod_token_names_its_node(identity_lab, nodes):
    """The DaemonSet's identity on a real cluster: the pod's projected token, bound to the pod, which
    is bound to its node. Same policy, same answer."""
    core = client.CoreV1Api(admin_api(identity_lab))
    pod = core.create_namespaced_pod(NAMESPACE, {
        "metadata": {"name": "agent-identity-test"},
        "spec": {"nodeName": NODE_B, "serviceAccountName": SERVICE_ACCOUNT,
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "agent", "image": "localhost/gpufleet-health-agent:test"}]}})
    try:
        bound_to = {"kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name, "uid": pod.metadata.uid}
        api = token_api(identity_lab, request_token(identity_lab, bound_to))
        info = who(api)
        assert info.username == "system:serviceaccount:%s:%s" % (NAMESPACE, SERVICE_ACCOUNT)
        assert info.extra[NODE_NAME_KEY] == [NODE_B]
        write(client.CoreV1Api(api), NODE_B, HEALTHY)
        with pytest.raises(Exception) as refused:
            write(client.CoreV1Api(api), NODE_A, FATAL)
        assert refused.value.status == 403
    finally:
        core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
