#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: remediation_breaker
short_description: Read or reset the remediation circuit breaker (and the escalation history)
version_added: 0.3.0
description:
  - The breaker (ConfigMap C(gpufleet-remediation-breaker)) stops new remediations once too many GPU nodes were
    taken out within its window, and stays open until reset here (C(playbooks/remediation-reset.yml)).
  - O(state=reset) closes it (and with O(clear_slots) empties its window); O(clear_history) forgets the escalation
    history of O(nodes) (all nodes when empty), for a node a human has repaired.
  - The nodes refused while it was open stay listed (C(refused) in RV(breaker)) until a remediation of each is granted
    a slot; a reset takes off only those whose Node no longer exists (RV(refused_gone)).
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.kube
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  state:
    description: V(read) returns the breaker; V(reset) closes it.
    type: str
    choices: [read, reset]
    default: read
  clear_slots:
    description: With O(state=reset), also forget the nodes counted in the window.
    type: bool
    default: false
  clear_history:
    description: With O(state=reset), also clear the escalation history of O(nodes).
    type: bool
    default: false
  nodes:
    description: Nodes whose history O(clear_history) clears; empty means every node.
    type: list
    elements: str
    default: []
  alertmanager_url:
    description: Alertmanager base URL; the breaker's alert is resolved there on reset.
    type: str
  namespace:
    description: Namespace of the state ConfigMaps.
    type: str
    default: gpufleet-system
"""

EXAMPLES = r"""
- name: Close the breaker after a storm was understood
  gpufleet.resilience.remediation_breaker:
    state: reset
    clear_slots: true
"""

RETURN = r"""
breaker:
  description: The breaker's state (slots, tripped, tripped_at, tripped_why, refused) after the call.
  type: dict
  returned: always
before:
  description: The state before a reset.
  type: dict
  returned: when state is reset
history_cleared:
  description: Nodes whose escalation history was cleared.
  type: list
  elements: str
  returned: when state is reset
refused_gone:
  description: Nodes refused while the breaker was open whose Node no longer exists; the reset took them off the list.
  type: list
  elements: str
  returned: when state is reset
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import connection_argspec
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.api import read_breaker, reset_breaker


def argspec():
    return dict(
        state=dict(type="str", choices=["read", "reset"], default="read"),
        clear_slots=dict(type="bool", default=False),
        clear_history=dict(type="bool", default=False),
        nodes=dict(type="list", elements="str", default=[]),
        alertmanager_url=dict(type="str"),
        namespace=dict(type="str", default="gpufleet-system"),
        **connection_argspec(),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    try:
        if module.params["state"] == "reset":
            result = reset_breaker(module.params, module.check_mode)
        else:
            result = read_breaker(module.params)
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
