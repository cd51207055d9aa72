# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A Kubernetes API client from a kubeconfig, for modules and tests (the health agent uses
``kube.agent_client``, which does not load the whole ``kubernetes`` package)."""

from __future__ import annotations

from typing import Any, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.errors import KubeError, api_error

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
except ImportError:  # pragma: no cover - reported by kube_client() with a clear message
    k8s_client = None
    k8s_config = None
    ApiException = Exception  # type: ignore[assignment,misc]

# ApiException is re-exported for the callers that catch it.
__all__ = ["ApiException", "KubeError", "api_error", "core_v1"]


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
