#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: remediation_start
short_description: Claim a GPU node for remediation and decide the plan, or resume an unfinished one
version_added: 0.3.0
description:
  - The first step of C(playbooks/remediate-node.yml). Reads the node's C(GpuHealthy) condition (written by the
    health agent), maps the fault's catalog action to a plan (the phases to run), applies escalation and the
    circuit breaker, and claims the node so that a second run for it does nothing.
  - State lives in ConfigMaps of O(namespace) (progress C(gpufleet-remediation-node-<node>), breaker
    C(gpufleet-remediation-breaker), history C(gpufleet-remediation-history)), written with compare-and-swap,
    and is mirrored in the node annotation C(gpufleet.io/remediation).
  - An unfinished remediation of the node is resumed when its holder (the C(ansible-playbook) process that ran it)
    is gone; while it still runs, the result has O(ignore:skip=duplicate) and nothing is done.
  - A healthy node (C(GpuHealthy=True)) gives RV(skip=healthy).
  - With O(fence), quarantine first - in the same module run, right after the claim and the breaker's decision,
    the plan's leading C(fence) (Slurm C(DRAIN) with the remediation's reason) and C(quarantine) (cordon and
    taint) are done and recorded, so no new work lands on the node while the remediation notifies, checks the
    opt-out and lets the jobs checkpoint. The breaker's own plan (V(BREAKER_OPEN)) fences in Slurm only.
  - With O(notify) too, the C(notify) phase that follows is done and recorded in the same run.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.kube
attributes:
  check_mode:
    support: full
    details: Computes the plan, escalation and breaker decision as a real run would now, and writes nothing.
  diff_mode:
    support: none
options:
  node:
    description: The Kubernetes node (and Slurm node of the same name) to remediate.
    type: str
    required: true
  trigger:
    description: What triggered the run (the alert, or the condition event); stored in the audit record.
    type: dict
    default: {}
  fault:
    description:
      - The fault to act on, instead of the node's C(GpuHealthy) condition (a rehearsal, or a site without agents).
      - Keys C(action) (a catalog action), C(verdict), C(reason), C(xid), C(gpu_index), C(gpu_uuid), C(message).
    type: dict
  plans:
    description:
      - Overrides of the plans' phases, per plan name (see docs/remediation.md).
      - Checked before anything is done; a bad one names its field.
    type: dict
    default: {}
  breaker:
    description: Circuit breaker settings C(max_percent) (20), C(max_nodes) (10), C(window_s) (600), C(enabled) (true).
    type: dict
    default: {}
  escalation:
    description:
      - Escalation settings C(max_remediations) (3), C(window_days) (7), C(repeat_after_cure) (true),
        C(enabled) (true).
    type: dict
    default: {}
  neighbours:
    description:
      - The marks other remediators put on a node they are working on. A node that carries one is not remediated -
        nothing is claimed, fenced or written - and the result has RV(skip=neighbour) naming the mark, so that two
        remediators never act on one node.
      - Each entry has C(owner) (who, for the message) and exactly one of C(label), C(taint), C(annotation) (the key
        present) or C(condition) (a node condition type, counted when its status is V(True)), and optionally
        C(value), which the label, taint, annotation or condition status must then equal.
      - Omitted, the known ones - NVSentinel's label C(dgxc.nvidia.com/nvsentinel-state) and annotation
        C(quarantineHealthEvent), draino's condition C(DrainScheduled). V([]) acts beside any remediator.
    type: list
    elements: dict
  lease:
    description: Seconds after which a remediation held by a process on another host counts as abandoned.
    type: float
    default: 1800
  namespace:
    description: Namespace of the state ConfigMaps.
    type: str
    default: gpufleet-system
  pool_selector:
    description: Label selector of the GPU nodes the breaker's percentage counts.
    type: str
    default: gpufleet.io/pool
  alertmanager_url:
    description: Alertmanager base URL; the breaker's alert is posted there when it refuses a remediation.
    type: str
  fence:
    description:
      - Quarantine first - do the plan's leading C(fence) and C(quarantine) phases in this run (see above).
      - Omitted, they are left pending for the playbook (M(gpufleet.resilience.slurm_node) and
        M(gpufleet.resilience.node_quarantine)).
    type: dict
    suboptions:
      slurm_api:
        description: How to reach Slurm, C(scontrol) (V(cli)) or slurmrestd (V(rest)).
        type: str
        choices: [cli, rest]
        default: cli
      slurm_conf:
        description: V(cli) - path of C(slurm.conf) (E(SLURM_CONF)); omit for Slurm's default.
        type: path
      bin_dir:
        description: V(cli) - directory holding C(scontrol) and C(sinfo); omit to search E(PATH).
        type: path
      timeout:
        description: Seconds each Slurm command or slurmrestd call may take.
        type: float
        default: 15
      rest_url:
        description: V(rest) - URL of slurmrestd (plain V(http) only to loopback).
        type: str
      rest_user:
        description: V(rest) - the Slurm user (an operator) the token is for.
        type: str
        default: root
      rest_jwt_key_file:
        description: V(rest) - the cluster's JWT key, to mint short-lived tokens; or give O(fence.rest_token_file).
        type: path
      rest_token_file:
        description: V(rest) - a file holding a token another process keeps fresh.
        type: path
      rest_token_lifespan:
        description: V(rest) - seconds a minted token lives.
        type: int
        default: 600
      rest_ca_file:
        description: V(rest) - CA bundle that signed slurmrestd's certificate.
        type: path
      rest_validate_certs:
        description: V(rest) - verify slurmrestd's TLS certificate.
        type: bool
        default: true
      rest_allow_http:
        description: V(rest) - allow plain V(http) beyond loopback (Slinky's RestApi Service); the token goes in clear.
        type: bool
        default: false
      rest_requeue_exit:
        description: V(rest) - the cluster's C(RequeueExit) codes (not used by the fence; accepted so one set of
          Slurm options serves every module).
        type: list
        elements: int
      taint_key:
        description: Key of the quarantine taint (effect C(NoSchedule)).
        type: str
        default: gpufleet.io/gpu-unhealthy
  notify:
    description:
      - Also do the C(notify) phase in this run when it comes next after the fence and quarantine, as
        M(gpufleet.resilience.remediation_record) does with C(state=notified) (Kubernetes Event and webhook),
        and record it. That is one module run fewer before the jobs are signalled.
      - Omitted, C(notify) is left pending for the playbook.
      - A webhook or Event that cannot be posted is a warning, not a failure.
    type: dict
    suboptions:
      webhook_url:
        description: Slack-compatible webhook URL; none, no post.
        type: str
      event:
        description: Also create a Kubernetes Event on the node.
        type: bool
        default: true
      timeout:
        description: Seconds the webhook post may take.
        type: float
        default: 10
"""

EXAMPLES = r"""
- name: Begin the remediation of gpu-a-003
  gpufleet.resilience.remediation_start:
    node: gpu-a-003
    trigger: {source: alertmanager, alert: GpuNodeFatal}
    breaker: {max_percent: 20, max_nodes: 10, window_s: 600}
    kubeconfig: /var/tmp/gpufleet-lab/kube/admin.kubeconfig
  register: remediation
"""

RETURN = r"""
skip:
  description:
    - Why nothing is to be done, or null. V(duplicate) - another run holds the node; V(healthy) - its condition is
      True; V(gone) - the Node is gone after a finished remediation replaced it; V(neighbour) - another remediator's
      mark is on the node (O(neighbours)).
  type: str
  returned: always
id:
  description: The remediation id.
  type: str
  returned: unless skipped as healthy
  sample: r-20261130T031502-gpu-a-003-1a2b3c
neighbours:
  description: With RV(skip=neighbour), the other remediators' marks found on the node.
  type: list
  elements: str
  returned: when skipped as neighbour
  sample: ["NVSentinel: label dgxc.nvidia.com/nvsentinel-state=quarantined"]
resumed:
  description: True when an unfinished remediation is resumed.
  type: bool
  returned: unless skipped
plan:
  description: The plan (name, phases, why, intent, acts).
  type: dict
  returned: unless skipped
pending:
  description: The plan's phases not done yet, in order.
  type: list
  elements: str
  returned: unless skipped
fault:
  description: The fault acted on (verdict, action, reason, message, xids, gpu_index, gpu_uuid).
  type: dict
  returned: unless skipped
intents:
  description: Intents recorded before actions that must not repeat (job ids about to be signalled).
  type: dict
  returned: unless skipped
decisions:
  description: The escalation and breaker decisions.
  type: dict
  returned: unless skipped
slurm_reason:
  description: The Slurm reason for the fence, C(gpufleet:) first.
  type: str
  returned: unless skipped
replacement:
  description: The node a C(replace) phase already done brought in (a resumed run), else V(null).
  type: str
  returned: unless skipped
first:
  description:
    - With O(fence) and O(notify), the outcome of each phase this run did (V(fence), V(quarantine), V(notify)), as
      recorded; else empty.
  type: dict
  returned: always
  sample: {fence: {action: drain, changed: true, reason: "gpufleet: Xid79 GPU 3", foreign_reason: null},
           quarantine: {changed: true}}
message:
  description: One line saying what happens.
  type: str
  returned: always
alerts:
  description: Alerts posted to Alertmanager.
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import connection_argspec
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.api import start
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm import connect
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import slurm_api_args
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import module_run_function


def argspec():
    return dict(
        node=dict(type="str", required=True),
        trigger=dict(type="dict", default={}),
        fault=dict(type="dict"),
        plans=dict(type="dict", default={}),
        breaker=dict(type="dict", default={}),
        escalation=dict(type="dict", default={}),
        lease=dict(type="float", default=1800.0),
        neighbours=dict(type="list", elements="dict"),
        namespace=dict(type="str", default="gpufleet-system"),
        pool_selector=dict(type="str", default="gpufleet.io/pool"),
        alertmanager_url=dict(type="str"),
        fence=dict(type="dict", options=dict(
            slurm_api_args(timeout=15),
            taint_key=dict(type="str", default="gpufleet.io/gpu-unhealthy", no_log=False),
        )),
        notify=dict(type="dict", options=dict(
            webhook_url=dict(type="str", no_log=True),
            event=dict(type="bool", default=True),
            timeout=dict(type="float", default=10),
        )),
        **connection_argspec(),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    fence = module.params["fence"] or {}

    def slurm_client():
        return connect.slurm_client(fence, module_run_function(module), check_mode=module.check_mode)

    try:
        result = start(module.params, module.check_mode, slurm_client=slurm_client)
    except GpufleetError as exc:
        details = exc.details() if hasattr(exc, "details") else dict(field=getattr(exc, "field", None))
        module.fail_json(msg=str(exc), id=getattr(exc, "remediation_id", None), **details)
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
