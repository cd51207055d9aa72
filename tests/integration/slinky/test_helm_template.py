"""The values the collection generates, rendered by the real Slinky charts with the real helm.

For each supported chart version (1.1.2 and 1.2.1, SchedMD's charts unmodified, from
tests/fixtures/slinky): `helm template` renders the generated values for 1 and 3 pools without
error, into the objects they should make; every key path the collection writes is a key path of
the chart's values.yaml; and the chart facts the collection keeps (1.1.x sample entries, Slurm
versions, operator values) are the charts' own.
"""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import pytest
import yaml
from lab_harness import REPO
from slinky_helpers import CHART_VERSIONS, chart_dir, helm_template, prepare_operator_chart

from ansible_collections.gpufleet.resilience.plugins.module_utils.slinky import charts
from ansible_collections.gpufleet.resilience.plugins.module_utils.slinky.values import slinky_values

pytestmark = [pytest.mark.integration]

ALICE_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHEVTZoDIeCxaPalMEegyC6PltJjxVgBVQXWyfiIIk39 alice@lab"
USERS = [{"name": "alice", "ssh_authorized_keys": [ALICE_KEY], "admin": True}]
STORAGE = {"home_claim": "slurm-home", "checkpoints_claim": "slurm-checkpoints"}
# Three pools that differ in everything the values carry per pool.
POOLS = [
    {"name": "gpu-a", "count": 4, "spares": 2, "gpus_per_node": 8},
    {"name": "gpu-b", "count": 2, "gpus_per_node": 4,
     "taints": [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]},
    {"name": "gpu-c", "count": 1, "gpus_per_node": 2,
     "tolerations": [{"key": "example.com/burst", "operator": "Exists", "effect": "NoSchedule"}]},
]
OPTIONS = {"cluster_name": "fleet", "partition_name": "gpu", "propagated_node_conditions": ["GpuHealthy"]}
RELEASE = "slurm"
SLINKY_API = "slinky.slurm.net/v1beta1"


def generated(version: str, pools: List[Dict[str, Any]], options: Optional[Mapping[str, Any]] = None):
    return slinky_values(pools, USERS, STORAGE, dict(options or OPTIONS), chart_version=version)


def chart_values(version: str, chart: str) -> Dict[str, Any]:
    return yaml.safe_load((chart_dir(version) / chart / "values.yaml").read_text())


def chart_meta(version: str, chart: str) -> Dict[str, Any]:
    return yaml.safe_load((chart_dir(version) / chart / "Chart.yaml").read_text())


def kinds(docs: List[Dict[str, Any]]) -> Counter:
    return Counter(doc["kind"] for doc in docs)


# ---- helm template of the slurm chart --------------------------------------------------------


@pytest.mark.parametrize("pool_count", [1, 3])
@pytest.mark.parametrize("version", CHART_VERSIONS)
def test_slurm_chart_renders_the_generated_values(vendor_charts, helm, tmp_path, version, pool_count):
    pools = POOLS[:pool_count]
    values = generated(version, pools).slurm
    docs = helm_template(helm, chart_dir(version) / "slurm", values, tmp_path)

    counted = kinds(docs)
    assert counted["Controller"] == 1
    assert counted["NodeSet"] == pool_count
    assert counted["LoginSet"] == 1
    assert counted["RestApi"] == 1
    # No accounting unless asked for; the slurm.conf extras, the slurm and JWT keys, sssd.conf.
    assert counted["Accounting"] == 0
    assert counted["ConfigMap"] >= 1 and counted["Secret"] >= 2
    for doc in docs:
        if doc["kind"] in ("Controller", "NodeSet", "LoginSet", "RestApi"):
            assert doc["apiVersion"] == SLINKY_API
            assert doc["metadata"]["namespace"] == "slurm"

    nodesets = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "NodeSet"}
    # The chart's sample NodeSet (1.1.x) is off; each pool has its NodeSet.
    assert sorted(nodesets) == sorted("%s-worker-%s" % (RELEASE, pool["name"]) for pool in pools)
    for pool in pools:
        spec = nodesets["%s-worker-%s" % (RELEASE, pool["name"])]["spec"]
        assert spec["replicas"] == pool["count"]
        assert spec["controllerRef"]["name"] == RELEASE
        gpus = pool["gpus_per_node"]
        assert spec["slurmd"]["resources"] == {"requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}}
        assert spec["slurmd"]["image"].startswith("ghcr.io/slinkyproject/slurmd:")
        pod = spec["template"]["spec"]
        assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "gpufleet.io/pool": pool["name"]}
        tolerations = pod["tolerations"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
        for taint in pool.get("taints", []):
            assert dict(taint, operator="Equal") in tolerations
        for toleration in pool.get("tolerations", []):
            assert toleration in tolerations
        assert not [t for t in tolerations if t.get("key", "") in ("", "node.kubernetes.io/unschedulable")]
        claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
        assert claims == {"slurm-home", "slurm-checkpoints"}
        assert "Gres=gpu:%d" % gpus in spec["extraConf"]
        assert "Features=pool-%s" % pool["name"] in spec["extraConf"]
        # Remediation relies on the operator's PDB for busy slurmd pods.
        assert spec["workloadDisruptionProtection"] is True

    (controller,) = [doc for doc in docs if doc["kind"] == "Controller"]
    assert controller["spec"]["clusterName"] == "fleet"
    assert controller["spec"]["slurmctld"]["image"].startswith("ghcr.io/slinkyproject/slurmctld:")
    slurm_conf = controller["spec"]["extraConf"]
    assert "GresTypes=gpu" in slurm_conf
    partition = "PartitionName=gpu Nodes=%s" % ",".join(sorted(pool["name"] for pool in pools))
    assert partition in slurm_conf
    assert "PartitionName=all" not in slurm_conf

    (login,) = [doc for doc in docs if doc["kind"] == "LoginSet"]
    assert login["metadata"]["name"] == "%s-login-login" % RELEASE
    assert login["spec"]["login"]["image"].startswith("ghcr.io/slinkyproject/login:")
    assert ALICE_KEY in login["spec"]["rootSshAuthorizedKeys"]
    authorized_keys_file = "AuthorizedKeysFile .ssh/authorized_keys /etc/ssh/gpufleet-authorized-keys/%u"
    assert authorized_keys_file in login["spec"]["extraSshdConfig"]
    login_volumes = {v["name"] for v in login["spec"]["template"]["spec"]["volumes"]}
    assert {"gpufleet-home", "gpufleet-checkpoints", "gpufleet-authorized-keys"} <= login_volumes


@pytest.mark.parametrize("version", CHART_VERSIONS)
def test_images_are_the_slurm_release_of_the_chart_line(vendor_charts, helm, tmp_path, version):
    docs = helm_template(helm, chart_dir(version) / "slurm", generated(version, POOLS[:1]).slurm, tmp_path)
    line = charts.chart_line(version)
    images = {doc["kind"]: doc["spec"]["slurmd" if doc["kind"] == "NodeSet" else "slurmctld"]["image"]
              for doc in docs if doc["kind"] in ("NodeSet", "Controller")}
    for image in images.values():
        assert image.split(":")[1].startswith(line.slurm_version + "-"), images


# ---- helm template of the operator and CRDs charts ------------------------------------------


@pytest.mark.parametrize("version", CHART_VERSIONS)
def test_operator_chart_renders_with_and_without_cert_manager(vendor_charts, helm, tmp_path, version):
    operator_chart = prepare_operator_chart(chart_dir(version), tmp_path / "charts")

    with_cert_manager = helm_template(helm, operator_chart, generated(version, POOLS[:1]).operator, tmp_path,
                                      name="slurm-operator", namespace="slinky")
    counted = kinds(with_cert_manager)
    assert counted["Deployment"] == 2
    assert counted["Certificate"] == 2 and counted["Issuer"] == 2
    assert counted["ValidatingWebhookConfiguration"] == 1
    # The CRDs are their own release: the operator chart must not render them too.
    assert counted["CustomResourceDefinition"] == 0

    self_signed = generated(version, POOLS[:1], dict(OPTIONS, webhook_cert_manager=False)).operator
    counted = kinds(helm_template(helm, operator_chart, self_signed, tmp_path, name="slurm-operator",
                                  namespace="slinky"))
    assert counted["Certificate"] == 0 and counted["Issuer"] == 0
    assert counted["ValidatingWebhookConfiguration"] == 1 and counted["Secret"] >= 1

    no_webhook = generated(version, POOLS[:1], dict(OPTIONS, webhook=False)).operator
    docs = helm_template(helm, operator_chart, no_webhook, tmp_path, name="slurm-operator", namespace="slinky")
    counted = kinds(docs)
    assert counted["Deployment"] == 1
    assert counted["Certificate"] == 0 and counted["ValidatingWebhookConfiguration"] == 0
    assert counted["MutatingWebhookConfiguration"] == 0

    (deployment,) = [doc for doc in docs if doc["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0].get("args", [])
    if charts.chart_line(version).propagates_node_conditions:
        assert args[args.index("--propagated-node-conditions") + 1] == "GpuHealthy"
    else:
        assert "--propagated-node-conditions" not in args


@pytest.mark.parametrize("version", CHART_VERSIONS)
def test_crds_chart_renders_the_slinky_crds(vendor_charts, helm, tmp_path, version):
    docs = helm_template(helm, chart_dir(version) / "slurm-operator-crds", {}, tmp_path, name="slurm-operator-crds",
                         namespace="slinky")
    names = sorted(doc["metadata"]["name"] for doc in docs if doc["kind"] == "CustomResourceDefinition")
    assert names == ["%s.slinky.slurm.net" % kind for kind in
                     ("accountings", "controllers", "loginsets", "nodesets", "restapis", "tokens")]


# ---- every key the collection writes is a key of the chart ----------------------------------

# Values the charts document as free-form maps ("(map[string]string)", "(corev1.PodSpec)" parts
# such as resources): any key is the chart's.
FREE_FORM = {"nodeSelector", "configMap", "extraConfMap", "configFiles", "resources", "requests", "limits"}


def _sample_entry(chart: Mapping[str, Any], path: Tuple[str, ...]) -> Any:
    """For a key of a map of objects, the chart's sample entry (1.1.x) or its defaults (1.2.x)."""
    parent = path[-1]
    if parent == "nodesets":
        return chart.get("nodesetDefaults") or chart["nodesets"]["slinky"]
    if parent == "loginsets":
        return chart.get("loginsetDefaults") or chart["loginsets"]["slinky"]
    if parent == "partitions":
        return chart["partitions"]["all"]
    return None


def key_paths_missing(ours: Any, chart: Any, root: Mapping[str, Any], path: Tuple[str, ...] = ()) -> Iterator[str]:
    """Key paths of ``ours`` that the chart's values.yaml does not have."""
    where = ".".join(path) or "<top>"
    if isinstance(ours, Mapping):
        if chart is None:
            return  # a null in the chart takes any value
        if not isinstance(chart, Mapping):
            yield "%s: a map where the chart has %r" % (where, chart)
            return
        sample = _sample_entry(root, path) if len(path) == 1 else None
        for key, value in ours.items():
            if sample is not None:
                # nodesets.<pool>, loginsets.<name>, partitions.<name>: compared with the sample.
                yield from key_paths_missing(value, sample, root, (*path, key))
            elif key in chart:
                yield from key_paths_missing(value, chart[key], root, (*path, key))
            elif path and (not chart or path[-1] in FREE_FORM):
                continue  # an empty map in the chart is a free-form one (configFiles, resources...)
            else:
                yield "%s.%s" % (where, key) if path else key
    elif isinstance(ours, list):
        if chart is None:
            return
        if not isinstance(chart, list):
            yield "%s: a list where the chart has %r" % (where, chart)
            return
        elements = [e for e in chart if isinstance(e, Mapping)]
        if elements:
            schema = {key: None for element in elements for key in element}
            for index, item in enumerate(ours):
                yield from key_paths_missing(item, schema, root, (*path, "[%d]" % index))
        elif chart and not all(isinstance(item, type(chart[0])) for item in ours):
            yield "%s: items of another type than the chart's %r" % (where, chart)
    elif isinstance(chart, (Mapping, list)):
        yield "%s: a scalar where the chart has %r" % (where, chart)


@pytest.mark.parametrize("version", CHART_VERSIONS)
def test_every_value_key_is_a_key_of_the_chart(vendor_charts, version):
    values = generated(version, POOLS)
    slurm_chart = chart_values(version, "slurm")
    assert list(key_paths_missing(values.slurm, slurm_chart, slurm_chart)) == []
    operator_chart = chart_values(version, "slurm-operator")
    assert list(key_paths_missing(values.operator, operator_chart, operator_chart)) == []


def test_the_key_check_finds_a_foreign_key(vendor_charts):
    # The check itself: a misspelt key, a key under a NodeSet and a list item key are all caught.
    chart = chart_values("1.2.1", "slurm")
    values = copy.deepcopy(generated("1.2.1", POOLS[:1]).slurm)
    values["controler"] = {}
    values["nodesets"]["gpu-a"]["slurmdd"] = {}
    values["partitions"]["gpu"]["nodesets"] = [{"name": "gpu-a"}]
    missing = list(key_paths_missing(values, chart, chart))
    assert "controler" in missing
    assert "nodesets.gpu-a.slurmdd" in missing
    assert any(m.startswith("partitions.gpu.nodesets") for m in missing)


# ---- the chart facts the collection keeps are the charts' own ---------------------------------


@pytest.mark.parametrize("version", CHART_VERSIONS)
def test_chart_line_facts_match_the_chart(vendor_charts, version):
    line = charts.chart_line(version)
    slurm_chart = chart_values(version, "slurm")
    assert chart_meta(version, "slurm")["appVersion"] == line.slurm_version
    operator_meta = chart_meta(version, "slurm-operator")
    assert operator_meta["annotations"]["slinky.slurm.net/minimum-slurm-version"] == line.minimum_slurm_version
    assert operator_meta["kubeVersion"] == ">= 1.29.0-0"
    assert all(chart_meta(version, c)["version"] == version for c in ("slurm", "slurm-operator", "slurm-operator-crds"))
    operator_chart = chart_values(version, "slurm-operator")
    assert ("propagatedNodeConditions" in operator_chart) == line.propagates_node_conditions
    assert operator_chart["crds"]["enabled"] is False
    assert {"enabled"} <= set(operator_chart["webhook"]) and {"enabled"} <= set(operator_chart["certManager"])
    if line.nodeset_base:
        # 1.1.x: the sample entries the collection copies into each NodeSet and LoginSet.
        sample_nodeset = dict(slurm_chart["nodesets"][line.sample_nodeset])
        assert sample_nodeset.pop("enabled") is True
        assert sample_nodeset == line.nodeset_defaults()
        sample_login = dict(slurm_chart["loginsets"]["slinky"])
        assert sample_login.pop("enabled") is False
        assert sample_login == line.loginset_defaults()
        assert slurm_chart["partitions"]["all"]["enabled"] is line.sample_partition_on
    else:
        # 1.2.x: entries merge over the chart's defaults; nothing to copy, nothing to turn off.
        assert "nodesetDefaults" in slurm_chart and "loginsetDefaults" in slurm_chart
        assert not slurm_chart["nodesets"] and line.sample_nodeset is None
        assert slurm_chart["partitions"]["all"]["enabled"] is False and not line.sample_partition_on


def test_the_role_pins_a_vendored_chart_version(vendor_charts):
    defaults = yaml.safe_load((REPO / "roles" / "slurm" / "defaults" / "main.yml").read_text())
    assert defaults["slurm_slinky_version"] == charts.DEFAULT_CHART_VERSION
    assert (chart_dir(charts.DEFAULT_CHART_VERSION) / "slurm" / "Chart.yaml").is_file()
    # Every supported line has a vendored chart to test it against.
    assert {charts.chart_line(v).line for v in CHART_VERSIONS} == set(charts.CHART_LINES)


def test_vendor_dir_is_left_untouched(vendor_charts):
    # The operator chart is prepared in a copy; its source directory never gets a charts/.
    for version in CHART_VERSIONS:
        assert not (Path(chart_dir(version)) / "slurm-operator" / "charts").exists()
