# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""What an incident cost, in GPU-hours: the figure a site weighs its breaker and escalation
settings against (docs/remediation.md, "What an incident cost"). Pure.

Each part is a count of GPUs times hours, from the fault (the ``GpuHealthy`` condition's last
transition, else the remediation's start):

* ``node``: the node's GPUs until it is back in service (the end of ``resume``) or a spare has taken
  its place (the end of ``admit``, where the spare was validated, else of a ``replace`` that named one);
* ``waiting``: each job moved off the node, its GPUs until it runs again (its start as Slurm gives it
  when the record is written);
* the work a job does again, from its last checkpoint to when it left: none for a job that left
  within the grace after our signal, as it checkpointed on it (what a job script must do,
  docs/remediation.md). A job requeued or cancelled by force after the grace lost the work since its
  last checkpoint, which only the job knows: it is named in ``unknown``, never guessed.

What has not ended when the record is written (a node held or stopped, a job still pending or
cancelled) is counted up to then, and the part is ``open``: the figure is a floor, and says so.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.evacuate import LEFT

HOUR = 3600.0


def fault_time(record: Mapping[str, Any]) -> float:
    """When the fault began: the condition's transition, else the remediation's start."""
    since = (record.get("fault") or {}).get("since")
    return float(since) if since else float(record.get("started_at") or 0)


def _phase_ends(record: Mapping[str, Any]) -> Dict[str, Any]:
    return {entry["phase"]: entry for entry in record.get("timeline") or [] if entry.get("end")}


def back_in_service(record: Mapping[str, Any]) -> Optional[float]:
    """When the node's capacity was back: its resume, or a spare in its place; None: still out."""
    ends = _phase_ends(record)
    if "resume" in ends:
        return float(ends["resume"]["end"])
    replaced = ends.get("replace")
    if not (replaced and (replaced.get("outcome") or {}).get("replacement")):
        return None
    admitted = ends.get("admit")
    if admitted:  # the spare took work once admitted; one that failed its validation did not
        return None if (admitted.get("outcome") or {}).get("passed") is False else float(admitted["end"])
    return float(replaced["end"])


def _hours(gpus: Optional[int], start: float, end: float) -> float:
    return (gpus or 0) * max(0.0, end - start) / HOUR


def incident_cost(record: Mapping[str, Any], node_gpus: Optional[int], jobs_now: Mapping[str, Mapping[str, Any]],
                  now: float) -> Dict[str, Any]:
    """The cost of the remediation ``record`` (an audit record less its cost).

    ``node_gpus``: the node's GPUs (None: not known, the node part is 0 and named in ``unknown``);
    ``jobs_now``: job id -> ``{state, start_time}`` as Slurm has each moved job now; ``now``: when the
    record is written."""
    began = fault_time(record)
    unknown: List[str] = []
    open_parts: List[str] = []

    back = back_in_service(record)
    plan = record.get("plan") or {}
    if back is None and (plan.get("acts") is False or plan.get("name") in ("RESTART_APP", "IGNORE", "JOB_HANG")):
        back = began  # a plan that does nothing to the node: it never left service
    if back is None:
        open_parts.append("node")
    if node_gpus is None:
        unknown.append("the node's GPU count")
    node = _hours(node_gpus, began, back if back is not None else now)

    left = float((_phase_ends(record).get("jobs") or {}).get("end") or now)
    waiting = 0.0
    jobs = []
    for fate in record.get("jobs") or []:
        job_id, gpus = str(fate.get("job_id")), fate.get("gpus")
        if gpus is None:
            unknown.append("the GPUs of job %s" % job_id)
        seen = jobs_now.get(job_id) or {}
        restarted = seen.get("start_time")
        # A start before the job left is its old run, not a new one.
        again = float(restarted) if restarted and float(restarted) >= left - 1 else None
        if again is None:
            open_parts.append("job %s" % job_id)
        waited = _hours(gpus, began, again if again is not None else now)
        # "left": it left the node by itself within the grace (evacuate.py).
        if fate.get("signalled") and fate.get("fate") != LEFT:
            unknown.append("the work job %s did since its last checkpoint (it did not leave within the grace)"
                           % job_id)
        waiting += waited
        jobs.append({"job_id": job_id, "gpus": gpus, "running_again_at": again, "waiting_gpu_hours": round(waited, 4)})

    return {
        "gpu_hours_lost": round(node + waiting, 4),
        "node_gpu_hours": round(node, 4),
        "waiting_gpu_hours": round(waiting, 4),
        "fault_at": began,
        "back_in_service_at": back,
        "node_gpus": node_gpus,
        "jobs": jobs,
        "open": open_parts,
        "unknown": unknown,
    }


def cost_text(cost: Mapping[str, Any]) -> str:
    """``12.30 GPU-hours lost (node 10.20, jobs waiting 2.10)``, ``at least`` first when a part is open."""
    floor = "at least " if cost.get("open") or cost.get("unknown") else ""
    return "%s%.2f GPU-hours lost (node %.2f, jobs waiting %.2f)" % (
        floor, cost["gpu_hours_lost"], cost["node_gpu_hours"], cost["waiting_gpu_hours"])
