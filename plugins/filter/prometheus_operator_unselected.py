# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: prometheus_operator_unselected
short_description: The objects that no Prometheus or Alertmanager resource of the Prometheus Operator would pick up
version_added: 0.6.0
description:
  - Takes the objects the monitoring role applies and returns one line for each PrometheusRule, PodMonitor or
    AlertmanagerConfig among them that no C(Prometheus) or C(Alertmanager) resource selects, with each resource's
    reason, naming its selector (C(ruleSelector), C(ruleNamespaceSelector), C(podMonitorSelector),
    C(podMonitorNamespaceSelector), C(alertmanagerConfigSelector), C(alertmanagerConfigNamespaceSelector)).
  - The Operator's meanings are kept - an empty selector matches everything, a null object selector nothing, a
    null namespace selector the resource's own namespace only.
  - Other kinds are ignored. An empty list means every object would be picked up.
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: The objects to be applied (each with C(kind) and C(metadata)).
    type: list
    elements: dict
    required: true
  prometheuses:
    description: The cluster's C(Prometheus) resources (M(kubernetes.core.k8s_info) C(resources)).
    type: list
    elements: dict
    required: true
  alertmanagers:
    description: The cluster's C(Alertmanager) resources.
    type: list
    elements: dict
    required: true
  namespace_labels:
    description: The labels of the objects' namespace.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse objects the Operator would ignore
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join('; ') }}"
  vars:
    problems: >-
      {{ objects | gpufleet.resilience.prometheus_operator_unselected(prometheuses.resources,
         alertmanagers.resources, namespace.resources[0].metadata.labels) }}
"""

RETURN = r"""
_value:
  description: One line per object no resource selects; empty when all are selected.
  type: list
  elements: str
"""

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.operator_selection import unselected


class FilterModule:
    def filters(self):
        return {"prometheus_operator_unselected": unselected}
