# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Would the Prometheus Operator's Prometheus and Alertmanager resources pick up our objects?

A PrometheusRule, PodMonitor or AlertmanagerConfig that no Prometheus or Alertmanager resource
selects is accepted by the API server and then silently ignored: the alerts never fire. On a
default kube-prometheus-stack, rules and monitors are selected by its `release` label. Pure: the
caller lists the resources and the namespace's labels.

The Operator's meaning of each selector (its CRDs, v0.85.0): an empty selector matches everything,
a null object selector matches nothing, a null namespace selector matches the resource's own
namespace only.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.label_selector import (
    describe,
    labels_that_would_match,
    matches,
)

# Our object's kind -> (the kind of resource that selects it, its object selector, its namespace selector).
SELECTED_BY: Dict[str, Tuple[str, str, str]] = {
    "PrometheusRule": ("Prometheus", "ruleSelector", "ruleNamespaceSelector"),
    "PodMonitor": ("Prometheus", "podMonitorSelector", "podMonitorNamespaceSelector"),
    "AlertmanagerConfig": ("Alertmanager", "alertmanagerConfigSelector", "alertmanagerConfigNamespaceSelector"),
}


def _pairs(labels: Mapping[str, str]) -> str:
    return ", ".join("%s=%s" % item for item in sorted(labels.items()))


def _ref(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return "%s/%s" % (meta.get("namespace", ""), meta.get("name", ""))


def why_not_selected(owner: Mapping[str, Any], kind: str, labels: Mapping[str, str], namespace: str,
                     namespace_labels: Mapping[str, str]) -> Optional[str]:
    """None if `owner` (a Prometheus or Alertmanager) selects an object of `kind` with `labels` in
    `namespace`; else the reason, naming the selector."""
    object_field, namespace_field = SELECTED_BY[kind][1:]
    spec = owner.get("spec") or {}
    where = "%s %s" % (owner.get("kind", "resource"), _ref(owner))
    selector = spec.get(object_field)
    if selector is None:
        return "%s has no %s (null selects no %s)" % (where, object_field, kind)
    if not matches(selector, labels):
        wanted = labels_that_would_match(selector)
        hint = "; the labels {%s} would match" % _pairs(wanted) if wanted else ""
        return "%s selects by %s %s, which the labels {%s} do not match%s" % (
            where, object_field, describe(selector), _pairs(labels), hint)
    namespace_selector = spec.get(namespace_field)
    own_namespace = (owner.get("metadata") or {}).get("namespace", "")
    if namespace_selector is None:
        if namespace != own_namespace:
            return "%s has no %s, so it looks in its own namespace %s only, not in %s" % (
                where, namespace_field, own_namespace, namespace)
    elif not matches(namespace_selector, namespace_labels):
        return "%s selects namespaces by %s %s, which namespace %s does not match" % (
            where, namespace_field, describe(namespace_selector), namespace)
    return None


def unselected(objects: Sequence[Mapping[str, Any]], prometheuses: Sequence[Mapping[str, Any]],
               alertmanagers: Sequence[Mapping[str, Any]], namespace_labels: Mapping[str, str]) -> List[str]:
    """One line per object of ours that no resource would select, with each resource's reason."""
    owners = {"Prometheus": list(prometheuses), "Alertmanager": list(alertmanagers)}
    problems = []
    for obj in objects:
        kind = obj.get("kind", "")
        if kind not in SELECTED_BY:
            continue
        owner_kind = SELECTED_BY[kind][0]
        meta = obj.get("metadata") or {}
        candidates = owners[owner_kind]
        if not candidates:
            problems.append("%s %s: the cluster has no %s resource (monitoring.coreos.com/v1) to pick it up" % (
                kind, _ref(obj), owner_kind))
            continue
        reasons = []
        for owner in candidates:
            reason = why_not_selected(owner, kind, meta.get("labels") or {}, meta.get("namespace", ""),
                                      namespace_labels)
            if reason is None:
                break
            reasons.append(reason)
        else:
            problems.append("%s %s is selected by no %s: %s" % (kind, _ref(obj), owner_kind, "; ".join(reasons)))
    return problems
