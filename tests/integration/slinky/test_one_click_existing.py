# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""one-click-slurm.yml on an existing cluster with Slinky from the real charts.

The lab's kube-apiserver stands in for an existing cluster. The test adds nodes that look like
two cloud node groups (kwok runs them), then runs playbooks/one-click-slurm.yml with an
inventory like inventories/example: backend existing, slurm_backend slinky, the vendored
Slinky 1.2.1 charts as a local chart source, two pools with selectors, and the example's monitoring
(`existing`, for a Prometheus Operator whose Prometheus selects its release label, as
kube-prometheus-stack's does) and in-cluster self-healing (the rulebook's Deployment). Everything is
the real program: helm, the charts, the API server validating the CRD objects. kwok has no container
runtime, so what the operators would do with those objects, and the pods, are not tested
(docs/real-cluster.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import prometheus_stack
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from lab_harness import REPO, PlaybookResult, run_playbook
from slinky_helpers import VENDOR_RELATIVE, helm_env

pytestmark = [pytest.mark.integration, pytest.mark.lab]

# Relative, as a user gives it on the command line (ansible-playbook runs in the repo root).
CHARTS = str(VENDOR_RELATIVE / "v1.2.1" / "helm")
GROUPS = {"site-h100-1": "h100-a", "site-h100-2": "h100-a", "site-h200-1": "h200-b"}
POOLS = [
    {"name": "site-h100", "count": 2, "gpus_per_node": 8,
     "selector": {"eks.amazonaws.com/nodegroup": "h100-a"},
     "labels": {"gpufleet.io/tier": "training"},
     "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
    {"name": "site-h200", "count": 1, "gpus_per_node": 4, "gpu_product": "NVIDIA-H200",
     "selector": {"eks.amazonaws.com/nodegroup": "h200-b"}},
]
NAMESPACES = ("site-slurm", "site-slinky")
# The site's monitoring stack: its Prometheus and Alertmanager, with kube-prometheus-stack's selectors.
MONITORING_NAMESPACE = "site-monitoring"
DE_IMAGE = "localhost/gpufleet-de:test"


@pytest.fixture(scope="module")
def prometheus_operator(lab):
    """The Prometheus Operator's CRDs and a Prometheus and Alertmanager selecting `release`."""
    prometheus_stack.install(lab)
    prometheus_stack.create_stack(lab, MONITORING_NAMESPACE)
    yield
    prometheus_stack.remove(lab, (MONITORING_NAMESPACE,))


@pytest.fixture(scope="module")
def site(lab, vendor_charts, helm, prometheus_operator, tmp_path_factory):
    """An 'existing cluster': the lab API server with two node groups and a StorageClass.

    Returns the inventory directory. Everything the test adds is removed afterwards, so the
    other lab tests see the lab as it was.
    """
    api = lab.kube()
    api_client = api.api_client
    # The playbook, told this is an existing cluster, binds the agents' role to their
    # ServiceAccount only: the lab's agent processes (a group of the lab CA) lose their binding.
    # Kept here and put back afterwards.
    rbac = client.RbacAuthorizationV1Api(api_client)
    bindings = [binding for binding in rbac.list_cluster_role_binding().items
                if binding.metadata.name.startswith("gpufleet:")]
    role_bindings = [binding for binding in rbac.list_role_binding_for_all_namespaces().items
                     if binding.metadata.name.startswith("gpufleet:")]
    for name, group in GROUPS.items():
        api.create_node({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"eks.amazonaws.com/nodegroup": group, "type": "kwok",
                                    "kubernetes.io/os": "linux"}},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"},
                       "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"}},
        })
    storage = client.StorageV1Api(api_client)
    storage.create_storage_class({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": "standard"}, "provisioner": "kubernetes.io/no-provisioner"})

    inventory = tmp_path_factory.mktemp("site-inventory")
    shutil.copy(REPO / "inventories" / "example" / "hosts.yml", inventory / "hosts.yml")
    site_vars = {}
    for part in sorted((REPO / "inventories" / "example" / "group_vars" / "all").glob("*.yml")):
        site_vars.update(yaml.safe_load(part.read_text()) or {})
    site_vars.update(
        kubernetes_kubeconfig=str(lab.kubeconfig),
        # REQUIRED in the example; kwok plays the pods, so nothing pulls it.
        health_agent_daemonset_image="localhost/gpufleet-health-agent:test",
        gpufleet_node_pools=POOLS,
        slurm_slinky_chart_source="local",
        slurm_slinky_chart_dir=CHARTS,
        storage_namespace=NAMESPACES[0],
        slurm_slinky_operator_namespace=NAMESPACES[1],
        # kwok runs no pods for real: nothing would ever become ready to wait for.
        slurm_slinky_wait=False,
        # What the example marks REQUIRED for monitoring and the in-cluster rulebook (kwok pulls
        # no image, and no AWX is called).
        monitoring_resource_labels=prometheus_stack.RELEASE,
        self_healing_decision_environment_image=DE_IMAGE,
        self_healing_controller_url="https://awx.example.internal",
        self_healing_controller_token="awx-oauth-token-for-the-test",
        gpufleet_webhook_token="a-webhook-token-for-the-test-0123456789",
    )
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "group_vars" / "all" / "site.yml").write_text(yaml.safe_dump(site_vars))
    yield inventory

    # Uninstall what the playbook installed (the CRDs go with their release), so the other
    # Slinky tests install into a clean API server.
    for release, namespace in (("slurm", NAMESPACES[0]), ("slurm-operator", NAMESPACES[1]),
                               ("slurm-operator-crds", NAMESPACES[1])):
        subprocess.run([helm, "uninstall", release, "--namespace", namespace, "--wait", "--timeout", "2m",
                        "--ignore-not-found", "--kubeconfig", str(lab.kubeconfig)],
                       capture_output=True, timeout=180, check=False, env=helm_env(inventory))
    core = lab.kube()
    apps = client.AppsV1Api(core.api_client)
    _ignore_missing(apps.delete_namespaced_daemon_set, "gpufleet-health-agent", "gpufleet-system")
    _ignore_missing(core.delete_namespaced_config_map, "gpufleet-health-agent", "gpufleet-system")
    # The in-cluster rulebook's objects and the monitoring role's Secret and dashboard (its
    # PrometheusRule, PodMonitor and AlertmanagerConfig go with the CRDs).
    _ignore_missing(apps.delete_namespaced_deployment, "gpufleet-self-healing", "gpufleet-system")
    _ignore_missing(client.NetworkingV1Api(core.api_client).delete_namespaced_network_policy,
                    "gpufleet-self-healing", "gpufleet-system")
    for delete in (core.delete_namespaced_service, core.delete_namespaced_config_map, core.delete_namespaced_secret,
                   core.delete_namespaced_service_account):
        _ignore_missing(delete, "gpufleet-self-healing", "gpufleet-system")
    _ignore_missing(core.delete_namespaced_secret, "gpufleet-webhook", "gpufleet-system")
    _ignore_missing(core.delete_namespaced_config_map, "gpufleet-dashboard", "gpufleet-system")
    for name in GROUPS:
        _ignore_missing(core.delete_node, name)
    _ignore_missing(client.StorageV1Api(core.api_client).delete_storage_class, "standard")
    for namespace in NAMESPACES:
        _ignore_missing(core.delete_namespace, namespace)
    for binding in bindings:
        rbac.patch_cluster_role_binding(binding.metadata.name, {"subjects": binding.subjects})
    for binding in role_bindings:
        rbac.patch_namespaced_role_binding(binding.metadata.name, binding.metadata.namespace,
                                           {"subjects": binding.subjects})


def _ignore_missing(call, *args):
    try:
        call(*args)
    except ApiException as exc:
        if exc.status != 404:
            raise


def one_click(lab, inventory: Path, *args: str) -> PlaybookResult:
    """ansible-playbook as a site runs it: its inventory, no lab extra vars."""
    return run_playbook(["-i", str(inventory), str(REPO / "playbooks" / "one-click-slurm.yml"), *args],
                        lab.env(), timeout=1200)


def helm_releases(lab) -> dict:
    """Helm's own release records (Secrets of type helm.sh/release.v1), name -> status."""
    secrets = lab.kube().list_secret_for_all_namespaces(field_selector="type=helm.sh/release.v1")
    releases = {}
    for secret in secrets.items:
        labels = secret.metadata.labels or {}
        releases[(secret.metadata.namespace, labels.get("name"))] = labels.get("status")
    return releases


def test_a_bad_pool_fails_before_anything_is_created(lab, site):
    bad_vars = yaml.safe_load((site / "group_vars" / "all" / "site.yml").read_text())
    bad_vars["gpufleet_node_pools"] = [*POOLS, {"name": "ghost", "count": 1}]
    failed = one_click(lab, site, "-e", json.dumps({"gpufleet_node_pools": bad_vars["gpufleet_node_pools"]}))
    assert failed.rc != 0
    assert "gpufleet_node_pools[2].selector: is required on a real cluster" in failed.output, failed.output[-4000:]
    assert failed.changed == 0
    api = lab.kube()
    assert NAMESPACES[0] not in {ns.metadata.name for ns in api.list_namespace().items}
    assert "gpufleet.io/pool" not in (api.read_node("site-h100-1").metadata.labels or {})


def test_one_click_installs_slinky_on_an_existing_cluster_and_reruns_unchanged(lab, site):
    first = one_click(lab, site)
    assert first.rc == 0, first.output[-8000:]
    assert first.changed > 0

    api = lab.kube()
    # The pools' nodes carry their pool, labels and taints; nothing else was relabelled.
    for name, pool in (("site-h100-1", "site-h100"), ("site-h100-2", "site-h100"), ("site-h200-1", "site-h200")):
        node = api.read_node(name)
        assert node.metadata.labels["gpufleet.io/pool"] == pool
    assert api.read_node("site-h100-1").metadata.labels["gpufleet.io/tier"] == "training"
    assert [(t.key, t.value, t.effect) for t in api.read_node("site-h100-2").spec.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")]
    assert not api.read_node("site-h200-1").spec.taints
    lab_pools = {n.metadata.labels.get("gpufleet.io/pool") for n in api.list_node().items
                 if n.metadata.name.startswith("gpu-a-")}
    assert lab_pools == {"gpu-a"}

    # The three Slinky releases are deployed.
    releases = helm_releases(lab)
    for key in ((NAMESPACES[1], "slurm-operator-crds"), (NAMESPACES[1], "slurm-operator"), (NAMESPACES[0], "slurm")):
        assert releases.get(key) == "deployed", releases

    # The CRDs are established, and the API server accepted the rendered objects.
    extensions = client.ApiextensionsV1Api(api.api_client)
    for plural in ("controllers", "nodesets", "loginsets", "restapis"):
        crd = extensions.read_custom_resource_definition("%s.slinky.slurm.net" % plural)
        established = [c for c in crd.status.conditions if c.type == "Established"]
        assert established and established[0].status == "True", plural
    custom = client.CustomObjectsApi(api.api_client)

    def objects(plural: str) -> dict:
        listed = custom.list_namespaced_custom_object("slinky.slurm.net", "v1beta1", NAMESPACES[0], plural)
        return {item["metadata"]["name"]: item for item in listed["items"]}

    assert len(objects("controllers")) == 1
    assert len(objects("loginsets")) == 1
    assert len(objects("restapis")) == 1
    nodesets = objects("nodesets")
    by_pool = {ns["spec"]["template"]["spec"]["nodeSelector"].get("gpufleet.io/pool"): ns for ns in nodesets.values()
               if "template" in ns["spec"]}
    assert set(by_pool) == {"site-h100", "site-h200"}, sorted(nodesets)
    assert by_pool["site-h100"]["spec"]["replicas"] == 2
    assert by_pool["site-h200"]["spec"]["replicas"] == 1

    # The health agents go on as a DaemonSet the API server accepted (kwok runs no pods).
    apps = client.AppsV1Api(api.api_client)
    daemonset = apps.read_namespaced_daemon_set("gpufleet-health-agent", "gpufleet-system")
    assert daemonset.spec.template.spec.service_account_name == "gpufleet-health-agent"

    # Monitoring the site's Prometheus picks up (its selector checked first), routed to the
    # in-cluster rulebook's Service, which runs as a Deployment the API server accepted.
    rules = custom.list_namespaced_custom_object("monitoring.coreos.com", "v1", "gpufleet-system", "prometheusrules")
    assert [rule["metadata"]["labels"]["release"] for rule in rules["items"]] == ["kube-prometheus-stack"]
    route = custom.get_namespaced_custom_object("monitoring.coreos.com", "v1alpha1", "gpufleet-system",
                                                "alertmanagerconfigs", "gpufleet-self-healing")
    receivers = {receiver["name"]: receiver for receiver in route["spec"]["receivers"]}
    assert receivers["gpufleet-self-healing"]["webhookConfigs"][0]["url"] == \
        "http://gpufleet-self-healing.gpufleet-system.svc:19500/endpoint"
    rulebook = apps.read_namespaced_deployment("gpufleet-self-healing", "gpufleet-system")
    assert rulebook.spec.replicas == 1 and rulebook.spec.template.spec.containers[0].image == DE_IMAGE
    service = api.read_namespaced_service("gpufleet-self-healing", "gpufleet-system")
    assert [port.port for port in service.spec.ports] == [19500]

    again = one_click(lab, site)
    assert again.rc == 0, again.output[-6000:]
    assert again.changed == 0, again.output[-8000:]
