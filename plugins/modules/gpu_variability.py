#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_variability
short_description: Classify GPU nodes by performance variability and publish the classes to Slurm and Kubernetes
version_added: 0.5.0
description:
  - Reads per-GPU performance figures of each node (gpu-burn's Gflop/s, C(dcgmi diag -r 3)'s gigaflops,
    given figures, or in the lab the simulated figure of the fake GPU state), ranks every node by its
    slowest GPU against the median GPU of its pool, and puts it in a class.
  - Classes, with the default O(thresholds) - V(var_low) up to 3 % slower than the pool median,
    V(var_mid) up to 8 %, V(var_high) beyond.
  - Publishes each class as a Slurm feature (so C(sbatch --constraint=var_low) works) and a Weight
    (the node's own Weight plus the class's O(weight_offsets); Slurm prefers the lowest Weight),
    and as the Kubernetes node label C(gpufleet.io/variability-class) with the score in the
    annotation C(gpufleet.io/variability-score). The node's other features, labels and annotations
    are kept.
  - What each node had before the first publish is recorded in O(state_dir)/placement.json before
    anything is written; O(state=absent) puts it back and removes the record. The baseline itself
    (figures, classes, scores) goes to O(state_dir)/baseline.json.
  - Idempotent; a rerun after C(scontrol reconfigure) (which resets Weight and features to
    C(slurm.conf)) publishes again.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.kube
  - gpufleet.resilience.slurm_api
  - gpufleet.resilience.slurm_api.rest
options:
  state:
    description:
      - V(present) measures, classifies and publishes; V(absent) restores what publishing replaced.
    type: str
    default: present
    choices: [present, absent]
  measurements:
    description:
      - One entry per node; required with O(state=present).
    type: list
    elements: dict
    suboptions:
      node:
        description: The node (Slurm and Kubernetes name).
        type: str
        required: true
      pool:
        description: The pool whose median is the yardstick; default the node name without its C(-NNN) suffix.
        type: str
      format:
        description:
          - V(gpu_burn) - O(measurements[].output) is gpu-burn's output.
          - V(dcgmi_diag) - O(measurements[].output) is C(dcgmi diag -r 3)'s output (text or C(-j) JSON).
          - V(figures) - O(measurements[].figures) are the figures.
          - V(lab) - the simulated C(perf_permille) of the lab's fake GPUs under O(lab_gpu_dir) (written
            where absent).
        type: str
        default: lab
        choices: [gpu_burn, dcgmi_diag, figures, lab]
      output:
        description: The tool's output, for V(gpu_burn) and V(dcgmi_diag).
        type: str
      figures:
        description: Per-GPU figures (list in GPU order, or a GPU index to figure mapping), for V(figures).
        type: raw
  lab_gpu_dir:
    description: The lab's fake GPU state directory (C(<lab>/gpus)), for O(measurements[].format=lab).
    type: path
  thresholds:
    description:
      - Upper bounds, in percent slower than the pool median, of V(var_low) and V(var_mid).
    type: dict
    default: {var_low: 3.0, var_mid: 8.0}
  weight_offsets:
    description:
      - Added to the node's own Slurm Weight per class; must not decrease from V(var_low) to V(var_high).
    type: dict
    default: {var_low: 0, var_mid: 100, var_high: 1000}
  state_dir:
    description: Where C(baseline.json) and C(placement.json) live (on the host the module runs on).
    type: path
    required: true
  dry_run:
    description: Measure, classify and record the baseline; publish nothing.
    type: bool
    default: false
  publish_slurm:
    description: Publish to Slurm.
    type: bool
    default: true
  publish_kube:
    description: Publish to Kubernetes.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Reads and classifies, reports what it would publish; writes no file, no Slurm node, no label.
  diff_mode:
    support: none
notes:
  - A node whose figures cannot be had (a GPU that gpu-burn calls FAULTY, a lost lab GPU, no figures in the
    output) is listed in RV(skipped) and keeps its placement; the others are classified without it.
  - A node unknown to Kubernetes (HTTP 404) is published to Slurm only.
seealso:
  - module: gpufleet.resilience.slurm_node_info
  - name: scontrol manual
    description: C(scontrol update)'s Weight, AvailableFeatures and ActiveFeatures.
    link: https://slurm.schedmd.com/scontrol.html
"""

EXAMPLES = r"""
- name: Classify the lab's pool and publish the classes
  gpufleet.resilience.gpu_variability:
    measurements:
      - {node: gpu-a-001}
      - {node: gpu-a-002}
    lab_gpu_dir: /var/tmp/gpufleet-lab/gpus
    state_dir: /var/tmp/gpufleet-lab/variability
  register: classes

- name: From gpu-burn output gathered on each node
  gpufleet.resilience.gpu_variability:
    measurements: "{{ groups['gpu'] | map('extract', hostvars) | map(attribute='burn') | list }}"
    state_dir: /var/lib/gpufleet/variability

- name: Take the classes back
  gpufleet.resilience.gpu_variability:
    state: absent
    state_dir: /var/lib/gpufleet/variability
"""

RETURN = r"""
nodes:
  description: Per node, its class, score and what was published (with O(state=absent), what was restored).
  returned: always
  type: list
  elements: dict
  sample:
    - node: gpu-a-004
      pool: gpu-a
      class: var_low
      score: 0.81
      slowest_gpu: 4
      slowest: 981.0
      pool_median: 989.0
      slurm: {changed: true, before: {weight: 1, features: [], active_features: []},
              after: {weight: 1, features: [var_low], active_features: [var_low]}}
      kube: {changed: true, before: {label: null, score: null}, after: {label: var_low, score: "0.81"}}
skipped:
  description: Nodes that could not be measured, with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu-a-003, reason: "GPU(s) 2 fallen off the bus: no figure"}]
thresholds:
  description: The thresholds used, in percent.
  returned: when O(state=present)
  type: dict
  sample: {var_low: 3.0, var_mid: 8.0}
weight_offsets:
  description: The Weight offsets used.
  returned: when O(state=present)
  type: dict
  sample: {var_low: 0, var_mid: 100, var_high: 1000}
dry_run:
  description: Whether the classes were only recorded.
  returned: when O(state=present)
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    Connection,
    connection_argspec,
    core_v1,
    kube_timeouts,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import NodeWriter
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import SLURM_API_ARGS, slurm_client
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import module_run_function
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability import api
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability.publish import Publisher


def argspec():
    return dict(
        state=dict(type="str", default="present", choices=["present", "absent"]),
        measurements=dict(type="list", elements="dict", options=dict(
            node=dict(type="str", required=True),
            pool=dict(type="str"),
            format=dict(type="str", default="lab", choices=list(api.FORMATS)),
            output=dict(type="str"),
            figures=dict(type="raw"),
        )),
        lab_gpu_dir=dict(type="path"),
        thresholds=dict(type="dict", default={"var_low": 3.0, "var_mid": 8.0}),
        weight_offsets=dict(type="dict", default={"var_low": 0, "var_mid": 100, "var_high": 1000}),
        state_dir=dict(type="path", required=True),
        dry_run=dict(type="bool", default=False),
        publish_slurm=dict(type="bool", default=True),
        publish_kube=dict(type="bool", default=True),
        **SLURM_API_ARGS,
        **connection_argspec(),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True,
                           required_if=[("state", "present", ["measurements"])])
    p = module.params
    try:
        timeouts = kube_timeouts(p)
        slurm = None
        if p["publish_slurm"]:
            slurm = slurm_client(p, module_run_function(module), check_mode=module.check_mode)
        kube = NodeWriter(core_v1(timeout=timeouts, connection=Connection.of(p))) if p["publish_kube"] else None
        publisher = Publisher(p["state_dir"], slurm, kube, check_mode=module.check_mode)
        if p["state"] == "absent":
            result = api.absent(publisher)
        else:
            # Suboptions fill absent keys with None; the checks want only what was given.
            measurements = [{key: value for key, value in entry.items() if value is not None}
                            for entry in p["measurements"]]
            result = api.present(publisher, measurements, p["lab_gpu_dir"], p["thresholds"], p["weight_offsets"],
                                 p["dry_run"])
    except GpufleetError as exc:
        details = exc.details() if hasattr(exc, "details") else dict(field=getattr(exc, "field", None))
        module.fail_json(msg=str(exc), **details)
    for node in result["skipped"]:
        module.warn("%s not measured: %s" % (node["node"], node["reason"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
