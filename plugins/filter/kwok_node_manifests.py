# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: kwok_node_manifests
short_description: Node objects that simulate GPU nodes with kwok in the lab
version_added: 0.1.0
description:
  - Turns nodes from P(gpufleet.resilience.node_pool_layout#filter) into Kubernetes Node objects
    that the lab's kwok controller makes Ready (annotation C(kwok.x-k8s.io/node=fake)).
  - Each carries C(nvidia.com/gpu), cpu, memory and pods as capacity and allocatable, and the labels
    C(type=kwok), C(nvidia.com/gpu.product), C(nvidia.com/gpu.count), C(nvidia.com/gpu.present),
    C(topology.kubernetes.io/zone), C(gpufleet.io/pool), C(gpufleet.io/rack) and C(gpufleet.io/block).
  - No taint, so that lab workloads need no kwok-specific toleration.
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: Nodes, as returned by P(gpufleet.resilience.node_pool_layout#filter).
    type: list
    elements: dict
    required: true
  max_pods:
    description: Pod capacity of each node.
    type: int
    default: 110
"""

EXAMPLES = r"""
- name: Create the active nodes of every pool
  kubernetes.core.k8s:
    definition: >-
      {{ gpufleet_node_pools | gpufleet.resilience.node_pool_layout | rejectattr('spare')
         | gpufleet.resilience.kwok_node_manifests }}
"""

RETURN = r"""
_value:
  description: One Node object (apiVersion, kind, metadata, status) per node.
  type: list
  elements: dict
"""

from typing import Any, Callable, Dict, List, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.node_layout import kwok_node_manifest


def kwok_node_manifests(nodes: List[Mapping[str, Any]], max_pods: int = 110) -> List[Dict[str, Any]]:
    try:
        return [kwok_node_manifest(node, int(max_pods)) for node in nodes]
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("kwok_node_manifests: bad node entry (%s)" % exc) from exc


class FilterModule:
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"kwok_node_manifests": kwok_node_manifests}
