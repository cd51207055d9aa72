# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: fleet_status
short_description: Join Kubernetes nodes and Slurm node states into one row per GPU node
version_added: 0.1.0
description:
  - Takes the C(resources) of M(kubernetes.core.k8s_info) for Nodes and the
    RV(gpufleet.resilience.slurm_node_info#module:nodes) list, and returns one row per node, sorted by name.
  - Instead of the module's nodes, the lines of C(sinfo --Node --noheader --format=%N|%T|%G|%E) work too.
  - Nodes known to only one of the two systems are listed too (C(k8s=absent) or C(slurm_state=null)).
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: Kubernetes Node objects.
    type: list
    elements: dict
    required: true
  slurm_nodes:
    description:
      - The RV(gpufleet.resilience.slurm_node_info#module:nodes) list, or output lines of
        C(sinfo --Node --noheader --format=%N|%T|%G|%E).
    type: list
    elements: raw
    required: true
  gpu_health:
    description: Node name to a M(gpufleet.resilience.gpu_health) result, to add the GPU verdict.
    type: dict
"""

EXAMPLES = r"""
- name: Read the Slurm nodes
  gpufleet.resilience.slurm_node_info:
    slurm_conf: /var/tmp/gpufleet-lab/slurm/slurm.conf
  register: slurm

- name: Show the lab
  ansible.builtin.debug:
    msg: "{{ nodes.resources | gpufleet.resilience.fleet_status(slurm.nodes) }}"
"""

RETURN = r"""
_value:
  description: One row per node.
  type: list
  elements: dict
  contains:
    name:
      description: Node name (the same in Kubernetes and Slurm).
      type: str
    pool:
      description: Value of the C(gpufleet.io/pool) label.
      type: str
    rack:
      description: Value of the C(gpufleet.io/rack) label.
      type: str
    k8s:
      description: V(Ready), V(NotReady) or V(absent).
      type: str
    k8s_ready:
      description: Whether the Ready condition is True.
      type: bool
    cordoned:
      description: Whether the node is unschedulable.
      type: bool
    gpus:
      description: Allocatable C(nvidia.com/gpu).
      type: int
    slurm_state:
      description:
        - Slurm's long state as C(sinfo %T) spells it, lower case, with its flags (V(idle), V(down*), V(drained)).
      type: str
    slurm_reason:
      description: Slurm's reason, if any.
      type: str
    slurm_gpus:
      description: GPUs in the node's Slurm GRES.
      type: int
    health:
      description: GPU verdict from O(gpu_health), when given.
      type: str
    gpus_seen:
      description: GPUs NVML reported, when O(gpu_health) is given.
      type: int
"""

from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.status import fleet_status


class FilterModule:
    def filters(self):
        return {"fleet_status": fleet_status}
