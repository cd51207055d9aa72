# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Every Kubernetes API call has a connect and a read timeout (kube/client.py).

Against a real local TCP server that accepts and never answers (conftest ``hung_server``), through
the real ``kubernetes`` client and our client code: the call fails within its timeout (plus a
generous margin for a loaded machine), not retried, with an error that names the server.
"""

from __future__ import annotations

import math
import socket
import time

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube import client
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.agent_client import AgentApi, Credentials
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    KubeError,
    NoAnswer,
    TransportError,
    core_v1,
    kube_timeouts,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import NodeWriter

MARGIN = 10.0  # seconds: a loaded 2-core CI machine, never the timeout itself
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: hung
  cluster:
    server: {server}
    insecure-skip-tls-verify: true
users:
- name: someone
  user:
    token: not-a-secret
contexts:
- name: hung
  context: {{cluster: hung, user: someone}}
current-context: hung
"""


def kubeconfig_for(tmp_path, server: str) -> str:
    path = tmp_path / "hung.kubeconfig"
    path.write_text(KUBECONFIG.format(server=server))
    return str(path)


def timed(call):
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        call()
    return time.monotonic() - started, caught.value


def test_a_read_that_never_comes_fails_within_the_read_timeout(hung_server, tmp_path):
    """Plain HTTP: the connection is accepted, the request sent, the answer never comes."""
    server = "http://%s" % hung_server.address
    api = core_v1(kubeconfig_for(tmp_path, server), timeout=(2.0, 1.5))
    elapsed, error = timed(api.list_node)
    assert isinstance(error, NoAnswer) and isinstance(error, TransportError), repr(error)
    assert elapsed >= 1.4, "failed before the read timeout: %r" % error
    assert elapsed < 1.5 + MARGIN, "%.1fs: the timed-out read was retried or never bounded" % elapsed
    assert server in str(error) and "read timeout 1.5 s" in str(error), str(error)
    assert "Read timed out" in str(error), str(error)
    # Not retried: urllib3 would retry a timed-out GET three times by default.
    assert len(hung_server.accepted) == 1, hung_server.accepted


def test_a_tls_handshake_that_never_ends_fails_within_the_connect_timeout(hung_server, tmp_path):
    """HTTPS: the TCP connection is accepted and the server never answers the ClientHello."""
    server = "https://%s" % hung_server.address
    api = core_v1(kubeconfig_for(tmp_path, server), timeout=(1.0, 20.0))
    elapsed, error = timed(lambda: api.read_node("gpu-a-001"))
    assert isinstance(error, NoAnswer), repr(error)
    assert elapsed < 1.0 + MARGIN, "%.1fs: the TLS handshake was not bounded by the connect timeout" % elapsed
    assert server in str(error), str(error)


def read_node_error(tmp_path, server, timeout, within):
    """Our NodeWriter reading a node from ``server``: the KubeError's message, which came within ``within`` s."""
    writer = NodeWriter(core_v1(kubeconfig_for(tmp_path, server), timeout=timeout))
    elapsed, error = timed(lambda: writer.read_node("gpu-a-001"))
    assert isinstance(error, KubeError), repr(error)
    assert elapsed < within + MARGIN, elapsed
    return str(error)


def test_our_node_writer_names_the_server(hung_server, tmp_path):
    """Through our client code: NodeWriter turns it into the KubeError a module fails with."""
    server = "http://%s" % hung_server.address
    message = read_node_error(tmp_path, server, (2.0, 1.0), within=1.0)
    assert "read node gpu-a-001: no answer from the Kubernetes API server %s" % server in message, message


def test_a_refused_connection_says_cannot_reach_not_no_answer(tmp_path):
    """A closed port refuses at once; urllib3's NewConnectionError subclasses its ConnectTimeoutError,
    and the message must still say what happened."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = "http://127.0.0.1:%d" % port
    message = read_node_error(tmp_path, server, (2.0, 2.0), within=2.0)
    assert "read node gpu-a-001: cannot reach the Kubernetes API server %s" % server in message, message
    assert "Connection refused" in message, message


def test_defaults_are_set_on_every_call_and_a_watch_reads_longer(tmp_path, monkeypatch):
    """No network: what the client hands the REST layer for a plain call, a caller's own timeout and a watch."""
    api = core_v1(kubeconfig_for(tmp_path, "http://127.0.0.1:9"))
    assert api.api_client.default_timeout == (DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT) == (5.0, 30.0)
    seen = []

    def request(method, url, **kwargs):
        query = "&".join("%s=%s" % (name, str(value).lower() if isinstance(value, bool) else value)
                         for name, value in kwargs.get("query_params") or [])
        seen.append((url + ("?" + query if query else ""), kwargs.get("_request_timeout")))
        raise TransportError("stop here")

    monkeypatch.setattr(api.api_client.rest_client, "request", request)
    for call in (api.list_node,
                 lambda: api.read_node("x", _request_timeout=(1, 2)),
                 lambda: api.list_node(watch=True, timeout_seconds=300, _preload_content=False),
                 lambda: api.list_node(watch=True, _preload_content=False)):
        with pytest.raises(NoAnswer):
            call()
    assert [timeout for _url, timeout in seen] == [(5.0, 30.0), (1, 2), (5.0, 330.0), (5.0, 3630.0)], seen
    assert "watch=true" in seen[2][0].lower() and "timeoutSeconds=300" in seen[2][0], seen[2][0]
    # Timed-out reads are not retried; a connection error once.
    retries = api.api_client.configuration.retries
    assert (retries.read, retries.connect) == (0, 1)


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, 3601, "soon"])
def test_bad_timeouts_are_refused_by_name(value):
    for name in ("kube_connect_timeout", "kube_read_timeout"):
        with pytest.raises(FieldError) as caught:
            kube_timeouts({name: value})
        assert caught.value.field == name


def test_timeouts_from_parameters():
    assert kube_timeouts({}) == (5.0, 30.0)
    assert kube_timeouts({"kube_connect_timeout": 2, "kube_read_timeout": 90.5}) == (2.0, 90.5)
    assert client.timeout_argspec()["kube_read_timeout"] == {"type": "float", "default": 30.0}


def test_the_agents_client_names_the_server_within_its_timeout(hung_server):
    """The health agent's own HTTPS client (kube/agent_client.py): the TLS handshake never ends."""
    server = "https://%s" % hung_server.address
    api = AgentApi(Credentials(server=server, token="not-a-secret"))
    started = time.monotonic()
    with pytest.raises(TimeoutError) as caught:
        api.patch_node_status("gpu-a-001", {"status": {}}, _request_timeout=1.0)
    elapsed = time.monotonic() - started
    assert elapsed < 1.0 + MARGIN, elapsed
    assert "the Kubernetes API server %s did not answer within 1 s" % server in str(caught.value), caught.value
    assert len(hung_server.accepted) == 1
