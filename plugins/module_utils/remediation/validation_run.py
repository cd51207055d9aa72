# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Running the validation on the fenced node (``validation.py`` says what runs and how it is judged).

Slurm never starts a job on a DRAIN node, reservation or not. So, in this order:

1. a maintenance reservation of the node, for the remediation's user alone
   (``Flags=MAINT,IGNORE_JOBS``, no end): from here on no other job can start there;
2. the node leaves DRAIN or DOWN (``State=RESUME``): it takes the reservation's jobs alone;
3. the validation job is submitted in the reservation, and its id recorded (the phase's intent)
   before anything waits: a rerun after a crash waits for that job, never submits a second;
4. the wait, bounded by the job's own limit; a job still there then is cancelled and fails;
5. the node is drained again, whatever the verdict (with the fence's reason when it passed, so
   ``resume`` lifts it; with ``gpufleet: validation failed: ...`` when it did not), and only then
   the reservation is deleted. A crash anywhere leaves the node drained or reserved: never open
   to work that has not passed. A replacement being admitted (``admit``) that passed is not
   drained again: with the reservation gone, it takes work.

Every step looks before it acts, so a rerun does only what is left. The caller records the
phase (``phase_record``).
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any, Callable, Dict, List, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.files import read_tail
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.validation import (
    Validation,
    failed_reason,
    judge,
    judge_auto,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.fence import SET, fenced, plan_node_state

OUTPUT_TAIL_BYTES = 1024 * 1024
POLL_S = 1.0


def validate_node(client: Any, validation: Validation, reason: str, intent: List[str],
                  record_intent: Callable[[List[str]], None], check_mode: bool = False,
                  clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                  ) -> Dict[str, Any]:
    """Run (or, after a crash, finish) the validation of ``validation.node``; returns the outcome the
    audit record keeps: ``passed``, ``why``, ``job_id``, ``output``, ``verdict``, ``slow``, ``actions``."""
    name = validation.name
    actions: List[str] = []
    outcome: Dict[str, Any] = {"backend": validation.backend, "reservation": name, "output": validation.output,
                               "job_id": intent[0] if intent else None, "actions": actions}
    if check_mode:
        actions += ["reserve %s for %s (%s)" % (validation.node, validation.user, name),
                    "resume %s into the reservation" % validation.node,
                    "run %s there and judge its output" % " ".join(validation.command()),
                    ("delete the reservation: %s takes work if it passed, else drain it" if validation.admit
                     else "drain %s again and delete the reservation") % validation.node]
        outcome.update(passed=None, why="check mode: nothing ran")
        return outcome
    job_id = outcome["job_id"]
    if job_id is None:
        if not client.reservation_exists(name):
            client.create_reservation(name, validation.node, validation.user)
            actions.append("reserved %s for %s" % (validation.node, validation.user))
        node = client.nodes([validation.node], with_jobs=False)[validation.node]
        # Fenced (drained, or DOWN after a remediation's down phase or an opt-out): out of the fence
        # and into the reservation. A node that is neither takes the reservation's jobs already.
        if fenced(node):
            client.set_node_state(validation.node, "RESUME")
            actions.append("resumed %s into the reservation" % validation.node)
        gpus = validation.gpus or node.gpus or None
        job_id = client.submit(validation.batch_job(gpus))[0]
        record_intent([str(job_id)])
        outcome["job_id"] = str(job_id)
        actions.append("submitted job %s: %s" % (job_id, " ".join(validation.command(gpus))))
    ended = wait_for_job(client, str(outcome["job_id"]), validation.limit_s, clock, sleep)
    if not ended:
        client.cancel_unless_gone(outcome["job_id"])
        actions.append("cancelled job %s after %d s" % (outcome["job_id"], validation.limit_s))
        verdict: Dict[str, Any] = {"passed": False, "verdict": "unknown", "slow": [], "gflops": [],
                                   "why": "the validation job did not end within %d s" % validation.limit_s}
    else:
        verdict = judge_output(validation)
    outcome.update(verdict)
    # passed None: backend auto found no tool on the node; nothing wrong was found, nothing was checked.
    failed = verdict["passed"] is False
    if failed or not validation.admit:
        drain_reason = failed_reason(reason, verdict["why"], validation.remediation_id) if failed else reason
        client.set_node_state(validation.node, "DRAIN", drain_reason)
        actions.append("drained %s: %s" % (validation.node, drain_reason))
    if client.delete_reservation(name) is not None:
        actions.append("deleted reservation %s" % name)
    if validation.admit and not failed:
        actions.append("admitted %s: it takes work%s" % (
            validation.node, "" if verdict["passed"] else " (not validated: %s)" % verdict.get("skipped")))
    return outcome


def admit_unvalidated(client: Any, node: str, check_mode: bool = False) -> Dict[str, Any]:
    """The admit phase with no validation backend: lift the fence the replacement came up with (ours
    alone: a reason that starts with ``gpufleet:``), so it takes work as it did before admit existed."""
    # The fence's own rule of whose fence it is: one definition of "ours" (slurm/fence.py).
    decision = plan_node_state(client.nodes([node], with_jobs=False)[node], "resume")
    if decision.action != SET or decision.foreign_reason is not None:
        return {"actions": []}
    if not check_mode:
        client.set_node_state(node, decision.write_state)
    return {"actions": ["resumed %s (no validation backend)" % node]}


def wait_for_job(client: Any, job_id: str, limit_s: float, clock: Callable[[], float],
                 sleep: Callable[[float], None]) -> bool:
    """True once the job is no longer pending or running; False when ``limit_s`` passed first."""
    deadline = clock() + limit_s
    while True:
        if not any(job.job_id == job_id for job in client.jobs()):
            return True
        if clock() >= deadline:
            return False
        sleep(POLL_S)


def judge_output(validation: Validation) -> Dict[str, Any]:
    try:
        text = read_tail(validation.output, OUTPUT_TAIL_BYTES).decode("utf-8", "replace")
    except OSError as exc:
        return {"passed": False, "verdict": "unknown", "slow": [], "gflops": [],
                "why": "the validation's output %s cannot be read on this host (%s): the output directory must be "
                       "shared with the node" % (validation.output, exc.strerror)}
    if validation.backend == "auto":
        return judge_auto(text, validation.min_ratio)
    return judge(text, validation.tool, validation.min_ratio, validation.min_busbw_gbps)


def keep_output(validation: Validation, evidence_dir: Optional[str]) -> Optional[str]:
    """A copy of the output in the remediation's evidence bundle (when it has one): what the vendor asks
    for when a node fails its burn. Returns the copy's path."""
    if not evidence_dir:
        return None
    bundle = os.path.join(evidence_dir, validation.remediation_id)
    if not os.path.isdir(bundle) or not os.path.isfile(validation.output):
        return None
    target = os.path.join(bundle, "validation.txt")
    try:
        shutil.copyfile(validation.output, target)
    except OSError as exc:
        raise GpufleetError("cannot copy the validation output into %s: %s" % (bundle, exc.strerror)) from exc
    return target
