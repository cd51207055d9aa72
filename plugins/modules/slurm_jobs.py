#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_jobs
short_description: List the jobs on a Slurm node, or get them off it with a grace period to checkpoint
version_added: 0.3.0
description:
  - O(state=listed) returns the jobs running on the node (also suspended or completing); it changes nothing.
  - O(state=evacuated) gets every job off the node. Each job gets O(signal) with
    C(scancel --signal=<signal> --full <job>) (without C(--full) the batch script is not signalled),
    once; a job already completing is not signalled. The module then looks every O(poll) seconds
    until no job is on the node any more, or O(grace) passes. A job that saved a checkpoint and exited
    with a C(RequeueExit) code is requeued by slurmctld itself and has left.
  - After the grace, each job still on the node is requeued (C(scontrol requeue)) when it is
    requeueable and cancelled (C(scancel)) otherwise, or cancelled with O(then=cancel). A job whose
    requeue flag Slurm does not report is treated as requeueable, Slurm's default (C(JobRequeue=1));
    if slurmctld refuses to requeue it (it is not a batch job), it is cancelled.
  - Last, each job's state is read once more and reported with its fate. A requeueable job the signal
    ended V(FAILED) (its shell died of it, so slurmctld did not requeue it) is requeued then; one that
    exited with a C(RequeueExit) code (read from C(scontrol show config)) is left to slurmctld, which
    requeues it, though 22.05 may still list it as V(FAILED) for a moment.
  - The node itself is not touched; fence it first with M(gpufleet.resilience.slurm_node)
    (O(gpufleet.resilience.slurm_node#module:state=drain)), so requeued jobs start elsewhere.
  - With O(slurm_api=rest) the same calls go to slurmrestd (signal
    C(DELETE .../job/<id>?signal=<signal>&flags=FULL_JOB), requeue C(POST .../jobs/requeue), which needs data parser
    v0.0.45, Slurm 26.05), with no Slurm command on the host; give the cluster's C(RequeueExit) codes as
    O(rest_requeue_exit).
  - Works with Slurm 22.05 (Debian bookworm), 24.11 (Debian trixie) and 26.05 (Debian forky). Job ids such as C(12_3)
    (array tasks) work.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.attributes
  - gpufleet.resilience.remediation_phase
  - gpufleet.resilience.slurm_api
  - gpufleet.resilience.slurm_api.rest
options:
  node:
    description:
      - The node, one name (never a host list). Slurm must know it, or the module fails.
    type: str
    required: true
  state:
    description:
      - V(listed) reads the node's jobs; V(evacuated) gets them off the node.
      - V(signalled) only sends O(signal) to the node's jobs (but those in O(skip_signal)) and returns at once, so a
        caller can record which jobs got it before it waits with V(evacuated) and O(skip_signal).
    type: str
    default: listed
    choices: [listed, signalled, evacuated]
  signal:
    description:
      - The signal each job gets first, by name (V(TERM), V(USR1)) or number.
    type: str
    default: TERM
  grace:
    description:
      - Seconds the jobs get to checkpoint and leave after the signal, before they are requeued or cancelled.
      - It should be shorter than Slurm's C(KillWait) only if the jobs need no more than it to checkpoint.
    type: float
    default: 120
  poll:
    description:
      - Seconds between two looks at the node's jobs during the grace.
    type: float
    default: 1
  then:
    description:
      - What happens to jobs still on the node after the grace.
      - V(requeue) requeues the requeueable ones and cancels the rest; V(cancel) cancels all of them.
    type: str
    default: requeue
    choices: [requeue, cancel]
  return_after:
    description:
      - With O(state=evacuated), seconds this call waits at most. When they pass before the grace does and jobs
        are still on the node, it returns RV(done=false) with those jobs and RV(grace_left), requeues and cancels
        nothing, and the caller says where the wait is and calls again with O(grace_started) (and O(skip_signal)
        or O(progress)), so a long grace prints progress instead of one line at its end.
      - Omit to wait the whole grace in one call.
    type: float
  grace_started:
    description:
      - With O(state=evacuated), when the grace began (RV(grace_started) of the first call, seconds since the
        epoch), so that a grace waited in slices ends when one call's would have.
      - Omit on the first call.
    type: float
  job_ids:
    description:
      - Only these jobs of the node are listed, signalled, waited for, requeued or cancelled; the node's other
        jobs are not touched. A remediation of a stalled job (plan C(JOB_HANG)) names that job here.
      - Omit for every job on the node. A job named here that is not on the node is no error (it has left).
    type: list
    elements: str
  only_requeueable:
    description:
      - Only jobs that may be requeued are signalled, requeued or cancelled; a job that may not be requeued is not
        touched and is reported with RV(jobs[].fate=kept). A remediation of a stalled job (plan C(JOB_HANG)) sets
        it - a job that cannot come back is its owner's to end.
    type: bool
    default: false
  skip_signal:
    description:
      - Ids of jobs an earlier run of the same remediation has signalled already (its RV(signalled)).
        They are not signalled again, so a rerun after a crash signals each job at most once; they are
        still waited for, requeued or cancelled.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details:
      - Reads the jobs and reports what it would signal, requeue and cancel, with the commands in
        RV(command); runs none of them and does not wait.
      - Each job's RV(jobs[].fate) is the one it would get if it did not leave within the grace.
  diff_mode:
    support: none
notes:
  - With O(progress) (phase V(jobs), O(state=evacuated)), the jobs signalled are recorded as the phase's intent
    before the wait, and the jobs an earlier run of the same remediation recorded are not signalled again
    (as if they were in O(skip_signal)); the outcome recorded is C(jobs), C(signalled) (every run's) and C(waited_s).
  - A failure halfway (slurmctld stops answering) fails the task with RV(signalled) and RV(command) so far,
    so the rerun can pass them as O(skip_signal).
seealso:
  - module: gpufleet.resilience.slurm_node
  - module: gpufleet.resilience.slurm_node_info
  - name: scancel manual
    description: C(--signal) and C(--full).
    link: https://slurm.schedmd.com/scancel.html
"""

EXAMPLES = r"""
- name: What runs on the node
  gpufleet.resilience.slurm_jobs:
    node: gpu-a-003
  register: on_node

- name: Let the jobs checkpoint for up to two minutes, then requeue or cancel the rest
  gpufleet.resilience.slurm_jobs:
    node: gpu-a-003
    state: evacuated
    grace: 120
  register: evacuation

- name: Rerun after a crash without signalling a job twice
  gpufleet.resilience.slurm_jobs:
    node: gpu-a-003
    state: evacuated
    skip_signal: "{{ evacuation.signalled }}"
"""

RETURN = r"""
jobs:
  description:
    - With O(state=listed), the jobs on the node as M(gpufleet.resilience.slurm_node_info) returns them
      (C(job_id), C(name), C(state), C(flags), C(reason), C(nodelist), C(nodes), C(partition), C(user),
      C(requeue), C(restarts), C(batch_host), C(exit_code) - the batch script's exit code once it has
      exited, else V(null)).
    - With O(state=evacuated), each job that was on the node and its fate (below).
  returned: success
  type: list
  elements: dict
  contains:
    job_id:
      description: Job id.
      returned: always
      type: str
      sample: "42"
    name:
      description: Job name.
      returned: always
      type: str
      sample: train
    signalled:
      description: Whether this run signalled the job.
      returned: when O(state=evacuated)
      type: bool
      sample: true
    fate:
      description:
        - V(left) when it left the node by itself (finished, or requeued by slurmctld after a C(RequeueExit) code);
          V(requeued) or V(cancelled) when the module requeued or cancelled it after the grace; V(kept) when
          O(only_requeueable) left it alone.
      returned: when O(state=evacuated)
      type: str
      sample: left
    state:
      description: The job's state now (V(PENDING) after a requeue, V(RUNNING) elsewhere, V(COMPLETED), ...);
        V(null) when Slurm no longer lists it.
      returned: always
      type: str
      sample: PENDING
    requeue:
      description: Whether the job may be requeued; V(null) when Slurm did not say.
      returned: always
      type: bool
      sample: true
    note:
      description: Something unusual about the job's fate (a refused requeue), or V(null).
      returned: when O(state=evacuated)
      type: str
      sample: null
done:
  description:
    - V(false) when O(return_after) passed before the grace and jobs are still on the node (their RV(jobs[].fate)
      is V(null)); call again with O(grace_started). V(true) otherwise.
  returned: with O(state=evacuated)
  type: bool
  sample: true
grace_started:
  description: When the grace began, seconds since the epoch; pass it as O(grace_started) to the next call.
  returned: with O(state=evacuated)
  type: float
  sample: 1764842400.5
grace_left:
  description: Seconds of grace left when the call returned (V(0) once it is over).
  returned: with O(state=evacuated)
  type: float
  sample: 42.0
signalled:
  description: Ids of the jobs this run signalled (in check mode, would signal); pass them as O(skip_signal) on a rerun.
  returned: success
  type: list
  elements: str
  sample: ["42"]
waited:
  description: Seconds spent waiting for the jobs to leave.
  returned: success
  type: float
  sample: 1.02
command:
  description: The commands run (in check mode, that would run), in order.
  returned: success
  type: list
  elements: list
  sample: [[scancel, --signal=TERM, --full, "42"]]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.phase_record import (
    progress_argspec,
    record,
    record_intent,
    recorded_intent,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import SLURM_API_ARGS, slurm_client
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.evacuate import slurm_jobs
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import module_run_function


def argspec():
    return dict(
        node=dict(type="str", required=True),
        state=dict(type="str", default="listed", choices=["listed", "signalled", "evacuated"]),
        signal=dict(type="str", default="TERM"),
        grace=dict(type="float", default=120),
        poll=dict(type="float", default=1),
        then=dict(type="str", default="requeue", choices=["requeue", "cancel"]),
        skip_signal=dict(type="list", elements="str", default=[]),
        job_ids=dict(type="list", elements="str"),
        only_requeueable=dict(type="bool", default=False),
        return_after=dict(type="float"),
        grace_started=dict(type="float"),
        **SLURM_API_ARGS,
        **progress_argspec(),
    )


def evacuate_and_record(module, client):
    """The remediation's jobs phase in one run: skip what an earlier run signalled, record what
    this one signals before the wait, record the outcome after."""
    p = module.params
    earlier = recorded_intent(p["progress"], p["node"])
    skip = sorted(set(p["skip_signal"]) | set(earlier))

    def signalled_now(ids):
        record_intent(p["progress"], p["node"], earlier + [job for job in ids if job not in earlier], module.check_mode)

    result = slurm_jobs(client, p["node"], "evacuated", signal=p["signal"], grace=p["grace"], poll=p["poll"],
                        then=p["then"], skip_signal=skip, return_after=p["return_after"],
                        grace_started=p["grace_started"], on_signalled=signalled_now, job_ids=p["job_ids"],
                        only_requeueable=p["only_requeueable"])
    if not result["done"]:
        return result  # a slice of the grace: the phase is done on the last one
    every = earlier + [job for job in result["signalled"] if job not in earlier]
    record(p["progress"], p["node"], {"jobs": result["jobs"], "signalled": every, "waited_s": result["waited"]},
           module.check_mode)
    return result


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    p = module.params
    try:
        client = slurm_client(p, module_run_function(module), check_mode=module.check_mode)
        if p["progress"] and p["state"] == "evacuated":
            result = evacuate_and_record(module, client)
        else:
            slices = dict(return_after=p["return_after"], grace_started=p["grace_started"]) \
                if p["state"] == "evacuated" else {}
            result = slurm_jobs(client, p["node"], p["state"], signal=p["signal"], grace=p["grace"], poll=p["poll"],
                                then=p["then"], skip_signal=p["skip_signal"], job_ids=p["job_ids"],
                                only_requeueable=p["only_requeueable"], **slices)
    except GpufleetError as exc:
        details = exc.details() if hasattr(exc, "details") else dict(field=getattr(exc, "field", None))
        module.fail_json(msg=str(exc), **details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
