# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: remediation_svg
short_description: Draw one remediation as an SVG timeline, from its audit record
version_added: 0.6.0
description:
  - Takes one line of the remediation audit log (C(remediation_audit_log), as written by
    M(gpufleet.resilience.remediation_record)) and returns a self-contained SVG picture in the style of the drill
    reports' timeline.
  - Time runs from the remediation's start; two lanes show the node's state in Slurm and in Kubernetes (in
    service, DRAIN, DOWN, cordoned and tainted, drained, replaced, back in service) as the phases left it; one bar
    per phase, coloured by its outcome (done, skipped, failed); one line per job with its fate.
  - Used by C(playbooks/fleet_status.yml) with C(fleet_status_node) and C(fleet_status_svg).
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: The audit record (a dictionary).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Draw the last remediation of gpu-a-003
  ansible.builtin.copy:
    content: "{{ record | gpufleet.resilience.remediation_svg }}"
    dest: /tmp/gpu-a-003.svg
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The SVG document.
  type: str
"""

from ansible_collections.gpufleet.resilience.plugins.module_utils.report.remediation_svg import render


class FilterModule:
    def filters(self):
        return {"remediation_svg": render}
