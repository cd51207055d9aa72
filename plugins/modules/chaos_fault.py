#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: chaos_fault
short_description: Inject a chaos drill's faults, or roll them back
version_added: 0.4.0
description:
  - O(state=present) injects the drill's fault on each target, after writing it to the chaos ledger with its expiry,
    and then records its undo there - so a controller killed mid-injection still leaves a record that
    C(playbooks/chaos-stop.yml) and the expiry watchdog act on.
  - O(state=absent) rolls back every fault of the drill (O(drill) or O(drill_id)) that the ledger still holds;
    a fault whose rollback fails stays in the ledger, marked, and is reported. Idempotent.
  - GPU faults (XID, ECC, retired pages, row remapping, thermal, power, NVLink, fallen off the bus) go through the
    V(nvml_sim) (lab), V(kmsg) and V(dcgm) backends; GPU burn and checkpoint chaos have their own
    (docs/chaos.md). Every backend is refused before any change when the site lacks what it needs.
  - "Since 0.6.0: on a real site (no O(lab_dir)) a fault that acts on the node's own host (the kmsg and dcgm backends,
    NCCL files, traffic control, a mount, a process) is injected only where the module runs on the target node: the
    target's name must be this host's name (short or FQDN) or O(node_name); otherwise it fails naming C(target),
    with nothing injected. The ledger records the host each fault was injected on, and a rollback that runs on
    another host refuses that fault (it stays in the ledger) naming the host to run it on. Delegate the module to
    the node (the chaos_drill role does: C(chaos_drill_fault_host))."
  - "Since 0.5.0: NCCL variables (V(slurm_taskprolog), V(nccl_conf); restored byte for byte), traffic control on a
    fabric interface or the lab's own veth path (tbf rate, nftables loss, netem delay where the kernel has it; a knob
    the kernel cannot apply is listed as not injected) with bpftrace counts, and NUMA and CPU loads (stress-ng with
    numactl, as a Slurm job or a process)."
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.chaos
  - gpufleet.resilience.slurm_api.rest
  - gpufleet.resilience.kube
attributes:
  check_mode:
    support: full
    details: Returns the plan; injects and rolls back nothing.
  diff_mode:
    support: none
options:
  state:
    description: V(present) injects; V(absent) rolls back.
    type: str
    choices: [present, absent]
    default: present
  drill:
    description: The drill that M(gpufleet.resilience.chaos_gate) returned (required for V(present)).
    type: dict
  drill_id:
    description: With O(state=absent), the drill whose faults to roll back, instead of O(drill).
    type: str
  fault_id:
    description:
      - With O(state=absent), only this fault of the ledger (the kill switch rolls each fault back on its own host).
    type: str
    version_added: 0.6.0
  nodes:
    description:
      - With O(state=present), inject only on these targets of the drill (the ones whose host this is).
      - Default every target.
    type: list
    elements: str
    version_added: 0.6.0
  node_name:
    description:
      - The target node this host is, when its host name is not the node's name (for example a Kubernetes node
        named otherwise than the host). Without it the target must be this host's short or fully qualified name.
    type: str
    version_added: 0.6.0
  duration:
    description: Seconds until the fault expires; defaults to the drill's duration.
    type: float
  how:
    description: Who rolls back, as the ledger's history records it.
    type: str
    default: drill
  chaos_namespace:
    description: Namespace of the pods a Kubernetes burn creates.
    type: str
    default: gpufleet-chaos
"""

EXAMPLES = r"""
- name: Inject
  gpufleet.resilience.chaos_fault:
    drill: "{{ gate.drill }}"
    state: present

- name: Inject on the node itself (a fault that acts on its host)
  gpufleet.resilience.chaos_fault:
    drill: "{{ gate.drill }}"
    nodes: [gpu-a-003]
    state: present
  delegate_to: gpu-a-003

- name: Roll back, always
  gpufleet.resilience.chaos_fault:
    drill_id: "{{ gate.drill.id }}"
    state: absent
"""

RETURN = r"""
faults:
  description:
    - Each fault (id, node, host, injected_at, expires_at, undo), or each rollback (id, node, host,
      rollback done|failed|refused, actions; error when not done). V(refused) - the fault acts on the host recorded
      in its C(host) and this is another one; nothing was reverted, it stays in the ledger.
  type: list
  elements: dict
  returned: always
injected_at:
  description: When the first fault was injected (epoch seconds).
  type: float
  returned: when state is present
phase:
  description: The inject or rollback phase as the drill report records it.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.api import inject, rollback
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.args import common_argspec, run_module


def main():
    module = AnsibleModule(
        argument_spec=common_argspec(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            drill=dict(type="dict"),
            drill_id=dict(type="str"),
            duration=dict(type="float"),
            how=dict(type="str", default="drill"),
            fault_id=dict(type="str"),
            nodes=dict(type="list", elements="str"),
            node_name=dict(type="str"),
            chaos_namespace=dict(type="str", default="gpufleet-chaos"),
        ),
        required_if=[("state", "present", ["drill"])],
        required_one_of=[("drill", "drill_id", "fault_id")],
        supports_check_mode=True,
    )
    if module.params["state"] == "present":
        run_module(module, lambda: inject(module.params, module.check_mode))
    else:
        run_module(module, lambda: rollback(module.params, module.check_mode))


if __name__ == "__main__":
    main()
