# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: node_pools
short_description: Validate GPU node pools and fill in their defaults
version_added: 0.2.0
description:
  - "The one check of the inventory's C(gpufleet_node_pools), shared by every role and playbook:
    the lab, the C(node_pool) role's backends, the Slurm lab and the Slinky chart values all read
    pools through it, so a pool that passes here passes everywhere."
  - "Returns each pool with every default filled in: C(name), C(count), C(spares),
    C(gpus_per_node), C(gpu_product), C(zone), C(nodes_per_rack), C(racks_per_block), C(cpus),
    C(memory_mb), C(selector), C(labels), C(taints) and C(tolerations)."
  - "Fails with the bad field named, for example C(gpufleet_node_pools[1].name: must be lowercase ...)."
  - "Limits: C(name) a DNS label of at most 40 characters (it becomes node, pod and Slurm node
    names); C(count) 1-999 and C(count + spares) at most 999; C(gpus_per_node) 1-64; C(selector)
    and C(labels) Kubernetes label keys and values; C(taints) with effect V(NoSchedule),
    V(PreferNoSchedule) or V(NoExecute) and not the cordon or C(gpufleet.io/) keys; C(tolerations)
    that never tolerate a cordon, a C(gpufleet.io/) taint or every taint."
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.node_pools
options:
  _input:
    description: The pools, as in C(gpufleet_node_pools).
    type: list
    elements: dict
    required: true
  require_selector:
    description: Every pool must have a C(selector) (a real cluster, where the nodes exist already).
    type: bool
    default: false
  added:
    description:
      - More pools to append (the lab's records of C(add-node-pool.yml)), validated too. A pool of
        O(_input) wins over an added pool of the same name.
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: Check the pools before anything changes
  ansible.builtin.set_fact:
    pools: "{{ gpufleet_node_pools | gpufleet.resilience.node_pools(require_selector=true) }}"
  # pools[0].spares -> 0 when the inventory left it out
"""

RETURN = r"""
_value:
  description: The pools, normalized.
  type: list
  elements: dict
  sample:
    - name: h100
      count: 16
      spares: 2
      gpus_per_node: 8
      gpu_product: NVIDIA-H100-80GB-HBM3
      zone: us-east-1a
      nodes_per_rack: 4
      racks_per_block: 4
      cpus: 192
      memory_mb: 2000000
      selector: {node.kubernetes.io/instance-type: p5.48xlarge}
      labels: {}
      taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      tolerations: []
"""

from typing import Any, Callable, Dict, List, Optional

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import merge_pools


def node_pools(
    pools: Any,
    variable: str = "gpufleet_node_pools",
    require_selector: bool = False,
    added: Optional[List[Any]] = None,
) -> List[Dict[str, Any]]:
    try:
        return [pool.as_dict() for pool in merge_pools(pools, added or [], variable, require_selector)]
    except FieldError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"node_pools": node_pools}
