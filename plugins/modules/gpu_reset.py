#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_reset
short_description: Reset a GPU of a drained node (nvidia-smi -r on a real node, a state reset in the lab)
version_added: 0.3.0
description:
  - V(lab) resets the simulated GPUs of a lab node and sends its health agent SIGUSR1, so the agent forgets the
    XID history that made the node fatal (found by its recorded PID, never by name).
  - V(command) runs O(command) on the control host with C({node}) and C({gpu}) filled in, for example
    C([ssh, "{node}", nvidia-smi, -r, -i, "{gpu}"]), then O(agent_command) in the same way so the node's health agent
    forgets the XID (it keeps its faults across restarts, so without it a reset node stays fatal until the agent's
    window passes; the module warns when O(agent_command) is empty). Both run without a shell, each under O(timeout);
    the agent command runs only after the reset succeeded.
  - A reset is an action, not a state; the remediation records it so that a rerun does not reset twice.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.remediation_phase
attributes:
  check_mode:
    support: full
    details: Says what it would run; resets nothing.
  diff_mode:
    support: none
options:
  node:
    description: The node, a node name (RFC 1123); never a path or an option such as C(-oProxyCommand=...).
    type: str
    required: true
  gpu:
    description: The GPU index; null resets every GPU of the node (the lab) or fills C({gpu}) with C(0).
    type: int
  backend:
    description: How to reset.
    type: str
    choices: [lab, command]
    required: true
  command:
    description: With V(command), the argv to run.
    type: list
    elements: str
    default: []
  agent_command:
    description:
      - With V(command), the argv that sends the node's health agent SIGUSR1 after the reset, C({node}) and C({gpu})
        filled in, for example C([ssh, "{node}", sudo, systemctl, kill, -s, USR1, gpufleet-agent.service]) for the
        systemd install, or a C(kubectl exec) into the node's agent pod for the DaemonSet.
    type: list
    elements: str
    default: []
  lab_dir:
    description: With V(lab), the lab directory.
    type: path
  timeout:
    description: Seconds each command may run (V(command)); past it the module fails and says which command it was.
    type: int
    default: 120
"""

EXAMPLES = r"""
- name: Reset GPU 3 of gpu-a-003 over SSH
  gpufleet.resilience.gpu_reset:
    node: gpu-a-003
    gpu: 3
    backend: command
    command: [ssh, "{node}", sudo, nvidia-smi, -r, -i, "{gpu}"]
    agent_command: [ssh, "{node}", sudo, systemctl, kill, -s, USR1, gpufleet-agent.service]
"""

RETURN = r"""
actions:
  description: What was done (or would be).
  type: list
  elements: str
  returned: always
  sample:
    - "ran: ssh gpu-a-003 sudo nvidia-smi -r -i 3"
    - "ran: ssh gpu-a-003 sudo systemctl kill -s USR1 gpufleet-agent.service"
agent_told:
  description: Whether the node's health agent was told to forget its XID history (SIGUSR1, or O(agent_command)).
  type: bool
  returned: success
  sample: true
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.gpu_reset import (
    CommandFailed,
    reset_by_command,
    reset_lab_gpu,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.phase_record import (
    progress_argspec,
    record,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", required=True),
            gpu=dict(type="int"),
            backend=dict(type="str", choices=["lab", "command"], required=True),
            command=dict(type="list", elements="str", default=[]),
            agent_command=dict(type="list", elements="str", default=[]),
            lab_dir=dict(type="path"),
            timeout=dict(type="int", default=120),
            **progress_argspec(),
        ),
        required_if=[("backend", "lab", ("lab_dir",))],
        supports_check_mode=True,
    )
    params = module.params
    try:
        if params["backend"] == "lab":
            result = reset_lab_gpu(params["lab_dir"], params["node"], params["gpu"], module.check_mode)
        else:
            result = reset_by_command(params["command"], params["agent_command"], params["node"], params["gpu"],
                                      params["timeout"], module.check_mode)
        record(params["progress"], params["node"], {"backend": params["backend"], "actions": result.get("actions", []),
                                                    "agent_told": result.get("agent_told", False)}, module.check_mode)
    except CommandFailed as exc:
        module.fail_json(msg=str(exc), rc=exc.rc)
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
