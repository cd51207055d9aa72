# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: node_pool_resize
short_description: Plan a GPU node pool's resize or removal - the pools afterwards and the nodes that leave
version_added: 0.6.0
description:
  - Pool O(pool) of the input pools with O(count) active nodes, or removed (O(remove)).
  - Node names follow the pool layout (P(gpufleet.resilience.node_pool_layout#filter)) - a pool resized to
    O(count) keeps nodes 1..count active, the next C(spares) nodes become its spares (Slurm C(FUTURE), no
    Kubernetes node) and the rest are gone.
  - The nodes that leave are those of O(in_service) (what Slurm has in service now) that belong to the pool
    and are not active afterwards, so a run that stopped halfway plans only what is left to do.
  - "Fails with the bad argument named: C(pool) (unknown, or with a replacement in force), C(count)
    (missing, not an integer, out of range, or given with O(remove)) or C(remove) (the fleet's only pool)."
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: Every pool, as the P(gpufleet.resilience.node_pools#filter) filter returns them.
    type: list
    elements: dict
    required: true
  pool:
    description: The pool to resize or remove.
    type: str
    required: true
  count:
    description: Its new number of active nodes (its spares stay as many). Omit with O(remove).
    type: int
  remove:
    description: Remove the pool, its spares included.
    type: bool
    default: false
  in_service:
    description: The nodes in service now (Slurm's nodes, C(FUTURE) spares left out).
    type: list
    elements: str
    default: []
  replacements:
    description: Replacements in force, retired node to the spare that replaced it; a pool with one is refused.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Plan gpu-b down to 2 nodes
  ansible.builtin.set_fact:
    plan: >-
      {{ pools | gpufleet.resilience.node_pool_resize('gpu-b', count=2,
                                                       in_service=slurm.nodes | map(attribute='name') | list) }}
  # plan.leaving -> ["gpu-b-003", "gpu-b-004"]
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    pool: {description: The pool's name., type: str, sample: gpu-b}
    before: {description: The pool now, every field filled in., type: dict}
    after: {description: The pool afterwards; V(null) when it is removed., type: dict}
    pools: {description: Every pool afterwards, in the same order., type: list, elements: dict}
    leaving: {description: Nodes to drain and take out of service, in layout order., type: list, elements: str,
              sample: [gpu-b-003, gpu-b-004]}
    removed: {description: Whether the pool is removed., type: bool, sample: false}
"""

from typing import Any, Callable, Dict, List, Optional

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pool_resize import resize_pool
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import parse_pools


def node_pool_resize(pools: Any, pool: Any, count: Any = None, remove: bool = False,
                     in_service: Optional[List[str]] = None,
                     replacements: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    try:
        return resize_pool(parse_pools(pools), pool, count, bool(remove), in_service or [], replacements).as_dict()
    except FieldError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"node_pool_resize": node_pool_resize}
