"""The lab and one-click Slurm, against the real daemons: kube-apiserver + kwok, slurmctld + slurmd.

One session-scoped lab (4 GPU nodes x 8 GPUs, 2 spares) serves every test here.
Tests that change the lab (adding a pool) come last, in file order; the lab taken down and brought
back is done by the session right after its bring-up (conftest) and checked here.
"""

from __future__ import annotations

import json
import re
import time

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.lab]

POOL = "gpu-a"
ACTIVE = ["gpu-a-%03d" % n for n in range(1, 5)]
SPARES = ["gpu-a-005", "gpu-a-006"]


def ready(node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def sinfo_states(lab) -> dict:
    lines = lab.slurm("sinfo", "--Node", "--noheader", "--format=%N|%T").split()
    return dict(line.split("|", 1) for line in lines)


def test_kubernetes_has_the_gpu_nodes_ready(lab):
    nodes = {n.metadata.name: n for n in lab.kube().list_node(label_selector="gpufleet.io/pool=%s" % POOL).items}
    assert sorted(nodes) == ACTIVE
    for name, node in nodes.items():
        assert ready(node), name
        assert node.status.capacity["nvidia.com/gpu"] == "8"
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        labels = node.metadata.labels
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["topology.kubernetes.io/zone"] == "lab-zone-a"
        assert labels["gpufleet.io/rack"] and labels["gpufleet.io/block"]
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
    # 2 nodes per rack in the test lab: gpu-a-001/002 share a rack, 003 starts the next.
    rack = {name: node.metadata.labels["gpufleet.io/rack"] for name, node in nodes.items()}
    assert rack["gpu-a-001"] == rack["gpu-a-002"] != rack["gpu-a-003"]


def test_slurm_has_the_same_nodes_idle_and_spares_in_future(lab):
    states = sinfo_states(lab)
    assert {name: states.get(name) for name in ACTIVE} == {name: "idle" for name in ACTIVE}
    for spare in SPARES:
        # FUTURE nodes are hidden unless asked for.
        shown = lab.slurm("scontrol", "--future", "show", "node", spare)
        assert "State=FUTURE" in shown, shown
    gres = lab.slurm("scontrol", "show", "node", ACTIVE[0])
    assert re.search(r"Gres=gpu:8\b", gres), gres


def test_each_node_has_its_simulated_gpus(lab):
    for name in ACTIVE:
        state_dir = lab.lab_dir / "gpus" / name
        assert (state_dir / "node.state").is_file(), state_dir
        assert len(list(state_dir.glob("gpu*.state"))) == 8


def test_a_gpu_job_runs_on_a_lab_node_and_finishes(lab, tmp_path):
    out = lab.lab_dir / "storage" / "checkpoints" / ("pytest-job-%d.out" % time.time_ns())
    job = lab.slurm("sbatch", "--parsable", "--gres=gpu:1", "--output=%s" % out,
                    "--wrap", "echo node=$SLURMD_NODENAME gpus=$SLURM_GPUS_ON_NODE; echo done").strip()
    fields = lab.wait_job(job.split(";")[0])
    assert fields["JobState"] == "COMPLETED", fields
    assert fields["NodeList"] in ACTIVE
    text = out.read_text()
    assert "node=%s" % fields["NodeList"] in text
    assert "done" in text


def test_lab_status_shows_every_node(lab):
    status = lab.playbook("lab-status.yml")
    assert status.rc == 0, status.output[-4000:]
    for name in ACTIVE:
        line = next((ln for ln in status.output.splitlines() if name in ln and "Ready" in ln), None)
        assert line is not None, status.output[-4000:]
        assert "idle" in line and "healthy" in line, line


def test_fleet_status_shows_quarantine_hold_and_the_remediation_under_way(lab, tmp_path):
    # gpu-a-004 as a remediation leaves it while it runs: our taint, the hold label and the
    # progress annotation the remediation writes (remediation/progress.py annotation()).
    from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import progress
    from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.plans import plan_for

    record = progress.new_progress("r-fleet-status", "gpu-a-004", plan_for("RESTART_BM"), {}, {}, time.time(), {})
    record["phases"] = {"fence": {"at": time.time()}}
    kube = lab.kube()
    before = kube.read_node("gpu-a-004")
    kube.patch_node("gpu-a-004", {
        "metadata": {"labels": {"gpufleet.io/remediation-hold": "true"},
                     "annotations": {"gpufleet.io/remediation": progress.annotation(record)}},
        "spec": {"taints": [*(before.spec.taints or []), {"key": "gpufleet.io/gpu-unhealthy", "effect": "NoSchedule"}]},
    })
    try:
        out = tmp_path / "fleet.json"
        status = lab.playbook("fleet-status.yml", extra={"fleet_status_json": str(out)})
        assert status.rc == 0 and status.changed == 1, status.output[-4000:]  # the JSON file only
        view = json.loads(out.read_text())
        assert sorted(row["name"] for row in view["nodes"]) == ACTIVE
        assert view["quarantined"] == ["gpu-a-004"] and view["held"] == ["gpu-a-004"]
        assert [(r["node"], r["id"]) for r in view["remediations"]] == [("gpu-a-004", "r-fleet-status")]
        assert view["breaker"]["tripped"] is False and view["drills"] == [] and view["faults"] == []
        # Slurm is read in the lab, and the agent's verdict comes from its condition.
        assert {row["slurm_state"] for row in view["nodes"]} == {"idle"}
        assert {row["agent"] for row in view["nodes"]} == {"healthy"}
        line = next(ln for ln in status.output.splitlines() if "gpu-a-004" in ln and "Ready" in ln)
        assert line.split("gpu-a-004", 1)[1].split()[4:7] == ["yes", "yes", "r-fleet-status:"], line
        assert "remediations under way: gpu-a-004 (r-fleet-status: RESTART_BM, at " in status.output
    finally:
        kube.patch_node("gpu-a-004", {
            "metadata": {"labels": {"gpufleet.io/remediation-hold": None},
                         "annotations": {"gpufleet.io/remediation": None}},
            "spec": {"taints": [t.to_dict() for t in before.spec.taints or []] or None}})


def test_bad_inventory_fails_before_anything_changes(lab):
    before = lab.recorded_pids()
    bad = lab.playbook("one-click-slurm.yml", extra={"gpufleet_node_pools": [{"name": "GPU_A", "count": 2}]})
    assert bad.rc != 0
    # The pool model names the field; the validation play fails before any role starts.
    assert "gpufleet_node_pools[0].name: must be lowercase letters" in bad.output, bad.output[-3000:]
    assert "Check every role's settings before anything changes" in bad.output
    assert "One-click Slurm on Kubernetes" not in bad.output
    assert bad.changed == 0
    assert lab.recorded_pids() == before


def test_add_node_pool_refuses_a_name_slurm_or_slinky_could_not_take_before_any_change(lab):
    before = {n.metadata.name for n in lab.kube().list_node().items}
    pids = lab.recorded_pids()
    name = "p" * 41  # a DNS label, but too long for NodeSet pod names: once it passed node_pool and broke slurm
    bad = lab.playbook("add-node-pool.yml", "-e", "pool=%s" % name, "-e", "count=1")
    assert bad.rc != 0
    assert "new_pool[0].name: must be lowercase letters" in bad.output and "at most 40 characters" in bad.output
    assert bad.changed == 0
    assert {n.metadata.name for n in lab.kube().list_node().items} == before
    assert lab.recorded_pids() == pids
    assert not (lab.lab_dir / "node-pools" / ("%s.json" % name)).exists()


def test_add_node_pool_appears_in_kubernetes_and_slurm_and_a_one_click_rerun_changes_nothing(lab):
    added = lab.playbook("add-node-pool.yml", "-e", "pool=gpu-b", "-e", "count=2")
    assert added.rc == 0, added.output[-6000:]
    names = {n.metadata.name for n in lab.kube().list_node(label_selector="gpufleet.io/pool=gpu-b").items
             if ready(n)}
    assert names == {"gpu-b-001", "gpu-b-002"}
    states = sinfo_states(lab)
    assert states.get("gpu-b-001") == "idle" and states.get("gpu-b-002") == "idle"
    # The first pool is untouched.
    assert all(states.get(name) == "idle" for name in ACTIVE)
    # A later one-click run keeps the added pool and changes nothing (the rerun idempotency check
    # of the whole lab: it runs once here rather than a second time on the lab without gpu-b).
    again = lab.playbook("one-click-slurm.yml")
    assert again.rc == 0 and again.changed == 0, again.output[-6000:]


def slurm_knows(lab, node: str) -> bool:
    return lab.slurm("scontrol", "--future", "show", "node", node, check=False).startswith("NodeName=%s " % node)


def test_a_pool_shrinks_after_its_jobs_are_evacuated_and_is_removed_with_nothing_left(lab):
    """gpu-b (added above, 2 nodes): shrunk to 1 while a job runs on gpu-b-002, then removed."""
    records = lab.lab_dir / "node-pools"
    job = lab.slurm("sbatch", "--parsable", "--requeue", "--nodelist=gpu-b-002", "--job-name=resize-victim",
                    "--output=/dev/null", "--wrap", "sleep 600").strip()
    try:
        deadline = time.monotonic() + 60
        while lab.slurm("squeue", "--noheader", "--jobs", job, "--format=%T").strip() != "RUNNING":
            assert time.monotonic() < deadline, "job %s did not start on gpu-b-002" % job
            time.sleep(0.5)
        refused = lab.playbook("resize-node-pool.yml", "-e", "pool=gpu-b", "-e", "count=1")
        assert refused.rc != 0
        assert "jobs run on the nodes that would leave: %s (resize-victim, root) on gpu-b-002" % job \
            in " ".join(refused.output.split()), refused.output[-3000:]
        assert refused.changed == 0 and sinfo_states(lab).get("gpu-b-002") in ("mixed", "allocated")

        shrunk = lab.playbook("resize-node-pool.yml", "-e", "pool=gpu-b", "-e", "count=1",
                              "-e", "evacuate_jobs=true", "-e", "grace=3")
        assert shrunk.rc == 0, shrunk.output[-6000:]
        # The job was requeued (not lost), and gpu-b-002 (no spares) is gone from Slurm and Kubernetes.
        assert lab.slurm("squeue", "--noheader", "--jobs", job, "--format=%T", check=False).strip() != "RUNNING"
        assert not slurm_knows(lab, "gpu-b-002") and sinfo_states(lab).get("gpu-b-001") == "idle"
        kube = {n.metadata.name for n in lab.kube().list_node(label_selector="gpufleet.io/pool=gpu-b").items}
        assert kube == {"gpu-b-001"}
        assert json.loads((records / "gpu-b.json").read_text())["count"] == 1
        assert not (lab.lab_dir / "gpus" / "gpu-b-002").exists()
        assert not list((lab.lab_dir / "agent").glob("gpu-b-002.*"))
    finally:
        lab.slurm("scancel", job, check=False)

    pids = lab.recorded_pids()
    checked = lab.playbook("resize-node-pool.yml", "-e", "pool=gpu-b", "-e", "remove=true", "--check")
    assert checked.rc == 0, checked.output[-6000:]
    assert "leaving service: gpu-b-001" in checked.output
    assert (records / "gpu-b.json").exists() and lab.recorded_pids() == pids and slurm_knows(lab, "gpu-b-001")

    removed = lab.playbook("resize-node-pool.yml", "-e", "pool=gpu-b", "-e", "remove=true")
    assert removed.rc == 0, removed.output[-6000:]
    assert not lab.kube().list_node(label_selector="gpufleet.io/pool=gpu-b").items
    assert not slurm_knows(lab, "gpu-b-001")
    assert not (records / "gpu-b.json").exists() and not (lab.lab_dir / "recipes" / "gpu-b").exists()
    assert not [name for name in lab.recorded_pids() if "gpu-b" in name]
    # The inventory's pool is untouched.
    assert all(sinfo_states(lab).get(name) == "idle" for name in ACTIVE)


def test_lab_down_leaves_no_process_and_the_lab_comes_back(lab_down_up):
    """lab-down.yml, then one-click-slurm.yml on the lab's directory: done by the session right
    after the lab first came up (conftest), checked here."""
    done = lab_down_up
    assert done.pids_before, "the lab records its processes"
    assert done.down.rc == 0, done.down.output[-4000:]
    assert done.left == []
    assert done.pids_after_down == {}
    assert done.up.rc == 0, done.up.output[-6000:]
    assert done.slurm_states.get(ACTIVE[0]) == "idle"
