#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_replace
short_description: Replace a failed GPU node from spare capacity (lab spares, Cluster API, or a command)
version_added: 0.3.0
description:
  - Takes a failed node out of service and brings capacity in its place, through a provider.
  - V(lab) brings a spare of the node's pool online, then takes the failed node out. The spare's
    Kubernetes node (kwok) is created after O(boot_delay) seconds and waited for until Ready, its fake
    GPUs are set healthy, its C(slurmd) is started and waited for until slurmctld shows it registered,
    then its health agent is started and published as a Prometheus scrape target. The failed node
    loses its scrape target and agent, goes to Slurm state C(FUTURE) (hidden, as a spare is), its
    C(slurmd) is stopped and its Kubernetes node deleted; its fake GPU state stays as the fault left it.
    How each part comes up is read from the recipes the lab's roles write,
    C(<lab_dir>/recipes/<pool>/*.json).
  - V(clusterapi) deletes the Cluster API Machine that owns the node (found by the node's
    C(cluster.x-k8s.io/machine) annotation, else by a Machine's C(status.nodeRef.name)) and waits up to
    O(wait_timeout) for a new Node of the same MachineDeployment (else MachineSet) to be Ready. A Machine
    that belongs to neither is refused, since deleting it would bring nothing back.
  - V(command) runs O(command) without a shell, with C({node}) and C({remediation_id}) replaced in its
    words, and fails with its stderr when it exits non-zero.
  - The replacement's Kubernetes node gets the annotations C(gpufleet.io/replaces=<name>) and, with
    O(remediation_id), C(gpufleet.io/remediation-id) (V(lab), V(clusterapi)). A rerun finds it by them, so a
    run killed at any step and run again completes without doing any step twice, and a node already
    replaced gives C(changed=false).
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.remediation_phase
  - gpufleet.resilience.kube
options:
  name:
    description:
      - The failed node (its Kubernetes and Slurm name). With V(lab), a node of one of the lab's pools
        that is in service, or already replaced.
    type: str
    required: true
  provider:
    description: How capacity is replaced.
    type: str
    required: true
    choices: [lab, clusterapi, command]
  state:
    description:
      - V(replaced) replaces O(name).
      - V(restored) is the rollback, for V(lab) only - O(name) comes back in service (with healthy GPUs, as
        after a repair) and the node that replaced it (or O(spare)) goes back to being a spare.
      - V(retired), for V(lab) only, takes O(name) out of service with nothing in its place, as a pool that
        shrinks does (C(playbooks/resize_node_pool.yml)). A node that is out already gives C(changed=false).
    type: str
    choices: [replaced, restored, retired]
    default: replaced
  spare:
    description:
      - V(lab) only. The node to bring online, of the same pool and not in service.
      - Default - the node that already says it replaces O(name) (a rerun), else the first spare of the
        pool (layout order) that is not in service. A node retired by an earlier replacement is no spare.
      - With O(state=restored), the node to take out again; default - the one that replaces O(name).
    type: str
  fence_reason:
    description:
      - Provider V(lab) - the spare is drained in Slurm with this reason before its slurmd registers, so it takes
        no job until the remediation's C(admit) phase has validated it (M(gpufleet.resilience.node_validate)).
      - Other providers bring up what the site's machinery makes; a replacement that must not take work before
        its admission joins drained by the site's own configuration.
    type: str
  boot_delay:
    description:
      - V(lab) only (other providers ignore it). Seconds of simulated boot before the spare's Kubernetes node
        appears.
    type: float
    default: 0
  remediation_id:
    description: The remediation doing this, written on the replacement's node as C(gpufleet.io/remediation-id).
    type: str
  lab_dir:
    description: V(lab) only, required there. The lab's directory (C(gpufleet_lab_dir)).
    type: path
  slurm_conf:
    description: V(lab) only. C(slurm.conf) of the lab's Slurm; default - the one the recipes name.
    type: path
  kubeconfig:
    description:
      - Kubeconfig of the cluster. V(lab) - default C(<lab_dir>/kube/admin.kubeconfig). V(clusterapi) -
        default the in-cluster service account.
    type: path
  wait_timeout:
    description:
      - Seconds each wait may take - V(lab) the spare's node Ready, its slurmd registered, its agent serving;
        V(clusterapi) the new Node Ready.
    type: float
    default: 300
  clusterapi_namespace:
    description:
      - V(clusterapi) only. Namespace of the Machines when the node's annotations do not name it; default
        all namespaces.
    type: str
  command:
    description:
      - V(command) only, required there. Program and arguments, as a list; never a shell string.
      - C({node}) and C({remediation_id}) in any word are replaced (no other braces are touched). The command also
        gets E(GPUFLEET_NODE) and E(GPUFLEET_REMEDIATION_ID).
    type: list
    elements: str
  command_timeout:
    description: V(command) only. Seconds the command may run before it is stopped and the module fails.
    type: float
    default: 600
attributes:
  check_mode:
    support: full
    details: Reads everything and says what it would do (which spare, which Machine, which command); changes nothing.
  diff_mode:
    support: partial
    details: V(lab) only - which of the two nodes is in service, before and after.
notes:
  - V(command) cannot know whether its command already ran - it runs the command each time. The command
    must be idempotent itself, or called once; the remediation playbook records the replace phase as done
    and does not call it again.
  - V(lab) refuses a node that still has jobs in Slurm (it waits up to O(wait_timeout) for jobs that are
    completing); requeue or cancel them first (M(gpufleet.resilience.slurm_jobs)).
  - V(clusterapi) marks the old Node with C(gpufleet.io/replace-machine) before deleting its Machine, so a
    rerun after a crash waits for the new node instead of failing. When Cluster API has deleted the old
    Node too and no new node was marked yet, a rerun fails, naming the node.
requirements:
  - kubernetes (Python client)
seealso:
  - module: gpufleet.resilience.node_drain
  - name: Cluster API - Machine deletion
    description: How a MachineSet replaces a deleted Machine.
    link: https://cluster-api.sigs.k8s.io/developer/architecture/controllers/machine-set
"""

EXAMPLES = r"""
- name: Bring a spare online in place of gpu-a-003 (lab)
  gpufleet.resilience.node_replace:
    name: gpu-a-003
    provider: lab
    lab_dir: /var/tmp/gpufleet-lab
    remediation_id: r-20261130-0001
    boot_delay: 5

- name: Put gpu-a-003 back and its spare back to spare (lab rollback)
  gpufleet.resilience.node_replace:
    name: gpu-a-003
    provider: lab
    state: restored
    lab_dir: /var/tmp/gpufleet-lab

- name: Replace a node's Cluster API Machine and wait for the new node
  gpufleet.resilience.node_replace:
    name: gpu-node-7f9c2
    provider: clusterapi
    kubeconfig: ~/.kube/management.kubeconfig
    wait_timeout: 900
    remediation_id: "{{ remediation_id }}"

- name: Ask the cloud for a new instance
  gpufleet.resilience.node_replace:
    name: gpu-a-003
    provider: command
    command: [/usr/local/bin/replace-instance, --node, "{node}", --ticket, "{remediation_id}"]
    remediation_id: "{{ remediation_id }}"
    command_timeout: 300
"""

RETURN = r"""
provider:
  description: The provider used.
  returned: always
  type: str
  sample: lab
state:
  description: The O(state) asked for.
  returned: always
  type: str
  sample: replaced
replacement:
  description:
    - The node now in service in place of the other - the spare (V(lab)), the new node (V(clusterapi)), or
      O(name) itself after O(state=restored). V(null) for V(command) and O(state=retired), and in check mode
      where not yet known.
  returned: always
  type: str
  sample: gpu-a-005
retired:
  description: The node taken out of service - O(name), or the spare after O(state=restored).
  returned: always
  type: str
  sample: gpu-a-003
actions:
  description: What was done, in order (in check mode - what would be done). Empty when nothing was to do.
  returned: always
  type: list
  elements: str
  sample:
    - create Kubernetes node gpu-a-005
    - give gpu-a-005 8 healthy fake GPUs
    - start slurmd-gpu-a-005
    - start health-agent-gpu-a-005
    - publish scrape target /var/tmp/gpufleet-lab/monitoring/targets/agent-gpu-a-005.json
    - withdraw scrape target /var/tmp/gpufleet-lab/monitoring/targets/agent-gpu-a-003.json
    - stop health-agent-gpu-a-003
    - set Slurm node gpu-a-003 FUTURE
    - stop slurmd-gpu-a-003
    - delete Kubernetes node gpu-a-003
machine:
  description: V(clusterapi) - the Machine deleted (or to delete), as C(namespace/name).
  returned: always
  type: str
  sample: capi-gpu/gpu-md-0-x7k2p-9cfd4
cmd:
  description: V(command) - the argv run (or to run), placeholders replaced.
  returned: with provider command
  type: list
  elements: str
  sample: [/usr/local/bin/replace-instance, --node, gpu-a-003]
rc:
  description: V(command) - its exit status; V(null) in check mode.
  returned: with provider command
  type: int
  sample: 0
stdout:
  description: V(command) - its standard output.
  returned: with provider command
  type: str
  sample: instance i-0abc replaced
stderr:
  description: V(command) - its standard error.
  returned: with provider command
  type: str
  sample: ""
"""

import dataclasses

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import connection_argspec
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.phase_record import (
    progress_argspec,
    record,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.replace.api import ReplaceRequest, replace_node
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import module_run_function


def argspec():
    return dict(
        name=dict(type="str", required=True),
        provider=dict(type="str", required=True, choices=["lab", "clusterapi", "command"]),
        state=dict(type="str", choices=["replaced", "restored", "retired"], default="replaced"),
        spare=dict(type="str"),
        boot_delay=dict(type="float", default=0),
        fence_reason=dict(type="str"),
        remediation_id=dict(type="str"),
        lab_dir=dict(type="path"),
        slurm_conf=dict(type="path"),
        **connection_argspec(),
        wait_timeout=dict(type="float", default=300),
        clusterapi_namespace=dict(type="str"),
        command=dict(type="list", elements="str"),
        command_timeout=dict(type="float", default=600),
        **progress_argspec(),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    try:
        # The request's own fields (module.params also holds the options' aliases).
        names = {option.name for option in dataclasses.fields(ReplaceRequest)}
        request = ReplaceRequest(**{key: value for key, value in module.params.items() if key in names})
        result = replace_node(request, module_run_function(module), module.check_mode)
        record(module.params["progress"], module.params["name"],
               {"provider": module.params["provider"], "replacement": result.replacement, "actions": result.actions},
               module.check_mode)
    except GpufleetError as exc:
        details = exc.details() if hasattr(exc, "details") else {}
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None), provider=module.params["provider"], **details)
    output = result.as_dict()
    if module._diff and result.diff is not None:
        output["diff"] = dict(before_header=module.params["name"], after_header=module.params["name"],
                              before=result.diff["before"], after=result.diff["after"])
    module.exit_json(**output)


if __name__ == "__main__":
    main()
