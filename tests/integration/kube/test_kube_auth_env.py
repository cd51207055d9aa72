# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The collection's Kubernetes modules take what AWX's Kubernetes credential injects: against the lab's
real kube-apiserver, a module run with only K8S_AUTH_HOST, K8S_AUTH_API_KEY (a ServiceAccount token
from the TokenRequest API) and K8S_AUTH_SSL_CA_CERT in its environment reads the cluster as that
ServiceAccount; the same through the module's options, the token never shown; a bad token is
refused by the server, the error naming it and not the token; KUBECONFIG alone works as kubectl's.
"""

from __future__ import annotations

import contextlib
import json
import subprocess

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from lab_harness import REPO, VENV_BIN

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAMESPACE = "gpufleet-system"
NAME = "gpufleet-k8s-auth-test"


@pytest.fixture(scope="module")
def reader(lab):
    """A ServiceAccount that may only read Nodes and list Pods (what node_opt_out reads), and a
    10-minute token of it."""
    admin = lab.kube()
    rbac = client.RbacAuthorizationV1Api(admin.api_client)
    account = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=NAME))
    role = client.V1ClusterRole(metadata=client.V1ObjectMeta(name=NAME), rules=[
        client.V1PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "list"]),
        client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["list"])])
    binding = client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=NAME),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=NAME),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=NAME, namespace=NAMESPACE)])
    for create in (lambda: admin.create_namespaced_service_account(NAMESPACE, account),
                   lambda: rbac.create_cluster_role(role), lambda: rbac.create_cluster_role_binding(binding)):
        try:
            create()
        except ApiException as exc:
            if exc.status != 409:
                raise
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[],
                                                                                 expiration_seconds=600))
    token = admin.create_namespaced_service_account_token(NAME, NAMESPACE, request).status.token
    cluster = yaml.safe_load(lab.kubeconfig.read_text())["clusters"][0]["cluster"]
    yield {"token": token, "host": cluster["server"], "ca": cluster["certificate-authority"]}
    with contextlib.suppress(ApiException):
        rbac.delete_cluster_role_binding(NAME)
    with contextlib.suppress(ApiException):
        rbac.delete_cluster_role(NAME)
    with contextlib.suppress(ApiException):
        admin.delete_namespaced_service_account(NAME, NAMESPACE)


def run_module(lab, name, args, **env):
    """One module run (ad hoc), with no kubeconfig anywhere unless ``env`` names one."""
    environment = {key: value for key, value in lab.env().items()
                   if key != "KUBECONFIG" and not key.startswith("K8S_AUTH_")}
    environment.update(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", **env)
    done = subprocess.run([str(VENV_BIN / "ansible"), "localhost", "-m", "gpufleet.resilience." + name,
                           "-a", json.dumps(args)], cwd=REPO, env=environment, capture_output=True, text=True,
                          timeout=300, check=False)
    return done.stdout, json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_a_module_reads_the_cluster_with_the_k8s_auth_variables_alone(lab, reader):
    node = "gpu-a-001"
    output, result = run_module(lab, "node_opt_out", {"name": node}, K8S_AUTH_HOST=reader["host"],
                                K8S_AUTH_API_KEY=reader["token"], K8S_AUTH_SSL_CA_CERT=reader["ca"])
    assert not result.get("failed"), result.get("msg")
    assert result["opted_out"] is False
    assert reader["token"] not in output


def test_the_same_through_the_options_keeps_the_token_out_of_the_result(lab, reader):
    output, result = run_module(lab, "node_opt_out", {"name": "gpu-a-002", "host": reader["host"],
                                                      "api_key": reader["token"], "ca_cert": reader["ca"]})
    assert not result.get("failed"), result.get("msg")
    assert reader["token"] not in output
    assert result["invocation"]["module_args"]["api_key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


def test_a_bad_token_is_refused_by_the_server_and_never_shown(lab, reader):
    bad = reader["token"][:-8] + "AAAAAAAA"
    output, result = run_module(lab, "node_opt_out", {"name": "gpu-a-001"}, K8S_AUTH_HOST=reader["host"],
                                K8S_AUTH_API_KEY=bad, K8S_AUTH_SSL_CA_CERT=reader["ca"])
    assert result.get("failed"), result
    assert "401" in result["msg"] or "Unauthorized" in result["msg"], result["msg"]
    assert bad not in output


def test_the_token_reaches_only_what_its_role_allows(lab, reader):
    """Proof that the token, not some other credential, was used: the ServiceAccount may read Nodes
    and Pods but not the remediation's ConfigMaps."""
    _output, result = run_module(lab, "remediation_breaker", {"state": "read"}, K8S_AUTH_HOST=reader["host"],
                                 K8S_AUTH_API_KEY=reader["token"], K8S_AUTH_SSL_CA_CERT=reader["ca"])
    # 403, not 401: the server knew the caller (the ServiceAccount) and refused what its role lacks.
    assert result.get("failed") and "HTTP 403" in result["msg"], result.get("msg")


def test_kubeconfig_from_the_environment_as_kubectl_reads_it(lab):
    _output, result = run_module(lab, "node_opt_out", {"name": "gpu-a-001"}, KUBECONFIG=str(lab.kubeconfig))
    assert not result.get("failed"), result.get("msg")
