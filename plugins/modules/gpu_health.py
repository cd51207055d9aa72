#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_health
short_description: Judge the health of a GPU node from NVML events, NVML counters and the kernel log
version_added: 0.1.0
description:
  - Gathers evidence of GPU faults and returns one verdict for the node, V(healthy), V(degraded) or
    V(fatal), with the recommended action and the faults that caused it.
  - Evidence comes from the NVML event API (XID critical errors, optionally waiting for them), the
    NVML health counters (ECC, remapped rows, retired pages, throttling, NVLink, GPU lost) and
    the driver's C(Xid) lines in the kernel log.
  - Each XID is classified with NVIDIA's XID catalog, including its context rules. XID 45 counts only
    when it comes alone; XID 48 with 63 or 64 means V(DRAIN_AND_RESET); XID 154 takes its action
    from its recovery-action text; XIDs 74 and 144-150 need decoding and keep their raw text. A
    catalog XID whose action is V(CONTACT_SUPPORT) fences the node (fatal). An unknown XID is
    reported (V(CONTACT_SUPPORT), non-fatal until repeated), never dropped.
  - Read-only. It never acts on the node; remediation playbooks act on its verdict.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.nvml
options:
  kernel_log:
    description:
      - Kernel log to scan for the driver's C(Xid), C(SXid) and "fallen off the bus" messages.
      - A list of lines, or the path of a file (a C(dmesg) or C(journalctl -k) export).
      - Journald and dmesg prefixes (timestamps, C(kernel:)) are accepted.
    type: raw
  since:
    description:
      - Ignore kernel-log events stamped before this time, given as epoch seconds or ISO 8601.
      - Seconds-since-boot stamps (C(dmesg)) are dated with this host's boot time, so the log must be
        this host's. Events without any stamp are kept.
    type: str
  wait_for_xid:
    description:
      - Seconds to wait for an XID event from the NVML event API. V(0) does not wait.
      - Returns as soon as an event arrives, with any others already queued.
    type: float
    default: 0
  driver_version:
    description:
      - Version of the NVIDIA driver that wrote the kernel log, for example V(575.51.03).
      - Picks the column of NVIDIA's XID 144-150 decode table (drivers before R575 and from R575
        encode IntrInfo differently).
      - Defaults to the version NVML reports when O(nvml=true). Without either, a decode the two
        columns disagree on is reported as ambiguous (RV(faults[].decode) V(ambiguous)) with
        action V(DECODE).
    type: str
  nvml:
    description: Read NVML. V(false) judges the kernel log alone (for hosts without the driver).
    type: bool
    default: true
  thresholds:
    description:
      - Verdict thresholds, overriding the defaults of the verdict engine.
      - Unknown keys and bad values fail with the field named.
      - See the P(gpufleet.resilience.gpu_health#module) return value RV(thresholds) for the keys and defaults.
    type: dict
    default: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Wait up to 30 s for an XID and judge the node
  gpufleet.resilience.gpu_health:
    wait_for_xid: 30
  register: health

- name: Fence a node whose GPU fell off the bus
  ansible.builtin.debug:
    msg: "{{ health.reason }}"
  when: health.verdict == 'fatal'

- name: Judge an exported kernel log without NVML
  gpufleet.resilience.gpu_health:
    kernel_log: /var/log/kern.log
    since: "2026-11-29T03:00:00Z"
    nvml: false

- name: Be stricter about repeated non-fatal XIDs
  gpufleet.resilience.gpu_health:
    kernel_log: "{{ lookup('ansible.builtin.pipe', 'dmesg') | split('\n') }}"
    thresholds:
      repeat_escalation_count: 2
"""

RETURN = r"""
verdict:
  description: V(healthy), V(degraded) or V(fatal).
  returned: always
  type: str
  sample: fatal
action:
  description:
    - The recommended immediate action, the most severe of the faults'.
    - One of V(NONE), V(IGNORE), V(RESTART_APP), V(RESTART_FM) (XID 45 alone - restart the fabric
      manager), V(RESET_GPU), V(DRAIN_AND_RESET), V(RESTART_BM), V(RESTART_VM), V(CONTACT_SUPPORT),
      V(DECODE).
  returned: always
  type: str
  sample: RESTART_BM
reason:
  description: A human sentence naming the GPUs and faults behind the verdict.
  returned: always
  type: str
  sample: "GPU 3 (GPU-…, 0000:3b:00.0): XID 79 GPU has fallen off the bus -> RESTART_BM"
faults:
  description: The faults found, worst first.
  returned: always
  type: list
  elements: dict
  contains:
    xid:
      description: XID number, or V(null) for a fault read from NVML counters.
      type: int
    gpu_index:
      description: NVML index of the GPU, when known.
      type: int
    gpu_uuid:
      description: GPU UUID, when NVML or the kernel log's C(GPU at PCI:…) line gives it.
      type: str
    pci_bus_id:
      description: PCI bus id, normalized to C(0000:3b:00.0).
      type: str
    name:
      description: Catalog mnemonic or condition name.
      type: str
    severity:
      description: Catalog severity.
      type: str
    action:
      description: Immediate action for this fault.
      type: str
    message:
      description: The raw text (kernel log) or a description (NVML).
      type: str
    source:
      description: V(nvml) or V(kernel_log).
      type: str
    decode:
      description:
        - XIDs 144-150 only, else V(null). The decode column that placed the message, V(V1)
          (driver before R575), V(V2) (from R575), V(V1/V2), or V(ambiguous) when no driver
          version was known and the columns disagree.
      type: str
    decode_candidates:
      description: With V(ambiguous), both candidate rows and their outcomes.
      type: list
      elements: str
    location:
      description: XID 13 only, the C(GPC g, TPC t) its repeats were grouped by.
      type: str
  sample:
    - xid: 79
      gpu_index: 3
      gpu_uuid: GPU-3f1c2a9e-0b7d-4c61-9a55-2f0e8f6b1d01
      pci_bus_id: "0000:3b:00.0"
      name: GPU_HAS_FALLEN_OFF_THE_BUS
      severity: fatal
      action: RESTART_BM
      message: XID 79 reported by the NVML event API
      source: nvml
gpus:
  description: The NVML snapshot of every GPU (empty with O(nvml=false)).
  returned: always
  type: list
  elements: dict
events:
  description: Number of raw XID events considered (kernel log and NVML).
  returned: always
  type: int
  sample: 2
thresholds:
  description: The thresholds in effect.
  returned: always
  type: dict
driver_version:
  description: The driver version used for the XID 144-150 decode, or V(null) when unknown.
  returned: always
  type: str
  sample: 575.51.03
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.args import with_nvml_args
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import HealthError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.sense import judge_node


def argspec():
    return with_nvml_args(dict(
        kernel_log=dict(type="raw"),
        since=dict(type="str"),
        wait_for_xid=dict(type="float", default=0),
        nvml=dict(type="bool", default=True),
        driver_version=dict(type="str"),
        thresholds=dict(type="dict", default={}),
    ))


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    params = module.params
    try:
        result = judge_node(
            kernel_log=params["kernel_log"], since=params["since"], wait_for_xid=params["wait_for_xid"],
            use_nvml=params["nvml"], thresholds=params["thresholds"], library_path=params["library_path"],
            driver_version=params["driver_version"],
        )
    except HealthError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
