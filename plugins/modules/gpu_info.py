#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Inventory and health snapshot of every NVIDIA GPU on a host, through NVML
version_added: 0.1.0
description:
  - Reads every GPU through NVML (C(pynvml) from the C(nvidia-ml-py) package) and returns facts.
  - The inventory has index, UUID, name, PCI bus id, serial and driver version.
  - The snapshot has temperature, power, ECC volatile and aggregate single/double-bit counts,
    retired pages pending, remapped rows, clock throttle reasons and NVLink state and error counters
    where the GPU supports them. A field the GPU does not support is V(null), not an error.
  - A GPU that has fallen off the bus (C(NVML_ERROR_GPU_IS_LOST)) is reported with C(lost=true)
    in RV(ansible_facts.gpufleet_gpus).
  - Read-only.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.nvml
options:
  snapshot:
    description: Also read the health counters, not just the inventory.
    type: bool
    default: true
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
"""

EXAMPLES = r"""
- name: Read the GPUs
  gpufleet.resilience.gpu_info:

- name: Read the lab's simulated GPUs of node gpu-a-001
  gpufleet.resilience.gpu_info:
  environment:
    LD_LIBRARY_PATH: "{{ gpufleet_cache_dir }}/fake-nvml"
    GPUFLEET_FAKE_NVML_DIR: /var/tmp/gpufleet-lab/gpus/gpu-a-001

- name: Show the hot ones
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpufleet_gpus | selectattr('temperature_c', 'gt', 85) | map(attribute='uuid') }}"
"""

RETURN = r"""
ansible_facts:
  description: GPU facts.
  returned: always
  type: complex
  contains:
    gpufleet_driver_version:
      description: NVIDIA driver version.
      type: str
      returned: always
      sample: "550.54.15"
    gpufleet_gpu_count:
      description: Number of GPUs NVML reports.
      type: int
      returned: always
      sample: 8
    gpufleet_gpus:
      description: One entry per GPU, inventory and (with O(snapshot)) health counters merged.
      type: list
      elements: dict
      returned: always
      sample:
        - index: 0
          uuid: GPU-3f1c2a9e-0b7d-4c61-9a55-2f0e8f6b1d01
          name: NVIDIA H100 80GB HBM3
          pci_bus_id: "0000:3b:00.0"
          serial: "1650123456789"
          driver_version: "550.54.15"
          lost: false
          temperature_c: 41
          power_w: 71.3
          ecc_sbe_volatile: 0
          ecc_dbe_volatile: 0
          ecc_sbe_aggregate: 0
          ecc_dbe_aggregate: 0
          retired_pages_pending: null
          remapped_rows_correctable: 0
          remapped_rows_uncorrectable: 0
          remapped_rows_pending: false
          remapped_rows_failed: false
          throttle_reasons: 1
          throttle_reason_names: [gpu_idle]
          nvlinks: []
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.args import with_nvml_args
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import HealthError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.sense import gpu_facts


def argspec():
    return with_nvml_args(dict(snapshot=dict(type="bool", default=True)))


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    try:
        facts = gpu_facts(module.params["library_path"], module.params["snapshot"])
    except HealthError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, ansible_facts=facts)


if __name__ == "__main__":
    main()
