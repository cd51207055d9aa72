# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""How the modules reach the API server (kube/client.py ``Connection``): the kubernetes.core options
and the K8S_AUTH_* variables AWX's Kubernetes credential injects, an option beating its variable;
the real ``kubernetes`` Configuration each one produces (no call is made); the token never shown."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiClient, Configuration

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    CONNECTION_ENV,
    Connection,
    KubeError,
    api_client,
    connection_argspec,
    send_bearer_token,
)

TOKEN = "s3cret-token-value"
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
contexts:
- name: lab
  context: {cluster: lab, user: lab}
- name: other
  context: {cluster: lab, user: other}
current-context: lab
users:
- name: lab
  user: {token: from-kubeconfig}
- name: other
  user: {token: other-token}
"""


def sent_authorization(configuration):
    """The Authorization header the generated client puts on a request (what reaches the server)."""
    headers = {}
    ApiClient(configuration).update_params_for_auth(headers, [], ["BearerToken"])
    return headers.get("authorization")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No credentials from the machine running the tests: no K8S_AUTH_*, KUBECONFIG, Pod or ~/.kube."""
    for variable in [*CONNECTION_ENV.values(), "KUBECONFIG", "KUBERNETES_SERVICE_HOST"]:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def kubeconfig(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return str(path)


def test_an_option_beats_its_variable_and_a_variable_fills_what_is_absent():
    environ = {"K8S_AUTH_HOST": "https://env:6443", "K8S_AUTH_API_KEY": TOKEN, "K8S_AUTH_VERIFY_SSL": "no",
               "K8S_AUTH_SSL_CA_CERT": "/env/ca.crt", "K8S_AUTH_CONTEXT": "other"}
    connection = Connection.of({"host": "https://option:6443", "kubeconfig": None, "ca_cert": ""}, environ)
    assert connection.host == "https://option:6443"
    assert connection.api_key == TOKEN and connection.ca_cert == "/env/ca.crt" and connection.context == "other"
    assert connection.validate_certs is False
    assert TOKEN not in repr(connection) and TOKEN not in connection.describe()


@pytest.mark.parametrize("value, expected", [("true", True), ("1", True), ("yes", True), ("False", False),
                                             ("0", False), (True, True), (False, False)])
def test_validate_certs_reads_ansible_booleans(value, expected):
    assert Connection.of({"validate_certs": value}).validate_certs is expected


def test_a_bad_verify_ssl_variable_is_refused_naming_it():
    with pytest.raises(FieldError) as refused:
        Connection.of({}, {"K8S_AUTH_VERIFY_SSL": "maybe"})
    assert refused.value.field == "K8S_AUTH_VERIFY_SSL"


def test_host_and_token_need_no_kubeconfig(monkeypatch):
    monkeypatch.setenv("K8S_AUTH_HOST", "https://k8s.example.com:6443")
    monkeypatch.setenv("K8S_AUTH_API_KEY", TOKEN)
    monkeypatch.setenv("K8S_AUTH_SSL_CA_CERT", "/etc/ca.crt")
    configuration = api_client().configuration
    assert configuration.host == "https://k8s.example.com:6443"
    assert sent_authorization(configuration) == "Bearer " + TOKEN
    assert configuration.ssl_ca_cert == "/etc/ca.crt" and configuration.verify_ssl is True


def test_a_host_without_a_token_or_kubeconfig_is_refused_naming_api_key():
    with pytest.raises(FieldError) as refused:
        api_client(connection=Connection(host="https://k8s.example.com:6443"))
    assert refused.value.field == "api_key"


def test_a_kubeconfig_with_overrides(kubeconfig):
    connection = Connection(kubeconfig=kubeconfig, context="other", host="https://override:6443",
                            validate_certs=False)
    configuration = api_client(connection=connection).configuration
    assert configuration.host == "https://override:6443"
    assert sent_authorization(configuration) == "Bearer other-token"  # the context's user
    assert configuration.verify_ssl is False


def test_kubeconfig_from_the_environment_when_no_option_names_one(monkeypatch, kubeconfig):
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    configuration = api_client().configuration
    assert configuration.host == "https://127.0.0.1:6443"
    assert sent_authorization(configuration) == "Bearer from-kubeconfig"
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", kubeconfig)
    assert api_client().configuration.host == "https://127.0.0.1:6443"


def test_nothing_to_connect_with_says_where_it_looked():
    with pytest.raises(KubeError) as failed:
        api_client()
    assert "default kubeconfig (KUBECONFIG or ~/.kube/config)" in str(failed.value)


def test_the_argument_spec_keeps_the_token_out_of_logs():
    spec = connection_argspec()
    assert spec["api_key"]["no_log"] is True
    assert set(CONNECTION_ENV) <= set(spec) and {"kube_connect_timeout", "kube_read_timeout"} <= set(spec)
    assert spec["ca_cert"]["aliases"] == ["ssl_ca_cert"] and spec["validate_certs"]["aliases"] == ["verify_ssl"]


def test_a_loaded_token_is_sent_and_follows_its_refresh():
    """kubernetes 36's loaders keep the token where its own client does not read it (send_bearer_token);
    a loader's refresh hook (an expiring exec or projected token) rewrites it before each request."""
    configuration = Configuration()
    configuration.api_key = {"authorization": "Bearer first"}
    assert sent_authorization(configuration) is None  # the bug: nothing would be sent
    configuration.refresh_api_key_hook = lambda conf: conf.api_key.update(authorization="Bearer rotated")
    send_bearer_token(configuration)
    assert sent_authorization(configuration) == "Bearer rotated"


def test_a_host_and_token_replace_the_kubeconfigs_own_token(kubeconfig):
    configuration = api_client(connection=Connection(kubeconfig=kubeconfig, api_key=TOKEN)).configuration
    assert sent_authorization(configuration) == "Bearer " + TOKEN
