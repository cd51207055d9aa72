"""Which of our monitoring objects the Prometheus Operator's resources would pick up."""

from __future__ import annotations

from typing import Any, Dict, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.operator_selection import unselected

OURS = "gpufleet-system"
NS_LABELS = {"kubernetes.io/metadata.name": OURS}
KPS = {"release": "kube-prometheus-stack"}


def obj(kind: str, labels: Optional[Dict[str, str]] = None, namespace: str = OURS) -> Dict[str, Any]:
    return {"kind": kind, "metadata": {"name": "gpufleet-" + kind.lower(), "namespace": namespace,
                                       "labels": dict(labels or {})}}


def prometheus(namespace: str = "monitoring", **spec: Any) -> Dict[str, Any]:
    return {"kind": "Prometheus", "metadata": {"name": "kps", "namespace": namespace}, "spec": spec}


def alertmanager(namespace: str = "monitoring", **spec: Any) -> Dict[str, Any]:
    return {"kind": "Alertmanager", "metadata": {"name": "kps", "namespace": namespace}, "spec": spec}


# kube-prometheus-stack's defaults: its release label, every namespace.
DEFAULT_PROMETHEUS = prometheus(ruleSelector={"matchLabels": KPS}, ruleNamespaceSelector={},
                                podMonitorSelector={"matchLabels": KPS}, podMonitorNamespaceSelector={})
DEFAULT_ALERTMANAGER = alertmanager(alertmanagerConfigSelector={"matchLabels": KPS},
                                    alertmanagerConfigNamespaceSelector={})
OBJECTS = [obj("PrometheusRule", KPS), obj("PodMonitor", KPS), obj("AlertmanagerConfig", KPS), obj("ConfigMap")]


def test_objects_with_the_release_label_are_selected():
    assert unselected(OBJECTS, [DEFAULT_PROMETHEUS], [DEFAULT_ALERTMANAGER], NS_LABELS) == []


def test_objects_without_it_are_named_with_the_selector_and_the_labels_that_would_match():
    problems = unselected([obj("PrometheusRule"), obj("PodMonitor", KPS)], [DEFAULT_PROMETHEUS], [], NS_LABELS)
    assert problems == [
        "PrometheusRule gpufleet-system/gpufleet-prometheusrule is selected by no Prometheus: Prometheus "
        "monitoring/kps selects by ruleSelector release=kube-prometheus-stack, which the labels {} do not match; "
        "the labels {release=kube-prometheus-stack} would match"]


def test_a_null_object_selector_selects_nothing():
    problems = unselected([obj("PodMonitor", KPS)], [prometheus(podMonitorNamespaceSelector={})], [], NS_LABELS)
    assert "has no podMonitorSelector (null selects no PodMonitor)" in problems[0]


def test_a_null_namespace_selector_means_its_own_namespace():
    elsewhere = prometheus(ruleSelector={})
    assert "looks in its own namespace monitoring only, not in gpufleet-system" in \
        unselected([obj("PrometheusRule")], [elsewhere], [], NS_LABELS)[0]
    assert unselected([obj("PrometheusRule", namespace="monitoring")], [elsewhere], [],
                      {"kubernetes.io/metadata.name": "monitoring"}) == []


def test_a_namespace_selector_is_matched_against_the_namespaces_labels():
    picky = alertmanager(alertmanagerConfigSelector={},
                         alertmanagerConfigNamespaceSelector={"matchLabels": {"monitoring": "enabled"}})
    problems = unselected([obj("AlertmanagerConfig")], [], [picky], NS_LABELS)
    assert "selects namespaces by alertmanagerConfigNamespaceSelector monitoring=enabled, which namespace " \
           "gpufleet-system does not match" in problems[0]
    assert unselected([obj("AlertmanagerConfig")], [], [picky], dict(NS_LABELS, monitoring="enabled")) == []


def test_one_selecting_resource_of_several_is_enough_and_each_refusal_is_listed():
    other = prometheus(namespace="team-a", ruleSelector={"matchLabels": {"team": "a"}}, ruleNamespaceSelector={})
    assert unselected([obj("PrometheusRule", KPS)], [other, DEFAULT_PROMETHEUS], [], NS_LABELS) == []
    problems = unselected([obj("PrometheusRule")], [other, DEFAULT_PROMETHEUS], [], NS_LABELS)
    assert "Prometheus team-a/kps selects by ruleSelector team=a" in problems[0]
    assert "Prometheus monitoring/kps selects by ruleSelector release=kube-prometheus-stack" in problems[0]


def test_no_resource_at_all_is_named():
    problems = unselected(OBJECTS, [], [], NS_LABELS)
    assert problems == [
        "PrometheusRule gpufleet-system/gpufleet-prometheusrule: the cluster has no Prometheus resource "
        "(monitoring.coreos.com/v1) to pick it up",
        "PodMonitor gpufleet-system/gpufleet-podmonitor: the cluster has no Prometheus resource "
        "(monitoring.coreos.com/v1) to pick it up",
        "AlertmanagerConfig gpufleet-system/gpufleet-alertmanagerconfig: the cluster has no Alertmanager resource "
        "(monitoring.coreos.com/v1) to pick it up"]
