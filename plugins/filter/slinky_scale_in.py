# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: slinky_scale_in
short_description: The Slurm nodes a Slinky pool's scale-in or removal takes, their jobs, and those not drained
version_added: 0.6.0
description:
  - A Slinky NodeSet names its Slurm nodes C(<pool>-<ordinal>) and the collection gives them the feature
    C(pool-<name>); a pool's nodes are those with the feature or the name.
  - Resized to O(count), the pool loses ordinals O(count) and above (a NodeSet scales in from its highest
    ordinal); removed (O(remove)), it loses every node.
  - "Fails with the bad argument named: C(pool) (not a pool name, or not in O(pools)) or C(count) (missing,
    not a whole number of at least 1, or given with O(remove))."
  - Pure; no I/O.
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: The C(nodes) of P(gpufleet.resilience.slurm_node_info#module), with their jobs.
    type: list
    elements: dict
    required: true
  pool:
    description: The pool.
    type: str
    required: true
  count:
    description: Its new number of nodes. Omit with O(remove).
    type: int
  remove:
    description: The pool goes, every node of it.
    type: bool
    default: false
  pools:
    description: The inventory's pool names; when given, O(pool) must be one of them.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Plan gpu-b's removal
  ansible.builtin.set_fact:
    plan: "{{ slurm.nodes | gpufleet.resilience.slinky_scale_in('gpu-b', remove=true) }}"
  # plan.leaving -> ["gpu-b-0", "gpu-b-1"]; plan.jobs_text -> "41 (train, alice) on gpu-b-1"
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    pool: {description: The pool's name., type: str, sample: gpu-b}
    removed: {description: Whether the pool goes., type: bool}
    count: {description: The new number of nodes; V(null) when removed., type: int}
    leaving: {description: The nodes that leave, lowest ordinal first., type: list, elements: str,
              sample: [gpu-b-0, gpu-b-1]}
    jobs: {description: The jobs on them, each with its C(node)., type: list, elements: dict}
    undrained:
      description: The nodes that leave and would still take a job (neither drained nor down). A FUTURE node is
        not in service and never leaves.
      type: list
      elements: str
    jobs_text: {description: "The jobs as the refusals name them: C(<id> (<name>, <user>) on <node>)", type: str}
"""

from typing import Any, Callable, Dict, List, Optional

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slinky.scale_in import scale_in


def slinky_scale_in(nodes: Any, pool: Any, count: Any = None, remove: bool = False,
                    pools: Optional[List[str]] = None) -> Dict[str, Any]:
    if not isinstance(nodes, list):
        raise AnsibleFilterError("slinky_scale_in: the input must be slurm_node_info's nodes, not %r" % (nodes,))
    try:
        return scale_in(nodes, pool, count, bool(remove), pools or ())
    except FieldError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"slinky_scale_in": slinky_scale_in}
