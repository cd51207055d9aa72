# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: fleet_table
short_description: Format fleet_status rows as fixed-width lines for a terminal
version_added: 0.1.0
description:
  - Turns the rows of P(gpufleet.resilience.fleet_status#filter) into a header line and one line per node
    (node, Kubernetes state, cordoned, Slurm state, GPUs, health, reason).
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: Rows from P(gpufleet.resilience.fleet_status#filter).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Print the lab, one line per node
  ansible.builtin.debug:
    msg: "{{ rows | gpufleet.resilience.fleet_table }}"
"""

RETURN = r"""
_value:
  description: Lines of text.
  type: list
  elements: str
"""

from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.status import fleet_table


class FilterModule:
    def filters(self):
        return {"fleet_table": fleet_table}
