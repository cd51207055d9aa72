#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: remediation_progress
short_description: Record a remediation phase as done, an intent, or the remediation's end
version_added: 0.3.0
description:
  - Writes the progress of remediation O(remediation_id) of O(node) (ConfigMap C(gpufleet-remediation-node-<node>),
    mirrored in the node annotation C(gpufleet.io/remediation)) with compare-and-swap.
  - A phase already recorded is not recorded again, so a rerun after a crash changes nothing there.
  - O(intent) records what is about to be done before an action that must not repeat (the job ids about to be
    signalled); a rerun reads it and does not act on them again.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.kube
attributes:
  check_mode:
    support: full
    details: Writes nothing; returns the progress as it would be.
  diff_mode:
    support: none
options:
  node:
    description: The node in remediation.
    type: str
    required: true
  remediation_id:
    description: The id RV(gpufleet.resilience.remediation_start#module:id) returned.
    type: str
    required: true
  phase:
    description: The phase done (or, with O(intent), about to act).
    type: str
  outcome:
    description: What the phase did (module results, counts); stored in the audit record.
    type: dict
    default: {}
  stop:
    description: A reason to stop after this phase; every later phase but C(record) is marked skipped.
    type: str
  intent:
    description: What the phase is about to do (for example job ids), recorded before it acts.
    type: raw
  result:
    description:
      - End the remediation with this result. V(auto) picks it from the progress (V(refused) for the
        breaker's plan, V(stopped) when a phase stopped it or it holds the node for a human, else V(succeeded)).
      - V(failed) leaves it open; the next run resumes it.
    type: str
    choices: [auto, succeeded, stopped, failed, refused]
  error:
    description: With O(result=failed), what went wrong.
    type: str
  namespace:
    description: Namespace of the state ConfigMaps.
    type: str
    default: gpufleet-system
"""

EXAMPLES = r"""
- name: Record the fence
  gpufleet.resilience.remediation_progress:
    node: gpu-a-003
    remediation_id: "{{ remediation.id }}"
    phase: fence
    outcome: "{{ fence | gpufleet.resilience.remediation_outcome }}"
"""

RETURN = r"""
progress:
  description: The whole progress document after the write.
  type: dict
  returned: always
pending:
  description: Phases still to run.
  type: list
  elements: str
  returned: always
summary:
  description: One line, as in the node annotation.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import connection_argspec
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.api import record_phase


def argspec():
    return dict(
        node=dict(type="str", required=True),
        remediation_id=dict(type="str", required=True),
        phase=dict(type="str"),
        outcome=dict(type="dict", default={}),
        stop=dict(type="str"),
        intent=dict(type="raw"),
        result=dict(type="str", choices=["auto", "succeeded", "stopped", "failed", "refused"]),
        error=dict(type="str"),
        namespace=dict(type="str", default="gpufleet-system"),
        **connection_argspec(),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True,
                           required_one_of=[("phase", "result")], required_by={"intent": "phase"})
    try:
        result = record_phase(module.params, module.check_mode)
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
