# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The remediation opt-out: a node, or any pod on it, labelled ``gpufleet.io/remediation=disabled``
(or the site's label) keeps the node out of automatic drain and replacement.

Pods are filtered by the API server (field selector ``spec.nodeName`` and the label selector), so a
node with hundreds of pods costs one small answer.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_node_name, check_text
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    ApiException,
    TransportError,
    api_error,
    unreachable,
)


def parse_label(label: str) -> Tuple[str, str]:
    key, sep, value = check_text(label if isinstance(label, str) else "", "label", 317).partition("=")
    if not sep or not key.strip() or not value.strip():
        raise FieldError("label", "must be KEY=VALUE, such as gpufleet.io/remediation=disabled, not %r" % (label,))
    return key.strip(), value.strip()


def opted_out(core_v1: Any, node: str, label: str) -> Dict[str, Any]:
    """{opted_out, by: ["node/<name>", "pod/<ns>/<name>", ...]}."""
    check_node_name(node, "name")
    key, value = parse_label(label)
    try:
        found = core_v1.read_node(node)
    except ApiException as exc:
        raise api_error(exc, "read node %s" % node) from exc
    except TransportError as exc:
        raise unreachable(exc, "read node %s" % node) from exc
    by: List[str] = []
    if (found.metadata.labels or {}).get(key) == value:
        by.append("node/%s" % node)
    try:
        pods = core_v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node,
                                                   label_selector="%s=%s" % (key, value))
    except ApiException as exc:
        raise api_error(exc, "list the pods of node %s" % node) from exc
    except TransportError as exc:
        raise unreachable(exc, "list the pods of node %s" % node) from exc
    by.extend("pod/%s/%s" % (pod.metadata.namespace, pod.metadata.name) for pod in pods.items)
    return {"opted_out": bool(by), "by": by, "label": "%s=%s" % (key, value)}
