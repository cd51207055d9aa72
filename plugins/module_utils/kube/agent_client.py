# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The health agent's own connection to the API server: two calls, nothing else.

Why not the ``kubernetes`` package, which the modules use: importing ``kubernetes.client`` loads
every API and model class of Kubernetes, about 20 MiB of RSS - half of the agent's budget
(docs/agent.md) and 20 GB across a 1,000-node fleet - for the two requests an agent makes. This
module speaks HTTPS with the standard library and keeps the same method names as CoreV1Api, so
``kube.node_status`` works with either.

Credentials, from a kubeconfig (``current-context`` or the one named) or from the pod's service
account (in-cluster, when no kubeconfig is given):

* the server's CA: ``certificate-authority`` or ``certificate-authority-data``;
* the user: ``token``, ``tokenFile``, or ``client-certificate``/``client-key`` (file or ``-data``).
  A token file is read again on every request: projected service-account tokens rotate.

Anything else (``exec`` plugins, ``auth-provider``, ``insecure-skip-tls-verify``) is refused with
an error naming the field, before the agent starts. Credentials never reach a log line or an
exception message.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.errors import KubeError

IN_CLUSTER_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class ApiStatusError(KubeError):
    """The API server answered with an error status (``status``, ``reason`` as CoreV1Api's)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__("HTTP %d: %s" % (status, reason), status)
        self.reason = reason


@dataclass(frozen=True)
class Credentials:
    server: str  # https://host:port
    ca_file: Optional[str] = None
    ca_data: Optional[bytes] = None  # PEM
    token: Optional[str] = None
    token_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    cert_data: Optional[bytes] = None
    key_data: Optional[bytes] = None

    def bearer(self) -> Optional[str]:
        if self.token_file:
            with open(self.token_file, encoding="utf-8") as handle:
                return handle.read().strip()
        return self.token


def _named(items: Any, name: str, kind: str, source: str) -> Mapping[str, Any]:
    for item in items or []:
        if isinstance(item, Mapping) and item.get("name") == name:
            return item.get(kind) or {}
    raise KubeError("%s: no %s named %r" % (source, kind, name))


def _relative(path: Optional[str], base: str) -> Optional[str]:
    if not path:
        return None
    return path if os.path.isabs(path) else os.path.join(base, path)


def _data(value: Optional[str], field: str, source: str) -> Optional[bytes]:
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (ValueError, TypeError):
        raise KubeError("%s: %s is not base64" % (source, field)) from None


def credentials_from_kubeconfig(config: Mapping[str, Any], source: str, context: Optional[str] = None,
                                base_dir: str = "") -> Credentials:
    """Credentials from a loaded kubeconfig (pure); ``KubeError`` names what is missing or refused."""
    name = context or config.get("current-context")
    if not name:
        raise KubeError("%s: no current-context, and no context given" % source)
    ctx = _named(config.get("contexts"), name, "context", source)
    cluster = _named(config.get("clusters"), ctx.get("cluster"), "cluster", source)
    user = _named(config.get("users"), ctx.get("user"), "user", source) if ctx.get("user") else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://"):
        raise KubeError("%s: clusters[%s].server must be an https:// URL" % (source, ctx.get("cluster")))
    if cluster.get("insecure-skip-tls-verify"):
        raise KubeError("%s: clusters[%s].insecure-skip-tls-verify is refused: give the cluster's CA"
                        % (source, ctx.get("cluster")))
    for unsupported in ("exec", "auth-provider", "username", "password"):
        if user.get(unsupported):
            raise KubeError("%s: users[%s].%s is not supported by the agent: use a token, a token file or a "
                            "client certificate" % (source, ctx.get("user"), unsupported))
    creds = Credentials(
        server=server.rstrip("/"),
        ca_file=_relative(cluster.get("certificate-authority"), base_dir),
        ca_data=_data(cluster.get("certificate-authority-data"), "certificate-authority-data", source),
        token=user.get("token"),
        token_file=_relative(user.get("tokenFile"), base_dir),
        cert_file=_relative(user.get("client-certificate"), base_dir),
        key_file=_relative(user.get("client-key"), base_dir),
        cert_data=_data(user.get("client-certificate-data"), "client-certificate-data", source),
        key_data=_data(user.get("client-key-data"), "client-key-data", source),
    )
    if not (creds.token or creds.token_file or ((creds.cert_file or creds.cert_data)
                                                and (creds.key_file or creds.key_data))):
        raise KubeError("%s: users[%s] has no token, tokenFile or client certificate and key"
                        % (source, ctx.get("user")))
    return creds


def load_credentials(kubeconfig: Optional[str], context: Optional[str] = None) -> Credentials:
    if not kubeconfig:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise KubeError("no kubeconfig given and not in a pod (KUBERNETES_SERVICE_HOST is unset)")
        if ":" in host:
            host = "[%s]" % host
        return Credentials(server="https://%s:%s" % (host, port), ca_file=os.path.join(IN_CLUSTER_DIR, "ca.crt"),
                           token_file=os.path.join(IN_CLUSTER_DIR, "token"))
    import yaml

    try:
        with open(kubeconfig, encoding="utf-8") as handle:
            config = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise KubeError("cannot read the kubeconfig %s: %s" % (kubeconfig, getattr(exc, "strerror", None) or exc)) \
            from None
    return credentials_from_kubeconfig(config, kubeconfig, context, os.path.dirname(os.path.abspath(kubeconfig)))


def ssl_context(creds: Credentials) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=creds.ca_file,
                                         cadata=creds.ca_data.decode("ascii") if creds.ca_data else None)
    if creds.cert_file and creds.key_file:
        context.load_cert_chain(creds.cert_file, creds.key_file)
    elif creds.cert_data and creds.key_data:
        # ssl loads chains from files only: a private directory, removed as soon as they are read.
        with tempfile.TemporaryDirectory(prefix="gpufleet-agent-") as private:
            cert, key = os.path.join(private, "cert.pem"), os.path.join(private, "key.pem")
            for path, data in ((cert, creds.cert_data), (key, creds.key_data)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
            context.load_cert_chain(cert, key)
    return context


class AgentApi:
    """The two CoreV1Api calls of the agent, over one kept-alive HTTPS connection."""

    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        url = urllib.parse.urlsplit(creds.server)
        self.host = url.hostname or ""
        self.port = url.port or 443
        self.prefix = url.path.rstrip("/")
        self.context = ssl_context(creds)
        self._connection: Optional[http.client.HTTPSConnection] = None

    def _request(self, method: str, path: str, body: Any, content_type: str, timeout: float) -> Tuple[int, bytes]:
        headers = {"Content-Type": content_type, "Accept": "application/json", "User-Agent": "gpufleet-agent"}
        token = self.creds.bearer()
        if token:
            headers["Authorization"] = "Bearer " + token
        payload = json.dumps(body).encode("utf-8")
        for attempt in (1, 2):  # a kept-alive connection the server closed: reconnect once
            if self._connection is None:
                self._connection = http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                                               context=self.context)
            self._connection.timeout = timeout
            try:
                self._connection.request(method, self.prefix + path, body=payload, headers=headers)
                answer = self._connection.getresponse()
                return answer.status, answer.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop()
                if attempt == 2:
                    raise
            except TimeoutError as exc:  # connect, TLS or read: each is bounded by ``timeout``
                self._drop()
                raise TimeoutError("the Kubernetes API server %s did not answer within %g s"
                                   % (self.creds.server, timeout)) from exc
            except Exception:
                self._drop()
                raise
        raise AssertionError("unreachable")

    def _drop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _call(self, method: str, path: str, body: Any, content_type: str, timeout: float) -> Dict[str, Any]:
        status, data = self._request(method, path, body, content_type, timeout)
        if status >= 300:
            try:
                reason = json.loads(data).get("message") or http.client.responses.get(status, "")
            except ValueError:
                reason = http.client.responses.get(status, "")
            raise ApiStatusError(status, reason)
        return json.loads(data) if data else {}

    def patch_node_status(self, name: str, body: Any, _content_type: str = "application/strategic-merge-patch+json",
                          _request_timeout: float = 5.0) -> Dict[str, Any]:
        return self._call("PATCH", "/api/v1/nodes/%s/status" % urllib.parse.quote(name, safe=""), body,
                          _content_type, _request_timeout)

    def create_namespaced_event(self, namespace: str, body: Any, _request_timeout: float = 5.0) -> Dict[str, Any]:
        return self._call("POST", "/api/v1/namespaces/%s/events" % urllib.parse.quote(namespace, safe=""), body,
                          "application/json", _request_timeout)

    def close(self) -> None:
        self._drop()


def agent_api(kubeconfig: Optional[str], context: Optional[str] = None) -> AgentApi:
    return AgentApi(load_credentials(kubeconfig, context))
