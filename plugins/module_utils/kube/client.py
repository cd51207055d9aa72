# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A Kubernetes API client from a kubeconfig, for modules and tests (the health agent uses
``kube.agent_client``, which does not load the whole ``kubernetes`` package)."""

from __future__ import annotations

import json
from typing import Any, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.errors import KubeError, api_error

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
    from urllib3.exceptions import HTTPError as TransportError
except ImportError:  # pragma: no cover - urllib3 comes with kubernetes

    class TransportError(Exception):  # type: ignore[no-redef]
        """Stand-in, as ApiException above."""


# ApiException is re-exported for the callers that catch it.
__all__ = [
    "ApiException",
    "KubeError",
    "TransportError",
    "api_error",
    "api_failure",
    "api_message",
    "core_v1",
    "unreachable",
]


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


def unreachable(exc: Exception, what: str) -> KubeError:
    """The KubeError for a call that never got an answer from the API server."""
    return KubeError("%s: cannot reach the Kubernetes API server: %s" % (what, exc))


def core_v1(kubeconfig: Optional[str] = None, context: Optional[str] = None) -> Any:
    """A CoreV1Api for the kubeconfig (or the in-cluster service account when none is given)."""
    if k8s_client is None:
        raise KubeError("the Python 'kubernetes' package is required (pip install kubernetes)")
    try:
        if kubeconfig:
            api = k8s_config.new_client_from_config(config_file=kubeconfig, context=context or None)
        else:
            k8s_config.load_incluster_config()
            api = k8s_client.ApiClient()
    except Exception as exc:  # the kubernetes package raises several unrelated types here
        raise KubeError("cannot load the kubeconfig %s: %s" % (kubeconfig or "(in-cluster)", exc)) from exc
    return k8s_client.CoreV1Api(api)
