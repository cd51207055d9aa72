"""The remediation on Slurm 26.05: Kubernetes is the test lab's API server, Slurm is the Slurm-only 26.05
lab, reached through its slurmrestd alone (``remediation_slurm_api: rest``, as on a Slinky site where
the machine running it has no Slurm command and no munge key) or through its commands (``cli``, the
remediation suite's transport, which runs whole on the test lab's 22.05).

The node names are the same in both (the same pool layout), so one remediation fences the node in the
26.05 Slurm, quarantines it in Kubernetes, signals the training job on it, sees it checkpoint and be
requeued, and the job resumes from its checkpoint on another node. The test lab's own Slurm (22.05)
is never touched: the playbook had no way to reach it but its CLI, which rest does not use.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List

import pytest
from remediation_probe import Fleet
from slurm_clusters import SlurmCluster, wait_for

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import SlurmRunner

pytestmark = [pytest.mark.integration, pytest.mark.lab]

RESTART_BM = ["fence", "quarantine", "notify", "jobs", "down", "opt_out", "drain", "evidence", "replace", "admit",
              "record"]


def rest_settings(slurm_lab) -> Dict[str, Any]:
    """remediation_slurm_rest for the 26.05 lab: what an inventory gives for a Slinky release's RestApi."""
    return {"url": "http://127.0.0.1:%d" % slurm_lab.extra_vars["slurm_slurmrestd_port"],
            "jwt_key_file": str(slurm_lab.lab_dir / "slurm" / "jwt" / "jwt_hs256.key"),
            "requeue_exit": [75]}


def submit_train_sim(cluster: SlurmCluster, workdir: Path) -> str:
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o777)
    return cluster.command(
        "sbatch", "--parsable", "--requeue", "--open-mode=append", "--output=%s" % (workdir / "train.out"),
        str(cluster.bin_dir / "train_sim"), "--checkpoint-dir", str(workdir / "ckpt"), "--steps", "100000",
        "--checkpoint-every", "20", "--step-seconds", "0.02").strip()


def events(workdir: Path, name: str) -> List[str]:
    out = workdir / "train.out"
    return [line for line in (out.read_text() if out.exists() else "").splitlines() if line.startswith(name + " ")]


def slurm_settings(api: str, slurm_lab, cluster: SlurmCluster) -> Dict[str, Any]:
    if api == "rest":
        return {"remediation_slurm_api": "rest", "remediation_slurm_rest": rest_settings(slurm_lab)}
    return {"remediation_slurm_api": "cli", "remediation_slurm_conf": str(slurm_lab.slurm_conf),
            "remediation_slurm_bin_dir": str(cluster.bin_dir)}


@pytest.mark.parametrize("api", ["rest", "cli"])
def test_xid79_is_remediated_on_slurm_26_05_and_the_job_resumes_elsewhere(fleet: Fleet, slurm_lab, tmp_path, api):
    cluster = SlurmCluster(lab=slurm_lab, version="26.05")
    slurm = SlurmClient(SlurmRunner(slurm_conf=str(slurm_lab.slurm_conf), bin_dir=str(cluster.bin_dir), timeout=30))
    workdir = tmp_path / "job"
    job = submit_train_sim(cluster, workdir)
    host_slurm_before = fleet.slurm_states()
    node = None
    try:
        wait_for("train_sim running and stepping", lambda: bool(events(workdir, "step")) and any(
            j.job_id == job and j.state == "RUNNING" for j in slurm.jobs()), timeout=60)
        node = next(j for j in slurm.jobs() if j.job_id == job).nodes[0]
        assert fleet.kube_node(node) is not None, "%s is not a node of the test lab's Kubernetes" % node
        time.sleep(1.0)  # a checkpoint or two before the fault

        run = fleet.remediate(node, **slurm_settings(api, slurm_lab, cluster),
                              remediation_fault={"action": "RESTART_BM", "reason": "Xid79", "xid": 79, "gpu_index": 2},
                              remediation_provider="none", remediation_grace=20)
        assert run.rc == 0, run.output[-4000:]
        record = [r for r in fleet.audit(node) if r["result"] == "succeeded"][-1]
        assert [step["phase"] for step in record["timeline"]] == RESTART_BM

        # Slurm 26.05: fenced with our reason, then down.
        fenced = slurm.nodes([node], with_jobs=False)[node]
        assert fenced.state == "DOWN" and fenced.reason.startswith("gpufleet:"), fenced
        # The job got SIGTERM once, checkpointed, was requeued, and resumes on another node from
        # the checkpoint it saved, not from step 0.
        interrupted = events(workdir, "interrupted")
        assert len(interrupted) == 1 and "signal=SIGTERM" in interrupted[0], (workdir / "train.out").read_text()[-2000:]
        wait_for("the job resumed on another node", lambda: any(
            j.job_id == job and j.state == "RUNNING" and node not in j.nodes for j in slurm.jobs())
            and bool(events(workdir, "resume")), timeout=120)
        resumed = events(workdir, "resume")[-1]
        assert "source=ckpt-" in resumed and int(resumed.split("step=")[1].split()[0]) > 0, resumed

        # Kubernetes (the test lab): quarantined, drained.
        kube = fleet.kube_node(node)
        assert kube["spec"].get("unschedulable") is True
        assert [t for t in kube["spec"].get("taints") or [] if t["key"] == "gpufleet.io/gpu-unhealthy"]
        # The test lab's own Slurm never heard of it.
        assert fleet.slurm_states() == host_slurm_before
    finally:
        cluster.command("scancel", job)
        for name, state in slurm.nodes(with_jobs=False).items():
            if state.state == "DOWN" or "DRAIN" in state.flags:
                cluster.command("scontrol", "update", "NodeName=%s" % name, "State=RESUME")
        if node is not None:
            fleet.heal(node)
