#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: drill_check
short_description: The steady-state check before a chaos drill (with its baseline), and the verify after it
version_added: 0.4.0
description:
  - V(steady) checks, before any injection, that the targets' pools have at most O(max_not_ready_percent) of their
    nodes NotReady, that the remediation circuit breaker is closed, that each target is healthy (C(GpuHealthy) not
    False, not cordoned, not fenced in Slurm), that the protected job runs, and that no other drill is active on a
    target. When it passes it records the baseline the drill compares against (the detection metric, the alerts
    already firing). When it fails the drill aborts before it injects.
  - V(verify) runs the same checks after the rollback, for up to O(timeout) seconds, and reports whether the
    system is back to steady state (a target replaced by the remediation counts as back).
  - Read-only.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.attributes.read_only
  - gpufleet.resilience.chaos
  - gpufleet.resilience.slurm_api.rest
  - gpufleet.resilience.kube
options:
  drill:
    description: The drill that M(gpufleet.resilience.chaos_gate) returned.
    type: dict
    required: true
  mode:
    description: V(steady) before the injection, V(verify) after the rollback.
    type: str
    choices: [steady, verify]
    default: steady
  timeout:
    description: Seconds to wait for the checks to pass (0 checks once).
    type: float
    default: 0
  max_not_ready_percent:
    description: The most of a target's pool that may be NotReady.
    type: float
    default: 10
  protected_job:
    description: The Slurm job id the drill protects; it must be RUNNING.
    type: str
  prometheus_url:
    description: Prometheus base URL, for the detection baseline.
    type: str
  alertmanager_url:
    description: Alertmanager base URL, for the alerts already firing.
    type: str
"""

EXAMPLES = r"""
- name: Steady state before the injection
  gpufleet.resilience.drill_check:
    drill: "{{ gate.drill }}"
    mode: steady
    prometheus_url: http://127.0.0.1:9090
  register: steady
"""

RETURN = r"""
ok:
  description: Whether every check passed.
  type: bool
  returned: always
checks:
  description: Each check (check, ok, detail).
  type: list
  elements: dict
  returned: always
baseline:
  description: The detection metric per target and the alerts already firing (steady mode, when ok).
  type: dict
  returned: when mode is steady and ok
phase:
  description: The steady or verify phase as the drill report records it.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.api import drill_check
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.args import common_argspec, run_module


def main():
    module = AnsibleModule(
        argument_spec=common_argspec(
            drill=dict(type="dict", required=True),
            mode=dict(type="str", choices=["steady", "verify"], default="steady"),
            timeout=dict(type="float", default=0),
            max_not_ready_percent=dict(type="float", default=10),
            protected_job=dict(type="str"),
            prometheus_url=dict(type="str"),
            alertmanager_url=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: drill_check(module.params))


if __name__ == "__main__":
    main()
