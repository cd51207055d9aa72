"""The remediation's Slurm modules with ``slurm_api: rest`` against the Slurm-only 26.05 lab's real
slurmrestd and slurmctld, through ansible-playbook: slurm_node fences with a reason and keeps a
foreign fence, slurm_jobs gets a job off the node (SIGTERM to the whole job, then the requeue of the
job the signal ended), slurm_node resumes, node_validate validates a node in a reservation of it.
The same modules with the CLI are tests/integration/remediation/test_slurm_modules.py on the test
lab.

Every test leaves the cluster as it found it: nodes resumed, jobs cancelled.
"""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml
from lab_harness import VENV_BIN
from slurm_clusters import REASON, SlurmCluster, wait_for

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import SlurmRunner

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def cluster(slurm_lab) -> SlurmCluster:
    return SlurmCluster(lab=slurm_lab, version="26.05")


@pytest.fixture(scope="module")
def rest_options(slurm_lab) -> Dict[str, Any]:
    """What an inventory gives the modules on a Slinky site: slurmrestd's URL and the JWT key."""
    return {"slurm_api": "rest", "rest_url": "http://127.0.0.1:%d" % slurm_lab.extra_vars["slurm_slurmrestd_port"],
            "rest_jwt_key_file": str(slurm_lab.lab_dir / "slurm" / "jwt" / "jwt_hs256.key")}


@pytest.fixture(scope="module")
def cli(slurm_lab) -> SlurmClient:
    return SlurmClient(SlurmRunner(slurm_conf=str(slurm_lab.slurm_conf), bin_dir=str(slurm_lab.lab_dir / "bin"),
                                   timeout=30))


def run_tasks(cluster: SlurmCluster, tmp_path: Path, tasks: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Run ``tasks`` (each registers its name) with ansible-playbook; the registered results."""
    out = tmp_path / "results.json"
    names = [task["register"] for task in tasks]
    saved = "{{ {%s} | to_json }}" % ", ".join("'%s': %s" % (name, name) for name in names)
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Slurm modules through slurmrestd", "hosts": "localhost", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "tasks": [*tasks, {"name": "Save", "ansible.builtin.copy": {"content": saved, "dest": str(out)}}],
    }]))
    done = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)],
                          env=cluster.lab.env(), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "jwt_hs256" not in json.dumps(json.loads(out.read_text())).replace(str(cluster.lab.lab_dir), "")
    return json.loads(out.read_text())


def test_fence_evacuate_and_resume_through_slurmrestd(cluster, rest_options, cli, tmp_path):
    """XID 79's Slurm part with no Slurm command: drain, SIGTERM the job, requeue it when the signal
    ended it FAILED, see it start on another node, resume."""
    # Not pinned (--nodelist would hold the requeued job for its fenced node): the node is where it starts.
    job = cluster.command("sbatch", "--parsable", "--requeue", "--output=/dev/null", "--chdir=/tmp",
                          "--job-name=rest-victim", "--wrap", "sleep 600").strip()
    node = None
    try:
        wait_for("job %s running" % job, lambda: any(j.job_id == job and j.state == "RUNNING" for j in cli.jobs()),
                 timeout=60)
        node = next(j for j in cli.jobs() if j.job_id == job).nodes[0]
        results = run_tasks(cluster, tmp_path, [
            {"name": "Fence", "gpufleet.resilience.slurm_node": dict(
                rest_options, name=node, state="drain", reason=REASON), "register": "fence"},
            {"name": "Fence again", "gpufleet.resilience.slurm_node": dict(
                rest_options, name=node, state="drain", reason=REASON), "register": "again"},
            {"name": "Evacuate", "gpufleet.resilience.slurm_jobs": dict(
                rest_options, node=node, state="evacuated", grace=5, poll=0.5, rest_requeue_exit=[75]),
             "register": "evacuate"},
            {"name": "Listed after", "gpufleet.resilience.slurm_jobs": dict(rest_options, node=node),
             "register": "after"},
        ])
        assert results["fence"]["changed"] and not results["again"]["changed"]
        assert results["fence"]["command"][:2] == ["POST", rest_options["rest_url"] + "/slurm/v0.0.45/node/" + node]
        fenced = cli.nodes([node], with_jobs=False)[node]
        assert "DRAIN" in fenced.flags and fenced.reason == REASON

        evacuated = results["evacuate"]
        fates = {fate["job_id"]: fate for fate in evacuated["jobs"]}
        assert fates[job]["signalled"] and fates[job]["fate"] == "requeued", evacuated
        assert evacuated["signalled"] == [job] and results["after"]["jobs"] == []
        assert [argv[0] for argv in evacuated["command"]] == ["DELETE", "POST"], evacuated["command"]
        # Requeued, it starts again on a node that is not fenced.
        wait_for("job %s running elsewhere" % job, lambda: any(
            j.job_id == job and j.state == "RUNNING" and node not in j.nodes for j in cli.jobs()), timeout=90)

        resumed = run_tasks(cluster, tmp_path, [
            {"name": "Resume", "gpufleet.resilience.slurm_node": dict(rest_options, name=node, state="resume"),
             "register": "resume"}])
        assert resumed["resume"]["changed"]
        wait_for("%s back in service" % node, lambda: not cli.nodes([node], with_jobs=False)[node].flags)
    finally:
        cluster.command("scancel", job)
        if node is not None and "DRAIN" in cli.nodes([node], with_jobs=False)[node].flags:
            cluster.command("scontrol", "update", "NodeName=%s" % node, "State=RESUME")


def test_a_foreign_fence_is_kept_and_a_cli_option_refused_with_rest(cluster, rest_options, cli, tmp_path):
    node = "%s-002" % cluster.pool["name"]
    cluster.command("scontrol", "update", "NodeName=%s" % node, "State=DRAIN", "Reason=disk replaced by ops")
    try:
        results = run_tasks(cluster, tmp_path, [
            {"name": "Resume someone else's drain", "gpufleet.resilience.slurm_node": dict(
                rest_options, name=node, state="resume"), "register": "resume"},
            {"name": "A CLI option with rest", "gpufleet.resilience.slurm_node": dict(
                rest_options, name=node, state="resume", slurm_conf="/etc/slurm/slurm.conf"),
             "register": "mixed", "ignore_errors": True},
            {"name": "Evacuate a node that is not known", "gpufleet.resilience.slurm_jobs": dict(
                rest_options, node="gpu-z-999", state="evacuated", grace=1, rest_requeue_exit=[]),
             "register": "unknown", "ignore_errors": True},
        ])
        assert not results["resume"]["changed"] and results["resume"]["action"] == "kept_foreign"
        assert results["mixed"]["failed"] and results["mixed"]["field"] == "slurm_conf"
        assert results["unknown"]["failed"] and "gpu-z-999" in results["unknown"]["msg"]
        assert cli.nodes([node], with_jobs=False)[node].reason == "disk replaced by ops"
    finally:
        cluster.command("scontrol", "update", "NodeName=%s" % node, "State=RESUME")


def test_a_node_is_validated_in_a_reservation_made_through_slurmrestd(cluster, rest_options, cli, tmp_path):
    """node_validate with no Slurm command: the maintenance reservation made and deleted through
    slurmrestd, the node resumed into it, the lab's all_reduce_perf run there as a job in it, and the
    node drained again with the fence's reason. The GPUs are a fake NVML state directory of this
    test's own beside a copy of the lab's all_reduce_perf_sim (this lab has Slurm alone)."""
    node = "%s-003" % cluster.pool["name"]
    lab = tmp_path / "lab"
    (lab / "bin").mkdir(parents=True)
    for name in ("all_reduce_perf_sim", "lab_gpu_state.py"):  # the stand-in and the module it reads GPUs with
        (lab / "bin" / name).write_bytes((cluster.bin_dir / name).read_bytes())
    sim = lab / "bin" / "all_reduce_perf_sim"
    sim.chmod(0o755)
    fake_gpu_state.init(str(lab / "gpus" / node), 8, node, "NVIDIA-H100-80GB-HBM3")
    output_dir = tmp_path / "validation"
    output_dir.mkdir(mode=0o777)
    output_dir.chmod(0o777)  # the job's user writes there
    validate = dict(rest_options, node=node, remediation_id="r-20261207T120000-%s-0a1b2c" % node, reason=REASON,
                    backend="nccl_tests", min_busbw_gbps=150, nccl_tests=str(sim), output_dir=str(output_dir))
    cluster.command("scontrol", "update", "NodeName=%s" % node, "State=DRAIN", "Reason=%s" % REASON)
    try:
        results = run_tasks(cluster, tmp_path, [
            {"name": "Validate, check mode", "gpufleet.resilience.node_validate": validate, "check_mode": True,
             "register": "checked"},
            {"name": "Validate", "gpufleet.resilience.node_validate": validate, "register": "validated"},
        ])
        assert results["checked"]["passed"] is None and not results["checked"].get("job_id")
        validated = results["validated"]
        assert validated["passed"] is True and validated["verdict"] == "ok", validated
        assert validated["busbw_gbps"] > 150 and validated["job_id"], validated
        assert validated["actions"][:2] == ["reserved %s for %s" % (node, getpass.getuser()),
                                            "resumed %s into the reservation" % node], validated["actions"]
        assert "-g 8" in validated["actions"][2] and validated["actions"][-1].startswith("deleted reservation")
        assert "# Avg bus bandwidth" in Path(validated["output"]).read_text()
        # Fenced again with the fence's own reason (so the remediation's resume lifts it), no reservation left.
        drained = cli.nodes([node], with_jobs=False)[node]
        assert "DRAIN" in drained.flags and drained.reason == REASON, drained
        assert validated["reservation"] not in cluster.command("scontrol", "show", "reservation")
    finally:
        cluster.command("scontrol", "update", "NodeName=%s" % node, "State=RESUME")
