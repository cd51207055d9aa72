# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The pods of one node, and what kind of pod each is (for a drain and the opt-out check)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    ApiException,
    TransportError,
    api_failure,
    unreachable,
)

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
FINISHED_PHASES = ("Succeeded", "Failed")


def pods_on_node(core_v1: Any, node: str) -> List[Dict[str, Any]]:
    """Every pod bound to ``node``, in all namespaces, as plain dicts (camelCase, as the API writes them)."""
    what = "list the pods of node %s" % node
    try:
        listed = core_v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node)
    except ApiException as exc:
        raise api_failure(exc, what) from exc
    except TransportError as exc:
        raise unreachable(exc, what) from exc
    return [
        pod if isinstance(pod, dict) else core_v1.api_client.sanitize_for_serialization(pod) for pod in listed.items
    ]


def pod_ref(pod: Mapping[str, Any]) -> str:
    """``namespace/name``, as a drain reports a pod."""
    meta = pod.get("metadata") or {}
    return "%s/%s" % (meta.get("namespace") or "default", meta.get("name") or "")


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    """Owned by a DaemonSet: evicting it is pointless, the DaemonSet puts it back (it tolerates cordons)."""
    return any(owner.get("kind") == "DaemonSet" for owner in (pod.get("metadata") or {}).get("ownerReferences") or [])


def is_mirror_pod(pod: Mapping[str, Any]) -> bool:
    """The API server's mirror of a kubelet's static pod: it cannot be evicted, only the kubelet removes it."""
    return MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})


def is_finished_pod(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in FINISHED_PHASES


def is_terminating_pod(pod: Mapping[str, Any]) -> bool:
    """Already being deleted (it has a deletionTimestamp): someone else is removing it."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))
