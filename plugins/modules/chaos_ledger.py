#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: chaos_ledger
short_description: Read the chaos ledger, pull the kill switch, roll back expired faults, end a drill
version_added: 0.4.0
description:
  - The ledger (ConfigMap C(gpufleet-chaos-ledger), or O(ledger_file)) holds every active fault with its expiry and
    undo, the active drills, the kill switch and the history of rollbacks.
  - O(state=stopped) is the kill switch - it goes on (new drills are refused until it is cleared) and every fault in
    the ledger is rolled back. O(state=cleared) turns it off.
  - O(state=expired) rolls back the faults whose duration is over; with O(wait) it keeps watching until the
    drill's faults are gone. Run that as an C(async) task with C(poll=0) - it is the watchdog that rolls back even
    if nobody comes back.
  - O(state=finished) removes an ended drill from the active drills.
  - "Since 0.6.0: a fault that acts on the node's own host is rolled back only on the host the ledger recorded at its
    injection. Elsewhere O(state=stopped) lists it in RV(rolled_back) as V(refused), naming that host, and leaves it
    in the ledger (C(playbooks/chaos-stop.yml) then rolls it back there); O(state=expired) leaves it to the watchdog
    on its own host. Lab faults and faults that act only through an API are rolled back anywhere."
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.chaos
  - gpufleet.resilience.slurm_api.rest
  - gpufleet.resilience.kube
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  state:
    description: What to do with the ledger.
    type: str
    choices: [read, stopped, cleared, expired, finished]
    default: read
  drill_id:
    description: The drill, for O(state=expired) (default every drill) and O(state=finished).
    type: str
  wait:
    description: With O(state=expired), keep watching until the drill's faults are all rolled back.
    type: bool
    default: false
  reason:
    description: Why the kill switch goes on or off; recorded with it.
    type: str
    default: ""
  chaos_namespace:
    description: Namespace of the pods a Kubernetes burn creates.
    type: str
    default: gpufleet-chaos
"""

EXAMPLES = r"""
- name: Kill switch - stop every drill and roll everything back
  gpufleet.resilience.chaos_ledger:
    state: stopped
    reason: incident 4711
"""

RETURN = r"""
kill_switch:
  description: The kill switch (on, by, why, at).
  type: dict
  returned: always
faults:
  description: The faults still active.
  type: list
  elements: dict
  returned: always
drills:
  description: The drills still active.
  type: list
  elements: dict
  returned: always
rolled_back:
  description:
    - What this call rolled back (id, node, host, rollback done|failed|refused, actions; error when not done).
  type: list
  elements: dict
  returned: when state is stopped or expired
problems:
  description:
    - The watchdog's (O(state=expired) with O(wait)) looks at the ledger that failed, each with its time and
      error; it tried again two seconds later each time rather than end with the fault in place.
  type: list
  elements: str
  returned: when a look failed
completeness:
  description: Faults rolled back (and by the watchdog, by the kill switch) and faults still active.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.api import ledger_state
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.args import common_argspec, run_module


def main():
    module = AnsibleModule(
        argument_spec=common_argspec(
            state=dict(type="str", choices=["read", "stopped", "cleared", "expired", "finished"], default="read"),
            drill_id=dict(type="str"),
            wait=dict(type="bool", default=False),
            reason=dict(type="str", default=""),
            chaos_namespace=dict(type="str", default="gpufleet-chaos"),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: ledger_state(module.params, module.check_mode))


if __name__ == "__main__":
    main()
