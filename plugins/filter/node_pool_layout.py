# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: node_pool_layout
short_description: Expand GPU node pools into their nodes with rack and block placement
version_added: 0.1.0
description:
  - Turns the inventory's C(gpufleet_node_pools) into one entry per node, active nodes first and
    then the spares of each pool.
  - Node C(<pool>-NNN) sits in rack C(<pool>-rack-<r>), C(r = (NNN - 1) // nodes_per_rack + 1), and
    in block C(<pool>-block-<b>), C(b = (r - 1) // racks_per_block + 1).
  - "Validates the pools with the collection's one pool model (see P(gpufleet.resilience.node_pools#filter))
    and fails with the bad field named (for example C(gpufleet_node_pools[1].count: must be >= 1, got 0))."
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.node_pools
options:
  _input:
    description: The pools, as in C(gpufleet_node_pools).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: The active nodes of every pool
  ansible.builtin.debug:
    msg: >-
      {{ gpufleet_node_pools | gpufleet.resilience.node_pool_layout
         | rejectattr('spare') | map(attribute='name') }}
  # -> ["gpu-a-001", ..., "gpu-a-008"]
"""

RETURN = r"""
_value:
  description: One dict per node.
  type: list
  elements: dict
  contains:
    name: {description: Node name, C(<pool>-NNN)., type: str, sample: gpu-a-003}
    pool: {description: Pool name., type: str, sample: gpu-a}
    index: {description: 1-based number of the node in its pool., type: int, sample: 3}
    rack: {description: Rack label value., type: str, sample: gpu-a-rack-1}
    block: {description: Block label value., type: str, sample: gpu-a-block-1}
    zone: {description: Zone label value., type: str, sample: lab-zone-a}
    gpus: {description: GPUs of the node., type: int, sample: 8}
    gpu_product: {description: GPU product label value., type: str, sample: NVIDIA-H100-80GB-HBM3}
    cpus: {description: CPUs of the node., type: int, sample: 16}
    memory_mb: {description: Memory of the node in MiB., type: int, sample: 65536}
    spare: {description: Whether the node is spare capacity (a Slurm FUTURE node)., type: bool, sample: false}
    labels: {description: The pool's own node labels., type: dict, sample: {}}
    taints: {description: "The pool's own node taints, each C({key, value, effect})."
             , type: list, elements: dict, sample: []}
"""

from typing import Any, Callable, Dict, List

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import (
    expand_pools,
    node_as_dict,
    parse_pools,
)


def node_pool_layout(pools: Any, variable: str = "gpufleet_node_pools") -> List[Dict[str, Any]]:
    try:
        return [node_as_dict(node) for node in expand_pools(parse_pools(pools, variable))]
    except FieldError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"node_pool_layout": node_pool_layout}
