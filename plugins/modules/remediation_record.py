#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: remediation_record
short_description: Tell people about a remediation, and write its audit record
version_added: 0.3.0
description:
  - V(notified) posts what happened and what will be done to a Slack-compatible webhook and as a Kubernetes Event on
    the node (reason C(GpuRemediationStarted) unless O(event_reason) says otherwise).
  - V(alerted) posts the C(GpuRemediationHeld) alert to Alertmanager (a node held for a human) and an Event.
  - V(recorded) ends the remediation - marks phase C(record) and the result (V(succeeded), V(stopped), V(refused)) -
    and appends its audit record, one JSON line with the whole timeline, to O(audit_log), with an Event and the
    webhook. The line is written once; a rerun after a crash finds it and does not write it again.
  - A webhook or Event that fails is a warning, never a reason to stop a remediation.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.remediation_phase
  - gpufleet.resilience.kube
attributes:
  check_mode:
    support: full
    details: Returns the message and record it would write; writes and posts nothing.
  diff_mode:
    support: none
options:
  state:
    description: What to do.
    type: str
    choices: [notified, alerted, recorded]
    required: true
  node:
    description: The node in remediation.
    type: str
    required: true
  remediation_id:
    description: The remediation's id.
    type: str
    required: true
  text:
    description: The text to send instead of the generated one.
    type: str
  event_reason:
    description: The Event's reason instead of the default.
    type: str
  event:
    description: Create the Kubernetes Event.
    type: bool
    default: true
  webhook_url:
    description: Slack-compatible incoming webhook URL. A secret; never logged.
    type: str
  alertmanager_url:
    description: Alertmanager base URL for O(state=alerted).
    type: str
  alert_lasts:
    description: Seconds the held alert lasts before Alertmanager resolves it (a rerun posts it again).
    type: float
    default: 86400
  audit_log:
    description: The JSON-lines audit log (O(state=recorded)); created 0640 with its directory.
    type: path
  timeout:
    description: Seconds a webhook post may take.
    type: float
    default: 10
  namespace:
    description: Namespace of the state ConfigMaps.
    type: str
    default: gpufleet-system
  slurm:
    description:
      - How to reach Slurm for the incident's cost (O(state=recorded)) - the node's GPUs and when each moved job runs
        again. Its keys are M(gpufleet.resilience.slurm_node)'s connection options (C(slurm_api), C(slurm_conf),
        C(bin_dir), C(timeout), C(rest_url), C(rest_jwt_key_file), ...); another key is refused, naming it.
      - Without it, or when Slurm does not answer, the record is written all the same and its cost names what it could
        not know.
    type: dict
"""

EXAMPLES = r"""
- name: Write the audit record
  gpufleet.resilience.remediation_record:
    state: recorded
    node: gpu-a-003
    remediation_id: "{{ remediation.id }}"
    audit_log: /var/log/gpufleet/remediations.jsonl
    webhook_url: "{{ vault_slack_webhook }}"
"""

RETURN = r"""
text:
  description: The text sent.
  type: str
  returned: always
record:
  description:
    - The audit record (O(state=recorded)). Its C(cost) says what the incident cost in GPU-hours - C(gpu_hours_lost),
      C(node_gpu_hours), C(waiting_gpu_hours), per job, and what is C(open) (still out when written, so a floor) or
      C(unknown).
  type: dict
  returned: when state is recorded
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import connection_argspec
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import phase_record
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.api import record
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import slurm_client, slurm_options
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import module_run_function


def argspec():
    return dict(
        state=dict(type="str", choices=["notified", "alerted", "recorded"], required=True),
        node=dict(type="str", required=True),
        remediation_id=dict(type="str", required=True),
        text=dict(type="str"),
        event_reason=dict(type="str"),
        event=dict(type="bool", default=True),
        webhook_url=dict(type="str", no_log=True),
        alertmanager_url=dict(type="str"),
        alert_lasts=dict(type="float", default=86400.0),
        audit_log=dict(type="path"),
        timeout=dict(type="float", default=10.0),
        namespace=dict(type="str", default="gpufleet-system"),
        slurm=dict(type="dict"),
        **connection_argspec(),
        **phase_record.progress_argspec(),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    p = module.params
    if p["progress"] and p["state"] == "recorded":
        module.fail_json(msg="progress: state=recorded records the remediation's end itself; give progress with "
                             "state=notified or alerted", field="progress")
    try:
        slurm = slurm_options(p["slurm"])
        # The record waits on Slurm for its cost alone: a short default.
        result = record(p, module.check_mode, slurm_client=None if slurm is None else (
            lambda: slurm_client(dict({"timeout": 15.0}, **slurm), module_run_function(module))))
        outcome = {"message": result["text"], "warnings": result["warnings"]} if p["state"] == "notified" else {}
        phase_record.record(p["progress"], p["node"], outcome, module.check_mode)
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
