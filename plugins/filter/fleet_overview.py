# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: fleet_overview
short_description: The fleet at a glance - nodes, quarantines, holds, remediations, breaker, drills
version_added: 0.6.0
description:
  - Joins the GPU Nodes (M(kubernetes.core.k8s_info)), the Slurm nodes
    (RV(gpufleet.resilience.slurm_node_info#module:nodes), or an empty list where Slurm is not read), the
    breaker (RV(gpufleet.resilience.remediation_breaker#module:breaker)) and the chaos ledger (the result of
    M(gpufleet.resilience.chaos_ledger)) into one dictionary, for C(playbooks/fleet_status.yml).
  - A remediation under way is read from its node's C(gpufleet.io/remediation) annotation.
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: Kubernetes Node objects.
    type: list
    elements: dict
    required: true
  slurm_nodes:
    description: The Slurm nodes; empty where Slurm is not read.
    type: list
    elements: raw
    required: true
  breaker:
    description: The breaker's state.
    type: dict
  ledger:
    description: The chaos ledger (C(drills), C(faults), C(kill_switch)).
    type: dict
  quarantine_taint:
    description: The remediation's quarantine taint key (C(remediation_taint_key)).
    type: str
    default: gpufleet.io/gpu-unhealthy
  hold_label:
    description: The remediation's hold label (C(remediation_hold_label)).
    type: str
    default: gpufleet.io/remediation-hold
"""

EXAMPLES = r"""
- name: The fleet as JSON
  ansible.builtin.debug:
    msg: "{{ nodes.resources | gpufleet.resilience.fleet_overview(slurm.nodes, breaker.breaker, ledger) }}"
"""

RETURN = r"""
_value:
  description:
    - C(nodes) (the rows of P(gpufleet.resilience.fleet_status#filter) with C(quarantined), C(held),
      C(remediating) and C(remediation)), C(quarantined), C(held), C(remediations), C(breaker), C(drills),
      C(faults) and C(kill_switch).
  type: dict
"""

from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.overview import overview


class FilterModule:
    def filters(self):
        return {"fleet_overview": overview}
