#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: remediation_evidence
short_description: Collect a remediation's evidence bundle before the node is reset, replaced or held
version_added: 0.6.0
description:
  - "One directory per remediation, O(dest)/<remediation id>/, with a C(manifest.json): the Slurm node
    record and its jobs (C(slurm.json)), the Kubernetes Node and its Events (C(kubernetes.json)), the health
    agent's metrics page (C(agent-metrics.txt): the GPUs as NVML showed the agent), the end of the agent's
    journal and of the kernel log it follows, and C(nvidia-bug-report.log.gz) where C(nvidia-bug-report.sh)
    is on this host's PATH."
  - A part that cannot be had is listed in the manifest with why; the others are collected all the same.
    The agent's files are read on the host that runs the module (the lab, or the node itself).
  - Each part and the bundle are capped (the end of each file is kept); the oldest bundles beyond O(keep)
    are removed. A rerun finds the finished bundle and collects nothing again.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.remediation_phase
  - gpufleet.resilience.slurm_api
  - gpufleet.resilience.slurm_api.rest
  - gpufleet.resilience.kube
options:
  node:
    description: The node.
    type: str
    required: true
  remediation_id:
    description: The remediation; the bundle's directory name.
    type: str
    required: true
  dest:
    description: Where the bundles go (one directory each).
    type: path
    required: true
  agent_config:
    description:
      - The health agent's configuration file on this host; its journal, kernel log and metrics address are
        read from it. Omitted or unreadable, those parts are listed as missing.
    type: path
  agent_metrics_url:
    description:
      - The health agent's metrics page (C(http://NODE:9400/metrics)), for a host that is not the node; without
        it the address comes from O(agent_config).
    type: str
  bug_report:
    description: Run C(nvidia-bug-report.sh) when it is on the PATH.
    type: bool
    default: true
  part_max_bytes:
    description: The most one part keeps (the end of it).
    type: int
    default: 4194304
  max_bytes:
    description: The most the bundle keeps, all parts together.
    type: int
    default: 16777216
  keep:
    description: How many bundles O(dest) keeps; the oldest beyond go.
    type: int
    default: 50
attributes:
  check_mode:
    support: full
    details: Says which parts it would collect; reads and writes nothing.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Evidence of gpu-a-003 before it is replaced
  gpufleet.resilience.remediation_evidence:
    node: gpu-a-003
    remediation_id: r-20261204T031502-gpu-a-003-1a2b3c
    dest: /var/lib/gpufleet/evidence
    agent_config: /var/tmp/gpufleet-lab/agent/gpu-a-003.yml
"""

RETURN = r"""
path:
  description: The bundle's directory.
  type: str
  returned: always
  sample: /var/lib/gpufleet/evidence/r-20261204T031502-gpu-a-003-1a2b3c
manifest:
  description: The manifest - C(parts) (name, bytes, sha256, cut), C(missing) (part, why), C(bytes), C(removed).
  type: dict
  returned: always
"""

import os
import re
from typing import Any, Dict

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_node_name, check_number
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    connection_argspec,
    core_v1_for,
    kube_timeouts,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import evidence
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.evidence_sources import sources
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.phase_record import (
    progress_argspec,
    record,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import SLURM_API_ARGS, slurm_client
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import module_run_function


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", required=True),
            remediation_id=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            agent_config=dict(type="path"),
            agent_metrics_url=dict(type="str"),
            bug_report=dict(type="bool", default=True),
            part_max_bytes=dict(type="int", default=4194304),
            max_bytes=dict(type="int", default=16777216),
            keep=dict(type="int", default=50),
            **SLURM_API_ARGS,
            **connection_argspec(),
            **progress_argspec(),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        for name in ("part_max_bytes", "max_bytes", "keep"):
            if p[name] < 1:
                module.fail_json(msg="%s must be at least 1, not %d" % (name, p[name]), field=name)
        node = check_node_name(p["node"], "node")
        dest = p["dest"]
        if not dest or not os.path.isabs(dest) or "\x00" in dest:
            module.fail_json(msg="dest must be an absolute directory path, not %r" % (dest,), field="dest")
        # Bad connection options fail here, naming the option; a Slurm or Kubernetes that does not
        # answer costs only its part of the bundle.
        kube_timeouts(p)
        check_number(p["timeout"], "timeout", above=0)
        client = slurm_client(p, module_run_function(module))

        def slurm() -> Any:
            return client

        def kube() -> Any:
            return core_v1_for(p)

        url = p["agent_metrics_url"]
        if url is not None and not re.fullmatch(r"https?://[^\s]+", url):
            module.fail_json(msg="agent_metrics_url must be an http(s) URL, not %r" % (url,), field="agent_metrics_url")
        parts = sources(node, slurm, kube, p["agent_config"], p["bug_report"], dest, url)
        limits = evidence.Limits(part_bytes=p["part_max_bytes"], bundle_bytes=p["max_bytes"], keep=p["keep"])
        result: Dict[str, Any] = evidence.collect(p["dest"], p["remediation_id"], node, parts, limits,
                                                  check_mode=module.check_mode)
        manifest = result["manifest"]
        record(p["progress"], node, {"path": result["path"], "bytes": manifest.get("bytes", 0),
                                     "parts": [part["name"] for part in manifest.get("parts", [])],
                                     "missing": manifest.get("missing", [])}, module.check_mode)
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
