#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_pool_members
short_description: Label and taint the nodes of GPU node pools on an existing Kubernetes cluster
version_added: 0.2.0
description:
  - For each pool, finds the nodes its C(selector) matches and gives them the label
    C(gpufleet.io/pool=<name>), the pool's C(labels) and the pool's C(taints).
  - Every selector is resolved before the first write. A pool whose selector matches no node, or a
    node matched by two pools, fails the run with nothing changed and the pool's field named.
  - Other labels and taints on the node are kept. A write sends the C(resourceVersion) it read and is
    recomputed and retried when the API server answers 409 Conflict, so a taint that another writer
    (a cordon, the health agent) adds meanwhile is never lost.
  - What a pool set is recorded in the node annotations C(gpufleet.io/managed-labels) and
    C(gpufleet.io/managed-taints), so a label or taint removed from the inventory is removed from the
    node, and nothing else is.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.kube
  - gpufleet.resilience.node_pools
options:
  pools:
    description:
      - The pools, as in C(gpufleet_node_pools); validated by the collection's pool model
        (P(gpufleet.resilience.node_pools#filter)). Each needs a C(selector).
    type: list
    elements: dict
    required: true
attributes:
  check_mode:
    support: full
    details: Reads the nodes and reports what would change; writes nothing.
  diff_mode:
    support: full
    details: Labels and taints of each changed node, before and after.
requirements:
  - kubernetes (Python client)
"""

EXAMPLES = r"""
- name: Mark the GPU pools' nodes
  gpufleet.resilience.node_pool_members:
    kubeconfig: ~/.kube/config
    pools:
      - name: h100
        count: 16
        selector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
"""

RETURN = r"""
pools:
  description: One entry per pool.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Pool name., type: str, returned: always, sample: h100}
    selector:
      description: The label selector used.
      type: str
      returned: always
      sample: "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"
    nodes:
      description: Names of the nodes the selector matched.
      type: list
      elements: str
      returned: always
      sample: [gpu-a-001]
    changed_nodes:
      description: Nodes that were (or in check mode would be) changed.
      type: list
      elements: str
      returned: always
      sample: []
    conflicts_retried:
      description: How many writes were refused with 409 Conflict and recomputed.
      type: int
      returned: always
      sample: 0
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import parse_pools
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    Connection,
    connection_argspec,
    core_v1,
    kube_timeouts,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import NodeWriter
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.pool_nodes import mark_pools


def argspec():
    return dict(
        pools=dict(type="list", elements="dict", required=True),
        variable=dict(type="str", default="gpufleet_node_pools"),
        **connection_argspec(),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    params = module.params
    try:
        timeouts = kube_timeouts(params)
        pools = parse_pools(params["pools"], params["variable"], require_selector=True)
        writer = NodeWriter(core_v1(timeout=timeouts, connection=Connection.of(params)))
        result = mark_pools(writer, pools, params["variable"], check_mode=module.check_mode)
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    for warning in result.pop("warnings"):
        module.warn(warning)
    diffs = [item for pool in result["pools"] for item in pool.pop("diff")]
    if module._diff:
        result["diff"] = [
            {"before_header": d["node"], "after_header": d["node"], "before": d["before"], "after": d["after"]}
            for d in diffs
        ]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
