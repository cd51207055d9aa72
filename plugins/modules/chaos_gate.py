#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: chaos_gate
short_description: The safety rails of a chaos drill - opt-in, blast radius, duration, kill switch - and its plan
version_added: 0.4.0
description:
  - Resolves the drill's target (a node, a comma list or a label selector), then refuses the drill, with the field
    to change, when a target has not opted in (label C(gpufleet.io/chaos=allowed), or O(allowed_nodes) on bare
    metal), when more than C(blast_radius.max_nodes) nodes or C(blast_radius.max_percent) of a pool are targeted,
    when the duration is missing or over O(max_duration), when the kill switch is on, or when a target already has
    an active fault or drill, and with O(exclusive) when any other drill or a remediation is under way.
  - "Every input goes through the strict input layer: C(params) keys outside the experiment's schema are refused by
    name, numbers must be finite (NaN and infinity are refused), node names are RFC 1123 names, and paths and
    programs come only from O(allowed_dirs)."
  - Returns the drill (its id, the resolved parameters, what the feedback loop is expected to show) and the plan
    of every injection. In check mode (dry run) nothing is registered; the plan is all it returns.
  - Registers the drill in the chaos ledger, so a second drill on the same node is refused while this one runs.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.chaos
  - gpufleet.resilience.slurm_api.rest
  - gpufleet.resilience.kube
attributes:
  check_mode:
    support: full
    details: The dry run; plans without registering anything.
  diff_mode:
    support: none
options:
  experiment:
    description: The experiment, e.g. V(gpu_xid), V(gpu_ecc_dbe), V(gpu_burn), V(checkpoint_kill) (docs/chaos.md).
    type: str
    required: true
  target:
    description: A node name, a comma-separated list of names, or a label selector such as C(gpufleet.io/pool=gpu-a).
    type: str
    required: true
  params:
    description: "The experiment's knobs (docs/chaos.md), e.g. C({xid: 79, gpu: 3})."
    type: dict
    default: {}
  backend:
    description: Backends joined with C(+) (V(nvml_sim+kmsg), V(dcgm), ...); V(default) picks the experiment's own.
    type: str
    default: default
  duration:
    description: Seconds each injection may last before the watchdog rolls it back, even if nobody comes back.
    type: float
    required: true
  max_duration:
    description: The cap on O(duration).
    type: float
    default: 3600
  blast_radius:
    description: C(max_nodes) (default 1) and C(max_percent) of any pool (default 25; never below one node).
    type: dict
    default: {}
  allowed_nodes:
    description: Nodes opted in by the inventory (bare metal, no Kubernetes labels).
    type: list
    elements: str
    default: []
  allowed_dirs:
    description:
      - Directories under which a knob that names a file or a program on the node (C(params.path), C(params.output),
        C(params.nccl_tests), C(params.kubelet_config)) may point; with O(lab_dir), the lab directory too.
      - Empty refuses every such knob that the drill sets itself (the experiment's own defaults still apply).
    type: list
    elements: path
    default: []
    version_added: 0.6.0
  exclusive:
    description:
      - Refuse the drill when any other drill is active anywhere in the ledger, or when a remediation is under
        way (its progress ConfigMap has not finished). Scheduled drills set it, so a timer never starts a drill
        on a fleet that is already being tested or repaired.
    type: bool
    default: false
    version_added: 0.5.0
  deadlines:
    description: Seconds after the injection by which each loop step must be seen (detected, alerted, scheduler,
      recovered).
    type: dict
    default: {}
  protected_job:
    description: The Slurm job the drill protects; V(checkpoint_kill) kills this one unless C(params.job_id) names
      another.
    type: str
  protected_output:
    description: The protected job's output file (train_sim's event lines).
    type: path
  abort_conditions:
    description:
      - The drill's brakes, each C({name, query, above, for}), checked here (a bad one refuses the drill, naming
        its field) and kept in RV(drill) for M(gpufleet.resilience.drill_observe), which aborts the watch when
        one is breached (see its option of the same name).
      - Omitted - the default brake C(other_nodes_unhealthy); V([]) - none.
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: Gate an XID 79 drill on one opted-in node
  gpufleet.resilience.chaos_gate:
    experiment: gpu_xid
    target: gpu-a-003
    params: {xid: 79}
    duration: 600
  register: gate
"""

RETURN = r"""
drill:
  description: The drill - id, experiment, family, params, targets, expectations, deadlines, expiry.
  type: dict
  returned: success
plan:
  description: Per target, the actions the injection will take, what is simulated and what is missing.
  type: list
  elements: dict
  returned: success
phase:
  description: The gate phase as the drill report records it.
  type: dict
  returned: success
refusals:
  description: Each refusal (field, why) when the drill is refused.
  type: list
  elements: dict
  returned: failure
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.api import drill_gate
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.args import common_argspec, run_module


def main():
    module = AnsibleModule(
        argument_spec=common_argspec(
            experiment=dict(type="str", required=True),
            target=dict(type="str", required=True),
            params=dict(type="dict", default={}),
            backend=dict(type="str", default="default"),
            duration=dict(type="float", required=True),
            max_duration=dict(type="float", default=3600),
            blast_radius=dict(type="dict", default={}),
            allowed_nodes=dict(type="list", elements="str", default=[]),
            allowed_dirs=dict(type="list", elements="path", default=[]),
            exclusive=dict(type="bool", default=False),
            deadlines=dict(type="dict", default={}),
            protected_job=dict(type="str"),
            protected_output=dict(type="path"),
            abort_conditions=dict(type="list", elements="dict"),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: drill_gate(module.params, module.check_mode))


if __name__ == "__main__":
    main()
