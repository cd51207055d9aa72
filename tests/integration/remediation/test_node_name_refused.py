# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 3: an empty or odd node name is refused before any API call.

``node_drain name=""`` used to evict every Pending pod of the cluster: ``GET /api/v1/nodes/``
answers with the list of nodes (so the node "exists"), and ``fieldSelector=spec.nodeName=``
selects every pod that no scheduler has placed. Against the lab's real kube-apiserver: a Pending
pod stays untouched, and each module that takes a node name fails naming its option.
"""

from __future__ import annotations

from typing import Any, Dict

import pytest
from kubernetes.client.exceptions import ApiException
from test_kube_modules import run_module, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAMESPACE = "gpufleet-node-name"
POD = "pending-forever"
BAD_NAMES = ["", "gpu-a-001\n", "-oProxyCommand=x", "a" * 300, "../gpu-a-001"]


@pytest.fixture(scope="module")
def pending_pod(lab):
    """A pod no node can take (its nodeSelector matches nothing), so it stays Pending with no nodeName."""
    core = lab.kube()
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    try:
        # Created once the namespace's default service account exists (the admission wants it).
        wait_for("pod %s created" % POD, lambda: _create_pod(core))
        pod = wait_for("pod %s pending" % POD, lambda: _pending(core))
        yield core, pod.metadata.uid
    finally:
        core.delete_namespace(NAMESPACE, propagation_policy="Background")


def _create_pod(core) -> bool:
    try:
        core.create_namespaced_pod(NAMESPACE, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD},
            "spec": {"nodeSelector": {"gpufleet.io/no-such-pool": "none"},
                     "containers": [{"name": "main", "image": "registry.example/none:1"}]},
        })
    except ApiException as exc:
        if exc.status == 409:
            return True
        if exc.status not in (403, 404):
            raise
        return False
    return True


def _pending(core) -> Any:
    pod = core.read_namespaced_pod(POD, NAMESPACE)
    return pod if pod.status.phase == "Pending" and not pod.spec.node_name else None


def _untouched(core, uid: str) -> None:
    pod = core.read_namespaced_pod(POD, NAMESPACE)
    assert pod.metadata.uid == uid
    assert pod.metadata.deletion_timestamp is None
    assert pod.status.phase == "Pending"


@pytest.mark.parametrize("bad", BAD_NAMES, ids=["empty", "newline", "option", "300-chars", "dotdot"])
@pytest.mark.parametrize("module,option,extra", [
    ("node_drain", "name", {"timeout": 5}),
    ("node_quarantine", "name", {}),
    ("node_opt_out", "name", {}),
    ("remediation_start", "node", {}),
])
def test_a_bad_node_name_fails_naming_the_option_and_leaves_a_pending_pod(
        lab, pending_pod, module: str, option: str, extra: Dict[str, Any], bad: str) -> None:
    core, uid = pending_pod
    args = dict(extra, kubeconfig=str(lab.kubeconfig))
    args[option] = bad
    result = run_module(lab, module, args)
    assert result["failed"], result["_output"][-2000:]
    assert result.get("field") == option, result["_output"][-2000:]
    assert option in result["msg"]
    _untouched(core, uid)


def test_the_drain_of_an_empty_name_in_check_mode_evicts_nothing_either(lab, pending_pod) -> None:
    core, uid = pending_pod
    result = run_module(lab, "node_drain", {"name": "", "kubeconfig": str(lab.kubeconfig)}, check=True)
    assert result["failed"] and result.get("field") == "name"
    assert "evicted" not in result or not result["evicted"]
    _untouched(core, uid)
