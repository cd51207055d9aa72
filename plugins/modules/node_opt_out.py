#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_opt_out
short_description: Tell whether a node, or a pod on it, opted out of automatic remediation
version_added: 0.3.0
description:
  - Looks for O(label) on the node and on every pod scheduled to it (all namespaces).
  - The remediation stops after its Slurm fence when the answer is yes; the node is neither drained nor replaced.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.remediation_phase
  - gpufleet.resilience.kube
  - gpufleet.resilience.attributes.read_only
options:
  name:
    description: The node.
    type: str
    required: true
  label:
    description: The opt-out label, C(KEY=VALUE).
    type: str
    default: gpufleet.io/remediation=disabled
"""

EXAMPLES = r"""
- name: Check the opt-out of gpu-a-003
  gpufleet.resilience.node_opt_out:
    name: gpu-a-003
  register: opt_out
"""

RETURN = r"""
opted_out:
  description: Whether the node or a pod on it carries the label.
  type: bool
  returned: always
by:
  description: What carries it, C(node/NAME) or C(pod/NAMESPACE/NAME).
  type: list
  elements: str
  returned: always
  sample: [pod/training/llama-0]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    connection_argspec,
    core_v1_for,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.opt_out import opted_out
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.phase_record import (
    progress_argspec,
    record,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            label=dict(type="str", default="gpufleet.io/remediation=disabled"),
            **connection_argspec(),
            **progress_argspec(),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        api = core_v1_for(params)
        result = opted_out(api, params["name"], params["label"])
        # An opt-out stops the remediation here: the node stays fenced and quarantined.
        stop = "opted out by " + ", ".join(result["by"]) if result["opted_out"] else None
        record(params["progress"], params["name"], {"opted_out": result["opted_out"], "by": result["by"]},
               module.check_mode, stop=stop)
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
