# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A Node's own condition and Events: the two writes a health agent makes.

Both need only ``patch`` on ``nodes/status`` and ``create`` on ``events``: the agent's
ClusterRole grants nothing else, so neither call reads the Node first. ``api`` is either the
``kubernetes`` package's CoreV1Api or the agent's ``kube.agent_client.AgentApi``: both offer
``patch_node_status`` and ``create_namespaced_event``.

* The condition goes in with a strategic merge patch of ``nodes/status``. Conditions merge by
  ``type``, so the kubelet's (or kwok's) ``Ready`` and every other condition stay as they are.
* An Event names the Node as its ``involvedObject``, in namespace ``default`` (where
  ``kubectl describe node`` looks for a Node's Events).
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.errors import api_error

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
EVENT_NAMESPACE = "default"
# The API server refuses longer messages in an Event; a condition's message has no hard limit,
# but kubectl shows one line.
MESSAGE_MAX = 1024


@dataclass(frozen=True)
class NodeCondition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str


def rfc3339(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition_patch(condition: NodeCondition, heartbeat_at: float, transition_at: float) -> Dict[str, Any]:
    """The patch body of one condition (pure)."""
    return {"status": {"conditions": [{
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message[:MESSAGE_MAX],
        "lastHeartbeatTime": rfc3339(heartbeat_at),
        "lastTransitionTime": rfc3339(transition_at),
    }]}}


def patch_node_condition(api: Any, node: str, condition: NodeCondition, heartbeat_at: float,
                         transition_at: float, request_timeout: float = 5.0) -> None:
    """Write one condition of ``node``; a KubeError (with ``status``) when the API server refuses."""
    body = condition_patch(condition, heartbeat_at, transition_at)
    try:
        api.patch_node_status(node, body, _content_type=STRATEGIC_MERGE_PATCH, _request_timeout=request_timeout)
    except Exception as exc:  # an API error (with .status) or a connection error alike
        raise api_error(exc, "patch the %s condition of node %s" % (condition.type, node)) from exc


def event_body(node: str, reason: str, message: str, event_type: str, component: str, at: float,
               node_uid: Optional[str] = None) -> Dict[str, Any]:
    """A core/v1 Event about ``node`` (pure)."""
    stamp = rfc3339(at)
    involved = {"apiVersion": "v1", "kind": "Node", "name": node}
    if node_uid:
        involved["uid"] = node_uid
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "%s.%s" % (node, uuid.uuid4().hex[:16]), "namespace": EVENT_NAMESPACE},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:MESSAGE_MAX],
        "type": event_type,
        "source": {"component": component, "host": node},
        "reportingComponent": component,
        "reportingInstance": node,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def create_node_event(api: Any, body: Dict[str, Any], request_timeout: float = 5.0) -> None:
    try:
        api.create_namespaced_event(EVENT_NAMESPACE, body, _request_timeout=request_timeout)
    except Exception as exc:  # ApiException or a connection error alike
        raise api_error(exc, "create an Event about node %s" % body["involvedObject"]["name"]) from exc
