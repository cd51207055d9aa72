"""The slurm role's slinky backend against a real kube-apiserver: the lab's, standing in for an
existing cluster.

playbooks/one-click-slurm.yml runs with --tags storage,slurm, slurm_backend=slinky, the storage
role's pvc backend and the unmodified 1.2.1 charts from tests/fixtures/slinky (a relative
slurm_slinky_chart_dir, as a user would type it). Proven here: the three helm releases install,
the CRDs are established, the API server accepts and holds the Controller, the NodeSets, the
LoginSet and the RestApi (so the generated objects pass the real CRD schemas), and a rerun and a
check-mode run change nothing.

Not proven (kwok runs no containers): anything the operator, slurmctld, slurmd or sshd would do.
The operator's Deployment only gets a kwok pod that is Running without a process, so no slurmd
pod is ever created from a NodeSet, and the webhook is off (slurm_slinky_webhook=auto on an
all-kwok cluster; see docs/slinky.md).
"""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any, Dict, List

import pytest
from lab_harness import Lab
from slinky_helpers import VENDOR_RELATIVE, helm_env

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAMESPACE = "gpufleet-slinky-test"
OPERATOR_NAMESPACE = "gpufleet-slinky-test-operator"
STORAGE_CLASS = "standard"
VERSION = "1.2.1"
ALICE_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHEVTZoDIeCxaPalMEegyC6PltJjxVgBVQXWyfiIIk39 alice@lab"
POOLS = [
    {"name": "gpu-a", "count": 4, "spares": 2, "gpus_per_node": 8, "gpu_product": "NVIDIA-H100-80GB-HBM3",
     "zone": "lab-zone-a", "nodes_per_rack": 2, "racks_per_block": 2, "cpus": 16, "memory_mb": 65536},
    # Not in the lab's kwok nodes: its NodeSet is an object only, as on a cluster still scaling up.
    {"name": "gpu-b", "count": 2, "gpus_per_node": 4},
]
RELEASES = {"slurm-operator-crds": OPERATOR_NAMESPACE, "slurm-operator": OPERATOR_NAMESPACE, "slurm": NAMESPACE}
SLINKY_KINDS = ("controllers", "nodesets", "loginsets", "restapis")


def slinky_vars(lab: Lab) -> Dict[str, Any]:
    return {
        "slurm_backend": "slinky",
        "storage_backend": "pvc",
        "storage_class_name": STORAGE_CLASS,
        "storage_namespace": NAMESPACE,
        "kubernetes_kubeconfig": str(lab.kubeconfig),
        "gpufleet_node_pools": POOLS,
        "slurm_slinky_operator_namespace": OPERATOR_NAMESPACE,
        "slurm_slinky_chart_source": "local",
        # Relative to the repository root, where the harness runs ansible-playbook.
        "slurm_slinky_chart_dir": str(VENDOR_RELATIVE / ("v%s" % VERSION) / "helm"),
        "slurm_slinky_version": VERSION,
        # No cert-manager chart here, and no webhook on kwok (auto turns it off).
        "slurm_slinky_install_cert_manager": False,
        "slurm_slinky_wait_timeout": "3m",
        "slurm_slinky_login_users": [{"name": "alice", "ssh_authorized_keys": [ALICE_KEY], "admin": True}],
    }


def helm_releases(helm: str, lab: Lab, tmp_path) -> Dict[str, Dict[str, Any]]:
    done = subprocess.run([helm, "list", "--all-namespaces", "--all", "--output", "json",
                           "--kubeconfig", str(lab.kubeconfig)],
                          capture_output=True, text=True, timeout=60, check=True, env=helm_env(tmp_path))
    return {r["name"]: r for r in json.loads(done.stdout) if r["name"] in RELEASES}


@pytest.fixture(scope="module")
def installed(lab: Lab, vendor_charts, helm, tmp_path_factory):
    """Slinky installed into the lab's API server by the role; removed again afterwards, so the
    lab is as other tests expect it."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(lab.kubeconfig))
    storage = client.StorageV1Api(api)
    created_class = False
    if STORAGE_CLASS not in [sc.metadata.name for sc in storage.list_storage_class().items]:
        # The claims only have to exist: nothing mounts them without a container runtime.
        storage.create_storage_class(client.V1StorageClass(
            metadata=client.V1ObjectMeta(name=STORAGE_CLASS), provisioner="kubernetes.io/no-provisioner",
            volume_binding_mode="WaitForFirstConsumer"))
        created_class = True
    work = tmp_path_factory.mktemp("slinky")
    try:
        first = lab.playbook("one-click-slurm.yml", "--tags", "storage,slurm", extra=slinky_vars(lab), timeout=1200)
        yield {"first": first, "api": api, "work": work}
    finally:
        for release, namespace in reversed(list(RELEASES.items())):
            subprocess.run([helm, "uninstall", release, "--namespace", namespace, "--wait", "--timeout", "2m",
                            "--ignore-not-found", "--kubeconfig", str(lab.kubeconfig)],
                           capture_output=True, timeout=180, check=False, env=helm_env(work))
        core = client.CoreV1Api(api)
        for namespace in (NAMESPACE, OPERATOR_NAMESPACE):
            try:
                core.delete_namespace(namespace)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
        if created_class:
            storage.delete_storage_class(STORAGE_CLASS)


def test_the_role_installs_the_three_releases(installed, helm, lab):
    first = installed["first"]
    assert first.rc == 0 and first.failed == 0, first.output[-6000:]
    releases = helm_releases(helm, lab, installed["work"])
    assert sorted(releases) == sorted(RELEASES)
    for name, namespace in RELEASES.items():
        assert releases[name]["status"] == "deployed", releases[name]
        assert releases[name]["namespace"] == namespace
        assert releases[name]["chart"] == "%s-%s" % (name, VERSION)
    # The role says which Slurm the chart line runs and how the webhook was decided (the YAML
    # callback may wrap the line anywhere between words).
    assert re.search(r"Slinky\s+1\.2\.1\s+\(local\):\s+Slurm\s+26\.05\s+images", first.output)
    assert re.search(r"webhook\s+off", first.output)


def test_the_crds_are_established(installed):
    from kubernetes import client

    extensions = client.ApiextensionsV1Api(installed["api"])
    for plural in (*SLINKY_KINDS, "accountings", "tokens"):
        crd = extensions.read_custom_resource_definition("%s.slinky.slurm.net" % plural)
        conditions = {c.type: c.status for c in crd.status.conditions or []}
        assert conditions.get("Established") == "True", (plural, conditions)


def test_the_api_server_holds_the_slurm_cluster_objects(installed):
    from kubernetes import client

    objects = client.CustomObjectsApi(installed["api"])
    found: Dict[str, List[Dict[str, Any]]] = {
        plural: objects.list_namespaced_custom_object("slinky.slurm.net", "v1beta1", NAMESPACE, plural)["items"]
        for plural in SLINKY_KINDS
    }
    assert [o["metadata"]["name"] for o in found["controllers"]] == ["slurm"]
    assert [o["metadata"]["name"] for o in found["loginsets"]] == ["slurm-login-login"]
    assert [o["metadata"]["name"] for o in found["restapis"]] == ["slurm"]
    nodesets = {o["metadata"]["name"]: o["spec"] for o in found["nodesets"]}
    # Pools other tests added to the lab (add-node-pool.yml) join the inventory's.
    assert {"slurm-worker-gpu-a", "slurm-worker-gpu-b"} <= set(nodesets)
    for pool in POOLS:
        spec = nodesets["slurm-worker-%s" % pool["name"]]
        gpus = pool["gpus_per_node"]
        assert spec["replicas"] == pool["count"]
        assert spec["slurmd"]["resources"]["limits"] == {"nvidia.com/gpu": gpus}
        assert spec["template"]["spec"]["nodeSelector"]["gpufleet.io/pool"] == pool["name"]
        assert "Gres=gpu:%d" % gpus in spec["extraConf"]

    # Every user's keys, for sshd's AuthorizedKeysFile; the claims the NodeSets mount.
    core = client.CoreV1Api(installed["api"])
    keys = core.read_namespaced_config_map("slurm-login-authorized-keys", NAMESPACE)
    assert keys.data == {"alice": ALICE_KEY + "\n"}
    claims = {c.metadata.name for c in core.list_namespaced_persistent_volume_claim(NAMESPACE).items}
    assert {"slurm-home", "slurm-checkpoints"} <= claims


def test_the_operator_runs_without_webhook_on_kwok(installed):
    from kubernetes import client

    apps = client.AppsV1Api(installed["api"])
    deployments = {d.metadata.name: d for d in apps.list_namespaced_deployment(OPERATOR_NAMESPACE).items}
    # kwok nodes run no webhook server: the webhook (and with it cert-manager) stays off.
    assert sorted(deployments) == ["slurm-operator"]
    admission = client.AdmissionregistrationV1Api(installed["api"])
    assert not [w for w in admission.list_validating_webhook_configuration().items
                if w.metadata.name.startswith("slurm-operator")]
    # helm --wait passed: kwok made the operator's pod Ready (a pod without a process).
    assert deployments["slurm-operator"].status.ready_replicas == 1


def test_a_rerun_and_a_check_run_change_nothing(installed, lab):
    assert installed["first"].rc == 0
    again = lab.playbook("one-click-slurm.yml", "--tags", "storage,slurm", extra=slinky_vars(lab), timeout=900)
    assert again.rc == 0 and again.changed == 0, again.output[-6000:]
    check = lab.playbook("one-click-slurm.yml", "--tags", "storage,slurm", "--check", extra=slinky_vars(lab),
                         timeout=900)
    assert check.rc == 0 and check.changed == 0, check.output[-6000:]


def test_a_pool_left_out_is_refused_while_the_release_has_its_nodeset(installed, lab):
    """helm would delete gpu-b's NodeSet with its pods and jobs: refused, naming it, nothing changed."""
    assert installed["first"].rc == 0
    from kubernetes import client

    custom = client.CustomObjectsApi(installed["api"])
    refused = lab.playbook("one-click-slurm.yml", "--tags", "storage,slurm",
                           extra=dict(slinky_vars(lab), gpufleet_node_pools=POOLS[:1]), timeout=900)
    said = " ".join(refused.output.split())
    assert refused.rc != 0 and refused.changed == 0, refused.output[-4000:]
    assert ("gpufleet_node_pools leaves out the pool of NodeSet slurm-worker-gpu-b (pool gpu-b, 2 replicas) in "
            "namespace %s" % NAMESPACE) in said, said[-3000:]
    assert "slurm_slinky_allow_pool_removal=true" in said
    nodesets = custom.list_namespaced_custom_object("slinky.slurm.net", "v1beta1", NAMESPACE, "nodesets")["items"]
    assert "slurm-worker-gpu-b" in {item["metadata"]["name"] for item in nodesets}


def test_a_dropped_pool_is_checked_through_slurmrestd_and_resize_drains_it_first(installed, lab, slurm_lab):
    """With slurm_slinky_slurm_api=rest, "drained" is checked, not taken on trust.

    kwok runs no slurmd, so the release's slurmrestd is played by the Slurm-only 26.05 lab's, whose
    pool gpu-a stands in for the release's gpu-a NodeSet (the nodes are named gpu-a-001.. there,
    gpu-a-0.. on a site; both are the pool's by name). A job runs on gpu-a-004:
    - dropping gpu-a is refused even with slurm_slinky_allow_pool_removal, naming the job and the
      nodes not drained; the NodeSet stays;
    - resize-node-pool.yml -e remove=true refuses, naming the job, and drains nothing;
    - with evacuate_jobs=true it drains the four nodes, ends the job, and says what to change next;
    - then the dropped pool passes the guard (a check run, so the test release keeps its NodeSet).
    """
    assert installed["first"].rc == 0
    from kubernetes import client
    from slurm_clusters import SlurmCluster, wait_for

    cluster = SlurmCluster(lab=slurm_lab, version="26.05")
    slurm = cluster.client()
    rest = {"slurm_slinky_slurm_api": "rest", "slurm_slinky_slurm_rest": {
        "url": "http://127.0.0.1:%d" % slurm_lab.extra_vars["slurm_slurmrestd_port"],
        "jwt_key_file": str(slurm_lab.lab_dir / "slurm" / "jwt" / "jwt_hs256.key")}}
    dropped = dict(slinky_vars(lab), gpufleet_node_pools=POOLS[1:], slurm_slinky_allow_pool_removal=True, **rest)
    resize = dict(rest, slurm_backend="slinky", gpufleet_node_pools=POOLS, pool="gpu-a", remove=True)
    leaving = ["gpu-a-00%d" % n for n in range(1, 5)]
    job = cluster.command("sbatch", "--parsable", "--nodelist=gpu-a-004", "--gres=gpu:1", "--job-name=train",
                          "--wrap", "sleep 600").strip()

    def job_state():
        return next((j.state for j in slurm.jobs() if j.job_id == job), None)

    try:
        wait_for("job %s running" % job, lambda: job_state() == "RUNNING")
        refused = lab.playbook("one-click-slurm.yml", "--tags", "storage,slurm", extra=dropped, timeout=900)
        said = " ".join(refused.output.split())
        assert refused.rc != 0 and refused.changed == 0, refused.output[-4000:]
        assert ("pool gpu-a is left out of gpufleet_node_pools, but jobs run on its nodes: %s (train, root) on "
                "gpu-a-004; nodes not drained: %s." % (job, ", ".join(leaving))) in said, said[-3000:]
        nodesets = client.CustomObjectsApi(installed["api"]).list_namespaced_custom_object(
            "slinky.slurm.net", "v1beta1", NAMESPACE, "nodesets")["items"]
        assert "slurm-worker-gpu-a" in {item["metadata"]["name"] for item in nodesets}

        refused = lab.playbook("resize-node-pool.yml", extra=resize)
        said = " ".join(refused.output.split())
        assert refused.rc != 0 and refused.changed == 0, refused.output[-4000:]
        assert ("pool gpu-a: jobs run on the nodes that would leave: %s (train, root) on gpu-a-004. Nothing was "
                "changed." % job) in said, said[-3000:]
        assert not [n.name for n in slurm.nodes().values() if "DRAIN" in n.flags], "a refused resize drained a node"

        done = lab.playbook("resize-node-pool.yml", extra=dict(resize, evacuate_jobs=True, grace=2))
        said = " ".join(done.output.split())
        assert done.rc == 0, done.output[-4000:]
        assert "drained, no job left: %s." % ", ".join(leaving) in said, said[-3000:]
        assert ("Next: remove pool gpu-a from gpufleet_node_pools and rerun one-click-slurm.yml with "
                "-e slurm_slinky_allow_pool_removal=true") in said
        nodes = slurm.nodes()
        assert all("DRAIN" in nodes[name].flags and nodes[name].reason == "gpufleet: pool gpu-a removed"
                   and not nodes[name].jobs for name in leaving), {name: nodes[name].long_state for name in leaving}
        assert job_state() != "RUNNING"

        passed = lab.playbook("one-click-slurm.yml", "--tags", "storage,slurm", "--check", extra=dropped,
                              timeout=900)
        assert passed.rc == 0, passed.output[-4000:]
    finally:
        cluster.command("scancel", job)
        cluster.command("scontrol", "update", "NodeName=" + ",".join(leaving), "State=RESUME")
