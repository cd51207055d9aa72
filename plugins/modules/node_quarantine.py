#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_quarantine
short_description: Quarantine a Kubernetes node (cordon, taint, state annotation) or undo the quarantine
version_added: 0.3.0
description:
  - With O(state=present), cordons the node (C(spec.unschedulable)), adds the taint
    O(taint_key)=O(taint_value):O(taint_effect) and records the quarantine in the node annotation
    C(gpufleet.io/quarantine), a JSON object with C(reason), C(remediation_id), C(since) (RFC 3339, UTC),
    C(cordoned_by) and C(tainted_by) (V(gpufleet) when this module did it, V(already) when the node
    was so before) and C(taint).
  - With O(state=absent), undoes what the record says this module did and removes the record. The
    taint goes only when C(tainted_by=gpufleet), the cordon only when C(cordoned_by=gpufleet). A cordon or a
    taint someone else made stays. A node without the record is left as it is.
  - Cordon, taint and record go in one JSON merge patch that carries the C(resourceVersion) it was
    computed from. When another writer changes the node meanwhile, the API server answers 409 Conflict
    and the patch is computed again from the node as it is now, so their change is never lost.
  - Every other taint and annotation of the node is kept.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.remediation_phase
  - gpufleet.resilience.kube
options:
  name:
    description: Name of the Node. A name the cluster does not know fails the module, naming it.
    type: str
    required: true
  state:
    description:
      - V(present) quarantines the node; V(absent) undoes the quarantine (the rollback).
    type: str
    choices: [present, absent]
    default: present
  taint_key:
    description: Key of the quarantine taint.
    type: str
    default: gpufleet.io/gpu-unhealthy
  taint_value:
    description: Value of the quarantine taint.
    type: str
    default: ""
  taint_effect:
    description: Effect of the quarantine taint.
    type: str
    choices: [NoSchedule, PreferNoSchedule, NoExecute]
    default: NoSchedule
  reason:
    description:
      - Why the node is quarantined, kept in the record. Omitted, an existing record's reason is kept.
    type: str
  remediation_id:
    description:
      - The remediation that quarantines the node, kept in the record. Omitted, an existing record's is kept.
    type: str
attributes:
  check_mode:
    support: full
    details: Sends the patch with the API server's dry run (validated, not stored) and reports what would change.
  diff_mode:
    support: full
    details: C(unschedulable), C(taints) and the quarantine record, before and after.
notes:
  - Kubernetes' node lifecycle controller adds the taint C(node.kubernetes.io/unschedulable) to a cordoned
    node and removes it after the uncordon; it is the controller's, and this module neither adds nor removes it.
requirements:
  - kubernetes (Python client)
seealso:
  - module: gpufleet.resilience.node_drain
"""

EXAMPLES = r"""
- name: Quarantine the node of a fatal GPU fault
  gpufleet.resilience.node_quarantine:
    name: gpu-a-003
    reason: "Xid79 GPU-fc522a91"
    remediation_id: r-20261130-0001
    kubeconfig: /var/tmp/gpufleet-lab/kube/admin.kubeconfig

- name: Roll the quarantine back (a cordon someone else made stays)
  gpufleet.resilience.node_quarantine:
    name: gpu-a-003
    state: absent
    kubeconfig: /var/tmp/gpufleet-lab/kube/admin.kubeconfig
"""

RETURN = r"""
node:
  description: The node as it is after the module (as it would be, in check mode).
  returned: success
  type: dict
  contains:
    name:
      description: Node name.
      returned: always
      type: str
      sample: gpu-a-003
    unschedulable:
      description: Whether the node is cordoned.
      returned: always
      type: bool
      sample: true
    taints:
      description: Every taint of the node.
      returned: always
      type: list
      elements: dict
      sample: [{key: gpufleet.io/gpu-unhealthy, effect: NoSchedule}]
quarantine:
  description: The quarantine record (annotation C(gpufleet.io/quarantine)) as a dict; V(null) when the node has none.
  returned: success
  type: dict
  sample:
    reason: "Xid79 GPU-fc522a91"
    remediation_id: r-20261130-0001
    since: "2026-11-30T03:00:12Z"
    cordoned_by: gpufleet
    tainted_by: gpufleet
    taint: {key: gpufleet.io/gpu-unhealthy, effect: NoSchedule}
attempts:
  description: Reads of the node it took; more than 1 when a concurrent write made the API server answer 409.
  returned: success
  type: int
  sample: 1
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    connection_argspec,
    core_v1_for,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import NodeWriter
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.quarantine import QuarantineSpec, quarantine_node
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.phase_record import (
    progress_argspec,
    record,
)


def argspec():
    return dict(
        name=dict(type="str", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        taint_key=dict(type="str", default="gpufleet.io/gpu-unhealthy", no_log=False),
        taint_value=dict(type="str", default=""),
        taint_effect=dict(type="str", choices=["NoSchedule", "PreferNoSchedule", "NoExecute"], default="NoSchedule"),
        reason=dict(type="str"),
        remediation_id=dict(type="str"),
        **connection_argspec(),
        **progress_argspec(),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    p = module.params
    want = QuarantineSpec(p["taint_key"], p["taint_value"], p["taint_effect"], p["reason"], p["remediation_id"])
    try:
        writer = NodeWriter(core_v1_for(p))
        result = quarantine_node(writer, p["name"], p["state"], want, check_mode=module.check_mode)
        record(p["progress"], p["name"], {"changed": result["changed"]}, module.check_mode)
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    before, after = result.pop("before"), result.pop("after")
    if module._diff:
        result["diff"] = {"before_header": p["name"], "after_header": p["name"], "before": before, "after": after}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
