"""The monitoring role's `existing` backend against the Prometheus Operator's real CRDs.

The lab's kube-apiserver stands in for a cluster running the Operator: the test installs the
Operator's own CRDs (tests/integration/prometheus_stack.py: PrometheusRule, PodMonitor,
AlertmanagerConfig, Prometheus and Alertmanager of v0.85.0, taken offline from its Go module) and a
Prometheus and an Alertmanager with kube-prometheus-stack's selectors, then runs the role with
monitoring_backend=existing. The API server validates every object against the CRDs' schemas;
a strict server-side dry run of the rendered manifests rejects unknown or pruned fields. No
Operator runs, so what it would generate from these objects is not tested (docs/monitoring.md).
"""

from __future__ import annotations

import json
from typing import Optional

import prometheus_stack
import pytest
import yaml
from agent_probe import wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from lab_harness import (
    REPO,
    PlaybookResult,
    case_hosts,
    kubectl,
    namespace_exists,
    run_cases,
    run_playbook,
    unestablished_crds,
)
from prometheus_stack import GROUP

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAMESPACE = "gpufleet-monitoring-test"
# Where the site's Prometheus and Alertmanager resources live (kube-prometheus-stack's defaults:
# its release label, every namespace). No Operator runs: only their selectors are read.
STACK_NAMESPACE = "gpufleet-monitoring-stack-test"
STACK = prometheus_stack.stack(STACK_NAMESPACE)
RULES = REPO / "roles" / "monitoring" / "files" / "gpufleet-alerts.yml"
DASHBOARD = REPO / "roles" / "monitoring" / "files" / "dashboards" / "gpufleet-fleet.json"
PLAYBOOK = """\
- name: Monitoring on an existing cluster
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  roles:
    - role: gpufleet.resilience.monitoring
"""


@pytest.fixture(scope="module")
def operator_crds(lab):
    crd_dir = prometheus_stack.install(lab)
    prometheus_stack.create_stack(lab, STACK_NAMESPACE)
    yield crd_dir
    # Leave the lab as it was for the other tests.
    prometheus_stack.remove(lab, (NAMESPACE, STACK_NAMESPACE))


@pytest.fixture(scope="module")
def role(lab, tmp_path_factory):
    work = tmp_path_factory.mktemp("monitoring-existing")
    playbook = work / "monitoring.yml"
    playbook.write_text(PLAYBOOK)
    manifests = work / "manifests"
    base_vars = dict(monitoring_backend="existing", kubernetes_kubeconfig=str(lab.kubeconfig),
                     gpufleet_lab_dir=str(lab.lab_dir), monitoring_namespace=NAMESPACE,
                     monitoring_resource_labels={"release": "kube-prometheus-stack"},
                     monitoring_alert_webhook_url="http://self-healing.gpufleet-system.svc:5000/endpoint",
                     monitoring_manifests_dir=str(manifests))

    def run(*args: str, **extra) -> PlaybookResult:
        # None leaves a variable to its role default.
        variables = {key: value for key, value in dict(base_vars, **extra).items() if value is not None}
        return run_playbook(["-i", "localhost,", str(playbook), "-e", json.dumps(variables), *args], lab.env())

    def cases(name: str, overrides: dict) -> tuple:
        """Every case in one run (as shipped_inventory.play_cases does for inventories): one local host
        per case with its own variables, so the role's checks run side by side and each host stops at
        its own first refusal. Returns the run and, per case, its last task result as JSON text."""
        inventory = work / ("cases-%s.yml" % name)
        inventory.write_text(yaml.safe_dump({"all": {"hosts": case_hosts({
            case: {key: value for key, value in dict(base_vars, **extra).items() if value is not None}
            for case, extra in overrides.items()})}}))
        play = work / "monitoring-cases.yml"
        play.write_text(PLAYBOOK.replace("hosts: localhost", "hosts: all"))
        return run_cases(["-i", str(inventory), str(play)], lab.env(), work / ("tree-%s" % name), overrides)

    run.manifests = manifests
    run.cases = cases
    return run


def custom_objects(lab, plural: str, version: str = "v1") -> dict:
    api = client.CustomObjectsApi(lab.kube().api_client)
    listed = api.list_namespaced_custom_object(GROUP, version, NAMESPACE, plural)
    return {item["metadata"]["name"]: item for item in listed["items"]}


def webhook_configs(alertmanager_config_spec: dict) -> list:
    receivers = {r["name"]: r for r in alertmanager_config_spec["receivers"]}
    return receivers["gpufleet-self-healing"]["webhookConfigs"]


def is_subset(want, got, path="") -> list:
    """Paths where `got` lacks or differs from `want` (what the API server pruned or changed)."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [path]
        return [p for key, value in want.items() for p in is_subset(value, got.get(key), "%s.%s" % (path, key))]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [path]
        pairs = enumerate(zip(want, got, strict=True))
        return [p for i, (w, g) in pairs for p in is_subset(w, g, "%s[%d]" % (path, i))]
    return [] if want == got else [path]


def test_idempotency_ladder_on_the_operator_crds(lab, operator_crds, role):
    check = role("--check")
    assert check.rc == 0, check.output[-6000:]
    assert check.changed > 0
    assert not namespace_exists(lab, NAMESPACE), "check mode created the namespace"

    first = role()
    assert first.rc == 0, first.output[-6000:]
    assert first.changed > 0

    check_again = role("--check")
    assert check_again.rc == 0, check_again.output[-6000:]
    assert check_again.changed == 0, check_again.output[-6000:]

    again = role()
    assert again.rc == 0, again.output[-6000:]
    assert again.changed == 0, again.output[-6000:]


def test_the_api_server_kept_every_field_the_role_wrote(lab, operator_crds, role):
    written = [yaml.safe_load(path.read_text()) for path in sorted(role.manifests.glob("*.yml"))]
    kinds = sorted(obj["kind"] for obj in written)
    assert kinds == ["AlertmanagerConfig", "ConfigMap", "PodMonitor", "PrometheusRule"]
    served = {**custom_objects(lab, "prometheusrules"), **custom_objects(lab, "podmonitors"),
              **custom_objects(lab, "alertmanagerconfigs", "v1alpha1")}
    served["gpufleet-dashboard"] = client.ApiClient().sanitize_for_serialization(
        lab.kube().read_namespaced_config_map("gpufleet-dashboard", NAMESPACE))
    for obj in written:
        got = served[obj["metadata"]["name"]]
        assert is_subset(obj["spec"] if "spec" in obj else obj["data"], got.get("spec", got.get("data"))) == [], \
            obj["metadata"]["name"]
        assert got["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_strict_server_side_dry_run_accepts_the_manifests(lab, operator_crds, role):
    # Strict field validation: a field the CRD schema does not know is an error, not pruned.
    done = kubectl(lab, "apply", "--server-side", "--dry-run=server", "--validate=strict",
                   "--field-manager=gpufleet-monitoring", "-f", str(role.manifests))
    assert done.stdout.count("serverside-applied (server dry run)") == 4, done.stdout


def test_a_field_the_schema_does_not_know_is_refused(lab, operator_crds, role, tmp_path):
    # The dry run above is only worth something if the CRD schema is really enforced.
    podmonitor = yaml.safe_load((role.manifests / "podmonitor-gpufleet-agent.yml").read_text())
    podmonitor["spec"]["podMetricsEndpoints"][0]["portname"] = "metrics"
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump(podmonitor))
    done = kubectl(lab, "apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", str(bad), check=False)
    assert done.returncode != 0
    assert "portname" in done.stderr


def test_the_objects_carry_the_rules_scrape_and_route(lab, operator_crds, role):
    source = yaml.safe_load(RULES.read_text())
    rule = custom_objects(lab, "prometheusrules")["gpufleet-alerts"]
    served_rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert [r["alert"] for r in served_rules] == [r["alert"] for g in source["groups"] for r in g["rules"]]
    # The same expressions; every alert routed by its namespace label (OnNamespace matcher).
    assert [r["expr"] for r in served_rules] == [r["expr"] for g in source["groups"] for r in g["rules"]]
    assert {r["labels"]["namespace"] for r in served_rules} == {NAMESPACE}
    assert {r["labels"]["component"] for r in served_rules} == {"gpufleet"}

    monitor = custom_objects(lab, "podmonitors")["gpufleet-agent"]["spec"]
    assert monitor["selector"] == {"matchLabels": {"app.kubernetes.io/name": "gpufleet-health-agent"}}
    assert monitor["attachMetadata"] == {"node": True}
    endpoint = monitor["podMetricsEndpoints"][0]
    assert endpoint["port"] == "metrics"
    assert endpoint["interval"] == "30s"
    targets = {r["targetLabel"]: r for r in endpoint["relabelings"]}
    assert targets["node"]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"]
    assert targets["pool"]["sourceLabels"] == ["__meta_kubernetes_node_label_gpufleet_io_pool"]
    assert targets["job"]["replacement"] == "gpufleet-agent"

    route = custom_objects(lab, "alertmanagerconfigs", "v1alpha1")["gpufleet-self-healing"]["spec"]
    assert route["route"]["matchers"] == [{"name": "component", "value": "gpufleet", "matchType": "="}]
    assert route["route"]["groupBy"] == ["alertname", "node"]
    assert route["route"]["groupWait"] == "30s"
    assert webhook_configs(route) == [
        {"url": "http://self-healing.gpufleet-system.svc:5000/endpoint", "sendResolved": True}]
    # Fleet-wide alerts (no node) go to a receiver of their own, never to the remediation webhook.
    assert route["route"]["routes"] == [{"receiver": "gpufleet-fleet", "groupBy": ["alertname"],
                                         "matchers": [{"name": "scope", "value": "fleet", "matchType": "="}]}]
    assert {"name": "gpufleet-fleet"} in route["receivers"]

    dashboard = lab.kube().read_namespaced_config_map("gpufleet-dashboard", NAMESPACE)
    assert dashboard.metadata.labels["grafana_dashboard"] == "1"
    assert json.loads(dashboard.data["gpufleet-fleet.json"]) == json.loads(DASHBOARD.read_text())


def test_missing_operator_crds_fail_before_anything_is_applied(lab, operator_crds, role):
    kubectl(lab, "delete", "crd", "alertmanagerconfigs.%s" % GROUP, "--wait=true")
    try:
        failed = role(monitoring_name="gpufleet-other", monitoring_manifests_dir="")
        assert failed.rc != 0
        assert "CRDs missing: alertmanagerconfigs.monitoring.coreos.com" in failed.output, failed.output[-4000:]
        assert "gpufleet-other-alerts" not in custom_objects(lab, "prometheusrules")
        # Without the AlertmanagerConfig the rest applies.
        without = role(monitoring_name="gpufleet-other", monitoring_alertmanager_config=False,
                       monitoring_manifests_dir="")
        assert without.rc == 0, without.output[-4000:]
        assert "gpufleet-other-alerts" in custom_objects(lab, "prometheusrules")
    finally:
        kubectl(lab, "apply", "--server-side", "--force-conflicts", "-f",
                str(operator_crds / ("%s_alertmanagerconfigs.yaml" % GROUP)))
        name = "alertmanagerconfigs.%s" % GROUP
        wait_for(lambda: not unestablished_crds(lab, [name]), timeout=60, interval=0.5, what="%s Established" % name)


LOOPBACK = {"ipv4": "http://127.0.0.1:19500/endpoint", "ipv6": "https://[::1]:5000/endpoint",
            "localhost": "http://localhost:5000/endpoint", "empty": ""}


def test_a_receiver_alertmanager_cannot_reach_from_its_pod_is_refused_before_anything_is_applied(
        lab, operator_crds, role):
    # One run, one host per URL (role.cases); each stops at its own refusal.
    refused, last = role.cases("loopback", {case: dict(monitoring_name="gpufleet-loopback-" + case,
                                                       monitoring_alert_webhook_url=url, monitoring_manifests_dir="")
                                            for case, url in LOOPBACK.items()})
    assert refused.rc != 0 and refused.changed == 0, refused.output[-3000:]
    for case, url in LOOPBACK.items():
        said = " ".join(last[case].replace("\\n", " ").split())
        assert ("monitoring_alert_webhook_url (%s) is a loopback address" % url if url else
                "monitoring_alert_webhook_url must be the http(s) URL at which Alertmanager reaches") in said, \
            (case, said[-3000:])
    assert not [name for name in custom_objects(lab, "prometheusrules") if name.startswith("gpufleet-loopback")]


# No monitoring_alert_webhook_url: the self_healing role's kubernetes backend names the Service
# (roles/self_healing/vars/main.yml, self_healing__kube_name); any other backend has no default.
DERIVED = {
    "default-backend": ({"kubernetes_backend": "existing", "self_healing_namespace": "gpufleet-eda"},
                        "http://gpufleet-self-healing.gpufleet-eda.svc:19500/endpoint"),
    "port": ({"self_healing_backend": "kubernetes", "self_healing_webhook_port": 5000},
             "http://gpufleet-self-healing.gpufleet-system.svc:5000/endpoint"),
    "systemd": ({"kubernetes_backend": "existing", "self_healing_backend": "systemd"}, None),
    "self-healing-off": ({"kubernetes_backend": "existing", "self_healing_enabled": False}, None),
}


def test_the_receiver_defaults_to_the_in_cluster_rulebooks_service(lab, operator_crds, role):
    done, last = role.cases("derived", {
        case: dict(self_healing, monitoring_name="gpufleet-derived-" + case, monitoring_alert_webhook_url=None,
                   monitoring_manifests_dir="")
        for case, (self_healing, _url) in DERIVED.items()})
    assert done.rc != 0, done.output[-3000:]  # the two without a default are refused
    routes = custom_objects(lab, "alertmanagerconfigs", "v1alpha1")
    for case, (_self_healing, url) in DERIVED.items():
        if url is None:
            said = " ".join(last[case].split())
            assert "monitoring_alert_webhook_url must be the http(s) URL at which Alertmanager" in said, \
                (case, said[-3000:])
            assert "gpufleet-derived-%s-self-healing" % case not in routes
            continue
        assert done.recap[case]["failed"] == 0, (case, done.output[-3000:])
        assert webhook_configs(routes["gpufleet-derived-%s-self-healing" % case]["spec"]) == [
            {"url": url, "sendResolved": True}]


def test_a_label_the_role_stops_setting_is_removed(lab, operator_crds, role):
    # Server-side apply owns the fields the role writes: one it no longer writes goes. (A merge
    # patch, which the k8s module makes when `apply` is off, would leave it.)
    labels = {"release": "kube-prometheus-stack", "team": "gpu-infra"}
    first = role(monitoring_name="gpufleet-owned", monitoring_resource_labels=labels, monitoring_manifests_dir="")
    assert first.rc == 0, first.output[-3000:]
    assert custom_objects(lab, "prometheusrules")["gpufleet-owned-alerts"]["metadata"]["labels"]["team"] == "gpu-infra"
    second = role(monitoring_name="gpufleet-owned", monitoring_manifests_dir="")
    assert second.rc == 0, second.output[-3000:]
    kept = custom_objects(lab, "prometheusrules")["gpufleet-owned-alerts"]["metadata"]["labels"]
    assert "team" not in kept and kept["release"] == "kube-prometheus-stack", kept


@pytest.fixture
def stack(lab, operator_crds):
    """The site's Prometheus and Alertmanager, changed by a test and put back after it."""
    api = client.CustomObjectsApi(lab.kube().api_client)

    def replace(plural: str, spec: Optional[dict]) -> None:
        if spec is None:
            api.delete_namespaced_custom_object(GROUP, "v1", STACK_NAMESPACE, plural, "kps")
            return
        current = api.get_namespaced_custom_object(GROUP, "v1", STACK_NAMESPACE, plural, "kps")
        current["spec"] = spec
        api.replace_namespaced_custom_object(GROUP, "v1", STACK_NAMESPACE, plural, "kps", current)

    yield replace
    for plural, body in STACK.items():
        try:
            replace(plural, body["spec"])
        except ApiException as exc:
            if exc.status != 404:
                raise
            api.create_namespaced_custom_object(GROUP, "v1", STACK_NAMESPACE, plural, body)


def prometheus_spec(**changes) -> dict:
    return dict(STACK["prometheuses"]["spec"], **changes)


@pytest.mark.parametrize("settings, prometheus, alertmanager, named", [
    ({"monitoring_resource_labels": {}}, None, None,
     "PrometheusRule gpufleet-monitoring-test/gpufleet-rule-labels-alerts is selected by no Prometheus: Prometheus "
     "gpufleet-monitoring-stack-test/kps selects by ruleSelector release=kube-prometheus-stack, which the labels {"),
    ({}, prometheus_spec(ruleNamespaceSelector=None), None,
     "has no ruleNamespaceSelector, so it looks in its own namespace gpufleet-monitoring-stack-test only"),
    ({}, prometheus_spec(podMonitorSelector=None), None, "has no podMonitorSelector (null selects no PodMonitor)"),
    ({}, None, {"alertmanagerConfigSelector": {"matchLabels": {"alertmanagerConfig": "gpufleet"}}},
     "selects by alertmanagerConfigSelector alertmanagerConfig=gpufleet, which the labels {"),
    ({}, "absent", None, "the cluster has no Prometheus resource (monitoring.coreos.com/v1) to pick it up"),
], ids=["rule-labels", "rule-namespace", "podmonitor-null", "alertmanager-labels", "no-prometheus"])
def test_objects_the_operator_would_ignore_are_refused_naming_the_selector(
        lab, operator_crds, role, stack, settings, prometheus, alertmanager, named, request):
    name = "gpufleet-" + request.node.callspec.id
    if prometheus is not None:
        # None in the spec: the selector left out (null), which is not {} (everything).
        spec = None if prometheus == "absent" else {key: sel for key, sel in prometheus.items() if sel is not None}
        stack("prometheuses", spec)
    if alertmanager is not None:
        stack("alertmanagers", alertmanager)
    refused = role(monitoring_name=name, monitoring_manifests_dir="", **settings)
    said = " ".join(refused.output.split())
    assert refused.rc != 0 and refused.changed == 0, refused.output[-3000:]
    assert named in said and "Set monitoring_resource_labels" in said, said[-3000:]
    assert name + "-alerts" not in custom_objects(lab, "prometheusrules")
    if request.node.callspec.id != "rule-labels":
        return
    # The site that knows better turns the check off, and the objects go in (once is enough).
    unchecked = role(monitoring_name=name, monitoring_manifests_dir="", monitoring_check_selection=False, **settings)
    assert unchecked.rc == 0, unchecked.output[-3000:]
    assert name + "-alerts" in custom_objects(lab, "prometheusrules")
