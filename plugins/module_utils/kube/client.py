# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A Kubernetes API client from a kubeconfig, for modules and tests (the health agent uses
``kube.agent_client``, which does not load the whole ``kubernetes`` package)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube import lazy_import
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.errors import KubeError, api_error

# Before the first import of kubernetes: its client classes load when used, not all ~800 modules
# at once (0.2-0.3 s of CPU per module run; kube/lazy_import.py).
lazy_import.install()

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
except ImportError:  # pragma: no cover - reported by kube_client() with a clear message
    k8s_client = None
    k8s_config = None

    class ApiException(Exception):  # type: ignore[no-redef]
        """Stand-in: without the package no call is made (core_v1() fails first), so none is raised."""


try:
    # The kubernetes client raises urllib3's errors, not ApiException, when the API server
    # cannot be reached at all (connection refused, TLS, timeouts).
    from urllib3 import Retry
    from urllib3.exceptions import HTTPError as TransportError
    from urllib3.exceptions import NewConnectionError
    from urllib3.exceptions import TimeoutError as TransportTimeout
except ImportError:  # pragma: no cover - urllib3 comes with kubernetes
    Retry = None
    TransportTimeout = TimeoutError
    NewConnectionError = ConnectionError

    class TransportError(Exception):  # type: ignore[no-redef]
        """Stand-in, as ApiException above."""


# ApiException is re-exported for the callers that catch it.
__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_READ_TIMEOUT",
    "ApiException",
    "Connection",
    "KubeError",
    "NoAnswer",
    "TransportError",
    "api_client",
    "api_error",
    "api_failure",
    "api_message",
    "connection_argspec",
    "core_v1",
    "core_v1_for",
    "kube_timeouts",
    "timeout_argspec",
    "unreachable",
]

# Every call to the API server has both (doc fragment gpufleet.resilience.kube): a server that
# accepts the connection and never answers fails the call within them instead of hanging the play.
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 30.0
MAX_TIMEOUT = 3600.0
# A watch is answered only when something changes: its read timeout is its timeoutSeconds plus this.
WATCH_READ_MARGIN = 30.0
# A watch without timeoutSeconds lasts what the API server decides (at most 2 x --min-request-timeout,
# 3600 s by default).
WATCH_SERVER_MAX = 3600.0


class NoAnswer(TransportError, KubeError):  # type: ignore[misc,valid-type]
    """A call that got no answer from the API server: it names the server, the timeouts and the cause.

    A TransportError, so the callers that handle an unreachable server do; a KubeError too, so a
    module that catches only the collection's errors still fails through fail_json, not a traceback."""

    def __init__(self, server: str, timeout: Any, cause: Exception) -> None:
        self.server = server
        self.timeout = timeout
        self.cause = cause
        KubeError.__init__(self, "Kubernetes API server %s (connect timeout %s s, read timeout %s s): %s"
                           % (server, _seconds(timeout[0]), _seconds(timeout[1]), cause))


def _seconds(value: Any) -> str:
    return "none" if value is None else ("%g" % value)


# The kubernetes.core connection options and the environment variables each falls back to (AWX's
# Kubernetes credential injects the K8S_AUTH_* ones); an option given beats its variable.
CONNECTION_ENV = {
    "kubeconfig": "K8S_AUTH_KUBECONFIG",
    "context": "K8S_AUTH_CONTEXT",
    "host": "K8S_AUTH_HOST",
    "api_key": "K8S_AUTH_API_KEY",
    "ca_cert": "K8S_AUTH_SSL_CA_CERT",
    "validate_certs": "K8S_AUTH_VERIFY_SSL",
}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _flag(value: Any, name: str) -> Optional[bool]:
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise FieldError(name, "must be true or false, got %r" % (value,))


@dataclass(frozen=True)
class Connection:
    """How to reach the API server, as kubernetes.core takes it (doc fragment gpufleet.resilience.kube).

    ``host`` with ``api_key`` (a bearer token) needs no kubeconfig; ``kubeconfig``/``context`` load one
    (none given: ``KUBECONFIG`` or ``~/.kube/config``), and ``host``, ``api_key``, ``ca_cert`` and
    ``validate_certs`` override what it says. With nothing at all: the in-cluster service account
    inside a Pod, else the default kubeconfig."""

    kubeconfig: Optional[str] = None
    context: Optional[str] = None
    host: Optional[str] = None
    api_key: Optional[str] = field(default=None, repr=False)  # a secret: never in a message
    ca_cert: Optional[str] = None
    validate_certs: Optional[bool] = None

    @classmethod
    def of(cls, params: Mapping[str, Any], environ: Optional[Mapping[str, str]] = None) -> "Connection":
        """From a module's (or a settings file's) options, each absent one from its K8S_AUTH_* variable."""
        environ = os.environ if environ is None else environ
        values: Dict[str, Any] = {}
        for name, variable in CONNECTION_ENV.items():
            value = params.get(name)
            if value is None or value == "":
                value = environ.get(variable) or None
                where = variable
            else:
                where = name
            values[name] = _flag(value, where) if name == "validate_certs" else value
        return cls(**values)

    def describe(self) -> str:
        """Where the credentials come from, for error messages (never the token)."""
        if self.host and not (self.kubeconfig or self.context):
            return "%s with a bearer token" % self.host
        if self.kubeconfig or self.context:
            return "the kubeconfig %s%s" % (self.kubeconfig or "(default)",
                                            " context %s" % self.context if self.context else "")
        return "in-cluster" if in_cluster() else "the default kubeconfig (KUBECONFIG or ~/.kube/config)"


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def connection_argspec() -> Dict[str, Any]:
    """The argument spec of the modules' connection options and timeouts (doc fragment
    gpufleet.resilience.kube); the K8S_AUTH_* variables are read by ``Connection.of``."""
    return dict(
        kubeconfig=dict(type="path"),
        context=dict(type="str"),
        host=dict(type="str"),
        api_key=dict(type="str", no_log=True),
        ca_cert=dict(type="path", aliases=["ssl_ca_cert"]),
        validate_certs=dict(type="bool", aliases=["verify_ssl"]),
        **timeout_argspec(),
    )


def timeout_argspec() -> Dict[str, Any]:
    """The argument spec of the modules' Kubernetes timeouts (doc fragment gpufleet.resilience.kube)."""
    return dict(
        kube_connect_timeout=dict(type="float", default=DEFAULT_CONNECT_TIMEOUT),
        kube_read_timeout=dict(type="float", default=DEFAULT_READ_TIMEOUT),
    )


def kube_timeouts(params: Mapping[str, Any]) -> Tuple[float, float]:
    """(connect, read) from a module's parameters, the defaults where absent; both must be positive."""
    found = []
    defaults = (("kube_connect_timeout", DEFAULT_CONNECT_TIMEOUT), ("kube_read_timeout", DEFAULT_READ_TIMEOUT))
    for name, default in defaults:
        value = params.get(name)
        try:
            value = default if value is None else float(value)
        except (TypeError, ValueError):
            raise FieldError(name, "must be a number of seconds, got %r" % (value,)) from None
        if not 0 < value <= MAX_TIMEOUT:  # refuses NaN too
            raise FieldError(name, "must be more than 0 and at most %g seconds, got %r" % (MAX_TIMEOUT, value))
        found.append(value)
    return found[0], found[1]


def _watch_read_timeout(query_params: Any, read: float) -> Optional[float]:
    """For a watch call (``watch=true`` in the query: the (name, value) pairs the generated API
    methods hand ``call_api``), its read timeout; None for any other call."""
    query = {name: str(value) for name, value in (query_params or [])}
    if query.get("watch", "").lower() not in ("true", "1"):
        return None
    try:
        server_side = float(query.get("timeoutSeconds", ""))
    except ValueError:
        server_side = WATCH_SERVER_MAX
    return max(read, server_side + WATCH_READ_MARGIN)


def api_message(exc: Exception) -> str:
    """The API server's own words from a refusal: the Status message and its causes' messages.

    An eviction refused for a PodDisruptionBudget says which budget in ``details.causes``.
    """
    try:
        status = json.loads(getattr(exc, "body", None) or "")
    except (TypeError, ValueError):
        return ""
    if not isinstance(status, dict):
        return ""
    parts = [status.get("message") or ""]
    for cause in (status.get("details") or {}).get("causes") or []:
        if isinstance(cause, dict) and cause.get("message") and cause["message"] not in parts:
            parts.append(cause["message"])
    return "; ".join(part for part in parts if part)


def api_failure(exc: Exception, what: str) -> KubeError:
    """Like ``api_error``, with the API server's message appended when the answer carried one."""
    error = api_error(exc, what)
    message = api_message(exc)
    if message:
        error = KubeError("%s: %s" % (error, message), error.status)
    return error


def timed_out(exc: Exception) -> bool:
    """The call ran out of time (connect or read), as opposed to being refused or failing TLS.

    urllib3's NewConnectionError (a refused connection) subclasses its ConnectTimeoutError for
    old callers' sake: it is checked first."""
    cause = getattr(exc, "cause", exc)
    errors = [error for error in (cause, getattr(cause, "reason", None)) if error is not None]
    if any(isinstance(error, NewConnectionError) for error in errors):
        return False
    return any(isinstance(error, (TransportTimeout, TimeoutError)) for error in errors)


def unreachable(exc: Exception, what: str) -> KubeError:
    """The KubeError for a call that never got an answer from the API server (it names the server
    when the client is ours: ``NoAnswer``): "no answer" when it timed out, "cannot reach" when the
    connection was refused or failed."""
    if isinstance(exc, NoAnswer):
        return KubeError("%s: %s the %s" % (what, "no answer from" if timed_out(exc) else "cannot reach", exc))
    return KubeError("%s: cannot reach the Kubernetes API server: %s" % (what, exc))


if k8s_client is not None:

    class TimedApiClient(k8s_client.ApiClient):
        """ApiClient that gives every call (connect, read) timeouts unless the caller passed its own."""

        default_timeout: Tuple[float, float] = (DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT)

        def call_api(self, resource_path, method, path_params=None, query_params=None, *args,
                     **kwargs):  # pylint: disable=arguments-differ,keyword-arg-before-vararg
            timeout = kwargs.get("_request_timeout")
            if not timeout:
                connect, read = self.default_timeout
                watch_read = _watch_read_timeout(query_params, read)
                timeout = (connect, read if watch_read is None else watch_read)
                kwargs["_request_timeout"] = timeout
            try:
                return super().call_api(resource_path, method, path_params, query_params, *args, **kwargs)
            except NoAnswer:
                raise
            except TransportError as exc:
                if not isinstance(timeout, tuple):
                    timeout = (timeout, timeout)
                raise NoAnswer(self.configuration.host, timeout, exc) from exc

else:  # pragma: no cover - api_client() says the package is missing first
    TimedApiClient = None  # type: ignore[assignment,misc]


def _configure(connection: Connection, configuration: Any) -> None:
    if connection.host and not (connection.kubeconfig or connection.context):
        if not connection.api_key:
            raise FieldError("api_key", "the API server %s needs a bearer token: set api_key (or K8S_AUTH_API_KEY), "
                             "or give a kubeconfig" % connection.host)
    elif connection.kubeconfig or connection.context or not in_cluster():
        # KUBECONFIG read now (the kubernetes package reads it once, at import), a list as kubectl takes it.
        config_file = (connection.kubeconfig or os.environ.get("KUBECONFIG")
                       or os.path.join(os.path.expanduser("~"), ".kube", "config"))
        k8s_config.load_kube_config(config_file=config_file, context=connection.context,
                                    client_configuration=configuration)
    else:
        k8s_config.load_incluster_config(client_configuration=configuration)
    if connection.host:
        configuration.host = connection.host
    if connection.api_key:
        configuration.api_key = {"authorization": "Bearer " + connection.api_key}
        configuration.refresh_api_key_hook = None  # the kubeconfig's own token (and its refresh) no longer apply
    if connection.ca_cert:
        configuration.ssl_ca_cert = connection.ca_cert
    if connection.validate_certs is not None:
        configuration.verify_ssl = connection.validate_certs
    send_bearer_token(configuration)


def send_bearer_token(configuration: Any) -> None:
    """Make the client send the bearer token the loaders found.

    kubernetes 36's kubeconfig and in-cluster loaders put "Bearer <token>" in ``api_key["authorization"]``,
    but its generated API client sends only ``api_key["BearerToken"]``: a token kubeconfig or a Pod's
    service account would reach the API server with no credentials at all (anonymous, 401 or 403).
    So the token is carried across now and after every refresh (an expiring exec or projected token)."""
    loaded_hook = configuration.refresh_api_key_hook

    def refresh(conf: Any) -> None:
        if loaded_hook is not None:
            loaded_hook(conf)
        token = conf.api_key.get("authorization")
        if token:
            conf.api_key["BearerToken"] = token

    configuration.refresh_api_key_hook = refresh
    token = configuration.api_key.get("authorization")
    if token:
        configuration.api_key["BearerToken"] = token


def api_client(kubeconfig: Optional[str] = None, context: Optional[str] = None,
               timeout: Optional[Tuple[float, float]] = None, connection: Optional[Connection] = None) -> Any:
    """An ApiClient for ``connection`` (or the kubeconfig and context given, the K8S_AUTH_* variables
    filling what is absent; see ``Connection``) whose every call has a (connect, read) timeout,
    ``timeout`` or the defaults (5 s, 30 s); a watch's read timeout is its timeoutSeconds plus 30 s. A
    call without an answer in time raises ``NoAnswer`` (a urllib3 HTTPError, so ``TransportError``
    handlers catch it), naming the server. Timed-out reads are not retried: the timeout is the bound."""
    if k8s_client is None:
        raise KubeError("the Python 'kubernetes' package is required (pip install kubernetes)")
    if connection is None:
        connection = Connection.of({"kubeconfig": kubeconfig, "context": context})
    configuration = k8s_client.Configuration()
    try:
        _configure(connection, configuration)
    except FieldError:
        raise
    except Exception as exc:  # the kubernetes package raises several unrelated types here
        raise KubeError("cannot load the Kubernetes credentials from %s: %s" % (connection.describe(), exc)) from exc
    # urllib3 would retry a timed-out GET three times (4 x the read timeout); connection errors
    # (refused, reset) are retried once.
    configuration.retries = Retry(total=3, connect=1, read=0, status=0, other=0)
    client = TimedApiClient(configuration)
    client.default_timeout = timeout or (DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT)
    return client


def core_v1(kubeconfig: Optional[str] = None, context: Optional[str] = None,
            timeout: Optional[Tuple[float, float]] = None, connection: Optional[Connection] = None) -> Any:
    """A CoreV1Api for ``connection`` or the kubeconfig and context (see ``api_client``); every call
    has (connect, read) timeouts: ``timeout`` or (5 s, 30 s)."""
    return k8s_client.CoreV1Api(api_client(kubeconfig, context, timeout, connection))


def core_v1_for(params: Mapping[str, Any]) -> Any:
    """The CoreV1Api a module's connection options and timeouts (``connection_argspec``) ask for."""
    return core_v1(timeout=kube_timeouts(params), connection=Connection.of(params))
