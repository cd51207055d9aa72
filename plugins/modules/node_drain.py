#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_drain
short_description: Drain a Kubernetes node with the Eviction API, honouring PodDisruptionBudgets
version_added: 0.3.0
description:
  - Lists the pods bound to the node (all namespaces) and evicts each with the Eviction API
    (C(policy/v1) C(Eviction)), so that the API server enforces every PodDisruptionBudget.
  - Leaves DaemonSet pods (see O(skip_daemonsets)), mirror pods (annotation C(kubernetes.io/config.mirror))
    and finished pods (C(Succeeded), C(Failed)) on the node, and reports them in RV(skipped_pods).
  - An eviction a budget refuses (HTTP 429) is asked again every O(poll) seconds until O(timeout);
    a pod still refused then is reported in RV(blocked) with the API server's message, which names the
    budget. A pod already deleted (HTTP 404) is reported in RV(gone).
  - Then waits until the evicted pods have left the node, until O(timeout).
  - Blocked pods do not fail the task unless O(fail_on_blocked=true); the node stays cordoned, and what
    blocked is in the result.
  - Does not cordon. Quarantine or cordon the node first (M(gpufleet.resilience.node_quarantine)), or the
    controllers may put new pods on it.
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
  timeout:
    description: Seconds the drain may take, evictions and the wait for the pods to leave included.
    type: float
    default: 120
  poll:
    description: Seconds between two tries of a refused eviction, and between two looks at the node's pods.
    type: float
    default: 1
  return_after:
    description:
      - Seconds this call waits at most. When they pass before O(timeout) does and pods are still refused or
        leaving, it returns RV(done=false) with them in RV(waiting), concludes nothing and records nothing; the
        caller says where the drain is and calls again with O(started), so a long drain prints progress.
      - Omit to wait up to O(timeout) in one call.
    type: float
  started:
    description:
      - When the drain began (RV(started) of the first call, seconds since the epoch), so that a drain waited
        in slices times out when one call would have. Omit on the first call.
    type: float
  grace_period:
    description:
      - Termination grace period (seconds) for the evicted pods, passed in the eviction's C(DeleteOptions).
      - Omitted, each pod's own C(terminationGracePeriodSeconds) applies.
    type: int
  skip_daemonsets:
    description:
      - Leave pods owned by a DaemonSet. With V(false) they are evicted too, and the DaemonSet controller
        may create them again, since DaemonSet pods tolerate a cordon.
    type: bool
    default: true
  fail_on_blocked:
    description: Fail the task when a pod is still blocked (or still on the node) at O(timeout).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: >-
      Asks each eviction with the API server's dry run and reports the pods it would evict and the
      ones a budget would block; evicts nothing and does not wait.
  diff_mode:
    support: none
requirements:
  - kubernetes (Python client)
seealso:
  - module: gpufleet.resilience.node_quarantine
  - name: API-initiated eviction
    description: How the Eviction API honours PodDisruptionBudgets.
    link: https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/
"""

EXAMPLES = r"""
- name: Drain the quarantined node; report what a budget blocks
  gpufleet.resilience.node_drain:
    name: gpu-a-003
    timeout: 300
    kubeconfig: /var/tmp/gpufleet-lab/kube/admin.kubeconfig
  register: drained

- name: Keep the node fenced when something blocked
  ansible.builtin.debug:
    msg: "blocked: {{ drained.blocked | map(attribute='pod') | join(', ') }}"
  when: drained.blocked | length > 0
"""

RETURN = r"""
evicted:
  description: Pods (C(namespace/name)) this run evicted; in check mode, the pods it would evict.
  returned: success
  type: list
  elements: str
  sample: [ml/train-7d9f-abcde]
gone:
  description: Pods that were already gone (HTTP 404) or already being deleted by someone else.
  returned: success
  type: list
  elements: str
  sample: []
skipped_pods:
  description:
    - Pods left on the node, and why. (Not C(skipped), which Ansible reads as a skipped task.)
  returned: success
  type: list
  elements: dict
  contains:
    pod:
      description: C(namespace/name).
      returned: always
      type: str
      sample: gpu-system/health-agent-x2x8k
    why:
      description: V(daemonset), V(mirror) or V(finished).
      returned: always
      type: str
      sample: daemonset
blocked:
  description:
    - Pods still refused, or evicted but still on the node, when O(timeout) passed; in check mode, the
      pods the dry run refused.
  returned: success
  type: list
  elements: dict
  contains:
    pod:
      description: C(namespace/name).
      returned: always
      type: str
      sample: ml/trainer-0
    reason:
      description: The API server's message; for a budget, it names the budget.
      returned: always
      type: str
      sample: >-
        Cannot evict pod as it would violate the pod's disruption budget.;
        The disruption budget trainer needs 1 healthy pods and has 1 currently
timed_out:
  description: Whether O(timeout) passed with pods blocked or still on the node.
  returned: success
  type: bool
  sample: false
elapsed:
  description: Seconds the drain took (this call).
  returned: success
  type: float
  sample: 1.204
done:
  description:
    - V(false) when O(return_after) passed first with pods still to go (RV(waiting)); call again with O(started).
  returned: success
  type: bool
  sample: true
waiting:
  description: With RV(done=false), the pods still refused or still leaving the node, as C(namespace/name).
  returned: success
  type: list
  elements: str
  sample: [ml/trainer-0]
started:
  description: When the drain began, seconds since the epoch; pass it as O(started) to the next call.
  returned: success
  type: float
  sample: 1764842400.5
timeout_left:
  description: Seconds of O(timeout) left when the call returned.
  returned: success
  type: float
  sample: 84.5
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    connection_argspec,
    core_v1_for,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.eviction import EvictionApi, drain_node
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.phase_record import (
    progress_argspec,
    record,
)


def argspec():
    return dict(
        name=dict(type="str", required=True),
        timeout=dict(type="float", default=120),
        poll=dict(type="float", default=1),
        return_after=dict(type="float"),
        started=dict(type="float"),
        grace_period=dict(type="int"),
        skip_daemonsets=dict(type="bool", default=True),
        fail_on_blocked=dict(type="bool", default=False),
        **connection_argspec(),
        **progress_argspec(),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    p = module.params
    try:
        api = EvictionApi(core_v1_for(p))
        result = drain_node(
            api, p["name"], p["timeout"], p["poll"], p["grace_period"], p["skip_daemonsets"], module.check_mode,
            return_after=p["return_after"], started=p["started"],
        ).as_dict()
        if not result["done"]:
            module.exit_json(**result)  # a slice of the drain: recorded on the last one
        # A blocked drain stops the remediation here: the node stays fenced and quarantined.
        blocked = [item["pod"] for item in result["blocked"]]
        record(p["progress"], p["name"],
               {"evicted": result["evicted"], "skipped": result["skipped_pods"], "blocked": result["blocked"]},
               module.check_mode, stop="the drain was blocked: " + ", ".join(blocked) if blocked else None)
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    if p["fail_on_blocked"] and result["blocked"]:
        module.fail_json(msg="node %s: %d pod(s) blocked the drain" % (p["name"], len(result["blocked"])), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
