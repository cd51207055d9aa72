# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: drill_schedules
short_description: Check scheduled drills and fill in their defaults
version_added: 0.5.0
description:
  - "The check of C(drill_schedule_drills) (role C(drill_schedule), C(playbooks/drill-schedule.yml)), before any
    timer or cron line is written."
  - "Each drill needs C(name) (lowercase letters, digits and C(-), at most 40), C(experiment) (a known experiment),
    C(target) (a node, a comma list or a label selector) and C(when): a systemd C(OnCalendar=) expression for the
    systemd backend, five crontab fields or a macro such as C(@daily) for cron. Optional: C(params), C(duration)
    (seconds, default 600), C(dry_run) (default false), C(enabled) (default true), C(extra_vars)."
  - "Every value that reaches a cron line or a unit file goes through the strict input layer: node names and label
    selectors in C(target), no control characters anywhere (a newline would add a line), finite numbers."
  - "Fails with the bad field named, for example C(drill_schedule_drills[1].when: five crontab fields ...)."
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: The drills, as in C(drill_schedule_drills).
    type: list
    elements: dict
    required: true
  backend:
    description: The scheduler the drills are for.
    type: str
    choices: [systemd, cron]
    default: systemd
  user:
    description: The account the drills run as (C(drill_schedule_user)); a POSIX user name.
    type: str
  python:
    description: The Python that runs the drills (C(drill_schedule_python)); an absolute, normalized path.
    type: str
  directory:
    description: The drills' directory (C(drill_schedule_dir)); an absolute, normalized path.
    type: str
"""

EXAMPLES = r"""
- name: Check the schedule before anything is written
  ansible.builtin.set_fact:
    drills: "{{ drill_schedule_drills | gpufleet.resilience.drill_schedules(backend='cron') }}"
"""

RETURN = r"""
_value:
  description: The drills, with their defaults.
  type: list
  elements: dict
  sample:
    - name: weekly-xid79
      experiment: gpu_xid
      target: gpu-a-003
      when: Mon *-*-* 03:30:00
      params: {xid: 79}
      duration: 600
      dry_run: false
      enabled: true
      extra_vars: {}
"""

from typing import Any, Callable, Dict, List

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.schedule import check, check_settings
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError


def drill_schedules(drills: Any, backend: str = "systemd", user: Any = None, python: Any = None,
                    directory: Any = None) -> List[Dict[str, Any]]:
    try:
        check_settings(user, python, directory)
        return check(drills, backend)
    except FieldError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"drill_schedules": drill_schedules}
