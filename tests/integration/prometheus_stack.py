"""The Prometheus Operator's CRDs and a kube-prometheus-stack-like Prometheus and Alertmanager on
the lab's API server, for the tests of the monitoring role's `existing` backend.

The CRDs are the Operator's own (v0.85.0, example/prometheus-operator-crd/ of its Go module,
fetched through the module proxy into the cache). No Operator runs: the API server validates our
objects against the CRDs' schemas, and the Prometheus and Alertmanager resources are there for
their selectors, which the role reads: kube-prometheus-stack's defaults, its `release` label in
every namespace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from agent_probe import wait_for
from kubernetes import client
from lab_harness import go_module_dir, kubectl, unestablished_crds

OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
OPERATOR_VERSION = "v0.85.0"
GROUP = "monitoring.coreos.com"
CRDS = ("prometheusrules", "podmonitors", "alertmanagerconfigs", "prometheuses", "alertmanagers")
RELEASE = {"release": "kube-prometheus-stack"}


def stack(namespace: str) -> dict:
    """plural -> the resource kube-prometheus-stack would make there (only its selectors)."""
    return {
        "prometheuses": {"apiVersion": GROUP + "/v1", "kind": "Prometheus",
                         "metadata": {"name": "kps", "namespace": namespace},
                         "spec": {"ruleSelector": {"matchLabels": RELEASE}, "ruleNamespaceSelector": {},
                                  "podMonitorSelector": {"matchLabels": RELEASE}, "podMonitorNamespaceSelector": {}}},
        "alertmanagers": {"apiVersion": GROUP + "/v1", "kind": "Alertmanager",
                          "metadata": {"name": "kps", "namespace": namespace},
                          "spec": {"alertmanagerConfigSelector": {"matchLabels": RELEASE},
                                   "alertmanagerConfigNamespaceSelector": {}}},
    }


def operator_crd_dir() -> Path:
    """example/prometheus-operator-crd of the Operator's module, from the Go module proxy (cached)."""
    crds = go_module_dir(OPERATOR_MODULE, OPERATOR_VERSION) / "example" / "prometheus-operator-crd"
    assert crds.is_dir(), crds
    return crds


def install(lab, plurals: Sequence[str] = CRDS) -> Path:
    """Apply the CRDs and wait until the API server serves them."""
    crd_dir = operator_crd_dir()
    for plural in plurals:
        # Server-side: the CRDs are too big for kubectl's last-applied annotation.
        crd = crd_dir / ("%s_%s.yaml" % (GROUP, plural))
        kubectl(lab, "apply", "--server-side", "--force-conflicts", "-f", str(crd))
    # Polled: right after the create a CRD has no status yet, and `kubectl wait` fails on that at once.
    names = ["%s.%s" % (plural, GROUP) for plural in plurals]
    wait_for(lambda: not unestablished_crds(lab, names), timeout=60, interval=0.5,
             what="the CRDs %s Established" % names)
    return crd_dir


def create_stack(lab, namespace: str) -> None:
    lab.kube().create_namespace({"metadata": {"name": namespace}})
    api = client.CustomObjectsApi(lab.kube().api_client)
    for plural, body in stack(namespace).items():
        api.create_namespaced_custom_object(GROUP, "v1", namespace, plural, body)


def remove(lab, namespaces: Sequence[str], plurals: Sequence[str] = CRDS) -> None:
    """Leave the lab as it was: the namespaces, then the CRDs (and every object of theirs)."""
    for namespace in namespaces:
        kubectl(lab, "delete", "namespace", namespace, "--ignore-not-found", "--wait=true", "--timeout=120s",
                check=False)
    for plural in plurals:
        kubectl(lab, "delete", "crd", "%s.%s" % (plural, GROUP), "--ignore-not-found", check=False)
