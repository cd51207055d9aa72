"""The Slurm client and slurm_node_info against real slurmctld and slurmd, on each version the lab
runs (conftest.py: the test lab's 22.05 and a Slurm-only 26.05 lab), through the lab's commands.

Every test leaves the cluster as it found it: drained nodes are resumed and submitted jobs
cancelled, even when an assertion fails, so the other tests of the session see an idle lab.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from typing import List

import pytest
import yaml
from lab_harness import VENV_BIN
from slurm_clusters import REASON, wait_for

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import (
    SlurmCommandError,
    SlurmUnknownNodeError,
)

pytestmark = [pytest.mark.integration, pytest.mark.lab]


@pytest.fixture(scope="module")
def pool(cluster):
    return cluster.pool


@pytest.fixture(scope="module")
def active(pool) -> List[str]:
    return ["%s-%03d" % (pool["name"], index) for index in range(1, pool["count"] + 1)]


@pytest.fixture(scope="module")
def spares(pool) -> List[str]:
    return ["%s-%03d" % (pool["name"], index) for index in range(pool["count"] + 1, pool["count"] + pool["spares"] + 1)]


@pytest.fixture(scope="module")
def client(cluster) -> SlurmClient:
    return cluster.client()


def words(argv):
    """A command line with the program's directory left out (the lab's <lab>/bin)."""
    return [argv[0].rsplit("/", 1)[-1], *argv[1:]]


@pytest.fixture
def restore_node(client):
    """Resumes whatever node a test drained or downed, pass or fail."""
    touched: List[str] = []
    yield touched
    for name in touched:
        node = client.nodes(names=[name], with_jobs=False, future=True)[name]
        if node.state == "DOWN" or "DRAIN" in node.flags:
            client.set_node_state(name, "RESUME")
        wait_for("%s without flags" % name,
                 lambda name=name: client.nodes(names=[name], with_jobs=False)[name].flags == ())


def own(nodes, pool):
    """Only the test pool's nodes: earlier lab tests may have added a pool (add-node-pool)."""
    return {name: node for name, node in nodes.items() if name.startswith(pool["name"] + "-")}


def test_nodes_lists_the_active_nodes_idle_with_their_gpus(cluster, client, active, pool):
    assert str(client.version()).startswith(cluster.version + ".")
    nodes = own(client.nodes(), pool)
    assert list(nodes) == active
    for node in nodes.values():
        assert (node.state, node.flags, node.reason) == ("IDLE", (), None), node
        assert node.gpus == pool["gpus_per_node"] and node.gres.startswith("gpu")
        assert (node.cpus, node.memory_mb) == (pool["cpus"], pool["memory_mb"])
        assert node.partitions == ("gpu",) and node.jobs == ()


def test_future_also_shows_the_spares(client, active, spares, pool):
    nodes = own(client.nodes(future=True), pool)
    assert list(nodes) == active + spares
    for name in spares:
        assert (nodes[name].state, nodes[name].long_state) == ("FUTURE", "future")
        assert nodes[name].gpus == pool["gpus_per_node"]
    # Without future a spare is hidden, and asking for it by name says why.
    with pytest.raises(SlurmUnknownNodeError, match="FUTURE nodes are listed only with future") as hidden:
        client.nodes(names=[spares[0]])
    assert hidden.value.nodes == [spares[0]]


def test_drain_and_resume_round_trip_the_reason(client, active, restore_node):
    name = active[-1]
    restore_node.append(name)
    drained = client.set_node_state(name, "DRAIN", REASON)
    assert (drained.ran, drained.rc) == (True, 0)
    assert words(drained.argv) == ["scontrol", "update", "NodeName=" + name, "State=DRAIN", "Reason=" + REASON]
    # 22.05 reads nodes from sinfo --json, and FUTURE-aware reads from scontrol's text, 26.05 both
    # from scontrol --json: every one must give back the reason exactly as written.
    for future in (False, True):
        node = client.nodes(names=[name], future=future)[name]
        assert (node.state, node.flags, node.long_state) == ("IDLE", ("DRAIN",), "drained")
        assert node.reason == REASON
        assert node.reason_user == "root" and node.reason_time
    resumed = client.set_node_state(name, "RESUME")
    assert resumed.ran
    node = client.nodes(names=[name])[name]
    assert (node.state, "DRAIN" in node.flags, node.reason) == ("IDLE", False, None)
    # RESUME makes slurmctld ask the node to register again: NOT_RESPONDING until its slurmd answers.
    started = time.monotonic()
    wait_for("%s responding again" % name, lambda: client.nodes(names=[name])[name].flags == (), timeout=40)
    print("%s responded %.1fs after RESUME" % (name, time.monotonic() - started))


def test_check_mode_changes_nothing(cluster, client, active):
    name = active[-1]
    before = client.nodes(names=[name], future=True)[name]
    dry = cluster.client(check_mode=True)
    result = dry.set_node_state(name, "DOWN", "gpufleet: check mode must not do this")
    assert (result.ran, result.rc) == (False, None)
    assert words(result.argv) == ["scontrol", "update", "NodeName=" + name, "State=DOWN",
                                  "Reason=gpufleet: check mode must not do this"]
    assert dry.nodes(names=[name], future=True)[name] == before  # reads still run
    assert client.nodes(names=[name], future=True)[name] == before


def test_update_of_an_unknown_node_is_a_typed_error(client):
    with pytest.raises(SlurmUnknownNodeError) as unknown:
        client.set_node_state("gpu-z-999", "DRAIN", "gpufleet: no such node")
    assert unknown.value.rc == 1 and "Invalid node name specified" in unknown.value.stderr
    assert words(unknown.value.argv)[:3] == ["scontrol", "update", "NodeName=gpu-z-999"]


def test_jobs_on_a_node_signal_requeue_and_cancel(cluster, client, active):
    name = active[0]
    submitted: List[str] = []

    def submit(job_name: str) -> str:
        job_id = cluster.command("sbatch", "--parsable", "--requeue", "--gres=gpu:1", "--job-name=" + job_name,
                                 "--nodelist=" + name, "--output=/dev/null", "--chdir=/tmp", "--wrap",
                                 "sleep 300").strip()
        submitted.append(job_id)
        return job_id

    def state(job_id: str) -> str:
        jobs = [job for job in client.jobs() if job.job_id == job_id]
        return jobs[0].state if jobs else "GONE"

    try:
        signalled, requeued = submit("it-signal"), submit("it-requeue")
        wait_for("both jobs RUNNING", lambda: {state(signalled), state(requeued)} == {"RUNNING"})
        on_node = [job.job_id for job in client.jobs(nodes=[name])]
        assert sorted(on_node) == sorted([signalled, requeued])
        assert sorted(job["job_id"] for job in client.nodes(names=[name])[name].as_dict()["jobs"]) == sorted(on_node)
        assert client.jobs(nodes=[active[1]]) == []

        requeue = client.requeue([requeued])
        assert words(requeue.argv) == ["scontrol", "requeue", requeued]
        # 26.05 shows the job PENDING+COMPLETING on its node while its processes end; it holds no
        # node once that is over (22.05 goes straight to PENDING).
        wait_for("requeued job PENDING again, done completing", lambda: state(requeued) == "PENDING"
                 and not [job for job in client.jobs() if job.job_id == requeued and "COMPLETING" in job.flags],
                 timeout=10)
        job = next(job for job in client.jobs() if job.job_id == requeued)
        assert job.restarts == 1 and job.requeue is True and job.nodes == ()

        signal = client.signal_jobs([signalled], "TERM")
        assert words(signal.argv) == ["scancel", "--signal=TERM", "--full", signalled]
        wait_for("signalled job gone", lambda: state(signalled) == "GONE")

        client.cancel([requeued])
        wait_for("cancelled job gone", lambda: state(requeued) == "GONE")
        assert client.jobs(nodes=[name]) == []
    finally:
        for job_id in submitted:
            with contextlib.suppress(SlurmCommandError):  # already gone
                client.cancel([job_id])


def test_module_through_ansible_playbook(cluster, tmp_path, active, spares, pool):
    out = tmp_path / "result.json"
    module = "gpufleet.resilience.slurm_node_info"
    playbook = tmp_path / "node_info.yml"
    where = {"slurm_conf": str(cluster.slurm_conf), "bin_dir": str(cluster.bin_dir)}
    playbook.write_text(yaml.safe_dump([{
        "name": "slurm_node_info against the lab",
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "tasks": [
            {"name": "Every node, spares too", module: dict(where, future=True),
             "register": "every"},
            {"name": "Two by name, in check mode",
             module: dict(where, nodes=[active[1], active[0]]),
             "check_mode": True, "register": "two"},
            {"name": "A node Slurm does not know", module: dict(where, nodes=["gpu-z-999"]),
             "register": "unknown", "ignore_errors": True},
            {"name": "Save the results", "ansible.builtin.copy": {
                "content": "{{ {'every': every, 'two': two, 'unknown': unknown} | to_json }}", "dest": str(out)}},
        ],
    }]))
    done = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)],
                          env=cluster.lab.env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    every, two, unknown = result["every"], result["two"], result["unknown"]
    assert every["changed"] is False and every["slurm_version"].startswith(cluster.version + ".")
    mine = [node for node in every["nodes"] if node["name"].startswith(pool["name"] + "-")]
    assert [node["name"] for node in mine] == active + spares
    assert [node["state"] for node in mine] == ["IDLE"] * len(active) + ["FUTURE"] * len(spares)
    assert {node["gpus"] for node in mine} == {8}
    assert set(every["nodes"][0]) >= {"name", "state", "flags", "reason", "gres", "gpus", "features", "weight",
                                      "cpus", "memory_mb", "partitions", "jobs"}
    assert [node["name"] for node in two["nodes"]] == [active[0], active[1]]
    # 22.05 reads nodes from sinfo --json, 26.05 from scontrol --json.
    reader = "sinfo" if cluster.version == "22.05" else "scontrol"
    assert unknown["failed"] and "gpu-z-999" in unknown["msg"] and words(unknown["cmd"])[0] == reader
