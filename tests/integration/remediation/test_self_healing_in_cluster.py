"""The self_healing role's `kubernetes` backend against the lab's real kube-apiserver.

The role runs as a site runs it (kubernetes_backend=existing, so self_healing_backend defaults to
kubernetes) with the lab's admin kubeconfig, in a namespace of its own. The API server validates
and stores every object; kwok runs no pod for real, so the test asserts on the objects (the
Deployment's spec, the Service, the NetworkPolicy, the Secret and the ConfigMap), never on a
running rulebook (the rulebook itself is tested in test_self_healing_eda.py).

One role run per case, in order: two refusals (nothing created), a check-mode run before anything
exists (nothing created), the apply, a rerun (changed=0), a check-mode run with a new image (the
Deployment keeps the old one), and self_healing_enabled=false (everything but the namespace gone).
"""

from __future__ import annotations

import base64
import json
import secrets

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from lab_harness import Lab, PlaybookResult, kubectl, namespace_exists, run_playbook

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAMESPACE = "gpufleet-self-healing-test"
NAME = "gpufleet-self-healing"
IMAGE = "registry.example.com/gpufleet/de:0.0.0-test"
PORT = 19577
WEBHOOK_TOKEN = "wh-" + secrets.token_urlsafe(24)
HMAC_SECRET = "hm-" + secrets.token_urlsafe(24)
CONTROLLER_TOKEN = "ct-" + secrets.token_urlsafe(24)
SECRETS = (WEBHOOK_TOKEN, HMAC_SECRET, CONTROLLER_TOKEN)
PLAYBOOK = """\
- name: Self-healing in the cluster
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: Run the self_healing role
      ansible.builtin.include_role:
        name: gpufleet.resilience.self_healing
"""


def kind_reader(lab: Lab):
    core = lab.kube()
    apps = client.AppsV1Api(core.api_client)
    net = client.NetworkingV1Api(core.api_client)
    return {
        "ServiceAccount": core.read_namespaced_service_account,
        "Secret": core.read_namespaced_secret,
        "ConfigMap": core.read_namespaced_config_map,
        "Service": core.read_namespaced_service,
        "Deployment": apps.read_namespaced_deployment,
        "NetworkPolicy": net.read_namespaced_network_policy,
    }


def existing(lab: Lab) -> dict:
    """The objects named gpufleet-self-healing in the test namespace, as plain dicts by kind."""
    found = {}
    for kind, read in kind_reader(lab).items():
        try:
            found[kind] = lab.kube().api_client.sanitize_for_serialization(read(NAME, NAMESPACE))
        except ApiException as exc:
            if exc.status != 404:
                raise
    return found


def delete_namespace(lab: Lab) -> None:
    kubectl(lab, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=60s", check=False)


@pytest.fixture(scope="module")
def runs(lab: Lab, tmp_path_factory):
    """Runs the role once per case, in order, and keeps each result."""
    work = tmp_path_factory.mktemp("self-healing-in-cluster")
    playbook = work / "self-healing.yml"
    playbook.write_text(PLAYBOOK)
    base = dict(kubernetes_backend="existing", kubernetes_kubeconfig=str(lab.kubeconfig),
                gpufleet_lab_dir=str(lab.lab_dir), self_healing_namespace=NAMESPACE,
                self_healing_decision_environment_image=IMAGE, self_healing_source="both",
                self_healing_webhook_port=PORT, self_healing_webhook_token=WEBHOOK_TOKEN,
                self_healing_webhook_hmac_secret=HMAC_SECRET,
                self_healing_controller_url="https://awx.example.com", self_healing_controller_token=CONTROLLER_TOKEN)

    def run(*args: str, **extra) -> PlaybookResult:
        return run_playbook(["-i", "localhost,", str(playbook), "-e", json.dumps(dict(base, **extra)), *args],
                            lab.env(), timeout=300)

    delete_namespace(lab)
    results = {}
    try:
        results["no_image"] = run(self_healing_decision_environment_image="")
        results["no_image_objects"] = (namespace_exists(lab, NAMESPACE), existing(lab))
        results["unauthenticated"] = run(self_healing_webhook_allow_unauthenticated=True)
        results["unauthenticated_objects"] = (namespace_exists(lab, NAMESPACE), existing(lab))
        results["check_before"] = run("--check")
        results["check_before_objects"] = (namespace_exists(lab, NAMESPACE), existing(lab))
        results["apply"] = run()
        results["applied"] = existing(lab)
        results["rerun"] = run()
        results["check_new_image"] = run("--check", self_healing_decision_environment_image=IMAGE + "-next")
        results["after_check"] = existing(lab)
        results["disable_check"] = run("--check", self_healing_enabled=False)
        results["after_disable_check"] = existing(lab)
        results["disable"] = run(self_healing_enabled=False)
        results["disabled"] = (namespace_exists(lab, NAMESPACE), existing(lab))
        yield results
    finally:
        delete_namespace(lab)


def test_refusals_name_the_variable_and_create_nothing(runs):
    for case, variable in (("no_image", "self_healing_decision_environment_image"),
                           ("unauthenticated", "self_healing_webhook_allow_unauthenticated")):
        result = runs[case]
        assert result.rc != 0 and result.failed == 1, result.output[-3000:]
        assert variable in result.output, result.output[-3000:]
        assert runs[case + "_objects"] == (False, {}), case


def test_check_mode_creates_nothing(runs):
    result = runs["check_before"]
    assert result.rc == 0, result.output[-4000:]
    assert result.changed > 0, "check mode must report what it would create"
    assert runs["check_before_objects"] == (False, {})


def test_objects_have_the_expected_spec(runs):
    result = runs["apply"]
    assert result.rc == 0, result.output[-4000:]
    assert result.changed > 0
    objects = runs["applied"]
    assert sorted(objects) == sorted(["ServiceAccount", "Secret", "ConfigMap", "Service", "Deployment",
                                      "NetworkPolicy"])
    for obj in objects.values():
        managers = {entry["manager"] for entry in obj["metadata"]["managedFields"]}
        assert "gpufleet-self-healing" in managers, obj["metadata"]

    deployment = objects["Deployment"]["spec"]
    assert deployment["replicas"] == 1
    assert deployment["strategy"]["type"] == "Recreate"
    pod = deployment["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    [container] = pod["containers"]
    assert container["image"] == IMAGE
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["runAsNonRoot"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert security["seccompProfile"]["type"] == "RuntimeDefault"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["tcpSocket"]["port"] == PORT, probe
    assert [p["containerPort"] for p in container["ports"]] == [PORT]
    # The secrets come from the Secret, by reference only.
    refs = {env["name"]: env["valueFrom"]["secretKeyRef"] for env in container["env"] if env.get("valueFrom")}
    assert refs == {"self_healing_webhook_token": {"name": NAME, "key": "webhook-token"},
                    "self_healing_webhook_hmac_secret": {"name": NAME, "key": "webhook-hmac-secret"},
                    "EDA_CONTROLLER_TOKEN": {"name": NAME, "key": "controller-token"}}
    argv = container["command"]
    assert argv[0] == "ansible-rulebook"
    assert argv[argv.index("--env-vars") + 1] == "self_healing_webhook_token,self_healing_webhook_hmac_secret"

    service = objects["Service"]["spec"]
    assert [(p["port"], p["targetPort"]) for p in service["ports"]] == [(PORT, PORT)]
    assert service["selector"].items() <= deployment["template"]["metadata"]["labels"].items()

    policy = objects["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"] == service["selector"]
    assert policy["policyTypes"] == ["Ingress"]
    [rule] = policy["ingress"]
    [peer] = rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "alertmanager"}
    assert [(p["protocol"], p["port"]) for p in rule["ports"]] == [("TCP", PORT)]

    # The Secret holds the three; nothing else (ConfigMap, Deployment, the play's output) shows them.
    data = {key: base64.b64decode(value).decode() for key, value in objects["Secret"]["data"].items()}
    assert data == {"webhook-token": WEBHOOK_TOKEN, "webhook-hmac-secret": HMAC_SECRET,
                    "controller-token": CONTROLLER_TOKEN}
    elsewhere = json.dumps([objects["ConfigMap"], objects["Deployment"], objects["ServiceAccount"]])
    for value in SECRETS:
        assert value not in elsewhere
        for case in ("check_before", "apply", "rerun", "check_new_image", "disable_check", "disable"):
            assert value not in runs[case].output, case

    config = objects["ConfigMap"]["data"]
    rulebook = yaml.safe_load(config["gpufleet-remediation.yml"])
    sources = [next(iter(k for k in source if k != "name" and k != "filters")) for source in rulebook[0]["sources"]]
    assert sources == ["eda.builtin.webhook", "gpufleet.resilience.node_condition"]
    remediations = [rule for rule in rulebook[0]["rules"] if rule["name"].startswith("Remediate")]
    assert len(remediations) == 2 and all("run_job_template" in rule["action"] for rule in remediations)
    variables = yaml.safe_load(config["vars.yml"])
    assert variables["self_healing_webhook_host"] == "0.0.0.0"
    assert variables["self_healing_webhook_port"] == PORT
    assert variables["self_healing_kubeconfig"] == ""
    assert not set(variables) & {"self_healing_webhook_token", "self_healing_webhook_hmac_secret"}


def test_rerun_changes_nothing(runs):
    result = runs["rerun"]
    assert result.rc == 0, result.output[-4000:]
    assert result.changed == 0, result.output[-4000:]


def test_check_mode_with_a_change_leaves_the_cluster_alone(runs):
    result = runs["check_new_image"]
    assert result.rc == 0, result.output[-4000:]
    assert result.changed > 0, "check mode must report the new image"
    [container] = runs["after_check"]["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGE
    result = runs["disable_check"]
    assert result.rc == 0 and result.changed > 0, result.output[-4000:]
    assert sorted(runs["after_disable_check"]) == sorted(runs["applied"])


def test_disabled_removes_what_the_role_made(runs):
    result = runs["disable"]
    assert result.rc == 0, result.output[-4000:]
    assert result.changed > 0
    assert runs["disabled"] == (True, {}), "all but the namespace must be gone"
