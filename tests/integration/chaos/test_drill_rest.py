"""Drills with ``chaos_drill_slurm_api: rest``, as on a Slinky site where the controller has no Slurm
command and no munge key: Kubernetes and the fake GPUs are the test lab's, Slurm is the Slurm-only
26.05 lab, reached through its slurmrestd alone (the node names are the same in both).

- gpu_burn with a neighbour job: the neighbour is submitted through job/submit, holds GPUs in the
  26.05 Slurm while the burn runs, and is cancelled through slurmrestd by the rollback.
- checkpoint_kill: steady state reads the protected job through slurmrestd, the kill is a SIGKILL to
  its batch step (flag BATCH_JOB), the requeue goes through jobs/requeue, and the job resumes from its
  previous valid checkpoint, never the torn one.

The test lab's own Slurm (22.05) is never touched: the drills had no way to reach it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List

import pytest
from drill_probe import Drills
from slurm_clusters import SlurmCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NODE = "gpu-a-003"
QUICK = {"chaos_drill_deadlines": {"detected": 30, "alerted": 3, "scheduler": 3, "recovered": 60},
         "chaos_drill_verify_timeout": 60}


def rest_vars(slurm_lab) -> Dict[str, Any]:
    """What an inventory gives a drill for a Slinky release's RestApi, and no Slurm command."""
    return {"chaos_drill_slurm_api": "rest", "chaos_drill_slurm_conf": "", "chaos_drill_slurm_bin_dir": "",
            "chaos_drill_slurm_rest": {
                "url": "http://127.0.0.1:%d" % slurm_lab.extra_vars["slurm_slurmrestd_port"],
                "jwt_key_file": str(slurm_lab.lab_dir / "slurm" / "jwt" / "jwt_hs256.key")}}


def events(output: Path, name: str) -> List[str]:
    return [line for line in (output.read_text() if output.exists() else "").splitlines()
            if line.startswith(name + " ")]


def test_drills_reach_slurm_only_through_slurmrestd(lab, slurm_lab, tmp_path):
    drills = Drills(lab)
    cluster = SlurmCluster(lab=slurm_lab, version="26.05")
    slurm = cluster.client()
    drills.opt_in([NODE])
    host_slurm_before = drills.slurm_states()
    workdir = tmp_path / "job"
    workdir.mkdir()
    workdir.chmod(0o777)
    output = workdir / "train.out"
    # Slow saves, so the kill lands mid-write.
    job = cluster.command(
        "sbatch", "--parsable", "--requeue", "--open-mode=append", "--nodelist=" + NODE, "--gres=gpu:1",
        "--output=%s" % output, str(cluster.bin_dir / "train_sim"), "--checkpoint-dir", str(workdir / "ckpt"),
        "--steps", "100000", "--checkpoint-every", "25", "--step-seconds", "0.02",
        "--checkpoint-write-seconds", "0.8").strip()
    try:
        wait_for("a first checkpoint", lambda: bool(events(output, "checkpoint")), timeout=90)
        common = dict(rest_vars(slurm_lab), protected_job=job, protected_output=str(output), **QUICK)

        # -- a burn with a neighbour job in the 26.05 Slurm -------------------------------------------
        burned = drills.drill("gpu_burn", NODE, seconds=60, gpus=[4, 5], neighbour_job=True, **common)
        assert burned.rc == 0, burned.output[-4000:]
        document = drills.report(burned)
        url = "http://127.0.0.1:%d/slurm/v0.0.45/" % slurm_lab.extra_vars["slurm_slurmrestd_port"]
        fault = document["faults"][0]
        assert fault["rollback"] == "done", fault
        # The neighbour held GPUs beside the protected job in the 26.05 Slurm, and the rollback
        # cancelled it there, through slurmrestd.
        cancels = [re.search(r"DELETE %sjob/(\d+)" % re.escape(url), action) for action in fault["actions"]]
        neighbour = [m.group(1) for m in cancels if m]
        assert len(neighbour) == 1, fault["actions"]
        ended = {j.job_id: j for j in slurm.jobs(states=["CANCELLED"])}
        assert neighbour[0] in ended and ended[neighbour[0]].nodes == (NODE,), slurm.jobs(states=None)
        assert ended[neighbour[0]].name.startswith("gpufleet-chaos-burn-"), ended[neighbour[0]]
        steady = {c["check"]: c["ok"] for c in document["phases"][1]["detail"]["checks"]}
        assert steady["slurm:%s" % NODE] and steady["protected_job"], document["phases"][1]

        # -- kill the job mid-save, through slurmrestd -----------------------------------------------------
        killed = drills.drill("checkpoint_kill", NODE, **common)
        assert killed.rc == 0, killed.output[-4000:]
        document = drills.report(killed)
        steps = {s["step"]: s["verdict"] for s in document["steps"]}
        assert steps["recovered"] == "pass", document["steps"]
        # SIGKILL to the batch step: no SIGTERM reached the job, so it saved nothing on the way out; it
        # resumed from the last checkpoint it finished, not the one it was writing.
        text = output.read_text()
        assert not events(output, "interrupted"), text[-2000:]
        first_run = text[:text.rfind("\nresume ")]
        torn = [int(s) for s in re.findall(r"checkpoint_begin time=\S+ step=(\d+)", first_run)][-1]
        resumed = [int(m) for m in re.findall(r"^resume .*step=(\d+)", text, re.M)]
        assert resumed and resumed[-1] < torn and resumed[-1] % 25 == 0, (resumed, torn)
        wait_for("the job running again", lambda: any(
            j.job_id == job and j.state == "RUNNING" for j in slurm.jobs()), timeout=60)
        # The test lab's own Slurm never heard of either drill.
        assert drills.slurm_states() == host_slurm_before
    finally:
        cluster.command("scancel", job)
        drills.opt_in([NODE], allowed=False)
