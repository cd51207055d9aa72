#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_node_info
short_description: Read Slurm nodes with their state, flags, reason, GPUs and jobs
version_added: 0.2.0
description:
  - Asks slurmctld for its nodes and returns each with its base state and state flags (V(DRAIN),
    V(NOT_RESPONDING), ...), the reason with who set it and when, GRES and GPU count, features,
    weight, CPUs, memory, partitions and the jobs allocated on it.
  - Uses C(--json) where the Slurm version has it (C(scontrol) from 23.02, C(sinfo) and C(squeue)
    from 21.08) and C(scontrol --oneliner) text otherwise, with C(LC_ALL=C).
  - The reason is the text an operator or the remediation wrote, returned whole.
  - With O(slurm_api=rest) it reads the same through slurmrestd (data parser v0.0.42 to v0.0.45), with no
    Slurm command on the host.
  - Works with Slurm 22.05 (Debian bookworm), 24.11 (Debian trixie) and 26.05 (Debian forky, Slinky 1.2's images).
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.attributes.read_only
  - gpufleet.resilience.slurm_api
  - gpufleet.resilience.slurm_api.rest
options:
  nodes:
    description:
      - Names of the nodes to return, in Slurm's order. Each must exist, or the module fails.
      - Omit to return every node.
    type: list
    elements: str
  future:
    description:
      - Also return nodes in state V(FUTURE) (spares), which Slurm hides otherwise.
      - Slurm 22.05's C(sinfo) has no C(--future), so this reads C(scontrol --future show node) there.
    type: bool
    default: false
notes:
  - Jobs come from C(squeue --all). A pending job holds no node, so it is in no node's RV(nodes[].jobs).
seealso:
  - name: scontrol manual
    description: Slurm's node states and flags.
    link: https://slurm.schedmd.com/scontrol.html
"""

EXAMPLES = r"""
- name: Read every node of the lab
  gpufleet.resilience.slurm_node_info:
    slurm_conf: /var/tmp/gpufleet-lab/slurm/slurm.conf
  register: slurm

- name: Read two nodes, spares included
  gpufleet.resilience.slurm_node_info:
    nodes: [gpu-a-001, gpu-a-005]
    future: true
  register: slurm

- name: Wait until every node has registered (responding, not UNKNOWN)
  gpufleet.resilience.slurm_node_info:
    nodes: [gpu-a-001, gpu-a-002]
  register: slurm
  retries: 60
  delay: 1
  until: >-
    slurm is succeeded
    and slurm.nodes | selectattr('state', 'equalto', 'UNKNOWN') | list | length == 0
    and slurm.nodes | selectattr('flags', 'contains', 'NOT_RESPONDING') | list | length == 0

- name: Read them through a Slinky release's slurmrestd, without scontrol on the host
  gpufleet.resilience.slurm_node_info:
    slurm_api: rest
    rest_url: https://slurm-restapi.slurm.svc:6820
    rest_user: gpufleet
    rest_jwt_key_file: /run/secrets/slurm-jwt/jwt_hs256.key
  register: slurm

- name: Names of drained nodes
  ansible.builtin.debug:
    msg: "{{ slurm.nodes | selectattr('flags', 'contains', 'DRAIN') | map(attribute='name') }}"
"""

RETURN = r"""
slurm_version:
  description: Version of Slurm (C(scontrol --version), or what slurmrestd says it runs).
  returned: success
  type: str
  sample: "22.05.8"
nodes:
  description: One entry per node, in Slurm's order.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      returned: always
      type: str
      sample: gpu-a-002
    state:
      description: Base state, upper case (V(IDLE), V(MIXED), V(ALLOCATED), V(DOWN), V(FUTURE), V(UNKNOWN) or V(ERROR)).
      returned: always
      type: str
      sample: IDLE
    flags:
      description: State flags, upper case, as Slurm names them.
      returned: always
      type: list
      elements: str
      sample: [DRAIN]
    long_state:
      description: The state as C(sinfo --format=%T) prints it, lower case with its suffix.
      returned: always
      type: str
      sample: drained
    reason:
      description: Why the node is down or drained, whole; V(null) when there is none.
      returned: always
      type: str
      sample: "gpufleet: Xid79 GPU-fc522a91 (remediation r-1)"
    reason_user:
      description: Who set the reason; V(null) without a reason.
      returned: always
      type: str
      sample: root
    reason_time:
      description: When the reason was set, C(YYYY-MM-DDTHH:MM:SS) in the host's local time; V(null) without a reason.
      returned: always
      type: str
      sample: "2026-11-30T10:00:22"
    gres:
      description: Generic resources (empty string when none).
      returned: always
      type: str
      sample: "gpu:8"
    gpus:
      description: GPUs in RV(nodes[].gres), summed over GPU types; V(null) without a GPU entry.
      returned: always
      type: int
      sample: 8
    features:
      description: Available features.
      returned: always
      type: list
      elements: str
      sample: [pool-gpu-a]
    active_features:
      description: Active features.
      returned: always
      type: list
      elements: str
      sample: [pool-gpu-a]
    weight:
      description: Scheduling weight.
      returned: always
      type: int
      sample: 1
    cpus:
      description: CPUs of the node.
      returned: always
      type: int
      sample: 16
    memory_mb:
      description: Configured memory (C(RealMemory)) in MiB.
      returned: always
      type: int
      sample: 65536
    partitions:
      description: Partitions the node belongs to.
      returned: always
      type: list
      elements: str
      sample: [gpu]
    jobs:
      description: Jobs not yet finished that are allocated on the node.
      returned: always
      type: list
      elements: dict
      sample:
        - job_id: "4"
          name: train
          state: RUNNING
          flags: []
          reason: null
          nodelist: gpu-a-001
          nodes: [gpu-a-001]
          partition: gpu
          user: root
          requeue: true
          restarts: 0
          batch_host: gpu-a-001
          exit_code: null
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import (
    SLURM_API_ARGS,
    node_info,
    slurm_client,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import SlurmError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import module_run_function


def argspec():
    return dict(
        nodes=dict(type="list", elements="str"),
        future=dict(type="bool", default=False),
        **SLURM_API_ARGS,
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    try:
        client = slurm_client(module.params, module_run_function(module))
        result = node_info(client, nodes=module.params["nodes"], future=module.params["future"])
    except SlurmError as exc:
        module.fail_json(msg=str(exc), **exc.details())
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
