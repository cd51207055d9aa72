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
    C([ssh, "{node}", nvidia-smi, -r, -i, "{gpu}"]), then C(systemctl kill -s USR1 gpufleet-health-agent) in the same
    way so the agent forgets the XID; it runs without a shell.
  - A reset is an action, not a state; the remediation records it so that a rerun does not reset twice.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
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
  lab_dir:
    description: With V(lab), the lab directory.
    type: path
  timeout:
    description: Seconds the command may run.
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
"""

RETURN = r"""
actions:
  description: What was done (or would be).
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.gpu_reset import reset_argv, reset_lab_gpu


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", required=True),
            gpu=dict(type="int"),
            backend=dict(type="str", choices=["lab", "command"], required=True),
            command=dict(type="list", elements="str", default=[]),
            lab_dir=dict(type="path"),
            timeout=dict(type="int", default=120),
        ),
        required_if=[("backend", "lab", ("lab_dir",))],
        supports_check_mode=True,
    )
    params = module.params
    try:
        if params["backend"] == "lab":
            module.exit_json(**reset_lab_gpu(params["lab_dir"], params["node"], params["gpu"], module.check_mode))
        argv = reset_argv(params["command"], params["node"], params["gpu"])
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    if module.check_mode:
        module.exit_json(changed=True, actions=["would run: %s" % " ".join(argv)])
    rc, out, err = module.run_command(argv, check_rc=False)
    if rc != 0:
        module.fail_json(msg="the GPU reset command failed (rc %d): %s" % (rc, (err or out).strip()[-2000:]), rc=rc)
    module.exit_json(changed=True, actions=["ran: %s" % " ".join(argv)], stdout=out, stderr=err)


if __name__ == "__main__":
    main()
