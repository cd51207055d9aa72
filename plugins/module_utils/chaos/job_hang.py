# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A job that hangs: the protected job's rank stops, holding its GPUs without failing.

One experiment, ``job_hang``, one backend, ``slurm``: ``scancel --signal=STOP --batch --full <job>``
stops every process of the job's batch step (its rank on the batch host), as a rank stuck in a
collective or in uninterruptible I/O would look from outside: the process is there, Slurm says
RUNNING, NVML sees nothing, and only its progress stops. The health agent calls the job stalled
after the job's window (``gpufleet_job_stalled``, ``GpuJobStalled``; docs/agent.md, "Job progress").

Rollback is ``scancel --signal=CONT --batch --full <job>``: the rank goes on from the step where it
stopped. A job that ended or was requeued since has nothing left to resume (Slurm's cancel and
requeue send SIGCONT themselves before SIGTERM). The job must run on the drill's target: a stopped
rank elsewhere would be another node's fault, so any other placement is refused before anything is
signalled. It acts only through Slurm (its API or its commands), never on the node's host.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext, context_slurm
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import check_job_ids, unless_gone
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import AnySlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmJob

BACKENDS = ("slurm",)


def _params(spec: Mapping[str, Any]) -> Dict[str, Any]:
    params = dict(experiments.get(spec["experiment"]).params)
    params.update(spec.get("params") or {})
    if not params.get("job_id"):
        raise FieldError("params.job_id", "is required: the job whose rank stops (the drill's protected_job)")
    params["job_id"] = check_job_ids([params["job_id"]], "params.job_id")[0]
    return params


def _backend(spec: Mapping[str, Any]) -> str:
    chosen = spec.get("backend") or "default"
    if chosen not in ("default", "slurm"):
        raise FieldError("backend", "unknown job hang backend %r; backends: %s" % (chosen, ", ".join(BACKENDS)))
    return "slurm"


def _running_on_target(client: AnySlurmClient, job_id: str, node: str) -> SlurmJob:
    job: Optional[SlurmJob] = next((j for j in client.jobs() if j.job_id == job_id), None)
    if job is None or job.state != "RUNNING":
        raise FieldError("params.job_id", "job %s is %s, not RUNNING: nothing to stop" % (
            job_id, job.state if job is not None else "not in the queue"))
    if (job.batch_host or (job.nodes[0] if job.nodes else None)) != node:
        raise FieldError("params.job_id", "job %s runs its batch step on %s, not on the target %s: stopping it would "
                                          "be another node's fault" % (job_id, job.batch_host or "-", node))
    return job


# -- the family interface ----------------------------------------------------------------------
def plan(spec: Mapping[str, Any]) -> Dict[str, Any]:
    params = _params(spec)
    backend = _backend(spec)
    return {"actions": ["%s: scancel --signal=STOP --batch --full %s (the job's rank there stops; the job stays "
                        "RUNNING)" % (spec["node"], params["job_id"]),
                        "%s: rollback: scancel --signal=CONT --batch --full %s" % (spec["node"], params["job_id"])],
            "simulated": [], "missing": [], "backends": [backend], "params": params, "resolved": {}}


def inject(spec: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    params = _params(spec)
    _backend(spec)
    client = context_slurm(ctx)
    job = _running_on_target(client, params["job_id"], spec["node"])
    undo: Dict[str, Any] = {"backends": ["slurm"], "experiment": spec["experiment"], "job_id": job.job_id,
                            "batch_host": job.batch_host}
    if ctx.check_mode:
        undo["check_mode"] = True
        return undo
    stopped = client.signal_jobs([job.job_id], signal="STOP", full=True, batch=True)
    undo["commands"] = [list(stopped.argv)]
    return undo


def revert(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """``undo`` is the spec merged with what inject returned (only the spec after a crash mid-inject:
    SIGCONT is harmless to a rank that was never stopped, so it is sent then too)."""
    reverted: List[str] = []
    job_id = undo.get("job_id") or (undo.get("params") or {}).get("job_id")
    if not job_id or undo.get("check_mode"):
        return {"reverted": reverted, "already": True}
    client = context_slurm(ctx)
    resumed = unless_gone(lambda: client.signal_jobs([job_id], signal="CONT", full=True, batch=True))
    if resumed is None:
        return {"reverted": reverted, "already": True, "note": "job %s has ended: nothing to resume" % job_id}
    reverted.append("job %s: SIGCONT to its batch step" % job_id)
    return {"reverted": reverted, "already": False, "commands": [list(resumed.argv)]}
