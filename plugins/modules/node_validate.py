#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_validate
short_description: Run a burn on a fenced Slurm node, reserved for it, before the node returns to service
version_added: 0.3.0
description:
  - The C(validate) phase of a remediation, between C(verify) and C(resume) of the plans that bring a node
    back (a GPU reset, a fabric-manager restart). A GPU that NVML calls healthy may still compute wrong
    results, die under load or run at half its rate; a burn on the node itself finds it.
  - Reserves the node for O(user) alone (C(scontrol create reservation ... Flags=MAINT,IGNORE_JOBS), no end),
    lifts the drain (Slurm starts no job on a drained node), submits the burn in the reservation, waits for
    it, drains the node again and deletes the reservation. A crash anywhere leaves the node drained or
    reserved, never open to other work; a rerun waits for the job the first run submitted (recorded as the
    phase's intent before the wait) and never submits a second.
  - Passes when the burn's verdict is C(ok) (gpu-burn, the lab's simulated burn) or C(pass)/C(warn) (DCGM)
    and, for a burn, no GPU runs below O(min_ratio) of the node's fastest. A burn with no result lines
    never passes.
  - "Returns RV(passed); the node is drained with the fence's O(reason) when it passed (the C(resume) phase
    lifts it), with C(gpufleet: validation failed: <why>) when it did not."
  - With O(progress), records the phase, and on a failure stops the remediation there (the node stays
    fenced; nothing after C(validate) runs but the record).
  - Through Slurm's commands (O(slurm_api=cli)) or slurmrestd (O(slurm_api=rest), whose reservation endpoint
    needs data parser v0.0.43, Slurm 25.05, or later).
  - The settings may differ per node pool (O(pools), O(pool)); a pool's O(backend=none) records the phase as
    skipped and touches nothing.
  - With O(admit), the C(admit) phase of a replacement node, which came up drained with the remediation's
    reason - a node that passes is not drained again but takes work as soon as its reservation is gone, and
    with O(backend=none) the fence is lifted at once (when it is ours).
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.remediation_phase
  - gpufleet.resilience.slurm_api
  - gpufleet.resilience.slurm_api.rest
attributes:
  check_mode:
    support: full
    details: Says in RV(actions) what it would reserve, resume, run and drain; does none of it.
  diff_mode:
    support: none
options:
  node:
    description: The node, one name.
    type: str
    required: true
  remediation_id:
    description: The remediation the validation belongs to; the reservation's and the job's name derive from it.
    type: str
    required: true
  reason:
    description: The fence's Slurm reason, put back when the validation passes (so C(resume) knows it is ours).
    type: str
    required: true
  backend:
    description:
      - V(auto) - what the node has - C(dcgmi diag -r <dcgm_level>) where DCGM is installed, else
        C(gpu_burn -d -m 90% <seconds>), else nothing (RV(passed) null, RV(skipped) says so; the node is drained
        again with the fence's reason, or with O(admit) takes work). The job's first line names the tool it ran.
      - V(lab) - the lab's C(gpu_burn_sim) (O(lab_dir)), which prints what gpu-burn prints from the simulated
        GPUs' state.
      - V(gpu_burn) - C(gpu_burn -d -m 90% <seconds>) on the node's PATH.
      - V(dcgm_diag) - C(dcgmi diag -r <dcgm_level>).
      - V(nccl_tests) - nccl-tests' C(all_reduce_perf -b 8M -e 1G -f 2 -g <gpus>) (O(nccl_tests)), judged against
        O(min_busbw_gbps).
      - "V(none) - no validation: the phase is recorded as skipped."
    type: str
    required: true
    choices: [auto, lab, gpu_burn, dcgm_diag, nccl_tests, none]
  seconds:
    description: How long the burn lasts (gpu-burn, the lab's); the job's limit is this plus a minute.
    type: int
    default: 120
  dcgm_level:
    description: DCGM's run level with O(backend=dcgm_diag) (2 about 2 minutes, 3 about 15).
    type: int
    default: 2
  min_ratio:
    description:
      - A GPU whose burn rate is below this share of the node's fastest GPU fails the validation. 0 turns the
        check off. The default leaves the few percent that GPUs of one model differ by (docs/scheduling.md) and
        catches a GPU at three quarters of its rate.
    type: float
    default: 0.75
  min_busbw_gbps:
    description:
      - With O(backend=nccl_tests), the floor of all_reduce_perf's C(Avg bus bandwidth), in GB/s; required there.
        Measure a healthy node of the pool with the same arguments and leave a margin.
    type: float
    default: 0
  nccl_tests:
    description: all_reduce_perf's path on the node, or its name on the node's PATH.
    type: str
    default: all_reduce_perf
  admit:
    description: The node is a replacement being admitted to work (see above), not a node to put back by C(resume).
    type: bool
    default: false
  remediation_node:
    description: The node the remediation is of, whose progress records the phase, when it is not O(node) (the
      failed node whose replacement O(node) is admitted).
    type: str
  pool:
    description: The node's pool (its C(gpufleet.io/pool) label); with O(pools), picks the pool's settings.
    type: str
  pools:
    description:
      - Pool name -> settings over the options above (O(backend), O(seconds), O(dcgm_level), O(min_ratio),
        O(min_busbw_gbps), O(nccl_tests)). Every pool's entry is checked; a bad one fails naming
        C(pools.<pool>.<setting>) and nothing is done.
    type: dict
    default: {}
  gpus:
    description: How many GPUs the job asks for; default all that Slurm lists on the node.
    type: int
  output_dir:
    description:
      - Where the job writes its output; this host reads it there. On a real site a directory the node and
        this host share.
    type: path
    required: true
  user:
    description: The user the reservation admits (the one the job runs as); default the user running the module.
    type: str
  lab_dir:
    description: The lab's directory, with O(backend=lab).
    type: path
  evidence_dir:
    description: The remediation's evidence directory; a copy of the output goes into its bundle when there is one.
    type: path
"""

EXAMPLES = r"""
- name: Validate gpu-a-003 before it returns to service
  gpufleet.resilience.node_validate:
    node: gpu-a-003
    remediation_id: r-20261205T031502-gpu-a-003-1a2b3c
    reason: "gpufleet: Xid48 GPU-fc522a91 (remediation r-20261205T031502-gpu-a-003-1a2b3c)"
    backend: gpu_burn
    seconds: 300
    output_dir: /shared/gpufleet/validation
    pool: gpu-h100
    pools:
      gpu-h100: {backend: nccl_tests, min_busbw_gbps: 300}
  register: validation
"""

RETURN = r"""
passed:
  description: Whether the node passed (V(null) in check mode, where nothing ran, and when V(auto) found no tool).
  returned: always
  type: bool
why:
  description: Why it failed (empty when it passed).
  returned: always
  type: str
verdict:
  description: The burn's verdict (ok, faulty, error, unknown; pass, warn, fail for DCGM; ok, fail, unknown for
    all_reduce_perf).
  returned: when the job ran
  type: str
busbw_gbps:
  description: all_reduce_perf's average bus bandwidth (GB/s), with O(backend=nccl_tests).
  returned: when all_reduce_perf ran
  type: float
skipped:
  description: Why nothing ran (the pool's backend is V(none)), or why nothing was checked (V(auto) found no tool).
  returned: when skipped
  type: str
slow:
  description: The GPUs below O(min_ratio) of the node's fastest.
  returned: when the job ran
  type: list
  elements: int
job_id:
  description: The validation job's Slurm id.
  returned: unless skipped
  type: str
output:
  description: The job's output file.
  returned: unless skipped
  type: str
reservation:
  description: The reservation's name.
  returned: unless skipped
  type: str
node:
  description: The node validated (with O(admit), the replacement).
  returned: always
  type: str
actions:
  description: What this run did (or, in check mode, would do), in order.
  returned: always
  type: list
  elements: str
evidence:
  description: The copy of the output in the evidence bundle, or V(null).
  returned: unless skipped
  type: str
"""

import getpass
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.phase_record import (
    progress_argspec,
    record,
    record_intent,
    recorded_intent,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.validation import (
    BACKENDS,
    NONE,
    Validation,
    for_pool,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.validation_run import (
    admit_unvalidated,
    keep_output,
    validate_node,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import SLURM_API_ARGS, slurm_client
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import module_run_function


def argspec():
    return dict(
        node=dict(type="str", required=True),
        remediation_id=dict(type="str", required=True),
        reason=dict(type="str", required=True),
        backend=dict(type="str", required=True, choices=[*BACKENDS, NONE]),
        seconds=dict(type="int", default=120),
        dcgm_level=dict(type="int", default=2),
        min_ratio=dict(type="float", default=0.75),
        min_busbw_gbps=dict(type="float", default=0.0),
        nccl_tests=dict(type="str", default="all_reduce_perf"),
        pool=dict(type="str"),
        pools=dict(type="dict", default={}),
        admit=dict(type="bool", default=False),
        remediation_node=dict(type="str"),
        gpus=dict(type="int"),
        output_dir=dict(type="path", required=True),
        user=dict(type="str"),
        lab_dir=dict(type="path"),
        evidence_dir=dict(type="path"),
        **SLURM_API_ARGS,
        **progress_argspec(),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    p = module.params
    owner = p["remediation_node"] or p["node"]  # whose remediation progress records the phase
    try:
        settings = for_pool(dict(p, user=p["user"] or getpass.getuser()))
        if settings["backend"] == NONE:
            outcome = {"skipped": "no validation backend%s (remediation_validate_backend)" % (
                " for pool %s" % p["pool"] if p["pool"] in p["pools"] else ""), "actions": [], "node": p["node"]}
            if p["admit"]:
                client = slurm_client(p, module_run_function(module), check_mode=module.check_mode)
                outcome.update(admit_unvalidated(client, p["node"], module.check_mode))
            record(p["progress"], owner, outcome, module.check_mode)
            module.exit_json(changed=bool(outcome["actions"]) and not module.check_mode, passed=None, why="",
                             **outcome)
        validation = Validation.from_params(settings)
        client = slurm_client(p, module_run_function(module), check_mode=module.check_mode)
        if not module.check_mode:
            os.makedirs(validation.output_dir, mode=0o750, exist_ok=True)
        outcome = validate_node(
            client, validation, p["reason"], recorded_intent(p["progress"], owner),
            lambda ids: record_intent(p["progress"], owner, ids, module.check_mode), module.check_mode)
        outcome["evidence"] = None if module.check_mode else keep_output(validation, p["evidence_dir"])
        outcome["node"] = validation.node
        failed = outcome["passed"] is False
        record(p["progress"], owner, outcome, module.check_mode, stop=outcome["why"] if failed else None)
    except OSError as exc:
        module.fail_json(msg="cannot create output_dir %s: %s" % (p["output_dir"], exc.strerror), field="output_dir")
    except GpufleetError as exc:
        details = exc.details() if hasattr(exc, "details") else dict(field=getattr(exc, "field", None))
        module.fail_json(msg=str(exc), **details)
    module.exit_json(changed=bool(outcome["actions"]), **outcome)


if __name__ == "__main__":
    main()
