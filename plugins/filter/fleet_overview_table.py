# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: fleet_overview_table
short_description: Format the fleet overview as lines for a terminal
version_added: 0.6.0
description:
  - Turns P(gpufleet.resilience.fleet_overview#filter) into one line per node (pool, Kubernetes, Slurm,
    agent verdict, quarantined, held, remediation) and lines for the breaker, the remediations under way,
    the held nodes, the drills and the faults.
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: The result of P(gpufleet.resilience.fleet_overview#filter).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Print the fleet
  ansible.builtin.debug:
    msg: "{{ view | gpufleet.resilience.fleet_overview_table }}"
"""

RETURN = r"""
_value:
  description: Lines of text.
  type: list
  elements: str
"""

from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.overview import overview_table


class FilterModule:
    def filters(self):
        return {"fleet_overview_table": overview_table}
