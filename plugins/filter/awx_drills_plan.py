# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: awx_drills_plan
short_description: Check scheduled drills for AWX and plan their job templates, surveys and schedules
version_added: 0.5.0
description:
  - Checks every drill and notification of the role gpufleet.resilience.awx_drills before any API call
    (an unknown experiment, a bad rrule, an unknown notification) and fails naming the bad field,
    e.g. C(awx_drills_drills[1].rrule).
  - Returns, per drill, the job template's survey (target, experiment, dry run), the schedule's survey
    answers and the prefixed names of the AWX objects.
  - Pure; no I/O.
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: The drills (C(awx_drills_drills)), each C({name, experiment, target, dry_run, rrule, notify}).
    type: list
    elements: dict
    required: true
  notifications:
    description: The webhook notifications (C(awx_drills_notifications)), each C({name, url}).
    type: list
    elements: dict
    default: []
  prefix:
    description: Put before every AWX object's name.
    type: str
    default: "gpufleet drill: "
"""

EXAMPLES = r"""
- name: Plan the drills
  ansible.builtin.set_fact:
    drills_plan: "{{ awx_drills_drills | gpufleet.resilience.awx_drills_plan(notifications=awx_drills_notifications) }}"
"""

RETURN = r"""
_value:
  description: C(drills) and C(notifications), checked and ready for the awx.awx modules (docs/scheduling.md).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.awx_drills import plan
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError


def awx_drills_plan(drills, notifications=None, prefix="gpufleet drill: "):
    try:
        return plan(drills, [] if notifications is None else notifications, prefix=prefix)
    except GpufleetError as exc:
        raise AnsibleFilterError("awx_drills_plan: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"awx_drills_plan": awx_drills_plan}
