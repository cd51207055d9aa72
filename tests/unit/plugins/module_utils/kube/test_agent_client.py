# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The agent's kubeconfig reading: what it accepts, and what it refuses before the agent starts.

The requests themselves run against the lab's kube-apiserver in tests/integration/agent.
"""
from __future__ import annotations

import base64

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.agent_client import (
    credentials_from_kubeconfig,
    load_credentials,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.errors import KubeError

PEM = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


def kubeconfig(user, cluster=None, context="lab"):
    return {
        "current-context": context,
        "contexts": [{"name": "lab", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster or {
            "server": "https://127.0.0.1:6443", "certificate-authority-data": PEM}}],
        "users": [{"name": "u", "user": user}],
    }


def test_token_and_ca_data():
    creds = credentials_from_kubeconfig(kubeconfig({"token": "s3cr3t"}), "k")
    assert creds.server == "https://127.0.0.1:6443" and creds.bearer() == "s3cr3t"
    assert creds.ca_data.startswith(b"-----BEGIN CERTIFICATE-----")


def test_relative_files_are_read_from_the_kubeconfig_directory(tmp_path):
    token = tmp_path / "token"
    token.write_text("first\n")
    creds = credentials_from_kubeconfig(
        kubeconfig({"tokenFile": "token"}, {"server": "https://h:1", "certificate-authority": "ca.crt"}), "k",
        base_dir=str(tmp_path))
    assert creds.ca_file == str(tmp_path / "ca.crt")
    assert creds.bearer() == "first"
    token.write_text("rotated\n")  # projected tokens rotate: read on every request
    assert creds.bearer() == "rotated"


def test_client_certificate():
    creds = credentials_from_kubeconfig(kubeconfig({"client-certificate-data": PEM, "client-key-data": PEM}), "k")
    assert creds.cert_data and creds.key_data and creds.token is None


@pytest.mark.parametrize("user, cluster, match", [
    ({"exec": {"command": "aws"}}, None, r"users\[u\]\.exec is not supported"),
    ({"auth-provider": {"name": "oidc"}}, None, r"auth-provider is not supported"),
    ({}, None, "has no token, tokenFile or client certificate"),
    ({"client-certificate-data": PEM}, None, "has no token"),
    ({"token": "t"}, {"server": "http://h:80"}, "must be an https:// URL"),
    ({"token": "t"}, {"server": "https://h", "insecure-skip-tls-verify": True}, "insecure-skip-tls-verify is refused"),
    ({"token": "t"}, {"server": "https://h", "certificate-authority-data": "not base64!"}, "is not base64"),
])
def test_refused_with_the_field_named(user, cluster, match):
    with pytest.raises(KubeError, match=match):
        credentials_from_kubeconfig(kubeconfig(user, cluster), "k")


def test_unknown_context_and_missing_files(tmp_path):
    with pytest.raises(KubeError, match="no context named 'other'"):
        credentials_from_kubeconfig(kubeconfig({"token": "t"}), "k", context="other")
    with pytest.raises(KubeError, match="cannot read the kubeconfig"):
        load_credentials(str(tmp_path / "absent"))


def test_in_cluster_needs_the_service_environment(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeError, match="not in a pod"):
        load_credentials(None)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    creds = load_credentials(None)
    assert creds.server == "https://[fd00::1]:443" and creds.token_file.endswith("serviceaccount/token")


def test_secrets_are_not_in_error_messages():
    with pytest.raises(KubeError) as caught:
        credentials_from_kubeconfig(kubeconfig({"token": "s3cr3t-token"}, {"server": "http://h"}), "k")
    assert "s3cr3t" not in str(caught.value)
