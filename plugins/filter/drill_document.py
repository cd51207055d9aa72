# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: drill_document
short_description: Put a chaos drill's phases together into its drill document (schema gpufleet.drill/v1)
version_added: 0.4.0
description:
  - Takes the drill from M(gpufleet.resilience.chaos_gate) and adds the phases run, the observation of
    M(gpufleet.resilience.drill_observe) and the faults' rollback, scoring the result
    (V(passed), V(failed), V(aborted), V(dry_run)). M(gpufleet.resilience.drill_report) renders the document.
  - Pure; no I/O.
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: The drill (RV(gpufleet.resilience.chaos_gate#module:drill)).
    type: dict
    required: true
  phases:
    description: The C(phase) results of the modules that ran, in order.
    type: list
    elements: dict
    default: []
  observed:
    description: The result of M(gpufleet.resilience.drill_observe), if it ran.
    type: dict
    default: {}
  faults:
    description:
      - The C(faults) of M(gpufleet.resilience.chaos_fault) with
        O(gpufleet.resilience.chaos_fault#module:state=absent).
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: The drill document
  ansible.builtin.set_fact:
    drill_doc: >-
      {{ gate.drill | gpufleet.resilience.drill_document(phases=phases, observed=seen, faults=rolled.faults) }}
"""

RETURN = r"""
_value:
  description: The drill document (docs/chaos.md describes every field).
  type: dict
"""

import time

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.scoring import document
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.report.document import check


def drill_document(drill, phases=None, observed=None, faults=None):
    try:
        built = document(drill, list(phases or []), dict(observed or {}), list(faults or []), time.time())
        check(built)
        return built
    except (GpufleetError, KeyError, TypeError) as exc:
        raise AnsibleFilterError("drill_document: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"drill_document": drill_document}
