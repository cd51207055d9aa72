#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_node
short_description: Drain, down or resume one Slurm node, keeping the fences others set
version_added: 0.3.0
description:
  - Fences one Slurm node (V(drain) or V(down), with a reason) or lifts the fence (V(resume)) with
    C(scontrol update NodeName=<name> State=<state> [Reason=<reason>]).
  - A node is fenced when it is V(DOWN), or has the flag V(DRAIN) (drained or draining) or V(FAIL).
    A fence is ours when its reason starts with O(owner_prefix) or is exactly O(reason); any other
    fence (a person's, slurmctld's C(Not responding), Slinky's C(slurm-operator:)) is someone else's.
  - Someone else's fence is never overwritten and never resumed (unless O(force)); the module keeps
    it, reports RV(action=kept_foreign) with RV(foreign_reason) and a warning, and changes nothing.
  - V(drain) on our own drain with another reason rewrites the reason; on our own V(DOWN) it changes
    nothing (a down node is already fenced). V(down) on our own drain sets it down.
  - V(resume) lifts only our own fence; a node that is not fenced is left as it is.
  - Reads with C(scontrol --future show node), so a V(FUTURE) spare is recognised and refused.
  - With O(slurm_api=rest) the same through slurmrestd (C(POST .../node/<name>) with the state and reason), with
    no Slurm command on the host.
  - Works with Slurm 22.05 (Debian bookworm), 24.11 (Debian trixie) and 26.05 (Debian forky).
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.remediation_phase
  - gpufleet.resilience.slurm_api
  - gpufleet.resilience.slurm_api.rest
options:
  name:
    description:
      - The node, one name (never a host list).
    type: str
    required: true
  state:
    description:
      - V(drain) stops new work on the node; running jobs keep running.
      - V(down) stops new work and makes slurmctld kill the node's jobs at once (requeueing the
        requeueable ones). To let jobs checkpoint first, V(drain), then
        M(gpufleet.resilience.slurm_jobs) with O(gpufleet.resilience.slurm_jobs#module:state=evacuated),
        then V(down).
      - V(resume) puts the node back in service.
    type: str
    required: true
    choices: [drain, down, resume]
  reason:
    description:
      - Why, one line; required with O(state=drain) and O(state=down), not used with O(state=resume).
      - "Start it with O(owner_prefix) (for example C(gpufleet: Xid79 GPU-fc522a91 remediation r-1)) so a
        later run, or a resume, knows the fence is ours. Never start it with C(slurm-operator:), or
        Slinky lifts it on the next uncordon."
    type: str
  owner_prefix:
    description:
      - The reason prefix that marks a fence as ours.
    type: str
    default: "gpufleet:"
  force:
    description:
      - Resume the node even when someone else fenced it.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reads the node and reports what it would do, with the command in RV(command); writes nothing.
  diff_mode:
    support: full
    details: The node's state with its flags, and its reason, before and after.
notes:
  - After O(state=resume) slurmctld asks the node's slurmd to register again, so the node shows the
    flag V(NOT_RESPONDING) for a moment.
  - An unknown node, or slurmctld not answering, fails the task with the command and its error; nothing is written.
seealso:
  - module: gpufleet.resilience.slurm_node_info
  - module: gpufleet.resilience.slurm_jobs
  - name: scontrol manual
    description: Slurm's node states and C(scontrol update).
    link: https://slurm.schedmd.com/scontrol.html
"""

EXAMPLES = r"""
- name: Fence the node for remediation (running jobs keep running)
  gpufleet.resilience.slurm_node:
    name: gpu-a-003
    state: drain
    reason: "gpufleet: Xid79 GPU-fc522a91 (remediation r-17)"
  register: fence

- name: Say so when someone else had fenced it already
  ansible.builtin.debug:
    msg: "kept {{ fence.foreign_reason }}"
  when: fence.action == 'kept_foreign'

- name: Set it down once its jobs are off
  gpufleet.resilience.slurm_node:
    name: gpu-a-003
    state: down
    reason: "gpufleet: Xid79 GPU-fc522a91 (remediation r-17)"

- name: Back in service after the repair (only if the fence is ours)
  gpufleet.resilience.slurm_node:
    name: gpu-a-003
    state: resume
"""

RETURN = r"""
action:
  description:
    - V(set) when the node was (in check mode, would be) written; V(none) when it already was as asked;
      V(kept_foreign) when someone else's fence was kept.
  returned: success
  type: str
  sample: set
node:
  description: The node after the task (in check mode, as it would be).
  returned: success
  type: dict
  contains:
    name:
      description: Node name.
      returned: always
      type: str
      sample: gpu-a-003
    state:
      description: Base state, upper case (V(IDLE), V(MIXED), V(ALLOCATED), V(DOWN), ...).
      returned: always
      type: str
      sample: IDLE
    flags:
      description: State flags, upper case.
      returned: always
      type: list
      elements: str
      sample: [DRAIN]
    long_state:
      description: The state as C(sinfo --format=%T) prints it.
      returned: always
      type: str
      sample: drained
    reason:
      description: The node's reason; V(null) when there is none.
      returned: always
      type: str
      sample: "gpufleet: Xid79 GPU-fc522a91 (remediation r-17)"
foreign_reason:
  description: The reason of someone else's fence that was kept (or, with O(force), resumed); V(null) otherwise.
  returned: success
  type: str
  sample: "hardware check by alice"
command:
  description: The command run (in check mode, that would run); empty when nothing is to be written.
  returned: success
  type: list
  elements: str
  sample: [scontrol, update, NodeName=gpu-a-003, State=DRAIN, "Reason=gpufleet: Xid79 GPU-fc522a91 (remediation r-17)"]
message:
  description: What was decided and why, in one line.
  returned: success
  type: str
  sample: "gpu-a-003 drained: gpufleet: Xid79 GPU-fc522a91 (remediation r-17)"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.phase_record import (
    fence_outcome,
    progress_argspec,
    record,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import SLURM_API_ARGS, slurm_client
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.fence import apply_node_state
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import module_run_function


def argspec():
    return dict(
        name=dict(type="str", required=True),
        state=dict(type="str", required=True, choices=["drain", "down", "resume"]),
        reason=dict(type="str"),
        owner_prefix=dict(type="str", default="gpufleet:"),
        force=dict(type="bool", default=False),
        **SLURM_API_ARGS,
        **progress_argspec(),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True,
                           required_if=[("state", "drain", ["reason"]), ("state", "down", ["reason"])])
    p = module.params
    try:
        client = slurm_client(p, module_run_function(module), check_mode=module.check_mode)
        result = apply_node_state(client, p["name"], p["state"], p["reason"], p["owner_prefix"], p["force"])
        record(p["progress"], p["name"], fence_outcome(result, p["reason"]), module.check_mode)
    except GpufleetError as exc:
        details = exc.details() if hasattr(exc, "details") else dict(field=getattr(exc, "field", None))
        module.fail_json(msg=str(exc), **details)
    for warning in result.pop("warnings"):
        module.warn(warning)
    diff = result.pop("diff")
    if module._diff:
        result["diff"] = dict(diff, before_header=p["name"], after_header=p["name"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
